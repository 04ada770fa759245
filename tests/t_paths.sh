#!/usr/bin/env bash
# Paths in a plan are relative to the plan file's folder (data files,
# init_from), so a plan runs from any directory; --set values given on the
# command line are relative to the current directory.
set -u
. "$(dirname "$0")/lib.sh"
COHORT=$(realpath "$COHORT")

blobs 5 200 0.8
mkdir -p "$T/proj/data" "$T/elsewhere"
mv "$T/train.csv" "$T/test.csv" "$T/proj/data/"
cat > "$T/proj/plan.yaml" <<YAML
data: {train: csv:data/train.csv, test: csv:data/test.csv, validation_split: 0.2}
defaults: {epochs: 2, batch_size: 16, layers: [{dense: 8, activation: relu}, {dense: 3, activation: softmax}]}
models:
  - name: a
YAML
cd "$T/elsewhere" || exit 1
expect_status 0 "plan from another directory" -- "$COHORT" plan "$T/proj/plan.yaml"
expect_status 0 "train from another directory" -- "$COHORT" train "$T/proj/plan.yaml" --out "$T/run" --quiet
[ -s "$T/run/models/a.safetensors" ] && ok || bad "no weights"

# init_from relative to the plan: a plan beside the weights.
cp "$T/run/models/a.safetensors" "$T/proj/start.safetensors"
cat > "$T/proj/warm.yaml" <<YAML
data: {train: csv:data/train.csv}
defaults: {epochs: 1, batch_size: 16, layers: [{dense: 8, activation: relu}, {dense: 3, activation: softmax}]}
models:
  - {name: w, init_from: start.safetensors}
YAML
expect_status 0 "init_from relative to the plan" -- "$COHORT" plan "$T/proj/warm.yaml"
# A relative plan path works the same.
cd "$T" || exit 1
expect_status 0 "plan by a relative path" -- "$COHORT" plan proj/warm.yaml

# --set values are the current directory's: from $T, data/train.csv is not there.
expect_status 2 "--set relative to the current directory" -- "$COHORT" train proj/plan.yaml --out "$T/run2" --quiet --set data.test=csv:data/test.csv
expect_err "cohort: --set data.test: data/test.csv: cannot open: No such file or directory (a path given with --set is read from the current directory)" "--set relative to the current directory"
# A file the plan names but that is not there: the plan's line and key, and the folder its
# relative path is read from (for a user who expected the current directory).
printf 'data: {train: csv:data/train.csv,\n       test: csv:data/tst.csv}\nmodels: [{name: m, layers: [{dense: 3, activation: softmax}]}]\n' > proj/typo.yaml
expect_status 2 "a missing data file" -- "$COHORT" train proj/typo.yaml --out "$T/run3" --quiet
expect_err "cohort: proj/typo.yaml:2: data.test: proj/data/tst.csv: cannot open: No such file or directory (a relative path in a plan is read from the plan's folder, proj/)" "a missing data file"
expect_status 0 "--set with a path from here" -- "$COHORT" plan proj/plan.yaml --set data.test=csv:proj/data/test.csv
finish
