"""Keras models in and out: cohort.from_keras, cohort.train over Keras
models as model.fit, cohort.to_keras and Result.to_keras. The issue's own
example: the seed's three Keras models trained in one call come back as
Keras models that evaluate to the test accuracy cohort reported and save
as .keras."""
import os

import numpy as np
import pytest

from conftest import fashion, need

os.environ.setdefault("KERAS_BACKEND", "jax")
keras = need("keras")
from keras import layers as L  # noqa: E402


def flat(x):
    return x.reshape(len(x), -1)


def test_seed_models_round_trip(cohort, tmp_path):
    """The question's Strategy 3 models, as it builds them, in one cohort.train."""
    x_train, y_train = fashion("train")
    x_test, y_test = fashion("test")
    x_train, x_test = flat(x_train), flat(x_test)
    models = []
    for units in (128, 512, 256):
        m = keras.Sequential([L.Dense(units, activation="relu", input_shape=(784,)),
                              L.Dense(10, activation="softmax")])
        m.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        models.append(m)
    results = cohort.train(models, x_train, y_train, epochs=10, validation_split=0.2,
                           test_data=(x_test, y_test), out=str(tmp_path / "seed"), progress=False)
    assert [r.status for r in results] == ["ok"] * 3, [r.error for r in results]
    assert len({r.name for r in results}) == 3
    for r, m in zip(results, models):
        assert r.config["epochs"] == 10 and r.config["batch_size"] == 32  # model.fit's default
        assert r.config["optimizer"]["name"] == "adam" and r.config["layers"][0]["dense"] == m.layers[0].units
        back = r.to_keras()
        loss, acc = back.evaluate(x_test, y_test, verbose=0)
        assert abs(acc - r.test["accuracy"]) <= 1e-4, (r.name, acc, r.test)
        # Keras's cross-entropy of probabilities clips them to [1e-7, 1 - 1e-7]
        # (cohort's, of the logits, does not): its loss is that of cohort's
        # predictions clipped so.
        p = cohort.predict(tmp_path / "seed" / "models" / f"{r.name}.safetensors", x_test)
        np.testing.assert_allclose(back.predict(x_test, verbose=0), p, atol=1e-5)
        clipped = float(np.mean(-np.log(np.clip(p[np.arange(len(y_test)), y_test], 1e-7, 1 - 1e-7))))
        assert abs(loss - clipped) <= 1e-4, (r.name, loss, clipped)
        assert abs(loss - r.test["loss"]) <= 1e-2, (r.name, loss, r.test)
        path = tmp_path / f"{r.name}.keras"
        back.save(path)
        again = keras.models.load_model(path)
        np.testing.assert_allclose(again.predict(x_test[:200], verbose=0),
                                   back.predict(x_test[:200], verbose=0), atol=1e-6)


def keras_cnn():
    inp = keras.Input(shape=(28, 28, 1))
    h = L.Conv2D(6, 3, padding="same", activation="relu")(inp)
    h = L.BatchNormalization(momentum=0.9, epsilon=1e-3)(h)
    h = L.MaxPooling2D(2)(h)
    h = L.Conv2D(5, (3, 2), strides=2, use_bias=False)(h)
    h = L.Activation("tanh")(h)
    h = L.AveragePooling2D(3, strides=2, padding="same")(h)
    h = L.Flatten()(h)
    h = L.BatchNormalization()(h)
    h = L.Dropout(0.25)(h)
    h = L.Dense(12, activation="sigmoid", kernel_regularizer=keras.regularizers.L2(1e-4))(h)
    out = L.Dense(10, activation="softmax")(h)
    m = keras.Model(inp, out, name="chain")
    # Moving statistics and scales that are not the initial ones, so that their layout shows.
    rng = np.random.default_rng(3)
    for la in m.layers:
        if isinstance(la, L.BatchNormalization):
            la.set_weights([rng.uniform(0.5, 1.5, w.shape).astype(np.float32) if i != 1 else
                            rng.normal(0, 0.3, w.shape).astype(np.float32)
                            for i, w in enumerate(la.get_weights())])
    m.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
              loss=keras.losses.SparseCategoricalCrossentropy())
    return m


def test_from_keras_predicts_as_keras(cohort, tmp_path):
    """A functional chain with every layer kind: the entry's weights file
    predicts in cohort (and in ONNX) what the Keras model predicts."""
    m = keras_cnn()
    entry = cohort.from_keras(m, weights=tmp_path / "init.safetensors")
    assert entry["name"] == "chain" and entry["init_from"] == str(tmp_path / "init.safetensors")
    assert entry["optimizer"] == {"name": "sgd", "lr": pytest.approx(0.05), "momentum": pytest.approx(0.9),
                                  "nesterov": True}
    assert entry["loss"] == "sparse_categorical_crossentropy"
    assert entry["layers"][9]["kernel_regularizer"] == {"l2": pytest.approx(1e-4)}
    x, _ = fashion("test")
    x = x[:300]
    want = m.predict(x, verbose=0)
    np.testing.assert_allclose(cohort.predict(entry["init_from"], x), want, atol=1e-5)
    back = cohort.to_keras(entry["init_from"])
    np.testing.assert_allclose(back.predict(x, verbose=0), want, atol=1e-5)


def test_train_starts_from_keras_weights(cohort):
    """cohort.train over a Keras model starts from its weights: at a rate
    too small to move them the trained weights are the Keras ones."""
    x, y = fashion("train")
    x, y = flat(x[:256]), y[:256]
    m = keras.Sequential([keras.Input((784,)), L.Dense(16, activation="tanh"),
                          L.Dense(10, activation="softmax")], name="tiny")
    r, = cohort.train([m], x, y, epochs=1, batch_size=64, optimizer={"name": "sgd", "lr": 1.2e-38},
                      progress=False)
    assert r.status == "ok" and r.name == "tiny"
    k, b = m.layers[0].get_weights()
    np.testing.assert_array_equal(r.weights["layers.0.weight"], k.T)
    np.testing.assert_array_equal(r.weights["layers.0.bias"], b)


def test_trained_cnn_to_keras(cohort, tmp_path):
    m = keras_cnn()
    x, y = fashion("train")
    xt, yt = fashion("test")
    r, = cohort.train(m, x[:2000], y[:2000], epochs=1, batch_size=50, test_data=(xt[:500], yt[:500]),
                      out=str(tmp_path / "run"), progress=False)
    assert r.status == "ok", r.error
    assert r.config["optimizer"]["name"] == "sgd"  # from compile()
    back = r.to_keras()
    want = cohort.predict(tmp_path / "run" / "models" / "chain.safetensors", xt[:500])
    np.testing.assert_allclose(back.predict(xt[:500], verbose=0), want, atol=1e-5)
    loss, acc = back.evaluate(xt[:500], yt[:500], verbose=0)
    assert abs(acc - r.test["accuracy"]) <= 1e-4


def test_keras_errors_name_what(cohort):
    def err(model, match, **kw):
        with pytest.raises(cohort.ConversionError, match=match):
            cohort.from_keras(model, **kw)

    err(keras.Sequential([keras.Input((5, 4, 3, 2)), L.Flatten()]), "5, 4, 3, 2")
    err(keras.Sequential([keras.Input((8,)), L.Dense(3), L.UnitNormalization()]),
        "UnitNormalization.*has no cohort form")
    err(keras.Sequential([keras.Input((8,)), L.Dense(3, activation="elu")]), "activation 'elu'")
    err(keras.Sequential([keras.Input((8, 8, 2)), L.Dense(3)]), "Dense on an image")
    err(keras.Sequential([keras.Input((8, 8, 2)), L.Conv2D(3, 3, dilation_rate=2)]), "dilation_rate")
    inp = keras.Input((8,))
    h = L.Dense(8)(inp)
    res = keras.Model(inp, L.Add()([h, inp]))
    err(res, "not fed by the layer before it alone|Add")
    m = keras.Sequential([keras.Input((8,)), L.Dense(3, activation="softmax")])
    m.compile(optimizer=keras.optimizers.Adam(amsgrad=True), loss="sparse_categorical_crossentropy")
    err(m, "amsgrad")
    m.compile(optimizer="adam", loss="kl_divergence")
    err(m, "loss kl_divergence")
