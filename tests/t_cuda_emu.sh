#!/usr/bin/env bash
# Whole `cohort train` runs on the emulated GPU (tests/cuda_emu: the CUDA
# plugin's own sources run on the CPU), each against the same plan on cpu:0:
# a fused group of dense models with dropout; a fused group of CNNs with batch
# normalization; a GPU split into two logical devices with preallocated slabs,
# under threads and under processes; a preallocated slab at the default limit
# beside three contexts (the headroom kept out of a GPU's limit), and under
# processes a slab per worker of its group's size; a
# memory_limit above the free memory, lowered with a warning; a model too
# large for the GPU. Work is
# queued until the host waits for it (COHORT_EMU_DEFERRED=1), so a missing
# synchronization changes the weights. Also the reasons `cohort devices` gives
# for an old driver, no GPU and no driver, and that the core links no CUDA.
set -u
. "$(dirname "$0")/lib.sh"
EMU=${COHORT_BUILD:-build}/cuda-emu
[ -f "$EMU/libcohort_cuda.so" ] || { bad "no $EMU/libcohort_cuda.so: the CUDA emulation was not built (COHORT_CUDA_EMU=OFF?)"; finish; }
# The processes of a run share the emulated GPUs' memory, as on a real GPU.
export COHORT_PLUGIN_DIR=$EMU COHORT_EMU_DEFERRED=1 COHORT_EMU_SHARED_MEM=$T/gpu.mem
"$PY" -c "import numpy" 2>/dev/null || { bad "numpy missing"; finish; }

# compare DIR_A DIR_B TOL MODELS...: each model's weights within TOL of the
# other run's, and each epoch's val_loss within TOL relative.
compare() {
    "$PY" - "$@" <<'PYEOF'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["COHORT_SRC"], "tests"))
from st_numpy import read_safetensors
a, b, tol, models = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
ra = {m["name"]: m for m in json.load(open(f"{a}/results.json"))["models"]}
rb = {m["name"]: m for m in json.load(open(f"{b}/results.json"))["models"]}
bad = []
for m in models:
    if ra[m]["status"] != "ok" or rb[m]["status"] != "ok":
        bad.append(f"{m}: status {ra[m]['status']} / {rb[m]['status']}")
        continue
    wa, wb = read_safetensors(f"{a}/models/{m}.safetensors"), read_safetensors(f"{b}/models/{m}.safetensors")
    for k in wa:
        d = float(abs(wa[k].astype("f8") - wb[k].astype("f8")).max())
        if not d <= tol:
            bad.append(f"{m}: {k} differs by {d:.3g}")
    for la, lb in zip(ra[m]["history"]["val_loss"], rb[m]["history"]["val_loss"]):
        if not abs(la - lb) <= tol * max(1.0, abs(la)):
            bad.append(f"{m}: val_loss {lb} against {la}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PYEOF
}

# run WHAT DIR ARGS...: cohort train, which must succeed.
run() {
    local what=$1 dir=$2
    shift 2
    "$COHORT" train "$@" --out "$dir" --quiet >"$T/run.out" 2>"$T/run.err" && ok ||
        bad "$what: exit $?: $(head -c 800 "$T/run.err") $(tail -5 "$T/run.out")"
}

# ---- discovery --------------------------------------------------------------------
"$COHORT" devices >"$T/dev" 2>&1
grep -q "^gpu:0 .*cohort CUDA emulation" "$T/dev" && ok || bad "devices: no emulated gpu:0: $(cat "$T/dev")"
COHORT_EMU_DRIVER=12080 "$COHORT" devices >"$T/dev" 2>&1
grep -qF "no GPU: the NVIDIA driver supports CUDA 12.8, older than the CUDA 13.0 this plugin was built with" "$T/dev" &&
    ok || bad "devices with an old driver: $(cat "$T/dev")"
COHORT_EMU_GPUS=0 "$COHORT" devices >"$T/dev" 2>&1
grep -qF "no GPU: no GPU visible (CUDA_VISIBLE_DEVICES=unset)" "$T/dev" && ok || bad "devices with no GPU: $(cat "$T/dev")"
COHORT_EMU_NO_DRIVER=1 "$COHORT" devices >"$T/dev" 2>&1
grep -qF "no GPU: libcuda.so.1 not found: no NVIDIA driver" "$T/dev" && ok || bad "devices without a driver: $(cat "$T/dev")"
if ldd "$COHORT" | grep -Eq 'libcuda|libcudart|libcublas|cohort_cuda'; then bad "the cohort binary links CUDA"; else ok; fi

# ---- a fused group of dense models -------------------------------------------------
awk 'BEGIN { srand(5); for (i = 0; i < 480; i++) { c = i % 3; line = "";
    for (j = 0; j < 12; j++) { v = rand() - 0.5 + (j % 3 == c ? 0.5 : 0); line = line v "," }
    print line c } }' >"$T/d.csv"
head -n 96 "$T/d.csv" >"$T/t.csv"
cat >"$T/dense.yaml" <<YAML
data: {train: csv:$T/d.csv, test: csv:$T/t.csv, validation_split: 0.2}
defaults: {epochs: 2, batch_size: 32, layers: [{dense: 16, activation: relu}, {dropout: 0.2}, {dense: 3, activation: softmax}]}
models:
  - {name: d_adam}
  - {name: d_seed, seed: 2, optimizer: {name: adam, lr: 0.003}}
  - {name: d_sgd, seed: 3, optimizer: {name: sgd, lr: 0.05, momentum: 0.9}}
strategy: fused
YAML
run "dense on gpu:0" "$T/dense_gpu" "$T/dense.yaml" --set defaults.device=gpu:0
run "dense on cpu:0" "$T/dense_cpu" "$T/dense.yaml" --set defaults.device=cpu:0
compare "$T/dense_cpu" "$T/dense_gpu" 1e-3 d_adam d_seed d_sgd >"$T/cmp" && ok || bad "dense: gpu:0 against cpu:0: $(cat "$T/cmp")"
grep -q '"device": "gpu:0"' "$T/dense_gpu/results.json" && ok || bad "dense: the models did not run on gpu:0"

# ---- a fused group of CNNs with batch normalization ----------------------------------
"$PY" - "$T" <<'PYEOF' || bad "making the images"
import numpy as np, sys
r = np.random.default_rng(3)
y = (np.arange(192) % 4).astype(np.int32)
x = r.normal(0, 0.5, (192, 8, 8, 1)).astype(np.float32)
for i, c in enumerate(y):
    a, b = divmod(int(c), 2)
    x[i, 4 * a:4 * a + 3, 4 * b:4 * b + 3, 0] += 1.0
np.save(f"{sys.argv[1]}/x.npy", x)
np.save(f"{sys.argv[1]}/y.npy", y)
PYEOF
cat >"$T/cnn.yaml" <<YAML
data: {train: "npy:$T/x.npy,$T/y.npy", validation_split: 0.25}
defaults:
  epochs: 1
  batch_size: 32
  layers: [{conv2d: 6, kernel_size: 3, padding: same, use_bias: false}, batch_normalization,
           {activation: relu}, {max_pooling2d: 2}, flatten, {dropout: 0.25}, {dense: 4, activation: softmax}]
models:
  - {name: c_adam}
  - {name: c_sgd, seed: 2, optimizer: {name: sgd, lr: 0.05, momentum: 0.9}}
strategy: fused
YAML
run "cnn on gpu:0" "$T/cnn_gpu" "$T/cnn.yaml" --set defaults.device=gpu:0
run "cnn on cpu:0" "$T/cnn_cpu" "$T/cnn.yaml" --set defaults.device=cpu:0
compare "$T/cnn_cpu" "$T/cnn_gpu" 1e-3 c_adam c_sgd >"$T/cmp" && ok || bad "cnn: gpu:0 against cpu:0: $(cat "$T/cmp")"

# ---- a GPU split in two, preallocated, under threads and processes ---------------------
cat >"$T/split.yaml" <<YAML
data: {train: csv:$T/d.csv, test: csv:$T/t.csv, validation_split: 0.2}
defaults: {epochs: 2, batch_size: 32, layers: [{dense: 16, activation: relu}, {dense: 3, activation: softmax}]}
models:
  - {name: s_a, device: "gpu:0/0"}
  - {name: s_b, seed: 2, device: "gpu:0/1"}
  - {name: s_c, seed: 3, device: "gpu:0/0", optimizer: {name: sgd, lr: 0.05, momentum: 0.9}}
  - {name: s_d, seed: 4, device: "gpu:0/1", layers: [{dense: 32, activation: tanh}, {dense: 3, activation: softmax}]}
devices:
  gpu:0: {split: [16MiB, 16MiB], memory: preallocate}
YAML
sed 's/"gpu:0\/[01]"/"cpu:0"/; /^devices:/,$d' "$T/split.yaml" >"$T/split_cpu.yaml"
run "split on cpu:0" "$T/split_cpu" "$T/split_cpu.yaml" --strategy sequential
for s in threads processes; do
    run "split gpu:0 under $s" "$T/split_$s" "$T/split.yaml" --strategy $s
    compare "$T/split_cpu" "$T/split_$s" 1e-3 s_a s_b s_c s_d >"$T/cmp" && ok || bad "split under $s: against cpu:0: $(cat "$T/cmp")"
done

# ---- preallocate at the default limit ---------------------------------------------------
# The slab takes the whole default limit; three contexts (threads) then take
# their cuBLAS workspaces and byte buffers beside it: the headroom kept out of
# the limit is what lets them start.
cat >"$T/prealloc.yaml" <<YAML
data: {train: csv:$T/d.csv, validation_split: 0.2}
defaults: {epochs: 1, batch_size: 32, device: "gpu:0", layers: [{dense: 16, activation: relu}, {dense: 3, activation: softmax}]}
models:
  - {name: p_a}
  - {name: p_b, seed: 2}
  - {name: p_c, seed: 3}
devices:
  gpu:0: {memory: preallocate}
YAML
run "preallocate at the default limit, threads" "$T/prealloc" "$T/prealloc.yaml" --strategy threads
# What the GPU holds beside the models is in cohort plan's numbers: each job's
# context (cuBLAS's workspace and the reductions' scratch, from the pool: a
# sixty-fourth of the emulated GPU's 128 MiB, 2 MiB) and, under processes,
# each worker's own CUDA context (a sixteenth, 8 MiB).
"$COHORT" plan "$T/prealloc.yaml" --strategy threads >"$T/plan" 2>&1
grep -qE "^  gpu:0 .* 3 models, .* in all, .* with their contexts \(3 x 2\.00 MiB: cuBLAS's workspace" "$T/plan" &&
    ok || bad "plan under threads: no contexts counted: $(grep gpu:0 "$T/plan")"
"$COHORT" plan "$T/prealloc.yaml" --strategy processes --json >"$T/plan.json" 2>"$T/plan.err"
"$PY" - "$T/plan.json" <<'PYEOF' && ok || bad "plan --json under processes: $(cat "$T/plan.err")"
import json, sys
d = {x["name"]: x for x in json.load(open(sys.argv[1]))["devices"]}["gpu:0"]
assert d["context_bytes"] == 3 * (2 << 20) + 3 * (8 << 20), d
PYEOF
"$COHORT" plan "$T/prealloc.yaml" --strategy processes >"$T/plan" 2>&1
grep -qF "and their workers' CUDA contexts (3 x 8.00 MiB, each while its job runs)" "$T/plan" &&
    ok || bad "plan under processes: no worker contexts counted: $(grep gpu:0 "$T/plan")"
# A limit of exactly the plan's bytes with their contexts (under preallocate,
# one slab of them): three contexts side by side fit in it, and train.
"$PY" - "$T" "$COHORT" <<'PYEOF' || bad "the plan's bytes"
import json, subprocess, sys
t = sys.argv[1]
p = json.loads(subprocess.run([sys.argv[2], "plan", f"{t}/prealloc.yaml", "--strategy", "threads", "--json"],
                              check=True, capture_output=True, text=True).stdout)
d = {x["name"]: x for x in p["devices"]}["gpu:0"]
open(f"{t}/exact.yaml", "w").write(open(f"{t}/prealloc.yaml").read().replace(
    "{memory: preallocate}", "{memory: preallocate, memory_limit: %d}" % (d["planned_bytes"] + d["context_bytes"])))
PYEOF
run "preallocate of exactly the plan with its contexts, threads" "$T/exact" "$T/exact.yaml" --strategy threads
"$PY" - "$T/exact/results.json" <<'PYEOF' && ok || bad "exact slab: not every model ok"
import json, sys
ms = json.load(open(sys.argv[1]))["models"]
assert len(ms) == 3 and all(m["status"] == "ok" for m in ms), [(m["name"], m["status"]) for m in ms]
PYEOF
# Under processes each worker takes its own slab: of its group's size, not the
# whole limit again (two of the three workers ran out of memory).
run "preallocate at the default limit, processes" "$T/prealloc_p" "$T/prealloc.yaml" --strategy processes
# A memory_limit above what the GPU can give is lowered to it, saying so.
sed 's/{memory: preallocate}/{memory: preallocate, memory_limit: 120MiB}/' "$T/prealloc.yaml" >"$T/limit.yaml"
expect_status 0 "memory_limit above the free memory" -- "$COHORT" train "$T/limit.yaml" --out "$T/limit" --strategy threads --quiet
expect_err "gpu:0: memory_limit 120.00 MiB is more than the 108.50 MiB it can give (124.00 MiB free at discovery, less 15.50 MiB for CUDA's own use)" \
    "memory_limit above the free memory"

# ---- out of memory -------------------------------------------------------------------------
# 6 MiB, 4 of them the context's and an eighth of the rest kept out of the limit: a model
# of about 4.5 MiB does not fit in the 1.75 MiB left, and
# the plan says so before anything trains.
cat >"$T/big.yaml" <<YAML
data: {train: csv:$T/d.csv, validation_split: 0.2}
defaults: {epochs: 1, batch_size: 32, device: "gpu:0"}
models:
  - {name: big, layers: [{dense: 256, activation: relu}, {dense: 1024, activation: relu}, {dense: 3, activation: softmax}]}
YAML
COHORT_EMU_GPU_MEM=6M expect_status 2 "a model larger than the GPU" -- "$COHORT" train "$T/big.yaml" --out "$T/big" --quiet
expect_err "model 'big' needs" "a model larger than the GPU"
expect_err "but gpu:0 has a limit of 1.75 MiB" "a model larger than the GPU"

finish
