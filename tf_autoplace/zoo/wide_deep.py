"""Wide & Deep: a recommender's training graph, whose embedding tables a placer can split across
the tasks of a cluster.

Cheng et al. 2016 (*Wide & Deep Learning for Recommender Systems*, arXiv:1606.07792):
``fields`` categorical features, each one id in ``[0, vocab)``, and ``dense_dim`` real
features. The *wide* part is a linear model: a ``[vocab, classes]`` weight table per field (the
row of each id) plus a dense layer of the real features. The *deep* part embeds each field in a
``[vocab, embedding_dim]`` table, concatenates the embeddings with the real features and runs
``layers`` ReLU layers of ``hidden`` units. The logits are the sum of both. Every table is
stored in ``shards`` pieces (a partitioned variable, rows in contiguous ranges, looked up with
``partition_strategy="div"``), as a TF1 user shards a large table over parameter servers: each
piece is a variable of its own, which placement may put on its own task. Optimizer: Adagrad,
learning rate 0.05 (the paper's for the deep part; its wide part used FTRL), so the tables get
sparse updates, the looked-up rows only.

Scopes: ``embeddings/field_<f>/``, ``wide/``, ``deep/layer_<i>/``, ``softmax/``.

Inputs: ``ids`` [batch, fields] int32 in ``[0, vocab)``, ``dense`` [batch, dense_dim] float32
and ``labels`` [batch] int32 in ``[0, classes)``.
"""

from __future__ import annotations

import tensorflow as tf

from tf_autoplace.zoo.base import GraphBuilder, ModelGraph, check_positive
from tf_autoplace.zoo.layers import dense, scope, variable


def build_wide_deep(*, fields: int = 8, vocab: int = 100_000, embedding_dim: int = 32,
                    dense_dim: int = 16, layers: int = 3, hidden: int = 512, shards: int = 2,
                    batch: int = 256, classes: int = 2) -> ModelGraph:
    """The Wide & Deep training graph (see module doc)."""
    check_positive(fields=fields, vocab=vocab, embedding_dim=embedding_dim, dense_dim=dense_dim,
                   layers=layers, hidden=hidden, shards=shards, batch=batch, classes=classes)
    builder = GraphBuilder("wide_deep")
    with builder.graph.as_default():
        ids = builder.placeholder("ids", [batch, fields], tf.int32, vocab)
        features = builder.placeholder("dense", [batch, dense_dim], tf.float32)
        labels = builder.placeholder("labels", [batch], tf.int32, classes)
        columns = tf.unstack(ids, axis=1)
        wide_terms, deep_inputs = [], [features]
        for f, column in enumerate(columns):
            with scope(f"embeddings/field_{f}"):
                table = variable("table", [vocab, embedding_dim], "embedding", shards)
                deep_inputs.append(_lookup(table, column))
                weights = variable("wide_weights", [vocab, classes], "zeros", shards)
                wide_terms.append(_lookup(weights, column))
        with scope("wide"):
            wide = tf.add_n(wide_terms) + dense(features, classes, "dense")
        h = tf.concat(deep_inputs, axis=1)
        for i in range(layers):
            with scope(f"deep/layer_{i}"):
                h = tf.nn.relu(dense(h, hidden, "dense"))
        with scope("softmax"):
            logits = wide + dense(h, classes, "projection")
    return builder.finish(logits, labels, tf.compat.v1.train.AdagradOptimizer(0.05))


def _lookup(table, ids: tf.Tensor) -> tf.Tensor:
    """Rows ``ids`` of a (partitioned) table."""
    return tf.compat.v1.nn.embedding_lookup(table, ids, partition_strategy="div")
