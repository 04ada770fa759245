"""ONNX export (cohort export, cohort_export_onnx, cohort.export_onnx): the
files pass onnx.checker and predict in onnxruntime what `cohort predict`
prints, to 1e-5, for an MLP of flat data and CNNs of every layer kind."""
import os
import subprocess

import numpy as np
import pytest

from conftest import cli_predict, cohort_cmd, fashion, need

onnx = need("onnx")
ort = need("onnxruntime")

CNN = [{"conv2d": 8, "kernel_size": 3, "padding": "same", "activation": "relu"},
       "batch_normalization",
       {"max_pooling2d": 2},
       {"conv2d": 6, "kernel_size": [3, 2], "strides": 2, "use_bias": False},
       {"activation": "tanh"},
       {"average_pooling2d": 3, "strides": 2, "padding": "same"},
       "flatten", "batch_normalization", {"dropout": 0.1},
       {"dense": 16, "activation": "sigmoid"},
       {"dense": 10, "activation": "softmax"}]
GAP = [{"conv2d": 4, "kernel_size": 5, "strides": 2, "padding": "same"},
       {"max_pooling2d": 3, "strides": 1, "padding": "same"},
       "global_average_pooling2d", {"dense": 10, "activation": "softmax"}]
MLP = [{"dense": 32, "activation": "relu"}, {"dropout": 0.2}, "batch_normalization",
       {"dense": 10, "activation": "softmax"}]


def onnx_predict(path, x):
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version >= 17
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [i.name for i in s.get_inputs()] == ["input"]
    return s.run(["output"], {"input": x})[0]


@pytest.fixture(scope="module")
def trained(cohort, tmp_path_factory):
    """An MLP on flat data, two CNNs on images, one epoch on 3,000 samples."""
    tmp = str(tmp_path_factory.mktemp("onnx"))
    x, y = fashion("train")
    x, y = x[:3000], y[:3000]
    flat = cohort.train({"defaults": {"epochs": 1, "batch_size": 50},
                         "models": [{"name": "mlp", "layers": MLP},
                                    {"name": "logits", "loss": {"name": "sparse_categorical_crossentropy", "from_logits": True},
                                     "layers": [{"dense": 12, "activation": "tanh"}, {"dense": 10}]}]},
                        data={"train": (x.reshape(len(x), -1), y)}, out=f"{tmp}/flat", progress=False)
    img = cohort.train({"defaults": {"epochs": 1, "batch_size": 50},
                        "models": [{"name": "cnn", "layers": CNN}, {"name": "gap", "layers": GAP}]},
                       data={"train": (x, y)}, out=f"{tmp}/img", progress=False)
    assert all(r.status == "ok" for r in flat + img), [(r.name, r.error) for r in flat + img]
    return tmp


@pytest.mark.parametrize("run,name", [("flat", "mlp"), ("flat", "logits"), ("img", "cnn"),
                                      ("img", "gap")])
def test_onnx_predicts_as_cohort(cohort, trained, run, name):
    xt, _ = fashion("test")
    xt = xt[:500]
    if run == "flat":
        xt = xt.reshape(len(xt), -1)
    weights = f"{trained}/{run}/models/{name}.safetensors"
    out = f"{trained}/{name}.onnx"
    r = subprocess.run([cohort_cmd(), "export", weights, "--format", "onnx", "--out", out],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = onnx_predict(out, xt)
    want = cohort.predict(weights, xt)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    # What the command prints, as the issue asks (six digits).
    np.save(f"{trained}/x_{name}.npy", xt)
    np.testing.assert_allclose(got, cli_predict(weights, f"{trained}/x_{name}.npy", trained),
                               atol=1e-5, rtol=0)
    # The API and the command write the same bytes.
    cohort.export_onnx(weights, f"{trained}/{name}.api.onnx")
    with open(out, "rb") as a, open(f"{trained}/{name}.api.onnx", "rb") as b:
        assert a.read() == b.read()


def test_export_default_name_and_errors(cohort, trained, tmp_path):
    weights = f"{trained}/flat/models/mlp.safetensors"
    r = subprocess.run([cohort_cmd(), "export", weights], capture_output=True, text=True)
    assert r.returncode == 0 and os.path.exists(weights[:-len(".safetensors")] + ".onnx"), r.stderr
    r = subprocess.run([cohort_cmd(), "export", weights, "--format", "tflite"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "unknown format 'tflite'" in r.stderr
    r = subprocess.run([cohort_cmd(), "export", f"{trained}/flat/checkpoints/mlp.safetensors",
                        "--out", str(tmp_path / "c.onnx")], capture_output=True, text=True)
    assert r.returncode == 2 and "checkpoint" in r.stderr and not (tmp_path / "c.onnx").exists(), r.stderr
    # A file that lacks a tensor its spec needs: an error naming it, nothing written.
    from cohort._safetensors import read, write  # noqa: PLC0415
    tensors, meta = read(weights)
    tensors = {k: v for k, v in tensors.items() if k != "layers.2.running_var"}
    write(str(tmp_path / "cut.safetensors"), tensors, meta)
    with pytest.raises(cohort.DataError, match="no tensor layers.2.running_var"):
        cohort.export_onnx(tmp_path / "cut.safetensors", tmp_path / "cut.onnx")
    assert not (tmp_path / "cut.onnx").exists()
