"""seed_keras: the seed question's own answer, as its programs train examples/seed.yaml's three
models in Keras: Dense(units, relu) + Dense(10, softmax) on flattened 28x28 images, units
128 / 512 / 256 with Adam lr 0.001 / 0.0005 / 0.001, sparse categorical cross-entropy, batch 64,
validation_split 0.2, then the test set.

  --strategy 3  one after another in this process, keras.backend.clear_session() between them
  --strategy 4  one process per model, all at once, each setting CUDA_VISIBLE_DEVICES to its
                own device number before it imports TensorFlow (on a CPU the setting selects
                nothing: every process runs on the CPU with TensorFlow's default threads)

Fashion-MNIST comes from Debian's dataset-fashion-mnist (the question's mnist.load_data()
downloads; this machine cannot). Writes one JSON object: each model's test accuracy, fit
seconds, epoch seconds and its process's peak RSS. Run it in scripts/pyenv peers (TensorFlow
2.21, Keras 3 with the TensorFlow backend)."""
import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import time

import fmnist  # bench/peers/fmnist.py

MODELS = [("small_model", 128, 0.001), ("large_model", 512, 0.0005), ("medium_model", 256, 0.001)]


def load(root):
    x, y = fmnist.load("train", root)
    xt, yt = fmnist.load("t10k", root)
    return x, y, xt, yt


def train(name, units, lr, epochs, root):
    """One model as the question's answer trains it; returns its record."""
    import keras  # imported here: Strategy 4's processes import it after CUDA_VISIBLE_DEVICES

    x, y, xt, yt = load(root)

    class EpochTimes(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.seconds = []

        def on_epoch_begin(self, epoch, logs=None):
            self.t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self.t0)

    model = keras.Sequential([
        keras.Input((28, 28)),
        keras.layers.Flatten(),
        keras.layers.Dense(units, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=lr),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    times = EpochTimes()
    t0 = time.perf_counter()
    h = model.fit(x, y, epochs=epochs, batch_size=64, validation_split=0.2, verbose=0,
                  callbacks=[times])
    fit_s = time.perf_counter() - t0
    test_loss, test_acc = model.evaluate(xt, yt, batch_size=64, verbose=0)
    return {"name": name, "units": units, "lr": lr, "fit_seconds": fit_s,
            "epoch_seconds": times.seconds, "val_accuracy": h.history["val_accuracy"],
            "test_accuracy": float(test_acc), "test_loss": float(test_loss),
            "backend": keras.backend.backend(), "keras": keras.__version__}


def strategy4_child(i, name, units, lr, epochs, root, queue):
    os.environ["CUDA_VISIBLE_DEVICES"] = str(i)  # before TensorFlow is imported, as written
    rec = train(name, units, lr, epochs, root)
    rec["process_peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    queue.put(rec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strategy", type=int, choices=(3, 4), required=True)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--data", default=fmnist.ROOT)
    args = ap.parse_args()
    t0 = time.perf_counter()
    models = []
    if args.strategy == 3:
        import keras
        for name, units, lr in MODELS:
            models.append(train(name, units, lr, args.epochs, args.data))
            keras.backend.clear_session()
        import tensorflow as tf
        versions = {"tensorflow": tf.__version__}
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    else:
        queue = mp.Queue()
        procs = [mp.Process(target=strategy4_child, args=(i, n, u, lr, args.epochs, args.data, queue))
                 for i, (n, u, lr) in enumerate(MODELS)]
        for p in procs:
            p.start()
        got = [queue.get() for _ in procs]
        for p in procs:
            p.join()
        order = [n for n, _, _ in MODELS]
        models = sorted(got, key=lambda r: order.index(r["name"]))
        versions = {}
        # the processes ran at once: their peaks add up (an upper bound of the joint peak)
        peak = sum(r["process_peak_rss_bytes"] for r in models)
    json.dump({"strategy": args.strategy, "epochs": args.epochs,
               "wall_seconds_inside": time.perf_counter() - t0, "peak_rss_bytes": peak,
               "versions": versions, "models": models}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
