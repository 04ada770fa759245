"""torch_ensemble: K same-shaped MLPs trained at once the way the PyTorch tutorial on model
ensembling does it (torch.func.stack_module_state + vmap over functional_call), bench/fused's
workload: Linear(784, 128) + ReLU + Linear(128, 10), Glorot-uniform weights, zero biases,
cross-entropy on the logits, Adam (eps 1e-7) lr 0.001 on the stacked parameters (elementwise,
so each model's own Adam), batch 64, one epoch over Fashion-MNIST's 60000 training images, every
model the same batches (the tutorial's vmap over parameters with one minibatch: cohort's
shared_order). Prints one JSON object with the seconds of the epoch and the model-samples per
second. Run it in scripts/pyenv peers (torch 2.x)."""
import argparse
import copy
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

import fmnist  # bench/peers/fmnist.py


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: as it comes)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the vmapped step")
    ap.add_argument("--data", default=fmnist.ROOT)
    ap.add_argument("--max-batches", type=int, default=0, help="stop after this many (0: all)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    xs, ys = fmnist.load("train", args.data)
    x, y = torch.from_numpy(xs.reshape(-1, 784)), torch.from_numpy(ys)

    def make():
        m = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
        for layer in m:
            if isinstance(layer, nn.Linear):
                nn.init.xavier_uniform_(layer.weight)
                nn.init.zeros_(layer.bias)
        return m

    models = [make() for _ in range(args.models)]
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")

    def loss_fn(p, b, xb, yb):
        return F.cross_entropy(functional_call(base, (p, b), (xb,)), yb)

    step = vmap(grad_and_value(loss_fn), in_dims=(0, 0, None, None))
    if args.compile:
        step = torch.compile(step)
    leaves = list(params.values())
    opt = torch.optim.Adam(leaves, lr=0.001, betas=(0.9, 0.999), eps=1e-7)
    n = x.shape[0]
    perm = torch.randperm(n)
    batches = (n + 63) // 64
    if args.max_batches:
        batches = min(batches, args.max_batches)
    t0 = time.perf_counter()
    losses = None
    for i in range(batches):
        idx = perm[i * 64:(i + 1) * 64]
        grads, losses = step(params, buffers, x[idx], y[idx])
        for k, p in params.items():
            p.grad = grads[k]
        opt.step()
    seconds = time.perf_counter() - t0
    samples = min(n, batches * 64)
    json.dump({"models": args.models, "threads": torch.get_num_threads(), "compiled": args.compile,
               "torch": torch.__version__, "batches": batches, "seconds": seconds,
               "model_samples_per_second": args.models * samples / seconds,
               "last_losses_mean": float(losses.detach().mean())}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
