#!/usr/bin/env python3
"""Parity with PyTorch for issue 37's layers of h-attn (layer_normalization, the gelu and silu
activations; multi_head_attention where it is built): from the same initial weights
(init_from), one unshuffled epoch of a small model on sequences [n, T, F], with SGD with
momentum and with Adam (Keras's formula, written out), must give the same weights in cohort
and in a float64 torch reference (torch.nn.functional.layer_norm, F.gelu, F.silu), with a
partial last batch.

Tolerance: |cohort - torch| <= 2e-5 + 1e-4 |torch| for every weight (refcheck.weights_match).
Run by ctest; needs /usr/bin/python3 with numpy and torch (else: skipped, 77)."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcheck import Checks, cohort_bin, cohort_train, need, weights_match  # noqa: E402

NAME = "t_parity_seq_torch.py"
np, torch = need(NAME, "numpy", "torch")
from st_numpy import read_safetensors, write_safetensors  # noqa: E402

check = Checks(NAME)
F = torch.nn.functional
N, T, FEAT, CLASSES, BATCH = 100, 6, 5, 4, 32

OPTIMIZERS = {
    "sgd_momentum": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
    "adam": {"name": "adam", "lr": 0.01},
}


def keras_adam_step(params, state, t, lr, b1=0.9, b2=0.999, eps=1e-7):
    alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    for p, (m, v) in zip(params, state):
        g = p.grad
        m += (g - m) * (1 - b1)
        v += (g * g - v) * (1 - b2)
        p -= alpha * m / (torch.sqrt(v) + eps)


def act(h, a):
    return {"linear": lambda z: z, "relu": torch.relu, "tanh": torch.tanh, "gelu": F.gelu,
            "silu": F.silu}[a](h)


def forward(layers, p, h):
    """The plan's layers in float64 torch, p the tensors by name."""
    for i, la in enumerate(layers):
        if la == "flatten":
            h = h.reshape(h.shape[0], -1)
        elif la == "layer_normalization" or "layer_normalization" in la:
            eps = 1e-3 if isinstance(la, str) else la["layer_normalization"]["epsilon"]
            h = F.layer_norm(h, h.shape[-1:], p[f"layers.{i}.weight"], p[f"layers.{i}.bias"],
                             eps)
        elif "multi_head_attention" in la:
            h = attention(la["multi_head_attention"], p, i, h)
        elif "dense" in la:
            h = h @ p[f"layers.{i}.weight"].T + p[f"layers.{i}.bias"]
            if la.get("activation", "linear") != "softmax":
                h = act(h, la.get("activation", "linear"))
        elif "activation" in la:
            h = act(h, la["activation"])
        else:
            raise ValueError(f"no reference for {la}")
    return h


def attention(a, p, i, x):
    """Keras's MultiHeadAttention()(x, x) from four Linear layers' tensors (torch's layout)."""
    H, dk = a["num_heads"], a["key_dim"]
    dv = a.get("value_dim", dk)
    n, T, _ = x.shape

    def proj(name, d):
        z = x @ p[f"layers.{i}.{name}.weight"].T + p[f"layers.{i}.{name}.bias"]
        return z.reshape(n, T, H, d).permute(0, 2, 1, 3)          # [n, H, T, d]
    q, k, v = proj("q_proj", dk), proj("k_proj", dk), proj("v_proj", dv)
    s = q @ k.transpose(-1, -2) / np.sqrt(dk)
    if a.get("causal"):
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    c = torch.softmax(s, dim=-1) @ v                               # [n, H, T, dv]
    c = c.permute(0, 2, 1, 3).reshape(n, T, H * dv)
    return c @ p[f"layers.{i}.out_proj.weight"].T + p[f"layers.{i}.out_proj.bias"]


def torch_train(init, x, y, layers, opt):
    p = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in init.items()}
    params = list(p.values())
    if opt["name"] == "sgd":
        o = torch.optim.SGD(params, lr=opt["lr"], momentum=opt["momentum"])
    state = [(torch.zeros_like(q), torch.zeros_like(q)) for q in params]
    X, Y = torch.tensor(x.astype(np.float64)), torch.tensor(y, dtype=torch.long)
    t = 0
    for s in range(0, len(x), BATCH):
        loss = F.cross_entropy(forward(layers, p, X[s:s + BATCH]), Y[s:s + BATCH])
        for q in params:
            q.grad = None
        loss.backward()
        t += 1
        if opt["name"] == "sgd":
            o.step()
        else:
            with torch.no_grad():
                keras_adam_step(params, state, t, opt["lr"])
    return {k: v.detach().numpy() for k, v in p.items()}


def run_case(cohort, label, layers, init_of):
    rng = np.random.default_rng(37)
    x = rng.standard_normal((N, T, FEAT)).astype(np.float32)
    y = np.argmax(x[:, :, :CLASSES].sum(axis=1) + 0.3 * rng.standard_normal((N, CLASSES)),
                  axis=1).astype(np.int64)
    init = init_of(rng)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", x)
        np.save(f"{tmp}/y.npy", y)
        write_safetensors(f"{tmp}/init.safetensors", init)
        plan = {
            "data": {"train": f"npy:{tmp}/x.npy,{tmp}/y.npy"},
            "defaults": {"epochs": 1, "batch_size": BATCH, "shuffle": False,
                         "init_from": f"{tmp}/init.safetensors", "layers": layers},
            "models": [{"name": name, "optimizer": opt} for name, opt in OPTIMIZERS.items()],
        }
        if not cohort_train(check, cohort, plan, tmp, label):
            return
        for name, opt in OPTIMIZERS.items():
            want = torch_train(init, x, y, layers, opt)
            got = read_safetensors(f"{tmp}/out/models/{name}.safetensors")
            # k_proj.bias adds the same to every score of a row, which the softmax
            # takes away: its gradient is 0 but for rounding, which Adam's step
            # then scales up to a full step in either library. Not compared.
            want32 = {k: v.astype(np.float32) for k, v in want.items()
                      if not k.endswith("k_proj.bias")}
            worst, _ = weights_match(check, f"{label} {name}", got, want32, init)
            print(f"{NAME}: {label} {name}: max |cohort - torch| = {worst:.3g}")


def uniform(rng, shape, lim):
    return rng.uniform(-lim, lim, shape).astype(np.float32)


def dense_init(rng, t, i, n_out, n_in):
    t[f"layers.{i}.weight"] = uniform(rng, (n_out, n_in), np.sqrt(6 / (n_in + n_out)))
    t[f"layers.{i}.bias"] = uniform(rng, (n_out,), 0.1)


def ln_init(rng, t, i, width):
    t[f"layers.{i}.weight"] = (1.0 + uniform(rng, (width,), 0.2)).astype(np.float32)
    t[f"layers.{i}.bias"] = uniform(rng, (width,), 0.1)


def layer_norm_case(cohort):
    layers = ["layer_normalization", {"dense": 8, "activation": "gelu"},
              {"layer_normalization": {"epsilon": 0.01}}, "flatten",
              {"dense": 6, "activation": "silu"}, {"dense": CLASSES, "activation": "softmax"}]

    def init_of(rng):
        t = {}
        ln_init(rng, t, 0, FEAT)
        dense_init(rng, t, 1, 8, FEAT)
        ln_init(rng, t, 2, 8)
        dense_init(rng, t, 4, 6, T * 8)
        dense_init(rng, t, 5, CLASSES, 6)
        return t
    run_case(cohort, "layer norm, gelu, silu", layers, init_of)


def attention_init(rng, t, i, width, H, dk, dv):
    for name, d in (("q_proj", dk), ("k_proj", dk), ("v_proj", dv)):
        t[f"layers.{i}.{name}.weight"] = uniform(rng, (H * d, width), np.sqrt(6 / (width + H * d)))
        t[f"layers.{i}.{name}.bias"] = uniform(rng, (H * d,), 0.1)
    t[f"layers.{i}.out_proj.weight"] = uniform(rng, (width, H * dv), np.sqrt(6 / (width + H * dv)))
    t[f"layers.{i}.out_proj.bias"] = uniform(rng, (width,), 0.1)


ATTENTION = [{"multi_head_attention": {"num_heads": 2, "key_dim": 3}},
             "layer_normalization",
             {"multi_head_attention": {"num_heads": 1, "key_dim": 6, "value_dim": 4,
                                       "causal": True}},
             "flatten", {"dense": CLASSES, "activation": "softmax"}]


def attention_weights(rng):
    t = {}
    attention_init(rng, t, 0, FEAT, 2, 3, 3)
    ln_init(rng, t, 1, FEAT)
    attention_init(rng, t, 2, FEAT, 1, 6, 4)
    dense_init(rng, t, 4, CLASSES, T * FEAT)
    return t


def attention_case(cohort):
    run_case(cohort, "attention (key_dim != width / heads), layer norm, causal attention",
             ATTENTION, attention_weights)


def fused_case(cohort):
    """Three attention models that differ in rate, seed and attention dropout train fused
    to the same bits as one after another."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((N, T, FEAT)).astype(np.float32)
    y = rng.integers(0, CLASSES, N).astype(np.int64)
    layers = [dict(ATTENTION[0]), *ATTENTION[1:]]
    drop = [{"multi_head_attention": {**ATTENTION[0]["multi_head_attention"], "dropout": 0.2}},
            *ATTENTION[1:]]
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", x)
        np.save(f"{tmp}/y.npy", y)
        plan = {"data": {"train": f"npy:{tmp}/x.npy,{tmp}/y.npy"},
                "defaults": {"epochs": 2, "batch_size": BATCH, "layers": layers},
                "models": [{"name": "a"}, {"name": "b", "optimizer": {"name": "adam", "lr": 0.003},
                                           "seed": 2},
                           {"name": "c", "layers": drop, "seed": 3}]}
        with open(f"{tmp}/plan.json", "w") as f:
            import json
            json.dump(plan, f)
        for s in ("sequential", "fused"):
            r = subprocess.run([cohort, "train", f"{tmp}/plan.json", "--strategy", s, "--threads",
                                "1", "--out", f"{tmp}/{s}", "--quiet"], capture_output=True,
                               text=True)
            check(r.returncode == 0, f"fused case, {s}: exit {r.returncode}: {r.stderr}")
            if r.returncode:
                return
        for m in ("a", "b", "c"):
            same = open(f"{tmp}/sequential/models/{m}.safetensors", "rb").read() == \
                open(f"{tmp}/fused/models/{m}.safetensors", "rb").read()
            check(same, f"fused case: model {m}'s weights differ between fused and sequential")


def main():
    cohort = cohort_bin(NAME)
    if not cohort:
        return 1
    torch.set_num_threads(1)
    layer_norm_case(cohort)
    attention_case(cohort)
    fused_case(cohort)
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
