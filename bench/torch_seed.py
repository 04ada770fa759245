#!/usr/bin/python3
"""torch_seed: examples/seed.yaml in plain PyTorch, the reference bench/run times cohort against.

Three models, one after another: Linear(784, H) + ReLU + Linear(H, 10), H = 128, 512, 256,
Adam lr 0.001, 0.0005, 0.001 (Keras defaults: betas 0.9/0.999, eps 1e-7), batch 64, shuffle
each epoch, the last 20% of the training set as validation (evaluated at batch 64 each epoch),
test accuracy at the end. Glorot-uniform weights, zero biases, cross-entropy on the logits
(= softmax + sparse categorical cross-entropy). Writes one JSON object (--out, or stdout).

Memory: per model, the peak resident set size of this process while that model trains
(VmHWM of /proc/self/status, reset through /proc/self/clear_refs before each model), and that
peak minus the RSS just before the model started. Where the reset is not allowed, the
process-wide high-water mark resource.getrusage(RUSAGE_SELF).ru_maxrss is used instead.
"""
import argparse
import ctypes
import gc
import gzip
import json
import os
import resource
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn

# --compile: each model through torch.compile (main sets it).
COMPILE = False

MODELS = [  # name, hidden units, learning rate: as in examples/seed.yaml
    ("small_model", 128, 0.001),
    ("large_model", 512, 0.0005),
    ("medium_model", 256, 0.001),
]


def read_idx(path):
    """Return the array stored in an IDX file (gzip-compressed or not)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {body.size} bytes of data, the header says {dims}")
    return body.reshape(dims)


def load_split(root, prefix):
    x = read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(x.reshape(x.shape[0], -1).astype(np.float32) / 255.0)
    y = torch.from_numpy(y.astype(np.int64))
    return x, y


def status_kib(field):
    """Value of FIELD (VmRSS, VmHWM) in /proc/self/status, in KiB; None where unreadable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_rss():
    """Return freed heap to the system, then reset VmHWM to the current RSS; return True where
    the kernel allowed the reset. Without the trim, a model reuses the heap the previous one
    freed and its RSS delta reads as zero."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def make_model(hidden):
    model = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    for m in model:
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def evaluate(model, loss_fn, x, y, batch):
    """Mean loss and accuracy of MODEL on (x, y), in batches of BATCH."""
    total_loss, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            logits = model(x[i : i + batch])
            yb = y[i : i + batch]
            total_loss += loss_fn(logits, yb).item() * yb.shape[0]
            correct += (logits.argmax(1) == yb).sum().item()
    return total_loss / x.shape[0], correct / x.shape[0]


def train_one(name, hidden, lr, data, epochs, batch, seed, reset_ok):
    x_train, y_train, x_val, y_val, x_test, y_test = data
    rss_before = status_kib("VmRSS")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = make_model(hidden)
    if COMPILE:
        model = torch.compile(model)  # torch 2.x: the Inductor's C++ kernels on a CPU
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    n = x_train.shape[0]
    hist = {"loss": [], "accuracy": [], "val_loss": [], "val_accuracy": [],
            "seconds": [], "train_seconds": []}
    start = time.perf_counter()
    for _ in range(epochs):
        t0 = time.perf_counter()
        model.train()
        perm = torch.randperm(n, generator=gen)
        total_loss, correct = 0.0, 0
        for i in range(0, n, batch):
            idx = perm[i : i + batch]
            xb, yb = x_train[idx], y_train[idx]
            logits = model(xb)
            loss = loss_fn(logits, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total_loss += loss.item() * yb.shape[0]
            correct += (logits.argmax(1) == yb).sum().item()
        t1 = time.perf_counter()
        model.eval()
        vl, va = evaluate(model, loss_fn, x_val, y_val, batch)
        t2 = time.perf_counter()
        hist["loss"].append(total_loss / n)
        hist["accuracy"].append(correct / n)
        hist["val_loss"].append(vl)
        hist["val_accuracy"].append(va)
        hist["seconds"].append(t2 - t0)
        hist["train_seconds"].append(t1 - t0)
    seconds = time.perf_counter() - start
    tl, ta = evaluate(model, loss_fn, x_test, y_test, batch)
    peak = status_kib("VmHWM") if reset_ok else None
    if peak is None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    params = sum(p.numel() for p in model.parameters())
    return {
        "name": name, "hidden": hidden, "lr": lr, "params": params,
        "history": hist, "seconds": seconds,
        "test": {"loss": tl, "accuracy": ta},
        "peak_rss_bytes": peak * 1024,
        "rss_before_bytes": rss_before * 1024 if rss_before is not None else None,
        "peak_rss_delta_bytes": (peak - rss_before) * 1024 if rss_before is not None else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", default="default",
                    help="torch.set_num_threads value, or 'default' to leave torch as it comes")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=os.environ.get("COHORT_DATA",
                                                      "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--out", help="write the JSON here (default: stdout)")
    ap.add_argument("--models", help="comma-separated subset of model names (for testing)")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile each model (torch 2.x; PyTorch eager without it)")
    ap.add_argument("--flush-denormal", action="store_true",
                    help="torch.set_flush_denormal(True): denormals flushed to zero, as cohort "
                         "trains")
    args = ap.parse_args()
    if args.compile and not hasattr(torch, "compile"):
        ap.error(f"--compile needs torch 2.x (this is {torch.__version__}): run it with "
                 "scripts/pyenv peers -- python ...")
    global COMPILE
    COMPILE = args.compile
    if args.epochs < 1 or args.batch < 1:
        ap.error("--epochs and --batch must be at least 1")

    default_threads = torch.get_num_threads()
    if args.threads != "default":
        try:
            torch.set_num_threads(int(args.threads))
        except ValueError:
            ap.error(f"--threads: expected a number or 'default', got {args.threads!r}")

    flushed = torch.set_flush_denormal(True) if args.flush_denormal else False

    t_load = time.perf_counter()
    try:
        x, y = load_split(args.data, "train")
        x_test, y_test = load_split(args.data, "t10k")
    except (OSError, ValueError) as e:
        sys.exit(f"torch_seed: {e} (install dataset-fashion-mnist or set COHORT_DATA)")
    n_val = int(round(x.shape[0] * 0.2))
    n_train = x.shape[0] - n_val
    data = (x[:n_train], y[:n_train], x[n_train:], y[n_train:], x_test, y_test)
    load_seconds = time.perf_counter() - t_load

    wanted = set(args.models.split(",")) if args.models else None
    reset_ok = reset_peak_rss()
    results = []
    for name, hidden, lr in MODELS:
        if wanted is not None and name not in wanted:
            continue
        reset_ok = reset_peak_rss() and reset_ok
        results.append(train_one(name, hidden, lr, data, args.epochs, args.batch, args.seed,
                                 reset_ok))

    out = {
        "torch_version": torch.__version__,
        "compiled": COMPILE,
        "threads_requested": args.threads,
        "torch_default_threads": default_threads,
        "torch_threads": torch.get_num_threads(),
        "flush_denormal": flushed,
        "openblas_num_threads_env": os.environ.get("OPENBLAS_NUM_THREADS"),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "memory_measure": ("VmHWM per model (reset via /proc/self/clear_refs)" if reset_ok
                           else "ru_maxrss (process-wide high-water mark)"),
        "epochs": args.epochs, "batch_size": args.batch,
        "train_samples": n_train, "validation_samples": n_val,
        "test_samples": int(x_test.shape[0]),
        "load_seconds": load_seconds,
        "process_max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "models": results,
    }
    text = json.dumps(out, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
