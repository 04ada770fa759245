#!/usr/bin/python3
"""Write the seed corpora of the fuzz targets: small valid inputs, framed as
each harness expects (see the comment at the top of tests/fuzz/fuzz_X.c).

usage: seeds.py OUTDIR     makes OUTDIR/<target>/<seed files>
Run with /usr/bin/python3 (numpy)."""
import gzip, io, json, os, struct, sys, zipfile
import numpy as np

out = sys.argv[1]
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def put(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def idx(arr):
    arr = np.asarray(arr, dtype=np.uint8)
    head = struct.pack(">I", 0x0800 | arr.ndim) + b"".join(struct.pack(">I", s) for s in arr.shape)
    return head + arr.tobytes()


def npy(arr, version=None):
    b = io.BytesIO()
    if version:
        np.lib.format.write_array(b, np.asarray(arr), version=version)
    else:
        np.save(b, np.asarray(arr))
    return b.getvalue()


def npz(compressed=False, **arrays):
    b = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(b, **arrays)
    return b.getvalue()


def safetensors(tensors, meta=None):
    header, blob = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, arr in tensors:
        arr = np.asarray(arr, dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [len(blob), len(blob) + arr.nbytes]}
        blob += arr.tobytes()
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


rng = np.random.default_rng(1)

# IDX: flags byte, LE16 length of the image part, images, labels.
for i, (n, shape, flags) in enumerate([(3, (2, 2), 0), (4, (3, 2), 1), (2, (2, 2, 2), 2),
                                       (5, (1, 1), 3), (1, (4, 4), 0)]):
    img = idx(rng.integers(0, 256, size=(n,) + shape))
    lbl = idx(rng.integers(0, 10, size=n))
    if flags & 1:
        img = gzip.compress(img, 1)
    if flags & 2:
        lbl = gzip.compress(lbl, 1)
    frame = bytes([flags]) + struct.pack("<H", len(img)) + img + lbl
    put("idx", f"seed{i}", frame)
    # The gz target compresses both parts itself: its seeds are plain.
    raw_img = idx(rng.integers(0, 256, size=(n,) + shape))
    put("idx_gz", f"seed{i}", b"\0" + struct.pack("<H", len(raw_img)) + raw_img +
        idx(rng.integers(0, 10, size=n)))

# CSV: label-column and split byte, then the text.
put("csv", "header", b"\0" + b"a,b,label\n1,2,0\n3.5,-4e2,1\n")
put("csv", "noheader", b"\0" + b"0.1,0.2,3\r\n0.3,0.4,1\r\n\r\n")
put("csv", "named", b"\1" + b"label,x\n\"1\",2\n0, 5\n")
put("csv", "index", b"\2" + b"\xef\xbb\xbf7,1.5,2.5\n2,3,4\n")
put("csv", "col2", b"\3" + b"1,2,3,4\n5,6,7,8\n")
put("csv", "chunks", b"\x50" + b"a,label\n0.5,cat\n\n1e-3,dog\r\n-7,1\n0x1p3,2\n3.40282357e38,0\n")

# NPY: LE16 length of the x part, x, y.
for i, (x, y, v) in enumerate([
        (rng.random((3, 2), dtype=np.float32), np.array([0, 1, 2], np.int64), None),
        (rng.random((2, 2, 2)), np.array([1, 0], np.uint8), None),
        (rng.integers(0, 256, (4, 3)).astype(np.uint8), np.array([[1], [2], [3], [0]], np.int32), None),
        (rng.integers(-5, 5, (2, 3)).astype(np.int16), np.array([1.0, 2.0], np.float32), (2, 0)),
        (np.zeros((1, 1), np.float32), np.array([0], np.uint16), (3, 0))]):
    xb, yb = npy(x, v), npy(y, v)
    put("npy", f"seed{i}", struct.pack("<H", len(xb)) + xb + yb)

# NPZ: whole archives.
put("npz", "stored", npz(x=rng.random((3, 2), dtype=np.float32), y=np.array([0, 1, 1])))
put("npz", "deflated", npz(True, x=rng.integers(0, 256, (4, 2)).astype(np.uint8),
                           y=np.array([2, 1, 0, 1], np.int32)))
put("npz", "train", npz(x_train=np.ones((2, 2)), y_train=np.array([0, 1], np.uint8)))
put("npz", "first_two", npz(True, a=np.ones((2, 1), np.float32), b=np.array([1, 1])))

# safetensors: whole files.
spec = json.dumps({"name": "m", "layers": [{"dense": 2, "activation": "softmax"}]})
put("safetensors", "model", safetensors(
    [("layers.0.weight", rng.random((2, 3))), ("layers.0.bias", rng.random(2))],
    {"format": "pt", "spec": spec}))
put("safetensors", "empty", safetensors([]))
put("safetensors", "scalar", safetensors([("s", np.float32(1.5)), ("z", np.zeros((0, 3)))]))
put("safetensors", "4d", safetensors([("t", rng.random((1, 2, 1, 2)))], {}))

# JSON: text.
for i, text in enumerate([
        '{"a": [1, 2.5e-3, -0, true, false, null], "b": {"c": "d\\u00e9\\ud83d\\ude00"}}',
        '[[[[]]], {}, "", "\\n\\t\\"\\\\\\/"]', '1e308', '"\xc3\xa9\xe2\x82\xac"',
        json.dumps({"models": [{"name": "x", "history": {"loss": [0.5, 0.25]}}]})]):
    put("json", f"seed{i}", text)

# Plans: byte 0 picks a --set override (0-3) or none (4).
plans = [os.path.join(root, "examples", "seed.yaml")]
bad = os.path.join(root, "tests", "bad", "plan")
if os.path.isdir(bad):
    plans += [os.path.join(bad, f) for f in sorted(os.listdir(bad)) if f.endswith(".yaml")]
for i, p in enumerate(plans):
    with open(p, "rb") as f:
        put("plan", f"file{i}", bytes([i % 5]) + f.read())
put("plan", "json", b"\4" + json.dumps({
    "data": {"train": "csv:a.csv", "validation_split": 0.1},
    "defaults": {"epochs": 2, "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9}},
    "models": [{"name": "a", "layers": [{"dense": 4, "activation": "relu"}, {"dropout": 0.5},
                                        {"dense": 3, "activation": "softmax"}]}],
    "sweep": {"optimizer.lr": [0.1, 0.01], "batch_size": [8, 16]},
    "devices": {"cpu:0": {"split": ["1GiB", "1GiB"]}}, "strategy": "threads"}).encode())
put("plan", "sweep", b"\4" + b"""data: {train: 'idx:a,b'}
defaults: {epochs: 1, layers: [{dense: 3, activation: softmax}]}
models:
  - name: m
    early_stopping: {monitor: val_loss, patience: 2}
  - {name: n, init_from: w.safetensors, device: 'cpu:0'}
sweep: {seed: [1, 2, 3]}
""")
