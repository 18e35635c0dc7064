"""m-TOPO: memory-aware topological-order filling, Baechi's simplest placer (Jeon et al.,
"Baechi: fast device placement of machine learning graphs", SoCC 2020).

m-TOPO walks the ops in a topological order and fills one device after another: it keeps
placing on the current device until that device holds its balanced share, then moves to the
next; when the next op does not fit in what is left of the current device's memory it moves on
as well. It ignores communication, so it cuts the graph into contiguous stages of the order,
and is very fast.

How we read it over groups:

* **Devices.** The compute devices of :func:`~tf_autoplace.heuristics._common.compute_devices`
  (the GPUs), in index order; groups that no GPU can run go to the first device that can (the
  CPU host) and do not count against any share.
* **Order.** Kahn's algorithm with a FIFO queue over data and control edges (ops that become
  ready are appended; roots in op-index order), the order Baechi's released code assigns
  (``placer_utils.assign_topo_order``). Groups are taken in the order of their first op (the
  group graph may have cycles, the op graph does not).
* **Share** (``balance``). ``"compute"`` (default): the share is ``sum(group times) / k``,
  a group's time being its mean total op time over the k compute devices; a group stays on the
  current device if its midpoint does, i.e. the device moves on when ``load + time / 2 >
  share`` and it already holds something (rounding to the nearest boundary instead of always
  under-filling). ``"memory"``: Baechi's released code (``TopoUniform``) balances memory
  instead, with a share of ``sum(reserve) / k + max(reserve)`` per device (reserve as below);
  the device moves on when ``load + reserve > share``. Either way the last device takes the
  rest.
* **Memory.** As Baechi (and our m-ETF), conservatively: a group reserves its persistent
  bytes plus all its output bytes, as if nothing were freed. A group that does not fit the
  current device moves the fill pointer to the next device with room; if no later device has
  room, the first earlier one with room takes it; if none has room under that rule, the first
  device where the group's persistent bytes still fit (with a note on the placement), and
  ``Placer.place`` judges real peak memory by simulation. :class:`InfeasiblePlacementError` if
  its variables fit nowhere. Tensors received from other devices are not counted, so a
  device that consumes many remote activations (the last stage, which runs much of the
  backward pass) can still run out of memory in the simulation.

Deterministic: the seed is ignored.
"""

from __future__ import annotations

import numpy as np

from tf_autoplace.core.problem import PlacementProblem, Placer
from tf_autoplace.core.units import format_bytes
from tf_autoplace.errors import ConfigError, InfeasiblePlacementError
from tf_autoplace.heuristics._common import (
    compute_devices,
    fallback_device,
    group_compute_time,
    group_memory,
    once_per_graph,
)
from tf_autoplace.sim.layout import fifo_order

BALANCES = ("compute", "memory")


def fifo_topological_order(graph) -> np.ndarray:
    """[n] ops in Kahn's order with a FIFO queue (module docstring), read-only: read once per
    graph, as best_heuristic runs m-TOPO on every prefix of the devices."""
    return once_per_graph(graph, ("fifo order",), lambda: _fifo_order(graph))


def _fifo_order(graph) -> np.ndarray:
    n = graph.num_ops
    src = np.concatenate([graph.edge_src, graph.ctrl_src]).astype(np.int64)
    dst = np.concatenate([graph.edge_dst, graph.ctrl_dst]).astype(np.int64)
    pairs = np.unique(src * n + dst)  # one dependency per op pair
    src, dst = np.divmod(pairs, n)
    order = fifo_order(n, np.searchsorted(src, np.arange(n + 1)), dst,
                       np.bincount(dst, minlength=n))
    order.flags.writeable = False
    return order


def group_order(problem: PlacementProblem, op_order: np.ndarray) -> np.ndarray:
    """[G] groups ordered by the position of their first op in ``op_order``."""
    labels = problem.grouping.labels
    first = np.full(problem.grouping.num_groups, problem.graph.num_ops, np.int64)
    np.minimum.at(first, labels[op_order], np.arange(len(op_order)))
    return np.argsort(first, kind="stable")


class MemoryAwareTopoPlacer(Placer):
    """Baechi's m-TOPO over the problem's groups (see module docstring).

    Args:
      balance: ``"compute"`` (equal compute time per device) or ``"memory"`` (Baechi's
        released code: equal conservative memory per device).
    """

    name = "m_topo"

    def __init__(self, balance: str = "compute"):
        if balance not in BALANCES:
            raise ConfigError(f"balance must be one of {BALANCES}, got {balance!r}")
        self.balance = balance

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        devices = compute_devices(problem)
        k = len(devices)
        allowed = problem.group_allowed
        on_compute = allowed[:, devices].any(axis=1)
        persistent, reserve = group_memory(problem)
        # The device moves on when load + part * weight > share (module docstring).
        if self.balance == "compute":
            weight = group_compute_time(problem, devices)
            share, part = weight[on_compute].sum() / k, 0.5
        else:
            weight = reserve
            share = weight[on_compute].sum() / k + weight[on_compute].max(initial=0.0)
            part = 1.0
        capacity = problem.cluster.memory.astype(np.float64)
        used = np.zeros(problem.cluster.num_devices)
        used_persistent = np.zeros(problem.cluster.num_devices)
        load = np.zeros(k)

        group_device = np.full(problem.grouping.num_groups, -1, np.int64)
        current = 0
        loose_groups = 0
        for g in group_order(problem, fifo_topological_order(problem.graph)).tolist():
            if not on_compute[g]:
                d = fallback_device(problem, g)
                group_device[g] = d
                used[d] += reserve[g]
                used_persistent[d] += persistent[g]
                continue
            if current < k - 1 and load[current] > 0 and \
                    load[current] + part * weight[g] > share:
                current += 1
            fits = allowed[g, devices] & (used[devices] + reserve[g] <= capacity[devices])
            if not fits[current]:
                later = np.flatnonzero(fits[current:])
                if len(later):
                    current += int(later[0])
            if fits[current]:
                slot = current
            elif fits.any():
                slot = int(np.flatnonzero(fits)[0])
            else:
                loose = allowed[g, devices] & (
                    used_persistent[devices] + persistent[g] <= capacity[devices])
                if not loose.any():
                    op = problem.graph.names[int(problem.grouping.members(g)[0])]
                    raise InfeasiblePlacementError(
                        f"m_topo: no device has room for the variables of the group of op "
                        f"{op!r} ({format_bytes(persistent[g])})")
                slot = current if loose[current] else int(np.flatnonzero(loose)[0])
                loose_groups += 1
            d = int(devices[slot])
            group_device[g] = d
            load[slot] += weight[g]
            used[d] += reserve[g]
            used_persistent[d] += persistent[g]
        if loose_groups:
            self.notes.append(f"m_topo: {loose_groups} groups did not fit any device under the "
                              "conservative memory rule and were placed where their variables "
                              "fit; the simulation judges their real peak memory")
        return problem.grouping.expand(group_device).astype(np.int32)
