#!/usr/bin/python3
"""torch_cnn: examples/cnn.yaml in plain PyTorch, the reference bench/cnn times cohort against.

Two models, one after another, on Fashion-MNIST as NCHW tensors [n, 1, 28, 28]:
  mnist_convnet  Conv2d(1,32,3)+ReLU, MaxPool2d(2), Conv2d(32,64,3)+ReLU, MaxPool2d(2),
                 Flatten, Dropout(0.5), Linear(1600,10)   (Keras's mnist_convnet example)
  convnet_bn     Conv2d(1,32,3), BatchNorm2d, ReLU, MaxPool2d(2), Conv2d(32,64,3), BatchNorm2d,
                 ReLU, MaxPool2d(2), Flatten, Linear(1600,128)+ReLU, Dropout(0.5),
                 Linear(128,10); the two Conv2d without bias (use_bias: false in the plan)
BatchNorm2d(momentum=0.01, eps=1e-3) is Keras's BatchNormalization (momentum 0.99). Glorot-
uniform weights and zero biases (Keras's initializers), Adam lr 0.001 (betas 0.9/0.999, Keras's
eps 1e-7), batch 128, a fresh shuffle each epoch, the last 10% of the training set as validation
(evaluated each epoch), test accuracy at the end, cross-entropy on the logits (= softmax +
sparse categorical cross-entropy). Writes one JSON object (--out, or stdout).

--max-batches N stops each epoch after N training batches (and evaluates at most N batches of
the validation and test sets): a quick measurement. The JSON then gives seconds per batch and
the epoch time extrapolated to the full 422 batches (+ the full validation pass).

FLOPs: the convolutions' and the dense layer's multiply-adds (MACs) per sample, forward 2*MACs,
backward 4*MACs (weight and input gradients), except that the first layer's input gradient is
not computed: 4*MACs for it in all. Times the training samples of an epoch, that is the training
FLOPs per epoch. Pooling, batch norm, activations and the optimizer are not counted.

Memory: as bench/torch_seed.py: per model, the peak resident set size of this process while
that model trains (VmHWM, reset through /proc/self/clear_refs before each model; where the reset
is refused, ru_maxrss, the process-wide high-water mark), and that peak minus the RSS before.

--device cuda (or cuda:N) trains on a GPU (scripts/gpu-check): the data sets are copied to the
GPU once, each epoch's shuffle is still drawn on the CPU from the same generator (so the batches
are those of a CPU run of the same seed) and copied over, the weights are drawn on the CPU and
then moved, cuDNN is deterministic (no benchmarking), TF32 is off (full float32), a throwaway
convolution starts CUDA, cuBLAS and cuDNN before the first model, the loss and accuracy sums
stay on the GPU (one host synchronization per epoch and per evaluation, not per batch), and each
model's record adds the CUDA allocator's peak (cuda_peak_allocated_bytes). The default, cpu,
runs exactly as without the option.
"""
import argparse
import json
import math
import os
import re
import resource
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_seed import read_idx, reset_peak_rss, status_kib  # noqa: E402  (the same readers and RSS measurement)

# --compile: each model through torch.compile (main sets it).
COMPILE = False

MODEL_NAMES = ["mnist_convnet", "convnet_bn"]  # as in examples/cnn.yaml
VALIDATION_SPLIT = 0.1
LR = 0.001


def load_split(root, prefix):
    """Images as float32 NCHW [n, 1, H, W] in [0, 1], labels as int64."""
    x = read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz"))
    if x.ndim != 3:
        raise ValueError(f"{root}/{prefix}-images: expected [n, H, W], got {list(x.shape)}")
    x = torch.from_numpy(x.astype(np.float32)[:, None, :, :] / 255.0)
    y = torch.from_numpy(y.astype(np.int64))
    return x, y


def make_model(name):
    if name == "mnist_convnet":
        layers = [nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                  nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                  nn.Flatten(), nn.Dropout(0.5), nn.Linear(1600, 10)]
    elif name == "convnet_bn":
        # use_bias: false in the plan: batch normalization's beta does the bias's work
        layers = [nn.Conv2d(1, 32, 3, bias=False), nn.BatchNorm2d(32, eps=1e-3, momentum=0.01),
                  nn.ReLU(), nn.MaxPool2d(2),
                  nn.Conv2d(32, 64, 3, bias=False), nn.BatchNorm2d(64, eps=1e-3, momentum=0.01),
                  nn.ReLU(),
                  nn.MaxPool2d(2),
                  nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Dropout(0.5),
                  nn.Linear(128, 10)]
    else:
        raise ValueError(f"unknown model {name!r} (known: {', '.join(MODEL_NAMES)})")
    model = nn.Sequential(*layers)
    for m in model:
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)  # fan_in = in*kh*kw, fan_out = out*kh*kw: Keras's
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return model


def start_cuda(dev):
    """Full float32 and deterministic cuDNN on DEV, then one convolution forward and backward on
    zeros (no random numbers drawn) so that CUDA's context, cuBLAS and cuDNN exist before the
    first model is timed."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    x = torch.zeros(8, 1, 28, 28, device=dev)
    w = torch.zeros(4, 1, 3, 3, device=dev, requires_grad=True)
    y = torch.nn.functional.conv2d(x, w)
    (y.flatten(1) @ torch.zeros(y[0].numel(), 2, device=dev)).sum().backward()
    torch.cuda.synchronize(dev)


def layer_macs(model, sample_shape):
    """[(layer description, multiply-adds per sample)] of every Conv2d and Linear, in order,
    from the output shapes of one forward pass of a single sample."""
    found = []

    def hook(mod, inp, out):
        if isinstance(mod, nn.Conv2d):
            _, c_out, h, w = out.shape
            kh, kw = mod.kernel_size
            macs = h * w * c_out * (mod.in_channels // mod.groups) * kh * kw
            found.append((f"conv2d {mod.in_channels}->{c_out} {kh}x{kw} out {h}x{w}", macs))
        elif isinstance(mod, nn.Linear):
            found.append((f"dense {mod.in_features}->{mod.out_features}",
                          mod.in_features * mod.out_features))

    handles = [m.register_forward_hook(hook) for m in model
               if isinstance(m, (nn.Conv2d, nn.Linear))]
    was_training = model.training
    model.eval()
    with torch.no_grad():
        model(torch.zeros((1,) + tuple(sample_shape)))
    model.train(was_training)
    for h in handles:
        h.remove()
    return found


def flops_per_sample(macs):
    """Training FLOPs of one sample: 2*MACs forward + 2*MACs weight gradient + 2*MACs input
    gradient, without the first layer's input gradient."""
    return sum((4 if i == 0 else 6) * m for i, (_, m) in enumerate(macs))


def conv_kernels_used(model, xb, yb, loss_fn):
    """Names of the convolution operators one training step runs (aten::mkldnn_convolution when
    oneDNN does the work), from the autograd profiler. Runs forward and backward on a copy of
    the model, so the trained one is untouched; it draws dropout masks from the global RNG,
    so call it after training."""
    import copy
    m = copy.deepcopy(model)
    m.train()
    try:
        with torch.autograd.profiler.profile() as prof:
            loss_fn(m(xb), yb).backward()
    except Exception as e:  # the profiler is a diagnostic only
        return [f"profiler failed: {e}"]
    names = sorted({e.name for e in prof.function_events if "conv" in e.name.lower()})
    return names


def cpu_capability():
    """The vector ISA PyTorch's own CPU kernels dispatch to ("AVX2", "AVX512"), from
    torch.__config__.show(); None where it does not say."""
    try:
        m = re.search(r"CPU capability usage:\s*(\S+)", torch.__config__.show())
    except Exception:  # diagnostic only
        return None
    return m.group(1) if m else None


def evaluate(model, loss_fn, x, y, batch, max_batches=None):
    """Mean loss and accuracy of MODEL on (x, y) in batches of BATCH (at most MAX_BATCHES of
    them), the samples evaluated and the seconds it took."""
    t0 = time.perf_counter()
    n = x.shape[0] if max_batches is None else min(x.shape[0], max_batches * batch)
    total_loss, correct = 0.0, 0
    if x.is_cuda:  # the sums stay on the GPU: one synchronization, not one per batch
        total_loss = torch.zeros((), dtype=torch.float64, device=x.device)
        correct = torch.zeros((), dtype=torch.int64, device=x.device)
    with torch.no_grad():
        for i in range(0, n, batch):
            logits = model(x[i : min(i + batch, n)])
            yb = y[i : min(i + batch, n)]
            if x.is_cuda:
                total_loss += loss_fn(logits, yb).double() * yb.shape[0]
                correct += (logits.argmax(1) == yb).sum()
            else:
                total_loss += loss_fn(logits, yb).item() * yb.shape[0]
                correct += (logits.argmax(1) == yb).sum().item()
    if x.is_cuda:
        total_loss, correct = total_loss.item(), correct.item()  # synchronizes
    return total_loss / n, correct / n, n, time.perf_counter() - t0


def train_one(name, data, epochs, batch, seed, reset_ok, max_batches, progress=False,
              dev=None):
    x_train, y_train, x_val, y_val, x_test, y_test = data
    cuda = dev is not None and dev.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)
    rss_before = status_kib("VmRSS")
    torch.manual_seed(seed)  # seeds the GPU's generators too (dropout masks there)
    gen = torch.Generator().manual_seed(seed)  # the shuffles: on the CPU for every device
    model = make_model(name)
    macs = layer_macs(model, x_train.shape[1:])  # on the plain module: a compiled one
    if COMPILE:                                   # cannot be iterated for its layers
        model = torch.compile(model)  # torch 2.x: the Inductor's C++ kernels on a CPU
    per_sample = flops_per_sample(macs)
    if cuda:
        model.to(dev)  # after layer_macs, which runs a CPU sample
        torch.cuda.reset_peak_memory_stats(dev)
    opt = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    n = x_train.shape[0]
    full_batches = math.ceil(n / batch)
    n_val = x_val.shape[0]
    full_val_batches = math.ceil(n_val / batch)
    hist = {"loss": [], "accuracy": [], "val_loss": [], "val_accuracy": [], "seconds": [],
            "train_seconds": [], "val_seconds": [], "batches": [], "samples": [],
            "val_samples": []}
    batch_seconds = []  # every training batch, every epoch
    first_batch_of_epoch = []
    samples_trained = 0
    start = time.perf_counter()
    for _ in range(epochs):
        sync()
        t0 = time.perf_counter()
        model.train()
        perm = torch.randperm(n, generator=gen)
        total_loss, correct, seen, nb = 0.0, 0, 0, 0
        if cuda:  # the sums stay on the GPU, read once after the epoch
            perm = perm.to(dev)
            total_loss = torch.zeros((), dtype=torch.float64, device=dev)
            correct = torch.zeros((), dtype=torch.int64, device=dev)
        for i in range(0, n, batch):
            if max_batches is not None and nb >= max_batches:
                break
            if max_batches is not None:
                sync()  # per-batch times only where they are reported
            tb = time.perf_counter()
            idx = perm[i : i + batch]
            xb, yb = x_train[idx], y_train[idx]
            logits = model(xb)
            loss = loss_fn(logits, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if cuda:
                total_loss += loss.detach().double() * yb.shape[0]
                correct += (logits.argmax(1) == yb).sum()
                if max_batches is not None:
                    sync()
            else:
                total_loss += loss.item() * yb.shape[0]
                correct += (logits.argmax(1) == yb).sum().item()
            seen += yb.shape[0]
            first_batch_of_epoch.append(nb == 0)
            batch_seconds.append(time.perf_counter() - tb)
            nb += 1
        if cuda:
            total_loss, correct = total_loss.item(), correct.item()  # synchronizes
        t1 = time.perf_counter()
        model.eval()
        vl, va, vn, _ = evaluate(model, loss_fn, x_val, y_val, batch, max_batches)
        t2 = time.perf_counter()
        samples_trained += seen
        hist["loss"].append(total_loss / seen)
        hist["accuracy"].append(correct / seen)
        hist["val_loss"].append(vl)
        hist["val_accuracy"].append(va)
        hist["seconds"].append(t2 - t0)
        hist["train_seconds"].append(t1 - t0)
        hist["val_seconds"].append(t2 - t1)
        hist["batches"].append(nb)
        hist["samples"].append(seen)
        hist["val_samples"].append(vn)
        if progress:
            sys.stderr.write(f"{name} epoch {len(hist['loss'])}/{epochs}: loss "
                             f"{hist['loss'][-1]:.4f} accuracy {hist['accuracy'][-1]:.4f} "
                             f"val_loss {vl:.4f} val_accuracy {va:.4f} ({t2 - t0:.1f}s)\n")
            sys.stderr.flush()
    seconds = time.perf_counter() - start
    tl, ta, tn, ts = evaluate(model, loss_fn, x_test, y_test, batch, max_batches)
    peak = status_kib("VmHWM") if reset_ok else None
    if peak is None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    train_seconds = sum(hist["train_seconds"])
    rec = {
        "name": name,
        "params": sum(p.numel() for p in model.parameters()),
        "layers_macs_per_sample": [{"layer": d, "macs": m} for d, m in macs],
        "train_flops_per_sample": per_sample,
        "train_flops_per_epoch": per_sample * n,  # a full epoch: every training sample
        "train_flops_done": per_sample * samples_trained,
        "gflops_training": per_sample * samples_trained / train_seconds / 1e9
        if train_seconds > 0 else None,
        "batches_per_epoch": full_batches,
        "history": hist,
        "seconds": seconds,
        "test": {"loss": tl, "accuracy": ta, "samples": tn, "seconds": ts},
        "peak_rss_bytes": peak * 1024,
        "rss_before_bytes": rss_before * 1024 if rss_before is not None else None,
        "peak_rss_delta_bytes": (peak - rss_before) * 1024 if rss_before is not None else None,
    }
    if max_batches is not None:
        # Per batch: the mean over every batch, and "warm", without each epoch's first batch
        # (the first one also creates oneDNN's primitives and touches fresh memory).
        warm = [s for s, first in zip(batch_seconds, first_batch_of_epoch) if not first]
        spb = sum(batch_seconds) / len(batch_seconds)
        spb_warm = sum(warm) / len(warm) if warm else spb
        val_batches = [math.ceil(v / batch) for v in hist["val_samples"]]
        vspb = sum(hist["val_seconds"]) / max(1, sum(val_batches))
        rec["partial"] = {
            "max_batches": max_batches,
            "seconds_per_batch": spb,
            "seconds_per_batch_warm": spb_warm,
            "seconds_per_val_batch": vspb,
            "extrapolated_train_seconds_per_epoch": spb_warm * full_batches,
            "extrapolated_epoch_seconds": spb_warm * full_batches + vspb * full_val_batches,
            "note": "extrapolated to a full epoch from the warm batches, validation included",
        }
    if cuda:
        rec["cuda_peak_allocated_bytes"] = torch.cuda.max_memory_allocated(dev)
    rec["kernels"] = conv_kernels_used(model, x_train[:batch], y_train[:batch], loss_fn)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--models", help=f"comma-separated subset of {','.join(MODEL_NAMES)}")
    ap.add_argument("--threads", default="default",
                    help="torch.set_num_threads value, or 'default' to leave torch as it comes")
    ap.add_argument("--out", help="write the JSON here (default: stdout)")
    ap.add_argument("--max-batches", type=int,
                    help="stop each epoch after N training batches (and evaluate at most N "
                         "batches of validation and test): a quick measurement")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=os.environ.get("COHORT_DATA",
                                                      "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--progress", action="store_true",
                    help="one line per epoch (and the test result) on stderr")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile each model (torch 2.x; PyTorch eager without it)")
    ap.add_argument("--flush-denormal", action="store_true",
                    help="torch.set_flush_denormal(True), as cohort trains")
    ap.add_argument("--device", default="cpu",
                    help="cpu (the default), or cuda / cuda:N: train on that GPU, the data "
                         "resident there, cuDNN deterministic, TF32 off")
    args = ap.parse_args()
    if args.compile and not hasattr(torch, "compile"):
        ap.error(f"--compile needs torch 2.x (this is {torch.__version__}): run it with "
                 "scripts/pyenv peers -- python ...")
    global COMPILE
    COMPILE = args.compile
    if args.epochs < 1 or args.batch < 1:
        ap.error("--epochs and --batch must be at least 1")
    if args.max_batches is not None and args.max_batches < 1:
        ap.error("--max-batches must be at least 1")
    names = MODEL_NAMES
    if args.models:
        names = [s.strip() for s in args.models.split(",") if s.strip()]
        bad = [s for s in names if s not in MODEL_NAMES]
        if bad:
            ap.error(f"--models: unknown {', '.join(bad)} (known: {', '.join(MODEL_NAMES)})")

    default_threads = torch.get_num_threads()
    if args.threads != "default":
        try:
            torch.set_num_threads(int(args.threads))
        except ValueError:
            ap.error(f"--threads: expected a number or 'default', got {args.threads!r}")
    flushed = torch.set_flush_denormal(True) if args.flush_denormal else False
    try:
        dev = torch.device(args.device)
    except RuntimeError as e:
        ap.error(f"--device: {e}")
    if dev.type not in ("cpu", "cuda"):
        ap.error(f"--device: cpu or cuda[:N], not {args.device!r}")
    cuda = dev.type == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            sys.exit(f"torch_cnn: --device {args.device}: torch {torch.__version__} sees no GPU "
                     f"(built with CUDA {torch.version.cuda})")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())

    t_load = time.perf_counter()
    try:
        x, y = load_split(args.data, "train")
        x_test, y_test = load_split(args.data, "t10k")
    except (OSError, ValueError) as e:
        sys.exit(f"torch_cnn: {e} (install dataset-fashion-mnist or set COHORT_DATA)")
    n_train = int(math.floor(x.shape[0] * (1.0 - VALIDATION_SPLIT)))  # as Keras splits
    n_val = x.shape[0] - n_train
    data = (x[:n_train], y[:n_train], x[n_train:], y[n_train:], x_test, y_test)
    if cuda:
        data = tuple(t.to(dev) for t in data)
    load_seconds = time.perf_counter() - t_load
    cuda_start_seconds = None
    if cuda:
        t_start = time.perf_counter()
        start_cuda(dev)
        cuda_start_seconds = time.perf_counter() - t_start

    reset_ok = reset_peak_rss()
    results = []
    for name in names:
        reset_ok = reset_peak_rss() and reset_ok
        results.append(train_one(name, data, args.epochs, args.batch, args.seed, reset_ok,
                                 args.max_batches, args.progress, dev if cuda else None))
        if args.progress:
            r = results[-1]
            sys.stderr.write(f"{name}: test loss {r['test']['loss']:.4f} accuracy "
                             f"{r['test']['accuracy']:.4f}\n")

    out = {
        "torch_version": torch.__version__,
        "compiled": COMPILE,
        "device": str(dev),
        "threads_requested": args.threads,
        "torch_default_threads": default_threads,
        "torch_threads": torch.get_num_threads(),
        "mkldnn_available": torch.backends.mkldnn.is_available(),
        "mkldnn_enabled": bool(torch.backends.mkldnn.enabled),
        "mkldnn_used": any("mkldnn" in k for r in results for k in r["kernels"]),
        "cpu_capability": cpu_capability(),
        "flush_denormal": flushed,
        "openblas_num_threads_env": os.environ.get("OPENBLAS_NUM_THREADS"),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "memory_measure": ("VmHWM per model (reset via /proc/self/clear_refs)" if reset_ok
                           else "ru_maxrss (process-wide high-water mark)"),
        "epochs": args.epochs, "batch_size": args.batch, "max_batches": args.max_batches,
        "train_samples": n_train, "validation_samples": n_val,
        "test_samples": int(x_test.shape[0]),
        "load_seconds": load_seconds,
        "process_max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "models": results,
    }
    if cuda:
        out["gpu"] = torch.cuda.get_device_name(dev)
        out["cuda_version"] = torch.version.cuda
        out["cudnn_version"] = torch.backends.cudnn.version()
        out["cudnn_deterministic"] = bool(torch.backends.cudnn.deterministic)
        out["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
        try:
            out["tf32"] = bool(torch.backends.cuda.matmul.allow_tf32 or
                               torch.backends.cudnn.allow_tf32)
        except RuntimeError as e:  # a torch that refuses the legacy flags' getters
            out["tf32"] = f"unknown: {e}"
        out["cuda_start_seconds"] = cuda_start_seconds
    text = json.dumps(out, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
