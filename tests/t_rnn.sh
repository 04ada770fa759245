#!/usr/bin/env bash
# The recurrent layers (lstm, gru) through cohort train: several LSTMs and GRUs
# of different learning rates, optimizers and seeds trained one at a time
# (sequential), side by side (threads) and in fused groups give the same
# weights bit for bit; a run killed with SIGKILL and resumed ends bit for bit
# as the uninterrupted one; a recurrent layer given a flat input (data or a
# layer without return_sequences), an image, 0 units, or sequences too long
# for the device's memory limit are refused at plan time with file:line,
# exit 2, nothing trained.
set -u
. "$(dirname "$0")/lib.sh"

"$PY" - "$T" <<'PY'
import sys
import numpy as np
r = np.random.default_rng(5)
x = r.standard_normal((240, 6, 3)).astype(np.float32)
y = (np.argmax(x[:, -3:, :].sum(axis=1), axis=1)).astype(np.int64)
np.save(f"{sys.argv[1]}/x.npy", x)
np.save(f"{sys.argv[1]}/y.npy", y)
np.save(f"{sys.argv[1]}/flat.npy", x.reshape(240, 18))
np.save(f"{sys.argv[1]}/long.npy", r.standard_normal((240, 3000, 3)).astype(np.float32))
PY
cat > "$T/plan.yaml" <<YAML
data: {train: "npy:$T/x.npy,$T/y.npy", validation_split: 0.25}
defaults:
  epochs: 3
  batch_size: 16
  layers: [{lstm: 8, return_sequences: true}, {lstm: 6}, {dense: 3, activation: softmax}]
models:
  - {name: l_a}
  - {name: l_b, optimizer: {name: adam, lr: 0.01}}
  - {name: l_c, optimizer: {name: adam, lr: 0.003}, seed: 7}
  - {name: l_sgd, optimizer: {name: sgd, lr: 0.1, momentum: 0.9}}
  - {name: g_a, layers: [{gru: 8}, {dense: 3, activation: softmax}]}
  - {name: g_b, layers: [{gru: 8}, {dense: 3, activation: softmax}], optimizer: {name: adam, lr: 0.02}}
  - {name: b_a, layers: [{bidirectional: {gru: 4, return_sequences: true}}, {bidirectional: {lstm: 3}}, {dense: 3, activation: softmax}]}
  - {name: b_b, layers: [{bidirectional: {gru: 4, return_sequences: true}}, {bidirectional: {lstm: 3}}, {dense: 3, activation: softmax}], optimizer: {name: adam, lr: 0.01}}
  # Batches of 40: the CPU runs a recurrence in chunks of 16 rows (the last of
  # 8), which the threads share out; fused, the two models' chunks side by side.
  - {name: c_a, batch_size: 40, layers: [{lstm: 20, return_sequences: true}, {gru: 17}, {dense: 3, activation: softmax}]}
  - {name: c_b, batch_size: 40, layers: [{lstm: 20, return_sequences: true}, {gru: 17}, {dense: 3, activation: softmax}], optimizer: {name: adam, lr: 0.01}}
  - {name: c_bi, batch_size: 40, layers: [{bidirectional: {lstm: 18}}, {dense: 3, activation: softmax}]}
YAML
MODELS="l_a l_b l_c l_sgd g_a g_b b_a b_b c_a c_b c_bi"

"$COHORT" train "$T/plan.yaml" --strategy sequential --threads 1 --out "$T/sequential" --quiet \
    >/dev/null 2>"$T/seq.err" && ok || bad "sequential run: $(cat "$T/seq.err")"
# fused1: one group per model shape on one core (--threads 1 keeps a CPU group
# whole); fused2: each group cut into a part per core.
for s in threads fused1 fused2; do
    n=2 strategy=$s
    case $s in fused*) n=${s#fused} strategy=fused ;; esac
    "$COHORT" train "$T/plan.yaml" --strategy $strategy --threads $n --out "$T/$s" --quiet \
        >/dev/null 2>"$T/$s.err" && ok || bad "$s run: $(cat "$T/$s.err")"
    for m in $MODELS; do
        cmp -s "$T/sequential/models/$m.safetensors" "$T/$s/models/$m.safetensors" && ok ||
            bad "$s: weights of $m differ from sequential"
    done
done
# fused1 did fuse: the three LSTMs under adam in one group (l_sgd alone: another
# optimizer), the two GRUs in another, the two bidirectional models in a third,
# the two batch-40 stacks in a fourth.
"$COHORT" plan "$T/plan.yaml" --strategy fused --threads 1 --json >"$T/groups.json" 2>&1
"$PY" - "$T/groups.json" "$T/fused1/results.json" <<'PY' && ok || bad "fused: the models did not form the groups expected"
import json, sys
groups = json.load(open(sys.argv[1]))["groups"]
assert sorted(len(g["models"]) for g in groups) == [1, 1, 2, 2, 2, 3], groups
for m in json.load(open(sys.argv[2]))["models"]:
    assert m["status"] == "ok" and m["planned_bytes"] == m["peak_bytes"], m
PY

# kill -9 mid-run, then --resume: the same weights as the run left alone.
"$COHORT" train "$T/plan.yaml" --strategy sequential --threads 1 --out "$T/killed" \
    --set defaults.epochs=6 --quiet >/dev/null 2>&1 &
pid=$!
# Killed once the first model has finished: the others are mid-run.
for _ in $(seq 200); do
    ls "$T/killed/models/"*.safetensors >/dev/null 2>&1 && break
    sleep 0.02
done
kill -9 $pid 2>/dev/null && ok || bad "kill -9: the run had ended before it (make it longer)"
wait $pid 2>/dev/null
"$COHORT" train "$T/plan.yaml" --strategy sequential --threads 1 --out "$T/killed" \
    --set defaults.epochs=6 --resume --quiet >/dev/null 2>"$T/resume.err" && ok ||
    bad "resume after kill -9: $(cat "$T/resume.err")"
"$COHORT" train "$T/plan.yaml" --strategy sequential --threads 1 --out "$T/whole" \
    --set defaults.epochs=6 --quiet >/dev/null 2>&1 && ok || bad "uninterrupted 6 epochs"
for m in $MODELS; do
    cmp -s "$T/whole/models/$m.safetensors" "$T/killed/models/$m.safetensors" && ok ||
        bad "kill -9 and --resume: weights of $m differ from the uninterrupted run's"
done

# On the emulated GPU (tests/cuda_emu: the CUDA plugin's own kernels on the CPU),
# fused groups op by op over the models: the CPU's weights to 1e-4.
EMU=${COHORT_BUILD:-build}/cuda-emu
if [ -f "$EMU/libcohort_cuda.so" ]; then
    COHORT_PLUGIN_DIR=$EMU "$COHORT" train "$T/plan.yaml" --strategy fused --out "$T/gpu" \
        --set defaults.device=gpu:0 --quiet >/dev/null 2>"$T/gpu.err" && ok ||
        bad "fused on the emulated gpu:0: $(cat "$T/gpu.err")"
    "$PY" - "$T/sequential" "$T/gpu" $MODELS <<'PY' && ok || bad "emulated gpu:0 against cpu:0"
import json, os, sys
sys.path.insert(0, os.path.join(os.environ.get("COHORT_SRC", "."), "tests"))
from st_numpy import read_safetensors
a, b, models = sys.argv[1], sys.argv[2], sys.argv[3:]
assert all(m["device"] == "gpu:0" for m in json.load(open(f"{b}/results.json"))["models"])
for m in models:
    wa, wb = read_safetensors(f"{a}/models/{m}.safetensors"), read_safetensors(f"{b}/models/{m}.safetensors")
    for k in wa:
        d = float(abs(wa[k].astype("f8") - wb[k].astype("f8")).max())
        assert d <= 1e-4, (m, k, d)
PY
else
    echo "$NAME: no $EMU/libcohort_cuda.so (COHORT_CUDA_EMU=OFF): the emulated GPU's run skipped"
fi

# Plan errors: file:line, exit 2, nothing trained.
refuse() { # NAME LINE FRAGMENT: plan $T/NAME.yaml refused at its line LINE saying FRAGMENT
    expect_status 2 "$1" -- "$COHORT" train "$T/$1.yaml" --out "$T/o_$1"
    expect_err "$1.yaml:$2:" "$1"
    expect_err "$3" "$1"
    [ ! -e "$T/o_$1" ] && ok || bad "$1: $T/o_$1 was made"
}
cat > "$T/last_step.yaml" <<YAML
data: {train: "npy:$T/x.npy,$T/y.npy"}
models:
  - name: m
    layers:
      - {lstm: 8}
      - {gru: 4}
      - {dense: 3, activation: softmax}
YAML
refuse last_step 6 "gru needs a sequence [steps, features], and gets a flat input (8): give the recurrent layer before it return_sequences: true"
cat > "$T/flat.yaml" <<YAML
data: {train: "npy:$T/flat.npy,$T/y.npy"}
models:
  - name: m
    layers: [{lstm: 8}, {dense: 3, activation: softmax}]
YAML
refuse flat 4 "lstm needs a sequence [steps, features], and gets a flat input (18)"
cat > "$T/units.yaml" <<YAML
data: {train: "npy:$T/x.npy,$T/y.npy"}
models:
  - name: m
    layers:
      - {gru: 0}
      - {dense: 3, activation: softmax}
YAML
refuse units 5 "gru units of layers.0"
cat > "$T/image.yaml" <<YAML
data: {train: "npy:$T/x.npy,$T/y.npy", input_shape: [6, 3, 1]}
models:
  - name: m
    layers: [{conv2d: 2, kernel_size: 2}, {lstm: 4}, {dense: 3, activation: softmax}]
YAML
refuse image 4 "lstm needs a sequence [steps, features], and gets an image"
cat > "$T/seqout.yaml" <<YAML
data: {train: "npy:$T/x.npy,$T/y.npy"}
models:
  - name: m
    layers: [{lstm: 4}, {dense: 3, activation: softmax}]
    optimizer: {name: adam}
  - name: bad_key
    layers: [{lstm: 4, activation: relu}, {dense: 3, activation: softmax}]
YAML
expect_status 2 "lstm with an activation" -- "$COHORT" plan "$T/seqout.yaml"
expect_err "seqout.yaml:7:" "lstm with an activation"
cat > "$T/bi_dense.yaml" <<YAML
data: {train: "npy:$T/x.npy,$T/y.npy"}
models:
  - name: m
    layers:
      - {bidirectional: {dense: 4}}
      - {dense: 3, activation: softmax}
YAML
refuse bi_dense 5 "unknown key 'dense' in the bidirectional layer of layers.0"
cat > "$T/bi_merge.yaml" <<YAML
data: {train: "npy:$T/x.npy,$T/y.npy"}
models:
  - name: m
    layers:
      - {bidirectional: {gru: 4}, merge_mode: sum}
      - {dense: 3, activation: softmax}
YAML
refuse bi_merge 5 "merge_mode of layers.0 of model 'm' is 'sum'; cohort's bidirectional concatenates"
cat > "$T/bi_flat.yaml" <<YAML
data: {train: "npy:$T/x.npy,$T/y.npy"}
models:
  - name: m
    layers:
      - {bidirectional: {lstm: 4}}
      - {bidirectional: {gru: 4}}
      - {dense: 3, activation: softmax}
YAML
refuse bi_flat 6 "bidirectional needs a sequence [steps, features], and gets a flat input (8)"
# A 2-D kind after a sequence: named a sequence (it said "flat samples"),
# with the 1-D kind to use.
for c in "max_pooling2d: 2|max_pooling2d needs images, but gets a sequence (6, 8); for sequences use max_pooling1d" \
         "global_average_pooling2d: {}|global_average_pooling2d needs images, but gets a sequence (6, 8); for sequences use global_average_pooling1d" \
         "conv2d: 4, kernel_size: 2|conv2d needs images, but gets a sequence (6, 8); for sequences use conv1d"; do
    printf 'data: {train: "npy:%s/x.npy,%s/y.npy"}\nmodels:\n  - name: m\n    layers:\n      - {lstm: 8, return_sequences: true}\n      - {%s}\n      - flatten\n      - {dense: 3, activation: softmax}\n' "$T" "$T" "${c%%|*}" > "$T/seq2d.yaml"
    refuse seq2d 6 "${c#*|}"
done
# T too long for the memory limit: the LSTM keeps each step's gates and
# state for the backward pass, so its plan grows with T. The same model fits
# 2 MiB at 6 steps and not at 3000; that run is refused at the model's line.
for steps in x long; do
    cat > "$T/mem_$steps.yaml" <<YAML
data: {train: "npy:$T/$steps.npy,$T/y.npy"}
devices: {cpu:0: {memory_limit: 2MiB}}
defaults: {batch_size: 16}
models:
  - name: m
    layers: [{lstm: 8}, {dense: 3, activation: softmax}]
YAML
done
expect_status 0 "6 steps in 2 MiB" -- "$COHORT" plan "$T/mem_x.yaml"
refuse mem_long 5 "no model can be trained: model 'm' needs"
expect_err "but cpu:0 has a limit of 2.00 MiB" "mem_long"
finish
