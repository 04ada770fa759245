#!/usr/bin/env bash
# Whose output directory: training into a --out that holds another run's
# results (another plan, or other models) is refused (exit 2, naming --resume
# and --overwrite) and changes nothing; --overwrite removes that run's files,
# so none is left beside the new run's; the same plan trained again replaces
# its own files (make demo twice) and starts its checkpoints afresh, so that
# one of other settings killed part way goes on with --resume. --resume on a
# directory that does not exist says so, in one line, and trains from scratch;
# --resume of another plan is refused. A run refused because
# no model fits (exit 2) leaves the directory's run as it was, --overwrite
# or not. Only temporary files (NAME.tmp.PID) are swept at the start: a
# model named m.tmp.1 keeps its files. A model named NAME.best is refused.
set -u
. "$(dirname "$0")/lib.sh"
needs_test_hooks
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }

blobs 2 300 0.5
cat > "$T/one.yaml" <<YAML
data: {train: csv:$T/train.csv, validation_split: 0.2}
defaults: {epochs: 2, batch_size: 16, layers: [{dense: 8, activation: relu}, {dense: 3, activation: softmax}]}
models: [{name: a}, {name: b}]
YAML
sed 's/models: .*/models: [{name: c}]/' "$T/one.yaml" > "$T/two.yaml"
d="$T/run"

expect_status 0 "first run" -- "$COHORT" train "$T/one.yaml" --out "$d" --quiet
expect_status 0 "the same plan again" -- "$COHORT" train "$T/one.yaml" --out "$d" --quiet
# Changed settings of the same models are the same run, trained again.
expect_status 0 "the same models, other settings" -- "$COHORT" train "$T/one.yaml" --out "$d" \
    --quiet --set defaults.epochs=1

# A run of other settings starts its checkpoints afresh: killed after its
# first model (sequential: the second has not started), it goes on with
# --resume. The second model's checkpoint of the earlier settings had stayed,
# and --resume refused the whole run ("has changed since this checkpoint was
# written"), the first model's training with it.
COHORT_TEST_KILL_AFTER_RECORDS=1 "$COHORT" train "$T/one.yaml" --out "$d" --quiet --strategy sequential \
    --set defaults.epochs=3 >/dev/null 2>&1
[ -e "$d/records/a.json" ] && [ ! -e "$d/records/b.json" ] && ok || bad "the killed run: $(ls -R "$d")"
expect_status 0 "--resume of a run of other settings" -- "$COHORT" train "$T/one.yaml" --out "$d" --quiet \
    --strategy sequential --set defaults.epochs=3 --resume
"$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); assert [(m['status'], m['epochs_run']) for m in r['models']] == [('ok', 3)] * 2, r['models']" \
    "$d/results.json" && ok || bad "--resume of a run of other settings: results.json"
expect_status 0 "the first plan again" -- "$COHORT" train "$T/one.yaml" --out "$d" --quiet

cp "$d/results.json" "$T/before.json"
expect_status 2 "another plan into the directory" -- "$COHORT" train "$T/two.yaml" --out "$d" --quiet
expect_err "$d holds the results of another run (plan 'one', models a, b)" "another plan"
expect_err "--resume" "another plan"
expect_err "--overwrite" "another plan"
cmp -s "$T/before.json" "$d/results.json" && ok || bad "a refused run changed results.json"
[ ! -e "$d/models/c.safetensors" ] && ok || bad "a refused run trained"

# --resume continues the run of the same plan only: another plan's had
# taken the directory over, the old models' files left beside the new one
# and their records gone from results.json.
expect_status 2 "--resume of another plan" -- "$COHORT" train "$T/two.yaml" --out "$d" --quiet --resume
expect_err "cannot resume: $d holds model 'a' of plan 'one', which this run (plan 'two') does not have" "--resume of another plan"
cmp -s "$T/before.json" "$d/results.json" && ok || bad "--resume of another plan changed results.json"
[ ! -e "$d/models/c.safetensors" ] && ok || bad "--resume of another plan trained"
# The plan is judged by its models, not its file's name: the copy the run
# keeps, and the same plan under another name, resume it.
expect_status 0 "--resume from the run's own plan.yaml" -- "$COHORT" train "$d/plan.yaml" --out "$d" --quiet --resume
cp "$T/one.yaml" "$T/renamed.yaml"
expect_status 0 "--resume from a renamed copy of the plan" -- "$COHORT" train "$T/renamed.yaml" --out "$d" --quiet --resume
cmp -s "$T/before.json" "$d/results.json" || $PY - "$T/before.json" "$d/results.json" <<'PY' && ok || bad "a resume of the finished run changed its models' results"
import json, sys
a, b = (json.load(open(p))["models"] for p in sys.argv[1:])
assert [(m["name"], m["status"], m["best"]) for m in a] == [(m["name"], m["status"], m["best"]) for m in b]
PY

# Other models of the same plan (a sweep grown, a model renamed) are another run too.
expect_status 2 "other models of the same plan" -- "$COHORT" train "$T/one.yaml" --out "$d" --quiet \
    --set 'models=[{name: a}]'
expect_err "holds the results of another run" "other models"

expect_status 0 "--overwrite" -- "$COHORT" train "$T/two.yaml" --out "$d" --quiet --overwrite
for f in models/a.safetensors models/b.safetensors models/a.best.safetensors history/a.csv \
         history/b.csv checkpoints/a.safetensors checkpoints/b.safetensors; do
    [ ! -e "$d/$f" ] && ok || bad "--overwrite left the old run's $f"
done
[ -e "$d/models/c.safetensors" ] && [ -e "$d/history/c.csv" ] && ok || bad "--overwrite: the new run's files are missing"
/usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['plan']=='two' and [m['name'] for m in r['models']]==['c'], r" "$d/results.json" && ok || bad "--overwrite: results.json"

expect_status 2 "--resume with --overwrite" -- "$COHORT" train "$T/two.yaml" --out "$d" --resume --overwrite
expect_err "give one of them" "--resume with --overwrite"
"$COHORT" train --help | grep -q -- "--overwrite" && ok || bad "--help lacks --overwrite"

# --resume where there is nothing: one line on stderr, then a whole run.
expect_status 0 "--resume on a missing directory" -- "$COHORT" train "$T/one.yaml" --out "$T/new" --quiet --resume
expect_err "cohort: --resume: $T/new does not exist" "--resume on a missing directory"
[ "$(grep -c 'does not exist' "$T/err")" -eq 1 ] && ok || bad "--resume on a missing directory: $(cat "$T/err")"
[ -e "$T/new/models/a.safetensors" ] && [ -e "$T/new/models/b.safetensors" ] && ok || bad "--resume on a missing directory: not trained"
# ... and where there is a run, no such line.
expect_status 0 "--resume on a finished run" -- "$COHORT" train "$T/one.yaml" --out "$T/new" --quiet --resume
! grep -q "does not exist" "$T/err" && ok || bad "--resume on a finished run: $(cat "$T/err")"
# A run of the same models that can train none of them (each over the
# memory limit) is refused before it touches the directory: the records,
# results and, with --overwrite, the earlier run's files stay.
huge='defaults.layers=[{dense: 1000000, activation: relu}, {dense: 1000000, activation: relu}, {dense: 3, activation: softmax}]'
cp "$T/new/results.json" "$T/before.json"
for flag in "" --overwrite; do
    expect_status 2 "nothing fits $flag" -- "$COHORT" train "$T/one.yaml" --out "$T/new" --quiet $flag --set "$huge"
    expect_err "no model can be trained" "nothing fits $flag"
    cmp -s "$T/before.json" "$T/new/results.json" && ok || bad "nothing fits $flag: results.json changed"
    [ -e "$T/new/records/a.json" ] && [ -e "$T/new/models/b.safetensors" ] && [ -e "$T/new/history/a.csv" ] &&
        ok || bad "nothing fits $flag: the earlier run's files are gone: $(ls -R "$T/new")"
done

# The start of a run sweeps temporaries a killed run left, and only those.
cat > "$T/tmpname.yaml" <<YAML
data: {train: csv:$T/train.csv}
defaults: {epochs: 1, batch_size: 16, layers: [{dense: 3, activation: softmax}]}
models: [{name: m.tmp.1}, {name: m.tmp.2.3}]
YAML
expect_status 0 "models named m.tmp.N" -- "$COHORT" train "$T/tmpname.yaml" --out "$T/tn" --quiet
: > "$T/tn/models/m.tmp.1.safetensors.tmp.4242"
: > "$T/tn/checkpoints/x.safetensors.tmp.17.2"
expect_status 0 "models named m.tmp.N, resumed" -- "$COHORT" train "$T/tmpname.yaml" --out "$T/tn" --quiet --resume
for m in m.tmp.1 m.tmp.2.3; do
    [ -e "$T/tn/models/$m.safetensors" ] && [ -e "$T/tn/records/$m.json" ] && [ -e "$T/tn/history/$m.csv" ] &&
        ok || bad "model $m lost its files to the sweep of temporaries: $(ls -R "$T/tn")"
done
[ ! -e "$T/tn/models/m.tmp.1.safetensors.tmp.4242" ] && [ ! -e "$T/tn/checkpoints/x.safetensors.tmp.17.2" ] &&
    ok || bad "temporaries of a killed run were left: $(ls -R "$T/tn")"

# models/NAME.best.safetensors is model NAME's: no model may be called NAME.best.
sed 's/models: .*/models: [{name: a}, {name: a.best}]/' "$T/one.yaml" > "$T/best.yaml"
expect_status 2 "a model named a.best" -- "$COHORT" train "$T/best.yaml" --out "$T/best" --quiet
expect_err "best.yaml:3: model name 'a.best' ends in .best" "a model named a.best"
[ ! -e "$T/best" ] && ok || bad "a refused plan made its --out"
finish
