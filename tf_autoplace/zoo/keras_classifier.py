"""Image classifiers from ``tf_keras.applications`` as TF1-style training graphs (shared by
:mod:`~tf_autoplace.zoo.inception`, :mod:`~tf_autoplace.zoo.resnet` and
:mod:`~tf_autoplace.zoo.nasnet`).

The application is built inside the model's own ``tf.Graph`` (tf_keras supports v1 graph
mode; Keras 3 does not) directly on the ``images`` placeholder, without pretrained weights
and with a linear classifier head. Three tf_keras graph-mode details matter:

* Training mode: layers called with ``training=None`` read the Keras learning phase, which in
  a v1 graph is a placeholder and turns every batch norm into a ``tf.cond``. Building under
  ``learning_phase_scope(1)`` makes it the constant "training", so batch norm uses batch
  statistics with no control flow in the graph.
* Batch-norm moving averages are not in ``UPDATE_OPS``; they are ``model.updates``, which
  must be read while the graph is the default, and ``train_op`` runs them.
* Initializers without a seed draw one from python's ``random`` (stateless random ops with
  the seed frozen in the graph), so two builds would differ. Building with tf_keras's seed
  generator temporarily set to ``random.Random(0)`` makes graph and initial values the same
  every time.

Inputs: ``images`` [batch, image_size, image_size, 3] float32 (NHWC) and ``labels`` [batch]
int32 in ``[0, num_classes)``. Optimizer: SGD with momentum 0.9.
"""

from __future__ import annotations

import contextlib
import random
import warnings
from typing import Callable

import tensorflow as tf
import tf_keras
from tf_keras.src import backend as keras_backend

from tf_autoplace.errors import ConfigError
from tf_autoplace.zoo.base import GraphBuilder, ModelGraph, check_positive


@contextlib.contextmanager
def _keras_seed(seed: int):
    """Let tf_keras draw the seeds of unseeded initializers from ``random.Random(seed)``."""
    holder = keras_backend._SEED_GENERATOR  # pylint: disable=protected-access
    previous = getattr(holder, "generator", None)
    holder.generator = random.Random(seed)
    try:
        yield
    finally:
        holder.generator = previous


def build_classifier(name: str, application: Callable[..., tf_keras.Model], *, batch: int,
                     image_size: int, num_classes: int, min_size: int) -> ModelGraph:
    """The training graph of ``application`` (a ``tf_keras.applications`` constructor) on
    ``image_size`` x ``image_size`` RGB images, which must be at least ``min_size``."""
    check_positive(batch=batch, image_size=image_size, num_classes=num_classes)
    if image_size < min_size:
        raise ConfigError(f"{name} needs image_size >= {min_size}, got {image_size}")
    builder = GraphBuilder(name)
    with builder.graph.as_default():
        images = builder.placeholder("images", [batch, image_size, image_size, 3], tf.float32)
        labels = builder.placeholder("labels", [batch], tf.int32, num_classes)
        with _keras_seed(0), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # learning_phase_scope is deprecated
            with tf_keras.backend.learning_phase_scope(1):
                model = application(weights=None, input_tensor=images, classes=num_classes,
                                    classifier_activation=None)
        updates = model.updates
    return builder.finish(model.outputs[0], labels,
                          tf.compat.v1.train.MomentumOptimizer(0.01, 0.9),
                          extra_updates=updates)
