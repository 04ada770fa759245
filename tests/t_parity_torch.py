#!/usr/bin/env python3
"""Parity with PyTorch: from the same initial weights, one epoch without
shuffling must give the same weights in cohort and in PyTorch, for SGD with
momentum (torch.optim.SGD), SGD with Nesterov momentum, and Adam (Keras's
formula, written out in torch), with a partial last batch. Two networks:
12-16-8-4 at batch 32, and 12-64-48-4 at batch 24, whose second layer is
wide enough for the CPU kernels' own paths of a later layer (the forward
from its input transposed, the input gradient by kern_gemm_own); on an
AVX-512 machine the wide one runs with the AVX2 kernels as well.

Tolerance: |cohort - torch| <= 2e-5 + 1e-4 * |torch| for every weight, the
float32 rounding of some 200 steps of differently ordered sums.
Run by ctest; needs /usr/bin/python3 with numpy and torch (else: skipped, 77)."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcheck import Checks, cohort_bin, cohort_train, need, weights_match  # noqa: E402

NAME = "t_parity_torch.py"
np, torch = need(NAME, "numpy", "torch")
from st_numpy import read_safetensors, write_safetensors  # noqa: E402

check = Checks(NAME)


def keras_adam_step(params, grads, state, t, lr, b1=0.9, b2=0.999, eps=1e-7):
    """Keras's Adam, in float32 as Keras computes it."""
    alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    for p, g, (m, v) in zip(params, grads, state):
        m += (g - m) * (1 - b1)
        v += (g * g - v) * (1 - b2)
        p -= alpha * m / (torch.sqrt(v) + eps)


def torch_train(init, x, y, layers, opt, batch):
    ws = [torch.tensor(init[f"layers.{i}.weight"].copy(), requires_grad=True) for i, _ in layers]
    bs = [torch.tensor(init[f"layers.{i}.bias"].copy(), requires_grad=True) for i, _ in layers]
    params = [p for pair in zip(ws, bs) for p in pair]
    if opt["name"] == "sgd":
        o = torch.optim.SGD(params, lr=opt["lr"], momentum=opt["momentum"],
                            nesterov=opt.get("nesterov", False))
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    X, Y = torch.tensor(x), torch.tensor(y, dtype=torch.long)
    t = 0
    for s in range(0, len(x), batch):
        h = X[s:s + batch]
        for (i, act), w, b in zip(layers, ws, bs):
            h = h @ w.T + b
            if act == "relu":
                h = torch.relu(h)
            elif act == "tanh":
                h = torch.tanh(h)
        loss = torch.nn.functional.cross_entropy(h, Y[s:s + batch])
        for p in params:
            p.grad = None
        loss.backward()
        t += 1
        if opt["name"] == "sgd":
            o.step()
        else:
            with torch.no_grad():
                keras_adam_step(params, [p.grad for p in params], state, t, opt["lr"])
    return {f"layers.{i}.weight": w.detach().numpy() for (i, _), w in zip(layers, ws)} | \
           {f"layers.{i}.bias": b.detach().numpy() for (i, _), b in zip(layers, bs)}


def avx512():
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512f " in f.read().replace("\n", " ")
    except OSError:
        return False


def run_case(cohort, label, hidden, batch, kernels):
    """Train 12-hidden-4 with the three optimizers in cohort and in torch; compare."""
    rng = np.random.default_rng(3)
    n, d, classes = 200, 12, 4
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = (np.argmax(x[:, :classes] + 0.3 * rng.standard_normal((n, classes)), axis=1)).astype(np.int64)
    layers = [(0, "tanh"), (1, "relu"), (2, "softmax")]
    sizes = [d, *hidden, classes]
    init = {}
    for li, (i, _) in enumerate(layers):
        lim = np.sqrt(6 / (sizes[li] + sizes[li + 1]))
        init[f"layers.{i}.weight"] = rng.uniform(-lim, lim, (sizes[li + 1], sizes[li])).astype(np.float32)
        init[f"layers.{i}.bias"] = rng.uniform(-0.1, 0.1, sizes[li + 1]).astype(np.float32)
    optimizers = {
        "sgd_momentum": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
        "sgd_nesterov": {"name": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True},
        "adam": {"name": "adam", "lr": 0.01},
    }
    if kernels:
        os.environ["COHORT_CPU_KERNELS"] = kernels
    else:
        os.environ.pop("COHORT_CPU_KERNELS", None)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", x)
        np.save(f"{tmp}/y.npy", y)
        write_safetensors(f"{tmp}/init.safetensors", init)
        models = []
        for name, opt in optimizers.items():
            models.append({"name": name, "optimizer": opt})
        plan = {
            "data": {"train": f"npy:{tmp}/x.npy,{tmp}/y.npy"},
            "defaults": {"epochs": 1, "batch_size": batch, "shuffle": False,
                         "init_from": f"{tmp}/init.safetensors",
                         "layers": [{"dense": hidden[0], "activation": "tanh"},
                                    {"dense": hidden[1], "activation": "relu"},
                                    {"dense": classes, "activation": "softmax"}]},
            "models": models,
        }
        if not cohort_train(check, cohort, plan, tmp, label):
            return
        results = json.load(open(f"{tmp}/out/results.json"))
        for name, opt in optimizers.items():
            want = torch_train(init, x, y, layers, opt, batch)
            got = read_safetensors(f"{tmp}/out/models/{name}.safetensors")
            worst, _ = weights_match(check, f"{label} {name}", got, want, init)
            print(f"{NAME}: {label} {name}: max |cohort - torch| = {worst:.3g}")
            rec = [m for m in results["models"] if m["name"] == name][0]
            check(rec["status"] == "ok", f"{label} {name}: status {rec['status']}")


def main():
    cohort = cohort_bin(NAME)
    if not cohort:
        return 1
    torch.set_num_threads(1)
    run_case(cohort, "12-16-8-4", (16, 8), 32, None)
    run_case(cohort, "12-64-48-4", (64, 48), 24, None)
    if avx512():
        run_case(cohort, "12-64-48-4 avx2", (64, 48), 24, "avx2")
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
