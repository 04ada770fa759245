#!/usr/bin/env python3
"""The Python package's arrays (issue 41 items 6 and 12).

Labels are copied as the run starts: an on_epoch that writes 5 over the test
labels of a 3-class run made the test's confusion matrix write out of bounds
(SIGSEGV, ASan heap-buffer-overflow), and one that changed the train labels
trained on them; now the run's weights are those of a run without the writes.
What the CLI refuses is refused here too, as DataError naming it (complex,
structured, datetime and text x; masked values; a scalar y), where numpy had
converted it with a loss; text class labels train, as a CSV's do, the classes
sorted; Ctrl-C inside on_epoch is Interrupted with .results; threads=2**40 is
an error (it became 0, every core); uint8 x warns once that it is not scaled.

Skipped (77) without numpy, and under the sanitizers (an instrumented shared
library does not load into an uninstrumented Python)."""
import os
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcheck import Checks, package  # noqa: E402

NAME = "t_python_data.py"
cohort, np, _, _ = package(NAME)
check = Checks(NAME)
rng = np.random.default_rng(3)
x = rng.normal(size=(300, 6)).astype(np.float32)
y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0.5).astype(np.int32)  # classes 0-2
xt, yt = x[:60].copy(), y[:60].copy()
plan = {"data": {"validation_split": 0.2},
        "defaults": {"epochs": 3, "batch_size": 16, "layers": [{"dense": 8, "activation": "relu"},
                                                                {"dense": 3, "activation": "softmax"}]},
        "models": [{"name": "a"}, {"name": "b", "seed": 2}]}


def weights(results):
    return {r.name: r.weights for r in results}


def same(a, b):
    return a.keys() == b.keys() and all(
        a[m].keys() == b[m].keys() and all(np.array_equal(a[m][k], b[m][k]) for k in a[m]) for m in a)


# 6. Labels written during the run: the run goes on with those it started with.
for strategy in ("sequential", "threads", "fused"):
    with tempfile.TemporaryDirectory() as d:
        ref = weights(cohort.train(plan, {"train": (x, y.copy()), "test": (xt, yt.copy())},
                                   out=f"{d}/ref", strategy=strategy, progress=False))
        yy, yyt = y.copy(), yt.copy()

        def scribble(model, epoch, metrics):
            yyt[:] = 5  # 5 >= the 3 classes
            yy[:] = 0

        res = cohort.train(plan, {"train": (x, yy), "test": (xt, yyt)}, out=f"{d}/run",
                           strategy=strategy, on_epoch=scribble, progress=False)
        check(all(r.status == "ok" for r in res), f"{strategy}: labels written in on_epoch: "
              f"{[(r.name, r.status) for r in res]}")
        check(same(weights(res), ref), f"{strategy}: labels written in on_epoch changed the weights")

# 12. What numpy would convert with a loss is refused.
def refused(what, data, fragment):
    try:
        cohort.train(plan, data, progress=False)
        check(False, f"{what}: trained")
    except cohort.DataError as e:
        check(fragment in str(e), f"{what}: message {str(e)!r} lacks {fragment!r}")
    except Exception as e:  # noqa: BLE001
        check(False, f"{what}: raised {type(e).__name__}: {e}, not DataError")


refused("complex x", {"train": (x + 1j, y)}, "x is complex")
refused("structured x", {"train": (np.zeros(300, dtype=[("a", "f4"), ("b", "f4")]), y)}, "x is structured")
refused("datetime x", {"train": (np.zeros((300, 2), dtype="datetime64[s]"), y)}, "x is dates")
refused("text x", {"train": (x.astype(str), y)}, "x is text")
refused("masked x", {"train": (np.ma.masked_greater(x, 2.0), y)}, "x is a masked array with")
refused("complex y", {"train": (x, y + 0j)}, "y is complex")
refused("scalar y", {"train": (x, np.int32(1))}, "y is a single value")
refused("datetime y", {"train": (x, np.zeros(300, dtype="datetime64[D]"))}, "y is dates")
# A masked array with nothing masked is its data.
with tempfile.TemporaryDirectory() as d:
    a = weights(cohort.train(plan, {"train": (np.ma.masked_greater(x, 99.0), y)}, out=f"{d}/a", progress=False))
    b = weights(cohort.train(plan, {"train": (x, y)}, out=f"{d}/b", progress=False))
    check(same(a, b), "a masked array without masked values trains as its data")

# Text labels, as a CSV's: sorted classes, the same weights as their numbers.
names = np.array(["cat", "dog", "emu"])
with tempfile.TemporaryDirectory() as d:
    want = weights(cohort.train(plan, {"train": (x, y), "test": (xt, yt)}, out=f"{d}/num", progress=False))
    try:
        res = cohort.train(plan, {"train": (x, names[y]), "test": (xt, names[yt].astype(object))},
                           out=f"{d}/txt", progress=False)
        check(same(weights(res), want), "text labels: other weights than their class numbers")
        import json
        classes = json.load(open(f"{d}/txt/results.json"))["data"].get("class_names")
        check(classes == ["cat", "dog", "emu"], f"text labels: results.json's classes {classes}")
    except Exception as e:  # noqa: BLE001
        check(False, f"text labels: {type(e).__name__}: {e}")

# Ctrl-C inside on_epoch: Interrupted, with every model's result.
def ctrl_c(model, epoch, metrics):
    raise KeyboardInterrupt

try:
    cohort.train(plan, {"train": (x, y)}, on_epoch=ctrl_c, progress=False, strategy="sequential")
    check(False, "KeyboardInterrupt in on_epoch: the run finished")
except cohort.Interrupted as e:
    check(len(e.results) == 2, f"KeyboardInterrupt in on_epoch: results {e.results}")
except KeyboardInterrupt:
    check(False, "KeyboardInterrupt in on_epoch came out without .results")

# threads beyond a C int.
try:
    cohort.train(plan, {"train": (x, y)}, threads=2 ** 40, progress=False)
    check(False, "threads=2**40 trained")
except cohort.CohortError as e:
    check("threads must be" in str(e), f"threads=2**40: {e}")

# uint8 images: one warning.
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    x8 = (rng.random((300, 6)) * 255).astype(np.uint8)
    cohort.train(plan, {"train": (x8, y)}, progress=False)
    cohort.train(plan, {"train": (x8, y)}, progress=False)
    said = [str(m.message) for m in w if "uint8" in str(m.message)]
    check(len(said) == 1 and "x / 255" in said[0], f"uint8 x: warnings {said}")
sys.exit(check.done())
