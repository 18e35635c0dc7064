"""m-ETF: memory-aware earliest-finish-time list scheduling, in the spirit of Baechi's m-ETF
(Jeon et al., "Baechi: fast device placement of machine learning graphs", SoCC 2020).

The heuristic builds a schedule op by op and places each group where its first op finishes
earliest:

1. Priority: the upward rank (b-level) of each op, with an op's mean time over the devices that
   can run it and an edge's transfer time at the cluster's mean bandwidth and latency. Ops are
   taken in decreasing rank, which is a topological order because every op takes > 0 s.
2. For an op whose group is not placed yet, every compute device (the GPUs, or every device
   of a CPU-only cluster, as for the papers' partitioning baselines) that can run the whole
   group is a candidate (any device that can run it, for a group the compute devices cannot) if the group fits in what is left of its memory; the op's start time there is the
   later of the device being free and every input having arrived. The device with the earliest
   finish time wins (ties: lowest index) and the whole group is fixed to it. Later ops of a
   placed group just get scheduled on their group's device.

   Input arrival follows the simulator's transfer model, so the schedule it builds is one the
   simulator can reproduce: an input made on another device is sent once per (tensor,
   destination) and reused by later consumers there; each source device has one outgoing link
   that carries one transfer at a time, ``latency + bytes / bandwidth`` long. Ignoring that
   queue makes ETF scatter many small ops whose transfers then wait behind each other.
3. Memory, as in Baechi, is accounted conservatively: a group reserves its persistent bytes plus
   the bytes of every tensor its ops produce, as if nothing were freed. When no device can take a
   group under that rule, we fall back to devices where its persistent bytes still fit and let the
   simulator (which frees tensors) judge: ``Placer.place`` validates real peak memory afterwards.

4. Greedy finish times can mislead ETF: on graphs of many small ops it spreads work whose
   transfers then cost more than the parallelism gains. The placer therefore simulates its
   schedule and the single-device placement of its groups and returns the faster one that fits
   (with a note in the report; the single-device one whenever its own schedule does not fit
   and that one does), so it is never slower than its groups on one device. (A group that
   merged an op without a kernel on that device goes whole to another: with coarse groupings
   the report's single-device baseline, which moves only such ops, can be faster.)

Deterministic: no randomness is used; the seed is ignored.
"""

from __future__ import annotations

import numpy as np

from tf_autoplace.core.problem import PlacementProblem, Placer, check_memory
from tf_autoplace.core.units import format_bytes
from tf_autoplace.errors import InfeasiblePlacementError
from tf_autoplace.heuristics._common import compute_devices
from tf_autoplace.core.jit import cached_njit


def _in_edges(graph):
    """Inputs by consumer in CSR form: ``(starts [n+1], parent [m], bytes [m], key [m], dst,
    src, nbytes)``; ``key`` names what is sent (the tensor id, or ``-1 - parent`` for a control
    edge's dummy) and the last three are the unsorted edge arrays. Control edges carry 0 bytes."""
    src = np.concatenate([graph.edge_src, graph.ctrl_src]).astype(np.int64)
    dst = np.concatenate([graph.edge_dst, graph.ctrl_dst]).astype(np.int64)
    nbytes = np.concatenate([graph.tensor_bytes[graph.edge_tensor],
                             np.zeros(len(graph.ctrl_src), np.int64)]).astype(np.float64)
    key = np.concatenate([graph.edge_tensor.astype(np.int64), -1 - graph.ctrl_src.astype(np.int64)])
    order = np.argsort(dst, kind="stable")
    starts = np.searchsorted(dst[order], np.arange(graph.num_ops + 1))
    return starts, src[order], nbytes[order], key[order], dst, src, nbytes


def upward_rank(problem: PlacementProblem) -> np.ndarray:
    """[n] b-level: mean op time plus the longest mean-cost path to a sink."""
    graph, cluster = problem.graph, problem.cluster
    # The mean over the devices an op may use (NaN where it may use none, without numpy's
    # "Mean of empty slice" warning, which -W error would turn into an exception).
    count = problem.allowed.sum(axis=1)
    total = np.where(problem.allowed, problem.op_time, 0.0).sum(axis=1)
    mean_time = np.divide(total, count, out=np.full(len(count), np.nan), where=count > 0)
    off = ~np.eye(cluster.num_devices, dtype=bool)
    if off.any():
        mean_bw, mean_lat = cluster.bandwidth[off].mean(), cluster.latency[off].mean()
    else:
        mean_bw, mean_lat = np.inf, 0.0
    *_, dst, src, nbytes = _in_edges(graph)
    comm = mean_lat + nbytes / mean_bw
    order = np.argsort(src, kind="stable")
    starts = np.searchsorted(src[order], np.arange(graph.num_ops + 1))
    children, child_comm = dst[order], comm[order]
    return _longest_paths(graph.topological_order().astype(np.int64), starts.astype(np.int64),
                          children.astype(np.int64), child_comm.astype(np.float64),
                          mean_time.astype(np.float64))


@cached_njit
def _longest_paths(order, starts, children, child_comm, rank):
    """``rank`` (a copy) with, for each op in reverse ``order``, the largest ``child_comm[e] +
    rank[child]`` over its out-edges (CSR ``starts``/``children``) added: NumPy's ``max`` of
    the same sums, NaN included, in a loop that does not build an array per op."""
    rank = rank.copy()
    for k in range(len(order) - 1, -1, -1):
        i = order[k]
        lo, hi = starts[i], starts[i + 1]
        if hi > lo:
            best = -np.inf
            for e in range(lo, hi):
                value = child_comm[e] + rank[children[e]]
                if value > best or value != value:
                    best = value
                    if value != value:
                        break
            rank[i] += best
    return rank


def list_schedule(problem: PlacementProblem, favourite: np.ndarray | None = None) -> np.ndarray:
    """The m-ETF schedule of the module docstring (steps 1-3), as [n] int32 devices.

    Args:
      favourite: [n] int, each op's favourite child (-1: none), for Baechi's m-SCT
        (:mod:`tf_autoplace.heuristics.msct`): the device that ran an op is kept for its
        favourite child, which ops of unplaced groups then avoid where another device can
        take them; and the favourite child goes to that device when it can start there as
        early as anywhere. None: plain m-ETF.

    Raises:
      InfeasiblePlacementError: a group's variables fit on no device.
    """
    graph, cluster, op_time = problem.graph, problem.cluster, problem.op_time
    n, num_dev = graph.num_ops, cluster.num_devices
    labels = problem.grouping.labels
    num_groups = problem.grouping.num_groups
    group_ok = problem.group_allowed
    persistent = np.bincount(labels, weights=graph.persistent_bytes, minlength=num_groups)
    reserve = persistent + np.bincount(labels, weights=graph.output_bytes,
                                       minlength=num_groups)
    starts, parents, pbytes, pkey, *_ = _in_edges(graph)
    rank = upward_rank(problem)
    topo_pos = np.empty(n, np.int64)
    topo_pos[graph.topological_order()] = np.arange(n)
    order = np.lexsort((topo_pos, -rank))

    on_compute = np.isin(np.arange(num_dev), compute_devices(problem))
    keys, key_index = np.unique(pkey, return_inverse=True)  # what is sent, numbered densely
    device, failed = _schedule(
        order.astype(np.int64), labels.astype(np.int64), starts.astype(np.int64),
        parents.astype(np.int64), pbytes.astype(np.float64), key_index.astype(np.int64),
        len(keys), np.ascontiguousarray(op_time, np.float64), np.ascontiguousarray(group_ok),
        on_compute, reserve.astype(np.float64), persistent.astype(np.float64),
        cluster.memory.astype(np.float64), np.ascontiguousarray(cluster.latency, np.float64),
        np.ascontiguousarray(cluster.bandwidth, np.float64),
        np.full(n, -1, np.int64) if favourite is None else favourite.astype(np.int64),
        favourite is not None)
    if failed >= 0:
        g = labels[failed]
        on_gpus = bool((group_ok[g] & on_compute).any())
        name = "m_etf" if favourite is None else "m_sct"
        raise InfeasiblePlacementError(
            f"{name}: no {'compute ' if on_gpus else ''}device has room for the "
            f"variables of the group of op {graph.names[failed]!r} "
            f"({format_bytes(persistent[g])})" + (
                f"; {name} keeps a group that can run on the compute devices on them "
                "(best_heuristic and auto also move work to the host)" if on_gpus else ""))
    return device.astype(np.int32)


@cached_njit
def _schedule(order, labels, starts, parents, pbytes, key_index, num_keys, op_time, group_ok,
              on_compute, reserve, persistent, capacity, latency, bandwidth, favourite,
              use_favourite):
    """Steps 2-3 of the module docstring over ops in ``order``; returns ([n] devices, -1), or
    (devices so far, i) when no device has room for the variables of op i's group.

    The arrays are :func:`list_schedule`'s: inputs by consumer in CSR form (``starts``,
    ``parents``, ``pbytes``, and ``key_index``: what each input edge sends, numbered
    0..``num_keys``-1), per-group ``reserve``/``persistent`` bytes and ``group_ok`` devices,
    and ``favourite`` children (used with ``use_favourite``, for m-SCT). A loop in numba: in
    Python it was the slowest of the fast heuristics on graphs of tens of thousands of ops,
    and best_heuristic runs it once per device-count prefix. Floating-point operations are
    done in the order the Python loop did them, so the placements are the same."""
    n = order.shape[0]
    num_dev = op_time.shape[1]
    num_groups = reserve.shape[0]
    used = np.zeros(num_dev)
    used_persistent = np.zeros(num_dev)
    group_device = np.full(num_groups, -1, np.int64)
    device = np.full(n, -1, np.int64)
    end = np.zeros(n)
    free_at = np.zeros(num_dev)
    link_free = np.zeros(num_dev)  # when each device's outgoing link is next idle
    # Where and when what key k sends has arrived: a linked list per key (head[k], then
    # arrived_next) of (device, time) entries, at most one per input edge; a key reaches few
    # devices, and a [keys, devices] table would grow with the devices of a large cluster.
    head = np.full(num_keys, -1, np.int64)
    arrived_dev = np.empty(len(key_index), np.int64)
    arrived_at = np.empty(len(key_index))
    arrived_next = np.empty(len(key_index), np.int64)
    num_arrived = 0
    kept_for = np.full(num_dev, -1, np.int64)  # m-SCT: the favourite child a device waits for
    width = 1
    for i in range(n):
        width = max(width, starts[i + 1] - starts[i])
    # One op's inputs, sorted by (end, parent, bytes, key) as Python sorts the tuples.
    in_end = np.empty(width)
    in_parent = np.empty(width, np.int64)
    in_bytes = np.empty(width)
    in_key = np.empty(width, np.int64)
    candidates = np.empty(num_dev, np.int64)
    fits = np.empty(num_dev, np.bool_)
    links = np.empty(num_dev)  # a candidate's outgoing links' next idle times
    sends_key = np.empty(width, np.int64)  # ... and the transfers it would start
    sends_at = np.empty(width)
    best_links = np.empty(num_dev)
    best_key = np.empty(width, np.int64)
    best_at = np.empty(width)
    kept_links = np.empty(num_dev)
    kept_key = np.empty(width, np.int64)
    kept_at = np.empty(width)
    for i in order:
        g = labels[i]
        lo, hi = starts[i], starts[i + 1]
        m = hi - lo
        for a in range(m):  # insertion sort of the inputs
            e = lo + a
            t, p, b, k = end[parents[e]], parents[e], pbytes[e], key_index[e]
            c = a
            while c > 0 and (in_end[c - 1] > t or (in_end[c - 1] == t and (
                    in_parent[c - 1] > p or (in_parent[c - 1] == p and (
                        in_bytes[c - 1] > b or (in_bytes[c - 1] == b and in_key[c - 1] > k)))))):
                in_end[c], in_parent[c] = in_end[c - 1], in_parent[c - 1]
                in_bytes[c], in_key[c] = in_bytes[c - 1], in_key[c - 1]
                c -= 1
            in_end[c], in_parent[c], in_bytes[c], in_key[c] = t, p, b, k
        num_candidates = 0
        if group_device[g] >= 0:
            candidates[0] = group_device[g]
            num_candidates = 1
        else:
            on_gpus = False
            for d in range(num_dev):
                if group_ok[g, d] and on_compute[d]:
                    on_gpus = True
            any_fit = False
            for d in range(num_dev):
                fits[d] = (group_ok[g, d] and (on_compute[d] or not on_gpus)
                           and used[d] + reserve[g] <= capacity[d])
                any_fit = any_fit or fits[d]
            if not any_fit:
                for d in range(num_dev):
                    fits[d] = (group_ok[g, d] and (on_compute[d] or not on_gpus)
                               and used_persistent[d] + persistent[g] <= capacity[d])
                    any_fit = any_fit or fits[d]
            if not any_fit:
                return device, i
            if use_favourite:
                any_free = False
                for d in range(num_dev):
                    if fits[d] and (kept_for[d] < 0 or kept_for[d] == i):
                        any_free = True
                if any_free:
                    for d in range(num_dev):
                        fits[d] = fits[d] and (kept_for[d] < 0 or kept_for[d] == i)
            for d in range(num_dev):
                if fits[d]:
                    candidates[num_candidates] = d
                    num_candidates += 1
        best_d, best_finish, num_best = -1, np.inf, 0
        kept_d, kept_finish, kept_begin, num_kept = -1, np.inf, np.inf, 0
        earliest = np.inf
        for c in range(num_candidates):
            d = candidates[c]
            ready = 0.0
            num_sends = 0
            links[:] = link_free
            for a in range(m):
                p, k = in_parent[a], in_key[a]
                src = device[p]
                there = head[k]  # the entry of (k, d), if k has arrived on d
                while there >= 0 and arrived_dev[there] != d:
                    there = arrived_next[there]
                if src == d:
                    ready = max(ready, in_end[a])
                elif there >= 0:
                    ready = max(ready, arrived_at[there])
                else:
                    begin = max(in_end[a], links[src])
                    links[src] = begin + latency[src, d] + in_bytes[a] / bandwidth[src, d]
                    sends_key[num_sends] = k
                    sends_at[num_sends] = links[src]
                    num_sends += 1
                    ready = max(ready, links[src])
            begin = max(free_at[d], ready)
            finish = begin + op_time[i, d]
            if best_d < 0 or finish < best_finish:
                best_d, best_finish, num_best = d, finish, num_sends
                best_links[:] = links
                best_key[:num_sends] = sends_key[:num_sends]
                best_at[:num_sends] = sends_at[:num_sends]
            if use_favourite:
                earliest = min(earliest, begin)
                if kept_for[d] == i:
                    kept_d, kept_finish, kept_begin, num_kept = d, finish, begin, num_sends
                    kept_links[:] = links
                    kept_key[:num_sends] = sends_key[:num_sends]
                    kept_at[:num_sends] = sends_at[:num_sends]
        if use_favourite:
            if kept_d >= 0 and kept_begin <= earliest:
                best_d, best_finish, num_best = kept_d, kept_finish, num_kept
                best_links[:] = kept_links
                best_key[:num_kept] = kept_key[:num_kept]
                best_at[:num_kept] = kept_at[:num_kept]
            for d in range(num_dev):
                if kept_for[d] == i:
                    kept_for[d] = -1
        d = best_d
        if group_device[g] < 0:
            group_device[g] = d
            used[d] += reserve[g]
            used_persistent[d] += persistent[g]
        link_free[:] = best_links
        for a in range(num_best):  # (a key sent twice to d: its last arrival, as a dict)
            k = best_key[a]
            there = head[k]
            while there >= 0 and arrived_dev[there] != d:
                there = arrived_next[there]
            if there < 0:
                there = num_arrived
                num_arrived += 1
                arrived_dev[there], arrived_next[there] = d, head[k]
                head[k] = there
            arrived_at[there] = best_at[a]
        device[i], end[i] = d, best_finish
        free_at[d] = best_finish
        if use_favourite:
            f = favourite[i]
            if f >= 0 and device[f] < 0 and (group_device[labels[f]] == -1
                                              or group_device[labels[f]] == d):
                kept_for[d] = f
    return device, -1


class MemoryAwareETFPlacer(Placer):
    """Baechi-style m-ETF over the problem's groups (see module docstring)."""

    name = "m_etf"

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        return self._no_worse_than_single_device(problem, list_schedule(problem))

    def _no_worse_than_single_device(self, problem: PlacementProblem,
                                     devices: np.ndarray) -> np.ndarray:
        target, ok = problem.cluster.default_device(), problem.group_allowed
        single = np.where(ok[:, target], target, np.argmax(ok, axis=1))[problem.grouping.labels]
        single = single.astype(np.int32)
        ours, theirs = problem.simulator.run(devices), problem.simulator.run(single)
        if check_memory(problem, theirs):
            return devices
        if check_memory(problem, ours):
            self.notes.append(
                f"{self.name}'s schedule does not fit the devices' memory at its peak; the "
                f"single-device placement, which does, is used ({theirs.makespan * 1e3:.2f} ms)")
            return single
        if theirs.makespan < ours.makespan:
            self.notes.append(
                f"{self.name}'s schedule simulated at {ours.makespan * 1e3:.2f} ms, slower than all "
                f"on one device ({theirs.makespan * 1e3:.2f} ms); the single-device placement "
                "is used")
            return single
        return devices
