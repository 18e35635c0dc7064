"""Complete a partial placement: every op without a device goes where its neighbours are.

A saved placement applied to a graph that changed a little (one more layer, a renamed op) names
most ops but not all (:class:`tf_autoplace.placers.SavedPlacement`). The rest are placed here,
fast and locally, without disturbing the saved part:

1. An op whose TF colocation group has a placed op takes that op's device (the first placed
   one in graph order), as TF requires.
2. Every other colocation group, in topological order of its first op, goes to the device that
   holds the most bytes on edges between the group and placed ops (data edges weigh their
   tensor's bytes plus one, control edges one, both directions count), among the devices that
   can run every op of the group; ties go to the lower device index. Groups placed this way
   count as placed for the groups after them, so a new chain of ops follows the op it hangs
   from. Groups with no placed neighbour yet are tried again in reverse topological order (a
   new input feeds only ops placed later in the order).
3. A group with no placed neighbour at all goes to the first compute device (the GPUs when
   there are any) that can run it, else the first device that can.

Memory is not considered: the placement is checked like any other afterwards
(``Placer.place``), and a completion that does not fit is an error that says so.
"""

from __future__ import annotations

import numpy as np

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.heuristics._common import compute_devices


def place_next_to_neighbours(problem: PlacementProblem, devices) -> np.ndarray:
    """[n] int32: ``devices`` (a cluster index per op, -1 where the op has none) with every -1
    replaced as the module docstring describes; the other entries are kept."""
    graph = problem.graph
    out = np.asarray(devices, dtype=np.int64).copy()
    coloc = graph.colocation
    num_units = int(coloc.max()) + 1
    # 1. Colocation: the device of the first placed member.
    unit_device = np.full(num_units, -1, np.int64)
    placed = np.flatnonzero(out >= 0)
    unit_device[coloc[placed[::-1]]] = out[placed[::-1]]
    missing = out < 0
    out[missing] = unit_device[coloc[missing]]
    open_units = np.flatnonzero(unit_device < 0)
    if not len(open_units):
        return out.astype(np.int32)

    # Undirected weighted op adjacency, both directions, as CSR.
    data_w = graph.tensor_bytes[graph.edge_tensor].astype(np.float64) + 1.0
    src = np.concatenate([graph.edge_src, graph.ctrl_src]).astype(np.int64)
    dst = np.concatenate([graph.edge_dst, graph.ctrl_dst]).astype(np.int64)
    weight = np.concatenate([data_w, np.ones(len(graph.ctrl_src))])
    a, b, w = np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([weight,
                                                                                      weight])
    order = np.argsort(a, kind="stable")
    a, b, w = a[order], b[order], w[order]
    starts = np.searchsorted(a, np.arange(graph.num_ops + 1))

    position = np.empty(graph.num_ops, np.int64)
    position[graph.topological_order()] = np.arange(graph.num_ops)
    members = {int(u): [] for u in open_units}
    for i in np.flatnonzero(np.isin(coloc, open_units)).tolist():
        members[int(coloc[i])].append(i)
    allowed = problem.colocation_allowed
    num_devices = problem.cluster.num_devices

    def attract(unit: int) -> int:
        score = np.zeros(num_devices)
        for i in members[unit]:
            nbrs, nw = b[starts[i]:starts[i + 1]], w[starts[i]:starts[i + 1]]
            there = out[nbrs]
            ok = there >= 0
            np.add.at(score, there[ok], nw[ok])
        score[~allowed[unit]] = 0.0
        return int(np.argmax(score)) if score.max() > 0 else -1

    by_order = sorted(members, key=lambda u: position[members[u]].min())
    for sweep in (by_order, by_order[::-1]):
        for unit in sweep:
            if unit_device[unit] >= 0:
                continue
            d = attract(unit)
            if d >= 0:
                unit_device[unit] = d
                out[members[unit]] = d
    compute = compute_devices(problem)
    for unit in by_order:
        if unit_device[unit] < 0:
            ok = compute[allowed[unit, compute]]
            d = int(ok[0]) if len(ok) else int(np.argmax(allowed[unit]))
            unit_device[unit] = d
            out[members[unit]] = d
    return out.astype(np.int32)
