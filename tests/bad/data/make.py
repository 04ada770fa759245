#!/usr/bin/python3
"""Write the binary cases of tests/bad/data/ into OUTDIR (the text ones are
committed beside their .expect files), plus the good companion files that the
specs of the .expect files name as DIR/good_*.

usage: make.py OUTDIR      (standard library only)"""
import gzip, io, os, struct, sys, zipfile, zlib

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def put(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


def idx_head(magic_type, dims, ndims=None):
    nd = len(dims) if ndims is None else ndims
    return struct.pack(">I", magic_type << 8 | nd) + b"".join(struct.pack(">I", d) for d in dims)


def images(n, h=2, w=2):
    return idx_head(0x08, [n, h, w]) + bytes(range(n * h * w))


def labels(n):
    return idx_head(0x08, [n]) + bytes(i % 3 for i in range(n))


def npy(descr, shape, data=b"", fortran=False, version=1, header=None):
    if header is None:
        sh = "(" + "".join(f"{s}, " for s in shape)[:-2] + ("," if len(shape) == 1 else "") + ")"
        header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, sh)
    h = header.encode()
    pre = 10 if version == 1 else 12
    h += b" " * (-(pre + len(h) + 1) % 64) + b"\n"
    size = struct.pack("<H", len(h)) if version == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes([version, 0]) + size + h + data


def f32(values):
    return struct.pack(f"<{len(values)}f", *values)


def i64(values):
    return struct.pack(f"<{len(values)}q", *values)


def npz(members, compress=zipfile.ZIP_STORED):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", compress) as z:
        for name, data in members:
            z.writestr(name, data)
    return bytearray(b.getvalue())


X3 = npy("<f4", (3, 2), f32([0, 1, 2, 3, 4, 5]))
Y3 = npy("<i8", (3,), i64([0, 1, 2]))

# Good companions.
put("good_images3.idx", images(3))
put("good_labels3.idx", labels(3))
put("good_labels10000.idx", labels(10000))
put("good_x3.npy", X3)
put("good_y3.npy", Y3)
put("claims_2g_labels.idx", idx_head(0x08, [0x7FFFFFFF]))

# ---- CSV (the text cases are committed) ----
put("csv_label_not_utf8.csv", b"a,b,label\n1,2,cat\n3,4,dog\n5,6,\xff\xfe\n")
put("csv_label_nul.csv", b"a,b,label\n1,2,c\x00t\n3,4,dog\n")

# ---- IDX ----
put("idx_truncated_images.idx", idx_head(0x08, [10000, 28, 28]) + bytes(100))
put("idx_truncated_images.idx.gz", gzip.compress(idx_head(0x08, [10000, 28, 28]) + bytes(100)))
put("idx_truncated_labels.idx", idx_head(0x08, [3]) + b"\1")
put("idx_truncated_header.idx", idx_head(0x08, [3, 2, 2])[:9])
put("idx_empty.idx", b"")
put("idx_bad_magic.idx", b"PK\3\4" + bytes(12))
put("idx_float_type.idx", idx_head(0x0D, [3, 2, 2]) + bytes(48))
put("idx_labels_as_images.idx", labels(3))
put("idx_images_as_labels.idx", images(3))
put("idx_nine_dims.idx", idx_head(0x08, [1] * 9))
put("idx_zero_dim.idx", idx_head(0x08, [3, 0, 2]))
put("idx_dim_too_big.idx", idx_head(0x08, [3, 0x80000000, 1]))
put("idx_count_mismatch.idx", images(4))
put("idx_sample_overflow.idx", idx_head(0x08, [1, 0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF]))
put("idx_over_16gib.idx", idx_head(0x08, [0x7FFFFFFF, 28, 28]))
put("idx_claims_2g.idx", idx_head(0x08, [0x7FFFFFFF, 1, 1]))
put("idx_claims_2g.idx.gz", gzip.compress(idx_head(0x08, [0x7FFFFFFF, 1, 1])))
g = bytearray(gzip.compress(images(3)))
g[12] ^= 0xFF
put("idx_corrupt.idx.gz", bytes(g))
put("idx_gzip_cut.idx.gz", gzip.compress(images(3))[:-12])

# ---- NPY ----
put("npy_claims_2pow40.npy", npy("<f4", (1 << 40, 1)))
put("npy_claims_8gib.npy", npy("<f4", (1 << 30, 2), bytes(64)))
put("npy_truncated_data.npy", npy("<f4", (3, 2), f32([0, 1, 2, 3, 4])))
put("npy_truncated_header.npy", npy("<f4", (3, 2))[:40])
put("npy_bad_magic.npy", b"\x93NUMPX\1\0" + bytes(60))
put("npy_version4.npy", b"\x93NUMPY\4\0" + bytes(60))
put("npy_header_too_long.npy", b"\x93NUMPY\2\0" + struct.pack("<I", 1 << 30) + b"{")
put("npy_big_endian.npy", npy(">f8", (3, 2), bytes(40)))
put("npy_complex.npy", npy("<c8", (3, 2), bytes(48)))
put("npy_structured.npy", npy("", (), header="{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }"))
put("npy_fortran.npy", npy("<f4", (3, 2), f32([0, 1, 2, 3, float("nan"), 5]), fortran=True))
put("npy_no_shape.npy", npy("", (), header="{'descr': '<f4', 'fortran_order': False, }"))
put("npy_unknown_key.npy", npy("", (), header="{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), 'x': 1}"))
put("npy_scalar.npy", npy("<f4", (), f32([1])))
put("npy_empty.npy", npy("<f4", (0, 2)))
put("npy_shape_overflow.npy", npy("<f4", (3, 1 << 32, 1 << 32, 1 << 32)))
put("npy_rows_mismatch.npy", npy("<f4", (2, 2), f32([0, 1, 2, 3])))
put("npy_y_onehot.npy", npy("<f4", (3, 3), f32([1, 0, 0, 0, 1, 0, 0, 0, 1])))
put("npy_y_fraction.npy", npy("<f4", (3,), f32([0, 1.5, 2])))
put("npy_y_negative.npy", npy("<i8", (3,), i64([0, -1, 2])))
put("npy_is_npz.npy", bytes(npz([("x.npy", X3), ("y.npy", Y3)])))

# ---- NPZ ----
put("npz_not_zip.npz", b"hello, this is not a zip archive at all\n")
put("npz_is_npy.npz", X3)
put("npz_too_short.npz", b"PK\5\6")
put("npz_missing_y.npz", bytes(npz([("x.npy", X3), ("z.npy", Y3)])))
put("npz_one_array.npz", bytes(npz([("a.npy", X3)])))
z = npz([("x.npy", X3), ("y.npy", Y3)])
z[z.find(b"\x93NUMPY") + 80] ^= 0x55  # a data byte of x: the CRC no longer matches
put("npz_crc_mismatch.npz", bytes(z))
z = npz([("x.npy", X3), ("y.npy", Y3)])
put("npz_cut.npz", bytes(z[:len(z) - 30]))
z = npz([("x.npy", X3), ("y.npy", Y3)])
eocd = z.rfind(b"PK\5\6")
struct.pack_into("<I", z, eocd + 16, len(z) + 1000)  # the directory's offset past the end
put("npz_directory_past_end.npz", bytes(z))
z = npz([("x.npy", X3), ("y.npy", Y3)], zipfile.ZIP_DEFLATED)
cen = z.find(b"PK\1\2")
struct.pack_into("<I", z, cen + 24, 0xFFFFFFF0)  # x claims 4 GiB from a few bytes
put("npz_bomb.npz", bytes(z))
z = npz([("x.npy", X3), ("y.npy", Y3)])
cen = z.find(b"PK\1\2")
struct.pack_into("<H", z, cen + 10, 12)  # bzip2
put("npz_bzip2.npz", bytes(z))
z = npz([("x.npy", X3), ("y.npy", Y3)])
cen = z.find(b"PK\1\2")
struct.pack_into("<H", z, cen + 8, 1)  # the encrypted flag
put("npz_encrypted.npz", bytes(z))
z = npz([("x.npy", X3 * 20), ("y.npy", Y3)], zipfile.ZIP_DEFLATED)
loc = z.find(b"PK\3\4")
data_at = loc + 30 + struct.unpack_from("<H", z, loc + 26)[0] + struct.unpack_from("<H", z, loc + 28)[0]
z[data_at] = 0xFF  # an invalid deflate block type
put("npz_corrupt_deflate.npz", bytes(z))
z = npz([("x.npy", X3), ("y.npy", Y3)])
cen = z.find(b"PK\1\2")
struct.pack_into("<I", z, cen + 42, 5)  # the local header offset points into nothing
put("npz_bad_local_header.npz", bytes(z))
put("npz_y_fraction.npz", bytes(npz([("x.npy", X3), ("y.npy", npy("<f8", (3,), struct.pack("<3d", 0, 0.5, 1)))])))
put("npz_rows_mismatch.npz", bytes(npz([("x.npy", X3), ("y.npy", npy("<i8", (2,), i64([0, 1])))])))
