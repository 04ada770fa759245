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
# Each loss refuses what it cannot take, naming what would fit (blobs: 3 classes).
bad_loss() { # NAME MESSAGE SETTINGS...
    local what=$1 want=$2
    shift 2
    expect_status 2 "$what" -- "$COHORT" plan "$T/mse_softmax.yaml" "$@"
    expect_err "$want" "$what"
}
bad_loss "cce on labels" "categorical_crossentropy takes one-hot (or probability) rows as targets, but the data has class labels; use loss: sparse_categorical_crossentropy" \
    --set defaults.loss=categorical_crossentropy
bad_loss "bce on 3 classes" "binary_crossentropy takes labels 0 and 1 with one output unit" \
    --set defaults.loss=binary_crossentropy \
    --set 'models=[{name: b, layers: [{dense: 8, activation: relu}, {dense: 1, activation: sigmoid}]}]'
bad_loss "bce after softmax" "loss binary_crossentropy needs the model's output to be a sigmoid, but the last layer is dense with activation softmax; make it {dense: 3, activation: sigmoid}" \
    --set defaults.loss=binary_crossentropy
bad_loss "from_logits after softmax" "loss sparse_categorical_crossentropy with from_logits: true takes logits, but the last layer is dense with activation softmax; make it {dense: 3, activation: linear}" \
    --set 'defaults.loss={name: sparse_categorical_crossentropy, from_logits: true}'
bad_loss "delta on mse" "'delta' applies to loss huber, not to loss mse" --set 'defaults.loss={name: mse, delta: 2}'
bad_loss "smoothing on mae" "'label_smoothing' applies to the cross-entropy losses, not to loss mae" \
    --set 'defaults.loss={name: mae, label_smoothing: 0.1}'
bad_loss "smoothing above 1" "label_smoothing must be a number in [0, 1], got '1.5'" \
    --set 'defaults.loss={name: sparse_categorical_crossentropy, label_smoothing: 1.5}'
bad_loss "class_weight count" "class_weight names classes 0..1, but the model has 3 classes; give a weight to each of 0..2" \
    --set defaults.loss=sparse_categorical_crossentropy --set 'defaults.class_weight={0: 1, 1: 2}'
bad_loss "class_weight gap" "must be at most 1" \
    --set defaults.loss=sparse_categorical_crossentropy --set 'defaults.class_weight={0: 1, 5: 2}'
bad_loss "unknown loss" "categorical_crossentropy" --set defaults.loss=categorical_crossentropi
# from_logits on a linear layer trains, as does a weighted cross-entropy.
expect_status 0 "from_logits after linear" -- "$COHORT" train "$T/mse_softmax.yaml" --out "$T/logits" \
    --quiet --set 'defaults.loss={name: sparse_categorical_crossentropy, from_logits: true}' \
    --set 'models=[{name: lin, layers: [{dense: 8, activation: relu}, {dense: 3}]}]'
expect_status 0 "class_weight" -- "$COHORT" train "$T/mse_softmax.yaml" --out "$T/cw" --quiet \
    --set defaults.loss=sparse_categorical_crossentropy --set 'defaults.class_weight={0: 1, 1: 2, 2: 0.5}'
# A key the loss does not take is an error at its line, not a delta (issue 36:
# label_smothing trained without smoothing, exit 0): nothing is trained.
cat > "$T/typo.yaml" <<YAML
data: {train: csv:$T/train.csv, validation_split: 0.2}
defaults: {epochs: 1, batch_size: 16}
models:
  - name: typo
    loss: {name: sparse_categorical_crossentropy, label_smothing: 0.1}
    layers: [{dense: 3, activation: softmax}]
YAML
expect_status 2 "loss key typo (train)" -- "$COHORT" train "$T/typo.yaml" --out "$T/o_typo"
expect_err "typo.yaml:5: unknown key 'label_smothing' in the loss of model 'typo' (did you mean 'label_smoothing'?)" "loss key typo"
[ ! -e "$T/o_typo/models/typo.safetensors" ] && ok || bad "loss key typo: weights were written"
bad_loss "delta typo" "unknown key 'delat' in the loss of defaults (did you mean 'delta'?)" \
    --set 'defaults.loss={name: huber, delat: 2.5}'
bad_loss "reduction" "unknown key 'reduction' in the loss of defaults; it takes name, from_logits, label_smoothing, delta" \
    --set 'defaults.loss={reduction: sum}'
finish
