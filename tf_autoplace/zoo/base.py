"""What every zoo model shares: the :class:`ModelGraph` result and :class:`GraphBuilder`, which
declares the inputs of a model and adds its loss, optimizer update and initializer.

Every model is a TF1-style training graph: placeholders with fully defined shapes in, a scalar
``loss`` (mean sparse softmax cross-entropy; its ops sit under ``softmax/``), a ``train_op``
that applies one optimizer step (and any extra updates such as batch-norm moving averages),
and an ``init`` op that initializes all variables.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Iterable, Sequence

import numpy as np
import tensorflow as tf

from tf_autoplace.errors import ConfigError


@dataclasses.dataclass(frozen=True, eq=False)
class ModelGraph:
    """A training graph of one zoo model (compared and hashed by identity).

    Attributes:
      name: model name (``"inception_v3"``, ``"nmt"``, ...).
      graph: the whole training graph (forward, backward, optimizer update).
      loss: tensor name of the scalar loss (``"loss:0"``).
      train_op: op name of the training step (``"train_op"``).
      init_op: op name that initializes all variables (``"init"``).
      feeds: placeholder tensor name -> (shape tuple, numpy dtype), one entry per input.
      int_bounds: for each integer feed, the exclusive upper bound of its values (number of
        classes or vocabulary size); :meth:`sample_feed` draws from ``[0, bound)``.
      layer_scopes: name-scope prefixes of the model's layers in pipeline order (``()`` for
        the image classifiers). An op belongs to scope ``S`` when its name starts with ``S``
        or contains ``"/" + S`` (gradient ops live under ``gradients/S...``) or
        ``"update_" + S`` (optimizer updates are named ``<Optimizer>/update_<variable>``).
      knobs: the size knobs the model was built with, defaults filled in (set by
        :func:`tf_autoplace.zoo.build`).
    """

    name: str
    graph: tf.Graph
    loss: str
    train_op: str
    init_op: str
    feeds: dict
    int_bounds: dict = dataclasses.field(default_factory=dict)
    layer_scopes: tuple[str, ...] = ()
    knobs: dict = dataclasses.field(default_factory=dict)

    def sample_feed(self, seed: int) -> dict[str, np.ndarray]:
        """Deterministic random inputs: standard normal floats, integers in
        ``[0, int_bounds[name])``, drawn from ``numpy.random.default_rng(seed)`` in sorted feed
        name order."""
        rng = np.random.default_rng(seed)
        values = {}
        for name in sorted(self.feeds):
            shape, dtype = self.feeds[name]
            if np.issubdtype(dtype, np.integer):
                values[name] = rng.integers(0, self.int_bounds[name], size=shape, dtype=dtype)
            else:
                values[name] = rng.standard_normal(shape).astype(dtype)
        return values

    def scope_of(self, op_name: str) -> str | None:
        """The first of ``layer_scopes`` that op ``op_name`` belongs to (see ``layer_scopes``),
        or None: inputs, the loss, gradient sums across layers, optimizer bookkeeping."""
        for layer_scope in self.layer_scopes:
            if (op_name.startswith(layer_scope) or "/" + layer_scope in op_name
                    or "update_" + layer_scope in op_name):
                return layer_scope
        return None


def check_positive(**knobs: int) -> None:
    """Raise ConfigError naming, with its value, each knob that is not a positive integer."""
    bad = [f"{name}={value!r}" for name, value in knobs.items()
           if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1]
    if bad:
        raise ConfigError(f"knobs must be positive integers: {', '.join(bad)}")


class GraphBuilder:
    """Builds one model's training graph: ``placeholder`` declares inputs, ``finish`` adds loss,
    gradients, optimizer update and initializer and returns the :class:`ModelGraph`.

    Model code runs inside ``with builder.graph.as_default():``.
    """

    def __init__(self, name: str):
        self.name = name
        self.graph = tf.Graph()
        self._feeds: dict = {}
        self._int_bounds: dict = {}

    def placeholder(self, name: str, shape: Sequence[int], dtype: tf.DType,
                    bound: int | None = None) -> tf.Tensor:
        """A placeholder with a fully defined shape, recorded in ``feeds``; integer inputs give
        ``bound``, the exclusive upper bound of their values."""
        tensor = tf.compat.v1.placeholder(dtype, shape, name=name)
        self._feeds[tensor.name] = (tuple(shape), np.dtype(dtype.as_numpy_dtype))
        if bound is not None:
            self._int_bounds[tensor.name] = bound
        return tensor

    def finish(self, logits: tf.Tensor, labels: tf.Tensor,
               optimizer: tf.compat.v1.train.Optimizer, *, clip_norm: float | None = None,
               extra_updates: Iterable[tf.Operation] = (),
               layer_scopes: tuple[str, ...] = ()) -> ModelGraph:
        """Add ``loss`` (mean sparse softmax cross-entropy of ``logits`` [n, classes] against
        int ``labels`` [n]), the optimizer step (gradients clipped to global norm ``clip_norm``
        if given), ``train_op`` grouping it with ``extra_updates``, and ``init``."""
        with self.graph.as_default():
            with tf.name_scope("softmax/"):
                xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            loss = tf.reduce_mean(xent, name="loss")
            grads_and_vars = optimizer.compute_gradients(loss)
            if clip_norm is not None:
                grads, variables = zip(*grads_and_vars)
                grads, _ = tf.clip_by_global_norm(grads, clip_norm)
                grads_and_vars = list(zip(grads, variables))
            step = optimizer.apply_gradients(grads_and_vars)
            train_op = tf.group(step, *extra_updates, name="train_op")
            init_op = tf.compat.v1.global_variables_initializer()
        return ModelGraph(name=self.name, graph=self.graph, loss=loss.name, train_op=train_op.name,
                          init_op=init_op.name, feeds=dict(self._feeds),
                          int_bounds=dict(self._int_bounds), layer_scopes=tuple(layer_scopes))


def language_model_builder(name: str, batch: int, length: int,
                           vocab: int) -> tuple[GraphBuilder, tf.Tensor, tf.Tensor]:
    """A builder with the inputs of a next-token model: ``tokens`` and ``targets``, both
    [batch, length] int32 ids in ``[0, vocab)``."""
    builder = GraphBuilder(name)
    with builder.graph.as_default():
        tokens = builder.placeholder("tokens", [batch, length], tf.int32, vocab)
        targets = builder.placeholder("targets", [batch, length], tf.int32, vocab)
    return builder, tokens, targets
