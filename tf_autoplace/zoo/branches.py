"""A Keras CNN with parallel branches: an Inception-style block stacked, built as a tf_keras
functional model in a TF1 training graph.

Each of ``blocks`` blocks runs ``branches`` convolutional branches side by side on its input
(branch k: k+1 stacked 3x3 convolutions of ``channels`` channels with ReLU; the last branch a
3x3 max-pool then a 1x1 convolution), concatenates them and max-pools by 2. A global average and
a dense layer give the logits. Parallel branches are what a placer can put on different devices,
and max-pooling's gradient (which oneDNN fuses with its pooling op on one device) is what a
split can slow down: the fidelity benchmark measures both.

Inputs: ``images`` [batch, image_size, image_size, 3] float32, ``labels`` [batch] int32 in
``[0, num_classes)``. Optimizer: Adam. Initializers are seeded, so two builds are the same graph.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from tf_autoplace.errors import ConfigError
from tf_autoplace.zoo.base import GraphBuilder, ModelGraph, check_positive
from tf_autoplace.zoo.keras_classifier import _keras_seed


def build_branches(batch: int = 16, image_size: int = 32, channels: int = 16,
                   branches: int = 3, blocks: int = 3, num_classes: int = 10) -> ModelGraph:
    """The training graph (module docstring)."""
    check_positive(batch=batch, image_size=image_size, channels=channels, branches=branches,
                   blocks=blocks, num_classes=num_classes)
    if image_size < 2 ** blocks:
        raise ConfigError(f"image_size must be at least 2**blocks = {2 ** blocks}, got "
                          f"{image_size}")
    layers = tf_keras.layers
    builder = GraphBuilder("branches")
    with builder.graph.as_default(), _keras_seed(0):
        images = builder.placeholder("images", [batch, image_size, image_size, 3], tf.float32)
        labels = builder.placeholder("labels", [batch], tf.int32, num_classes)
        inputs = tf_keras.Input(tensor=images)
        x = inputs
        for b in range(blocks):
            outs = []
            for k in range(branches - 1):
                y = x
                for j in range(k + 1):
                    y = layers.Conv2D(channels, 3, padding="same", activation="relu",
                                      name=f"block{b}/branch{k}/conv{j}")(y)
                outs.append(y)
            pooled = layers.MaxPool2D(3, strides=1, padding="same",
                                      name=f"block{b}/branch{branches - 1}/pool")(x)
            outs.append(layers.Conv2D(channels, 1, activation="relu",
                                      name=f"block{b}/branch{branches - 1}/conv")(pooled))
            x = layers.Concatenate(name=f"block{b}/concat")(outs) if len(outs) > 1 else outs[0]
            x = layers.MaxPool2D(2, name=f"block{b}/pool")(x)
        x = layers.GlobalAveragePooling2D(name="avg")(x)
        logits = layers.Dense(num_classes, name="logits")(x)
        model = tf_keras.Model(inputs, logits)
    return builder.finish(model.outputs[0], labels, tf.compat.v1.train.AdamOptimizer(1e-3))
