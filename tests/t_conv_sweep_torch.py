#!/usr/bin/env python3
"""A randomized parity sweep of conv2d, max_pooling2d, average_pooling2d and
global_average_pooling2d against PyTorch.

For each seed of SETS one set of small NHWC images (5 to 11 pixels a side,
possibly not square, 1 to 3 channels) and class labels, and on them a few
drawn models, trained together as one plan:
  conv: conv2d, flatten, dense (logits);
  max, avg: conv2d (same, stride 1), the drawn pooling layer, flatten, dense;
  gap: conv2d, global_average_pooling2d, dense;
  stack: two drawn layers (conv2d and conv2d, conv2d and a pooling layer, or
         a pooling layer and conv2d), flatten, dense softmax.
Kernels and pools are square or [h, w] of 1 to 5 (pools 1 to 4), even sizes
included; strides 1 to 3, square or not, for pools often not the pool size;
padding valid or same; use_bias true or false; activations linear, relu,
tanh, sigmoid. SPECIAL adds hand-picked edge cases: a 1x1 output, even
kernels whose same padding is asymmetric, windows that do not tile the
input, a pool of 1 with stride 2, the filter counts of the CPU's own kernels.

The reference is written here with torch functions and TensorFlow's
semantics (cohort follows Keras): same padding pads max((out - 1) s + k - n,
0) pixels, half before, the odd one after (torch's own padding= is
symmetric); conv2d pads with zeros, max pooling with -inf (padding never
wins), and average pooling divides each window's sum by its real pixels
(count_include_pad=False is not it: torch's padding there is symmetric).

Checks, per model: from the same initial weights (init_from), EPOCHS epochs
of plain SGD (no shuffle; mostly one batch an epoch) give the same weights
in cohort and in torch, to 2e-5 + 1e-4 |w| (every layer's backward pass: the
first layer's weights see the gradient through every layer after it); each
tensor moved; and `cohort predict` on cohort's trained weights prints what
the torch forward pass computes from the same weights, to 1e-6 + 1e-5 |y|
(predict prints 6 digits). Here cohort and torch agree to 2e-7 in weights.

Mutations it catches (each tried): the odd padding pixel before instead of
after; average pooling counting the padding, forward or backward; 2x2 max
pooling's backward swapping two pixels; col2im, im2col, the small
weight-gradient kernel, the own GEMM's last rows, the chunk offsets and the
chunk sum of the fused CPU conv off by one; kh and kw swapped in the weight
file's layout. Needs /usr/bin/python3 with numpy and torch (else skipped, 77)."""
import csv
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcheck import Checks, cohort_bin, cohort_train, need, weights_match  # noqa: E402

NAME = "t_conv_sweep_torch.py"
np, torch, F = need(NAME, "numpy", "torch", "torch.nn.functional")
from st_numpy import read_safetensors, write_safetensors  # noqa: E402

# (seed, images, batch): mostly the whole set a batch; 70 images make the
# CPU's conv chunks several images each (the last one short); 13 in batches
# of 5 end each epoch with a short batch.
SETS = [(3, 12, 12), (17, 9, 9), (29, 70, 70), (41, 13, 5), (58, 16, 16)]
KINDS = ["conv", "conv", "max", "avg", "gap", "stack", "stack"]
CLASSES, EPOCHS, LR = 3, 3, 0.2
ACTS = ["linear", "relu", "tanh", "sigmoid"]
FILTERS = [1, 2, 3, 5, 8, 16]  # 8, 16: the CPU's small weight-gradient and own-GEMM kernels
STACKS = [("conv", "conv"), ("conv", "max"), ("conv", "avg"), ("max", "conv"), ("avg", "conv")]

check = Checks(NAME)


# A layer is a dict: kind ("conv", "max", "avg", "gap", "flatten", "dense",
# "act": a last {activation: softmax}),
# k, s: (h, w) and sq_k, sq_s: whether the plan writes them as one integer
# (s None: a pool's default, its size), pad, and for conv and dense units,
# bias, act.

def out_dim(n, k, s, pad):
    return -(-n // s) if pad == "same" else (n - k) // s + 1


def pads(n, k, s, pad):
    """TensorFlow's padding before and after, along one axis."""
    if pad == "valid":
        return 0, 0
    total = max((out_dim(n, k, s, pad) - 1) * s + k - n, 0)
    return total // 2, total - total // 2


def strides_of(layer):
    return layer["s"] if layer["s"] is not None else layer["k"]


def out_shape(layer, shape):
    kind = layer["kind"]
    if kind == "dense":
        return (layer["units"],)
    if kind == "act":
        return shape
    h, w, c = shape
    if kind in ("conv", "max", "avg"):
        (kh, kw), (sh, sw) = layer["k"], strides_of(layer)
        oh, ow = out_dim(h, kh, sh, layer["pad"]), out_dim(w, kw, sw, layer["pad"])
        return (oh, ow, layer["units"] if kind == "conv" else c)
    if kind == "gap":
        return (c,)
    return (h * w * c,)  # flatten


def fits(layer, shape):
    if layer["pad"] == "same":
        return True
    return layer["k"][0] <= shape[0] and layer["k"][1] <= shape[1]


def draw_pair(rng, lo, hi):
    """(h, w) of [lo, hi], and whether the plan writes it as one integer."""
    if rng.random() < 0.5:
        v = int(rng.integers(lo, hi + 1))
        return (v, v), True
    return (int(rng.integers(lo, hi + 1)), int(rng.integers(lo, hi + 1))), False


def draw_conv(rng, shape):
    while True:
        k, sq_k = draw_pair(rng, 1, 5)
        s, sq_s = draw_pair(rng, 1, 3)
        layer = {"kind": "conv", "units": int(rng.choice(FILTERS)), "k": k, "sq_k": sq_k,
                 "s": s, "sq_s": sq_s, "pad": str(rng.choice(["valid", "same"])),
                 "bias": bool(rng.random() < 0.7), "act": str(rng.choice(ACTS))}
        if fits(layer, shape):
            return layer


def draw_pool(rng, kind, shape):
    while True:
        k, sq_k = draw_pair(rng, 1, 4)
        s, sq_s = draw_pair(rng, 1, 3)
        if rng.random() < 0.25:
            s, sq_s = None, True  # the default: strides = pool size
        layer = {"kind": kind, "k": k, "sq_k": sq_k, "s": s, "sq_s": sq_s,
                 "pad": str(rng.choice(["valid", "same"]))}
        if fits(layer, shape):
            return layer


def pre_conv(rng):
    """A conv2d that keeps the image's size, before a pooling layer (so the
    pool's backward pass reaches weights)."""
    k = int(rng.integers(1, 4))
    return {"kind": "conv", "units": int(rng.choice([2, 3, 4])), "k": (k, k), "sq_k": True,
            "s": (1, 1), "sq_s": True, "pad": "same", "bias": True,
            "act": str(rng.choice(["linear", "tanh"]))}


def head(softmax):
    return [{"kind": "flatten"}, {"kind": "dense", "units": CLASSES,
                                  "act": "softmax" if softmax else "linear", "bias": True}]


def draw_model(rng, kind, shape, turn):
    """The layers of a drawn model of `kind`; a stack's two kinds are the
    turn-th of STACKS."""
    if kind == "conv":
        return [draw_conv(rng, shape)] + head(False)
    if kind in ("max", "avg"):
        first = pre_conv(rng)
        return [first, draw_pool(rng, kind, out_shape(first, shape))] + head(False)
    if kind == "gap":
        return [draw_conv(rng, shape), {"kind": "gap"},
                {"kind": "dense", "units": CLASSES, "act": "linear", "bias": True}]
    order = STACKS[turn % len(STACKS)]
    layers, cur = [], shape
    for k in order:
        layer = draw_conv(rng, cur) if k == "conv" else draw_pool(rng, k, cur)
        layers.append(layer)
        cur = out_shape(layer, cur)
    return layers + head(True)


def conv(units, k, s, pad, act="linear", bias=True):
    return {"kind": "conv", "units": units, "k": k, "sq_k": k[0] == k[1], "s": s,
            "sq_s": s[0] == s[1], "pad": pad, "bias": bias, "act": act}


def pool(kind, k, s, pad):
    return {"kind": kind, "k": k, "sq_k": k[0] == k[1], "s": s,
            "sq_s": s is None or s[0] == s[1], "pad": pad}


# Hand-picked cases on (5, 4, 2) images.
SPECIAL_SHAPE = (5, 4, 2)
SPECIAL = [
    [conv(3, (5, 4), (1, 1), "valid", "tanh")] + head(False),  # a 1 x 1 output
    [conv(4, (4, 4), (3, 3), "same", "relu")] + head(False),  # pads 1 before, 2 after / 0, 1
    [conv(2, (2, 2), (1, 1), "same", "sigmoid", False),  # pads 0 before, 1 after
     conv(16, (2, 4), (2, 1), "same", "linear")] + head(True),  # 16 filters over 2*4*2 = 16
    [conv(8, (3, 1), (1, 1), "same", "tanh"), pool("max", (3, 3), (2, 2), "valid")] + head(True),
    [conv(8, (2, 2), (1, 1), "same", "tanh"), pool("max", (2, 2), None, "valid")] + head(False),
    [conv(3, (3, 3), (1, 1), "same", "tanh"), pool("max", (2, 2), None, "same")] + head(False),
    [conv(3, (1, 1), (1, 1), "same", "linear"), pool("avg", (2, 4), (3, 1), "same")] + head(True),
    [conv(3, (2, 1), (1, 1), "same", "tanh"), pool("avg", (1, 1), (2, 2), "valid")] + head(False),
    [conv(5, (4, 2), (2, 3), "valid", "relu"), {"kind": "gap"},
     {"kind": "dense", "units": CLASSES, "act": "softmax", "bias": True}],
    # No dense layer: the loss's gradient straight into the pooling and the conv2d.
    [conv(CLASSES, (3, 2), (2, 1), "same", "linear"), {"kind": "gap"},
     {"kind": "act", "act": "softmax"}],
    # Windows larger than their (2 x 2, 3 x 2) input, with same padding.
    [conv(3, (3, 3), (3, 3), "same", "tanh"), conv(4, (4, 5), (1, 1), "same", "linear")] +
    head(True),
    [conv(2, (1, 1), (2, 2), "same", "tanh"), pool("max", (4, 3), (1, 2), "same")] + head(False),
    [conv(2, (2, 2), (2, 2), "same", "tanh"), pool("avg", (4, 4), (2, 1), "same")] + head(False),
]


def plan_layer(layer):
    """The layer in the plan's syntax."""
    kind = layer["kind"]
    if kind in ("flatten", "gap"):
        return "flatten" if kind == "flatten" else "global_average_pooling2d"
    if kind == "dense":
        return {"dense": layer["units"], "activation": layer["act"]}
    if kind == "act":
        return {"activation": layer["act"]}
    k = layer["k"][0] if layer["sq_k"] else list(layer["k"])
    if kind == "conv":
        out = {"conv2d": layer["units"], "kernel_size": k}
    else:
        out = {"max_pooling2d" if kind == "max" else "average_pooling2d": k}
    if layer["s"] is not None:
        out["strides"] = layer["s"][0] if layer["sq_s"] else list(layer["s"])
    out["padding"] = layer["pad"]
    if kind == "conv":
        out["use_bias"] = layer["bias"]
        out["activation"] = layer["act"]
    return out


def init_weights(rng, layers, shape):
    """Glorot-uniform kernels in torch's layouts, small random biases."""
    w, cur = {}, shape
    for i, layer in enumerate(layers):
        if layer["kind"] == "conv":
            (kh, kw), c, f = layer["k"], cur[2], layer["units"]
            lim = np.sqrt(6 / (kh * kw * (c + f)))
            w[f"layers.{i}.weight"] = rng.uniform(-lim, lim, (f, c, kh, kw))
        elif layer["kind"] == "dense":
            n, o = cur[0], layer["units"]
            lim = np.sqrt(6 / (n + o))
            w[f"layers.{i}.weight"] = rng.uniform(-lim, lim, (o, n))
        if layer["kind"] in ("conv", "dense") and layer["bias"]:
            w[f"layers.{i}.bias"] = rng.uniform(-0.1, 0.1, layer["units"])
        cur = out_shape(layer, cur)
    return {k: v.astype(np.float32) for k, v in w.items()}


def activate(h, act):
    if act == "relu":
        return torch.relu(h)
    if act == "tanh":
        return torch.tanh(h)
    if act == "sigmoid":
        return torch.sigmoid(h)
    return h  # linear; softmax is left to the loss and to predict's check


def forward(layers, p, x):
    """The model on NCHW images x, as TensorFlow computes it; the logits."""
    h = x
    for i, layer in enumerate(layers):
        kind = layer["kind"]
        if kind in ("conv", "max", "avg"):
            (kh, kw), (sh, sw) = layer["k"], strides_of(layer)
            top, bottom = pads(h.shape[2], kh, sh, layer["pad"])
            left, right = pads(h.shape[3], kw, sw, layer["pad"])
            pad = (left, right, top, bottom)
        if kind == "conv":
            h = F.conv2d(F.pad(h, pad), p[f"layers.{i}.weight"], p.get(f"layers.{i}.bias"),
                         stride=(sh, sw))
            h = activate(h, layer["act"])
        elif kind == "max":
            h = F.max_pool2d(F.pad(h, pad, value=float("-inf")), (kh, kw), (sh, sw))
        elif kind == "avg":
            ones = torch.ones(1, 1, h.shape[2], h.shape[3])
            total = F.avg_pool2d(F.pad(h, pad), (kh, kw), (sh, sw), divisor_override=1)
            pixels = F.avg_pool2d(F.pad(ones, pad), (kh, kw), (sh, sw), divisor_override=1)
            h = total / pixels
        elif kind == "gap":
            h = h.mean(dim=(2, 3))
        elif kind == "act":
            pass  # the last layer's softmax, left to the loss and to predict's check
        elif kind == "flatten":
            h = h.reshape(h.shape[0], -1)  # torch's (C, H, W) order, as cohort's weight files
        else:
            h = h @ p[f"layers.{i}.weight"].T
            if f"layers.{i}.bias" in p:
                h = h + p[f"layers.{i}.bias"]
    return h


def nchw(x):
    """NHWC images as an NCHW tensor with NCHW strides. Not permute().contiguous():
    with one channel its strides (HW, 1, W, 1) read as channels-last too, and
    torch 1.13's conv2d backward then corrupts the heap (a 1 x 1 kernel at
    strides [2, 1] crashed)."""
    return torch.tensor(x).permute(0, 3, 1, 2).clone(memory_format=torch.contiguous_format)


def torch_train(layers, init, x, y, batch):
    p = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in init.items()}
    X = nchw(x)
    Y = torch.tensor(y, dtype=torch.long)
    for _ in range(EPOCHS):
        for s in range(0, len(x), batch):
            loss = F.cross_entropy(forward(layers, p, X[s:s + batch]), Y[s:s + batch])
            for q in p.values():
                q.grad = None
            loss.backward()
            with torch.no_grad():
                for q in p.values():
                    q -= LR * q.grad
    return {k: v.detach().numpy() for k, v in p.items()}


def describe(layers):
    """The image layers, for messages."""
    return json.dumps([plan_layer(la) for la in layers
                       if la["kind"] not in ("flatten", "dense", "act")])


def run_set(cohort, tmp, tag, rng, shape, models, n, batch):
    """Train `models` (lists of layers) on n drawn images of `shape`; check each."""
    x = rng.standard_normal((n,) + shape).astype(np.float32)
    y = rng.integers(0, CLASSES, n).astype(np.int64)
    y[:CLASSES] = np.arange(CLASSES)  # every class present
    d = f"{tmp}/{tag}"
    os.makedirs(d)
    np.save(f"{d}/x.npy", x)
    np.save(f"{d}/y.npy", y)
    data = f"npy:{d}/x.npy,{d}/y.npy"
    inits, plan_models = [], []
    for m, layers in enumerate(models):
        inits.append(init_weights(rng, layers, shape))
        write_safetensors(f"{d}/init_{m}.safetensors", inits[-1])
        softmax = layers[-1]["act"] == "softmax"
        loss = ("sparse_categorical_crossentropy" if softmax else
                {"name": "sparse_categorical_crossentropy", "from_logits": True})
        plan_models.append({"name": f"m{m}", "layers": [plan_layer(la) for la in layers],
                            "loss": loss, "init_from": f"{d}/init_{m}.safetensors"})
    plan = {"data": {"train": data},
            "defaults": {"epochs": EPOCHS, "batch_size": batch, "shuffle": False,
                         "optimizer": {"name": "sgd", "lr": LR, "momentum": 0.0}},
            "models": plan_models}
    if not cohort_train(check, cohort, plan, d, tag):
        return
    X = nchw(x)
    for m, layers in enumerate(models):
        name = f"{tag}/m{m} {shape} {describe(layers)}"
        want = torch_train(layers, inits[m], x, y, batch)
        got = read_safetensors(f"{d}/out/models/m{m}.safetensors")
        check(sorted(got) == sorted(want), f"{name}: tensors {sorted(got)} != {sorted(want)}")
        worst, _ = weights_match(check, name, got, want, inits[m], moved=1e-4)

        # The forward pass: cohort predict on its weights, torch on the same.
        out = f"{d}/pred_{m}.csv"
        r = subprocess.run([cohort, "predict", f"{d}/out/models/m{m}.safetensors", "--data", data,
                            "--out", out], capture_output=True, text=True)
        check(r.returncode == 0, f"{name}: cohort predict exited {r.returncode}: {r.stderr}")
        if r.returncode != 0:
            continue
        with open(out) as f:
            rows = list(csv.DictReader(f))
        mine = np.array([[float(row[f"p{j}"]) for j in range(CLASSES)] for row in rows])
        with torch.no_grad():
            theirs = forward(layers, {k: torch.tensor(v.copy()) for k, v in got.items()}, X)
            if layers[-1]["act"] == "softmax":
                theirs = theirs.softmax(dim=1)
            theirs = theirs.numpy()
        ok = mine.shape == theirs.shape and bool(
            np.all(np.abs(mine - theirs) <= 1e-6 + 1e-5 * np.abs(theirs)))
        gap = float(np.max(np.abs(mine - theirs))) if mine.shape == theirs.shape else float("inf")
        check(ok, f"{name}: cohort predict and torch differ by up to {gap:.3g}")
        print(f"{NAME}: {name}: weights {worst:.2g}, outputs {gap:.2g} apart")


def main():
    cohort = cohort_bin(NAME)
    if not cohort:
        return 1
    torch.set_num_threads(1)
    count = 0
    with tempfile.TemporaryDirectory() as tmp:
        for j, (seed, n, batch) in enumerate(SETS):
            rng = np.random.default_rng(seed)
            shape = (int(rng.integers(5, 12)), int(rng.integers(5, 12)), int(rng.integers(1, 4)))
            models = [draw_model(rng, kind, shape, 2 * j + m) for m, kind in enumerate(KINDS)]
            run_set(cohort, tmp, f"seed{seed}", rng, shape, models, n, batch)
            count += len(models)
        run_set(cohort, tmp, "special", np.random.default_rng(1), SPECIAL_SHAPE, SPECIAL, 11, 11)
        count += len(SPECIAL)
    return check.done(f"{count} models")


if __name__ == "__main__":
    sys.exit(main())
