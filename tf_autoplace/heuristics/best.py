"""The best of the fast heuristics: run each, simulate, keep the fastest placement that fits.

Every heuristic here places an 8k-op graph in about a second, and none wins everywhere (the
expert wins on layered RNNs, METIS on some CNNs, one device on Transformers), so trying them all
costs little and removes the guess. Three rules make the result dependable on any graph:

* **A heuristic that fails is skipped.** One that raises an :class:`AutoplaceError` (m-ETF when
  no device has room for a group, the CPU-only baseline on a cluster without a CPU, ...) drops
  out and the report's notes say which and why; the others still compete.
* **Memory pressure moves work to the host.** A candidate that overflows a device's memory is
  repaired by :func:`tf_autoplace.heuristics.offload.offload` (colocation groups move to GPUs
  with room, then to the CPU host) and competes if the repair fits. When none fits even so,
  every op on the host is the last resort; only when that does not fit either is an
  :class:`InfeasiblePlacementError` raised, naming the graph's total need against the
  cluster's capacity. Every op on the host also competes where it is the fastest (slow links,
  ops without GPU kernels among the GPU ops), and only there.
* **More devices never make it worse.** Each heuristic also runs on the prefixes of the compute
  devices with 1, 2, 4, ... of them (with every other device, such as the CPU host, kept), and
  those placements compete too: a placement that leaves devices idle is valid on the larger
  cluster, so adding devices to a cluster can only add candidates.

Ties go to the earlier name in ``candidates`` (and to fewer devices). Each candidate runs with
its default seed (METIS's partition depends on it), so the full-cluster figures are the ones the
benchmark table reports for that candidate.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Iterator, Sequence

import numpy as np

from tf_autoplace.core.problem import PlacementProblem, Placer, check_memory
from tf_autoplace.errors import AutoplaceError, ConfigError, InfeasiblePlacementError
from tf_autoplace.heuristics._common import compute_devices
from tf_autoplace.heuristics.cpu_only import CpuOnlyPlacer
from tf_autoplace.heuristics.expert import ExpertPlacer
from tf_autoplace.heuristics.metf import MemoryAwareETFPlacer
from tf_autoplace.heuristics.metis import MetisPlacer
from tf_autoplace.heuristics.offload import memory_need, offload
from tf_autoplace.heuristics.single import SingleDevicePlacer
from tf_autoplace.heuristics.topo import MemoryAwareTopoPlacer

# The fast heuristics best_heuristic chooses among, by registered name, in tie-break order.
FAST_HEURISTICS = {
    "m_etf": MemoryAwareETFPlacer,
    "expert": ExpertPlacer,
    "metis": MetisPlacer,
    "m_topo": MemoryAwareTopoPlacer,
    "single": SingleDevicePlacer,
}
DEFAULT_CANDIDATES = tuple(FAST_HEURISTICS)


@dataclasses.dataclass(frozen=True, eq=False)
class Candidate:
    """One heuristic's placement: its label (``metis``, ``expert@2`` for the expert on the first
    2 compute devices, ``+offload`` when repaired), [n] devices, simulated step time (s),
    whether it fits in memory, and its tie-break order."""

    label: str
    devices: np.ndarray
    step_s: float
    fits: bool
    order: int


def device_counts(num_compute: int) -> list[int]:
    """Prefix sizes of the compute devices every heuristic also runs on: 1, 2, 4, ... below
    ``num_compute``, then ``num_compute`` itself (largest first)."""
    counts, k = [], 1
    while k < num_compute:
        counts.append(k)
        k *= 2
    return [num_compute] + counts[::-1]


def _score(problem: PlacementProblem, label: str, devices: np.ndarray,
           order: int) -> Candidate:
    """``devices`` simulated as a candidate; repaired by offload where it overflows a device,
    or kept as not fitting (``" (OOM)"``) where the repair fails."""
    sim = problem.simulator.run(devices)
    if check_memory(problem, sim):
        repaired = offload(problem, devices)
        if repaired is None:
            return Candidate(label + " (OOM)", devices, sim.makespan, False, order)
        label, devices = label + "+offload", repaired
        sim = problem.simulator.run(devices)
    return Candidate(label, devices, sim.makespan, True, order)


class BestHeuristicPlacer(Placer):
    """Args:
      candidates: registered names of the fast heuristics to try (default: all of them).
      subsets: also run them on prefixes of the compute devices (module docstring).
    """

    name = "best_heuristic"

    def __init__(self, candidates: Sequence[str] = DEFAULT_CANDIDATES, *, subsets: bool = True):
        unknown = sorted(set(candidates) - set(FAST_HEURISTICS))
        if unknown or not candidates:
            raise ConfigError(f"best_heuristic candidates must be a non-empty subset of "
                              f"{list(FAST_HEURISTICS)}, got {list(candidates)}")
        self.candidates = tuple(candidates)
        self.subsets = subsets

    def proposals(self, problem: PlacementProblem) -> Iterator[tuple[str, np.ndarray]]:
        """Every candidate placement, as ``(label, [n] devices)`` in tie-break order, one at a
        time: each heuristic on the whole cluster, then on the smaller prefixes; failures are
        skipped and noted once all are made. Labels name the heuristic and, for a prefix, how
        many compute devices it used."""
        compute = compute_devices(problem)
        others = np.setdiff1d(np.arange(problem.cluster.num_devices), compute)
        counts = device_counts(len(compute)) if self.subsets else [len(compute)]
        failed = []
        for k in counts:
            if k == len(compute):
                sub, index, suffix = problem, None, ""
            else:
                index = np.sort(np.concatenate([compute[:k], others]))
                sub, suffix = problem.restricted(index), f"@{k}"
            for name in self.candidates:
                if suffix and name == "single":
                    continue  # the same placement on every prefix
                try:
                    devices = FAST_HEURISTICS[name]().propose(sub)  # its default seed
                except AutoplaceError as e:
                    failed.append(f"{name}{suffix} ({e})")
                    continue
                yield (name + suffix, devices if index is None else
                       index[devices].astype(np.int32))
        if failed:
            self.notes.append("best_heuristic: skipped " + "; ".join(failed))

    def ranked(self, problem: PlacementProblem) -> list[Candidate]:
        """Every proposal, simulated, over-memory ones repaired by offload where possible,
        sorted best first (fits, then step time, then tie-break order). ``notes`` then says
        which heuristics failed."""
        self.notes = []
        # The heuristics are Python; scoring a candidate is mostly simulation, which releases
        # the GIL: each is scored on a second thread while the next heuristic runs.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = []
            for order, (label, devices) in enumerate(self.proposals(problem)):
                problem.simulator  # noqa: B018  (built on this thread, not on both at once)
                pending.append(pool.submit(_score, problem, label, devices, order))
            scored = [future.result() for future in pending]
        host = self._all_on_the_host(problem, len(scored)) if scored else None
        fitting = [c.step_s for c in scored if c.fits]
        if host is not None and not fitting:
            self.notes.append("best_heuristic: no heuristic's placement fits, even repaired; "
                              + ("all on the CPU host does" if host.label == "cpu_only" else
                                 "all on the CPU host, with groups moved to GPUs with room, "
                                 "does"))
            scored.append(host)
        elif host is not None and host.step_s < min(fitting) and not any(
                np.array_equal(host.devices, c.devices) for c in scored):
            scored.append(host)
        scored.sort(key=lambda c: (not c.fits, c.step_s, c.order))
        return scored

    def _all_on_the_host(self, problem: PlacementProblem, order: int) -> Candidate | None:
        """Every op on the CPU host, where that fits: the last resort when no candidate fits,
        even repaired (the repair, which moves a group only where its outputs and variables all
        fit at once, can miss it though the host holds the whole step's peak), and a candidate
        where it is faster than every other (transfers dearer than the GPUs' gain: slow links,
        ops without GPU kernels between the GPU ops). Kept out where it is slower, so it never
        takes a start of ``auto`` from a faster placement. None without a host or when it does
        not fit, even with groups moved from the host to GPUs with room
        (:func:`~tf_autoplace.heuristics.offload.offload`, as for any other candidate)."""
        try:
            devices = CpuOnlyPlacer().propose(problem)
        except AutoplaceError:
            return None
        label, sim = "cpu_only", problem.simulator.run(devices)
        if check_memory(problem, sim):  # the host alone overflows: groups off it to the GPUs
            devices = offload(problem, devices)
            if devices is None:
                return None
            label, sim = "cpu_only+offload", problem.simulator.run(devices)
        return Candidate(label, devices, sim.makespan, True, order)

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        scored = self.ranked(problem)
        if not scored:
            raise InfeasiblePlacementError("best_heuristic: every heuristic failed: "
                                           + "; ".join(self.notes))
        if not scored[0].fits:
            raise InfeasiblePlacementError(
                f"no heuristic found a placement that fits in memory, even with work moved to "
                f"the CPU host: {memory_need(problem)}")
        others = ", ".join(f"{c.label} {c.step_s * 1e3:.1f} ms" for c in scored[1:])
        self.notes.append(f"best_heuristic: {scored[0].label} ({scored[0].step_s * 1e3:.1f} ms) "
                          f"beat {others}")
        return scored[0].devices
