"""conv_tf: the Keras convnet's layers (examples/cnn.yaml's mnist_convnet) op by op in TensorFlow
on one thread, the peer of bench/conv.c: for a batch of 128 NHWC images, each convolution's
forward with its bias and ReLU, its filter gradient (Conv2DBackpropFilter), conv2's input
gradient (Conv2DBackpropInput), the ReLU gradient and the 2 x 2 max pooling's forward and
gradient (MaxPoolGrad), as Keras 3's training step on TensorFlow runs them (oneDNN's kernels
where TensorFlow has them). Each op is a tf.function run eagerly in a loop; the time is the
process's CPU time (time.process_time) over one thread's work, best of --rounds rounds of at
least 0.2 s, as ms per batch. Prints a markdown table and one JSON object. Run it in
scripts/pyenv peers."""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

BATCH = 128


def best_ms(f, rounds):
    f()  # traces and warms
    best = 1e30
    for _ in range(rounds):
        n, t0 = 0, time.process_time()
        while True:
            f()
            n += 1
            t = time.process_time() - t0
            if t >= 0.2:
                break
        best = min(best, t / n)
    return 1e3 * best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rng = np.random.default_rng(1)
    rows, out = [], {"tensorflow": tf.__version__}
    for name, h, c, f in (("conv1", 28, 1, 32), ("conv2", 13, 32, 64)):
        oh = h - 2
        x = tf.constant(rng.uniform(-1, 1, (BATCH, h, h, c)).astype(np.float32))
        w = tf.constant(rng.uniform(-0.1, 0.1, (3, 3, c, f)).astype(np.float32))
        b = tf.constant(np.zeros(f, np.float32))
        dy = tf.constant(rng.uniform(-1, 1, (BATCH, oh, oh, f)).astype(np.float32))
        y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "VALID"), b))
        pool = tf.nn.max_pool2d(y, 2, 2, "VALID")
        dp = tf.constant(rng.uniform(-1, 1, pool.shape).astype(np.float32))
        flops = 2.0 * BATCH * oh * oh * f * 9 * c

        fwd = tf.function(lambda: tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "VALID"), b)))
        wgrad = tf.function(lambda: tf.raw_ops.Conv2DBackpropFilter(
            input=x, filter_sizes=w.shape, out_backprop=dy, strides=[1, 1, 1, 1], padding="VALID"))
        dgrad = tf.function(lambda: tf.raw_ops.Conv2DBackpropInput(
            input_sizes=x.shape, filter=w, out_backprop=dy, strides=[1, 1, 1, 1], padding="VALID"))
        relu_g = tf.function(lambda: tf.raw_ops.ReluGrad(gradients=dy, features=y))
        pool_f = tf.function(lambda: tf.nn.max_pool2d(y, 2, 2, "VALID"))
        pool_b = tf.function(lambda: tf.raw_ops.MaxPoolGrad(
            orig_input=y, orig_output=pool, grad=dp, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1],
            padding="VALID"))
        ops = [("forward (conv, bias, ReLU)", fwd, flops), ("filter gradient", wgrad, flops)]
        if name == "conv2":
            ops.append(("input gradient", dgrad, flops))
        ops += [("ReLU gradient", relu_g, 0), ("max pooling forward", pool_f, 0),
                ("max pooling gradient", pool_b, 0)]
        for op, fn, fl in ops:
            ms = best_ms(fn, args.rounds)
            rate = f"{fl / ms * 1e-6:.1f} GFLOP/s" if fl else ""
            rows.append(f"| {name} | {op} | {ms:.2f} | {rate} |")
            out[f"{name} {op}"] = ms
            print(rows[-1], file=sys.stderr, flush=True)
    print(f"TensorFlow {tf.__version__}, one thread, a batch of {BATCH}; ms per batch (CPU time, "
          f"best of {args.rounds})\n")
    print("| layer | op | ms | rate |\n|---|---|---:|---:|")
    print("\n".join(rows))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
