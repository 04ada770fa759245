"""fmnist: Fashion-MNIST from Debian's dataset-fashion-mnist (or $COHORT_DATA) as numpy arrays,
for the peer programs of bench/peers (which run in scripts/pyenv peers, beside this file)."""
import gzip
import os
import struct

import numpy as np

ROOT = os.environ.get("COHORT_DATA", "/usr/share/datasets/fashion-mnist")


def read_idx(path):
    """The array of an IDX file of unsigned bytes (gzip)."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[:3] != b"\0\0\x08":
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split, root=ROOT):
    """(x, y) of split "train" or "t10k": images as float32 in [0, 1] of shape [n, 28, 28], labels
    as int64."""
    x = read_idx(f"{root}/{split}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    y = read_idx(f"{root}/{split}-labels-idx1-ubyte.gz").astype(np.int64)
    return x, y
