"""Pretraining a Placeto policy on graph families, and the measurements its manifest records.

:func:`pretrain` trains one policy on the training halves of the families (each worker of an
iteration takes a different graph, as in Placeto A.7) and evaluates it zero-shot on the held-out
halves against the fast heuristics. :func:`samples_to_reach` and :func:`transfer_counts` read the
transfer speed-up off two learning curves (``tf_autoplace.placers.placeto.search.search`` draws them),
and :func:`best_within` compares them at equal sample budgets.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Sequence

import numpy as np

from tf_autoplace.core.problem import PlacementProblem, check_memory
from tf_autoplace.heuristics import HEURISTICS
from tf_autoplace.placers.placeto import reinforce
from tf_autoplace.placers.placeto.env import EnvConfig, PlacementEnv
from tf_autoplace.placers.placeto.policy import PlacetoPolicy
from tf_autoplace.sim import memory_penalized_runtime


def heuristic_scores(problem: PlacementProblem, names=("single", "m_etf", "expert", "metis"),
                     memory_penalty: float = 2.0) -> dict[str, float]:
    """Memory-penalised simulated runtime R of each heuristic's placement (seconds)."""
    out = {}
    for name in names:
        sim = problem.simulator.run(HEURISTICS[name]().propose(problem))
        out[name] = memory_penalized_runtime(sim, problem.cluster, memory_penalty)
    return out


def zero_shot(policy: PlacetoPolicy, problem: PlacementProblem, env_config: EnvConfig,
              seed: int = 0) -> dict:
    """One greedy episode: best R met, the final R, and the seconds it took (env included)."""
    t = time.perf_counter()
    env = PlacementEnv(problem, env_config)
    episode = reinforce.rollout(policy, env, np.random.default_rng(seed), greedy=True)
    seconds = time.perf_counter() - t
    devices = env.op_placement(episode.best_actions)
    fits = not check_memory(problem, problem.simulator.run(devices))
    return dict(best_R=episode.best_score, final_R=float(episode.scores[-1]), seconds=seconds,
                steps=env.num_steps, groups=env.view.num_groups, fits=fits,
                samples=episode.samples)


def samples_to_reach(curve: Sequence[tuple[int, float]], target: float) -> int | None:
    """Placements sampled until the curve's best R first reached ``target`` (None: never)."""
    for samples, best in curve:
        if best <= target * (1 + 1e-9):
            return samples
    return None


@dataclasses.dataclass(frozen=True)
class TransferCounts:
    """Placements each run sampled until it reached the from-scratch best R exactly
    (``*_exact``) and until it came within the tolerance of it (``*_near``); None: never."""

    scratch_exact: int | None
    scratch_near: int | None
    tuned_exact: int | None
    tuned_near: int | None

    def speedups(self) -> dict[str, float]:
        """exact / exact; paper: scratch exact / tuned near, as the Placeto paper's Table 1
        counts (its transfer runs end 1.2% and 3.3% slower than from scratch); near / near.
        A run that never reached its mark counts as no speed-up (0)."""
        def ratio(scratch: int | None, tuned: int | None) -> float:
            return scratch / tuned if scratch and tuned else 0.0

        return {"exact": ratio(self.scratch_exact, self.tuned_exact),
                "paper": ratio(self.scratch_exact, self.tuned_near),
                "near": ratio(self.scratch_near, self.tuned_near)}


def transfer_counts(scratch: Sequence[tuple[int, float]], tuned: Sequence[tuple[int, float]],
                    tolerance: float) -> TransferCounts:
    """Counts of a transfer pair against the from-scratch curve's final best R."""
    target = scratch[-1][1]
    near = target * (1 + tolerance)
    return TransferCounts(samples_to_reach(scratch, target), samples_to_reach(scratch, near),
                          samples_to_reach(tuned, target), samples_to_reach(tuned, near))


def best_within(curve: Sequence[tuple[int, float]], samples: int) -> float:
    """The curve's best R after at most ``samples`` placements sampled (inf: none by then)."""
    return min((best for n, best in curve if n <= samples), default=float("inf"))


def single_move_landscape(env: PlacementEnv) -> dict:
    """What moving one group from the start placement is worth: every movable group is moved
    alone to each other action device and scored; then the helping moves are applied one after
    another, best first, each kept only if it still helps. A yardstick for what a policy could
    learn to do in one episode (``samples`` placements simulated)."""
    start = env.start(np.random.default_rng(0))
    r0 = env.score(start)
    moves = []
    for v in np.unique(env.order):
        for a in range(env.view.num_devices):
            if a != start[v]:
                moved = start.copy()
                moved[v] = a
                moves.append(((r0 - env.score(moved)) / r0, int(v), a))
    samples = 1 + len(moves)
    current, score = start.copy(), r0
    for gain, v, a in sorted(moves, reverse=True):
        if gain <= 0:
            break
        trial = current.copy()
        trial[v] = a
        r = env.score(trial)
        samples += 1
        if r < score:
            current, score = trial, r
    gains = [m[0] for m in moves]
    return dict(start=r0, moves=len(moves), helping=int(sum(g > 0 for g in gains)),
                best_gain=max(gains), greedy=score, greedy_gain=(r0 - score) / r0,
                samples=samples)


def greedy_gain(policy: PlacetoPolicy, env: PlacementEnv) -> float:
    """Relative improvement over the start placement of one greedy episode's best placement."""
    episode = reinforce.rollout(policy, env, np.random.default_rng(0), greedy=True)
    return float((episode.scores[0] - episode.best_score) / episode.scores[0])


def mean_greedy_gain(policy: PlacetoPolicy, envs: Sequence[PlacementEnv]) -> float:
    """The mean of :func:`greedy_gain` over ``envs``: how a policy is chosen among several
    without looking at the held-out graphs."""
    return float(np.mean([greedy_gain(policy, env) for env in envs]))


def pretrain(policy: PlacetoPolicy, train_problems: Sequence[PlacementProblem],
             test_problems: Sequence[PlacementProblem], env_config: EnvConfig,
             config: reinforce.TrainConfig, *, select_every: int = 0, select_graphs: int = 12,
             logdir: str | None = None, progress: bool = False,
             ray_address: str | None = None) -> dict:
    """Train ``policy`` on ``train_problems``; evaluate zero-shot on ``test_problems``.

    With ``select_every`` > 0, every that many iterations (and before the first) a greedy
    episode is run on ``select_graphs`` training graphs spread over the list, and the policy
    ends with the weights whose mean improvement over the start placement was highest (the
    held-out graphs play no part in it). ``ray_address`` runs the workers as Ray actors
    (:func:`tf_autoplace.placers.placeto.reinforce.train`).

    Returns the results the manifest records: training seconds, samples, the selection curve,
    and per held-out graph its size, the zero-shot R, the untrained policy's zero-shot R and
    each heuristic's R."""
    untrained = PlacetoPolicy(**policy.config)
    untrained.set_weights(policy.get_weights())
    selection = None
    should_stop = None
    if select_every > 0:
        picks = np.unique(np.linspace(0, len(train_problems) - 1, select_graphs).round())
        envs = [PlacementEnv(train_problems[int(i)], env_config) for i in picks]
        selection = dict(every=select_every, graphs=[int(i) for i in picks], curve=[])
        best = {"gain": -np.inf}

        def should_stop(state: reinforce.TrainState) -> bool:
            if state.iteration % select_every == 0 or state.iteration == config.iterations:
                gain = mean_greedy_gain(policy, envs)
                selection["curve"].append((state.iteration, gain))
                if gain > best["gain"]:
                    best.update(gain=gain, iteration=state.iteration,
                                weights=policy.get_weights())
            return False

        should_stop(reinforce.TrainState())
    t = time.perf_counter()
    state = reinforce.train(policy, train_problems, env_config, config, logdir=logdir,
                            should_stop=should_stop, progress=progress,
                            ray_address=ray_address)
    seconds = time.perf_counter() - t
    if selection is not None:
        policy.set_weights(best["weights"])
        selection.update(chosen_iteration=best["iteration"], chosen_mean_gain=best["gain"])
    return dict(train_seconds=seconds, iterations=state.iteration, samples=state.samples,
                train_best_R={int(k): float(v) for k, v in state.best_scores.items()},
                selection=selection, held_out=held_out(policy, untrained, test_problems,
                                                       env_config))


def held_out(policy: PlacetoPolicy, untrained: PlacetoPolicy,
             test_problems: Sequence[PlacementProblem], env_config: EnvConfig) -> list[dict]:
    """Per held-out graph: its size, the zero-shot R of ``policy`` and of ``untrained`` (the
    weights training started from), and each heuristic's R (what the manifest records)."""
    rows = []
    for i, problem in enumerate(test_problems):
        trained = zero_shot(policy, problem, env_config)
        before = zero_shot(untrained, problem, env_config)
        rows.append(dict(graph=i, ops=problem.graph.num_ops, groups=trained["groups"],
                         zero_shot_R=trained["best_R"], zero_shot_seconds=trained["seconds"],
                         zero_shot_samples=trained["samples"],
                         untrained_zero_shot_R=before["best_R"],
                         heuristics_R=heuristic_scores(problem)))
    return rows
