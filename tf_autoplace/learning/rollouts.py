"""Evaluating batches of placements: the worker pool the learned placers' searches share.

A learned placer that samples whole placements (Post's softmax tables, HDP's grouper and
placer, GDP's attention policy) hands a batch of op placements to an :class:`Evaluator` and
gets back, for each, what the simulator predicts: the step time, the worst memory overshoot,
and the memory-penalised runtime ``R = r + c * ReLU(m - M)`` (Placeto A.7, through
:func:`tf_autoplace.sim.memory_penalized_runtime`) that every learned placer here minimises.

Backends (:mod:`tf_autoplace.learning.workers`):

* ``workers=1``: in the calling process, on ``threads`` threads (the simulator's kernel
  releases the GIL, so two threads simulate two placements at once on two cores).
* ``workers > 1``: a pool of ``spawn`` processes. The problem is sent to each worker once,
  when it starts (pickled into the pool's initializer), not with every batch.
* ``ray_address`` set: ``workers`` Ray actors. The problem is put in Ray's object store once
  and each actor builds its simulator from it once; an actor that dies is restarted by Ray and
  its chunk simulated again.

A batch is cut into one contiguous chunk per worker; a single placement is simulated in the
calling process (a round trip would cost more than the simulation). The simulator is
deterministic and results come back in batch order, so a search gives the same placements
whatever the backend and the number of workers.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import os
import threading
from typing import Callable, Sequence

import numpy as np

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.errors import ConfigError
from tf_autoplace.learning.workers import worker_pool
from tf_autoplace.sim import overflow_gb


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
                   memory_penalty: float, below: float | None = None) -> np.ndarray:
    """[B, 3] (R, makespan, overflow GB) of each row of ``placements`` ([B, n] device index per
    op), simulated in this process (``below`` as for :meth:`Evaluator.evaluate`)."""
    # One kernel call for the batch; a row cut off at ``below`` has makespan inf, peak 0.
    makespan, peak = problem.simulator.summaries(placements, below=below)
    over = overflow_gb(peak, problem.cluster)
    return np.stack([makespan + memory_penalty * over, makespan, over], axis=1)


def _problem(problem: PlacementProblem) -> PlacementProblem:
    """A worker's context: the problem, with its simulator built once."""
    problem.simulator  # noqa: B018  (a cached property: built here, once per worker)
    return problem


def _run_chunk(problem: PlacementProblem, task) -> np.ndarray:
    placements, memory_penalty, below = task
    return evaluate_batch(problem, placements, memory_penalty, below)


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
    :meth:`close`) so that workers and threads end with the search. Several threads may
    evaluate at once (:meth:`in_threads`).

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
        self._local = threading.local()  # .alone: this thread simulates its batches itself
        self._counting = threading.Lock()

    @contextlib.contextmanager
    def in_this_thread(self):
        """Within the block, the batches the calling thread evaluates are simulated in that
        thread alone, not cut over the evaluator's threads (what :meth:`in_threads` gives each
        task). The figures are the same either way."""
        self._local.alone = True
        try:
            yield self
        finally:
            self._local.alone = False

    def in_threads(self, tasks: Sequence[Callable[[], object]], *,
                   on_error: Callable[[], None] = lambda: None) -> list:
        """Run ``tasks`` (callables without arguments that evaluate on this evaluator), up to
        ``threads`` at once, on the calling thread and the evaluator's own threads, each
        evaluating its batches in the thread it runs in (:meth:`in_this_thread`); returns
        their results in order. With one thread (or workers out of this process) they run
        one after the other in the calling thread.

        For a caller with independent searches
        (:func:`tf_autoplace.placers.auto.local_search.race`): a search's batches are small (a
        few placements), so one search per thread keeps the cores busier than two threads
        sharing each batch. The tasks run on the evaluator's threads rather than new ones
        because every thread that allocates gets malloc arenas of its own: new threads for
        every call grew the peak memory of a placement of an 85k-op graph by about 35 MB.

        If a task raises, or the caller is interrupted, ``on_error()`` is called (so that the
        running tasks can end at their next step), no further task starts, and the first
        exception is raised once every running task has returned.
        """
        results: list = [None] * len(tasks)
        pending = iter(range(len(tasks)))
        lock = threading.Lock()
        failed: list[BaseException] = []

        def fail(error: BaseException) -> None:
            with lock:
                failed.append(error)
                first = len(failed) == 1
            if first:
                on_error()

        def drain() -> None:
            while True:
                with lock:
                    k = None if failed else next(pending, None)
                if k is None:
                    return
                try:
                    with self.in_this_thread():
                        results[k] = tasks[k]()
                except BaseException as error:  # noqa: B036 (re-raised by the caller's thread)
                    fail(error)
                    return

        helpers = min(self.threads, len(tasks)) - 1
        others = [self._threads.submit(drain) for _ in range(helpers)] if helpers > 0 else []
        try:
            drain()
            concurrent.futures.wait(others)
        except BaseException as error:  # interrupted while waiting: stop the others first
            fail(error)
            concurrent.futures.wait(others)
        if failed:
            raise failed[0]
        return results

    def evaluate(self, placements: np.ndarray, *, below: float | None = None) -> Evaluation:
        """Simulate each row of ``placements`` ([B, n] int device index per op).

        Args:
          placements: [B, n] device index per op.
          below: None, or R in seconds: a row whose step time is at least ``below`` (so whose
            R is too) is scored ``inf`` (makespan ``inf``, no overflow), found sooner than by
            simulating it whole (``Simulator.summaries``); the other rows are exact. For a
            search that keeps a placement only if it beats ``below``.

        Raises:
          ConfigError: ``placements`` is not [B, n].
        """
        placements = np.asarray(placements)
        n = self.problem.graph.num_ops
        if placements.ndim != 2 or placements.shape[1] != n:
            raise ConfigError(f"placements must have shape [B, {n}], got {placements.shape}")
        if (self._threads is not None and len(placements) >= 2
                and not getattr(self._local, "alone", False)):
            chunks = [c for c in np.array_split(placements, self.threads) if len(c)]
            others = [self._threads.submit(evaluate_batch, self.problem, c, self.memory_penalty,
                                           below) for c in chunks[1:]]
            first = evaluate_batch(self.problem, chunks[0], self.memory_penalty, below)
            rows = np.concatenate([first] + [f.result() for f in others])
        elif self.pool.backend == "in-process" or len(placements) < 2:
            rows = evaluate_batch(self.problem, placements, self.memory_penalty, below)
        else:
            chunks = [c for c in np.array_split(placements, self.workers) if len(c)]
            rows = np.concatenate(self.pool.map(
                _run_chunk, [(c, self.memory_penalty, below) for c in chunks]))
        with self._counting:
            self.samples += len(placements)
        return Evaluation(scores=rows[:, 0], makespan=rows[:, 1], overflow_gb=rows[:, 2])

    def close(self) -> None:
        self.pool.close()
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
