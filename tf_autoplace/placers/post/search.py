"""Post's search on one graph: Algorithm 1 of Gao et al., "Post: Device Placement with
Cross-Entropy Minimization and Proximal Policy Optimization" (NeurIPS 2018).

The placement distribution is one softmax table per placement unit
(:class:`~tf_autoplace.placers.post.policy.SoftmaxTables`). :func:`search` samples placements
from it K at a time, has the batch simulated by an :class:`~tf_autoplace.learning.rollouts.Evaluator`
(the worker pool every learned placer shares) and updates the tables in closed form
(:mod:`tf_autoplace.placers.post.updates`):

* after every batch of K placements that does not complete a period of N, a few steps of
  PPO with the KL penalty (Eq. 11);
* after every N placements, the cross-entropy step (Eq. 10) over the elite fraction rho of
  the N placements sampled since the previous one, then mixing with the uniform distribution
  with weight eps, which falls linearly from ``epsilon`` to 0 over the sample budget.

``algorithm`` selects the paper's ablation: ``"ce+ppo"`` (Post), ``"ce"`` (cross-entropy
alone: no PPO steps) and ``"ppo"`` (PPO after every batch, never a cross-entropy step).

Choices where the paper is silent, garbled or written for its own testbed:

* **Placement units.** The paper gives every op its own distribution. Here a unit is, by
  default, a group of a Merge-and-Colocate grouping into at most ``max_groups`` groups that
  never straddle two devices of the best heuristic's placement (``units="aligned"``, the
  grouping of Placeto's environment, :func:`tf_autoplace.grouping.heuristic.heuristic_grouping`): ops of
  one TF colocation group must share a device anyway, and the paper's own budget (2,400
  placements, 6 elite per cross-entropy step) cannot estimate tens of thousands of independent
  per-op distributions (NMT-8 has 43k ops). Aligned groups can express the heuristic's
  placement exactly, and each lies on one device of a placement that fits memory, so none is
  too big for a device (plain Merge-and-Colocate of NMT-4 into 256 groups makes one group of
  nearly all the compute, which needs more memory than a K80 has: every sample is over
  memory). 512 groups, not Placeto's 256: the aligned grouping of NMT-4 into 256 still has one
  group with a large share of the compute, which no placement of the groups can balance; into
  512 the largest is small (docs/experiments.md, "Post" has the measurements).
  ``units="groups"`` takes the problem's own Merge-and-Colocate groups (regrouped into
  ``max_groups`` when it has more), ``units="ops"`` gives every TF colocation group its own
  table, the finest split that respects colocation: the paper's per-op model.
* **Devices.** A unit chooses among the action devices (the cluster's compute devices, the
  GPUs when there are any), as the papers' learned placers do; a unit whose ops cannot all run
  on an action device has probability 0 there, and a unit that can run on none of them is
  fixed to the first device that runs all its ops (the CPU host) and is not in the tables.
* **Start.** ``init="heuristic"`` (the default) starts as if a first cross-entropy step had
  found the best heuristic's placement as its only elite: probability
  ``1 - epsilon + epsilon / D_m`` on the device the heuristic gives most of the unit's ops,
  ``epsilon / D_m`` on each other allowed device. ``init="uniform"`` is Algorithm 1's all-zero
  logits; from it the search spends much of the budget finding what the heuristic already
  knows (docs/experiments.md).
* **Exploration.** The paper mixes in the uniform distribution with eps = 0.1 after each
  cross-entropy step; Algorithm 1 as published is ``init="uniform", epsilon=0.1``. From the
  heuristic start over 512 units, 0.1 redraws about 51 units of every sample at random, so
  nearly every sample is worse than the start, the elite are the least damaged of them, and
  the cross-entropy steps drift away from the start faster than they improve on it: on most
  zoo pairs the best sampled placement stayed slower than the heuristic's. With 0.02 (about 10
  units redrawn per sample) the search improved on the best heuristic on every pair, if barely
  on some (docs/experiments.md, "Post" has the measurements).
* **Score.** The paper gives an out-of-memory placement a large step time (100 s). Here every
  placement is scored with the memory-penalised runtime ``R = r + c * ReLU(m - M)`` (Placeto
  A.7) that all the learned placers here minimise: a constant makes every over-memory
  placement equally bad, so neither the elite ranking nor the PPO reward could tell one 0.1 GB
  over from one 10 GB over, while the penalty orders them and steers towards fitting. A
  placement that fits scores its step time; the result must fit if any sample did.
* **Advantage.** ``A_n = (b - R_n) / b`` with ``b`` the mean score of the last
  ``baseline_window`` placements, this batch's included (the paper: "the moving average of the
  training times across all the sampled placements", ``b - T``). The paper's step times were
  0.4-5.1 s, so ``b - T`` in seconds was of order 0.01-1 against a learning rate of 1;
  dividing by ``b`` keeps that order on graphs of any step time (a 10 ms graph would otherwise
  give PPO nothing to follow).
* **Budget.** ``max_samples`` placements (the paper: 2,400) or ``budget_s`` seconds,
  whichever ends first; the last batch is cut to the budget. Without a sample budget eps decays
  over the time budget instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

import numpy as np

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.core.registry import HEURISTICS
from tf_autoplace.core.settings import (check_int, check_names, check_number,
                                        check_seconds, plain_numbers)
from tf_autoplace.errors import ConfigError, InfeasiblePlacementError
from tf_autoplace.grouping import Grouping, GroupingConfig, merge_and_colocate
from tf_autoplace.grouping.heuristic import heuristic_grouping
from tf_autoplace.heuristics import BestHeuristicPlacer
from tf_autoplace.learning.measured import check_reward
from tf_autoplace.learning.rollouts import Evaluator
from tf_autoplace.learning.workers import check_ray_address
from tf_autoplace.outputs.progress import QUIET, Progress
from tf_autoplace.placers.post.policy import SoftmaxTables
from tf_autoplace.placers.post.updates import cross_entropy_update, mix_uniform, ppo_update

ALGORITHMS = ("ce+ppo", "ce", "ppo")
UNITS = ("aligned", "groups", "ops")
INITS = ("heuristic", "uniform")


@dataclasses.dataclass(frozen=True)
class PostConfig:
    """Attributes (the paper's values where it gives them, section 4):
      budget_s: wall-time cap of the search in seconds (> 0).
      max_samples: L, placements simulated (None: until ``budget_s``). The default, the
        paper's 2,400, stops on this count, so the same seed gives the same placement; if the
        time cap stops the search first, the result depends on the machine's speed.
      algorithm: "ce+ppo" (Post), "ce" or "ppo" (the paper's ablation; module doc).
      units: "aligned", "groups" or "ops" (module doc).
      max_groups: the most groups of ``units="aligned"`` and ``"groups"``.
      init: "heuristic" or "uniform" (Algorithm 1; module doc).
      batch: K, placements sampled and simulated per PPO step (the paper: 12 workers).
      ce_period: N, placements per cross-entropy step (the paper: 5 batches of 12); a multiple
        of ``batch``.
      elite_fraction: rho (the paper: 0.1, 6 of 60).
      ppo_steps: gradient-ascent steps per PPO update (the paper: "several (e.g., 10)").
      learning_rate: of those steps (the paper: 1).
      kl_penalty: beta of Eq. 11 (the paper: 1).
      epsilon: weight of the uniform distribution mixed in after each cross-entropy step (and
        in the heuristic start), falling linearly to 0 over the budget (module doc: 0.02, the
        paper's 0.1 goes with its uniform start).
      baseline_window: placements whose mean score is the PPO baseline b.
      memory_penalty: c in R = r + c * ReLU(m - M), seconds per GB over capacity.
      workers: workers that simulate each batch: local processes (1: this process), or Ray
        actors when ``ray_address`` is set (:mod:`tf_autoplace.learning.workers`). The placement
        does not depend on it.
      ray_address: simulate on a Ray cluster (``"auto"``, ``"HOST:PORT"``, ``"local"``);
        None: local processes. The placement does not depend on it.
      heuristics: placers the result must not be worse than (``best_heuristic`` runs all the
        fast ones); used by :class:`tf_autoplace.placers.PostPlacer`.
      reward: "simulated" (default) or "measured": every sampled placement is run on this
        machine (:class:`~tf_autoplace.learning.measured.MeasuredEvaluator`, the paper's own
        setting; about a second each on a small graph, so ``max_samples`` of tens or hundreds),
        and the heuristics' placements are compared by measured step time too.
      measure_steps: timed steps per measured placement (>= 1; with ``reward="measured"``).
    """

    budget_s: float = 120.0
    max_samples: int | None = 2400
    algorithm: str = "ce+ppo"
    units: str = "aligned"
    max_groups: int = 512
    init: str = "heuristic"
    batch: int = 12
    ce_period: int = 60
    elite_fraction: float = 0.1
    ppo_steps: int = 10
    learning_rate: float = 1.0
    kl_penalty: float = 1.0
    epsilon: float = 0.02
    baseline_window: int = 60
    memory_penalty: float = 2.0
    workers: int = 1
    ray_address: str | None = None
    heuristics: tuple[str, ...] = ("best_heuristic",)
    reward: str = "simulated"
    measure_steps: int = 5

    def __post_init__(self):
        plain_numbers(self)
        check_seconds("budget_s", self.budget_s)
        check_int("max_samples", self.max_samples, low=1, none_ok=True)
        check_names("heuristics", self.heuristics, sorted(HEURISTICS), "heuristics")
        for name, allowed in (("algorithm", ALGORITHMS), ("units", UNITS), ("init", INITS)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {list(allowed)}, "
                                  f"got {getattr(self, name)!r}")
        for name in ("max_groups", "batch", "ce_period", "ppo_steps", "baseline_window",
                     "workers"):
            check_int(name, getattr(self, name), low=1)
        check_ray_address(self.ray_address)
        check_reward(self.reward, self.measure_steps, self.workers, self.ray_address)
        if self.ce_period % self.batch:
            raise ConfigError(f"ce_period must be a multiple of batch ({self.batch}), "
                              f"got {self.ce_period!r}")
        check_number("elite_fraction", self.elite_fraction, low=0, low_ok=False, high=1)
        check_number("epsilon", self.epsilon, low=0, high=1)
        for name in ("learning_rate", "kl_penalty", "memory_penalty"):
            check_number(name, getattr(self, name), low=0)


@dataclasses.dataclass(frozen=True, eq=False)
class Units:
    """The placement units of a problem and the devices they choose among.

    With n ops, U units in the tables and D action devices:

    Attributes:
      grouping: op -> group; every group is a unit, in the tables or fixed.
      action_devices: [D] cluster index of each action device.
      searched: [U] the groups in the tables, ascending.
      allowed: [U, D] bool, unit u can run on action device j.
      fixed: [G] cluster device of each group outside the tables (-1 for those inside).
    """

    grouping: Grouping
    action_devices: np.ndarray
    searched: np.ndarray
    allowed: np.ndarray
    fixed: np.ndarray

    @classmethod
    def of(cls, problem: PlacementProblem, grouping: Grouping) -> "Units":
        """Units from ``grouping`` (which must not split a TF colocation group)."""
        action = problem.cluster.compute_devices()
        allowed = np.ones((grouping.num_groups, problem.cluster.num_devices), dtype=bool)
        np.logical_and.at(allowed, grouping.labels, problem.allowed)
        movable = allowed[:, action].any(axis=1)
        stuck = ~allowed.any(axis=1)[grouping.labels]
        if stuck.any():
            op = problem.graph.names[int(np.flatnonzero(stuck)[0])]
            raise InfeasiblePlacementError(
                f"no device in the cluster can run every op of the group of op {op!r}")
        # The first device that runs all of a group's ops (the CPU host for CPU-only ops).
        fixed = np.where(movable, -1, np.argmax(allowed, axis=1)).astype(np.int64)
        searched = np.flatnonzero(movable)
        return cls(grouping=grouping, action_devices=action, searched=searched,
                   allowed=allowed[np.ix_(searched, action)], fixed=fixed)

    @property
    def num_units(self) -> int:
        return len(self.searched)

    def op_placements(self, actions: np.ndarray) -> np.ndarray:
        """[B, U] action-device index per unit -> [B, n] cluster device index per op."""
        actions = np.asarray(actions)
        groups = np.empty((len(actions), len(self.fixed)), np.int32)  # the simulator's dtype
        groups[:] = self.fixed
        groups[:, self.searched] = self.action_devices[actions]
        return groups[:, self.grouping.labels]

    def actions_of(self, devices: np.ndarray) -> np.ndarray:
        """[U] the action device each unit holds most of its ops on in the op placement
        ``devices`` [n] (ties: the lower index); -1 for a unit with none of its ops on an
        action device it may use."""
        column = np.full(max(int(np.max(devices)), int(self.action_devices.max())) + 1, -1)
        column[self.action_devices] = np.arange(len(self.action_devices))
        index = np.full(self.grouping.num_groups, -1)
        index[self.searched] = np.arange(self.num_units)
        unit, action = index[self.grouping.labels], column[np.asarray(devices)]
        keep = (unit >= 0) & (action >= 0)
        counts = np.zeros(self.allowed.shape)
        np.add.at(counts, (unit[keep], action[keep]), 1.0)
        counts[~self.allowed] = 0.0
        return np.where(counts.any(axis=1), np.argmax(counts, axis=1), -1)


def units_for(problem: PlacementProblem, config: PostConfig, heuristic: np.ndarray) -> Units:
    """The units ``config.units`` names (module doc); ``heuristic`` is the best heuristic's op
    placement, which ``units="aligned"`` follows."""
    if config.units == "groups":
        grouping = problem.grouping
        if grouping.num_groups > config.max_groups:
            grouping = merge_and_colocate(problem.graph,
                                          GroupingConfig(max_groups=config.max_groups))
    elif config.units == "ops":
        grouping = Grouping.from_labels(problem.graph, problem.graph.colocation)
    else:
        grouping = heuristic_grouping(problem.graph, problem.cluster.names, heuristic,
                                  config.max_groups)
    return Units.of(problem, grouping)


def initial_tables(units: Units, config: PostConfig, heuristic: np.ndarray) -> SoftmaxTables:
    """Algorithm 1's uniform start, or the one biased towards the op placement ``heuristic``
    (module doc)."""
    if config.init == "uniform":
        return SoftmaxTables.uniform(units.allowed)
    actions = units.actions_of(heuristic)
    onehot = units.allowed / units.allowed.sum(axis=1, keepdims=True)  # uniform if unknown
    known = actions >= 0
    onehot[known] = 0.0
    onehot[np.flatnonzero(known), actions[known]] = 1.0
    return SoftmaxTables.from_probabilities(
        mix_uniform(onehot, units.allowed, config.epsilon), units.allowed)


@dataclasses.dataclass(frozen=True)
class CurvePoint:
    """The search after ``samples`` placements and ``seconds`` of wall time: the best score R
    met so far and the mean score of the last batch."""

    samples: int
    seconds: float
    best_score: float
    batch_mean: float


@dataclasses.dataclass(frozen=True, eq=False)
class PostResult:
    """What :func:`search` found.

    Attributes:
      devices: [n] the best sampled op placement (the fastest that fits memory, if any did;
        else the lowest R).
      score: its R (its step time when it fits).
      fits: whether it fits memory.
      units: the placement units.
      tables: the final distribution (None when every group is fixed).
      curve: one point per batch.
      ppo_updates, ce_updates: how many of each update ran.
    """

    devices: np.ndarray
    score: float
    fits: bool
    units: Units
    tables: SoftmaxTables | None
    curve: tuple[CurvePoint, ...]
    ppo_updates: int
    ce_updates: int

    @property
    def samples(self) -> int:
        return self.curve[-1].samples if self.curve else 0


def _evaluator(problem: PlacementProblem, config: PostConfig, given, *, pool: bool = True):
    """``given`` as a context manager that leaves it open, or a new simulating Evaluator: on
    the config's workers (local processes or Ray's) when ``pool``, else in this process (for a
    single placement, where starting workers would cost more than simulating it)."""
    if given is not None:
        return contextlib.nullcontext(given)
    if not pool:
        return Evaluator(problem, memory_penalty=config.memory_penalty)
    return Evaluator(problem, workers=config.workers, memory_penalty=config.memory_penalty,
                     ray_address=config.ray_address)


def search(problem: PlacementProblem, config: PostConfig, seed: int, *,
           heuristic: np.ndarray | None = None, deadline: float | None = None,
           evaluator=None, progress: Progress = QUIET) -> PostResult:
    """Algorithm 1 on ``problem`` (module doc) until ``config.max_samples`` placements or
    ``deadline`` (a ``time.perf_counter()`` value; None: ``config.budget_s`` from now).
    ``heuristic`` is the best heuristic's op placement, which ``init="heuristic"`` and
    ``units="aligned"`` follow (None: :class:`BestHeuristicPlacer` runs here when they need it).
    Placements are drawn from ``np.random.default_rng(seed)``. ``evaluator`` scores the
    batches (None: an :class:`Evaluator` simulating on ``config.workers`` workers, on
    ``config.ray_address``'s Ray cluster if set; a
    :class:`~tf_autoplace.learning.measured.MeasuredEvaluator` for measured rewards); the caller
    closes one it gives. After every batch, ``progress`` is told the placements scored and
    the best R so far."""
    start = time.perf_counter()
    deadline = start + config.budget_s if deadline is None else deadline
    rng = np.random.default_rng(seed)
    if heuristic is None and (config.init == "heuristic" or config.units == "aligned"):
        heuristic = BestHeuristicPlacer().propose(problem)
    units = units_for(problem, config, heuristic)
    if units.num_units == 0:  # nothing to choose: every group is fixed
        devices = units.op_placements(np.zeros((1, 0), np.int64))[0]
        with _evaluator(problem, config, evaluator, pool=False) as scorer:
            found = scorer.evaluate(devices[None])
        return PostResult(devices, float(found.scores[0]), bool(found.fits[0]), units, None,
                          (CurvePoint(1, time.perf_counter() - start, float(found.scores[0]),
                                      float(found.scores[0])),), 0, 0)
    tables = initial_tables(units, config, heuristic)
    use_ce, use_ppo = config.algorithm != "ppo", config.algorithm != "ce"
    budget = config.max_samples

    def eps_now(samples: int) -> float:
        done = samples / budget if budget else (time.perf_counter() - start) / config.budget_s
        return config.epsilon * max(0.0, 1.0 - done)

    samples, curve, ppo_updates, ce_updates = 0, [], 0, 0
    best = (True, np.inf, None)  # (over memory, R, op placement): fits first, then lowest R
    window_actions, window_scores, recent = [], [], np.zeros(0)
    with _evaluator(problem, config, evaluator) as evaluator, \
            progress.phase("post: search", budget, deadline=deadline):
        # The first batch always runs, so there is a result however small the time budget.
        while samples == 0 or ((budget is None or samples < budget) and
                               time.perf_counter() < deadline):
            count = config.batch if budget is None else min(config.batch, budget - samples)
            actions = tables.sample(rng, count)
            placements = units.op_placements(actions)
            found = evaluator.evaluate(placements)
            samples += count
            i = int(np.lexsort((found.scores, ~found.fits))[0])
            if (not found.fits[i], found.scores[i]) < best[:2]:
                best = (not bool(found.fits[i]), float(found.scores[i]), placements[i])
            curve.append(CurvePoint(samples, time.perf_counter() - start, best[1],
                                    float(found.scores.mean())))
            progress.update(samples, best[1])
            window_actions.append(actions)
            window_scores.append(found.scores)
            recent = np.concatenate([recent, found.scores])[-config.baseline_window:]
            if use_ce and sum(len(s) for s in window_scores) >= config.ce_period:
                probs = cross_entropy_update(np.concatenate(window_actions),
                                             np.concatenate(window_scores),
                                             config.elite_fraction, units.allowed)
                tables = SoftmaxTables.from_probabilities(
                    mix_uniform(probs, units.allowed, eps_now(samples)), units.allowed)
                window_actions, window_scores = [], []
                ce_updates += 1
            elif use_ppo:
                baseline = float(recent.mean())
                advantages = ((baseline - found.scores) / baseline if baseline > 0  # 0 s: all
                              else np.zeros_like(found.scores))          # equal, nothing to learn
                tables = ppo_update(tables, actions, advantages, beta=config.kl_penalty,
                                    learning_rate=config.learning_rate,
                                    steps=config.ppo_steps)
                ppo_updates += 1
    return PostResult(devices=best[2], score=best[1], fits=not best[0], units=units,
                      tables=tables, curve=tuple(curve), ppo_updates=ppo_updates,
                      ce_updates=ce_updates)
