"""RNNLM: an LSTM language model, statically unrolled.

The RNNLM of the device-placement papers (Mirhoseini et al. 2017 and 2018, GDP): ``layers``
LSTM layers (2 or 4; the default is the largest), batch 64, unrolled for 35 steps with python
loops, as in Zaremba et al. (2014) on Penn Treebank, whose 10k-word vocabulary is the default.
The width, 1024 hidden units and embedding dimension, is our choice between Zaremba's medium
(650) and large (1500) models. No dropout. Optimizer: SGD with momentum 0.9, gradients
clipped to global norm 5.

Scope convention (``ModelGraph.layer_scopes``, pipeline order)::

    embedding/  layer_0/ ... layer_{L-1}/  softmax/

Inputs: ``tokens`` [batch, length] and ``targets`` [batch, length] (the next tokens), int32
ids in ``[0, vocab)``.
"""

from __future__ import annotations

import tensorflow as tf

from tf_autoplace.zoo.base import ModelGraph, check_positive, language_model_builder
from tf_autoplace.zoo.layers import embedding, lstm_stack, scope, sequence_softmax_logits


def build_rnnlm(*, layers: int = 4, length: int = 35, batch: int = 64, hidden: int = 1024,
                embedding_dim: int = 1024, vocab: int = 10000) -> ModelGraph:
    """The RNNLM training graph (see module doc)."""
    check_positive(layers=layers, length=length, batch=batch, hidden=hidden,
                   embedding_dim=embedding_dim, vocab=vocab)
    builder, tokens, targets = language_model_builder("rnnlm", batch, length, vocab)
    layer_scopes = tuple(f"layer_{i}/" for i in range(layers))
    with builder.graph.as_default():
        with scope("embedding"):
            steps = tf.unstack(embedding(tokens, vocab, embedding_dim), axis=1)
        outputs = lstm_stack(steps, hidden, layer_scopes)
        logits, labels = sequence_softmax_logits(outputs, targets, vocab)
    return builder.finish(logits, labels, tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
                          clip_norm=5.0,
                          layer_scopes=("embedding/",) + layer_scopes + ("softmax/",))
