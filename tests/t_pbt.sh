#!/usr/bin/env bash
# scheduler pbt. Every interval the bottom quantile takes the state of a top
# model and perturbs its settings: the exploit's state is the donor's at that
# epoch (weights, optimizer state, history; checked against a run that ends
# there), the lineage is consistent (donors from the top, values in range,
# the config ends with the last values), and the same lineage and weights
# come out under every strategy, after kill -9 inside the run and --resume,
# after a kill inside the first phase (some models at the interval, others
# not yet) and after a kill between two exploits of an interval. Bad settings are plan
# errors at their line.
set -u
. "$(dirname "$0")/lib.sh"
needs_test_hooks
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }

blobs 5 1800 2.6
cat > "$T/pbt.yaml" <<YAML
data: {train: csv:$T/train.csv, validation_split: 0.25}
defaults: {epochs: 6, batch_size: 16, layers: [{dense: 12, activation: relu}, {dropout: 0.1}, {dense: 3, activation: softmax}]}
models: [{name: m}]
search: {samples: 8, seed: 3, space: {optimizer.lr: {loguniform: [1.0e-4, 3.0e-2]}}}
scheduler:
  name: pbt
  metric: val_loss
  perturbation_interval: 2
  hyperparam_mutations:
    optimizer.lr: {loguniform: [1.0e-4, 3.0e-2]}
    layers.1.dropout: {choice: [0.0, 0.1, 0.2, 0.3]}
YAML

"$COHORT" plan "$T/pbt.yaml" --json > "$T/plan.json" && ok || bad "cohort plan"
"$COHORT" plan "$T/pbt.yaml" | grep -q "scheduler pbt on val_loss (min): a population of 8; at epochs 2, 4 the bottom 2 take the weights of one of the top 2 and perturb optimizer.lr, layers.1.dropout" \
    && ok || bad "cohort plan's scheduler line: $("$COHORT" plan "$T/pbt.yaml" | grep scheduler)"

COHORT_PBT_TEST=keep "$COHORT" train "$T/pbt.yaml" --out "$T/sequential" --strategy sequential --quiet > /dev/null 2> "$T/err" \
    && ok || bad "pbt sequential: $(head -c 600 "$T/err")"
for s in threads fused processes; do
    expect_status 0 "pbt $s" -- "$COHORT" train "$T/pbt.yaml" --out "$T/$s" --strategy $s --quiet
done
# The models as they stand at the first interval: every model trains its
# first two epochs as it does in the pbt run.
expect_status 0 "two epochs" -- "$COHORT" train "$T/pbt.yaml" --out "$T/two" --set defaults.epochs=2 --quiet

$PY - "$T" <<'PY' && ok || bad "pbt lineage"
import json, math, struct, sys
t = sys.argv[1]
def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        body = f.read()
    meta = head.pop("__metadata__", {})
    return {k: body[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items()}, meta
plan = json.load(open(f"{t}/plan.json"))["scheduler"]
assert plan["intervals"] == [2, 4] and plan["population"] == 8, plan
ms = {m["name"]: m for m in json.load(open(f"{t}/sequential/results.json"))["models"]}
names = sorted(ms)
steps = [(n, s) for n in names for s in ms[n]["lineage"]]
for R in (2, 4):
    at = [(n, s) for n, s in steps if s["epoch"] == R]
    assert len(at) == 2, (R, at)  # ceil(8 * 0.25)
    recipients = {n for n, _ in at}
    for n, s in at:
        assert s["from"] not in recipients and s["from"] != n, (R, n, s)
        lr, drop = s["values"]["optimizer.lr"], s["values"]["layers.1.dropout"]
        assert 1e-4 <= lr <= 3e-2 * (1 + 1e-6) and drop in (0.0, 0.1, 0.2, 0.3), s
for n in names:
    m = ms[n]
    assert m["status"] == "ok" and m["epochs_run"] == 6, (n, m["status"])
    if m["lineage"]:
        last = m["lineage"][-1]["values"]
        assert math.isclose(m["config"]["optimizer"]["lr"], last["optimizer.lr"], rel_tol=1e-6), n
        assert math.isclose(m["config"]["layers"][1]["dropout"], last["layers.1.dropout"], abs_tol=1e-7), n
    else:  # never exploited: the settings it was drawn with
        assert m["config"]["layers"][1]["dropout"] == 0.1 and f"lr={m['config']['optimizer']['lr']:g}" in n, n
# At the first interval the exploit's state is the donor's at epoch 2, bit
# for bit: its weights, its optimizer state and its history.
two = {m["name"]: m for m in json.load(open(f"{t}/two/results.json"))["models"]}
for n, s in steps:
    if s["epoch"] != 2:
        continue
    got, meta = tensors(f"{t}/sequential/checkpoints/{n}.exploit-2.safetensors")
    want, _ = tensors(f"{t}/two/checkpoints/{s['from']}.safetensors")
    for k in ("params", "opt.m", "opt.v"):
        assert got[k] == want[k], (n, s["from"], k)
    state = json.loads(meta["state"])
    assert state["epoch"] == 2 and [float("%.9g" % h[2]) for h in state["history"]] == two[s["from"]]["history"]["val_loss"], n
    spec = json.loads(meta["spec"])
    assert spec["name"] == n and math.isclose(spec["optimizer"]["lr"], s["values"]["optimizer.lr"], rel_tol=1e-6), n
    if len(ms[n]["lineage"]) == 1:  # else a later exploit replaced its history
        assert ms[n]["history"]["val_loss"][:2] == two[s["from"]]["history"]["val_loss"], n
# The same lineage, histories and configs under every strategy.
for other in ("threads", "fused", "processes"):
    os_ = {m["name"]: m for m in json.load(open(f"{t}/{other}/results.json"))["models"]}
    for n in names:
        a, b = ms[n], os_[n]
        assert (a["lineage"], a["config"], a["history"]["val_loss"]) == (b["lineage"], b["config"], b["history"]["val_loss"]), (other, n)
PY
want=$($PY -c "import json,sys; print(sum(bool(m['lineage']) for m in json.load(open(sys.argv[1]))['models']))" "$T/sequential/results.json")
"$COHORT" report "$T/sequential" > /dev/null && [ "$(grep -o 'pbt: [0-9] exploits\{0,1\}, the last at epoch [24] from m-s0' "$T/sequential/report.html" | wc -l)" -eq "$want" ] &&
    ok || bad "report.html does not show the $want exploited models"
same_weights() { # DIR WHAT
    local same=1
    for f in "$T/sequential"/models/*.safetensors; do
        cmp -s "$f" "$1/models/$(basename "$f")" || same=0
    done
    cmp -s "$T/sequential/pbt.json" "$1/pbt.json" || same=0
    [ $same = 1 ] && ok || bad "$2: weights or journal differ from sequential"
}
for s in threads fused processes; do same_weights "$T/$s" "pbt $s"; done

# kill -9 once the first interval is decided (its journal is written), then --resume.
"$COHORT" train "$T/pbt.yaml" --out "$T/killed" --quiet > /dev/null 2>&1 &
pid=$!
for i in $(seq 1 1000); do
    [ -f "$T/killed/pbt.json" ] && break
    sleep 0.01
done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
[ $? = 137 ] && ok || bad "the run ended before kill -9 (it trains 4 epochs after the first interval)"
[ -f "$T/killed/pbt.json" ] && ok || bad "no journal after the first interval"
expect_status 0 "pbt --resume after kill -9" -- "$COHORT" train "$T/pbt.yaml" --out "$T/killed" --resume --quiet
same_weights "$T/killed" "pbt resumed after kill -9"

# Killed inside the first phase, before its journal: three models have
# records at the interval, the others have not reached it. --resume holds
# the three there (they had trained on to the end, never ranked).
COHORT_TEST_KILL_AFTER_RECORDS=3 "$COHORT" train "$T/pbt.yaml" --out "$T/early" --strategy sequential --quiet > /dev/null 2>&1
[ $? = 137 ] && [ "$(ls "$T/early/records" | wc -l)" = 3 ] && [ ! -f "$T/early/pbt.json" ] &&
    ok || bad "the record hook did not kill the run inside the first phase"
expect_status 0 "pbt --resume after a kill inside a phase" -- "$COHORT" train "$T/pbt.yaml" --out "$T/early" --resume --quiet
same_weights "$T/early" "pbt resumed after a kill inside a phase"
$PY - "$T/sequential" "$T/early" <<'PY' && ok || bad "pbt resumed after a kill inside a phase: lineage or configs differ"
import json, sys
a, b = ({m["name"]: (m["lineage"], m["config"]) for m in json.load(open(f"{d}/results.json"))["models"]} for d in sys.argv[1:])
assert a == b, [n for n in a if a[n] != b.get(n)]
PY

# Killed between the first exploit of an interval and the second: --resume
# finishes the interval's copies from the donors' checkpoints.
COHORT_PBT_TEST=crash "$COHORT" train "$T/pbt.yaml" --out "$T/cut" --quiet > /dev/null 2>&1
[ $? = 137 ] && ok || bad "the crash hook did not kill the run"
$PY - "$T/cut" <<'PY' && ok || bad "the crash did not leave an exploit half done"
import json, struct, sys
d = sys.argv[1]
j = json.load(open(f"{d}/pbt.json"))
def spec(n):
    with open(f"{d}/checkpoints/{n}.safetensors", "rb") as f:
        h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    return json.loads(h["__metadata__"]["spec"])
done = [abs(spec(x["model"])["optimizer"]["lr"] - x["values"]["optimizer.lr"]) < 1e-9 for x in j["exploits"]]
assert j["decided"] == [2] and done == [True, False], (j["decided"], done)
PY
expect_status 0 "pbt --resume after a kill between exploits" -- "$COHORT" train "$T/pbt.yaml" --out "$T/cut" --resume --quiet
same_weights "$T/cut" "pbt resumed after a kill between exploits"

# Bad settings, at their line.
bad_pbt() { # WHAT MESSAGE SCHEDULER [LAYERS]
    printf 'data: {train: csv:%s/train.csv, validation_split: 0.25}\nmodels: [{name: m, optimizer: %s, layers: [{dense: 8, activation: relu}, {dropout: 0.2}, {dense: 3, activation: softmax}]}]\nscheduler: %s\n' "$T" "${4:-adam}" "$3" > "$T/bad.yaml"
    expect_status 2 "$1" -- "$COHORT" plan "$T/bad.yaml"
    expect_err "$2" "$1"
}
lr='hyperparam_mutations: {optimizer.lr: {loguniform: [1.0e-4, 1.0e-2]}}'
bad_pbt "no interval" "bad.yaml:3: scheduler pbt needs perturbation_interval" "{name: pbt, $lr}"
bad_pbt "no mutations" "bad.yaml:3: scheduler pbt needs hyperparam_mutations" "{name: pbt, perturbation_interval: 2}"
bad_pbt "shape key" "bad.yaml:3: scheduler.hyperparam_mutations key 'layers.0.dense' would change the model's shapes or memory" \
    "{name: pbt, perturbation_interval: 2, hyperparam_mutations: {layers.0.dense: {choice: [8, 16]}}}"
bad_pbt "batch_size" "bad.yaml:3: scheduler.hyperparam_mutations key 'batch_size' would change the model's shapes or memory" \
    "{name: pbt, perturbation_interval: 2, hyperparam_mutations: {batch_size: {choice: [16, 32]}}}"
bad_pbt "no model has it" "bad.yaml:3: scheduler.hyperparam_mutations key 'layers.0.dropout': no model has it" \
    "{name: pbt, perturbation_interval: 2, hyperparam_mutations: {layers.0.dropout: {uniform: [0.0, 0.5]}}}"
bad_pbt "optimizer lacks it" "bad.yaml:3: scheduler.hyperparam_mutations key 'optimizer.momentum': no model has it (the models' optimizer does not take it)" \
    "{name: pbt, perturbation_interval: 2, hyperparam_mutations: {optimizer.momentum: {uniform: [0.5, 0.9]}}}"
bad_pbt "not a key" "bad.yaml:3: scheduler.hyperparam_mutations key 'optimizer.lrr' is not a model key (did you mean 'optimizer.lr'?)" \
    "{name: pbt, perturbation_interval: 2, hyperparam_mutations: {optimizer.lrr: {uniform: [0.1, 0.5]}}}"
bad_pbt "out of range" "bad.yaml:3: scheduler.hyperparam_mutations: layers.1.dropout takes values in [0, 1), but its distribution reaches 1.5" \
    "{name: pbt, perturbation_interval: 2, hyperparam_mutations: {layers.1.dropout: {uniform: [0.0, 1.5]}}}"
bad_pbt "bad distribution" "bad.yaml:3: loguniform of scheduler.hyperparam_mutations key 'optimizer.lr' takes two bounds" \
    "{name: pbt, perturbation_interval: 2, hyperparam_mutations: {optimizer.lr: {loguniform: [1.0e-4]}}}"
bad_pbt "quantile" "bad.yaml:3: scheduler.quantile_fraction must be at most 0.5" "{name: pbt, perturbation_interval: 2, quantile_fraction: 0.7, $lr}"
bad_pbt "asha key" "bad.yaml:3: scheduler.grace_period is a setting of asha, median and hyperband, not of scheduler pbt" \
    "{name: pbt, perturbation_interval: 2, grace_period: 1, $lr}"
bad_pbt "pbt key" "bad.yaml:3: scheduler.perturbation_interval is a setting of pbt, not of scheduler asha" "{name: asha, perturbation_interval: 2}"
bad_pbt "memory" "bad.yaml:3: scheduler.hyperparam_mutations key 'optimizer.momentum' at 0 changes the memory plan of model 'm'" \
    "{name: pbt, perturbation_interval: 2, hyperparam_mutations: {optimizer.momentum: {uniform: [0.0, 0.9]}}}" "{name: sgd, momentum: 0.9}"
printf 'data: {train: csv:%s/train.csv, validation_split: 0.25}\nmodels: [{name: a, layers: [{dense: 3, activation: softmax}]}, {name: b, layers: [{dense: 8, activation: relu}, {dense: 3, activation: softmax}]}]\nscheduler: {name: pbt, perturbation_interval: 1, %s}\n' "$T" "$lr" > "$T/bad.yaml"
expect_status 2 "different shapes" -- "$COHORT" plan "$T/bad.yaml"
expect_err "bad.yaml:3: pbt copies weights and optimizer state between models, but 'a' and 'b' differ in their layers or optimizer" "different shapes"
finish
