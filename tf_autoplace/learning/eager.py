"""The TensorFlow context every learned placer's policy runs in.

A policy network runs its own TF ops (forward passes, gradients, optimizer steps) and reads
results with ``.numpy()``. The program that calls the placer may be in any mode: eager TF2,
TF1 graph mode after ``tf.compat.v1.disable_eager_execution()`` (where every tensor is
symbolic and ``.numpy()`` fails), inside ``with graph.as_default()`` (where new ops would be
added to the user's graph) or inside a ``Session``. :func:`policy_context` gives the policy a
throwaway default graph of its own and eager execution for the duration of the search, and
restores the caller's context afterwards, so the policy behaves the same in all of them.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf
from tensorflow.python.eager import context


@contextlib.contextmanager
def policy_context():
    """Eager execution in a fresh default graph, whatever the caller's mode (module doc)."""
    with tf.Graph().as_default(), context.eager_mode():
        yield
