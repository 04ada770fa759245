#!/usr/bin/env bash
# The plan's scheduler. asha: at each rung the best 1/eta of the models that
# reached it go on (checked against the histories), the others end `pruned`
# (exit 0) with the epoch and rung; the run spends at most the budget that
# `cohort plan` prints. The same models are pruned and the same weights come
# out under every strategy, and after kill -9 and --resume. median: a model
# stops where its best so far is worse than the median of the others'
# running averages (Ray's MedianStoppingRule).
# Bad scheduler settings are plan errors at their line.
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }

blobs 4 900 1.6
cat > "$T/asha.yaml" <<YAML
data: {train: csv:$T/train.csv, validation_split: 0.25}
defaults: {epochs: 9, batch_size: 16, layers: [{dense: 12, activation: relu}, {dense: 3, activation: softmax}]}
models: [{name: m}]
search: {samples: 9, seed: 3, space: {optimizer.lr: {loguniform: [1.0e-4, 3.0e-2]}}}
scheduler: {name: asha, metric: val_loss, grace_period: 1, reduction_factor: 3}
YAML

"$COHORT" plan "$T/asha.yaml" --json > "$T/plan.json" && ok || bad "cohort plan"
"$COHORT" plan "$T/asha.yaml" | grep -q "scheduler asha on val_loss (min): rungs at epochs 1, 3, the best 1/3 of each rung goes on; at most 21 of 81 epochs (26%)" \
    && ok || bad "cohort plan's scheduler line: $("$COHORT" plan "$T/asha.yaml" | grep scheduler)"

for s in sequential threads fused processes; do
    expect_status 0 "asha $s" -- "$COHORT" train "$T/asha.yaml" --out "$T/$s" --strategy $s --quiet
done
/usr/bin/python3 - "$T" "$T/plan.json" <<'PY' && ok || bad "asha decisions"
import json, sys
t = sys.argv[1]
budget = json.load(open(sys.argv[2]))["scheduler"]["max_epochs"]
ref = json.load(open(f"{t}/sequential/results.json"))["models"]
# The rungs' decisions, replayed from the histories: the best third at epoch 1, then at 3.
alive = [m["name"] for m in ref]
for rung, epoch in enumerate([1, 3]):
    at = sorted(alive, key=lambda n: ([m for m in ref if m["name"] == n][0]["history"]["val_loss"][epoch - 1], n))
    keep = at[:max(1, len(at) // 3)]
    for n in at[len(keep):]:
        m = [m for m in ref if m["name"] == n][0]
        assert m["status"] == "pruned" and m["pruned_at"] == {"epoch": epoch, "rung": rung}, (n, m["status"], m.get("pruned_at"))
    alive = keep
assert len(alive) == 1
winner = [m for m in ref if m["name"] == alive[0]][0]
assert winner["status"] == "ok" and winner["epochs_run"] == 9, winner["status"]
spent = sum(m["epochs_run"] for m in ref)
assert spent <= budget and spent <= 0.4 * 81, (spent, budget)
for s in ("threads", "fused", "processes"):
    other = {m["name"]: m for m in json.load(open(f"{t}/{s}/results.json"))["models"]}
    for m in ref:
        o = other[m["name"]]
        assert (o["status"], o.get("pruned_at"), o["history"]["val_loss"]) == \
               (m["status"], m.get("pruned_at"), m["history"]["val_loss"]), (s, m["name"])
PY
"$COHORT" report "$T/sequential" > /dev/null && [ "$(grep -o 'pruned at rung [01]' "$T/sequential/report.html" | wc -l)" -eq 8 ] &&
    grep -q 'pill cut' "$T/sequential/report.html" && ok || bad "report.html does not show the 8 pruned models and their rungs"
for s in threads fused processes; do
    same=1
    for f in "$T/sequential"/models/*.safetensors; do
        cmp -s "$f" "$T/$s/models/$(basename "$f")" || same=0
    done
    [ $same = 1 ] && ok || bad "asha $s: weights differ from sequential"
done

# kill -9 once a rung's records are written, then --resume: the same end.
"$COHORT" train "$T/asha.yaml" --out "$T/killed" --quiet > /dev/null 2>&1 &
pid=$!
for i in $(seq 1 200); do
    [ "$(ls "$T/killed/records" 2>/dev/null | wc -l)" -ge 5 ] && break
    sleep 0.02
done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
expect_status 0 "asha --resume" -- "$COHORT" train "$T/asha.yaml" --out "$T/killed" --resume --quiet
same=1
for f in "$T/sequential"/models/*.safetensors; do
    cmp -s "$f" "$T/killed/models/$(basename "$f")" || same=0
done
[ $same = 1 ] && ok || bad "asha resumed after kill -9: weights differ"
/usr/bin/python3 - "$T/sequential/results.json" "$T/killed/results.json" <<'PY' && ok || bad "asha resumed: statuses differ"
import json, sys
a, b = ({m["name"]: (m["status"], m.get("pruned_at")) for m in json.load(open(p))["models"]} for p in sys.argv[1:])
assert a == b, (a, b)
PY

# A kill between a model's checkpoint at a rung and its record: the model has
# neither weights nor record, only its checkpoint; --resume ends it the same.
cp -r "$T/sequential" "$T/cut"
victim=$(basename "$(ls "$T/cut/records" | head -1)" .json)
rm -f "$T/cut/records/$victim.json" "$T/cut/models/$victim.safetensors"
for m in "$T"/cut/records/*.json; do
    case "$(cat "$m")" in *'"status": "pruned"'*) ;; *) rm -f "$m" "$T/cut/models/$(basename "$m" .json).safetensors" ;; esac
done
# results.json, written after the records, is as old as they are or older.
/usr/bin/python3 - "$T/cut" <<'PY'
import json, os, sys
d = sys.argv[1]
r = json.load(open(f"{d}/results.json"))
for m in r["models"]:
    if not os.path.exists(f"{d}/records/{m['name']}.json"):
        m["status"], m["pruned_at"] = "running", None
json.dump(r, open(f"{d}/results.json", "w"))
PY
expect_status 0 "resume from rung checkpoints" -- "$COHORT" train "$T/asha.yaml" --out "$T/cut" --resume --quiet
same=1
for f in "$T/sequential"/models/*.safetensors; do
    cmp -s "$f" "$T/cut/models/$(basename "$f")" || same=0
done
[ $same = 1 ] && ok || bad "resumed from rung checkpoints: weights differ or are missing"

# hyperband: asha in brackets dealt round robin; bracket b cuts from rung b on.
sed 's/name: asha/name: hyperband/' "$T/asha.yaml" > "$T/hb.yaml"
"$COHORT" plan "$T/hb.yaml" | grep -q "rungs at epochs 1, 3 in 3 brackets.*at most 53 of 81 epochs" && ok || bad "hyperband plan line"
for s in sequential fused; do
    expect_status 0 "hyperband $s" -- "$COHORT" train "$T/hb.yaml" --out "$T/hb-$s" --strategy $s --quiet
done
/usr/bin/python3 - "$T/hb-sequential/results.json" "$T/hb-fused/results.json" <<'PY' && ok || bad "hyperband decisions"
import json, sys
ms = json.load(open(sys.argv[1]))["models"]
fused = json.load(open(sys.argv[2]))["models"]
assert [(m["status"], m.get("pruned_at")) for m in ms] == [(m["status"], m.get("pruned_at")) for m in fused]
for b in range(3):
    alive = [m for i, m in enumerate(ms) if i % 3 == b]
    for rung, epoch in enumerate([1, 3]):
        if rung < b:
            continue
        at = sorted(alive, key=lambda m: (m["history"]["val_loss"][epoch - 1], m["name"]))
        keep = at[:max(1, len(at) // 3)]
        for m in at[len(keep):]:
            assert m["status"] == "pruned" and m["pruned_at"] == {"epoch": epoch, "rung": rung}, (b, m["name"])
        alive = keep
    for m in alive:
        assert m["status"] == "ok" and m["epochs_run"] == 9, (b, m["name"], m["status"])
PY

# median: replayed from the histories.
cat > "$T/median.yaml" <<YAML
data: {train: csv:$T/train.csv, validation_split: 0.25}
defaults: {epochs: 6, batch_size: 16, layers: [{dense: 12, activation: relu}, {dense: 3, activation: softmax}]}
models: [{name: m}]
search: {samples: 8, seed: 14, space: {optimizer.lr: {loguniform: [1.0e-5, 3.0e-2]}}}
scheduler: {name: median, metric: val_loss, grace_period: 2}
YAML
expect_status 0 "median" -- "$COHORT" train "$T/median.yaml" --out "$T/median" --quiet
/usr/bin/python3 - "$T/median/results.json" <<'PY' && ok || bad "median decisions"
import json, statistics, sys
ms = json.load(open(sys.argv[1]))["models"]
assert sum(m["status"] == "pruned" for m in ms) >= 1, [m["status"] for m in ms]
# Ray Tune's MedianStoppingRule (Golovin et al.): a model's best so far
# against the median of the others' running averages over epochs
# grace_period (2) to e.
def best(m, e):
    return min(m["history"]["val_loss"][:e])
def mean(m, e):
    return statistics.fmean(m["history"]["val_loss"][1:e])
for e in range(2, 6):
    at = [m for m in ms if m["epochs_run"] >= e and not (m["status"] == "pruned" and m["pruned_at"]["epoch"] < e)]
    for m in at:
        others = [mean(o, e) for o in at if o is not m]
        worse = len(others) >= 3 and best(m, e) > statistics.median(others)
        stopped = m["status"] == "pruned" and m["pruned_at"]["epoch"] == e
        assert worse == stopped, (m["name"], e, best(m, e), others, m["status"])
# This search tells the rule from the others' best values, which cohort had
# used: at the first epoch the two disagree, that one would have stopped
# more models (seed 14: a second one at epoch 3).
differs = False
for e in range(2, 6):
    at = [m for m in ms if m["epochs_run"] >= e and not (m["status"] == "pruned" and m["pruned_at"]["epoch"] < e)]
    stopped = {m["name"] for m in at if m["status"] == "pruned" and m["pruned_at"]["epoch"] == e}
    by_best = {m["name"] for m in at if len(at) > 3 and
               best(m, e) > statistics.median([best(o, e) for o in at if o is not m])}
    if stopped != by_best:
        differs = True
        break
assert differs, "the search does not tell the two rules apart"
PY

# Bad settings, at their line.
bad_scheduler() { # WHAT MESSAGE SCHEDULER
    printf 'data: {train: csv:%s/train.csv, validation_split: 0.25}\nmodels: [{name: m, layers: [{dense: 3, activation: softmax}]}]\nscheduler: %s\n' "$T" "$3" > "$T/bad.yaml"
    expect_status 2 "$1" -- "$COHORT" plan "$T/bad.yaml"
    expect_err "$2" "$1"
}
bad_scheduler "pbt" "bad.yaml:3: scheduler pbt needs perturbation_interval, the epochs between two exploits" "{name: pbt}"
bad_scheduler "typo" "bad.yaml:3: scheduler.name must be one of none, asha, median, hyperband, pbt, got 'ashaa' (did you mean 'asha'?)" "{name: ashaa}"
bad_scheduler "grace" "bad.yaml:3: scheduler.grace_period (5) is more than max_t (3): no model could be stopped" "{name: asha, grace_period: 5, max_t: 3}"
bad_scheduler "regression metric" "bad.yaml:3: the scheduler watches val_mae, but model 'm' records accuracy" "{name: asha, metric: val_mae}"
bad_scheduler "median's eta" "bad.yaml:3: scheduler.reduction_factor is a setting of asha and hyperband, not of scheduler median" "{name: median, reduction_factor: 3}"
bad_scheduler "unknown key" "bad.yaml:3: unknown key 'grace' in scheduler (did you mean 'grace_period'?)" "{name: asha, grace: 1}"
printf 'data: {train: csv:%s/train.csv}\nmodels: [{name: m, layers: [{dense: 3, activation: softmax}]}]\nscheduler: {name: median, metric: val_loss}\n' "$T" > "$T/bad.yaml"
expect_status 2 "no validation" -- "$COHORT" plan "$T/bad.yaml"
expect_err "bad.yaml:3: the scheduler watches val_loss, but the plan has no validation data" "no validation"
# A grace_period no model's epochs pass leaves nothing to decide: cohort plan
# says so (it printed "rungs at epochs, the best 1/4 ...").
sed 's/grace_period: 1, reduction_factor: 3/grace_period: 9/' "$T/asha.yaml" > "$T/late.yaml"
"$COHORT" plan "$T/late.yaml" | grep -q "scheduler asha on val_loss (min): grace_period 9 is not below any model's last epoch (9), so no model is stopped; all 81 epochs" \
    && ok || bad "no rungs: $("$COHORT" plan "$T/late.yaml" | grep scheduler)"
finish
