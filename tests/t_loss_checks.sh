#!/usr/bin/env bash
# Combinations of loss and output that would train wrongly are refused when
# the plan is loaded (exit 2, the plan's file:line, the fix), by `cohort plan`
# and `cohort train` alike: `loss: mse` after a softmax, which no kernel
# applies outside the cross-entropy loss.
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }

blobs 1 300 0.5
cat > "$T/mse_softmax.yaml" <<YAML
data: {train: csv:$T/train.csv, validation_split: 0.2}
defaults: {epochs: 1, batch_size: 16, loss: mse}
models:
  - name: probs
    layers:
      - {dense: 8, activation: relu}
      - {dense: 3, activation: softmax}
YAML
msg="mse_softmax.yaml:7: model 'probs', layers.1 (dense): softmax is applied only with loss sparse_categorical_crossentropy or categorical_crossentropy"
expect_status 2 "mse after softmax (plan)" -- "$COHORT" plan "$T/mse_softmax.yaml"
expect_err "$msg" "mse after softmax (plan)"
expect_status 2 "mse after softmax (train)" -- "$COHORT" train "$T/mse_softmax.yaml" --out "$T/o_train"
expect_err "$msg" "mse after softmax (train)"
[ ! -e "$T/o_train/models/probs.safetensors" ] && ok || bad "mse after softmax: weights were written"

# The same model with a linear output trains with mse; softmax with
# cross-entropy trains as ever.
expect_status 0 "mse after linear" -- "$COHORT" train "$T/mse_softmax.yaml" --out "$T/lin" --quiet \
    --set 'models=[{name: lin, layers: [{dense: 8, activation: relu}, {dense: 3}]}]'
expect_status 0 "cross-entropy after softmax" -- "$COHORT" train "$T/mse_softmax.yaml" --out "$T/sce" \
    --quiet --set defaults.loss=sparse_categorical_crossentropy
finish
