#!/usr/bin/env bash
# Whose output directory: training into a --out that holds another run's
# results (another plan, or other models) is refused (exit 2, naming --resume
# and --overwrite) and changes nothing; --overwrite removes that run's files,
# so none is left beside the new run's; the same plan trained again replaces
# its own files (make demo twice). --resume on a directory that does not
# exist says so, in one line, and trains from scratch.
set -u
. "$(dirname "$0")/lib.sh"
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

cp "$d/results.json" "$T/before.json"
expect_status 2 "another plan into the directory" -- "$COHORT" train "$T/two.yaml" --out "$d" --quiet
expect_err "$d holds the results of another run (plan 'one', models a, b)" "another plan"
expect_err "--resume" "another plan"
expect_err "--overwrite" "another plan"
cmp -s "$T/before.json" "$d/results.json" && ok || bad "a refused run changed results.json"
[ ! -e "$d/models/c.safetensors" ] && ok || bad "a refused run trained"

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
finish
