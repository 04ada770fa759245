#!/usr/bin/env bash
# eval and predict stand alone: they use what the weights store, not a
# training plan. Weights of a model trained with early_stopping on val_loss
# evaluate on data with no validation split; the classes come from the last
# layer, so one row, or rows of classes 0 and 1 only, evaluate and predict;
# predict takes data without labels (npy:X alone, a CSV of only the model's
# input columns) and leaves their label column empty. Labels as rows (one-hot)
# are refused by a sparse model, as train refuses them, and scored by a
# categorical_crossentropy model as its test set was. A model trained on
# flat data gives the same output for the same values shaped [n, H, W, C].
set -u
. "$(dirname "$0")/lib.sh"

blobs 11 300 0.8
cat > "$T/plan.yaml" <<YAML
data: {train: csv:$T/train.csv, validation_split: 0.25}
defaults:
  epochs: 4
  batch_size: 16
  layers: [{dense: 8, activation: relu}, {dense: 3, activation: softmax}]
models:
  - name: es
    early_stopping: {monitor: val_loss, patience: 1}
YAML
expect_status 0 "train" -- "$COHORT" train "$T/plan.yaml" --out "$T/run" --quiet
W="$T/run/models/es.safetensors"

expect_status 0 "eval of early_stopping weights" -- "$COHORT" eval "$W" --data "csv:$T/test.csv" --json
grep -q '"samples": 75' "$T/out" && ok || bad "eval counted $(cat "$T/out")"

# One row (its label is 0), and the rows of classes 0 and 1 only.
head -n 2 "$T/train.csv" > "$T/one.csv"
awk -F, 'NR == 1 || $5 != 2' "$T/test.csv" > "$T/two.csv"
expect_status 0 "eval of one row" -- "$COHORT" eval "$W" --data "csv:$T/one.csv" --json
grep -q '"samples": 1,' "$T/out" && ok || bad "eval of one row: $(cat "$T/out")"
expect_status 0 "predict of one row" -- "$COHORT" predict "$W" --data "csv:$T/one.csv"
[ "$(sed -n 2p "$T/out" | cut -d, -f3)" = 0 ] && ok || bad "predict of one row: $(cat "$T/out")"
head -n 1 "$T/out" | grep -qx "index,prediction,label,p0,p1,p2" && ok || bad "header: $(head -n 1 "$T/out")"
expect_status 0 "eval of classes 0 and 1" -- "$COHORT" eval "$W" --data "csv:$T/two.csv" --json
grep -q '"samples": 50,' "$T/out" && ok || bad "eval of two classes: $(cat "$T/out")"

# A label past the model's classes is refused.
printf 'f0,f1,f2,f3,label\n0,0,0,0,5\n' > "$T/five.csv"
expect_status 2 "eval of label 5" -- "$COHORT" eval "$W" --data "csv:$T/five.csv"
expect_err "has label 5, but the model of $W has 3 classes" "eval of label 5"

# No labels: a CSV of the 4 input columns, and npy:X alone.
cut -d, -f1-4 "$T/test.csv" > "$T/nolabel.csv"
expect_status 0 "predict of a CSV without labels" -- "$COHORT" predict "$W" --data "csv:$T/nolabel.csv" --out "$T/p1.csv"
[ "$(wc -l < "$T/p1.csv")" -eq 76 ] && ok || bad "predict wrote $(wc -l < "$T/p1.csv") lines"
awk -F, 'NR > 1 && $3 != "" { n++ } END { exit n > 0 }' "$T/p1.csv" && ok || bad "labels in $(sed -n 2p "$T/p1.csv")"
expect_status 0 "predict of labelled CSV" -- "$COHORT" predict "$W" --data "csv:$T/test.csv" --out "$T/p2.csv"
[ "$(cut -d, -f1,2,4- "$T/p1.csv")" = "$(cut -d, -f1,2,4- "$T/p2.csv")" ] && ok || bad "predictions differ with and without labels"
expect_status 2 "eval of a CSV without labels" -- "$COHORT" eval "$W" --data "csv:$T/nolabel.csv"
expect_err "has no labels; eval needs them" "eval of a CSV without labels"

$PY - "$T/test.csv" "$T/x.npy" <<'PY' || bad "numpy"
import sys, numpy as np
a = np.loadtxt(sys.argv[1], delimiter=",", skiprows=1, dtype=np.float32)
np.save(sys.argv[2], a[:, :4])
PY
expect_status 0 "predict of npy:X" -- "$COHORT" predict "$W" --data "npy:$T/x.npy" --out "$T/p3.csv"
[ "$(cut -d, -f1,2,3 "$T/p1.csv")" = "$(cut -d, -f1,2,3 "$T/p3.csv")" ] && ok || bad "npy:X predicts otherwise than the CSV"
# The same samples as images of 2 channels, [n, 1, 2, 2]: a model trained on
# flat data reads their values in order (its first layer's columns were once
# reordered as torch's (C, H, W)), in eval and predict.
$PY -c 'import sys, numpy as np; np.save(sys.argv[2], np.load(sys.argv[1]).reshape(-1, 1, 2, 2))' \
    "$T/x.npy" "$T/x4.npy" || bad "numpy"
expect_status 0 "predict of [n, 1, 2, 2]" -- "$COHORT" predict "$W" --data "npy:$T/x4.npy" --out "$T/p4d.csv"
cmp -s "$T/p3.csv" "$T/p4d.csv" && ok || bad "predict of [n, 1, 2, 2] differs from [n, 4]: $(diff "$T/p3.csv" "$T/p4d.csv" | head -3)"
$PY -c 'import sys, numpy as np; np.save(sys.argv[2], np.loadtxt(sys.argv[1], delimiter=",", skiprows=1, usecols=4).astype(np.int32))' \
    "$T/test.csv" "$T/y.npy" || bad "numpy"
"$COHORT" eval "$W" --data "npy:$T/x.npy,$T/y.npy" --json | sed 's/"data": "[^"]*"//' > "$T/e2d.txt"
expect_status 0 "eval of [n, 1, 2, 2]" -- "$COHORT" eval "$W" --data "npy:$T/x4.npy,$T/y.npy" --json
[ "$(sed 's/"data": "[^"]*"//' "$T/out")" = "$(cat "$T/e2d.txt")" ] && ok || bad "eval of [n, 1, 2, 2]: $(cat "$T/out") vs $(cat "$T/e2d.txt")"
expect_status 2 "eval of npy:X" -- "$COHORT" eval "$W" --data "npy:$T/x.npy"
expect_err "has no labels; eval needs them" "eval of npy:X"

# Labels as rows (one-hot): a sparse model refuses them, as train does (eval
# and predict once read y, all zeros under target rows, and scored every
# sample as class 0); a model trained with categorical_crossentropy on such
# rows scores them as its test set did in training.
$PY - "$T" <<'PY' || bad "numpy"
import sys, numpy as np
for f in ("train", "test"):
    a = np.loadtxt(f"{sys.argv[1]}/{f}.csv", delimiter=",", skiprows=1, dtype=np.float32)
    np.save(f"{sys.argv[1]}/{f}_x.npy", a[:, :4])
    np.save(f"{sys.argv[1]}/{f}_oh.npy", np.eye(3, dtype=np.float32)[a[:, 4].astype(int)])
PY
OH="npy:$T/test_x.npy,$T/test_oh.npy"
expect_status 2 "eval of one-hot rows by a sparse model" -- "$COHORT" eval "$W" --data "$OH"
expect_err "model 'es': sparse_categorical_crossentropy takes integer class labels in [0, 2147483646], but $OH has real-valued targets (3 per sample)" "eval of one-hot rows"
expect_status 2 "predict of one-hot rows by a sparse model" -- "$COHORT" predict "$W" --data "$OH"
expect_err "but $OH has real-valued targets (3 per sample)" "predict of one-hot rows"
cat > "$T/cce.yaml" <<YAML
data: {train: "npy:$T/train_x.npy,$T/train_oh.npy", test: "$OH"}
models: [{name: c, epochs: 3, batch_size: 16, loss: categorical_crossentropy,
          layers: [{dense: 8, activation: relu}, {dense: 3, activation: softmax}]}]
YAML
expect_status 0 "train on one-hot rows" -- "$COHORT" train "$T/cce.yaml" --out "$T/cce" --quiet
expect_status 0 "eval of one-hot rows" -- "$COHORT" eval "$T/cce/models/c.safetensors" --data "$OH" --json
$PY - "$T/out" "$T/cce/results.json" <<'PY' && ok || bad "eval of one-hot rows: $(cat "$T/out")"
import json, sys
e = json.loads(open(sys.argv[1]).read())
t = json.load(open(sys.argv[2]))["models"][0]["test"]
assert abs(e["loss"] - t["loss"]) < 2e-6 and abs(e["accuracy"] - t["accuracy"]) < 2e-6, (e, t)
PY

"$COHORT" predict --help | grep -q "no label" && ok || bad "predict --help says nothing of data without labels"

# A regression on a CSV's target columns: eval and predict read the same
# columns (stored in the weights), and refuse data of another width.
awk 'BEGIN { srand(5); print "a,b,y0,y1"; for (i = 0; i < 300; i++) { a = rand(); b = rand();
    printf "%f,%f,%f,%f\n", a, b, 2 * a - b, a * b } }' > "$T/reg.csv"
cat > "$T/reg.yaml" <<YAML
data: {train: csv:$T/reg.csv, label_columns: [y0, y1]}
models: [{name: r, epochs: 20, loss: mse, optimizer: {name: adam, lr: 0.01}, layers: [{dense: 8, activation: tanh}, {dense: 2}]}]
YAML
expect_status 0 "train regression" -- "$COHORT" train "$T/reg.yaml" --out "$T/reg" --quiet
expect_status 0 "eval regression" -- "$COHORT" eval "$T/reg/models/r.safetensors" --data "csv:$T/reg.csv" --json
/usr/bin/python3 - "$T/out" "$T/reg/results.json" <<'PY' && ok || bad "eval of a regression: $(cat "$T/out")"
import json, sys
e = json.loads(open(sys.argv[1]).read())
r = json.load(open(sys.argv[2]))["models"][0]
assert "mae" in e and "accuracy" not in e, e
assert abs(e["mae"] - r["history"]["mae"][-1]) < 0.05, (e, r["history"]["mae"][-1])
PY
"$COHORT" predict "$T/reg/models/r.safetensors" --data "csv:$T/reg.csv" | head -n 1 | grep -qx "index,y0,y1,t0,t1" && ok || bad "predict header of a regression"
cut -d, -f1,2,3 "$T/reg.csv" | sed '1s/.*/a,b,y0/' > "$T/reg1.csv"
expect_status 2 "eval regression on other columns" -- "$COHORT" eval "$T/reg/models/r.safetensors" --data "csv:$T/reg1.csv"
expect_err "no column named 'y1' in the header" "eval regression on other columns"
# A binary model from logits: its single output is a logit, so its class is
# logit > 0 (what its accuracy counts), in predict and in results.json's
# confusion matrix (rounding the logit once made classes like 5 and -4).
awk 'BEGIN { srand(9); print "a,b,label"; for (i = 0; i < 200; i++) { a = (rand() - 0.5) * 8;
    b = rand() - 0.5; printf "%f,%f,%d\n", a, b, (a + b > 0) } }' > "$T/bin.csv"
cat > "$T/bin.yaml" <<YAML
data: {train: csv:$T/bin.csv, test: csv:$T/bin.csv}
models: [{name: b, epochs: 10, optimizer: {name: adam, lr: 0.05},
          loss: {name: binary_crossentropy, from_logits: true}, layers: [{dense: 1}]}]
YAML
expect_status 0 "train from logits" -- "$COHORT" train "$T/bin.yaml" --out "$T/bin" --quiet
expect_status 0 "predict from logits" -- "$COHORT" predict "$T/bin/models/b.safetensors" --data "csv:$T/bin.csv" --out "$T/binp.csv"
/usr/bin/python3 - "$T/binp.csv" "$T/bin/results.json" <<'PY' && ok || bad "classes of a model from logits"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert all(int(r["prediction"]) == (float(r["p0"]) > 0) for r in rows), rows[:5]
assert any(abs(float(r["p0"])) > 1.5 for r in rows), "no logit far from 0: the check is weak"
m = json.load(open(sys.argv[2]))["models"][0]
conf = m["confusion"]
assert sum(map(sum, conf)) == 200, conf
right = sum(int(r["prediction"]) == int(r["label"]) for r in rows)
assert conf[0][0] + conf[1][1] == right == round(m["test"]["accuracy"] * 200), (conf, right, m["test"])
PY

# A CSV whose label is its first column, named y (issue 41 item 21): eval and
# predict read the column training read (the weights record it), or the one
# --label-column names; they took the last column, and could not be told.
awk 'BEGIN { srand(3); print "y,f0,f1,f2"; for (i = 0; i < 300; i++) { c = i % 3; printf "%d", c;
    for (j = 0; j < 3; j++) printf ",%.3f", rand() + (j == c ? 2 : 0); print "" } }' > "$T/lc.csv"
printf 'data: {train: csv:%s/lc.csv, label_column: y, validation_split: 0.2}\ndefaults: {epochs: 4, layers: [{dense: 3, activation: softmax}]}\nmodels: [{name: m}]\n' "$T" > "$T/lc.yaml"
expect_status 0 "train with label_column y" -- "$COHORT" train "$T/lc.yaml" --out "$T/lc" --quiet
expect_status 0 "eval: the label column training read" -- "$COHORT" eval "$T/lc/models/m.safetensors" --data "csv:$T/lc.csv" --json
cp "$T/out" "$T/lc-default.json"
expect_status 0 "eval --label-column 0" -- "$COHORT" eval "$T/lc/models/m.safetensors" --data "csv:$T/lc.csv" --json --label-column 0
cmp -s "$T/out" "$T/lc-default.json" && $PY -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["samples"] == 300, r' "$T/out" &&
    ok || bad "eval by the recorded label column and by --label-column differ: $(cat "$T/out" "$T/lc-default.json")"
expect_status 0 "predict --label-column y" -- "$COHORT" predict "$T/lc/models/m.safetensors" --data "csv:$T/lc.csv" --label-column y
[ "$(awk -F, 'NR > 1 { print $3 }' "$T/out" | head -n 4 | tr '\n' ' ')" = "0 1 2 0 " ] && ok || bad "predict's labels are not column y: $(head -n 3 "$T/out")"
expect_status 2 "eval --label-column of no column" -- "$COHORT" eval "$T/lc/models/m.safetensors" --data "csv:$T/lc.csv" --label-column zz
expect_err "no column named 'zz' in the header" "eval --label-column zz"
finish
