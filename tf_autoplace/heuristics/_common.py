"""Helpers shared by the partitioning baselines (expert, METIS, m-TOPO): which devices are the
"compute" devices a baseline spreads work over, what each group costs there, where groups
that cannot run there go, and what a heuristic reads off a graph once for every run on it.

The papers' baselines partition over the GPUs only (HDP's MinCut, Post's and GDP's METIS,
Baechi's m-TOPO); the CPU host only takes ops that have no GPU kernel. Here the compute
devices are the devices of the cluster's default kind (the kind of
:meth:`Cluster.default_device`: GPUs when there are any, else every device).
"""

from __future__ import annotations

import weakref
from typing import Callable

import numpy as np

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.errors import InfeasiblePlacementError


def compute_devices(problem: PlacementProblem) -> np.ndarray:
    """[k] int: indices of the devices of the default kind (the GPUs, if any), ascending."""
    return problem.cluster.compute_devices()


# What heuristics read off a graph that does not depend on the devices, kept while the graph
# lives (an OpGraph never changes): best_heuristic runs each heuristic once per prefix of the
# devices, and on a graph of tens of thousands of ops such reading is most of a run.
_PER_GRAPH: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # OpGraph -> {key: value}


def once_per_graph(graph, key: tuple, read: Callable[[], object]):
    """``read()``, or what it returned for this graph and ``key`` before (``key`` names the
    reader and every setting it depends on)."""
    per_graph = _PER_GRAPH.setdefault(graph, {})
    if key not in per_graph:
        per_graph[key] = read()
    return per_graph[key]


def group_compute_time(problem: PlacementProblem, devices: np.ndarray) -> np.ndarray:
    """[G] seconds: each group's total op time, averaged over the given devices where every op
    of the group has a kernel; over all its allowed devices where none of ``devices`` can run
    it; NaN for a group no device can run (one pinned off a prefix of the cluster)."""
    labels, num_groups = problem.grouping.labels, problem.grouping.num_groups
    per_device = np.stack([np.bincount(labels, weights=problem.op_time[:, d],
                                       minlength=num_groups) for d in
                           range(problem.cluster.num_devices)], axis=1)  # [G, D], inf if no kernel
    usable = problem.group_allowed.copy()
    inside = usable[:, devices].any(axis=1)
    mask = usable & np.isin(np.arange(problem.cluster.num_devices), devices)[None, :]
    usable[inside] = mask[inside]
    count = usable.sum(axis=1)  # (0/0 without numpy's "invalid value" warning: NaN)
    return np.divide(np.where(usable, per_device, 0.0).sum(axis=1), count,
                     out=np.full(num_groups, np.nan), where=count > 0)


def group_memory(problem: PlacementProblem) -> tuple[np.ndarray, np.ndarray]:
    """Baechi's conservative memory per group, as m-ETF counts it: ``(persistent [G],
    reserve [G])`` bytes, where reserve = persistent + every output tensor of the group's ops,
    as if nothing were freed during the step."""
    graph, labels = problem.graph, problem.grouping.labels
    num_groups = problem.grouping.num_groups
    persistent = np.bincount(labels, weights=graph.persistent_bytes, minlength=num_groups)
    return persistent, persistent + np.bincount(labels, weights=graph.output_bytes,
                                                minlength=num_groups)


def fallback_device(problem: PlacementProblem, group: int) -> int:
    """The first device that can run all of ``group`` (the CPU host for CPU-only ops)."""
    allowed = problem.group_allowed[group]
    if not allowed.any():
        op = problem.graph.names[int(problem.grouping.members(group)[0])]
        raise InfeasiblePlacementError(
            f"no device in the cluster can run every op of the group of op {op!r}")
    return int(np.argmax(allowed))


def fix_kernels(problem: PlacementProblem, group_device: np.ndarray) -> np.ndarray:
    """[G] device per group with every group that cannot run on its device moved to the first
    compute device that can run it, else to :func:`fallback_device`."""
    out = np.asarray(group_device, dtype=np.int64).copy()
    allowed = problem.group_allowed
    bad = np.flatnonzero(~allowed[np.arange(len(out)), out])
    compute = compute_devices(problem)
    for g in bad.tolist():
        ok = compute[allowed[g, compute]]
        out[g] = int(ok[0]) if len(ok) else fallback_device(problem, g)
    return out
