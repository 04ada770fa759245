#!/usr/bin/env bash
# A sweep of tiny models under the default write policy (docs/design.md, "Never losing
# work"): no checkpoint after a model's last epoch or before a second has passed, histories
# only at a model's end, best weights kept in memory until then (a link to the final
# weights where they are the same bytes), records journaled in batches after one fsync of
# models/ and history/. The other tests set COHORT_CHECKPOINT_EVERY=0 (tests/lib.sh); this
# one does not.
# - The policy changes no number: the weights equal those of a checkpoint every epoch.
# - A kill after each file written in turn (COHORT_TEST_KILL_AFTER_WRITES, under every
#   strategy) leaves a directory where every record names weights, best weights and a
#   history that are there and final, and every checkpoint's best epoch has its weights;
#   --resume then ends with the uninterrupted run's weights, bit for bit.
# - The same with a checkpoint after every epoch but the last (COHORT_CHECKPOINT_EVERY
#   of a microsecond), and for an ASHA search, whose rungs are always checkpointed.
# - Under strace: every weights or history file is fsynced before its rename, and its
#   folder after it and before the record that names it is renamed into records/.
set -u
. "$(dirname "$0")/lib.sh"
# A run of tiny models takes over a second only on a loaded machine, where the checkpoints
# and files due by time would make which files a run writes depend on the load: a thousand
# seconds between them here, the default's path for every model shorter than that. One run
# takes the default (unset) too.
export COHORT_CHECKPOINT_EVERY=1000
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }
needs_test_hooks

blobs 3 240 0.8
cat > "$T/plan.yaml" <<YAML
data: {train: csv:$T/train.csv, test: csv:$T/test.csv, validation_split: 0.25}
defaults: {epochs: 2, batch_size: 16, layers: [{dense: 6, activation: relu}, {dense: 3, activation: softmax}]}
models: [{name: m}]
search: {samples: 4, seed: 4, space: {optimizer.lr: {loguniform: [1.0e-3, 3.0e-1]}}}
YAML
# A rung at epoch 1 of 3: the models that go on start from their rung checkpoints.
sed -e 's/epochs: 2/epochs: 3/' "$T/plan.yaml" > "$T/asha.yaml"
echo "scheduler: {name: asha, metric: val_loss, grace_period: 1, reduction_factor: 3}" >> "$T/asha.yaml"

# The directory left by a killed run is consistent: what a record, results.json or a
# checkpoint says is there is there, and a finished model's files are its final ones.
check_dir() { # DIR REF
    "$PY" - "$1" "$2" <<'PY'
import json, os, sys
d, ref = sys.argv[1], sys.argv[2]
def same(a, b):
    return open(a, "rb").read() == open(b, "rb").read()
def finished(rec, where):
    n = rec["name"]
    if rec["status"] not in ("ok", "pruned", "diverged"):
        return
    for key in ("weights", "best_weights"):
        if rec.get(key):
            p = f"{d}/{rec[key]}"
            assert os.path.exists(p), f"{where} names {rec[key]}, which is not there"
            # A rung's weights are replaced later; a model's last ones are the reference's.
            if rec["epochs_run"] == len(json.load(open(f"{ref}/records/{n}.json"))["history"]["loss"]):
                assert same(p, f"{ref}/{rec[key]}"), f"{where}: {rec[key]} is not the final one"
    h = f"{d}/history/{n}.csv"
    assert os.path.exists(h), f"{where}: no history/{n}.csv"
    rows = len(open(h).read().splitlines()) - 1
    assert rows >= rec["epochs_run"], f"{where}: history/{n}.csv has {rows} epochs of {rec['epochs_run']}"
for f in sorted(os.listdir(f"{d}/records")) if os.path.isdir(f"{d}/records") else []:
    if ".tmp." in f:
        continue
    finished(json.load(open(f"{d}/records/{f}")), f"records/{f}")
if os.path.exists(f"{d}/results.json"):
    for rec in json.load(open(f"{d}/results.json"))["models"]:
        finished(rec, "results.json")
for f in sorted(os.listdir(f"{d}/checkpoints")) if os.path.isdir(f"{d}/checkpoints") else []:
    if ".tmp." in f:
        continue
    b = open(f"{d}/checkpoints/{f}", "rb").read()
    meta = json.loads(b[8:8 + int.from_bytes(b[:8], "little")])["__metadata__"]
    state = json.loads(meta["state"])
    n = f[:-len(".safetensors")]
    if state["best_epoch"] > 0:
        assert os.path.exists(f"{d}/models/{n}.best.safetensors"), f"checkpoint of {n} at epoch {state['epoch']} (best {state['best_epoch']}) without its best weights"
PY
}

# Every weights file of DIR equals REF's.
same_weights() { # DIR REF
    local f n=0
    for f in "$2"/models/*.safetensors; do
        cmp -s "$f" "$1/models/$(basename "$f")" || return 1
        n=$((n + 1))
    done
    [ "$n" -gt 0 ] && [ "$(ls "$1"/models | grep -c 'safetensors$')" = "$n" ]
}

# The uninterrupted runs, and the same under a checkpoint every epoch.
for p in plan asha; do
    expect_status 0 "$p: train" -- "$COHORT" train "$T/$p.yaml" --out "$T/ref-$p" --quiet
    expect_status 0 "$p: train, a checkpoint every epoch" -- env COHORT_CHECKPOINT_EVERY=0 \
        "$COHORT" train "$T/$p.yaml" --out "$T/every-$p" --quiet
    same_weights "$T/every-$p" "$T/ref-$p" && ok || bad "$p: the weights depend on the checkpoints"
    expect_status 0 "$p: train, the default policy" -- env -u COHORT_CHECKPOINT_EVERY \
        "$COHORT" train "$T/$p.yaml" --out "$T/default-$p" --quiet
    same_weights "$T/default-$p" "$T/ref-$p" && ok || bad "$p: the weights depend on the policy"
    check_dir "$T/ref-$p" "$T/ref-$p" && ok || bad "$p: the finished run"
done
# Its models' last epochs leave no checkpoint, nor do their short first ones; a best
# epoch that was the last is a second name of the final weights.
[ -z "$(ls "$T/ref-plan/checkpoints")" ] && ok || bad "checkpoints of a finished sweep: $(ls "$T/ref-plan/checkpoints")"
[ "$(ls "$T/every-plan/checkpoints" | wc -l)" = 4 ] && ok || bad "COHORT_CHECKPOINT_EVERY=0: $(ls "$T/every-plan/checkpoints")"
"$PY" - "$T/ref-plan" <<'PY' && ok || bad "best weights as links"
import json, os, sys
d = sys.argv[1]
links = 0
for m in json.load(open(f"{d}/results.json"))["models"]:
    f, b = (os.stat(f"{d}/{m[k]}") for k in ("weights", "best_weights"))
    last = m["best"]["epoch"] == m["epochs_run"]
    assert (f.st_ino == b.st_ino) == last, (m["name"], m["best"]["epoch"], m["epochs_run"])
    links += last
assert links > 0
PY

# Kill after the k-th file for every k until a run ends by itself, then resume. Under
# processes the kill may hit a worker: its model fails (exit 1) and the others go on.
kill_points() { # WHAT PLAN REF STRATEGY [COHORT_CHECKPOINT_EVERY]
    local what=$1 plan=$2 ref=$3 s=$4 every=${5:-} k=1 d rc
    while [ $k -le 200 ]; do
        d="$T/k-$k"
        rm -rf "$d"
        env ${every:+COHORT_CHECKPOINT_EVERY=$every} COHORT_TEST_KILL_AFTER_WRITES=$k \
            "$COHORT" train "$plan" --out "$d" --strategy $s --quiet > /dev/null 2>&1
        rc=$?
        [ $rc = 0 ] && break
        [ $rc = 137 ] || { [ $rc = 1 ] && [ $s = processes ]; } || { bad "$what: kill after $k writes: exit $rc"; return; }
        check_dir "$d" "$ref" && ok || bad "$what: killed after $k writes"
        expect_status 0 "$what: resume after $k writes" -- env ${every:+COHORT_CHECKPOINT_EVERY=$every} \
            "$COHORT" train "$plan" --out "$d" --strategy $s --resume --quiet
        same_weights "$d" "$ref" && ok || bad "$what: resumed after $k writes: the weights differ"
        k=$((k + 1))
    done
    [ $k -gt 5 ] && ok || bad "$what: only $k kill points"
}
for s in sequential threads processes fused; do
    kill_points "sweep, $s" "$T/plan.yaml" "$T/ref-plan" $s
done
kill_points "sweep, checkpoints but the last" "$T/plan.yaml" "$T/ref-plan" sequential 0.000001
kill_points "asha" "$T/asha.yaml" "$T/ref-asha" sequential

# The order of the syncs, as strace sees them.
if command -v strace > /dev/null; then
    strace -f -y -o "$T/trace" -e trace=fsync,rename,link "$COHORT" train "$T/plan.yaml" \
        --out "$T/traced" --quiet > /dev/null 2>&1
    "$PY" - "$T/trace" "$T/traced" <<'PY' && ok || bad "the order of fsyncs and renames"
import os, re, sys
d = os.path.realpath(sys.argv[2])
# A call another thread interrupted is two lines, "<unfinished ...>" and "<... resumed>":
# joined, at the place where it returned.
lines, pending = [], {}
for l in open(sys.argv[1]).read().splitlines():
    pid, rest = re.match(r"(\d+)\s+(.*)", l).groups()
    if rest.endswith("<unfinished ...>"):
        pending[pid] = rest[:-len("<unfinished ...>")].rstrip()
    elif rest.startswith("<... ") and pid in pending:
        lines.append(pending.pop(pid) + rest.split("resumed>", 1)[1])
    else:
        lines.append(rest)
synced_data, renamed, dir_sync, n_records = set(), {}, {}, 0
for i, l in enumerate(lines):
    m = re.search(r'fsync\(\d+<([^>]*)>\)\s*= 0', l)
    if m:
        p = m.group(1)
        if os.path.basename(p) in ("models", "history", "records") and os.path.dirname(p) == d:
            dir_sync[os.path.basename(p)] = i
        else:
            synced_data.add(p)
        continue
    m = re.search(r'rename\("([^"]*)", "([^"]*)"\)\s*= 0', l)
    if not m:
        continue
    tmp, dst = m.group(1), os.path.realpath(m.group(2))
    sub, name = os.path.basename(os.path.dirname(dst)), os.path.basename(dst)
    if sub in ("models", "history") and not name.endswith(".best.safetensors"):
        assert os.path.realpath(tmp) in synced_data, f"{dst} renamed before its bytes were synced"
    renamed[(sub, name)] = i
    if sub == "records":
        n_records += 1
        n = name[:-len(".json")]
        for key in (("models", n + ".safetensors"), ("models", n + ".best.safetensors"), ("history", n + ".csv")):
            assert key in renamed, f"record of {n} before {key[1]}"
            assert dir_sync.get(key[0], -1) > renamed[key], f"record of {n}: {key[0]}/ not synced after {key[1]}"
assert n_records == 4, n_records
PY
fi
finish
