"""From a TensorFlow graph to a PlacementProblem: ingest -> cost -> group.

:func:`build_problem` is the first half of every door (``autoplace``, the TF2 and SavedModel
doors, the benchmark and the training-family builders): it reads a MetaGraphDef into an
OpGraph, costs every op on every device of the cluster, checks that the graph can be placed at
all, and groups it with Merge-and-Colocate.
"""

from __future__ import annotations

import time

import numpy as np

from tf_autoplace.cluster import Cluster
from tf_autoplace.cost import AnalyticalCostModel, CostModel
from tf_autoplace.errors import InfeasiblePlacementError
from tf_autoplace.graph import ingest
from tf_autoplace.grouping import GroupingConfig, merge_and_colocate
from tf_autoplace.problem import PlacementProblem

def build_problem(meta_graph, cluster: Cluster, *, grouping: GroupingConfig = GroupingConfig(),
                  cost_model: CostModel | None = None, unknown_dim: int = 1,
                  timings: dict | None = None):
    """Ingest, cost and group a MetaGraphDef: returns ``(problem, cost_model)``."""
    timings = {} if timings is None else timings
    t = time.perf_counter()
    graph = ingest.to_opgraph(meta_graph, unknown_dim=unknown_dim)
    timings["ingest"] = time.perf_counter() - t
    _check_fits_at_all(graph, cluster)

    t = time.perf_counter()
    cost_model = cost_model or AnalyticalCostModel(meta_graph)
    op_time = cost_model.op_time(graph, cluster)
    timings["cost"] = time.perf_counter() - t
    unrunnable = ~np.isfinite(op_time).any(axis=1)
    if unrunnable.any():
        i = int(np.flatnonzero(unrunnable)[0])
        raise InfeasiblePlacementError(
            f"no device in the cluster can run op {graph.names[i]!r} ({graph.op_types[i]}); "
            f"its kernels are for {[k for k, ok in zip(graph.kernel_kinds, graph.kernels[i]) if ok]}")

    t = time.perf_counter()
    groups = merge_and_colocate(graph, grouping)
    timings["group"] = time.perf_counter() - t
    return PlacementProblem(graph=graph, cluster=cluster, op_time=op_time,
                            grouping=groups), cost_model


def _check_fits_at_all(graph, cluster: Cluster) -> None:
    need, have = int(graph.persistent_bytes.sum()), int(cluster.memory.sum())
    if need > have:
        raise InfeasiblePlacementError(
            f"the graph's variables need {need / 1e9:.2f} GB but the cluster's devices have "
            f"{have / 1e9:.2f} GB in all")
