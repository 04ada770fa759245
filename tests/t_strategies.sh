#!/usr/bin/env bash
# Strategies and placement: the same plan gives the same weights, bit for bit,
# under sequential (one BLAS thread), threads, processes and fused; a worker
# killed with SIGKILL fails its model alone; Ctrl-C stops cleanly with exit
# status 130; a preallocated slab's holes make a model wait, not fail; a
# CPU part's models use its cores only;
# placement packs within limits and refuses an impossible pin;
# side by side, the costliest model starts first.
set -u
. "$(dirname "$0")/lib.sh"

awk 'BEGIN { srand(11); print "a,b,c,d,e,f,label";
  for (i = 0; i < 900; i++) { c = i % 3; line = "";
    for (j = 0; j < 6; j++) { v = (rand() - 0.5) + (j == c ? 1.5 : 0) + (j == c + 3 ? -1 : 0); line = line (j ? "," : "") v }
    print line "," c } }' > "$T/d.csv"
cat > "$T/plan.yaml" <<YAML
data: {train: csv:$T/d.csv, validation_split: 0.2}
defaults:
  epochs: 3
  batch_size: 32
  layers: [{dense: 24, activation: relu}, {dense: 3, activation: softmax}]
models:
  - {name: m_adam}
  - {name: m_sgd, optimizer: {name: sgd, lr: 0.05, momentum: 0.9}}
  - {name: m_drop, layers: [{dense: 24, activation: tanh}, {dropout: 0.2}, {dense: 3, activation: softmax}]}
  - {name: m_seed2, seed: 2}
  - {name: m_lr, optimizer: {name: adam, lr: 0.01}}
YAML

"$COHORT" train "$T/plan.yaml" --strategy sequential --threads 1 --out "$T/sequential" --quiet >/dev/null 2>&1 && ok || bad "sequential run"
# Threads and fused give each model one core of two; processes get --threads 1
# so that no worker is given both cores (the last one may take what is free).
for s in threads processes fused; do
    n=2; [ $s = processes ] && n=1
    "$COHORT" train "$T/plan.yaml" --strategy $s --threads $n --out "$T/$s" --quiet >/dev/null 2>"$T/$s.err" && ok || bad "$s run: $(cat "$T/$s.err")"
    for m in m_adam m_sgd m_drop m_seed2 m_lr; do
        cmp -s "$T/sequential/models/$m.safetensors" "$T/$s/models/$m.safetensors" && ok || bad "$s: weights of $m differ from sequential"
    done
    /usr/bin/python3 - "$T/sequential/results.json" "$T/$s/results.json" "$s" <<'PY' && ok || bad "$s: results differ"
import json, sys
a = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}
b = {m["name"]: m for m in json.load(open(sys.argv[2]))["models"]}
assert json.load(open(sys.argv[2]))["strategy"] == sys.argv[3]
for n in a:
    for k in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert a[n]["history"][k] == b[n]["history"][k], (n, k)
    assert b[n]["status"] == "ok" and b[n]["planned_bytes"] == b[n]["peak_bytes"], b[n]
PY
done

# A model's planned bytes are the same number in cohort plan (text and JSON)
# and in results.json, where its peak is measured: under fused, its share of
# its group's one allocation (the plan had given its bytes alone).
"$COHORT" plan "$T/plan.yaml" --strategy fused --threads 2 --json >"$T/fused-plan.json" 2>&1
"$COHORT" plan "$T/plan.yaml" --strategy fused --threads 2 >"$T/fused-plan.txt" 2>&1
"$PY" - "$T/fused-plan.json" "$T/fused/results.json" "$T/fused-plan.txt" <<'PY' && ok || bad "fused: planned bytes of cohort plan and results.json differ"
import json, sys
p = json.load(open(sys.argv[1]))
r = {m["name"]: m for m in json.load(open(sys.argv[2]))["models"]}
text = open(sys.argv[3]).read()
assert any(len(g["models"]) > 1 for g in p["groups"]), p["groups"]
for m in p["models"]:
    assert m["planned_bytes"] == r[m["name"]]["planned_bytes"] == r[m["name"]]["peak_bytes"], (m["name"], m["planned_bytes"], r[m["name"]])
for g in p["groups"]:
    if len(g["models"]) > 1:
        share = -(-g["planned_bytes"] // len(g["models"]))
        assert "bytes exactly alone; %d as its share of its fused group" % share in text, text
PY

# shared_order: every model draws one shuffle order, so a fused group loads
# each batch once and trains it in blocks of steps; the weights must still be
# those of each model trained alone with the same order, bit for bit, and a
# member that diverges (lr 1e30) leaves the others untouched.
sed 's/^models:/shared_order: true\nmodels:\n  - {name: m_big, optimizer: {name: adam, lr: 1.0e+30}}/' "$T/plan.yaml" > "$T/shared.yaml"
for s in sequential fused; do
    "$COHORT" train "$T/shared.yaml" --strategy $s --threads 1 --out "$T/shared-$s" --quiet >/dev/null 2>"$T/shared-$s.err"
    [ $? -eq 1 ] && ok || bad "shared_order $s run: exit status should be 1 (m_big diverges): $(cat "$T/shared-$s.err")"
done
for m in m_adam m_sgd m_drop m_seed2 m_lr; do
    cmp -s "$T/shared-sequential/models/$m.safetensors" "$T/shared-fused/models/$m.safetensors" && ok || bad "shared_order: fused weights of $m differ from sequential"
done
# The option is in effect: m_seed2 (seed 2) now draws the common order, so its
# weights differ from those of the run without shared_order.
cmp -s "$T/sequential/models/m_seed2.safetensors" "$T/shared-sequential/models/m_seed2.safetensors" && bad "shared_order changed nothing for m_seed2" || ok
/usr/bin/python3 - "$T/shared-sequential/results.json" "$T/shared-fused/results.json" <<'PY' && ok || bad "shared_order: results differ"
import json, sys
a = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}
b = {m["name"]: m for m in json.load(open(sys.argv[2]))["models"]}
assert b["m_big"]["status"] == "diverged" and "lower the learning rate" in b["m_big"]["error"], b["m_big"]
for n in a:
    if n == "m_big":
        continue
    assert b[n]["config"]["shared_order"] is True, b[n]["config"]
    for k in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert a[n]["history"][k] == b[n]["history"][k], (n, k)
    assert b[n]["status"] == "ok" and b[n]["planned_bytes"] == b[n]["peak_bytes"], b[n]
PY

# cohort plan shows the groups: only same-shaped models with the same
# optimizer are fused; on a CPU a group is cut into one part per thread.
for n in 1 2; do
    "$COHORT" plan "$T/shared.yaml" --strategy fused --threads $n --json > "$T/groups-$n.json" 2>&1 && ok || bad "plan --threads $n: $(cat "$T/groups-$n.json")"
done
expect_status 2 "plan --threads 0" -- "$COHORT" plan "$T/shared.yaml" --threads 0
expect_err "cohort plan: --threads must be a positive integer, not '0'" "plan --threads 0"
expect_status 2 "plan --threads" -- "$COHORT" plan "$T/shared.yaml" --threads
expect_err "cohort plan: --threads is missing its value" "plan --threads"
/usr/bin/python3 - "$T/groups-1.json" "$T/groups-2.json" <<'PY' && ok || bad "plan: wrong groups"
import json, sys
one = sorted((sorted(g["models"]), g["shared_order"]) for g in json.load(open(sys.argv[1]))["groups"])
assert one == [(["m_adam", "m_big", "m_lr", "m_seed2"], True), (["m_drop"], False), (["m_sgd"], False)], one
two = [sorted(g["models"]) for g in json.load(open(sys.argv[2]))["groups"]]
assert sorted(two) == [["m_adam", "m_lr"], ["m_big", "m_seed2"], ["m_drop"], ["m_sgd"]], two
PY
"$COHORT" plan "$T/shared.yaml" --threads 2 | grep -q "strategy threads (auto: threads" && ok || bad "auto should pick threads on a CPU under shared_order too"
"$COHORT" plan "$T/plan.yaml" --threads 2 | grep -q "strategy threads (auto: threads" && ok || bad "auto should pick threads without shared_order"

# Side by side, the costliest model starts first, whatever its place in the
# plan; a worker's process name says which model it trains.
"$COHORT" train "$T/plan.yaml" --strategy processes --threads 2 --out "$T/order" --quiet \
    --set 'models=[{name: s1}, {name: s2}, {name: s3}, {name: big, epochs: 150, layers: [{dense: 256, activation: relu}, {dense: 3, activation: softmax}]}]' >/dev/null 2>"$T/order.err" &
main=$!
first=""
for _ in $(seq 500); do
    # Only workers that have named themselves (cohort:MODEL): one caught
    # between fork and its rename still reads plain 'cohort'.
    first=$(ps -o comm= --ppid $main 2>/dev/null | grep : | tr '\n' ' ')
    [ -n "$first" ] && break
    sleep 0.01
done
wait $main && ok || bad "largest first: run failed: $(cat "$T/order.err")"
case " $first" in *" cohort:big "*) ok ;; *) bad "largest first: the first workers were '$first', wanted cohort:big among them" ;; esac

# A killed worker fails its model alone.
cat > "$T/long.yaml" <<YAML
data: {train: csv:$T/d.csv}
defaults: {epochs: 4000, batch_size: 8, layers: [{dense: 64, activation: relu}, {dense: 3, activation: softmax}]}
models: [{name: w0}, {name: w1, seed: 2}, {name: w2, seed: 3}]
YAML
# w0 would run for minutes: it is killed once w1 and w2 are done, whatever
# the speed of the machine (a fixed sleep raced a fast one).
"$COHORT" train "$T/long.yaml" --strategy processes --threads 2 --out "$T/kill" --quiet \
    --set 'models=[{name: w0, epochs: 100000}, {name: w1, seed: 2, epochs: 3}, {name: w2, seed: 3, epochs: 3}]' >/dev/null 2>"$T/kill.err" &
main=$!
for _ in $(seq 600); do
    /usr/bin/python3 - "$T/kill/results.json" 2>/dev/null <<'PY' && break
import json, sys
ms = json.load(open(sys.argv[1]))["models"]
sys.exit(0 if sum(m["status"] == "ok" for m in ms) == 2 else 1)
PY
    sleep 0.1
done
victim=$(pgrep -P $main | head -n 1)
[ -n "$victim" ] && kill -KILL "$victim"
wait $main
rc=$?
[ $rc -eq 1 ] && ok || bad "killed worker: exit $rc, wanted 1: $(cat "$T/kill.err")"
/usr/bin/python3 - "$T/kill/results.json" <<'PY' && ok || bad "killed worker: results.json"
import json, sys
ms = json.load(open(sys.argv[1]))["models"]
failed = [m for m in ms if m["status"] == "failed"]
assert len(failed) == 1 and "killed by signal 9" in failed[0]["error"], ms
assert sum(m["status"] == "ok" for m in ms) == 2, [(m["name"], m["status"]) for m in ms]
# Its peak was never reported: null, not 0 (a measured nothing).
assert failed[0]["peak_bytes"] is None and failed[0]["planned_bytes"] > 0, failed[0]
assert all(m["peak_bytes"] == m["planned_bytes"] for m in ms if m["status"] == "ok"), ms
PY
# The readers take the null: the report and compare.
"$COHORT" report "$T/kill" >/dev/null 2>"$T/kill.err" && ok || bad "report of a killed worker's run: $(cat "$T/kill.err")"
"$COHORT" compare "$T/kill" --json >/dev/null 2>"$T/kill.err" && ok || bad "compare of a killed worker's run: $(cat "$T/kill.err")"

# Ctrl-C: every strategy stops, keeps what finished, exits 130.
for s in sequential threads processes; do
    "$COHORT" train "$T/long.yaml" --strategy $s --out "$T/int-$s" --quiet >/dev/null 2>&1 &
    main=$!
    for _ in $(seq 100); do [ -s "$T/int-$s/results.json" ] && break; sleep 0.1; done
    sleep 0.5
    kill -INT $main
    wait $main
    rc=$?
    [ $rc -eq 130 ] && ok || bad "$s: SIGINT gave exit $rc, wanted 130"
    /usr/bin/python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$T/int-$s/results.json" && ok || bad "$s: results.json invalid after SIGINT"
    [ -z "$(pgrep -P $main 2>/dev/null)" ] && ok || bad "$s: workers left running"
done

# A preallocated slab holds a model that fits only in one free block, not
# in two holes: frag_a diverges at once and leaves a hole in front of
# frag_b, which trains on, and frag_c (larger than that hole) fits the
# limit beside frag_b but not the block after it (64 bytes short). It must
# wait for frag_b and train, not fail with "its slab is fragmented".
cat > "$T/frag.yaml" <<YAML
data: {train: csv:$T/d.csv, validation_split: 0.2}
defaults: {batch_size: 32, layers: [{dense: 64, activation: relu}, {dense: 3, activation: softmax}]}
models:
  - {name: frag_a, epochs: 1000, optimizer: {name: sgd, lr: 1.0e+30}}
  - {name: frag_b, epochs: 150}
  - {name: frag_c, epochs: 1, batch_size: 80}
YAML
limit=$("$COHORT" plan "$T/frag.yaml" --json | "$PY" -c '
import json, sys
b = [(m["planned_bytes"] + 63) // 64 * 64 for m in json.load(sys.stdin)["models"]]
assert b[2] > b[0], b
print(sum(b) - 64)')
for i in 1 2 3; do
    "$COHORT" train "$T/frag.yaml" --strategy threads --threads 2 --out "$T/frag" --quiet \
        --set "devices={cpu:0: {memory: preallocate, memory_limit: $limit}}" >/dev/null 2>"$T/frag.err"
    "$PY" - "$T/frag/results.json" <<'PY' && ok || bad "preallocate, run $i: a model that fits failed: $(cat "$T/frag.err")"
import json, sys
st = {m["name"]: (m["status"], m["error"]) for m in json.load(open(sys.argv[1]))["models"]}
assert st["frag_a"][0] == "diverged" and st["frag_b"][0] == "ok" and st["frag_c"][0] == "ok", st
PY
done

# Placement: two parts of the CPU; unpinned models spread over both; a pin
# to a part too small is refused alone (exit 1); a pin to a device that
# does not exist is an input error (exit 2).
cat > "$T/place.yaml" <<YAML
data: {train: csv:$T/d.csv}
defaults: {epochs: 1, batch_size: 32, layers: [{dense: 24, activation: relu}, {dense: 3, activation: softmax}]}
models: [{name: p0}, {name: p1}, {name: p2}, {name: p3}, {name: big, layers: [{dense: 4000, activation: relu}, {dense: 3, activation: softmax}], device: cpu:0/1}]
devices: {cpu:0: {split: [1MiB, 1MiB]}}
YAML
"$COHORT" plan "$T/place.yaml" --json > "$T/place.json" 2>"$T/place.err"
rc=$?
[ $rc -eq 1 ] && ok || bad "plan with an impossible pin: exit $rc, wanted 1"
/usr/bin/python3 - "$T/place.json" <<'PY' && ok || bad "placement"
import json, sys
p = json.load(open(sys.argv[1]))
dev = {m["name"]: m["device"] for m in p["models"]}
assert {dev["p0"], dev["p1"], dev["p2"], dev["p3"]} == {"cpu:0/0", "cpu:0/1"}, dev
big = [m for m in p["models"] if m["name"] == "big"][0]
assert not big["fits"] and "cpu:0/1 has a limit of 1.00 MiB" in big["error"], big
for d in p["devices"]:
    assert d["planned_bytes"] <= d["limit_bytes"], d
PY
"$COHORT" train "$T/place.yaml" --out "$T/place" --quiet >/dev/null 2>"$T/place.err"
rc=$?
[ $rc -eq 1 ] && ok || bad "train with an impossible pin: exit $rc, wanted 1"
grep -q "model 'big' needs" "$T/place.err" && ok || bad "refusal message: $(cat "$T/place.err")"
"$COHORT" train "$T/place.yaml" --out "$T/place2" --quiet --set models.0.device=gpu:7 >/dev/null 2>"$T/pin.err"
rc=$?
[ $rc -eq 2 ] && ok || bad "pin to a missing device: exit $rc, wanted 2"
grep -q "pinned to device 'gpu:7', which does not exist" "$T/pin.err" && ok || bad "missing device message: $(cat "$T/pin.err")"
"$COHORT" train "$T/place.yaml" --out "$T/place3" --quiet --set 'devices={cpu:0: {split: [20GiB, 20GiB]}}' >/dev/null 2>"$T/split.err"
rc=$?
[ $rc -eq 2 ] && ok || bad "oversized split: exit $rc, wanted 2"
grep -q "more than the" "$T/split.err" && ok || bad "oversized split message: $(cat "$T/split.err")"

# A CPU part has its share of the cores, and its models use no more: split
# into one part per core, two models pinned to cpu:0/0 train one after the
# other (every epoch of the first before the second's) under threads and
# processes, fused keeps them in one group (not cut in two for two cores),
# and auto says it picked sequential for them.
parts=$(nproc); [ "$parts" -gt 64 ] && parts=64
sizes=$(yes 1MiB | head -n "$parts" | paste -sd, -)
cat > "$T/part.yaml" <<YAML
data: {train: csv:$T/d.csv, validation_split: 0.2}
defaults: {epochs: 3, batch_size: 32, layers: [{dense: 24, activation: relu}, {dense: 3, activation: softmax}]}
devices: {cpu:0: {split: [$sizes]}}
models: [{name: q1, device: cpu:0/0}, {name: q2, device: cpu:0/0}]
YAML
for st in threads processes; do
    "$COHORT" train "$T/part.yaml" --strategy $st --out "$T/part-$st" >"$T/part.out" 2>&1 && ok || bad "part, $st: $(cat "$T/part.out")"
    order=$(grep -o '^q[12] epoch' "$T/part.out" | cut -c1-2 | uniq | paste -sd' ' -)
    [ "$order" = "q1 q2" ] || [ "$order" = "q2 q1" ] && ok || bad "part, $st: two models on a 1-core part ran side by side (epochs in the order $order)"
done
"$COHORT" plan "$T/part.yaml" >"$T/part.out" 2>&1
grep -q "auto: sequential, the models' CPU part has one core" "$T/part.out" && ok || bad "part: auto's choice: $(grep strategy "$T/part.out")"
"$COHORT" plan "$T/part.yaml" --strategy fused --json >"$T/part.json" 2>"$T/part.err"
"$PY" - "$T/part.json" <<'PY' && ok || bad "part, fused: the groups on a 1-core part"
import json, sys
g = json.load(open(sys.argv[1]))["groups"]
assert [x["models"] for x in g] == [["q1", "q2"]], g
PY

# The CPU backend's own kernels (dense_step, and dense_forward, which needs a
# first layer at least as wide as the batch): the weights do not depend on
# the thread count (work is split by whole tiles), the strategy, or the
# vector width (COHORT_CPU_KERNELS=avx2 on an AVX-512 machine). Two same-shaped
# Adam models under shared_order make a fused group that reads shared inputs.
# 160 inputs into 256 units at batch 32: big enough (over 1e6 multiply-adds)
# that a two-thread context splits the products between its threads.
awk -v rows=400 -v seed=13 -f "$(dirname "$0")/wide_csv.awk" > "$T/wide.csv"
cat > "$T/kern.yaml" <<YAML
data: {train: csv:$T/wide.csv, validation_split: 0.2}
defaults: {epochs: 2, batch_size: 32, layers: [{dense: 256, activation: relu}, {dense: 3, activation: softmax}]}
shared_order: true
models:
  - {name: k_adam}
  - {name: k_adam2, seed: 2}
  - {name: k_nesterov, optimizer: {name: sgd, lr: 0.05, momentum: 0.9, nesterov: true}}
  - {name: k_adamw, optimizer: {name: adamw, lr: 0.01, weight_decay: 0.01}}
YAML
"$COHORT" train "$T/kern.yaml" --strategy sequential --threads 1 --out "$T/kern-ref" --quiet >/dev/null 2>&1 && ok || bad "kernels: reference run"
for v in "sequential 2" "fused 2" "threads 2"; do
    set -- $v
    "$COHORT" train "$T/kern.yaml" --strategy $1 --threads $2 --out "$T/kern-$1" --quiet >/dev/null 2>&1 && ok || bad "kernels: $1 --threads $2 run"
done
COHORT_CPU_KERNELS=avx2 "$COHORT" train "$T/kern.yaml" --strategy sequential --threads 1 --out "$T/kern-avx2" --quiet >/dev/null 2>&1 && ok || bad "kernels: avx2 run"
# A thread with nothing left to start helps a running model (threads): here
# the small model ends at once and its thread then takes part in most of the
# large model's steps. The large model's weights must not change.
cat > "$T/help.yaml" <<YAML
data: {train: csv:$T/wide.csv, validation_split: 0.2}
defaults: {batch_size: 32}
models:
  - {name: h_large, epochs: 30, layers: [{dense: 256, activation: relu}, {dense: 3, activation: softmax}]}
  - {name: h_small, epochs: 1, layers: [{dense: 4, activation: relu}, {dense: 3, activation: softmax}]}
YAML
"$COHORT" train "$T/help.yaml" --strategy sequential --threads 1 --out "$T/help-ref" --quiet >/dev/null 2>&1 && ok || bad "kernels: helper reference run"
"$COHORT" train "$T/help.yaml" --strategy threads --threads 2 --out "$T/help-thr" --quiet >/dev/null 2>&1 && ok || bad "kernels: helper threads run"
for m in h_large h_small; do
    cmp -s "$T/help-ref/models/$m.safetensors" "$T/help-thr/models/$m.safetensors" && ok || bad "kernels: weights of $m with a helper thread differ from sequential --threads 1"
done
for run in sequential fused threads avx2; do
    for m in k_adam k_adam2 k_nesterov k_adamw; do
        cmp -s "$T/kern-ref/models/$m.safetensors" "$T/kern-$run/models/$m.safetensors" && ok || bad "kernels: weights of $m under $run differ from sequential --threads 1"
    done
done

# The test pass gives the loss, the accuracy and the classes behind each
# model's confusion matrix at once, for groups of one and fused groups (the
# two same-shaped models share one under fused): each matrix must count
# every test sample once, and its diagonal must be the test accuracy.
cat > "$T/conf.yaml" <<YAML
data: {train: csv:$T/wide.csv, test: csv:$T/wide.csv, validation_split: 0.2}
defaults: {epochs: 2, batch_size: 32, layers: [{dense: 64, activation: relu}, {dense: 3, activation: softmax}]}
shared_order: true
models:
  - {name: c_a}
  - {name: c_b, seed: 5}
  - {name: c_c, layers: [{dense: 8, activation: relu}, {dense: 3, activation: softmax}]}
YAML
# (One thread: on two, fused would cut the pair into two groups of one.)
for st in sequential fused; do
    "$COHORT" train "$T/conf.yaml" --strategy $st --threads 1 --out "$T/conf-$st" --quiet >/dev/null 2>&1 && ok || bad "confusion: $st run"
    "$PY" - "$T/conf-$st/results.json" <<'PYEOF' && ok || bad "confusion: matrices under $st do not match the test results"
import json, sys
r = json.load(open(sys.argv[1]))
n = r["data"]["test_samples"]
for m in r["models"]:
    c = m["confusion"]
    total = sum(map(sum, c))
    diag = sum(c[i][i] for i in range(len(c)))
    assert total == n, (m["name"], total, n)
    assert abs(diag / n - m["test"]["accuracy"]) < 1e-9, (m["name"], diag / n, m["test"]["accuracy"])
PYEOF
done


# AVX2 and AVX-512 give the same weights bit for bit (README), so every
# choice of a path by shape must fall the same way under both: 33 rows of 785
# inputs through dense 6 (the forward's transposed input fits the stack at
# AVX2's rounding of the rows, 40, not at AVX-512's, 48), a later layer's
# input gradient 24 wide (a vector and a half under AVX2, 8 scalar columns
# under AVX-512) and a first layer of 40 units at batch 33. Each took the own
# kernels under one ISA and OpenBLAS under the other.
if grep -qw avx512f /proc/cpuinfo; then
    awk 'BEGIN { srand(5); for (i = 0; i < 150; i++) { line = "";
      for (j = 0; j < 785; j++) line = line sprintf("%.3f,", rand() - 0.5); print line (i % 3) } }' > "$T/isa.csv"
    cat > "$T/isa.yaml" <<YAML
data: {train: csv:$T/isa.csv}
defaults: {epochs: 1, batch_size: 33, shuffle: false, optimizer: {name: sgd, lr: 0.05, momentum: 0.9}}
models:
  - {name: i_6, layers: [{dense: 6, activation: relu}, {dense: 3, activation: softmax}]}
  - {name: i_24, batch_size: 64, layers: [{dense: 24, activation: relu}, {dense: 10, activation: relu}, {dense: 3, activation: softmax}]}
  - {name: i_40, layers: [{dense: 40, activation: relu}, {dense: 3, activation: softmax}]}
YAML
    for k in avx512 avx2; do
        COHORT_CPU_KERNELS=$k "$COHORT" train "$T/isa.yaml" --strategy sequential --threads 1 --out "$T/isa-$k" --quiet >/dev/null 2>&1 && ok || bad "isa: $k run"
    done
    for m in i_6 i_24 i_40; do
        cmp -s "$T/isa-avx512/models/$m.safetensors" "$T/isa-avx2/models/$m.safetensors" && ok || bad "isa: weights of $m differ between AVX2 and AVX-512"
    done
fi

# The math unit (backend/cpu/vmath.h) computes sigmoid, tanh, gelu and silu
# in vectors and the rest of a row one at a time, the same bits either way:
# odd widths (37, 21: tails under both ISAs), an activation layer over whole
# batches (no bias: one run of rows x units), same-shaped pairs in fused
# groups, two threads, and AVX2 against AVX-512 must all give the same weights.
cat > "$T/vm.yaml" <<YAML
data: {train: csv:$T/wide.csv, validation_split: 0.2}
defaults: {epochs: 1, batch_size: 30, shuffle: false}
models:
  - {name: v_gelu, layers: [{dense: 37, activation: gelu}, {dense: 21, activation: silu}, {dense: 3, activation: softmax}]}
  - {name: v_gelu2, seed: 2, layers: [{dense: 37, activation: gelu}, {dense: 21, activation: silu}, {dense: 3, activation: softmax}]}
  - {name: v_tanh, layers: [{dense: 37, activation: tanh}, {dense: 21}, {activation: sigmoid}, {dense: 3, activation: softmax}]}
  - {name: v_tanh2, seed: 2, layers: [{dense: 37, activation: tanh}, {dense: 21}, {activation: sigmoid}, {dense: 3, activation: softmax}]}
YAML
"$COHORT" train "$T/vm.yaml" --strategy sequential --threads 1 --out "$T/vm-ref" --quiet >/dev/null 2>&1 && ok || bad "vmath: reference run"
runs="fused threads"
grep -qw avx512f /proc/cpuinfo && runs="$runs avx2"
for v in $runs; do
    if [ "$v" = avx2 ]; then
        COHORT_CPU_KERNELS=avx2 "$COHORT" train "$T/vm.yaml" --strategy sequential --threads 1 --out "$T/vm-$v" --quiet >/dev/null 2>&1 && ok || bad "vmath: avx2 run"
    else
        "$COHORT" train "$T/vm.yaml" --strategy $v --threads 2 --out "$T/vm-$v" --quiet >/dev/null 2>&1 && ok || bad "vmath: $v run"
    fi
    for m in v_gelu v_gelu2 v_tanh v_tanh2; do
        cmp -s "$T/vm-ref/models/$m.safetensors" "$T/vm-$v/models/$m.safetensors" && ok || bad "vmath: weights of $m differ ($v against sequential)"
    done
done

finish
