#!/usr/bin/env bash
# A full disk (simulated: COHORT_TEST_DISK_FULL_AFTER=N makes every write
# after the N-th fail with ENOSPC): the run stops at the first failed write,
# starts no further model, writes no further checkpoint, exits 1 saying what
# is stale and that --resume goes on; once space is back, --resume finishes
# every model, as a run never stopped would. That holds whichever write fails
# (the last results.json too), and under processes, where the write that fails
# may be a worker's.
set -u
. "$(dirname "$0")/lib.sh"
needs_test_hooks
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }

blobs 5 600 0.5
{
    echo "data: {train: csv:$T/train.csv, validation_split: 0.2}"
    echo "defaults: {epochs: 4, batch_size: 16, layers: [{dense: 8, activation: relu}, {dense: 3, activation: softmax}]}"
    echo "models:"
    for i in 0 1 2 3 4 5 6 7; do echo "  - {name: m$i, seed: $i}"; done
} > "$T/plan.yaml"
expect_status 0 "reference" -- "$COHORT" train "$T/plan.yaml" --out "$T/ref" --quiet --threads 1

for after in 12 30; do
    d="$T/full$after"
    COHORT_TEST_DISK_FULL_AFTER=$after expect_status 1 "disk full after $after writes" -- \
        "$COHORT" train "$T/plan.yaml" --out "$d" --threads 1
    expect_err "the disk is full: writing $d/" "disk full after $after"
    expect_err "--out $d --threads 1 --resume" "disk full after $after" # the command repeats --threads
    expect_err "stale on disk: results.json" "disk full after $after"
    expect_err "interrupted: not started: the disk is full" "disk full after $after: no model starts after it"
    # Nothing written after the failed write: no checkpoint of a model not started.
    n_ckpt=$(ls "$d/checkpoints" | grep -c safetensors)
    [ "$n_ckpt" -lt 8 ] && ok || bad "disk full after $after: $n_ckpt checkpoints: models kept training"
    expect_status 0 "--resume once there is space" -- "$COHORT" train "$T/plan.yaml" --out "$d" --resume --quiet --threads 1
    /usr/bin/python3 - "$T/ref/results.json" "$d/results.json" <<'PY' && ok || bad "disk full after $after: resumed results differ"
import json, sys
a = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}
b = {m["name"]: m for m in json.load(open(sys.argv[2]))["models"]}
for n in a:
    assert b[n]["status"] == "ok", (n, b[n]["status"], b[n]["error"])
    assert a[n]["history"]["loss"] == b[n]["history"]["loss"], n
PY
    for i in 0 1 2 3 4 5 6 7; do
        cmp -s "$T/ref/models/m$i.safetensors" "$d/models/m$i.safetensors" || { bad "disk full after $after: weights of m$i differ"; break; }
    done && ok
done
# The very first write (results.json) fails: nothing trained, exit 2, one
# message naming the file, and no "model 'm0' pending: " line with an empty
# reason for each model.
COHORT_TEST_DISK_FULL_AFTER=0 expect_status 2 "disk full from the start" -- \
    "$COHORT" train "$T/plan.yaml" --out "$T/full0" --threads 1
expect_err "$T/full0/results.json: write failed: No space left on device" "disk full from the start"
grep -q "pending: *$" "$T/err" && bad "disk full from the start: a model's line without a reason: $(head -n 2 "$T/err")" || ok
# Whichever write is the first to fail, the run says the disk is full and
# exits 1 (it had exited 2, "write failed", when that write was the final
# results.json: nothing said what was stale or how to go on); only a disk full
# from the very first write (N=0: results.json before training) is exit 2.
cat > "$T/two.yaml" <<YAML
data: {train: csv:$T/train.csv, validation_split: 0.2}
defaults: {epochs: 2, batch_size: 16, layers: [{dense: 8, activation: relu}, {dense: 3, activation: softmax}]}
models: [{name: a}, {name: b, seed: 2}]
YAML
for st in threads processes; do
    clean=0
    for after in $(seq 1 80); do
        rm -rf "$T/sweep"
        COHORT_TEST_DISK_FULL_AFTER=$after "$COHORT" train "$T/two.yaml" --out "$T/sweep" --quiet \
            --strategy $st --threads 2 >/dev/null 2>"$T/err"
        rc=$?
        [ $rc -eq 0 ] && { clean=1; break; }
        [ $rc -eq 1 ] && grep -q "the disk is full: writing $T/sweep/" "$T/err" && ok ||
            bad "$st, disk full after $after writes: exit $rc: $(head -c 600 "$T/err")"
    done
    [ $clean -eq 1 ] && ok || bad "$st: the run never ended without a failed write"
done

# A worker process's write that fails for lack of space stops the run as the
# parent's own would: the models after it do not start (the parent had gone
# on starting them, each worker failing in turn, with no word of a full disk
# until a write of its own failed). m0 trains alone (one worker at a time)
# and writes a checkpoint and its best weights every epoch, so the 12th write
# falls inside its training.
{
    echo "data: {train: csv:$T/train.csv, validation_split: 0.2}"
    echo "defaults: {epochs: 8, batch_size: 16, layers: [{dense: 8, activation: relu}, {dense: 3, activation: softmax}]}"
    echo "models: [{name: m0}, {name: m1, seed: 1}, {name: m2, seed: 2}]"
} > "$T/proc.yaml"
COHORT_TEST_DISK_FULL_AFTER=12 expect_status 1 "processes, disk full in a worker" -- \
    "$COHORT" train "$T/proc.yaml" --out "$T/proc" --strategy processes --threads 1
expect_err "the disk is full: writing $T/proc/" "processes, disk full in a worker"
expect_err "model 'm1' interrupted: not started: the disk is full" "processes: m1 started after the disk was full"
expect_err "model 'm2' interrupted: not started: the disk is full" "processes: m2 started after the disk was full"
expect_status 0 "processes: --resume" -- "$COHORT" train "$T/proc.yaml" --out "$T/proc" --strategy processes \
    --threads 1 --resume --quiet
finish
