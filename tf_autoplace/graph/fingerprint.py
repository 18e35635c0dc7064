"""A fingerprint of an OpGraph: the same for the same graph built again, different when what a
placement depends on changes.

A saved placement and a cache entry record the fingerprint of the graph they were made for, so
that a later run can tell "this graph" from "another graph" (or "this graph, changed a little")
without trusting op names alone.

What is hashed, in the graph's op order: op types; persistent bytes; every tensor's producer and
size; data edges in input order and control edges in a canonical one (TF writes a node's
control inputs sorted by their names, counters included, so the same graph built again can
list them in another order); the TF colocation groups; which device kinds each op has kernels
for; which ops have outputs of unknown size; the number of while-loop back edges; and the op
names with TensorFlow's uniquifying counters removed. TF makes a name unique by appending
``_<n>`` to it (``dense``, ``dense_1``, ...), and ``n`` depends on what the program built
before, not on the graph: a Keras model built after another one has ``dense_2/MatMul`` where a
fresh process has ``dense/MatMul``, and a counted name can be counted again (``dense_1_1``).
:func:`normalized_name` drops the trailing ``_<digits>`` (one or more) from every
``/``-separated part of a name, and those before a gradient scope's ``_grad``
(``gradients/Mean_1_grad`` differentiates ``Mean_1``), so all give the same fingerprint, while renaming a scope
(``encoder`` to ``decoder``) or changing a shape, an op type or an edge gives another one.

Sizes are in bytes as ingestion computed them (shapes enter through them); the device
annotations already in the graph do not enter (ingestion ignores them: every op is placed).
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from tf_autoplace.graph.opgraph import OpGraph

_COUNTER = re.compile(r"(?:_\d+)+$")
# A gradient scope names the op it differentiates: ``gradients/Mean_1_grad/...``.
_GRAD_COUNTER = re.compile(r"(?:_\d+)+(?=_grad$)")
# Bumped when what is hashed changes, so that old fingerprints never match new ones.
FORMAT = 2


def normalized_name(name: str) -> str:
    """``name`` without TF's uniquifying counters: ``dense_3/MatMul_1`` -> ``dense/MatMul``."""
    return "/".join(_GRAD_COUNTER.sub("", _COUNTER.sub("", part)) for part in name.split("/"))


def fingerprint(graph: OpGraph) -> str:
    """Hex SHA-256 of ``graph`` as the module docstring describes (64 characters)."""
    h = hashlib.sha256()

    def text(values) -> None:
        data = "\0".join(values).encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)

    def array(values: np.ndarray, dtype) -> None:
        data = np.ascontiguousarray(values, dtype=dtype)
        h.update(np.asarray(data.shape, np.int64).tobytes())
        h.update(data.tobytes())

    h.update(f"tf_autoplace.fingerprint/{FORMAT}".encode())
    text([normalized_name(n) for n in graph.names])
    text(graph.op_types)
    text(graph.kernel_kinds)
    array(graph.persistent_bytes, "<i8")
    array(graph.tensor_op, "<i4")
    array(graph.tensor_bytes, "<i8")
    array(graph.edge_tensor, "<i4")
    array(graph.edge_dst, "<i4")
    ctrl = np.lexsort((graph.ctrl_src, graph.ctrl_dst))
    array(graph.ctrl_src[ctrl], "<i4")
    array(graph.ctrl_dst[ctrl], "<i4")
    array(graph.colocation, "<i4")
    array(graph.kernels, "u1")
    array(graph.shape_known, "u1")
    h.update(int(graph.n_back_edges).to_bytes(8, "little"))
    return h.hexdigest()
