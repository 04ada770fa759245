#!/usr/bin/env bash
# Token ids and the embedding layers (issue 37): uint8 and int64 ids reach an
# embedding as they are; a fused group of embedding models trains to the bits
# of the same models one after another; eval and predict read ids as train
# does; and bad ids, float data, an embedding that is not first, a position
# embedding shorter than the sequence exit 2 with the plan's file:line (or
# the data's element) and train nothing.
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }
[ -x "$PY" ] || { echo "$NAME: $PY missing; skipped"; exit 77; }

# 240 samples of 6 ids in [1, 20) (some end in padding 0), the label whether
# id 3 occurs more often than id 5; bad variants of the same.
"$PY" - "$T" <<'PY' || bad "token data"
import sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(7)
x = rng.integers(1, 20, (240, 6))
x[::5, 4:] = 0
y = ((x == 3).sum(1) > (x == 5).sum(1)).astype(np.int64)
np.save(f"{d}/x8.npy", x.astype(np.uint8))
np.save(f"{d}/x64.npy", x.astype(np.int64))
np.save(f"{d}/y.npy", y)
big = x.astype(np.uint8); big[17, 2] = 200
np.save(f"{d}/big.npy", big)
neg = x.astype(np.int16); neg[3, 5] = -1
np.save(f"{d}/neg.npy", neg)
np.save(f"{d}/xf.npy", x.astype(np.float32))
PY

plan() { # plan FILE TRAIN [LAYERS...]: two models of one shape (a fused group), lr apart
    local f=$1 train=$2; shift 2
    {
        echo "data: {train: 'npy:$T/$train,$T/y.npy', test: 'npy:$T/x64.npy,$T/y.npy', validation_split: 0.25}"
        echo "defaults:"
        echo "  epochs: 2"
        echo "  batch_size: 16"
        echo "  optimizer: {name: adam, lr: 0.01}"
        echo "  layers:"
        for l in "$@"; do echo "    - $l"; done
        echo "models:"
        echo "  - {name: a}"
        echo "  - {name: b, optimizer: {name: adam, lr: 0.003}}"
    } > "$T/$f"
}
LAYERS=("{embedding: {input_dim: 20, output_dim: 5}}" "{position_embedding: 8}" flatten
        "{dense: 8, activation: relu}" "{dense: 2, activation: softmax}")

# uint8 ids are not scaled: the fused group and the models one by one agree
# bit for bit, and both learn (an id read as id / 255 would be row 0).
plan p.yaml x8.npy "${LAYERS[@]}"
expect_status 0 "fused" -- "$COHORT" train "$T/p.yaml" --strategy fused --out "$T/fused"
expect_status 0 "sequential" -- "$COHORT" train "$T/p.yaml" --strategy sequential --out "$T/seq"
for m in a b; do
    cmp -s "$T/fused/models/$m.safetensors" "$T/seq/models/$m.safetensors" && ok ||
        bad "model $m: fused and sequential weights differ"
done
grep -q '"val_accuracy": *0\.[89]\|"val_accuracy": *1' "$T/seq/results.json" && ok ||
    bad "no model learned the ids: $(grep -o '"val_accuracy": *[0-9.]*' "$T/seq/results.json" | head -4)"
# The same ids as int64 train to the same bits.
plan p64.yaml x64.npy "${LAYERS[@]}"
expect_status 0 "int64 ids" -- "$COHORT" train "$T/p64.yaml" --strategy sequential --out "$T/i64"
cmp -s "$T/i64/models/a.safetensors" "$T/seq/models/a.safetensors" && ok ||
    bad "int64 and uint8 ids trained to different weights"

# Killed with SIGKILL once a checkpoint is on disk and resumed: the weights of a run never
# interrupted, bit for bit (a run that ended before the kill resumes as finished).
sed 's/epochs: 2/epochs: 8/' "$T/p.yaml" > "$T/long.yaml"
expect_status 0 "long reference" -- "$COHORT" train "$T/long.yaml" --out "$T/long" --quiet
"$COHORT" train "$T/long.yaml" --out "$T/kill" --quiet >/dev/null 2>&1 &
pid=$!
for _ in $(seq 3000); do
    ls "$T"/kill/checkpoints/*.safetensors >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.01
done
kill -9 $pid 2>/dev/null && echo "$NAME: killed after a checkpoint" || echo "$NAME: the run ended before its kill"
wait $pid 2>/dev/null
expect_status 0 "resume" -- "$COHORT" train "$T/long.yaml" --out "$T/kill" --resume --quiet
for m in a b; do
    cmp -s "$T/long/models/$m.safetensors" "$T/kill/models/$m.safetensors" && ok ||
        bad "model $m: resumed weights differ from the uninterrupted run's"
done

# eval and predict read ids as train did; an id past the table is refused.
expect_status 0 "eval" -- "$COHORT" eval "$T/seq/models/a.safetensors" --data "npy:$T/x8.npy,$T/y.npy"
expect_status 0 "predict" -- "$COHORT" predict "$T/seq/models/a.safetensors" --data "npy:$T/x8.npy"
expect_status 2 "eval of an id past the table" -- "$COHORT" eval "$T/seq/models/a.safetensors" --data "npy:$T/big.npy,$T/y.npy"
expect_err "model 'a': its embedding (layers.0) takes token ids in [0, 20), but npy:$T/big.npy,$T/y.npy has x[17, 2] = 200" "eval of an id past the table"

# Bad ids: exit 2 at the embedding's line, naming the element; nothing trained.
refused() { # refused WHAT PLAN FRAGMENT...
    local what=$1 p=$2; shift 2
    expect_status 2 "$what" -- "$COHORT" train "$T/$p" --out "$T/o_$what"
    for frag in "$@"; do expect_err "$frag" "$what"; done
    [ ! -e "$T/o_$what" ] && ok || bad "$what: $T/o_$what was made"
}
plan big.yaml big.npy "${LAYERS[@]}"
refused big big.yaml "big.yaml:7: model 'a': its embedding (layers.0) takes token ids in [0, 20), but npy:$T/big.npy,$T/y.npy has x[17, 2] = 200 (its largest id is 200: input_dim must be at least 201)"
plan neg.yaml neg.npy "${LAYERS[@]}"
refused neg neg.yaml "neg.yaml:7: model 'a': its embedding (layers.0) takes token ids in [0, 20), but npy:$T/neg.npy,$T/y.npy has x[3, 5] = -1, a negative id"
plan float.yaml xf.npy "${LAYERS[@]}"
refused float float.yaml "float.yaml:7: model 'a': its embedding (layers.0) takes integer token ids, but npy:$T/xf.npy,$T/y.npy holds float32 values (x[0, 0] is" "save the ids as an integer array (x.astype(np.int32))"
plan notfirst.yaml x8.npy "{dense: 4}" "${LAYERS[@]}"
refused notfirst notfirst.yaml "notfirst.yaml:8: model 'a', layers.1 (embedding)" "an embedding reads token ids, the model's input: make it the first layer (layers.0)"
plan short.yaml x8.npy "${LAYERS[0]}" "{position_embedding: 4}" "${LAYERS[@]:2}"
refused short short.yaml "short.yaml:8: model 'a', layers.1 (position_embedding)" "position_embedding has sequence_length 4, but its input (6, 5) has 6 steps; give it at least {position_embedding: 6}"
plan beside.yaml x8.npy "{embedding: {output_dim: 5}, input_dim: 20}" flatten "{dense: 2, activation: softmax}"
refused beside beside.yaml "beside.yaml:7: 'input_dim' in layers.0 of" "goes inside embedding: write {embedding: {input_dim: 30, output_dim: 64, mask_zero: true}}"
# uint8 data read as ids for one model would reach another unscaled: refused.
plan mixed.yaml x8.npy "${LAYERS[@]}"
echo "  - {name: c, layers: [{dense: 2, activation: softmax}]}" >> "$T/mixed.yaml"
refused mixed mixed.yaml "model 'c' reads npy:$T/x8.npy,$T/y.npy (uint8) as values, scaled by 1/255, but the plan's embeddings read it as token ids, unscaled"

finish
