"""Which device kinds have a kernel for a node, from TensorFlow's kernel registry.

A kind qualifies when some registered kernel for the node's op is for that device type (or for
``DEFAULT``, which TF registers for every device) and every type constraint of that kernel is met
by the node's attrs (``MatMul`` on ``int32`` has no GPU kernel, on ``float`` it has). Function
call nodes (op = a function of the graph's library) run anywhere.
"""

from __future__ import annotations

import functools

from tensorflow.python.framework import kernels as tf_kernels

from tf_autoplace.graph.opgraph import KERNEL_KINDS


@functools.lru_cache(maxsize=None)
def _registered(op_type: str) -> tuple:
    """(device_type, ((attr, allowed types), ...)) for every kernel registered for op_type."""
    out = []
    for k in tf_kernels.get_registered_kernels_for_op(op_type).kernel:
        constraints = tuple((c.name, frozenset(c.allowed_values.list.type)) for c in k.constraint)
        out.append((k.device_type, constraints))
    return tuple(out)


def _satisfied(node, constraints) -> bool:
    for attr, allowed in constraints:
        if attr not in node.attr:
            continue  # attr left at its default: TF would fill it in; do not reject on that
        value = node.attr[attr]
        types = list(value.list.type) if value.HasField("list") else [value.type]
        if any(t not in allowed for t in types):
            return False
    return True


def kernel_kinds(node, library_functions=frozenset()) -> frozenset:
    """The subset of KERNEL_KINDS that can run ``node`` (a NodeDef)."""
    if node.op in library_functions:
        return frozenset(KERNEL_KINDS)
    kinds = set()
    for device_type, constraints in _registered(node.op):
        if device_type in KERNEL_KINDS or device_type == "DEFAULT":
            if _satisfied(node, constraints):
                kinds.update(KERNEL_KINDS if device_type == "DEFAULT" else (device_type,))
    return frozenset(kinds)
