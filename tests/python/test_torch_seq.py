"""torch sequence models in and out (issue 37's layers): cohort.from_torch
of nn.Embedding, nn.LSTM / nn.GRU (in cohort.nn.Recurrent), nn.Conv1d (in
cohort.nn.ChannelsLast), nn.LayerNorm, nn.GELU, nn.SiLU predicts in cohort
what torch predicts, and cohort.to_torch gives it back. cohort's sequences
are [N, T, F], as torch's batch_first recurrent layers take them."""
import numpy as np
import pytest

from conftest import need
from seq_models import T, V, series, tokens

torch = need("torch")
nn = torch.nn

from cohort import _convert  # noqa: E402


def cnn():
    from cohort import nn as m  # noqa: PLC0415
    return m


def modules(name):
    """(module, input_shape, x, kinds it needs) of one of NAMES."""
    c = cnn()
    torch.manual_seed(5)
    if name == "lstm":
        m = nn.Sequential(nn.Embedding(V, 5), c.Recurrent(nn.LSTM(5, 4, batch_first=True),
                                                          return_sequences=True),
                          nn.Linear(4, 6), nn.GELU(), nn.LayerNorm(6, eps=1e-4),
                          c.Recurrent(nn.GRU(6, 3, batch_first=True)), nn.Linear(3, 2),
                          nn.Softmax(dim=1))
        x, kinds = tokens(), ("embedding", "lstm", "gru", "layer_normalization", "gelu")
    elif name == "masked":
        m = c.Sequential(nn.Embedding(V, 5),
                         c.Recurrent(nn.GRU(5, 4, batch_first=True, bidirectional=True),
                                     return_sequences=True), nn.SiLU(),
                         c.Recurrent(nn.LSTM(8, 3, batch_first=True, bidirectional=True)),
                         nn.Linear(6, 2), nn.Softmax(dim=1), mask_zero=True)
        x, kinds = tokens(), ("embedding", "bidirectional", "gru", "lstm", "silu")
    elif name == "recurrent":
        m = nn.Sequential(c.Recurrent(nn.GRU(3, 5, batch_first=True), return_sequences=True),
                          nn.LayerNorm(5), nn.Linear(5, 4), nn.SiLU(),
                          c.Recurrent(nn.LSTM(4, 3, batch_first=True)), nn.Linear(3, 2),
                          nn.Softmax(dim=1))
        x, kinds = series(), ("gru", "lstm", "layer_normalization", "silu")
    elif name == "conv":
        m = nn.Sequential(c.ChannelsLast(nn.Sequential(nn.ConstantPad1d((4, 0), 0.0),
                                                       nn.Conv1d(3, 4, 3, dilation=2))),
                          nn.ReLU(), c.Pool1d(True, 2, 2, 0, 1),  # TensorFlow's same
                          c.ChannelsLast(nn.Conv1d(4, 5, 3, padding=1)), c.Pool1d(False, 2, 1),
                          c.ChannelsLast(nn.Conv1d(5, 3, 2, bias=False)),
                          c.GlobalPool1d("avg"), nn.Linear(3, 2), nn.Softmax(dim=1))
        x, kinds = series(), ("conv1d", "max_pooling1d", "average_pooling1d",
                              "global_average_pooling1d")
    else:
        raise KeyError(name)
    with torch.no_grad():  # biases and norms that are not the initial ones
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return m.eval(), x.shape[1:], x, kinds


NAMES = ("recurrent", "lstm", "masked", "conv")


def as_torch(x):
    return torch.from_numpy(x.astype(np.int64) if x.ndim == 2 else x)


@pytest.mark.parametrize("name", NAMES)
def test_from_torch_predicts_as_torch(cohort, tmp_path, name):
    m, shape, x, kinds = modules(name)
    with torch.no_grad():
        want = m(as_torch(x)).numpy()
    missing = [k for k in kinds if k not in _convert._LANDED]
    if missing:
        with pytest.raises(cohort.ConversionError, match="cohort has no (%s) yet" % "|".join(missing)):
            cohort.from_torch(m, shape)
        return
    entry = cohort.from_torch(m, shape, weights=tmp_path / "init.safetensors", name=name)
    np.testing.assert_allclose(cohort.predict(entry["init_from"], x), want, atol=1e-5)
    back = cohort.to_torch(entry["init_from"])
    with torch.no_grad():
        np.testing.assert_allclose(back(as_torch(x)).numpy(), want, atol=1e-5)
    for mod in back.modules():
        if isinstance(mod, nn.Linear):
            assert mod.in_features == mod.weight.shape[1], mod


def test_train_torch_text_model(cohort, tmp_path):
    """cohort.train over a torch module of token ids with cohort.nn's
    mask_zero: trained in cohort, its to_torch() (a masked recurrent loop in
    torch) predicts what cohort does, padding and all."""
    if "embedding" not in _convert._LANDED or "gru" not in _convert._LANDED:
        pytest.skip("cohort has no embedding or gru yet")
    c = cnn()
    torch.manual_seed(3)
    net = c.Sequential(nn.Embedding(V, 6), c.Recurrent(nn.GRU(6, 5, batch_first=True)),
                       nn.Linear(5, 2), nn.Softmax(dim=1), mask_zero=True)
    x = tokens(300, seed=4)
    y = (x == 3).any(axis=1).astype(np.int64)
    r, = cohort.train([net], x, y, epochs=2, batch_size=30, out=str(tmp_path), progress=False)
    assert r.status == "ok", r.error
    assert r.config["layers"][0]["embedding"]["mask_zero"] is True
    want = cohort.predict(tmp_path / "models" / f"{r.name}.safetensors", x)
    back = r.to_torch()
    assert back.mask_zero
    with torch.no_grad():
        np.testing.assert_allclose(back(as_torch(x)).numpy(), want, atol=1e-5)
        assert not np.allclose(back[0].weight.numpy(), net[0].weight.numpy())


def test_recurrent_module_masks(monkeypatch):
    """cohort.nn's masked recurrent loop is torch's own layer where nothing
    is padded, and pre- or post-padding the tokens changes nothing."""
    c = cnn()
    torch.manual_seed(2)
    for rnn in (nn.LSTM(5, 4, batch_first=True, bidirectional=True),
                nn.GRU(5, 4, batch_first=True)):
        for seq in (False, True):
            r = c.Recurrent(rnn, return_sequences=seq)
            x = torch.randn(3, T, 5)
            with torch.no_grad():
                np.testing.assert_allclose(r(x, torch.ones(3, T, dtype=torch.bool)).numpy(),
                                           r(x).numpy(), atol=1e-6)
    m = c.Sequential(nn.Embedding(V, 5), c.Recurrent(nn.GRU(5, 4, batch_first=True)),
                     nn.Linear(4, 2), mask_zero=True).eval()
    ids = torch.tensor([[3, 5, 7, 2]])
    pad = torch.zeros(1, T - 4, dtype=torch.long)
    with torch.no_grad():
        a, b, plain = m(torch.cat([ids, pad], 1)), m(torch.cat([pad, ids], 1)), m[:](ids)
    np.testing.assert_allclose(a.numpy(), plain.numpy(), atol=1e-6)
    np.testing.assert_allclose(b.numpy(), plain.numpy(), atol=1e-6)


def test_torch_sequence_errors_name_what(cohort, monkeypatch):
    c = cnn()

    def err(module, shape, match):
        with pytest.raises(cohort.ConversionError, match=match):
            cohort.from_torch(module, shape)

    monkeypatch.setattr(_convert, "_LANDED", frozenset(_convert._SEQ_KINDS + ("gelu", "silu")))
    err(nn.Sequential(nn.Embedding(V, 4), nn.LSTM(4, 3, batch_first=True)), (T,),
        "cohort.nn.Recurrent")
    err(nn.Sequential(nn.Conv1d(3, 4, 2)), (T, 3), "cohort.nn.ChannelsLast")
    err(nn.Sequential(c.Recurrent(nn.LSTM(3, 4))), (T, 3), "batch_first=False")
    err(nn.Sequential(c.Recurrent(nn.GRU(3, 4, batch_first=True, num_layers=2))), (T, 3),
        "num_layers=2")
    err(nn.Sequential(nn.Embedding(V, 4, padding_idx=0)), (T,), "padding_idx")
    err(nn.Sequential(c.ChannelsLast(nn.Conv1d(3, 4, 3, padding=2))), (T, 3),
        "none of cohort's")
    err(nn.Sequential(nn.LayerNorm((T, 3))), (T, 3), "LayerNorm\\(last axis")
    err(nn.Sequential(nn.Linear(3, 4), nn.GELU(approximate="tanh")), (T, 3), "approximate='tanh'")
    err(nn.Sequential(nn.RNN(3, 4, batch_first=True)), (T, 3), "cohort.nn.Recurrent")
