#!/usr/bin/env python3
"""Parity of the recurrent layers with PyTorch: from the same initial weights (init_from,
torch's tensors), one unshuffled epoch with SGD-momentum and with Adam (Keras's formula)
must give the weights a float64 torch.nn.LSTM / torch.nn.GRU reference gives. Each model
stacks two recurrent layers (the first with return_sequences, so both the sequence output
and the last step are trained through) and a dense softmax, on sequences [n, T, F] with a
partial last batch; the bidirectional models stack two bidirectional layers (torch's
bidirectional=True; the _reverse tensors), the last one's output the forward direction's
last step and the reverse direction's step 0 (torch's h_n). Under a token mask (an embedding
with mask_zero, rows padded after their 1..T tokens), a bidirectional GRU and stacked LSTMs
against torch's pack_padded_sequence of the same rows: the last real step's output, and the
reverse direction starting there.

The init file's LSTM bias_hh_l0 is not zero: cohort adds it into its one bias (Keras's), and
the reference trains that sum as bias_ih_l0 with bias_hh_l0 held at zero, which is what
cohort's file then holds. The GRU keeps torch's two biases (Keras's reset_after).

Tolerance: refcheck.weights_match's 2e-5 + 1e-4 |w| for every weight.
Run by ctest; needs /usr/bin/python3 with numpy and torch (else: skipped, 77)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcheck import Checks, cohort_bin, cohort_train, need, weights_match  # noqa: E402

NAME = "t_rnn_torch.py"
np, torch = need(NAME, "numpy", "torch")
from st_numpy import read_safetensors, write_safetensors  # noqa: E402

check = Checks(NAME)
# Unmasked batches of 20: the CPU runs a recurrence in chunks of 16 rows (then 4).
N, T, F, H1, H2, CLASSES, BATCH, MASK_BATCH = 90, 6, 4, 7, 5, 3, 20, 16


SUFFIXES = ("", "_reverse")
NAMES = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")


def make_init(rng, kind, bi):
    """Torch-layout tensors of [kind H1 seq, kind H2, dense CLASSES] (bi: bidirectional
    layers of those), biases not zero."""
    G = 4 if kind == "lstm" else 3
    dirs = 2 if bi else 1
    init = {}
    for i, (fin, h) in enumerate([(F, H1), (dirs * H1, H2)]):
        lim = 1 / np.sqrt(h)
        for sfx in SUFFIXES[:dirs]:
            init[f"layers.{i}.weight_ih_l0{sfx}"] = rng.uniform(-lim, lim, (G * h, fin))
            init[f"layers.{i}.weight_hh_l0{sfx}"] = rng.uniform(-lim, lim, (G * h, h))
            init[f"layers.{i}.bias_ih_l0{sfx}"] = rng.uniform(-0.2, 0.2, G * h)
            init[f"layers.{i}.bias_hh_l0{sfx}"] = rng.uniform(-0.2, 0.2, G * h)
    lim = np.sqrt(6 / (dirs * H2 + CLASSES))
    init["layers.2.weight"] = rng.uniform(-lim, lim, (CLASSES, dirs * H2))
    init["layers.2.bias"] = rng.uniform(-0.1, 0.1, CLASSES)
    return {k: v.astype(np.float32) for k, v in init.items()}


def keras_adam_step(params, state, t, lr, b1=0.9, b2=0.999, eps=1e-7):
    """Keras's Adam (as cohort's), in the parameters' float64."""
    alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    for p, (m, v) in zip(params, state):
        g = p.grad
        m += (g - m) * (1 - b1)
        v += (g * g - v) * (1 - b2)
        p -= alpha * m / (torch.sqrt(v) + eps)


def make_rnns(kind, bi):
    f64 = torch.float64
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    dirs = 2 if bi else 1
    return [cls(F, H1, batch_first=True, dtype=f64, bidirectional=bi),
            cls(dirs * H1, H2, batch_first=True, dtype=f64, bidirectional=bi)]


def last_output(m, seq):
    """The layer's output without return_sequences: the last step's, and for two directions
    the reverse one's at step 0 beside it (torch's h_n)."""
    out, state = m(seq)
    if not m.bidirectional:
        return out[:, -1]
    h_n = state[0] if isinstance(state, tuple) else state
    return torch.cat([h_n[0], h_n[1]], dim=1)


def torch_train(init, x, y, kind, bi, opt):
    """The reference: one unshuffled epoch in float64; returns the tensors as cohort's file
    names them."""
    f64 = torch.float64
    rnns = make_rnns(kind, bi)
    with torch.no_grad():
        for i, m in enumerate(rnns):
            for sfx in SUFFIXES[:2 if bi else 1]:
                for name in NAMES:
                    getattr(m, name + sfx).copy_(
                        torch.tensor(init[f"layers.{i}.{name}{sfx}"], dtype=f64))
                if kind == "lstm":
                    getattr(m, "bias_ih_l0" + sfx).add_(getattr(m, "bias_hh_l0" + sfx))
                    getattr(m, "bias_hh_l0" + sfx).zero_()
                    getattr(m, "bias_hh_l0" + sfx).requires_grad_(False)
    W = torch.tensor(init["layers.2.weight"], dtype=f64, requires_grad=True)
    b = torch.tensor(init["layers.2.bias"], dtype=f64, requires_grad=True)
    params = [p for m in rnns for p in m.parameters() if p.requires_grad] + [W, b]
    if opt["name"] == "sgd":
        o = torch.optim.SGD(params, lr=opt["lr"], momentum=opt["momentum"])
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    X, Y = torch.tensor(x, dtype=f64), torch.tensor(y, dtype=torch.long)
    t = 0
    for s in range(0, len(x), BATCH):
        seq, _ = rnns[0](X[s:s + BATCH])
        z = last_output(rnns[1], seq) @ W.T + b
        loss = torch.nn.functional.cross_entropy(z, Y[s:s + BATCH])
        for p in params:
            p.grad = None
        loss.backward()
        t += 1
        if opt["name"] == "sgd":
            o.step()
        else:
            with torch.no_grad():
                keras_adam_step(params, state, t, opt["lr"])
    got = {f"layers.{i}.{n}{sfx}": getattr(m, n + sfx).detach().numpy().astype(np.float32)
           for i, m in enumerate(rnns) for sfx in SUFFIXES[:2 if bi else 1] for n in NAMES}
    got["layers.2.weight"] = W.detach().numpy().astype(np.float32)
    got["layers.2.bias"] = b.detach().numpy().astype(np.float32)
    return got


def torch_predict(w, x, kind, bi):
    """Probabilities of the trained file w's model in torch, loaded as docs/plan.md shows."""
    f64 = torch.float64
    rnns = make_rnns(kind, bi)
    for i, m in enumerate(rnns):
        m.load_state_dict({k[len(f"layers.{i}."):]: torch.tensor(v, dtype=f64)
                           for k, v in w.items() if k.startswith(f"layers.{i}.")})
    with torch.no_grad():
        seq, _ = rnns[0](torch.tensor(x, dtype=f64))
        z = last_output(rnns[1], seq) @ torch.tensor(w["layers.2.weight"], dtype=f64).T
        return (z + torch.tensor(w["layers.2.bias"], dtype=f64)).softmax(1).numpy()


def cohort_predict(cohort, weights, data):
    """cohort predict's probability columns, [n, CLASSES]."""
    import subprocess
    r = subprocess.run([cohort, "predict", weights, "--data", data], capture_output=True,
                       text=True)
    check(r.returncode == 0, f"cohort predict {weights}: exit {r.returncode}: {r.stderr}")
    rows = [line.split(",") for line in r.stdout.splitlines()[1:]]
    return np.array([[float(v) for v in row[-CLASSES:]] for row in rows])


V, E = 12, 5  # the masked models' token ids [0, V) and embedding width


def masked_cases():
    """The masked models: (name, cohort layers, torch modules' maker)."""
    emb = {"embedding": {"input_dim": V, "output_dim": E, "mask_zero": True}}
    return {
        "masked_bigru": [emb, {"bidirectional": {"gru": H2}},
                         {"dense": CLASSES, "activation": "softmax"}],
        "masked_lstm": [emb, {"lstm": H1, "return_sequences": True}, {"lstm": H2},
                        {"dense": CLASSES, "activation": "softmax"}],
    }


def masked_init(rng, name):
    f32 = np.float32
    init = {"layers.0.weight": rng.uniform(-0.5, 0.5, (V, E)).astype(f32)}
    if name == "masked_bigru":
        sizes, G, dirs = [(E, H2)], 3, 2
    else:
        sizes, G, dirs = [(E, H1), (H1, H2)], 4, 1
    for i, (fin, h) in enumerate(sizes, start=1):
        lim = 1 / np.sqrt(h)
        for sfx in SUFFIXES[:dirs]:
            init[f"layers.{i}.weight_ih_l0{sfx}"] = rng.uniform(-lim, lim, (G * h, fin)).astype(f32)
            init[f"layers.{i}.weight_hh_l0{sfx}"] = rng.uniform(-lim, lim, (G * h, h)).astype(f32)
            init[f"layers.{i}.bias_ih_l0{sfx}"] = rng.uniform(-0.2, 0.2, G * h).astype(f32)
            init[f"layers.{i}.bias_hh_l0{sfx}"] = (rng.uniform(-0.2, 0.2, G * h).astype(f32)
                                                   if G == 3 else np.zeros(G * h, f32))
    last = len(sizes) + 1
    lim = np.sqrt(6 / (dirs * H2 + CLASSES))
    init[f"layers.{last}.weight"] = rng.uniform(-lim, lim, (CLASSES, dirs * H2)).astype(f32)
    init[f"layers.{last}.bias"] = rng.uniform(-0.1, 0.1, CLASSES).astype(f32)
    return init


def masked_torch(init, tok, y, name, opt):
    """The float64 reference of a masked model: its rows packed by their lengths
    (pack_padded_sequence, rows padded after their tokens), one unshuffled epoch."""
    f64 = torch.float64
    pack = torch.nn.utils.rnn.pack_padded_sequence
    bi = name == "masked_bigru"
    emb = torch.nn.Embedding(V, E, dtype=f64)
    if bi:
        rnns = [torch.nn.GRU(E, H2, batch_first=True, dtype=f64, bidirectional=True)]
    else:
        rnns = [torch.nn.LSTM(E, H1, batch_first=True, dtype=f64),
                torch.nn.LSTM(H1, H2, batch_first=True, dtype=f64)]
    last = len(rnns) + 1
    with torch.no_grad():
        emb.weight.copy_(torch.tensor(init["layers.0.weight"], dtype=f64))
        for i, m in enumerate(rnns, start=1):
            for sfx in SUFFIXES[:2 if bi else 1]:
                for n in NAMES:
                    getattr(m, n + sfx).copy_(torch.tensor(init[f"layers.{i}.{n}{sfx}"], dtype=f64))
            if not bi:
                m.bias_hh_l0.requires_grad_(False)
    W = torch.tensor(init[f"layers.{last}.weight"], dtype=f64, requires_grad=True)
    b = torch.tensor(init[f"layers.{last}.bias"], dtype=f64, requires_grad=True)
    params = [emb.weight] + [p for m in rnns for p in m.parameters() if p.requires_grad] + [W, b]
    if opt["name"] == "sgd":
        o = torch.optim.SGD(params, lr=opt["lr"], momentum=opt["momentum"])
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    X, Y = torch.tensor(tok, dtype=torch.long), torch.tensor(y, dtype=torch.long)
    lengths = (X != 0).sum(dim=1)
    t = 0
    for s in range(0, len(tok), MASK_BATCH):
        h = pack(emb(X[s:s + MASK_BATCH]), lengths[s:s + MASK_BATCH], batch_first=True,
                 enforce_sorted=False)
        for m in rnns[:-1]:
            h, _ = m(h)
        _, st = rnns[-1](h)
        h_n = st[0] if isinstance(st, tuple) else st
        last_out = torch.cat([h_n[0], h_n[1]], dim=1) if bi else h_n[0]
        loss = torch.nn.functional.cross_entropy(last_out @ W.T + b, Y[s:s + MASK_BATCH])
        for p in params:
            p.grad = None
        loss.backward()
        t += 1
        if opt["name"] == "sgd":
            o.step()
        else:
            with torch.no_grad():
                keras_adam_step(params, state, t, opt["lr"])
    got = {"layers.0.weight": emb.weight.detach().numpy().astype(np.float32)}
    for i, m in enumerate(rnns, start=1):
        for sfx in SUFFIXES[:2 if bi else 1]:
            for n in NAMES:
                got[f"layers.{i}.{n}{sfx}"] = getattr(m, n + sfx).detach().numpy().astype(np.float32)
    got[f"layers.{last}.weight"] = W.detach().numpy().astype(np.float32)
    got[f"layers.{last}.bias"] = b.detach().numpy().astype(np.float32)
    return got


def masked_main(cohort, rng, optimizers):
    """The masked models in cohort and in torch, from the same weights."""
    tok = rng.integers(1, V, (N, T))
    for r in range(N):
        tok[r, 1 + r % T:] = 0  # 1..T real tokens, then padding
    y = (tok[:, 0] % CLASSES).astype(np.int64)
    cases = masked_cases()
    inits = {name: masked_init(rng, name) for name in cases}
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/t.npy", tok.astype(np.int64))
        np.save(f"{tmp}/y.npy", y)
        models = []
        for name, layers in cases.items():
            write_safetensors(f"{tmp}/{name}.safetensors", inits[name])
            for oname, opt in optimizers.items():
                models.append({"name": f"{name}_{oname}", "optimizer": opt, "layers": layers,
                               "init_from": f"{tmp}/{name}.safetensors"})
        plan = {"data": {"train": f"npy:{tmp}/t.npy,{tmp}/y.npy"},
                "defaults": {"epochs": 1, "batch_size": MASK_BATCH, "shuffle": False},
                "models": models}
        if not cohort_train(check, cohort, plan, tmp, "masked"):
            return
        for name in cases:
            for oname, opt in optimizers.items():
                want = masked_torch(inits[name], tok, y, name, opt)
                got = read_safetensors(f"{tmp}/out/models/{name}_{oname}.safetensors")
                if name == "masked_lstm":
                    for i in (1, 2):
                        want.pop(f"layers.{i}.bias_hh_l0")
                worst, rel = weights_match(check, f"{name}_{oname}", got, want, inits[name])
                print(f"{NAME}: {name}_{oname}: max |cohort - torch| = {worst:.3g} "
                      f"(relative {rel:.3g})")


def main():
    cohort = cohort_bin(NAME)
    if not cohort:
        return 1
    torch.set_num_threads(1)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((N, T, F)).astype(np.float32)
    y = (np.argmax(x[:, -2:, :CLASSES].sum(axis=1) + 0.3 * rng.standard_normal((N, CLASSES)),
                   axis=1)).astype(np.int64)
    optimizers = {"sgd": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
                  "adam": {"name": "adam", "lr": 0.01}}
    cases = {(k, bi): make_init(rng, k, bi) for bi in (False, True) for k in ("lstm", "gru")}
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", x)
        np.save(f"{tmp}/y.npy", y)
        models = []
        for (kind, bi), init in cases.items():
            tag = ("bi" if bi else "") + kind
            write_safetensors(f"{tmp}/{tag}.safetensors", init)
            layers = [{kind: H1, "return_sequences": True}, {kind: H2}]
            if bi:
                layers = [{"bidirectional": r} for r in layers]
            for oname, opt in optimizers.items():
                models.append({"name": f"{tag}_{oname}", "optimizer": opt,
                               "init_from": f"{tmp}/{tag}.safetensors",
                               "layers": layers + [{"dense": CLASSES, "activation": "softmax"}]})
        plan = {"data": {"train": f"npy:{tmp}/x.npy,{tmp}/y.npy"},
                "defaults": {"epochs": 1, "batch_size": BATCH, "shuffle": False},
                "models": models}
        if not cohort_train(check, cohort, plan, tmp):
            return check.done()
        for (kind, bi), init in cases.items():
            for oname, opt in optimizers.items():
                name = ("bi" if bi else "") + f"{kind}_{oname}"
                want = torch_train(init, x, y, kind, bi, opt)
                got = read_safetensors(f"{tmp}/out/models/{name}.safetensors")
                if kind == "lstm":
                    for i in range(2):
                        for sfx in SUFFIXES[:2 if bi else 1]:
                            k = f"layers.{i}.bias_hh_l0{sfx}"
                            check(not got[k].any(), f"{name} {k}: not written as zeros")
                            want.pop(k)
                worst, rel = weights_match(check, name, got, want, init)
                print(f"{NAME}: {name}: max |cohort - torch| = {worst:.3g} (relative {rel:.3g})")
                # The trained file, loaded into torch, predicts what cohort predict prints.
                w = {k: v for k, v in got.items()}
                p = cohort_predict(cohort, f"{tmp}/out/models/{name}.safetensors",
                                   f"npy:{tmp}/x.npy")
                q = torch_predict(w, x, kind, bi)
                check(p.shape == q.shape and bool((abs(p - q) <= 2e-6 + 1e-5 * q).all()),
                      f"{name}: cohort predict differs from torch by up to "
                      f"{float(abs(p - q).max()) if p.shape == q.shape else p.shape}")
    masked_main(cohort, rng, optimizers)
    return check.done()


if __name__ == "__main__":
    sys.exit(main())
