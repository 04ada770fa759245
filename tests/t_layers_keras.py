#!/usr/bin/env python3
# pyenv: test
"""Every layer of docs/plan.md against Keras 3's own layers (Conv2D, MaxPooling2D,
AveragePooling2D, GlobalAveragePooling2D, Flatten, BatchNormalization, Activation, Dense,
Dropout; on sequences Conv1D, MaxPooling1D, AveragePooling1D, GlobalAveragePooling1D,
GlobalMaxPooling1D), built by tests/kerasref.py from the plan's layer list.

gelu is Keras's exact form (approximate=False), silu also as swish.

Small images (9 x 8 x 2, channels last as in Keras), several convnets and MLPs from the same
initial weights (init_from; kernels in torch's layouts, moved into Keras's [kh, kw, in, out] and
a dense layer's columns after a flatten from torch's (C, H, W) order into Keras's (H, W, C)),
one unshuffled epoch of batch 32 with a short last batch, validation split 0.2, Adam, in cohort
and in Keras's fit(). Checked: every weight and batch norm moving statistic within
2e-5 + 1e-4 |Keras|, the history's loss, accuracy, val_loss and val_accuracy to 1e-4 relative,
and Keras's predict() on cohort's trained weights against `cohort predict` to 1e-5.

Dropout draws its own masks (cohort's generator is not Keras's), so its model is compared in
inference only: the weights cohort trained, loaded into Keras, predict what cohort predicts.

Runs in scripts/pyenv's test environment (the "# pyenv: test" line above; CMakeLists.txt)."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kerasref import (Checks, adam_plan, check_fit, check_predict, cohort_bin,  # noqa: E402
                      cohort_predict, cohort_train, init_models, np, read_safetensors)

NAME = "t_layers_keras.py"
check = Checks(NAME)
H, W, C, CLASSES, N, BATCH = 9, 8, 2, 3, 150, 32
BN = {"batch_normalization": {"momentum": 0.9, "epsilon": 1e-3}}
SOFTMAX = {"dense": CLASSES, "activation": "softmax"}

MODELS = {
    "conv_valid_pool_flatten": [
        {"conv2d": 4, "kernel_size": 3, "activation": "relu"},
        {"max_pooling2d": 2},
        "flatten", SOFTMAX],
    "conv_same_stride_bn": [
        {"conv2d": 4, "kernel_size": 3, "strides": 2, "padding": "same", "use_bias": False},
        BN, {"activation": "relu"},
        "global_average_pooling2d", SOFTMAX],
    "conv_rect_avgpool_same": [
        {"conv2d": 3, "kernel_size": [3, 2], "strides": [1, 2], "activation": "tanh"},
        {"average_pooling2d": 3, "strides": 1, "padding": "same"},
        {"conv2d": 4, "kernel_size": 2, "padding": "same", "activation": "sigmoid"},
        {"max_pooling2d": 3, "strides": 2, "padding": "same"},
        "flatten", {"dense": 6, "activation": "relu"}, SOFTMAX],
    "conv_bn_flat_bn": [
        {"conv2d": 3, "kernel_size": 3, "strides": 3, "activation": "relu"},
        "flatten", BN,
        {"dense": 9, "activation": "relu", "use_bias": False},
        {"batch_normalization": {}}, {"activation": "tanh"},
        SOFTMAX],
    "pool_first_avg": [
        {"average_pooling2d": [2, 3]},
        {"conv2d": 5, "kernel_size": 2, "activation": "relu"},
        "global_average_pooling2d", {"dense": CLASSES}, {"activation": "softmax"}],
    "dense_on_image": [
        {"dense": 7, "activation": "sigmoid"}, {"dense": 5, "activation": "linear"},
        {"activation": "relu"}, SOFTMAX],
    # Keras's exact gelu (approximate=False) and silu, also spelled swish.
    "gelu_silu": [
        {"conv2d": 4, "kernel_size": 3, "activation": "gelu"}, {"max_pooling2d": 2},
        "flatten", {"dense": 6, "activation": "swish"}, {"activation": "gelu"},
        {"dense": 5}, {"activation": "silu"}, SOFTMAX],
    # layer_normalization over an image's channels, and over a flattened image's features
    # (its weight file in torch's (C, H, W) order).
    "layer_norm": [
        {"conv2d": 4, "kernel_size": 3, "activation": "relu"}, "layer_normalization",
        {"max_pooling2d": 2}, "flatten", {"layer_normalization": {"epsilon": 0.01}},
        {"dense": 5, "activation": "tanh"}, SOFTMAX],
}
# On sequences [T, C] (T_SEQ x C): Conv1D (causal and same with dilations, strided without a
# bias), the 1-D poolings, a flatten of a sequence.
T_SEQ = 12
SEQ_MODELS = {
    "conv1d_causal_dilated_pools": [
        {"conv1d": 4, "kernel_size": 3, "padding": "causal", "dilation_rate": 2,
         "activation": "relu"},
        {"conv1d": 5, "kernel_size": 2, "padding": "same", "dilation_rate": 3,
         "activation": "tanh"},
        {"max_pooling1d": 2}, "global_average_pooling1d", SOFTMAX],
    "conv1d_stride_avgpool_gmp": [
        {"conv1d": 4, "kernel_size": 3, "strides": 2, "use_bias": False},
        {"average_pooling1d": 3, "strides": 1, "padding": "same"},
        "global_max_pooling1d", SOFTMAX],
    "conv1d_same_even_flatten": [
        {"conv1d": 3, "kernel_size": 4, "padding": "same", "activation": "sigmoid"},
        {"max_pooling1d": 3, "strides": 2, "padding": "same"},
        "flatten", SOFTMAX],
}
DROPOUT = {"dropout_inference": [
    {"conv2d": 4, "kernel_size": 3, "activation": "relu"}, {"max_pooling2d": 2},
    "flatten", {"dropout": 0.4}, SOFTMAX]}


def main():
    cohort = cohort_bin(NAME)
    if not cohort:
        return 1
    rng = np.random.default_rng(31)
    x = rng.standard_normal((N, H, W, C)).astype(np.float32)
    y = (np.argmax(np.stack([x[:, :4, :, 0].mean((1, 2)), x[:, 4:, :, 1].mean((1, 2)),
                             x[:, :, :3, :].mean((1, 2, 3))], axis=1)
                   + 0.2 * rng.standard_normal((N, 3)), axis=1)).astype(np.int64)
    everything = MODELS | DROPOUT
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", x)
        np.save(f"{tmp}/y.npy", y)
        inits, models = init_models(everything, (H, W, C), tmp, seed=40)
        if not cohort_train(check, cohort, adam_plan(f"npy:{tmp}/x.npy,{tmp}/y.npy", models, BATCH),
                            tmp):
            return check.done()
        results = {m["name"]: m for m in json.load(open(f"{tmp}/out/results.json"))["models"]}
        for name, layers in everything.items():
            got = read_safetensors(f"{tmp}/out/models/{name}.safetensors")
            if name in MODELS:
                check_fit(check, name, layers, got, inits[name], results[name], x, y, BATCH)
            else:
                check(results[name]["status"] == "ok", f"{name}: status {results[name]['status']}")
            mine = cohort_predict(check, cohort, f"{tmp}/out/models/{name}.safetensors",
                                  f"npy:{tmp}/x.npy,{tmp}/y.npy", f"{tmp}/pred_{name}.csv", CLASSES)
            check_predict(check, name, layers, (H, W, C), got, x, mine)
        sequences(cohort, tmp, rng)
    return check.done()


def sequences(cohort, tmp, rng):
    """SEQ_MODELS on sequences [n, T_SEQ, C], trained in cohort and in Keras as above."""
    xs = rng.standard_normal((N, T_SEQ, C)).astype(np.float32)
    ys = np.argmax(np.stack([xs[:, :4, 0].mean(1), xs[:, 4:8, 1].mean(1), xs[:, 8:, :].mean((1, 2))],
                            axis=1) + 0.2 * rng.standard_normal((N, 3)), axis=1).astype(np.int64)
    np.save(f"{tmp}/xs.npy", xs)
    np.save(f"{tmp}/ys.npy", ys)
    os.makedirs(f"{tmp}/seq", exist_ok=True)
    inits, models = init_models(SEQ_MODELS, (T_SEQ, C), tmp, seed=70)
    if not cohort_train(check, cohort, adam_plan(f"npy:{tmp}/xs.npy,{tmp}/ys.npy", models, BATCH),
                        f"{tmp}/seq"):
        return
    results = {m["name"]: m for m in json.load(open(f"{tmp}/seq/out/results.json"))["models"]}
    for name, layers in SEQ_MODELS.items():
        got = read_safetensors(f"{tmp}/seq/out/models/{name}.safetensors")
        check_fit(check, name, layers, got, inits[name], results[name], xs, ys, BATCH)
        mine = cohort_predict(check, cohort, f"{tmp}/seq/out/models/{name}.safetensors",
                              f"npy:{tmp}/xs.npy,{tmp}/ys.npy", f"{tmp}/pred_{name}.csv", CLASSES)
        check_predict(check, name, layers, (T_SEQ, C), got, xs, mine)


if __name__ == "__main__":
    sys.exit(main())
