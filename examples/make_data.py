#!/usr/bin/env python3
"""Synthetic data for examples/regression.yaml and examples/binary.yaml.

  /usr/bin/python3 examples/make_data.py [DIR]     (default: examples/data)

Regression: Friedman's function #1 (J. Friedman, 1991), ten uniform inputs of
which five matter, y = 10 sin(pi x0 x1) + 20 (x2 - 0.5)^2 + 10 x3 + 5 x4 +
N(0, 1) noise; 4000 training and 1000 test rows, x [n, 10] float32, y [n]
float32. Binary: two interleaved half circles with noise (x [n, 2], labels
0/1 as int64), 3000 training and 1000 test rows. Fixed seeds: the same files
every time."""
import os
import sys

import numpy as np


def friedman(rng, n):
    x = rng.uniform(0.0, 1.0, (n, 10)).astype(np.float32)
    y = (10 * np.sin(np.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2 + 10 * x[:, 3]
         + 5 * x[:, 4] + rng.standard_normal(n)).astype(np.float32)
    return x, y


def moons(rng, n):
    c = rng.integers(0, 2, n)
    a = rng.uniform(0.0, np.pi, n)
    x = np.stack([np.cos(a) + c * 1.0, np.sin(a) * (1 - 2 * c) + c * 0.5], axis=1)
    x += 0.2 * rng.standard_normal((n, 2))
    return x.astype(np.float32), c.astype(np.int64)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "data")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(1991)
    for name, make, sizes in (("friedman", friedman, (4000, 1000)), ("moons", moons, (3000, 1000))):
        for part, n in zip(("train", "test"), sizes):
            x, y = make(rng, n)
            np.save(os.path.join(out, f"{name}_{part}_x.npy"), x)
            np.save(os.path.join(out, f"{name}_{part}_y.npy"), y)
    print(f"wrote friedman_* and moons_* to {out}")


if __name__ == "__main__":
    main()
