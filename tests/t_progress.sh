#!/usr/bin/env bash
# The live view: on a terminal (a pseudo-terminal made by script(1)) one
# line per running model is redrawn in place with a progress bar; through a
# pipe only plain epoch lines appear; --quiet prints only the table.
set -u
. "$(dirname "$0")/lib.sh"
command -v script >/dev/null || { echo "t_progress.sh: skipped: script(1) missing (bsdutils)"; exit 77; }
awk 'BEGIN { srand(2); for (i = 0; i < 6000; i++) { c = i % 3; printf "%f,%f,%f,%f,%d\n", rand() + c, rand(), rand() - c, rand(), c } }' > "$T/d.csv"
cat > "$T/plan.yaml" <<YAML
data: {train: csv:$T/d.csv, validation_split: 0.2}
defaults: {epochs: 3, batch_size: 4, layers: [{dense: 64, activation: relu}, {dense: 3, activation: softmax}]}
models: [{name: first}, {name: second, seed: 2}]
YAML

# A terminal: escape sequences redraw the live lines.
script -qefc "$COHORT train $T/plan.yaml --out $T/tty --strategy threads" "$T/tty.log" >/dev/null 2>&1
grep -q $'\x1b\[1A\x1b\[2K' "$T/tty.log" && ok || bad "no in-place redraw on a terminal"
grep -aq 'epoch [0-9]/3 \[[#.]\{20\}\]' "$T/tty.log" && ok || bad "no progress bar on a terminal"
grep -aq 'ETA' "$T/tty.log" && ok || bad "no ETA on a terminal"
grep -aq "first epoch 3/3: loss" "$T/tty.log" && ok || bad "no epoch line on a terminal"

# A pipe: plain lines, one per epoch and model, no escapes.
"$COHORT" train "$T/plan.yaml" --out "$T/pipe" --strategy threads 2>&1 | cat > "$T/pipe.log"
grep -q $'\x1b' "$T/pipe.log" && bad "escape sequences through a pipe" || ok
[ "$(grep -c ' epoch [0-9]/3: loss' "$T/pipe.log")" -eq 6 ] && ok || bad "wanted 6 epoch lines through a pipe: $(cat "$T/pipe.log")"
grep -q "^first  *ok" "$T/pipe.log" && ok || bad "no final table through a pipe"

# --quiet: the table alone.
"$COHORT" train "$T/plan.yaml" --out "$T/quiet" --quiet > "$T/quiet.log" 2>&1
[ "$(wc -l < "$T/quiet.log")" -eq 3 ] && ok || bad "--quiet printed more than the table: $(cat "$T/quiet.log")"

finish
