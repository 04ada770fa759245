#!/usr/bin/env bash
# pbt stopped anywhere ends as a run never stopped would, bit for bit, under
# every strategy (issue 41's pbt1.yaml: four models, an interval at epoch 2,
# a mutation whose perturbed value equals the old one, so that a config
# cannot tell an exploit made from one not made):
# - killed between two exploits of an interval (COHORT_PBT_TEST=crash): the
#   --resume makes the second copy (it had taken the recipient's checkpoint,
#   of the same config, as already copied);
# - a model stopped after its last epoch's checkpoint and before its weights
#   (a full disk there): --resume finishes it (it waited for a phase after
#   the last, stayed pending and the run exited 1 every time);
# - the disk full during an interval's exploits: exit 1 and the full disk's
#   message (it was exit 2, "write failed", the --resume command glued to it);
# - kill -9 after the N-th file written and the disk full after N writes, at
#   points spread over the run (COHORT_TEST_KILL_AFTER_WRITES,
#   COHORT_TEST_DISK_FULL_AFTER);
# - --resume of the finished fused run keeps its planned_bytes (issue 41
#   item 13).
set -u
. "$(dirname "$0")/lib.sh"
needs_test_hooks
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }

awk 'BEGIN { srand(7); for (i = 0; i < 400; i++) { l = "";
    for (j = 0; j < 16; j++) l = l sprintf("%.4f,", rand()); print l int(rand() * 3) } }' > "$T/d.csv"
cat > "$T/pbt1.yaml" <<YAML
data: {train: csv:$T/d.csv, validation_split: 0.25}
defaults: {epochs: 4, batch_size: 16, optimizer: {name: adam, lr: 0.01}}
models: [{name: m, layers: [{dense: 32, activation: relu}, {dropout: 0.1}, {dense: 3, activation: softmax}]}]
sweep: {seed: [1, 2, 3, 4]}
scheduler: {name: pbt, metric: val_accuracy, perturbation_interval: 2, quantile_fraction: 0.5,
            hyperparam_mutations: {layers.1.dropout: {choice: [0.1]}}}
YAML
strategies="sequential threads processes fused"
train() { # DIR STRATEGY [ARGS...]
    local d=$1 s=$2; shift 2
    "$COHORT" train "$T/pbt1.yaml" --out "$d" --strategy "$s" --quiet "$@" > /dev/null 2>> "$T/log"
}
# DIR WHAT: DIR's weights, best weights and journal are the reference's.
same() {
    local f diff=""
    for f in "$T/ref/models/"*.safetensors "$T/ref/pbt.json"; do
        cmp -s "$f" "$1/${f#$T/ref/}" || diff="$diff ${f#$T/ref/}"
    done
    [ -z "$diff" ] && ok || bad "$2: differs from the uninterrupted run:$diff"
}
# DIR STRATEGY WHAT: --resume ends with exit 0 and the reference's files.
resume_same() {
    train "$1" "$2" --resume && ok || bad "$3: --resume: exit $?: $(tail -n 3 "$T/log")"
    same "$1" "$3"
}

train "$T/ref" sequential && ok || bad "the uninterrupted run"
# The console's table has a note column for the exploited (issue 41 item 20).
"$COHORT" train "$T/pbt1.yaml" --out "$T/ref-table" --strategy sequential --quiet 2> /dev/null > "$T/table"
head -n 1 "$T/table" | grep -q "  note$" && grep -q "  pbt: 1 exploit, the last at epoch 2 from m-seed=[0-9]$" "$T/table" &&
    ok || bad "the pbt table lacks its notes: $(cat "$T/table")"
[ "$(grep -c '"epoch": 2, "from"' "$T/ref/pbt.json")" = 2 ] && ok || bad "the reference made no two exploits"
for s in $strategies; do
    train "$T/ref-$s" "$s" && ok || bad "$s: the uninterrupted run"
    f=""; for x in "$T/ref/models/"*.safetensors "$T/ref/pbt.json"; do
        cmp -s "$x" "$T/ref-$s/${x#$T/ref/}" || f="$f ${x#$T/ref/}"; done
    [ -z "$f" ] && ok || bad "$s differs from sequential:$f"
done

# --resume of a finished fused run keeps what it planned (a fused group's
# share): it wrote each model's plan alone (22080 bytes became 22144).
cp -r "$T/ref-fused" "$T/again"
train "$T/again" fused --resume && ok || bad "--resume of a finished fused run: exit $?"
[ "$(grep -o '"planned_bytes": [0-9]*' "$T/ref-fused/results.json")" = "$(grep -o '"planned_bytes": [0-9]*' "$T/again/results.json")" ] &&
    ok || bad "--resume of a finished fused run changed planned_bytes: $(grep -o '"planned_bytes": [0-9]*' "$T/again/results.json" | head -1)"

for s in $strategies; do
    COHORT_PBT_TEST=crash train "$T/crash-$s" "$s"
    [ $? = 137 ] && ok || bad "$s: the crash hook did not kill the run"
    resume_same "$T/crash-$s" "$s" "$s, killed between two exploits"
done

# The state a full disk left after m-seed=4's last checkpoint: its final weights,
# history and record not written, results.json saying it failed.
cp -r "$T/ref" "$T/last"
rm -f "$T/last/models/m-seed=4.safetensors" "$T/last/records/m-seed=4.json"
$PY - "$T/last/results.json" <<'PY' || bad "could not edit results.json"
import json, sys
r = json.load(open(sys.argv[1]))
for m in r["models"]:
    if m["name"] == "m-seed=4":
        m.update(status="failed", error="write failed: No space left on device", weights=None)
json.dump(r, open(sys.argv[1], "w"))
PY
for s in sequential fused; do
    rm -rf "$T/last-$s"; cp -r "$T/last" "$T/last-$s"
    resume_same "$T/last-$s" $s "$s, stopped after the last epoch's checkpoint"
done

# The disk full during the first interval's exploits: the journal, the best
# weights and the checkpoint of each copy are writes 37 to 42 or so.
hit=0
for n in $(seq 36 44); do
    rm -rf "$T/ex"
    COHORT_TEST_DISK_FULL_AFTER=$n "$COHORT" train "$T/pbt1.yaml" --out "$T/ex" --strategy sequential > /dev/null 2> "$T/err"
    rc=$?
    grep -q "the disk is full: writing $T/ex/\(pbt.json\|models/m-seed=[0-9].best\|checkpoints\)" "$T/err" &&
        grep -q '"epoch": 2, "from"' "$T/ex/pbt.json" 2> /dev/null && hit=$((hit + 1))
    [ $rc = 1 ] && grep -q "the disk is full: writing $T/ex/" "$T/err" && ! grep -q "device: cohort train" "$T/err" &&
        ok || bad "disk full after $n writes: exit $rc, wanted 1 and the full disk's message: $(head -c 400 "$T/err")"
    resume_same "$T/ex" sequential "disk full after $n writes"
done
[ $hit -gt 0 ] && ok || bad "no disk-full point fell inside the exploits"

for s in $strategies; do
    for n in 20 39 42 60 68; do
        rm -rf "$T/k"
        COHORT_TEST_KILL_AFTER_WRITES=$n train "$T/k" "$s"
        resume_same "$T/k" "$s" "$s, killed after $n writes"
        rm -rf "$T/k"
        COHORT_TEST_DISK_FULL_AFTER=$n train "$T/k" "$s"
        resume_same "$T/k" "$s" "$s, disk full after $n writes"
    done
done
finish
