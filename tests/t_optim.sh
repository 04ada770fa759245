#!/usr/bin/env bash
# Learning-rate schedules, reduce_lr_on_plateau, clipping and regularizers
# end to end: the history's lr column against Keras's formulas (to 1e-6) and
# against ReduceLROnPlateau's rule replayed on the run's own val_loss; a
# fused group whose members differ in schedule, clip, regularizer and
# plateau settings trains bit for bit as each model alone; a run killed or
# stopped mid-way and resumed ends bit for bit as an uninterrupted one.
set -u
. "$(dirname "$0")/lib.sh"

# 900 rows of 6 features, 3 classes: 720 train rows, 23 steps of 32 an epoch.
awk 'BEGIN { srand(17); for (i = 0; i < 900; i++) { c = i % 3; line = "";
    for (j = 0; j < 6; j++) { v = (rand() - 0.5) * 2 + (j == c ? 1.0 : 0); line = line v "," }
    print line c } }' > "$T/d.csv"

cat > "$T/plan.yaml" <<YAML
data: {train: csv:$T/d.csv, validation_split: 0.2}
defaults:
  epochs: 6
  batch_size: 32
  layers: [{dense: 16, activation: relu}, {dense: 3, activation: softmax}]
models:
  - name: f_cos
    optimizer: {name: adam, lr: 0.002, clipnorm: 0.5,
                schedule: {cosine_decay: {decay_steps: 60, alpha: 0.1, warmup_steps: 20, warmup_target: 0.01}}}
    layers: [{dense: 16, activation: relu, kernel_regularizer: {l2: 0.001}}, {dense: 3, activation: softmax}]
  - name: f_cos_plain
    optimizer: {name: adam, schedule: {cosine_decay: {decay_steps: 100}}}
  - name: f_cos_nowarm
    optimizer: {name: adam, lr: 0.002, schedule: {cosine_decay: {decay_steps: 80, warmup_target: 0.004}}}
  - name: f_exp
    optimizer: {name: adam, lr: 0.01, global_clipnorm: 1.0,
                schedule: {exponential_decay: {decay_steps: 30, decay_rate: 0.5, staircase: true}}}
    layers: [{dense: 16, activation: relu}, {dense: 3, activation: softmax, kernel_regularizer: {l1: 0.0005}}]
  - name: f_exp_smooth
    optimizer: {name: adam, lr: 0.01, schedule: {exponential_decay: {decay_steps: 40, decay_rate: 0.3}}}
  - name: f_pw
    optimizer: {name: adam, clipvalue: 0.05,
                schedule: {piecewise_constant: {boundaries: [22, 69], values: [0.01, 0.003, 0.0005]}}}
  - name: f_plat
    optimizer: {name: adam, lr: 0.05}
    reduce_lr_on_plateau: {patience: 1, factor: 0.5, min_delta: 0.01, cooldown: 1, min_lr: 0.01}
  - name: f_plain
YAML
models="f_cos f_cos_plain f_cos_nowarm f_exp f_exp_smooth f_pw f_plat f_plain"

"$COHORT" plan "$T/plan.yaml" --strategy fused --threads 1 --json >"$T/groups.json" 2>&1 && ok || bad "plan: $(cat "$T/groups.json")"
$PY - "$T/groups.json" <<'PY' && ok || bad "the eight adam models should be one fused group: $(cat "$T/groups.json")"
import json, sys
groups = [g["models"] for g in json.load(open(sys.argv[1]))["groups"]]
assert len(groups) == 1 and len(groups[0]) == 8, groups
PY

"$COHORT" train "$T/plan.yaml" --strategy sequential --threads 1 --out "$T/seq" --quiet >/dev/null 2>"$T/seq.err" && ok || bad "sequential run: $(cat "$T/seq.err")"
"$COHORT" train "$T/plan.yaml" --strategy fused --threads 1 --out "$T/fused" --quiet >/dev/null 2>"$T/fused.err" && ok || bad "fused run: $(cat "$T/fused.err")"
for m in $models; do
    cmp -s "$T/seq/models/$m.safetensors" "$T/fused/models/$m.safetensors" && ok || bad "fused: weights of $m differ from alone"
done
$PY - "$T/seq/results.json" "$T/fused/results.json" <<'PY' && ok || bad "fused: histories differ from alone"
import json, sys
a = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}
b = {m["name"]: m for m in json.load(open(sys.argv[2]))["models"]}
for n in a:
    for k in ("loss", "accuracy", "val_loss", "val_accuracy", "lr"):
        assert a[n]["history"][k] == b[n]["history"][k], (n, k, a[n]["history"][k], b[n]["history"][k])
PY

# The lr column is the rate of each epoch's last update, step = updates
# before it (Keras's optimizer.iterations): 23 e - 1 for epoch e.
$PY - "$T/seq/results.json" <<'PY' && ok || bad "schedules: the lr column is not Keras's formula"
import json, math, sys
steps = 23
def cosine(step, lr, decay, alpha=0.0, warmup=0, target=None):
    if target is None:
        step = min(step, decay)
        return lr * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * step / decay)) + alpha)
    step = min(step, decay + warmup)
    if step < warmup:
        return (target - lr) * step / warmup + lr
    step -= warmup
    return target * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * step / decay)) + alpha)
def exponential(step, lr, decay, rate, staircase=False):
    p = step / decay
    return lr * rate ** (math.floor(p) if staircase else p)
def piecewise(step, bounds, values):
    for b, v in zip(bounds, values):
        if step <= b:
            return v
    return values[-1]
want = {
    "f_cos": lambda s: cosine(s, 0.002, 60, 0.1, 20, 0.01),
    "f_cos_plain": lambda s: cosine(s, 0.001, 100),
    "f_cos_nowarm": lambda s: cosine(s, 0.002, 80, 0.0, 0, 0.004),
    "f_exp": lambda s: exponential(s, 0.01, 30, 0.5, True),
    "f_exp_smooth": lambda s: exponential(s, 0.01, 40, 0.3),
    "f_pw": lambda s: piecewise(s, [22, 69], [0.01, 0.003, 0.0005]),
}
models = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}
worst = 0.0
for name, f in want.items():
    lrs = models[name]["history"]["lr"]
    assert len(lrs) == 6, (name, lrs)
    for e, got in enumerate(lrs, 1):
        w = f(steps * e - 1)
        rel = abs(got - w) / max(w, 1e-30)
        worst = max(worst, rel if w > 0 else 0.0)
        assert abs(got - w) <= 1e-6 * w + 1e-12, (name, e, got, w)
print(f"t_optim.sh: schedules: max relative difference of the lr column {worst:.3g}")
PY

# ReduceLROnPlateau replayed on the run's own val_loss: the rate of each
# epoch follows from the epochs before it; the rate must have been cut at
# least twice and have reached min_lr.
$PY - "$T/seq/results.json" <<'PY' && ok || bad "reduce_lr_on_plateau: the lr column does not follow Keras's rule"
import json, sys
import numpy as np
m = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}["f_plat"]["history"]
patience, factor, min_delta, cooldown, min_lr = 1, 0.5, 0.01, 1, 0.01
lr, best, wait, cd, cuts = np.float32(0.05), np.inf, 0, 0, 0
for e, (v, got) in enumerate(zip(m["val_loss"], m["lr"])):
    assert abs(got - float(lr)) <= 1e-6 * float(lr), (e, got, float(lr))
    if cd > 0:
        cd -= 1
        wait = 0
    if v < best - min_delta:
        best, wait = v, 0
    elif cd <= 0:
        wait += 1
        if wait >= patience and lr > np.float32(min_lr):
            lr = np.float32(max(float(lr) * factor, min_lr))
            cd, wait, cuts = cooldown, 0, cuts + 1
assert cuts >= 2, (cuts, m["val_loss"], m["lr"])
print(f"t_optim.sh: reduce_lr_on_plateau: {cuts} cuts, lr {m['lr']}")
PY

# Resume: stopped (SIGTERM) and killed (SIGKILL) at points inside a longer
# run, then --resume: the same weights and histories, bit for bit, as the
# uninterrupted run (the plateau state and the schedule's step continue).
cat > "$T/long.yaml" <<YAML
data: {train: csv:$T/d.csv, validation_split: 0.2}
defaults:
  epochs: 80
  batch_size: 8
  layers: [{dense: 32, activation: relu, kernel_regularizer: {l2: 0.0005}}, {dense: 3, activation: softmax}]
models:
  - {name: r_nadam, optimizer: {name: nadam, lr: 0.002, clipnorm: 0.5,
                                schedule: {cosine_decay: {decay_steps: 2000, warmup_steps: 200, warmup_target: 0.005}}}}
  - {name: r_plat, optimizer: {name: sgd, lr: 0.3, momentum: 0.9},
     reduce_lr_on_plateau: {patience: 1, factor: 0.5, min_delta: 0.005, cooldown: 1}}
  - {name: r_ada, optimizer: {name: adagrad, lr: 0.05, global_clipnorm: 1.0}}
  - {name: r_rms, optimizer: {name: rmsprop, centered: true, clipvalue: 0.1,
                              schedule: {exponential_decay: {decay_steps: 500, decay_rate: 0.7}}}}
YAML
t0=$(date +%s.%N)
"$COHORT" train "$T/long.yaml" --out "$T/ref" --quiet >/dev/null 2>"$T/ref.err" && ok || bad "long reference run: $(cat "$T/ref.err")"
t1=$(date +%s.%N)
at() { awk "BEGIN { printf \"%.3f\", ($t1 - $t0) * $1 }"; }
i=0 inside=0
for p in TERM$(at 0.2) KILL$(at 0.4) TERM$(at 0.6); do
    i=$((i + 1))
    sig=${p:0:4} p=${p:4}
    "$COHORT" train "$T/long.yaml" --out "$T/r$i" --quiet >/dev/null 2>&1 &
    pid=$!
    sleep "$p"
    kill -$sig $pid 2>/dev/null
    wait $pid 2>/dev/null
    done_models=$(ls "$T/r$i/models/"*.safetensors 2>/dev/null | grep -vc best)
    ls "$T/r$i/checkpoints/"*.safetensors >/dev/null 2>&1 && [ "$done_models" -lt 4 ] &&
        inside=$((inside + 1))
    "$COHORT" train "$T/long.yaml" --out "$T/r$i" --resume --quiet >/dev/null 2>"$T/r$i.err" && ok || bad "resume $i ($sig at $p s): $(cat "$T/r$i.err")"
    for m in r_nadam r_plat r_ada r_rms; do
        cmp -s "$T/ref/models/$m.safetensors" "$T/r$i/models/$m.safetensors" && ok || bad "resume $i ($sig at $p s): weights of $m differ"
    done
    $PY - "$T/ref/results.json" "$T/r$i/results.json" <<'PY' && ok || bad "resume $i ($sig at $p s): histories differ"
import json, sys
a = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}
b = {m["name"]: m for m in json.load(open(sys.argv[2]))["models"]}
for n in a:
    for k in ("loss", "val_loss", "lr"):
        assert a[n]["history"][k] == b[n]["history"][k], (n, k)
PY
done
[ $inside -ge 1 ] && ok || bad "resume: no stop landed inside the run (a loaded machine?)"
$PY - "$T/ref/results.json" <<'PY' && ok || bad "resume: r_plat's rate was never cut, so its state was not tested"
import json, sys
h = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}["r_plat"]["history"]["lr"]
assert len(set(h)) >= 3, h
PY

# A monitored value that is NaN (validation inputs of 3e38 overflow the
# logits) is no improvement, as in Keras 3's ReduceLROnPlateau: with patience
# 1 the rate halves every epoch. cohort skipped NaN values and never cut. A
# monitor the epochs lack (mae of a classifier) changes nothing, for the
# plateau and for early stopping alike, as Keras skips one its logs lack.
$PY - "$T" "$(dirname "$0")" <<'PY' || bad "nan: could not write the data"
import sys, numpy as np
sys.path.insert(0, sys.argv[2])
from st_numpy import write_safetensors
d = sys.argv[1]
write_safetensors(f"{d}/init.safetensors", {"layers.0.weight": np.ones((2, 2), np.float32),
                                            "layers.0.bias": np.zeros(2, np.float32)})
np.save(f"{d}/x.npy", np.random.default_rng(0).standard_normal((16, 2)).astype(np.float32))
np.save(f"{d}/y.npy", np.arange(16) % 2)
np.save(f"{d}/xv.npy", np.full((4, 2), 3e38, np.float32)); np.save(f"{d}/yv.npy", np.arange(4) % 2)
PY
cat > "$T/nan.yaml" <<YAML
data: {train: "npy:$T/x.npy,$T/y.npy", validation: "npy:$T/xv.npy,$T/yv.npy"}
defaults: {epochs: 4, batch_size: 8, init_from: $T/init.safetensors, optimizer: {name: sgd, lr: 0.01},
           layers: [{dense: 2, activation: softmax}]}
models:
  - {name: nan, reduce_lr_on_plateau: {patience: 1, factor: 0.5}}
  - {name: lacks, reduce_lr_on_plateau: {monitor: mae, patience: 1, factor: 0.5},
     early_stopping: {monitor: val_mae, patience: 0}}
YAML
expect_status 0 "train nan" -- "$COHORT" train "$T/nan.yaml" --out "$T/nan" --quiet
$PY - "$T/nan/results.json" <<'PY' && ok || bad "plateau on NaN: not Keras's ReduceLROnPlateau"
import json, sys
m = {r["name"]: r for r in json.load(open(sys.argv[1]))["models"]}
h = m["nan"]["history"]
assert h["val_loss"] == [None] * 4, h
assert [round(v, 6) for v in h["lr"]] == [0.01, 0.005, 0.0025, 0.00125], h["lr"]
assert m["lacks"]["epochs_run"] == 4 and not m["lacks"]["stopped_early"], m["lacks"]
assert [round(v, 6) for v in m["lacks"]["history"]["lr"]] == [0.01] * 4, m["lacks"]["history"]
PY
# ... and the run says so, with the plan's line, as Keras warns.
expect_err "nan.yaml:6: model 'lacks': reduce_lr_on_plateau monitors mae, which its epochs do not have (a classifier has accuracy): its rate never drops" "a monitor the task lacks"
expect_err "nan.yaml:6: model 'lacks': early_stopping monitors val_mae, which its epochs do not have (a classifier has accuracy): it never stops early" "a monitor the task lacks"

finish "($inside of 3 stops inside the run)"
