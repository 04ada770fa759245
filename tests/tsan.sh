#!/usr/bin/env bash
# Run the threads strategy under ThreadSanitizer: usage tests/tsan.sh TSAN_COHORT_BINARY.
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
TSAN_OPTIONS="halt_on_error=1 report_signal_unsafe=0" "$COHORT" train "$T/plan.yaml" --strategy threads --threads 2 --out "$T/out" >"$T/log" 2>&1
rc=$?
if grep -q "ThreadSanitizer" "$T/log"; then
    grep -m 40 -A 30 "WARNING: ThreadSanitizer" "$T/log" >&2
    echo "tsan.sh: 0 passed, 1 failed"
    exit 1
fi
if [ $rc -ne 0 ]; then cat "$T/log" >&2; echo "tsan.sh: 0 passed, 1 failed"; exit 1; fi
echo "tsan.sh: 1 passed, 0 failed (threads strategy under ThreadSanitizer: no reports)"
