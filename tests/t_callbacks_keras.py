#!/usr/bin/env python3
# pyenv: test
"""early_stopping and reduce_lr_on_plateau against Keras 3's own EarlyStopping and
ReduceLROnPlateau callbacks.

An MLP (10 inputs, dense 24 relu, dense 3 softmax) from the same initial weights, trained
unshuffled for up to 10 epochs (batch 32, validation split 0.25) in cohort and in Keras's fit()
with the callback of the same settings. Checked: the epoch training stopped after (the
history's length), every epoch's loss, accuracy, val_loss and val_accuracy to 1e-4 relative,
the learning rate of every epoch (cohort's lr column against the learning_rate Keras logs), and
the final weights (the restored best ones with restore_best_weights) within 2e-5 + 1e-4 |Keras|.
The settings are chosen so that each rule acts (a stop before the last epoch, a cut of the rate)
away from a tie that float rounding could tip either way.

Runs in scripts/pyenv's test environment (the "# pyenv: test" line above; CMakeLists.txt)."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kerasref import (Checks, build, cohort_bin, cohort_train, compare_history,  # noqa: E402
                      compare_weights, glorot_init, keras, keras_fit, np, read_safetensors,
                      write_safetensors)

NAME = "t_callbacks_keras.py"
check = Checks(NAME)
BATCH, N, D, EPOCHS, SPLIT = 32, 160, 10, 10, 0.25
LAYERS = [{"dense": 24, "activation": "relu"}, {"dense": 3, "activation": "softmax"}]
HISTORY = ("loss", "accuracy", "val_loss", "val_accuracy")

# name: (optimizer, early_stopping, reduce_lr_on_plateau)
CASES = {
    "es_default": ({"name": "adam", "lr": 0.05}, True, None),
    "es_patience": ({"name": "adam", "lr": 0.03}, {"monitor": "val_loss", "patience": 2,
                                                   "min_delta": 0.002}, None),
    "es_accuracy_restore": ({"name": "sgd", "lr": 0.3, "momentum": 0.9},
                            {"monitor": "val_accuracy", "patience": 2,
                             "restore_best_weights": True}, None),
    "es_loss_min_delta": ({"name": "adam", "lr": 0.01}, {"monitor": "loss", "min_delta": 0.05,
                                                         "restore_best_weights": True}, None),
    "plateau": ({"name": "adam", "lr": 0.05}, None, {"monitor": "val_loss", "factor": 0.5,
                                                     "patience": 1, "min_delta": 0.005}),
    "plateau_cooldown_min_lr": ({"name": "sgd", "lr": 0.4, "momentum": 0.5}, None,
                                {"monitor": "val_accuracy", "factor": 0.5, "patience": 1,
                                 "cooldown": 2, "min_lr": 0.06}),
    "plateau_and_stop": ({"name": "rmsprop", "lr": 0.02},
                         {"monitor": "val_loss", "patience": 3},
                         {"monitor": "val_loss", "factor": 0.2, "patience": 1}),
}


def keras_callbacks(es, rp):
    out = []
    if rp is not None:
        out.append(keras.callbacks.ReduceLROnPlateau(**rp))
    if es is not None:
        out.append(keras.callbacks.EarlyStopping(**({} if es is True else es)))
    return out


def main():
    cohort = cohort_bin(NAME)
    if not cohort:
        return 1
    rng = np.random.default_rng(51)
    x = rng.standard_normal((N, D)).astype(np.float32)
    y = np.argmax(x[:, :3] + 0.8 * rng.standard_normal((N, 3)), axis=1).astype(np.int64)
    model, ks = build(LAYERS, (D,))
    init = glorot_init(model, ks, LAYERS, seed=5)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", x)
        np.save(f"{tmp}/y.npy", y)
        write_safetensors(f"{tmp}/init.safetensors", init)
        models = []
        for name, (opt, es, rp) in CASES.items():
            m = {"name": name, "optimizer": opt, "layers": LAYERS}
            if es is not None:
                m["early_stopping"] = es
            if rp is not None:
                m["reduce_lr_on_plateau"] = rp
            models.append(m)
        plan = {"data": {"train": f"npy:{tmp}/x.npy,{tmp}/y.npy", "validation_split": SPLIT},
                "defaults": {"epochs": EPOCHS, "batch_size": BATCH, "shuffle": False,
                             "init_from": f"{tmp}/init.safetensors"},
                "models": models}
        if not cohort_train(check, cohort, plan, tmp):
            return check.done()
        results = {m["name"]: m for m in json.load(open(f"{tmp}/out/results.json"))["models"]}
        stopped = cut = 0
        for name, (opt, es, rp) in CASES.items():
            want, hist, _ = keras_fit(LAYERS, init, x, y, opt=opt, batch=BATCH, epochs=EPOCHS,
                                      validation_split=SPLIT, callbacks=keras_callbacks(es, rp))
            rec = results[name]
            got_h = rec["history"]
            n_k, n_c = len(hist["loss"]), len(got_h["loss"])
            check(n_c == n_k, f"{name}: cohort trained {n_c} epochs, Keras {n_k}")
            compare_history(check, name, got_h, hist, HISTORY)
            if rp is not None:
                compare_history(check, name, {"lr": got_h["lr"]}, {"lr": hist["learning_rate"]},
                                ("lr",), rtol=1e-6)
                cut += len(set(hist["learning_rate"])) > 1
            stopped += es is not None and n_k < EPOCHS
            got = read_safetensors(f"{tmp}/out/models/{name}.safetensors")
            rel = compare_weights(check, name, got, want, init)
            print(f"{NAME}: {name}: {n_c} epochs (Keras {n_k}), "
                  f"lr {got_h['lr'][-1]:.4g}, max relative weight difference {rel:.3g}")
        n_es = sum(es is not None for _, es, _ in CASES.values())
        n_rp = sum(rp is not None for _, _, rp in CASES.values())
        check(stopped == n_es, f"only {stopped} of the {n_es} early_stopping cases stopped early")
        check(cut == n_rp, f"only {cut} of the {n_rp} plateau cases cut the rate")
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
