"""Every example of docs/python.md runs as written, in its order, in a
folder of its own, from the installed package. Blocks are ```python (numpy
and cohort alone), ```python keras, ```python onnx and ```python torch (the
module they need). test_docs_page runs the page with the keras and onnx
blocks; test_docs_torch runs the blocks before the first training (imports,
data) and then the torch ones, where torch is (tests/t_pip.sh runs them on
Debian's python3-torch)."""
import os
import re

import pytest

from conftest import SRC, need

PAGE = os.path.join(SRC, "docs", "python.md")


def blocks():
    with open(PAGE) as f:
        text = f.read()
    return [(m.group(1) or "", m.group(2))
            for m in re.finditer(r"^```python(?: (\w+))?\n(.*?)^```$", text, re.S | re.M)]


def run(code, ns, tag, i):
    exec(compile(code, f"{PAGE}:block {i} ({tag or 'python'})", "exec"), ns)  # noqa: S102


def test_docs_page(tmp_path, monkeypatch):
    need("keras")
    need("onnxruntime")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    ns = {"__name__": "docs"}
    ran = set()
    for i, (tag, code) in enumerate(blocks()):
        if tag == "torch":
            continue
        run(code, ns, tag, i)
        ran.add(tag)
    assert ran == {"", "keras", "onnx"}, ran


def test_docs_torch(tmp_path, monkeypatch):
    need("torch")
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "docs"}
    prelude = True
    n = 0
    for i, (tag, code) in enumerate(blocks()):
        prelude = prelude and "cohort.train(" not in code
        if (tag == "" and prelude) or tag == "torch":
            run(code, ns, tag, i)
            n += tag == "torch"
    assert n >= 1
