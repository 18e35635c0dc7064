"""Windows: how long the time between two ops of a chain must be, given where the two run.

The heads and tails of :mod:`tf_autoplace.sim.bounds` see each op through its neighbours, one
edge at a time. Where a layer branches and joins again (an Inception module, a cell of NASNet,
the gradient of either) they see the longest branch, not that the branches must share the
window between the fork and the join: on one device one after the other, or on others at the
price of a transfer out and one back. A *window* bounds that.

Take two ops ``u`` and ``v`` with ``v`` a descendant of ``u``, and ``R`` a set of ops that are
descendants of ``u`` and ancestors of ``v`` (the *region*). In every placement each op of ``R``
runs inside ``[end_u, start_v]``, since a path of dependencies leads from ``u`` to it and from
it to ``v``. With ``u`` on ``du`` and ``v`` on ``dv``, let ``L = start_v - end_u``. For an op
``i`` of ``R`` on ``d``:

* a head inside the region: ``a[i, d] = max`` over the parents ``j`` of ``i`` in ``R`` of
  ``min_e a[j, e] + t[j, e] + m_ji(e, d)`` and, if ``u`` is a parent, ``m_ui(du, d)``, where
  ``m`` is a transfer's least time as in :mod:`tf_autoplace.sim.bounds` (0 when ``e == d``;
  ops of one colocation group share a device; the ops of ``u``'s group sit on ``du``);
  ``start_i >= end_u + a[i, d]``, by induction in topological order, as for the heads;
* a tail inside the region, ``b[i, d]``, the same backwards to ``v`` on ``dv``: ``end_i <=
  start_v - b[i, d]``;
* so ``p[i, d] = a[i, d] + t[i, d] + b[i, d] <= L``;
* each executor runs at most its cores' ops at once inside the window: for any set ``S`` of
  executors, the ops that cannot be outside ``S`` (``min over d outside S of p[i, d] > L``)
  run on ``S``, each for at least its least time there, so their sum is at most ``cores(S) *
  L``.

The window's *length* ``L(du, dv)`` is the least ``L`` that meets all of these, for a few sets
``S`` (the executors of ``du``, of ``dv``, of both, and each of those with every device of one
kind): the left sides only shrink as ``L`` grows, so it is found by sorting ops by the ``L``
at which each may leave ``S``. It is a bound for the integral choice of devices, not a linear
program's, so a branch is on one device or another, never half on each.

:func:`tf_autoplace.sim.bounds.device_heads_and_tails` then lifts ``v``'s head on ``dv`` to
``min_du h[u, du] + t[u, du] + L(du, dv)`` and ``u``'s tail on ``du`` likewise, which holds for
whichever device ``u`` (or ``v``) is on, and carries the lift to every op downstream.

Which pairs: the ops of one longest path (least times, transfers free), each with the
``width`` ops before it on that path, for regions of at most ``max_region`` ops (their
intersection of descendants and ancestors). Devices that a swap leaves the cost model
unchanged under (identical op times, links and their own executors: the GPUs of a box) give
the same length, so the lengths are computed once per *case*: for ``du`` and ``dv`` of one
kind of device, the same device or two of them; of two kinds, one each.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.jit import cached_njit
from tf_autoplace.graph.opgraph import OpGraph


@dataclasses.dataclass(frozen=True)
class Windows:
    """Windows between ops ``u[w]`` and ``v[w]``: with ``u`` on ``du`` and ``v`` on ``dv``,
    ``v`` starts at least ``length[w, case[du, dv]]`` seconds after ``u`` ends, in every
    valid placement.

    Attributes:
      u, v: [W] int64 ops, ``v`` a descendant of ``u``.
      length: [W, C] seconds (``inf`` where no valid placement puts ``u`` and ``v`` there).
      case: [D, D] int64, the column of ``length`` for ``(du, dv)``.
    """

    u: np.ndarray
    v: np.ndarray
    length: np.ndarray
    case: np.ndarray

    @staticmethod
    def none(num_devices: int) -> "Windows":
        """No windows: the heads and tails as without them."""
        empty = np.zeros(0, np.int64)
        return Windows(empty, empty, np.zeros((0, 1)),
                       np.zeros((num_devices, num_devices), np.int64))


def interchangeable(cluster: Cluster, time: np.ndarray) -> np.ndarray:
    """[D] int class of each device: two devices share one when swapping them leaves every
    op's time, every link (latency, bandwidth, delay) and the executors unchanged, and each is
    alone in its executor with one core. Any two of a class can be swapped, and swaps
    compose, so every permutation of a class is a symmetry of the cost model."""
    executor, cores = cluster.executors()
    links = [np.asarray(a, np.float64) for a in (cluster.latency, cluster.bandwidth,
                                                 cluster.delay)]
    D = cluster.num_devices
    alone = np.array([(executor == executor[d]).sum() == 1 and cores[executor[d]] == 1
                      for d in range(D)])

    def swappable(a: int, b: int) -> bool:
        if not (alone[a] and alone[b]) or not np.array_equal(time[:, a], time[:, b]):
            return False
        perm = np.arange(D)
        perm[[a, b]] = [b, a]
        return all(np.array_equal(m[np.ix_(perm, perm)], m) for m in links)

    label = -np.ones(D, np.int64)
    for d in range(D):
        if label[d] >= 0:
            continue
        label[d] = label.max() + 1
        for e in range(d + 1, D):
            if label[e] < 0 and swappable(d, e):
                label[e] = label[d]
    return label


def _cases(label: np.ndarray):
    """``(case_u, case_v, case)``: one representative ``(du, dv)`` per case, and [D, D] the
    case of every pair (module docstring)."""
    D = len(label)
    first = {c: np.flatnonzero(label == c) for c in np.unique(label)}
    key_of, case_u, case_v = {}, [], []
    case = np.empty((D, D), np.int64)
    for du in range(D):
        for dv in range(D):
            ku, kv = label[du], label[dv]
            key = (ku, kv, du == dv)
            if key not in key_of:
                ru = first[ku][0]
                rv = ru if du == dv else (first[kv][1] if ku == kv else first[kv][0])
                key_of[key] = len(case_u)
                case_u.append(ru)
                case_v.append(rv)
            case[du, dv] = key_of[key]
    return np.array(case_u, np.int64), np.array(case_v, np.int64), case


def _subsets(cluster: Cluster, label: np.ndarray, case_u, case_v) -> np.ndarray:
    """[C, S, E] bool: the sets of executors each case's load rows use (module docstring);
    rows past a case's own are all False and skipped."""
    executor, cores = cluster.executors()
    per_case = []
    for du, dv in zip(case_u.tolist(), case_v.tolist()):
        base = {frozenset([executor[du]]), frozenset([executor[dv]]),
                frozenset([executor[du], executor[dv]])}
        sets = set(base)
        for kind in np.unique(label):
            devices = frozenset(executor[label == kind].tolist())
            sets |= {b | devices for b in base}
        per_case.append(sorted(sorted(s) for s in sets))
    out = np.zeros((len(per_case), max(map(len, per_case)), len(cores)), bool)
    for c, sets in enumerate(per_case):
        for s, members in enumerate(sets):
            out[c, s, members] = True
    return out


def chain(graph: OpGraph, fastest: np.ndarray) -> np.ndarray:
    """The ops of one longest path through ``graph`` weighted by ``fastest`` (transfers
    free), in order: from the op through which the longest path runs, back and forth along
    edges on which it stays longest."""
    n = graph.num_ops
    src = np.concatenate([graph.edge_src, graph.ctrl_src]).astype(np.int64)
    dst = np.concatenate([graph.edge_dst, graph.ctrl_dst]).astype(np.int64)
    order = graph.topological_order().astype(np.int64)
    # The sorts here, not in the kernel: numba's sorts are slow to compile.
    by_dst, by_src = np.argsort(dst, kind="stable"), np.argsort(src, kind="stable")
    par_ptr = np.searchsorted(dst[by_dst], np.arange(n + 1)).astype(np.int64)
    ch_ptr = np.searchsorted(src[by_src], np.arange(n + 1)).astype(np.int64)
    return _chain(order, src, dst, by_dst, by_src, par_ptr, ch_ptr,
                  np.ascontiguousarray(fastest, np.float64), n)


@cached_njit(negative_indices=False)
def _chain(order, src, dst, by_dst, by_src, par_ptr, ch_ptr, weight, n):
    early = np.zeros(n)  # longest path ending just before each op
    for i in order:
        for a in range(par_ptr[i], par_ptr[i + 1]):
            j = src[by_dst[a]]
            early[i] = max(early[i], early[j] + weight[j])
    late = np.zeros(n)  # ... starting just after it
    for x in range(n - 1, -1, -1):
        i = order[x]
        for a in range(ch_ptr[i], ch_ptr[i + 1]):
            j = dst[by_src[a]]
            late[i] = max(late[i], late[j] + weight[j])
    through = early + weight + late
    back = np.empty(n, np.int64)
    back[0] = np.argmax(through)
    size = 1
    while True:  # parents that end exactly when the op may start
        step = _tight(back[size - 1], par_ptr, src, by_dst, early, weight, through, True)
        if step < 0:
            break
        back[size] = step
        size += 1
    out = np.empty(n, np.int64)
    out[:size] = back[:size][::-1]
    while True:  # ... and children that start exactly when it ends
        step = _tight(out[size - 1], ch_ptr, dst, by_src, early, weight, through, False)
        if step < 0:
            break
        out[size] = step
        size += 1
    return out[:size].copy()


@cached_njit(negative_indices=False)
def _tight(i, ptr, ends, by, early, weight, through, parents):
    """The neighbour of ``i`` (a parent, or a child) joined to it with no slack on the longest
    path, the one through which the longest path is longest; -1 if none."""
    best = -1
    for a in range(ptr[i], ptr[i + 1]):
        j = ends[by[a]]
        tight = (early[j] + weight[j] == early[i] if parents
                 else early[i] + weight[i] == early[j])
        if tight and (best < 0 or through[j] > through[best]):
            best = j
    return best


def window_lengths(graph: OpGraph, cluster: Cluster, time: np.ndarray, coloc: np.ndarray,
                   src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, *, width: int = 24,
                   max_region: int = 128, max_windows: int = 20_000) -> Windows:
    """The windows along one longest path of ``graph`` (module docstring).

    Args:
      time: [n, D] seconds, ``inf`` where an op's colocation group may not go
        (``bounds._group_times``).
      coloc: [n] the colocation group each op must share a device with.
      src, dst, nbytes: the unique dependency pairs and their largest tensors
        (``bounds._edge_pairs``).
      width: pairs per op of the path: the ops up to this many places before it.
      max_region: the largest region kept (a larger one is skipped with those before it).
      max_windows: at most about this many windows: ``width`` shrinks on long paths (the
        cost is about linear in windows times regions' sizes).
    """
    n, D = time.shape
    path = chain(graph, np.where(np.isfinite(time), time, np.inf).min(axis=1))
    width = int(max(1, min(width, max_windows // max(1, len(path)))))
    label = interchangeable(cluster, time)
    case_u, case_v, case = _cases(label)
    subsets = _subsets(cluster, label, case_u, case_v)
    executor, cores = cluster.executors()
    pos = np.empty(n, np.int64)
    pos[graph.topological_order()] = np.arange(n)
    by_dst, by_src = np.argsort(dst, kind="stable"), np.argsort(src, kind="stable")
    par_ptr = np.searchsorted(dst[by_dst], np.arange(n + 1)).astype(np.int64)
    ch_ptr = np.searchsorted(src[by_src], np.arange(n + 1)).astype(np.int64)
    latency, bandwidth, delay = (np.ascontiguousarray(a, np.float64)
                                 for a in (cluster.latency, cluster.bandwidth, cluster.delay))
    u, v, length = _window_lengths(
        path, pos, par_ptr, src[by_dst], nbytes[by_dst], ch_ptr, dst[by_src], nbytes[by_src],
        np.ascontiguousarray(coloc, np.int64), np.ascontiguousarray(time), latency, bandwidth,
        delay, executor.astype(np.int64), cores.astype(np.int64), case_u, case_v, subsets,
        width, max_region)
    return Windows(u, v, length, case)


@cached_njit(negative_indices=False)
def _move(e, d, nbytes, latency, bandwidth, delay):
    """The least time from a producer's end on ``e`` to its tensor's arrival on ``d``."""
    if e == d:
        return 0.0
    return latency[e, d] + nbytes / bandwidth[e, d] + delay[e, d]


@cached_njit(negative_indices=False)
def _region_heads(region, size, inreg, end, dev, ptr, nbr, nbytes, coloc, time, latency,
                  bandwidth, delay, out, backward):
    """``a`` (or with ``backward``, ``b``) of the module docstring for the region's ops, in
    ``out[:size]``: from ``end`` (``u``, or ``v`` backwards) on ``dev``; ``region`` sorted by
    topological position, ``inreg[op]`` an op's index in it or -1."""
    D = time.shape[1]
    for x in range(size):
        r = size - 1 - x if backward else x
        i = region[r]
        for d in range(D):
            if not np.isfinite(time[i, d]) or (coloc[i] == coloc[end] and d != dev):
                out[r, d] = np.inf
                continue
            h = 0.0
            for a in range(ptr[i], ptr[i + 1]):
                j = nbr[a]
                if j == end:
                    m = (_move(d, dev, nbytes[a], latency, bandwidth, delay) if backward
                         else _move(dev, d, nbytes[a], latency, bandwidth, delay))
                    h = max(h, m)
                    continue
                rj = inreg[j]
                if rj < 0:
                    continue
                best = np.inf
                for e in range(D):
                    if coloc[j] == coloc[i] and e != d:
                        continue
                    m = (_move(d, e, nbytes[a], latency, bandwidth, delay) if backward
                         else _move(e, d, nbytes[a], latency, bandwidth, delay))
                    best = min(best, out[rj, e] + time[j, e] + m)
                h = max(h, best)
            out[r, d] = h


@cached_njit(negative_indices=False)
def _least_window(p, time, region, size, executor, cores, subsets):
    """The least window length ``L`` meeting the path and load conditions of the module
    docstring for the region's ``p`` ([size, D]) and each set of executors in ``subsets``."""
    D = p.shape[1]
    lo = 0.0
    for r in range(size):
        least = np.inf
        for d in range(D):
            least = min(least, p[r, d])
        lo = max(lo, least)
    if not np.isfinite(lo):
        return np.inf
    out = lo
    leave = np.empty(size)
    work = np.empty(size)
    for s in range(subsets.shape[0]):
        inside = subsets[s]
        cap = 0
        for e in range(len(cores)):
            if inside[e]:
                cap += cores[e]
        if cap == 0:
            continue
        for r in range(size):
            leave[r] = np.inf  # the least L at which the op may run outside S
            work[r] = np.inf   # its least time inside S
            for d in range(D):
                if inside[executor[d]]:
                    if np.isfinite(p[r, d]):
                        work[r] = min(work[r], time[region[r], d])
                else:
                    leave[r] = min(leave[r], p[r, d])
        rank = np.argsort(-leave[:size])
        best = np.inf
        trapped = 0.0  # the work of the ops before rank k, which stay in S below leave[k]
        for k in range(size + 1):
            bound = trapped / cap
            if k < size:
                bound = max(bound, leave[rank[k]])
            best = min(best, max(bound, lo))
            if k < size:
                trapped += work[rank[k]]
        out = max(out, best)
    return out


@cached_njit(negative_indices=False)
def _window_lengths(path, pos, par_ptr, par, par_bytes, ch_ptr, ch, ch_bytes, coloc, time,
                    latency, bandwidth, delay, executor, cores, case_u, case_v, subsets,
                    width, max_region):
    """The windows of :func:`window_lengths`: ``(u, v, length)``."""
    n, D = time.shape
    C = len(case_u)
    m = len(path)
    most = max(0, m - 1) * width
    out_u = np.empty(most, np.int64)
    out_v = np.empty(most, np.int64)
    out_len = np.empty((most, C))
    above = np.zeros(n, np.int64)   # == stamp: an ancestor of the window's end
    below = np.zeros(n, np.int64)   # == stamp: a descendant of its start
    inreg = np.full(n, -1, np.int64)
    stack = np.empty(n, np.int64)
    region = np.empty(max_region, np.int64)
    keys = np.empty(max_region)  # (float64, as in _least_window: one argsort to compile)
    heads = np.empty((max_region, D))
    tails = np.empty((max_region, D))
    p = np.empty((max_region, D))
    count = 0
    stamp = 0
    for j in range(1, m):
        v = path[j]
        first = max(0, j - width)
        floor = pos[path[first]]
        stamp += 1
        up = stamp
        top = 1
        stack[0] = v
        above[v] = up
        while top > 0:  # v's ancestors later in topological order than the first start
            top -= 1
            x = stack[top]
            for a in range(par_ptr[x], par_ptr[x + 1]):
                y = par[a]
                if pos[y] > floor and above[y] != up:
                    above[y] = up
                    stack[top] = y
                    top += 1
        for k in range(j - 1, first - 1, -1):
            u = path[k]
            stamp += 1
            size = 0
            top = 1
            stack[0] = u
            full = False
            while top > 0 and not full:
                top -= 1
                x = stack[top]
                for a in range(ch_ptr[x], ch_ptr[x + 1]):
                    y = ch[a]
                    if y != v and above[y] == up and below[y] != stamp:
                        below[y] = stamp
                        if size == max_region:
                            full = True
                            break
                        region[size] = y
                        size += 1
                        stack[top] = y
                        top += 1
            if full:
                break  # the regions of earlier starts only grow
            if size == 0:
                continue
            for r in range(size):
                keys[r] = pos[region[r]]
            rank = np.argsort(keys[:size])
            sorted_region = region[:size][rank].copy()
            for r in range(size):
                region[r] = sorted_region[r]
                inreg[region[r]] = r
            for c in range(C):
                du, dv = case_u[c], case_v[c]
                if not (np.isfinite(time[u, du]) and np.isfinite(time[v, dv])):
                    out_len[count, c] = np.inf
                    continue
                _region_heads(region, size, inreg, u, du, par_ptr, par, par_bytes, coloc,
                              time, latency, bandwidth, delay, heads, False)
                _region_heads(region, size, inreg, v, dv, ch_ptr, ch, ch_bytes, coloc,
                              time, latency, bandwidth, delay, tails, True)
                for r in range(size):
                    for d in range(D):
                        p[r, d] = heads[r, d] + time[region[r], d] + tails[r, d]
                out_len[count, c] = _least_window(p, time, region, size, executor, cores,
                                                  subsets[c])
            for r in range(size):
                inreg[region[r]] = -1
            out_u[count] = u
            out_v[count] = v
            count += 1
    return out_u[:count], out_v[:count], out_len[:count]
