#!/usr/bin/env python3
"""Parity of 1-D convolutional models with PyTorch, and weight files that load into torch.

Three models on sequences of 12 steps x 3 features (NPY [n, T, F], as Keras's Conv1D):
  A: conv1d causal, dilation 2 + relu (Keras's causal: (k - 1) * d zeros before the
     sequence), conv1d same, dilation 3 + tanh (an even span: 1 zero before, 2 after),
     max_pooling1d 2, global_average_pooling1d, dense softmax;
  B: conv1d valid, stride 2, no bias, average_pooling1d 3 stride 1 same (padding not
     counted), global_max_pooling1d, dense softmax;
  C: conv1d same with an even kernel + relu, flatten (the steps in order, each step's
     filters together), dense softmax.
From the same initial weights (init_from; torch.nn.Conv1d's layout [filters,
in_channels, kernel]), one unshuffled epoch with SGD-momentum and with Adam (Keras's
formula) must give the same weights in cohort (float32) and in a float64 torch
reference, to |cohort - torch| <= 2e-5 + 1e-4 |torch|.

Then cohort's weight files are loaded into the equivalent torch nn.Sequential
(ConstantPad1d, Conv1d, MaxPool1d, AvgPool1d, AdaptiveAvg/MaxPool1d, Linear), which must
predict what `cohort predict` prints, to 1e-5. Needs /usr/bin/python3 with numpy and
torch (else skipped, 77)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcheck import (OPTIMIZERS, Checks, cohort_bin, cohort_predict, need,  # noqa: E402
                      torch_fit, train_parity, weights_match)

NAME = "t_conv1d_torch.py"
np, torch, nn, F = need(NAME, "numpy", "torch", "torch.nn", "torch.nn.functional")
from st_numpy import read_safetensors  # noqa: E402

check = Checks(NAME)
T, C, CLASSES, N, BATCH = 12, 3, 3, 120, 32

MODELS = {
    "A": {
        "layers": [{"conv1d": 4, "kernel_size": 3, "padding": "causal", "dilation_rate": 2,
                    "activation": "relu"},
                   {"conv1d": 5, "kernel_size": 2, "padding": "same", "dilation_rate": 3,
                    "activation": "tanh"},
                   {"max_pooling1d": 2},
                   "global_average_pooling1d",
                   {"dense": CLASSES, "activation": "softmax"}],
        "shapes": {0: ("conv", 4, C, 3), 1: ("conv", 5, 4, 2), 4: ("dense", CLASSES, 5)},
    },
    "B": {
        "layers": [{"conv1d": 4, "kernel_size": 3, "strides": 2, "use_bias": False},
                   {"average_pooling1d": 3, "strides": 1, "padding": "same"},
                   "global_max_pooling1d",
                   {"dense": CLASSES, "activation": "softmax"}],
        "shapes": {0: ("conv_nobias", 4, C, 3), 3: ("dense", CLASSES, 4)},
    },
    "C": {
        "layers": [{"conv1d": 3, "kernel_size": 4, "padding": "same", "activation": "relu"},
                   "flatten",
                   {"dense": CLASSES, "activation": "softmax"}],
        "shapes": {0: ("conv", 3, C, 4), 2: ("dense", CLASSES, T * 3)},
    },
}


def init_weights(rng, shapes):
    w = {}
    for i, s in shapes.items():
        if s[0].startswith("conv"):
            _, f, c, k = s
            lim = np.sqrt(6 / (k * c + k * f))
            w[f"layers.{i}.weight"] = rng.uniform(-lim, lim, (f, c, k))
            if s[0] == "conv":
                w[f"layers.{i}.bias"] = rng.uniform(-0.1, 0.1, f)
        else:
            _, o, n = s
            lim = np.sqrt(6 / (o + n))
            w[f"layers.{i}.weight"] = rng.uniform(-lim, lim, (o, n))
            w[f"layers.{i}.bias"] = rng.uniform(-0.1, 0.1, o)
    return {k: v.astype(np.float32) for k, v in w.items()}


def forward(model, p, x):
    """A model's forward pass with torch functions, x [n, C, T]."""
    if model == "A":
        h = torch.relu(F.conv1d(F.pad(x, (4, 0)), p["layers.0.weight"], p["layers.0.bias"],
                                dilation=2))
        h = torch.tanh(F.conv1d(F.pad(h, (1, 2)), p["layers.1.weight"], p["layers.1.bias"],
                                dilation=3))
        h = F.max_pool1d(h, 2).mean(dim=2)
        return h @ p["layers.4.weight"].T + p["layers.4.bias"]
    if model == "B":
        h = F.conv1d(x, p["layers.0.weight"], None, stride=2)
        h = F.avg_pool1d(h, 3, stride=1, padding=1, count_include_pad=False)
        h = h.max(dim=2).values
        return h @ p["layers.3.weight"].T + p["layers.3.bias"]
    h = torch.relu(F.conv1d(F.pad(x, (1, 2)), p["layers.0.weight"], p["layers.0.bias"]))
    h = h.permute(0, 2, 1).reshape(h.shape[0], -1)  # the steps in order, as Keras's Flatten
    return h @ p["layers.2.weight"].T + p["layers.2.bias"]


def torch_train(model, init, x, y, opt):
    p = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in init.items()}
    X = torch.tensor(x.astype(np.float64)).permute(0, 2, 1).contiguous()  # [n, T, C] -> [n, C, T]
    Y = torch.tensor(y, dtype=torch.long)
    torch_fit(torch, list(p.values()),
              ((X[s:s + BATCH], Y[s:s + BATCH]) for s in range(0, len(x), BATCH)),
              lambda xb, yb: F.cross_entropy(forward(model, p, xb), yb), opt)
    return {k: v.detach().numpy() for k, v in p.items()}


def torch_module(model, w):
    """The equivalent nn.Sequential, loaded from a cohort weight file (docs/plan.md)."""
    def conv(i, f, c, k, **kw):
        bias = f"layers.{i}.bias" in w
        m = nn.Conv1d(c, f, k, bias=bias, **kw)
        m.weight.data = torch.tensor(w[f"layers.{i}.weight"].copy())
        if bias:
            m.bias.data = torch.tensor(w[f"layers.{i}.bias"].copy())
        return m

    def linear(i, o, n):
        m = nn.Linear(n, o)
        m.weight.data = torch.tensor(w[f"layers.{i}.weight"].copy())
        m.bias.data = torch.tensor(w[f"layers.{i}.bias"].copy())
        return m

    class StepsLast(nn.Module):  # [n, C, T] -> [n, T * C], Keras's Flatten of [T, C]
        def forward(self, h):
            return h.permute(0, 2, 1).flatten(1)

    if model == "A":
        seq = nn.Sequential(nn.ConstantPad1d((4, 0), 0.0), conv(0, 4, C, 3, dilation=2),
                            nn.ReLU(), nn.ConstantPad1d((1, 2), 0.0),
                            conv(1, 5, 4, 2, dilation=3), nn.Tanh(), nn.MaxPool1d(2),
                            nn.AdaptiveAvgPool1d(1), nn.Flatten(), linear(4, CLASSES, 5),
                            nn.Softmax(dim=1))
    elif model == "B":
        seq = nn.Sequential(conv(0, 4, C, 3, stride=2),
                            nn.AvgPool1d(3, stride=1, padding=1, count_include_pad=False),
                            nn.AdaptiveMaxPool1d(1), nn.Flatten(), linear(3, CLASSES, 4),
                            nn.Softmax(dim=1))
    else:
        seq = nn.Sequential(nn.ConstantPad1d((1, 2), 0.0), conv(0, 3, C, 4), nn.ReLU(),
                            StepsLast(), linear(2, CLASSES, T * 3), nn.Softmax(dim=1))
    return seq.eval()


def main():
    cohort = cohort_bin(NAME)
    if not cohort:
        return 1
    torch.set_num_threads(1)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((N, T, C)).astype(np.float32)
    score = np.stack([x[:, :4, 0].sum(1), x[:, 4:8, 1].sum(1), x[:, 8:, 2].sum(1)], axis=1)
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

                mine = cohort_predict(check, cohort, f"{tmp}/out/models/{name}.safetensors",
                                      f"npy:{tmp}/x.npy,{tmp}/y.npy", f"{tmp}/pred_{name}.csv",
                                      CLASSES)
                if mine is None:
                    continue
                with torch.no_grad():
                    theirs = torch_module(m, got)(torch.tensor(x).permute(0, 2, 1)).numpy()
                d = float(np.max(np.abs(mine - theirs)))
                check(mine.shape == theirs.shape and d <= 1e-5,
                      f"{name}: torch on cohort's weights predicts up to {d:.3g} apart")
                print(f"{NAME}: {name}: max |predict - torch| = {d:.3g}")
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
