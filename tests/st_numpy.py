"""Safetensors files as numpy arrays (F32 only), for the tests that compare cohort with
PyTorch: the reference format's layout (an 8-byte little-endian header length, the JSON
header, the tensors' bytes), with no package beyond numpy."""
import json
import os
import struct
import sys

import numpy as np

# The reader is the Python package's (python/cohort/_safetensors.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from cohort._safetensors import read as _read  # noqa: E402


def write_safetensors(path, tensors):
    """Write a dict of name -> array as F32 tensors, in the dict's order."""
    header, offset, blobs = {}, 0, []
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    """The tensors of a file as a dict of name -> read-only array (metadata left out)."""
    return _read(path)[0]

