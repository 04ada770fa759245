#!/usr/bin/env bash
# What cohort writes and reads is a regular file, or it is refused (issue 41
# items 1, 4, 5, 9, 13): nothing is renamed over a link, FIFO or device
# (predict --out /dev/null became a regular file; as root, /dev/full), a
# FIFO or device is written through, a link at DIR/.lock is not followed
# (its target was overwritten with the pid), cohort merge brings no link
# out of a shard (a link to another file gave the merged run that file) and
# replaces none in its output, merges no shard a run is still writing, and
# a FIFO given as any input is refused at once (every reader hung in open).
set -u
. "$(dirname "$0")/lib.sh"
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }

blobs 3 240 0.5
cat > "$T/two.yaml" <<YAML
data: {train: csv:$T/train.csv, validation_split: 0.25}
defaults: {epochs: 2, batch_size: 16, layers: [{dense: 3, activation: softmax}]}
models: [{name: a}, {name: b, seed: 2}]
YAML
echo "secret" > "$T/victim"
unchanged() { [ "$(cat "$T/victim")" = secret ] && ok || bad "$1: the link's target was written"; }
expect_status 0 "train" -- "$COHORT" train "$T/two.yaml" --out "$T/run" --quiet
W="$T/run/models/a.safetensors"

# 1. predict --out: a device or FIFO is written through, a link refused,
#    "-" is standard output. Run as root, a cohort with the bug replaces the
#    device it is given: the test's own device nodes, then, never /dev's.
null=/dev/null full=
if [ "$(id -u)" = 0 ] && mknod "$T/null" c 1 3 2> /dev/null && mknod "$T/full" c 1 7; then
    null=$T/null full=$T/full
fi
expect_status 0 "predict --out $null" -- "$COHORT" predict "$W" --data "csv:$T/test.csv" --out "$null"
[ -c "$null" ] && ok || bad "$null is no longer a device"
mkfifo "$T/fifo"
timeout 30 cat "$T/fifo" > "$T/through" &
expect_status 0 "predict --out FIFO" -- "$COHORT" predict "$W" --data "csv:$T/test.csv" --out "$T/fifo"
wait
[ -p "$T/fifo" ] && [ "$(head -n 1 "$T/through")" = "index,prediction,label,p0,p1,p2" ] &&
    [ "$(wc -l < "$T/through")" = 61 ] && ok || bad "predict --out FIFO: not written through"
ln -s "$T/victim" "$T/link"
expect_status 2 "predict --out LINK" -- "$COHORT" predict "$W" --data "csv:$T/test.csv" --out "$T/link"
expect_err "link: a symbolic link, not a regular file" "predict --out LINK"
[ -L "$T/link" ] && ok || bad "predict --out LINK: the link was replaced"
unchanged "predict --out LINK"
expect_status 0 "predict --out -" -- "$COHORT" predict "$W" --data "csv:$T/test.csv" --out -
[ "$(wc -l < "$T/out")" = 61 ] && ok || bad "predict --out -: not on standard output"
if [ -n "$full" ]; then
    expect_status 2 "predict --out $full" -- "$COHORT" predict "$W" --data "csv:$T/test.csv" --out "$full"
    expect_err "full: write failed: No space left on device" "predict --out $full"
    [ -c "$full" ] && ok || bad "$full is no longer a device"
fi
# Every atomic write refuses a link where its file goes: the run's plan copy.
cp -r "$T/run" "$T/run2"
rm "$T/run2/plan.yaml"; ln -s "$T/victim" "$T/run2/plan.yaml"
"$COHORT" train "$T/two.yaml" --out "$T/run2" --overwrite --quiet > /dev/null 2>&1
unchanged "train with a link at DIR/plan.yaml"
[ -L "$T/run2/plan.yaml" ] && ok || bad "train replaced the link at DIR/plan.yaml"

# 4. A link at DIR/.lock.
mkdir "$T/locked"; ln -s "$T/victim" "$T/locked/.lock"
expect_status 2 "train with a link at DIR/.lock" -- "$COHORT" train "$T/two.yaml" --out "$T/locked" --quiet
expect_err ".lock: a symbolic link, which cohort does not follow" "train with a link at DIR/.lock"
unchanged "train with a link at DIR/.lock"
expect_status 2 "merge into DIR with a link at .lock" -- "$COHORT" merge "$T/run" --out "$T/locked"
unchanged "merge into DIR with a link at .lock"

# 5. Links in a shard, and in merge's output.
expect_status 0 "shard 0" -- "$COHORT" train "$T/two.yaml" --out "$T/s0" --shard 0/2 --quiet
expect_status 0 "shard 1" -- "$COHORT" train "$T/two.yaml" --out "$T/s1" --shard 1/2 --quiet
expect_status 0 "merge" -- "$COHORT" merge "$T/s0" "$T/s1" --out "$T/m0"
for f in history/b.csv models/b.best.safetensors models/b.safetensors; do
    rm -rf "$T/bad1"; cp -r "$T/s1" "$T/bad1"
    rm "$T/bad1/$f"; ln -s "$T/victim" "$T/bad1/$f"
    expect_status 2 "merge of a shard whose $f is a link" -- "$COHORT" merge "$T/s0" "$T/bad1" --out "$T/m-$(basename $f)"
    expect_err "bad1/$f is a symbolic link; a shard directory holds only" "merge, $f a link"
    [ -e "$T/m-$(basename $f)/$f" ] && bad "merge, $f a link: brought" || ok
done
rm -rf "$T/bad1"; cp -r "$T/s1" "$T/bad1"; mv "$T/bad1/history" "$T/elsewhere"; ln -s "$T/elsewhere" "$T/bad1/history"
expect_status 2 "merge of a shard whose history/ is a link" -- "$COHORT" merge "$T/s0" "$T/bad1" --out "$T/m-dir"
expect_err "bad1/history is a symbolic link" "merge, history/ a link"
mkdir -p "$T/m-dst/models"; ln -s "$T/victim" "$T/m-dst/models/b.safetensors"
expect_status 2 "merge over a link" -- "$COHORT" merge "$T/s0" "$T/s1" --out "$T/m-dst"
expect_err "m-dst/models/b.safetensors is a symbolic link, not a regular file; merge does not replace it" "merge over a link"
unchanged "merge over a link"

# 13. A shard a run still holds (its lock taken).
flock "$T/s1/.lock" sleep 30 &
holder=$!
for i in $(seq 1 100); do flock -n "$T/s1/.lock" true || break; sleep 0.05; done
expect_status 2 "merge of a live run" -- "$COHORT" merge "$T/s0" "$T/s1" --out "$T/m-live"
expect_err "s1 is in use by a cohort train" "merge of a live run"
kill $holder; wait $holder 2> /dev/null

# 9. A FIFO as any input: refused at once, not waited on.
rm -f "$T/fifo"; mkfifo "$T/fifo"
fifo_in() { # WHAT CMD...
    local what=$1; shift
    expect_status 2 "$what" -- timeout 20 "$@"
    expect_err "fifo: not a regular file (a FIFO)" "$what"
}
fifo_in "plan FIFO" "$COHORT" plan "$T/fifo"
for spec in "csv:$T/fifo" "npy:$T/fifo" "npy:$T/fifo,$T/fifo" "npz:$T/fifo" "idx:$T/fifo,$T/fifo"; do
    fifo_in "data $spec" "$COHORT" eval "$W" --data "$spec"
done
fifo_in "predict FIFO" "$COHORT" predict "$T/fifo" --data "csv:$T/test.csv"
printf 'data: {train: csv:%s/train.csv}\nmodels: [{name: a, init_from: %s/fifo, layers: [{dense: 3, activation: softmax}]}]\n' "$T" "$T" > "$T/init.yaml"
fifo_in "init_from FIFO" "$COHORT" plan "$T/init.yaml"
finish
