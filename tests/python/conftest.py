"""The Python package's tests, under pytest, against the package as pip
installs it (tests/t_pip.sh installs a wheel of this tree and runs them from
another folder). Each module needs what it tests (keras, onnx and
onnxruntime, torch); t_pip.sh runs each in an environment that has it and
sets COHORT_PYTEST_STRICT=1, so that a missing one fails rather than skips."""
import gzip
import os
import shutil
import subprocess

import numpy as np
import pytest

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.environ.get("COHORT_DATA", "/usr/share/datasets/fashion-mnist")


def need(module):
    """The module, or a skip (a failure under COHORT_PYTEST_STRICT=1)."""
    if os.environ.get("COHORT_PYTEST_STRICT") == "1":
        return __import__(module)
    return pytest.importorskip(module)


def idx(path):
    with gzip.open(path) as f:
        data = f.read()
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(data[3])]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * data[3]).reshape(dims)


_CACHE = {}


def fashion(split):
    """Fashion-MNIST (x [n, 28, 28, 1] float32 in [0, 1], y int64) as cohort's IDX reader scales it."""
    if split not in _CACHE:
        pre = "train" if split == "train" else "t10k"
        x = idx(os.path.join(DATA, f"{pre}-images-idx3-ubyte.gz"))
        y = idx(os.path.join(DATA, f"{pre}-labels-idx1-ubyte.gz"))
        _CACHE[split] = (x[..., None].astype(np.float32) / np.float32(255), y.astype(np.int64))
    return _CACHE[split]


def cohort_cmd():
    """The installed `cohort` command."""
    exe = shutil.which("cohort")
    assert exe, "no cohort command on PATH"
    return exe


def cli_predict(weights, npy_x, tmp):
    """`cohort predict WEIGHTS --data npy:X` as [n, outputs] (its p0, p1, ... columns)."""
    out = os.path.join(tmp, "pred.csv")
    r = subprocess.run([cohort_cmd(), "predict", weights, "--data", f"npy:{npy_x}", "--out", out],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(out) as f:
        head = f.readline().strip().split(",")
        cols = [i for i, h in enumerate(head) if h.startswith("p") and h[1:].isdigit()]
        rows = [line.rstrip("\n").split(",") for line in f]
    return np.array([[float(r[i]) for i in cols] for r in rows], dtype=np.float32)


@pytest.fixture(scope="session")
def cohort():
    import cohort as c  # noqa: PLC0415
    return c
