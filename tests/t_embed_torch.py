#!/usr/bin/env python3
"""Parity of the token layers with PyTorch (issue 37): from the same initial
weights (init_from), one unshuffled epoch with a partial last batch must give
the same weights in cohort as in a float64 torch reference, for SGD with
momentum (torch.optim.SGD) and Adam (Keras's formula, written out in torch).
The reference loads cohort's tensors into the torch modules issue 37 names:
layers.0.weight into torch.nn.Embedding, layers.1.weight [sequence_length,
width] as a parameter whose first T rows are added to the sequence, then
torch.nn.Linear on each step (a dense layer on a sequence), a flatten and a
Linear with softmax cross-entropy. The ids are int64 with padding 0 and one
id no sample has (its row keeps a zero gradient), uint8 for the second model
(read as ids, not scaled).

Tolerance: |cohort - torch| <= 2e-5 + 1e-4 * |torch| for every weight.
Run by ctest; needs /usr/bin/python3 with numpy and torch (else: skipped, 77)."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcheck import Checks, cohort_bin, cohort_train, need, weights_match  # noqa: E402

NAME = "t_embed_torch.py"
np, torch = need(NAME, "numpy", "torch")
from st_numpy import read_safetensors, write_safetensors  # noqa: E402

check = Checks(NAME)
V, E, L, T, H, C = 12, 5, 8, 6, 4, 3


def keras_adam_step(params, state, t, lr, b1=0.9, b2=0.999, eps=1e-7):
    alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    for p, (m, v) in zip(params, state):
        g = p.grad
        m += (g - m) * (1 - b1)
        v += (g * g - v) * (1 - b2)
        p -= alpha * m / (torch.sqrt(v) + eps)


def torch_train(init, x, y, opt, batch):
    """The reference in float64: torch.nn.Embedding, a position table, Linear on the steps,
    flatten, Linear; softmax cross-entropy."""
    t64 = lambda a: torch.tensor(a.astype(np.float64))  # noqa: E731
    emb = torch.nn.Embedding(V, E).double()
    step = torch.nn.Linear(E, H).double()
    out = torch.nn.Linear(T * H, C).double()
    with torch.no_grad():
        emb.weight.copy_(t64(init["layers.0.weight"]))
        step.weight.copy_(t64(init["layers.2.weight"]))
        step.bias.copy_(t64(init["layers.2.bias"]))
        out.weight.copy_(t64(init["layers.4.weight"]))
        out.bias.copy_(t64(init["layers.4.bias"]))
    pos = torch.nn.Parameter(t64(init["layers.1.weight"]))
    params = [emb.weight, pos, step.weight, step.bias, out.weight, out.bias]
    if opt["name"] == "sgd":
        o = torch.optim.SGD(params, lr=opt["lr"], momentum=opt["momentum"])
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    X, Y = torch.tensor(x.astype(np.int64)), torch.tensor(y)
    for t, s in enumerate(range(0, len(x), batch), start=1):
        h = emb(X[s:s + batch]) + pos[:T]
        h = torch.tanh(step(h)).flatten(1)
        loss = torch.nn.functional.cross_entropy(out(h), Y[s:s + batch])
        for p in params:
            p.grad = None
        loss.backward()
        if opt["name"] == "sgd":
            o.step()
        else:
            with torch.no_grad():
                keras_adam_step(params, state, t, opt["lr"])
    names = ["layers.0.weight", "layers.1.weight", "layers.2.weight", "layers.2.bias",
             "layers.4.weight", "layers.4.bias"]
    return {k: p.detach().numpy().astype(np.float32) for k, p in zip(names, params)}


def main():
    cohort = cohort_bin(NAME)
    if not cohort:
        return 1
    torch.set_num_threads(1)
    rng = np.random.default_rng(37)
    n = 150
    x = rng.integers(1, V - 1, (n, T))  # id V - 1 never occurs
    x[::4, 4:] = 0
    y = ((x == 2).sum(1) + (x == 3).sum(1) - (x == 7).sum(1)).clip(0, C - 1).astype(np.int64)
    init = {
        "layers.0.weight": rng.uniform(-0.05, 0.05, (V, E)),
        "layers.1.weight": rng.uniform(-0.5, 0.5, (L, E)),
        "layers.2.weight": rng.uniform(-0.6, 0.6, (H, E)),
        "layers.2.bias": rng.uniform(-0.1, 0.1, H),
        "layers.4.weight": rng.uniform(-0.3, 0.3, (C, T * H)),
        "layers.4.bias": rng.uniform(-0.1, 0.1, C),
    }
    init = {k: v.astype(np.float32) for k, v in init.items()}
    optimizers = {"sgd_momentum": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
                  "adam": {"name": "adam", "lr": 0.01}}
    for dtype in (np.int64, np.uint8):
        label = np.dtype(dtype).name
        with tempfile.TemporaryDirectory() as tmp:
            np.save(f"{tmp}/x.npy", x.astype(dtype))
            np.save(f"{tmp}/y.npy", y)
            write_safetensors(f"{tmp}/init.safetensors", init)
            plan = {
                "data": {"train": f"npy:{tmp}/x.npy,{tmp}/y.npy"},
                "defaults": {"epochs": 1, "batch_size": 32, "shuffle": False,
                             "init_from": f"{tmp}/init.safetensors",
                             "layers": [{"embedding": {"input_dim": V, "output_dim": E}},
                                        {"position_embedding": L},
                                        {"dense": H, "activation": "tanh"},
                                        "flatten",
                                        {"dense": C, "activation": "softmax"}]},
                "models": [{"name": k, "optimizer": o} for k, o in optimizers.items()],
            }
            if not cohort_train(check, cohort, plan, tmp, label):
                continue
            results = json.load(open(f"{tmp}/out/results.json"))
            for name, opt in optimizers.items():
                want = torch_train(init, x, y, opt, 32)
                got = read_safetensors(f"{tmp}/out/models/{name}.safetensors")
                worst, _ = weights_match(check, f"{label} {name}", got, want, init)
                print(f"{NAME}: {label} ids, {name}: max |cohort - torch| = {worst:.3g}")
                unused = got["layers.0.weight"][V - 1] - init["layers.0.weight"][V - 1]
                check(not unused.any(), f"{label} {name}: the row of an id no sample has moved")
                rec = [m for m in results["models"] if m["name"] == name][0]
                check(rec["status"] == "ok", f"{label} {name}: status {rec['status']}")
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
