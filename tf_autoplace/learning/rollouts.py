"""Evaluating batches of placements: the worker pool the learned placers' searches share.

A learned placer that samples whole placements (Post's softmax tables, HDP's grouper and
placer, GDP's attention policy) hands a batch of op placements to an :class:`Evaluator` and
gets back, for each, what the simulator predicts: the step time, the worst memory overshoot,
and the memory-penalised runtime ``R = r + c * ReLU(m - M)`` (Placeto A.7, through
:func:`tf_autoplace.sim.memory_penalized_runtime`) that every learned placer here minimises.

Backends (:mod:`tf_autoplace.learning.workers`):

* ``workers=1``: in the calling process, on ``threads`` threads (the simulator's kernel
  releases the GIL, so two threads simulate two placements at once on two cores), each taking
  the next row of the batch not yet taken.
* ``workers > 1``: a pool of ``spawn`` processes. The problem is sent to each worker once,
  when it starts (pickled into the pool's initializer), not with every batch.
* ``ray_address`` set: ``workers`` Ray actors. The problem is put in Ray's object store once
  and each actor builds its simulator from it once; an actor that dies is restarted by Ray and
  its chunk simulated again.

A batch is cut into one contiguous chunk per worker; a single placement is simulated in the
calling process (a round trip would cost more than the simulation). The simulator is
deterministic and results come back in batch order, so a search gives the same placements
whatever the backend and the number of workers.

A search that keeps a placement only when it beats its best so far says so (``cutoff``: a
row's simulation stops once it cannot), and a search whose rows are small changes of one
placement names it (``base``: in this process the rows are simulated from a trace of it,
each from the last snapshot before its change matters). Neither changes a figure the search
acts on (:meth:`Evaluator.evaluate`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import math
import os

import numpy as np

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.errors import ConfigError
from tf_autoplace.learning.workers import worker_pool
from tf_autoplace.sim import Trace, memory_penalized_runtime

GB = 1e9
# Batches in a row with one base placement after which its trace is made (Evaluator.evaluate).
TRACE_AFTER = 3


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What the simulator says of a batch of B placements.

    Attributes:
      scores: [B] memory-penalised runtime R in seconds (lower is better).
      makespan: [B] simulated step time in seconds.
      overflow_gb: [B] the largest overshoot of a device's memory, in GB (0 when it fits).
    """

    scores: np.ndarray
    makespan: np.ndarray
    overflow_gb: np.ndarray

    @property
    def fits(self) -> np.ndarray:
        """[B] bool: the placement fits every device's memory."""
        return self.overflow_gb <= 0.0


def evaluate_batch(problem: PlacementProblem, placements: np.ndarray,
                   memory_penalty: float, cutoff: float = math.inf,
                   trace: Trace | None = None) -> np.ndarray:
    """[B, 3] (R, makespan, overflow GB) of each row of ``placements`` ([B, n] device index per
    op), simulated in this process (from ``trace``, a trace of the problem's simulator, when
    given); ``(inf, inf, inf)`` for a row whose step time the simulator found to be at least
    ``cutoff`` seconds before it ended."""
    out = np.empty((len(placements), 3))
    capacity = problem.cluster.memory.astype(np.float64)
    for b, devices in enumerate(placements):
        sim = problem.simulator.summary(devices, cutoff=cutoff, trace=trace)
        if sim is None:
            out[b] = math.inf
            continue
        over = max(0.0, float((sim.peak_memory.astype(np.float64) - capacity).max()) / GB)
        out[b] = (memory_penalized_runtime(sim, problem.cluster, memory_penalty),
                  sim.makespan, over)
    return out


def _problem(problem: PlacementProblem) -> PlacementProblem:
    """A worker's context: the problem, with its simulator built once."""
    problem.simulator  # noqa: B018  (a cached property: built here, once per worker)
    return problem


def _run_chunk(problem: PlacementProblem, task) -> np.ndarray:
    placements, memory_penalty, cutoff = task
    return evaluate_batch(problem, placements, memory_penalty, cutoff)


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


class Evaluator:
    """Scores batches of placements of one problem (see the module docstring).

    Args:
      problem: the problem every batch belongs to.
      workers: workers that simulate (1 without ``ray_address``: this process).
      memory_penalty: c in R = r + c * ReLU(m - M), seconds per GB over capacity.
      ray_address: run the workers as Ray actors on this cluster (``"auto"``,
        ``"HOST:PORT"``, ``"local"``); None: local processes.
      threads: with one in-process worker, threads that simulate the rows of a batch
        (>= 1; the calling thread is one of them). The scores do not depend on it.

    ``samples`` counts the placements evaluated so far. Use as a context manager (or call
    :meth:`close`) so that workers and threads end with the search.

    Raises:
      ConfigError: a memory penalty below 0, or threads not an int >= 1.
    """

    def __init__(self, problem: PlacementProblem, *, workers: int = 1,
                 memory_penalty: float = 2.0, ray_address: str | None = None,
                 threads: int = 1):
        if not (isinstance(memory_penalty, (int, float)) and memory_penalty >= 0):
            raise ConfigError(f"memory_penalty must be a number >= 0, got {memory_penalty!r}")
        if isinstance(threads, bool) or not (isinstance(threads, int) and threads >= 1):
            raise ConfigError(f"threads must be an int >= 1, got {threads!r}")
        self.problem = problem
        self.memory_penalty = float(memory_penalty)
        self.samples = 0
        self.pool = worker_pool(_problem, (problem,), workers=workers, ray_address=ray_address)
        self.workers = self.pool.size
        self.threads = threads if self.pool.backend == "in-process" else 1
        self._threads = (concurrent.futures.ThreadPoolExecutor(self.threads - 1)
                         if self.threads > 1 else None)
        # The last base placement, its trace, the batches in a row with it, and the events of
        # the last trace (None: none yet).
        self._base, self._trace, self._batches, self._events = None, None, 0, None

    def evaluate(self, placements: np.ndarray, *, cutoff: float = math.inf,
                 base: np.ndarray | None = None) -> Evaluation:
        """Simulate each row of ``placements`` ([B, n] int device index per op).

        Args:
          placements: [B, n] int device index per op.
          cutoff: seconds: a row whose step time the simulator finds to be at least this
            before its simulation ends is not simulated further, and scores ``inf`` (with
            ``inf`` makespan and overflow: it does not fit). A search that keeps a placement
            only when it scores under its best so far passes that best: since R is at least
            the step time, the rows it would keep come back exactly as without it.
            ``inf``: every row simulated to its end.
          base: [n] a placement the rows differ from in a few ops (a search's current
            placement), or None. In this process, once :data:`TRACE_AFTER` batches in a row
            had the same base, the rows are simulated from a trace of it
            (``Simulator.trace``): the same figures, with the events before the first one a
            row changes not simulated again.
        """
        placements = np.asarray(placements)
        n = self.problem.graph.num_ops
        if placements.ndim != 2 or placements.shape[1] != n:
            raise ConfigError(f"placements must have shape [B, {n}], got {placements.shape}")
        cutoff = float(cutoff)
        local = self.pool.backend == "in-process" or len(placements) < 2
        trace = self._trace_of(base) if base is not None and local else None
        if self._threads is not None and len(placements) >= 2:
            rows = self._on_threads(placements, cutoff, trace)
        elif local:
            rows = evaluate_batch(self.problem, placements, self.memory_penalty, cutoff, trace)
        else:
            chunks = [c for c in np.array_split(placements, self.workers) if len(c)]
            rows = np.concatenate(self.pool.map(
                _run_chunk, [(c, self.memory_penalty, cutoff) for c in chunks]))
        self.samples += len(placements)
        return Evaluation(scores=rows[:, 0], makespan=rows[:, 1], overflow_gb=rows[:, 2])

    def _on_threads(self, placements: np.ndarray, cutoff: float,
                    trace: Trace | None) -> np.ndarray:
        """``evaluate_batch`` of ``placements`` on this process's threads, the calling one
        included, each taking the next row not yet taken: simulations that a cutoff or a
        trace makes shorter or longer than others keep every thread busy to the end."""
        out = np.empty((len(placements), 3))
        taken = itertools.count()  # next() on it is atomic: one row per taker

        def work():
            while (b := next(taken)) < len(placements):
                out[b] = evaluate_batch(self.problem, placements[b:b + 1], self.memory_penalty,
                                        cutoff, trace)[0]

        others = [self._threads.submit(work)
                  for _ in range(min(self.threads, len(placements)) - 1)]
        work()
        for other in others:
            other.result()
        return out

    def _trace_of(self, base: np.ndarray) -> Trace | None:
        """The trace of ``base`` to simulate rows from: None for the first
        :data:`TRACE_AFTER` batches in a row with this base (a trace costs about two
        simulations, and a base a search leaves soon would not repay it), then one trace,
        kept until another base comes."""
        if self._base is not None and np.array_equal(base, self._base):
            self._batches += 1
            if self._trace is None and self._batches > TRACE_AFTER:
                self._trace = self.problem.simulator.trace(self._base, events=self._events)
                self._events = self._trace.num_events  # a base's successors' are alike
            return self._trace
        self._base, self._trace, self._batches = np.array(base, dtype=np.int32), None, 1
        return None

    def close(self) -> None:
        self.pool.close()
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
