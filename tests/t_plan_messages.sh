#!/usr/bin/env bash
# What `cohort plan` and `cohort train` say about plans that are not what
# they look like (issue 41, "plans that say nothing"): each case exits 2 with
# the plan's file:line where there is one, says what is wrong, trains
# nothing, and quotes nothing of a file that is not a plan.
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }
[ -x "$PY" ] || { echo "$NAME: $PY missing; skipped"; exit 77; }

blobs 1 40 0.5
cat > "$T/plan.yaml" <<YAML
data: {train: csv:$T/train.csv, validation_split: 0.25}
defaults: {epochs: 1, batch_size: 8}
models:
  - name: m
    layers: [{dense: 3, activation: softmax}]
YAML

# A plan saved as UTF-16 or UTF-32 (a Windows editor's "Unicode"), with or
# without its byte order mark: said so, not "control characters".
"$PY" - "$T" <<'PY'
import sys
t = open(sys.argv[1] + "/plan.yaml").read()
for name, enc in [("u16", "utf-16"), ("u16le", "utf-16-le"), ("u16be", "utf-16-be"),
                  ("u32", "utf-32")]:
    open(f"{sys.argv[1]}/{name}.yaml", "wb").write(t.encode(enc))
PY
for f in u16:"UTF-16 (little-endian)" u16le:"UTF-16 (little-endian)" u16be:"UTF-16 (big-endian)" u32:"UTF-32 (little-endian)"; do
    name=${f%%:*} enc=${f#*:}
    expect_status 2 "$name plan" -- "$COHORT" train "$T/$name.yaml" --out "$T/o_$name"
    expect_err "$name.yaml: the plan is $enc text; cohort reads plans in UTF-8" "$name plan"
    [ ! -e "$T/o_$name" ] && ok || bad "$name plan: $T/o_$name was made"
done

# A file that is not a plan: no line of it is echoed.
printf 'root:$6$secretsalt$secrethash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n' > "$T/shadow"
printf 'user: secretvalue\npassword: secretvalue\n' > "$T/keys"
printf 'secretvalue\n' > "$T/scalar"
for f in shadow keys scalar; do
    expect_status 2 "not a plan ($f)" -- "$COHORT" plan "$T/$f"
    grep -q secret "$T/err" && bad "not a plan ($f): the file's text is echoed: $(cat "$T/err")" || ok
    [ "$f" = scalar ] || expect_err "$f:1: this is not a plan: none of its top keys is a plan's (data, defaults, models" "$f"
done
expect_err "scalar:1: a plan must be a map of keys (data, models, ...), got a single value" "scalar"
# A plan with a misspelt top key is still a plan, and its key is named.
printf 'dta: {train: x}\n' > "$T/typo.yaml"
expect_status 2 "top typo" -- "$COHORT" plan "$T/typo.yaml"
expect_err "typo.yaml:1: unknown key 'dta' at the top of the plan (did you mean 'data'?)" "top typo"

# A validation split that leaves no training sample: the plan's line.
expect_status 2 "split 0.99999" -- "$COHORT" train "$T/plan.yaml" --out "$T/o_split" \
    --set data.validation_split=0.99999
expect_err "--set data.validation_split=0.99999: it leaves none of the 40 samples of csv:$T/train.csv for training" "split --set"
sed 's/validation_split: 0.25/validation_split: 0.99999/' "$T/plan.yaml" > "$T/split.yaml"
expect_status 2 "split 0.99999 in the file" -- "$COHORT" train "$T/split.yaml" --out "$T/o_split2"
expect_err "split.yaml:1: data.validation_split 0.99999 leaves none of the 40 samples" "split in the file"
[ ! -e "$T/o_split2/models/m.safetensors" ] && ok || bad "split: weights were written"

# Model names that start with '.' (hidden files, the folder itself).
for n in .hidden . ..; do
    expect_status 2 "name '$n'" -- "$COHORT" plan "$T/plan.yaml" --set "models.0.name='$n'"
    expect_err "model name '$n' starts with '.'" "name '$n'"
done
# An optimizer key of defaults that no model's optimizer takes: a warning
# naming it and the models (it vanished unsaid).
cat > "$T/wd.yaml" <<YAML
data: {train: csv:$T/train.csv, validation_split: 0.25}
defaults: {epochs: 1, optimizer: {name: adam, weight_decay: 0.01}}
models:
  - {name: a, layers: [{dense: 3, activation: softmax}]}
  - {name: b, optimizer: {name: adagrad}, layers: [{dense: 3, activation: softmax}]}
YAML
expect_status 0 "unused default" -- "$COHORT" plan "$T/wd.yaml"
expect_err "cohort: warning: $T/wd.yaml:2: defaults.optimizer.weight_decay is used by none of the models: no model's optimizer takes it (adam: a; adagrad: b)" "unused default"
expect_status 0 "used default" -- "$COHORT" plan "$T/wd.yaml" --set defaults.optimizer.name=adamw
grep -q warning "$T/err" && bad "used default: $(cat "$T/err")" || ok

# A model too large for its device at any batch size: what does not fit is
# named (it said "its parameters alone", which fit).
cat > "$T/mem.yaml" <<YAML
data: {train: csv:$T/train.csv}
devices: {cpu:0: {memory_limit: 4MiB}}
models:
  - {name: huge, layers: [{dense: 4096, activation: relu}, {dense: 100, activation: relu}, {dense: 3, activation: softmax}]}
YAML
expect_status 1 "memory" -- "$COHORT" plan "$T/mem.yaml"
grep -qF "no batch size fits: its parameters (1.64 MiB), their gradients (1.64 MiB) and the optimizer's state (3.28 MiB) take 6.57 MiB at any batch size" "$T/out" && ok || bad "memory: $(grep error "$T/out")"
# Labels far apart (0 and 2147483646): not "make it {dense: 2147483647}",
# above a layer's limit, but how to number the classes.
printf 'a,b,label\n0.1,0.2,0\n0.3,0.1,2147483646\n0.5,0.5,1\n' > "$T/big.csv"
printf 'data: {train: csv:%s}\nmodels: [{name: m, layers: [{dense: 3, activation: softmax}]}]\n' "$T/big.csv" > "$T/big.yaml"
expect_status 2 "big label" -- "$COHORT" plan "$T/big.yaml"
expect_err "big.yaml:2: model 'm': the data's largest label is 2147483646, so it has 2147483647 classes, more than the 1048576 units a layer may have; number the classes from 0" "big label"
grep -q "dense: 2147483647" "$T/err" && bad "big label: suggests the layer: $(cat "$T/err")" || ok

# multi_head_attention (issue 37): no heads, no key_dim, a setting missing,
# and flat samples where it takes a sequence; said at the layer's line,
# exit 2, nothing trained.
for c in "num_heads: 0, key_dim: 4|num_heads of layers.0 must be a positive integer, got '0'" \
         "num_heads: 2, key_dim: 0|key_dim of layers.0 must be a positive integer, got '0'" \
         "num_heads: 2|multi_head_attention of layers.0 of model 'm' needs key_dim" \
         "num_heads: 2, key_dim: 4|model 'm', layers.0 (multi_head_attention): multi_head_attention takes a sequence [T, E], but gets flat samples (4)"; do
    keys=${c%%|*} msg=${c#*|}
    printf 'data: {train: csv:%s}\ndefaults: {epochs: 1, batch_size: 8}\nmodels:\n  - name: m\n    layers:\n      - {multi_head_attention: {%s}}\n      - flatten\n      - {dense: 3, activation: softmax}\n' "$T/train.csv" "$keys" > "$T/mha.yaml"
    expect_status 2 "attention {$keys}" -- "$COHORT" train "$T/mha.yaml" --out "$T/o_mha"
    expect_err "mha.yaml:6: $msg" "attention {$keys}"
    [ ! -e "$T/o_mha/models" ] && ok || bad "attention {$keys}: trained"
done
finish
