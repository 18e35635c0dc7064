"""WaveNet: dilated causal 1-D convolutions with gated activations (van den Oord et al. 2016).

The WaveNet setting of GDP (Zhou et al. 2019): ``stacks`` stacks (2 or 4; the default is the
largest) of ``layers_per_stack`` = 9 residual layers with dilations 1, 2, ..., 256, i.e. 18
or 36 layers. Input and output are 256-way mu-law quantized samples: the one-hot input goes
through a causal convolution of width 2, each layer computes
``tanh(W_f * x) . sigmoid(W_g * x)`` with a width-2 dilated causal convolution, adds a 1x1
convolution of it to the residual stream and another to the skip sum, and the output head
is ``relu -> 1x1 conv -> relu -> 1x1 conv (softmax over 256 classes)``. Sizes (64 residual
channels, 256 skip channels, batch 16 of 4096 samples, longer than the 4x9 receptive field
of 2046) are our choice. Optimizer: Adam.

Scope convention (``ModelGraph.layer_scopes``, pipeline order)::

    input/  stack_0/layer_0/ ... stack_0/layer_8/  stack_1/layer_0/ ...  softmax/

Inputs: ``tokens`` [batch, length] (quantized samples) and ``targets`` [batch, length] (the
next samples), int32 in ``[0, classes)``.
"""

from __future__ import annotations

import tensorflow as tf

from tf_autoplace.zoo.base import ModelGraph, check_positive, language_model_builder
from tf_autoplace.zoo.layers import scope, sequence_softmax_logits, variable


def _causal_conv(x: tf.Tensor, width: int, channels: int, name: str,
                 dilation: int = 1) -> tf.Tensor:
    """Causal convolution of x [batch, length, in] to [batch, length, channels]: output t
    sees inputs t - (width - 1) * dilation, ..., t. Variables under ``name/``."""
    with tf.compat.v1.variable_scope(name):
        kernel = variable("kernel", [width, x.shape[2], channels])
        bias = variable("bias", [channels], "zeros")
        if width > 1:
            x = tf.pad(x, [[0, 0], [(width - 1) * dilation, 0], [0, 0]])
        y = tf.nn.convolution(x, kernel, padding="VALID", dilations=dilation)
        return tf.nn.bias_add(y, bias)


def _residual_layer(x: tf.Tensor, skip: tf.Tensor | None, dilation: int, skip_channels: int,
                    last: bool) -> tuple[tf.Tensor, tf.Tensor]:
    """One gated residual layer: returns the new residual stream (x itself for the last
    layer, whose residual output nobody reads) and the updated skip sum."""
    channels = x.shape[2]
    filters, gates = tf.split(_causal_conv(x, 2, 2 * channels, "dilated", dilation), 2, axis=2)
    z = tf.tanh(filters) * tf.sigmoid(gates)
    skip_out = _causal_conv(z, 1, skip_channels, "skip")
    skip = skip_out if skip is None else skip + skip_out
    if not last:
        x = x + _causal_conv(z, 1, channels, "residual")
    return x, skip


def build_wavenet(*, stacks: int = 4, layers_per_stack: int = 9, channels: int = 64,
                  skip_channels: int = 256, length: int = 4096, batch: int = 16,
                  classes: int = 256) -> ModelGraph:
    """The WaveNet training graph (see module doc)."""
    check_positive(stacks=stacks, layers_per_stack=layers_per_stack, channels=channels,
                   skip_channels=skip_channels, length=length, batch=batch, classes=classes)
    builder, tokens, targets = language_model_builder("wavenet", batch, length, classes)
    layer_scopes = tuple(f"stack_{s}/layer_{i}/"
                         for s in range(stacks) for i in range(layers_per_stack))
    with builder.graph.as_default():
        with scope("input"):
            x = _causal_conv(tf.one_hot(tokens, classes), 2, channels, "causal")
        skip = None
        for index, layer_scope in enumerate(layer_scopes):
            with scope(layer_scope):
                x, skip = _residual_layer(x, skip, 2 ** (index % layers_per_stack),
                                          skip_channels, last=index == len(layer_scopes) - 1)
        with scope("softmax"):
            hidden = tf.nn.relu(_causal_conv(tf.nn.relu(skip), 1, skip_channels, "hidden"))
            hidden = tf.reshape(hidden, [batch * length, skip_channels])
        logits, labels = sequence_softmax_logits(hidden, targets, classes)
    return builder.finish(logits, labels, tf.compat.v1.train.AdamOptimizer(1e-3),
                          layer_scopes=("input/",) + layer_scopes + ("softmax/",))
