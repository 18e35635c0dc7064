"""The dependencies TensorFlow executes: an OpGraph rewired around the ops that do not run.

Before a step runs, a session's Grappler passes fold ops into constants and fuse ops into
others (a MatMul into the ``_FusedMatMul`` named after its BiasAdd, a Transpose into the
MatMul that reads it, an Identity removed); the partitioner then puts a Send/Recv pair only
on the edges that are left. A graph as written has many more edges than that, and a simulator
that charged a transfer for each of them would charge for transfers TensorFlow never makes.
A measured profile (:mod:`tf_autoplace.hw.profiler`) records which ops ran as kernels of their
own; :func:`executed_graph` rewires the graph from that record:

* an op that did not run is **folded** when its value cannot depend on the values of its
  inputs (a shape-like type, :data:`VALUE_FREE_TYPES`), when it has no inputs, or when all its
  inputs are folded: it became a constant, so its consumers do not wait for it and nothing is
  sent for it;
* any other op that did not run is **bypassed**: it was removed or fused into the op that
  reads it, so each op that reads it (directly or through other bypassed ops) reads the
  tensors of its nearest ancestors that did run instead, and waits for their control
  dependencies; a transfer is charged where such a tensor crosses devices;
* ops keep their indices, output tensors, colocation and kernels (placements carry over
  unchanged), and the edges change. An op that did not run is left without edges, and its
  outputs take no memory: a step never allocates them (an initializer outside the step, an
  op fused into another, a constant folded into its consumer's kernel).

The rewiring is the same for every placement, which is its approximation: Grappler keeps an
Identity or NoOp that sits on a device boundary, and a fusion of two ops placed apart cannot
happen; neither is modelled here.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tf_autoplace.errors import InvalidGraphError
from tf_autoplace.graph.opgraph import OpGraph

# Ops whose value depends on their inputs' shapes only (or on nothing): when one did not run,
# Grappler folded it into a constant.
# Ops that run other nodes: calls of a function and functional control flow. The runtime
# executes their bodies as nodes of their own, named under the op's name (``rnn/while/body/
# _1/add``, ``rnn/while/next_iteration/_14``), and the op itself may not appear in a trace.
CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
CONTROL_FLOW_OPS = frozenset({"If", "StatelessIf", "While", "StatelessWhile", "Case",
                              "StatelessCase"})

VALUE_FREE_TYPES = frozenset({
    "Const", "HostConst", "Shape", "ShapeN", "Size", "Rank", "BroadcastGradientArgs",
    "ConcatOffset", "ZerosLike", "OnesLike"})


def executed_graph(graph: OpGraph, ran) -> OpGraph:
    """``graph`` with the dependencies TensorFlow executes (module docstring).

    Args:
      graph: the graph as written.
      ran: [n] bool, op i ran as a kernel of its own in a profiled step.

    Returns:
      An OpGraph with the same ops and tensors and rewired data and control edges (``graph``
      itself when every op ran).

    Raises:
      InvalidGraphError: ``ran`` is not one bool per op.
    """
    ran = np.asarray(ran)
    n = graph.num_ops
    if ran.shape != (n,) or ran.dtype != np.bool_:
        raise InvalidGraphError(f"ran must be [{n}] bool, one per op; got {ran.dtype} "
                                f"{ran.shape}")
    if ran.all():
        return graph
    # Inputs of every op as (producer, tensor), tensor -1 for a control dependency.
    producer = np.concatenate([graph.edge_src, graph.ctrl_src]).astype(np.int64)
    tensor = np.concatenate([graph.edge_tensor, np.full(len(graph.ctrl_src), -1)])
    consumer = np.concatenate([graph.edge_dst, graph.ctrl_dst]).astype(np.int64)
    by_consumer = np.argsort(consumer, kind="stable")
    ptr = np.searchsorted(consumer[by_consumer], np.arange(n + 1))
    producer, tensor = producer[by_consumer].tolist(), tensor[by_consumer].tolist()
    types = graph.op_types

    folded = np.zeros(n, bool)
    reads: dict[int, set] = {}  # bypassed op -> the (producer, tensor) pairs it stands for
    edges, controls = set(), set()
    for i in graph.topological_order().tolist():
        inputs = range(ptr[i], ptr[i + 1])
        if not ran[i] and (types[i] in VALUE_FREE_TYPES
                           or all(folded[producer[k]] for k in inputs)):
            folded[i] = True
            continue
        deps = set()
        for k in inputs:
            s = producer[k]
            if folded[s]:
                continue
            if ran[s]:
                deps.add((s, tensor[k]))
            else:
                deps |= reads[s]
        if not ran[i]:
            reads[i] = deps
            continue
        for s, t in deps:
            if t >= 0:
                edges.add((t, i))
            else:
                controls.add((s, i))
    edges, controls = sorted(edges), sorted(controls)
    return dataclasses.replace(
        graph, tensor_bytes=np.where(ran[graph.tensor_op], graph.tensor_bytes, 0).astype(
            graph.tensor_bytes.dtype),
        edge_tensor=np.array([t for t, _ in edges], np.int32).reshape(-1),
        edge_dst=np.array([d for _, d in edges], np.int32).reshape(-1),
        ctrl_src=np.array([s for s, _ in controls], np.int32).reshape(-1),
        ctrl_dst=np.array([d for _, d in controls], np.int32).reshape(-1))
