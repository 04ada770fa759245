"""Keras 3 as the reference for the tests tests/t_*_keras.py, which run in scripts/pyenv's test
environment (Keras on the JAX backend): the same model as a cohort plan's, built in Keras from the
plan's own layer list, given cohort's initial weights (init_from, in cohort's torch layouts),
trained by Keras's own fit() on the same unshuffled batches, and its weights handed back in
cohort's layouts.

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from kerasref import keras, np, ...

Nothing here re-types a Keras formula: the optimizers, losses, metrics, schedules and callbacks
are Keras's classes, looked up by the plan's names. Where Keras is missing the test fails (it
never skips: scripts/pyenv builds the environment)."""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
# One thread for XLA's CPU client: the tests run beside others under ctest -j.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import keras  # noqa: E402
    import numpy as np  # noqa: E402
except ImportError as e:  # the environment is scripts/pyenv's: a missing module is a failure
    print(f"kerasref: FAILED: {e} (run the test through scripts/pyenv test -- python ...)")
    sys.exit(1)

from refcheck import Checks, cohort_bin, cohort_predict, cohort_train  # noqa: E402,F401
from st_numpy import read_safetensors, write_safetensors  # noqa: E402,F401

L = keras.layers
# Tiny models, a few batches each: without jit no XLA compile per model.
EAGER = os.environ.get("KERASREF_JIT") != "1"


def _kind(layer):
    """The kind of a plan layer (a bare name or a one-kind map) and its settings."""
    if isinstance(layer, str):
        return layer, {}
    kinds = [k for k in layer if k in KINDS]
    if len(kinds) > 1 and "activation" in kinds:  # a dense or conv2d's setting
        kinds.remove("activation")
    assert len(kinds) == 1, layer
    k = kinds[0]
    return k, layer


KINDS = ("dense", "conv2d", "max_pooling2d", "average_pooling2d", "global_average_pooling2d",
         "flatten", "batch_normalization", "activation", "dropout", "layer_normalization",
         "conv1d", "max_pooling1d", "average_pooling1d", "global_average_pooling1d",
         "global_max_pooling1d", "embedding", "lstm", "gru", "bidirectional")


def _recurrent(kind, s):
    """Keras's LSTM or GRU (reset_after, its default) of a plan's {lstm: UNITS, ...}."""
    cls = L.LSTM if kind == "lstm" else L.GRU
    return cls(s[kind], return_sequences=s.get("return_sequences", False))


def _regularizer(spec):
    if spec is None:
        return None
    if isinstance(spec, str):
        return keras.regularizers.get(spec)
    return keras.regularizers.L1L2(l1=spec.get("l1", 0.0), l2=spec.get("l2", 0.0))


def keras_layers(layers):
    """Keras layers for a plan's layer list, in order (one Keras layer per plan layer)."""
    out = []
    for layer in layers:
        k, s = _kind(layer)
        if k == "dense":
            out.append(L.Dense(s["dense"], activation=s.get("activation", "linear"),
                               use_bias=s.get("use_bias", True),
                               kernel_regularizer=_regularizer(s.get("kernel_regularizer"))))
        elif k == "conv2d":
            out.append(L.Conv2D(s["conv2d"], s["kernel_size"], strides=s.get("strides", 1),
                                padding=s.get("padding", "valid"),
                                activation=s.get("activation", "linear"),
                                use_bias=s.get("use_bias", True),
                                kernel_regularizer=_regularizer(s.get("kernel_regularizer"))))
        elif k in ("max_pooling2d", "average_pooling2d"):
            pool = s.get(k) or 2
            cls = L.MaxPooling2D if k == "max_pooling2d" else L.AveragePooling2D
            out.append(cls(pool, strides=s.get("strides"), padding=s.get("padding", "valid")))
        elif k == "global_average_pooling2d":
            out.append(L.GlobalAveragePooling2D())
        elif k == "conv1d":
            out.append(L.Conv1D(s["conv1d"], s["kernel_size"], strides=s.get("strides", 1),
                                padding=s.get("padding", "valid"),
                                dilation_rate=s.get("dilation_rate", 1),
                                activation=s.get("activation", "linear"),
                                use_bias=s.get("use_bias", True),
                                kernel_regularizer=_regularizer(s.get("kernel_regularizer"))))
        elif k in ("max_pooling1d", "average_pooling1d"):
            pool = s.get(k) or 2
            cls = L.MaxPooling1D if k == "max_pooling1d" else L.AveragePooling1D
            out.append(cls(pool, strides=s.get("strides"), padding=s.get("padding", "valid")))
        elif k == "global_average_pooling1d":
            out.append(L.GlobalAveragePooling1D())
        elif k == "global_max_pooling1d":
            out.append(L.GlobalMaxPooling1D())
        elif k == "flatten":
            out.append(L.Flatten())
        elif k == "batch_normalization":
            o = s.get("batch_normalization") or {}
            out.append(L.BatchNormalization(momentum=o.get("momentum", 0.99),
                                            epsilon=o.get("epsilon", 1e-3)))
        elif k == "layer_normalization":
            o = s.get("layer_normalization") or {}
            out.append(L.LayerNormalization(epsilon=o.get("epsilon", 1e-3)))
        elif k == "activation":
            out.append(L.Activation(s["activation"]))
        elif k == "dropout":
            out.append(L.Dropout(s["dropout"]))
        elif k == "embedding":  # {input_dim, output_dim, mask_zero} or [input_dim, output_dim]
            o = s["embedding"]
            o = o if isinstance(o, dict) else {"input_dim": o[0], "output_dim": o[1]}
            out.append(L.Embedding(o["input_dim"], o["output_dim"],
                                   mask_zero=o.get("mask_zero", False)))
        elif k in ("lstm", "gru"):
            out.append(_recurrent(k, s))
        elif k == "bidirectional":
            inner = s["bidirectional"]
            cell = "lstm" if "lstm" in inner else "gru"
            out.append(L.Bidirectional(_recurrent(cell, inner)))
    return out


# torch's GRU gates (r, z, n) in Keras's order (z, r, h); the permutation is its own inverse.
_GRU_BLOCKS = (1, 0, 2)


def _blocks(w, cell, axis=0):
    """A GRU's gate blocks along axis moved between torch's order and Keras's (an LSTM's
    order is the same in both)."""
    if cell == "lstm":
        return w
    parts = np.split(np.asarray(w), 3, axis=axis)
    return np.concatenate([parts[j] for j in _GRU_BLOCKS], axis=axis)


def _rnn_cell(kind, s):
    if kind == "bidirectional":
        return "lstm" if "lstm" in s["bidirectional"] else "gru"
    return kind


def _rnn_to_keras(tensors, i, cell, sfx):
    """Keras's [kernel, recurrent_kernel, bias] of one direction from torch's four tensors
    (an LSTM's two biases summed into Keras's one; a GRU's as Keras's [2, 3H])."""
    g = lambda n: np.asarray(tensors[f"layers.{i}.{n}_l0{sfx}"])  # noqa: E731
    kern, rec = _blocks(g("weight_ih"), cell).T, _blocks(g("weight_hh"), cell).T
    if cell == "lstm":
        bias = g("bias_ih") + g("bias_hh")
    else:
        bias = np.stack([_blocks(g("bias_ih"), cell), _blocks(g("bias_hh"), cell)])
    return [kern, rec, bias]


def _rnn_from_keras(ws, i, cell, sfx):
    """A direction's torch tensors from Keras's [kernel, recurrent_kernel, bias] (an LSTM's
    bias_hh_l0 zero, as cohort writes it)."""
    kern, rec, bias = ws
    out = {f"layers.{i}.weight_ih_l0{sfx}": _blocks(kern.T, cell),
           f"layers.{i}.weight_hh_l0{sfx}": _blocks(rec.T, cell)}
    if cell == "lstm":
        out[f"layers.{i}.bias_ih_l0{sfx}"] = bias
        out[f"layers.{i}.bias_hh_l0{sfx}"] = np.zeros_like(bias)
    else:
        out[f"layers.{i}.bias_ih_l0{sfx}"] = _blocks(bias[0], cell)
        out[f"layers.{i}.bias_hh_l0{sfx}"] = _blocks(bias[1], cell)
    return out


def build(layers, input_shape):
    """The Keras model of a plan's layers on samples of input_shape (a dense first layer on an
    image flattens it, as cohort's does)."""
    ks = keras_layers(layers)
    first, _ = _kind(layers[0])
    pre = [L.Flatten()] if first == "dense" and len(input_shape) > 1 else []
    model = keras.Sequential([keras.Input(input_shape)] + pre + ks)
    return model, ks


def _flat_perm(shape):
    """For a flatten of an image of shape (H, W, C): perm[j] is the index, in torch's (C, H, W)
    order (cohort's weight files), of Keras's j-th flat value (in (H, W, C) order)."""
    h, w, c = shape
    return np.arange(h * w * c).reshape(c, h, w).transpose(1, 2, 0).reshape(-1)


def flat_perms(model, ks):
    """For each of the plan's layers, the permutation that takes its flat input from torch's
    (C, H, W) order (cohort's weight files) to Keras's (H, W, C), where that input comes from a
    flatten of an image (through batch norms, activations, dropouts), else None. The dense
    layer that takes such an input ends the permuted run."""
    perm, out = None, {}
    for k in model.layers:
        if isinstance(k, L.Flatten):
            shape = tuple(k.input.shape[1:])
            perm = _flat_perm(shape) if len(shape) == 3 else None
            continue
        out[id(k)] = perm
        if isinstance(k, L.Dense):
            perm = None
    return [out.get(id(k)) for k in ks]


def set_weights(model, ks, layers, tensors):
    """Give the Keras layers the tensors of a cohort weight file (name -> array, torch layouts)."""
    perms = flat_perms(model, ks)
    for i, (layer, k) in enumerate(zip(layers, ks)):
        kind, _ = _kind(layer)
        perm = perms[i]
        w = tensors.get(f"layers.{i}.weight")
        b = tensors.get(f"layers.{i}.bias")
        if kind == "dense":
            kern = np.asarray(w).T
            if perm is not None:
                kern = kern[perm]
            k.set_weights([kern] + ([np.asarray(b)] if b is not None else []))
        elif kind == "conv2d":
            k.set_weights([np.asarray(w).transpose(2, 3, 1, 0)] + ([np.asarray(b)] if b is not None else []))
        elif kind == "conv1d":  # [out, in, k] -> Keras's [k, in, out]
            k.set_weights([np.asarray(w).transpose(2, 1, 0)] + ([np.asarray(b)] if b is not None else []))
        elif kind == "batch_normalization":
            k.set_weights([np.asarray(tensors[f"layers.{i}.{n}"])[perm if perm is not None else slice(None)]
                           for n in ("weight", "bias", "running_mean", "running_var")])
        elif kind == "layer_normalization":
            k.set_weights([np.asarray(tensors[f"layers.{i}.{n}"])[perm if perm is not None else slice(None)]
                           for n in ("weight", "bias")])
        elif kind == "embedding":  # [input_dim, output_dim], as Keras's
            k.set_weights([np.asarray(w)])
        elif kind in ("lstm", "gru", "bidirectional"):
            cell = _rnn_cell(kind, layer)
            sfxs = ("", "_reverse") if kind == "bidirectional" else ("",)
            k.set_weights([w for sfx in sfxs for w in _rnn_to_keras(tensors, i, cell, sfx)])


def get_weights(model, ks, layers):
    """The Keras layers' weights as a cohort weight file's tensors (torch layouts)."""
    out = {}
    for i, (layer, k, perm) in enumerate(zip(layers, ks, flat_perms(model, ks))):
        kind, _ = _kind(layer)
        ws = [np.asarray(v) for v in k.get_weights()]
        inv = slice(None)
        if perm is not None:
            inv = np.empty_like(perm)
            inv[perm] = np.arange(len(perm))
        if kind == "dense":
            kern = ws[0][inv]
            out[f"layers.{i}.weight"] = kern.T
            if len(ws) > 1:
                out[f"layers.{i}.bias"] = ws[1]
        elif kind == "conv2d":
            out[f"layers.{i}.weight"] = ws[0].transpose(3, 2, 0, 1)
            if len(ws) > 1:
                out[f"layers.{i}.bias"] = ws[1]
        elif kind == "conv1d":
            out[f"layers.{i}.weight"] = ws[0].transpose(2, 1, 0)
            if len(ws) > 1:
                out[f"layers.{i}.bias"] = ws[1]
        elif kind == "batch_normalization":
            for n, v in zip(("weight", "bias", "running_mean", "running_var"), ws):
                out[f"layers.{i}.{n}"] = v[inv]
        elif kind == "layer_normalization":
            for n, v in zip(("weight", "bias"), ws):
                out[f"layers.{i}.{n}"] = v[inv]
        elif kind == "embedding":
            out[f"layers.{i}.weight"] = ws[0]
        elif kind in ("lstm", "gru", "bidirectional"):
            cell = _rnn_cell(kind, layer)
            sfxs = ("", "_reverse") if kind == "bidirectional" else ("",)
            for d, sfx in enumerate(sfxs):
                out.update(_rnn_from_keras(ws[3 * d:3 * d + 3], i, cell, sfx))
    return out


def glorot_init(model, ks, layers, seed):
    """Initial weights in cohort's layouts, drawn by numpy from seed (the same on every run):
    Glorot-uniform kernels (Keras's default, fan in and out as Keras counts them), and biases
    and batch norm parameters drawn too, so that a wrong bias path shows."""
    rng = np.random.default_rng(seed)
    t = {}
    for name, v in get_weights(model, ks, layers).items():
        if name.endswith("running_mean"):
            w = rng.uniform(-0.1, 0.1, v.shape)
        elif name.endswith("running_var"):
            w = rng.uniform(0.8, 1.2, v.shape)
        elif v.ndim == 1:  # a bias, a beta, a gamma (near 1)
            w = rng.uniform(-0.2, 0.2, v.shape) + (1.0 if name.endswith(".weight") else 0.0)
        else:  # [out, in] or [out, in, kh, kw]
            field = int(np.prod(v.shape[2:])) if v.ndim > 2 else 1
            lim = np.sqrt(6.0 / (v.shape[1] * field + v.shape[0] * field))
            w = rng.uniform(-lim, lim, v.shape)
        t[name] = np.ascontiguousarray(w, dtype=np.float32)
    return t


_OPT = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW", "rmsprop": "RMSprop",
        "adagrad": "Adagrad", "nadam": "Nadam"}
_SCHED = {"cosine_decay": "CosineDecay", "exponential_decay": "ExponentialDecay",
          "piecewise_constant": "PiecewiseConstantDecay"}


def optimizer(spec):
    """Keras's optimizer for a plan's optimizer map (Keras's own keys; lr is learning_rate)."""
    spec = dict(spec)
    name = spec.pop("name")
    lr = spec.pop("lr", spec.pop("learning_rate", None))
    sched = spec.pop("schedule", None)
    if sched is not None:
        (sname, skeys), = sched.items()
        lr = getattr(keras.optimizers.schedules, _SCHED[sname])(
            **({"initial_learning_rate": lr} if sname != "piecewise_constant" else {}), **skeys)
    if lr is not None:
        spec["learning_rate"] = lr
    return getattr(keras.optimizers, _OPT[name])(**spec)


def loss_and_metrics(spec, classes=False):
    """Keras's loss object and compile metrics for a plan's loss (a name or a map); classes: a
    regression loss on one-hot class labels, whose metric is accuracy (docs/plan.md)."""
    if isinstance(spec, str):
        spec = {"name": spec}
    spec = dict(spec)
    name = spec.pop("name")
    cls = {"sparse_categorical_crossentropy": "SparseCategoricalCrossentropy",
           "categorical_crossentropy": "CategoricalCrossentropy",
           "binary_crossentropy": "BinaryCrossentropy", "mse": "MeanSquaredError",
           "mae": "MeanAbsoluteError", "huber": "Huber"}[name]
    loss = getattr(keras.losses, cls)(**spec)
    if name in ("mse", "mae", "huber") and not classes:
        metrics = [keras.metrics.MeanAbsoluteError(name="mae"),
                   keras.metrics.RootMeanSquaredError(name="rmse")]
    elif name == "binary_crossentropy":
        metrics = [keras.metrics.BinaryAccuracy(name="accuracy",
                                                threshold=0.0 if spec.get("from_logits") else 0.5)]
    elif name == "sparse_categorical_crossentropy":
        metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    else:
        metrics = [keras.metrics.CategoricalAccuracy(name="accuracy")]
    return loss, metrics


def keras_fit(layers, init, x, y, *, opt, loss="sparse_categorical_crossentropy", batch=32,
              epochs=1, validation_split=0.0, class_weight=None, callbacks=(), classes=False):
    """Train the plan's model in Keras from init (cohort layouts) on x, y unshuffled; returns
    (the weights in cohort layouts, Keras's history dict, the model)."""
    keras.utils.clear_session()
    model, ks = build(layers, x.shape[1:])
    set_weights(model, ks, layers, init)
    lo, metrics = loss_and_metrics(loss, classes)
    model.compile(optimizer=optimizer(opt), loss=lo, metrics=metrics, run_eagerly=EAGER)
    h = model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0,
                  validation_split=validation_split, class_weight=class_weight,
                  callbacks=list(callbacks))
    return get_weights(model, ks, layers), h.history, model


def compare_weights(check, name, got, want, init, moved=1e-4, rtol=1e-4, atol=2e-5):
    """cohort's tensors got against Keras's want, each within atol + rtol |want|, and moved
    from init by more than `moved` (so that the test trained something). Returns the largest
    |cohort - keras| / (|keras| + 1e-3)."""
    rel = 0.0
    for k, w in want.items():
        g = got.get(k)
        check(g is not None and g.shape == w.shape,
              f"{name} {k}: {'missing' if g is None else f'shape {g.shape}'}, Keras's {w.shape}")
        if g is None or g.shape != w.shape:
            continue
        diff = np.abs(g - w)
        rel = max(rel, float((diff / (np.abs(w) + 1e-3)).max()))
        check(bool((diff <= atol + rtol * np.abs(w)).all()),
              f"{name} {k}: differs from Keras by up to {float(diff.max()):.3g} "
              f"(at {np.unravel_index(int(diff.argmax()), diff.shape)}: {g.flat[int(diff.argmax())]} vs "
              f"{w.flat[int(diff.argmax())]})")
        if init is not None and k in init and not k.endswith("running_var"):
            step = float(np.abs(w - init[k]).max())
            check(step > moved, f"{name} {k}: training moved it by only {step:.3g}")
    return rel


def compare_history(check, name, got, want, keys, rtol=1e-4, atol=1e-6):
    """cohort's history (results.json's) against Keras's for each key (loss, accuracy,
    val_loss, ...), every epoch."""
    for k in keys:
        a, b = got.get(k), want.get(k)
        check(a is not None and b is not None and len(a) == len(b),
              f"{name} history {k}: cohort {a}, Keras {b}")
        if a is None or b is None or len(a) != len(b):
            continue
        for e, (u, v) in enumerate(zip(a, b)):
            check(abs(u - v) <= atol + rtol * abs(v),
                  f"{name} epoch {e + 1} {k}: cohort {u:.7g}, Keras {v:.7g}")


# ---- the tests' common run: models from Keras's initial weights, one epoch of Adam in cohort and
# in Keras's fit(), then Keras's predict() on cohort's weights ----

ADAM = {"name": "adam", "lr": 0.01}


def init_models(models, input_shape, tmp, seed):
    """Each of models ({name: plan layers}) built in Keras for samples of input_shape, given
    Keras's initial weights (glorot_init, the seeds from seed on) and written to
    tmp/NAME.safetensors: the initial tensors by name, and the plan's models list (init_from)."""
    inits, listed = {}, []
    for i, (name, layers) in enumerate(models.items()):
        model, ks = build(layers, input_shape)
        inits[name] = glorot_init(model, ks, layers, seed=seed + i)
        write_safetensors(f"{tmp}/{name}.safetensors", inits[name])
        listed.append({"name": name, "layers": layers, "init_from": f"{tmp}/{name}.safetensors"})
    return inits, listed


def adam_plan(train, models, batch):
    """A plan training models one unshuffled epoch of `batch` with ADAM on train (a --data
    spec), a fifth held out for validation, as check_fit trains them in Keras."""
    return {"data": {"train": train, "validation_split": 0.2},
            "defaults": {"epochs": 1, "batch_size": batch, "shuffle": False,
                         "optimizer": dict(ADAM)},
            "models": models}


def check_fit(check, name, layers, got, init, result, x, y, batch):
    """A model cohort trained by adam_plan from init (got: its weights, result: its
    results.json entry) against Keras's fit() of the same: status ok, the same tensors, every
    weight within compare_weights' tolerance, the history's loss, accuracy, val_loss and
    val_accuracy within compare_history's."""
    check(result["status"] == "ok", f"{name}: status {result['status']}")
    want, hist, _ = keras_fit(layers, init, x, y, opt=dict(ADAM), batch=batch,
                              validation_split=0.2)
    check(sorted(got) == sorted(want), f"{name}: tensors {sorted(got)}, Keras's {sorted(want)}")
    rel = compare_weights(check, name, got, want, init)
    compare_history(check, name, result["history"], hist,
                    ("loss", "accuracy", "val_loss", "val_accuracy"))
    print(f"{check.name}: {name}: max relative weight difference {rel:.3g}")


def check_predict(check, name, layers, input_shape, got, x, mine, tol=1e-5):
    """Keras's predict() on x of the model with cohort's trained weights got, against what
    cohort predict gave (mine; None: nothing to compare), within tol."""
    if mine is None:
        return
    keras.utils.clear_session()
    model, ks = build(layers, input_shape)
    set_weights(model, ks, layers, got)
    theirs = np.asarray(model.predict(x, batch_size=64, verbose=0))
    d = float(np.max(np.abs(mine - theirs)))
    check(mine.shape == theirs.shape and d <= tol,
          f"{name}: Keras on cohort's weights predicts up to {d:.3g} apart")
    print(f"{check.name}: {name}: max |cohort predict - Keras predict| = {d:.3g}")
