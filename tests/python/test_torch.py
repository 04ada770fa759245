"""torch models in and out: cohort.from_torch and cohort.to_torch (and
cohort.train over torch.nn.Sequential modules). A module takes torch's
[N, C, H, W], cohort's data [N, H, W, C]; both predict the same to 1e-5."""
import numpy as np
import pytest

from conftest import fashion, need

torch = need("torch")
nn = torch.nn


def nchw(x):
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def torch_cnn():
    torch.manual_seed(4)
    m = nn.Sequential(
        nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(),             # TensorFlow's same at stride 1
        nn.BatchNorm2d(6, eps=1e-3, momentum=0.1),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 5, (3, 2), stride=2, bias=False), nn.Tanh(),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.BatchNorm1d(5 * 3 * 3),
        nn.Dropout(0.25),
        nn.Linear(45, 12), nn.Sigmoid(),
        nn.Linear(12, 10), nn.Softmax(dim=1))
    with torch.no_grad():  # statistics that are not the initial ones, so that their layout shows
        for b in (m[2], m[8]):
            b.running_mean.uniform_(-0.5, 0.5)
            b.running_var.uniform_(0.5, 1.5)
            b.weight.uniform_(0.5, 1.5)
            b.bias.uniform_(-0.3, 0.3)
    return m.eval()


def test_from_torch_predicts_as_torch(cohort, tmp_path):
    m = torch_cnn()
    entry = cohort.from_torch(m, (1, 28, 28), weights=tmp_path / "init.safetensors", name="tcnn")
    kinds = [next(iter(la)) if isinstance(la, dict) else la for la in entry["layers"]]
    assert kinds == ["conv2d", "batch_normalization", "max_pooling2d", "conv2d", "average_pooling2d",
                     "flatten", "batch_normalization", "dropout", "dense", "dense"]
    assert entry["layers"][0]["padding"] == "same" and entry["layers"][0]["activation"] == "relu"
    assert entry["layers"][1]["batch_normalization"]["momentum"] == pytest.approx(0.9)
    x, _ = fashion("test")
    x = x[:300]
    with torch.no_grad():
        want = m(nchw(x)).numpy()
    np.testing.assert_allclose(cohort.predict(entry["init_from"], x), want, atol=1e-5)
    back = cohort.to_torch(entry["init_from"])
    with torch.no_grad():
        np.testing.assert_allclose(back(nchw(x)).numpy(), want, atol=1e-5)


def test_trained_model_to_torch(cohort, tmp_path):
    """A cohort CNN with TensorFlow's same padding on strided convolutions
    and pools (asymmetric, which torch's own padding is not) and global
    pooling, trained one epoch, as torch modules."""
    layers = [{"conv2d": 6, "kernel_size": 4, "strides": 2, "padding": "same", "activation": "relu"},
              {"max_pooling2d": 3, "strides": 2, "padding": "same"},
              "batch_normalization",
              {"average_pooling2d": 2, "strides": 1, "padding": "same"},
              {"conv2d": 8, "kernel_size": 1},
              "global_average_pooling2d", {"dense": 10, "activation": "softmax"}]
    x, y = fashion("train")
    xt, _ = fashion("test")
    r, = cohort.train({"defaults": {"epochs": 1, "batch_size": 50},
                       "models": [{"name": "same", "layers": layers}]},
                      data={"train": (x[:2000], y[:2000])}, out=str(tmp_path), progress=False)
    assert r.status == "ok", r.error
    want = cohort.predict(tmp_path / "models" / "same.safetensors", xt[:300])
    for m in (r.to_torch(), cohort.to_torch(tmp_path / "models" / "same.safetensors")):
        with torch.no_grad():
            np.testing.assert_allclose(m(nchw(xt[:300])).numpy(), want, atol=1e-5)


def test_train_torch_modules(cohort):
    x, y = fashion("train")
    xt, yt = fashion("test")
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10), nn.Softmax(dim=1))
    res = cohort.train([torch_cnn(), mlp], x[:3000], y[:3000], epochs=1, batch_size=64,
                       optimizer="adam", test_data=(xt[:500], yt[:500]), progress=False)
    assert [r.status for r in res] == ["ok", "ok"], [r.error for r in res]
    assert res[0].name != res[1].name
    for r in res:
        m = r.to_torch()
        with torch.no_grad():
            p = m(nchw(xt[:500])).numpy()
        acc = float(np.mean(p.argmax(axis=1) == yt[:500]))
        assert abs(acc - r.test["accuracy"]) <= 1e-4, (r.name, acc, r.test)


def test_torch_errors_name_what(cohort):
    def err(module, shape, match):
        with pytest.raises(cohort.ConversionError, match=match):
            cohort.from_torch(module, shape)

    err(nn.Sequential(nn.Linear(8, 4), nn.GroupNorm(1, 4)), (8,), "GroupNorm.*has no cohort form")
    err(nn.Sequential(nn.Conv2d(1, 2, 3, dilation=2)), (1, 9, 9), "dilation")
    err(nn.Sequential(nn.Conv2d(1, 2, 3, padding=2)), (1, 9, 9), "padding=\\(2, 2\\)")
    err(nn.Sequential(nn.Linear(8, 4), nn.Softmax(dim=0)), (8,), "Softmax\\(dim=0\\)")
    err(nn.Sequential(nn.Linear(8, 4), nn.ELU()), (8,), "ELU")
    err(nn.Sequential(nn.MaxPool2d(2, ceil_mode=True)), (1, 9, 9), "ceil_mode")
    err(nn.Linear(8, 4), (8,), "torch.nn.Sequential")
