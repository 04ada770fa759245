#!/usr/bin/env bash
# Residual blocks ({residual: [...]}: x + f(x), issue 37) end to end:
# - plan errors at file:line, exit 2, nothing trained: a block whose f ends
#   at another shape (naming the inner layer that gives it), an empty block,
#   a block inside a block, a block that is not a list, more layers than
#   allowed, a residual over a flattened image;
# - `cohort plan`: the short form res[...] and the rows layers.i.j;
# - the weights file: layers.i.j names, the spec read back by eval, predict
#   and export (an Add node);
# - sweep keys, --set and pbt mutations that reach a layer inside a block
#   (layers.N.J.dropout), and the errors of ones that do not;
# - a fused group ends bit for bit as its models trained one by one;
# - kill -9 and --resume end bit for bit as an uninterrupted run.
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }
"$PY" -c "import numpy" 2>/dev/null || { echo "$NAME: numpy missing; skipped"; exit 77; }

"$PY" - "$T" <<'PYEOF' || { bad "making the data"; finish; }
import numpy as np, sys
r = np.random.default_rng(4)
x = r.standard_normal((720, 12)).astype(np.float32)
y = (np.argmax(x[:, :3] + 0.5 * r.standard_normal((720, 3)), axis=1)).astype(np.int32)
np.save(f"{sys.argv[1]}/x.npy", x)
np.save(f"{sys.argv[1]}/y.npy", y)
np.save(f"{sys.argv[1]}/img.npy", r.standard_normal((720, 4, 4, 1)).astype(np.float32))
PYEOF
data="{train: \"npy:$T/x.npy,$T/y.npy\", validation_split: 0.2}"

# ---- plan errors ----
plan_error() { # plan_error WHAT MESSAGE LAYERS...: model m's layers (one a line) fail so
    local what=$1 msg=$2
    shift 2
    {
        echo "data: $data"
        echo "defaults: {epochs: 1, batch_size: 16}"
        echo "models:"
        echo "  - name: m"
        echo "    layers:"
        printf '%s\n' "$@"
    } > "$T/bad.yaml"
    expect_status 2 "$what" -- "$COHORT" train "$T/bad.yaml" --out "$T/o_bad"
    expect_err "$msg" "$what"
    [ ! -e "$T/o_bad/models" ] && ok || bad "$what: something was trained"
    rm -rf "$T/o_bad"
}
plan_error "inner shape" \
    "bad.yaml:9: model 'm', layers.1.1 (dense): it gives (8), but the residual at layers.1 takes (16): x + f(x) needs f to end at its input's shape" \
    "      - {dense: 16, activation: relu}" \
    "      - residual:" \
    "          - {dense: 32, activation: tanh}" \
    "          - {dense: 8}" \
    "      - {dense: 3, activation: softmax}"
plan_error "empty" "bad.yaml:7: layers.1 of model 'm': the residual is empty" \
    "      - {dense: 16}" "      - {residual: []}" "      - {dense: 3, activation: softmax}"
plan_error "nested" \
    "bad.yaml:9: layers.1.1 of model 'm' is a residual inside a residual; blocks do not nest" \
    "      - {dense: 16}" \
    "      - residual:" \
    "          - {dense: 16}" \
    "          - {residual: [{dense: 16}]}" \
    "      - {dense: 3, activation: softmax}"
plan_error "not a list" "bad.yaml:7: layers.1 of model 'm': the value of residual is a list of layers" \
    "      - {dense: 16}" "      - {residual: {dense: 16}}" "      - {dense: 3, activation: softmax}"
plan_error "inner setting" "bad.yaml:9: dropout rate of layers.1.1 must be a number in [0, 1)" \
    "      - {dense: 16}" \
    "      - residual:" \
    "          - {dense: 16}" \
    "          - {dropout: 1.5}" \
    "      - {dense: 3, activation: softmax}"
plan_error "attention setting" "bad.yaml:9: num_heads of layers.1.1 must be" \
    "      - {dense: 16}" \
    "      - residual:" \
    "          - layer_normalization" \
    "          - {multi_head_attention: {num_heads: 0, key_dim: 8}}" \
    "      - {dense: 3, activation: softmax}"
blocks=$(for i in $(seq 21); do printf '      - {residual: [{dense: 16}]}\n'; done)
plan_error "too many" "has more than the 64 layers allowed (each residual counts as its layers and two more)" \
    "      - {dense: 16}" "$blocks" "      - {dense: 3, activation: softmax}"
cat > "$T/img.yaml" <<YAML
data: {train: "npy:$T/img.npy,$T/y.npy"}
defaults: {epochs: 1}
models:
  - name: m
    layers: [flatten, {residual: [{dense: 16}]}, {dense: 3, activation: softmax}]
YAML
expect_status 2 "flattened image" -- "$COHORT" plan "$T/img.yaml"
expect_err "img.yaml:5: model 'm', layers.1 (residual): a residual cannot take a flattened image" "flattened image"

# ---- a plan of three models with two blocks each ----
cat > "$T/plan.yaml" <<YAML
data: $data
defaults:
  epochs: 6
  batch_size: 16
  layers:
    - {dense: 16, activation: relu}
    - residual:
        - {dense: 24, activation: tanh}
        - {dropout: 0.2}
        - {dense: 16}
    - {residual: [{activation: relu}]}
    - {dense: 3, activation: softmax}
models:
  - {name: a}
  - {name: b, seed: 2, optimizer: {lr: 0.003}}
  - {name: c, seed: 3, optimizer: {name: sgd, lr: 0.05, momentum: 0.9}}
  - {name: d, seed: 4, layers: [{residual: [{dense: 8, activation: tanh}, {dense: 12}]}, {dense: 3, activation: softmax}]}
  - {name: e, seed: 5, layers: [{residual: [{dense: 8, activation: tanh}, {dense: 12}]}, {dense: 3, activation: softmax}]}
YAML
models="a b c d e"
expect_status 0 "plan" -- "$COHORT" plan "$T/plan.yaml"
grep -q "12-16relu-res\[24tanh-drop0.2-16\]-res\[relu\]-3softmax" "$T/out" && ok || bad "short form: $(grep ' a ' "$T/out")"
for row in "layers.1 +residual +-> \(16\) .* in place" "layers.1.0 +dense +-> \(24\)" \
           "layers.1.2 +dense +-> \(16\)" "layers.1 +add +-> \(16\)" "layers.2.0 +activation" \
           "layers.3 +dense +-> \(3\)"; do
    grep -qE "$row" "$T/out" && ok || bad "cohort plan has no row '$row'"
done
# --set reaches into a block (layers.N.J), as a sweep does.
expect_status 0 "--set inside" -- "$COHORT" plan "$T/plan.yaml" --set "defaults.layers.1.0.dense=20" \
    --set "models.1.layers=[{dense: 16}, {residual: [{dense: 8}, {dense: 16}]}, {dense: 3, activation: softmax}]"
grep -q "12-16relu-res\[20tanh-drop0.2-16\]" "$T/out" && grep -q "12-16-res\[8-16\]-3softmax" "$T/out" \
    && ok || bad "--set: $(cat "$T/out")"
cat > "$T/sweep.yaml" <<YAML
$(grep -v '^  - {name: [bcde]' "$T/plan.yaml")
sweep: {layers.1.1.dropout: [0.1, 0.3], layers.1.0.activation: [tanh, relu]}
YAML
expect_status 0 "sweep inside" -- "$COHORT" plan "$T/sweep.yaml" --json
"$PY" - "$T/out" <<'PYEOF' && ok || bad "sweep inside a block: $(head -c 400 "$T/out")"
import json, sys
ms = json.load(open(sys.argv[1]))["models"]
got = sorted((m["config"]["layers"][1]["residual"][1]["dropout"], m["config"]["layers"][1]["residual"][0]["activation"]) for m in ms if m["name"].startswith("a"))
assert len(ms) == 4 and got == [(0.1, "relu"), (0.1, "tanh"), (0.3, "relu"), (0.3, "tanh")], (len(ms), got)
PYEOF
cat > "$T/sweep_bad.yaml" <<YAML
$(grep -v '^  - {name: [bcde]' "$T/plan.yaml")
sweep: {layers.0.1.dropout: [0.1, 0.3]}
YAML
expect_status 2 "sweep into no block" -- "$COHORT" plan "$T/sweep_bad.yaml"
expect_err "sweep_bad.yaml:15: sweep key 'layers.0.1.dropout': layers.0 of model 'a' is no residual" "sweep into no block"

# ---- fused == one by one, bit for bit (each model its own shuffle order,
# and one order for all: blocks of steps over shared input slots, which a
# block on the model's input reads); the weights and the spec read back ----
sed 's/^models:/shared_order: true\nmodels:/' "$T/plan.yaml" > "$T/shared.yaml"
for order in plan shared; do
    expect_status 0 "$order: sequential" -- "$COHORT" train "$T/$order.yaml" --out "$T/seq-$order" --strategy sequential --threads 1 --quiet
    expect_status 0 "$order: fused" -- "$COHORT" train "$T/$order.yaml" --out "$T/fused-$order" --strategy fused --threads 1 --quiet
    for m in $models; do
        cmp -s "$T/seq-$order/models/$m.safetensors" "$T/fused-$order/models/$m.safetensors" && ok \
            || bad "$order: fused $m differs from sequential"
    done
done
"$COHORT" plan "$T/plan.yaml" --strategy fused --threads 1 --json > "$T/groups.json"
"$PY" - "$T/groups.json" <<'PYEOF' && ok || bad "fused: a and b, d and e are not groups: $(head -c 300 "$T/groups.json")"
import json, sys
groups = sorted(sorted(g["models"]) for g in json.load(open(sys.argv[1]))["groups"])
assert groups == [["a", "b"], ["c"], ["d", "e"]], groups
PYEOF
ln -s "$T/seq-plan" "$T/seq"
"$PY" - "$T/seq" <<'PYEOF' && ok || bad "weight names or spec"
import json, struct, sys
f = open(sys.argv[1] + "/models/a.safetensors", "rb").read()
n = struct.unpack("<Q", f[:8])[0]
head = json.loads(f[8:8 + n])
meta = json.loads(head.pop("__metadata__")["spec"]) if "spec" in head.get("__metadata__", {}) else None
names = sorted(head)
want = sorted(["layers.0.weight", "layers.0.bias", "layers.1.0.weight", "layers.1.0.bias",
               "layers.1.2.weight", "layers.1.2.bias", "layers.3.weight", "layers.3.bias"])
assert names == want, names
assert head["layers.1.0.weight"]["shape"] == [24, 16] and head["layers.1.2.weight"]["shape"] == [16, 24]
r = json.load(open(sys.argv[1] + "/results.json"))
layers = [m for m in r["models"] if m["name"] == "a"][0]["config"]["layers"]
assert layers[1] == {"residual": [{"dense": 24, "activation": "tanh"}, {"dropout": 0.2},
                                  {"dense": 16, "activation": "linear"}]}, layers
assert layers[2] == {"residual": [{"activation": "relu"}]}, layers
PYEOF
expect_status 0 "eval" -- "$COHORT" eval "$T/seq/models/a.safetensors" --data "npy:$T/x.npy,$T/y.npy"
grep -q "accuracy" "$T/out" && ok || bad "eval: $(cat "$T/out")"
expect_status 0 "predict" -- "$COHORT" predict "$T/seq/models/a.safetensors" --data "npy:$T/x.npy,$T/y.npy" --out "$T/pred.csv"
[ "$(wc -l < "$T/pred.csv")" -eq 721 ] && ok || bad "predict: $(head -3 "$T/pred.csv")"
expect_status 0 "export" -- "$COHORT" export "$T/seq/models/a.safetensors" --out "$T/a.onnx"
grep -q "Add" "$T/a.onnx" && grep -q "layers.1.2.weight" "$T/a.onnx" && ok || bad "export: no Add node or no layers.1.2.weight"

# ---- pbt mutates a dropout inside a block ----
cat > "$T/pbt.yaml" <<YAML
$(cat "$T/plan.yaml" | sed 's/epochs: 6/epochs: 4/')
search: {samples: 4, seed: 3, space: {optimizer.lr: {loguniform: [1.0e-3, 1.0e-2]}}}
scheduler:
  name: pbt
  metric: val_loss
  perturbation_interval: 2
  hyperparam_mutations:
    layers.1.1.dropout: {choice: [0.0, 0.1, 0.3]}
YAML
sed -i '/^  - {name: [bcde]/d' "$T/pbt.yaml"
expect_status 0 "pbt plan" -- "$COHORT" plan "$T/pbt.yaml"
grep -q "perturb layers.1.1.dropout" "$T/out" && ok || bad "pbt plan: $(grep scheduler "$T/out")"
expect_status 0 "pbt" -- "$COHORT" train "$T/pbt.yaml" --out "$T/pbt" --quiet
"$PY" - "$T/pbt/results.json" <<'PYEOF' && ok || bad "pbt: the mutated dropout is not the model's"
import json, math, sys
ms = json.load(open(sys.argv[1]))["models"]
steps = [(m, s) for m in ms for s in m["lineage"]]
assert steps, "nobody was exploited"
for m, s in steps:
    assert s["values"]["layers.1.1.dropout"] in (0.0, 0.1, 0.3), s
for m in ms:
    if m["lineage"]:
        got = m["config"]["layers"][1]["residual"][1]["dropout"]
        assert math.isclose(got, m["lineage"][-1]["values"]["layers.1.1.dropout"], abs_tol=1e-7), (m["name"], got)
PYEOF
sed 's/layers.1.1.dropout: {choice/layers.0.1.dropout: {choice/' "$T/pbt.yaml" > "$T/pbt_bad.yaml"
expect_status 2 "pbt into no block" -- "$COHORT" plan "$T/pbt_bad.yaml"
expect_err "scheduler.hyperparam_mutations key 'layers.0.1.dropout': no model has it" "pbt into no block"

# ---- kill -9 and --resume, bit for bit ----
d="$T/kill"
"$COHORT" train "$T/plan.yaml" --out "$d" --strategy sequential --threads 1 --quiet >/dev/null 2>&1 &
pid=$!
wait_run $pid "$d" checkpoint
kill -9 $pid 2>/dev/null && killed=1 || killed=0
wait $pid 2>/dev/null
echo "$NAME: killed after $(epochs_done "$d") of 6 epochs"
expect_status 0 "resume" -- "$COHORT" train "$T/plan.yaml" --out "$d" --strategy sequential --threads 1 --resume --quiet
for m in $models; do
    cmp -s "$T/seq/models/$m.safetensors" "$d/models/$m.safetensors" && ok || bad "resumed $m differs"
done
"$PY" - "$T/seq/results.json" "$d/results.json" <<'PYEOF' && ok || bad "resumed results differ"
import json, sys
a = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}
b = {m["name"]: m for m in json.load(open(sys.argv[2]))["models"]}
for n in a:
    assert b[n]["status"] == "ok", (n, b[n]["status"])
    for k in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert a[n]["history"][k] == b[n]["history"][k], (n, k)
PYEOF

finish "($killed run killed with SIGKILL and resumed)"
