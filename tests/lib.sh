# tests/lib.sh: what the shell tests share. Each test sources it right after
# `set -u`:  . "$(dirname "$0")/lib.sh"
#
# It sets NAME (the test's file name), COHORT (COHORT_BIN, else
# ${COHORT_BUILD:-build}/cohort), PY (Debian's python3, which has numpy and
# torch) and T (a temporary directory, removed at exit after any background
# job is killed), and defines:
#   ok / bad MESSAGE                 count a check that passed / failed (bad says why)
#   expect_status WANT WHAT -- CMD   run CMD (stdout to $T/out, stderr to $T/err) and
#                                    check its exit status
#   expect_err FRAGMENT WHAT         check that $T/err holds FRAGMENT
#   blobs SEED ROWS SPREAD           $T/train.csv: ROWS rows with a header, 4 features and
#                                    3 well separated classes (class c has feature c near 2,
#                                    noise of width SPREAD); $T/test.csv: its first quarter
#   mixed_plan SEED                  $T/d.csv (1200 rows, 12 features, 3 classes),
#                                    $T/t.csv (its first 200 rows) and $T/plan.yaml: five
#                                    models of different shapes, optimizers and epochs
#   needs_test_hooks                 skip (exit 77) where cohort is built without its test
#                                    hooks (-DCOHORT_TEST_HOOKS=ON, which make test sets)
#   finish [NOTE]                    print "NAME: N passed, N failed[ NOTE]"; exit status 0
#                                    only when nothing failed
NAME=$(basename "$0")
# A checkpoint and a history after every epoch, the last too, and every record journaled at
# once (docs/design.md, "Never losing work"): the tests kill runs of tiny models, whose
# epochs are far shorter than the default second between checkpoints, after the N-th file
# or once a checkpoint is there. t_sweep_resume.sh tests the default (it unsets this).
export COHORT_CHECKPOINT_EVERY=${COHORT_CHECKPOINT_EVERY-0}
COHORT=${COHORT_BIN:-${COHORT_BUILD:-build}/cohort}
PY=/usr/bin/python3
T=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
pass=0 fail=0

needs_test_hooks() {
    case "${COHORT_TEST_HOOKS:-ON}" in
    OFF | off | 0 | FALSE | false | NO | no)
        echo "$NAME: cohort is built without its test hooks (-DCOHORT_TEST_HOOKS=ON); skipped"
        exit 77 ;;
    esac
}

ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "$NAME: FAILED: $*" >&2; }

expect_status() {
    local want=$1 what=$2; shift 3
    "$@" >"$T/out" 2>"$T/err"; local got=$?
    if [ "$got" -eq "$want" ]; then ok; else bad "$what: exit $got, wanted $want: $(head -c 600 "$T/err")"; fi
}

expect_err() {
    if grep -qF -- "$1" "$T/err"; then ok; else bad "$2: stderr lacks '$1': $(head -c 600 "$T/err")"; fi
}

blobs() {
    awk -v seed="$1" -v rows="$2" -v spread="$3" 'BEGIN { srand(seed); print "f0,f1,f2,f3,label";
      for (i = 0; i < rows; i++) { c = i % 3; line = "";
        for (j = 0; j < 4; j++) { v = (rand() - 0.5) * spread + (j == c ? 2 : 0); line = line (j ? "," : "") v }
        print line "," c } }' > "$T/train.csv"
    head -n $(($2 / 4 + 1)) "$T/train.csv" > "$T/test.csv"
}

mixed_plan() {
    awk -v seed="$1" 'BEGIN { srand(seed); for (i = 0; i < 1200; i++) { c = i % 3; line = "";
        for (j = 0; j < 12; j++) { v = rand() - 0.5 + (j % 3 == c ? 0.5 : 0); line = line v "," }
        print line c } }' > "$T/d.csv"
    head -n 200 "$T/d.csv" > "$T/t.csv"
    cat > "$T/plan.yaml" <<YAML
data: {train: csv:$T/d.csv, test: csv:$T/t.csv, validation_split: 0.2}
defaults: {epochs: 3, batch_size: 32, layers: [{dense: 16, activation: relu}, {dense: 3, activation: softmax}]}
models:
  - {name: small}
  - {name: wide, layers: [{dense: 96, activation: relu}, {dense: 3, activation: softmax}]}
  - {name: drop, layers: [{dense: 32, activation: tanh}, {dropout: 0.3}, {dense: 3, activation: softmax}]}
  - {name: sgd, optimizer: {name: sgd, lr: 0.05, momentum: 0.9}}
  - {name: long, epochs: 6}
YAML
}

# epochs_done DIR: the most epochs any model of DIR's run has finished (its
# history files).
epochs_done() {
    local f n max=0
    for f in "$1"/history/*.csv; do
        [ -f "$f" ] || continue
        n=$(($(wc -l < "$f") - 1))
        [ $n -gt $max ] && max=$n
    done
    echo $max
}

# wait_run PID DIR UNTIL: wait while the run PID into DIR goes on (30 s at
# most) until it has its first checkpoint (UNTIL "checkpoint") or UNTIL
# epochs done. A kill waits for the run's own progress, not for a fixed
# time, so that it lands inside training on a fast machine and a loaded,
# sanitized one alike.
wait_run() {
    local pid=$1 d=$2 until=$3
    for _ in $(seq 3000); do
        if [ "$until" = checkpoint ]; then
            ls "$d"/checkpoints/*.safetensors >/dev/null 2>&1 && return
        else
            [ "$(epochs_done "$d")" -ge "$until" ] && return
        fi
        kill -0 "$pid" 2>/dev/null || return
        sleep 0.01
    done
}

# same_run REF DIR WHAT KEY...: DIR's run ended as REF's, the run never
# interrupted: each of $models' weight files the same bytes, and in
# results.json each model ok with REF's history (loss, accuracy, val_loss,
# val_accuracy) and REF's value of each KEY.
same_run() {
    local ref=$1 d=$2 what=$3 m
    shift 3
    for m in $models; do
        cmp -s "$ref/models/$m.safetensors" "$d/models/$m.safetensors" && ok || bad "$what: weights of $m differ"
    done
    "$PY" - "$ref/results.json" "$d/results.json" "$@" <<'PYEOF' && ok || bad "$what: results differ"
import json, sys
a = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}
b = {m["name"]: m for m in json.load(open(sys.argv[2]))["models"]}
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
for n in a:
    assert b[n]["status"] == "ok", (n, b[n]["status"], b[n]["error"])
    for k in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert a[n]["history"][k] == b[n]["history"][k], (n, k, a[n]["history"][k], b[n]["history"][k])
    for k in sys.argv[3:]:
        assert a[n][k] == b[n][k], (n, k, a[n][k], b[n][k])
PYEOF
}

# kill_resume SAME DIR POINT EPOCHS PLAN [ARG...]: cohort train PLAN into DIR
# (with the ARGs), SIGKILL it at POINT (first: once its first checkpoint is
# on disk; half: once EPOCHS / 2 epochs are done), resume it with the same
# ARGs, and call SAME DIR "kill at POINT" to compare it with the run never
# interrupted. $killed counts the kills that hit a running process.
kill_resume() {
    local same=$1 d=$2 point=$3 epochs=$4 plan=$5 pid rc
    shift 5
    "$COHORT" train "$plan" --out "$d" "$@" --quiet >/dev/null 2>&1 &
    pid=$!
    if [ "$point" = first ]; then
        wait_run $pid "$d" checkpoint
    else
        wait_run $pid "$d" $((epochs / 2))
    fi
    kill -9 $pid 2>/dev/null && killed=$((killed + 1))
    wait $pid 2>/dev/null
    echo "$NAME: killed at '$point' after $(epochs_done "$d") of $epochs epochs"
    "$COHORT" train "$plan" --out "$d" "$@" --resume --quiet >/dev/null 2>"$d.err"
    rc=$?
    [ $rc -eq 0 ] && ok || bad "kill at $point: resume exited $rc: $(cat "$d.err")"
    "$same" "$d" "kill at $point"
}

finish() {
    echo "$NAME: $pass passed, $fail failed${1:+ $1}"
    [ "$fail" -eq 0 ]
    exit
}
