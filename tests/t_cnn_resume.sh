#!/usr/bin/env bash
# Never lose work, for CNNs with batch normalization: a run killed with
# SIGKILL (just after its first checkpoint, and half way) or stopped with
# SIGTERM (a checkpoint in the middle of an epoch) and resumed ends with the
# weights (moving means and variances included) and results of a run never
# interrupted, bit for bit. The kills wait for the run's own progress (its
# checkpoint and history files: lib.sh's wait_run).
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }
"$PY" -c "import numpy" 2>/dev/null || { echo "$NAME: numpy missing; skipped"; exit 77; }

# 12 x 12 x 2 images, 3 classes: a bright patch on channel c % 2 in one of
# three places, over noise. NPY [n, 12, 12, 2] float32.
"$PY" - "$T" <<'PYEOF' || { bad "making the images"; finish; }
import numpy as np, sys
r = np.random.default_rng(3)
def make(n, stem):
    y = (np.arange(n) % 3).astype(np.int32)
    x = r.normal(0, 0.7, (n, 12, 12, 2)).astype(np.float32)
    for i, c in enumerate(y):
        u = 1 + 4 * int(c) + r.integers(0, 2)
        x[i, u:u + 3, 3:8, int(c) % 2] += 1.0
    np.save(f"{sys.argv[1]}/{stem}_x.npy", x)
    np.save(f"{sys.argv[1]}/{stem}_y.npy", y)
make(720, "train")
make(120, "test")
PYEOF
epochs=8
cat > "$T/plan.yaml" <<YAML
data: {train: "npy:$T/train_x.npy,$T/train_y.npy", test: "npy:$T/test_x.npy,$T/test_y.npy", validation_split: 0.2}
defaults:
  epochs: $epochs
  batch_size: 16
  layers:
    - {conv2d: 8, kernel_size: 3, padding: same, use_bias: false}
    - {batch_normalization: {momentum: 0.9}}
    - {activation: relu}
    - {max_pooling2d: 2}
    - flatten
    - {dropout: 0.3}
    - {dense: 3, activation: softmax}
models:
  - {name: adam}
  - {name: sgd, seed: 2, optimizer: {name: sgd, lr: 0.05, momentum: 0.9, nesterov: true}}
  - name: best
    seed: 3
    early_stopping: {monitor: val_loss, patience: 2, restore_best_weights: true}
    layers:
      - {conv2d: 6, kernel_size: 3, strides: 2, use_bias: false}
      - batch_normalization
      - {activation: tanh}
      - global_average_pooling2d
      - batch_normalization
      - {dense: 3, activation: softmax}
YAML
models="adam sgd best"

same_as_ref() { # same_as_ref DIR WHAT
    same_run "$T/ref" "$1" "$2" best test epochs_run stopped_early confusion
}

"$COHORT" train "$T/plan.yaml" --out "$T/ref" --quiet >/dev/null 2>"$T/ref.err" && ok || bad "reference run: $(cat "$T/ref.err")"
# The reference must train long enough to be interrupted, and batch
# normalization must have moved its statistics.
"$PY" - "$T/ref" <<'PYEOF' && ok || bad "reference run: too short, or the moving statistics did not move"
import json, struct, sys
import numpy as np
r = json.load(open(sys.argv[1] + "/results.json"))
for m in r["models"]:
    assert m["status"] == "ok" and m["epochs_run"] >= 4, (m["name"], m["status"], m["epochs_run"])
    f = open(f"{sys.argv[1]}/models/{m['name']}.safetensors", "rb").read()
    n = struct.unpack("<Q", f[:8])[0]
    head = json.loads(f[8:8 + n])
    a, b = head["layers.1.running_var"]["data_offsets"]
    var = np.frombuffer(f[8 + n + a:8 + n + b], dtype=np.float32)
    assert np.abs(var - 1).max() > 1e-3, (m["name"], var)
PYEOF

# SIGKILL once the first checkpoint is on disk, and once half the epochs are done.
killed=0
for point in first half; do
    kill_resume same_as_ref "$T/kill-$point" $point $epochs "$T/plan.yaml"
done
[ $killed -eq 2 ] && ok || bad "only $killed of 2 kills hit a running process (the run ended first)"

# SIGTERM: the step ends, a checkpoint is written (mid-epoch, as a rule), exit 130.
d="$T/term"
"$COHORT" train "$T/plan.yaml" --out "$d" --quiet >/dev/null 2>&1 &
pid=$!
wait_run $pid "$d" 2
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 130 ] && ok || bad "SIGTERM: exit $rc, wanted 130"
"$COHORT" train "$T/plan.yaml" --out "$d" --resume --quiet >/dev/null 2>"$d.err" && ok || bad "resume after SIGTERM: $(cat "$d.err")"
same_as_ref "$d" "SIGTERM"

finish "($killed runs killed with SIGKILL and resumed)"
