#!/usr/bin/env bash
# Convolutional models keep the strategies' guarantee: four same-shaped CNNs
# (conv without bias, batch normalization, relu, max pooling, conv, flatten,
# dropout, dense softmax) that differ in learning rate, seed, dropout rate
# and batch-norm momentum give the same weights (moving statistics included)
# and the same histories, bit for bit, under sequential (one and two threads
# in the CPU context), threads, processes and fused (one group of four, or
# two of two); `cohort plan` shows each layer's output shape and the groups.
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }
"$PY" -c "import numpy" 2>/dev/null || { echo "$NAME: numpy missing; skipped"; exit 77; }

# 16 x 16 x 1 images, 4 classes: a bright 4 x 4 patch, jittered by up to one
# pixel, in the quadrant of the class, over noise. NPY [n, 16, 16, 1] float32.
"$PY" - "$T" <<'PYEOF' || { bad "making the images"; finish; }
import numpy as np, sys
r = np.random.default_rng(7)
def make(n, stem):
    y = (np.arange(n) % 4).astype(np.int32)
    x = r.normal(0, 0.6, (n, 16, 16, 1)).astype(np.float32)
    for i, c in enumerate(y):
        a, b = divmod(int(c), 2)
        u, v = 8 * a + 2 + r.integers(-1, 2), 8 * b + 2 + r.integers(-1, 2)
        x[i, u:u + 4, v:v + 4, 0] += 1.0
    np.save(f"{sys.argv[1]}/{stem}_x.npy", x)
    np.save(f"{sys.argv[1]}/{stem}_y.npy", y)
make(600, "train")
make(160, "test")
PYEOF
# layers MOMENTUM DROPOUT
layers() {
    echo "[{conv2d: 16, kernel_size: 3, padding: same, use_bias: false}," \
        "{batch_normalization: {momentum: $1}}, {activation: relu}, {max_pooling2d: 2}," \
        "{conv2d: 8, kernel_size: 3, activation: relu}, flatten, {dropout: $2}," \
        "{dense: 4, activation: softmax}]"
}
cat > "$T/plan.yaml" <<YAML
data:
  train: npy:$T/train_x.npy,$T/train_y.npy
  test: npy:$T/test_x.npy,$T/test_y.npy
  validation_split: 0.2
defaults:
  epochs: 2
  batch_size: 32
  layers: $(layers 0.99 0.25)
models:
  - {name: c_base}
  - {name: c_lr, seed: 2, optimizer: {name: adam, lr: 0.003}}
  - {name: c_drop, seed: 3, layers: $(layers 0.99 0.5)}
  - {name: c_mom, seed: 4, layers: $(layers 0.9 0.25)}
YAML
models="c_base c_lr c_drop c_mom"

# cohort plan: each layer with its output shape, as text and as JSON.
"$COHORT" plan "$T/plan.yaml" > "$T/plan.txt" 2>&1 && ok || bad "plan: $(cat "$T/plan.txt")"
for want in "layers.0  conv2d  * -> (16, 16, 16) " "layers.1  batch_normalization  * -> (16, 16, 16) " \
            "layers.3  max_pooling2d  * -> (8, 8, 16) " "layers.4  conv2d  * -> (6, 6, 8) " \
            "layers.5  flatten  * -> (288) " "layers.6  dropout  * -> (288) " \
            "layers.7  dense  * -> (4) "; do
    [ "$(grep -c -- "$want" "$T/plan.txt")" -eq 4 ] && ok || bad "plan: no line '$want' for each model: $(cat "$T/plan.txt")"
done
for n in 1 2; do
    "$COHORT" plan "$T/plan.yaml" --strategy fused --threads $n --json > "$T/groups-$n.json" 2>&1 && ok || bad "plan --json --threads $n: $(cat "$T/groups-$n.json")"
done
"$PY" - "$T/groups-1.json" "$T/groups-2.json" <<'PYEOF' && ok || bad "plan --json: layers or groups"
import json, sys
one, two = (json.load(open(p)) for p in sys.argv[1:3])
shapes = [[16, 16, 16], [16, 16, 16], [16, 16, 16], [8, 8, 16], [6, 6, 8], [288], [288], [4]]
kinds = ["conv2d", "batch_normalization", "activation", "max_pooling2d", "conv2d", "flatten",
         "dropout", "dense"]
params = [16 * 9, 2 * 16, 0, 0, 8 * 16 * 9 + 8, 0, 0, 288 * 4 + 4]
for m in one["models"]:
    assert [l["output_shape"] for l in m["layers"]] == shapes, (m["name"], m["layers"])
    assert [l["kind"] for l in m["layers"]] == kinds, (m["name"], m["layers"])
    assert [l["params"] for l in m["layers"]] == params, (m["name"], m["layers"])
    assert m["layers"][1]["state"] == 2 * 16, m["layers"][1]
    # as Keras's total: the moving statistics count
    assert m["params"] == sum(params) + 2 * 16, m["params"]
# Same shapes and optimizer: one group on one thread; on two, a part per thread.
g1 = [sorted(g["models"]) for g in one["groups"]]
assert g1 == [["c_base", "c_drop", "c_lr", "c_mom"]], g1
g2 = sorted(sorted(g["models"]) for g in two["groups"])
assert [len(g) for g in g2] == [2, 2] and sorted(sum(g2, [])) == ["c_base", "c_drop", "c_lr", "c_mom"], g2
PYEOF

# The reference: sequential, one thread. Then each other way to run it.
"$COHORT" train "$T/plan.yaml" --strategy sequential --threads 1 --out "$T/ref" --quiet >/dev/null 2>"$T/ref.err" && ok || bad "sequential run: $(cat "$T/ref.err")"
"$PY" - "$T/ref" <<'PYEOF' && ok || bad "reference run: the models did not learn, or batch normalization's moving statistics did not move"
import json, struct, sys
import numpy as np
r = json.load(open(sys.argv[1] + "/results.json"))
best = max(m["history"]["val_accuracy"][-1] for m in r["models"])
assert best > 0.6, best
for m in r["models"]:
    f = open(f"{sys.argv[1]}/models/{m['name']}.safetensors", "rb").read()
    n = struct.unpack("<Q", f[:8])[0]
    head = json.loads(f[8:8 + n])
    def get(t):
        a, b = head[t]["data_offsets"]
        return np.frombuffer(f[8 + n + a:8 + n + b], dtype=np.float32)
    mean, var = get("layers.1.running_mean"), get("layers.1.running_var")
    assert mean.shape == (16,) and np.abs(mean).max() > 1e-3, (m["name"], mean)
    assert np.abs(var - 1).max() > 1e-3, (m["name"], var)
    assert "layers.0.bias" not in head and head["layers.0.weight"]["shape"] == [16, 1, 3, 3], head
PYEOF
# Threads and fused on two threads give each job one core of two; processes
# get --threads 1 so that no worker is given both; sequential --threads 2
# lends the CPU context two threads to split one model's products and
# windows (large enough here: 32 images of 16 x 16 x 16 floats).
for v in "sequential 2" "threads 2" "processes 1" "fused 1" "fused 2"; do
    set -- $v
    d="$T/$1-$2"
    "$COHORT" train "$T/plan.yaml" --strategy $1 --threads $2 --out "$d" --quiet >/dev/null 2>"$d.err" && ok || bad "$1 --threads $2 run: $(cat "$d.err")"
    for m in $models; do
        cmp -s "$T/ref/models/$m.safetensors" "$d/models/$m.safetensors" && ok || bad "$1 --threads $2: weights of $m differ from sequential --threads 1"
    done
    "$PY" - "$T/ref/results.json" "$d/results.json" "$1" <<'PYEOF' && ok || bad "$1 --threads $2: results differ from sequential --threads 1"
import json, sys
ra, rb = (json.load(open(p)) for p in sys.argv[1:3])
assert rb["strategy"] == sys.argv[3], rb["strategy"]
a = {m["name"]: m for m in ra["models"]}
b = {m["name"]: m for m in rb["models"]}
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
for n in a:
    assert b[n]["status"] == "ok", (n, b[n]["status"], b[n]["error"])
    for k in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert a[n]["history"][k] == b[n]["history"][k], (n, k, a[n]["history"][k], b[n]["history"][k])
    for k in ("test", "best", "confusion"):
        assert a[n][k] == b[n][k], (n, k, a[n][k], b[n][k])
    assert b[n]["planned_bytes"] == b[n]["peak_bytes"], (n, b[n]["planned_bytes"], b[n]["peak_bytes"])
PYEOF
done

finish
