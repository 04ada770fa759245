#!/usr/bin/env bash
# Hostile input through the command line. Every case of tests/bad/data/ (read by
# `cohort train` as data.train) and tests/bad/weights/ (read by `cohort eval`) must
# exit with status 2, give the message of its CASE.expect sidecar, name its file,
# leave no weights behind, and neither crash nor trip a sanitizer. Cases with a
# `limit:` line (files that claim gigabytes or 2^40 samples) run under
# `ulimit -v LIMIT` (KiB), or under ASan with max_allocation_size_mb, to show that
# they fail before any huge allocation. Also: unwritable output directories.
#
# A sidecar CASE.expect: "spec: SPEC" (FILE is the case's path, DIR the directory
# of the generated companions), one or more "error: FRAGMENT", optional
# "limit: KIB". Text cases are committed beside their sidecar; binary ones are
# written at test time by tests/bad/{data,weights}/make.py.
set -u
. "$(dirname "$0")/lib.sh"
SRC=${COHORT_SRC:-.}
[ -x "$COHORT" ] || { echo "$NAME: $COHORT not built; skipped"; exit 77; }
[ -x "$PY" ] || { echo "$NAME: $PY missing; skipped"; exit 77; }

# An ASan build reserves terabytes of address space: ulimit -v cannot bound it,
# so there the allocator itself refuses (and reports) any block over 1 GiB.
sanitized=${COHORT_SANITIZED:-}
if [ -z "$sanitized" ] && ldd "$COHORT" 2>/dev/null | grep -q 'lib[at]san'; then sanitized=1; fi
export ASAN_OPTIONS="max_allocation_size_mb=1024:allocator_may_return_null=0:detect_leaks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export OPENBLAS_NUM_THREADS=1

# check_run CASE FILE RC: the common checks on $T/err after one command.
check_run() {
    local c=$1 file=$2 rc=$3
    if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error|Segmentation fault|core dumped' "$T/err"; then
        bad "$c: crash or sanitizer report: $(grep -m2 -E 'Sanitizer|runtime error' "$T/err")"
        return
    fi
    [ "$rc" -eq 2 ] && ok || { bad "$c: exit $rc, wanted 2: $(head -c 400 "$T/err")"; return; }
    grep -qF -- "$(basename "$file")" "$T/err" && ok || bad "$c: message does not name the file: $(head -c 400 "$T/err")"
}

# run_case KIND CASE: KIND data (train) or weights (eval).
run_case() {
    local kind=$1 c=$2 side="$SRC/tests/bad/$1/$2.expect" dir="$T/$1"
    local file="$dir/$c" spec="" limit="" line
    local -a want=()
    if [ -f "$SRC/tests/bad/$kind/$c" ]; then cp "$SRC/tests/bad/$kind/$c" "$file"; fi
    [ -f "$file" ] || { bad "$kind/$c: no such case (neither committed nor made by make.py)"; return; }
    while IFS= read -r line || [ -n "$line" ]; do
        case $line in
        spec:*)  spec=${line#spec: } ;;
        error:*) want+=("${line#error: }") ;;
        limit:*) limit=${line#limit: } ;;
        ''|'#'*) ;;
        *) bad "$kind/$c.expect: cannot read line '$line'"; return ;;
        esac
    done <"$side"
    [ -n "$spec" ] && [ ${#want[@]} -gt 0 ] || { bad "$kind/$c.expect: needs spec: and error: lines"; return; }
    spec=${spec//FILE/$file}
    spec=${spec//DIR/$dir}
    local vm=unlimited
    [ -n "$limit" ] && [ -z "$sanitized" ] && vm=$limit
    rm -rf "$T/out"
    if [ "$kind" = data ]; then
        printf '{"data": {"train": "%s"}, "defaults": {"epochs": 1, "batch_size": 2,
          "layers": [{"dense": 3, "activation": "softmax"}]}, "models": [{"name": "m"}]}\n' \
            "$spec" >"$T/plan.yaml"
        (ulimit -v "$vm" && exec timeout 30 "$COHORT" train "$T/plan.yaml" --out "$T/out" --quiet) \
            >"$T/out.txt" 2>"$T/err"
    else
        (ulimit -v "$vm" && exec timeout 30 "$COHORT" eval "$file" --data "$spec") >"$T/out.txt" 2>"$T/err"
    fi
    local rc=$?
    [ $rc -eq 124 ] && { bad "$kind/$c: hung (killed after 30 s)"; return; }
    check_run "$kind/$c" "$file" $rc
    for w in "${want[@]}"; do
        grep -qF -- "$w" "$T/err" && ok || bad "$kind/$c: stderr lacks '$w': $(head -c 400 "$T/err")"
    done
    [ ! -e "$T/out/models/m.safetensors" ] && ok || bad "$kind/$c: weights were written"
}

n_cases=0
for kind in data weights; do
    mkdir -p "$T/$kind"
    $PY "$SRC/tests/bad/$kind/make.py" "$T/$kind" || { bad "tests/bad/$kind/make.py failed"; continue; }
    for side in "$SRC/tests/bad/$kind"/*.expect; do
        c=$(basename "$side" .expect)
        run_case "$kind" "$c"
        n_cases=$((n_cases + 1))
    done
done
[ "$n_cases" -ge 100 ] && ok || bad "only $n_cases cases found in tests/bad/data and tests/bad/weights"

# Specs that name a directory or a missing file.
mkdir -p "$T/adir"
for spec in "csv:$T/adir" "npz:$T/adir" "idx:$T/adir,$T/data/good_labels3.idx" \
            "npy:$T/adir,$T/data/good_y3.npy"; do
    printf '{"data": {"train": "%s"}, "models": [{"name": "m", "layers": [{"dense": 2, "activation": "softmax"}]}]}\n' \
        "$spec" >"$T/plan.yaml"
    timeout 30 "$COHORT" train "$T/plan.yaml" --out "$T/out" --quiet >"$T/out.txt" 2>"$T/err"
    check_run "$spec" "$T/adir" $?
    grep -qE "$T/adir: (not a regular file|read failed: Is a directory)" "$T/err" && ok || bad "$spec: $(head -c 400 "$T/err")"
done
for spec in "csv:$T/missing.csv" "idx:$T/data/good_images3.idx,$T/missing"; do
    printf '{"data": {"train": "%s"}, "models": [{"name": "m", "layers": [{"dense": 2, "activation": "softmax"}]}]}\n' \
        "$spec" >"$T/plan.yaml"
    timeout 30 "$COHORT" train "$T/plan.yaml" --out "$T/out" --quiet >"$T/out.txt" 2>"$T/err"
    check_run "$spec" "$T/missing" $?
    grep -qF "cannot open: No such file or directory" "$T/err" && ok || bad "$spec: $(head -c 400 "$T/err")"
done
timeout 30 "$COHORT" eval "$T/adir" --data "csv:$T/weights/good3.csv" >"$T/out.txt" 2>"$T/err"
check_run "eval DIR" "$T/adir" $?
grep -qF "not a regular file" "$T/err" && ok || bad "eval DIR: $(head -c 400 "$T/err")"

# A plan with a map of 100000 keys (1.4 MB): refused at once. Duplicate keys
# were found by a linear search per key, which took minutes on such a map.
{ printf 'data: {train: "csv:x.csv"}\nmodels: [{name: m, layers: [{dense: 2, activation: softmax}]}]\nx:\n'
  awk 'BEGIN { for (i = 0; i < 100000; i++) printf "  key%d: 1\n", i }'; } >"$T/wide.yaml"
timeout 20 "$COHORT" plan "$T/wide.yaml" >"$T/out.txt" 2>"$T/err"
rc=$?
[ $rc -eq 124 ] && bad "wide.yaml: hung (killed after 20 s)"
check_run "wide plan" "$T/wide.yaml" $rc
grep -qF "wide.yaml:260: a map with more than 256 keys" "$T/err" && ok || bad "wide plan: $(head -c 400 "$T/err")"

# Unwritable output directories: a clear message naming the directory, status 2.
printf 'a,b,label\n1,2,0\n3,4,1\n5,6,2\n' >"$T/good.csv"
printf '{"data": {"train": "csv:%s"}, "defaults": {"epochs": 1, "batch_size": 2,
  "layers": [{"dense": 3, "activation": "softmax"}]}, "models": [{"name": "m"}]}\n' \
    "$T/good.csv" >"$T/plan.yaml"
out_case() { # out_case DESCRIPTION DIR FRAGMENT [NAME]: NAME (default DIR) must be in the message
    timeout 30 "$COHORT" train "$T/plan.yaml" --out "$2" --quiet >"$T/out.txt" 2>"$T/err"
    local rc=$?
    check_run "$1" "${4:-$2}" $rc
    grep -qF -- "$3" "$T/err" && ok || bad "$1: stderr lacks '$3': $(head -c 400 "$T/err")"
}
out_case "--out under /proc" /proc/forbidden "cannot create directory"
touch "$T/plainfile"
out_case "--out under a regular file" "$T/plainfile/run" "is not a directory" "$T/plainfile"
mkdir -p "$T/clash" && touch "$T/clash/models"
out_case "--out whose models/ is a file" "$T/clash" "models"
if [ "$(id -u)" -ne 0 ]; then # root writes through a read-only mode
    mkdir -p "$T/ro" && chmod 555 "$T/ro"
    out_case "--out in a read-only directory" "$T/ro/run" "Permission denied"
    chmod 755 "$T/ro"
fi
# The good plan itself trains: the failures above come from the directories.
timeout 60 "$COHORT" train "$T/plan.yaml" --out "$T/goodrun" --quiet >"$T/out.txt" 2>"$T/err"
rc=$?
[ $rc -eq 0 ] && [ -s "$T/goodrun/models/m.safetensors" ] && ok || bad "the good plan: exit $rc: $(head -c 400 "$T/err")"

# data.input_shape must hold as many values as a sample: checked where the data
# are read, at the plan's line of input_shape. The same shape's size passes.
shape_case() { # shape_case SHAPE: the plan $T/shape.yaml over good.csv (2 features)
    printf 'data:\n  train: "csv:%s"\n  input_shape: %s\nmodels: [{name: m, layers: [{dense: 3, activation: softmax}]}]\n' \
        "$T/good.csv" "$1" >"$T/shape.yaml"
    timeout 30 "$COHORT" plan "$T/shape.yaml" >"$T/out.txt" 2>"$T/err"
}
shape_case "[2, 2, 1]"
check_run "input_shape" "$T/shape.yaml" $?
grep -qF "shape.yaml:3: data.input_shape (2, 2, 1) has 4 values, but a sample of csv:$T/good.csv has 2" "$T/err" &&
    ok || bad "input_shape: $(head -c 400 "$T/err")"
shape_case "[2]"
rc=$?
[ $rc -eq 0 ] && ok || bad "input_shape [2]: exit $rc: $(head -c 400 "$T/err")"

# Layers that do not fit the data: exit 2 from plan and from train, before
# training, with the plan's file and the layer's line, the model, the layer
# and the shape it gets, and what to do. 12 samples of 6 x 6 x 2 as flat CSV
# rows, shaped by data.input_shape.
awk 'BEGIN { srand(2); for (i = 0; i < 12; i++) { line = "";
    for (j = 0; j < 72; j++) line = line sprintf("%.3f,", rand()); print line (i % 3) } }' >"$T/img.csv"
layer_case() { # layer_case WHAT INPUT_SHAPE LAYERS...: $T/layers.yaml, a layer a line from line 7 (6 without INPUT_SHAPE)
    local what=$1 shape=$2 l
    shift 2
    { printf 'data:\n  train: "csv:%s"\n' "$T/img.csv"
      [ -z "$shape" ] || printf '  input_shape: %s\n' "$shape"
      printf 'models:\n  - name: %s\n    layers:\n' "$what"
      for l in "$@"; do printf '      - %s\n' "$l"; done; } >"$T/layers.yaml"
    for cmd in plan train; do
        rm -rf "$T/out"
        if [ $cmd = plan ]; then
            timeout 30 "$COHORT" plan "$T/layers.yaml" >"$T/out.txt" 2>"$T/err"
        else
            timeout 30 "$COHORT" train "$T/layers.yaml" --out "$T/out" --quiet >"$T/out.txt" 2>"$T/err"
        fi
        check_run "$what ($cmd)" "$T/layers.yaml" $?
        [ ! -e "$T/out/models/$what.safetensors" ] && ok || bad "$what ($cmd): weights were written"
        cp "$T/err" "$T/err.$cmd"
    done
}
# want_err FRAGMENT WHAT: both commands' messages hold FRAGMENT
want_err() {
    local cmd
    for cmd in plan train; do
        grep -qF -- "$1" "$T/err.$cmd" && ok || bad "$2 ($cmd): stderr lacks '$1': $(head -c 400 "$T/err.$cmd")"
    done
}
# want_line N WHAT: the message gives the plan's file and line N of the layer
# ("layers.yaml:N:", or the model's "layers.yaml:M: line N:")
want_line() {
    local cmd
    for cmd in plan train; do
        grep -qE "layers\.yaml:($1|[0-9]+: line $1):" "$T/err.$cmd" && ok || bad "$2 ($cmd): no layers.yaml:$1 in: $(head -c 400 "$T/err.$cmd")"
    done
}
# 6 x 6 -> 4 x 4 -> pooled 2 x 2: a 3 x 3 kernel no longer fits (line 9).
layer_case big_kernel "[6, 6, 2]" "{conv2d: 4, kernel_size: 3, activation: relu}" "{max_pooling2d: 2}" \
    "{conv2d: 2, kernel_size: 3}" flatten "{dense: 3, activation: softmax}"
want_err "model 'big_kernel', layers.2 (conv2d): conv2d's 3x3 kernel is larger than its input (2, 2, 4)" "kernel too large"
want_err "use padding: same or a smaller kernel_size" "kernel too large"
want_line 9 "kernel too large"
layer_case big_pool "[6, 6, 2]" "{max_pooling2d: 8}" flatten "{dense: 3, activation: softmax}"
want_err "model 'big_pool', layers.0 (max_pooling2d): max_pooling2d's 8x8 pool is larger than its input (6, 6, 2)" "pool too large"
want_line 7 "pool too large"
layer_case no_flatten "[6, 6, 2]" "{conv2d: 4, kernel_size: 3, activation: relu}" "{dense: 3, activation: softmax}"
want_err "model 'no_flatten', layers.1 (dense): dense gets an image (4, 4, 4); put a flatten" "dense on an image"
want_line 8 "dense on an image"
# Without input_shape the CSV's rows are flat vectors of 72 values.
layer_case flat_conv "" "{conv2d: 4, kernel_size: 1}" flatten "{dense: 3, activation: softmax}"
want_err "model 'flat_conv', layers.0 (conv2d): conv2d needs images, but gets flat samples (72)" "conv on flat data"
want_err "data.input_shape" "conv on flat data"
want_line 6 "conv on flat data"

# init_from a weight file whose conv weight has another shape (more filters,
# or a larger kernel): the model fails before training (exit 1, as any failed
# model, or 2), its message names the file, the tensor and both shapes, and
# no weights are written.
# init_yaml NAME INIT_FROM CONV: a conv (no bias), batch norm and dense model
init_yaml() {
    printf 'data:\n  train: "csv:%s"\n  input_shape: [6, 6, 2]\nmodels:\n  - name: %s\n    init_from: %s\n    layers:\n      - {conv2d: %s, use_bias: false}\n      - batch_normalization\n      - flatten\n      - {dense: 3, activation: softmax}\n' \
        "$T/img.csv" "$1" "$2" "$3" >"$T/init.yaml"
}
init_yaml src null "4, kernel_size: 3"
timeout 60 "$COHORT" train "$T/init.yaml" --out "$T/src" --quiet >"$T/out.txt" 2>"$T/err"
rc=$?
[ $rc -eq 0 ] && [ -s "$T/src/models/src.safetensors" ] && ok || bad "init_from: the source model: exit $rc: $(head -c 400 "$T/err")"
for v in "4, kernel_size: 5, padding: same|[4, 2, 5, 5]" "6, kernel_size: 3|[6, 2, 3, 3]"; do
    want=${v#*|}
    init_yaml dst "$T/src/models/src.safetensors" "${v%|*}"
    rm -rf "$T/out"
    timeout 30 "$COHORT" train "$T/init.yaml" --out "$T/out" --quiet >"$T/out.txt" 2>"$T/err"
    rc=$?
    if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error|Segmentation fault|core dumped' "$T/err"; then
        bad "init_from $want: crash or sanitizer report: $(grep -m2 -E 'Sanitizer|runtime error' "$T/err")"
    fi
    [ $rc -eq 2 ] && ok || bad "init_from $want: exit $rc, wanted 2 (bad input, nothing trained): $(head -c 400 "$T/err")"
    # cohort plan finds it too, with the plan's file:line.
    timeout 30 "$COHORT" plan "$T/init.yaml" >/dev/null 2>"$T/perr"
    prc=$?
    [ $prc -eq 2 ] && grep -qE "init.yaml:[0-9]+: .*layers.0.weight has shape" "$T/perr" && ok ||
        bad "init_from $want: cohort plan exit $prc: $(head -c 400 "$T/perr")"
    grep -qF "model 'dst'" "$T/err" && grep -qF "src.safetensors" "$T/err" && ok || bad "init_from $want: the message names neither the model nor the file: $(head -c 400 "$T/err")"
    grep -qF "layers.0.weight has shape [4, 2, 3, 3], the model needs $want" "$T/err" && ok ||
        bad "init_from $want: the message lacks the tensor and both shapes: $(head -c 400 "$T/err")"
    [ ! -e "$T/out/models/dst.safetensors" ] && ok || bad "init_from $want: weights were written"
done

# init_from weights that are not finite: refused at plan time, naming the
# tensor and the element (the model had "diverged", and the advice was to
# lower the learning rate).
for v in "nan|layers.3.bias|1" "inf|layers.0.weight|7" "-inf|layers.1.weight|0"; do
    IFS='|' read -r val tensor at <<<"$v"
    $PY - "$T/src/models/src.safetensors" "$T/nonfinite.safetensors" "$tensor" "$at" "$val" <<'PY'
import json, struct, sys
src, dst, name, at, val = sys.argv[1:6]
b = bytearray(open(src, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
off = 8 + n + json.loads(b[8:8 + n])[name]["data_offsets"][0] + 4 * int(at)
b[off:off + 4] = struct.pack("<f", float(val))
open(dst, "wb").write(b)
PY
    init_yaml dst "$T/nonfinite.safetensors" "4, kernel_size: 3"
    timeout 30 "$COHORT" plan "$T/init.yaml" >/dev/null 2>"$T/err"
    prc=$?
    [ $prc -eq 2 ] && grep -qE "init.yaml:[0-9]+: model 'dst': init_from .*nonfinite.safetensors: $tensor\[$at\] is $val; a model cannot start from weights that are not finite" "$T/err" &&
        ok || bad "init_from with $tensor[$at] = $val: cohort plan exit $prc: $(head -c 400 "$T/err")"
    n_cases=$((n_cases + 1))
done

finish "($n_cases malformed inputs)"
