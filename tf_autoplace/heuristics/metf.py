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
from tf_autoplace.sim.jit import cached_njit


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
    capacity = cluster.memory.astype(np.float64)
    used = np.zeros(num_dev)
    used_persistent = np.zeros(num_dev)

    starts, parents, pbytes, pkey, *_ = _in_edges(graph)
    rank = upward_rank(problem)
    topo_pos = np.empty(n, np.int64)
    topo_pos[graph.topological_order()] = np.arange(n)
    order = np.lexsort((topo_pos, -rank))

    latency, bandwidth = cluster.latency, cluster.bandwidth
    group_device = np.full(num_groups, -1, np.int64)
    device = np.full(n, -1, np.int64)
    end = np.zeros(n)
    free_at = np.zeros(num_dev)
    link_free = np.zeros(num_dev)  # when each device's outgoing link is next idle
    arrived: dict[tuple[int, int], float] = {}  # (sent key, destination) -> arrival time
    all_devices = np.arange(num_dev)
    on_compute = np.isin(all_devices, compute_devices(problem))
    kept_for = np.full(num_dev, -1, np.int64)  # m-SCT: the favourite child a device waits for
    for i in order.tolist():
        g = labels[i]
        lo, hi = starts[i], starts[i + 1]
        inputs = sorted(zip(end[parents[lo:hi]].tolist(), parents[lo:hi].tolist(),
                            pbytes[lo:hi].tolist(), pkey[lo:hi].tolist()))
        if group_device[g] >= 0:
            candidates = [int(group_device[g])]
        else:
            on_gpus = (group_ok[g] & on_compute).any()
            ok = group_ok[g] & on_compute if on_gpus else group_ok[g]
            fits = ok & (used + reserve[g] <= capacity)
            if not fits.any():
                fits = ok & (used_persistent + persistent[g] <= capacity)
            if not fits.any():
                name = "m_etf" if favourite is None else "m_sct"
                raise InfeasiblePlacementError(
                    f"{name}: no {'compute ' if on_gpus else ''}device has room for the "
                    f"variables of the group of op {graph.names[i]!r} "
                    f"({format_bytes(persistent[g])})" + (
                        f"; {name} keeps a group that can run on the compute devices on them "
                        "(best_heuristic and auto also move work to the host)" if on_gpus
                        else ""))
            if favourite is not None:
                free = fits & ((kept_for < 0) | (kept_for == i))
                if free.any():
                    fits = free
            candidates = all_devices[fits].tolist()
        best, kept, earliest = None, None, np.inf
        for d in candidates:
            ready, links, sends = 0.0, {}, []
            for p_end, p, nb, key in inputs:
                src = int(device[p])
                if src == d:
                    ready = max(ready, p_end)
                elif (key, d) in arrived:
                    ready = max(ready, arrived[(key, d)])
                else:
                    begin = max(p_end, links.get(src, link_free[src]))
                    links[src] = begin + latency[src, d] + nb / bandwidth[src, d]
                    arrived_at = links[src]
                    sends.append((key, arrived_at))
                    ready = max(ready, arrived_at)
            begin = max(free_at[d], ready)
            finish = begin + op_time[i, d]
            if best is None or finish < best[0]:
                best = (finish, d, links, sends)
            if favourite is not None:
                earliest = min(earliest, begin)
                if kept_for[d] == i:
                    kept = (finish, d, links, sends, begin)
        if favourite is not None:
            if kept is not None and kept[4] <= earliest:
                best = kept[:4]
            kept_for[kept_for == i] = -1
        finish, d, links, sends = best
        if group_device[g] < 0:
            group_device[g] = d
            used[d] += reserve[g]
            used_persistent[d] += persistent[g]
        for src, busy_until in links.items():
            link_free[src] = busy_until
        for key, arrived_at in sends:
            arrived[(key, d)] = arrived_at
        device[i], end[i] = d, finish
        free_at[d] = finish
        if favourite is not None and favourite[i] >= 0 and device[favourite[i]] < 0 and \
                group_device[labels[favourite[i]]] in (-1, d):
            kept_for[d] = favourite[i]
    return device.astype(np.int32)


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
