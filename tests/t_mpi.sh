#!/usr/bin/env bash
# MPI ranks: `mpirun -np N cohort train` (2 and 3 ranks; 6 for 4 models)
# gives the same per-model results as one process, bit for bit with
# --threads 1, with one results.json written by rank 0. A rank killed with
# SIGKILL: under Open MPI's default the job ends non-zero, the models that
# had finished are in results.json, and --resume (with any number of ranks)
# completes the run; under --enable-recovery the survivors finish, the dead
# rank's models are failed and --resume trains them. A pruning scheduler is
# refused (a rank holds its share only). Skipped without
# mpirun or without an MPI build.
set -u
. "$(dirname "$0")/lib.sh"
needs_test_hooks
if ! command -v mpirun >/dev/null 2>&1; then
    echo "$NAME: skipped: no mpirun (apt-get install openmpi-bin libopenmpi-dev)"
    exit 77
fi
if ! ldd "$COHORT" 2>/dev/null | grep -q libmpi; then
    echo "$NAME: skipped: $COHORT is built without MPI (install libopenmpi-dev, configure again)"
    exit 77
fi
if [ -n "${COHORT_SANITIZED:-}" ]; then
    # Open MPI leaves its own allocations (in plugins it unloads) at exit.
    echo "$NAME: under the sanitizers without leak detection (Open MPI's own allocations)"
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
    OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
MPIRUN="mpirun --oversubscribe"

mixed_plan 7

same_as() { # same_as REF DIR WHAT MODELS
    local ref=$1 d=$2 what=$3 m
    for m in $4; do
        cmp -s "$ref/models/$m.safetensors" "$d/models/$m.safetensors" && ok || bad "$what: weights of $m differ"
        diff <(cut -d, -f1-5 "$ref/history/$m.csv") <(cut -d, -f1-5 "$d/history/$m.csv") >/dev/null \
            && ok || bad "$what: history/$m.csv differs"
    done
    $PY - "$ref/results.json" "$d/results.json" <<'PY' && ok || bad "$what: results differ"
import json, sys
a = json.load(open(sys.argv[1]))
b = json.load(open(sys.argv[2]))
assert [m["name"] for m in a["models"]] == [m["name"] for m in b["models"]], "not in plan order"
for x, y in zip(a["models"], b["models"]):
    assert y["status"] == "ok", (y["name"], y["status"], y["error"])
    for k in ("history", "best", "test", "confusion", "epochs_run", "params", "plan_index", "weights"):
        if k == "history":
            for h in ("loss", "accuracy", "val_loss", "val_accuracy"):
                assert x[k][h] == y[k][h], (x["name"], h)
        else:
            assert x[k] == y[k], (x["name"], k, x[k], y[k])
PY
}

# A killed rank. The split by cost gives rank 0 'big' and 'first' (which it
# trains first, being first in the plan), rank 1 'm2' and 'm3'.
cat > "$T/kill.yaml" <<YAML
data: {train: csv:$T/d.csv, test: csv:$T/t.csv, validation_split: 0.2}
defaults: {epochs: 14, batch_size: 32, layers: [{dense: 24, activation: relu}, {dense: 3, activation: softmax}]}
models:
  - {name: first, epochs: 2}
  - {name: big, epochs: 20}
  - {name: m2}
  - {name: m3, epochs: 12, optimizer: {name: sgd, lr: 0.05, momentum: 0.9}}
YAML
kmodels="first big m2 m3"
# Its reference run, meanwhile (it mostly waits on fsync).
"$COHORT" train "$T/kill.yaml" --out "$T/kref" --threads 1 --quiet >/dev/null 2>&1 &
kref=$!
"$COHORT" train "$T/plan.yaml" --out "$T/one" --threads 1 --quiet >/dev/null 2>&1 && ok || bad "single-process run"
models="small wide drop sgd long"
for n in 2 3; do
    $MPIRUN -np $n "$COHORT" train "$T/plan.yaml" --out "$T/np$n" --threads 1 --quiet >"$T/np$n.out" 2>&1
    rc=$?
    [ $rc -eq 0 ] && ok || bad "mpirun -np $n exited $rc: $(tail -5 "$T/np$n.out")"
    same_as "$T/one" "$T/np$n" "mpirun -np $n" "$models"
    grep -q "cohort: $n ranks trained 5 models: 5 ok" "$T/np$n.out" && ok || bad "-np $n: no summary line"
    $PY - "$T/np$n/results.json" $n <<'PY' && ok || bad "-np $n: ranks in results.json"
import json, sys
r = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
assert r["ranks"] == n, r.get("ranks")
used = {m["rank"] for m in r["models"]}
assert used <= set(range(n)) and len(used) == min(n, 5), used
PY
done
# The same split as --shard: rank R trains what --shard R/N trains.
"$COHORT" train "$T/plan.yaml" --shard 1/3 --out "$T/s1of3" --threads 1 --quiet >/dev/null 2>&1
$PY - "$T/np3/results.json" "$T/s1of3/results.json" <<'PY' && ok || bad "rank 1 of 3 and --shard 1/3 differ"
import json, sys
a = [m["name"] for m in json.load(open(sys.argv[1]))["models"] if m["rank"] == 1]
b = [m["name"] for m in json.load(open(sys.argv[2]))["models"]]
assert a == b, (a, b)
PY
# --shard makes no sense under mpirun; the lock keeps a second run out.
$MPIRUN -np 2 "$COHORT" train "$T/plan.yaml" --shard 0/2 --out "$T/x" >"$T/x.out" 2>&1
[ $? -ne 0 ] && grep -q "under mpirun every rank takes its share" "$T/x.out" && ok || bad "--shard under mpirun: $(cat "$T/x.out")"
[ "$(grep -c "under mpirun" "$T/x.out")" -eq 1 ] && ok || bad "the --shard error is printed by more than rank 0"
# A pruning scheduler ranks the models against each other, which a rank,
# holding its share only, cannot: refused, by rank 0.
{ cat "$T/plan.yaml"; echo "scheduler: {name: asha}"; } > "$T/asha.yaml"
$MPIRUN -np 2 "$COHORT" train "$T/asha.yaml" --out "$T/asha" >"$T/asha.out" 2>&1
[ $? = 2 ] && [ "$(grep -c "scheduler asha ranks the models against each other" "$T/asha.out")" -eq 1 ] &&
    ok || bad "asha under mpirun: $(cat "$T/asha.out")"

wait $kref && ok || bad "kill plan: reference run"

# Wait until rank 0's journal says model $2 is ok (its record is written as
# it finishes; results.json only now and then), then kill -9 rank $3 of run $1.
kill_when() {
    local d=$1 model=$2 rank=$3 i
    # Up to a minute: it returns as soon as the record is there, and on a
    # loaded machine (a parallel ctest, other work) mpirun's start and the
    # model's two epochs have taken more than the 15 s this once allowed.
    for i in $(seq 1 1200); do
        $PY -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['status'] == 'ok' else 1)" \
            "$d/.ranks/0/records/$model.json" 2>/dev/null && break
        sleep 0.05
    done
    [ "$i" -lt 1200 ] || echo "$NAME: model $model of $d not ok after a minute; killing rank $rank anyway"
    local pid
    pid=$(awk '{print $2}' "$d/.ranks/$rank/alive")
    kill -9 "$pid" && ok || bad "no rank $rank to kill in $d"
}
status_of() { $PY -c "import json,sys; print(' '.join(m['name']+'='+m['status'] for m in json.load(open(sys.argv[1]))['models']))" "$1"; }

# Default: Open MPI ends the job; what had finished is in results.json.
# Slowed writes (20 ms each, a few an epoch) leave 'big' time to be killed in.
export COHORT_TEST_SLOW_WRITES_US=20000
$MPIRUN -np 2 "$COHORT" train "$T/kill.yaml" --out "$T/k1" --threads 1 --quiet >"$T/k1.out" 2>&1 &
job=$!
sleep 0.3
kill_when "$T/k1" first 1
wait $job
rc=$?
[ $rc -ne 0 ] && ok || bad "a killed rank: mpirun exited 0"
st=$(status_of "$T/k1/results.json")
case " $st " in *" first=ok "*) ok ;; *) bad "a killed rank: finished model 'first' not ok in results.json: $st" ;; esac
case " $st " in *" big=ok "*) bad "a killed rank: 'big' cannot have finished yet: $st" ;; *) ok ;; esac
echo "$NAME: killed rank 1 under the default: mpirun exit $rc; results.json: $st"
unset COHORT_TEST_SLOW_WRITES_US
# Resumed by more ranks than models: some have nothing to do.
$MPIRUN -np 6 "$COHORT" train "$T/kill.yaml" --out "$T/k1" --threads 1 --quiet --resume >"$T/k1r.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok || bad "--resume with 6 ranks after a killed rank exited $rc: $(tail -5 "$T/k1r.out")"
grep -q "cohort: 6 ranks trained 4 models: 4 ok" "$T/k1r.out" && ok || bad "--resume with 6 ranks: no summary line"
same_as "$T/kref" "$T/k1" "killed rank, resumed with 6 ranks" "$kmodels"

# --enable-recovery: the survivors finish; the dead rank's models failed.
cat > "$T/rank.sh" <<EOF
#!/bin/sh
"$COHORT" "\$@"
rc=\$?
echo \$rc > "$T/rc.\$OMPI_COMM_WORLD_RANK"
exit \$rc
EOF
chmod +x "$T/rank.sh"
COHORT_TEST_SLOW_WRITES_US=20000 $MPIRUN --enable-recovery -np 2 "$T/rank.sh" train "$T/kill.yaml" --out "$T/k2" --threads 1 --quiet >"$T/k2.out" 2>&1 &
job=$!
sleep 0.3
kill_when "$T/k2" first 1
for i in $(seq 1 400); do kill -0 $job 2>/dev/null || break; sleep 0.05; done
kill -0 $job 2>/dev/null && { bad "--enable-recovery: rank 0 hangs after rank 1 died"; kill -9 $job; }
wait $job 2>/dev/null
[ "$(cat "$T/rc.0" 2>/dev/null)" = 1 ] && ok || bad "--enable-recovery: rank 0 exited $(cat "$T/rc.0" 2>/dev/null), expected 1"
grep -q "1 rank died; rank 1 died before it finished (its process" "$T/k2.out" && ok || bad "--enable-recovery: no word of the dead rank: $(tail -5 "$T/k2.out")"
$PY - "$T/k2/results.json" <<'PY' && ok || bad "--enable-recovery: results: $(status_of "$T/k2/results.json")"
import json, sys
r = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}
for n, m in r.items():
    if m["rank"] == 0:
        assert m["status"] == "ok", (n, m["status"], m["error"])
    else:
        assert m["status"] in ("ok", "failed"), (n, m["status"])
        if m["status"] == "failed":
            assert m["error"].startswith("rank 1 died before it finished"), m["error"]
assert any(m["status"] == "failed" for m in r.values())
PY
$MPIRUN -np 2 "$COHORT" train "$T/kill.yaml" --out "$T/k2" --threads 1 --quiet --resume >"$T/k2r.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok || bad "--resume after --enable-recovery exited $rc: $(tail -5 "$T/k2r.out")"
same_as "$T/kref" "$T/k2" "dead rank under --enable-recovery, resumed" "$kmodels"
# A single process resumes an MPI run's directory too: nothing left to do.
"$COHORT" train "$T/kill.yaml" --out "$T/k2" --threads 1 --quiet --resume >/dev/null 2>&1 && ok || bad "single-process --resume of an MPI run's directory"
same_as "$T/kref" "$T/k2" "single-process --resume of an MPI run" "$kmodels"

finish
