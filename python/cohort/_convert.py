"""Models in from Keras and PyTorch, and out to them.

A cohort model is its plan entry (the layer dicts of docs/plan.md) and its
weights in the safetensors names and torch layouts (docs/plan.md, Weights);
these functions translate both ways. Keras holds images channels last as
cohort does, with kernels [kh, kw, in, out] and [in, out]; torch holds them
channels first with cohort's file layouts. Where a Dense (or a
BatchNormalization) reads an image flattened, Keras reads its (H, W, C)
order and the weights file torch's (C, H, W): its columns are reordered.

Everything here is plain Python over numpy; keras and torch are imported
only by the functions that need them. A layer or setting cohort does not
have raises ConversionError naming it: nothing is dropped silently.
"""
import json
import math
import os

import numpy as np

_ACTS = ("linear", "relu", "sigmoid", "tanh", "softmax", "gelu", "silu")
_KINDS = ("dense", "dropout", "conv2d", "max_pooling2d", "average_pooling2d",
          "global_average_pooling2d", "flatten", "batch_normalization", "activation")
# The sequence layers of issue 37, and the activations that came with them.
_SEQ_KINDS = ("embedding", "conv1d", "max_pooling1d", "average_pooling1d",
              "global_average_pooling1d", "global_max_pooling1d", "lstm", "gru", "bidirectional",
              "layer_normalization")
# Those of _SEQ_KINDS and of the activations gelu, silu that cohort's library
# has and these conversions are tested on (all of them, since the layers
# landed): any other is refused by name.
_LANDED = frozenset(_SEQ_KINDS + ("gelu", "silu"))


def _landed(name, where):
    if name in _LANDED or (name not in _SEQ_KINDS and name not in ("gelu", "silu")):
        return
    raise ConversionError(f"{where}: cohort has no {name} yet (issue 37's sequence layers "
                          f"it has: {', '.join(sorted(_LANDED)) or 'none'})")


class ConversionError(ValueError):
    """A model of another framework that cohort cannot take (or give) as it
    is: a layer kind, an activation or a setting cohort does not have."""


# ---- cohort's layers and their shapes ----------------------------------------

def _kind(layer):
    """(kind, settings) of a plan layer: a bare name or a one-kind dict."""
    if isinstance(layer, str):
        return layer, {}
    kinds = [k for k in layer if k in _KINDS or k in _SEQ_KINDS]
    if len(kinds) > 1:  # {dense: 64, activation: relu}: activation is a setting there
        kinds = [k for k in kinds if k != "activation"]
    if len(kinds) != 1:
        raise ConversionError(f"layer {layer!r}: not a layer these conversions know (Keras "
                              "and torch have no one layer for it, or cohort has no such layer)")
    return kinds[0], layer


def _pair(v, default):
    if v is None:
        v = default
    return (int(v), int(v)) if np.isscalar(v) else (int(v[0]), int(v[1]))


def _window(n, k, s, padding, d=1):
    """TensorFlow's output size and padding before, after of a window of k
    taps d apart (Keras's dilation_rate) at stride s; causal: all of the
    padding before, as Keras's Conv1D pads."""
    span = (k - 1) * d + 1
    if padding in ("same", "causal"):
        out = -(-n // s)
        total = max((out - 1) * s + span - n, 0)
        if padding == "causal":
            return out, span - 1, 0
        return out, total // 2, total - total // 2
    return (n - span) // s + 1, 0, 0


def _one(v, default):
    """An int of a setting that Keras may give as a 1-tuple."""
    if v is None:
        v = default
    return int(v) if np.isscalar(v) else int(v[0])


def _rnn_of(st):
    """(cell kind, units, return_sequences, bidirectional) of a recurrent layer."""
    if "bidirectional" in st:
        inner = st["bidirectional"]
        cell = "lstm" if "lstm" in inner else "gru"
        return cell, int(inner[cell]), bool(inner.get("return_sequences", False)), True
    cell = "lstm" if "lstm" in st else "gru"
    return cell, int(st[cell]), bool(st.get("return_sequences", False)), False


def _walk(layers, in_shape):
    """Per layer: (kind, settings, input shape, output shape, flat_from),
    shapes as tuples (d,), (T, E) (a sequence) or (h, w, c); flat_from the
    image (h, w, c) whose flattened values a flat input holds in Keras's
    order (None: none), as src/model/layout.c tracks it."""
    out_list = []
    cur = tuple(int(v) for v in in_shape)
    flat_from = cur
    for layer in layers:
        kind, st = _kind(layer)
        ff = None
        if len(cur) == 1 and len(flat_from) == 3 and math.prod(flat_from) == cur[0]:
            ff = flat_from
        elif len(cur) == 3:
            ff = cur
        if kind == "dense":
            out = cur[:-1] + (int(st["dense"]),) if len(cur) == 2 else (int(st["dense"]),)
        elif kind == "conv2d" or kind in ("max_pooling2d", "average_pooling2d"):
            if len(cur) != 3:
                raise ConversionError(f"{kind} on data of shape {cur}: it takes images (H, W, C)")
            if kind == "conv2d":
                k = _pair(st.get("kernel_size"), None)
                s = _pair(st.get("strides"), 1)
                c = int(st["conv2d"])
            else:
                k = _pair(st.get(kind), 2)
                s = _pair(st.get("strides"), k)
                c = cur[2]
            pad = str(st.get("padding", "valid")).lower()
            out = (_window(cur[0], k[0], s[0], pad)[0], _window(cur[1], k[1], s[1], pad)[0], c)
        elif kind == "global_average_pooling2d":
            out = (cur[2],)
        elif kind == "flatten":
            out = (math.prod(cur),)
        elif kind == "embedding":
            if len(cur) != 1:
                raise ConversionError(f"embedding on data of shape {cur}: it takes token ids (T,)")
            out = (cur[0], int(st["embedding"]["output_dim"]))
        elif kind in ("conv1d", "max_pooling1d", "average_pooling1d", "global_average_pooling1d",
                      "global_max_pooling1d", "lstm", "gru", "bidirectional"):
            if len(cur) != 2:
                raise ConversionError(f"{kind} on data of shape {cur}: it takes sequences (T, F)")
            if kind == "conv1d":
                k, d = _one(st.get("kernel_size"), None), _one(st.get("dilation_rate"), 1)
                s = _one(st.get("strides"), 1)
                out = (_window(cur[0], k, s, str(st.get("padding", "valid")), d)[0],
                       int(st["conv1d"]))
            elif kind in ("max_pooling1d", "average_pooling1d"):
                k = _one(st.get(kind), 2)
                s = _one(st.get("strides"), k)
                out = (_window(cur[0], k, s, str(st.get("padding", "valid")))[0], cur[1])
            elif kind.startswith("global"):
                out = (cur[1],)
            else:
                _, units, seq, bi = _rnn_of(st)
                units *= 2 if bi else 1
                out = (cur[0], units) if seq else (units,)
        else:  # dropout, activation, batch_normalization, layer_normalization
            out = cur
        out_list.append((kind, st, cur, out, ff))
        keeps_order = kind in ("dropout", "activation", "batch_normalization", "flatten",
                               "layer_normalization")
        if len(out) == 3 or not keeps_order:
            flat_from = out
        cur = out
    return out_list


def _masks(layers):
    """Per layer: whether its input carries the mask of a mask_zero
    embedding, as src/model/layout.c passes it on (the output of a layer with
    a masked input is masked where it is a sequence of the same steps)."""
    masked, out = False, []
    for layer in layers:
        kind, st = _kind(layer)
        out.append(masked)
        if kind == "embedding":
            masked = bool(st["embedding"].get("mask_zero", False))
        elif masked:
            masked = kind in ("dense", "dropout", "activation", "layer_normalization",
                              "batch_normalization") or \
                (kind in ("lstm", "gru", "bidirectional") and _rnn_of(st)[2])
    return out


def _chw_of_hwc(image):
    """idx with idx[j] the (H, W, C) flat position of the (C, H, W) flat position j."""
    h, w, c = image
    return np.arange(h * w * c).reshape(h, w, c).transpose(2, 0, 1).reshape(-1)


def _reorders(ff):
    return ff is not None and len(ff) == 3 and ff[2] != 1


def _activation_of(name, where):
    a = "linear" if name is None else str(name).lower()
    a = "silu" if a == "swish" else a  # Keras's other name of silu
    if a not in _ACTS:
        raise ConversionError(f"{where}: activation '{name}' is not one of cohort's "
                              f"({', '.join(_ACTS)})")
    _landed(a, where)
    return a


# ---- the Keras side -----------------------------------------------------------

def _keras():
    try:
        import keras  # noqa: PLC0415
    except ImportError:
        raise ImportError("cohort's Keras conversions need keras (pip install keras and a "
                          "backend: jax, tensorflow or torch)") from None
    return keras


def _keras_act(layer, where):
    act = getattr(layer, "activation", None)
    name = getattr(act, "__name__", None) if act is not None else None
    return _activation_of(name, where)


def _check_defaults(layer, where, **expected):
    """Settings of a Keras layer cohort has no form for: each must hold its default."""
    cfg = layer.get_config()
    for key, want in expected.items():
        have = cfg.get(key, want)
        if isinstance(have, (list, tuple)):
            have = tuple(have)
        if have != want and not (want is None and have in (None, {}, [])):
            raise ConversionError(f"{where}: {key}={have!r} has no cohort form (cohort has {want!r})")


def _regularizer(layer, where):
    reg = getattr(layer, "kernel_regularizer", None)
    for name in ("bias_regularizer", "activity_regularizer", "kernel_constraint",
                 "bias_constraint"):
        if getattr(layer, name, None) is not None:
            raise ConversionError(f"{where}: {name} has no cohort form (cohort has "
                                  "kernel_regularizer l1/l2)")
    if reg is None:
        return None
    cfg = reg.get_config()
    extra = set(cfg) - {"l1", "l2"}
    if extra:
        raise ConversionError(f"{where}: kernel_regularizer {type(reg).__name__} has no cohort "
                              "form (cohort has L1, L2, L1L2)")
    return {k: float(cfg[k]) for k in ("l1", "l2") if cfg.get(k)}


def _keras_layers(model):
    """The layers of a Sequential model, or of a functional model that is
    a chain (each layer fed by the one before), in order, without the input."""
    keras = _keras()
    if isinstance(model, keras.Sequential):
        return list(model.layers)
    layers = [la for la in model.layers if not isinstance(la, keras.layers.InputLayer)]
    prev = None
    for la in layers:
        nodes = la._inbound_nodes
        if len(nodes) != 1:
            raise ConversionError(f"Keras layer '{la.name}' is used {len(nodes)} times: cohort "
                                  "takes a chain of layers")
        parents = [t._keras_history.operation for t in nodes[0].input_tensors]
        ok = (prev is None and all(isinstance(p, keras.layers.InputLayer) for p in parents)) or \
            parents == [prev]
        if len(parents) != 1 or not ok:
            raise ConversionError(f"Keras layer '{la.name}' ({type(la).__name__}) is not fed by "
                                  "the layer before it alone: cohort takes a chain of layers "
                                  "(residual connections are not cohort layers yet)")
        prev = la
    return layers


def from_keras(model, weights=None):
    """A Keras model (a built Sequential, or a functional model that is a
    chain) as a plan entry: {"name", "layers", "init_from"} with, when it
    was compile()d, its "optimizer" and "loss". Its current weights are
    written to `weights` (a .safetensors path; default: a file in a
    temporary folder removed when Python exits), which the entry's
    init_from names, so that cohort starts from them; the file is a cohort
    weights file (spec and input shape in its metadata), which
    cohort.predict, cohort.export_onnx and to_torch take as it is. The data's sample
    shape is the model's input shape (channels last, as Keras)."""
    entry, tensors, in_shape = _from_keras(model)
    return _write_entry(entry, tensors, in_shape, weights)


def _write_entry(entry, tensors, in_shape, weights):
    """Write the weights of entry to `weights` (default: a temporary file) with
    the metadata of a cohort weights file (the spec, the input shape), so that
    cohort.predict and cohort.export_onnx take it as it is; entry's init_from
    names it."""
    path = os.fspath(weights) if weights is not None else _temp_path(entry["name"])
    meta = {"format": "cohort", "spec": json.dumps(entry), "inputs": str(math.prod(in_shape))}
    if len(in_shape) in (2, 3):  # as cohort writes it: "(24, 8)", "(28, 28, 1)"
        meta["input_shape"] = "(%s)" % ", ".join(str(v) for v in in_shape)
    from cohort._safetensors import write  # noqa: PLC0415
    write(path, tensors, meta)
    entry["init_from"] = os.path.abspath(path)
    return entry


_KERAS_LAYERS = ("Dense, Conv2D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, Flatten, "
                 "BatchNormalization, Dropout, Activation, ReLU, Softmax, Embedding, Conv1D, "
                 "MaxPooling1D, AveragePooling1D, GlobalAveragePooling1D, GlobalMaxPooling1D, "
                 "LSTM, GRU, Bidirectional, LayerNormalization")
_RNN_DEFAULTS = dict(activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                     dropout=0.0, recurrent_dropout=0.0, return_state=False, go_backwards=False,
                     stateful=False, kernel_regularizer=None, recurrent_regularizer=None,
                     bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                     recurrent_constraint=None, bias_constraint=None)


def _keras_rnn(L, la, where):
    """{lstm: H} or {gru: H} (return_sequences where set) of a Keras LSTM or GRU."""
    if type(la) not in (L.LSTM, L.GRU):
        raise ConversionError(f"{where} has no cohort form (cohort's recurrent layers are "
                              "Keras's LSTM and GRU)")
    cell = "lstm" if isinstance(la, L.LSTM) else "gru"
    _landed(cell, where)
    cfg = la.get_config()
    for key in ("activation", "recurrent_activation"):  # names, or serialized functions
        v = cfg.get(key)
        cfg[key] = v.get("config", v) if isinstance(v, dict) else v
    want = dict(_RNN_DEFAULTS)
    if cell == "gru":
        want["reset_after"] = True
    for key, v in want.items():
        have = cfg.get(key, v)
        if have != v and not (v is None and have in (None, {}, [])):
            raise ConversionError(f"{where}: {key}={have!r} has no cohort form (cohort's "
                                  f"{cell} has {v!r})")
    d = {cell: int(la.units)}
    if la.return_sequences:
        d["return_sequences"] = True
    return d


def _keras_seq_layer(L, la, where):
    """The plan layer of a Keras layer of issue 37's sequence models."""
    if isinstance(la, L.Embedding):
        _landed("embedding", where)
        _check_defaults(la, where, embeddings_regularizer=None, activity_regularizer=None,
                        embeddings_constraint=None, lora_rank=None, sparse=False)
        return {"embedding": {"input_dim": int(la.input_dim), "output_dim": int(la.output_dim),
                              "mask_zero": bool(la.mask_zero)}}
    if type(la) is L.Conv1D:
        _landed("conv1d", where)
        _check_defaults(la, where, groups=1, data_format="channels_last", lora_rank=None)
        d = {"conv1d": int(la.filters), "kernel_size": int(la.kernel_size[0]),
             "strides": int(la.strides[0]), "padding": la.padding,
             "dilation_rate": int(la.dilation_rate[0]), "activation": _keras_act(la, where)}
        if not la.use_bias:
            d["use_bias"] = False
        reg = _regularizer(la, where)
        if reg:
            d["kernel_regularizer"] = reg
        return d
    if isinstance(la, (L.MaxPooling1D, L.AveragePooling1D)):
        kind = "max_pooling1d" if isinstance(la, L.MaxPooling1D) else "average_pooling1d"
        _landed(kind, where)
        _check_defaults(la, where, data_format="channels_last")
        return {kind: int(la.pool_size[0]), "strides": int(la.strides[0]), "padding": la.padding}
    if isinstance(la, (L.GlobalAveragePooling1D, L.GlobalMaxPooling1D)):
        kind = ("global_average_pooling1d" if isinstance(la, L.GlobalAveragePooling1D)
                else "global_max_pooling1d")
        _landed(kind, where)
        _check_defaults(la, where, data_format="channels_last", keepdims=False)
        return kind
    if isinstance(la, (L.LSTM, L.GRU)) and type(la) in (L.LSTM, L.GRU):
        return _keras_rnn(L, la, where)
    if isinstance(la, L.Bidirectional):
        _landed("bidirectional", where)
        if la.merge_mode != "concat":
            raise ConversionError(f"{where}: merge_mode={la.merge_mode!r} has no cohort form "
                                  "(cohort's bidirectional concatenates, merge_mode='concat')")
        fwd, bwd = la.forward_layer, la.backward_layer
        d = _keras_rnn(L, fwd, where)
        back = bwd.get_config()
        same = type(bwd) is type(fwd) and bwd.units == fwd.units and back.get("go_backwards")
        for key in ("return_sequences", "activation", "recurrent_activation", "use_bias",
                    "dropout", "recurrent_dropout", "reset_after"):
            same = same and back.get(key) == fwd.get_config().get(key)
        if not same:
            raise ConversionError(f"{where}: a backward_layer other than the forward layer's "
                                  "mirror has no cohort form")
        return {"bidirectional": d}
    if isinstance(la, L.LayerNormalization):
        _landed("layer_normalization", where)
        axis = la.axis if isinstance(la.axis, int) else (list(la.axis) if len(la.axis) != 1
                                                          else la.axis[0])
        if axis not in (-1, len(la.input.shape) - 1):
            raise ConversionError(f"{where}: axis={la.axis!r} has no cohort form (cohort "
                                  "normalizes the last axis)")
        _check_defaults(la, where, center=True, scale=True, rms_scaling=False,
                        beta_regularizer=None, gamma_regularizer=None, beta_constraint=None,
                        gamma_constraint=None)
        return {"layer_normalization": {"epsilon": float(la.epsilon)}}
    raise ConversionError(f"{where} has no cohort form; cohort's layers are {_KERAS_LAYERS}")


def _f32(v):
    return np.ascontiguousarray(np.asarray(v, dtype=np.float32))


def _gru_perm(a, axis=0):
    """Keras's GRU gate blocks (z, r, h) in torch's order (r, z, n), and back:
    the swap of the first two blocks is its own inverse."""
    z, r, h = np.split(a, 3, axis=axis)
    return np.concatenate([r, z, h], axis=axis)


def _keras_rnn_tensors(cell, la, pre, suffix=""):
    """torch.nn.LSTM's and nn.GRU's tensors of a Keras LSTM or GRU: Keras's
    kernel [F, G*H], recurrent_kernel [H, G*H] transposed; the LSTM's gates
    (i, f, c, o) are torch's (i, f, g, o) and its one bias goes to bias_ih,
    bias_hh zero; the GRU's (z, r, h) are reordered (r, z, n), and its bias
    [2, 3H] is (input, recurrent) as torch's (b_ih, b_hh)."""
    k, rk, b = (_f32(v) for v in la.get_weights())
    if cell == "lstm":
        w_ih, w_hh, b_ih, b_hh = k.T, rk.T, b, np.zeros_like(b)
    else:
        w_ih, w_hh = _gru_perm(k, axis=1).T, _gru_perm(rk, axis=1).T
        b_ih, b_hh = _gru_perm(b[0]), _gru_perm(b[1])
    return {f"{pre}weight_ih_l0{suffix}": _f32(w_ih), f"{pre}weight_hh_l0{suffix}": _f32(w_hh),
            f"{pre}bias_ih_l0{suffix}": _f32(b_ih), f"{pre}bias_hh_l0{suffix}": _f32(b_hh)}


def _keras_seq_tensors(kind, la, pre):
    """The weights file's tensors (issue 37's torch layouts) of a Keras
    sequence layer, names starting with pre ("layers.3.")."""
    w = [_f32(v) for v in la.get_weights()]
    if kind == "embedding":
        return {pre + "weight": w[0]}
    if kind == "conv1d":  # Keras [k, in, out], torch.nn.Conv1d [out, in, k]
        t = {pre + "weight": _f32(w[0].transpose(2, 1, 0))}
        if len(w) > 1:
            t[pre + "bias"] = w[1]
        return t
    if kind == "layer_normalization":
        return {pre + "weight": w[0], pre + "bias": w[1]}
    if kind in ("lstm", "gru"):
        return _keras_rnn_tensors(kind, la, pre)
    if kind == "bidirectional":
        cell = "lstm" if type(la.forward_layer).__name__ == "LSTM" else "gru"
        t = _keras_rnn_tensors(cell, la.forward_layer, pre)
        t.update(_keras_rnn_tensors(cell, la.backward_layer, pre, "_reverse"))
        return t
    return {}


def _from_keras(model):
    keras = _keras()
    if not getattr(model, "built", False) or not model.inputs:
        raise ConversionError(f"Keras model '{model.name}' is not built: give it an input shape "
                              "(keras.Input or input_shape=) or call it on data first")
    dims = tuple(model.inputs[0].shape[1:])
    if any(v is None for v in dims):
        raise ConversionError(f"Keras model '{model.name}' takes samples of shape {dims}; cohort "
                              "needs every size but the batch's (pad sequences to one length)")
    in_shape = tuple(int(v) for v in dims)
    if len(in_shape) not in (1, 2, 3):
        raise ConversionError(f"Keras model '{model.name}' takes samples of shape {in_shape}; "
                              "cohort takes (features,), (steps, features) or (H, W, C)")
    L = keras.layers
    layers, raw = [], []  # raw: the Keras layer of each cohort layer (None: none)
    for la in _keras_layers(model):
        where = f"Keras layer '{la.name}' ({type(la).__name__})"
        if isinstance(la, L.Dense):
            _check_defaults(la, where, lora_rank=None)
            d = {"dense": int(la.units), "activation": _keras_act(la, where)}
            if not la.use_bias:
                d["use_bias"] = False
            reg = _regularizer(la, where)
            if reg:
                d["kernel_regularizer"] = reg
        elif isinstance(la, L.Conv2D) and type(la).__name__ == "Conv2D":
            _check_defaults(la, where, dilation_rate=(1, 1), groups=1, data_format="channels_last",
                            lora_rank=None)
            d = {"conv2d": int(la.filters), "kernel_size": list(la.kernel_size),
                 "strides": list(la.strides), "padding": la.padding,
                 "activation": _keras_act(la, where)}
            if not la.use_bias:
                d["use_bias"] = False
            reg = _regularizer(la, where)
            if reg:
                d["kernel_regularizer"] = reg
        elif isinstance(la, (L.MaxPooling2D, L.AveragePooling2D)):
            _check_defaults(la, where, data_format="channels_last")
            kind = "max_pooling2d" if isinstance(la, L.MaxPooling2D) else "average_pooling2d"
            d = {kind: list(la.pool_size), "strides": list(la.strides), "padding": la.padding}
        elif isinstance(la, L.GlobalAveragePooling2D):
            _check_defaults(la, where, data_format="channels_last", keepdims=False)
            d = "global_average_pooling2d"
        elif isinstance(la, L.Flatten):
            _check_defaults(la, where, data_format="channels_last")
            d = "flatten"
        elif isinstance(la, L.BatchNormalization):
            _check_defaults(la, where, axis=-1, center=True, scale=True, renorm=False,
                            synchronized=False, beta_regularizer=None, gamma_regularizer=None,
                            beta_constraint=None, gamma_constraint=None)
            d = {"batch_normalization": {"momentum": float(la.momentum),
                                         "epsilon": float(la.epsilon)}}
        elif isinstance(la, L.Dropout) and type(la).__name__ == "Dropout":
            _check_defaults(la, where, noise_shape=None)
            d = {"dropout": float(la.rate)}
        elif isinstance(la, L.Activation):
            d = {"activation": _keras_act(la, where)}
        elif isinstance(la, L.ReLU):
            _check_defaults(la, where, max_value=None, negative_slope=0.0, threshold=0.0)
            d = {"activation": "relu"}
        elif isinstance(la, L.Softmax):
            _check_defaults(la, where, axis=-1)
            d = {"activation": "softmax"}
        elif isinstance(la, L.InputLayer):
            continue
        else:
            d = _keras_seq_layer(L, la, where)
        layers.append(d)
        raw.append(la)
    tensors = {}
    masked = _masks(layers)
    for i, (kind, st, cur, out, ff) in enumerate(_walk(layers, in_shape)):
        la = raw[i]
        where = f"Keras layer '{la.name}' ({type(la).__name__})"
        if masked[i] and kind not in ("dense", "dropout", "activation", "layer_normalization",
                                      "lstm", "gru", "bidirectional", "global_average_pooling1d"):
            raise ConversionError(f"{where} gets the mask of an Embedding with mask_zero=True, "
                                  "which Keras drops here (with a warning) and cohort would not: "
                                  "pool or end the sequence before it (GlobalAveragePooling1D, "
                                  "an LSTM without return_sequences), or set mask_zero=False")
        if kind in _SEQ_KINDS:
            t = _keras_seq_tensors(kind, la, f"layers.{i}.")
            if kind == "layer_normalization" and len(cur) == 1 and _reorders(ff):
                idx = _chw_of_hwc(ff)  # a flattened image's features in torch's (C, H, W) order
                t = {k: _f32(v[idx]) for k, v in t.items()}
            tensors.update(t)
        if kind == "dense":
            if len(cur) == 3:
                raise ConversionError(f"{where}: a Dense on an image applies to its last axis in "
                                      "Keras; put Flatten before it")
            w = [np.asarray(v, dtype=np.float32) for v in la.get_weights()]
            W = w[0].T
            if _reorders(ff):
                W = W[:, _chw_of_hwc(ff)]
            tensors[f"layers.{i}.weight"] = W
            if len(w) > 1:
                tensors[f"layers.{i}.bias"] = w[1]
        elif kind == "conv2d":
            w = [np.asarray(v, dtype=np.float32) for v in la.get_weights()]
            tensors[f"layers.{i}.weight"] = w[0].transpose(3, 2, 0, 1)
            if len(w) > 1:
                tensors[f"layers.{i}.bias"] = w[1]
        elif kind == "batch_normalization":
            gamma, beta, mean, var = (np.asarray(v, dtype=np.float32) for v in la.get_weights())
            idx = _chw_of_hwc(ff) if len(cur) == 1 and _reorders(ff) else None
            for suffix, v in (("weight", gamma), ("bias", beta), ("running_mean", mean),
                              ("running_var", var)):
                tensors[f"layers.{i}.{suffix}"] = v[idx] if idx is not None else v
    entry = {"name": model.name, "layers": layers}
    opt = getattr(model, "optimizer", None)
    if opt is not None and getattr(model, "compiled", False):
        entry["optimizer"] = _keras_optimizer(opt)
    loss = getattr(model, "loss", None)
    if loss is not None and getattr(model, "compiled", False):
        entry["loss"] = _keras_loss(loss)
    return entry, tensors, in_shape


_OPT_KEYS = {  # cohort name -> (Keras class, {cohort key: Keras key})
    "sgd": ("SGD", {"momentum": "momentum", "nesterov": "nesterov"}),
    "adam": ("Adam", {"beta_1": "beta_1", "beta_2": "beta_2", "epsilon": "epsilon"}),
    "adamw": ("AdamW", {"beta_1": "beta_1", "beta_2": "beta_2", "epsilon": "epsilon",
                        "weight_decay": "weight_decay"}),
    "rmsprop": ("RMSprop", {"rho": "rho", "momentum": "momentum", "epsilon": "epsilon",
                            "centered": "centered"}),
    "adagrad": ("Adagrad", {"initial_accumulator_value": "initial_accumulator_value",
                            "epsilon": "epsilon"}),
    "nadam": ("Nadam", {"beta_1": "beta_1", "beta_2": "beta_2", "epsilon": "epsilon"}),
}
_SCHEDULES = {"CosineDecay": "cosine_decay", "ExponentialDecay": "exponential_decay",
              "PiecewiseConstantDecay": "piecewise_constant"}


def _keras_optimizer(opt):
    """A Keras optimizer (an instance, or its name) as the plan's optimizer map."""
    if isinstance(opt, str):
        name = opt.lower()
        if name not in _OPT_KEYS:
            raise ConversionError(f"optimizer '{opt}' has no cohort form (cohort has "
                                  f"{', '.join(_OPT_KEYS)})")
        return {"name": name}
    if isinstance(opt, dict):
        return dict(opt)
    cls = type(opt).__name__
    names = {v[0]: k for k, v in _OPT_KEYS.items()}
    if cls not in names:
        raise ConversionError(f"Keras optimizer {cls} has no cohort form (cohort has "
                              f"{', '.join(names)})")
    name = names[cls]
    cfg = opt.get_config()
    out = {"name": name}
    keys = _OPT_KEYS[name][1]
    for k, kk in keys.items():
        if kk in cfg and cfg[kk] is not None:
            out[k] = cfg[kk] if isinstance(cfg[kk], bool) else float(cfg[kk])
    for flag in ("amsgrad", "use_ema"):
        if cfg.get(flag):
            raise ConversionError(f"Keras optimizer {cls}: {flag}=True has no cohort form")
    if cfg.get("weight_decay") and name != "adamw":
        raise ConversionError(f"Keras optimizer {cls}: weight_decay={cfg['weight_decay']} has no "
                              "cohort form (cohort's weight decay is AdamW's)")
    if cfg.get("loss_scale_factor") or (cfg.get("gradient_accumulation_steps") or 1) > 1:
        raise ConversionError(f"Keras optimizer {cls}: loss scaling and gradient accumulation "
                              "have no cohort form")
    for clip in ("clipnorm", "global_clipnorm", "clipvalue"):
        if cfg.get(clip) is not None:
            out[clip] = float(cfg[clip])
    lr = opt.learning_rate if hasattr(opt, "_learning_rate") else cfg.get("learning_rate")
    sched = getattr(opt, "_learning_rate", None)
    sname = type(sched).__name__
    if sname in _SCHEDULES:
        sc = sched.get_config()
        if sname == "CosineDecay":
            out["lr"] = float(sc["initial_learning_rate"])
            s = {"decay_steps": int(sc["decay_steps"]), "alpha": float(sc.get("alpha", 0.0))}
            if sc.get("warmup_target") is not None:
                s["warmup_target"] = float(sc["warmup_target"])
                s["warmup_steps"] = int(sc.get("warmup_steps", 0))
        elif sname == "ExponentialDecay":
            out["lr"] = float(sc["initial_learning_rate"])
            s = {"decay_steps": int(sc["decay_steps"]), "decay_rate": float(sc["decay_rate"]),
                 "staircase": bool(sc.get("staircase", False))}
        else:
            s = {"boundaries": [int(b) for b in sc["boundaries"]],
                 "values": [float(v) for v in sc["values"]]}
            out["lr"] = s["values"][0]
        out["schedule"] = {_SCHEDULES[sname]: s}
    elif sched is not None and not hasattr(sched, "numpy") and callable(sched):
        raise ConversionError(f"Keras optimizer {cls}: learning-rate schedule {sname} has no "
                              f"cohort form (cohort has {', '.join(_SCHEDULES)})")
    else:
        out["lr"] = float(np.asarray(lr))
    return out


_LOSSES = {"sparse_categorical_crossentropy": "sparse_categorical_crossentropy",
           "categorical_crossentropy": "categorical_crossentropy",
           "binary_crossentropy": "binary_crossentropy",
           "mean_squared_error": "mse", "mse": "mse", "mean_absolute_error": "mae", "mae": "mae",
           "huber": "huber", "huber_loss": "huber",
           "SparseCategoricalCrossentropy": "sparse_categorical_crossentropy",
           "CategoricalCrossentropy": "categorical_crossentropy",
           "BinaryCrossentropy": "binary_crossentropy", "MeanSquaredError": "mse",
           "MeanAbsoluteError": "mae", "Huber": "huber"}


def _keras_loss(loss):
    """A Keras loss (a name, a function or a Loss instance) as the plan's loss."""
    if isinstance(loss, dict):
        return dict(loss)
    if isinstance(loss, (list, tuple)):
        raise ConversionError("a model of several losses has no cohort form")
    if isinstance(loss, str):
        name = loss
        cfg = {}
    else:
        name = getattr(loss, "__name__", None) or type(loss).__name__
        cfg = loss.get_config() if hasattr(loss, "get_config") else {}
    if name not in _LOSSES:
        raise ConversionError(f"loss {name} has no cohort form (cohort has "
                              "sparse_categorical_crossentropy, categorical_crossentropy, "
                              "binary_crossentropy, mse, mae, huber)")
    out = {"name": _LOSSES[name]}
    if cfg.get("from_logits"):
        out["from_logits"] = True
    if cfg.get("label_smoothing"):
        out["label_smoothing"] = float(cfg["label_smoothing"])
    if out["name"] == "huber" and cfg.get("delta", 1.0) != 1.0:
        out["delta"] = float(cfg["delta"])
    for key in ("axis", "ignore_class"):
        if cfg.get(key) not in (None, -1):
            raise ConversionError(f"loss {name}: {key}={cfg[key]} has no cohort form")
    return out["name"] if len(out) == 1 else out


def _saved(weights):
    """(layers, tensors, input shape, spec) of a weights file cohort wrote,
    or of a Result."""
    if hasattr(weights, "weights") and hasattr(weights, "config"):  # a cohort.Result
        if weights.weights is None:
            raise ConversionError(f"model '{weights.name}' ({weights.status}) saved no weights")
        tensors, spec, meta = weights.weights, weights.config, weights.meta or {}
    else:
        from cohort._safetensors import read  # noqa: PLC0415
        tensors, meta = read(os.fspath(weights))
        if "spec" not in meta:
            raise ConversionError(f"{weights}: no model spec in its metadata; was it written by "
                                  "cohort?")
        spec = json.loads(meta["spec"])
    shape = meta.get("input_shape")
    if shape and shape.count(",") in (1, 2):  # (T, F) or (H, W, C)
        in_shape = tuple(int(v) for v in shape.strip("()").split(","))
    elif meta.get("inputs"):
        in_shape = (int(meta["inputs"]),)
    else:
        raise ConversionError("the weights store no input shape (a file of an older cohort)")
    return spec["layers"], tensors, in_shape, dict(spec, _meta=meta)


def _temp_path(name):
    import atexit  # noqa: PLC0415
    import shutil  # noqa: PLC0415
    import tempfile  # noqa: PLC0415
    global _TEMP
    if _TEMP is None:
        _TEMP = tempfile.mkdtemp(prefix="cohort-init-")
        atexit.register(shutil.rmtree, _TEMP, True)
    base = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    path = os.path.join(_TEMP, f"{base}.safetensors")
    n = 1
    while os.path.exists(path):
        path = os.path.join(_TEMP, f"{base}-{n}.safetensors")
        n += 1
    return path


_TEMP = None


def _loss_of(spec):
    loss = spec.get("loss", "sparse_categorical_crossentropy")
    return (loss, {}) if isinstance(loss, str) else (loss["name"], loss)


def _keras_rnn_weights(cell, t, suffix=""):
    """A Keras LSTM's or GRU's weights of torch's tensors (the inverse of
    _keras_rnn_tensors; an LSTM's two biases are added, as cohort adds them)."""
    w_ih, w_hh = t("weight_ih_l0" + suffix), t("weight_hh_l0" + suffix)
    b_ih, b_hh = t("bias_ih_l0" + suffix), t("bias_hh_l0" + suffix)
    if cell == "lstm":
        return [_f32(w_ih.T), _f32(w_hh.T), _f32(b_ih + b_hh)]
    return [_f32(_gru_perm(w_ih).T), _f32(_gru_perm(w_hh).T),
            _f32(np.stack([_gru_perm(b_ih), _gru_perm(b_hh)]))]


def _keras_seq_of(L, kind, st, t, masked, where):
    """(Keras layer, its weights or None) of a cohort sequence layer; t(name)
    is the layer's tensor of that name."""
    if kind == "embedding":
        e = st["embedding"]
        return (L.Embedding(int(e["input_dim"]), int(e["output_dim"]),
                            mask_zero=bool(e.get("mask_zero", False))), [t("weight")])
    if kind == "conv1d":
        has_bias = "use_bias" not in st or st["use_bias"]
        la = L.Conv1D(int(st["conv1d"]), _one(st.get("kernel_size"), None),
                      strides=_one(st.get("strides"), 1), padding=st.get("padding", "valid"),
                      dilation_rate=_one(st.get("dilation_rate"), 1),
                      activation=st.get("activation", "linear"), use_bias=has_bias)
        return la, [_f32(t("weight").transpose(2, 1, 0))] + ([t("bias")] if has_bias else [])
    if kind in ("max_pooling1d", "average_pooling1d"):
        k = _one(st.get(kind), 2)
        cls = L.MaxPooling1D if kind == "max_pooling1d" else L.AveragePooling1D
        return cls(k, strides=_one(st.get("strides"), k), padding=st.get("padding", "valid")), None
    if kind == "global_average_pooling1d":
        return L.GlobalAveragePooling1D(), None
    if kind == "global_max_pooling1d":
        if masked:
            raise ConversionError(f"{where}: global_max_pooling1d leaves padding out, and Keras's "
                                  "GlobalMaxPooling1D does not (it ignores the mask): no Keras "
                                  "layer does what it does")
        return L.GlobalMaxPooling1D(), None
    if kind == "layer_normalization":
        ln = st.get("layer_normalization") or {}
        return (L.LayerNormalization(epsilon=float(ln.get("epsilon", 0.001))),
                [t("weight"), t("bias")])
    cell, units, seq, bi = _rnn_of(st)
    cls = L.LSTM if cell == "lstm" else L.GRU
    if not bi:
        return cls(units, return_sequences=seq), _keras_rnn_weights(cell, t)
    la = L.Bidirectional(cls(units, return_sequences=seq), merge_mode="concat")
    return la, _keras_rnn_weights(cell, t) + _keras_rnn_weights(cell, t, "_reverse")


def to_keras(weights, compile=True):
    """A keras.Sequential of the model saved in `weights` (a .safetensors
    path cohort wrote, or a cohort.Result), with its weights: it takes the
    samples as cohort's data (channels last) and predicts what cohort
    predict gives. compile: compiled with the model's optimizer and loss,
    and accuracy (or mae for regression) as its metric, so that evaluate()
    and save() work at once."""
    keras = _keras()
    L = keras.layers
    layers, tensors, in_shape, spec = _saved(weights)
    seq = [keras.Input(shape=in_shape)]
    sets = []  # (keras layer, weights list)
    masked = _masks(layers)
    for i, (kind, st, cur, out, ff) in enumerate(_walk(layers, in_shape)):
        t = lambda s: np.array(tensors[f"layers.{i}.{s}"], dtype=np.float32)  # noqa: E731
        has_bias = f"layers.{i}.bias" in tensors
        if kind == "dense":
            if len(cur) == 3:  # cohort's first dense flattens its image itself
                seq.append(L.Flatten())
            W = t("weight")
            if _reorders(ff):
                K = np.empty_like(W)
                K[:, _chw_of_hwc(ff)] = W
                W = K
            la = L.Dense(int(st["dense"]), activation=st.get("activation", "linear"),
                         use_bias=has_bias, kernel_regularizer=_keras_reg(keras, st))
            sets.append((la, [W.T] + ([t("bias")] if has_bias else [])))
        elif kind == "conv2d":
            la = L.Conv2D(int(st["conv2d"]), tuple(_pair(st.get("kernel_size"), None)),
                          strides=tuple(_pair(st.get("strides"), 1)),
                          padding=st.get("padding", "valid"),
                          activation=st.get("activation", "linear"), use_bias=has_bias,
                          kernel_regularizer=_keras_reg(keras, st))
            sets.append((la, [t("weight").transpose(2, 3, 1, 0)] + ([t("bias")] if has_bias else [])))
        elif kind in ("max_pooling2d", "average_pooling2d"):
            k = _pair(st.get(kind), 2)
            cls = L.MaxPooling2D if kind == "max_pooling2d" else L.AveragePooling2D
            la = cls(k, strides=_pair(st.get("strides"), k), padding=st.get("padding", "valid"))
        elif kind == "global_average_pooling2d":
            la = L.GlobalAveragePooling2D()
        elif kind == "flatten":
            la = L.Flatten()
        elif kind == "batch_normalization":
            bn = st.get("batch_normalization") or {}
            la = L.BatchNormalization(momentum=bn.get("momentum", 0.99), epsilon=bn.get("epsilon", 0.001))
            vs = [t(s) for s in ("weight", "bias", "running_mean", "running_var")]
            if len(cur) == 1 and _reorders(ff):
                idx = _chw_of_hwc(ff)
                for v in vs:
                    v[idx] = v.copy()
            sets.append((la, vs))
        elif kind == "dropout":
            la = L.Dropout(float(st["dropout"]))
        elif kind == "activation":
            la = L.Activation(st["activation"])
        else:
            la, vs = _keras_seq_of(L, kind, st, t, masked[i], f"layers.{i}")
            if kind == "layer_normalization" and len(cur) == 1 and _reorders(ff):
                idx = _chw_of_hwc(ff)
                for v in vs:
                    v[idx] = v.copy()
            if vs is not None:
                sets.append((la, vs))
        seq.append(la)
    model = keras.Sequential(seq, name=spec.get("name", "cohort"))
    for la, vs in sets:
        if isinstance(la, L.Bidirectional):
            half = len(vs) // 2
            la.forward_layer.set_weights(vs[:half])
            la.backward_layer.set_weights(vs[half:])
        else:
            la.set_weights(vs)
    if compile:
        loss, lcfg = _loss_of(spec)
        regression = loss in ("mse", "mae", "huber") and not int(spec["_meta"].get("classes") or 0)
        model.compile(optimizer=_keras_opt(keras, spec.get("optimizer") or {}),
                      loss=_keras_loss_obj(keras, loss, lcfg),
                      metrics=["mae"] if regression else ["accuracy"])
    return model


def _keras_reg(keras, st):
    reg = st.get("kernel_regularizer")
    if not reg:
        return None
    if isinstance(reg, str):
        return reg
    return keras.regularizers.L1L2(l1=float(reg.get("l1", 0.0)), l2=float(reg.get("l2", 0.0)))


def _keras_opt(keras, o):
    name = o.get("name", "adam")
    cls = getattr(keras.optimizers, _OPT_KEYS[name][0])
    kw = {kk: o[k] for k, kk in _OPT_KEYS[name][1].items() if k in o}
    for clip in ("clipnorm", "global_clipnorm", "clipvalue"):
        if o.get(clip):
            kw[clip] = o[clip]
    lr = o.get("lr", 0.001)
    sched = o.get("schedule")
    if sched:
        (sname, s), = sched.items()
        S = keras.optimizers.schedules
        if sname == "cosine_decay":
            lr = S.CosineDecay(lr, s["decay_steps"], alpha=s.get("alpha", 0.0),
                               warmup_target=s.get("warmup_target"),
                               warmup_steps=s.get("warmup_steps", 0))
        elif sname == "exponential_decay":
            lr = S.ExponentialDecay(lr, s["decay_steps"], s["decay_rate"],
                                    staircase=s.get("staircase", False))
        else:
            lr = S.PiecewiseConstantDecay(s["boundaries"], s["values"])
    return cls(learning_rate=lr, **kw)


def _keras_loss_obj(keras, name, cfg):
    K = keras.losses
    kw = {}
    if cfg.get("from_logits"):
        kw["from_logits"] = True
    if cfg.get("label_smoothing"):
        kw["label_smoothing"] = cfg["label_smoothing"]
    if name == "sparse_categorical_crossentropy":
        return K.SparseCategoricalCrossentropy(**kw)
    if name == "categorical_crossentropy":
        return K.CategoricalCrossentropy(**kw)
    if name == "binary_crossentropy":
        return K.BinaryCrossentropy(**kw)
    if name == "huber":
        return K.Huber(delta=cfg.get("delta", 1.0))
    return {"mse": K.MeanSquaredError, "mae": K.MeanAbsoluteError}[name]()


# ---- the torch side -------------------------------------------------------------

def _torch():
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        raise ImportError("cohort's torch conversions need torch (pip install torch)") from None
    return torch


def from_torch(module, input_shape, weights=None, name=None):
    """A torch.nn.Sequential of the layers cohort has (Linear, Conv2d,
    MaxPool2d, AvgPool2d, AdaptiveAvgPool2d(1), Flatten, BatchNorm1d/2d,
    Dropout, ReLU, Sigmoid, Tanh, Softmax, Identity) as a plan entry, its
    current weights written to `weights` (default: a temporary file) and
    named by the entry's init_from (name: the entry's name, default
    "torch_model"). input_shape is torch's, one sample's:
    (features,) or (C, H, W); cohort's data for it are [n, H, W, C]
    (x.permute(0, 2, 3, 1) of torch's images). Sequence models (issue 37)
    take token ids (T,) into an nn.Embedding, or sequences (T, F) batch
    first, as cohort's data [n, T, F]; what a plain Sequential cannot say of
    them comes in cohort.nn's modules: Recurrent (an nn.LSTM or nn.GRU and
    the output it returns), ChannelsLast (an nn.Conv1d on [N, T, C]), Pool1d,
    GlobalPool1d, and Sequential(..., mask_zero=True) for Keras's mask_zero."""
    torch = _torch()
    nn = torch.nn
    if not isinstance(module, nn.Sequential):
        raise ConversionError(f"from_torch takes a torch.nn.Sequential, not {type(module).__name__}")
    shape = tuple(int(v) for v in input_shape)
    if len(shape) == 3:
        in_shape = (shape[1], shape[2], shape[0])
    elif len(shape) in (1, 2):  # (features,) or token ids (T,); a sequence (T, F)
        in_shape = shape
    else:
        raise ConversionError(f"input_shape {shape}: cohort takes (features,), token ids (T,), "
                              "a sequence (T, F) or images (C, H, W)")
    mask_zero = bool(getattr(module, "mask_zero", False))  # cohort.nn.Sequential's
    mods = [m for m in module if not isinstance(m, nn.Identity)]
    layers, raw = [], []
    cur = in_shape
    i = 0
    while i < len(mods):
        m = mods[i]
        where = f"torch module {i} ({type(m).__name__})"
        nxt = mods[i + 1] if i + 1 < len(mods) else None
        act = _torch_act(nn, nxt) if nxt is not None else None
        if isinstance(m, nn.Linear):
            d = {"dense": m.out_features}
            if m.bias is None:
                d["use_bias"] = False
        elif isinstance(m, nn.Conv2d):
            if m.dilation != (1, 1) or m.groups != 1 or m.padding_mode != "zeros":
                raise ConversionError(f"{where}: dilation, groups and padding_mode other than "
                                      "1, 1, zeros have no cohort form")
            d = {"conv2d": m.out_channels, "kernel_size": list(m.kernel_size),
                 "strides": list(m.stride), "padding": _torch_padding(m, cur, where)}
            if m.bias is None:
                d["use_bias"] = False
        elif isinstance(m, (nn.MaxPool2d, nn.AvgPool2d)):
            k = _pair(m.kernel_size, None)
            s = _pair(m.stride if m.stride is not None else k, k)
            if _pair(m.padding, 0) != (0, 0) or m.ceil_mode or \
                    (isinstance(m, nn.MaxPool2d) and _pair(m.dilation, 1) != (1, 1)):
                raise ConversionError(f"{where}: padding, ceil_mode and dilation have no cohort "
                                      "form (cohort pools valid windows, or TensorFlow's same)")
            if isinstance(m, nn.AvgPool2d) and m.divisor_override:
                raise ConversionError(f"{where}: divisor_override has no cohort form")
            kind = "max_pooling2d" if isinstance(m, nn.MaxPool2d) else "average_pooling2d"
            d = {kind: list(k), "strides": list(s), "padding": "valid"}
        elif isinstance(m, nn.AdaptiveAvgPool2d):
            if _pair(m.output_size, None) != (1, 1):
                raise ConversionError(f"{where}: output_size {m.output_size} has no cohort form "
                                      "(cohort has AdaptiveAvgPool2d(1), global average pooling)")
            d = "global_average_pooling2d"
            if isinstance(nxt, nn.Flatten):  # cohort's output is already [n, C]
                mods.pop(i + 1)
                nxt = mods[i + 1] if i + 1 < len(mods) else None
                act = _torch_act(nn, nxt) if nxt is not None else None
        elif isinstance(m, nn.Flatten):
            if m.start_dim != 1 or m.end_dim != -1:
                raise ConversionError(f"{where}: Flatten({m.start_dim}, {m.end_dim}) has no cohort "
                                      "form (cohort has Flatten())")
            d = "flatten"
        elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            if not m.affine or not m.track_running_stats or m.momentum is None:
                raise ConversionError(f"{where}: affine=False, track_running_stats=False and "
                                      "momentum=None have no cohort form")
            d = {"batch_normalization": {"momentum": 1.0 - float(m.momentum), "epsilon": float(m.eps)}}
        elif isinstance(m, nn.Dropout) and type(m) is nn.Dropout:
            d = {"dropout": float(m.p)}
        elif _torch_act(nn, m) is not None:
            d = {"activation": _torch_act(nn, m)}
            act = None
        else:
            d = _torch_seq_layer(nn, m, cur, where, mask_zero and i == 0)
        if isinstance(d, dict) and ("dense" in d or "conv2d" in d or "conv1d" in d) and act:
            d["activation"] = act  # the activation module after it, as Keras's argument
            i += 1
        layers.append(d)
        raw.append(m)
        cur = _walk(layers, in_shape)[-1][3]
        i += 1
    tensors = {}
    for j, (kind, st, cur, out, ff) in enumerate(_walk(layers, in_shape)):
        m = raw[j]
        if kind in _SEQ_KINDS:
            tensors.update(_torch_seq_tensors(kind, m, f"layers.{j}."))
        elif kind in ("dense", "conv2d", "batch_normalization"):
            tensors[f"layers.{j}.weight"] = m.weight.detach().cpu().float().numpy()
            if m.bias is not None:
                tensors[f"layers.{j}.bias"] = m.bias.detach().cpu().float().numpy()
            if kind == "batch_normalization":
                tensors[f"layers.{j}.running_mean"] = m.running_mean.detach().cpu().float().numpy()
                tensors[f"layers.{j}.running_var"] = m.running_var.detach().cpu().float().numpy()
            if kind == "dense" and len(cur) == 3:
                raise ConversionError(f"torch module Linear at layer {j} gets an image: put "
                                      "Flatten() before it")
    entry = {"name": name or "torch_model", "layers": layers}
    return _write_entry(entry, tensors, in_shape, weights)


def _torch_takes_sequence(module):
    """Whether a torch module's first layer reads [N, T, F] as a sequence
    (cohort.nn's modules, LayerNorm), not as an image of one channel."""
    from cohort import nn as cnn  # noqa: PLC0415
    nn = _torch().nn
    mods = [m for m in module if not isinstance(m, nn.Identity)] if \
        isinstance(module, nn.Sequential) else [module]
    return bool(mods) and isinstance(mods[0], (cnn.Recurrent, cnn.ChannelsLast, cnn.Pool1d,
                                                cnn.GlobalPool1d, nn.LayerNorm, nn.Linear))


def _torch_rnn(nn, rnn, return_sequences, where):
    if not isinstance(rnn, (nn.LSTM, nn.GRU)) or type(rnn) not in (nn.LSTM, nn.GRU):
        raise ConversionError(f"{where}: cohort.nn.Recurrent of {type(rnn).__name__}: cohort's "
                              "recurrent layers are nn.LSTM and nn.GRU")
    cell = "lstm" if isinstance(rnn, nn.LSTM) else "gru"
    _landed(cell, where)
    if rnn.bidirectional:
        _landed("bidirectional", where)
    bad = {"batch_first": (rnn.batch_first, True), "num_layers": (rnn.num_layers, 1),
           "bias": (rnn.bias, True), "dropout": (float(rnn.dropout), 0.0),
           "proj_size": (getattr(rnn, "proj_size", 0), 0)}
    for key, (have, want) in bad.items():
        if have != want:
            raise ConversionError(f"{where}: nn.{type(rnn).__name__}({key}={have!r}) has no "
                                  f"cohort form (cohort's has {key}={want!r})")
    d = {cell: int(rnn.hidden_size)}
    if return_sequences:
        d["return_sequences"] = True
    return {"bidirectional": d} if rnn.bidirectional else d


def _torch_seq_layer(nn, m, cur, where, first_masked):
    """The plan layer of a torch module of issue 37's sequence models;
    cur the shape of its input in cohort's layout."""
    from cohort import nn as cnn  # noqa: PLC0415 - needs torch, as this does
    if isinstance(m, nn.Embedding):
        _landed("embedding", where)
        if m.padding_idx is not None or m.max_norm is not None or m.scale_grad_by_freq or \
                m.sparse:
            raise ConversionError(f"{where}: padding_idx, max_norm, scale_grad_by_freq and sparse "
                                  "have no cohort form (cohort.nn.Sequential(..., mask_zero=True) "
                                  "makes token 0 padding, as Keras's mask_zero)")
        return {"embedding": {"input_dim": int(m.num_embeddings),
                              "output_dim": int(m.embedding_dim), "mask_zero": first_masked}}
    if isinstance(m, cnn.Recurrent):
        return _torch_rnn(nn, m.rnn, m.return_sequences, where)
    if isinstance(m, (nn.LSTM, nn.GRU, nn.RNN)):
        raise ConversionError(f"{where}: nn.{type(m).__name__} returns (output, state), which the "
                              "next module of a Sequential cannot take: wrap it, "
                              "cohort.nn.Recurrent(rnn, return_sequences=False)")
    if isinstance(m, (nn.Conv1d, nn.MaxPool1d, nn.AvgPool1d)):
        raise ConversionError(f"{where}: torch's {type(m).__name__} takes [N, C, T] and cohort's "
                              "sequences are [N, T, C] (Keras's layout): wrap it, "
                              "cohort.nn.ChannelsLast(module)")
    if isinstance(m, cnn.ChannelsLast):
        inner = list(m.module) if isinstance(m.module, nn.Sequential) else [m.module]
        pad = (0, 0)
        if len(inner) == 2 and isinstance(inner[0], nn.ConstantPad1d) and inner[0].value == 0:
            pad = tuple(inner[0].padding)
            inner = inner[1:]
        if len(inner) != 1 or type(inner[0]) is not nn.Conv1d:
            raise ConversionError(f"{where}: cohort.nn.ChannelsLast of {m.module!r}: cohort takes "
                                  "an nn.Conv1d, or an nn.Sequential of a ConstantPad1d of zeros "
                                  "and an nn.Conv1d")
        c = inner[0]
        _landed("conv1d", where)
        k, s, dil = c.kernel_size[0], c.stride[0], c.dilation[0]
        if c.groups != 1 or c.padding_mode != "zeros":
            raise ConversionError(f"{where}: groups and padding_mode other than 1, zeros have no "
                                  "cohort form")
        p = c.padding if isinstance(c.padding, str) else c.padding[0]
        span = (k - 1) * dil
        if p == "same" and span % 2 == 0:
            p = span // 2
        if p == "valid":
            p = 0
        if isinstance(p, str) or (p and any(pad)):
            raise ConversionError(f"{where}: padding={c.padding!r} with an odd padding in all "
                                  "has no cohort form")
        before, after = (p, p) if p else pad
        _, want_b, want_a = _window(cur[0], k, s, "same", dil)
        if (before, after) == (0, 0):
            padding = "valid"
        elif (before, after) == (span, 0) and s == 1:
            padding = "causal"
        elif (before, after) == (want_b, want_a):
            padding = "same"
        else:
            raise ConversionError(f"{where}: padding ({before}, {after}) is none of cohort's "
                                  f"(valid; same: {(want_b, want_a)}; causal: ({span}, 0))")
        d = {"conv1d": int(c.out_channels), "kernel_size": int(k), "strides": int(s),
             "padding": padding, "dilation_rate": int(dil)}
        if c.bias is None:
            d["use_bias"] = False
        return d
    if isinstance(m, cnn.Pool1d):
        kind = "max_pooling1d" if m.is_max else "average_pooling1d"
        _landed(kind, where)
        _, b, a = _window(cur[0], m.k, m.s, "same")
        if (m.before, m.after) not in ((0, 0), (b, a)):
            raise ConversionError(f"{where}: padding ({m.before}, {m.after}) is neither valid "
                                  f"nor TensorFlow's same {(b, a)}")
        return {kind: m.k, "strides": m.s, "padding": "valid" if (m.before, m.after) == (0, 0)
                else "same"}
    if isinstance(m, cnn.GlobalPool1d):
        kind = "global_average_pooling1d" if m.mode == "avg" else "global_max_pooling1d"
        _landed(kind, where)
        return kind
    if type(m) is nn.LayerNorm:
        _landed("layer_normalization", where)
        if not m.elementwise_affine or len(m.normalized_shape) != 1 or \
                m.normalized_shape[0] != cur[-1]:
            raise ConversionError(f"{where}: cohort's layer normalization is LayerNorm(last axis "
                                  f"{cur[-1]}) with elementwise_affine (got "
                                  f"{tuple(m.normalized_shape)}, {m.elementwise_affine})")
        return {"layer_normalization": {"epsilon": float(m.eps)}}
    raise ConversionError(f"{where} has no cohort form; cohort's are Linear, Conv2d, MaxPool2d, "
                          "AvgPool2d, AdaptiveAvgPool2d(1), Flatten, BatchNorm1d/2d, Dropout, "
                          "ReLU, Sigmoid, Tanh, GELU, SiLU, Softmax(dim=1), Embedding, LayerNorm, "
                          "and cohort.nn's Recurrent (of LSTM, GRU), ChannelsLast (of Conv1d), "
                          "Pool1d, GlobalPool1d")


def _torch_seq_tensors(kind, m, pre):
    """The weights file's tensors of a torch sequence module (torch's own
    layouts and names, issue 37's)."""
    def arr(v):
        return v.detach().cpu().float().numpy()
    if kind == "embedding":
        return {pre + "weight": arr(m.weight)}
    if kind == "conv1d":
        c = m.module if not hasattr(m.module, "__getitem__") else m.module[-1]
        t = {pre + "weight": arr(c.weight)}
        if c.bias is not None:
            t[pre + "bias"] = arr(c.bias)
        return t
    if kind == "layer_normalization":
        return {pre + "weight": arr(m.weight), pre + "bias": arr(m.bias)}
    if kind in ("lstm", "gru", "bidirectional"):
        return {pre + name: arr(v) for name, v in m.rnn.named_parameters()}
    return {}


def _torch_act(nn, m):
    if isinstance(m, nn.ReLU):
        return "relu"
    if isinstance(m, nn.Sigmoid):
        return "sigmoid"
    if isinstance(m, nn.Tanh):
        return "tanh"
    if isinstance(m, nn.GELU):
        if m.approximate != "none":
            raise ConversionError(f"GELU(approximate='{m.approximate}') has no cohort form "
                                  "(cohort's gelu is the exact one, approximate='none')")
        return "gelu"
    if isinstance(m, nn.SiLU):
        return "silu"
    if isinstance(m, nn.Softmax):
        if m.dim not in (1, -1):
            raise ConversionError(f"Softmax(dim={m.dim}) has no cohort form (cohort's is over "
                                  "the outputs of a sample, dim=1)")
        return "softmax"
    return None


def _torch_padding(m, cur, where):
    """'valid' or 'same' for a Conv2d's padding on an input of shape cur (h, w, c)."""
    if m.padding == "valid":
        return "valid"
    if m.padding == "same":
        if tuple(m.stride) != (1, 1):
            raise ConversionError(f"{where}: padding='same' at stride {m.stride}")
        if any(k % 2 == 0 for k in m.kernel_size):
            raise ConversionError(f"{where}: torch's padding='same' of an even kernel pads "
                                  "before more than after, TensorFlow's (cohort's) after")
        return "same"
    p = tuple(m.padding)
    if p == (0, 0):
        return "valid"
    # Symmetric padding equals TensorFlow's same where that pads as much on both sides.
    for ax in range(2):
        out, before, after = _window(cur[ax], m.kernel_size[ax], m.stride[ax], "same")
        tout = (cur[ax] + 2 * p[ax] - m.kernel_size[ax]) // m.stride[ax] + 1
        if before != p[ax] or tout != out:
            raise ConversionError(f"{where}: padding={p} is not TensorFlow's same on this input "
                                  "(cohort pads valid or same)")
    return "same"


def to_torch(weights):
    """A torch.nn.Sequential of the model saved in `weights` (a .safetensors
    path cohort wrote, or a cohort.Result), in eval mode, with its weights.
    It takes torch's layout, [N, C, H, W] images (x.permute(0, 3, 1, 2) of
    cohort's [N, H, W, C]) or [N, features], and predicts what cohort
    predict gives (probabilities of a softmax output). A sequence model is a
    cohort.nn.Sequential (an nn.Sequential, with mask_zero where its
    embedding has it) of torch's modules and cohort.nn's, taking token ids
    [N, T] (torch.long) or sequences [N, T, F]."""
    torch = _torch()
    nn = torch.nn
    layers, tensors, in_shape, spec = _saved(weights)
    mods = []

    def param(name):
        return nn.Parameter(torch.from_numpy(np.array(tensors[name], dtype=np.float32)))

    for i, (kind, st, cur, out, ff) in enumerate(_walk(layers, in_shape)):
        has_bias = f"layers.{i}.bias" in tensors
        act = st.get("activation", "linear") if isinstance(st, dict) else "linear"
        if kind == "dense":
            if len(cur) == 3:
                mods.append(nn.Flatten())
            m = nn.Linear(cur[-1] if len(cur) == 2 else math.prod(cur), int(st["dense"]),
                          bias=has_bias)  # on each step of a sequence, as Keras's Dense
            m.weight = param(f"layers.{i}.weight")
            if has_bias:
                m.bias = param(f"layers.{i}.bias")
            mods.append(m)
        elif kind == "conv2d":
            k = _pair(st.get("kernel_size"), None)
            s = _pair(st.get("strides"), 1)
            pads = _pads(cur, k, s, st.get("padding", "valid"))
            if any(pads):
                mods.append(nn.ZeroPad2d(pads))
            m = nn.Conv2d(cur[2], int(st["conv2d"]), k, stride=s, bias=has_bias)
            m.weight = param(f"layers.{i}.weight")
            if has_bias:
                m.bias = param(f"layers.{i}.bias")
            mods.append(m)
        elif kind in ("max_pooling2d", "average_pooling2d"):
            k = _pair(st.get(kind), 2)
            s = _pair(st.get("strides"), k)
            pads = _pads(cur, k, s, st.get("padding", "valid"))
            mods.append(_TFPool(kind == "max_pooling2d", k, s, pads))
        elif kind == "global_average_pooling2d":
            mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        elif kind == "flatten":
            mods.append(nn.Flatten())
        elif kind == "batch_normalization":
            bn = st.get("batch_normalization") or {}
            C = cur[-1]
            cls = nn.BatchNorm2d if len(cur) == 3 else nn.BatchNorm1d
            m = cls(C, eps=bn.get("epsilon", 0.001), momentum=1.0 - bn.get("momentum", 0.99))
            m.weight = param(f"layers.{i}.weight")
            m.bias = param(f"layers.{i}.bias")
            m.running_mean.copy_(torch.from_numpy(np.array(tensors[f"layers.{i}.running_mean"])))
            m.running_var.copy_(torch.from_numpy(np.array(tensors[f"layers.{i}.running_var"])))
            if len(cur) == 2:  # per feature of a sequence [N, T, C], as Keras's
                from cohort import nn as cnn  # noqa: PLC0415
                m = cnn.ChannelsLast(m)
            mods.append(m)
        elif kind == "dropout":
            mods.append(nn.Dropout(float(st["dropout"])))
        elif kind in _SEQ_KINDS:
            mods.append(_torch_seq_of(torch, kind, st, cur, tensors, f"layers.{i}"))
        if act != "linear" and kind in ("dense", "conv2d", "conv1d", "activation"):
            mods.append({"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh,
                         "gelu": nn.GELU, "silu": nn.SiLU,
                         "softmax": lambda: nn.Softmax(dim=1)}[act]())
    if not any(_kind(la)[0] in _SEQ_KINDS for la in layers):
        return nn.Sequential(*mods).eval()
    from cohort import nn as cnn  # noqa: PLC0415
    first = _kind(layers[0])
    mask_zero = first[0] == "embedding" and bool(first[1]["embedding"].get("mask_zero"))
    return cnn.Sequential(*mods, mask_zero=mask_zero).eval()


def _torch_seq_of(torch, kind, st, cur, tensors, pre):
    """The torch module of a cohort sequence layer (cohort.nn's where torch's
    own cannot take [N, T, C] or return one tensor), with its weights."""
    from cohort import nn as cnn  # noqa: PLC0415
    nn = torch.nn

    def load(m, names):
        with torch.no_grad():
            for name, dest in names:
                dest.copy_(torch.from_numpy(np.array(tensors[f"{pre}.{name}"], dtype=np.float32)))
        return m

    if kind == "embedding":
        e = st["embedding"]
        m = nn.Embedding(int(e["input_dim"]), int(e["output_dim"]))
        return load(m, [("weight", m.weight)])
    if kind == "conv1d":
        k, s = _one(st.get("kernel_size"), None), _one(st.get("strides"), 1)
        d = _one(st.get("dilation_rate"), 1)
        has_bias = f"{pre}.bias" in tensors
        c = nn.Conv1d(cur[1], int(st["conv1d"]), k, stride=s, dilation=d, bias=has_bias)
        load(c, [("weight", c.weight)] + ([("bias", c.bias)] if has_bias else []))
        _, before, after = _window(cur[0], k, s, str(st.get("padding", "valid")), d)
        if before or after:
            c = nn.Sequential(nn.ConstantPad1d((before, after), 0.0), c)
        return cnn.ChannelsLast(c)
    if kind in ("max_pooling1d", "average_pooling1d"):
        k = _one(st.get(kind), 2)
        s = _one(st.get("strides"), k)
        _, before, after = _window(cur[0], k, s, str(st.get("padding", "valid")))
        return cnn.Pool1d(kind == "max_pooling1d", k, s, before, after)
    if kind in ("global_average_pooling1d", "global_max_pooling1d"):
        return cnn.GlobalPool1d("avg" if "average" in kind else "max")
    if kind == "layer_normalization":
        if len(cur) == 3:
            raise ConversionError(f"{pre}: layer_normalization of each pixel of an image has no "
                                  "one torch module on [N, C, H, W] (nn.LayerNorm normalizes the "
                                  "last axis)")
        ln = st.get("layer_normalization") or {}
        m = nn.LayerNorm(cur[-1], eps=float(ln.get("epsilon", 0.001)))
        return load(m, [("weight", m.weight), ("bias", m.bias)])
    cell, units, seq, bi = _rnn_of(st)
    rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(cur[1], units, batch_first=True,
                                                   bidirectional=bi)
    load(rnn, list(rnn.named_parameters()))
    return cnn.Recurrent(rnn, return_sequences=seq)


def _pads(cur, k, s, padding):
    """ZeroPad2d's (left, right, top, bottom) of TensorFlow's padding."""
    if padding != "same":
        return (0, 0, 0, 0)
    _, top, bottom = _window(cur[0], k[0], s[0], "same")
    _, left, right = _window(cur[1], k[1], s[1], "same")
    return (left, right, top, bottom)


def _tfpool_class():
    torch = _torch()
    F = torch.nn.functional

    class TFPool(torch.nn.Module):
        """MaxPool2d or AvgPool2d with TensorFlow's same padding: max ignores
        the padding (-inf), the average counts the real pixels only."""

        def __init__(self, is_max, k, s, pads):
            super().__init__()
            self.is_max, self.k, self.s, self.pads = is_max, tuple(k), tuple(s), tuple(pads)

        def forward(self, x):
            if self.is_max:
                x = F.pad(x, self.pads, value=float("-inf")) if any(self.pads) else x
                return F.max_pool2d(x, self.k, self.s)
            if not any(self.pads):
                return F.avg_pool2d(x, self.k, self.s)
            ones = torch.ones_like(x[:1, :1])
            total = F.avg_pool2d(F.pad(x, self.pads), self.k, self.s)
            count = F.avg_pool2d(F.pad(ones, self.pads), self.k, self.s)
            return total / count

        def extra_repr(self):
            return f"{'max' if self.is_max else 'avg'}, kernel={self.k}, stride={self.s}, pads={self.pads}"

    return TFPool


_TFPOOL = None


def _TFPool(*args):  # noqa: N802 - the module's class, made once torch is imported
    global _TFPOOL
    if _TFPOOL is None:
        _TFPOOL = _tfpool_class()
    return _TFPOOL(*args)
