"""A lower bound on the makespan any placement can reach in the simulator.

``lower_bound(graph, cluster, op_time) = max(L_path, L_load)`` where, with
``t_i = min_d op_time[i, d]`` (op i on its fastest device):

* ``L_path`` is the longest path through the graph (data and control edges) weighted by
  ``t_i``, with every transfer free;
* ``L_load = sum_i t_i / D``.

Why it is valid for every placement ``p`` (see :mod:`tf_autoplace.sim.simulator`):

* Along any path ``o_1 -> o_2 -> ... -> o_m`` an op cannot start before its parent has ended
  (a transfer, if any, only adds time), and op ``o`` runs for ``op_time[o, p[o]] >= t_o``. So
  the last op of the path ends no earlier than ``sum t_{o_k}``, hence makespan >= ``L_path``.
* A device runs one op at a time, and every op runs inside ``[0, makespan]``, so device ``d``
  is busy for at most ``makespan`` seconds: ``sum_i op_time[i, p[i]] <= D * makespan``. The
  left side is at least ``sum_i t_i``, hence makespan >= ``L_load``.

Useful to report how far a placement is from optimal and to normalise rewards. It ignores
memory, so a placement that reaches it may still not fit.
"""

from __future__ import annotations

import numba
import numpy as np

from tf_autoplace.cluster import Cluster
from tf_autoplace.graph.opgraph import OpGraph
from tf_autoplace.sim.simulator import check_op_time


@numba.njit(cache=True)
def _longest_path(order, child_ptr, children, weight):
    """Longest path in a DAG: ``order`` topological, children in CSR, node weights."""
    ready = np.zeros(weight.shape[0])  # earliest start of each op
    best = 0.0
    for i in order:
        finish = ready[i] + weight[i]
        if finish > best:
            best = finish
        for c in range(child_ptr[i], child_ptr[i + 1]):
            j = children[c]
            if finish > ready[j]:
                ready[j] = finish
    return best


def critical_path(graph: OpGraph, weight: np.ndarray) -> float:
    """Length of the longest path through ``graph`` (data and control edges) where op i
    weighs ``weight[i]`` seconds and edges are free."""
    n = graph.num_ops
    src = np.concatenate([graph.edge_src, graph.ctrl_src]).astype(np.int64)
    dst = np.concatenate([graph.edge_dst, graph.ctrl_dst]).astype(np.int64)
    order = np.argsort(src, kind="stable")
    child_ptr = np.searchsorted(src[order], np.arange(n + 1)).astype(np.int64)
    return float(_longest_path(graph.topological_order().astype(np.int64), child_ptr,
                               dst[order], np.ascontiguousarray(weight, dtype=np.float64)))


def lower_bound(graph: OpGraph, cluster: Cluster, op_time: np.ndarray) -> float:
    """A makespan no placement of ``graph`` on ``cluster`` can beat (module docstring).

    Args:
      op_time: [n, D] float64 seconds per op and device, as given to the Simulator.
    """
    op_time = check_op_time(graph, cluster, op_time)
    fastest = op_time.min(axis=1)
    return max(critical_path(graph, fastest), float(fastest.sum()) / cluster.num_devices)
