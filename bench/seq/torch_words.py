#!/usr/bin/env python3
"""torch_words: examples/words.yaml's sequence models in plain PyTorch, the peer bench/seq/run
times cohort against (issue 37's speed table).

    torch_words.py --x X.npy --y Y.npy [--models lstm,gru,bigru,conv1d,transformer]
                   [--epochs 3] [--batch 128] [--threads N] [--compile] [--out FILE]

X is [n, T] integer tokens (0 = padding, after the word), Y [n] class labels. Every model is
what the plan trains, written the way a PyTorch user would write it fast:
  lstm         Embedding(V, 32, padding 0) + LSTM(64), the output at each word's last letter
               (post-padding: the steps after it cannot change it) + Linear(64, C)
  gru          the same with GRU(64)
  bigru        Embedding + bidirectional GRU(32) over packed sequences (the reverse direction
               must start at the last letter) + Linear(64, C)
  conv1d       Embedding (no mask) + causal Conv1d(32, 64, 3) + ReLU + causal Conv1d(64, 64, 3,
               dilation 2) + ReLU + max over time + Linear(64, C)
  transformer  Embedding + learned positions + 2 pre-norm encoder blocks (LayerNorm, 4-head
               self-attention with key_dim 8 and the padding mask; LayerNorm, Linear(32, 128),
               GELU, Linear(128, 32); each a residual) + masked mean over time + Linear(32, C)
Adam (Keras's defaults, lr 0.001), batch 128, a shuffled order each epoch. Prints one JSON
object: per model the seconds of each epoch (the first includes warm-up; the table uses the
median of the others), the last epoch's training loss and accuracy.
"""
import argparse
import json
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

E = 32


class Recurrent(nn.Module):
    def __init__(self, vocab, classes, cell):
        super().__init__()
        self.emb = nn.Embedding(vocab, E, padding_idx=0)
        self.rnn = cell(E, 64, batch_first=True)
        self.out = nn.Linear(64, classes)

    def forward(self, x):
        lengths = (x != 0).sum(1).clamp(min=1)
        h, _ = self.rnn(self.emb(x))
        last = h[torch.arange(x.shape[0]), lengths - 1]
        return self.out(last)


class BiGRU(nn.Module):
    def __init__(self, vocab, classes):
        super().__init__()
        self.emb = nn.Embedding(vocab, E, padding_idx=0)
        self.rnn = nn.GRU(E, 32, batch_first=True, bidirectional=True)
        self.out = nn.Linear(64, classes)

    def forward(self, x):
        lengths = (x != 0).sum(1).clamp(min=1)
        packed = nn.utils.rnn.pack_padded_sequence(self.emb(x), lengths.cpu(), batch_first=True,
                                                   enforce_sorted=False)
        _, h = self.rnn(packed)  # h [2, n, 32]: the forward's last step, the reverse's first
        return self.out(torch.cat([h[0], h[1]], dim=1))


class Conv(nn.Module):
    def __init__(self, vocab, classes):
        super().__init__()
        self.emb = nn.Embedding(vocab, E)
        self.c1 = nn.Conv1d(E, 64, 3)
        self.c2 = nn.Conv1d(64, 64, 3, dilation=2)
        self.out = nn.Linear(64, classes)

    def forward(self, x):
        h = self.emb(x).transpose(1, 2)
        h = F.relu(self.c1(F.pad(h, (2, 0))))  # causal: kernel - 1 steps on the left
        h = F.relu(self.c2(F.pad(h, (4, 0))))  # (kernel - 1) * dilation
        return self.out(h.amax(dim=2))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(E, eps=1e-3), nn.LayerNorm(E, eps=1e-3)
        self.att = nn.MultiheadAttention(E, 4, batch_first=True)
        self.ff1, self.ff2 = nn.Linear(E, 4 * E), nn.Linear(4 * E, E)

    def forward(self, x, pad):
        h = self.ln1(x)
        x = x + self.att(h, h, h, key_padding_mask=pad, need_weights=False)[0]
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class Transformer(nn.Module):
    def __init__(self, vocab, classes, steps):
        super().__init__()
        self.emb = nn.Embedding(vocab, E, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(steps, E) * 0.05)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.out = nn.Linear(E, classes)

    def forward(self, x):
        pad = x == 0
        h = self.emb(x) + self.pos[: x.shape[1]]
        for b in self.blocks:
            h = b(h, pad)
        keep = (~pad).unsqueeze(2).to(h.dtype)
        return self.out((h * keep).sum(1) / keep.sum(1).clamp(min=1))


def build(name, vocab, classes, steps):
    if name == "lstm":
        return Recurrent(vocab, classes, nn.LSTM)
    if name == "gru":
        return Recurrent(vocab, classes, nn.GRU)
    if name == "bigru":
        return BiGRU(vocab, classes)
    if name == "conv1d":
        return Conv(vocab, classes)
    if name == "transformer":
        return Transformer(vocab, classes, steps)
    raise SystemExit(f"torch_words.py: unknown model '{name}'")


def train(name, x, y, epochs, batch, compile_):
    torch.manual_seed(0)
    vocab, classes, steps = int(x.max()) + 1, int(y.max()) + 1, x.shape[1]
    model = build(name, vocab, classes, steps)
    step_model = torch.compile(model) if compile_ else model
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    g = torch.Generator().manual_seed(1)
    seconds, loss_sum, right = [], 0.0, 0
    for _ in range(epochs):
        t0 = time.perf_counter()
        order = torch.randperm(len(x), generator=g)
        loss_sum, right = 0.0, 0
        for i in range(0, len(x), batch):
            idx = order[i : i + batch]
            xb, yb = x[idx], y[idx]
            opt.zero_grad(set_to_none=True)
            logits = step_model(xb)
            loss = F.cross_entropy(logits, yb)
            loss.backward()
            opt.step()
            loss_sum += float(loss) * len(idx)
            right += int((logits.argmax(1) == yb).sum())
        seconds.append(time.perf_counter() - t0)
    return {"seconds": seconds, "loss": loss_sum / len(x), "accuracy": right / len(x),
            "params": sum(p.numel() for p in model.parameters())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--x", required=True)
    ap.add_argument("--y", required=True)
    ap.add_argument("--models", default="lstm,gru,bigru,conv1d,transformer")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's)")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    x = torch.from_numpy(np.load(a.x).astype(np.int64))
    y = torch.from_numpy(np.load(a.y).astype(np.int64))
    res = {"torch": torch.__version__, "threads": torch.get_num_threads(), "compile": a.compile,
           "mkldnn": torch.backends.mkldnn.is_available(), "samples": len(x),
           "steps": int(x.shape[1]), "models": {}}
    for name in a.models.split(","):
        res["models"][name] = train(name, x, y, a.epochs, a.batch, a.compile)
        print(f"torch_words: {name}: {res['models'][name]['seconds']}", file=sys.stderr)
    text = json.dumps(res)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
