"""Write a placement into a graph's device annotations.

- :func:`apply_to_graph` rewrites a ``tf.Graph`` in place, atomically: every check runs before the
  first op is touched, and if setting a device fails half-way the old devices are restored, so the
  graph is either fully placed or exactly as it was.
- :func:`apply_to_graph_def` returns a placed copy of a ``GraphDef`` (the input is not modified).
- :func:`replaced_devices` lists the device annotations the graph had that the placement
  overrides (every op's device is the placer's choice; the report's notes say which it changed).
- :func:`check_annotations` refuses a graph whose annotations name a job or task of a
  TensorFlow cluster the cluster being placed on lacks (a graph written for another cluster).

Device strings are full TF names (``/job:localhost/replica:0/task:0/device:GPU:1``), checked with
``tf.DeviceSpec``; the mapping is by op name, so the graph must hold exactly the ops that were
placed.
"""

from __future__ import annotations

import weakref
from typing import Mapping, Sequence

import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.tasks import same_device
from tf_autoplace.errors import ClusterSpecError, InfeasiblePlacementError, InvalidGraphError


def canonical_device(device: str) -> str:
    """``device`` as ``tf.DeviceSpec`` writes it; InfeasiblePlacementError if it is not a TF
    device string or names no device type."""
    try:
        spec = tf.DeviceSpec.from_string(device)
    except (ValueError, TypeError) as e:
        raise InfeasiblePlacementError(f"{device!r} is not a TF device string: {e}") from e
    if spec.device_type is None:
        raise InfeasiblePlacementError(f"device string {device!r} names no device type")
    return spec.to_string()


def _checked_mapping(graph_names: Sequence[str], placement: Mapping[str, str]) -> dict[str, str]:
    names = set(graph_names)
    missing = [n for n in graph_names if n not in placement]
    extra = [n for n in placement if n not in names]
    if missing or extra:
        raise InvalidGraphError(
            "the placement does not match the graph: "
            + (f"{len(missing)} ops unplaced (e.g. {missing[:3]})" if missing else "")
            + ("; " if missing and extra else "")
            + (f"{len(extra)} placed ops not in the graph (e.g. {extra[:3]})" if extra else ""))
    cache: dict[str, str] = {}
    return {n: cache.setdefault(placement[n], canonical_device(placement[n])) for n in graph_names}


def replaced_devices(graph_def: graph_pb2.GraphDef,
                     placement: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """``(op, the device its annotation asks for, the device placed)`` for each node of
    ``graph_def`` that has a device annotation the placement does not satisfy: one that sets a
    field (job, replica, task, device type, device index) in which the placed device differs.
    ``/CPU:0`` is satisfied by ``/job:localhost/replica:0/task:0/device:CPU:0``, ``/GPU:1`` is
    not by GPU 0. The placement replaces every annotation; this says which it overrode."""
    out, kept = [], {}  # (annotation, placed device) -> whether the placement satisfies it
    for node in graph_def.node:
        if not node.device or node.name not in placement:
            continue
        pair = (node.device, placement[node.name])
        if pair not in kept:  # a graph has few distinct device strings
            kept[pair] = same_device(*(tf.DeviceSpec.from_string(d) for d in pair))
        if not kept[pair]:
            out.append((node.name, *pair))
    return out


def other_task(asked: str, placed: str) -> bool:
    """Whether ``placed`` is on another job or task than the annotation ``asked`` names (an
    annotation that names neither says nothing about tasks)."""
    a, p = tf.DeviceSpec.from_string(asked), tf.DeviceSpec.from_string(placed)
    return (a.job is not None and a.job != p.job) or (a.task is not None and a.task != p.task)


def check_annotations(graph_def: graph_pb2.GraphDef, cluster: Cluster) -> None:
    """Raise ClusterSpecError naming the op, its annotation and the job or task, when a device
    annotation of ``graph_def`` (``/job:ps/task:2``, as ``replica_device_setter`` writes them)
    names a job or task that ``cluster``'s TensorFlow tasks lack. A cluster without tasks (one
    machine) takes any annotation: the placement replaces them all."""
    if not cluster.tasks:
        return
    first = {}
    for node in graph_def.node:
        if node.device:
            first.setdefault(node.device, node.name)
    for device, op in first.items():
        try:
            cluster.check_task(device)
        except ClusterSpecError as e:
            if tf.DeviceSpec.from_string(device).job == "localhost":
                raise ClusterSpecError(
                    f"op {op!r} of the graph is annotated {device!r}, a device of one machine "
                    f"(job 'localhost', as a placement for this machine writes it), which the "
                    f"TensorFlow cluster's jobs do not include: place the graph as it was "
                    f"before that placement, or clear its devices first: {e}") from e
            raise ClusterSpecError(f"op {op!r} of the graph is annotated {device!r}, for "
                                   f"another TensorFlow cluster: {e}") from e


_placed_graphs: "weakref.WeakSet" = weakref.WeakSet()


def apply_to_graph(graph: tf.Graph, placement: Mapping[str, str]) -> None:
    """Set every op's device from ``placement`` (op name -> device string), atomically."""
    ops = graph.get_operations()
    devices = _checked_mapping([op.name for op in ops], placement)
    before = [(op, op.device) for op in ops]
    try:
        for op in ops:
            op._set_device(devices[op.name])  # pylint: disable=protected-access
    except BaseException:  # an interrupt too: the graph is placed whole or not at all
        for op, old in before:
            op._set_device(old)  # pylint: disable=protected-access
        raise
    _placed_graphs.add(graph)


def was_placed(graph: tf.Graph) -> bool:
    """Whether a placement was applied to ``graph`` in this process (by :func:`apply_to_graph`,
    which every door that places a tf.Graph uses): the ``--autoplace`` hook keeps such a
    placement rather than placing the graph again."""
    return graph in _placed_graphs


def apply_to_graph_def(graph_def: graph_pb2.GraphDef,
                       placement: Mapping[str, str]) -> graph_pb2.GraphDef:
    """A copy of ``graph_def`` with every node's device set from ``placement``."""
    devices = _checked_mapping([n.name for n in graph_def.node], placement)
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    for node in out.node:
        node.device = devices[node.name]
    return out
