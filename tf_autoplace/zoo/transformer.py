"""Transformer: a decoder-only Transformer language model (Transformer-XL without memory).

The Transformer-XL setting of GDP (Zhou et al. 2019), 2, 4 or 8 layers (the default is the
largest), in the spirit of Dai et al. (2019) but without segment recurrence or relative
positions: learned absolute position embeddings, then ``layers`` blocks of causal multi-head
self-attention and a ReLU feed-forward network, each a pre-layer-norm residual branch, then a
final layer norm and the vocabulary projection. Sizes default to the base Transformer
(d_model 512, 8 heads, d_ff 2048) on 256-token segments, batch 32, a 32k vocabulary; these
are our choice. No dropout. Optimizer: Adam.

Scope convention (``ModelGraph.layer_scopes``, pipeline order)::

    embedding/  layer_0/ ... layer_{L-1}/  softmax/

Inputs: ``tokens`` [batch, length] and ``targets`` [batch, length] (the next tokens), int32
ids in ``[0, vocab)``.
"""

from __future__ import annotations

import tensorflow as tf

from tf_autoplace.errors import ConfigError
from tf_autoplace.zoo.base import ModelGraph, check_positive, language_model_builder
from tf_autoplace.zoo.layers import (dense, embedding, layer_norm, scope,
                                     sequence_softmax_logits, variable)


def _causal_self_attention(x: tf.Tensor, batch: int, length: int, heads: int) -> tf.Tensor:
    """Multi-head self-attention of x [batch * length, d_model] where position t sees
    positions <= t."""
    d_model = x.shape[1]
    head_dim = d_model // heads
    q, k, v = tf.split(dense(x, 3 * d_model, "qkv"), 3, axis=1)

    def split_heads(t):  # [batch * length, d_model] -> [batch, heads, length, head_dim]
        return tf.transpose(tf.reshape(t, [batch, length, heads, head_dim]), [0, 2, 1, 3])

    scores = tf.matmul(split_heads(q), split_heads(k), transpose_b=True) * head_dim ** -0.5
    visible = tf.linalg.band_part(tf.ones([length, length]), -1, 0)
    weights = tf.nn.softmax(scores + (visible - 1.0) * 1e9)
    context = tf.transpose(tf.matmul(weights, split_heads(v)), [0, 2, 1, 3])
    return dense(tf.reshape(context, [batch * length, d_model]), d_model, "output")


def build_transformer(*, layers: int = 8, length: int = 256, batch: int = 32,
                      d_model: int = 512, heads: int = 8, d_ff: int = 2048,
                      vocab: int = 32000) -> ModelGraph:
    """The Transformer training graph (see module doc)."""
    check_positive(layers=layers, length=length, batch=batch, d_model=d_model, heads=heads,
                   d_ff=d_ff, vocab=vocab)
    if d_model % heads:
        raise ConfigError(f"d_model={d_model} is not a multiple of heads={heads}")
    builder, tokens, targets = language_model_builder("transformer", batch, length, vocab)
    layer_scopes = tuple(f"layer_{i}/" for i in range(layers))
    with builder.graph.as_default():
        with scope("embedding"):
            positions = variable("positions", [length, d_model], "embedding")
            x = tf.reshape(embedding(tokens, vocab, d_model) + positions,
                           [batch * length, d_model])
        for layer_scope in layer_scopes:
            with scope(layer_scope):
                with tf.compat.v1.variable_scope("attention"):
                    x += _causal_self_attention(layer_norm(x, "norm"), batch, length, heads)
                with tf.compat.v1.variable_scope("ffn"):
                    hidden = tf.nn.relu(dense(layer_norm(x, "norm"), d_ff, "hidden"))
                    x += dense(hidden, d_model, "output")
        with scope("softmax"):
            x = layer_norm(x, "norm")
        logits, labels = sequence_softmax_logits(x, targets, vocab)
    return builder.finish(logits, labels, tf.compat.v1.train.AdamOptimizer(1e-4),
                          layer_scopes=("embedding/",) + layer_scopes + ("softmax/",))
