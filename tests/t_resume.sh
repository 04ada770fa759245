#!/usr/bin/env bash
# Never lose work: a run killed with SIGKILL at any moment (inside epochs and
# inside checkpoint writes) and resumed ends with the same results, bit for
# bit, as a run never interrupted; SIGTERM checkpoints and exits 130; a
# second run on the same directory is refused while the first holds it;
# --resume with another config or other data is refused.
set -u
. "$(dirname "$0")/lib.sh"
needs_test_hooks

awk 'BEGIN { srand(3); for (i = 0; i < 3000; i++) { c = i % 4; line = "";
    for (j = 0; j < 16; j++) { v = rand() - 0.5 + (j % 4 == c ? 0.6 : 0); line = line v "," }
    print line c } }' > "$T/d.csv"
head -n 400 "$T/d.csv" > "$T/t.csv"
cat > "$T/plan.yaml" <<YAML
data: {train: csv:$T/d.csv, test: csv:$T/t.csv, validation_split: 0.2}
defaults: {epochs: 30, batch_size: 16, layers: [{dense: 48, activation: relu}, {dense: 4, activation: softmax}]}
models:
  - {name: adam}
  - {name: drop, layers: [{dense: 48, activation: tanh}, {dropout: 0.3}, {dense: 4, activation: softmax}]}
  - {name: sgd, optimizer: {name: sgd, lr: 0.05, momentum: 0.9, nesterov: true}}
  - {name: stop, early_stopping: {monitor: val_accuracy, patience: 1, restore_best_weights: true}}
YAML
models="adam drop sgd stop"

same_as_ref() { # same_as_ref DIR WHAT
    local d=$1 what=$2 m
    for m in $models; do
        cmp -s "$T/ref/models/$m.safetensors" "$d/models/$m.safetensors" && ok || bad "$what: weights of $m differ"
    done
    /usr/bin/python3 - "$T/ref/results.json" "$d/results.json" <<'PY' && ok || bad "$what: results differ"
import json, sys
a = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}
b = {m["name"]: m for m in json.load(open(sys.argv[2]))["models"]}
for n in a:
    assert b[n]["status"] == "ok", (n, b[n]["status"], b[n]["error"])
    for k in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert a[n]["history"][k] == b[n]["history"][k], (n, k, a[n]["history"][k], b[n]["history"][k])
    for k in ("best", "test", "epochs_run", "stopped_early", "confusion"):
        assert a[n][k] == b[n][k], (n, k, a[n][k], b[n][k])
PY
}

t0=$(date +%s.%N)
"$COHORT" train "$T/plan.yaml" --out "$T/ref" --quiet >/dev/null 2>&1 && ok || bad "reference run"
t1=$(date +%s.%N)
"$COHORT" train "$T/plan.yaml" --out "$T/ref2" --quiet >/dev/null 2>&1 && ok || bad "second reference run"
t2=$(date +%s.%N)
# Kill points are fractions of the reference run's wall time, so they land
# inside the run on a fast machine and a slow (sanitized, loaded) one alike.
# The shorter of two runs is the reference: a parallel ctest can slow one of
# them more than the runs that follow, which then end before the kill.
at() { awk "BEGIN { a = $t1 - $t0; b = $t2 - $t1; printf \"%.3f\", (a < b ? a : b) * $1 }"; }
ref_seconds=$(/usr/bin/python3 -c "import json,sys; print(sum(m['seconds'] for m in json.load(open(sys.argv[1]))['models']))" "$T/ref/results.json")

# Kill points spread over the run; the last two inside slowed checkpoint writes.
points="$(at 0.1) $(at 0.25) $(at 0.4) $(at 0.55) $(at 0.75) slow$(at 0.3) slow$(at 0.6)"
i=0 killed=0
for p in $points; do
    i=$((i + 1))
    d="$T/kill$i"
    slow=
    if [ "${p#slow}" != "$p" ]; then
        slow=200000
        p=${p#slow}
    fi
    # A run that ended before its kill (the machine ran faster than for
    # the reference: a parallel ctest, other work) is tried again, killed
    # at half the time, up to three times.
    for try in 1 2 3; do
        rm -rf "$d"
        COHORT_TEST_SLOW_WRITES_US=${slow:-0} "$COHORT" train "$T/plan.yaml" --out "$d" --quiet >/dev/null 2>&1 &
        pid=$!
        sleep "$p"
        hit=0
        kill -9 $pid 2>/dev/null && hit=1
        wait $pid 2>/dev/null
        [ $hit = 1 ] && { killed=$((killed + 1)); break; }
        p=$(awk "BEGIN { printf \"%.3f\", $p / 2 }")
    done
    [ -d "$d" ] || mkdir -p "$d"
    ls "$d"/checkpoints/*.tmp.* >/dev/null 2>&1 && echo "t_resume.sh: kill point $i: a half-written checkpoint was left (ignored on resume)"
    "$COHORT" train "$T/plan.yaml" --out "$d" --resume --quiet >/dev/null 2>"$T/resume$i.err"
    rc=$?
    [ $rc -eq 0 ] && ok || bad "kill point $i ($p s): resume exited $rc: $(cat "$T/resume$i.err")"
    same_as_ref "$d" "kill point $i ($p s)"
done

# The kills must have hit running processes, not finished ones.
[ $killed -ge 5 ] && ok || bad "only $killed of 7 kills hit a running process"

# Waits until run PID has checkpointed a first epoch into DIR, so the signal
# that follows lands inside the run however fast or loaded the machine is (a
# fraction of the reference run's time does not: under a parallel ctest the
# reference run can be slowed more than the run after it, which then finishes
# before the signal).
first_epoch() { # first_epoch DIR PID
    local n
    for n in $(seq 3000); do
        ls "$1"/checkpoints/*.safetensors >/dev/null 2>&1 && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.01
    done
    return 1
}

# The command a stop prints goes on with the same run: its --set (quoted for
# the shell), strategy and threads too. It had printed the plan and --out
# alone, and a run of changed settings then refused to resume.
"$COHORT" train "$T/plan.yaml" --out "$T/setrun" --quiet --set defaults.epochs=25 \
    --set 'defaults.optimizer={name: adam, lr: 0.002}' --strategy threads >/dev/null 2>"$T/setrun.err" &
pid=$!
first_epoch "$T/setrun" $pid && ok || bad "--set run: it ended before its first checkpoint"
kill -INT $pid
wait $pid
go_on=$(sed -n "s|.*to go on: $COHORT train ||p" "$T/setrun.err")
[ -n "$go_on" ] && ok || bad "--set run: no command to go on: $(cat "$T/setrun.err")"
eval "\"\$COHORT\" train $go_on --quiet" >/dev/null 2>"$T/setrun2.err" && ok ||
    bad "the printed command did not go on: $go_on: $(cat "$T/setrun2.err")"
/usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1])); m={x['name']: x for x in r['models']}; assert all(x['status'] == 'ok' for x in m.values()) and m['adam']['config']['optimizer']['lr'] == 0.002, r['models']" \
    "$T/setrun/results.json" && ok || bad "the printed command's run: $(cat "$T/setrun2.err")"

# SIGTERM: the current step finishes, a checkpoint is written, exit 130; --resume finishes.
"$COHORT" train "$T/plan.yaml" --out "$T/term" --quiet >/dev/null 2>"$T/term.err" &
pid=$!
first_epoch "$T/term" $pid && ok || bad "SIGTERM: the run ended before its first checkpoint"
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 130 ] && ok || bad "SIGTERM: exit $rc, wanted 130"
# Every model it stopped is `interrupted` (not failed, not left pending), and
# stderr says how to go on.
/usr/bin/python3 - "$T/term/results.json" <<'PY' && ok || bad "SIGTERM: statuses: $(cat "$T/term.err")"
import json, sys
ms = json.load(open(sys.argv[1]))["models"]
st = [m["status"] for m in ms]
assert "interrupted" in st and set(st) <= {"ok", "interrupted"}, st
for m in ms:
    assert m["status"] == "ok" or m["error"], m
PY
grep -q -- "--out $T/term --resume" "$T/term.err" && ok || bad "SIGTERM: no word of --resume: $(cat "$T/term.err")"
grep -q "interrupted: ." "$T/term.err" && ! grep -q "pending: *$" "$T/term.err" && ok ||
    bad "SIGTERM: per-model lines: $(cat "$T/term.err")"
ls "$T/term/checkpoints/"*.safetensors >/dev/null 2>&1 && ok || bad "SIGTERM: no checkpoint written"
cp "$T/term/results.json" "$T/term.json"
/usr/bin/python3 - "$T/term/checkpoints" > "$T/term.ckpt" <<'PY'
import glob, json, os, struct, sys
out = {}
for f in glob.glob(os.path.join(sys.argv[1], "*.safetensors")):
    with open(f, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        state = json.loads(json.loads(fh.read(n))["__metadata__"]["state"])
    out[os.path.basename(f)[:-len(".safetensors")]] = state["seconds"]
print(json.dumps(out))
PY
"$COHORT" train "$T/plan.yaml" --out "$T/term" --resume --quiet >/dev/null 2>&1 && ok || bad "resume after SIGTERM"
same_as_ref "$T/term" "SIGTERM"
# A resumed model's seconds count the time before the interruption too: the
# checkpoint carries it (no more than the interrupted record says: how much
# less depends on the machine's load, which a test must not assert), and the
# resumed total is more than that.
/usr/bin/python3 - "$T/term.json" "$T/term/results.json" "$T/term.ckpt" <<'PY' && ok || bad "SIGTERM: seconds after --resume"
import json, sys
before = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}
after = {m["name"]: m for m in json.load(open(sys.argv[2]))["models"]}
ckpt = json.load(open(sys.argv[3]))
checked = 0
for n, m in before.items():
    if m["status"] != "interrupted" or n not in ckpt:
        continue
    assert 0 < ckpt[n] <= m["seconds"], (n, "checkpoint", ckpt[n], "record", m["seconds"])
    assert after[n]["seconds"] > ckpt[n], (n, "resumed", after[n]["seconds"], "before", ckpt[n])
    checked += 1
assert checked, "no interrupted model had a checkpoint"
PY

# Resuming a finished run trains nothing and changes nothing.
cp "$T/ref/results.json" "$T/before.json"
"$COHORT" train "$T/plan.yaml" --out "$T/ref" --resume --quiet >/dev/null 2>&1 && ok || bad "resume of a finished run"
same_as_ref "$T/ref" "resume of a finished run"

# A changed model refuses to resume from a checkpoint made for another config.
"$COHORT" train "$T/plan.yaml" --out "$T/chg" --quiet >/dev/null 2>&1 &
pid=$!; first_epoch "$T/chg" $pid; kill -9 $pid; wait $pid 2>/dev/null
if ls "$T/chg/checkpoints/"*.safetensors >/dev/null 2>&1; then
    "$COHORT" train "$T/plan.yaml" --out "$T/chg" --resume --quiet --set defaults.batch_size=8 >/dev/null 2>"$T/chg.err"
    rc=$?
    [ $rc -eq 2 ] && grep -q "has changed since" "$T/chg.err" && ok || bad "changed config: exit $rc: $(cat "$T/chg.err")"
    # So is other data: another validation split (the models would go on
    # with other batches, silently) or another test set (the finished
    # models would keep the test results of the old one).
    "$COHORT" train "$T/plan.yaml" --out "$T/chg" --resume --quiet --set data.validation_split=0.5 >/dev/null 2>"$T/chg.err"
    rc=$?
    [ $rc -eq 2 ] && grep -q "cannot resume: $T/chg/results.json: the run there trained on other data (train_samples 2400 there, 1500 now)" "$T/chg.err" &&
        ok || bad "other validation split: exit $rc: $(cat "$T/chg.err")"
    "$COHORT" train "$T/plan.yaml" --out "$T/chg" --resume --quiet --set "data.test=csv:$T/d.csv" >/dev/null 2>"$T/chg.err"
    rc=$?
    [ $rc -eq 2 ] && grep -q "trained on other data (test_samples 400 there, 3000 now)" "$T/chg.err" &&
        ok || bad "other test set: exit $rc: $(cat "$T/chg.err")"
    # The same data by another path goes on.
    cp "$T/d.csv" "$T/d2.csv"
    "$COHORT" train "$T/plan.yaml" --out "$T/chg" --resume --quiet --set "data.train=csv:$T/d2.csv" >/dev/null 2>"$T/chg.err" &&
        ok || bad "the same data by another path: $(cat "$T/chg.err")"
fi

# A results.json that is not what cohort wrote is refused, not trusted.
mkdir -p "$T/corrupt" && echo '{"models": 3' > "$T/corrupt/results.json"
"$COHORT" train "$T/plan.yaml" --out "$T/corrupt" --resume --quiet >/dev/null 2>"$T/corrupt.err"
rc=$?
[ $rc -eq 2 ] && grep -q "cannot resume: $T/corrupt/results.json: line 2" "$T/corrupt.err" && ok || bad "corrupt results.json: exit $rc: $(cat "$T/corrupt.err")"

# The lock: a second run on the same directory is refused while one runs.
"$COHORT" train "$T/plan.yaml" --out "$T/lock" --quiet --set defaults.epochs=200 >/dev/null 2>&1 &
pid=$!
for _ in $(seq 50); do [ -s "$T/lock/.lock" ] && break; sleep 0.1; done
"$COHORT" train "$T/plan.yaml" --out "$T/lock" --quiet >/dev/null 2>"$T/lock.err"
rc=$?
[ $rc -eq 2 ] && ok || bad "second run on a locked directory: exit $rc, wanted 2"
grep -q "is in use by another cohort train (pid $pid)" "$T/lock.err" && ok || bad "lock message: $(cat "$T/lock.err")"
kill -9 $pid; wait $pid 2>/dev/null
# The killed run's lock is stale now: a new run takes it over.
"$COHORT" train "$T/plan.yaml" --out "$T/lock" --quiet --set defaults.epochs=1 >/dev/null 2>&1 && ok || bad "stale lock not taken over"

# Killed after a model's best epoch, which later epochs do not beat: the
# resumed run's results.json names its best weights (it said null, though
# the file was there), under every strategy. es.yaml's models have their
# best epoch at 2 and 3 of 6; a kill after the 16th file falls after both.
blobs 11 400 3.0
cat > "$T/es.yaml" <<YAML
data: {train: csv:$T/train.csv, validation_split: 0.25}
defaults: {epochs: 6, batch_size: 16, optimizer: {name: adam, lr: 0.05}, layers: [{dense: 16, activation: relu}, {dense: 3, activation: softmax}]}
models: [{name: a}, {name: b, seed: 2}]
YAML
for s in sequential threads processes fused; do
    for n in 8 16; do
        rm -rf "$T/best"
        COHORT_TEST_KILL_AFTER_WRITES=$n "$COHORT" train "$T/es.yaml" --out "$T/best" --strategy $s --quiet >/dev/null 2>&1
        "$COHORT" train "$T/es.yaml" --out "$T/best" --strategy $s --resume --quiet >/dev/null 2>"$T/best.err" || bad "best weights, $s: --resume: $(cat "$T/best.err")"
        $PY - "$T/best" <<'PY' && ok || bad "$s, killed after $n files: results.json lacks best weights that are on disk"
import json, os, sys
d = sys.argv[1]
for m in json.load(open(f"{d}/results.json"))["models"]:
    on_disk = os.path.exists(f"{d}/models/{m['name']}.best.safetensors")
    assert m["best"]["epoch"] > 0 and on_disk and m["best_weights"] == f"models/{m['name']}.best.safetensors", (m["name"], m["best_weights"], on_disk)
PY
    done
done

finish "($killed runs killed with SIGKILL and resumed; reference run ${ref_seconds}s of training)"
