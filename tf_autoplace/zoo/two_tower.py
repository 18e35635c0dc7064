"""A two-tower model: two deep MLPs on two inputs, joined at the top, as in retrieval and
ranking models (a query tower and an item tower).

Each tower is ``layers`` dense layers of ``width`` units with ReLU on its own input of ``features``
floats; their outputs are concatenated and a dense layer gives the logits. The towers share
nothing, so a placer may put one on each device: whether that pays depends on whether the devices
have cores of their own.

Inputs: ``query`` and ``item`` [batch, features] float32, ``labels`` [batch] int32 in
``[0, num_classes)``. Optimizer: Adam.
"""

from __future__ import annotations

import tensorflow as tf

from tf_autoplace.zoo.base import GraphBuilder, ModelGraph, check_positive


def _tower(x: tf.Tensor, name: str, layers: int, width: int) -> tf.Tensor:
    for i in range(layers):
        with tf.compat.v1.variable_scope(f"{name}/layer_{i}"):
            w = tf.compat.v1.get_variable(
                "w", [x.shape[-1], width],
                initializer=tf.compat.v1.glorot_uniform_initializer(seed=i))
            b = tf.compat.v1.get_variable("b", [width], initializer=tf.zeros_initializer())
            x = tf.nn.relu(tf.matmul(x, w) + b)
    return x


def build_two_tower(batch: int = 32, features: int = 64, layers: int = 6, width: int = 128,
                    num_classes: int = 2) -> ModelGraph:
    """The training graph (module docstring)."""
    check_positive(batch=batch, features=features, layers=layers, width=width,
                   num_classes=num_classes)
    builder = GraphBuilder("two_tower")
    with builder.graph.as_default():
        query = builder.placeholder("query", [batch, features], tf.float32)
        item = builder.placeholder("item", [batch, features], tf.float32)
        labels = builder.placeholder("labels", [batch], tf.int32, num_classes)
        joined = tf.concat([_tower(query, "query_tower", layers, width),
                            _tower(item, "item_tower", layers, width)], axis=1)
        with tf.compat.v1.variable_scope("head"):
            w = tf.compat.v1.get_variable(
                "w", [2 * width, num_classes],
                initializer=tf.compat.v1.glorot_uniform_initializer(seed=99))
            logits = tf.matmul(joined, w)
    return builder.finish(logits, labels, tf.compat.v1.train.AdamOptimizer(1e-3))
