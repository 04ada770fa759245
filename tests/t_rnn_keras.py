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
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kerasref import (Checks, adam_plan, check_fit, check_predict, cohort_bin,  # noqa: E402
                      cohort_predict, cohort_train, init_models, np, read_safetensors)

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
        inits, models = init_models(MODELS, (T, F), tmp, seed=60)
        if not cohort_train(check, cohort, adam_plan(f"npy:{tmp}/x.npy,{tmp}/y.npy", models, BATCH),
                            tmp):
            return check.done()
        results = {m["name"]: m for m in json.load(open(f"{tmp}/out/results.json"))["models"]}
        for name, layers in MODELS.items():
            got = read_safetensors(f"{tmp}/out/models/{name}.safetensors")
            check_fit(check, name, layers, got, inits[name], results[name], x, y, BATCH)
            mine = cohort_predict(check, cohort, f"{tmp}/out/models/{name}.safetensors",
                                  f"npy:{tmp}/x.npy", f"{tmp}/pred_{name}.csv", CLASSES)
            check_predict(check, name, layers, (T, F), got, x, mine)
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
