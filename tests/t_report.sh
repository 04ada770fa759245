#!/usr/bin/env bash
# The HTML report and cohort compare: a small run's report.html parses, holds
# one curve per model and metric, and shows the numbers of results.json;
# compare sorts the models of several runs; bad directories give exit status
# 2 naming the file; headless Chromium renders the report to a non-blank
# screenshot (skipped, and said so, where Chromium is missing).
set -u
. "$(dirname "$0")/lib.sh"
if [ ! -x "$PY" ] || [ ! -x "$COHORT" ]; then
    echo "$NAME: skipped: needs $PY and $COHORT"
    exit 77
fi

blobs 11 480 0.9
cat > "$T/plan.yaml" <<YAML
data:
  train: csv:$T/train.csv
  test: csv:$T/test.csv
  validation_split: 0.25
defaults:
  epochs: 4
  batch_size: 16
  layers: [{dense: 12, activation: relu}, {dense: 3, activation: softmax}]
models:
  - name: adam_model
  - name: sgd_model
    optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
  - name: wild_model
    optimizer: {name: sgd, lr: 1e30}
YAML

# One model diverges: exit 1, the others finish.
expect_status 1 "train" -- "$COHORT" train "$T/plan.yaml" --out "$T/run" --quiet
rm -f "$T/run/report.html"
expect_status 0 "report" -- "$COHORT" report "$T/run/"
[ "$(cat "$T/out")" = "$T/run/report.html" ] && ok || bad "report printed '$(cat "$T/out")', wanted $T/run/report.html"
[ -s "$T/run/report.html" ] && ok || bad "no report.html"
[ ! -e "$T/run/report.html.tmp" ] && ok || bad "report.html.tmp left behind"

# The page: balanced, self-contained, one curve per model and metric, the
# numbers of results.json in the table and the confusion matrix.
"$PY" - "$T/run" <<'PY' && ok || bad "report.html does not hold what results.json says"
import html.parser, json, math, re, sys
d = sys.argv[1]
res = json.load(open(d + "/results.json"))
text = open(d + "/report.html", encoding="utf-8").read()
VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr", "source"}

class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors = [], []
        self.paths, self.rows, self.cm, self.text = [], {}, [], []
        self.row = self.cell = None
        self.in_cm = False
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag not in VOID:
            self.stack.append(tag)
        for k, v in attrs:
            if k in ("src", "href") or (v and re.search(r"(https?:)?//[a-z]", v) and k != "xmlns"):
                self.errors.append("external reference %s=%s" % (k, v))
        if tag == "path" and "data-model" in a:
            self.paths.append(a)
        if tag == "table" and "cm" in a.get("class", ""):
            self.in_cm = True
        if tag == "tr" and "data-model" in a:
            self.row = self.rows.setdefault(a["data-model"], [])
        if tag == "tr" and self.in_cm:
            self.cm.append([])
        if tag == "td":
            self.cell = {"v": a.get("data-v"), "text": ""}
    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.handle_endtag(tag)
    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append("</%s> closes <%s> at line %d" % (tag, self.stack[-1] if self.stack else "nothing", self.getpos()[0]))
            return
        self.stack.pop()
        if tag == "td" and self.cell is not None:
            if self.row is not None:
                self.row.append(self.cell)
            if self.in_cm and self.cm:
                self.cm[-1].append(self.cell["text"].strip())
            self.cell = None
        if tag == "tr":
            self.row = None
        if tag == "table":
            self.in_cm = False
    def handle_data(self, data):
        if self.cell is not None:
            self.cell["text"] += data
        self.text.append(data)

p = Page()
p.feed(text)
p.close()
assert text.startswith("<!DOCTYPE html>"), text[:40]
assert not p.errors, p.errors[:5]
assert not p.stack, "unclosed: %s" % p.stack
assert "<link" not in text and "<script src" not in text and "@import" not in text

models = res["models"]
assert [m["name"] for m in models] == ["adam_model", "sgd_model", "wild_model"]
curves = ("loss", "accuracy", "val_loss", "val_accuracy")
for m in models:
    for c in curves:
        ps = [q for q in p.paths if q["data-model"] == m["name"] and q["data-curve"] == c]
        # one on the chart of every model, one on the model's own chart
        want = 2 if m["epochs_run"] > 0 else 0
        assert len(ps) == want, (m["name"], c, len(ps))
        finite = [v for v in m["history"][c] if v is not None and math.isfinite(v)]
        for q in ps:
            pts = re.findall(r"[ML]-?[\d.]+ -?[\d.]+", q["d"])
            assert len(pts) == len(finite), (m["name"], c, len(pts), len(finite), q["d"][:80])
n_paths = len({(q["data-model"], q["data-curve"]) for q in p.paths})
assert n_paths == 4 * sum(1 for m in models if m["epochs_run"] > 0), n_paths

def close(cell, want, what):
    if want is None:
        assert cell["v"] == "" and cell["text"].strip() in ("\u2013", "-"), (what, cell)
    else:
        assert cell["v"] not in (None, "") and abs(float(cell["v"]) - want) <= 1e-9 * max(1, abs(want)), (what, cell, want)

for i, m in enumerate(models):
    row = p.rows[m["name"]]
    assert len(row) == 13, (m["name"], len(row))
    close(row[0], i + 1, "index")
    assert row[2]["v"] == m["status"] and m["status"] in row[2]["text"], (row[2], m["status"])
    close(row[4], m["params"], "params")
    assert row[4]["text"].replace(",", "") == str(m["params"]), row[4]
    close(row[5], m["peak_bytes"] or None, "memory")
    close(row[6], m["seconds"], "seconds")
    close(row[7], m["epochs_run"], "epochs")
    best, test = m["best"] or {}, m["test"] or {}
    close(row[8], best.get("epoch"), "best epoch")
    close(row[9], best.get("val_loss"), "val loss")
    close(row[10], best.get("val_accuracy"), "val acc")
    close(row[11], test.get("loss"), "test loss")
    close(row[12], test.get("accuracy"), "test acc")
    if test.get("accuracy") is not None:
        assert row[12]["text"].strip() == "%.4f" % test["accuracy"], (row[12], test)
    if m["error"]:
        assert m["error"] in row[1]["text"], (m["error"], row[1])

assert res["models"][2]["status"] == "diverged", res["models"][2]["status"]
tested = [m for m in models if m["test"]]
best = max(tested, key=lambda m: m["test"]["accuracy"])
assert "Confusion matrix \u00b7 " + best["name"] in "".join(p.text), "confusion title"
cells = [r[:3] for r in p.cm if len(r) == 4][:3]  # three classes and the recall
assert cells == [[str(v) for v in r] for r in best["confusion"]], (cells, best["confusion"])
assert "refresh" not in text, "a finished run's report reloads itself"
for m in models:
    assert text.count('data-model="%s"' % m["name"]) >= 2, m["name"]  # table row, own card
PY

# Sorting script and styles are inline; the plan section shows each config.
grep -q "localeCompare" "$T/run/report.html" && ok || bad "no sorting script"
grep -q "momentum" "$T/run/report.html" && ok || bad "sgd_model's config is not shown"

# A model name with markup in it is escaped, not interpreted.
"$PY" - "$T/run/results.json" "$T/esc/results.json" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))
r["models"][0]["name"] = "<b>x</b>&'\""
os.makedirs(os.path.dirname(sys.argv[2]))
json.dump(r, open(sys.argv[2], "w"))
PY
expect_status 0 "report with markup in a name" -- "$COHORT" report "$T/esc"
grep -qF '&lt;b&gt;x&lt;/b&gt;&amp;&#39;&quot;' "$T/esc/report.html" && ok || bad "model name not escaped"
! grep -qF '<b>x</b>' "$T/esc/report.html" && ok || bad "model name written as markup"

# compare: a second run with other accuracies; best first, by test accuracy
# where asked (--by test), else by validation accuracy (the default: the
# test set judges a choice, it does not make it; issue 41 item 18).
mkdir -p "$T/run2"
"$PY" - "$T/run/results.json" "$T/run2/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for k, m in enumerate(r["models"]):
    if m["test"]:
        m["test"]["accuracy"] = [0.5, 0.99, 0][k]
    m["name"] = "b_" + m["name"]
# What a scheduler leaves: one model pruned by asha, one that took pbt's copies.
r["models"][0]["status"] = "pruned"
r["models"][0]["pruned_at"] = {"epoch": 3, "rung": 1}
r["models"][1]["lineage"] = [{"epoch": 2, "from": "x", "values": {}}, {"epoch": 4, "from": "b_donor", "values": {}}]
json.dump(r, open(sys.argv[2], "w"))
PY
expect_status 0 "compare --by test" -- "$COHORT" compare --by test "$T/run" "$T/run2"
"$PY" - "$T/out" "$T/run" "$T/run2" <<'PY' && ok || bad "compare table"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert lines[0].split() == ["dir", "model", "status", "params", "epochs", "best_ep", "val_loss", "val_acc", "test_acc", "seconds", "scheduler"], lines[0]
rows = [l.split() for l in lines[1:]]
assert len(rows) == 6, lines
ms = {}
for d in sys.argv[2:]:
    for m in json.load(open(d + "/results.json"))["models"]:
        ms[m["name"]] = (d, m)
acc = []
for r in rows:
    d, m = ms[r[1]]
    assert r[0] == d and r[2] == m["status"] and r[3] == str(m["params"]), (r, m["name"])
    assert r[4] == str(m["epochs_run"]), (r, m["epochs_run"])
    t = m["test"]["accuracy"] if m["test"] else None
    assert r[8] == ("%.4f" % t if t is not None else "-"), (r, t)
    note = " ".join(r[10:])
    if m.get("pruned_at"):
        assert note == "pruned at epoch 3 (rung 1)", r
    elif m.get("lineage"):
        assert note == "pbt: 2 exploits, the last from b_donor", r
    else:
        assert note == "", r
    acc.append(t if t is not None else -1)
assert acc == sorted(acc, reverse=True), acc
assert acc[-2:] == [-1, -1] and {r[1] for r in rows[-2:]} == {"wild_model", "b_wild_model"}, rows
PY
expect_status 0 "compare --json (by val)" -- "$COHORT" compare --json "$T/run" "$T/run2"
"$PY" - "$T/out" <<'PY' && ok || bad "compare --json"
import json, sys
rows = json.load(open(sys.argv[1]))["models"]
assert len(rows) == 6, rows
keys = {"dir", "model", "status", "params", "best_epoch", "val_loss", "val_accuracy", "test_accuracy", "val_mae", "test_mae", "seconds", "epochs_run", "pruned_at", "exploits"}
assert all(set(r) == keys for r in rows), rows[0]
sched = {r["model"]: (r["pruned_at"], r["exploits"]) for r in rows if r["pruned_at"] or r["exploits"]}
assert len(sched) == 2 and sorted(sched.values(), key=str) == sorted([({"epoch": 3, "rung": 1}, 0), (None, 2)], key=str), sched
v = [r["val_accuracy"] if r["val_accuracy"] is not None else -1 for r in rows]
assert v == sorted(v, reverse=True), v
assert rows[0]["model"] in ("adam_model", "sgd_model", "b_adam_model", "b_sgd_model"), rows[0]
PY

# Equal test accuracies, one model without a validation accuracy: the order
# is the values', whatever the command line's (a 0.9, c 0.5, then b).
for m in a:0.9 b: c:0.5; do
    mkdir -p "$T/tie-${m%%:*}"
    v=${m#*:}
    printf '{"models": [{"name": "%s", "status": "ok", "params": 10, "epochs_run": 2, "best": {"epoch": 2%s}, "test": {"accuracy": 0.8}, "seconds": 1}]}\n' \
        "${m%%:*}" "${v:+, \"val_accuracy\": $v}" > "$T/tie-${m%%:*}/results.json"
done
for order in "c b a" "b a c" "a c b"; do
    read -r x y z <<< "$order"
    "$COHORT" compare --json "$T/tie-$x" "$T/tie-$y" "$T/tie-$z" > "$T/out" 2>"$T/err"
    "$PY" -c "import json,sys; assert [r['model'] for r in json.load(open(sys.argv[1]))['models']] == ['a', 'c', 'b']" "$T/out" 2>/dev/null \
        && ok || bad "compare of ties in the order $order: $(cat "$T/out" "$T/err")"
done

# The best model is picked on validation data, never by the test set (issue
# 41 item 18): the model with the best test accuracy but the worse val_loss
# is not it; a scheduler's metric is the one picked by; the test set picks
# only where no model has a validation figure. The KPI says by what, and
# whose weights its test score is.
pick() { # WHAT WANT_MODEL WANT_BY EDIT_PYTHON
    rm -rf "$T/pick"; mkdir -p "$T/pick"
    "$PY" - "$T/run/results.json" "$T/pick/results.json" "$4" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ms = r["models"]
for k, m in enumerate(ms):
    m.update(name=f"p{k}", status="ok")
    m["best"] = dict(m.get("best") or {"epoch": 1}, val_loss=[0.9, 0.1, 0.5][k % 3],
                     val_accuracy=[0.2, 0.3, 0.8][k % 3])
    m["test"] = dict(m.get("test") or {}, accuracy=[0.99, 0.5, 0.6][k % 3])
exec(sys.argv[3])
json.dump(r, open(sys.argv[2], "w"))
PY
    "$COHORT" report "$T/pick" > /dev/null 2>&1
    grep -o '<div class="k">best model</div><div class="v">.\{0,300\}' "$T/pick/report.html" > "$T/kpi"
    grep -q "</span>$2</div><div class=\"s\">by $3 " "$T/kpi" && ok || bad "$1: best model: $(cat "$T/kpi")"
}
pick "by val_loss" p1 val_loss "pass"
pick "by the scheduler's metric" p2 val_accuracy "r['scheduler'] = {'name': 'asha', 'metric': 'val_accuracy', 'mode': 'max'}"
pick "by early stopping's monitor" p2 val_accuracy "ms[0]['config']['early_stopping'] = {'monitor': 'val_accuracy'}"
pick "by the test set without validation" p0 "test accuracy" "[m['best'].update(val_loss=None, val_accuracy=None) for m in ms]"
grep -q "test accuracy 99.00% (final weights)" "$T/kpi" && ok || bad "the KPI does not say whose test score it shows: $(cat "$T/kpi")"
# The models card counts the pruned (issue 41 item 20: "1 ok, none failed"
# beside them), and a scheduler's note wraps under its number, not widening
# the table.
pick "pruned" p1 val_loss "[m.update(status='pruned', pruned_at={'epoch': 1, 'rung': 1}) for m in ms[2:]]; ms[0]['lineage'] = [{'epoch': 2, 'from': 'p1', 'values': {}}]"
n_pruned=$("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["models"]) - 2)' "$T/run/results.json")
grep -q "<div class=\"s\">$n_pruned pruned &middot; " "$T/pick/report.html" && ok || bad "the models card does not count $n_pruned pruned: $(grep -o '<div class="k">models</div>.\{0,200\}' "$T/pick/report.html")"
grep -q '<span class="hint note">pbt: 1 exploit' "$T/pick/report.html" && grep -q '.models td .note{display:block;white-space:normal' "$T/pick/report.html" &&
    ok || bad "the pbt note is not a wrapping block"

# A regression run's report names its best model, by val_loss, with its
# test mae, and has no accuracy columns (issue 41 item 19: "no model has a
# score yet", and empty accuracy columns).
"$PY" - "$T" <<'PY'
import numpy as np, sys
rng = np.random.default_rng(1)
x = rng.normal(size=(200, 4)).astype(np.float32)
np.save(f"{sys.argv[1]}/rx.npy", x)
np.save(f"{sys.argv[1]}/ry.npy", (x @ np.array([1, -2, 0.5, 3], dtype=np.float32)).astype(np.float32))
PY
cat > "$T/reg.yaml" <<YAML
data: {train: "npy:$T/rx.npy,$T/ry.npy", test: "npy:$T/rx.npy,$T/ry.npy", validation_split: 0.2}
defaults: {epochs: 3, batch_size: 16, loss: mse, layers: [{dense: 8, activation: relu}, {dense: 1}]}
models: [{name: r1}, {name: r2, seed: 2}]
YAML
expect_status 0 "regression run" -- "$COHORT" train "$T/reg.yaml" --out "$T/reg" --quiet
grep -q "no model has a score yet" "$T/reg/report.html" && bad "regression report: no best model" || ok
grep -qE '</span>r[12]</div><div class="s">by val_loss [0-9.]+ at its best epoch [0-9]+ &middot; test mae [0-9.]+ \(final weights\)' "$T/reg/report.html" &&
    ok || bad "regression report's best model: $(grep -o '<div class="k">best model</div>.\{0,300\}' "$T/reg/report.html")"
grep -q '>val acc</th>\|>test acc</th>' "$T/reg/report.html" && bad "regression report has accuracy columns" || ok
grep -q '>val mae</th>' "$T/reg/report.html" && ok || bad "regression report lacks val mae"

# Errors: exit 2 and a message naming the file.

expect_status 2 "report of a missing dir" -- "$COHORT" report "$T/nope"
expect_err "$T/nope/results.json: cannot open" "report of a missing dir"
mkdir -p "$T/garbage" "$T/nomodels"
printf '{"models": [1, 2' > "$T/garbage/results.json"
printf '{"plan": "x"}' > "$T/nomodels/results.json"
expect_status 2 "report of a bad results.json" -- "$COHORT" report "$T/garbage"
expect_err "$T/garbage/results.json: line 1" "report of a bad results.json"
[ ! -e "$T/garbage/report.html" ] && ok || bad "a bad results.json still wrote a report"
expect_status 2 "report without models" -- "$COHORT" report "$T/nomodels"
expect_err "$T/nomodels/results.json: no \"models\" array" "report without models"
expect_status 2 "compare with a missing dir" -- "$COHORT" compare "$T/run" "$T/nope"
expect_err "$T/nope/results.json: cannot open" "compare with a missing dir"
[ ! -s "$T/out" ] && ok || bad "compare printed a table despite the error"
expect_status 2 "compare of a bad results.json" -- "$COHORT" compare "$T/garbage"
expect_err "$T/garbage/results.json:" "compare of a bad results.json"
expect_status 2 "report without DIR" -- "$COHORT" report
expect_status 2 "compare without DIR" -- "$COHORT" compare
expect_status 2 "compare --by" -- "$COHORT" compare --by size "$T/run"
expect_err "--by takes test or val" "compare --by"
expect_status 2 "report --frob" -- "$COHORT" report --frob "$T/run"
expect_err "unknown option '--frob'" "report --frob"
expect_status 0 "report --help" -- "$COHORT" report --help
grep -q "usage: cohort report DIR" "$T/out" && ok || bad "report --help"
expect_status 0 "compare --help" -- "$COHORT" compare --help
grep -q -- "--json" "$T/out" && ok || bad "compare --help lacks --json"

# Headless Chromium renders the page: the screenshot is not one color, and
# the first model's color (its curves, its swatches) is on it.
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if [ -x "$CHROMIUM" ]; then
    timeout 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$T/chromium" --screenshot="$T/shot.png" --window-size=1400,2000 \
        "file://$T/run/report.html" >"$T/chromium.log" 2>&1
    if [ -s "$T/shot.png" ]; then ok; else bad "chromium wrote no screenshot: $(tail -c 600 "$T/chromium.log")"; fi
    "$PY" - "$T/shot.png" <<'PY' && ok || bad "the screenshot looks blank"
import struct, sys, zlib
import numpy as np

def png_pixels(path):
    """Decode an 8-bit RGB/RGBA PNG: PIL when present, else by hand."""
    try:
        from PIL import Image
        return np.asarray(Image.open(path).convert("RGB"))
    except ImportError:
        pass
    d = open(path, "rb").read()
    assert d[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    while pos < len(d):
        n, t = struct.unpack(">I4s", d[pos:pos + 8])
        body = d[pos + 8:pos + 8 + n]
        if t == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif t == b"IDAT":
            idat += body
        pos += 12 + n
    assert depth == 8 and ctype in (2, 6), (depth, ctype)
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    out, prev = bytearray(), bytearray(stride)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f in (0, 1, 2):  # none, sub, up: vectorized
            v = np.frombuffer(bytes(line), np.uint8).astype(np.int64)
            if f == 1:
                v = np.cumsum(v.reshape(w, bpp), axis=0).reshape(-1)
            elif f == 2:
                v = v + np.frombuffer(bytes(prev), np.uint8)
            line = bytearray((v & 255).astype(np.uint8).tobytes())
            f = 0
        for i in range(stride if f else 0):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += line
        prev = line
    return np.frombuffer(bytes(out), np.uint8).reshape(h, w, bpp)[:, :, :3]

px = png_pixels(sys.argv[1]).reshape(-1, 3).astype(np.uint32)
rgb = px[:, 0] << 16 | px[:, 1] << 8 | px[:, 2]
colors, counts = np.unique(rgb, return_counts=True)
share = counts.max() / len(rgb)
assert len(colors) > 100 and share < 0.97, ("blank?", len(colors), share)
first = int((rgb == 0x4e79a7).sum())
assert first >= 50, ("the first model's color is hardly on the page", first)
print("t_report.sh: screenshot: %d colors, background %.0f%%, %d pixels of model 1" % (len(colors), 100 * share, first))
PY
    # The sorting script runs: two clicks on "test acc" sort it descending,
    # the model without a test score last.
    sed 's|</body>|<script>var h=document.querySelectorAll("#models th");h[12].click();h[12].click();</script></body>|' \
        "$T/run/report.html" > "$T/run/clicked.html"
    timeout 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$T/chromium" --dump-dom "file://$T/run/clicked.html" >"$T/dom.html" 2>"$T/chromium.log"
    "$PY" - "$T/dom.html" "$T/run/results.json" <<'PY' && ok || bad "sorting the table in Chromium"
import json, re, sys
dom = open(sys.argv[1]).read()
got = re.findall(r'<tr[^>]*data-model="([^"]+)"', dom)
ms = json.load(open(sys.argv[2]))["models"]
want = [m["name"] for m in sorted(ms, key=lambda m: -m["test"]["accuracy"] if m["test"] else 2)]
assert got == want, (got, want)
assert re.search(r'<th[^>]*aria-sort="descending"[^>]*>test acc</th>', dom), "no sort mark on test acc"
PY
else
    echo "$NAME: skipped the Chromium screenshot check: $CHROMIUM not found (apt-get install chromium)"
fi

finish
