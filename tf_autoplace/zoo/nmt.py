"""NMT: a GNMT-style LSTM encoder-decoder with attention, statically unrolled.

The NMT model of the device-placement papers (Mirhoseini et al. 2017 and 2018, Placeto,
GDP): an encoder and a decoder of ``layers`` LSTM layers each (2, 4 or 8; the default is the
largest), unrolled for ``length`` steps with python loops (no ``tf.while_loop``), batch 128,
a 30k vocabulary. Width defaults to 1024 hidden units and 1024-wide embeddings, GNMT's size
(Wu et al. 2016); ``hidden=512`` gives the smaller variant. Attention follows GNMT: the bottom
decoder layer's output queries the top encoder outputs (Luong "general" score), and the
context vector is fed to every upper decoder layer and to the softmax. Simplifications: no
bidirectional first encoder layer, no residual connections, no dropout. Optimizer: Adam with
gradients clipped to global norm 5.

Scope convention (``ModelGraph.layer_scopes``, pipeline order)::

    encoder/embedding/  encoder/layer_0/ ... encoder/layer_{L-1}/
    decoder/embedding/  decoder/layer_0/  attention/  decoder/layer_1/ ... decoder/layer_{L-1}/
    softmax/            (output projection, softmax cross-entropy)

Inputs: ``source`` [batch, length], ``target_input`` [batch, length] (decoder inputs) and
``target_output`` [batch, length] (labels), int32 token ids in ``[0, vocab)``.
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from tf_autoplace.zoo.base import GraphBuilder, ModelGraph, check_positive
from tf_autoplace.zoo.layers import (embedding, lstm_stack, scope, sequence_softmax_logits,
                                     variable)


def _attention(memory: Sequence[tf.Tensor], queries: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    """Luong "general" attention under ``attention/``: for each query [batch, hidden], the
    context vector [batch, hidden] over the memory steps ([batch, hidden] each)."""
    with scope("attention"):
        values = tf.stack(memory, axis=1)
        batch, steps, hidden = values.shape
        kernel = variable("kernel", [hidden, hidden])
        keys = tf.reshape(tf.matmul(tf.reshape(values, [batch * steps, hidden]), kernel),
                          [batch, steps, hidden])
        contexts = []
        for query in queries:
            scores = tf.matmul(keys, tf.expand_dims(query, 2))
            weights = tf.nn.softmax(scores, axis=1)
            contexts.append(tf.squeeze(tf.matmul(weights, values, transpose_a=True), 1))
        return contexts


def build_nmt(*, layers: int = 8, length: int = 32, batch: int = 128, hidden: int = 1024,
              embedding_dim: int = 1024, vocab: int = 30000) -> ModelGraph:
    """The NMT training graph (see module doc)."""
    check_positive(layers=layers, length=length, batch=batch, hidden=hidden,
                   embedding_dim=embedding_dim, vocab=vocab)
    builder = GraphBuilder("nmt")
    encoder_scopes = tuple(f"encoder/layer_{i}/" for i in range(layers))
    decoder_scopes = tuple(f"decoder/layer_{i}/" for i in range(layers))
    with builder.graph.as_default():
        source = builder.placeholder("source", [batch, length], tf.int32, vocab)
        target_input = builder.placeholder("target_input", [batch, length], tf.int32, vocab)
        target_output = builder.placeholder("target_output", [batch, length], tf.int32, vocab)
        with scope("encoder/embedding"):
            source_steps = tf.unstack(embedding(source, vocab, embedding_dim), axis=1)
        memory = lstm_stack(source_steps, hidden, encoder_scopes)
        with scope("decoder/embedding"):
            target_steps = tf.unstack(embedding(target_input, vocab, embedding_dim), axis=1)
        bottom = lstm_stack(target_steps, hidden, decoder_scopes[:1])
        contexts = _attention(memory, bottom)
        top = lstm_stack(bottom, hidden, decoder_scopes[1:], context=contexts)
        with scope("softmax"):
            outputs = [tf.concat([h, c], axis=1) for h, c in zip(top, contexts)]
        logits, labels = sequence_softmax_logits(outputs, target_output, vocab)
    scopes = (("encoder/embedding/",) + encoder_scopes + ("decoder/embedding/",)
              + decoder_scopes[:1] + ("attention/",) + decoder_scopes[1:] + ("softmax/",))
    return builder.finish(logits, labels, tf.compat.v1.train.AdamOptimizer(1e-3),
                          clip_norm=5.0, layer_scopes=scopes)
