#!/usr/bin/env bash
# Run the threads strategy, one model on a two-thread pool, and a thread helping another's model, dense and convolutional, and the CSV reader's threads, under ThreadSanitizer: usage tests/tsan.sh TSAN_COHORT_BINARY.
# Fails on any ThreadSanitizer report.
set -u
COHORT=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
awk 'BEGIN { srand(5); for (i = 0; i < 400; i++) { c = i % 3; printf "%f,%f,%f,%d\n", rand() + c, rand() - c, rand(), c } }' > "$T/d.csv"
cat > "$T/plan.yaml" <<YAML
data: {train: csv:$T/d.csv, test: csv:$T/d.csv, validation_split: 0.25}
defaults: {epochs: 3, batch_size: 16, layers: [{dense: 16, activation: relu}, {dropout: 0.1}, {dense: 3, activation: softmax}]}
models: [{name: a}, {name: b, seed: 2}, {name: c, optimizer: {name: sgd, lr: 0.1, momentum: 0.9}}, {name: d, seed: 4}]
YAML
# A small model that ends first, then its thread helps the large one, whose
# products (160 inputs into 256 units at batch 32) are big enough to split.
awk -v rows=300 -v seed=7 -f "$(dirname "$0")/wide_csv.awk" > "$T/wide.csv"
cat > "$T/help.yaml" <<YAML
data: {train: csv:$T/wide.csv, validation_split: 0.2}
defaults: {batch_size: 32}
models:
  - {name: large, epochs: 4, layers: [{dense: 256, activation: relu}, {dense: 3, activation: softmax}]}
  - {name: small, epochs: 1, layers: [{dense: 4, activation: relu}, {dense: 3, activation: softmax}]}
YAML
# CNNs on 16 x 16 x 1 images (CSV rows shaped by input_shape): 32 images of
# 16 x 16 x 16 floats are enough that a two-thread context splits the
# convolutions, windows, batch normalization and dropout.
awk 'BEGIN { srand(9); for (i = 0; i < 160; i++) { c = i % 3; line = "";
    for (j = 0; j < 256; j++) line = line sprintf("%.3f,", rand() + (int(j / 16) < 5 * (c + 1) && int(j / 16) >= 5 * c ? 1 : 0));
    print line c } }' > "$T/img.csv"
cat > "$T/cnn.yaml" <<YAML
data: {train: csv:$T/img.csv, test: csv:$T/img.csv, input_shape: [16, 16, 1], validation_split: 0.2}
defaults:
  epochs: 2
  batch_size: 32
  layers: [{conv2d: 16, kernel_size: 3, padding: same, use_bias: false}, batch_normalization, {activation: relu},
           {max_pooling2d: 2}, {conv2d: 8, kernel_size: 3, activation: relu}, flatten, {dropout: 0.2}, {dense: 3, activation: softmax}]
models: [{name: a}, {name: b, seed: 2}]
YAML
# threads: two models side by side; sequential --threads 2: one model at a
# time with the CPU context's own two-thread pool (dense_step, dense_forward,
# and for the CNNs the convolutions and window ops).
pass=0
fail=0
# tally RC: the verdict of the run just made, from its exit status and $T/log
# (a ThreadSanitizer report, or else the whole log, goes to stderr).
tally() {
    if grep -q "ThreadSanitizer" "$T/log" || [ "$1" -ne 0 ]; then
        grep -m 40 -A 30 "WARNING: ThreadSanitizer" "$T/log" >&2 || cat "$T/log" >&2
        fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
}
for s in threads sequential help cnn-sequential cnn-threads; do
    plan=$T/plan.yaml strategy=$s
    [ $s = help ] && plan=$T/help.yaml strategy=threads
    [ "${s#cnn-}" != "$s" ] && plan=$T/cnn.yaml strategy=${s#cnn-}
    TSAN_OPTIONS="halt_on_error=1 report_signal_unsafe=0" "$COHORT" train "$plan" --strategy $strategy --threads 2 --out "$T/out-$s" >"$T/log" 2>&1
    tally $?
done
# The CSV reader's threads: a file of 3 MiB is parsed in 1 MiB chunks on every core.
awk 'BEGIN { srand(9); for (i = 0; i < 80000; i++) printf "%.7f,%.7f,%.7f,%.7f,%d\n", rand(), rand(), rand(), rand(), i % 3 }' > "$T/big.csv"
printf 'data: {train: csv:%s, validation_split: 0.2}\nmodels: [{name: m, layers: [{dense: 3, activation: softmax}]}]\n' "$T/big.csv" > "$T/csv.yaml"
TSAN_OPTIONS="halt_on_error=1 report_signal_unsafe=0" "$COHORT" plan "$T/csv.yaml" >"$T/log" 2>&1
tally $?
# The C API: cohort_run_model_result polled from another thread, and called
# from on_event, while the threads strategy trains (tests/test_api.c).
API=$(dirname "$COHORT")/test_api
if [ -x "$API" ]; then
    (cd "$(dirname "$0")/.." && TSAN_OPTIONS="halt_on_error=1 report_signal_unsafe=0" "$API") >"$T/log" 2>&1
    tally $?
fi
echo "tsan.sh: $pass passed, $fail failed (threads, sequential --threads 2, and a helper thread; dense and CNN; the CSV reader's chunks; the C API's polling; under ThreadSanitizer)"
[ $fail -eq 0 ]
