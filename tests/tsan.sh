#!/usr/bin/env bash
# Run the threads strategy, and one model on a two-thread pool, under ThreadSanitizer: usage tests/tsan.sh TSAN_COHORT_BINARY.
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
# threads: two models side by side; sequential --threads 2: one model at a
# time with the CPU context's own two-thread pool (dense_step, dense_forward).
pass=0
fail=0
for s in threads sequential; do
    TSAN_OPTIONS="halt_on_error=1 report_signal_unsafe=0" "$COHORT" train "$T/plan.yaml" --strategy $s --threads 2 --out "$T/out-$s" >"$T/log" 2>&1
    rc=$?
    if grep -q "ThreadSanitizer" "$T/log"; then
        grep -m 40 -A 30 "WARNING: ThreadSanitizer" "$T/log" >&2
        fail=$((fail + 1))
    elif [ $rc -ne 0 ]; then
        cat "$T/log" >&2
        fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
done
echo "tsan.sh: $pass passed, $fail failed (threads and sequential --threads 2 under ThreadSanitizer)"
[ $fail -eq 0 ]
