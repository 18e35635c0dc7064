"""Memory-pressure offload: move work from devices that overflow to devices with room.

The papers' baselines place on the GPUs and leave the CPU host only the ops that have no GPU
kernel. When the GPUs are too small for the graph, every such placement overflows although a
valid one may exist: most ops also have a CPU kernel, and the host has far more memory. Given a
placement whose simulated peak memory exceeds some device's capacity, :func:`offload` moves
whole TF colocation groups (the finest unit TF allows) off each overflowing device until the
simulator says every device fits:

* **Where to.** A device with room that can run the group: first the other compute devices
  (GPUs) with room left, then the other devices (the CPU host), so the slow host only takes
  what the GPUs cannot hold.
* **Which groups.** Those that free the most memory per second of extra compute: a group frees
  its persistent bytes (variables) and the output bytes of its ops (an upper bound on its
  share of the transient peak), and costs the difference of its compute time on the new device.
  If that makes no placement fit, the rounds run again counting also the tensors a group reads
  from other groups (copies, where those run elsewhere): a sink of many large tensors
  overflows by what it receives, not by what it writes.
* **How many.** Enough, by that estimate, to cover the overshoot with a margin; the placement is
  then simulated again (freeing a group's outputs may free less than counted, and a tensor sent
  back from the host takes memory too), and the next round covers what is still over with a
  larger margin, for a bounded number of rounds.

It returns None when no round makes every device fit: then no placement reachable this way
fits, and the caller reports the graph's total need against the cluster's capacity.
"""

from __future__ import annotations

import numpy as np

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.core.units import format_bytes
from tf_autoplace.heuristics._common import compute_devices, once_per_graph
from tf_autoplace.core.jit import cached_njit

ROUNDS = 8


def memory_need(problem: PlacementProblem) -> str:
    """What the graph needs against what the cluster has, for error messages."""
    persistent = format_bytes(problem.graph.persistent_bytes.sum())
    outputs = format_bytes(problem.graph.output_bytes.sum())
    have = format_bytes(sum(int(m) for m in problem.cluster.memory))  # no int64 wrap
    return (f"the graph's variables need {persistent} and its op outputs {outputs} in all, "
            f"against {have} on the cluster's {problem.cluster.num_devices} devices")


def offload(problem: PlacementProblem, devices: np.ndarray) -> np.ndarray | None:
    """A placement that fits every device's memory, obtained from ``devices`` ([n] device per
    op, colocation groups whole) by moving colocation groups off overflowing devices (module
    docstring); ``devices`` itself when it fits; None when the rounds run out, counting what
    a group frees without and then with the tensors it receives."""
    graph = problem.graph
    coloc = graph.colocation.astype(np.int64)
    num_units = int(coloc.max()) + 1
    unit_bytes = (np.bincount(coloc, weights=graph.persistent_bytes, minlength=num_units) +
                  np.bincount(coloc, weights=graph.output_bytes, minlength=num_units))
    unit_time = np.stack([np.bincount(coloc, weights=np.where(np.isfinite(t), t, 0.0),
                                      minlength=num_units)
                          for t in problem.op_time.T], axis=1)  # [C, D] seconds
    peak = _peak(problem, devices)  # both passes start from it
    for received in (False, True):
        if received:
            unit_bytes = unit_bytes + once_per_graph(
                graph, ("offload received",), lambda: _received_bytes(graph, coloc, num_units))
        fixed = _offload(problem, devices, peak, unit_bytes, unit_time)
        if fixed is not None:
            return fixed
    return None


def _offload(problem: PlacementProblem, devices: np.ndarray, peak: np.ndarray,
             unit_bytes: np.ndarray, unit_time: np.ndarray) -> np.ndarray | None:
    """:func:`offload`'s rounds from ``devices`` and its simulated ``peak`` ([D] bytes), with
    ``unit_bytes`` ([C]) what moving each colocation group frees and ``unit_time`` ([C, D])
    its compute time on each device."""
    cluster, coloc = problem.cluster, problem.graph.colocation
    allowed = problem.colocation_allowed
    capacity = cluster.memory.astype(np.float64)
    compute = np.isin(np.arange(cluster.num_devices), compute_devices(problem))
    unit_device = np.zeros(len(unit_bytes), np.int64)
    unit_device[coloc] = devices
    for round_ in range(ROUNDS):
        over = peak - capacity
        if (over <= 0).all():
            return unit_device[coloc].astype(np.int32)
        margin = 1.1 * 2 ** round_
        room = capacity - peak  # what each device can still take, by the same estimate
        moved = 0
        for d in np.flatnonzero(over > 0).tolist():
            units, dest, ratio = _destinations(unit_device, d, unit_bytes, unit_time, allowed,
                                               room, compute)
            order = np.argsort(ratio, kind="stable")
            moved += _move(units[order], dest[order], unit_bytes, room, unit_device,
                           over[d] * margin)
        if not moved:  # the same placement again: every later round would find the same
            return None
        peak = _peak(problem, unit_device[coloc])
    if (peak <= capacity).all():
        return unit_device[coloc].astype(np.int32)
    return None


def _peak(problem: PlacementProblem, devices: np.ndarray) -> np.ndarray:
    """[D] float64 simulated peak bytes per device (only the peak: no per-op records)."""
    return problem.simulator.summaries(devices[None])[1][0].astype(np.float64)


@cached_njit
def _move(units, dest, unit_bytes, room, unit_device, need):
    """Move ``units`` (in that order) to their ``dest`` while less than ``need`` bytes are
    freed, skipping a unit its destination has no room for; ``room`` and ``unit_device`` are
    updated in place. Returns how many moved. (A loop over thousands of groups per round:
    numba, not Python.)"""
    freed = 0.0
    moved = 0
    for k in range(len(units)):
        if freed >= need:
            break
        u, e = units[k], dest[k]
        if room[e] <= unit_bytes[u]:
            continue
        unit_device[u] = e
        room[e] -= unit_bytes[u]
        freed += unit_bytes[u]
        moved += 1
    return moved


def _received_bytes(graph, coloc: np.ndarray, num_units: int) -> np.ndarray:
    """[C] bytes of the tensors each colocation group reads from other groups, each tensor
    once per group: the copies it holds where it runs when their producers run elsewhere."""
    producer = coloc[graph.tensor_op[graph.edge_tensor]]
    consumer = coloc[graph.edge_dst]
    outside = producer != consumer
    pairs = np.unique(np.stack([graph.edge_tensor[outside], consumer[outside]]), axis=1)
    return np.bincount(pairs[1], weights=graph.tensor_bytes[pairs[0]], minlength=num_units)


@cached_njit
def _destinations(unit_device, d, unit_bytes, unit_time, allowed, room, compute):
    """The groups on device ``d`` that hold bytes and can go somewhere, each with its best
    destination and its extra seconds there per byte freed: ``(units [u], dest [u], ratio
    [u])``, groups in ascending order. The best destination is the device other than ``d``
    that can run the group (``allowed``), has room for its bytes (``room``) and adds the least
    compute time (``unit_time``, [C, D] seconds): among the compute devices (GPUs) where one
    qualifies, else among the others (the host); the first such device on a tie.
    Extra time below zero (a faster device) counts as none. (A pass over thousands of groups
    per overflowing device and round: numba, not numpy's [u, D] temporaries.)"""
    num_devices = room.shape[0]
    units = np.flatnonzero(unit_device == d)
    out_units = np.empty(len(units), np.int64)
    out_dest = np.empty(len(units), np.int64)
    ratio = np.empty(len(units), np.float64)
    count = 0
    for u in units:
        size = unit_bytes[u]
        if size <= 0:
            continue
        best, best_extra = -1, np.inf
        for pass_compute in (True, False):
            for e in range(num_devices):
                if (e == d or compute[e] != pass_compute or not allowed[u, e]
                        or not room[e] > size):
                    continue
                extra = unit_time[u, e] - unit_time[u, d]
                if extra < best_extra:
                    best, best_extra = e, extra
            if best >= 0:
                break
        if best < 0:
            continue
        out_units[count], out_dest[count] = u, best
        ratio[count] = max(best_extra, 0.0) / size
        count += 1
    return out_units[:count], out_dest[:count], ratio[:count]
