#!/usr/bin/env python3
# pyenv: test
"""Every loss of docs/plan.md (with from_logits, label_smoothing, huber's delta and
class_weight) and the metrics that follow it (accuracy, binary accuracy, mae, rmse) against
Keras 3 itself (keras.losses, keras.metrics, fit(class_weight=...)).

Five data sets (class labels, probability rows, 0/1 labels, multi-label probability rows, real
targets of one and of two columns), a small MLP per loss from the same initial weights, one
unshuffled epoch of batch 32 with a short last batch and validation split 0.2, in cohort and in
Keras's fit(). Checked: every weight within 2e-5 + 1e-4 |Keras|, and every column of the
history (loss and accuracy, or loss, mae and rmse, and their val_ forms) to 1e-4 relative.

Where cohort and Keras part deliberately (docs/plan.md says so), Keras is given the model a Keras
user writes for the same thing:
- label_smoothing with sparse labels (Keras's SparseCategoricalCrossentropy has none): Keras's
  CategoricalCrossentropy(label_smoothing) on the one-hot labels;
- the accuracy of a binary model with from_logits: cohort counts logit > 0 (probability > 0.5);
  Keras's "accuracy" would compare the logit itself with 0.5, so Keras gets BinaryAccuracy with
  threshold 0.

Runs in scripts/pyenv's test environment (the "# pyenv: test" line above; CMakeLists.txt)."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kerasref import (Checks, build, cohort_bin, cohort_train, compare_history,  # noqa: E402
                      compare_weights, glorot_init, keras_fit, np, read_safetensors,
                      write_safetensors)

NAME = "t_losses_keras.py"
check = Checks(NAME)
BATCH, N, D = 32, 210, 10
CLS_HIST = ("loss", "accuracy", "val_loss", "val_accuracy")
REG_HIST = ("loss", "mae", "rmse", "val_loss", "val_mae", "val_rmse")


def mlp(units, act):
    return [{"dense": 12, "activation": "relu"}, {"dense": units, "activation": act}]


def run_set(tmp, label, x, y, cases, keras_y=None):
    """Train every case (name -> (layers, loss, class_weight, keras's loss or None, history
    columns)) on x, y in one cohort run and in Keras, and compare."""
    d = f"{tmp}/{label}"
    os.makedirs(d)
    np.save(f"{d}/x.npy", x)
    np.save(f"{d}/y.npy", y)
    models, inits = [], {}
    for i, (name, (layers, loss, cw, _, _)) in enumerate(cases.items()):
        model, ks = build(layers, (D,))
        inits[name] = glorot_init(model, ks, layers, seed=11 + i)
        write_safetensors(f"{d}/{name}.safetensors", inits[name])
        m = {"name": name, "layers": layers, "loss": loss, "init_from": f"{d}/{name}.safetensors"}
        if cw is not None:
            m["class_weight"] = cw
        models.append(m)
    plan = {"data": {"train": f"npy:{d}/x.npy,{d}/y.npy", "validation_split": 0.2},
            "defaults": {"epochs": 1, "batch_size": BATCH, "shuffle": False,
                         "optimizer": {"name": "adam", "lr": 0.01}},
            "models": models}
    if not cohort_train(check, cohort_bin(NAME), plan, d, label):
        return
    results = {m["name"]: m for m in json.load(open(f"{d}/out/results.json"))["models"]}
    for name, (layers, loss, cw, kloss, hist_keys) in cases.items():
        ky = keras_y if keras_y is not None else y
        if kloss is not None:
            kloss, ky = kloss
        want, hist, _ = keras_fit(layers, inits[name], x, ky, opt={"name": "adam", "lr": 0.01},
                                  loss=kloss if kloss is not None else loss, batch=BATCH,
                                  validation_split=0.2, class_weight=cw,
                                  classes=hist_keys == CLS_HIST)
        got = read_safetensors(f"{d}/out/models/{name}.safetensors")
        rel = compare_weights(check, f"{label}/{name}", got, want, inits[name])
        rec = results[name]
        check(rec["status"] == "ok", f"{name}: status {rec['status']}")
        compare_history(check, f"{label}/{name}", rec["history"], hist, hist_keys)
        print(f"{NAME}: {label}/{name}: max relative weight difference {rel:.3g}")


def main():
    if not cohort_bin(NAME):
        return 1
    rng = np.random.default_rng(21)
    x = rng.standard_normal((N, D)).astype(np.float32)
    scores = x[:, :4] + 0.5 * rng.standard_normal((N, 4))
    labels = np.argmax(scores, axis=1).astype(np.int64)
    onehot = np.eye(4, dtype=np.float32)[labels]
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    probs = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    binary = (x[:, 0] + 0.5 * x[:, 1] + 0.3 * rng.standard_normal(N) > 0.3).astype(np.int64)
    multi = (1 / (1 + np.exp(-(x[:, :3] * 2)))).astype(np.float32)
    real1 = (x[:, 0] * 1.5 - x[:, 1] + 0.2 * rng.standard_normal(N)).astype(np.float32)
    real2 = np.stack([real1, np.abs(x[:, 2]) * 2], axis=1).astype(np.float32)
    smooth_sparse = ({"name": "categorical_crossentropy", "label_smoothing": 0.2}, onehot)
    with tempfile.TemporaryDirectory() as tmp:
        run_set(tmp, "labels", x, labels, {
            "sparse": (mlp(4, "softmax"), "sparse_categorical_crossentropy", None, None, CLS_HIST),
            "sparse_logits": (mlp(4, "linear"), {"name": "sparse_categorical_crossentropy",
                                                 "from_logits": True}, None, None, CLS_HIST),
            "sparse_class_weight": (mlp(4, "softmax"), "sparse_categorical_crossentropy",
                                    {0: 0.5, 1: 2.0, 2: 1.0, 3: 3.0}, None, CLS_HIST),
            "sparse_smoothing": (mlp(4, "softmax"), {"name": "sparse_categorical_crossentropy",
                                                     "label_smoothing": 0.2}, None, smooth_sparse,
                                 CLS_HIST),
            "mse_onehot": (mlp(4, "sigmoid"), "mse", None, ("mse", onehot), CLS_HIST),
        })
        run_set(tmp, "rows", x, probs, {
            "cce": (mlp(4, "softmax"), "categorical_crossentropy", None, None, CLS_HIST),
            "cce_logits": (mlp(4, "linear"), {"name": "categorical_crossentropy",
                                              "from_logits": True}, None, None, CLS_HIST),
            "cce_smoothing": (mlp(4, "softmax"), {"name": "categorical_crossentropy",
                                                  "label_smoothing": 0.1}, None, None, CLS_HIST),
        })
        kbin = binary.reshape(-1, 1).astype(np.float32)
        run_set(tmp, "binary", x, binary, {
            "bce": (mlp(1, "sigmoid"), "binary_crossentropy", None, None, CLS_HIST),
            "bce_logits": (mlp(1, "linear"), {"name": "binary_crossentropy", "from_logits": True},
                           None, None, CLS_HIST),
            "bce_class_weight": (mlp(1, "sigmoid"), "binary_crossentropy", {0: 1.0, 1: 4.0},
                                 None, CLS_HIST),
            "bce_smoothing": (mlp(1, "sigmoid"), {"name": "binary_crossentropy",
                                                  "label_smoothing": 0.1}, None, None, CLS_HIST),
        }, keras_y=kbin)
        run_set(tmp, "multilabel", x, multi, {
            "bce_rows": (mlp(3, "sigmoid"), "binary_crossentropy", None, None, CLS_HIST),
            "bce_rows_logits": (mlp(3, "linear"), {"name": "binary_crossentropy", "from_logits": True},
                                None, None, CLS_HIST),
        })
        run_set(tmp, "real1", x, real1, {
            "mse": (mlp(1, "linear"), "mse", None, None, REG_HIST),
            "mae": (mlp(1, "linear"), "mae", None, None, REG_HIST),
            "huber": (mlp(1, "linear"), {"name": "huber", "delta": 0.5}, None, None, REG_HIST),
        }, keras_y=real1.reshape(-1, 1))
        run_set(tmp, "real2", x, real2, {
            "mse2": (mlp(2, "linear"), "mse", None, None, REG_HIST),
            "huber2": (mlp(2, "tanh"), "huber", None, None, REG_HIST),
        })
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
