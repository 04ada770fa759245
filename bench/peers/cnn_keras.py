"""cnn_keras: Keras 3's "Simple MNIST convnet" example (keras.io/examples/vision/mnist_convnet),
examples/cnn.yaml's first model, on Fashion-MNIST: Conv2D(32, 3, relu), MaxPooling2D(2),
Conv2D(64, 3, relu), MaxPooling2D(2), Flatten, Dropout(0.5), Dense(10, softmax); Adam, batch 128,
validation_split 0.1, sparse categorical cross-entropy (the example one-hot encodes the labels
for categorical cross-entropy: the same arithmetic). The backend is $KERAS_BACKEND (tensorflow
unless set). Prints one JSON object: the seconds of each epoch (training and the validation
pass, as cohort times an epoch), the test accuracy and the versions. Run it in
scripts/pyenv peers."""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import keras  # noqa: E402

import fmnist  # noqa: E402  bench/peers/fmnist.py


class EpochTimes(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.seconds = []

    def on_epoch_begin(self, epoch, logs=None):
        self.t0 = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self.t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=1)
    args = ap.parse_args()
    x, y = fmnist.load("train")
    xt, yt = fmnist.load("t10k")
    x, xt = x[..., None], xt[..., None]
    model = keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        keras.layers.MaxPooling2D(pool_size=(2, 2)),
        keras.layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        keras.layers.MaxPooling2D(pool_size=(2, 2)),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(loss="sparse_categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
    times = EpochTimes()
    model.fit(x, y, batch_size=128, epochs=args.epochs, validation_split=0.1, verbose=0,
              callbacks=[times])
    _, acc = model.evaluate(xt, yt, batch_size=128, verbose=0)
    versions = {"keras": keras.__version__, "backend": keras.backend.backend()}
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf
        versions["tensorflow"] = tf.__version__
    elif keras.backend.backend() == "jax":
        import jax
        versions["jax"] = jax.__version__
    json.dump({"epoch_seconds": times.seconds, "test_accuracy": float(acc), **versions}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
