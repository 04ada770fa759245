"""Safetensors files (F32) as numpy arrays: an 8-byte little-endian header
length, the JSON header (with "__metadata__"), then the tensors' bytes."""
import json
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
