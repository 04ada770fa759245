"""Safetensors files (F32) as numpy arrays: an 8-byte little-endian header
length, the JSON header (with "__metadata__"), then the tensors' bytes."""
import json
import os
import struct

import numpy as np


def read(path):
    """(tensors, metadata) of the file: name -> read-only float32 array, and
    the header's __metadata__ map of strings ({} when it has none)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than its header length)")
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        if info.get("dtype") != "F32":
            raise ValueError(f"{path}: tensor {name} is {info.get('dtype')}, not F32")
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype="<f4").reshape(info["shape"])
    return out, meta


def write(path, tensors, metadata=None):
    """Write name -> array (as float32, C order) with __metadata__ (strings),
    to path.tmp and then renamed over path, so that a reader never sees half a file."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the tensors start 8-byte aligned
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
