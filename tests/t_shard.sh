#!/usr/bin/env bash
# Shards: `cohort train --shard I/N` trains a share of the models (split by
# cost, every model in exactly one share) and `cohort merge` of the shares
# equals a full run: the same weights bit for bit (--threads 1 on both
# sides), the same histories and results, in plan order; pruned models are
# a success for merge as for train. Bad indices, bad merges and a scheduler
# (which ranks the models across shares) are refused with exit 2 and a
# message.
set -u
. "$(dirname "$0")/lib.sh"

mixed_plan 5
models="small wide drop sgd long"
sed 's/name: small}/name: other}/' "$T/plan.yaml" > "$T/other.yaml"

names() { $PY -c "import json,sys; print(' '.join(m['name'] for m in json.load(open(sys.argv[1]))['models']))" "$1"; }

same_as_full() { # same_as_full DIR WHAT
    local d=$1 what=$2 m
    for m in $models; do
        cmp -s "$T/full/models/$m.safetensors" "$d/models/$m.safetensors" && ok || bad "$what: weights of $m differ"
        cmp -s "$T/full/models/$m.best.safetensors" "$d/models/$m.best.safetensors" && ok || bad "$what: best weights of $m differ"
        diff <(cut -d, -f1-5 "$T/full/history/$m.csv") <(cut -d, -f1-5 "$d/history/$m.csv") >/dev/null \
            && ok || bad "$what: history/$m.csv differs"
    done
    $PY - "$T/full/results.json" "$d/results.json" <<'PY' && ok || bad "$what: results differ"
import json, sys
a = json.load(open(sys.argv[1]))
b = json.load(open(sys.argv[2]))
assert [m["name"] for m in a["models"]] == [m["name"] for m in b["models"]], "not in plan order"
assert a["plan"] == b["plan"] and a["data"] == b["data"]
for x, y in zip(a["models"], b["models"]):
    assert y["status"] == "ok", (y["name"], y["status"], y["error"])
    for k in x:
        if k == "seconds":
            continue
        if k == "history":
            for h in ("loss", "accuracy", "val_loss", "val_accuracy"):
                assert x[k][h] == y[k][h], (x["name"], h, x[k][h], y[k][h])
            continue
        assert x[k] == y[k], (x["name"], k, x[k], y[k])
PY
}

"$COHORT" train "$T/plan.yaml" --out "$T/full" --threads 1 --quiet >/dev/null 2>&1 && ok || bad "full run"
[ "$(names "$T/full/results.json")" = "$models" ] && ok || bad "full run: models $(names "$T/full/results.json")"
$PY -c "import json,sys; r=json.load(open(sys.argv[1])); assert [m['plan_index'] for m in r['models']]==list(range(5)) and all(m['plan_models']==5 for m in r['models'])" \
    "$T/full/results.json" && ok || bad "plan_index / plan_models in results.json"

# Two shares: a partition of the models, each share non-empty; the split by
# cost puts the widest model (the most FLOPs) alone.
for i in 0 1; do
    "$COHORT" train "$T/plan.yaml" --shard $i/2 --out "$T/s$i" --threads 1 --quiet >/dev/null 2>"$T/s$i.err" \
        && ok || bad "shard $i/2 exited $?: $(cat "$T/s$i.err")"
done
s0=$(names "$T/s0/results.json") s1=$(names "$T/s1/results.json")
[ -n "$s0" ] && [ -n "$s1" ] && ok || bad "an empty share of 2: '$s0' / '$s1'"
$PY - "$models" "$s0" "$s1" <<'PY' && ok || bad "shares '$s0' and '$s1' are not a partition of '$models'"
import sys
all_, a, b = (set(x.split()) for x in sys.argv[1:])
assert a | b == all_ and not (a & b)
PY
[ "$s0" = "wide" ] && ok || bad "share 0 of 2 is '$s0', expected 'wide' (longest processing time first)"
for i in 0 1; do
    [ ! -e "$T/s$i/models/$( [ $i = 0 ] && echo small || echo wide ).safetensors" ] && ok || bad "shard $i trained a model of the other share"
done
"$COHORT" train "$T/plan.yaml" --shard 0/2 --out "$T/s0again" --threads 1 --quiet >/dev/null 2>&1
[ "$(names "$T/s0again/results.json")" = "$s0" ] && ok || bad "the split is not deterministic"

expect_error() { # expect_error WHAT MESSAGE CMD...
    local what=$1 msg=$2
    shift 2
    "$@" >"$T/err.out" 2>&1
    local rc=$?
    [ $rc -eq 2 ] && ok || bad "$what: exit $rc, expected 2"
    grep -qF -- "$msg" "$T/err.out" && ok || bad "$what: message '$(cat "$T/err.out")', expected '$msg'"
}
# A share's directory resumes with its own share only: without --shard the
# whole plan would train into it, with another share that share's models
# (and the merge would then find them twice). Refused, nothing touched.
tree_sum() { (cd "$1" && find . -type f ! -name .lock | sort | xargs md5sum | md5sum); }
before=$(tree_sum "$T/s0")
expect_error "resume of share 0/2 without --shard" "holds share 0/2 of the plan's models: resume it with --shard 0/2" \
    "$COHORT" train "$T/plan.yaml" --out "$T/s0" --resume --threads 1
expect_error "resume of share 0/2 as 1/2" "holds share 0/2 of the plan's models, not 1/2" \
    "$COHORT" train "$T/plan.yaml" --shard 1/2 --out "$T/s0" --resume --threads 1
[ "$(tree_sum "$T/s0")" = "$before" ] && ok || bad "a refused --resume changed $T/s0"
"$COHORT" train "$T/plan.yaml" --shard 0/2 --out "$T/s0" --resume --threads 1 --quiet >/dev/null 2>&1 \
    && ok || bad "resume of share 0/2 with --shard 0/2 exited $?"
[ "$(names "$T/s0/results.json")" = "$s0" ] && ok || bad "resume of share 0/2 trained '$(names "$T/s0/results.json")'"

"$COHORT" merge "$T/s1" "$T/s0" --out "$T/m2" >"$T/m2.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok || bad "merge of 2 exited $rc: $(cat "$T/m2.out")"
grep -q "5 models from 2 directories" "$T/m2.out" && ok || bad "merge summary: $(cat "$T/m2.out")"
# merge's table has train's columns (val_loss had been missing).
grep -q "^model  *status  *device  *params  *epochs  *best_ep  *val_loss  *val_acc  *test_acc  *seconds$" "$T/m2.out" \
    && ok || bad "merge's table lacks train's columns: $(head -n 3 "$T/m2.out")"
same_as_full "$T/m2" "merge of 2 shards"
[ -s "$T/m2/report.html" ] && grep -q "long" "$T/m2/report.html" && ok || bad "merged report.html"
$PY -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['merged_from']==[sys.argv[2], sys.argv[3]], r.get('merged_from')" \
    "$T/m2/results.json" "$T/s1" "$T/s0" && ok || bad "merged_from"

# Three shares, and one share more than models: the empty one succeeds.
for i in 0 1 2; do
    "$COHORT" train "$T/plan.yaml" --shard $i/3 --out "$T/t$i" --threads 1 --quiet >/dev/null 2>&1 || bad "shard $i/3"
done
"$COHORT" train "$T/plan.yaml" --shard 5/6 --out "$T/empty" --threads 1 >/dev/null 2>"$T/empty.err"
rc=$?
[ $rc -eq 0 ] && grep -q "holds none of the 5 models" "$T/empty.err" && ok || bad "empty shard 5/6: exit $rc: $(cat "$T/empty.err")"
[ -z "$(names "$T/empty/results.json")" ] && ok || bad "empty shard lists models"
"$COHORT" merge "$T/t0" "$T/t1" "$T/t2" "$T/empty" --out "$T/m3" >/dev/null 2>"$T/m3.err" && ok || bad "merge of 3 + empty: $(cat "$T/m3.err")"
same_as_full "$T/m3" "merge of 3 shards"

# A missing shard: merged, but exit 1 and the missing models named by index.
"$COHORT" merge "$T/s0" --out "$T/part" >/dev/null 2>"$T/part.err"
rc=$?
[ $rc -eq 1 ] && ok || bad "merge of 1 of 2 shards exited $rc, expected 1"
grep -q "4 of them (plan index 0, 2, 3, 4) in none" "$T/part.err" && ok || bad "missing shard message: $(cat "$T/part.err")"
[ "$(names "$T/part/results.json")" = "wide" ] && ok || bad "partial merge: $(names "$T/part/results.json")"

expect_error "index out of range" "--shard 2/2: index must be below the count" \
    "$COHORT" train "$T/plan.yaml" --shard 2/2 --out "$T/x"
expect_error "index far out of range" "--shard 7/3: index must be below the count" \
    "$COHORT" train "$T/plan.yaml" --shard 7/3 --out "$T/x"
for s in 1 a/2 0/0 -1/2 1/ /2 1/2x; do
    expect_error "--shard $s" "--shard needs I/N" "$COHORT" train "$T/plan.yaml" --shard "$s" --out "$T/x"
done
[ ! -e "$T/x" ] && ok || bad "a refused --shard wrote $T/x"

mkdir -p "$T/nothing"
expect_error "merge: no results.json" "$T/nothing has no results.json" \
    "$COHORT" merge "$T/s0" "$T/nothing" --out "$T/y"
cp -r "$T/s0" "$T/s0copy"
expect_error "merge: a model twice" "model 'wide' is in both $T/s0 and $T/s0copy" \
    "$COHORT" merge "$T/s0" "$T/s1" "$T/s0copy" --out "$T/y"
expect_error "merge: a directory twice" "is given twice" "$COHORT" merge "$T/s0" "$T/s0/" --out "$T/y"
"$COHORT" train "$T/other.yaml" --shard 0/2 --out "$T/o0" --threads 1 --quiet >/dev/null 2>&1 || bad "shard of the other plan"
expect_error "merge: different plans" "are shards of different plans ('plan' and 'other')" \
    "$COHORT" merge "$T/s0" "$T/o0" --out "$T/y"
"$COHORT" train "$T/other.yaml" --shard 1/2 --out "$T/o1" --threads 1 --quiet >/dev/null 2>&1 || bad "shard 1 of the other plan"
sed 's/"plan": "other"/"plan": "plan"/' "$T/o1/results.json" > "$T/o1/r" && mv "$T/o1/r" "$T/o1/results.json"
expect_error "merge: same name, other models" "are shards of different plans: model 0 of the plan is 'small' in one, 'other' in the other" \
    "$COHORT" merge "$T/s0" "$T/s1" "$T/o1" --out "$T/y"
expect_error "merge: into a shard" "is one of the shards" "$COHORT" merge "$T/s0" "$T/s1" --out "$T/s1"
expect_error "merge: no --out" "needs the shards' directories and --out DIR" "$COHORT" merge "$T/s0" "$T/s1"
echo '{"models": 3}' > "$T/nothing/results.json"
expect_error "merge: not results" "no \"models\" array" "$COHORT" merge "$T/s0" "$T/nothing" --out "$T/y"
[ ! -e "$T/y" ] && ok || bad "a refused merge wrote $T/y"

# A scheduler ranks the models against each other: a shard would rank its
# own only, and the merge would differ from one run. Refused, nothing written.
for s in asha hyperband median; do
    { cat "$T/plan.yaml"; echo "scheduler: {name: $s}"; } > "$T/sched.yaml"
    expect_error "$s with --shard" "sched.yaml:9: scheduler $s ranks the models against each other, but a shard of the plan (--shard, or an MPI rank) holds only some of them" \
        "$COHORT" train "$T/sched.yaml" --shard 0/2 --out "$T/sched-$s"
    [ ! -e "$T/sched-$s" ] && ok || bad "a refused $s shard wrote $T/sched-$s"
done
{ cat "$T/plan.yaml"; echo "scheduler: {name: pbt, perturbation_interval: 1, hyperparam_mutations: {optimizer.lr: {uniform: [0.001, 0.01]}}}"; } > "$T/sched.yaml"
expect_error "pbt with --shard" "sched.yaml:9: pbt exploits across the whole population, which a shard of the plan does not hold" \
    "$COHORT" train "$T/sched.yaml" --shard 1/2 --out "$T/sched-pbt"

# A model a scheduler pruned is a success for merge, as for train: exit 0.
{ cat "$T/plan.yaml"; echo "scheduler: {name: asha}"; } > "$T/asha.yaml"
"$COHORT" train "$T/asha.yaml" --out "$T/asha" --threads 1 --quiet >/dev/null 2>&1 && ok || bad "asha run"
"$COHORT" merge "$T/asha" --out "$T/asha-merged" >/dev/null 2>"$T/asha.err" && ok || bad "merge of pruned models exited $?: $(cat "$T/asha.err")"
grep -qF "5 models from 1 directory into $T/asha-merged: 1 ok, 4 pruned" "$T/asha.err" && ok || bad "merge of pruned models: $(cat "$T/asha.err")"

# Without MPI built in, a process started as one of several ranks says so
# instead of training every model into the same directory as the others.
if ! ldd "$COHORT" 2>/dev/null | grep -q libmpi; then
    expect_error "launched by mpirun without MPI" "this cohort is built without MPI" \
        env OMPI_COMM_WORLD_SIZE=2 "$COHORT" train "$T/plan.yaml" --out "$T/z"
    [ ! -e "$T/z" ] && ok || bad "a refused MPI launch wrote $T/z"
fi

finish
