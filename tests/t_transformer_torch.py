#!/usr/bin/env python3
"""Parity with PyTorch for a Transformer encoder block (issue 37): two
residual blocks, [layer_normalization, multi_head_attention] and
[layer_normalization, dense 4E gelu, dense E], on real-valued sequences
[T, E], then a flatten and a softmax head. The weights file (layers.i and
layers.i.j names: LayerNorm's weight and bias, the attention's q_proj,
k_proj, v_proj and out_proj) loads strictly into torch modules built as
docs/plan.md shows; from the same initial weights, one unshuffled epoch
with SGD-momentum and with Adam (Keras's formula) ends with the same weights
in cohort and in a float64 torch reference, and the trained file in torch
predicts what `cohort predict` prints (the key projection's bias, whose
gradient is 0 but for rounding, is only bounded). Two shapes: key_dim = E / heads
(the case torch.nn.MultiheadAttention also covers) and key_dim = E
(Keras's text-classification example).

Tolerance: |cohort - torch| <= 2e-5 + 1e-4 * |torch| for every weight.
Run by ctest; needs /usr/bin/python3 with numpy and torch (else: skipped, 77)."""
import csv
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcheck import Checks, cohort_bin, cohort_train, need, weights_match  # noqa: E402

NAME = "t_transformer_torch.py"
np, torch = need(NAME, "numpy", "torch")
from st_numpy import read_safetensors, write_safetensors  # noqa: E402

nn = torch.nn
F = nn.functional
check = Checks(NAME)
D64 = torch.float64


class Dense(nn.Linear):
    """cohort's dense on a sequence: Linear on the last axis, then its activation."""

    def __init__(self, n_in, units, act=None):
        super().__init__(n_in, units, dtype=D64)
        self.act = act

    def forward(self, x):
        y = super().forward(x)
        return self.act(y) if self.act else y


class SelfAttention(nn.Module):
    """Keras's MultiHeadAttention()(x, x): heads x key_dim projections,
    softmax(q k^T / sqrt(key_dim)) over the keys, the heads' values joined and
    projected back to the width."""

    def __init__(self, width, heads, key_dim):
        super().__init__()
        self.h, self.dk = heads, key_dim
        self.q_proj = nn.Linear(width, heads * key_dim, dtype=D64)
        self.k_proj = nn.Linear(width, heads * key_dim, dtype=D64)
        self.v_proj = nn.Linear(width, heads * key_dim, dtype=D64)
        self.out_proj = nn.Linear(heads * key_dim, width, dtype=D64)

    def forward(self, x):
        B, T, _ = x.shape
        split = lambda t: t.view(B, T, self.h, self.dk).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dk), dim=-1)
        return self.out_proj((a @ v).transpose(1, 2).reshape(B, T, self.h * self.dk))


class Residual(nn.Sequential):
    def forward(self, x):
        return x + super().forward(x)


class Net(nn.Module):
    def __init__(self, T, E, heads, key_dim, classes):
        super().__init__()
        self.layers = nn.Sequential(
            Residual(nn.LayerNorm(E, eps=1e-3, dtype=D64), SelfAttention(E, heads, key_dim)),
            Residual(nn.LayerNorm(E, eps=1e-3, dtype=D64), Dense(E, 4 * E, F.gelu), Dense(4 * E, E)),
            nn.Flatten(),
            Dense(T * E, classes))

    def forward(self, x):
        return self.layers(x)


def plan_layers(E, heads, key_dim, classes):
    return [{"residual": ["layer_normalization",
                          {"multi_head_attention": {"num_heads": heads, "key_dim": key_dim}}]},
            {"residual": ["layer_normalization", {"dense": 4 * E, "activation": "gelu"},
                          {"dense": E}]},
            "flatten",
            {"dense": classes, "activation": "softmax"}]


def load(net, tensors):
    state = {k[len("layers."):]: torch.tensor(v, dtype=D64) for k, v in tensors.items()}
    net.layers.load_state_dict(state, strict=True)


def keras_adam_step(params, state, t, lr, b1=0.9, b2=0.999, eps=1e-7):
    alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    for p, (m, v) in zip(params, state):
        m += (p.grad - m) * (1 - b1)
        v += (p.grad * p.grad - v) * (1 - b2)
        p -= alpha * m / (torch.sqrt(v) + eps)


def torch_train(shape, init, x, y, opt, batch):
    net = Net(*shape)
    load(net, init)
    params = list(net.parameters())
    if opt["name"] == "sgd":
        o = torch.optim.SGD(params, lr=opt["lr"], momentum=opt["momentum"])
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    X, Y = torch.tensor(x, dtype=D64), torch.tensor(y, dtype=torch.long)
    t = 0
    for s in range(0, len(x), batch):
        loss = F.cross_entropy(net(X[s:s + batch]), Y[s:s + batch])
        for p in params:
            p.grad = None
        loss.backward()
        t += 1
        if opt["name"] == "sgd":
            o.step()
        else:
            with torch.no_grad():
                keras_adam_step(params, state, t, opt["lr"])
    return {f"layers.{k}": v.detach().numpy() for k, v in net.layers.state_dict().items()}


def run_case(cohort, label, T, E, heads, key_dim):
    classes, n, batch = 3, 120, 16
    rng = np.random.default_rng(11)
    x = rng.standard_normal((n, T, E)).astype(np.float32)
    y = np.argmax(x[:, :, :classes].sum(1) + 0.3 * rng.standard_normal((n, classes)), 1).astype(np.int64)
    shape = (T, E, heads, key_dim, classes)
    init = {}
    for k, v in Net(*shape).layers.state_dict().items():
        if k.endswith("0.weight") and v.dim() == 1:  # a LayerNorm's gamma
            init[f"layers.{k}"] = (1 + rng.uniform(-0.2, 0.2, tuple(v.shape))).astype(np.float32)
        else:
            lim = 0.5 if k.endswith("weight") else 0.1
            init[f"layers.{k}"] = rng.uniform(-lim, lim, tuple(v.shape)).astype(np.float32)
    optimizers = {"sgd_momentum": {"name": "sgd", "lr": 0.02, "momentum": 0.9},
                  "adam": {"name": "adam", "lr": 0.003}}
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", x)
        np.save(f"{tmp}/y.npy", y)
        write_safetensors(f"{tmp}/init.safetensors", init)
        plan = {"data": {"train": f"npy:{tmp}/x.npy,{tmp}/y.npy"},
                "defaults": {"epochs": 1, "batch_size": batch, "shuffle": False,
                             "init_from": f"{tmp}/init.safetensors",
                             "layers": plan_layers(E, heads, key_dim, classes)},
                "models": [{"name": k, "optimizer": v} for k, v in optimizers.items()]}
        if not cohort_train(check, cohort, plan, tmp, label):
            return
        for name, opt in optimizers.items():
            want = torch_train(shape, init, x, y, opt, batch)
            got = read_safetensors(f"{tmp}/out/models/{name}.safetensors")
            check(sorted(got) == sorted(want), f"{label} {name}: cohort's names {sorted(got)}")
            # The key projection's bias adds q . b_k to every score of a query, which the
            # softmax over the keys ignores: its gradient is 0, but for float32's rounding,
            # which Adam's normalization magnifies. It may move no more than its steps allow.
            kb = "layers.0.1.k_proj.bias"
            moved = float(abs(got.get(kb, init[kb]) - init[kb]).max())
            check(moved <= opt["lr"] * (n // batch + 1), f"{label} {name}: {kb} moved {moved:.3g}")
            want.pop(kb)
            worst, rel = weights_match(check, f"{label} {name}", got, want, init)
            print(f"{NAME}: {label} {name}: max |cohort - torch| = {worst:.3g} (relative {rel:.3g})")
        r = subprocess.run([cohort, "predict", f"{tmp}/out/models/adam.safetensors", "--data",
                            f"npy:{tmp}/x.npy,{tmp}/y.npy", "--out", f"{tmp}/pred.csv"],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"{label}: cohort predict: {r.stderr}")
        if r.returncode == 0:
            rows = list(csv.DictReader(open(f"{tmp}/pred.csv")))
            printed = np.array([[float(row[f"p{c}"]) for c in range(classes)] for row in rows])
            net = Net(*shape)
            load(net, read_safetensors(f"{tmp}/out/models/adam.safetensors"))
            with torch.no_grad():
                probs = net(torch.tensor(x, dtype=D64)).softmax(1).numpy()
            err = float(abs(probs - printed).max())
            check(err < 2e-6, f"{label}: predict: torch's probabilities differ by {err:.3g}")


def main():
    cohort = cohort_bin(NAME)
    if not cohort:
        return 1
    torch.set_num_threads(1)
    run_case(cohort, "T6 E8 heads2 key_dim4", 6, 8, 2, 4)
    run_case(cohort, "T5 E6 heads2 key_dim6", 5, 6, 2, 6)
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
