"""Keras sequence models (issue 37's layers) and their data, shared by
test_keras_seq.py: each with the cohort layer kinds (and activations) it
needs, so that a test knows which of them cohort has yet."""
import numpy as np

T, V = 9, 12  # steps, vocabulary


def tokens(n=24, seed=0):
    """Token ids [n, T] in [1, V): row 0 without padding, the others with 1
    to T - 2 steps of padding (0), odd rows after the tokens, even ones before."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, V, size=(n, T))
    for i in range(1, n):
        pad = int(rng.integers(1, T - 1))
        if i % 2:
            ids[i, T - pad:] = 0
        else:
            ids[i, :pad] = 0
    return ids.astype(np.int32)


def series(n=24, f=3, seed=1):
    return np.random.default_rng(seed).normal(size=(n, T, f)).astype(np.float32)


def build(keras, name):
    """(model, x, kinds it needs) of one of NAMES, with weights that are not
    the initial ones (biases and norms too), so that their layouts show."""
    L = keras.layers
    keras.utils.set_random_seed(7)
    if name == "dense_steps":
        layers = [keras.Input((T, 3)), L.Dense(4, activation="tanh"), L.Dropout(0.3), L.Flatten(),
                  L.Dense(3, activation="softmax")]
        x, kinds = series(), ()
    elif name == "lstm_masked":
        layers = [keras.Input((T,)), L.Embedding(V, 5, mask_zero=True),
                  L.LSTM(4, return_sequences=True), L.Dense(6, activation="gelu"),
                  L.LayerNormalization(epsilon=1e-4), L.GRU(3), L.Dense(2, activation="softmax")]
        x, kinds = tokens(), ("embedding", "lstm", "gru", "layer_normalization", "gelu")
    elif name == "bidirectional_masked":
        layers = [keras.Input((T,)), L.Embedding(V, 5, mask_zero=True),
                  L.Bidirectional(L.GRU(4, return_sequences=True)), L.Activation("silu"),
                  L.Bidirectional(L.LSTM(3)), L.Dense(2, activation="softmax")]
        x, kinds = tokens(), ("embedding", "bidirectional", "gru", "lstm", "silu")
    elif name == "pooled_masked":
        layers = [keras.Input((T,)), L.Embedding(V, 5, mask_zero=True),
                  L.Bidirectional(L.LSTM(4, return_sequences=True)), L.GlobalAveragePooling1D(),
                  L.Dense(2, activation="softmax")]
        x, kinds = tokens(), ("embedding", "bidirectional", "lstm", "global_average_pooling1d")
    elif name == "embedding":
        layers = [keras.Input((T,)), L.Embedding(V, 5), L.Dense(3, activation="relu"), L.Flatten(),
                  L.Dense(2, activation="softmax")]
        x, kinds = tokens(), ("embedding",)
    elif name == "conv":
        layers = [keras.Input((T, 3)),
                  L.Conv1D(4, 3, padding="causal", dilation_rate=2, activation="relu"),
                  L.MaxPooling1D(2, padding="same"), L.Conv1D(5, 2, padding="same"),
                  L.AveragePooling1D(2, strides=1, padding="same"),
                  L.Conv1D(3, 2, use_bias=False), L.GlobalMaxPooling1D(),
                  L.Dense(2, activation="softmax")]
        x, kinds = series(), ("conv1d", "max_pooling1d", "average_pooling1d",
                              "global_max_pooling1d")
    elif name == "conv_gru":
        layers = [keras.Input((T, 3)), L.Conv1D(4, 4, strides=2, padding="same"),
                  L.AveragePooling1D(2), L.GRU(3, return_sequences=True),
                  L.GlobalAveragePooling1D(), L.Dense(2, activation="softmax")]
        x, kinds = series(), ("conv1d", "average_pooling1d", "gru", "global_average_pooling1d")
    elif name == "recurrent":
        layers = [keras.Input((T, 3)), L.GRU(5, return_sequences=True), L.LayerNormalization(),
                  L.LSTM(4, return_sequences=True), L.Dense(3, activation="silu"), L.LSTM(3),
                  L.Dense(2, activation="softmax")]
        x, kinds = series(), ("gru", "lstm", "layer_normalization", "silu")
    elif name == "image_norms":  # layer normalization of an image's pixels, and of it flattened
        layers = [keras.Input((5, 4, 3)), L.LayerNormalization(epsilon=1e-2), L.Conv2D(2, 2),
                  L.Flatten(), L.LayerNormalization(), L.Dense(2, activation="softmax")]
        x = np.random.default_rng(2).normal(size=(24, 5, 4, 3)).astype(np.float32)
        kinds = ("layer_normalization",)
    else:
        raise KeyError(name)
    m = keras.Sequential(layers, name=name)
    rng = np.random.default_rng(3)
    for la in m.layers:
        ws = la.get_weights()
        if ws:
            la.set_weights([w + rng.normal(0, 0.3, w.shape).astype(np.float32) for w in ws])
    return m, x, kinds


NAMES = ("dense_steps", "recurrent", "image_norms", "lstm_masked", "bidirectional_masked", "pooled_masked", "embedding",
         "conv", "conv_gru")
