"""Small torch modules for what a plain torch.nn.Sequential cannot say of a
cohort sequence model (importing this module imports torch).

cohort holds a sequence as [N, T, F] (batch first, features last, as Keras
and torch's batch_first recurrent layers), so:

- Recurrent(nn.LSTM(F, H, batch_first=True), return_sequences=False) is the
  recurrent layer as one module: nn.LSTM and nn.GRU return a tuple (output,
  state), which the next module of a Sequential cannot take. It returns the
  outputs [N, T, H] (return_sequences) or the last step's [N, H]; for a
  bidirectional layer the forward half of the last step and the backward half
  of the first (each direction's last), as Keras's Bidirectional.
- ChannelsLast(m) runs a module of torch's [N, C, T] layout (nn.Conv1d,
  nn.MaxPool1d, nn.AvgPool1d, or an nn.Sequential of a padding and one of
  them) on [N, T, C].
- GlobalPool1d("avg" or "max") pools [N, T, C] over its steps into [N, C].
- Sequential(..., mask_zero=True) is an nn.Sequential whose first module is an
  nn.Embedding, with Keras's mask_zero: token 0 is padding, and the mask goes
  to the modules after it that take one (Recurrent, GlobalPool1d) as Keras
  passes it on: a padded step carries the recurrent state over, and is left
  out of a global pooling.
"""
import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["Recurrent", "ChannelsLast", "GlobalPool1d", "Sequential"]


class Recurrent(nn.Module):
    """An nn.LSTM or nn.GRU (batch_first, one layer, bias, no dropout and no
    projection; bidirectional or not) as a module of a Sequential."""

    def __init__(self, rnn, return_sequences=False):
        super().__init__()
        if not isinstance(rnn, (nn.LSTM, nn.GRU)):
            raise TypeError(f"Recurrent takes an nn.LSTM or nn.GRU, not {type(rnn).__name__}")
        self.rnn = rnn
        self.return_sequences = bool(return_sequences)

    def forward(self, x, mask=None):
        H = self.rnn.hidden_size
        if mask is None:
            y, _ = self.rnn(x)
            if self.return_sequences:
                return y
            if self.rnn.bidirectional:
                return torch.cat([y[:, -1, :H], y[:, 0, H:]], dim=1)
            return y[:, -1]
        ys = [self._direction(x, mask, "")]
        if self.rnn.bidirectional:
            ys.append(self._direction(x, mask, "_reverse"))
        if self.return_sequences:
            return torch.cat([y for y, _ in ys], dim=2)
        return torch.cat([h for _, h in ys], dim=1)

    def _direction(self, x, mask, suffix):
        """One direction's outputs [N, T, H] and last state [N, H] under a
        mask [N, T] (True: a real step): a padded step keeps the state and
        repeats the output before it (zeros before the first real step)."""
        r = self.rnn
        w_ih, w_hh = getattr(r, "weight_ih_l0" + suffix), getattr(r, "weight_hh_l0" + suffix)
        b_ih, b_hh = getattr(r, "bias_ih_l0" + suffix), getattr(r, "bias_hh_l0" + suffix)
        N, T, _ = x.shape
        h = x.new_zeros(N, r.hidden_size)
        c = x.new_zeros(N, r.hidden_size)
        gi_all = F.linear(x, w_ih, b_ih)
        out = [None] * T
        steps = range(T - 1, -1, -1) if suffix else range(T)
        for t in steps:
            gi, gh = gi_all[:, t], F.linear(h, w_hh, b_hh)
            if isinstance(r, nn.LSTM):
                i, f, g, o = (gi + gh).chunk(4, dim=1)
                c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h_new = torch.sigmoid(o) * torch.tanh(c_new)
            else:
                ir, iz, i_n = gi.chunk(3, dim=1)
                hr, hz, hn = gh.chunk(3, dim=1)
                rr, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
                n = torch.tanh(i_n + rr * hn)
                h_new, c_new = (1 - z) * n + z * h, c
            m = mask[:, t, None]
            h = torch.where(m, h_new, h)
            c = torch.where(m, c_new, c)
            out[t] = h
        return torch.stack(out, dim=1), h

    def extra_repr(self):
        return f"return_sequences={self.return_sequences}"


class ChannelsLast(nn.Module):
    """A module of torch's [N, C, T] layout on cohort's [N, T, C]."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, x):
        return self.module(x.transpose(1, 2)).transpose(1, 2)


class GlobalPool1d(nn.Module):
    """The mean or the maximum over the steps of [N, T, C], over the real
    steps alone under a mask [N, T] (a sample all padding gives 0)."""

    def __init__(self, mode="avg"):
        super().__init__()
        if mode not in ("avg", "max"):
            raise ValueError(f"GlobalPool1d: mode '{mode}' (avg or max)")
        self.mode = mode

    def forward(self, x, mask=None):
        if mask is None:
            return x.mean(dim=1) if self.mode == "avg" else x.amax(dim=1)
        m = mask[:, :, None]
        if self.mode == "avg":
            count = m.sum(dim=1).clamp(min=1).to(x.dtype)
            return (x * m).sum(dim=1) / count
        y = x.masked_fill(~m, float("-inf")).amax(dim=1)
        return torch.where(m.any(dim=1), y, torch.zeros_like(y))

    def extra_repr(self):
        return self.mode


def _takes_mask(m):
    return isinstance(m, (Recurrent, GlobalPool1d))


def _keeps_mask(m):
    """Modules that act on each step alone: the mask goes on past them."""
    return isinstance(m, (nn.Linear, nn.Dropout, nn.LayerNorm, nn.ReLU, nn.Sigmoid, nn.Tanh,
                          nn.GELU, nn.SiLU, nn.Identity))


class Sequential(nn.Sequential):
    """nn.Sequential with Keras's mask_zero for its first module, an
    nn.Embedding: token 0 is padding (its embedding is still the table's row
    0), and the modules after it that take a mask get it (x != 0) until one
    ends the sequence. Without mask_zero it is a plain nn.Sequential."""

    def __init__(self, *modules, mask_zero=False):
        super().__init__(*modules)
        if mask_zero and not (len(self) and isinstance(self[0], nn.Embedding)):
            raise ValueError("Sequential(mask_zero=True) starts with an nn.Embedding")
        self.mask_zero = bool(mask_zero)

    def forward(self, x):
        mask = x != 0 if self.mask_zero else None
        for m in self:
            if mask is not None and _takes_mask(m):
                x = m(x, mask)
                if x.dim() != 3 or x.shape[1] != mask.shape[1]:
                    mask = None  # the sequence ended: no mask after it
            else:
                if mask is not None and not (_keeps_mask(m) or isinstance(m, nn.Embedding)):
                    raise ValueError(f"{type(m).__name__} cannot take the mask of mask_zero")
                x = m(x)
        return x

    def extra_repr(self):
        return "mask_zero=True" if self.mask_zero else ""


class Pool1d(nn.Module):
    """MaxPool1d or AvgPool1d on [N, T, C] with TensorFlow's padding (before,
    after): max ignores the padding, the average counts the real steps only."""

    def __init__(self, is_max, k, s, before=0, after=0):
        super().__init__()
        self.is_max, self.k, self.s = bool(is_max), int(k), int(s)
        self.before, self.after = int(before), int(after)

    def forward(self, x):
        x = x.transpose(1, 2)
        pads = (self.before, self.after)
        if self.is_max:
            if any(pads):
                x = F.pad(x, pads, value=float("-inf"))
            y = F.max_pool1d(x, self.k, self.s)
        elif not any(pads):
            y = F.avg_pool1d(x, self.k, self.s)
        else:
            ones = torch.ones_like(x[:1, :1])
            y = F.avg_pool1d(F.pad(x, pads), self.k, self.s) / \
                F.avg_pool1d(F.pad(ones, pads), self.k, self.s)
        return y.transpose(1, 2)

    def extra_repr(self):
        return (f"{'max' if self.is_max else 'avg'}, kernel={self.k}, stride={self.s}, "
                f"pads=({self.before}, {self.after})")


__all__.append("Pool1d")
