#!/usr/bin/env bash
# End to end through the command line: a generated dataset trains to high
# accuracy; outputs follow the contract; bad input gives exit status 2 with a
# message naming the file and the problem; eval and predict use saved weights.
set -u
. "$(dirname "$0")/lib.sh"

blobs 7 600 0.8

cat > "$T/plan.yaml" <<YAML
data:
  train: csv:$T/train.csv
  test: csv:$T/test.csv
  validation_split: 0.25
defaults:
  epochs: 8
  batch_size: 16
  layers: [{dense: 16, activation: relu}, {dense: 3, activation: softmax}]
models:
  - name: adam_model
  - name: sgd_model
    optimizer: {name: sgd, lr: 0.1, momentum: 0.9}
  - name: dropout_model
    optimizer: {name: adam, lr: 0.0025}
    layers: [{dense: 32, activation: tanh}, {dropout: 0.3}, {dense: 3, activation: softmax}]
    early_stopping: {monitor: val_loss, patience: 2, restore_best_weights: true}
YAML

expect_status 0 "train" -- "$COHORT" train "$T/plan.yaml" --out "$T/run" --quiet
for m in adam_model sgd_model dropout_model; do
    [ -s "$T/run/models/$m.safetensors" ] && ok || bad "no weights for $m"
    [ -s "$T/run/models/$m.best.safetensors" ] && ok || bad "no best weights for $m"
    head -n 1 "$T/run/history/$m.csv" | grep -qx "epoch,loss,accuracy,val_loss,val_accuracy,seconds,lr" && ok || bad "history header of $m"
done
grep -q "adam_model" "$T/out" && ok || bad "final table lacks the models"
/usr/bin/python3 - "$T/run/results.json" <<'PY' && ok || bad "results.json does not hold what the contract says"
import json, sys
r = json.load(open(sys.argv[1]))
ms = {m["name"]: m for m in r["models"]}
assert set(ms) == {"adam_model", "sgd_model", "dropout_model"}, ms.keys()
for m in ms.values():
    for key in ("name", "status", "error", "device", "config", "epochs_run", "history", "best",
                "test", "seconds", "planned_bytes", "peak_bytes", "weights"):
        assert key in m, key
    assert m["status"] == "ok", m
    assert m["test"]["accuracy"] >= 0.95, (m["name"], m["test"])
    assert len(m["history"]["loss"]) == m["epochs_run"]
    assert m["planned_bytes"] == m["peak_bytes"] > 0, m
    assert m["config"]["name"] == m["name"]
assert ms["sgd_model"]["config"]["optimizer"]["name"] == "sgd"
assert ms["adam_model"]["epochs_run"] == 8
PY
# history/NAME.csv holds results.json's numbers (nine significant digits):
# "%.6f" had cut the small losses of late epochs to a few digits.
/usr/bin/python3 - "$T/run" <<'PY' && ok || bad "history/*.csv differs from results.json"
import csv, json, struct, sys
for m in json.load(open(sys.argv[1] + "/results.json"))["models"]:
    rows = list(csv.DictReader(open(f"{sys.argv[1]}/history/{m['name']}.csv")))
    assert len(rows) == m["epochs_run"], (m["name"], len(rows))
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        csv_v = [float(r[key]) for r in rows]
        assert csv_v == m["history"][key], (m["name"], key, csv_v, m["history"][key])
    # lr: the same float32 as results.json's, in the fewest digits that give
    # it back (0.0025, not "%.8g"'s 0.0024999999).
    f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
    for r, v in zip(rows, m["history"]["lr"]):
        short = next(s for s in ("%.*g" % (d, v) for d in range(1, 10)) if f32(float(s)) == f32(v))
        assert r["lr"] == short, (m["name"], r["lr"], short)
PY

# eval and predict on the saved weights agree with the run's own test figures.
expect_status 0 "eval" -- "$COHORT" eval "$T/run/models/adam_model.safetensors" --data "csv:$T/test.csv" --json
/usr/bin/python3 - "$T/out" "$T/run/results.json" <<'PY' && ok || bad "eval disagrees with results.json"
import json, sys
e = json.load(open(sys.argv[1]))
r = {m["name"]: m for m in json.load(open(sys.argv[2]))["models"]}["adam_model"]
assert abs(e["accuracy"] - r["test"]["accuracy"]) < 1e-9 and abs(e["loss"] - r["test"]["loss"]) < 1e-6, (e, r["test"])
PY
# eval --json is JSON for any path (a quote in it is escaped), and its loss keeps
# results.json's digits: sgd_model's test loss is about 3e-05, which "%.6f" had
# cut to two digits.
mkdir -p "$T/a\"b"
cp "$T/run/models/sgd_model.safetensors" "$T/a\"b/m.safetensors"
expect_status 0 "eval of a path with a quote" -- "$COHORT" eval "$T/a\"b/m.safetensors" --data "csv:$T/test.csv" --json
/usr/bin/python3 - "$T/out" "$T/run/results.json" <<'PY' && ok || bad "eval --json: $(cat "$T/out")"
import json, sys
e = json.load(open(sys.argv[1]))
r = {m["name"]: m for m in json.load(open(sys.argv[2]))["models"]}["sgd_model"]
assert e["weights"].endswith('a"b/m.safetensors'), e
assert abs(e["loss"] - r["test"]["loss"]) <= 1e-6 * r["test"]["loss"], (e, r["test"])
PY
expect_status 0 "predict" -- "$COHORT" predict "$T/run/models/adam_model.safetensors" --data "csv:$T/test.csv" --out "$T/pred.csv"
[ "$(wc -l < "$T/pred.csv")" -eq 151 ] && ok || bad "predict wrote $(wc -l < "$T/pred.csv") lines, wanted 151"
head -n 1 "$T/pred.csv" | grep -qx "index,prediction,label,p0,p1,p2" && ok || bad "predict header"

# A model can warm-start from another's weights.
expect_status 0 "init_from" -- "$COHORT" train "$T/plan.yaml" --out "$T/warm" --quiet \
    --set "defaults.init_from=$T/run/models/adam_model.safetensors" --set defaults.epochs=1 \
    --set 'models=[{name: warm}]'

# Usage and input errors: exit 2, a message naming the file and the problem.
expect_status 0 "--help" -- "$COHORT" --help
expect_status 0 "train --help" -- "$COHORT" train --help
grep -q -- "--strategy" "$T/out" && ok || bad "train --help lacks --strategy"
expect_status 0 "--version" -- "$COHORT" --version
grep -q "^cohort [0-9]" "$T/out" && ok || bad "--version output"
expect_status 2 "unknown command" -- "$COHORT" frobnicate
expect_err "unknown command 'frobnicate'; the commands are train, plan, devices" "unknown command"
# plan --strategy fused without a group of two says why: the cut per core, or no pair fits.
printf 'data:\n  train: csv:%s\ndefaults: {layers: [{dense: 3, activation: softmax}]}\nmodels:\n  - {name: a}\n  - {name: b, seed: 2}\n' "$T/train.csv" > "$T/fz.yaml"
expect_status 0 "plan fused, cut per core" -- "$COHORT" plan "$T/fz.yaml" --strategy fused --threads 2
grep -q "cut into one part per core, and there are no more of them than cores" "$T/out" && ok || bad "plan fused: the per-core cut is not named: $(tail -n 2 "$T/out")"
printf 'data:\n  train: csv:%s\nmodels:\n  - {name: a, layers: [{dense: 3, activation: softmax}]}\n  - {name: b, layers: [{dense: 4, activation: relu}, {dense: 3, activation: softmax}]}\n' "$T/train.csv" > "$T/fz2.yaml"
expect_status 0 "plan fused, nothing fits" -- "$COHORT" plan "$T/fz2.yaml" --strategy fused --threads 2
grep -q "no two models on a device have the same layers" "$T/out" && ok || bad "plan fused: wrong reason: $(tail -n 2 "$T/out")"
# cohort plan exits 1 when a model does not fit its device, and its --help says so.
printf 'data:\n  train: csv:%s\ndevices: {cpu:0: {memory_limit: 1MiB}}\nmodels:\n  - {name: a, layers: [{dense: 3, activation: softmax}]}\n  - {name: big, layers: [{dense: 100000}, {dense: 3, activation: softmax}]}\n' "$T/train.csv" > "$T/nofit.yaml"
expect_status 1 "plan with a model that does not fit" -- "$COHORT" plan "$T/nofit.yaml"
expect_status 0 "plan --help" -- "$COHORT" plan --help
grep -q "exit status: 0 every model fits its device, 1 some model does not" "$T/out" && ok || bad "plan --help lacks its exit status"
expect_status 2 "a mistyped command" -- "$COHORT" trian
expect_err "unknown command 'trian' (did you mean 'train'?)" "a mistyped command"
expect_status 2 "no plan" -- "$COHORT" train
expect_err "cohort train: needs PLAN, a plan file, like cohort train examples/seed.yaml" "no plan"
expect_status 2 "plan without a plan" -- "$COHORT" plan
expect_err "cohort plan: needs PLAN, a plan file" "plan without a plan"
# Keras's fit() arguments as options get the --set that does it; a typo, the option.
expect_status 2 "--epochs" -- "$COHORT" train "$T/plan.yaml" --epochs 3
expect_err "cohort train: unknown option '--epochs'; a plan's settings are changed with --set, like --set defaults.epochs=3" "--epochs"
expect_status 2 "--batch-size=" -- "$COHORT" plan "$T/plan.yaml" --batch-size=8
expect_err "like --set defaults.batch_size=8 (see cohort plan --help)" "--batch-size="
expect_status 2 "--learning_rate" -- "$COHORT" train "$T/plan.yaml" --learning_rate 0.1
expect_err "like --set defaults.optimizer.lr=0.1" "--learning_rate"
expect_status 2 "a mistyped option" -- "$COHORT" train "$T/plan.yaml" --overwite
expect_err "cohort train: unknown option '--overwite'; did you mean '--overwrite'?" "a mistyped option"
expect_status 2 "a mistyped eval option" -- "$COHORT" eval "$T/plan.yaml" --dta x
expect_err "cohort eval: unknown option '--dta'; did you mean '--data'?" "a mistyped eval option"
for c in train plan devices eval predict report compare merge; do
    expect_status 0 "$c --help" -- "$COHORT" $c --help
    grep -q "^usage: cohort $c" "$T/out" && ok || bad "$c --help: $(head -n 1 "$T/out")"
    expect_status 2 "$c --bogus" -- "$COHORT" $c --bogus
    expect_err "cohort $c: unknown option '--bogus' (see cohort $c --help)" "$c --bogus"
done
expect_status 2 "missing plan" -- "$COHORT" train "$T/nope.yaml"
expect_err "$T/nope.yaml: cannot open" "missing plan"
printf 'data:\n  train: csv:%s\nmodels:\n  - name: a\n    layers: [{dense: 3, activation: softmax}]\n    epoch: 3\n' "$T/train.csv" > "$T/typo.yaml"
expect_status 2 "unknown key" -- "$COHORT" train "$T/typo.yaml" --out "$T/typo"
expect_err "typo.yaml:6: unknown key 'epoch'" "unknown key"
[ ! -e "$T/typo/results.json" ] && ok || bad "a bad plan wrote results.json"
expect_status 2 "bad --set" -- "$COHORT" train "$T/plan.yaml" --set defaults.epochs
expect_status 2 "bad strategy" -- "$COHORT" train "$T/plan.yaml" --strategy warp
expect_err "unknown strategy 'warp'" "bad strategy"
printf 'f0,f1,f2,f3,label\n1,2,3,4,0\n1,2,3,0\n' > "$T/ragged.csv"
expect_status 2 "ragged csv" -- "$COHORT" train "$T/plan.yaml" --set "data.train=csv:$T/ragged.csv" --out "$T/ragged"
expect_err "ragged.csv:3" "ragged csv"
head -c 100 /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz > "$T/cut.gz" 2>/dev/null || printf '\x1f\x8b' > "$T/cut.gz"
expect_status 2 "truncated idx" -- "$COHORT" train "$T/plan.yaml" --set "data.train=idx:$T/cut.gz,$T/cut.gz" --out "$T/cut"
expect_err "cut.gz" "truncated idx"
expect_status 2 "wrong output width" -- "$COHORT" train "$T/plan.yaml" --set 'defaults.layers=[{dense: 5, activation: softmax}]' --out "$T/width"
expect_err "has 5 units but the data has 3 classes" "wrong output width"
expect_status 2 "eval of a non-weights file" -- "$COHORT" eval "$T/train.csv" --data "csv:$T/test.csv"
expect_err "train.csv" "eval of a non-weights file"

# A run that already wrote results keeps them when a later run fails on bad input.
cp "$T/run/results.json" "$T/before.json"
expect_status 2 "bad rerun" -- "$COHORT" train "$T/typo.yaml" --out "$T/run"
cmp -s "$T/before.json" "$T/run/results.json" && ok || bad "a failed run changed the earlier results.json"

# A model that diverges fails alone; the others finish; exit status 1.
expect_status 1 "divergence" -- "$COHORT" train "$T/plan.yaml" --out "$T/div" --quiet \
    --set 'models=[{name: fine}, {name: wild, optimizer: {name: sgd, lr: 1e30}}]' --set defaults.epochs=2
/usr/bin/python3 - "$T/div/results.json" <<'PY' && ok || bad "diverged model not reported as such"
import json, sys
ms = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}
assert ms["fine"]["status"] == "ok", ms["fine"]
assert ms["wild"]["status"] == "diverged" and "epoch 1" in ms["wild"]["error"], ms["wild"]
PY

# cohort devices says which CPU kernels run and why; COHORT_CPU_KERNELS asks
# for less (never more than the processor has), and an unknown value is
# ignored, not taken for blas.
out=$(COHORT_CPU_KERNELS=blas "$COHORT" devices)
echo "$out" | grep -q "kernels blas (COHORT_CPU_KERNELS=blas)" && ok || bad "devices with blas: $out"
best=$("$COHORT" devices --json | /usr/bin/python3 -c "import json,sys; print([d for d in json.load(sys.stdin)['devices'] if d['kind'] == 'cpu'][0]['kernels'])")
out=$(COHORT_CPU_KERNELS=avx5 "$COHORT" devices --json)
echo "$out" | grep -q "\"kernels\": \"$best\", \"kernels_why\": \".*COHORT_CPU_KERNELS='avx5' is not avx512, avx2 or blas: ignored" &&
    ok || bad "devices with an unknown COHORT_CPU_KERNELS: $out"
if [ "$best" = avx2 ]; then
    out=$(COHORT_CPU_KERNELS=avx512 "$COHORT" devices)
    echo "$out" | grep -q "kernels avx2 (COHORT_CPU_KERNELS=avx512, but this CPU has avx2 at most)" &&
        ok || bad "devices asking for more than the CPU has: $out"
fi

# cohort devices PLAN shows the plan's memory settings: an unsplit device's
# limit and policy, and each CPU part's cores, limit and policy; --json has
# each device's policy (null for the split device).
cat > "$T/mem.yaml" <<YAML
data: {train: csv:$T/none.csv}
models: [{name: m, layers: [{dense: 3, activation: softmax}]}]
devices: {cpu:0: {memory: preallocate, memory_limit: 1MiB}}
YAML
out=$("$COHORT" devices "$T/mem.yaml")
echo "$out" | grep -q "^cpu:0 .*; limit 1.00 MiB, preallocated$" && ok || bad "devices PLAN: no memory settings: $out"
sed -i 's/{memory: preallocate, memory_limit: 1MiB}/{split: [1MiB, 2MiB], memory: preallocate}/' "$T/mem.yaml"
out=$("$COHORT" devices "$T/mem.yaml")
echo "$out" | grep -q "^cpu:0/1  part of cpu:0: [0-9]* cores\? (cpus\? [0-9, -]*), limit 2.00 MiB, preallocated$" && ok || bad "devices PLAN: a part: $out"
"$COHORT" devices "$T/mem.yaml" --json | "$PY" -c '
import json, sys
d = {x["name"]: x for x in json.load(sys.stdin)["devices"]}
assert d["cpu:0"]["policy"] is None, d["cpu:0"]
assert d["cpu:0/0"]["policy"] == "preallocate" and d["cpu:0/0"]["limit_bytes"] == 1 << 20, d["cpu:0/0"]
assert d["cpu:0/1"]["threads"] >= 1, d["cpu:0/1"]
' && ok || bad "devices PLAN --json: the policies"
"$COHORT" devices --json | "$PY" -c '
import json, sys
assert json.load(sys.stdin)["devices"][0]["policy"] == "grow"
' && ok || bad "devices --json: cpu:0 grows by default"

# A value option last, or empty, is an error: taken as not given, `--out DIR
# --out` had trained into runs/PLAN.
mkdir "$T/cwd" && cd "$T/cwd" || exit 1
for args in "--out $T/x --out" "--shard" "--threads" "--strategy" "--out="; do
    expect_status 2 "train $args" -- "$COHORT" train "$T/plan.yaml" --quiet $args
    expect_err "is missing its value" "train $args"
done
[ ! -e "$T/x" ] && [ ! -e "$T/cwd/runs" ] && ok || bad "a train with a missing value trained"
cd - >/dev/null || exit 1
expect_status 2 "plan --strategy" -- "$COHORT" plan "$T/plan.yaml" --strategy
expect_err "cohort plan: --strategy is missing its value" "plan --strategy"
expect_status 2 "predict --out" -- "$COHORT" predict "$T/run/models/adam_model.safetensors" --data "csv:$T/test.csv" --out
expect_err "cohort predict: --out is missing its value" "predict --out"
# A file that cannot be made is named as the user gave it, not as its temporary.
expect_status 2 "predict --out into a missing folder" -- "$COHORT" predict \
    "$T/run/models/adam_model.safetensors" --data "csv:$T/test.csv" --out "$T/nowhere/p.csv"
expect_err "$T/nowhere/p.csv: cannot create" "predict --out into a missing folder"
! grep -q "\.tmp\." "$T/err" && ok || bad "predict --out into a missing folder names a temporary: $(cat "$T/err")"

finish
