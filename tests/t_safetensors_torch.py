"""Interoperability of cohort's safetensors files with the reference format.

Run by ctest with COHORT_BUILD=<build dir>: the C side writes a sample
("test_safetensors --write-sample"), a small numpy reader checks it as the
reference safetensors reader would (header layout, contiguous offsets, exact
values); then a numpy writer that follows the reference writer (tensors
sorted by name, compact JSON, __metadata__ first, space padding to 8 bytes)
writes a file that the C side checks ("--read-sample"). The safetensors
Python package is not needed. Exit 77 when numpy is missing.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcheck import Checks, need  # noqa: E402

NAME = "t_safetensors_torch.py"
np = need(NAME, "numpy")
check = Checks(NAME)


def st_load(path):
    """Read a safetensors file the way the reference reader validates it."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header_bytes = raw[8:8 + n]
    header = json.loads(header_bytes.decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", None)
    tensors = {}
    order = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"])
    start = 0
    for name, info in order:
        begin, end = info["data_offsets"]
        if begin != start or end < begin:
            raise ValueError("%s: offsets %r not contiguous" % (name, info["data_offsets"]))
        if info["dtype"] != "F32":
            raise ValueError("%s: dtype %s" % (name, info["dtype"]))
        shape = tuple(info["shape"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if count * 4 != end - begin:
            raise ValueError("%s: shape %r does not match offsets" % (name, shape))
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(shape)
        start = end
    if start != len(data):
        raise ValueError("data is %d bytes, tensors cover %d" % (len(data), start))
    return raw, n, header_bytes, tensors, meta, [name for name, _ in header.items()]


def st_save(path, tensors, meta):
    """Write the file the reference writer (safetensors.numpy.save_file) would."""
    names = sorted(tensors)
    header = {}
    if meta is not None:
        header["__metadata__"] = meta
    offset = 0
    blobs = []
    for name in names:
        arr = np.asarray(tensors[name], dtype="<f4")  # keeps 0-d shapes, unlike ascontiguousarray
        b = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def cohort_version():
    """COHORT_VERSION from include/cohort.h (the tests run from the repository root)."""
    src = os.environ.get("COHORT_SRC", ".")
    with open(os.path.join(src, "include", "cohort.h")) as f:
        m = re.search(r'#define COHORT_VERSION "([^"]*)"', f.read())
    return m.group(1) if m else None


def check_c_sample(helper, tmp):
    path = os.path.join(tmp, "from_c.safetensors")
    r = subprocess.run([helper, "--write-sample", path], capture_output=True, text=True)
    check(r.returncode == 0, "--write-sample exited %d: %s" % (r.returncode, r.stderr.strip()))
    if r.returncode != 0:
        return
    try:
        raw, n, header_bytes, t, meta, header_order = st_load(path)
    except (ValueError, KeyError, UnicodeDecodeError, json.JSONDecodeError) as e:
        check(False, "the reference-style reader rejects the C file: %s" % e)
        return
    check(n % 8 == 0, "header size %d is a multiple of 8" % n)
    check(header_bytes.startswith(b'{"__metadata__":{'), "header starts with __metadata__")
    check(header_bytes.rstrip(b" ").endswith(b"}"), "header is padded with spaces only")
    check(len(header_bytes) - len(header_bytes.rstrip(b" ")) < 8, "padding is under 8 bytes")
    check(header_order == ["layers.0.weight", "layers.0.bias", "scalar", "empty", "big"],
          "tensors in the order written: %r" % header_order)
    expect = {
        "layers.0.weight": np.arange(12, dtype=np.float32).reshape(3, 4) * np.float32(0.5) - np.float32(2),
        "layers.0.bias": np.array([0.25, -0.0, 3.0e38], dtype=np.float32),
        "scalar": np.array(42.5, dtype=np.float32),
        "empty": np.zeros((0, 5), dtype=np.float32),
        "big": (np.arange(16, dtype=np.float32) - 8).reshape(2, 2, 2, 2),
    }
    check(sorted(t) == sorted(expect), "tensor names %r" % sorted(t))
    for name, want in expect.items():
        got = t.get(name)
        if got is None:
            continue
        check(got.shape == want.shape, "%s shape %r, want %r" % (name, got.shape, want.shape))
        check(got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32)),
              "%s values bit for bit" % name)
    want_meta = {"format": "pt", "cohort_version": cohort_version(),
                 "spec": '{"layers":[{"dense":4}]}', "note": "na\u00efve \u2713"}
    check(meta == want_meta, "metadata %r, want %r" % (meta, want_meta))


def check_numpy_sample(helper, tmp):
    path = os.path.join(tmp, "from_numpy.safetensors")
    special = np.array([0x80000000, 0x7f800000, 0xff800000, 0x00000001, 0x7f7fffff, 0x7fc00001],
                       dtype=np.uint32).view(np.float32)
    tensors = {
        "d.empty": np.zeros((0,), dtype=np.float32),
        "b.special": special,
        "c": np.array(3.5, dtype=np.float32),
        "a.weight": (np.arange(120, dtype=np.float32) * np.float32(0.25) - np.float32(7)).reshape(2, 3, 4, 5),
    }
    st_save(path, tensors, {"format": "pt", "note": "h\u00e9llo \U0001F600"})
    # The writer itself must agree with the reference reader's rules.
    try:
        st_load(path)
        ok, why = True, ""
    except ValueError as e:
        ok, why = False, str(e)
    check(ok, "the numpy writer breaks the reference reader's rules: %s" % why)
    r = subprocess.run([helper, "--read-sample", path], capture_output=True, text=True)
    check(r.returncode == 0, "--read-sample exited %d:\n%s%s" % (r.returncode, r.stdout, r.stderr))


def main():
    build = os.environ.get("COHORT_BUILD")
    if not build:
        check(False, "COHORT_BUILD is not set (ctest sets it to the build directory)")
        return check.done()
    helper = os.path.join(build, "test_safetensors")
    if not os.access(helper, os.X_OK):
        check(False, "%s is missing; build the tests first" % helper)
        return check.done()
    tmp = tempfile.mkdtemp(prefix="cohort_st_py_")
    try:
        check_c_sample(helper, tmp)
        check_numpy_sample(helper, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
