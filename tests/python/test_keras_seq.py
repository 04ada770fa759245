"""Keras sequence models in and out (issue 37's layers): cohort.from_keras
of each model predicts in cohort what Keras predicts (padded and masked
inputs included), and cohort.to_keras gives the Keras model back. The
layouts of the weights files (torch's, issue 37) are checked against torch
itself: the file of a Keras model loads through cohort.to_torch, in Debian's
python3 with torch, and predicts what Keras does."""
import json
import os
import subprocess

import numpy as np
import pytest

from conftest import need
from seq_models import NAMES, T, V, build, series, tokens

os.environ.setdefault("KERAS_BACKEND", "jax")
keras = need("keras")
from keras import layers as L  # noqa: E402

from cohort import _convert  # noqa: E402


@pytest.mark.parametrize("name", NAMES)
def test_from_keras_predicts_as_keras(cohort, tmp_path, name):
    """Each model, converted, predicts Keras's predictions within 1e-5 in
    cohort and back in Keras; a model with a layer cohort has not yet is a
    ConversionError naming it."""
    m, x, kinds = build(keras, name)
    missing = [k for k in kinds if k not in _convert._LANDED]
    path = tmp_path / f"{name}.safetensors"
    if missing:
        with pytest.raises(cohort.ConversionError, match="cohort has no (%s) yet" % "|".join(missing)):
            cohort.from_keras(m, weights=path)
        return
    entry = cohort.from_keras(m, weights=path)
    want = m.predict(x, verbose=0)
    np.testing.assert_allclose(cohort.predict(entry["init_from"], x), want, atol=1e-5)
    back = cohort.to_keras(entry["init_from"])
    np.testing.assert_allclose(back.predict(x, verbose=0), want, atol=1e-5)
    assert [type(la).__name__ for la in back.layers] == [type(la).__name__ for la in m.layers]


def test_masked_padding_changes_nothing(cohort, tmp_path):
    """Under mask_zero, the same tokens pre-padded, post-padded and not
    padded give one prediction, in Keras and in cohort."""
    missing = [k for k in ("embedding", "lstm", "gru", "layer_normalization", "gelu")
               if k not in _convert._LANDED]
    if missing:
        pytest.skip(f"cohort has no {', '.join(missing)} yet")
    m, _, _ = build(keras, "lstm_masked")
    entry = cohort.from_keras(m, weights=tmp_path / "m.safetensors")
    ids = np.array([[3, 5, 7, 2]], dtype=np.int32)
    pads = np.zeros((1, T - 4), dtype=np.int32)
    x = np.concatenate([np.concatenate([ids, pads], 1), np.concatenate([pads, ids], 1)])
    got = cohort.predict(entry["init_from"], x)
    np.testing.assert_allclose(got[0], got[1], atol=1e-6)
    np.testing.assert_allclose(got, m.predict(x, verbose=0), atol=1e-5)


def test_train_keras_sequence_models(cohort, tmp_path):
    """cohort.train over Keras models of sequences [n, T, F]: the data are
    read as sequences (dense per step, as Keras), and the trained models come
    back as Keras models that predict what cohort does."""
    x, y = series(200, seed=5), np.arange(200) % 3
    m = keras.Sequential([keras.Input((T, 3)), L.Dense(4, activation="relu"), L.Flatten(),
                          L.Dense(3, activation="softmax")], name="steps")
    m.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    r, = cohort.train([m], x, y, epochs=2, batch_size=20, out=str(tmp_path), progress=False)
    assert r.status == "ok", r.error
    back = r.to_keras()
    want = cohort.predict(tmp_path / "models" / "steps.safetensors", x)
    np.testing.assert_allclose(back.predict(x, verbose=0), want, atol=1e-5)
    assert not np.allclose(back.layers[0].get_weights()[0], m.layers[0].get_weights()[0])


def test_train_keras_text_model(cohort, tmp_path):
    """cohort.train over a Keras model of token ids with mask_zero (its
    embedding, recurrent layer and mask trained in cohort) gives a Keras
    model back that predicts what cohort does, padding and all."""
    if "embedding" not in _convert._LANDED or "gru" not in _convert._LANDED:
        pytest.skip("cohort has no embedding or gru yet")
    x = tokens(300, seed=4)
    y = (x == 3).any(axis=1).astype(np.int64)
    m = keras.Sequential([keras.Input((T,)), L.Embedding(V, 6, mask_zero=True), L.GRU(5),
                          L.Dense(2, activation="softmax")], name="text")
    m.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    r, = cohort.train([m], x, y, epochs=2, batch_size=30, out=str(tmp_path), progress=False)
    assert r.status == "ok", r.error
    assert r.config["layers"][0] == {"embedding": {"input_dim": V, "output_dim": 6,
                                                   "mask_zero": True}}
    back = r.to_keras()
    want = cohort.predict(tmp_path / "models" / "text.safetensors", x)
    np.testing.assert_allclose(back.predict(x, verbose=0), want, atol=1e-5)
    assert not np.allclose(back.layers[0].get_weights()[0], m.layers[0].get_weights()[0])


def test_layouts_load_into_torch(cohort, tmp_path, monkeypatch):
    """The file from_keras writes of every model (every sequence layer, landed
    or not: this checks the layouts alone, not cohort's library) loads
    through cohort.to_torch and predicts what Keras does: LSTM gates (i, f,
    c, o) as torch's (i, f, g, o), GRU's (z, r, h) reordered to (r, z, n)
    with its two biases, Bidirectional's backward layer as torch's _reverse,
    Conv1D's kernel [k, in, out] as [out, in, k], causal and same padding,
    masks pre- and post-padding."""
    py = "/usr/bin/python3"
    probe = subprocess.run([py, "-c", "import torch"], capture_output=True)
    if probe.returncode:
        if os.environ.get("COHORT_PYTEST_STRICT") == "1":
            pytest.fail("Debian's python3 has no torch (python3-torch)")
        pytest.skip("no torch in /usr/bin/python3")
    monkeypatch.setattr(_convert, "_LANDED", frozenset(_convert._SEQ_KINDS + ("gelu", "silu")))
    cases = []
    for name in NAMES:
        if name == "image_norms":  # no one torch module normalizes an NCHW image's pixels
            continue
        m, x, _ = build(keras, name)
        entry = cohort.from_keras(m, weights=tmp_path / f"{name}.safetensors")
        np.save(tmp_path / f"{name}_x.npy", x)
        np.save(tmp_path / f"{name}_want.npy", m.predict(x, verbose=0))
        cases.append((name, entry["init_from"]))
    script = """
import json, sys
import numpy as np, torch
from cohort import _convert
_convert._LANDED = frozenset(_convert._SEQ_KINDS + ("gelu", "silu"))
import cohort
out = {}
for name, path in json.loads(sys.argv[1]):
    x = np.load(path[:-len(".safetensors")] + "_x.npy")
    m = cohort.to_torch(path)
    xt = torch.from_numpy(x.astype(np.int64) if x.ndim == 2 else x)
    with torch.no_grad():
        out[name] = m(xt).numpy().tolist()
print(json.dumps(out))
"""
    env = dict(os.environ)  # the package alone: the venv's numpy 2 would break Debian's torch
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(cohort.__file__))
    r = subprocess.run([py, "-c", script, json.dumps(cases)], capture_output=True, text=True,
                       env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for name, _ in cases:
        want = np.load(tmp_path / f"{name}_want.npy")
        np.testing.assert_allclose(np.array(got[name], dtype=np.float32), want, atol=1e-5,
                                   err_msg=name)


def test_keras_sequence_errors_name_what(cohort):
    def err(layers, match):
        with pytest.raises(cohort.ConversionError, match=match):
            cohort.from_keras(keras.Sequential(layers))

    everything = frozenset(_convert._SEQ_KINDS + ("gelu", "silu"))
    err([keras.Input((None, 4)), L.Dense(3)], "every size but the batch")
    old, _convert._LANDED = _convert._LANDED, everything
    try:
        err([keras.Input((T, 4)), L.LSTM(3, dropout=0.2)], "dropout=0.2")
        err([keras.Input((T, 4)), L.GRU(3, reset_after=False)], "reset_after=False")
        err([keras.Input((T, 4)), L.LSTM(3, go_backwards=True)], "go_backwards=True")
        err([keras.Input((T, 4)), L.Bidirectional(L.LSTM(3), merge_mode="sum")], "merge_mode='sum'")
        err([keras.Input((T, 4)), L.SimpleRNN(3)], "SimpleRNN.*no cohort form")
        err([keras.Input((T, 4)), L.Conv1D(4, 2, groups=2)], "groups=2")
        err([keras.Input((T, 4)), L.LayerNormalization(rms_scaling=True)], "rms_scaling=True")
        err([keras.Input((T,)), L.Embedding(V, 4, mask_zero=True), L.Conv1D(3, 2)],
            "mask_zero=True, which Keras drops")
        err([keras.Input((T,)), L.Embedding(V, 4, mask_zero=True), L.GlobalMaxPooling1D()],
            "GlobalMaxPooling1D.*mask")
        err([keras.Input((T, 4)), L.Dense(3, activation="elu")], "activation 'elu'")
    finally:
        _convert._LANDED = old
    for kind in sorted(set(_convert._SEQ_KINDS) - _convert._LANDED):
        if kind == "lstm":
            err([keras.Input((T, 4)), L.LSTM(3)], "cohort has no lstm yet")
        elif kind == "layer_normalization":
            err([keras.Input((T, 4)), L.LayerNormalization()], "cohort has no layer_normalization yet")


def test_to_keras_names_what_it_cannot_give(cohort, tmp_path):
    """A cohort model with a layer no keras.Sequential layer is (a residual
    block) is a ConversionError naming it, not a model without it."""
    x = series(40, seed=6)[:, 0, :]
    y = np.arange(40) % 2
    layers = [{"dense": 3}, {"residual": [{"dense": 3, "activation": "relu"}]},
              {"dense": 2, "activation": "softmax"}]
    r, = cohort.train({"defaults": {"epochs": 1, "batch_size": 8},
                       "models": [{"name": "res", "layers": layers}]},
                      data={"train": (x, y)}, out=str(tmp_path), progress=False)
    assert r.status == "ok", r.error
    with pytest.raises(cohort.ConversionError, match="residual"):
        r.to_keras()
