#!/usr/bin/env bash
# Data that train, but maybe not as meant, are warned about on stderr:
# labels 1..3 leave class 0 empty, labels 2 and 5 classes 0, 1, 3 and 4; a
# header without a column named label makes the last column the label, and
# the warning names it.
set -u
. "$(dirname "$0")/lib.sh"

printf 'f0,f1,label\n' > "$T/gap.csv"
for i in $(seq 1 30); do echo "$i,$((i % 5)),$((i % 3 + 1))" >> "$T/gap.csv"; done
cat > "$T/gap.yaml" <<YAML
data: {train: csv:$T/gap.csv}
models: [{name: a, layers: [{dense: 4, activation: softmax}]}]
YAML
expect_status 0 "plan with labels 1 to 3" -- "$COHORT" plan "$T/gap.yaml"
expect_err "cohort: warning: csv:$T/gap.csv: 1 of its 4 classes (labels 0 to 3) has no samples: 0;" "empty class 0"
grep -q "header names no column" "$T/err" && bad "a label column named label warned about" || ok
# More classes than samples: the empty ones are found from the sorted labels.
printf 'f0,f1,label\n1,2,5\n3,4,2\n5,6,5\n' > "$T/sparse.csv"
sed "s|$T/gap.csv|$T/sparse.csv|; s/dense: 4/dense: 6/" "$T/gap.yaml" > "$T/sparse.yaml"
expect_status 0 "plan with labels 2 and 5" -- "$COHORT" plan "$T/sparse.yaml"
expect_err "cohort: warning: csv:$T/sparse.csv: 4 of its 6 classes (labels 0 to 5) have no samples: 0, 1, 3, 4;" "empty classes 0, 1, 3, 4"

sed '1s/label/kind/' "$T/gap.csv" > "$T/nolabel.csv"
cat > "$T/nolabel.yaml" <<YAML
data: {train: csv:$T/nolabel.csv}
models: [{name: a, layers: [{dense: 4, activation: softmax}]}]
YAML
expect_status 0 "plan with no column named label" -- "$COHORT" plan "$T/nolabel.yaml"
expect_err "the header names no column 'label', so the last, column 2 ('kind'), is taken as the label" "guessed label column"

# Labels from 0 without gaps, under a header naming label: nothing to say.
blobs 3 60 0.5
printf 'data: {train: csv:%s}\nmodels: [{name: a, layers: [{dense: 3, activation: softmax}]}]\n' "$T/train.csv" > "$T/ok.yaml"
expect_status 0 "plan of good data" -- "$COHORT" plan "$T/ok.yaml"
grep -q "warning" "$T/err" && bad "good data warned about: $(cat "$T/err")" || ok
finish
