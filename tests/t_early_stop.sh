#!/usr/bin/env bash
# Early stopping is visible where the run is watched: the console says
# "NAME stopped early at epoch N, restored epoch M" (without the restore part
# when restore_best_weights is off), and the final table's note column says
# the same, as does report.html; N and M are results.json's epochs_run and
# restored_epoch (the best epoch).
#
# min_delta is Keras's EarlyStopping rule, replayed on each run's own history:
# an improvement is `value - min_delta > best` (accuracies; losses `value +
# min_delta < best`) in doubles, so a val_accuracy that rises by exactly
# min_delta (one sample of 100, min_delta 0.01) is not one. min_delta once was
# a float (0.01 becomes 0.0099999998) and every such rise counted.
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }

blobs 4 600 0.5
cat > "$T/plan.yaml" <<YAML
data: {train: csv:$T/train.csv, validation_split: 0.2}
defaults: {epochs: 40, batch_size: 16, layers: [{dense: 8, activation: relu}, {dense: 3, activation: softmax}]}
models:
  - {name: keep, early_stopping: {monitor: val_accuracy, patience: 1, restore_best_weights: true}}
  - {name: last, early_stopping: {monitor: val_accuracy, patience: 1}}
  - {name: full, epochs: 2}
YAML
expect_status 0 "train" -- "$COHORT" train "$T/plan.yaml" --out "$T/o" --strategy sequential
read -r keep_n keep_m last_n <<<"$(/usr/bin/python3 -c "
import json, sys
m = {r['name']: r for r in json.load(open(sys.argv[1]))['models']}
assert m['keep']['stopped_early'] and m['last']['stopped_early'] and not m['full']['stopped_early'], m
print(m['keep']['epochs_run'], m['keep']['best']['epoch'], m['last']['epochs_run'])" "$T/o/results.json")"
[ -n "${last_n:-}" ] && ok || bad "early stopping did not stop both models"
expect_err "keep stopped early at epoch $keep_n, restored epoch $keep_m" "console, restored"
grep -qx "last stopped early at epoch $last_n" "$T/err" && ok || bad "console, not restored: $(cat "$T/err")"
! grep -q "full stopped early" "$T/err" && ok || bad "console: a model that ran its epochs stopped early"
grep -E "^keep .*  stopped early at $keep_n, restored $keep_m$" "$T/out" >/dev/null && ok || bad "table, restored: $(cat "$T/out")"
grep -E "^last .*  stopped early at $last_n$" "$T/out" >/dev/null && ok || bad "table, not restored: $(cat "$T/out")"
grep -E "^full .*[0-9.]$" "$T/out" >/dev/null && ok || bad "table: a note for a model that ran its epochs: $(cat "$T/out")"
head -n1 "$T/out" | grep -q "  note$" && ok || bad "table: no note column: $(head -n1 "$T/out")"
# results.json names the restored epoch; report.html shows both.
/usr/bin/python3 -c "
import json, sys
m = {r['name']: r for r in json.load(open(sys.argv[1]))['models']}
assert m['keep']['restored_epoch'] == m['keep']['best']['epoch'], m['keep']
assert m['last']['restored_epoch'] is None and m['full']['restored_epoch'] is None" "$T/o/results.json" && ok || bad "results.json: restored_epoch"
grep -q "stopped early, restored $keep_m<" "$T/o/report.html" && ok || bad "report.html: no 'stopped early, restored $keep_m'"
grep -q "stopped early<" "$T/o/report.html" && ok || bad "report.html: no 'stopped early' for the model not restored"
# min_delta against Keras's rule: 100 validation samples, min_delta 0.01.
awk 'BEGIN { srand(21); print "f0,f1,f2,f3,label"; for (i = 0; i < 500; i++) { c = i % 3; line = "";
    for (j = 0; j < 4; j++) { v = (rand() - 0.5) * 3 + (j == c ? 1 : 0); line = line (j ? "," : "") v }
    print line "," c } }' > "$T/md.csv"
cat > "$T/md.yaml" <<YAML
data: {train: csv:$T/md.csv, validation_split: 0.2}
defaults: {epochs: 30, batch_size: 50, optimizer: {name: sgd, lr: 0.02},
           layers: [{dense: 8, activation: tanh}, {dense: 3, activation: softmax}],
           early_stopping: {monitor: val_accuracy, patience: 2, min_delta: 0.01, restore_best_weights: true}}
models: [{name: s1, seed: 1}, {name: s2, seed: 2}, {name: s3, seed: 3}, {name: s4, seed: 4}, {name: s5, seed: 5}]
YAML
expect_status 0 "train min_delta" -- "$COHORT" train "$T/md.yaml" --out "$T/md" --quiet
/usr/bin/python3 - "$T/md/results.json" <<'PY' && ok || bad "min_delta: not Keras's rule"
import json, struct, sys
def replay(vals, patience, md):
    """Keras's EarlyStopping: (epochs run, best epoch)."""
    best, wait = None, 0
    for e, v in enumerate(vals, 1):
        if best is None or v - md > best:
            best, wait, best_epoch = v, 0, e
        else:
            wait += 1
            if wait >= patience:
                return e, best_epoch
    return len(vals), best_epoch
f32 = struct.unpack("f", struct.pack("f", 0.01))[0]
bites = 0
for m in json.load(open(sys.argv[1]))["models"]:
    h = m["history"]["val_accuracy"][:m["epochs_run"]]
    want = replay(h, 2, 0.01)
    assert (m["epochs_run"], m["restored_epoch"]) == want, (m["name"], m["epochs_run"], m["restored_epoch"], want, h)
    # a rise of exactly one sample that a float min_delta took for an improvement
    bites += any(b > a + f32 and not b - 0.01 > a for a, b in zip(h, h[1:]))
assert bites, "no val_accuracy rose by exactly min_delta: the check is weak"
PY
# A val_loss that is NaN every epoch (validation inputs of 3e38 overflow the
# logits) never improves. Keras 3 stops no earlier than its second epoch
# (`epoch > 0`), and with restore_best_weights keeps the first epoch's weights
# as the best and restores them. cohort stopped after the first and restored
# nothing.
$PY - "$T" "$(dirname "$0")" <<'PY' || bad "nan: could not write the data"
import sys, numpy as np
sys.path.insert(0, sys.argv[2])
from st_numpy import write_safetensors
d = sys.argv[1]
x = np.random.default_rng(0).standard_normal((16, 2)).astype(np.float32)
np.save(f"{d}/x.npy", x); np.save(f"{d}/y.npy", np.arange(16) % 2)
np.save(f"{d}/xv.npy", np.full((4, 2), 3e38, np.float32)); np.save(f"{d}/yv.npy", np.arange(4) % 2)
write_safetensors(f"{d}/init.safetensors", {"layers.0.weight": np.array([[1, 1], [1, 0.5]], np.float32),
                                            "layers.0.bias": np.zeros(2, np.float32)})
PY
cat > "$T/nan.yaml" <<YAML
data: {train: "npy:$T/x.npy,$T/y.npy", validation: "npy:$T/xv.npy,$T/yv.npy"}
defaults: {epochs: 5, batch_size: 8, shuffle: false, init_from: $T/init.safetensors,
           optimizer: {name: sgd, lr: 0.1}, layers: [{dense: 2, activation: softmax}]}
models:
  - {name: p0, early_stopping: {patience: 0}}
  - {name: p2, early_stopping: {patience: 2, restore_best_weights: true}}
  - {name: one, epochs: 1}
YAML
expect_status 0 "train nan" -- "$COHORT" train "$T/nan.yaml" --out "$T/nan" --quiet
$PY - "$T/nan" "$(dirname "$0")" <<'PY' && ok || bad "nan val_loss: not Keras's EarlyStopping"
import json, sys
sys.path.insert(0, sys.argv[2])
from st_numpy import read_safetensors
d = sys.argv[1]
m = {r["name"]: r for r in json.load(open(f"{d}/results.json"))["models"]}
assert m["p0"]["history"]["val_loss"][0] is None, m["p0"]["history"]
got = {k: (m[k]["epochs_run"], m[k]["stopped_early"], m[k]["restored_epoch"]) for k in ("p0", "p2")}
assert got == {"p0": (2, True, None), "p2": (2, True, 1)}, got
w = lambda k: read_safetensors(f"{d}/models/{k}.safetensors")["layers.0.weight"]
assert (w("p2") == w("one")).all() and (w("p0") != w("one")).any(), (w("p2"), w("one"), w("p0"))
PY
finish
