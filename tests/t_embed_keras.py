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
import csv
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kerasref import (Checks, build, cohort_bin, cohort_train, compare_history,  # noqa: E402
                      compare_weights, glorot_init, keras, keras_fit, np, set_weights,
                      read_safetensors, write_safetensors)

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


def cohort_predict(cohort, tmp, name):
    r = subprocess.run([cohort, "predict", f"{tmp}/out/models/{name}.safetensors", "--data",
                        f"npy:{tmp}/x.npy", "--out", f"{tmp}/pred_{name}.csv"],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"{name}: cohort predict exited {r.returncode}: {r.stderr}")
    if r.returncode != 0:
        return None
    with open(f"{tmp}/pred_{name}.csv") as f:
        rows = list(csv.DictReader(f))
    return np.array([[float(row[f"p{j}"]) for j in range(CLASSES)] for row in rows])


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
        inits, models = {}, []
        for i, (name, layers) in enumerate(MODELS.items()):
            model, ks = build(layers, (T,))
            inits[name] = glorot_init(model, ks, layers, seed=90 + i)
            write_safetensors(f"{tmp}/{name}.safetensors", inits[name])
            models.append({"name": name, "layers": layers,
                           "init_from": f"{tmp}/{name}.safetensors"})
        plan = {"data": {"train": f"npy:{tmp}/x.npy,{tmp}/y.npy", "validation_split": 0.2},
                "defaults": {"epochs": 1, "batch_size": BATCH, "shuffle": False,
                             "optimizer": {"name": "adam", "lr": 0.01}},
                "models": models}
        if not cohort_train(check, cohort, plan, tmp):
            return check.done()
        results = {m["name"]: m for m in json.load(open(f"{tmp}/out/results.json"))["models"]}
        for name, layers in MODELS.items():
            got = read_safetensors(f"{tmp}/out/models/{name}.safetensors")
            check(results[name]["status"] == "ok", f"{name}: status {results[name]['status']}")
            want, hist, _ = keras_fit(layers, inits[name], x.astype(np.int64), y,
                                      opt={"name": "adam", "lr": 0.01}, batch=BATCH,
                                      validation_split=0.2)
            check(sorted(got) == sorted(want), f"{name}: tensors {sorted(got)}, Keras's {sorted(want)}")
            rel = compare_weights(check, name, got, want, inits[name])
            compare_history(check, name, results[name]["history"], hist,
                            ("loss", "accuracy", "val_loss", "val_accuracy"))
            print(f"{NAME}: {name}: max relative weight difference {rel:.3g}")
            mine = cohort_predict(cohort, tmp, name)
            if mine is None:
                continue
            keras.utils.clear_session()
            model, ks = build(layers, (T,))
            set_weights(model, ks, layers, got)
            theirs = np.asarray(model.predict(x.astype(np.int64), batch_size=64, verbose=0))
            d = float(np.max(np.abs(mine - theirs)))
            check(mine.shape == theirs.shape and d <= 1e-5,
                  f"{name}: Keras on cohort's weights predicts up to {d:.3g} apart")
            print(f"{NAME}: {name}: max |cohort predict - Keras predict| = {d:.3g}")
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
