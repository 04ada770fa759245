#!/usr/bin/env bash
# 1-D convolutional models (conv1d, the 1-D poolings) keep the strategies'
# guarantee: four same-shaped models (a dilated causal conv1d, max pooling, a
# conv1d same, global average pooling, dropout, dense softmax) that differ in
# learning rate, seed, dropout rate and kernel regularizer give the same
# weights and histories, bit for bit, under sequential (one and two threads),
# threads and fused (one group of four, or two of two). And plans they cannot
# train are refused at plan time with file:line, exit 2 and nothing trained:
# a kernel longer than the sequence, an image into conv1d, strides with a
# dilation, causal padding on a pooling, a 1-D layer on an image, conv1d or
# a windowed pooling after a mask_zero embedding (as tf.keras refuses it).
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }
"$PY" -c "import numpy" 2>/dev/null || { echo "$NAME: numpy missing; skipped"; exit 77; }

# Sequences of 24 steps x 2 features, 3 classes: a bump in the first, middle
# or last third of the first feature, over noise. NPY [n, 24, 2] float32.
"$PY" - "$T" <<'PYEOF' || { bad "making the sequences"; finish; }
import numpy as np, sys
r = np.random.default_rng(3)
def make(n, stem):
    y = (np.arange(n) % 3).astype(np.int32)
    x = r.normal(0, 0.3, (n, 24, 2)).astype(np.float32)
    for i, c in enumerate(y):
        at = 8 * int(c) + int(r.integers(0, 4))
        x[i, at:at + 4, 0] += 2.5
    np.save(f"{sys.argv[1]}/{stem}_x.npy", x)
    np.save(f"{sys.argv[1]}/{stem}_y.npy", y)
make(480, "train")
make(96, "test")
np.save(f"{sys.argv[1]}/img_x.npy", r.normal(0, 1, (40, 6, 6, 2)).astype(np.float32))
# Token ids [n, 10], 0 for padding after each word of 3 to 10 ids.
tok = np.zeros((60, 10), np.int32)
for i in range(60):
    tok[i, :3 + i % 8] = 1 + r.integers(0, 9, 3 + i % 8)
np.save(f"{sys.argv[1]}/tok_x.npy", tok)
np.save(f"{sys.argv[1]}/tok_y.npy", (np.arange(60) % 3).astype(np.int32))
np.save(f"{sys.argv[1]}/img_y.npy", (np.arange(40) % 3).astype(np.int32))
PYEOF
# layers DROPOUT L2
layers() {
    echo "[{conv1d: 16, kernel_size: 3, padding: causal, dilation_rate: 2, activation: relu," \
        "kernel_regularizer: {l2: $2}}, {max_pooling1d: 2}," \
        "{conv1d: 16, kernel_size: 3, padding: same, activation: relu}," \
        "global_average_pooling1d, {dropout: $1}, {dense: 3, activation: softmax}]"
}
cat > "$T/plan.yaml" <<YAML
data:
  train: npy:$T/train_x.npy,$T/train_y.npy
  test: npy:$T/test_x.npy,$T/test_y.npy
  validation_split: 0.2
defaults:
  epochs: 3
  batch_size: 32
  optimizer: {name: adam, lr: 0.01}
  layers: $(layers 0.25 0.0)
models:
  - {name: s_base}
  - {name: s_lr, seed: 2, optimizer: {name: adam, lr: 0.02}}
  - {name: s_drop, seed: 3, layers: $(layers 0.5 0.0)}
  - {name: s_l2, seed: 4, layers: $(layers 0.25 0.001)}
YAML
models="s_base s_lr s_drop s_l2"

"$COHORT" plan "$T/plan.yaml" > "$T/plan.txt" 2>&1 && ok || bad "plan: $(cat "$T/plan.txt")"
for want in "layers.0  conv1d  * -> (24, 16) " "layers.1  max_pooling1d  * -> (12, 16) " \
            "layers.2  conv1d  * -> (12, 16) " "layers.3  global_average_pooling1d * -> (16) "; do
    [ "$(grep -c -- "$want" "$T/plan.txt")" -eq 4 ] && ok || bad "plan: no line '$want' for each model: $(cat "$T/plan.txt")"
done
"$COHORT" plan "$T/plan.yaml" --strategy fused --threads 1 --json > "$T/groups.json" 2>&1 && ok || bad "plan --json: $(cat "$T/groups.json")"
"$PY" - "$T/groups.json" <<'PYEOF' && ok || bad "plan --json: the four models are not one fused group"
import json, sys
g = json.load(open(sys.argv[1]))["groups"]
assert [sorted(x["models"]) for x in g] == [["s_base", "s_drop", "s_l2", "s_lr"]], g
PYEOF

"$COHORT" train "$T/plan.yaml" --strategy sequential --threads 1 --out "$T/ref" --quiet >/dev/null 2>"$T/ref.err" && ok || bad "sequential run: $(cat "$T/ref.err")"
"$PY" - "$T/ref" <<'PYEOF' && ok || bad "reference run: the models did not learn, or the weights are not torch's Conv1d layout"
import json, struct, sys
r = json.load(open(sys.argv[1] + "/results.json"))
best = max(m["history"]["val_accuracy"][-1] for m in r["models"])
assert best > 0.5, best
for m in r["models"]:
    f = open(f"{sys.argv[1]}/models/{m['name']}.safetensors", "rb").read()
    head = json.loads(f[8:8 + struct.unpack("<Q", f[:8])[0]])
    assert head["layers.0.weight"]["shape"] == [16, 2, 3], head["layers.0.weight"]
    assert head["layers.2.weight"]["shape"] == [16, 16, 3], head["layers.2.weight"]
    assert head["layers.0.bias"]["shape"] == [16], head["layers.0.bias"]
PYEOF
for v in "sequential 2" "threads 2" "fused 1" "fused 2"; do
    set -- $v
    d="$T/$1-$2"
    "$COHORT" train "$T/plan.yaml" --strategy $1 --threads $2 --out "$d" --quiet >/dev/null 2>"$d.err" && ok || bad "$1 --threads $2 run: $(cat "$d.err")"
    for m in $models; do
        cmp -s "$T/ref/models/$m.safetensors" "$d/models/$m.safetensors" && ok || bad "$1 --threads $2: weights of $m differ from sequential --threads 1"
    done
    "$PY" - "$T/ref/results.json" "$d/results.json" <<'PYEOF' && ok || bad "$1 --threads $2: histories differ from sequential --threads 1"
import json, sys
ra, rb = (json.load(open(p)) for p in sys.argv[1:3])
a = {m["name"]: m for m in ra["models"]}
b = {m["name"]: m for m in rb["models"]}
for n in a:
    assert b[n]["status"] == "ok", (n, b[n]["status"], b[n]["error"])
    for k in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert a[n]["history"][k] == b[n]["history"][k], (n, k)
    assert a[n]["test"] == b[n]["test"], n
    assert b[n]["planned_bytes"] == b[n]["peak_bytes"], (n, b[n]["planned_bytes"], b[n]["peak_bytes"])
PYEOF
done

# Plans it cannot train: exit 2, the layer's file:line, nothing trained.
# bad_plan NAME LINE_OF_LAYER DATA LAYERS FRAGMENT
bad_plan() {
    local name=$1 data=$2 lay=$3 want=$4
    printf 'data: {train: "%s"}\ndefaults: {epochs: 1, batch_size: 8}\nmodels:\n  - name: m\n    layers:\n      - %s\n      - {dense: 3, activation: softmax}\n' \
        "$data" "$lay" > "$T/$name.yaml"
    expect_status 2 "$name" -- "$COHORT" train "$T/$name.yaml" --out "$T/o_$name"
    expect_err "$want" "$name"
    [ ! -e "$T/o_$name/models/m.safetensors" ] && ok || bad "$name: weights were written"
}
seq="npy:$T/train_x.npy,$T/train_y.npy"
bad_plan long "$seq" "{conv1d: 4, kernel_size: 30}" \
    "long.yaml:6: model 'm', layers.0 (conv1d): conv1d's kernel_size 30 is longer than its input sequence (24, 2); use padding: same or causal, or a smaller kernel_size"
bad_plan dilated "$seq" "{conv1d: 4, kernel_size: 5, dilation_rate: 6}" \
    "dilated.yaml:6: model 'm', layers.0 (conv1d): conv1d's kernel_size 5 with dilation_rate 6 spans 25 steps, more than its input sequence (24, 2) has"
bad_plan image "npy:$T/img_x.npy,$T/img_y.npy" "{conv1d: 4, kernel_size: 3}" \
    "image.yaml:6: model 'm', layers.0 (conv1d): conv1d needs sequences [T, C], but gets images (6, 6, 2); use conv2d on images"
bad_plan both "$seq" "{conv1d: 4, kernel_size: 3, strides: 2, dilation_rate: 2}" \
    "both.yaml:6: layers.0 of model 'm': strides 2 with dilation_rate 2; Keras's Conv1D takes a stride above 1 or a dilation above 1, not both"
bad_plan causalpool "$seq" "{max_pooling1d: 2, padding: causal}" \
    "causalpool.yaml:6: padding of layers.0 must be one of valid, same"
bad_plan longpool "$seq" "{average_pooling1d: 25}" \
    "longpool.yaml:6: model 'm', layers.0 (average_pooling1d): average_pooling1d's pool of 25 is longer than its input sequence (24, 2); use padding: same or a smaller pool size"
bad_plan gmpimage "npy:$T/img_x.npy,$T/img_y.npy" "global_max_pooling1d" \
    "gmpimage.yaml:6: model 'm', layers.0 (global_max_pooling1d): global_max_pooling1d needs sequences [T, C], but gets images (6, 6, 2); use the 2-D pooling on images"
# After a mask_zero embedding: conv1d and the windowed poolings refuse the
# mask, as tf.keras does; the global poolings take it and train.
tok="npy:$T/tok_x.npy,$T/tok_y.npy"
emb="{embedding: {input_dim: 10, output_dim: 4, mask_zero: true}}"
bad_plan maskconv "$tok" "$emb
      - {conv1d: 4, kernel_size: 3}" \
    "maskconv.yaml:7: model 'm', layers.1 (conv1d): conv1d cannot take the mask of the embedding at layers.0 (mask_zero: true), as in Keras"
bad_plan maskpool "$tok" "$emb
      - {max_pooling1d: 2}" \
    "maskpool.yaml:7: model 'm', layers.1 (max_pooling1d): max_pooling1d cannot take the mask of the embedding at layers.0"
for pool in global_average_pooling1d global_max_pooling1d; do
    printf 'data: {train: "%s"}\ndefaults: {epochs: 1, batch_size: 8}\nmodels:\n  - name: m\n    layers:\n      - %s\n      - %s\n      - {dense: 3, activation: softmax}\n' \
        "$tok" "$emb" "$pool" > "$T/$pool.yaml"
    expect_status 0 "$pool after a masked embedding" -- "$COHORT" train "$T/$pool.yaml" --out "$T/o_$pool" --quiet
done
finish
