"""cohort from Python: a thin ctypes layer over libcohort, the C library.

    import cohort
    results = cohort.train({"models": [...]}, data={"train": (x, y), "test": (xt, yt)})

Every number comes from the C library: this package converts arrays and
results, and draws progress. It needs only Python 3 and numpy; the library
is found through COHORT_LIB (a path to libcohort.so), else inside this
package (where `pip install` puts it), else the build folder of the source
tree the package sits in (build/libcohort.so), else the system's library
path.
See docs/python.md.
"""
import ctypes
import json
import os
import queue
import signal
import sys
import tempfile
import threading
import warnings

import numpy as np

from cohort._convert import ConversionError, from_keras, from_torch, to_keras, to_torch
from cohort import _convert
from cohort._safetensors import read as _read_safetensors

__all__ = ["train", "plan", "devices", "predict", "load", "export_onnx", "from_keras",
           "from_torch", "to_keras", "to_torch", "Result", "CohortError", "PlanError",
           "DataError", "Interrupted", "ConversionError"]

# cohort_status (include/cohort.h)
_OK, _USAGE, _INPUT, _NOMEM, _IO, _DEVICE, _DIVERGED, _INTERRUPTED, _PARTIAL, _INTERNAL = range(10)
_STRATEGIES = {"auto": 0, "sequential": 1, "threads": 2, "processes": 3, "fused": 4}


class CohortError(Exception):
    """An error of the C library: `status` (its cohort_status) and the message."""

    def __init__(self, message, status=_INTERNAL):
        super().__init__(message)
        self.status = status


class PlanError(CohortError):
    """The plan is malformed: the message says file:line and what, as the CLI's."""


class DataError(CohortError):
    """The data cannot be read or do not fit the models (shapes, labels, targets)."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during train(): the models checkpointed where they stood (with
    an `out` directory, train(..., resume=True) continues them); `results`
    holds every model's state."""

    def __init__(self, results):
        super().__init__("training interrupted")
        self.results = results


# ---- the C API's structures ------------------------------------------------

class _Error(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("message", ctypes.c_char * 4096)]


class _DeviceInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 32), ("kind", ctypes.c_char * 8),
                ("model", ctypes.c_char * 128), ("threads", ctypes.c_int),
                ("cc_major", ctypes.c_int), ("cc_minor", ctypes.c_int),
                ("total_bytes", ctypes.c_uint64), ("free_bytes", ctypes.c_uint64),
                ("limit_bytes", ctypes.c_uint64), ("is_logical", ctypes.c_int),
                ("policy", ctypes.c_int)]


class _Event(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("model", ctypes.c_int), ("name", ctypes.c_char_p),
                ("device", ctypes.c_char_p), ("epoch", ctypes.c_int), ("epochs", ctypes.c_int),
                ("step", ctypes.c_int64), ("steps", ctypes.c_int64),
                ("loss", ctypes.c_double), ("accuracy", ctypes.c_double),
                ("val_loss", ctypes.c_double), ("val_accuracy", ctypes.c_double),
                ("mae", ctypes.c_double), ("rmse", ctypes.c_double),
                ("val_mae", ctypes.c_double), ("val_rmse", ctypes.c_double),
                ("seconds", ctypes.c_double), ("status", ctypes.c_char_p),
                ("error", ctypes.c_char_p), ("stopped_early", ctypes.c_int),
                ("restored_epoch", ctypes.c_int)]


_EVENT_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Event), ctypes.c_void_p)
_EV_START, _EV_STEP, _EV_EPOCH, _EV_END = range(4)


class _Data(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("x", ctypes.POINTER(ctypes.c_float)),
                ("n", ctypes.c_int64), ("sample_rank", ctypes.c_int),
                ("sample_shape", ctypes.c_int64 * 3), ("labels", ctypes.POINTER(ctypes.c_int32)),
                ("targets", ctypes.POINTER(ctypes.c_float)), ("target_dim", ctypes.c_int64),
                ("class_names", ctypes.POINTER(ctypes.c_char_p)), ("n_class_names", ctypes.c_int64)]


class _RunOptions(ctypes.Structure):
    _fields_ = [("out_dir", ctypes.c_char_p), ("strategy", ctypes.c_int), ("threads", ctypes.c_int),
                ("resume", ctypes.c_int), ("devices", ctypes.c_void_p), ("on_event", _EVENT_FN),
                ("user", ctypes.c_void_p), ("shard_index", ctypes.c_int),
                ("shard_count", ctypes.c_int), ("overwrite", ctypes.c_int),
                ("memory", ctypes.POINTER(_Data)), ("n_memory", ctypes.c_int)]


_LIB = None


def _find_library():
    env = os.environ.get("COHORT_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "libcohort.so"),                       # pip install
                 os.path.join(here, "..", "..", "build", "libcohort.so")):  # a source tree
        if os.path.exists(path):
            return os.path.normpath(path)
    return "libcohort.so"


def _lib():
    global _LIB
    if _LIB is not None:
        return _LIB
    path = _find_library()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise CohortError(f"cannot load the cohort library {path}: {e}; install the package "
                          "with `pip install` from a clone of cohort, build it with `make`, "
                          "or point COHORT_LIB at libcohort.so", _USAGE) from None
    vp, cp, ip, e = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(_Error)
    sig = {
        "cohort_plan_parse": (ip, [cp, ctypes.c_size_t, cp, ctypes.POINTER(cp), ip,
                                   ctypes.POINTER(vp), e]),
        "cohort_plan_load": (ip, [cp, ctypes.POINTER(cp), ip, ctypes.POINTER(vp), e]),
        "cohort_plan_free": (None, [vp]),
        "cohort_run_options_init": (None, [ctypes.POINTER(_RunOptions)]),
        "cohort_run_create": (ip, [vp, ctypes.POINTER(_RunOptions), ctypes.POINTER(vp), e]),
        "cohort_run_train": (ip, [vp, e]),
        "cohort_run_free": (None, [vp]),
        "cohort_run_model_count": (ip, [vp]),
        "cohort_run_request_stop": (None, [vp]),
        "cohort_run_plan_json": (vp, [vp, e]),
        "cohort_free": (None, [vp]),
        "cohort_devices_discover": (ip, [ctypes.POINTER(vp), e]),
        "cohort_devices_free": (None, [vp]),
        "cohort_devices_count": (ip, [vp]),
        "cohort_devices_info": (ip, [vp, ip, ctypes.POINTER(_DeviceInfo)]),
        "cohort_devices_note": (cp, [vp]),
        "cohort_predict": (ip, [cp, ctypes.POINTER(_Data), ctypes.POINTER(ctypes.c_float),
                                ctypes.c_int64, ctypes.POINTER(ip), e]),
        "cohort_export_onnx": (ip, [cp, cp, e]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    _LIB = lib
    return lib


def _message(err):
    return err.message.decode("utf-8", "replace")


# ---- arrays in, plans in ---------------------------------------------------

_UINT8_WARNED = []


def _checked_array(name, what, a):
    """a as a plain ndarray of numbers (or, for y, of text), refusing what
    numpy would convert with a loss the CLI's readers refuse: complex values
    (the imaginary part dropped), structured records, dates and times, masked
    values (the mask dropped), and for x text."""
    if isinstance(a, np.ma.MaskedArray):
        if np.ma.is_masked(a):
            raise DataError(f"data['{name}']: {what} is a masked array with "
                            f"{int(np.ma.count_masked(a))} masked values, which cohort would "
                            "train on as they are; fill them (a.filled(v)) or drop their rows",
                            _INPUT)
        a = a.data
    a = np.asarray(a)
    if a.dtype.kind == "O" and a.size and not all(isinstance(v, str) for v in a.flat):
        try:  # numbers held as Python objects (a pandas column of dtype object)
            a = np.asarray(a.tolist())
        except (TypeError, ValueError):
            pass
    kind = a.dtype.kind
    text = kind in "US" or (kind == "O" and a.size and all(isinstance(v, str) for v in a.flat))
    if kind in "fiub" or (what == "y" and text):
        return a
    what_is = {"c": "complex", "V": "structured (records)", "M": "dates (datetime64)",
               "m": "time spans (timedelta64)", "U": "text", "S": "bytes", "O": "Python objects"}
    raise DataError(f"data['{name}']: {what} is {what_is.get(kind, kind)} ({a.dtype}); cohort "
                    f"takes {'numbers' if what == 'x' else 'numbers or text class labels'}",
                    _INPUT)


def _as_data(name, pair, keep):
    """cohort_data over (x, y) or (x,): x float32 [n, d] or [n, H, W(, C)];
    y int labels [n], text labels [n] (classes: the names sorted) or float
    targets [n] / [n, k]. The arrays converted are kept alive in `keep` for
    as long as the run needs them."""
    if not isinstance(pair, (tuple, list)) or not 1 <= len(pair) <= 2:
        raise DataError(f"data['{name}'] must be (x, y) or (x,), got {type(pair).__name__}", _INPUT)
    x0 = _checked_array(name, "x", pair[0])
    if x0.dtype == np.uint8 and not _UINT8_WARNED:
        _UINT8_WARNED.append(True)
        warnings.warn(f"data['{name}']: x is uint8 and is trained on as it is (0 to 255); "
                      "cohort's file readers (IDX, NPY) scale such images to [0, 1] (token "
                      "ids into an embedding excepted): pass x / 255 (float32) to train on "
                      "what the CLI does", stacklevel=3)
    x = np.ascontiguousarray(x0, dtype=np.float32)
    if x.ndim < 2:
        raise DataError(f"data['{name}']: x has shape {x.shape}; expected [n, features] or "
                        "[n, H, W, C]", _INPUT)
    d = _Data()
    d.name = name.encode()
    d.n = x.shape[0]
    d.x = x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    if x.ndim == 3:  # [n, H, W]: images of one channel, as IDX and NPY are read
        d.sample_rank, shape = 3, (x.shape[1], x.shape[2], 1)
    elif x.ndim == 4:
        d.sample_rank, shape = 3, x.shape[1:]
    else:
        d.sample_rank, shape = 1, (int(np.prod(x.shape[1:])), 1, 1)
    for i, v in enumerate(shape):
        d.sample_shape[i] = int(v)
    keep.append(x)
    if len(pair) == 2 and pair[1] is not None:
        y = _checked_array(name, "y", pair[1])
        if y.ndim == 0:
            raise DataError(f"data['{name}']: y is a single value ({y!r}); give one label or "
                            f"target per row of x ({len(x)} rows)", _INPUT)
        if len(y) != len(x):
            raise DataError(f"data['{name}']: x has {len(x)} rows, y has {len(y)}", _INPUT)
        if y.dtype.kind in "USO":
            # Text labels, as a CSV's: the classes are the names sorted (by
            # code point, which is strcmp's order of their UTF-8).
            if not (y.ndim == 1 or (y.ndim == 2 and y.shape[1] == 1)):
                raise DataError(f"data['{name}']: text labels must be one a row, got shape "
                                f"{y.shape}", _INPUT)
            flat = [v.decode() if isinstance(v, bytes) else str(v) for v in y.reshape(-1)]
            names, inverse = np.unique(np.array(flat, dtype=str), return_inverse=True)
            labels = np.ascontiguousarray(inverse, dtype=np.int32)
            d.labels = labels.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
            enc = [n.encode() for n in names.tolist()]
            arr = (ctypes.c_char_p * max(1, len(enc)))(*enc)
            d.class_names = ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p))
            d.n_class_names = len(enc)
            keep.extend([labels, enc, arr])
        elif y.dtype.kind in "iu" and (y.ndim == 1 or (y.ndim == 2 and y.shape[1] == 1)):
            if y.size and (y.min() < 0 or y.max() > 2 ** 31 - 2):
                raise DataError(f"data['{name}']: labels must be integers in [0, 2147483646], "
                                f"found {y.min()}..{y.max()}", _INPUT)
            labels = np.ascontiguousarray(y.reshape(-1), dtype=np.int32)
            d.labels = labels.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
            keep.append(labels)
        else:
            # [n, k] (k the values of a row; reshape cannot infer it when n is 0)
            t = np.ascontiguousarray(y, dtype=np.float32).reshape(len(y), int(np.prod(y.shape[1:])))
            d.targets = t.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            d.target_dim = t.shape[1]
            keep.append(t)
            # Floats that are all class numbers serve as labels too, as an NPY y does.
            if t.size and t.shape[1] == 1 and np.all(t >= 0) and np.all(t == np.floor(t)) and t.max() < 2 ** 31 - 1:
                labels = np.ascontiguousarray(t.reshape(-1), dtype=np.int32)
                d.labels = labels.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
                keep.append(labels)
    return d


def _parse_plan(lib, plan, data, overrides):
    """A cohort_plan* from a dict (the YAML's keys) or a path; data's keys
    become memory:KEY datasets of plan's data section."""
    ov = list(overrides or [])
    if isinstance(plan, (str, os.PathLike)):
        for k in data or {}:
            ov.append(f"data.{k}=memory:{k}")
        arr = (ctypes.c_char_p * max(1, len(ov)))(*[o.encode() for o in ov])
        out, err = ctypes.c_void_p(), _Error()
        st = lib.cohort_plan_load(os.fspath(plan).encode(), arr, len(ov), ctypes.byref(out),
                                  ctypes.byref(err))
    elif isinstance(plan, dict):
        # A deep copy of plain values; numpy's (np.logspace for a sweep, an
        # np.int64) as the Python values they hold.
        try:
            p = json.loads(json.dumps(_plain_keys(plan), default=_plain))
        except (TypeError, ValueError) as e:  # a value JSON has no form for, or a cycle
            raise PlanError(str(e), _INPUT) from None
        except RecursionError:
            raise PlanError("a plan holds itself (a dict or list inside itself)", _INPUT) from None
        if data:
            p.setdefault("data", {})
            for k in data:
                p["data"][k] = f"memory:{k}"
        text = json.dumps(p, indent=1).encode()
        arr = (ctypes.c_char_p * max(1, len(ov)))(*[o.encode() for o in ov])
        out, err = ctypes.c_void_p(), _Error()
        st = lib.cohort_plan_parse(text, len(text), b"plan", arr, len(ov), ctypes.byref(out),
                                   ctypes.byref(err))
    else:
        raise PlanError(f"a plan is a dict of the plan file's keys or a plan file's path, "
                        f"not {type(plan).__name__}", _INPUT)
    if st:
        raise PlanError(_message(err), st)
    return out


def _plain_keys(o):
    """o with numpy scalars as dict keys made the Python numbers they hold:
    json.dumps's default sees values only, and refuses an np.int64 key, as
    class_weight's dict(zip(np.unique(y), compute_class_weight(...))) has."""
    if isinstance(o, dict):
        return {(k.item() if isinstance(k, np.generic) else k): _plain_keys(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_plain_keys(v) for v in o]
    return o


def _plain(o):
    """json.dumps's default: numpy arrays and scalars as lists and numbers."""
    if isinstance(o, (np.ndarray, np.generic)):
        return o.tolist()
    raise TypeError(f"a plan holds {type(o).__name__} {o!r}, which is not a plan value")


class _Prepared:
    """A plan, its in-memory data and a prepared run; freed on close()."""

    def __init__(self, plan, data, out, strategy, threads, resume, overwrite, on_event, overrides):
        self.lib = _lib()
        self.keep, self.plan, self.run = [], None, None
        self.plan = _parse_plan(self.lib, plan, data, overrides)
        mem = [_as_data(k, v, self.keep) for k, v in (data or {}).items()]
        self.memory = (_Data * max(1, len(mem)))(*mem)
        opt = _RunOptions()
        self.lib.cohort_run_options_init(ctypes.byref(opt))
        if strategy not in _STRATEGIES:
            raise CohortError(f"strategy must be one of {', '.join(_STRATEGIES)}, got {strategy!r}",
                              _USAGE)
        opt.strategy = _STRATEGIES[strategy]
        # ctypes keeps an int's low 32 bits: 2**40 became 0, every core.
        if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or \
                not 0 <= threads <= 2 ** 31 - 1:
            raise CohortError(f"threads must be a whole number from 0 (every core) to "
                              f"2147483647, got {threads!r}", _USAGE)
        opt.threads = int(threads)
        opt.resume = int(resume)
        opt.overwrite = int(overwrite)
        self.out = os.fspath(out).encode() if out is not None else None
        opt.out_dir = self.out
        opt.memory = self.memory
        opt.n_memory = len(mem)
        self.callback = _EVENT_FN(on_event) if on_event else _EVENT_FN()
        opt.on_event = self.callback
        self.opt = opt
        run, err = ctypes.c_void_p(), _Error()
        st = self.lib.cohort_run_create(self.plan, ctypes.byref(opt), ctypes.byref(run),
                                        ctypes.byref(err))
        if st:
            self.close()
            raise (DataError if st in (_INPUT, _IO) else CohortError)(_message(err), st)
        self.run = run

    def close(self):
        if self.run:
            self.lib.cohort_run_free(self.run)
            self.run = None
        if self.plan:
            self.lib.cohort_plan_free(self.plan)
            self.plan = None


# ---- results -----------------------------------------------------------------

class Result:
    """One model's outcome, from results.json: name, status ("ok", "failed",
    "diverged", "interrupted", ...), error, device, task ("classification" or
    "regression"), history (metric -> numpy array per epoch: loss, accuracy
    or mae and rmse, their val_ forms, seconds, lr), best (epoch and its
    metrics), test (loss, accuracy or mae/rmse; None without test data),
    seconds, planned_bytes, peak_bytes, config (the model's expanded spec),
    weights (tensor name -> numpy array, the safetensors names; None when the
    model wrote none), best_weights (restore_best_weights' file) and meta
    (the weights file's metadata: input_shape, classes, ...). to_keras() and
    to_torch() give the trained model in those frameworks."""

    def __init__(self, rec, weights, best_weights, meta=None):
        self.name = rec["name"]
        self.status = rec["status"]
        self.error = rec.get("error")
        self.device = rec.get("device")
        self.task = rec.get("task", "classification")
        self.history = {k: np.array([np.nan if v is None else v for v in a], dtype=np.float64)
                        for k, a in rec.get("history", {}).items()}
        self.best = rec.get("best")
        self.test = rec.get("test")
        self.seconds = rec.get("seconds")
        self.planned_bytes = rec.get("planned_bytes")
        self.peak_bytes = rec.get("peak_bytes")
        self.epochs_run = rec.get("epochs_run")
        self.config = rec.get("config")
        self.weights = weights
        self.best_weights = best_weights
        self.meta = meta or {}

    def to_keras(self, compile=True):
        """The trained model as a keras.Sequential (see cohort.to_keras)."""
        return to_keras(self, compile=compile)

    def to_torch(self):
        """The trained model as a torch.nn.Sequential (see cohort.to_torch)."""
        return to_torch(self)

    def __repr__(self):
        m = self.test or self.best or {}
        score = ", ".join(f"{k} {v:.4f}" for k, v in m.items() if isinstance(v, float))
        return f"<cohort.Result {self.name}: {self.status}{', ' + score if score else ''}>"


def _results(out_dir):
    path = os.path.join(out_dir, "results.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        recs = json.load(f)["models"]
    res = []
    for rec in recs:
        w = rec.get("weights")
        bw = rec.get("best_weights")
        weights, meta = _read_safetensors(os.path.join(out_dir, w)) if w else (None, None)
        best = _read_safetensors(os.path.join(out_dir, bw))[0] if bw else None
        res.append(Result(rec, weights, best, meta))
    return res


# ---- progress ------------------------------------------------------------------

def _in_notebook():
    try:
        from IPython import get_ipython  # noqa: PLC0415
        shell = get_ipython()
        return shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell"
    except ImportError:
        return False


def _epoch_line(name, epoch, epochs, m):
    parts = [f"{name} epoch {epoch}/{epochs}: loss {m['loss']:.4f}"]
    for k in ("accuracy", "mae", "rmse", "val_loss", "val_accuracy", "val_mae", "val_rmse"):
        if k in m:
            parts.append(f"{k} {m[k]:.4f}")
    return " ".join(parts)


def _metrics_of(ev):
    m = {}
    for k in ("loss", "accuracy", "val_loss", "val_accuracy", "mae", "rmse", "val_mae", "val_rmse"):
        v = getattr(ev, k)
        if v == v:  # not NaN
            m[k] = v
    return m


# ---- the API ---------------------------------------------------------------------

def _framework_of(m):
    """The package of m's class, or of the first of its bases that is torch's
    or Keras's (cohort.nn's modules, a user's subclasses)."""
    for cls in type(m).__mro__:
        top = cls.__module__.split(".")[0]
        if top in ("keras", "torch", "tf_keras", "tensorflow"):
            return top
    return type(m).__module__.split(".")[0]


def _framework_models(plan):
    """plan as a list of Keras models or torch modules, or None when it is a plan."""
    items = plan if isinstance(plan, (list, tuple)) else [plan]
    kinds = [_framework_of(m) for m in items]
    if items and all(k in ("keras", "torch", "tf_keras", "tensorflow") for k in kinds):
        return list(items)
    return None


def _models_plan(models, x, y, epochs, batch_size, validation_split, validation_data, test_data,
                 optimizer, loss, shuffle, seed):
    """The plan and data of model.fit's arguments over Keras models and torch modules."""
    if x is None or y is None:
        raise DataError("training Keras or torch models takes x and y, as model.fit", _INPUT)
    xs = np.shape(x)
    entries, names = [], set()
    sequences = False  # a model takes [n, T, F] as sequences (not images of one channel)
    for m in models:
        if _framework_of(m) == "torch":
            # cohort's data are channels last: (H, W, C) samples are torch's (C, H, W);
            # a sequence [T, F] is batch first, features last in both
            seq = len(xs) == 3 and _convert._torch_takes_sequence(m)
            if len(xs) == 2 or seq:
                shape = xs[1:]
            else:
                shape = (xs[3] if len(xs) == 4 else 1, xs[1], xs[2])
            e = from_torch(m, shape)
        else:
            e = from_keras(m)
            seq = len(xs) == 3 and len(m.inputs[0].shape) == 3
        sequences = sequences or seq
        name, n = e["name"], 1
        while name in names:
            name, n = f"{e['name']}_{n}", n + 1
        e["name"] = name
        names.add(name)
        if optimizer is not None:
            e["optimizer"] = _convert._keras_optimizer(optimizer)
        if loss is not None:
            e["loss"] = _convert._keras_loss(loss)
        entries.append(e)
    # model.fit's defaults: one epoch, batches of 32, shuffled.
    defaults = {"epochs": 1 if epochs is None else epochs,
                "batch_size": 32 if batch_size is None else batch_size,
                "shuffle": True if shuffle is None else bool(shuffle)}
    if seed is not None:
        defaults["seed"] = seed
    plan = {"defaults": defaults, "models": entries}
    data = {"train": (x, y)}
    if validation_split:
        plan["data"] = {"validation_split": validation_split}
    if sequences:  # read [n, T, F] as sequences, whatever the first layer
        plan.setdefault("data", {})["input_shape"] = [int(v) for v in xs[1:]]
    if validation_data is not None:
        data["validation"] = tuple(validation_data)[:2]
    if test_data is not None:
        data["test"] = tuple(test_data)[:2]
    return plan, data


def train(plan, data=None, y=None, *, out=None, strategy="auto", on_epoch=None, progress=None,
          threads=0, resume=False, overwrite=False, overrides=None, epochs=None, batch_size=None,
          validation_split=None, validation_data=None, test_data=None, optimizer=None, loss=None,
          shuffle=None, seed=None):
    """Train every model of `plan` and return a list of Result, one per model.

    plan may also be a list of Keras models (built Sequential or chain
    functional models) or torch.nn.Sequential modules, trained as
    model.fit trains one: cohort.train([m1, m2], x, y, epochs=10,
    batch_size=32, validation_split=0.2, validation_data=(xv, yv),
    test_data=(xt, yt), optimizer=..., loss=...). Each starts from its
    current weights; a compile()d Keras model brings its optimizer and
    loss (optimizer= and loss=, a name, a Keras object or the plan's map,
    override them for every model); batch_size 32 and one epoch unless
    given, as fit. x is in cohort's layout, channels last. Each Result's
    to_keras() or to_torch() gives the trained model back. Every argument
    after y is a keyword.

    plan: a dict with the YAML's keys ({"defaults": ..., "models": [...],
    "sweep": ...}), or the path of a plan file. data: {"train": (x, y),
    "test": (x, y), "validation": (x, y)} of numpy arrays, read in place
    where they are float32 and C-ordered (x [n, features] or [n, H, W, C];
    y integer class labels [n], copied as the run starts, or float targets
    [n] / [n, k]); it replaces
    the plan's data files. out: the output directory (results.json, weights,
    history, report.html); None: a temporary one, removed after. strategy:
    auto, sequential, threads, processes or fused. on_epoch(model, epoch,
    metrics): called after every epoch of every model, on this thread (the
    run trains on another, which this one waits for).
    progress: print one line an epoch (default: when on_epoch is None and
    stderr is a terminal or a notebook). A model that fails is a Result with
    status "failed" (or "diverged"), not an exception; a bad plan raises
    PlanError, bad data DataError, Ctrl-C Interrupted (with .results)."""
    models = _framework_models(plan)
    if models is not None:
        plan, data = _models_plan(models, data, y, epochs, batch_size, validation_split,
                                  validation_data, test_data, optimizer, loss, shuffle, seed)
    elif y is not None or any(v is not None for v in (epochs, batch_size, validation_split,
                                                      validation_data, test_data, optimizer,
                                                      loss, shuffle, seed)):
        raise PlanError("y, epochs, batch_size, validation_split, validation_data, test_data, "
                        "optimizer, loss, shuffle and seed are arguments for Keras or torch "
                        "models; a plan's data come in data={...} and its settings are its keys",
                        _INPUT)
    if progress is None:
        progress = on_epoch is None and (sys.stderr.isatty() or _in_notebook())
    tmp = None
    if out is None:
        tmp = tempfile.TemporaryDirectory(prefix="cohort-")
        out = tmp.name
        overwrite = True
    stop = {"asked": False}
    prep = None
    live = progress and sys.stderr.isatty()  # a line redrawn in place as steps go
    # The run trains on a thread of its own while this one waits for it and
    # delivers its events: under threads or fused the events come from the
    # run's workers, and this thread, blocked in cohort_run_train, never ran
    # Python code, so Ctrl-C's handler waited for the whole run. An epoch's
    # event waits until on_epoch has run here (as Keras's callbacks, the
    # model goes on after it), a step's does not.
    events = queue.SimpleQueue()
    closing = threading.Event()  # this thread stops delivering: nothing waits for it

    def on_event(evp, user):  # any thread of the run, one call at a time
        ev = evp.contents
        if stop["asked"] and prep and prep.run:
            prep.lib.cohort_run_request_stop(prep.run)
        if ev.kind == _EV_STEP and live and ev.steps > 0:
            events.put((None, ev.name.decode(), ev.epoch, ev.epochs, (ev.step / ev.steps, ev.loss)))
        elif ev.kind == _EV_EPOCH and (progress or on_epoch) and not closing.is_set():
            ack = threading.Event()
            events.put((ack, ev.name.decode(), ev.epoch, ev.epochs, _metrics_of(ev)))
            while not ack.wait(0.1) and not closing.is_set():
                pass  # a Ctrl-C meanwhile: on_sigint, on the calling thread, stops the run

    def deliver(item):
        ack, name, epoch, epochs, m = item
        if ack is None:
            frac, loss = m
            bar = "#" * int(20 * frac) + "." * (20 - int(20 * frac))
            print(f"\r{name[:30]:30} epoch {epoch}/{epochs} [{bar}] {100 * frac:3.0f}%  "
                  f"loss {loss:.4f}", end="", file=sys.stderr, flush=True)
            return
        try:
            if progress:
                print(("\r\033[K" if live else "") + _epoch_line(name, epoch, epochs, m),
                      file=sys.stderr, flush=True)
            if on_epoch:
                on_epoch(name, epoch, m)
        except KeyboardInterrupt:  # Ctrl-C inside on_epoch: as anywhere else
            on_sigint(signal.SIGINT, None)
        except Exception as e:  # noqa: BLE001 - one callback must not end the run
            print(f"cohort: on_epoch raised {e!r}; training goes on", file=sys.stderr)
        finally:
            ack.set()

    def on_sigint(signum, frame):
        # As the CLI: the models finish their step and checkpoint; train() then raises.
        stop["asked"] = True
        if prep and prep.run:
            prep.lib.cohort_run_request_stop(prep.run)

    old = None
    if threading.current_thread() is threading.main_thread():
        old = signal.signal(signal.SIGINT, on_sigint)
    worker = None
    try:
        prep = _Prepared(plan, data, out, strategy, threads, resume, overwrite, on_event, overrides)
        done = {}

        def run():
            err = _Error()
            done["st"] = prep.lib.cohort_run_train(prep.run, ctypes.byref(err))
            done["message"] = _message(err)

        worker = threading.Thread(target=run, name="cohort-train", daemon=True)
        worker.start()
        # An event is delivered as it comes; the timeout returns to Python now
        # and then, where Ctrl-C's handler runs.
        while worker.is_alive() or not events.empty():
            try:
                deliver(events.get(timeout=0.05))
            except queue.Empty:
                pass
        worker.join()
        st = done.get("st", _INTERRUPTED)
        prep.close()
        if st not in (_OK, _PARTIAL, _INTERRUPTED):
            raise CohortError(done.get("message", ""), st)
        results = _results(out)
        if st == _INTERRUPTED or stop["asked"]:
            raise Interrupted(results)
        return results
    finally:
        if worker is not None and worker.is_alive():  # this thread was unwound: stop the run
            closing.set()
            prep.lib.cohort_run_request_stop(prep.run)
            worker.join()
        if prep:
            prep.close()
        if old is not None:
            signal.signal(signal.SIGINT, old)
        if tmp:
            tmp.cleanup()


def plan(plan, data=None, strategy="auto", threads=0, overrides=None):
    """The memory plan of every model before training, as `cohort plan --json`
    gives it: per model its parameters, planned bytes (and each buffer's),
    device, whether it fits (and why not), layers and output shapes; the
    devices with their limits, the strategy and the fused groups."""
    prep = _Prepared(plan, data, None, strategy, threads, False, False, None, overrides)
    try:
        err = _Error()
        p = prep.lib.cohort_run_plan_json(prep.run, ctypes.byref(err))
        if not p:
            raise CohortError(_message(err), err.status)
        try:
            return json.loads(ctypes.string_at(p).decode())
        finally:
            prep.lib.cohort_free(p)
    finally:
        prep.close()


def devices():
    """The devices of this machine, those `cohort devices` lists, as dicts of
    cohort_device_info's fields (name, kind, model, threads, cc_major,
    cc_minor, total_bytes, free_bytes, limit_bytes, is_logical, policy)."""
    lib = _lib()
    d, err = ctypes.c_void_p(), _Error()
    if lib.cohort_devices_discover(ctypes.byref(d), ctypes.byref(err)):
        raise CohortError(_message(err), err.status)
    try:
        out = []
        for i in range(lib.cohort_devices_count(d)):
            info = _DeviceInfo()
            lib.cohort_devices_info(d, i, ctypes.byref(info))
            out.append({k: (getattr(info, k).decode() if isinstance(getattr(info, k), bytes)
                            else getattr(info, k)) for k, _ in _DeviceInfo._fields_})
        return out
    finally:
        lib.cohort_devices_free(d)


def predict(weights, x):
    """The outputs of the model saved in `weights` (a .safetensors path that
    cohort wrote) for the samples x: [n, outputs], probabilities of a softmax
    or sigmoid output (logits with from_logits), values for regression."""
    lib = _lib()
    keep = []
    d = _as_data("x", (x,), keep)
    n_out, err = ctypes.c_int(), _Error()
    path = os.fspath(weights).encode()
    if lib.cohort_predict(path, ctypes.byref(d), None, 0, ctypes.byref(n_out), ctypes.byref(err)):
        raise (DataError if err.status in (_INPUT, _IO) else CohortError)(_message(err), err.status)
    out = np.empty((d.n, n_out.value), dtype=np.float32)
    st = lib.cohort_predict(path, ctypes.byref(d), out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                            out.size, ctypes.byref(n_out), ctypes.byref(err))
    if st:
        raise (DataError if st in (_INPUT, _IO) else CohortError)(_message(err), st)
    return out


def load(path):
    """A weights file as (tensors, metadata): tensor name -> numpy array, and
    the file's metadata (the model spec as a dict under "spec")."""
    tensors, meta = _read_safetensors(os.fspath(path))
    if "spec" in meta:
        try:
            meta["spec"] = json.loads(meta["spec"])
        except ValueError:
            pass
    return tensors, meta


def export_onnx(weights, out):
    """Write the model saved in `weights` (a .safetensors path that cohort
    wrote) as an ONNX model (opset 17) to `out`, as `cohort export` does:
    input "input" [N, H, W, C] or [N, features] as the model's data were,
    output "output" [N, outputs], what predict gives. Returns out."""
    lib = _lib()
    err = _Error()
    st = lib.cohort_export_onnx(os.fspath(weights).encode(), os.fspath(out).encode(),
                                ctypes.byref(err))
    if st:
        raise (DataError if st in (_INPUT, _IO) else CohortError)(_message(err), st)
    return out
