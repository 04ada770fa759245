#!/usr/bin/env bash
# examples/train_many.c, the C API example, builds and trains every model of
# a plan; examples/seed.yaml is valid and plans to the exact bytes the
# trainer later takes.
set -u
. "$(dirname "$0")/lib.sh"
BUILD=${COHORT_BUILD:-build}

awk 'BEGIN { srand(9); for (i = 0; i < 500; i++) { c = i % 2; printf "%f,%f,%d\n", rand() + 2 * c, rand() - c, c } }' > "$T/d.csv"
"$BUILD/train_many" examples/seed.yaml "data.train=csv:$T/d.csv" "data.test=csv:$T/d.csv" \
    'defaults.layers=[{dense: 8, activation: relu}, {dense: 2, activation: softmax}]' \
    'models=[{name: a}, {name: b, optimizer: {name: sgd, lr: 0.1}}]' defaults.epochs=5 \
    --out "$T/api" > "$T/api.log" 2>&1 && ok || bad "train_many: $(cat "$T/api.log")"
[ "$(grep -c '^[ab]  *ok' "$T/api.log")" -eq 2 ] && ok || bad "train_many did not report both models ok: $(cat "$T/api.log")"
[ -s "$T/api/results.json" ] && ok || bad "train_many wrote no results.json"

"$COHORT" plan examples/seed.yaml --json > "$T/plan.json" && ok || bad "cohort plan examples/seed.yaml"
/usr/bin/python3 - "$T/plan.json" <<'PY' && ok || bad "seed plan"
import json, sys
p = json.load(open(sys.argv[1]))
ms = {m["name"]: m for m in p["models"]}
assert set(ms) == {"small_model", "large_model", "medium_model"}
assert ms["small_model"]["params"] == 784 * 128 + 128 + 128 * 10 + 10
assert ms["large_model"]["params"] == 784 * 512 + 512 + 512 * 10 + 10
assert all(m["fits"] for m in ms.values())
assert ms["large_model"]["config"]["optimizer"]["lr"] == 0.0005
assert p["data"]["train_samples"] == 48000 and p["data"]["validation_samples"] == 12000
PY

# examples/regression.yaml and examples/binary.yaml on the data make_data.py writes.
if /usr/bin/python3 -c "import numpy" 2>/dev/null; then
    /usr/bin/python3 examples/make_data.py "$T/ex" > /dev/null && ok || bad "make_data.py"
    for ex in regression binary; do
        set_data=(--set "data.train=npy:$T/ex/friedman_train_x.npy,$T/ex/friedman_train_y.npy"
                  --set "data.test=npy:$T/ex/friedman_test_x.npy,$T/ex/friedman_test_y.npy")
        [ $ex = binary ] && set_data=(--set "data.train=npy:$T/ex/moons_train_x.npy,$T/ex/moons_train_y.npy"
                                      --set "data.test=npy:$T/ex/moons_test_x.npy,$T/ex/moons_test_y.npy")
        "$COHORT" train examples/$ex.yaml "${set_data[@]}" --set defaults.epochs=5 --out "$T/$ex" \
            --quiet > "$T/$ex.log" 2>&1 && ok || bad "examples/$ex.yaml: $(cat "$T/$ex.log")"
    done
    /usr/bin/python3 - "$T/regression/results.json" "$T/binary/results.json" <<'PY' && ok || bad "regression and binary results"
import json, sys
reg = json.load(open(sys.argv[1]))["models"]
binary = json.load(open(sys.argv[2]))["models"]
for m in reg:
    assert m["status"] == "ok" and m["task"] == "regression", m["name"]
    assert "mae" in m["history"] and "accuracy" not in m["history"], m["history"].keys()
    # y spans about 0..30 with unit noise: five epochs get well under predicting the mean (~4).
    assert 0.5 < m["test"]["mae"] < 3.0 and m["test"]["rmse"] >= m["test"]["mae"], (m["name"], m["test"])
for m in binary:
    assert m["status"] == "ok" and m["task"] == "classification", m["name"]
    assert m["test"]["accuracy"] > 0.85, (m["name"], m["test"])
PY
    # Every example plans as the user runs it: its data/ beside it, written by make_data.py.
    mkdir -p "$T/exdir" && cp examples/*.yaml examples/make_data.py examples/make_words.py "$T/exdir/"
    /usr/bin/python3 "$T/exdir/make_data.py" > /dev/null && ok || bad "make_data.py into its own folder"
    # words.yaml on a small draw of Debian's word lists (300 words a language), one epoch.
    if [ -e /usr/share/dict/american-english ] && [ -e /usr/share/dict/ngerman ] &&
       [ -e /usr/share/dict/french ] && [ -e /usr/share/dict/italian ] && [ -e /usr/share/dict/spanish ]; then
        /usr/bin/python3 "$T/exdir/make_words.py" --per-language 300 > "$T/words.log" 2>&1 && ok ||
            bad "make_words.py: $(cat "$T/words.log")"
        "$COHORT" train "$T/exdir/words.yaml" --set defaults.epochs=1 --out "$T/words" --quiet \
            > "$T/words.log" 2>&1 && ok || bad "examples/words.yaml: $(cat "$T/words.log")"
        /usr/bin/python3 - "$T/words/results.json" "$T/exdir/words.yaml" <<'PY' && ok ||
import json, re, sys
names = re.findall(r"^  - name: (\S+)", open(sys.argv[2]).read(), re.M)
got = {m["name"]: m["status"] for m in json.load(open(sys.argv[1]))["models"]}
assert len(names) >= 7 and got == {n: "ok" for n in names}, (names, got)
PY
            bad "examples/words.yaml: not every model ok: $(cat "$T/words.log")"
    else
        echo "t_examples.sh: words.yaml skipped: Debian's word lists are not installed (scripts/setup installs them)"
        rm -f "$T/exdir/words.yaml" "$T/exdir/words_search.yaml"
    fi
    for plan in "$T"/exdir/*.yaml; do
        "$COHORT" plan "$plan" > "$T/plan.out" 2>&1 && ok || bad "cohort plan $(basename "$plan"): $(head -c 600 "$T/plan.out")"
    done
    "$COHORT" plan "$T/exdir/regression.yaml" | grep -q "; 10 features, 1 real-valued target; test " && ok ||
        bad "cohort plan of regression.yaml: $("$COHORT" plan "$T/exdir/regression.yaml" | sed -n 2p)"
    "$COHORT" report "$T/regression" > /dev/null && ! grep -q "0 classes" "$T/regression/report.html" && ok ||
        bad "report.html of a regression says it has 0 classes"
    "$COHORT" report "$T/regression" > /dev/null && grep -q "Mean absolute error" "$T/regression/report.html" &&
        grep -q "test mae" "$T/regression/report.html" && ok || bad "report.html of a regression lacks its mae"
else
    echo "t_examples.sh: regression and binary examples skipped: /usr/bin/python3 has no numpy"
fi

# One epoch of the real thing, through the C API (skipped under sanitizers: too slow there).
if [ -z "${COHORT_SANITIZED:-}" ]; then
    "$BUILD/train_many" examples/seed.yaml defaults.epochs=1 --out "$T/seed" > "$T/seed.log" 2>&1 && ok || bad "train_many seed: $(cat "$T/seed.log")"
    /usr/bin/python3 - "$T/seed/results.json" "$T/plan.json" <<'PY' && ok || bad "seed results"
import json, sys
r = {m["name"]: m for m in json.load(open(sys.argv[1]))["models"]}
p = {m["name"]: m for m in json.load(open(sys.argv[2]))["models"]}
for n, m in r.items():
    assert m["status"] == "ok", m
    assert m["test"]["accuracy"] > 0.78, (n, m["test"])
    assert m["planned_bytes"] == m["peak_bytes"] == p[n]["planned_bytes"], (n, m["planned_bytes"], m["peak_bytes"], p[n]["planned_bytes"])
PY
fi
finish
