#!/usr/bin/env bash
# cohort export WEIGHTS --format onnx: the ONNX files of an MLP of flat data, of a CNN with
# every layer kind (residual blocks of both: an Add) and of every sequence kind (token ids with
# padding before, after and between the tokens, masked and not; real-valued sequences) pass
# onnx.checker and predict in onnxruntime (scripts/pyenv test) what `cohort predict` prints, to
# 1e-5; bad input is exit status 2 naming what, nothing written.
# Runs under the sanitizers too (the writer is C; Python only reads the files).
set -u
. "$(dirname "$0")/lib.sh"
SRC=${COHORT_SRC:-$(dirname "$0")/..}

blobs 3 400 0.8
"$PY" - "$T" <<'PYEOF'
import sys, numpy as np
rng = np.random.default_rng(7)
y = rng.integers(0, 3, 300)
x = rng.normal(0, 0.3, (300, 9, 8, 2)).astype(np.float32)
for c in range(3):  # class c: a bright square in its own place
    x[y == c, 2 * c:2 * c + 3, c:c + 3, c % 2] += 1.0
np.save(f"{sys.argv[1]}/x.npy", x)
np.save(f"{sys.argv[1]}/y.npy", y.astype(np.int64))
PYEOF
cat > "$T/plan.yaml" <<YAML
defaults: {epochs: 2, batch_size: 30}
models:
  - name: cnn
    layers:
      - {conv2d: 4, kernel_size: 3, padding: same, activation: relu}
      - batch_normalization
      - {max_pooling2d: 2, strides: 1, padding: same}
      - {conv2d: 5, kernel_size: [3, 2], strides: 2, use_bias: false}
      - {activation: tanh}
      - {average_pooling2d: 2, padding: same}
      - flatten
      - batch_normalization
      - {dropout: 0.2}
      - {dense: 3, activation: softmax}
  - name: gap
    layers: [{conv2d: 3, kernel_size: 3, activation: sigmoid}, global_average_pooling2d,
             {dense: 3, activation: softmax}]
  - name: resconv
    layers: [{conv2d: 3, kernel_size: 3, padding: same, activation: relu},
             {residual: [{conv2d: 4, kernel_size: 3, padding: same, activation: relu},
                         {conv2d: 3, kernel_size: 1}]},
             global_average_pooling2d, {dense: 3, activation: softmax}]
data: {train: "npy:$T/x.npy,$T/y.npy"}
YAML
cat > "$T/mlp.yaml" <<YAML
data: {train: csv:$T/train.csv}
defaults: {epochs: 2, batch_size: 20}
models:
  - {name: mlp, layers: [{dense: 8, activation: relu}, batch_normalization, {dense: 3, activation: softmax}]}
  - {name: logits, loss: {name: sparse_categorical_crossentropy, from_logits: true},
     layers: [{dense: 6, activation: sigmoid}, {dense: 3}]}
  - {name: resmlp, layers: [{dense: 8, activation: tanh}, {residual: [{dense: 12, activation: relu},
     {dropout: 0.1}, {dense: 8}]}, {residual: [{activation: relu}]}, {dense: 3, activation: softmax}]}
YAML
expect_status 0 "train the CNNs" -- "$COHORT" train "$T/plan.yaml" --out "$T/img" --quiet
expect_status 0 "train the MLPs" -- "$COHORT" train "$T/mlp.yaml" --out "$T/flat" --quiet

ONNXPY=$("$SRC/scripts/pyenv" test) || { bad "scripts/pyenv test"; finish; }
check_model() { # WEIGHTS DATA X_NPY: export, then onnx.checker and onnxruntime against cohort predict
    local w=$1 data=$2 x=$3 m
    m=$(basename "$w" .safetensors)
    expect_status 0 "export $m" -- "$COHORT" export "$w" --format onnx --out "$T/$m.onnx"
    expect_status 0 "predict $m" -- "$COHORT" predict "$w" --data "$data" --out "$T/$m.csv"
    expect_status 0 "onnx $m" -- "$ONNXPY" - "$T/$m.onnx" "$T/$m.csv" "$x" <<'PYEOF'
import sys, numpy as np, onnx, onnxruntime as ort
path, csv, xs = sys.argv[1:]
model = onnx.load(path)
onnx.checker.check_model(model, full_check=True)
assert model.opset_import[0].version >= 17
read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
made = [o for n in model.graph.node for o in n.output if o] + [t.name for t in model.graph.initializer]
unread = [v for v in made if v not in read]
assert not unread, f"values nothing reads: {unread}"
x = np.load(xs).astype(np.float32)
s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
if len(s.get_inputs()[0].shape) == 2:
    x = x.reshape(len(x), -1)
got = s.run(["output"], {"input": x})[0]
head = open(csv).readline().strip().split(",")
cols = [i for i, h in enumerate(head) if h[:1] == "p" and h[1:].isdigit()]
want = np.loadtxt(csv, delimiter=",", skiprows=1, usecols=cols, ndmin=2)
err = np.abs(got - want).max()
print(f"{path}: onnxruntime vs cohort predict: {err:.2e}")
assert got.shape == want.shape and err <= 1e-5, (got.shape, want.shape, err)
PYEOF
}
"$PY" -c "import numpy as np, sys; d = np.loadtxt(sys.argv[1], delimiter=',', skiprows=1); np.save(sys.argv[2], d[:, :4].astype(np.float32))" "$T/train.csv" "$T/xflat.npy"
check_model "$T/img/models/cnn.safetensors" "npy:$T/x.npy" "$T/x.npy"
check_model "$T/img/models/gap.safetensors" "npy:$T/x.npy" "$T/x.npy"
check_model "$T/flat/models/mlp.safetensors" "csv:$T/train.csv" "$T/xflat.npy"
check_model "$T/flat/models/logits.safetensors" "csv:$T/train.csv" "$T/xflat.npy"
check_model "$T/img/models/resconv.safetensors" "npy:$T/x.npy" "$T/x.npy"
check_model "$T/flat/models/resmlp.safetensors" "csv:$T/train.csv" "$T/xflat.npy"

# An embedding on token ids (uint8, read as ids): Cast, Gather, then flatten of the sequence.
"$PY" -c "import numpy as np, sys; r = np.random.default_rng(5); x = r.integers(0, 9, (120, 5)); np.save(sys.argv[1] + '/ids.npy', x.astype(np.uint8)); np.save(sys.argv[1] + '/ids_f.npy', x.astype(np.float32)); np.save(sys.argv[1] + '/ids_y.npy', (x[:, 0] > 4).astype(np.int64))" "$T"
cat > "$T/emb.yaml" <<YAML
data: {train: "npy:$T/ids.npy,$T/ids_y.npy"}
defaults: {epochs: 2, batch_size: 16}
models:
  - {name: emb, layers: [{embedding: [9, 3]}, flatten, {dense: 2, activation: softmax}]}
  - {name: pos, layers: [{embedding: [9, 3]}, {position_embedding: 5}, flatten, {dense: 2, activation: softmax}]}
YAML
expect_status 0 "train the embeddings" -- "$COHORT" train "$T/emb.yaml" --out "$T/emb" --quiet
check_model "$T/emb/models/emb.safetensors" "npy:$T/ids.npy" "$T/ids_f.npy"
check_model "$T/emb/models/pos.safetensors" "npy:$T/ids.npy" "$T/ids_f.npy"

# A real-valued sequence [n, T, F]: layer normalization on each step and a flatten export
# from the (T, F) input the file stores (it was "gets a flat input": the sequence shape was
# dropped); recurrent layers, dense, activation and dropout on the steps.
"$PY" -c "import numpy as np, sys; r = np.random.default_rng(6); x = r.normal(size=(90, 4, 3)).astype(np.float32); np.save(sys.argv[1] + '/seq.npy', x); np.save(sys.argv[1] + '/seq_y.npy', (x[:, :, 0].sum(1) > 0).astype(np.int64))" "$T"
cat > "$T/seq.yaml" <<YAML
data: {train: "npy:$T/seq.npy,$T/seq_y.npy", input_shape: [4, 3]}
defaults: {epochs: 1, batch_size: 16}
models:
  - {name: ln, layers: [layer_normalization, flatten, {dense: 2, activation: softmax}]}
  - {name: lstm, layers: [{lstm: 3}, {dense: 2, activation: softmax}]}
  - {name: bnseq, layers: [{conv1d: 5, kernel_size: 2, padding: same}, batch_normalization,
     {activation: relu}, flatten, {dense: 2, activation: softmax}]}
  - {name: steps, layers: [{dense: 5, activation: silu}, {dropout: 0.3}, {activation: gelu},
     {gru: 4, return_sequences: true}, {dense: 3, activation: tanh}, {activation: sigmoid},
     flatten, {dense: 2, activation: softmax}]}
YAML
expect_status 0 "train the sequence models" -- "$COHORT" train "$T/seq.yaml" --out "$T/seq" --quiet
for m in ln lstm bnseq steps; do check_model "$T/seq/models/$m.safetensors" "npy:$T/seq.npy" "$T/seq.npy"; done

# Token sequences with padding (0) before, after and between the tokens, and rows of padding
# alone: every sequence kind, under mask_zero (the mask computed in the graph from the ids) and
# without, ending in logits so that the comparison sees the layers' values unsquashed.
"$PY" - "$T" <<'PYEOF'
import sys, numpy as np
r = np.random.default_rng(11)
n, T = 160, 7
x = np.zeros((n, T), np.int64)
for i in range(n):
    L = 0 if i % 23 == 0 else r.integers(1, T + 1)
    tok = r.integers(1, 9, L)
    kind = i % 3  # 0: padding after, 1: before, 2: spread between the tokens
    if kind == 0:
        x[i, :L] = tok
    elif kind == 1:
        x[i, T - L:] = tok
    else:
        x[i, np.sort(r.choice(T, L, replace=False))] = tok
y = ((x == 3).sum(1) + (x[:, -1] > 4)) % 2
np.save(f"{sys.argv[1]}/tok.npy", x.astype(np.int32))
np.save(f"{sys.argv[1]}/tok_f.npy", x.astype(np.float32))
np.save(f"{sys.argv[1]}/tok_y.npy", y.astype(np.int64))
PYEOF
cat > "$T/tok.yaml" <<YAML
data: {train: "npy:$T/tok.npy,$T/tok_y.npy"}
defaults: {epochs: 3, batch_size: 16, optimizer: {name: adam, lr: 0.01},
           loss: {name: sparse_categorical_crossentropy, from_logits: true}}
models:
  - {name: m_lstm, layers: [{embedding: {input_dim: 9, output_dim: 4, mask_zero: true}},
     {lstm: 5, return_sequences: true}, {lstm: 3}, {dense: 2}]}
  - {name: m_gru, layers: [{embedding: {input_dim: 9, output_dim: 4, mask_zero: true}},
     {gru: 5, return_sequences: true}, {dense: 4, activation: relu}, global_max_pooling1d, {dense: 2}]}
  - {name: m_bi, layers: [{embedding: {input_dim: 9, output_dim: 4, mask_zero: true}},
     {bidirectional: {gru: 3, return_sequences: true}}, {bidirectional: {lstm: 3}}, {dense: 2}]}
  - {name: m_biseq, layers: [{embedding: {input_dim: 9, output_dim: 4, mask_zero: true}},
     {bidirectional: {lstm: 3, return_sequences: true}}, global_average_pooling1d, {dense: 2}]}
  - {name: m_xfmr, layers: [{embedding: {input_dim: 9, output_dim: 6, mask_zero: true}},
     {position_embedding: 9},
     {residual: [layer_normalization, {multi_head_attention: {num_heads: 2, key_dim: 4}}]},
     {residual: [layer_normalization, {dense: 8, activation: gelu}, {dropout: 0.1}, {dense: 6}]},
     {gru: 3, return_sequences: true}, global_average_pooling1d, {dense: 2}]}
  - {name: m_causal, layers: [{embedding: {input_dim: 9, output_dim: 6, mask_zero: true}},
     {multi_head_attention: {num_heads: 2, key_dim: 3, value_dim: 5, causal: true}},
     {activation: silu}, global_max_pooling1d, {dense: 2}]}
  - {name: u_rnn, layers: [{embedding: [9, 4]}, {lstm: 4, return_sequences: true},
     {bidirectional: {gru: 3}}, {dense: 2}]}
  - {name: u_conv, layers: [{embedding: [9, 4]},
     {conv1d: 5, kernel_size: 3, padding: causal, dilation_rate: 2, activation: relu},
     {max_pooling1d: 2, strides: 1, padding: same}, {conv1d: 4, kernel_size: 2, strides: 2, padding: same},
     {average_pooling1d: 2, padding: same}, {conv1d: 3, kernel_size: 2, use_bias: false},
     global_max_pooling1d, {dense: 2}]}
  - {name: u_xfmr, layers: [{embedding: [9, 6]}, {position_embedding: 7},
     {multi_head_attention: {num_heads: 3, key_dim: 2, causal: true, use_bias: false}},
     {layer_normalization: {epsilon: 0.01}}, {dense: 4, use_bias: false}, global_average_pooling1d,
     {dense: 2}]}
YAML
expect_status 0 "train the token models" -- "$COHORT" train "$T/tok.yaml" --out "$T/tok" --quiet
for m in m_lstm m_gru m_bi m_biseq m_xfmr m_causal u_rnn u_conv u_xfmr; do
    check_model "$T/tok/models/$m.safetensors" "npy:$T/tok.npy" "$T/tok_f.npy"
done

# A layer normalization of an image's channels (NCHW to NHWC and back around ONNX's
# LayerNormalization); it was refused.
cat > "$T/lnimg.yaml" <<YAML
defaults: {epochs: 1, batch_size: 30}
models:
  - {name: lnimg, layers: [{conv2d: 2, kernel_size: 3}, {layer_normalization: {epsilon: 0.1}},
     flatten, {dense: 3, activation: softmax}]}
data: {train: "npy:$T/x.npy,$T/y.npy"}
YAML
expect_status 0 "train lnimg" -- "$COHORT" train "$T/lnimg.yaml" --out "$T/lnimg" --quiet
check_model "$T/lnimg/models/lnimg.safetensors" "npy:$T/x.npy" "$T/x.npy"

# Bad input: a usage error (2) that names what, and no file.
expect_status 2 "format" -- "$COHORT" export "$T/flat/models/mlp.safetensors" --format tflite --out "$T/x.onnx"
expect_err "unknown format 'tflite'; the formats are: onnx" "format"
expect_status 2 "checkpoint" -- "$COHORT" export "$T/flat/checkpoints/mlp.safetensors" --out "$T/x.onnx"
expect_err "is a checkpoint" "checkpoint"
expect_status 2 "not a file" -- "$COHORT" export "$T/none.safetensors" --out "$T/x.onnx"
expect_err "none.safetensors" "not a file"
expect_status 2 "no weights" -- "$COHORT" export
expect_err "needs WEIGHTS" "no weights"
[ ! -e "$T/x.onnx" ] && ok || bad "a failed export wrote $T/x.onnx"
# Default output name: WEIGHTS with .onnx.
expect_status 0 "default name" -- "$COHORT" export "$T/flat/models/logits.safetensors"
[ -s "$T/flat/models/logits.onnx" ] && ok || bad "no $T/flat/models/logits.onnx"
finish
