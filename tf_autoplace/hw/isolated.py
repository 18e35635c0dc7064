"""One op of a graph timed on its own, untraced: the reference the per-op costs are checked
against.

A traced step gives every op's span (:mod:`tf_autoplace.hw.profiler`), but tracing adds work to
each op, and a span on a shared executor also holds the waits of the ops around it. To know
what an op costs when nothing watches it, :func:`time_isolated` takes it out of its graph:

1. :func:`executed_nodes` runs the workload once (its graph's devices, the session's Grappler
   passes on) and keeps the nodes as they ran, from the partition graphs: an op that Grappler
   fused with its producer (a ``BiasAdd`` that became ``_FusedMatMul``) is timed as the fused
   kernel the profiler's span measured; :func:`input_values` fetches the values of their data
   inputs in another run, so that shape arguments, indices and the like are the real ones;
2. a graph of its own holds one placeholder per input and ``copies`` copies of the op's
   NodeDef reading them, chained by control edges (copy ``r`` waits for copy ``r - 1``, so they
   run one at a time on one core of work whatever the thread pool), all on ``/device:CPU:0``;
3. a step that runs the chain and a step that runs none of it (the feeds only) alternate for
   ``rounds`` rounds in one Session with Grappler off (its passes would merge the copies); the
   op's time is the median over rounds of ``(chain - empty) / copies``: its kernel and the
   executor's work around it, as the simulator's op time counts them.

The copies read the same inputs, which stay in cache: an isolated time is a floor for the op
in its graph. Ops that read a resource, a reference or a variant (variables, datasets) or a
tensor the original graph does not have (a node Grappler made), ops without data inputs and
control-flow ops cannot be taken out this way; :func:`isolable` says which.
"""

from __future__ import annotations

import time
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2, types_pb2

from tf_autoplace.errors import ConfigError, MeasurementError
from tf_autoplace.graph.grappler import V1_CONTROL_FLOW
from tf_autoplace.hw.runner import PlacedSession, RunConfig, own_graph, session_config
from tf_autoplace.hw.workload import Workload

_UNFEEDABLE = frozenset({types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT, types_pb2.DT_STRING})


def _data_inputs(node) -> list[str]:
    return [i for i in node.input if not i.startswith("^")]


def _tensor_name(name: str) -> str:
    return name if ":" in name else f"{name}:0"


def isolable(node, graph: tf.Graph) -> bool:
    """Whether ``node`` (a NodeDef as it ran, :func:`executed_nodes`) can be timed on its own:
    it reads data inputs, all of them tensors of ``graph`` (the original graph) that are plain
    (no resource, reference, variant or string), it is no control-flow op and it calls no
    graph function."""
    inputs = _data_inputs(node)
    if not inputs or node.op in V1_CONTROL_FLOW or "f" in node.attr:
        return False
    for name in inputs:
        try:
            tensor = graph.get_tensor_by_name(_tensor_name(name))
        except (KeyError, ValueError):
            return False  # made by Grappler or the partitioner
        dtype = tensor.dtype
        if dtype._is_ref_dtype or dtype.base_dtype.as_datatype_enum in _UNFEEDABLE:
            return False
    return True


def executed_nodes(workload: Workload, config: RunConfig = RunConfig(steps=1, warmup_steps=1)
                   ) -> dict:
    """The NodeDefs one step of ``workload`` (its graph's devices) ran, by name, as the
    session's partition graphs hold them (after Grappler)."""
    options = tf.compat.v1.RunOptions(output_partition_graphs=True)
    metadata = tf.compat.v1.RunMetadata()
    with PlacedSession(workload, None, config) as placed:
        for _ in range(config.warmup_steps):
            placed.step()
        placed.session.run(list(workload.fetches), dict(workload.feeds), options=options,
                           run_metadata=metadata)
    return {node.name: node for partition in metadata.partition_graphs for node in partition.node}


def input_values(workload: Workload, nodes: Sequence,
                 config: RunConfig = RunConfig(steps=1, warmup_steps=1)
                 ) -> dict[str, list[np.ndarray]]:
    """The values of the data inputs of each of ``nodes`` (NodeDefs that :func:`isolable`
    accepts) in one step of ``workload`` (the graph's own devices), by node name, in input
    order."""
    tensors = sorted({_tensor_name(t) for node in nodes for t in _data_inputs(node)})
    with PlacedSession(workload, None, config) as placed:
        for _ in range(config.warmup_steps):
            placed.step()
        values = placed.session.run(tensors, dict(workload.feeds))
    value_of = dict(zip(tensors, values))
    return {node.name: [value_of[_tensor_name(t)] for t in _data_inputs(node)]
            for node in nodes}


def _chain_graph(node, values: Sequence[np.ndarray], copies: int) -> graph_pb2.GraphDef:
    out = graph_pb2.GraphDef()
    for k, value in enumerate(values):
        ph = out.node.add(name=f"input_{k}", op="Placeholder", device="/device:CPU:0")
        ph.attr["dtype"].type = tf.dtypes.as_dtype(value.dtype).as_datatype_enum
        ph.attr["shape"].shape.CopyFrom(tf.TensorShape(value.shape).as_proto())
    for r in range(copies):
        copy = out.node.add()
        copy.CopyFrom(node)
        copy.name = f"copy_{r}"
        copy.device = "/device:CPU:0"
        del copy.input[:]
        copy.input.extend(f"input_{k}" for k in range(len(values)))
        if r:
            copy.input.append(f"^copy_{r - 1}")
        if "_class" in copy.attr:
            del copy.attr["_class"]
    out.node.add(name="chain", op="NoOp", input=[f"^copy_{copies - 1}"])
    out.node.add(name="empty", op="NoOp")
    return out


def time_isolated(node, values: Sequence[np.ndarray], *, copies: int = 16, rounds: int = 15,
                  warmup: int = 3) -> float:
    """Seconds one execution of ``node`` (a NodeDef) takes on its own with the input
    ``values`` (module docstring).

    Args:
      node: the op, as its graph has it.
      values: one array per data input, in input order (:func:`input_values`).
      copies: executions chained in one step (>= 1).
      rounds: timed pairs of steps (>= 1); the median of their differences is taken.
      warmup: untimed pairs first (>= 0).

    Returns:
      The median over rounds of ``(chain step - empty step) / copies``, at least 0.

    Raises:
      ConfigError: a count out of range.
      MeasurementError: TensorFlow cannot import or run the copy of the op.
    """
    for name, value, low in (("copies", copies, 1), ("rounds", rounds, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{name} must be an int >= {low}, got {value!r}")
    graph = own_graph()
    try:
        with graph.as_default():
            tf.graph_util.import_graph_def(_chain_graph(node, values, copies), name="")
    except (ValueError, tf.errors.OpError) as e:
        raise MeasurementError(f"cannot rebuild op {node.name!r} ({node.op}) on its own: {e}"
                               ) from e
    config = session_config(RunConfig(grappler=False), ["/device:CPU:0"])
    feeds = [graph.get_tensor_by_name(f"input_{k}:0") for k in range(len(values))]
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        try:
            chain = session.make_callable(graph.get_operation_by_name("chain"), feed_list=feeds)
            empty = session.make_callable(graph.get_operation_by_name("empty"), feed_list=feeds)
            diffs = []
            for r in range(warmup + rounds):
                began = time.perf_counter()
                chain(*values)
                middle = time.perf_counter()
                empty(*values)
                done = time.perf_counter()
                if r >= warmup:
                    diffs.append((middle - began) - (done - middle))
        except tf.errors.OpError as e:
            raise MeasurementError(f"op {node.name!r} ({node.op}) does not run on its own: "
                                   f"{e.message}") from e
    return max(float(np.median(diffs)) / copies, 0.0)


def time_ops(workload: Workload, nodes: Sequence, *, target_s: float = 2e-3,
             max_copies: int = 64, rounds: int = 15,
             expected_s: Mapping[str, float] | None = None, log=None) -> dict[str, float]:
    """Isolated times (s) of ``nodes`` (NodeDefs of :func:`executed_nodes` that
    :func:`isolable` accepts), by name: each chained ``clip(target_s / expected, 2,
    max_copies)`` times (``expected_s[name]``, e.g. its profiled time; without one,
    ``max_copies``), so that a chain takes about ``target_s``. A node that TensorFlow cannot
    rebuild on its own is left out (``log`` says why)."""
    log = log or (lambda message: None)
    values = input_values(workload, nodes)
    out = {}
    for node in nodes:
        expected = (expected_s or {}).get(node.name, 0.0)
        copies = max_copies if expected <= 0 else int(np.clip(round(target_s / expected), 2,
                                                              max_copies))
        try:
            out[node.name] = time_isolated(node, values[node.name], copies=copies,
                                           rounds=rounds)
        except MeasurementError as e:
            log(f"  {e}")
    return out
