#!/usr/bin/env bash
# Never lose work, for a Transformer encoder (issue 37): token embeddings
# with a learned position embedding, two encoder blocks of two residuals
# each ([layer_normalization, multi_head_attention] and [layer_normalization,
# dense 4E gelu, dense E]), a layer normalization, a global pooling and a
# softmax head, on token sequences padded with 0 (mask_zero: the padding is
# masked in the attention and the pooling). A run killed with SIGKILL (after
# its first checkpoint, and half way) and resumed ends with the weights and
# results of a run never interrupted, bit for bit; so does a fused run (the
# two adam models one group) against the models trained one by one.
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }
"$PY" -c "import numpy" 2>/dev/null || { echo "$NAME: numpy missing; skipped"; exit 77; }

# 400 sequences of 10 tokens in 1..19 (0: padding, 0 to 4 of them at the
# end); the class is which of three token ranges holds most of them.
"$PY" - "$T" <<'PYEOF' || { bad "making the data"; finish; }
import numpy as np, sys
r = np.random.default_rng(7)
n, T = 400, 10
x = r.integers(1, 20, (n, T)).astype(np.int32)
for i in range(n):
    pad = r.integers(0, 5)
    if pad:
        x[i, T - pad:] = 0
y = np.array([np.bincount((s[s > 0] - 1) * 3 // 19, minlength=3).argmax() for s in x], dtype=np.int32)
np.save(f"{sys.argv[1]}/x.npy", x)
np.save(f"{sys.argv[1]}/y.npy", y)
PYEOF
epochs=6
cat > "$T/plan.yaml" <<YAML
data: {train: "npy:$T/x.npy,$T/y.npy", validation_split: 0.2}
defaults:
  epochs: $epochs
  batch_size: 16
  layers:
    - {embedding: {input_dim: 20, output_dim: 16, mask_zero: true}}
    - {position_embedding: 10}
    - {residual: [layer_normalization, {multi_head_attention: {num_heads: 2, key_dim: 8, dropout: 0.1}}]}
    - {residual: [layer_normalization, {dense: 64, activation: gelu}, {dropout: 0.1}, {dense: 16}]}
    - {residual: [layer_normalization, {multi_head_attention: {num_heads: 2, key_dim: 8}}]}
    - {residual: [layer_normalization, {dense: 64, activation: gelu}, {dense: 16}]}
    - layer_normalization
    - global_average_pooling1d
    - {dense: 3, activation: softmax}
models:
  - {name: adam}
  - {name: adam2, seed: 2, optimizer: {lr: 0.003}}
  - {name: sgd, seed: 3, optimizer: {name: sgd, lr: 0.05, momentum: 0.9}}
YAML
models="adam adam2 sgd"

same_as_ref() { # same_as_ref DIR WHAT
    same_run "$T/ref" "$1" "$2" best epochs_run
}

"$COHORT" train "$T/plan.yaml" --out "$T/ref" --strategy sequential --threads 1 --quiet >/dev/null 2>"$T/ref.err" \
    && ok || bad "reference run: $(cat "$T/ref.err")"
"$PY" - "$T/ref" <<'PYEOF' && ok || bad "reference run: not every model trained, or the weights are not named layers.i.j"
import json, struct, sys
r = json.load(open(sys.argv[1] + "/results.json"))
for m in r["models"]:
    assert m["status"] == "ok" and m["epochs_run"] >= 4, (m["name"], m["status"], m["epochs_run"])
f = open(sys.argv[1] + "/models/adam.safetensors", "rb").read()
head = json.loads(f[8:8 + struct.unpack("<Q", f[:8])[0]])
for k in ("layers.0.weight", "layers.1.weight", "layers.2.0.weight", "layers.2.1.q_proj.weight",
          "layers.2.1.out_proj.bias", "layers.3.1.weight", "layers.3.3.weight", "layers.5.2.bias"):
    assert k in head, (k, sorted(head))
PYEOF
# A fused group of the two adam models ends as each alone, bit for bit.
expect_status 0 "fused" -- "$COHORT" train "$T/plan.yaml" --out "$T/fused" --strategy fused --threads 1 --quiet
same_as_ref "$T/fused" "fused"

killed=0
for point in first half; do
    kill_resume same_as_ref "$T/kill-$point" $point $epochs "$T/plan.yaml" --strategy sequential \
        --threads 1
done
[ $killed -eq 2 ] && ok || bad "only $killed of 2 kills hit a running process (the run ended first)"

finish "($killed runs killed with SIGKILL and resumed)"
