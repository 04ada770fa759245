#!/usr/bin/env python3
# pyenv: test
"""The embedding against Keras 3's own Embedding (issue 37), built by tests/kerasref.py from
the plan's layer list: token ids [n, T] (uint8, int64 in Keras), padding 0 at the end or the
start of some samples, from the same initial weights (init_from), one unshuffled epoch of batch
32 with a short last batch, validation split 0.2, Adam, in cohort and in Keras's fit(). The
models: an embedding flattened into a dense layer; and mask_zero into GlobalAveragePooling1D
(Keras averages the steps that are not padding, and so must cohort), with a dense layer on the
steps between (a mask passes through it). Checked: every weight within 2e-5 + 1e-4 |Keras|,
the history to 1e-4 relative, and Keras's predict() on cohort's trained weights against
`cohort predict` to 1e-5.

Runs in scripts/pyenv's test environment (the "# pyenv: test" line above; CMakeLists.txt)."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kerasref import (Checks, adam_plan, check_fit, check_predict, cohort_bin,  # noqa: E402
                      cohort_predict, cohort_train, init_models, np, read_safetensors)

NAME = "t_embed_keras.py"
check = Checks(NAME)
V, T, N, BATCH, CLASSES = 11, 7, 150, 32, 3
SOFTMAX = {"dense": CLASSES, "activation": "softmax"}
MODELS = {
    "embedding_flatten": [{"embedding": {"input_dim": V, "output_dim": 4}}, "flatten",
                          {"dense": 5, "activation": "tanh"}, SOFTMAX],
    "masked_mean": [{"embedding": {"input_dim": V, "output_dim": 5, "mask_zero": True}},
                    {"dense": 6, "activation": "relu"}, "global_average_pooling1d", SOFTMAX],
}


def main():
    cohort = cohort_bin(NAME)
    if not cohort:
        return 1
    rng = np.random.default_rng(41)
    x = rng.integers(1, V, (N, T))
    for i in range(N):  # a word of 2..T ids, after its padding where i is odd
        n = 2 + i % (T - 1)
        x[i] = np.roll(np.where(np.arange(T) < n, x[i], 0), T - n if i % 2 else 0)
    y = ((x == 1).sum(1) + (x == 2).sum(1) - (x == 3).sum(1)).clip(0, CLASSES - 1).astype(np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", x.astype(np.uint8))
        np.save(f"{tmp}/y.npy", y)
        inits, models = init_models(MODELS, (T,), tmp, seed=90)
        if not cohort_train(check, cohort, adam_plan(f"npy:{tmp}/x.npy,{tmp}/y.npy", models, BATCH),
                            tmp):
            return check.done()
        results = {m["name"]: m for m in json.load(open(f"{tmp}/out/results.json"))["models"]}
        for name, layers in MODELS.items():
            got = read_safetensors(f"{tmp}/out/models/{name}.safetensors")
            check_fit(check, name, layers, got, inits[name], results[name], x.astype(np.int64), y,
                      BATCH)
            mine = cohort_predict(check, cohort, f"{tmp}/out/models/{name}.safetensors",
                                  f"npy:{tmp}/x.npy", f"{tmp}/pred_{name}.csv", CLASSES)
            check_predict(check, name, layers, (T,), got, x.astype(np.int64), mine)
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
