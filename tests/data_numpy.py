"""The variants of NPY, NPZ, CSV and IDX files that people save, written into
DIR with what numpy reads from each, for tests/test_data_numpy.c.

    /usr/bin/python3 tests/data_numpy.py DIR

DIR/manifest.tsv gets a line per case (tab-separated):
    ok   NAME SPEC N DIM N_CLASSES T_DIM SHAPE   cohort must read numpy's values:
         DIR/NAME.x (float32 [N, DIM], uint8 inputs as v / 255 in float32),
         DIR/NAME.y (int32 [N], where N_CLASSES > 0), DIR/NAME.t (float32 [N, T_DIM])
    err  NAME SPEC FRAGMENT                      cohort must refuse it, saying FRAGMENT
SPEC holds DIR for the directory. The reference values come from np.load and
np.loadtxt, never from cohort. Exit status 77 without numpy.
"""
import gzip
import io
import os
import struct
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refcheck import need  # noqa: E402

np = need("data_numpy.py", "numpy")

OUT = sys.argv[1]
rng = np.random.default_rng(5)
lines = []


def path(name):
    return os.path.join(OUT, name)


def ref(name, x, y=None, t=None, shape="flat"):
    """Record an ok case: x (as cohort holds it: float32), labels y, targets t."""
    x = np.asarray(x, dtype=np.float32)
    n = x.shape[0]
    x.reshape(n, -1).tofile(path(name + ".x"))
    n_classes = 0
    if y is not None:
        y = np.asarray(y)
        assert np.all(y == y.astype(np.int32))
        y.astype("<i4").tofile(path(name + ".y"))
        n_classes = int(y.max()) + 1
    t_dim = 0
    if t is not None:
        t = np.asarray(t, dtype=np.float32).reshape(n, -1)
        t.tofile(path(name + ".t"))
        t_dim = t.shape[1]
    return n, int(np.prod(x.shape[1:], dtype=np.int64)), n_classes, t_dim, shape


def ok(name, spec, x, y=None, t=None, shape="flat"):
    n, dim, n_classes, t_dim, shape = ref(name, x, y, t, shape)
    lines.append(f"ok\t{name}\t{spec}\t{n}\t{dim}\t{n_classes}\t{t_dim}\t{shape}")


def err(name, spec, fragment):
    lines.append(f"err\t{name}\t{spec}\t{fragment}")


def as_x(a):
    """What cohort trains on for an input array: float32, uint8 scaled to [0, 1]."""
    a = np.asarray(a)
    if a.dtype == np.uint8:
        return a.astype(np.float32) / np.float32(255)
    return a.astype(np.float32)


def shape_of(a):
    s = a.shape[1:]
    if len(s) == 2:
        return f"{s[0]}x{s[1]}x1"
    if len(s) == 3:
        return f"{s[0]}x{s[1]}x{s[2]}"
    return "flat"


def npy_pair(name, x, y, version=None):
    """x and y saved with np.save (or format.write_array at a version); the ok case
    with what np.load gives back."""
    for arr, part in ((x, "x"), (y, "y")):
        with open(path(f"{name}_{part}.npy"), "wb") as f:
            np.lib.format.write_array(f, arr, version=version)
    xl, yl = np.load(path(f"{name}_x.npy")), np.load(path(f"{name}_y.npy"))
    assert np.array_equal(xl, x, equal_nan=x.dtype.kind == "f") and np.array_equal(yl, y)
    spec = f"npy:DIR/{name}_x.npy,DIR/{name}_y.npy"
    return spec, xl, yl


# ---- NPY: dtypes, byte orders, versions, orders ------------------------------

base = rng.normal(size=(6, 5)) * 40
labels = np.array([0, 2, 1, 2, 0, 1])
for dt in ["<f4", "<f8", "<f2", ">f4", ">f8", ">f2", "|i1", "|u1", "<i2", ">i2", "<i4", ">i4",
           "<i8", ">i8", "<u2", ">u2", "<u4", ">u4", "<u8", ">u8", "|b1"]:
    kind = np.dtype(dt).kind
    if kind == "b":
        x = base > 0
    elif kind == "u":
        x = np.abs(base).astype(dt)
    else:
        x = base.astype(dt)
    name = "npy_x_" + dt.replace("<", "le").replace(">", "be").replace("|", "")
    spec, xl, yl = npy_pair(name, x, labels.astype("<i8"))
    ok(name, spec, as_x(xl), yl)

for dt in ["|i1", "|u1", "<i2", ">i2", "<i4", ">i4", "<i8", ">i8", "<u2", "<u4", "<u8", ">u8"]:
    name = "npy_y_" + dt.replace("<", "le").replace(">", "be").replace("|", "")
    spec, xl, yl = npy_pair(name, base.astype("<f4"), labels.astype(dt))
    ok(name, spec, xl, yl)

# Float labels: integral ones are classes (and targets), others targets only.
spec, xl, yl = npy_pair("npy_y_f4_classes", base.astype("<f4"), labels.astype("<f4"))
ok("npy_y_f4_classes", spec, xl, yl.astype(np.int32), t=yl)
spec, xl, yl = npy_pair("npy_y_be_f8_classes", base.astype("<f4"), labels.astype(">f8"))
ok("npy_y_be_f8_classes", spec, xl, yl.astype(np.int32), t=yl)
reg = rng.normal(size=6)
spec, xl, yl = npy_pair("npy_y_f8_targets", base.astype("<f4"), reg)
ok("npy_y_f8_targets", spec, xl, t=yl)
spec, xl, yl = npy_pair("npy_y_f2_targets", base.astype("<f4"), reg.astype("<f2"))
ok("npy_y_f2_targets", spec, xl, t=yl)
spec, xl, yl = npy_pair("npy_y_2cols", base.astype("<f4"), rng.normal(size=(6, 2)))
ok("npy_y_2cols", spec, xl, t=yl)
spec, xl, yl = npy_pair("npy_y_col", base.astype("<f4"), labels.reshape(6, 1).astype("<i4"))
ok("npy_y_col", spec, xl, yl.reshape(6))
spec, xl, yl = npy_pair("npy_y_bool", base.astype("<f4"), labels == 1)
ok("npy_y_bool", spec, xl, yl.astype(np.int32), t=yl)

# Versions 1.0, 2.0, 3.0 of the header.
for v in [(1, 0), (2, 0), (3, 0)]:
    name = f"npy_v{v[0]}"
    spec, xl, yl = npy_pair(name, base.astype("<f4"), labels, version=v)
    ok(name, spec, xl, yl)

# Shapes: 1-d x, images (n, H, W) and (n, H, W, C), more dimensions.
for name, shape in [("npy_1d", (6,)), ("npy_hw", (6, 3, 2)), ("npy_hwc", (6, 2, 3, 2)),
                    ("npy_5d", (6, 2, 1, 2, 2))]:
    x = rng.normal(size=shape).astype("<f4")
    spec, xl, yl = npy_pair(name, x, labels)
    ok(name, spec, xl, yl, shape=shape_of(xl))

# Fortran order: np.save writes an F-contiguous array (a transpose, asfortranarray)
# as it lies in memory, with fortran_order True; np.load gives the same values.
for name, x in [("npy_fortran_2d", np.asfortranarray(base.astype("<f4"))),
                ("npy_fortran_t", np.ascontiguousarray(base.T.astype("<f8")).T),
                ("npy_fortran_3d", np.asfortranarray(rng.normal(size=(6, 3, 2)).astype("<f4"))),
                ("npy_fortran_4d_u1", np.asfortranarray(
                    rng.integers(0, 256, size=(6, 2, 3, 2)).astype("|u1")))]:
    spec, xl, yl = npy_pair(name, x, labels)
    with open(path(f"{name}_x.npy"), "rb") as f:
        assert b"'fortran_order': True" in f.read(128)
    ok(name, spec, as_x(xl), yl, shape=shape_of(xl))
# y as an (n, 1) column in Fortran order (np.asfortranarray of a column).
spec, xl, yl = npy_pair("npy_fortran_y", base.astype("<f4"),
                        np.asfortranarray(rng.normal(size=(6, 2))))
ok("npy_fortran_y", spec, xl, t=yl)


def raw_npy(name, header, data, magic=b"\x93NUMPY\x01\x00"):
    """An .npy with a header written by hand (older numpy, other writers)."""
    h = header.encode("latin1")
    with open(path(name), "wb") as f:
        f.write(magic + struct.pack("<H", len(h)) + h + data)


# Header variants: 16-byte alignment (numpy before 1.14? other writers), no
# trailing comma, keys in another order, double quotes, Python 2's 10L, a
# header padded with spaces and no newline.
x6 = base.astype("<f4")
yfile = "DIR/npy_y_lei8_y.npy"
variants = {
    "npy_h_align16": "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 5), }   \n",
    "npy_h_nocomma": "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 5)}" + " " * 60 + "\n",
    "npy_h_order": "{'shape': (6, 5), 'fortran_order': False, 'descr': '<f4'}" + " " * 8 + "\n",
    "npy_h_dquote": '{"descr": "<f4", "fortran_order": False, "shape": (6, 5)}' + " " * 8 + "\n",
    "npy_h_long": "{'descr': '<f4', 'fortran_order': False, 'shape': (6L, 5L), }" + " " * 4 + "\n",
    "npy_h_nonl": "{'descr':'<f4','fortran_order':False,'shape':(6,5)}" + " " * 20,
}
for name, header in variants.items():
    raw_npy(name + ".npy", header, x6.tobytes())
    ok(name, f"npy:DIR/{name}.npy,{yfile}", x6, labels)

# What cohort refuses, and says so.
raw_npy("npy_scalar_x.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n",
        np.float32(1).tobytes())
err("npy_scalar_x", f"npy:DIR/npy_scalar_x.npy,{yfile}", "npy_scalar_x.npy: x is a scalar")
np.save(path("npy_complex.npy"), base.astype(np.complex64))
err("npy_complex", f"npy:DIR/npy_complex.npy,{yfile}", "npy_complex.npy: dtype '<c8' is not supported")
np.save(path("npy_str.npy"), base.astype("U3"))
err("npy_str", f"npy:DIR/npy_str.npy,{yfile}", "npy_str.npy: dtype '<U3' is not supported")
np.save(path("npy_dt64.npy"), np.zeros(6, dtype="datetime64[s]"))
err("npy_dt64", f"npy:DIR/npy_dt64.npy,{yfile}", "npy_dt64.npy: dtype '<M8[s]' is not supported")
np.save(path("npy_object.npy"), np.array([[1], "a"] * 3, dtype=object), allow_pickle=True)
err("npy_object", f"npy:DIR/npy_object.npy,{yfile}", "npy_object.npy: dtype '|O' is not supported")
np.save(path("npy_f16.npy"), base.astype(np.longdouble))
err("npy_f16", f"npy:DIR/npy_f16.npy,{yfile}", "npy_f16.npy: dtype '<f16' is not supported")
# Non-finite inputs or targets: np.load reads them, cohort would train on NaN.
for name, val, at in [("npy_nan_x", np.nan, (3, 2)), ("npy_inf_x", -np.inf, (0, 4))]:
    x = base.astype("<f4")
    x[at] = val
    np.save(path(name + ".npy"), x)
    err(name, f"npy:DIR/{name}.npy,{yfile}", f"{name}.npy: x[{at[0]}, {at[1]}] is {val}")
x = base.astype("<f8")
x[5, 1] = np.nan
np.save(path("npy_nan_f8.npy"), x)
err("npy_nan_f8", f"npy:DIR/npy_nan_f8.npy,{yfile}", "npy_nan_f8.npy: x[5, 1] is nan")
x = rng.normal(size=(6, 2, 2)).astype("<f2")
x[1, 1, 0] = np.inf
np.save(path("npy_inf_f2.npy"), x)
err("npy_inf_f2", f"npy:DIR/npy_inf_f2.npy,{yfile}", "npy_inf_f2.npy: x[1, 1, 0] is inf")
x = base.astype("<f8")
x[2, 3] = 1e39  # finite in float64, inf as the float32 cohort trains on
np.save(path("npy_f8_big.npy"), x)
err("npy_f8_big", f"npy:DIR/npy_f8_big.npy,{yfile}", "npy_f8_big.npy: x[2, 3] is 1e+39")
t = reg.copy()
t[4] = np.nan
np.save(path("npy_nan_t.npy"), t)
err("npy_nan_t", "npy:DIR/npy_y_lei8_x.npy,DIR/npy_nan_t.npy", "npy_nan_t.npy: y[4] is nan")

# ---- NPZ ---------------------------------------------------------------------

x8 = rng.integers(0, 256, size=(6, 4, 4)).astype("|u1")
np.savez(path("npz_savez.npz"), x=x8, y=labels)
ok("npz_savez", "npz:DIR/npz_savez.npz", as_x(x8), labels, shape="4x4x1")
np.savez_compressed(path("npz_compressed.npz"), x=x8, y=labels)
ok("npz_compressed", "npz:DIR/npz_compressed.npz", as_x(x8), labels, shape="4x4x1")
np.savez_compressed(path("npz_train.npz"), x_train=base.astype("<f8"), y_train=labels)
ok("npz_train", "npz:DIR/npz_train.npz", base.astype(np.float32), labels)
np.savez(path("npz_positional.npz"), base.astype("<f4"), labels)  # arr_0, arr_1
ok("npz_positional", "npz:DIR/npz_positional.npz", base.astype(np.float32), labels)
np.savez(path("npz_keras.npz"), x_train=x8, y_train=labels, x_test=x8[:3], y_test=labels[:3])
ok("npz_keras_test", "npz:DIR/npz_keras.npz:x_test,y_test", as_x(x8[:3]), labels[:3], shape="4x4x1")
ok("npz_keras_suffix", "npz:DIR/npz_keras.npz:x_train.npy,y_train.npy", as_x(x8), labels,
   shape="4x4x1")
err("npz_keras", "npz:DIR/npz_keras.npz", "holds both training and test arrays")
np.savez(path("npz_names.npz"), features=base.astype(">f4"), target=reg)
ok("npz_names", "npz:DIR/npz_names.npz:features,target", base.astype(np.float32), t=reg)
err("npz_names_missing", "npz:DIR/npz_names.npz:features,label",
    "npz_names.npz: has no array 'label' (it has features, target)")


def member(a):
    b = io.BytesIO()
    np.lib.format.write_array(b, a)
    return b.getvalue()


# Members without the .npy suffix (zip -j of files named x and y), and read
# with np.load: its keys are the names without .npy.
with zipfile.ZipFile(path("npz_nosuffix.npz"), "w") as z:
    z.writestr("x", member(base.astype("<f4")))
    z.writestr("y", member(labels))
assert set(np.load(path("npz_nosuffix.npz")).files) == {"x", "y"}
ok("npz_nosuffix", "npz:DIR/npz_nosuffix.npz", base.astype(np.float32), labels)

# Two members of one name: numpy reads the last, so a reader that takes the
# first trains on other data; refused (issue 41 item 11). x.npy twice, and x
# beside x.npy (np.load's one key "x").
import warnings  # noqa: E402
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # zipfile's "Duplicate name"
    with zipfile.ZipFile(path("npz_dup.npz"), "w") as z:
        z.writestr("x.npy", member(base.astype("<f4")))
        z.writestr("y.npy", member(labels))
        z.writestr("x.npy", member(base.astype("<f4") + 1))
assert np.array_equal(np.load(path("npz_dup.npz"))["x"], base.astype("<f4") + 1)
err("npz_dup", "npz:DIR/npz_dup.npz", "npz_dup.npz: two members are named x.npy")
with zipfile.ZipFile(path("npz_dup_key.npz"), "w") as z:
    z.writestr("x", member(base.astype("<f4")))
    z.writestr("x.npy", member(base.astype("<f4") + 1))
    z.writestr("y.npy", member(labels))
err("npz_dup_key", "npz:DIR/npz_dup_key.npz", "npz_dup_key.npz: two members are named x and x.npy")

# A descr without a byte order ('f4') or with the host's ('=f4'), as other
# writers than numpy's leave it: numpy reads both as the host's order.
for name, descr in (("npy_descr_noorder", "'f4'"), ("npy_descr_native", "'=f4'")):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, base.astype("<f4"))
    raw = buf.getvalue()
    head = raw[10:10 + struct.unpack("<H", raw[8:10])[0]]
    new = head.replace(b"'<f4'", descr.encode())
    new = new[:-1] + b" " * (len(head) - len(new)) + b"\n"
    with open(path(f"{name}_x.npy"), "wb") as f:
        f.write(raw[:10] + new + raw[10 + len(head):])
    np.save(path(f"{name}_y.npy"), labels)
    xl = np.load(path(f"{name}_x.npy"))
    assert xl.dtype == np.float32 and np.array_equal(xl, base.astype("<f4"))
    ok(name, f"npy:DIR/{name}_x.npy,DIR/{name}_y.npy", xl, labels)


class Unseekable(io.RawIOBase):
    """A pipe: zipfile then writes data descriptors after each member."""

    def __init__(self, f):
        self.f = f

    def writable(self):
        return True

    def write(self, b):
        return self.f.write(b)


# Written to a pipe (sizes in data descriptors), deflated, with an archive
# comment, and every member with Zip64 extra fields (as numpy's savez).
with open(path("npz_stream.npz"), "wb") as raw:
    with zipfile.ZipFile(Unseekable(raw), "w", zipfile.ZIP_DEFLATED) as z:
        z.comment = b"written by a pipe"
        for nm, a in (("x.npy", base.astype("<f4")), ("y.npy", labels)):
            with z.open(nm, "w", force_zip64=True) as m:
                m.write(member(a))
assert np.array_equal(np.load(path("npz_stream.npz"))["x"], base.astype("<f4"))
ok("npz_stream", "npz:DIR/npz_stream.npz", base.astype(np.float32), labels)

# ---- CSV ---------------------------------------------------------------------


def csv_case(name, text, x, y=None, t=None, text_labels=False):
    """A CSV's ok case; a numeric label column is kept as targets too (t = y)."""
    with open(path(name + ".csv"), "wb") as f:
        f.write(text.encode("utf-8") if isinstance(text, str) else text)
    ok(name, f"csv:DIR/{name}.csv", x, y, None if text_labels else y if t is None else t)


def loadtxt(text, skip=0, **kw):
    return np.loadtxt(io.StringIO(text), delimiter=",", skiprows=skip, ndmin=2, **kw)


vals = np.round(rng.normal(size=(5, 3)) * 100, 3)
cls = np.array([1, 0, 2, 2, 1])
body = "".join(",".join(f"{v:g}" for v in r) + f",{c}\n" for r, c in zip(vals, cls))
a = loadtxt(body)
csv_case("csv_plain", body, a[:, :3], a[:, 3].astype(int))
csv_case("csv_header", "a,b,c,label\n" + body, a[:, :3], a[:, 3].astype(int))
csv_case("csv_crlf", ("a,b,c,label\n" + body).replace("\n", "\r\n"), a[:, :3], a[:, 3].astype(int))
csv_case("csv_bom_quoted", '\ufeff"a","b","c","label"\r\n' + body.replace("\n", "\r\n"),
         a[:, :3], a[:, 3].astype(int))
csv_case("csv_spaces", "a , b , c , label\n" + body.replace(",", " , "), a[:, :3],
         a[:, 3].astype(int))
csv_case("csv_trailing_blank", "a,b,c,label\n" + body + "\n\n  \n\r\n", a[:, :3],
         a[:, 3].astype(int))
csv_case("csv_no_final_newline", "a,b,c,label\n" + body.rstrip("\n"), a[:, :3],
         a[:, 3].astype(int))
csv_case("csv_label_first", "label,a,b,c\n" + "".join(
    f"{c}," + ",".join(f"{v:g}" for v in r) + "\n" for r, c in zip(vals, cls)), a[:, :3],
    a[:, 3].astype(int))
# Quoted numbers (csv.writer with QUOTE_ALL, spreadsheets).
csv_case("csv_quoted_numbers", "a,b,c,label\n" + "".join(
    ",".join(f'"{v:g}"' for v in r) + f',"{c}"\n' for r, c in zip(vals, cls)), a[:, :3],
    a[:, 3].astype(int))
# Scientific notation, as np.savetxt(..., delimiter=",") writes it (%.18e).
sci = rng.normal(size=(4, 3)) * 1e-5
buf = io.StringIO()
np.savetxt(buf, np.column_stack([sci, [0, 1, 1, 0]]), delimiter=",")
s = buf.getvalue()
a = loadtxt(s)
csv_case("csv_savetxt", s, a[:, :3], a[:, 3].astype(int))
buf = io.StringIO()
np.savetxt(buf, np.column_stack([sci, [0, 1, 1, 0]]), delimiter=",", fmt="%.6E",
           header="a,b,c,label", comments="")
s = buf.getvalue()
a = loadtxt(s, skip=1)
csv_case("csv_savetxt_header", s, a[:, :3], a[:, 3].astype(int))
# float32 midpoints (the mean of two neighbouring floats, as float64 data can
# hold), as np.savetxt and repr write them: numpy rounds the text to float64
# and that to float32, which at a midpoint can differ from rounding once.
mids = np.array([(np.float64(v) + np.float64(np.nextafter(v, np.float32(np.inf)))) / 2
                 for v in (rng.normal(size=64) * 10).astype(np.float32)]).reshape(16, 4)
buf = io.StringIO()
np.savetxt(buf, np.column_stack([mids, np.arange(16) % 3]), delimiter=",")
s = buf.getvalue()
a = loadtxt(s)
csv_case("csv_midpoints_savetxt", s, a[:, :4], a[:, 4].astype(int))
s = "".join(",".join(repr(float(v)) for v in r) + f",{i % 3}\n" for i, r in enumerate(mids))
a = loadtxt(s)
csv_case("csv_midpoints_repr", s, a[:, :4], a[:, 4].astype(int))
# Text labels (class names, sorted), quoted or not.
s = "x0,x1,species\n1.5,2,setosa\n3,4,\"virginica\"\n5,6,versicolor\n7,8,setosa\n"
a = np.genfromtxt(io.StringIO(s), delimiter=",", skip_header=1, usecols=(0, 1))
names = ["setosa", "virginica", "versicolor", "setosa"]
csv_case("csv_text_labels", s, a, [sorted(set(names)).index(n) for n in names], text_labels=True)
# Hexadecimal labels are text to pandas (numbers only to strtod).
s = "a,label\n1,0x10\n2,0x2\n3,0x10\n"
csv_case("csv_hex_labels", s, np.array([[1.0], [2.0], [3.0]]), [0, 1, 0], text_labels=True)
# A regression target: a label column of real numbers.
s = "a,b,label\n1,2,0.5\n3,4,-1.25\n5,6,3\n"
a = loadtxt(s, skip=1)
csv_case("csv_regression", s, a[:, :2], t=a[:, 2])
# A wide row: 20000 columns on one line.
wide = rng.integers(0, 256, size=(3, 20000))
s = "".join(",".join(map(str, r)) + f",{i}\n" for i, r in enumerate(wide))
a = loadtxt(s)
csv_case("csv_wide", s, a[:, :-1], a[:, -1].astype(int))
# pandas' to_csv with its index: an unnamed first column, kept as a feature (as
# pandas' read_csv and numpy keep it).
s = ",a,b,label\n0,1.5,2,1\n1,3,4,0\n"
a = loadtxt(s, skip=1)
csv_case("csv_pandas_index", s, a[:, :3], a[:, 3].astype(int))
# Special values numpy reads and cohort does not train on.
for name, text, frag in [
        ("csv_nan", "a,b,label\n1,2,0\n3,nan,1\n", "csv_nan.csv:3: column 1"),
        ("csv_NaN_upper", "a,b,label\n1,NaN,0\n", "csv_NaN_upper.csv:2: column 1"),
        ("csv_inf", "a,b,label\n1,2,0\n-inf,4,1\n", "csv_inf.csv:3: column 0"),
        ("csv_inf_word", "a,b,label\n1,2,0\n4,Infinity,1\n", "csv_inf_word.csv:3: column 1"),
        ("csv_f32_overflow", "a,b,label\n1,2,0\n4,1e39,1\n", "csv_f32_overflow.csv:3: column 1"),
        ("csv_f32_overflow_fast", "a,b,label\n1,2,0\n4,3.5e38,1\n",
         "csv_f32_overflow_fast.csv:3: column 1"),
        ("csv_target_overflow", "a,b,label\n1,2,0.5\n4,3,1e39\n",
         "csv_target_overflow.csv:3: column 2"),
        ("csv_missing", "a,b,label\n1,,0\n3,4,1\n", "csv_missing.csv:2: column 1"),
        # no header, a missing value in the first row: not a header
        ("csv_missing_first", "1,,0\n3,4,1\n", "csv_missing_first.csv:1: column 1"),
        ("csv_trailing_comma", "a,b,label,\n1,2,0,\n3,4,1,\n",
         "csv_trailing_comma.csv:2: column 3 (counted from 0, as label_column is): '' is not a "
         "number (a comma ends the line)"),
        ("csv_semicolon", "a;b;label\n1;2;0\n", "csv_semicolon.csv: the first line has no comma"),
        ("csv_tab", "a\tb\tlabel\n1\t2\t0\n", "csv_tab.csv: the first line has no comma"),
        ("csv_savetxt_spaces", "1.0 2.0 0.0\n3.0 4.0 1.0\n",
         "csv_savetxt_spaces.csv: the first line has no comma"),
        ("csv_cr_only", "a,b,label\r1,2,0\r3,4,1\r", "csv_cr_only.csv:1: a carriage return"),
        ("csv_comment", "a,b,label\n# a comment\n1,2,0\n", "csv_comment.csv:2: expected 3 fields, found 1"),
        # hexadecimal: strtod's syntax, not a number to numpy or pandas
        ("csv_hex", "a,b,label\n1,0x1f,0\n", "csv_hex.csv:2: column 1 (counted from 0, as "
         "label_column is): '0x1f' is not a number"),
        ("csv_quoted_comma", "a,b,label\n1,2,\"cat, black\"\n", "csv_quoted_comma.csv:2: expected 3 fields, found 4"),
]:
    with open(path(name + ".csv"), "w", newline="") as f:
        f.write(text)
    err(name, f"csv:DIR/{name}.csv", frag)

# ---- IDX ---------------------------------------------------------------------


def idx(a):
    dims = b"".join(struct.pack(">I", d) for d in a.shape)
    return struct.pack(">I", 0x800 | a.ndim) + dims + a.astype("u1").tobytes()


img = rng.integers(0, 256, size=(5, 3, 4)).astype("u1")
lab = np.array([3, 1, 4, 1, 5], dtype="u1")
for name, arr in [("idx_hw", img), ("idx_flat", img.reshape(5, 12)),
                  ("idx_hwc", img.reshape(5, 3, 2, 2))]:
    with open(path(name + ".idx"), "wb") as f:
        f.write(idx(arr))
    with gzip.open(path(name + ".idx.gz"), "wb") as f:
        f.write(idx(arr))
    with open(path("idx_labels"), "wb") as f:
        f.write(idx(lab))
    for sfx in [".idx", ".idx.gz"]:
        ok(name + sfx.replace(".", "_"), f"idx:DIR/{name}{sfx},DIR/idx_labels", as_x(arr), lab,
           shape=shape_of(arr))
gz = gzip.compress(idx(img))
with open(path("idx_gz_cut.gz"), "wb") as f:
    f.write(gz[:len(gz) // 2])
err("idx_gz_cut", "idx:DIR/idx_gz_cut.gz,DIR/idx_labels", "idx_gz_cut.gz: truncated")
with open(path("idx_gz_no_trailer.gz"), "wb") as f:
    f.write(gz[:-8])
err("idx_gz_no_trailer", "idx:DIR/idx_gz_no_trailer.gz,DIR/idx_labels", "idx_gz_no_trailer.gz: truncated: the gzip stream ends before its trailer")
bad = bytearray(gz)
bad[-8] ^= 0xff  # the CRC-32 of the data
with open(path("idx_gz_crc.gz"), "wb") as f:
    f.write(bytes(bad))
err("idx_gz_crc", "idx:DIR/idx_gz_crc.gz,DIR/idx_labels", "idx_gz_crc.gz: corrupt gzip data")
with open(path("idx_int32"), "wb") as f:
    f.write(struct.pack(">IIII", 0x0C03, 5, 3, 4) + img.astype(">i4").tobytes())
err("idx_int32", "idx:DIR/idx_int32,DIR/idx_labels", "idx_int32: IDX element type 0x0c is not supported")

with open(path("manifest.tsv"), "w") as f:
    f.write("\n".join(lines) + "\n")
