#!/usr/bin/env python3
"""Parity of convolutional models with PyTorch, and weight files that load into torch.

Four CNNs on 10 x 9 x 2 images (NPY [n, H, W, C], channels last as Keras):
  A: conv2d valid + relu, batch_normalization, max_pooling2d, conv2d same,
     average_pooling2d same (padding not counted), flatten, dense softmax;
  B: conv2d same with stride 2 (TensorFlow pads the odd row after the image:
     0 above, 1 below) without a bias, batch_normalization, relu,
     global_average_pooling2d, dense softmax;
  C: conv2d valid + relu straight into max_pooling2d 2 (an odd last column),
     conv2d same without a bias, batch_normalization, relu, max_pooling2d 3
     with stride 2 and `same` padding (overlapping windows), dense softmax:
     the relus whose derivative the max pools apply (maxpool_bwd_relu);
  D: conv2d valid + relu with stride 3 (3 x 3 x 3), flatten,
     batch_normalization of the 27 flat values (BatchNorm1d), dense 27 relu,
     dense softmax: the batch norm's tensors and the first dense layer's
     columns are in torch's (C, H, W) order of the flattened image, the
     second dense layer's (as many units as inputs) in the first's own order.
From the same initial weights (init_from, moving statistics included), one
unshuffled epoch with SGD-momentum and with Adam (Keras's formula) must give
the same weights and moving statistics in cohort and in torch, to
|cohort - torch| <= 2e-5 + 1e-4 |torch|. Batch normalization is Keras's:
batch statistics in training, moving = momentum * moving + (1 - momentum) *
batch statistic with the biased variance (torch's own running_var update
uses the unbiased one, so it is written out here).

Then cohort's weight files are loaded into the equivalent torch
nn.Sequential (Conv2d, BatchNorm2d, ReLU, MaxPool2d, AvgPool2d, Flatten,
Linear) in eval mode, which must predict what `cohort predict` prints, to
1e-5. Needs /usr/bin/python3 with numpy and torch (else skipped, 77)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcheck import (OPTIMIZERS, Checks, cohort_bin, cohort_predict, need,  # noqa: E402
                      torch_fit, train_parity, weights_match)

NAME = "t_cnn_torch.py"
np, torch, nn, F = need(NAME, "numpy", "torch", "torch.nn", "torch.nn.functional")
from st_numpy import read_safetensors  # noqa: E402

check = Checks(NAME)
H, W, C, CLASSES, N, BATCH = 10, 9, 2, 3, 120, 32
MOMENTUM, EPS = 0.9, 1e-3


# Each model: its plan layers and the torch modules of the same network (in
# eval mode: the loading check). "pad" is F.pad's (left, right, top, bottom).
MODELS = {
    "A": {
        "layers": [{"conv2d": 4, "kernel_size": 3, "activation": "relu"},
                   {"batch_normalization": {"momentum": MOMENTUM, "epsilon": EPS}},
                   {"max_pooling2d": 2},
                   {"conv2d": 5, "kernel_size": 3, "padding": "same", "activation": "tanh"},
                   {"average_pooling2d": 3, "strides": 1, "padding": "same"},
                   "flatten",
                   {"dense": CLASSES, "activation": "softmax"}],
        "shapes": {0: ("conv", 4, C, 3), 1: ("bn", 4), 3: ("conv", 5, 4, 3), 6: ("dense", CLASSES, 5 * 4 * 3)},
    },
    "B": {
        "layers": [{"conv2d": 4, "kernel_size": 3, "strides": 2, "padding": "same",
                    "use_bias": False},
                   {"batch_normalization": {"momentum": MOMENTUM, "epsilon": EPS}},
                   {"activation": "relu"},
                   "global_average_pooling2d",
                   {"dense": CLASSES, "activation": "softmax"}],
        "shapes": {0: ("conv_nobias", 4, C, 3), 1: ("bn", 4), 4: ("dense", CLASSES, 4)},
    },
    "C": {
        "layers": [{"conv2d": 4, "kernel_size": 3, "activation": "relu"},
                   {"max_pooling2d": 2},
                   {"conv2d": 5, "kernel_size": 3, "padding": "same", "use_bias": False},
                   {"batch_normalization": {"momentum": MOMENTUM, "epsilon": EPS}},
                   {"activation": "relu"},
                   {"max_pooling2d": 3, "strides": 2, "padding": "same"},
                   "flatten",
                   {"dense": CLASSES, "activation": "softmax"}],
        "shapes": {0: ("conv", 4, C, 3), 2: ("conv_nobias", 5, 4, 3), 3: ("bn", 5),
                   7: ("dense", CLASSES, 5 * 2 * 2)},
    },
    "D": {
        "layers": [{"conv2d": 3, "kernel_size": 3, "strides": 3, "activation": "relu"},
                   "flatten",
                   {"batch_normalization": {"momentum": MOMENTUM, "epsilon": EPS}},
                   {"dense": 27, "activation": "relu"},
                   {"dense": CLASSES, "activation": "softmax"}],
        "shapes": {0: ("conv", 3, C, 3), 2: ("bn", 27), 3: ("dense", 27, 27),
                   4: ("dense", CLASSES, 27)},
    },
}

# TensorFlow's `same` max pool of 3 by stride 2 over the 4 x 3 maps of C: out 2 x 2,
# padding (left 1, right 1, top 0, bottom 1) of -inf, which no maximum takes.
C_POOL_PAD = (1, 1, 0, 1)


def init_weights(rng, shapes):
    w = {}
    for i, s in shapes.items():
        if s[0].startswith("conv"):
            _, f, c, k = s
            lim = np.sqrt(6 / (k * k * c + k * k * f))
            w[f"layers.{i}.weight"] = rng.uniform(-lim, lim, (f, c, k, k))
            if s[0] == "conv":
                w[f"layers.{i}.bias"] = rng.uniform(-0.1, 0.1, f)
        elif s[0] == "bn":
            f = s[1]
            w[f"layers.{i}.weight"] = rng.uniform(0.8, 1.2, f)
            w[f"layers.{i}.bias"] = rng.uniform(-0.1, 0.1, f)
            w[f"layers.{i}.running_mean"] = rng.uniform(-0.2, 0.2, f)
            w[f"layers.{i}.running_var"] = rng.uniform(0.5, 1.5, f)
        else:
            _, o, n = s
            lim = np.sqrt(6 / (o + n))
            w[f"layers.{i}.weight"] = rng.uniform(-lim, lim, (o, n))
            w[f"layers.{i}.bias"] = rng.uniform(-0.1, 0.1, o)
    return {k: v.astype(np.float32) for k, v in w.items()}


def bn_train(h, p, i):
    """Keras's BatchNormalization in training, moving statistics updated in place."""
    dims, at = ((0, 2, 3), (None, slice(None), None, None)) if h.dim() == 4 else ((0,), (None,))
    mean = h.mean(dim=dims)
    var = h.var(dim=dims, unbiased=False)
    with torch.no_grad():
        p[f"layers.{i}.running_mean"].mul_(MOMENTUM).add_((1 - MOMENTUM) * mean)
        p[f"layers.{i}.running_var"].mul_(MOMENTUM).add_((1 - MOMENTUM) * var)
    xhat = (h - mean[at]) / torch.sqrt(var[at] + EPS)
    return xhat * p[f"layers.{i}.weight"][at] + p[f"layers.{i}.bias"][at]


def forward_train(model, p, x):
    """The training forward pass of a model, written with torch functions."""
    if model == "A":
        h = torch.relu(F.conv2d(x, p["layers.0.weight"], p["layers.0.bias"]))
        h = bn_train(h, p, 1)
        h = F.max_pool2d(h, 2)
        h = torch.tanh(F.conv2d(h, p["layers.3.weight"], p["layers.3.bias"], padding=1))
        h = F.avg_pool2d(h, 3, stride=1, padding=1, count_include_pad=False)
        h = h.reshape(h.shape[0], -1)  # torch's (C, H, W) flatten
        return h @ p["layers.6.weight"].T + p["layers.6.bias"]
    if model == "C":
        h = F.max_pool2d(torch.relu(F.conv2d(x, p["layers.0.weight"], p["layers.0.bias"])), 2)
        h = F.conv2d(h, p["layers.2.weight"], None, padding=1)
        h = torch.relu(bn_train(h, p, 3))
        h = F.max_pool2d(F.pad(h, C_POOL_PAD, value=float("-inf")), 3, stride=2)
        h = h.reshape(h.shape[0], -1)
        return h @ p["layers.7.weight"].T + p["layers.7.bias"]
    if model == "D":
        h = torch.relu(F.conv2d(x, p["layers.0.weight"], p["layers.0.bias"], stride=3))
        h = bn_train(h.reshape(h.shape[0], -1), p, 2)
        h = torch.relu(h @ p["layers.3.weight"].T + p["layers.3.bias"])
        return h @ p["layers.4.weight"].T + p["layers.4.bias"]
    h = F.conv2d(F.pad(x, (1, 1, 0, 1)), p["layers.0.weight"], None, stride=2)
    h = torch.relu(bn_train(h, p, 1))
    h = h.mean(dim=(2, 3))
    return h @ p["layers.4.weight"].T + p["layers.4.bias"]


def torch_train(model, init, x, y, opt):
    p = {k: torch.tensor(v.copy()) for k, v in init.items()}
    trained = [k for k in p if "running" not in k]
    for k in trained:
        p[k].requires_grad_(True)
    X = torch.tensor(x).permute(0, 3, 1, 2).contiguous()  # NHWC -> NCHW
    Y = torch.tensor(y, dtype=torch.long)
    torch_fit(torch, [p[k] for k in trained],
              ((X[s:s + BATCH], Y[s:s + BATCH]) for s in range(0, len(x), BATCH)),
              lambda xb, yb: F.cross_entropy(forward_train(model, p, xb), yb), opt)
    return {k: v.detach().numpy() for k, v in p.items()}


def torch_module(model, w):
    """The equivalent nn.Sequential, loaded from a cohort weight file, in eval mode."""
    def conv(i, f, c, pad=0, stride=1):
        bias = f"layers.{i}.bias" in w
        m = nn.Conv2d(c, f, 3, stride=stride, padding=pad, bias=bias)
        m.weight.data = torch.tensor(w[f"layers.{i}.weight"].copy())
        if bias:
            m.bias.data = torch.tensor(w[f"layers.{i}.bias"].copy())
        return m

    def bn(i, f, flat=False):
        m = (nn.BatchNorm1d if flat else nn.BatchNorm2d)(f, eps=EPS, momentum=1 - MOMENTUM)
        m.load_state_dict({k: torch.tensor(w[f"layers.{i}.{k}"].copy()) for k in
                           ("weight", "bias", "running_mean", "running_var")} |
                          {"num_batches_tracked": torch.tensor(0)})
        return m

    def linear(i, o, n):
        m = nn.Linear(n, o)
        m.weight.data = torch.tensor(w[f"layers.{i}.weight"].copy())
        m.bias.data = torch.tensor(w[f"layers.{i}.bias"].copy())
        return m

    if model == "A":
        seq = nn.Sequential(conv(0, 4, C), nn.ReLU(), bn(1, 4), nn.MaxPool2d(2),
                            conv(3, 5, 4, pad=1), nn.Tanh(),
                            nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False),
                            nn.Flatten(), linear(6, CLASSES, 60), nn.Softmax(dim=1))
    elif model == "C":
        seq = nn.Sequential(conv(0, 4, C), nn.ReLU(), nn.MaxPool2d(2), conv(2, 5, 4, pad=1),
                            bn(3, 5), nn.ReLU(), nn.ConstantPad2d(C_POOL_PAD, float("-inf")),
                            nn.MaxPool2d(3, stride=2), nn.Flatten(),
                            linear(7, CLASSES, 20), nn.Softmax(dim=1))
    elif model == "D":
        seq = nn.Sequential(conv(0, 3, C, stride=3), nn.ReLU(), nn.Flatten(),
                            bn(2, 27, flat=True), linear(3, 27, 27), nn.ReLU(),
                            linear(4, CLASSES, 27), nn.Softmax(dim=1))
    else:
        seq = nn.Sequential(nn.ZeroPad2d((1, 1, 0, 1)), conv(0, 4, C, stride=2), bn(1, 4),
                            nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                            linear(4, CLASSES, 4), nn.Softmax(dim=1))
    return seq.eval()


def main():
    cohort = cohort_bin(NAME)
    if not cohort:
        return 1
    torch.set_num_threads(1)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((N, H, W, C)).astype(np.float32)
    score = x[:, :, :, 0].reshape(N, -1)[:, :CLASSES * 4].reshape(N, CLASSES, 4).sum(axis=2)
    y = np.argmax(score + 0.5 * rng.standard_normal((N, CLASSES)), axis=1).astype(np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", x)
        np.save(f"{tmp}/y.npy", y)
        inits = {m: init_weights(rng, spec["shapes"]) for m, spec in MODELS.items()}
        if not train_parity(check, cohort, tmp, MODELS, inits, BATCH):
            return check.done()
        for m in MODELS:
            for o, opt in OPTIMIZERS.items():
                name = f"{m}_{o}"
                want = torch_train(m, inits[m], x, y, opt)
                got = read_safetensors(f"{tmp}/out/models/{name}.safetensors")
                check(sorted(got) == sorted(want), f"{name}: tensors {sorted(got)} != {sorted(want)}")
                worst, _ = weights_match(check, name, got, want, inits[m])
                print(f"{NAME}: {name}: max |cohort - torch| = {worst:.3g}")

                # The file loads into torch and predicts what cohort predicts.
                mine = cohort_predict(check, cohort, f"{tmp}/out/models/{name}.safetensors",
                                      f"npy:{tmp}/x.npy,{tmp}/y.npy", f"{tmp}/pred_{name}.csv",
                                      CLASSES)
                if mine is None:
                    continue
                with torch.no_grad():
                    theirs = torch_module(m, got)(torch.tensor(x).permute(0, 3, 1, 2)).numpy()
                d = float(np.max(np.abs(mine - theirs)))
                check(mine.shape == theirs.shape and d <= 1e-5,
                      f"{name}: torch on cohort's weights predicts up to {d:.3g} apart")
                print(f"{NAME}: {name}: max |predict - torch| = {d:.3g}")

                # The same images as a flat CSV: eval shapes them from the file's
                # input_shape and gives what it gives on the NPY images.
                if name == "A_sgd":
                    with open(f"{tmp}/flat.csv", "w") as f:
                        for i in range(N):
                            f.write(",".join(f"{v:.9g}" for v in x[i].ravel()) + f",{y[i]}\n")
                    out = []
                    for data in (f"npy:{tmp}/x.npy,{tmp}/y.npy", f"csv:{tmp}/flat.csv"):
                        r = subprocess.run([cohort, "eval", f"{tmp}/out/models/{name}.safetensors",
                                            "--data", data, "--json"], capture_output=True, text=True)
                        check(r.returncode == 0, f"eval on {data}: exit {r.returncode}: {r.stderr}")
                        out.append(json.loads(r.stdout) if r.returncode == 0 else {})
                    check(len(out) == 2 and out[0].get("loss") == out[1].get("loss") and
                          out[0].get("accuracy") == out[1].get("accuracy"),
                          f"eval on the NPY images and on the same flat CSV differ: {out}")
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
