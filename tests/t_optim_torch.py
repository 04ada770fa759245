#!/usr/bin/env python3
"""Optimizers, clipping and regularizers against PyTorch: from the same
initial weights, one unshuffled epoch (with a short last batch) must give
the same weights in cohort and in the reference, and the same reported loss.

The references:
- nadam: torch.optim.NAdam with momentum_decay=1.0, which is Keras 3's
  momentum schedule u_t = beta_1 (1 - 0.5 * 0.96^t) (torch's default 0.004
  is the older tf.keras one);
- global_clipnorm: torch.nn.utils.clip_grad_norm_ over all the parameters;
  clipnorm: the same on each parameter alone; clipvalue: clip_grad_value_;
- kernel_regularizer: the penalty l2 sum(W^2) + l1 sum|W| of each kernel
  added to the torch loss, so autograd gives its gradient (before the clip,
  as in Keras);
- rmsprop and adagrad: Keras's formulas written out below in torch float32
  (they put epsilon inside the square root, torch.optim outside).
Adam is Keras's formula written out too (t_parity_torch.py shows it equals
Keras; torch.optim.Adam puts epsilon differently).

Tolerance: |cohort - ref| <= 2e-5 + 1e-4 |ref| per weight; the reported
epoch loss to 1e-4 relative. Each clip is checked to have clipped.
Run by ctest; needs /usr/bin/python3 with numpy and torch (else skipped, 77)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcheck import Checks, cohort_bin, cohort_train, need, weights_match  # noqa: E402

NAME = "t_optim_torch.py"
np, torch = need(NAME, "numpy", "torch")
from st_numpy import read_safetensors, write_safetensors  # noqa: E402

check = Checks(NAME)

BATCH = 32



class KerasFormula:
    """Keras 3's update rules for the optimizers torch.optim computes
    differently, over torch float32 tensors."""

    def __init__(self, params, opt):
        self.o = opt
        self.t = 0
        init = opt.get("initial_accumulator_value", 0.1) if opt["name"] == "adagrad" else 0.0
        self.s1 = [torch.full_like(p, init) for p in params]
        self.s2 = [torch.zeros_like(p) for p in params]

    def step(self, params):
        o, lr = self.o, self.o["lr"]
        self.t += 1
        for p, s1, s2 in zip(params, self.s1, self.s2):
            g = p.grad
            if o["name"] == "adam":
                b1, b2, eps = 0.9, 0.999, 1e-7
                alpha = lr * np.sqrt(1 - b2 ** self.t) / (1 - b1 ** self.t)
                s1 += (g - s1) * (1 - b1)
                s2 += (g * g - s2) * (1 - b2)
                p -= alpha * s1 / (torch.sqrt(s2) + eps)
            elif o["name"] == "adagrad":
                eps = 1e-7
                s1 += g * g
                p -= lr * g / torch.sqrt(s1 + eps)
            elif o["name"] == "rmsprop":
                rho, mom, eps = o.get("rho", 0.9), o.get("momentum", 0.0), 1e-7
                s1.copy_(rho * s1 + (1 - rho) * g * g)
                if o.get("centered"):
                    s2.copy_(rho * s2 + (1 - rho) * g)
                    inc = lr * g / torch.sqrt(s1 - s2 * s2 + eps)
                else:
                    inc = lr * g / torch.sqrt(s1 + eps)
                if mom > 0:
                    s2.copy_(mom * s2 + inc)
                    inc = s2
                p -= inc


def torch_train(init, x, y, layers, opt, regs):
    """One epoch; returns the weights, the epoch's mean reported loss and how
    many steps the clip changed the gradient."""
    ws = [torch.tensor(init[f"layers.{i}.weight"].copy(), requires_grad=True) for i, _ in layers]
    bs = [torch.tensor(init[f"layers.{i}.bias"].copy(), requires_grad=True) for i, _ in layers]
    params = [p for pair in zip(ws, bs) for p in pair]
    name = opt["name"]
    if name == "sgd":
        o = torch.optim.SGD(params, lr=opt["lr"], momentum=opt.get("momentum", 0.0))
    elif name == "nadam":
        # foreach: torch 1.13's per-tensor path multiplies mu_{t+1}'s product
        # by mu_t twice (fixed in later torch); its foreach path is right.
        o = torch.optim.NAdam(params, lr=opt["lr"], eps=1e-7, momentum_decay=1.0, foreach=True)
    else:
        o = KerasFormula(params, opt)
    X, Y = torch.tensor(x), torch.tensor(y, dtype=torch.long)
    loss_sum, clipped = 0.0, 0
    for s in range(0, len(x), BATCH):
        h = X[s:s + BATCH]
        for (i, act), w, b in zip(layers, ws, bs):
            h = h @ w.T + b
            if act == "relu":
                h = torch.relu(h)
            elif act == "tanh":
                h = torch.tanh(h)
        loss = torch.nn.functional.cross_entropy(h, Y[s:s + BATCH])
        for li, (l1, l2) in regs.items():
            loss = loss + l2 * torch.sum(ws[li] ** 2) + l1 * torch.sum(torch.abs(ws[li]))
        loss_sum += float(loss) * len(h)
        for p in params:
            p.grad = None
        loss.backward()
        before = [p.grad.clone() for p in params]
        if "global_clipnorm" in opt:
            torch.nn.utils.clip_grad_norm_(params, opt["global_clipnorm"])
        if "clipnorm" in opt:
            for p in params:
                torch.nn.utils.clip_grad_norm_([p], opt["clipnorm"])
        if "clipvalue" in opt:
            torch.nn.utils.clip_grad_value_(params, opt["clipvalue"])
        clipped += any(not torch.equal(a, p.grad) for a, p in zip(before, params))
        with torch.no_grad():
            o.step() if not isinstance(o, KerasFormula) else o.step(params)
    weights = {f"layers.{i}.weight": w.detach().numpy() for (i, _), w in zip(layers, ws)}
    weights |= {f"layers.{i}.bias": b.detach().numpy() for (i, _), b in zip(layers, bs)}
    return weights, loss_sum / len(x), clipped


def eval_loss(weights, x, y, layers, regs):
    """The loss Keras's evaluate reports: the mean cross-entropy plus the
    regularizers' penalty, from the given weights."""
    h = torch.tensor(x)
    with torch.no_grad():
        for i, act in layers:
            h = h @ torch.tensor(weights[f"layers.{i}.weight"]).T + torch.tensor(weights[f"layers.{i}.bias"])
            h = torch.relu(h) if act == "relu" else torch.tanh(h) if act == "tanh" else h
        loss = float(torch.nn.functional.cross_entropy(h, torch.tensor(y, dtype=torch.long)))
    for li, (l1, l2) in regs.items():
        w = weights[f"layers.{li}.weight"].astype(np.float64)
        loss += l2 * float(np.sum(w * w)) + l1 * float(np.sum(np.abs(w)))
    return loss


def main():
    cohort = cohort_bin(NAME)
    if not cohort:
        return 1
    torch.set_num_threads(1)
    rng = np.random.default_rng(5)
    n, d, classes = 200, 12, 4
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = np.argmax(x[:, :classes] + 0.3 * rng.standard_normal((n, classes)), axis=1).astype(np.int64)
    layers = [(0, "tanh"), (1, "relu"), (2, "softmax")]
    sizes = [d, 16, 8, classes]
    init = {}
    for li, (i, _) in enumerate(layers):
        lim = np.sqrt(6 / (sizes[li] + sizes[li + 1]))
        init[f"layers.{i}.weight"] = rng.uniform(-lim, lim, (sizes[li + 1], sizes[li])).astype(np.float32)
        init[f"layers.{i}.bias"] = rng.uniform(-0.1, 0.1, sizes[li + 1]).astype(np.float32)
    # name: (optimizer, {layer: (l1, l2)})
    cases = {
        "nadam": ({"name": "nadam", "lr": 0.01}, {}),
        "rmsprop": ({"name": "rmsprop", "lr": 0.005}, {}),
        "rmsprop_momentum": ({"name": "rmsprop", "lr": 0.002, "rho": 0.8, "momentum": 0.5}, {}),
        "rmsprop_centered": ({"name": "rmsprop", "lr": 0.002, "centered": True}, {}),
        "adagrad": ({"name": "adagrad", "lr": 0.05, "initial_accumulator_value": 0.2}, {}),
        "sgd_global_clipnorm": ({"name": "sgd", "lr": 0.1, "momentum": 0.9,
                                 "global_clipnorm": 0.3}, {}),
        "adam_global_clipnorm": ({"name": "adam", "lr": 0.01, "global_clipnorm": 0.3}, {}),
        "sgd_clipnorm": ({"name": "sgd", "lr": 0.1, "clipnorm": 0.1}, {}),
        "adam_clipvalue": ({"name": "adam", "lr": 0.01, "clipvalue": 0.02}, {}),
        "sgd_l2_l1": ({"name": "sgd", "lr": 0.1, "momentum": 0.9}, {0: (0.0, 0.01), 1: (0.003, 0.0)}),
        "adam_l2_clipnorm": ({"name": "adam", "lr": 0.01, "clipnorm": 0.2}, {0: (0.0, 0.05)}),
    }
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", x)
        np.save(f"{tmp}/y.npy", y)
        write_safetensors(f"{tmp}/init.safetensors", init)
        models = []
        for name, (opt, regs) in cases.items():
            lay = [{"dense": 16, "activation": "tanh"}, {"dense": 8, "activation": "relu"},
                   {"dense": classes, "activation": "softmax"}]
            for li, (l1, l2) in regs.items():
                lay[li]["kernel_regularizer"] = {"l1": l1, "l2": l2}
            models.append({"name": name, "optimizer": opt, "layers": lay})
        plan = {
            "data": {"train": f"npy:{tmp}/x.npy,{tmp}/y.npy"},
            "defaults": {"epochs": 1, "batch_size": BATCH, "shuffle": False,
                         "init_from": f"{tmp}/init.safetensors"},
            "models": models,
        }
        if not cohort_train(check, cohort, plan, tmp):
            return check.done()
        results = {m["name"]: m for m in json.load(open(f"{tmp}/out/results.json"))["models"]}
        for name, (opt, regs) in cases.items():
            want, want_loss, clipped = torch_train(init, x, y, layers, opt, regs)
            got = read_safetensors(f"{tmp}/out/models/{name}.safetensors")
            _, worst = weights_match(check, name, got, want, init, ref="the reference")
            rec = results[name]
            check(rec["status"] == "ok", f"{name}: status {rec['status']}")
            loss = rec["history"]["loss"][0]
            rel = abs(loss - want_loss) / want_loss
            check(rel <= 1e-4, f"{name}: reported loss {loss} vs {want_loss} (the penalty included)")
            if any(c in opt for c in ("clipnorm", "global_clipnorm", "clipvalue")):
                check(clipped > 0, f"{name}: the clip never clipped; make it smaller")
            print(f"{NAME}: {name}: max relative weight difference {worst:.3g}, loss {rel:.3g}")
            if regs:
                # cohort eval (and so the validation and test losses) adds the penalty too
                e = subprocess.run([cohort, "eval", f"{tmp}/out/models/{name}.safetensors", "--data",
                                    f"npy:{tmp}/x.npy,{tmp}/y.npy", "--json"],
                                   capture_output=True, text=True)
                check(e.returncode == 0, f"{name}: cohort eval exited {e.returncode}: {e.stderr}")
                if e.returncode == 0:
                    got_eval = json.loads(e.stdout)["loss"]
                    want_eval = eval_loss(want, x, y, layers, regs)
                    check(abs(got_eval - want_eval) <= 1e-4 * want_eval,
                          f"{name}: cohort eval loss {got_eval} vs {want_eval} (with the penalty)")
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
