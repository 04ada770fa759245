#!/usr/bin/env python3
"""Parity with PyTorch for residual blocks (x + f(x)): a small MLP with three
blocks (two dense layers; one dense layer; an activation alone), its weights
named layers.i and layers.i.j, loads into a torch module whose blocks are
torch.nn.Sequential subclasses with numbered children (load_state_dict,
strict: every name of the file and of the module matches). From the same
initial weights, one unshuffled epoch with SGD-momentum and with Adam
(Keras's formula) ends with the same weights in cohort and in a float64
torch reference, and the trained weights loaded into the torch module
predict what `cohort predict` prints.

Tolerance: |cohort - torch| <= 2e-5 + 1e-4 * |torch| for every weight.
Run by ctest; needs /usr/bin/python3 with numpy and torch (else: skipped, 77)."""
import csv
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcheck import Checks, cohort_bin, cohort_train, need, weights_match  # noqa: E402

NAME = "t_residual_torch.py"
np, torch = need(NAME, "numpy", "torch")
from st_numpy import read_safetensors, write_safetensors  # noqa: E402

nn = torch.nn
check = Checks(NAME)
ACTS = {"relu": torch.relu, "tanh": torch.tanh, "linear": lambda h: h}


class Dense(nn.Linear):
    """cohort's dense layer: Linear and its activation as one child, so that
    the children's numbers are the plan's."""

    def __init__(self, n_in, units, act="linear"):
        super().__init__(n_in, units, dtype=torch.float64)
        self.act = ACTS[act]

    def forward(self, x):
        return self.act(super().forward(x))


class Act(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.act = ACTS[act]

    def forward(self, x):
        return self.act(x)


class Residual(nn.Sequential):
    """{residual: [...]}: x + f(x), f the numbered children."""

    def forward(self, x):
        return x + super().forward(x)


class Net(nn.Module):
    def __init__(self, d, classes):
        super().__init__()
        self.layers = nn.Sequential(
            Dense(d, 16, "tanh"),                                     # layers.0
            Residual(Dense(16, 24, "relu"), Dense(24, 16)),           # layers.1.0, layers.1.1
            Residual(Dense(16, 16, "tanh")),                          # layers.2.0
            Residual(Act("relu")),                                    # layers.3
            Dense(16, classes))                                       # layers.4 (softmax: the loss)

    def forward(self, x):
        return self.layers(x)


PLAN_LAYERS = [{"dense": 16, "activation": "tanh"},
               {"residual": [{"dense": 24, "activation": "relu"}, {"dense": 16}]},
               {"residual": [{"dense": 16, "activation": "tanh"}]},
               {"residual": [{"activation": "relu"}]},
               {"dense": 4, "activation": "softmax"}]


def load(net, tensors):
    """The file's tensors into net: layers.NAME -> NAME of net.layers, strictly."""
    state = {k[len("layers."):]: torch.tensor(v, dtype=torch.float64) for k, v in tensors.items()}
    net.layers.load_state_dict(state, strict=True)


def keras_adam_step(params, state, t, lr, b1=0.9, b2=0.999, eps=1e-7):
    alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    for p, (m, v) in zip(params, state):
        m += (p.grad - m) * (1 - b1)
        v += (p.grad * p.grad - v) * (1 - b2)
        p -= alpha * m / (torch.sqrt(v) + eps)


def torch_train(init, x, y, opt, batch):
    net = Net(x.shape[1], 4)
    load(net, init)
    params = list(net.parameters())
    if opt["name"] == "sgd":
        o = torch.optim.SGD(params, lr=opt["lr"], momentum=opt["momentum"])
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    X, Y = torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.long)
    t = 0
    for s in range(0, len(x), batch):
        loss = nn.functional.cross_entropy(net(X[s:s + batch]), Y[s:s + batch])
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


def main():
    cohort = cohort_bin(NAME)
    if not cohort:
        return 1
    torch.set_num_threads(1)
    rng = np.random.default_rng(5)
    n, d = 200, 12
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = np.argmax(x[:, :4] + 0.3 * rng.standard_normal((n, 4)), axis=1).astype(np.int64)
    # Initial weights: the torch module's own names, drawn here.
    init = {}
    for k, v in Net(d, 4).layers.state_dict().items():
        lim = 0.6 if k.endswith("weight") else 0.1
        init[f"layers.{k}"] = rng.uniform(-lim, lim, tuple(v.shape)).astype(np.float32)
    check(sorted(init) == sorted(["layers.0.weight", "layers.0.bias", "layers.1.0.weight",
                                  "layers.1.0.bias", "layers.1.1.weight", "layers.1.1.bias",
                                  "layers.2.0.weight", "layers.2.0.bias", "layers.4.weight",
                                  "layers.4.bias"]), f"torch's names: {sorted(init)}")
    optimizers = {"sgd_momentum": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
                  "adam": {"name": "adam", "lr": 0.01}}
    batch = 24
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", x)
        np.save(f"{tmp}/y.npy", y)
        write_safetensors(f"{tmp}/init.safetensors", init)
        plan = {"data": {"train": f"npy:{tmp}/x.npy,{tmp}/y.npy"},
                "defaults": {"epochs": 1, "batch_size": batch, "shuffle": False,
                             "init_from": f"{tmp}/init.safetensors", "layers": PLAN_LAYERS},
                "models": [{"name": k, "optimizer": v} for k, v in optimizers.items()]}
        if not cohort_train(check, cohort, plan, tmp, "residual mlp"):
            return check.done()
        for name, opt in optimizers.items():
            want = torch_train(init, x, y, opt, batch)
            got = read_safetensors(f"{tmp}/out/models/{name}.safetensors")
            check(sorted(got) == sorted(want), f"{name}: cohort's names {sorted(got)}")
            worst, rel = weights_match(check, name, got, want, init)
            print(f"{NAME}: {name}: max |cohort - torch| = {worst:.3g} (relative {rel:.3g})")
        # The trained weights in the torch module predict what cohort predict prints.
        r = subprocess.run([cohort, "predict", f"{tmp}/out/models/adam.safetensors", "--data",
                            f"npy:{tmp}/x.npy,{tmp}/y.npy", "--out", f"{tmp}/pred.csv"],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"cohort predict: {r.stderr}")
        if r.returncode == 0:
            rows = list(csv.DictReader(open(f"{tmp}/pred.csv")))
            printed = np.array([[float(row[f"p{c}"]) for c in range(4)] for row in rows])
            net = Net(d, 4)
            load(net, read_safetensors(f"{tmp}/out/models/adam.safetensors"))
            with torch.no_grad():
                probs = net(torch.tensor(x, dtype=torch.float64)).softmax(1).numpy()
            err = float(abs(probs - printed).max())
            check(err < 2e-6, f"predict: torch's probabilities differ by {err:.3g}")
            print(f"{NAME}: predict: max |torch - cohort| = {err:.3g}")
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
