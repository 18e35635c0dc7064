"""The measurement protocol: step times of placements on a shared machine, with their noise.

Every measured figure the product prints (``measure_steps``, ``verify``, ``tf-autoplace
fidelity``) comes from :func:`measure_placements`:

1. every placement of one graph gets its own Session, all open at once
   (:func:`tf_autoplace.hw.runner.run_interleaved`), and its warm-up steps in rounds (the first
   partition, optimise and allocate; TensorFlow's executor then takes about 70 steps to learn
   which kernels are cheap enough to run inline: :func:`tf_autoplace.hw.runner.warm_up`);
2. then at least :data:`MIN_STEPS` rounds, in each of which every placement runs one untimed
   and one timed step, in an order shuffled per round: a load that comes and goes on a shared
   machine falls on every placement alike instead of on whichever ran at that moment, and the
   timed step follows its own placement's step, as in a training loop (a step that follows
   other Sessions' finds the caches full of their tensors, and on graphs of small ops runs
   markedly slower, by an amount that grows with the number of Sessions taking turns;
   docs/experiments.md, "Simulator against this machine: what moved the figures");
3. each placement's figure is the median of its timed steps, with a 95% bootstrap interval of
   that median (:func:`median_interval`: the percentile interval of the medians of resampled
   steps);
4. the machine's 1-minute load average is read just before the timed rounds and after them,
   and kept with the figures, with the cores other processes kept busy during the rounds
   (:class:`OtherCores`). The load average counts this process's own threads too: the
   warm-up, which keeps both cores of a 2-core machine busy for up to a minute, lifts it
   towards 2 by itself, so it is read after the warm-up, and with ``max_load`` the protocol
   first waits there (:func:`wait_for_quiet`) until it has fallen to that level (then a
   second of untimed rounds wakes the idle cores up again). The timed rounds then start on a
   machine that quiet, and last well under the average's minute on
   the graphs this tool measures; what the load after them adds is mostly this process's.

Two placements are *distinguishable* only where their intervals do not overlap
(:meth:`StepTimes.distinguishable`); otherwise the measurement cannot tell them apart and
nothing should be concluded from the order of their medians. A load average above
:data:`QUIET_LOAD` means other work shared the cores: the figures are then noisier, and on a
2-core machine another busy process can halve the cores a measured step gets, so they are not
comparable with figures taken on a quiet machine.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Callable, Mapping

import numpy as np

from tf_autoplace.core.units import ms_decimals
from tf_autoplace.errors import ConfigError
from tf_autoplace.hw.runner import WARMUP_STEPS, Measurement, RunConfig, run_interleaved
from tf_autoplace.hw.workload import Workload

MIN_STEPS = 15  # timed steps per placement: fewer leave the median's interval too wide to use
QUIET_LOAD = 1.5  # 1-minute load average above which a 2-core machine is not quiet
CONFIDENCE = 0.95


def load_average() -> float:
    """The machine's 1-minute load average (NaN where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return math.nan


def machine_busy_s(stat_path: str = "/proc/stat") -> float:
    """CPU seconds every core of this machine has been busy since boot (``/proc/stat``: user,
    nice, system, irq and softirq time; not idle, iowait or steal), NaN where the platform does
    not say."""
    try:
        with open(stat_path) as stat:
            fields = stat.readline().split()
        if fields[0] != "cpu":
            return math.nan
        return sum(int(v) for v in fields[1:4] + fields[6:8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return math.nan


def wait_for_quiet(max_load: float | None, log: Callable[[str], None] | None = None, *,
                   poll_s: float = 10.0) -> float:
    """Wait until the 1-minute load average is at most ``max_load``; return the seconds waited.

    Args:
      max_load: the level to wait for (None: return at once).
      log: told once when a wait begins and once when it ends (None: silent).
      poll_s: seconds between readings (> 0).

    Returns:
      The seconds waited: 0.0 when the load was already at most ``max_load`` (no pause).
    """
    if max_load is None:
        return 0.0
    began, paused = time.perf_counter(), False
    while (load := load_average()) > max_load:
        if not paused and log is not None:
            log(f"  load {load:.2f} > {max_load:g}; waiting for it to settle")
        paused = True
        time.sleep(poll_s)
    if not paused:
        return 0.0
    waited = time.perf_counter() - began
    if log is not None:
        log(f"  load {load:.2f} after {waited:.0f} s")
    return waited


class OtherCores:
    """How many cores other processes kept busy between construction and :meth:`stop`: the
    machine's busy CPU time (:func:`machine_busy_s`) less this process's own (every thread),
    over the wall time. Unlike the load average it leaves out the measurement itself. NaN
    where the platform does not say. (On a TensorFlow cluster of local servers, the servers
    are other processes.)"""

    def __init__(self):
        self._busy, self._own, self._wall = (machine_busy_s(), time.process_time(),
                                             time.perf_counter())

    def stop(self) -> float:
        wall = time.perf_counter() - self._wall
        others = (machine_busy_s() - self._busy) - (time.process_time() - self._own)
        if not (wall > 0 and math.isfinite(others)):
            return math.nan
        return max(0.0, others / wall)


def median_interval(times, *, confidence: float = CONFIDENCE, resamples: int = 2000,
                    seed: int = 0) -> tuple[float, float, float]:
    """The median of ``times`` and a bootstrap percentile interval for it.

    Args:
      times: the timed steps (s), at least one, all finite.
      confidence: the interval's coverage, in (0, 1).
      resamples: bootstrap resamples (>= 100).
      seed: the resampling seed: the same steps and seed give the same interval.

    Returns:
      ``(median, low, high)`` in seconds, ``low <= median <= high``.

    Raises:
      ConfigError: no steps, a step that is not finite, or settings out of range.
    """
    times = np.asarray(times, dtype=np.float64)
    if times.ndim != 1 or times.size == 0 or not np.isfinite(times).all():
        raise ConfigError(f"median_interval needs a non-empty 1-D sample of finite step times, "
                          f"got {times!r}")
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be in (0, 1), got {confidence!r}")
    if not (isinstance(resamples, int) and resamples >= 100):
        raise ConfigError(f"resamples must be an int >= 100, got {resamples!r}")
    median = float(np.median(times))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, times.size, size=(resamples, times.size))
    medians = np.median(times[draws], axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(medians, [tail, 1 - tail])
    return median, float(min(low, median)), float(max(high, median))


@dataclasses.dataclass(frozen=True, eq=False)
class StepTimes:
    """One placement's measured steps under the protocol.

    Attributes:
      name: what the placement is (``"single device"``, ``"auto"``, ...).
      times_s: [steps] the timed steps, in round order (s).
      median_s: their median (s).
      low_s, high_s: the median's 95% bootstrap interval (s).
      measurement: the runner's measurement (with any traced steps).
    """

    name: str
    times_s: np.ndarray
    median_s: float
    low_s: float
    high_s: float
    measurement: Measurement | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def of(cls, name: str, times_s, *, seed: int = 0,
           measurement: Measurement | None = None) -> "StepTimes":
        """The figures of ``times_s`` (:func:`median_interval`)."""
        median, low, high = median_interval(times_s, seed=seed)
        return cls(name=name, times_s=np.asarray(times_s, dtype=np.float64), median_s=median,
                   low_s=low, high_s=high, measurement=measurement)

    def distinguishable(self, other: "StepTimes") -> bool:
        """Whether the two medians' intervals do not overlap."""
        return self.high_s < other.low_s or other.high_s < self.low_s

    def faster_than(self, other: "StepTimes") -> bool:
        """Measured faster beyond noise: distinguishable and the smaller median."""
        return self.distinguishable(other) and self.median_s < other.median_s

    def describe(self) -> str:
        """``"12.30 ms [12.10, 12.52]"`` (``"0.331 ms [0.328, 0.334]"`` below a millisecond:
        :func:`~tf_autoplace.core.units.ms_decimals`)."""
        d = ms_decimals(self.median_s, self.low_s, self.high_s)
        return (f"{self.median_s * 1e3:.{d}f} ms [{self.low_s * 1e3:.{d}f}, "
                f"{self.high_s * 1e3:.{d}f}]")


@dataclasses.dataclass(frozen=True, eq=False)
class ProtocolResult:
    """Placements of one graph measured together.

    Attributes:
      placements: one :class:`StepTimes` per placement, in the order they were given.
      steps: timed steps (rounds) per placement.
      warmup_steps: untimed steps per placement before the rounds.
      load_before, load_after: the 1-minute load average just before and after the timed
        rounds (NaN: unknown).
      other_cores: cores other processes kept busy during the timed rounds
        (:class:`OtherCores`; NaN: unknown).
    """

    placements: tuple[StepTimes, ...]
    steps: int
    warmup_steps: int
    load_before: float
    load_after: float
    other_cores: float = math.nan

    @property
    def quiet(self) -> bool:
        """Whether the load stayed at or below :data:`QUIET_LOAD` before and after."""
        return self.load_before <= QUIET_LOAD and self.load_after <= QUIET_LOAD

    def __getitem__(self, name: str) -> StepTimes:
        for placement in self.placements:
            if placement.name == name:
                return placement
        raise KeyError(name)

    def distinguishable_pairs(self) -> tuple[int, int]:
        """(pairs whose intervals do not overlap, all pairs)."""
        k = len(self.placements)
        hits = sum(self.placements[i].distinguishable(self.placements[j])
                   for i in range(k) for j in range(i + 1, k))
        return hits, k * (k - 1) // 2

    def load_text(self) -> str:
        """``"load 0.80 -> 1.10"``, with a warning when the machine was not quiet (the
        warning follows the load it is about, before the cores of other processes)."""
        text = load_text(self.load_before, self.load_after)
        if math.isfinite(self.other_cores):
            text += f", other processes {self.other_cores:.2f} cores"
        return text


def load_text(before: float, after: float) -> str:
    """``"load 0.80 -> 1.10"`` (the 1-minute load average before and after a measurement),
    with a warning unless both are at most :data:`QUIET_LOAD` (NaN, unknown, is not quiet)."""
    text = f"load {before:.2f} -> {after:.2f}"
    if not (before <= QUIET_LOAD and after <= QUIET_LOAD):
        text += (f" (above {QUIET_LOAD}: the machine was busy, the figures are noisy and "
                 "not comparable with a quiet machine's)")
    return text


def check_steps(steps, what: str = "steps") -> int:
    """``steps`` as an int >= :data:`MIN_STEPS`.

    Raises:
      ConfigError: fewer steps (or not an int); the message says why the protocol needs them.
    """
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < MIN_STEPS:
        raise ConfigError(f"{what} must be an int >= {MIN_STEPS}, got {steps!r}: the protocol "
                          f"times at least {MIN_STEPS} steps of every placement, so that the "
                          "median's interval separates placements that differ")
    return int(steps)


def measure_placements(workload: Workload, assignments: Mapping[str, Mapping[str, str]], *,
                       steps: int = MIN_STEPS, warmup_steps: int = WARMUP_STEPS,
                       trace: str | None = None,
                       config: RunConfig | None = None, seed: int = 0,
                       max_load: float | None = None,
                       log: Callable[[str], None] | None = None) -> ProtocolResult:
    """Measure placements of one workload under the protocol (module docstring).

    Args:
      workload: what one step runs.
      assignments: name -> op name -> device string, one entry per placement (ops an
        assignment does not name keep the graph's device).
      steps: timed rounds (>= :data:`MIN_STEPS`).
      warmup_steps: untimed steps per placement first (>= 0).
      trace: the name of a placement to run one fully traced step of after the rounds (for the
        Chrome trace's measured lanes); None: none.
      config: the Sessions' settings (threads, Grappler); its step counts are replaced.
      seed: orders the rounds and seeds the bootstrap.
      max_load: after the warm-up, wait until the 1-minute load average is at most this
        before the timed rounds (None: do not wait; module docstring, step 4).
      log: where that wait is told (None: silent).

    Returns:
      The :class:`ProtocolResult`.

    Raises:
      ConfigError: too few steps, no placement, a ``trace`` name not among them, or devices
        this machine does not have.
      MeasurementError: TensorFlow cannot run a placement.
    """
    steps = check_steps(steps)
    if not assignments:
        raise ConfigError("measure_placements needs at least one placement")
    if trace is not None and trace not in assignments:
        raise ConfigError(f"trace={trace!r} is not one of the placements {list(assignments)}")
    names = list(assignments)
    config = dataclasses.replace(config or RunConfig(), steps=steps, warmup_steps=warmup_steps,
                                 trace_steps=0)
    bracket = {}

    def before_timing():  # after the warm-up: settle, then read the load
        waited = wait_for_quiet(max_load, log)
        bracket["load"], bracket["others"] = load_average(), OtherCores()
        return waited

    measured = run_interleaved(workload, [assignments[n] for n in names], config, seed=seed,
                               trace=None if trace is None else names.index(trace),
                               before_timing=before_timing)
    other_cores = bracket["others"].stop()
    after = load_average()
    before = bracket["load"]
    return ProtocolResult(
        placements=tuple(StepTimes.of(name, m.step_times_s, seed=seed, measurement=m)
                         for name, m in zip(names, measured)),
        steps=steps, warmup_steps=warmup_steps, load_before=before, load_after=after,
        other_cores=other_cores)
