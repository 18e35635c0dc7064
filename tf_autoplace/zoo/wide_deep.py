"""A wide-and-deep style model with large embedding tables, as in recommendation models.

``tables`` embedding tables of ``vocab`` rows and ``dim`` columns (``tables * vocab * dim * 4``
bytes of variables) are looked up by ``ids_per_table`` ids each; the looked-up rows are summed
per table, concatenated with ``dense_features`` dense inputs, and go through ``layers`` dense
layers of ``width`` units (the deep part); a linear layer on the dense inputs (the wide part) is
added to the logits. The embedding gradients are sparse (IndexedSlices) and applied by Adagrad,
as such models train. Tables are what a placer can spread over devices' memory; the deep part
is what it can keep together.

Inputs: ``ids`` [batch, tables, ids_per_table] int32 in ``[0, vocab)``, ``dense`` [batch,
dense_features] float32, ``labels`` [batch] int32 in ``[0, num_classes)``.
"""

from __future__ import annotations

import tensorflow as tf

from tf_autoplace.zoo.base import GraphBuilder, ModelGraph, check_positive


def build_wide_deep(batch: int = 64, tables: int = 4, vocab: int = 100_000, dim: int = 32,
                    ids_per_table: int = 8, dense_features: int = 16, layers: int = 3,
                    width: int = 128, num_classes: int = 2) -> ModelGraph:
    """The training graph (module docstring)."""
    check_positive(batch=batch, tables=tables, vocab=vocab, dim=dim,
                   ids_per_table=ids_per_table, dense_features=dense_features, layers=layers,
                   width=width, num_classes=num_classes)
    builder = GraphBuilder("wide_deep")
    with builder.graph.as_default():
        ids = builder.placeholder("ids", [batch, tables, ids_per_table], tf.int32, vocab)
        dense = builder.placeholder("dense", [batch, dense_features], tf.float32)
        labels = builder.placeholder("labels", [batch], tf.int32, num_classes)
        pooled = []
        for t in range(tables):
            with tf.compat.v1.variable_scope(f"embedding_{t}"):
                table = tf.compat.v1.get_variable(
                    "table", [vocab, dim],
                    initializer=tf.compat.v1.random_normal_initializer(stddev=0.01, seed=t))
                rows = tf.nn.embedding_lookup(table, ids[:, t, :])
                pooled.append(tf.reduce_sum(rows, axis=1))
        x = tf.concat(pooled + [dense], axis=1)
        for i in range(layers):
            with tf.compat.v1.variable_scope(f"deep/layer_{i}"):
                w = tf.compat.v1.get_variable(
                    "w", [x.shape[-1], width],
                    initializer=tf.compat.v1.glorot_uniform_initializer(seed=100 + i))
                b = tf.compat.v1.get_variable("b", [width], initializer=tf.zeros_initializer())
                x = tf.nn.relu(tf.matmul(x, w) + b)
        with tf.compat.v1.variable_scope("logits"):
            w_deep = tf.compat.v1.get_variable(
                "deep", [width, num_classes],
                initializer=tf.compat.v1.glorot_uniform_initializer(seed=200))
            w_wide = tf.compat.v1.get_variable(
                "wide", [dense_features, num_classes],
                initializer=tf.compat.v1.glorot_uniform_initializer(seed=201))
            logits = tf.matmul(x, w_deep) + tf.matmul(dense, w_wide)
    return builder.finish(logits, labels, tf.compat.v1.train.AdagradOptimizer(0.05))
