"""The best placement of a small problem, or the best found and a proven bound, with HiGHS.

:func:`solve_placement` searches the placements of a problem's groups (every op of a group on
one device) for the one with the shortest *simulated* step, and proves how close it is: it
returns the fastest placement it simulated and a bound no valid placement that fits in memory
can beat in the simulator. When the two meet, the placement is optimal under the simulator's
cost model. It proves optimality on problems of tens of groups and up to a few hundred ops; on larger
ones its bound still holds (with fewer or no disjunctive pairs).

The scheduling MILP (a relaxation of the simulator)
---------------------------------------------------
The simulator (:mod:`tf_autoplace.sim.simulator`) schedules a placement with FIFO queues; no
integer program can follow those queues exactly. The MILP below lets the schedule be chosen
freely instead, within the simulator's hard rules, so its optimum is at most the simulated
step of every placement. Notation: ops ``i``, groups ``g(i)``, devices ``d``, ``t[i, d]`` op
times (s), ``h``, ``q`` the heads and tails of
:func:`tf_autoplace.sim.bounds.device_heads_and_tails` (per op and device, with windows),
``U`` the step of the fastest placement known so far (all times are divided by ``U`` before
HiGHS sees them). Variables:

* ``x[g, d]`` binary: group g on device d (only where every op of g has a kernel on d, d's
  memory holds g's persistent bytes and every op of g has a finite head on d); ``T`` the
  step; ``s_i`` op i's start, ``sum_d h[i, d] x[g(i), d] <= s_i``; ``p_i = sum_d t[i, d]
  x[g(i), d]`` (an expression, not a variable).
* ``z[g, k]`` in [0, 1] for two groups joined by an edge or sharing a disjunctive pair:
  ``|x[g, d] - x[k, d]| <= z <= 2 - x[g, d] - x[k, d]`` for every d, so at integer ``x`` it is
  1 exactly when the two groups are apart.
* ``y[i, j]`` binary for the *disjunctive pairs*: two ops that may share a device, both with a
  positive time, neither reachable from the other in the graph.
* ``v[k, d]`` in [0, 1], tensor k leaves device d (bus rows, below).

Rows: ``sum_d x[g, d] = 1``; ``s_i + sum_d (t[i, d] + q[i, d]) x[g(i), d] <= T``; for every
edge ``j -> i`` (data or control) ``s_i >= s_j + p_j + m_ji z[g(j), g(i)]`` with ``m_ji``
the shortest ``latency + bytes / bandwidth`` over pairs of distinct devices for the largest
tensor j sends i (0 bytes for a control edge), no ``z`` term within a group; for every
disjunctive pair, with ``U`` as big-M, ``s_j >= s_i + p_i - U (1 - y) - U z`` and ``s_i >=
s_j + p_j - U y - U z`` (with core groups in the cluster, ``1 - w`` in place of ``z``, where
``w[i, j] >= x[g(i), d] + x[g(j), d] - 1`` for each device d outside a core group: two ops on
a device of a core group may run at once); per executor ``E`` with ``c`` cores ``sum_{d in E}
sum_i t[i, d] x[g(i), d] <= c T``; per device ``sum_g persistent[g] x[g, d] <= memory[d]``;
when every executor is one device, per device ``sum_k b_k v[k, d] <= T`` with ``v[k, d] >=
z[g(k), g(c)] + x[g(k), d] - 1`` for each consumer ``c`` of tensor k in another group and
``b_k`` the shortest time to send k from d; ``T <= U``.
Minimise ``T``.

Why it is a relaxation (what is proven). Take any placement ``p`` that keeps groups whole,
respects kernels and fits memory in the simulator, with simulated step ``M <= U``, and set
``x`` from ``p``, ``s_i`` to the simulated starts, ``T = M``, ``y`` by which op of a pair the
simulator ran first. Every row holds: an op starts after its inputs arrive, and a tensor from
another device arrives no sooner than ``latency + bytes / bandwidth`` after its producer ends;
a device outside a core group runs one op at a time, so two ops on it do not overlap; each
executor's cores are busy at most ``c M``; persistent bytes count on their device all step;
the heads and tails hold in every valid placement (their proof); a device's outgoing bus
carries one transfer at a time, at least one for every tensor with a consumer on another
device. So ``M`` is at least the MILP's optimum (and at least the dual bound of any stopped
solve). Where the MILP is looser than the simulator: it picks the best order of ops on a
device (the simulator takes them first come, first served); transfers queue on a bus only
through the bus-load row, not in time (between two core groups the simulator runs a transfer
on the sending group's core, beside its ops, which the MILP does not charge there); a tensor
sent twice counts once; transient memory is not counted; and core groups (several devices on
shared cores) get only their load row, no disjunctions. Pairs are drawn only among the ``PAIR_OPS`` longest ops, and beyond
``max_pairs`` those with the smallest times are dropped, which only loosens it.

From a relaxation to an exact answer
------------------------------------
A placement the MILP finds is simulated; the fastest that fits is kept as ``U``. Then that
placement is cut off (``sum over its (g, d) of x[g, d] <= G - 1``) and the MILP is solved again:
every placement cut off has been simulated, and every other one simulates no faster than the
new MILP's bound. The loop ends when the MILP's bound reaches ``U`` (or the MILP has no
solution left under ``T <= U``): then no placement simulates faster than ``U``, and the
placement is optimal. A time limit ends it earlier with ``bound_s = min(U, bound of the last
solve)``, which is still proven. HiGHS's improving solutions of a solve are all simulated, not
only its last.

Interchangeable devices (equal op times, memory and links, each its own executor) give many
placements with one simulated step: relabelling such devices changes nothing in the simulator
but the names. The MILP keeps one of each: group g may use the k-th device of a class only if
an earlier group uses the (k-1)-th. The brute-force test checks this claim on small problems.

Numbers: HiGHS works to tolerances (1e-9 on the scaled rows here, its MIP gap 1e-6); the bound
returned is HiGHS's dual bound lowered by 1e-6 of ``U``, so it is proven up to those
tolerances, not in exact arithmetic as :mod:`tf_autoplace.sim.lp_bound` is.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time

import highspy
import numpy as np

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.errors import ConfigError, InfeasiblePlacementError
from tf_autoplace.graph.opgraph import OpGraph
from tf_autoplace.sim.bounds import _edge_gaps, device_heads_and_tails
from tf_autoplace.sim.lp_bound import LinearModel, highs_solver, lp_lower_bound
from tf_autoplace.sim.simulator import Simulator, check_op_time

DEFAULT_TIME_LIMIT_S = 60.0
DEFAULT_MAX_PAIRS = 20_000
PAIR_OPS = 2_000  # disjunctive pairs are drawn among this many ops, the longest
SAFETY = 1e-6  # of U, taken off HiGHS's dual bound


@dataclasses.dataclass(frozen=True)
class ExactResult:
    """What :func:`solve_placement` found, times in seconds.

    Attributes:
      devices: [n] int32, the fastest placement simulated that fits in memory.
      step_s: its simulated step.
      bound_s: no valid placement of the problem's groups that fits in memory simulates
        faster (module docstring); at most ``step_s``.
      optimal: ``bound_s`` reached ``step_s``: ``devices`` is optimal.
      status: ``"optimal"``, ``"time limit"``, ``"solve limit"``, or why the search stopped.
      solves: MILPs solved (one per placement cut off, plus the first).
      simulated: placements the MILPs gave that were simulated.
      seconds: wall time of the call.
      rows, cols, pairs: size of the first MILP and its disjunctive pairs.
    """

    devices: np.ndarray
    step_s: float
    bound_s: float
    optimal: bool
    status: str
    solves: int
    simulated: int
    seconds: float
    rows: int
    cols: int
    pairs: int

    @property
    def gap(self) -> float:
        """``step_s / bound_s - 1``: how much slower than optimal ``devices`` may be."""
        return self.step_s / self.bound_s - 1.0 if self.bound_s > 0 else (
            0.0 if self.step_s == 0 else math.inf)


def interchangeable(cluster: Cluster, op_time: np.ndarray) -> list[list[int]]:
    """Classes of devices that relabelling leaves the simulator blind to: equal ``op_time``
    columns and memory, each device its own one-core executor, and swapping any two of a class
    leaves the latency and bandwidth matrices as they are. Each class ascending, classes by
    their first device."""
    executor, cores = cluster.executors()
    own = [int(np.sum(executor == executor[d])) == 1 and cores[executor[d]] == 1
           for d in range(cluster.num_devices)]
    classes: list[list[int]] = []
    for d in range(cluster.num_devices):
        for cls in classes:
            e = cls[0]
            if (own[d] and own[e] and cluster.memory[d] == cluster.memory[e]
                    and np.array_equal(op_time[:, d], op_time[:, e])
                    and all(_swap_invariant(cluster, d, f) for f in cls)):
                cls.append(d)
                break
        else:
            classes.append([d])
    return classes


def _swap_invariant(cluster: Cluster, a: int, b: int) -> bool:
    perm = np.arange(cluster.num_devices)
    perm[[a, b]] = perm[[b, a]]
    return all(np.array_equal(m[np.ix_(perm, perm)], m)
               for m in (np.asarray(cluster.latency), np.asarray(cluster.bandwidth),
                         np.asarray(cluster.delay)))


def _reachable(graph: OpGraph, src: np.ndarray, dst: np.ndarray,
               among: np.ndarray) -> np.ndarray:
    """[n, k] bool, ``r[i, a]``: a path leads from op i to op ``among[a]`` (i != among[a])."""
    n = graph.num_ops
    column = np.full(n, -1, np.int64)
    column[among] = np.arange(len(among))
    reach = np.zeros((n, len(among)), bool)
    children = [[] for _ in range(n)]
    for a, b in zip(src.tolist(), dst.tolist()):
        children[a].append(b)
    for i in graph.topological_order()[::-1].tolist():
        for c in children[i]:
            if column[c] >= 0:
                reach[i, column[c]] = True
            reach[i] |= reach[c]
    return reach


@dataclasses.dataclass
class _Milp:
    """The MILP of the module docstring with its column indices."""

    model: LinearModel
    integer: np.ndarray    # [cols] bool
    col_lo: np.ndarray
    col_up: np.ndarray
    x_of: np.ndarray       # [G, D] column of x[g, d], -1 where not allowed
    col_t: int
    s_col: np.ndarray      # [n]
    pair_cols: dict        # (g, k) -> z column
    y_pairs: list          # (i, j, column)
    bus: list              # (tensor's producer group, consumer groups, [D] v columns)
    pairs: int


def _build(graph, cluster, op_time, labels, scale, max_pairs, classes):
    n, num_dev = graph.num_ops, cluster.num_devices
    num_groups = int(labels.max()) + 1
    t = op_time / scale
    head, tail, _ = device_heads_and_tails(graph, cluster, op_time, windows=True)
    src, dst, gap, _, fastest = _edge_gaps(graph, cluster, op_time)
    persistent = np.bincount(labels, weights=graph.persistent_bytes.astype(np.float64),
                             minlength=num_groups)
    allowed = np.ones((num_groups, num_dev), bool)
    np.logical_and.at(allowed, labels, np.isfinite(op_time))
    allowed &= persistent[:, None] <= cluster.memory[None, :].astype(np.float64)
    np.logical_and.at(allowed, labels, np.isfinite(head))  # no valid placement elsewhere
    if not allowed.any(axis=1).all():
        g = int(np.flatnonzero(~allowed.any(axis=1))[0])
        op = graph.names[int(np.flatnonzero(labels == g)[0])]
        raise InfeasiblePlacementError(
            f"no device can hold the group of op {op!r} (kernels or "
            f"{persistent[g] / 1e9:.2f} GB of variables)")

    cols = itertools.count()
    x_of = np.full((num_groups, num_dev), -1, np.int64)
    for g, d in zip(*np.nonzero(allowed)):
        x_of[g, d] = next(cols)
    num_x = int(allowed.sum())
    col_t = next(cols)
    s_col = np.array([next(cols) for _ in range(n)], np.int64)
    integer, col_lo, col_up = [True] * num_x + [False], [0.0] * num_x + [0.0], \
        [1.0] * num_x + [1.0]
    head_on = np.where(allowed[labels], head, np.inf)  # [n, D] where op i may run
    col_lo += (head_on.min(axis=1) / scale).tolist()
    col_up += [1.0] * n
    integer += [False] * n

    def new_col(lo, up, is_int):
        col_lo.append(lo)
        col_up.append(up)
        integer.append(is_int)
        return next(cols)

    model = LinearModel(num_cols=0)
    r = []  # rows as (cols, vals, lo, up)

    def p_terms(i):
        g = labels[i]
        ds = np.flatnonzero(allowed[g])
        return x_of[g, ds].tolist(), t[i, ds].tolist()

    for g in range(num_groups):
        c = x_of[g, allowed[g]].tolist()
        r.append((c, [1.0] * len(c), 1.0, 1.0))
    # Symmetry: the k-th device of a class only after an earlier group used the (k-1)-th.
    for cls in classes:
        for prev, d in zip(cls, cls[1:]):
            for g in range(num_groups):
                if x_of[g, d] < 0:
                    continue
                earlier = [x_of[h, prev] for h in range(g) if x_of[h, prev] >= 0]
                r.append(([x_of[g, d]] + earlier, [1.0] + [-1.0] * len(earlier), -np.inf, 0.0))
    for i in range(n):
        g = labels[i]
        ds = np.flatnonzero(allowed[g])
        c = x_of[g, ds].tolist()
        # s_i + t[i, d] + q[i, d] <= T and s_i >= h[i, d] for the device d op i is on.
        r.append(([s_col[i], col_t] + c, [1.0, -1.0] + (t[i, ds] + tail[i, ds] / scale).tolist(),
                  -np.inf, 0.0))
        if head[i, ds].max() > head[i, ds].min():
            r.append(([s_col[i]] + c, [1.0] + (-head[i, ds] / scale).tolist(), 0.0, np.inf))

    pair_cols: dict = {}

    def z(g, k):
        key = (min(g, k), max(g, k))
        if key not in pair_cols:
            col = new_col(0.0, 1.0, False)
            pair_cols[key] = col
            for d in range(num_dev):
                a, b = x_of[key[0], d], x_of[key[1], d]
                terms = [(a, 1.0)] if a >= 0 else []
                terms += [(b, 1.0)] if b >= 0 else []
                if a >= 0 or b >= 0:  # z >= x[g,d] - x[k,d] and z >= x[k,d] - x[g,d]
                    for sign_a, sign_b in ((1.0, -1.0), (-1.0, 1.0)):
                        cc, vv = [col], [1.0]
                        if a >= 0:
                            cc.append(a)
                            vv.append(-sign_a)
                        if b >= 0:
                            cc.append(b)
                            vv.append(-sign_b)
                        r.append((cc, vv, 0.0, np.inf))
                if a >= 0 and b >= 0:  # z <= 2 - x[g,d] - x[k,d]
                    r.append(([col, a, b], [1.0, 1.0, 1.0], -np.inf, 2.0))
        return pair_cols[key]

    for j, i, m in zip(src.tolist(), dst.tolist(), gap.tolist()):
        cj, vj = p_terms(j)
        cc, vv = [s_col[i], s_col[j]] + cj, [1.0, -1.0] + [-x for x in vj]
        if labels[i] != labels[j] and math.isfinite(m) and m > 0:
            cc.append(z(labels[i], labels[j]))
            vv.append(-m / scale)
        r.append((cc, vv, 0.0, np.inf))

    # Disjunctive pairs on one-core, one-device executors.
    executor, cores = cluster.executors()
    solo = np.array([cores[executor[d]] == 1 and np.sum(executor == executor[d]) == 1
                     for d in range(num_dev)])
    shareable = allowed & solo[None, :]
    cand = np.flatnonzero(fastest > 0)
    if max_pairs == 0:
        cand = cand[:0]
    if len(cand) > PAIR_OPS:
        cand = np.sort(cand[np.argsort(-fastest[cand], kind="stable")[:PAIR_OPS]])
    reach = _reachable(graph, src, dst, cand)  # [n, len(cand)]
    pairs = []
    for a_pos, i in enumerate(cand.tolist()):
        b = np.arange(a_pos + 1, len(cand))
        js = cand[b]
        js = js[~reach[i, b] & ~reach[js, a_pos]]
        js = js[(shareable[labels[i]][None, :] & shareable[labels[js]]).any(axis=1)]
        pairs.extend((min(fastest[i], fastest[j]), i, int(j)) for j in js.tolist())
    if len(pairs) > max_pairs:
        pairs.sort(reverse=True)
        pairs = pairs[:max_pairs]
    y_pairs = []
    for _, i, j in pairs:
        y = new_col(0.0, 1.0, True)
        y_pairs.append((i, j, y))
        ci, vi = p_terms(i)
        cj, vj = p_terms(j)
        if solo.all():  # "apart" is z (0 within a group): the pair is ordered unless apart
            off = [] if labels[i] == labels[j] else [z(labels[i], labels[j])]
            rhs = 0.0
        else:  # ordered only on one device outside a core group: w = 1 there
            w = new_col(0.0, 1.0, False)
            for d in np.flatnonzero(shareable[labels[i]] & shareable[labels[j]]).tolist():
                a, b = x_of[labels[i], d], x_of[labels[j], d]
                if a == b:
                    r.append(([w, a], [1.0, -1.0], 0.0, np.inf))
                else:  # w >= x[g(i), d] + x[g(j), d] - 1
                    r.append(([w, a, b], [1.0, -1.0, -1.0], -1.0, np.inf))
            off, rhs = [w], -1.0  # U (1 - w) in place of U z
        sign = 1.0 if solo.all() else -1.0
        # s_j - s_i - p_i - y + z >= -1   (i first when y = 1, unless apart)
        r.append(([s_col[j], s_col[i]] + ci + [y] + off,
                  [1.0, -1.0] + [-x for x in vi] + [-1.0] + [sign] * len(off), -1.0 + rhs,
                  np.inf))
        # s_i - s_j - p_j + y + z >= 0    (j first when y = 0, unless apart)
        r.append(([s_col[i], s_col[j]] + cj + [y] + off,
                  [1.0, -1.0] + [-x for x in vj] + [1.0] + [sign] * len(off), rhs, np.inf))

    for e in range(len(cores)):
        devs = np.flatnonzero(executor == e)
        cc, vv = [col_t], [-float(cores[e])]
        for i in range(n):
            for d in devs:
                if x_of[labels[i], d] >= 0 and t[i, d] > 0:
                    cc.append(x_of[labels[i], d])
                    vv.append(t[i, d])
        r.append((cc, vv, -np.inf, 0.0))
    for d in range(num_dev):
        c = x_of[:, d][x_of[:, d] >= 0]
        w = persistent[x_of[:, d] >= 0]
        if w.sum() > cluster.memory[d]:
            r.append((c.tolist(), (w / cluster.memory[d]).tolist(), -np.inf, 1.0))

    bus = []
    if solo.all() and num_dev > 1:
        bus = _bus_rows(graph, cluster, labels, scale, x_of, z, new_col, r, col_t)

    rows_i, cols_i, vals, lo, up = [], [], [], [], []
    for k, (cc, vv, a, b) in enumerate(r):
        rows_i.extend([k] * len(cc))
        cols_i.extend(cc)
        vals.extend(vv)
        lo.append(a)
        up.append(b)
    model.num_cols = next(cols)
    # one entry per (row, column): a group's ops add up in its x column
    key, inverse = np.unique(np.array(rows_i, np.int64) * model.num_cols
                             + np.array(cols_i, np.int64), return_inverse=True)
    summed = np.bincount(inverse.ravel(), weights=np.array(vals), minlength=len(key))
    model.add(key // model.num_cols, key % model.num_cols, summed)
    model.close(np.array(lo), np.array(up))
    return _Milp(model=model, integer=np.array(integer), col_lo=np.array(col_lo),
                 col_up=np.array(col_up), x_of=x_of, col_t=col_t, s_col=s_col,
                 pair_cols=pair_cols, y_pairs=y_pairs, bus=bus, pairs=len(pairs))


def _bus_rows(graph, cluster, labels, scale, x_of, z, new_col, r, col_t):
    """Per device: the transfers leaving it fit in the step (one at a time on its bus)."""
    num_dev = cluster.num_devices
    out = []
    per_device = [[] for _ in range(num_dev)]
    # graph tensors, then each op's control dummy (0 bytes)
    items = []
    for key, dst, producer, nbytes in (
            (graph.edge_tensor, graph.edge_dst, graph.tensor_op, graph.tensor_bytes),
            (graph.ctrl_src, graph.ctrl_dst, np.arange(graph.num_ops), None)):
        order = np.argsort(key, kind="stable")
        bounds = np.searchsorted(key[order], np.arange(len(producer) + 1))
        for k in np.flatnonzero(np.diff(bounds)).tolist():
            consumers = np.unique(labels[dst[order[bounds[k]:bounds[k + 1]]]])
            items.append((int(producer[k]), 0.0 if nbytes is None else float(nbytes[k]),
                          consumers))
    for producer, nbytes, consumers in items:
        g = labels[producer]
        consumers = consumers[consumers != g]
        if not len(consumers):
            continue
        zs = [z(g, h) for h in consumers.tolist()]
        v_cols = np.full(num_dev, -1, np.int64)
        for d in range(num_dev):
            if x_of[g, d] < 0:
                continue
            cost = min(cluster.latency[d, e] + nbytes / cluster.bandwidth[d, e]
                       for e in range(num_dev) if e != d)
            if not cost > 0:
                continue
            v = new_col(0.0, 1.0, False)
            v_cols[d] = v
            for zc in zs:  # v >= z + x[g, d] - 1
                r.append(([v, zc, x_of[g, d]], [1.0, -1.0, -1.0], -1.0, np.inf))
            per_device[d].append((v, cost / scale))
        out.append((g, consumers, v_cols))
    for d in range(num_dev):
        if per_device[d]:
            cc = [v for v, _ in per_device[d]] + [col_t]
            vv = [c for _, c in per_device[d]] + [-1.0]
            r.append((cc, vv, -np.inf, 0.0))
    return out


def _group_devices(labels: np.ndarray, num_groups: int, devices: np.ndarray) -> np.ndarray:
    """[G] the device of each group of a placement that keeps every group whole."""
    first = np.full(num_groups, -1, np.int64)
    first[labels[::-1]] = devices[::-1]
    if not np.array_equal(first[labels], devices):
        raise ConfigError("a placement splits a group across devices")
    return first


def _canonical(devices_g: np.ndarray, classes) -> np.ndarray:
    """Relabel the devices of each interchangeable class in order of first use by group."""
    out = devices_g.copy()
    for cls in classes:
        if len(cls) < 2:
            continue
        used = []
        for d in devices_g.tolist():
            if d in cls and d not in used:
                used.append(d)
        mapping = dict(zip(used, cls))
        out = np.array([mapping.get(d, d) if d in cls else d for d in out.tolist()]) \
            if used else out
    return out


class _Searcher:
    """The loop of the module docstring: MILP, simulate, cut off, again."""

    def __init__(self, graph, cluster, op_time, labels, simulator, max_pairs, starts):
        self.graph, self.cluster, self.labels = graph, cluster, labels
        self.sim = simulator
        self.num_groups = int(labels.max()) + 1
        self.classes = interchangeable(cluster, op_time)
        self.best_step, self.best = math.inf, None
        self.simulated = 0
        self.seen: set = set()
        for start in starts:
            self.offer(self._group_devices(np.asarray(start)))
        if self.best is None:
            raise ConfigError("solve_placement needs at least one start placement that keeps "
                              "the groups whole and fits in memory")
        self.scale = self.best_step if self.best_step > 0 else 1.0
        self.milp = _build(graph, cluster, op_time, labels, self.scale, max_pairs, self.classes)

    def _group_devices(self, devices):
        return _group_devices(self.labels, self.num_groups, devices)

    def offer(self, group_devices) -> bool:
        """Simulate a group placement (once); keep it if it fits and is the fastest yet."""
        key = _canonical(group_devices, self.classes).tobytes()
        if key in self.seen:
            return False
        self.seen.add(key)
        devices = group_devices[self.labels].astype(np.int32)
        result = self.sim.run(devices)
        self.simulated += 1
        if (result.peak_memory <= self.cluster.memory).all() and result.makespan < self.best_step:
            self.best_step, self.best = result.makespan, devices
            return True
        return False

    def run(self, deadline, max_solves) -> tuple[float, str, int]:
        milp = self.milp
        cost = np.zeros(milp.model.num_cols)
        cost[milp.col_t] = 1.0
        col_up = milp.col_up.copy()
        col_up[milp.col_t] = 1.0  # T <= U
        options = (("mip_rel_gap", 1e-6), ("mip_abs_gap", 1e-9),
                   ("mip_feasibility_tolerance", 1e-9), ("primal_feasibility_tolerance", 1e-9),
                   ("mip_improving_solution_save", True), ("random_seed", 0))
        solver = highs_solver(milp.model, cost, milp.col_lo, col_up, integer=milp.integer,
                              time_limit_s=max(1e-3, deadline - time.perf_counter()),
                              options=options)[0]
        solves, bound = 0, 0.0
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                return bound, "time limit", solves
            if max_solves is not None and solves >= max_solves:
                return bound, "solve limit", solves
            solver.setOptionValue("time_limit", float(left))
            solver.changeColBounds(milp.col_t, 0.0, self.best_step / self.scale)
            solver.run()
            solves += 1
            status = solver.getModelStatus()
            info = solver.getInfo()
            if status == highspy.HighsModelStatus.kInfeasible:
                return self.best_step, "optimal", solves
            dual = float(info.mip_dual_bound) * self.scale
            if math.isfinite(dual):
                bound = max(bound, dual - SAFETY * self.scale)
            found = [np.asarray(s.col_value) for s in solver.getSavedMipSolutions()]
            if status == highspy.HighsModelStatus.kOptimal or found:
                found.append(np.asarray(solver.getSolution().col_value))
            cut_any = False
            for col_value in found:
                placement = self._placement(col_value)
                if placement is None:
                    continue
                self.offer(placement)
                cut_any |= self._cut(solver, placement)
            if bound >= self.best_step:
                return self.best_step, "optimal", solves
            if status != highspy.HighsModelStatus.kOptimal:
                name = solver.modelStatusToString(status).lower()
                return bound, name, solves
            if not cut_any:  # the optimum is a placement already cut off: cannot happen
                return bound, "no new placement", solves

    def _placement(self, col_value):
        x = self.milp.x_of
        out = np.full(self.num_groups, -1, np.int64)
        for g in range(self.num_groups):
            ds = np.flatnonzero(x[g] >= 0)
            out[g] = ds[np.argmax(col_value[x[g, ds]])]
        return out

    def _cut(self, solver, group_devices) -> bool:
        """Cut off this placement and its relabellings (its canonical form)."""
        canon = _canonical(group_devices, self.classes)
        key = ("cut", canon.tobytes())
        if key in self.seen:
            return False
        self.seen.add(key)
        cols = self.milp.x_of[np.arange(self.num_groups), canon]
        solver.addRow(-np.inf, float(self.num_groups - 1), len(cols),
                      cols.astype(np.int32), np.ones(len(cols)))
        return True


def solve_placement(graph: OpGraph, cluster: Cluster, op_time: np.ndarray, labels,
                    starts, *, time_limit_s: float = DEFAULT_TIME_LIMIT_S,
                    max_pairs: int = DEFAULT_MAX_PAIRS, max_solves: int | None = None,
                    simulator: Simulator | None = None) -> ExactResult:
    """The fastest simulated placement of ``graph``'s groups and a proven bound (module
    docstring).

    Args:
      graph: the op graph.
      cluster: the devices.
      op_time: [n, D] seconds per op and device, ``inf`` where there is no kernel.
      labels: [n] int, the group of each op (every op of a group goes to one device; groups
        must not split a TF colocation group).
      starts: placements ([n] device per op) to begin from, at least one that fits in memory;
        the result is never slower than the fastest of them.
      time_limit_s: wall-time limit of the search (> 0); the bound stays proven when it ends
        the search.
      max_pairs: the most disjunctive pairs the MILP holds (>= 0), drawn among the
        ``PAIR_OPS`` ops with the longest times.
      max_solves: the most MILPs to solve (>= 1), a budget that does not depend on the
        machine's speed; None: no limit but the time.
      simulator: the problem's simulator, if the caller has one.

    Returns:
      An :class:`ExactResult`.

    Raises:
      ConfigError: bad arguments, or no start that fits.
      InfeasiblePlacementError: some group fits on no device.
    """
    began = time.perf_counter()
    if not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0):
        raise ConfigError(f"time_limit_s must be a number > 0, got {time_limit_s!r}")
    if not (isinstance(max_pairs, int) and max_pairs >= 0):
        raise ConfigError(f"max_pairs must be an int >= 0, got {max_pairs!r}")
    if max_solves is not None and not (isinstance(max_solves, int) and max_solves >= 1):
        raise ConfigError(f"max_solves must be None or an int >= 1, got {max_solves!r}")
    op_time = check_op_time(graph, cluster, op_time)
    labels = np.asarray(labels, np.int64)
    if labels.shape != (graph.num_ops,) or labels.min() < 0:
        raise ConfigError(f"labels must be [n] ints >= 0, got shape {labels.shape}")
    _, labels = np.unique(labels, return_inverse=True)
    sim = simulator or Simulator(graph, cluster, op_time)
    searcher = _Searcher(graph, cluster, op_time, labels, sim, max_pairs, list(starts))
    bound, status, solves = searcher.run(began + time_limit_s, max_solves)
    lp = lp_lower_bound(graph, cluster, op_time, time_limit_s=max(
        1.0, time_limit_s - (time.perf_counter() - began))).value_s
    bound = min(max(bound, lp), searcher.best_step)
    optimal = status == "optimal" or bound >= searcher.best_step
    milp = searcher.milp
    return ExactResult(devices=searcher.best, step_s=float(searcher.best_step),
                       bound_s=float(bound), optimal=bool(optimal),
                       status="optimal" if optimal else status, solves=solves,
                       simulated=searcher.simulated, seconds=time.perf_counter() - began,
                       rows=milp.model.num_rows, cols=milp.model.num_cols, pairs=milp.pairs)


def relaxed_step(graph: OpGraph, cluster: Cluster, op_time: np.ndarray, labels, devices, *,
                 time_limit_s: float = DEFAULT_TIME_LIMIT_S, max_pairs: int = DEFAULT_MAX_PAIRS,
                 simulator: Simulator | None = None) -> tuple[float, bool]:
    """The step :func:`solve_placement`'s MILP gives one placement: how far its relaxation
    lets the placement's schedule go below the simulated step.

    With every ``x[g, d]`` fixed to ``devices``, the MILP (module docstring) chooses only the
    schedule: the best order of ops on each device, transfers queued on a bus only through
    its load row. Its optimum is at least the MILP's optimum over all placements, so no bound
    :func:`solve_placement` proves with the same ``labels`` and ``max_pairs`` can exceed it,
    however long it runs: ``simulated step / relaxed step`` is the part of a placement's
    distance to the bound that is the relaxation's, not the choice of devices.

    Args:
      graph, cluster, op_time, labels, max_pairs, simulator: as for
        :func:`solve_placement`.
      devices: [n] the placement (keeps each group whole and fits in memory).
      time_limit_s: wall-time limit of the solve (> 0).

    Returns:
      ``(step_s, optimal)``: the MILP's best step for the placement (the objective of the
      best schedule found, or the simulated step if none was found in time, so a stopped
      solve overstates the optimum, and the statement above still holds), and whether the
      solve proved it optimal.

    Raises:
      ConfigError: bad arguments, or a placement that splits a group or overflows a device.
      InfeasiblePlacementError: some group fits on no device.
    """
    if not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0):
        raise ConfigError(f"time_limit_s must be a number > 0, got {time_limit_s!r}")
    op_time = check_op_time(graph, cluster, op_time)
    _, labels = np.unique(np.asarray(labels, np.int64), return_inverse=True)
    devices = np.asarray(devices, np.int64)
    if devices.shape != (graph.num_ops,) or not ((devices >= 0) & (
            devices < cluster.num_devices)).all():
        raise ConfigError(f"devices must be [n] device indices, got shape {devices.shape}")
    num_groups = int(labels.max()) + 1
    on = _group_devices(labels, num_groups, devices)
    sim = simulator or Simulator(graph, cluster, op_time)
    step = sim.run(devices.astype(np.int32)).makespan
    scale = step if step > 0 else 1.0
    milp = _build(graph, cluster, op_time, labels, scale, max_pairs,
                  [[d] for d in range(cluster.num_devices)])
    lo, up = milp.col_lo.copy(), milp.col_up.copy()
    for g in range(num_groups):
        if milp.x_of[g, on[g]] < 0:
            raise ConfigError(f"the placement puts group {g} on device {on[g]}, which has no "
                              f"kernel for it or too little memory for its variables")
        cols = milp.x_of[g][milp.x_of[g] >= 0]
        lo[cols] = up[cols] = 0.0
        lo[milp.x_of[g, on[g]]] = up[milp.x_of[g, on[g]]] = 1.0
    cost = np.zeros(milp.model.num_cols)
    cost[milp.col_t] = 1.0
    solver = highs_solver(milp.model, cost, lo, up, integer=milp.integer,
                          time_limit_s=float(time_limit_s),
                          options=(("mip_rel_gap", 1e-6), ("mip_abs_gap", 1e-9),
                                   ("random_seed", 0)))[0]
    solver.run()
    status = solver.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        raise ConfigError("the placement does not fit the devices' memory")
    value = float(solver.getInfo().objective_function_value)
    if solver.getInfo().primal_solution_status != 2:  # no schedule found in time: the
        value = 1.0                                     # simulated one is one
    return min(value * scale, step), status == highspy.HighsModelStatus.kOptimal
