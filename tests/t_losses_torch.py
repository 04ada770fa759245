#!/usr/bin/env python3
"""Every loss against PyTorch: from the same initial weights, one unshuffled
epoch of plain SGD (so that only the loss's gradient moves the weights) must
give the same weights in cohort and in torch, and the history's loss and
metrics (accuracy, or mae and rmse for regression; validation after the
epoch) must be what torch computes for the same batches.

Covered: sparse_categorical_crossentropy with label smoothing (0.1 and 1, its
upper bound) and with class_weight (Keras's weighted sum over the batch size,
not torch's weighted mean), categorical_crossentropy on probability rows
(softmax, and from_logits on a linear layer), binary_crossentropy (one sigmoid
unit on 0/1 labels with class_weight; three units on probability rows with
label smoothing; two with label smoothing 1), mse on two real-valued targets,
mae on one, huber (delta 0.5).

Tolerance: weights |cohort - torch| <= 2e-5 + 1e-4 |torch|; metrics 1e-4
relative. Needs /usr/bin/python3 with numpy and torch (else skipped, 77)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcheck import Checks, cohort_bin, cohort_train, need, weights_match  # noqa: E402

NAME = "t_losses_torch.py"
np, torch, F = need(NAME, "numpy", "torch", "torch.nn.functional")
from st_numpy import read_safetensors, write_safetensors  # noqa: E402

check = Checks(NAME)

N, NV, D, H, B, LR = 150, 40, 6, 16, 32, 0.1



def close(a, b, rel=1e-4, tiny=1e-6):
    return abs(a - b) <= tiny + rel * abs(b)


def row_losses(case, z, t):
    """Per-row loss (unweighted) of the logits/values z against targets t."""
    kind, s = case["loss"], case.get("smoothing", 0.0)
    if kind == "sce":
        return F.cross_entropy(z, t, reduction="none", label_smoothing=s)
    if kind == "cce":
        return F.cross_entropy(z, t, reduction="none", label_smoothing=s)
    if kind == "bce":
        tt = t.reshape(z.shape) * (1 - s) + 0.5 * s
        return F.binary_cross_entropy_with_logits(z, tt, reduction="none").mean(dim=1)
    tt = t.reshape(z.shape)
    if kind == "mse":
        return ((z - tt) ** 2).mean(dim=1)
    if kind == "mae":
        return (z - tt).abs().mean(dim=1)
    return F.huber_loss(z, tt, reduction="none", delta=case["delta"]).mean(dim=1)


def metric_sums(case, z, t):
    """(right or sum of mean |e|, sum of mean e^2) of a batch, as cohort sums them."""
    kind = case["loss"]
    if kind in ("sce", "cce"):
        want = t if kind == "sce" else t.argmax(dim=1)
        return float((z.argmax(dim=1) == want).sum()), 0.0
    if kind == "bce":
        tt = t.reshape(z.shape)
        return float(((z > 0).float() == tt).float().mean(dim=1).sum()), 0.0
    e = z - t.reshape(z.shape)
    return float(e.abs().mean(dim=1).sum()), float((e * e).mean(dim=1).sum())


def class_of(case, t):
    if case["loss"] == "sce":
        return t
    return torch.round(t.reshape(-1)).long()


def torch_epoch(case, init, x, t, xv, tv):
    w0 = torch.tensor(init["layers.0.weight"].copy(), requires_grad=True)
    b0 = torch.tensor(init["layers.0.bias"].copy(), requires_grad=True)
    w1 = torch.tensor(init["layers.1.weight"].copy(), requires_grad=True)
    b1 = torch.tensor(init["layers.1.bias"].copy(), requires_grad=True)
    params = [w0, b0, w1, b1]
    cw = torch.tensor(case["class_weight"], dtype=torch.float32) if "class_weight" in case else None

    def forward(h):
        return torch.tanh(h @ w0.T + b0) @ w1.T + b1

    loss_sum = right = sq = 0.0
    for s in range(0, len(x), B):
        z = forward(x[s:s + B])
        tb = t[s:s + B]
        per = row_losses(case, z, tb)
        if cw is not None:
            per = per * cw[class_of(case, tb)]
        loss = per.sum() / len(per)  # Keras: the weighted sum over the batch size
        with torch.no_grad():
            loss_sum += float(per.sum())
            r, q = metric_sums(case, z, tb)
            right += r
            sq += q
        for p in params:
            p.grad = None
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= LR * p.grad
    with torch.no_grad():
        zv = forward(xv)
        vl = float(row_losses(case, zv, tv).sum()) / len(xv)
        vr, vq = metric_sums(case, zv, tv)
    got = {"layers.0.weight": w0, "layers.0.bias": b0, "layers.1.weight": w1, "layers.1.bias": b1}
    m = {"loss": loss_sum / len(x), "val_loss": vl}
    if case["loss"] in ("mse", "mae", "huber"):
        m |= {"mae": right / len(x), "rmse": np.sqrt(sq / len(x)),
              "val_mae": vr / len(xv), "val_rmse": np.sqrt(vq / len(xv))}
    else:
        m |= {"accuracy": right / len(x), "val_accuracy": vr / len(xv)}
    return {k: v.detach().numpy() for k, v in got.items()}, m


def make_targets(case, rng, x):
    n, out = len(x), case["out"]
    score = x[:, :out] + 0.3 * rng.standard_normal((n, out))
    kind = case["loss"]
    if kind == "sce":
        return np.argmax(score, axis=1).astype(np.int64)
    if kind == "cce":
        e = np.exp(2 * score)
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    if kind == "bce" and out == 1:
        return (score[:, 0] > 0).astype(np.int64)
    if kind == "bce":
        return (1 / (1 + np.exp(-2 * score))).astype(np.float32)
    v = (score * 1.5).astype(np.float32)
    return v[:, 0] if out == 1 else v


CASES = {
    "sce_smooth": {"loss": "sce", "out": 4, "act": "softmax",
                   "plan_loss": {"name": "sparse_categorical_crossentropy", "label_smoothing": 0.1},
                   "smoothing": 0.1},
    "sce_weighted": {"loss": "sce", "out": 3, "act": "softmax",
                     "plan_loss": "sparse_categorical_crossentropy",
                     "class_weight": [1.0, 3.0, 0.5]},
    "cce_probs": {"loss": "cce", "out": 4, "act": "softmax",
                  "plan_loss": {"name": "categorical_crossentropy", "label_smoothing": 0.05},
                  "smoothing": 0.05},
    "cce_logits": {"loss": "cce", "out": 3, "act": "linear",
                   "plan_loss": {"name": "categorical_crossentropy", "from_logits": True}},
    "bce_one": {"loss": "bce", "out": 1, "act": "sigmoid", "plan_loss": "binary_crossentropy",
                "class_weight": [0.7, 2.0]},
    "bce_rows": {"loss": "bce", "out": 3, "act": "sigmoid",
                 "plan_loss": {"name": "binary_crossentropy", "label_smoothing": 0.1},
                 "smoothing": 0.1},
    "mse_two": {"loss": "mse", "out": 2, "act": "linear", "plan_loss": "mse"},
    "mae_one": {"loss": "mae", "out": 1, "act": "linear", "plan_loss": "mae"},
    "huber": {"loss": "huber", "out": 2, "act": "linear",
              "plan_loss": {"name": "huber", "delta": 0.5}, "delta": 0.5},
    # label_smoothing 1 (Keras and torch take [0, 1]): every target uniform
    "sce_smooth1": {"loss": "sce", "out": 3, "act": "softmax",
                    "plan_loss": {"name": "sparse_categorical_crossentropy", "label_smoothing": 1.0},
                    "smoothing": 1.0},
    "bce_smooth1": {"loss": "bce", "out": 2, "act": "sigmoid",
                    "plan_loss": {"name": "binary_crossentropy", "label_smoothing": 1.0},
                    "smoothing": 1.0},
}


def run_case(cohort, tmp, name, case, rng):
    x = rng.standard_normal((N + NV, D)).astype(np.float32)
    t = make_targets(case, rng, x)
    out = case["out"]
    init = {
        "layers.0.weight": rng.uniform(-0.6, 0.6, (H, D)).astype(np.float32),
        "layers.0.bias": rng.uniform(-0.1, 0.1, H).astype(np.float32),
        "layers.1.weight": rng.uniform(-0.6, 0.6, (out, H)).astype(np.float32),
        "layers.1.bias": rng.uniform(-0.1, 0.1, out).astype(np.float32),
    }
    d = f"{tmp}/{name}"
    os.makedirs(d)
    np.save(f"{d}/x.npy", x[:N])
    np.save(f"{d}/t.npy", t[:N])
    np.save(f"{d}/xv.npy", x[N:])
    np.save(f"{d}/tv.npy", t[N:])
    write_safetensors(f"{d}/init.safetensors", init)
    model = {"name": name, "epochs": 1, "batch_size": B, "shuffle": False,
             "init_from": f"{d}/init.safetensors", "optimizer": {"name": "sgd", "lr": LR},
             "loss": case["plan_loss"],
             "layers": [{"dense": H, "activation": "tanh"}, {"dense": out, "activation": case["act"]}]}
    if "class_weight" in case:
        model["class_weight"] = {str(i): w for i, w in enumerate(case["class_weight"])}
    plan = {"data": {"train": f"npy:{d}/x.npy,{d}/t.npy", "validation": f"npy:{d}/xv.npy,{d}/tv.npy"},
            "models": [model]}
    if not cohort_train(check, cohort, plan, d, name):
        return
    tt = torch.tensor(t) if t.dtype == np.int64 else torch.tensor(t)
    if case["loss"] in ("bce", "mse", "mae", "huber"):
        tt = tt.float()
    want, wm = torch_epoch(case, init, torch.tensor(x[:N]), tt[:N], torch.tensor(x[N:]), tt[N:])
    got = read_safetensors(f"{d}/out/models/{name}.safetensors")
    worst, _ = weights_match(check, name, got, want, init)
    rec = json.load(open(f"{d}/out/results.json"))["models"][0]
    hist = rec["history"]
    regression = case["loss"] in ("mse", "mae", "huber")
    check(rec["task"] == ("regression" if regression else "classification"), f"{name}: task {rec['task']}")
    check(("accuracy" in hist) != regression and ("mae" in hist) == regression,
          f"{name}: history keys {sorted(hist)}")
    for key, v in wm.items():
        c = hist[key][0]
        check(c is not None and close(c, v), f"{name}: {key} {c} vs torch {v}")
    csv = open(f"{d}/out/history/{name}.csv").read().splitlines()
    head = "epoch,loss,mae,rmse,val_loss,val_mae,val_rmse,seconds,lr" if regression else \
        "epoch,loss,accuracy,val_loss,val_accuracy,seconds,lr"
    check(csv[0] == head, f"{name}: history header {csv[0]}")
    print(f"{NAME}: {name}: max |cohort - torch| = {worst:.3g}, loss {hist['loss'][0]:.6f} "
          f"(torch {wm['loss']:.6f})")


def fused_same(cohort, tmp, rng):
    """Members of a fused group that differ in label_smoothing, class_weight
    or huber's delta train exactly as they do alone."""
    d = f"{tmp}/fused"
    os.makedirs(d)
    x = rng.standard_normal((N, D)).astype(np.float32)
    y = np.argmax(x[:, :3], axis=1).astype(np.int64)
    r = (x[:, :2] * 1.5).astype(np.float32)
    np.save(f"{d}/x.npy", x)
    np.save(f"{d}/y.npy", y)
    np.save(f"{d}/r.npy", r)
    layers = [{"dense": H, "activation": "tanh"}, {"dense": 3, "activation": "softmax"}]
    cls = [{"name": "plain", "loss": "sparse_categorical_crossentropy"},
           {"name": "smooth", "loss": {"name": "sparse_categorical_crossentropy", "label_smoothing": 0.2}},
           {"name": "weighted", "loss": "sparse_categorical_crossentropy",
            "class_weight": {"0": 0.5, "1": 2.0, "2": 1.0}}]
    reg = [{"name": f"huber{i}", "loss": {"name": "huber", "delta": dl}} for i, dl in enumerate([0.3, 1.0, 2.5])]
    plans = {"cls": (f"npy:{d}/x.npy,{d}/y.npy", cls, layers),
             "reg": (f"npy:{d}/x.npy,{d}/r.npy", reg, [{"dense": H, "activation": "tanh"}, {"dense": 2}])}
    for key, (train, models, ls) in plans.items():
        plan = {"data": {"train": train, "validation_split": 0.2},
                "defaults": {"epochs": 2, "batch_size": B, "seed": 5, "layers": ls},
                "models": models}
        with open(f"{d}/{key}.json", "w") as f:
            json.dump(plan, f)
        w = {}
        for strat in ("fused", "sequential"):
            p = subprocess.run([cohort, "train", f"{d}/{key}.json", "--out", f"{d}/{key}-{strat}",
                                "--strategy", strat, "--quiet"], capture_output=True, text=True)
            check(p.returncode == 0, f"fused {key} {strat}: exit {p.returncode}: {p.stderr}")
            if p.returncode:
                return
            w[strat] = {m["name"]: read_safetensors(f"{d}/{key}-{strat}/models/{m['name']}.safetensors")
                        for m in models}
        for m in models:
            a, b = w["fused"][m["name"]], w["sequential"][m["name"]]
            check(all(np.array_equal(a[k], b[k]) for k in a), f"fused {m['name']}: differs from sequential")
        first = w["fused"][models[0]["name"]]["layers.1.weight"]
        check(not np.array_equal(first, w["fused"][models[1]["name"]]["layers.1.weight"]),
              f"fused {key}: members with other loss settings trained the same")
    print(f"{NAME}: fused groups with per-model loss settings equal sequential runs")


def main():
    cohort = cohort_bin(NAME)
    if not cohort:
        return 1
    torch.set_num_threads(1)
    rng = np.random.default_rng(11)
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in CASES.items():
            run_case(cohort, tmp, name, case, rng)
        fused_same(cohort, tmp, rng)
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
