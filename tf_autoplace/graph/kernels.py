"""Which device kinds have a kernel for a node, from TensorFlow's kernel registry.

A kind qualifies when some registered kernel for the node's op is for that device type (or for
``DEFAULT``, which TF registers for every device) and every constraint of that kernel is met
by the node's attrs (``MatMul`` on ``int32`` has no GPU kernel, on ``float`` it has). Most
constraints are on types; a few kernels constrain a string, int or bool attr instead
(``GatherNd``'s ``bad_indices_policy``, the CPU ``DepthToSpace``'s ``data_format``), and those
are compared as what they are. Function call nodes (op = a function of the graph's library)
run anywhere.

A TensorFlow without GPU support (``tensorflow-cpu``, the macOS and Linux aarch64 wheels)
registers no GPU kernel at all, and read alone its registry would keep every op off the GPUs of
a cluster planned on such a machine. There the GPU kernels come from a snapshot of a GPU build's
registry shipped beside this module (``gpu_kernels.json``, written by
``tools/snapshot_gpu_kernels.py``, which records its TF version): the same op types and type
constraints, as of that version (it records a constraint on another kind of attr with no
allowed types; such a constraint is not checked). The engine says so in the report when the
cluster has GPUs.
"""

from __future__ import annotations

import functools
import json
import os

from tensorflow.python.framework import kernels as tf_kernels

from tf_autoplace.graph.opgraph import KERNEL_KINDS


GPU_SNAPSHOT = os.path.join(os.path.dirname(__file__), "gpu_kernels.json")


@functools.lru_cache(maxsize=None)
def gpu_kernels_registered() -> bool:
    """Whether the running TensorFlow registers any GPU kernel (module doc)."""
    return any(k.device_type == "GPU" for k in tf_kernels.get_all_registered_kernels().kernel)


@functools.lru_cache(maxsize=None)
def gpu_snapshot() -> dict:
    """The shipped snapshot: ``{"tensorflow": version, "kernels": {op type: [constraints of
    each GPU kernel as [[attr, [allowed types]], ...]]}}``."""
    with open(GPU_SNAPSHOT) as f:
        return json.load(f)


def gpu_kernel_note() -> str | None:
    """None when this TensorFlow's registry says which ops have GPU kernels; otherwise the
    sentence a report on a GPU cluster carries."""
    if gpu_kernels_registered():
        return None
    return ("this TensorFlow has no GPU kernels: which ops can run on a GPU comes from the "
            f"registry of TensorFlow {gpu_snapshot()['tensorflow']} with GPU support "
            "(tf_autoplace/graph/gpu_kernels.json)")


# The fields of an AttrValue's list that a kernel constraint may allow values in.
_FIELDS = ("type", "s", "i", "b")


def _values(attr_list) -> tuple[str | None, tuple]:
    """``(field, values)`` of an ``AttrValue.ListValue``: the one field of :data:`_FIELDS` it
    holds values in, or ``(None, ())`` when it holds none."""
    for field in _FIELDS:
        values = getattr(attr_list, field)
        if len(values):
            return field, tuple(values)
    return None, ()


@functools.lru_cache(maxsize=None)
def _registered(op_type: str) -> tuple:
    """(device_type, ((attr, field, allowed values), ...)) for every kernel registered for
    op_type, with the snapshot's GPU kernels where TF registers none (module doc). ``field``
    is the kind of value allowed (:data:`_FIELDS`); None for a snapshot constraint that lists
    no types (one on another kind of attr: not checked)."""
    out = []
    for k in tf_kernels.get_registered_kernels_for_op(op_type).kernel:
        constraints = []
        for c in k.constraint:
            field, allowed = _values(c.allowed_values.list)
            constraints.append((c.name, field, frozenset(allowed)))
        out.append((k.device_type, tuple(constraints)))
    if not gpu_kernels_registered():
        for kernel in gpu_snapshot()["kernels"].get(op_type, ()):
            out.append(("GPU", tuple((name, "type" if types else None, frozenset(types))
                                     for name, types in kernel)))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _constrained_attrs(op_type: str) -> tuple[str, ...]:
    """The attrs some kernel of ``op_type`` constrains (the only ones kinds depend on)."""
    return tuple(sorted({attr for _, constraints in _registered(op_type)
                         for attr, _, _ in constraints}))


def _type_attrs(node) -> tuple:
    """``((attr, field, values), ...)`` for each constrained attr the node sets: the kind of
    value (:data:`_FIELDS`) and its value, or its list's values (an empty list: field None)."""
    out = []
    for attr in _constrained_attrs(node.op):
        if attr in node.attr:  # left at its default: TF would fill it in; do not reject on that
            value = node.attr[attr]
            which = value.WhichOneof("value")
            if which == "list":
                out.append((attr,) + _values(value.list))
            else:
                out.append((attr, which, (getattr(value, which),) if which else ()))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _kinds(op_type: str, type_attrs: tuple) -> frozenset:
    """The kinds of :func:`kernel_kinds` for an op type and its constrained attrs: a graph's
    ops repeat a few of these, so each is worked out once."""
    values = {attr: (field, vals) for attr, field, vals in type_attrs}
    kinds = set()
    for device_type, constraints in _registered(op_type):
        if device_type in KERNEL_KINDS or device_type == "DEFAULT":
            if all(_meets(values.get(attr), field, allowed)
                   for attr, field, allowed in constraints):
                kinds.update(KERNEL_KINDS if device_type == "DEFAULT" else (device_type,))
    return frozenset(kinds)


def _meets(value, field: str | None, allowed: frozenset) -> bool:
    """Whether a node's attr (``(field, values)``, None when left at its default) meets a
    kernel's constraint that allows ``allowed`` values of kind ``field``."""
    if value is None or field is None:  # a default TF fills in; a constraint not recorded
        return True
    node_field, node_values = value
    if not node_values:  # an empty list: no value to rule out
        return True
    return node_field == field and all(v in allowed for v in node_values)


def kernel_kinds(node, library_functions=frozenset()) -> frozenset:
    """The subset of KERNEL_KINDS that can run ``node`` (a NodeDef)."""
    if node.op in library_functions:
        return frozenset(KERNEL_KINDS)
    return _kinds(node.op, _type_attrs(node))
