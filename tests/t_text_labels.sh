#!/usr/bin/env bash
# CSV labels given as text (cat, dog) are classes in sorted order: the
# training set's names number the test set's, results.json and the weights'
# metadata state them, and eval and predict (whose output names the classes,
# its columns too) read them back, as does the report's confusion matrix; a label the training data lacks is refused.
set -u
. "$(dirname "$0")/lib.sh"

blobs 9 300 0.6
names=(cat dog emu)
for f in train test; do
    awk -F, 'BEGIN { split("cat,dog,emu", n, ",") } NR == 1 { print; next } { $5 = n[$5 + 1]; print }' OFS=, "$T/$f.csv" > "$T/$f-text.csv"
done
cat > "$T/plan.yaml" <<YAML
data: {train: csv:$T/train-text.csv, test: csv:$T/test-text.csv, validation_split: 0.2}
defaults: {epochs: 6, batch_size: 16, layers: [{dense: 8, activation: relu}, {dense: 3, activation: softmax}]}
models:
  - name: a
YAML
expect_status 0 "train on text labels" -- "$COHORT" train "$T/plan.yaml" --out "$T/run" --quiet
$PY - "$T/run/results.json" <<'PY' && ok || bad "results.json: class names or test accuracy"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["data"]["class_names"] == ["cat", "dog", "emu"], r["data"]
assert r["models"][0]["test"]["accuracy"] > 0.9, r["models"][0]["test"]
PY
W="$T/run/models/a.safetensors"
$PY - "$W" <<'PY' && ok || bad "weights metadata lacks class_names"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
assert json.loads(h["__metadata__"]["class_names"]) == ["cat", "dog", "emu"], h["__metadata__"]
PY
# Only dogs: eval maps "dog" to the training set's class 1.
awk -F, 'NR == 1 || $5 == "dog"' "$T/test-text.csv" > "$T/dogs.csv"
expect_status 0 "eval of dogs only" -- "$COHORT" eval "$W" --data "csv:$T/dogs.csv" --json
$PY -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["samples"] == 25 and r["accuracy"] > 0.9, r' "$T/out" && ok || bad "eval of dogs: $(cat "$T/out")"
expect_status 0 "predict names the classes" -- "$COHORT" predict "$W" --data "csv:$T/dogs.csv"
[ "$(awk -F, 'NR > 1 && $3 == "dog" && $2 == "dog"' "$T/out" | wc -l)" -ge 23 ] && ok || bad "predict: $(head -3 "$T/out")"
# Its probability columns are named for the classes, and so are the report's
# confusion matrix's rows and columns (issue 41 item 20: p0, p1, p2 and 0, 1, 2).
[ "$(head -n 1 "$T/out")" = "index,prediction,label,cat,dog,emu" ] && ok || bad "predict's header: $(head -n 1 "$T/out")"
grep -q '<th class="col" title="class 1">dog</th>' "$T/run/report.html" && ok ||
    bad "the report's confusion matrix does not name the classes"
# A label the training data lacks.
printf 'f0,f1,f2,f3,label\n0,0,0,0,gnu\n' > "$T/gnu.csv"
expect_status 2 "eval of an unknown label" -- "$COHORT" eval "$W" --data "csv:$T/gnu.csv"
expect_err "has label 'gnu', which the model of $W does not have (its labels: cat, dog, emu)" "unknown label"
sed "s|test: csv:$T/test-text.csv|test: csv:$T/gnu.csv|" "$T/plan.yaml" > "$T/gnu.yaml"
expect_status 2 "plan with a test label the training data lacks" -- "$COHORT" plan "$T/gnu.yaml"
expect_err "has label 'gnu', which the training data csv:$T/train-text.csv does not have" "test label"
finish
