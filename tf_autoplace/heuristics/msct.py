"""m-SCT: Baechi's memory-aware small-communication-time placer (Jeon et al., "Baechi: fast
device placement of machine learning graphs", SoCC 2020), after Hanen and Munier's SCT
scheduling with favourite children.

Where m-ETF (:mod:`tf_autoplace.heuristics.metf`) weighs each transfer only when it schedules
the op that waits for it, m-SCT first decides, for the whole graph at once, which consumer of
each op should run right after it on its device, its *favourite child*, so that the edge
between them never pays a transfer:

1. **The favourite-child LP** (Baechi's ``FavoriteChildLPSolver``). Variables: ``x_e`` in
   [0, 1] per edge ``i -> j`` (0: j is i's favourite child), start times ``s_i >= 0`` and the
   makespan ``w``. Minimise ``w`` subject to ``s_i + p_i + c_e x_e <= s_j`` for every edge,
   ``s_i + p_i <= w`` for every op, and, for every op, at most one favourite child
   (``sum_out x_e >= outdeg - 1``) and at most one favourite parent (``sum_in x_e >= indeg -
   1``). ``p_i`` is op i's mean time over the devices that can run it and ``c_e`` the largest
   tensor of the edge at the cluster's mean latency and bandwidth, as m-ETF's priorities use.
   Here the edges are the unique op pairs (data and control) between different placement
   groups: an edge inside a group never pays a transfer, so it needs no favour (Baechi
   merges colocated ops before its LP for the same reason). Solved with HiGHS.
2. **Rounding.** ``x_e < 0.5`` makes j i's favourite child, as Baechi's threshold does; where
   that gives an op two favourite children (or two favourite parents), the edges are taken in
   increasing ``x_e`` and an edge is kept only while both of its ends are still free (Baechi's
   code notes the conflict and leaves it; a matching keeps the LP's meaning).
3. **Scheduling** is m-ETF's list schedule (same priorities, transfer model and memory
   rule) with SCT's two rules (:func:`tf_autoplace.heuristics.metf.list_schedule`): the device
   that ran an op is kept for that op's favourite child (ops of unplaced groups avoid a kept
   device while another device can take them), and the favourite child goes to that device
   when it can start there as early as anywhere, else where it finishes earliest. Baechi's
   SCT runs an event-driven schedule in which a kept device idles until the favourite child
   is ready or some op becomes urgent; m-ETF here is a static list schedule in priority
   order, so "kept" lasts until the favourite child is scheduled.
4. As m-ETF, the placement is compared in the simulator with all groups on one device, and
   the faster that fits is returned (with a note).

The LP is solved by HiGHS's simplex within ``LP_ITERATIONS_PER_ROW`` iterations per row (a
budget independent of the machine's speed; the zoo's LPs needed about a third of one per row)
and a time cap of ``LP_TIME_LIMIT_S``. If it stops before the optimum, there are no favourite
children and the result is m-ETF's, with a note. Deterministic (unless the time cap is
reached, which the note then says): the seed is ignored.
"""

from __future__ import annotations

import highspy
import numpy as np

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.heuristics.metf import MemoryAwareETFPlacer, _in_edges, list_schedule
from tf_autoplace.sim.lp_bound import LinearModel, highs_solver

# The favourite-child LP's budget: simplex iterations per row (plus a constant), which does not
# depend on the machine (about a third of the rows were needed on the zoo), and a time cap in
# seconds that only a very slow machine reaches.
LP_ITERATIONS_PER_ROW = 2
LP_TIME_LIMIT_S = 600.0
THRESHOLD = 0.5


def favourite_children(problem: PlacementProblem, *,
                       time_limit_s: float = LP_TIME_LIMIT_S) -> tuple[np.ndarray, str]:
    """Steps 1 and 2 of the module docstring: ``([n] favourite child of each op, -1 for none;
    HiGHS's status)``."""
    graph, cluster, labels = problem.graph, problem.cluster, problem.grouping.labels
    n = graph.num_ops
    favourite = np.full(n, -1, np.int64)
    *_, dst, src, nbytes = _in_edges(graph)
    pairs, inverse = np.unique(src * n + dst, return_inverse=True)
    biggest = np.zeros(len(pairs))
    np.maximum.at(biggest, inverse.ravel(), nbytes)
    src, dst = pairs // n, pairs % n
    finite = np.where(problem.allowed, problem.op_time, np.nan)
    p = np.nanmean(finite, axis=1)
    off = ~np.eye(cluster.num_devices, dtype=bool)
    if not off.any():
        return favourite, "one device"
    comm = cluster.latency[off].mean() + biggest / cluster.bandwidth[off].mean()
    cross = labels[src] != labels[dst]
    if not cross.any():
        return favourite, "no edge between groups"
    e_src, e_dst, e_comm = src[cross], dst[cross], comm[cross]
    m = len(e_src)
    # Columns: x_e (m), s_i (n), w.
    s_col, w_col = m + np.arange(n), m + n
    model = LinearModel(num_cols=m + n + 1)
    # Every edge (inside groups too): s_j - s_i - c_e x_e >= p_i.
    k = len(src)
    xcol = np.full(k, -1, np.int64)
    xcol[np.flatnonzero(cross)] = np.arange(m)
    rows = np.arange(k)
    model.add(rows, s_col[dst], np.ones(k))
    model.add(rows, s_col[src], -np.ones(k))
    model.add(rows[cross], xcol[cross], -e_comm)
    model.close(p[src], np.full(k, np.inf))
    # Makespan: w - s_i >= p_i.
    model.add(np.arange(n), np.full(n, w_col), np.ones(n))
    model.add(np.arange(n), s_col, -np.ones(n))
    model.close(p, np.full(n, np.inf))
    # At most one favourite child and one favourite parent: sum x >= degree - 1.
    for ends in (e_src, e_dst):
        nodes, row = np.unique(ends, return_inverse=True)
        model.add(row.ravel(), np.arange(m), np.ones(m))
        degree = np.bincount(row.ravel(), minlength=len(nodes))
        model.close(degree - 1.0, np.full(len(nodes), np.inf))
    cost = np.zeros(m + n + 1)
    cost[w_col] = 1.0
    col_up = np.concatenate([np.ones(m), np.full(n + 1, np.inf)])
    iterations = LP_ITERATIONS_PER_ROW * model.num_rows + 10_000
    solver = highs_solver(model, cost, np.zeros(m + n + 1), col_up, time_limit_s=time_limit_s,
                          options=(("solver", "simplex"),
                                   ("simplex_iteration_limit", iterations)))[0]
    solver.run()
    status = solver.getModelStatus()
    solution = solver.getSolution()
    if status != highspy.HighsModelStatus.kOptimal or not solution.value_valid:
        return favourite, solver.modelStatusToString(status).lower()
    x = np.asarray(solution.col_value)[:m]
    has_parent = np.zeros(n, bool)
    for e in np.argsort(x, kind="stable").tolist():
        if x[e] >= THRESHOLD:
            break
        i, j = int(e_src[e]), int(e_dst[e])
        if favourite[i] < 0 and not has_parent[j]:
            favourite[i] = j
            has_parent[j] = True
    return favourite, "optimal"


class MemoryAwareSCTPlacer(MemoryAwareETFPlacer):
    """Baechi's m-SCT over the problem's groups (see module docstring)."""

    name = "m_sct"

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        favourite, status = favourite_children(problem)
        if status not in ("optimal", "one device", "no edge between groups"):
            self.notes.append(f"m_sct: the favourite-child LP ended with '{status}'; the "
                              "schedule has no favourite children (m_etf's)")
        return self._no_worse_than_single_device(problem, list_schedule(problem, favourite))
