#!/usr/bin/env python3
# pyenv: test
"""The recurrent layers against Keras 3's own LSTM, GRU (reset_after) and Bidirectional
(merge_mode concat), built by tests/kerasref.py from the plan's layer list: sequences [n, T, F],
several stacks from the same initial weights (init_from in torch's layouts, which kerasref
moves into Keras's: kernels transposed, a GRU's gate blocks from torch's r, z, n into Keras's
z, r, h, an LSTM's two biases summed into its one), one unshuffled epoch of batch 16 with a short
last batch, validation split 0.2, Adam, in cohort and in Keras's fit(). Checked: every weight
within 2e-5 + 1e-4 |Keras|, the history's loss, accuracy, val_loss and val_accuracy to 1e-4
relative, and Keras's predict() on cohort's trained weights against `cohort predict` to 1e-5.

Runs in scripts/pyenv's test environment (the "# pyenv: test" line above; CMakeLists.txt)."""
import csv
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kerasref import (Checks, build, cohort_bin, cohort_train, compare_history,  # noqa: E402
                      compare_weights, glorot_init, keras, keras_fit, np, read_safetensors,
                      set_weights, write_safetensors)

NAME = "t_rnn_keras.py"
check = Checks(NAME)
T, F, CLASSES, N, BATCH = 6, 4, 3, 90, 16
SOFTMAX = {"dense": CLASSES, "activation": "softmax"}

MODELS = {
    "lstm_seq_gru": [{"lstm": 6, "return_sequences": True}, {"gru": 5}, SOFTMAX],
    "gru_seq_flatten": [{"gru": 4, "return_sequences": True}, "flatten", SOFTMAX],
    "bi_gru_seq_bi_lstm": [{"bidirectional": {"gru": 4, "return_sequences": True}},
                           {"bidirectional": {"lstm": 3}}, SOFTMAX],
    "lstm_seq_dense_gru": [{"lstm": 5, "return_sequences": True},
                           {"dense": 4, "activation": "tanh"}, {"gru": 3}, SOFTMAX],
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
    rng = np.random.default_rng(37)
    x = rng.standard_normal((N, T, F)).astype(np.float32)
    y = (np.argmax(x[:, -2:, :CLASSES].sum(axis=1) + 0.3 * rng.standard_normal((N, CLASSES)),
                   axis=1)).astype(np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", x)
        np.save(f"{tmp}/y.npy", y)
        inits, models = {}, []
        for i, (name, layers) in enumerate(MODELS.items()):
            model, ks = build(layers, (T, F))
            inits[name] = glorot_init(model, ks, layers, seed=60 + i)
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
            want, hist, _ = keras_fit(layers, inits[name], x, y, opt={"name": "adam", "lr": 0.01},
                                      batch=BATCH, validation_split=0.2)
            check(sorted(got) == sorted(want), f"{name}: tensors {sorted(got)}, Keras's {sorted(want)}")
            rel = compare_weights(check, name, got, want, inits[name])
            compare_history(check, name, results[name]["history"], hist,
                            ("loss", "accuracy", "val_loss", "val_accuracy"))
            print(f"{NAME}: {name}: max relative weight difference {rel:.3g}")
            mine = cohort_predict(cohort, tmp, name)
            if mine is None:
                continue
            keras.utils.clear_session()
            model, ks = build(layers, (T, F))
            set_weights(model, ks, layers, got)
            theirs = np.asarray(model.predict(x, batch_size=64, verbose=0))
            d = float(np.max(np.abs(mine - theirs)))
            check(mine.shape == theirs.shape and d <= 1e-5,
                  f"{name}: cohort predict differs from Keras's by {d:.3g}")
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
