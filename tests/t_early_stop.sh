#!/usr/bin/env bash
# Early stopping is visible where the run is watched: the console says
# "NAME stopped early at epoch N, restored epoch M" (without the restore part
# when restore_best_weights is off), and the final table's note column says
# the same, as does report.html; N and M are results.json's epochs_run and
# restored_epoch (the best epoch).
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }

blobs 4 600 0.5
cat > "$T/plan.yaml" <<YAML
data: {train: csv:$T/train.csv, validation_split: 0.2}
defaults: {epochs: 40, batch_size: 16, layers: [{dense: 8, activation: relu}, {dense: 3, activation: softmax}]}
models:
  - {name: keep, early_stopping: {monitor: val_accuracy, patience: 1, restore_best_weights: true}}
  - {name: last, early_stopping: {monitor: val_accuracy, patience: 1}}
  - {name: full, epochs: 2}
YAML
expect_status 0 "train" -- "$COHORT" train "$T/plan.yaml" --out "$T/o" --strategy sequential
read -r keep_n keep_m last_n <<<"$(/usr/bin/python3 -c "
import json, sys
m = {r['name']: r for r in json.load(open(sys.argv[1]))['models']}
assert m['keep']['stopped_early'] and m['last']['stopped_early'] and not m['full']['stopped_early'], m
print(m['keep']['epochs_run'], m['keep']['best']['epoch'], m['last']['epochs_run'])" "$T/o/results.json")"
[ -n "${last_n:-}" ] && ok || bad "early stopping did not stop both models"
expect_err "keep stopped early at epoch $keep_n, restored epoch $keep_m" "console, restored"
grep -qx "last stopped early at epoch $last_n" "$T/err" && ok || bad "console, not restored: $(cat "$T/err")"
! grep -q "full stopped early" "$T/err" && ok || bad "console: a model that ran its epochs stopped early"
grep -E "^keep .*  stopped early at $keep_n, restored $keep_m$" "$T/out" >/dev/null && ok || bad "table, restored: $(cat "$T/out")"
grep -E "^last .*  stopped early at $last_n$" "$T/out" >/dev/null && ok || bad "table, not restored: $(cat "$T/out")"
grep -E "^full .*[0-9.]$" "$T/out" >/dev/null && ok || bad "table: a note for a model that ran its epochs: $(cat "$T/out")"
head -n1 "$T/out" | grep -q "  note$" && ok || bad "table: no note column: $(head -n1 "$T/out")"
# results.json names the restored epoch; report.html shows both.
/usr/bin/python3 -c "
import json, sys
m = {r['name']: r for r in json.load(open(sys.argv[1]))['models']}
assert m['keep']['restored_epoch'] == m['keep']['best']['epoch'], m['keep']
assert m['last']['restored_epoch'] is None and m['full']['restored_epoch'] is None" "$T/o/results.json" && ok || bad "results.json: restored_epoch"
grep -q "stopped early, restored $keep_m<" "$T/o/report.html" && ok || bad "report.html: no 'stopped early, restored $keep_m'"
grep -q "stopped early<" "$T/o/report.html" && ok || bad "report.html: no 'stopped early' for the model not restored"
finish
