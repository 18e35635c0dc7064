"""A linear-programming lower bound on the makespan of every valid placement, solved with HiGHS.

:func:`lp_lower_bound` returns the largest of three proven bounds: the simple bound and the path
with transfers and windows (:mod:`tf_autoplace.sim.bounds`), and the optimum of the linear
program below, which couples the path with per-device load. The LP is what helps when load,
not the path, limits the step: on a cluster whose CPU host is much slower than its GPUs the
simple bound divides the work by every device as if the host were a GPU; the LP lets each
colocation group choose (fractionally) a kind of device and pays its time there.

The linear program
------------------
Devices with identical ``op_time`` columns form a *class* ``K`` of ``|K|`` devices (the GPUs of
a K80 box are one class, the host another). Times are in seconds, ``t[i, K]`` op i's time on a
device of ``K``, ``c(i)`` op i's colocation group, ``W[c, K] = sum_{i in c} t[i, K]``,
``P[c]`` the persistent bytes of group ``c``, and ``R[i, K] = min_{d in K} h[i, d] + t[i, d] +
q[i, d]`` with the heads and tails of :func:`tf_autoplace.sim.bounds.device_heads_and_tails`
(op i on a device of ``K``: the least time from the step's start to its end through i). These
are the heads without windows (:mod:`tf_autoplace.sim.windows`): the path with windows is one
of the three bounds already, and in the path rows the windows barely raise the LP's optimum
while HiGHS then has to run far more often, and longer (docs/experiments.md).
Variables: ``x[c, K] >= 0`` for every class where group ``c`` has a kernel for all its ops,
whose largest device holds ``P[c]`` and where every op of ``c`` has a finite ``R``, and ``T``.
Minimise ``T`` subject to

* assignment: ``sum_K x[c, K] = 1`` for every group ``c``;
* load: ``sum_c W[c, K] x[c, K] <= |K| T`` for every class, where ``|K|`` counts the cores
  that can run ops of ``K``'s devices: one per device, or with core groups the cores of every
  executor holding a device of ``K`` (``Cluster.executors``; a group shared by two classes is
  counted in both, which only loosens the row);
* memory: ``sum_c P[c] x[c, K] <= sum_{d in K} memory[d]`` for every class (kept only where all
  persistent bytes together exceed the class's memory, else it cannot bind);
* path: ``sum_K R[i, K] x[c(i), K] <= T`` for every op i (kept only where ``max_K R[i, K]``
  exceeds the other two bounds, else it cannot bind);
* sends: for every tensor ``k`` read outside its producer's colocation group ``c(k)`` and
  every class ``K`` where that group may run, a variable ``0 <= y[k, K] <= 1`` with ``y[k, K]
  >= x[c(k), K] - x[c(v), K]`` for each colocation group ``v`` reading ``k`` (``x[c(v), K]``
  is 0 where v may not go), and a bus row ``sum_k s[k, K] y[k, K] <= B_K T``, where ``B_K``
  counts the devices of ``K`` and ``s[k, K]`` is the least ``latency + bytes / bandwidth``
  of a send of ``k`` from a device of ``K`` to one outside it. Only classes whose sends to
  every device outside them go over the sender's bus have these (a send between two core
  groups, or inside one executor, is work on cores instead, which the load rows leave out).
  This prices the transfers a split between kinds of device needs: on a K80 cluster the
  cost model runs most small ops faster on the CPU host, and without these rows the LP puts
  them there at no cost, their big neighbours on the GPUs.

Validity: take any valid placement ``p`` with makespan ``M`` and set ``x[c, K] = 1`` for the
class holding c's device, ``T = M``. Assignment holds since a group sits on one device with its
kernels, and that device holds at least the group's persistent bytes. The devices of ``K`` are
each busy at most ``M`` (one op at a time per core inside ``[0, M]``), so their total busy
time ``sum_c W[c, K] x[c, K] <= |K| M``. Persistent bytes count for the whole step on their device,
and each device of a valid placement fits its peak, so the class total fits the class's
memory. Op ``i`` on device ``d`` of ``K`` starts no earlier than ``h[i, d]``, runs ``t[i, d]``
and ends no later than ``M - q[i, d]``, so ``M >= R[i, K] = sum_K R[i, K] x[c(i), K]`` (and a
class where ``R`` is infinite holds no valid placement of the group). Set ``y[k, K] = 1`` when
``k``'s producer is on a device of ``K`` and some group reading ``k`` is on a device outside
``K``, else 0: the send rows hold, and the simulator sends ``k`` at least once from the
producer's device to a device outside ``K``, which holds that device's bus (one transfer at a
time) for at least ``s[k, K]`` inside ``[0, M]``; so the buses of ``K`` are busy at least
``sum_k s[k, K] y[k, K]`` together, at most ``B_K M``. So the point is feasible and the LP
optimum is at most ``M``.
Rows dropped as unable to bind change nothing once the result is maxed with the other bounds:
with ``T`` raised to them every dropped row holds.

Measured on the zoo and kept out (``docs/experiments.md``, "Lower bounds: what was tried"):
precedence rows with completion times per op (``C_i >= C_j + sum_K t[i, K] x``) add next to
nothing over the path rows above at many times the solve time; per-device variables with
linearised transfer terms (``y_e >= x[c(j), d] - x[c(i), d]``) add nothing, because averaging
an LP solution over permutations of identical devices gives an equally good one in which every
transfer inside a class is free, which is the class LP (the send rows above price only
transfers between classes, which no such averaging removes); windows of ops with large heads
and tails add nothing over the path with transfers.

Proof of the number reported
----------------------------
HiGHS works to tolerances, and a stopped solve (``time_limit_s``) has no optimum. So the value
reported is not HiGHS's objective: it is the Lagrangian bound of the row duals HiGHS returns,
evaluated here. With row activities ``A z`` in ``[rl, ru]``, columns in boxes ``[l, u]`` and any
row multipliers ``y`` (a multiplier whose needed side is infinite is set to 0), every feasible
``z`` has ``c.z = r.z + y.(A z) >= sum_j min(r_j l_j, r_j u_j) + sum_i min(y_i rl_i, y_i ru_i) =
L(y)`` with ``r = c - A^T y``. ``T`` needs a finite box: with ``T <= U`` the argument covers every
placement with makespan at most ``U``, and ``min(L(y), U)`` is then at most every makespan, for
any ``U`` (taken as twice HiGHS's objective). ``L(y)`` is computed in float64 and lowered by a
rounding allowance. If HiGHS returns no duals (an error, a stop before any basis) the LP part
is dropped and ``status`` says so; the result is then the largest of the other two bounds.
"""

from __future__ import annotations

import dataclasses
import math
import time

import highspy
import numpy as np

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.units import format_bytes
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.opgraph import OpGraph
from tf_autoplace.sim.bounds import device_heads_and_tails, lower_bound
from tf_autoplace.sim.simulator import check_op_time

DEFAULT_TIME_LIMIT_S = 30.0


@dataclasses.dataclass(frozen=True)
class LPBound:
    """What :func:`lp_lower_bound` found, times in seconds.

    Attributes:
      value_s: the bound: ``max(simple_s, path_s, lp_s)`` (``lp_s`` counted only if finite).
      simple_s: :func:`tf_autoplace.sim.bounds.lower_bound`.
      path_s: the path with transfers and windows, ``max_i min_d head + time + tail``
        (:func:`tf_autoplace.sim.bounds.device_heads_and_tails` with ``windows``).
      lp_s: the Lagrangian bound of HiGHS's duals (NaN when the LP gave none or was not
        solved).
      status: ``"optimal"``, ``"not needed"`` (nothing to solve), ``"dominated"`` (a
        fractional point meets every row at the known bound, so the LP cannot raise it and is
        not solved: :func:`_holds`), or why the LP part is weaker or missing (``"time
        limit"``, ``"no valid placement: ..."``, HiGHS's status).
      solve_s: wall-clock seconds HiGHS ran.
      rows, cols: size of the LP passed to HiGHS.
    """

    value_s: float
    simple_s: float
    path_s: float
    lp_s: float
    status: str
    solve_s: float
    rows: int
    cols: int


def device_classes(op_time: np.ndarray) -> np.ndarray:
    """[D] int class of each device: devices with identical ``op_time`` columns share one,
    numbered in order of first appearance."""
    seen: dict[bytes, int] = {}
    return np.array([seen.setdefault(op_time[:, d].tobytes(), len(seen))
                     for d in range(op_time.shape[1])], dtype=np.int64)


@dataclasses.dataclass
class LinearModel:
    """An LP in HiGHS's form, built row by row as COO triplets."""

    num_cols: int
    rows: list = dataclasses.field(default_factory=list)
    cols: list = dataclasses.field(default_factory=list)
    vals: list = dataclasses.field(default_factory=list)
    lower: list = dataclasses.field(default_factory=list)
    upper: list = dataclasses.field(default_factory=list)
    num_rows: int = 0

    def add(self, row, col, val):
        """Entries of rows numbered from ``num_rows`` (``row`` is relative)."""
        self.rows.append(self.num_rows + np.asarray(row, np.int64))
        self.cols.append(np.asarray(col, np.int64))
        self.vals.append(np.asarray(val, np.float64))

    def close(self, lower, upper):
        """Finish the rows just added with their bounds."""
        self.lower.append(np.asarray(lower, np.float64))
        self.upper.append(np.asarray(upper, np.float64))
        self.num_rows += len(self.lower[-1])

    def arrays(self):
        return (np.concatenate(self.rows), np.concatenate(self.cols),
                np.concatenate(self.vals), np.concatenate(self.lower),
                np.concatenate(self.upper))


def lp_lower_bound(graph: OpGraph, cluster: Cluster, op_time: np.ndarray, *,
                   time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> LPBound:
    """A makespan no valid placement of ``graph`` on ``cluster`` can beat (module docstring).

    Args:
      op_time: [n, D] float64 seconds per op and device, ``inf`` where there is no kernel.
      time_limit_s: HiGHS's time limit; a stopped solve still gives a proven (weaker) bound.
    """
    if not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0):
        raise ConfigError(f"time_limit_s must be a number > 0, got {time_limit_s!r}")
    op_time = check_op_time(graph, cluster, op_time)
    simple = lower_bound(graph, cluster, op_time)
    # The path with windows is the bound; the LP's path rows take the heads without them,
    # which give HiGHS less to do for about the same optimum (module docstring).
    head, tail, runs = device_heads_and_tails(graph, cluster, op_time, windows=True)
    path = float((head + runs + tail).min(axis=1).max())
    del head, tail, runs  # (not held beside the next three)
    head, tail, runs = device_heads_and_tails(graph, cluster, op_time)
    through = head + runs + tail  # [n, D]: op i on d, from 0 to the end of the step at least
    del head, tail, runs  # (n x D each: on a large graph, memory the LP's arrays can use)
    known = max(simple, path)

    def result(lp_s=math.nan, status="not needed", solve_s=0.0, rows=0, cols=0):
        value = max(known, lp_s) if math.isfinite(lp_s) else known
        return LPBound(value_s=float(value), simple_s=float(simple), path_s=path,
                       lp_s=float(lp_s), status=status, solve_s=solve_s, rows=rows, cols=cols)

    if not known > 0 or not math.isfinite(known):
        return result()
    built = _build(graph, cluster, op_time, through, scale=known)
    if isinstance(built, str):
        return result(status=built)
    model, num_boxed, points, sends = built
    if _holds(model, points, sends):
        return result(status="dominated", rows=model.num_rows + len(sends.y_col)
                      + len(sends.buses), cols=model.num_cols)
    sends.add_to(model)
    start = time.perf_counter()
    lp_value, status = _solve(model, num_boxed, time_limit_s)
    return result(lp_s=lp_value * known, status=status, solve_s=time.perf_counter() - start,
                  rows=model.num_rows, cols=model.num_cols)


def _build(graph, cluster, op_time, through, *, scale):
    """The LP of the module docstring with times divided by ``scale`` (a known bound, so the
    optimum is near 1), as ``(model, number of columns in [0, 1], points, sends)``: the
    ``x`` columns, then the ``y`` columns, then ``T``; the model has every row but the send
    rows, which ``sends.add_to`` adds. ``points`` are candidates for :func:`_holds`,
    each with ``T = 1``: first every group wholly on its class of least work among those
    where no op's path row exceeds 1 (all its allowed classes if there is none), then for
    each class the same with every group that may go there on it, each with the least ``y``
    its sends need. A string instead says why no valid placement exists."""
    classes = device_classes(op_time)
    num_classes = int(classes.max()) + 1
    first = np.array([np.flatnonzero(classes == k)[0] for k in range(num_classes)])
    executor, cores = cluster.executors()
    size = np.array([cores[np.unique(executor[classes == k])].sum()
                     for k in range(num_classes)], np.float64)  # cores per class
    t = op_time[:, first] / scale                                     # [n, K]
    coloc = graph.colocation.astype(np.int64)
    num_groups = int(coloc.max()) + 1
    persistent = np.bincount(coloc, weights=graph.persistent_bytes.astype(np.float64),
                             minlength=num_groups)
    largest = np.array([cluster.memory[classes == k].max() for k in range(num_classes)], float)
    allowed = np.ones((num_groups, num_classes), bool)
    np.logical_and.at(allowed, coloc, np.isfinite(t))
    allowed &= persistent[:, None] <= largest[None, :]
    if not allowed.any(axis=1).all():
        c = int(np.flatnonzero(~allowed.any(axis=1))[0])
        op = graph.names[int(np.flatnonzero(coloc == c)[0])]
        return (f"no valid placement: the colocation group of op {op!r} fits no device (kernels "
                f"or {format_bytes(persistent[c])} of variables)")
    # The least path through op i on a device of each class; a class where some op of a group
    # has none (a neighbour it must share a device with cannot go there) holds no placement.
    path = np.stack([through[:, classes == k].min(axis=1) for k in range(num_classes)],
                    axis=1) / scale
    reach = np.ones((num_groups, num_classes), bool)
    np.logical_and.at(reach, coloc, np.isfinite(path))
    allowed &= reach
    if not allowed.any(axis=1).all():
        c = int(np.flatnonzero(~allowed.any(axis=1))[0])
        op = graph.names[int(np.flatnonzero(coloc == c)[0])]
        return f"no valid placement: the colocation group of op {op!r} can run on no device"
    work = np.zeros((num_groups, num_classes))
    np.add.at(work, coloc, np.where(np.isfinite(t), t, 0.0))

    xg, xk = np.nonzero(allowed)
    num_x = len(xg)
    x_of = np.full((num_groups, num_classes), -1, np.int64)
    x_of[xg, xk] = np.arange(num_x)
    sends = _sends(graph, cluster, classes, allowed, scale)
    num_y = len(sends[0])
    col_t = num_x + num_y
    model = LinearModel(num_cols=col_t + 1)

    model.add(xg, np.arange(num_x), np.ones(num_x))
    model.close(np.ones(num_groups), np.ones(num_groups))
    model.add(xk, np.arange(num_x), work[xg, xk])
    model.add(np.arange(num_classes), np.full(num_classes, col_t), -size)
    model.close(np.full(num_classes, -np.inf), np.zeros(num_classes))
    capacity = np.bincount(classes, weights=cluster.memory.astype(np.float64),
                           minlength=num_classes)
    tight = np.flatnonzero(persistent.sum() > capacity)
    if len(tight):
        row_of = np.full(num_classes, -1)
        row_of[tight] = np.arange(len(tight))
        keep = row_of[xk] >= 0
        model.add(row_of[xk[keep]], np.flatnonzero(keep), persistent[xg[keep]] / capacity[xk[keep]])
        model.close(np.full(len(tight), -np.inf), np.ones(len(tight)))

    p_allowed = np.where(allowed[coloc], path, -np.inf)
    ops = np.flatnonzero(p_allowed.max(axis=1) > 1.0)
    op_rows, op_k = np.nonzero(np.isfinite(p_allowed[ops]))
    model.add(op_rows, x_of[coloc[ops[op_rows]], op_k], path[ops[op_rows], op_k])
    model.add(np.arange(len(ops)), np.full(len(ops), col_t), -np.ones(len(ops)))
    model.close(np.full(len(ops), -np.inf), np.zeros(len(ops)))
    # The send rows (module docstring) are added only if HiGHS is to run (_Sends).
    y_class, y_group, y_cost, row_y, row_v = sends
    k_of = y_class[row_y]
    sending = np.unique(y_class)
    bus_row = np.full(num_classes, -1)
    bus_row[sending] = np.arange(len(sending))
    send_rows = _Sends(  # (int32: on a graph of 85k ops these are the LP's largest arrays)
        y_col=(num_x + row_y).astype(np.int32), src_col=x_of[y_group[row_y], k_of].astype(
            np.int32), dst_col=x_of[row_v, k_of].astype(np.int32),
        bus_row=bus_row[y_class], cost=y_cost,
        buses=np.bincount(classes)[sending].astype(np.float64), col_t=col_t)
    del y_class, y_group, row_y, row_v, k_of
    cost = np.where(allowed, work, np.inf)
    short = np.ones((num_groups, num_classes), bool)  # every op's path through K within T = 1
    np.logical_and.at(short, coloc, path <= 1.0)
    short &= allowed
    cost = np.where(short.any(axis=1)[:, None] & ~short, np.inf, cost)
    points = []
    for first in [None] + list(range(num_classes)):
        # Each group on its least work, or on class ``first`` wherever its paths allow it.
        choice = cost.argmin(axis=1)
        if first is not None:
            choice = np.where(short[:, first], first, choice)
        point = np.zeros(col_t + 1)
        point[x_of[np.arange(num_groups), choice]] = 1.0
        point[col_t] = 1.0
        send_rows.fill(point)
        points.append(point)
    return model, col_t, points, send_rows


@dataclasses.dataclass(frozen=True)
class _Sends:
    """The send rows of the LP (module docstring, "sends"), kept apart from the model until
    HiGHS is to run: on a graph of 85k ops they are most of the LP, and mostly not needed.

    Attributes:
      y_col, src_col, dst_col: [R] per row ``y >= x[src] - x[dst]``, the columns (``dst_col``
        -1 where the reader's group may not go to the class: that ``x`` is 0).
      bus_row, cost: [Y] per ``y`` column (the ``Y`` columns just before ``col_t``), the bus
        row it loads and by how much.
      buses: [B] the devices of each class with a bus row; col_t: the column of ``T``.
    """

    y_col: np.ndarray
    src_col: np.ndarray
    dst_col: np.ndarray
    bus_row: np.ndarray
    cost: np.ndarray
    buses: np.ndarray
    col_t: int

    def fill(self, point: np.ndarray) -> None:
        """Set the ``y`` of ``point`` to the least its rows allow: a tensor is sent out of
        its producer's class as much as some reader sits elsewhere."""
        gap = point[self.src_col] - np.where(self.dst_col >= 0, point[self.dst_col], 0.0)
        np.maximum.at(point, self.y_col, gap)

    def bus_activity(self, point: np.ndarray) -> np.ndarray:
        """[B] each bus row's ``sum s y - B_K T`` at ``point`` (the row holds at <= 0)."""
        first = self.col_t - len(self.cost)
        return (np.bincount(self.bus_row, weights=self.cost * point[first:self.col_t],
                            minlength=len(self.buses)) - self.buses * point[self.col_t])

    def add_to(self, model: LinearModel) -> None:
        """Append the rows to ``model``."""
        rows = np.arange(len(self.y_col))
        there = self.dst_col >= 0
        model.add(rows, self.y_col, np.ones(len(rows)))
        model.add(rows, self.src_col, -np.ones(len(rows)))
        model.add(rows[there], self.dst_col[there], np.ones(int(there.sum())))
        model.close(np.zeros(len(rows)), np.full(len(rows), np.inf))
        num = len(self.buses)
        model.add(self.bus_row, self.col_t - len(self.cost) + np.arange(len(self.cost)),
                  self.cost)
        model.add(np.arange(num), np.full(num, self.col_t), -self.buses)
        model.close(np.full(num, -np.inf), np.zeros(num))


def _sends(graph, cluster, classes, allowed, scale):
    """The transfer columns of the LP: ``(class, group, cost, row_y, row_v)``. Column j stands
    for tensor sends out of class ``class[j]`` of one tensor whose producer is in colocation
    group ``group[j]`` (where that group may run on the class); ``cost[j]`` is the least time
    such a send holds its source's bus (``latency + bytes / bandwidth`` over the ordered pairs
    of a device of the class and one outside it, divided by ``scale``); rows pair each column
    ``row_y`` with a consumer group ``row_v`` of the tensor other than the producer's. Only
    classes whose sends to every other device go over a bus have columns (a send between two
    core groups, or within one executor, is work on cores, which the load rows leave out)."""
    coloc = graph.colocation.astype(np.int64)
    src, dst = graph.edge_src.astype(np.int64), graph.edge_dst.astype(np.int64)
    apart = coloc[src] != coloc[dst]
    num_groups = int(coloc.max()) + 1 if len(coloc) else 1
    key = np.unique(graph.edge_tensor[apart].astype(np.int64) * num_groups + coloc[dst[apart]])
    tensors, row_tensor = np.unique(key // num_groups, return_inverse=True)
    readers = key % num_groups
    producer = coloc[graph.tensor_op[tensors]]
    nbytes = graph.tensor_bytes[tensors].astype(np.float64)
    executor, _ = cluster.executors()
    grouped = np.array([bool(d.core_group) for d in cluster.devices])
    out = [[], [], [], [], []]
    num_y = 0
    for k in range(int(classes.max()) + 1):
        inside, outside = np.flatnonzero(classes == k), np.flatnonzero(classes != k)
        core = ((executor[inside][:, None] == executor[outside][None, :])
                | (grouped[inside][:, None] & grouped[outside][None, :]))
        if not len(outside) or core.any():
            continue
        cost = np.full(len(tensors), np.inf)
        for d in inside:
            for e in outside:
                cost = np.minimum(cost, cluster.latency[d, e] + nbytes / cluster.bandwidth[d, e])
        sent = np.flatnonzero(allowed[producer, k])
        column = np.full(len(tensors), -1)
        column[sent] = num_y + np.arange(len(sent))
        rows = np.flatnonzero(column[row_tensor] >= 0)
        out[0].append(np.full(len(sent), k))
        out[1].append(producer[sent])
        out[2].append(cost[sent] / scale)
        out[3].append(column[row_tensor[rows]])
        out[4].append(readers[rows])
        num_y += len(sent)
    if not out[0]:
        return tuple(np.zeros(0, dtype) for dtype in (np.int64, np.int64, float, np.int64,
                                                        np.int64))
    return tuple(np.concatenate(parts) for parts in out)


def _holds(model: LinearModel, points: list[np.ndarray], sends: _Sends) -> bool:
    """Whether some point on a segment from ``points[0]`` to one of the others meets every
    row of ``model`` and of ``sends`` (the rows are linear, so along a segment each row holds
    on an interval; each point's ``y`` meets its send rows, so every point between two does).
    When one does at ``T = 1`` (the known bound), the LP's optimum is at most the known bound
    and cannot raise it, so it is not solved: on most graphs the path, not the load, limits
    the step, and HiGHS's solve of a graph of 85k ops takes a second and more memory than
    any other stage after ingestion. The known bound is proven on its own, so a rounding
    error here can only leave the bound that much looser than the LP's, never make it
    wrong."""
    rows, cols, vals, row_lo, row_up = model.arrays()
    act = [np.append(np.bincount(rows, weights=vals * z[cols], minlength=model.num_rows),
                     sends.bus_activity(z)) for z in points]
    row_lo = np.append(row_lo, np.full(len(sends.buses), -np.inf))
    row_up = np.append(row_up, np.zeros(len(sends.buses)))
    for other in act[1:] or act[:1]:
        # At s in [0, 1] the activity is act[0] + s * slope: each row bounds s.
        slope = other - act[0]
        if ((slope == 0) & ((act[0] < row_lo) | (act[0] > row_up))).any():
            continue
        up, down = slope > 0, slope < 0
        lo = max(0.0, np.max((row_lo - act[0])[up] / slope[up], initial=-np.inf),
                 np.max((row_up - act[0])[down] / slope[down], initial=-np.inf))
        hi = min(1.0, np.min((row_up - act[0])[up] / slope[up], initial=np.inf),
                 np.min((row_lo - act[0])[down] / slope[down], initial=np.inf))
        if lo <= hi:
            return True
    return False


def highs_solver(model: LinearModel, cost, col_lo, col_up, *, time_limit_s: float,
                 integer=None, options=()):
    """A silent single-threaded HiGHS solver holding ``min cost.z`` over ``model``'s rows and
    the column boxes ``[col_lo, col_up]`` (``integer``: [cols] bool, integer columns), with
    the time limit and further ``(option, value)`` pairs set; not yet run. Returns
    ``(solver, rows, cols, vals, row_lo, row_up)``, the matrix sorted by column."""
    rows, cols, vals, row_lo, row_up = model.arrays()
    order = np.lexsort((rows, cols))
    rows, cols, vals = rows[order], cols[order], vals[order]
    ncol, nrow = model.num_cols, model.num_rows
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = ncol, nrow
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost, col_lo, col_up
    lp.row_lower_, lp.row_upper_ = row_lo, row_up
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.searchsorted(cols, np.arange(ncol + 1)).astype(np.int32)
    lp.a_matrix_.index_ = rows.astype(np.int32)
    lp.a_matrix_.value_ = vals
    if integer is not None:
        lp.integrality_ = [highspy.HighsVarType.kInteger if b else
                           highspy.HighsVarType.kContinuous for b in integer]
    # highspy.Highs, the Python wrapper, prints HiGHS's banner on stdout the first time a process
    # builds one, before silent() can act: a line in the user's program output. The core class
    # it wraps prints nothing and has every method used here (the wrapper is the fallback
    # should a later highspy rename it).
    solver = getattr(highspy, "_Highs", highspy.Highs)()
    solver.setOptionValue("output_flag", False)
    solver.setOptionValue("time_limit", float(time_limit_s))
    solver.setOptionValue("threads", 1)
    for name, value in options:
        solver.setOptionValue(name, value)
    solver.passModel(lp)
    return solver, rows, cols, vals, row_lo, row_up


def _solve(model: LinearModel, num_x: int, time_limit_s: float) -> tuple[float, str]:
    """Solve with HiGHS and return ``(certified value, status)`` (module docstring, "Proof of
    the number reported"); the value is NaN when HiGHS gave no duals."""
    ncol = model.num_cols
    cost = np.zeros(ncol)
    cost[-1] = 1.0
    col_lo = np.zeros(ncol)
    col_up = np.concatenate([np.ones(num_x), [np.inf]])
    solver, rows, cols, vals, row_lo, row_up = highs_solver(model, cost, col_lo, col_up,
                                                            time_limit_s=time_limit_s)
    solver.run()
    status = solver.getModelStatus()
    name = ("optimal" if status == highspy.HighsModelStatus.kOptimal
            else solver.modelStatusToString(status).lower())
    solution = solver.getSolution()
    if not solution.dual_valid:
        return math.nan, f"{name}: HiGHS gave no duals"
    upper_t = 2.0 * max(1.0, float(solver.getInfo().objective_function_value))
    col_up[-1] = upper_t
    value = lagrangian_bound(rows, cols, vals, np.asarray(solution.row_dual), cost, col_lo,
                             col_up, row_lo, row_up)
    return min(value, upper_t), name


def lagrangian_bound(rows, cols, vals, y, cost, col_lo, col_up, row_lo, row_up) -> float:
    """``L(y)`` of the module docstring for ``min cost.z`` s.t. ``row_lo <= A z <= row_up``,
    ``col_lo <= z <= col_up`` (finite boxes), A in COO form, minus a float64 rounding
    allowance: at most every objective value of a feasible ``z``."""
    y = np.array(y, np.float64)
    y[(y > 0) & ~np.isfinite(row_lo)] = 0.0
    y[(y < 0) & ~np.isfinite(row_up)] = 0.0
    y[~np.isfinite(y)] = 0.0
    num_cols = len(cost)
    reduced = cost - np.bincount(cols, weights=vals * y[rows], minlength=num_cols)
    col_terms = np.minimum(reduced * col_lo, reduced * col_up)
    row_terms = np.where(y > 0, y * np.where(y > 0, row_lo, 0.0),
                         y * np.where(y < 0, row_up, 0.0))
    value = float(col_terms.sum() + row_terms.sum())
    # Each reduced cost sums at most (entries in its column + 1) products; each total adds
    # its terms: bound the float64 error of both by a generous multiple of eps.
    per_col = np.bincount(cols, minlength=num_cols)
    magnitude = np.abs(cost) + np.bincount(cols, weights=np.abs(vals * y[rows]),
                                           minlength=num_cols)
    box = np.maximum(np.abs(col_lo), np.abs(col_up))
    eps = np.finfo(np.float64).eps
    terms = len(col_terms) + len(row_terms)
    allowance = 4 * eps * (float(((per_col + 1) * magnitude * box).sum())
                           + terms * float(np.abs(col_terms).sum() + np.abs(row_terms).sum()))
    return value - allowance
