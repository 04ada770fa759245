#!/usr/bin/python3
"""Write the cases of tests/bad/weights/ (safetensors files for `cohort eval`)
into OUTDIR, plus good3.csv, the dataset their .expect specs name as
DIR/good3.csv (2 features, 3 classes).

usage: make.py OUTDIR      (standard library only)"""
import json, os, struct, sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
SPEC = json.dumps({"name": "m", "layers": [{"dense": 3, "activation": "softmax"}]})
META = {"format": "cohort", "spec": SPEC}


def put(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


def raw(header_text, blob=b"", size=None):
    h = header_text.encode() if isinstance(header_text, str) else header_text
    return struct.pack("<Q", len(h) if size is None else size) + h + blob


def st(entries, blob, meta=META):
    """entries: name -> (dtype, shape, [begin, end]) written as given."""
    header = {}
    if meta is not None:
        header["__metadata__"] = meta
    for name, (dtype, shape, offs) in entries.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": offs}
    return raw(json.dumps(header), blob)


def f32(n):
    return struct.pack(f"<{n}f", *[0.25 * i for i in range(n)])


GOOD = {"layers.0.weight": ("F32", [3, 2], [0, 24]), "layers.0.bias": ("F32", [3], [24, 36])}

with open(os.path.join(out, "good3.csv"), "w") as f:
    f.write("a,b,label\n" + "".join(f"{i % 5},{i % 7},{i % 3}\n" for i in range(12)))

put("st_empty.safetensors", b"")
put("st_short.safetensors", b"\x10\0\0\0\0")
put("st_header_2pow40.safetensors", raw("{}", size=1 << 40))
put("st_header_past_end.safetensors", raw("{}" + " " * 48, size=1000))
put("st_not_json.safetensors", raw("{not json}"))
put("st_trailing_garbage.safetensors", raw('{"__metadata__": {}} x'))
put("st_duplicate_key.safetensors", raw('{"a": {}, "a": {}}'))
put("st_nul_escape.safetensors", raw('{"a\\u0000b": {}}'))
put("st_deep_nesting.safetensors", raw("[" * 100 + "]" * 100))
put("st_header_array.safetensors", raw("[]"))
put("st_entry_not_object.safetensors", raw('{"t": [1, 2]}'))
put("st_dtype_f16.safetensors", st({"layers.0.weight": ("F16", [3, 2], [0, 12])}, bytes(12)))
put("st_dtype_missing.safetensors", raw('{"t": {"shape": [1], "data_offsets": [0, 4]}}', bytes(4)))
put("st_five_dims.safetensors", st({"t": ("F32", [1, 1, 1, 1, 1], [0, 4])}, bytes(4)))
put("st_negative_dim.safetensors", st({"t": ("F32", [-1, 2], [0, 8])}, bytes(8)))
put("st_fraction_dim.safetensors", st({"t": ("F32", [1.5], [0, 4])}, bytes(4)))
put("st_shape_overflow.safetensors", st({"t": ("F32", [1 << 52, 1 << 52], [0, 4])}, bytes(4)))
put("st_offsets_past_end.safetensors", st(GOOD, f32(6)))
put("st_offsets_reversed.safetensors", st({"t": ("F32", [1], [8, 4])}, bytes(8)))
put("st_offsets_one.safetensors", st({"t": ("F32", [1], [4])}, bytes(8)))
put("st_offsets_huge.safetensors", st({"t": ("F32", [1], [0, 1 << 60])}, bytes(8)))
put("st_size_mismatch.safetensors", st({"t": ("F32", [2, 3], [0, 20])}, bytes(24)))
put("st_overlap.safetensors", st({"a": ("F32", [4], [0, 16]), "b": ("F32", [4], [8, 24])}, bytes(24)))
put("st_metadata_not_string.safetensors", st(GOOD, f32(9), {"spec": 1}))
put("st_metadata_not_object.safetensors", raw('{"__metadata__": "x"}'))
put("st_long_name.safetensors", st({"n" * 200: ("F32", [1], [0, 4])}, bytes(4)))
put("st_no_spec.safetensors", st(GOOD, f32(9), {"format": "pt"}))
put("st_bad_spec.safetensors", st(GOOD, f32(9), {"spec": "{\"name\": "}))
put("st_spec_no_layers.safetensors", st(GOOD, f32(9), {"spec": json.dumps({"name": "m", "layers": []})}))
put("st_missing_bias.safetensors", st({"layers.0.weight": GOOD["layers.0.weight"]}, f32(6)))
put("st_wrong_shape.safetensors", st({"layers.0.weight": ("F32", [3, 5], [0, 60]),
                                      "layers.0.bias": ("F32", [3], [60, 72])}, f32(18)))
put("st_bias_2d.safetensors", st({"layers.0.weight": GOOD["layers.0.weight"],
                                  "layers.0.bias": ("F32", [3, 1], [24, 36])}, f32(9)))
