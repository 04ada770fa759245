#!/usr/bin/env python3
# pyenv: test
"""Every optimizer of docs/plan.md, with its keys, the three gradient clips, the kernel
regularizers and the three learning-rate schedules, against Keras 3 itself (keras.optimizers,
keras.regularizers, keras.optimizers.schedules; tests/kerasref.py builds the model).

An MLP (12 inputs, dense 16 tanh, dense 8 relu, dense 4 softmax) from the same initial weights
(init_from) trains one unshuffled epoch, batch 32 with a short last batch, validation split 0.2,
in cohort and in Keras's fit(). Checked: every weight within 2e-5 + 1e-4 |Keras| (and moved by
training), and the history's loss, accuracy, val_loss and val_accuracy to 1e-4 relative. A
second epoch runs for the schedules (the step count carried across epochs).

Runs in scripts/pyenv's test environment (the "# pyenv: test" line above; CMakeLists.txt)."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kerasref import (Checks, cohort_bin, cohort_train, compare_history, compare_weights,  # noqa: E402
                      glorot_init, build, keras_fit, np, read_safetensors, write_safetensors)

NAME = "t_optim_keras.py"
check = Checks(NAME)
BATCH, N, D, CLASSES = 32, 210, 12, 4

LAYERS = [{"dense": 16, "activation": "tanh"}, {"dense": 8, "activation": "relu"},
          {"dense": CLASSES, "activation": "softmax"}]

# name: (optimizer map, {layer index: kernel_regularizer}, epochs)
CASES = {
    "sgd": ({"name": "sgd", "lr": 0.1}, {}, 1),
    "sgd_momentum": ({"name": "sgd", "lr": 0.05, "momentum": 0.9}, {}, 1),
    "sgd_nesterov": ({"name": "sgd", "lr": 0.05, "momentum": 0.8, "nesterov": True}, {}, 1),
    "adam": ({"name": "adam", "lr": 0.01}, {}, 1),
    "adam_keys": ({"name": "adam", "lr": 0.02, "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-3}, {}, 1),
    "adamw": ({"name": "adamw", "lr": 0.01, "weight_decay": 0.1}, {}, 1),
    "rmsprop": ({"name": "rmsprop", "lr": 0.005}, {}, 1),
    "rmsprop_momentum": ({"name": "rmsprop", "lr": 0.002, "rho": 0.8, "momentum": 0.5}, {}, 1),
    "rmsprop_centered": ({"name": "rmsprop", "lr": 0.002, "centered": True, "epsilon": 1e-4}, {}, 1),
    "adagrad": ({"name": "adagrad", "lr": 0.05, "initial_accumulator_value": 0.2}, {}, 1),
    "nadam": ({"name": "nadam", "lr": 0.01}, {}, 1),
    "nadam_keys": ({"name": "nadam", "lr": 0.01, "beta_1": 0.85, "beta_2": 0.95, "epsilon": 1e-4}, {}, 1),
    "sgd_clipnorm": ({"name": "sgd", "lr": 0.1, "clipnorm": 0.1}, {}, 1),
    "sgd_global_clipnorm": ({"name": "sgd", "lr": 0.1, "momentum": 0.9, "global_clipnorm": 0.3}, {}, 1),
    "adam_global_clipnorm": ({"name": "adam", "lr": 0.01, "global_clipnorm": 0.3}, {}, 1),
    "adam_clipvalue": ({"name": "adam", "lr": 0.01, "clipvalue": 0.02}, {}, 1),
    "rmsprop_clipnorm": ({"name": "rmsprop", "lr": 0.003, "clipnorm": 0.05}, {}, 1),
    "sgd_l2_l1": ({"name": "sgd", "lr": 0.1, "momentum": 0.9}, {0: {"l2": 0.01}, 1: {"l1": 0.003}}, 1),
    "adam_l1l2_clipnorm": ({"name": "adam", "lr": 0.01, "clipnorm": 0.2},
                           {0: {"l1": 0.001, "l2": 0.05}}, 1),
    "adagrad_shorthand": ({"name": "adagrad", "lr": 0.05}, {0: "l2", 2: "l1"}, 1),
    "cosine": ({"name": "adam", "lr": 0.01, "schedule": {"cosine_decay": {"decay_steps": 8, "alpha": 0.1}}},
               {}, 2),
    "cosine_warmup": ({"name": "sgd", "lr": 0.01, "momentum": 0.9, "schedule": {"cosine_decay": {
        "decay_steps": 6, "warmup_steps": 4, "warmup_target": 0.2}}}, {}, 2),
    "exponential": ({"name": "rmsprop", "lr": 0.004, "schedule": {"exponential_decay": {
        "decay_steps": 3, "decay_rate": 0.5}}}, {}, 2),
    "exponential_staircase": ({"name": "sgd", "lr": 0.2, "schedule": {"exponential_decay": {
        "decay_steps": 4, "decay_rate": 0.3, "staircase": True}}}, {}, 2),
    "piecewise": ({"name": "adam", "lr": 0.01, "schedule": {"piecewise_constant": {
        "boundaries": [3, 8], "values": [0.02, 0.005, 0.001]}}}, {}, 2),
}

HISTORY = ("loss", "accuracy", "val_loss", "val_accuracy")


def main():
    cohort = cohort_bin(NAME)
    if not cohort:
        return 1
    rng = np.random.default_rng(7)
    x = rng.standard_normal((N, D)).astype(np.float32)
    y = np.argmax(x[:, :CLASSES] + 0.3 * rng.standard_normal((N, CLASSES)), axis=1).astype(np.int64)
    model, ks = build(LAYERS, (D,))
    init = glorot_init(model, ks, LAYERS, seed=3)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", x)
        np.save(f"{tmp}/y.npy", y)
        write_safetensors(f"{tmp}/init.safetensors", init)
        models = []
        for name, (opt, regs, epochs) in CASES.items():
            lay = [dict(layer) for layer in LAYERS]
            for li, reg in regs.items():
                lay[li]["kernel_regularizer"] = reg
            models.append({"name": name, "optimizer": opt, "layers": lay, "epochs": epochs})
        plan = {"data": {"train": f"npy:{tmp}/x.npy,{tmp}/y.npy", "validation_split": 0.2},
                "defaults": {"batch_size": BATCH, "shuffle": False,
                             "init_from": f"{tmp}/init.safetensors"},
                "models": models}
        if not cohort_train(check, cohort, plan, tmp):
            return check.done()
        results = {m["name"]: m for m in json.load(open(f"{tmp}/out/results.json"))["models"]}
        for m in models:
            name = m["name"]
            want, hist, _ = keras_fit(m["layers"], init, x, y, opt=m["optimizer"], batch=BATCH,
                                      epochs=m["epochs"], validation_split=0.2)
            got = read_safetensors(f"{tmp}/out/models/{name}.safetensors")
            rel = compare_weights(check, name, got, want, init)
            rec = results[name]
            check(rec["status"] == "ok", f"{name}: status {rec['status']}")
            compare_history(check, name, rec["history"], hist, HISTORY)
            print(f"{NAME}: {name}: max relative weight difference {rel:.3g}")
    return check.done(f"{len(CASES)} optimizer settings")


if __name__ == "__main__":
    sys.exit(main())
