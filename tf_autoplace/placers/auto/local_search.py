"""Local search over placements: move blocks of colocation groups, keep what simulates faster.

Placeto's MDP improves a placement one group move at a time and undoes moves that slow the
step down; the learned policy's job there is to choose the moves. On the zoo a simple proposal
distribution does that job with fewer simulations than a policy that is still learning: most
moves of a good placement are harmful, a few balance load or shorten the critical path, and
the simulator tells which at once. :func:`local_search` is that search, shared by the default
placer (:mod:`tf_autoplace.placers.auto.placer`) to improve the best start it has (a heuristic's
placement, a learned policy's zero-shot placement):

* **Blocks.** The units moved are whole TF colocation groups, merged into blocks by
  Merge-and-Colocate on the graph *partitioned by the current placement* (each device is given
  its own pseudo kernel kind, so no block straddles two devices), at several granularities
  (``levels``: 32, 128, 512 and 2,048 blocks by default, counted beyond the ops that cannot
  merge with anything on their device; see ``merge_and_colocate_levels(spare=True)``). A
  coarse block moves a whole layer or a softmax with its gradients in one step; a fine one
  adjusts the border between two devices. Blocks are re-aligned to the current placement
  when the search stalls.
* **Moves.** A level uniformly at random; a block with probability proportional to its compute
  time on its current device (big blocks change the load most); a destination among the
  devices that can run it: an action device (the GPUs) uniformly, or, with probability
  ``host_share``, another device such as the CPU host. Colocation groups of the block that
  cannot run on the destination stay where they are.
* **Acceptance.** Candidates are scored ``batch`` at a time (in parallel when the
  :class:`~tf_autoplace.learning.rollouts.Evaluator` has workers or threads); the best one is
  kept if its memory-penalised runtime R (Placeto A.7) is lower than the current placement's.
  Once the current placement fits in memory, candidates that overflow are never taken. So the
  search never ends worse than its start, never trades a fitting placement for a faster one
  that overflows, and a start that overflows can be repaired by moves that relieve memory.
* **Repeated candidates.** Between two gains the current placement stays the same, and the
  draws repeat moves (a coarse level has few blocks, and the heavy ones are drawn often): a
  move already scored from the current placement did not gain then and cannot now, so it is
  counted as a scored placement again but not simulated again (and each move is built once
  per placement and blocks). The search takes the same steps as if it were; only the
  simulations are saved.
* **Candidates cut off.** Most candidates are no faster than the current placement, and a
  candidate is kept only if its R beats the current one's, which its step time alone (R's
  lower part) already tells: candidates are simulated with ``below`` set to the current R
  (:meth:`~tf_autoplace.learning.rollouts.Evaluator.evaluate`), without the memory model and
  only until their step passes it; only the faster ones are simulated whole. The steps taken
  are the same as with every candidate simulated whole.
* **Small problems** (at most ``sweep_below`` possible moves over all levels) are searched by
  sweeps instead of draws: every move, in random order, first gain taken, until a whole sweep
  from the current placement gains nothing. That is a local optimum of every block move, so
  the search ends there, at once on a graph of a few ops.
* **Stopping.** At ``max_samples`` simulations, at the deadline, when the step time reaches
  the lower bound, or at a local optimum (sweeps only).
* **Kicks.** A swept search ends at a local optimum long before its budget, and a better one
  is often a few groups away: :func:`iterate_until_stale` then searches again from
  kicks (:func:`kick`) of the best placement (iterated local search) until several in a row find
  nothing faster.

Everything random comes from one generator seeded by the caller, and candidates are scored in
batch order, so the same seed gives the same placement whatever the number of workers.
"""

from __future__ import annotations

import copy
import dataclasses
import numbers
import threading
import time
from typing import Callable

import numpy as np

from tf_autoplace.core.jit import cached_njit
from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.core.settings import check_int, check_number, plain_numbers
from tf_autoplace.errors import ConfigError
from tf_autoplace.grouping import merge_and_colocate_levels
from tf_autoplace.learning.rollouts import Evaluator
from tf_autoplace.outputs.progress import QUIET, Progress


@dataclasses.dataclass(frozen=True)
class LocalSearchConfig:
    """Attributes:
      levels: block granularities, as Merge-and-Colocate's target group counts (each >= 1).
      batch: candidate moves simulated per step (>= 1); the best is kept if it gains.
      host_share: probability (in [0, 1]) that a move targets a device outside the action
        devices (the CPU host) when the block can run there.
      memory_penalty: c in R = r + c * ReLU(m - M), seconds per GB over capacity.
      realign_after: simulations without gain after which blocks are re-aligned to the
        current placement (>= 1).
      sweep_below: problems with at most this many possible moves are swept exhaustively
        (module docstring; >= 0).
    """

    levels: tuple[int, ...] = (32, 128, 512, 2048)
    batch: int = 4
    host_share: float = 0.1
    memory_penalty: float = 2.0
    realign_after: int = 400
    sweep_below: int = 1024

    def __post_init__(self):
        plain_numbers(self)
        if isinstance(self.levels, (str, bytes)) or not self.levels or not all(
                isinstance(x, numbers.Integral) and not isinstance(x, bool) and x >= 1
                for x in self.levels):
            raise ConfigError(f"levels must be a non-empty tuple of ints >= 1, got "
                              f"{self.levels!r}")
        object.__setattr__(self, "levels", tuple(int(x) for x in self.levels))
        check_int("batch", self.batch, low=1)
        check_number("host_share", self.host_share, low=0, high=1)
        check_number("memory_penalty", self.memory_penalty, low=0)
        check_int("realign_after", self.realign_after, low=1)
        check_int("sweep_below", self.sweep_below, low=0)


@dataclasses.dataclass(frozen=True)
class LocalSearchResult:
    """Attributes:
      devices: [n] the best placement found (the start if nothing gained).
      score: its memory-penalised runtime R (seconds).
      samples: placements simulated.
      curve: [(samples so far, best R so far)] at every gain, starting with (0, start's R).
      stopped: why the search ended: "samples", "deadline", "bound" or "local optimum".
    """

    devices: np.ndarray
    score: float
    samples: int
    curve: list
    stopped: str


class _Blocks:
    """Blocks of colocation groups at every level, aligned to one placement (module doc).

    Blocks are numbered flat across levels: block b of level l is block ``start[l] + b``.

    Attributes:
      labels: per level, [n] the block of each op (within its level).
      start: [L + 1] where each level's blocks begin in the flat numbering.
      order, member_start: the ops of block g, ascending, are ``order[member_start[g]:
        member_start[g + 1]]``.
      ok: [G, D] bool: some member of block g can run on device d.
    """

    def __init__(self, problem: PlacementProblem, devices: np.ndarray, levels,
                 runnable: np.ndarray):
        graph, cluster = problem.graph, problem.cluster
        pseudo = np.zeros((graph.num_ops, cluster.num_devices), dtype=bool)
        pseudo[np.arange(graph.num_ops), devices] = True
        partitioned = graph.with_kernels(pseudo, cluster.names)
        self.labels, counts = [], [0]
        orders, member_start, ok, seen = [], [], [], set()
        for grouping in merge_and_colocate_levels(partitioned, sorted(set(levels)), spare=True):
            if grouping.num_groups in seen:  # a graph smaller than this level: same blocks
                continue
            seen.add(grouping.num_groups)
            labels = grouping.labels
            order = np.argsort(labels, kind="stable")
            bounds = np.searchsorted(labels[order], np.arange(grouping.num_groups + 1))
            self.labels.append(labels)
            counts.append(grouping.num_groups)
            member_start.append(bounds[:-1] + graph.num_ops * len(orders))
            orders.append(order)
            ok.append(np.logical_or.reduceat(runnable[order], bounds[:-1], axis=0))
        self.start = np.cumsum(counts)
        self.order = np.concatenate(orders)
        self.member_start = np.append(np.concatenate(member_start), len(self.order))
        self.ok = np.concatenate(ok)


class LocalSearch:
    """One search from one start, which can be run in several legs (:meth:`run`): a caller can
    race searches from several starts and give the rest of the budget to the best (see the
    module docstring for the search itself).

    Attributes:
      current: [n] the best placement so far; ``best`` its R; ``fits`` whether it fits.
      samples: placements scored so far (the start's included); ``curve`` as in
        :class:`LocalSearchResult`; ``stopped``: why the last leg ended (None before any).
      simulations: placements of those actually simulated (the others repeated a candidate
        already scored from the same current placement).
    """

    def __init__(self, problem: PlacementProblem, start: np.ndarray, config: LocalSearchConfig,
                 *, seed: int, evaluator: Evaluator):
        if evaluator.problem is not problem:
            raise ConfigError("the evaluator must score this problem")
        self.problem, self.config, self.evaluator = problem, config, evaluator
        self.rng = np.random.default_rng(seed)
        self.stopped = None
        self.current = np.asarray(start, dtype=np.int32).copy()
        self.ahead, self.ahead_from, self.ahead_used = [], None, 0  # _random_moves
        first = evaluator.evaluate(self.current[None, :])
        self.best, self.fits = float(first.scores[0]), bool(first.fits[0])
        self.samples, self.simulations, self.curve = 1, 1, [(1, self.best)]
        self.op_time = np.where(problem.allowed, problem.op_time, 0.0)
        self._changed()
        # [n, D] the devices each op can run on: those its whole colocation group can
        self.runnable = problem.colocation_allowed[problem.graph.colocation]
        self.num_devices = problem.cluster.num_devices
        self.action = problem.cluster.compute_devices()
        self.others = np.setdiff1d(np.arange(problem.cluster.num_devices), self.action)
        self._align()
        moves = len(self.blocks.ok) * (problem.cluster.num_devices - 1)
        self.sweeping = moves <= config.sweep_below
        self.queue = self._sweep() if self.sweeping else []  # moves left to try from here

    def fork(self, seed: int) -> "LocalSearch":
        """A search from this one's current placement with its own random draws (``seed``),
        sharing what does not depend on them (the blocks, the first simulation)."""
        other = copy.copy(self)
        other.rng = np.random.default_rng(seed)
        other.curve = list(self.curve)
        other.queue = list(self.queue)
        other.current = self.current.copy()
        other.weights, other.tried = copy.copy(self.weights), copy.copy(self.tried)
        other.moves = copy.copy(self.moves)
        other.ahead, other.ahead_from, other.ahead_used = [], None, 0
        return other

    def _changed(self) -> None:
        """Forget what depended on the previous current placement: each op's time on its
        device, the block weights, the moves built from it and those already scored, the
        draws made ahead from it."""
        self._take_back()
        self.busy = self.op_time[np.arange(len(self.current)), self.current]
        self.weights, self.tried, self.moves = {}, set(), {}

    def _align(self) -> None:
        self._take_back()
        self.blocks, self.aligned, self.since_gain = (
            _Blocks(self.problem, self.current, self.config.levels, self.runnable),
            self.current, 0)
        self.weights, self.moves = {}, {}

    def _members(self, flat: int) -> np.ndarray:
        """The ops of block ``flat`` (numbered as in :class:`_Blocks`), ascending."""
        blocks = self.blocks
        return blocks.order[blocks.member_start[flat]:blocks.member_start[flat + 1]]

    def _targets(self, flat: int) -> tuple[list[int], list[int]]:
        """Action devices and other devices some of block ``flat`` could move to: those some
        member can run on, other than the device of its first member."""
        here = int(self.current[self._members(flat)[0]])
        ok = self.blocks.ok[flat]
        return ([int(d) for d in self.action if d != here and ok[d]],
                [int(d) for d in self.others if d != here and ok[d]])

    def _move(self, flat: int, dst: int):
        """The move of block ``flat`` to ``dst`` from the current placement: ``(members, dst,
        key)``, where ``members`` are the ops that move (whole colocation groups that can run
        there and are elsewhere now) and ``key`` tells moves apart (two moves with the same
        key give the same placement); None if nothing moves. Kept until the placement or the
        blocks change (in ``moves``, by ``flat * D + dst``): between two gains most draws
        repeat a move."""
        index = flat * self.num_devices + dst
        out = self.moves.get(index, False)
        if out is False:
            members = self._members(flat)
            moved = members[self.runnable[members, dst] & (self.current[members] != dst)]
            out = self.moves[index] = (
                (moved, dst, (dst, moved.tobytes())) if len(moved) else None)
        return out

    def _block_cdf(self, level: int) -> np.ndarray:
        """The cumulative probability of drawing each block of ``level`` (in proportion to
        its compute time on its current device, every block some chance), as
        ``Generator.choice`` computes it from the probabilities."""
        cdf = self.weights.get(level)
        if cdf is None:
            start = self.blocks.start
            weight = np.bincount(self.blocks.labels[level], weights=self.busy,
                                 minlength=start[level + 1] - start[level])
            weight = weight + max(weight.sum(), 1.0) * 1e-3 / len(weight)
            cdf = (weight / weight.sum()).cumsum()
            cdf /= cdf[-1]
            self.weights[level] = cdf
        return cdf

    def _random_moves(self, left: int) -> list:
        """The next batch of random moves, ``min(batch, left)`` of them or fewer (draws that
        would move nothing are skipped, at most 50 draws for each move asked; none: the draws
        found nothing to move). Each draw is a level uniformly, a block of it by
        :meth:`_block_cdf`, a destination among its targets (:meth:`_targets`; another device
        than the action devices with probability ``host_share``).

        The draws are compiled (:func:`_draw_moves`: the same numbers from the same generator as
        the Python they replace) and made ``_AHEAD`` batches at a time, since a call into
        numba with a generator costs as much as many draws. Batches drawn ahead assume that
        the placement and the blocks stay as they are; when either changes (a gain, a
        re-alignment) or the search stops, :meth:`_take_back` returns the draws not used to
        the generator, so the search draws exactly what drawing one batch at a time would."""
        if not self.ahead:
            self.ahead = self._draw_ahead(left, _AHEAD)
        drawn, self.ahead = self.ahead[0], self.ahead[1:]
        self.ahead_used += 1
        moves, num_devices = self.moves, self.num_devices
        return [moves.get(index) or self._move(index // num_devices, index % num_devices)
                for index in drawn.tolist()]

    def _draw_ahead(self, left: int, batches: int) -> list:
        """Up to ``batches`` batches of draws from the current placement and blocks, each an
        array of ``flat * D + dst`` (:meth:`_move`); remembers how to take back what is
        unused."""
        cdf = self.weights.get("flat")
        if cdf is None:
            cdf = self.weights["flat"] = np.concatenate(
                [self._block_cdf(level) for level in range(len(self.blocks.labels))])
        redo = (self.rng.bit_generator.state, left, self.blocks, cdf, self.current)
        drawn, sizes = self._draw(left, batches, *redo[2:])
        self.ahead_from, self.ahead_used = redo, 0
        ends = np.cumsum(sizes)
        return [drawn[e - z:e] for e, z in zip(ends, sizes)]

    def _draw(self, left, batches, blocks, cdf, current):
        drawn = np.empty(batches * self.config.batch, dtype=np.int64)
        sizes = np.zeros(batches, dtype=np.int64)
        count = _draw_moves(self.rng, self.config.batch, left, blocks.start, cdf, blocks.order,
                            blocks.member_start, blocks.ok, self.runnable, current,
                            self.action, self.others, self.config.host_share, drawn, sizes)
        return drawn, sizes[:count]

    def _take_back(self) -> None:
        """Return the batches drawn ahead and not used to the generator: its state is set back
        to where it was before them and the batches used are drawn again (the same numbers,
        from what they were drawn from)."""
        if self.ahead:
            state, left, blocks, cdf, current = self.ahead_from
            self.rng.bit_generator.state = state
            if self.ahead_used:
                self._draw(left, self.ahead_used, blocks, cdf, current)
        self.ahead, self.ahead_from, self.ahead_used = [], None, 0

    def _sweep(self) -> list:
        """Every move of every block to every device it could go to, in random order."""
        moves, seen = [], set()
        for flat in range(len(self.blocks.ok)):
            action, others = self._targets(flat)
            for dst in action + others:
                move = self._move(flat, dst)
                if move is not None and move[2] not in seen:
                    seen.add(move[2])
                    moves.append(move)
        return [moves[i] for i in self.rng.permutation(len(moves))]

    def run(self, until: int, *, deadline: float | None = None, lower_bound: float = 0.0,
            on_gain: Callable[[int, float], None] | None = None,
            on_step: Callable[[], None] | None = None) -> str:
        """Search until ``until`` placements in all have been simulated, the deadline (a
        ``time.perf_counter()`` value), the lower bound or a local optimum; returns why it
        stopped ("samples", "deadline", "bound", "local optimum"). ``on_gain(samples, R)`` is
        called at every gain, ``on_step()`` after every batch of simulations."""
        while True:
            if self.samples >= until:
                self.stopped = "samples"
            elif deadline is not None and time.perf_counter() >= deadline:
                self.stopped = "deadline"
            elif self.best <= lower_bound * (1 + 1e-9):
                self.stopped = "bound"
            else:
                moves = self._next_moves(until - self.samples)
                if moves is None:
                    self.stopped = "local optimum"
                else:
                    if self._try_moves(moves) and on_gain is not None:
                        on_gain(self.samples, self.best)
                    if on_step is not None:
                        on_step()
                    continue
            self._take_back()
            return self.stopped

    def result(self) -> LocalSearchResult:
        return LocalSearchResult(devices=self.current, score=self.best, samples=self.samples,
                                 curve=list(self.curve), stopped=self.stopped)

    def _next_moves(self, left: int) -> list | None:
        """Up to ``min(batch, left)`` moves to simulate next; None at a local optimum (a sweep
        done, or draws that found nothing to move)."""
        if self.sweeping:
            if not self.queue:
                return None
            count = min(self.config.batch, left)
            moves, self.queue = self.queue[:count], self.queue[count:]
            return moves
        return self._random_moves(left) or None

    def _try_moves(self, moves: list) -> bool:
        """Score ``moves`` (``(members, dst, key)`` as :meth:`_move` gives them) from the
        current placement; keep the best if it gains. A move already scored from this
        placement (or earlier in the batch) is not simulated again: it did not gain, so it
        cannot now, and the step taken is the same as if it were scored."""
        keys = [key for _, _, key in moves]
        new = {}  # key -> the first of the batch's moves with it
        for k, key in enumerate(keys):
            if key not in self.tried and key not in new:
                new[key] = k
        self.samples += len(moves)
        if new:  # a candidate no faster than the current placement is not kept: cut off
            candidates = np.repeat(self.current[None, :], len(new), axis=0)
            for row, k in zip(candidates, new.values()):
                members, dst, _ = moves[k]
                row[members] = dst
            evaluation = self.evaluator.evaluate(candidates, below=self.best)
            self.simulations += len(new)
            # Once the placement fits, a candidate that overflows is never taken, however fast.
            scores = np.where(evaluation.fits | (not self.fits), evaluation.scores, np.inf)
            k = int(np.argmin(scores))  # the first of the fastest, in batch order
            if scores[k] < self.best:
                self.best, self.current = float(scores[k]), candidates[k]
                self.fits = bool(evaluation.fits[k])
                self.curve.append((self.samples, self.best))
                self.since_gain = 0
                self._changed()
                if self.sweeping:
                    self._align()
                    self.queue = self._sweep()
                return True
        self.tried.update(keys)
        self.since_gain += len(moves)
        if (not self.sweeping and self.since_gain >= self.config.realign_after
                and not np.array_equal(self.current, self.aligned)):
            self._align()
        return False


def local_search(problem: PlacementProblem, start: np.ndarray, config: LocalSearchConfig,
                 *, seed: int, max_samples: int, evaluator: Evaluator,
                 deadline: float | None = None, lower_bound: float = 0.0,
                 on_gain: Callable[[int, float], None] | None = None) -> LocalSearchResult:
    """Improve ``start`` ([n] device per op, colocation groups whole) on ``problem`` within
    ``max_samples`` simulated placements (see the module docstring and
    :meth:`LocalSearch.run`). ``evaluator`` scores candidates (its memory penalty is used)."""
    search = LocalSearch(problem, start, config, seed=seed, evaluator=evaluator)
    search.run(max_samples, deadline=deadline, lower_bound=lower_bound, on_gain=on_gain)
    return search.result()


def rank(search: LocalSearch) -> tuple[bool, float]:
    """How searches compare: one whose best placement fits before one whose does not, then by
    R. R's memory penalty is a price, not a rule, so an overflowing placement can score below
    a fitting one (a small overshoot on a fast split); it must never win over it."""
    return (not search.fits, search.best)


def race(searches: list[LocalSearch], total: int, *, deadline: float | None = None,
         lower_bound: float = 0.0, progress: Progress = QUIET,
         evaluator: Evaluator | None = None) -> LocalSearch:
    """Successive halving over searches from different starts, within ``total`` simulated
    placements in all (the starts' own included): in each of ``ceil(log2 k) + 1`` rounds of
    equal size the surviving searches share the round's placements equally, then the better
    half (by best R so far) goes on; the last survivor takes what is left. Which local optimum
    a search ends in depends on where it starts more than on how fast the start is, and a
    short leg already tells the basins apart. Returns the search with the best placement.
    After every batch, ``progress`` is told the placements simulated by all searches and the
    best R among them.

    The legs of a round do not depend on each other (each search has its own random draws
    and its own share), so with an ``evaluator`` (the one the searches score with) they run
    on its threads, up to one search per thread at once (``Evaluator.in_threads``): the same
    searches take the same steps, and the same search wins, as one after the other. The last
    survivor runs alone, its batches cut over the evaluator's threads.
    """
    best = lambda: min(searches, key=rank)  # noqa: E731
    lock = threading.Lock()  # legs on several threads report through one progress
    cancel = threading.Event()  # set when a leg fails or the caller is interrupted

    def step():
        if cancel.is_set():
            raise _Cancelled
        if progress is not QUIET:  # (a batch of a small graph costs tens of microseconds)
            with lock:
                progress.update(sum(s.samples for s in searches), min(s.best for s in searches))

    def leg(search: LocalSearch, until: int) -> Callable[[], str]:
        return lambda: search.run(until, deadline=deadline, lower_bound=lower_bound,
                                  on_step=step)

    alive = list(searches)
    rounds = int(np.ceil(np.log2(len(alive)))) + 1 if alive else 1
    for _ in range(rounds - 1):
        if len(alive) == 1:
            break
        share = (total // rounds) // len(alive)
        legs = [leg(s, s.samples + share) for s in alive]
        if evaluator is not None and evaluator.threads > 1:
            stopped = evaluator.in_threads(legs, on_error=cancel.set)
        else:
            stopped = []
            for run in legs:
                stopped.append(run())
                if stopped[-1] in ("deadline", "bound"):
                    break
        if any(why in ("deadline", "bound") for why in stopped):
            return best()
        alive = sorted(alive, key=rank)[:(len(alive) + 1) // 2]
    leader = min(alive, key=rank)
    leader.run(leader.samples + max(0, total - sum(s.samples for s in searches)),
               deadline=deadline, lower_bound=lower_bound, on_step=step)
    return best()


_AHEAD = 32  # batches of moves drawn at a time (LocalSearch._random_moves)


@cached_njit
def _draw_moves(rng, batch, left, start, cdf, order, member_start, ok, runnable, current,
                action, others, host_share, out, sizes):
    """Draws batches of moves of a search from ``rng``, as many as ``sizes`` has room for, and
    returns how many batches: batch k holds ``sizes[k]`` moves, ``min(batch, left)`` with
    ``left`` reduced by each batch's moves, or fewer when its 50 draws for each found fewer;
    the batches end when ``left`` does or a batch found none. Moves are ``out[i]``, in order,
    as ``flat * D + dst``: block ``flat`` (numbered as in :class:`_Blocks`) to device ``dst``
    (:meth:`LocalSearch._random_moves`; the arrays are :class:`_Blocks`'s, ``cdf`` each
    level's block probabilities, cumulative, concatenated).

    Each draw takes, from ``rng`` and in this order: the level (``integers``), a uniform number
    that picks the block (the first whose cumulative probability exceeds it), a uniform number
    for ``host_share`` only when the block has both kinds of target, and the target's index
    (``integers``) when it has any. numba's ``Generator`` draws what NumPy's does from the same
    state and advances it the same way (``tests/placers/auto/test_auto.py`` checks it), so
    these are the draws the search made in Python. A draw is skipped (its numbers used) when the
    block has no target or no member would move: the ops that move are the members that can run
    on the destination and are elsewhere; the devices a block targets are those some member can
    run on, other than the device of its first member.
    """
    targets = np.empty(len(action) + len(others), dtype=np.int64)
    found = 0
    for k in range(len(sizes)):
        count = min(batch, left)
        if count == 0:
            return k
        was = found
        for _ in range(50 * count):
            level = rng.integers(0, len(start) - 1)
            lo = start[level]
            block = np.searchsorted(cdf[lo:start[level + 1]], rng.random(), side="right")
            flat = lo + block
            here = current[order[member_start[flat]]]
            num_action = 0
            for d in action:
                if d != here and ok[flat, d]:
                    targets[num_action] = d
                    num_action += 1
            num_others = 0
            for d in others:
                if d != here and ok[flat, d]:
                    targets[len(action) + num_others] = d
                    num_others += 1
            first, num = 0, num_action
            if num_others > 0 and (num_action == 0 or rng.random() < host_share):
                first, num = len(action), num_others
            if num == 0:
                continue
            dst = targets[first + rng.integers(0, num)]
            for i in range(member_start[flat], member_start[flat + 1]):
                if runnable[order[i], dst] and current[order[i]] != dst:
                    out[found] = flat * runnable.shape[1] + dst
                    found += 1
                    break
            if found - was == count:
                break
        sizes[k] = found - was
        left -= found - was
        if found == was:
            return k + 1
    return len(sizes)


class _Cancelled(Exception):
    """Ends a leg of :func:`race` run on another thread once the race has failed."""


def kick(problem: PlacementProblem, devices: np.ndarray, fraction: float,
         rng: np.random.Generator) -> np.ndarray:
    """``devices`` with ``max(2, fraction * C)`` of its C colocation groups (drawn uniformly)
    each put on a device drawn uniformly among those that can run it: a jump out of a local
    optimum that keeps colocation groups whole and every op on a device with its kernel."""
    coloc, ok = problem.graph.colocation, problem.colocation_allowed
    moved = rng.choice(len(ok), min(len(ok), max(2, int(fraction * len(ok)))), replace=False)
    to = np.full(len(ok), -1)  # group -> the device it goes to; -1: it stays
    for c in moved:
        can = np.flatnonzero(ok[c])
        to[c] = can[rng.integers(len(can))]
    out = np.asarray(devices, np.int32).copy()
    where = to[coloc] >= 0
    out[where] = to[coloc[where]]
    return out


def iterate_until_stale(best: LocalSearch, fresh: Callable[[LocalSearch], LocalSearch],
                        total: int, done: int, *, patience: int,
                        deadline: float | None = None, lower_bound: float = 0.0,
                        progress: Progress = QUIET) -> tuple[LocalSearch, list[LocalSearch]]:
    """Iterated local search after the race, while the best search ended at a local optimum:
    ``fresh(best)`` is a search not yet run from a perturbation of the best placement so far
    (:func:`kick`), run to its own local optimum; it becomes the best when it beats it. Ends
    after ``patience`` searches in a row that do not, at ``total`` placements (``done`` of them
    scored before), at the deadline or at the bound. ``progress`` is told the placements
    scored and the best R after each search.

    Why: on small problems every search of the race sweeps to a local optimum within a few
    percent of its sample budget, and a better optimum is often a few groups away from it
    (docs/experiments.md): a kick of some groups followed by a sweep reaches such optima,
    and a run of kicks that find nothing better says there are none near.

    Returns the best search and the searches run here (for the caller's counts).
    """
    ran, misses = [], 0
    used = lambda: done + sum(s.samples for s in ran)  # noqa: E731
    while (best.stopped == "local optimum" and misses < patience and used() < total
           and (deadline is None or time.perf_counter() < deadline)
           and best.best > lower_bound * (1 + 1e-9)):
        search = fresh(best)
        ran.append(search)
        search.run(search.samples + total - used(), deadline=deadline,
                   lower_bound=lower_bound)
        progress.update(used(), min(best.best, search.best))
        if rank(search) < rank(best):
            best, misses = search, 0
        else:
            misses += 1
    return best, ran
