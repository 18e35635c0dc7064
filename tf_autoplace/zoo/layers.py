"""Building blocks of the hand-written zoo models (NMT, RNNLM, Transformer, WaveNet, Wide & Deep).

All of them work on fully defined static shapes and create their variables with
``tf.compat.v1.get_variable`` in the current variable scope. Random initializers get a fixed
op-level seed derived from the variable's full name, so the same knobs give the same graph and
the same initial values, whatever else was built before.
"""

from __future__ import annotations

import contextlib
import math
import zlib
from typing import Sequence

import tensorflow as tf


@contextlib.contextmanager
def scope(path: str):
    """Put variables at ``path/<name>`` and ops at ``path/<op>``, exactly: the scope is never
    uniquified (``layer_0`` stays ``layer_0``) and may be entered again. ``path`` may end with
    a slash. Use from the root."""
    path = path.rstrip("/")
    with tf.compat.v1.variable_scope(path, auxiliary_name_scope=False), \
            tf.name_scope(path + "/"):
        yield


def variable(name: str, shape: Sequence[int], init: str = "glorot",
             shards: int = 1) -> tf.Variable:
    """A variable in the current variable scope; ``init`` is ``"glorot"`` (uniform, seeded),
    ``"embedding"`` (normal with stddev 1/sqrt(last dim), seeded), ``"zeros"`` or ``"ones"``.
    With ``shards > 1`` it is a partitioned variable of that many pieces, rows split in
    contiguous ranges (``fixed_size_partitioner``), each piece a variable of its own."""
    full_name = f"{tf.compat.v1.get_variable_scope().name}/{name}"
    seed = zlib.crc32(full_name.encode()) & 0x7FFFFFFF
    initializers = {
        "glorot": lambda: tf.compat.v1.glorot_uniform_initializer(seed=seed),
        "embedding": lambda: tf.compat.v1.random_normal_initializer(
            stddev=1.0 / math.sqrt(shape[-1]), seed=seed),
        "zeros": tf.compat.v1.zeros_initializer,
        "ones": tf.compat.v1.ones_initializer,
    }
    partitioner = tf.compat.v1.fixed_size_partitioner(shards) if shards > 1 else None
    return tf.compat.v1.get_variable(name, shape, tf.float32, initializer=initializers[init](),
                                     partitioner=partitioner)


def dense(x: tf.Tensor, units: int, name: str) -> tf.Tensor:
    """``x @ kernel + bias`` for a 2-D ``x``, variables under ``name/``."""
    with tf.compat.v1.variable_scope(name):
        kernel = variable("kernel", [x.shape[1], units])
        bias = variable("bias", [units], "zeros")
        return tf.nn.bias_add(tf.matmul(x, kernel), bias)


def embedding(ids: tf.Tensor, vocab: int, dim: int) -> tf.Tensor:
    """Look up ``ids`` [...] in a ``[vocab, dim]`` table: returns [..., dim]."""
    table = variable("table", [vocab, dim], "embedding")
    return tf.nn.embedding_lookup(table, ids)


def layer_norm(x: tf.Tensor, name: str) -> tf.Tensor:
    """Layer normalization over the last axis of a 2-D ``x``, variables under ``name/``."""
    with tf.compat.v1.variable_scope(name):
        gain = variable("gain", [x.shape[1]], "ones")
        offset = variable("offset", [x.shape[1]], "zeros")
        mean, var = tf.nn.moments(x, axes=[1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + 1e-6) * gain + offset


def lstm_layer(inputs: Sequence[tf.Tensor], hidden: int) -> list[tf.Tensor]:
    """One LSTM layer unrolled statically over ``inputs`` (one [batch, dim] tensor per time
    step, zero initial state). Returns the hidden output of every step.

    The cell is the standard one (forget bias 1, as ``LSTMCell``): one fused matmul of
    ``[x_t, h_{t-1}]`` gives the input, forget, candidate and output pre-activations.
    """
    batch, dim = inputs[0].shape
    kernel = variable("kernel", [dim + hidden, 4 * hidden])
    bias = variable("bias", [4 * hidden], "zeros")
    h = c = tf.zeros([batch, hidden])
    outputs = []
    for x in inputs:
        z = tf.nn.bias_add(tf.matmul(tf.concat([x, h], axis=1), kernel), bias)
        i, f, g, o = tf.split(z, 4, axis=1)
        c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(g)
        h = tf.sigmoid(o) * tf.tanh(c)
        outputs.append(h)
    return outputs


def lstm_stack(inputs: Sequence[tf.Tensor], hidden: int, scopes: Sequence[str],
               context: Sequence[tf.Tensor] | None = None) -> list[tf.Tensor]:
    """LSTM layers on ``inputs``, one under each of ``scopes``. With ``context`` (one tensor
    per step), every layer reads ``[previous output, context]``. Returns the top layer's
    outputs."""
    for layer_scope in scopes:
        with scope(layer_scope):
            if context is not None:
                inputs = [tf.concat([x, c], axis=1) for x, c in zip(inputs, context)]
            inputs = lstm_layer(inputs, hidden)
    return list(inputs)


def sequence_softmax_logits(features: Sequence[tf.Tensor] | tf.Tensor, targets: tf.Tensor,
                            vocab: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Project per-position features to vocabulary logits under ``softmax/``.

    ``features`` is either a list of per-step outputs ([batch, dim] each) or one
    [batch * steps, dim] tensor whose row ``b * steps + t`` is step t of example b.
    Returns logits [batch * steps, vocab] and the matching flat int labels from ``targets``
    [batch, steps].
    """
    batch, steps = targets.shape
    with scope("softmax"):
        if not isinstance(features, tf.Tensor):
            stacked = tf.stack(features, axis=1)
            features = tf.reshape(stacked, [batch * steps, stacked.shape[2]])
        logits = dense(features, vocab, "projection")
        labels = tf.reshape(targets, [batch * steps])
    return logits, labels
