#!/usr/bin/env bash
# The per-model journal that keeps a sweep's cost linear: each model's final
# record goes to records/NAME.json as it finishes, while results.json (every
# model) is rewritten only now and then and at the end. --resume trusts the
# journal over an older results.json: a model whose record is there is not
# trained again. A run that does not resume starts its journal afresh.
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }

blobs 1 300 0.5
cat > "$T/plan.yaml" <<YAML
data: {train: csv:$T/train.csv, validation_split: 0.2}
defaults: {epochs: 3, batch_size: 16, layers: [{dense: 8, activation: relu}, {dense: 3, activation: softmax}]}
models: [{name: m}]
sweep: {optimizer.lr: [0.001, 0.003, 0.01]}
YAML
expect_status 0 "train" -- "$COHORT" train "$T/plan.yaml" --out "$T/o" --quiet
names=$(/usr/bin/python3 -c 'import json,sys; print(" ".join(m["name"] for m in json.load(open(sys.argv[1]))["models"]))' "$T/o/results.json")
[ "$(echo $names | wc -w)" -eq 3 ] && ok || bad "three models, got '$names'"
/usr/bin/python3 - "$T/o" $names <<'PY' && ok || bad "records equal results.json's"
import json, sys
d = sys.argv[1]
res = {m["name"]: m for m in json.load(open(d + "/results.json"))["models"]}
for n in sys.argv[2:]:
    rec = json.load(open(f"{d}/records/{n}.json"))
    assert rec == res[n], n
    assert rec["status"] == "ok" and len(rec["history"]["loss"]) == 3, rec["status"]
PY

# results.json left behind the journal, as by a kill between the two writes:
# --resume takes the journal's records and trains nothing again.
/usr/bin/python3 - "$T/o/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for m in r["models"]:
    m["status"], m["epochs_run"] = "running", 1
json.dump(r, open(sys.argv[1], "w"))
PY
before=$(stat -c %Y.%y "$T"/o/models/*.safetensors | md5sum)
expect_status 0 "resume over a stale results.json" -- "$COHORT" train "$T/plan.yaml" --out "$T/o" --resume --quiet
after=$(stat -c %Y.%y "$T"/o/models/*.safetensors | md5sum)
[ "$before" = "$after" ] && ok || bad "resume trained models that the journal had as finished"
/usr/bin/python3 - "$T/o/results.json" <<'PY' && ok || bad "results.json after resume"
import json, sys
for m in json.load(open(sys.argv[1]))["models"]:
    assert m["status"] == "ok" and m["epochs_run"] == 3, (m["name"], m["status"], m["epochs_run"])
PY

# A journal record of a model whose spec changed is refused, as results.json's is.
/usr/bin/python3 - "$T/o/records/$(echo $names | cut -d' ' -f1).json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r["config"]["batch_size"] = 99
json.dump(r, open(sys.argv[1], "w"))
PY
expect_status 2 "a changed model's record" -- "$COHORT" train "$T/plan.yaml" --out "$T/o" --resume --quiet
expect_err "has changed since it was trained there" "a changed model's record"

# Without --resume the journal starts afresh (the old records are not this run's).
touch "$T/marker"
sleep 1
expect_status 0 "train again" -- "$COHORT" train "$T/plan.yaml" --out "$T/o" --quiet --overwrite
for n in $names; do
    [ "$T/o/records/$n.json" -nt "$T/marker" ] && ok || bad "record of $n not rewritten"
done
finish
