"""Ops that must stay on the device the graph gives them.

Every op of a graph is placed anew, whatever its device annotation, except where the program's
annotation is a constraint TensorFlow does not check until the step runs (or never):

* **Collective ops** (``CollectiveReduce``, ``CollectiveGather``, the broadcast pair, their V2
  and V3 forms, ``CollectiveAllToAll``): the members of one collective instance, one per device
  of its group, meet at run time by group and instance key. Two of them on one device wait for
  each other forever: the step hangs, with no error. The program put each member on its
  tower's device, so each keeps that device.
* **Ops that a function body colocates with.** A node of a library function (a ``cond``'s
  branch, a loop body) may carry ``_class: loc:@X`` naming an op X of the graph, and a device
  of its own (from the ``tf.device`` scope it was built in). TensorFlow inlines the function
  when the step runs and colocates the node with X, so X on another device fails the run
  with "Cannot colocate nodes ... incompatible ids". The rewrite leaves function bodies as
  they are, so X keeps the node's device.
* **Multi-device iterators** (TF1 ``MirroredStrategy``'s input, ``MultiDeviceIterator``): the
  functions that fill each replica's buffer call back (``RemoteCall``) to the device the
  iterator was made on, named by a constant of the graph, and find the iterator there from its
  handle; TensorFlow finds an iterator only on the device that made it ("Attempted create an
  iterator on device ... from handle defined on device ..."), so it keeps its device.

* **Ops that call Python** (:func:`python_callers`: ``py_func``, ``tf.py_function``, a
  ``tf.data`` pipeline from a generator) have no device of their own to keep, but on a cluster
  of several TensorFlow tasks they run only in the client's process: the pipeline keeps them
  on the target task's CPU (:mod:`tf_autoplace.pipeline.prepare`).

* **Shared state of a between-graph replica** (:func:`replica_shared_state`): a graph built
  under ``replica_device_setter`` by one of several workers keeps its variables, and every
  other op on a ``ps`` task that holds state other clients find by name (the queues and
  gradient accumulators of ``SyncReplicasOptimizer``, a hand-made "done" queue), on the tasks
  its annotations name, where the other workers' clients look for them (the pipeline pins them
  when the cluster has several workers).

:func:`device_pins` finds the first three; the pipeline turns them into a cost model under which a
pinned op can run on its device only (:class:`tf_autoplace.cost.model.PinnedCostModel`), which
every placer treats like a missing kernel elsewhere (the op's colocation group follows it), and
the profiler runs them there, with their colocation groups (:func:`pinned_groups`), when it
runs "every op on one device".
"""

from __future__ import annotations

from typing import Mapping

import tensorflow as tf
from tensorflow.core.framework import graph_pb2
from tensorflow.python.framework import op_def_registry

from tf_autoplace.core.tasks import same_device
from tf_autoplace.errors import InvalidGraphError
from tf_autoplace.graph.ingest import colocation_targets, nesting_limited
from tf_autoplace.graph.opgraph import OpGraph

COLLECTIVE_OPS = frozenset({
    "CollectiveReduce", "CollectiveReduceV2", "CollectiveReduceV3", "CollectiveGather",
    "CollectiveGatherV2", "CollectiveBcastSend", "CollectiveBcastSendV2", "CollectiveBcastRecv",
    "CollectiveBcastRecvV2", "CollectiveAllToAllV2", "CollectiveAllToAllV3"})
MULTI_DEVICE_ITERATORS = frozenset({
    "MultiDeviceIterator", "AnonymousMultiDeviceIterator", "AnonymousMultiDeviceIteratorV3"})
# Ops that call back into the Python of the process that built the graph (py_func,
# py_function, numpy_function; a tf.data pipeline from a generator calls them in its functions).
PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})
# The ops tf.compat.v1.train.replica_device_setter puts on a parameter server
# (tensorflow/python/training/device_setter.py, TF 2.21: STANDARD_PS_OPS).
PS_OPS = frozenset({
    "Variable", "VariableV2", "AutoReloadVariable", "MutableHashTable", "MutableHashTableV2",
    "MutableHashTableOfTensors", "MutableHashTableOfTensorsV2", "MutableDenseHashTable",
    "MutableDenseHashTableV2", "VarHandleOp", "BoostedTreesEnsembleResourceHandleOp",
    "BoostedTreesQuantileStreamResourceHandleOp", "ResourceConditionalAccumulator",
    "DecisionTreeResource"})
PS_JOB = "ps"


def _same_device(a: str, b: str) -> bool:
    """Whether device strings ``a`` and ``b`` name one device (``/device:CPU:0`` and
    ``/job:localhost/replica:0/task:0/device:CPU:0`` do); strings TF cannot parse, only if
    equal."""
    try:
        return same_device(tf.DeviceSpec.from_string(a), tf.DeviceSpec.from_string(b))
    except ValueError:
        return a == b


@nesting_limited
def device_pins(graph_def: graph_pb2.GraphDef) -> dict[str, tuple[str, str]]:
    """The ops of ``graph_def`` that must keep a device (module docstring).

    Returns:
      op name -> ``(device string, why)``: the device as the graph writes it, and a phrase
      saying why it is pinned (for error messages and notes).

    Raises:
      InvalidGraphError: an op is pinned to two different devices (two function-body nodes on
        two devices colocated with it): TensorFlow cannot run the graph anywhere.
    """
    top = {node.name for node in graph_def.node}
    pins: dict[str, tuple[str, str]] = {}

    def pin(name: str, device: str, why: str) -> None:
        old = pins.setdefault(name, (device, why))
        if not _same_device(old[0], device):
            raise InvalidGraphError(
                f"op {name!r} must be on {old[0]!r} ({old[1]}) and on {device!r} ({why}); "
                "TensorFlow cannot run this graph")

    for node in graph_def.node:
        if node.op in COLLECTIVE_OPS and node.device:
            pin(node.name, node.device, "a collective op: the members of its group meet on "
                "the devices the program gave them")
        elif node.op in MULTI_DEVICE_ITERATORS and node.device:
            pin(node.name, node.device, "a multi-device iterator: its replicas' functions "
                "find it on the device it was made on")
    for function in graph_def.library.function:
        inner = {node.name for node in function.node_def}
        for node in function.node_def:
            if not node.device:
                continue
            for target in colocation_targets(node):
                if target in top and target not in inner:
                    pin(target, node.device, f"{node.name!r} of function "
                        f"{function.signature.name!r} is colocated with it on that device")
    return pins


def pinned_groups(pins: Mapping[str, str], graph: OpGraph) -> dict[str, str]:
    """``pins`` (op name -> device) with every op of a pinned op's TF colocation group
    (``graph.colocation``, :func:`tf_autoplace.graph.ingest.to_opgraph`) on that device: where
    a placer puts them (under :class:`~tf_autoplace.cost.model.PinnedCostModel` a pinned op has
    one device, and its group moves whole) and where TensorFlow needs them. A pinned op's
    group holds the ops that run its work, not only their own: an ``IteratorGetNext`` reads
    its iterator's resource and runs the dataset's functions (a generator's ``PyFunc``) where
    the ``IteratorGetNext`` is placed, so with the iterator alone in the client's process the
    generator runs on another task, without its Python callback. An op with a pin keeps its
    own; the other ops of a group whose pins name two devices take the first one's (in the
    order of ``pins``); pins of ops ``graph`` does not have are kept as they are."""
    index = {name: i for i, name in enumerate(graph.names)}
    group_device: dict[int, str] = {}
    for name, device in pins.items():
        if name in index:
            group_device.setdefault(int(graph.colocation[index[name]]), device)
    out = {name: group_device[group]
           for name, group in zip(graph.names, graph.colocation.tolist())
           if group in group_device}
    out.update(pins)
    return out


def shares_state_by_name(node) -> bool:
    """Whether ``node`` holds state that TensorFlow finds by name on its device, so that every
    client of the same servers reaches the same one: one of :data:`PS_OPS`, or any op with a
    ``shared_name`` attribute (queues, accumulators, barriers, tables; an empty one means the
    op's own name, the same in every replica's graph)."""
    if node.op in PS_OPS:
        return True
    op_def = op_def_registry.get(node.op)
    return op_def is not None and any(attr.name == "shared_name" for attr in op_def.attr)


def replica_shared_state(graph_def: graph_pb2.GraphDef, other_tasks: int,
                         ps_job: str = PS_JOB) -> dict[str, str]:
    """The shared state of one replica's graph in between-graph replication: each worker of a
    TensorFlow cluster builds its own graph under ``replica_device_setter``, its variables on
    ``ps`` tasks, where every worker's client looks for them (the chief initializes them, the
    others wait until they are), and every other op on its own worker task; a
    ``SyncReplicasOptimizer`` puts its token queue and gradient accumulators on ``ps`` too.
    Moved, such an op is this client's alone: the others wait for it forever, or train apart.

    Args:
      graph_def: the graph.
      other_tasks: how many tasks of the cluster are outside ``ps_job`` (its workers).
      ps_job: the parameter servers' job.

    Returns:
      {op name: its device annotation} for the ops annotated on ``ps_job`` that
      :func:`shares_state_by_name`, when the graph may be one replica of several:
      ``other_tasks`` > 1, some :data:`PS_OPS` op annotated on ``ps_job``, and the ops
      annotated with another job all on one and the same task, or none (a
      ``replica_device_setter`` without ``worker_device`` leaves the compute unannotated; an
      annotation without a job, ``/cpu:0``, names no task); else {} (a graph without
      ``ps`` annotations, or one that spreads work over several workers itself, is one
      client's). A single client's graph of this form keeps that state where it put it,
      which costs it nothing TensorFlow would not do.
    """
    if other_tasks < 2:
        return {}
    shared, variables, workers = {}, False, set()
    for node in graph_def.node:
        if not node.device:
            continue
        try:
            spec = tf.DeviceSpec.from_string(node.device)
        except ValueError:
            return {}
        if spec.job == ps_job:
            if shares_state_by_name(node):
                shared[node.name] = node.device
                variables = variables or node.op in PS_OPS
        elif spec.job is not None:
            workers.add((spec.job, spec.replica or 0, spec.task or 0))
    return shared if variables and len(workers) <= 1 else {}


def _called_functions(node) -> set[str]:
    """The library functions ``node`` names: its op (a call of a function by name) and every
    function-valued attribute (a ``map``'s function, a call's ``f``, a ``cond``'s branches)."""
    names = {node.op}
    for value in node.attr.values():
        if value.HasField("func"):
            names.add(value.func.name)
        names.update(f.name for f in value.list.func)
    return names


@nesting_limited
def python_callers(graph_def: graph_pb2.GraphDef) -> list[str]:
    """The ops of ``graph_def`` that call the building process's Python when they run: a
    :data:`PYTHON_OPS` op, or an op that runs a library function that does, directly or through
    other functions (a ``tf.data`` pipeline from a generator, a ``map`` with a
    ``tf.py_function``). TensorFlow finds the Python callback only in the process that
    registered it, so on a cluster of several processes these ops can run only in the client's
    (:func:`tf_autoplace.pipeline.prepare` keeps them on the target task), in graph order."""
    library = {f.signature.name: f for f in graph_def.library.function}
    calls_python: dict[str, bool] = {}

    def function_calls_python(name: str, seen: frozenset = frozenset()) -> bool:
        if name not in library or name in seen:
            return False
        if name not in calls_python:
            inner = seen | {name}
            calls_python[name] = any(
                node.op in PYTHON_OPS or any(function_calls_python(f, inner)
                                             for f in _called_functions(node))
                for node in library[name].node_def)
        return calls_python[name]

    return [node.name for node in graph_def.node
            if node.op in PYTHON_OPS or any(function_calls_python(f)
                                            for f in _called_functions(node))]
