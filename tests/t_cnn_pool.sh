#!/usr/bin/env bash
# A convolution followed by max pooling runs as one pass on the CPU backend
# for a single model (conv_fwd_pool, conv_wgrad_pool: each chunk of images
# pooled, and its gradient scattered back, while in cache), and as the
# separate batched ops for a group of models (strategy fused). Both must
# give the same weights and histories, bit for bit, on one thread and two:
# here with a 2 x 2 pool over an odd size (13 -> 6: the last row and column
# untouched), a 3 x 3 `same` pool at stride 2 (the general window), relu and
# tanh (derivatives from the output), with and without a bias.
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }
"$PY" -c "import numpy" 2>/dev/null || { echo "$NAME: numpy missing; skipped"; exit 77; }

# 15 x 15 x 2 images, 3 classes: a bright 3 x 3 patch in the class's third of
# the rows, in one channel or the other, over noise. NPY [n, 15, 15, 2].
"$PY" - "$T" <<'PYEOF' || { bad "making the images"; finish; }
import numpy as np, sys
r = np.random.default_rng(11)
def make(n, stem):
    y = (np.arange(n) % 3).astype(np.int32)
    x = r.normal(0, 0.5, (n, 15, 15, 2)).astype(np.float32)
    for i, c in enumerate(y):
        u, v = 5 * int(c) + r.integers(0, 3), r.integers(0, 12)
        x[i, u:u + 3, v:v + 3, i % 2] += 1.5
    np.save(f"{sys.argv[1]}/{stem}_x.npy", x)
    np.save(f"{sys.argv[1]}/{stem}_y.npy", y)
make(384, "train")
make(96, "test")
PYEOF
cat > "$T/plan.yaml" <<YAML
data:
  train: npy:$T/train_x.npy,$T/train_y.npy
  test: npy:$T/test_x.npy,$T/test_y.npy
  validation_split: 0.25
defaults:
  epochs: 2
  batch_size: 64
  layers: [{conv2d: 16, kernel_size: 3, activation: relu}, {max_pooling2d: 2},
           {conv2d: 16, kernel_size: 3, activation: tanh, use_bias: false},
           {max_pooling2d: 3, strides: 2, padding: same}, flatten, {dense: 3, activation: softmax}]
models:
  - {name: p_base}
  - {name: p_lr, seed: 2, optimizer: {name: adam, lr: 0.003}}
YAML
models="p_base p_lr"

"$COHORT" train "$T/plan.yaml" --strategy sequential --threads 1 --out "$T/ref" --quiet >/dev/null 2>"$T/ref.err" && ok || bad "sequential run: $(cat "$T/ref.err")"
"$PY" - "$T/ref" <<'PYEOF' && ok || bad "reference run: the models did not learn"
import json, sys
r = json.load(open(sys.argv[1] + "/results.json"))
assert max(m["history"]["val_accuracy"][-1] for m in r["models"]) > 0.5, r["models"]
PYEOF
# fused: one group of both models, the batched ops (no fused pass); the
# others run each model alone, through the fused pass, on one core or two.
for v in "sequential 2" "threads 2" "fused 1"; do
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
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
for n in a:
    for k in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert a[n]["history"][k] == b[n]["history"][k], (n, k, a[n]["history"][k], b[n]["history"][k])
    assert a[n]["test"] == b[n]["test"], (n, a[n]["test"], b[n]["test"])
    assert b[n]["planned_bytes"] == b[n]["peak_bytes"], (n, b[n]["planned_bytes"], b[n]["peak_bytes"])
PYEOF
done

finish
