"""What the Python tests share, with nothing beyond the standard library, so that it loads
before a test knows that numpy and torch are there:

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from refcheck import Checks, need  # noqa: E402

    NAME = "t_example.py"
    np, torch = need(NAME, "numpy", "torch")
    check = Checks(NAME)
    ...
    check(cond, "what went wrong")
    ...
    sys.exit(check.done())

need() imports the modules or skips the test (exit 77, the tests' SKIP_RETURN_CODE in
CMakeLists.txt); Checks counts the checks and gives the exit status (0 all passed, 1 any
failed)."""
import csv
import importlib
import json
import os
import subprocess
import sys

SKIPPED = 77

# The Debian package of each module the tests need.
PACKAGES = {"numpy": "python3-numpy", "torch": "python3-torch"}


def skip(name, why):
    """Skip the test called name: say why on stdout and exit 77."""
    print(f"{name}: skipped: {why}")
    sys.exit(SKIPPED)


def need(name, *modules):
    """Import modules (dotted names such as "torch.nn.functional" give the submodule) and
    return them in that order, the module itself where there is one; where one does not
    import, skip the test called name, naming the module missing and the packages to
    install."""
    try:
        got = tuple(importlib.import_module(m) for m in modules)
    except ImportError as e:
        tops = dict.fromkeys(m.split(".")[0] for m in modules)
        packages = " ".join(PACKAGES.get(t, t) for t in tops)
        skip(name, f"{e.name or e} missing (apt-get install {packages})")
    return got[0] if len(got) == 1 else got


def package(name):
    """The Python package (python/cohort) over this build's libcohort.so, for the test called
    name: (cohort, numpy, the source tree, the build folder); $COHORT_SRC and $COHORT_BUILD
    override the last two, $COHORT_LIB the library. Skips the test without numpy, and under
    the sanitizers (an instrumented shared library does not load into an uninstrumented
    Python)."""
    if os.environ.get("COHORT_SANITIZED"):
        skip(name, "under the sanitizers")
    np = need(name, "numpy")
    src = os.environ.get("COHORT_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    build = os.environ.get("COHORT_BUILD", os.path.join(src, "build"))
    os.environ.setdefault("COHORT_LIB", os.path.join(build, "libcohort.so"))
    sys.path.insert(0, os.path.join(src, "python"))
    return importlib.import_module("cohort"), np, src, build


def cohort_bin(name):
    """The cohort binary the test runs ($COHORT_BIN, else build/cohort), or None where it is
    missing, after saying so as a failure of the test called name."""
    cohort = os.environ.get("COHORT_BIN", "build/cohort")
    if not os.path.exists(cohort):
        print(f"{name}: FAILED: {cohort} not found (build first)")
        return None
    return cohort


def cohort_train(check, cohort, plan, d, what=None):
    """Write plan to d/plan.json and train it into d/out with cohort (--quiet); check that it
    exited 0, the message led by what where there is one; True where it did."""
    with open(f"{d}/plan.json", "w") as f:
        json.dump(plan, f)
    r = subprocess.run([cohort, "train", f"{d}/plan.json", "--out", f"{d}/out", "--quiet"],
                       capture_output=True, text=True)
    lead = f"{what}: " if what else ""
    check(r.returncode == 0, f"{lead}cohort train exited {r.returncode}: {r.stderr}")
    return r.returncode == 0


def cohort_predict(check, cohort, weights, data, out, classes):
    """cohort predict's class probabilities [n, classes] (a numpy array) of the model in the
    weight file `weights` on `data` (a --data spec), by way of the CSV `out`; None after a
    failed check where predict fails."""
    import numpy as np  # the tests that predict need it; refcheck itself does not

    name = os.path.basename(weights).removesuffix(".safetensors")
    r = subprocess.run([cohort, "predict", weights, "--data", data, "--out", out],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"{name}: cohort predict exited {r.returncode}: {r.stderr}")
    if r.returncode != 0:
        return None
    with open(out) as f:
        rows = list(csv.DictReader(f))
    return np.array([[float(row[f"p{j}"]) for j in range(classes)] for row in rows])


# The optimizers the torch parity tests train each model with: torch's SGD, and Adam as Keras
# computes it (torch_fit).
OPTIMIZERS = {"sgd": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
              "adam": {"name": "adam", "lr": 0.01}}


def train_parity(check, cohort, tmp, models, inits, batch):
    """Train in cohort, into tmp/out, each model of models ({M: {"layers": ...}}) from its
    initial tensors inits[M] (written to tmp/init_M.safetensors for init_from) with each of
    OPTIMIZERS (the model M_OPT), one unshuffled epoch of batch on tmp/x.npy and tmp/y.npy;
    True where cohort trained."""
    from st_numpy import write_safetensors  # needs numpy, which refcheck itself does not

    listed = []
    for m, spec in models.items():
        write_safetensors(f"{tmp}/init_{m}.safetensors", inits[m])
        for o, opt in OPTIMIZERS.items():
            listed.append({"name": f"{m}_{o}", "layers": spec["layers"], "optimizer": opt,
                           "init_from": f"{tmp}/init_{m}.safetensors"})
    plan = {"data": {"train": f"npy:{tmp}/x.npy,{tmp}/y.npy"},
            "defaults": {"epochs": 1, "batch_size": batch, "shuffle": False},
            "models": listed}
    return cohort_train(check, cohort, plan, tmp)


def torch_fit(torch, params, batches, loss_of, opt):
    """One epoch of the torch tensors params (requires_grad) over batches (pairs of inputs and
    targets), minimizing loss_of(inputs, targets), with the plan's optimizer opt: torch's SGD
    (lr, momentum), else Adam as Keras computes it (lr; beta_1 0.9, beta_2 0.999, epsilon 1e-7
    outside the square root, where torch's Adam puts it elsewhere)."""
    import numpy as np  # the tests that train in torch need it; refcheck itself does not

    if opt["name"] == "sgd":
        o = torch.optim.SGD(params, lr=opt["lr"], momentum=opt["momentum"])
    state = [(torch.zeros_like(q), torch.zeros_like(q)) for q in params]
    t = 0
    for xb, yb in batches:
        loss = loss_of(xb, yb)
        for q in params:
            q.grad = None
        loss.backward()
        t += 1
        if opt["name"] == "sgd":
            o.step()
        else:
            with torch.no_grad():
                lr, b1, b2, eps = opt["lr"], 0.9, 0.999, 1e-7
                alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
                for q, (m, v) in zip(params, state):
                    m += (q.grad - m) * (1 - b1)
                    v += (q.grad * q.grad - v) * (1 - b2)
                    q -= alpha * m / (torch.sqrt(v) + eps)


def weights_match(check, name, got, want, init, moved=1e-3, ref="torch"):
    """cohort's trained tensors got (numpy arrays by name) against the reference's want, each:
    there with want's shape, within 2e-5 + 1e-4 |w| of it, and moved by training more than
    `moved` from init (so that the test trained something). Returns the largest
    |cohort - ref| and the largest |cohort - ref| / (|ref| + 1e-3)."""
    worst = rel = 0.0
    for k, w in want.items():
        g = got.get(k)
        check(g is not None and g.shape == w.shape,
              f"{name} {k}: {'missing' if g is None else f'shape {g.shape}'}, {ref}'s {w.shape}")
        if g is None or g.shape != w.shape:
            continue
        diff = abs(g - w)
        worst = max(worst, float(diff.max()))
        rel = max(rel, float((diff / (abs(w) + 1e-3)).max()))
        check(bool((diff <= 2e-5 + 1e-4 * abs(w)).all()),
              f"{name} {k}: differs from {ref} by up to {float(diff.max()):.3g}")
        step = float(abs(w - init[k]).max())
        check(step > moved, f"{name} {k}: training moved it by only {step:.3g}")
    return worst, rel


class Checks:
    """A test's checks: check(cond, msg) counts, and prints what failed on stderr;
    done() prints the tally and returns the exit status."""

    def __init__(self, name):
        self.name, self.passed, self.failed = name, 0, 0

    def __call__(self, cond, msg):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print(f"{self.name}: FAILED: {msg}", file=sys.stderr)

    def done(self, note=None):
        """Print the tally, after note where there is one ("48 models"), and return 1
        where any check failed or none ran (a test that checked nothing has not passed),
        else 0."""
        lead = f"{note}, " if note else ""
        print(f"{self.name}: {lead}{self.passed} passed, {self.failed} failed")
        if self.passed + self.failed == 0:
            print(f"{self.name}: FAILED: no check ran", file=sys.stderr)
        return 1 if self.failed or not self.passed else 0
