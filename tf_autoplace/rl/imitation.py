"""Pretraining by imitating search: the policy learns to make, in one greedy episode, the moves
the placer's own search found on each training graph.

The placer fine-tunes with a local search (:func:`tf_autoplace.rl.placeto_search.search`: a
fresh policy's REINFORCE in the MDP that undoes harmful moves). On the training graphs of the
NMT family, 1,200 simulated placements take it to placements 2.9-10.7% faster than the best
heuristic's, which move 25-72 of the 256 groups away from where the heuristic put them.
Pretraining with policy gradients on one-move gains (:mod:`tf_autoplace.rl.reinforce`,
``behaviour="keep"``) taught the policy which single moves help; its greedy episode then
stopped about 4% short of what the search reached, in a different basin, and fine-tuning from
there was hardly faster than searching from scratch (BENCHMARKS.md).

Here the searches' results are the targets instead (expert iteration, with the placer's search
as the expert):

1. :func:`search_targets` runs the search from scratch on every training graph (once, or a few
   times with different seeds) and keeps the best placement met (or, given a direction
   tolerance, a near-best one that moves groups the way most graphs' best placements do, with
   optionally more searches on the graphs that have none, and on the graphs whose best gains
   far less than the others');
2. :func:`clone` trains the policy, teacher-forced, to place each group where that placement
   has it: the episode starts from the environment's start placement and visits the groups in
   the environment's order; at step t the groups before t are already on their target devices,
   and the loss is the cross-entropy of group t's target device. The steps that move a group
   (a tenth to a quarter of them) are weighted ``move_weight`` times the others, so keeping
   every group where it is is not the cheap answer.
3. :func:`clone_best_of` clones several policies from differently seeded initial weights on
   the same targets and keeps the one whose greedy episodes gain most on the training graphs:
   which optimum a clone's greedy episodes land in on unseen graphs depends on its initial
   weights about as much as on its targets.

On held-out graphs the greedy episode of the cloned policy then lands where a search from
scratch gets after 300 to 2,400 placements. But it lands in a local optimum of single-group
moves, which fine-tuning hardly leaves (BENCHMARKS.md, "Pretraining by imitating the placer's
search").
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import sys
import time
from typing import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from tf_autoplace.errors import ConfigError
from tf_autoplace.rl import reinforce
from tf_autoplace.rl.env import PlacementEnv
from tf_autoplace.rl.placeto_search import PlacetoConfig, search
from tf_autoplace.rl.policies.placeto import PlacetoPolicy
from tf_autoplace.rl.pretrain import mean_greedy_gain


@dataclasses.dataclass(frozen=True)
class Target:
    """What the search found on one training graph."""

    actions: np.ndarray  # [G] the best placement met, as actions
    score: float  # its memory-penalised simulated runtime R
    start_score: float  # R of the environment's start placement
    moved: int  # groups the placement puts elsewhere than the start placement does
    samples: int  # placements the search simulated
    moves: np.ndarray  # [D, D] groups moved from device a (start placement) to device b


def _search_one(problem, placeto_config, samples: int, seed: int) -> Target:
    env = PlacementEnv(problem, placeto_config.env)
    config = dataclasses.replace(placeto_config, max_samples=samples)
    policy = PlacetoPolicy(env.view.num_devices, env.num_features, seed=seed)
    found = search(policy, env, config, seed, pretrained=False, zero_shot=False)
    start = env.start(np.random.default_rng(seed))
    moves = np.zeros((env.view.num_devices,) * 2, dtype=np.int64)
    np.add.at(moves, (start, found.best_actions), 1)
    np.fill_diagonal(moves, 0)
    return Target(actions=found.best_actions, score=found.best_score,
                  start_score=env.score(start), moved=int(moves.sum()), samples=found.samples,
                  moves=moves)


def _search_task(args) -> Target:
    return _search_one(*args)


def search_targets(problems: Sequence, placeto_config, *, samples: int, seed: int,
                   searches: int = 1, direction_tolerance: float | None = None,
                   extra_searches: int = 0, shallow_searches: int = 0, workers: int = 1,
                   progress: bool = False) -> list[Target]:
    """The best placement the placer's search from scratch (``placeto_config``'s fine-tuning
    settings, a fresh policy) finds on each problem within ``samples`` placements; with
    ``searches`` > 1, the best of that many searches (each search's local optimum depends on
    its path). Search k of graph i is seeded with ``[seed, i, k]`` (``[seed, i]`` for the
    only one), so the targets do not depend on ``workers`` (processes, ``spawn``); ``samples``
    counts the placements of one search.

    With ``direction_tolerance``, a graph's target is instead, of its searches' placements
    within that fraction of their best R, the one that moves groups most the way the best
    placements of all the graphs do (from which device to which, as shares). On identical
    devices a graph often has near-equal optima that move groups in opposite directions, and
    a policy cloned on a mix of both learns a direction only some graphs show (BENCHMARKS.md,
    "Targets that move groups one way"). ``extra_searches`` (which needs a tolerance) then
    gives each graph whose target still moves groups mostly another way (see
    :func:`dissenting`) that many more searches, seeded ``[seed, i, searches + j]``, and its
    target is chosen again among all of them.

    ``shallow_searches`` then gives each graph whose best placement so far gains less than half
    what the graphs' best placements gain (the median; see :func:`shallow`) that many more
    searches, seeded ``[seed, i, searches + extra_searches + j]``, which restart when they
    stall (``placeto_config.restart_after``, or the placer's default where that is None). A
    search from scratch now and then ends in a poor local optimum, and a policy cloned on it
    can learn that placement for the graphs like it. On the NMT family one of 16 targets gained
    2.88% where the others gained 6.5-10.7%; four more searches with restarts all found
    6.5-7.4%, and eight without restarts found it once. The held-out graph most like it was one
    of the two the shipped policy placed worst, and three clones with a deeper target there
    placed it 2.9-4.7% faster than the shipped policy (BENCHMARKS.md, fourteenth session)."""
    if not (isinstance(samples, int) and samples > 0):
        raise ConfigError(f"samples must be an int > 0, got {samples!r}")
    if not (isinstance(searches, int) and searches > 0):
        raise ConfigError(f"searches must be an int > 0, got {searches!r}")
    if direction_tolerance is not None and not direction_tolerance >= 0:
        raise ConfigError(f"direction_tolerance must be None or >= 0, got "
                          f"{direction_tolerance!r}")
    if not (isinstance(extra_searches, int) and extra_searches >= 0):
        raise ConfigError(f"extra_searches must be an int >= 0, got {extra_searches!r}")
    if not (isinstance(shallow_searches, int) and shallow_searches >= 0):
        raise ConfigError(f"shallow_searches must be an int >= 0, got {shallow_searches!r}")
    if extra_searches and direction_tolerance is None:
        raise ConfigError("extra_searches needs a direction_tolerance: without one no target "
                          "is chosen by its direction")
    per_graph = [[] for _ in problems]
    keys = [(i, [seed, i] if searches == 1 else [seed, i, k])
            for i in range(len(problems)) for k in range(searches)]
    _run_searches(problems, placeto_config, samples, keys, per_graph, workers, progress)
    if extra_searches:
        keys = [(i, [seed, i, searches + j])
                for i in dissenting(per_graph, direction_tolerance)
                for j in range(extra_searches)]
        _run_searches(problems, placeto_config, samples, keys, per_graph, workers, progress)
    if shallow_searches:
        # A shallow target is a search stuck in a poor local optimum. The placer's remedy is to
        # restart a stalled search, so these searches do, even where the first ones did not.
        restarting = placeto_config if placeto_config.restart_after else dataclasses.replace(
            placeto_config, restart_after=PlacetoConfig().restart_after)
        keys = [(i, [seed, i, searches + extra_searches + j])
                for i in shallow(per_graph) for j in range(shallow_searches)]
        _run_searches(problems, restarting, samples, keys, per_graph, workers, progress)
    return [dataclasses.replace(target, samples=sum(t.samples for t in mine))
            for target, mine in zip(choose_targets(per_graph, direction_tolerance), per_graph)]


def _run_searches(problems, placeto_config, samples: int, keys, per_graph: list[list[Target]],
                  workers: int, progress: bool) -> None:
    """Run a search of graph i seeded from ``key`` for each ``(i, key)`` in ``keys``, and
    append its result to ``per_graph[i]`` in the order of ``keys``."""
    tasks = [(problems[i], placeto_config, samples,
              int(np.random.default_rng(key).integers(2**31 - 1))) for i, key in keys]
    found = _map_in_order(_search_task, tasks, workers, (
        lambda done, seconds: f"[imitation] {len(done)}/{len(tasks)} searches ({seconds:.0f} s)")
        if progress else None)
    for (i, _), target in zip(keys, found):
        per_graph[i].append(target)


def _map_in_order(fn, tasks: Sequence, workers: int, progress_line=None) -> list:
    """``fn(task)`` for each task, in order: in this process with one worker, else in up to
    ``workers`` processes (``spawn``: TensorFlow does not survive a fork). After each result,
    ``progress_line(results so far, seconds)`` goes to stderr, unless it is None."""
    results, t0 = [], time.perf_counter()

    def report(result) -> None:
        results.append(result)
        if progress_line is not None:
            print(progress_line(results, time.perf_counter() - t0), file=sys.stderr, flush=True)

    if workers == 1:
        for task in tasks:
            report(fn(task))
    else:
        with concurrent.futures.ProcessPoolExecutor(
                max_workers=max(1, min(workers, len(tasks))),
                mp_context=multiprocessing.get_context("spawn")) as pool:
            for result in pool.map(fn, tasks):
                report(result)
    return results


def choose_targets(per_graph: Sequence[Sequence[Target]],
                   direction_tolerance: float | None = None) -> list[Target]:
    """One target per graph from its searches' placements: the best (the first of equals),
    or with ``direction_tolerance`` the one that agrees most with the graphs' consensus
    direction among those within that fraction of the best (see :func:`search_targets`)."""
    best = [min(mine, key=lambda target: target.score) for mine in per_graph]
    if direction_tolerance is None:
        return best
    consensus = _consensus(best)
    return [max((t for t in mine if t.score <= top.score * (1 + direction_tolerance)),
                key=lambda t: float(np.sum(_direction(t) * consensus)))
            for mine, top in zip(per_graph, best)]


def dissenting(per_graph: Sequence[Sequence[Target]], direction_tolerance: float) -> list[int]:
    """The graphs whose target (:func:`choose_targets` with ``direction_tolerance``) moves
    groups mostly another way than the consensus: the from -> to device pair that moves the
    most groups is not the consensus's. (Move counts are never negative, so a dot product
    with the consensus is not enough to tell: it is positive for nearly every placement.)"""
    consensus = _consensus([min(mine, key=lambda target: target.score) for mine in per_graph])
    return [i for i, target in enumerate(choose_targets(per_graph, direction_tolerance))
            if np.argmax(target.moves) != np.argmax(consensus)]


def shallow(per_graph: Sequence[Sequence[Target]]) -> list[int]:
    """The graphs whose best placement gains less over the start placement (as a share of
    its R) than half the median of every graph's best gain."""
    gains = [1.0 - min(t.score for t in mine) / mine[0].start_score for mine in per_graph]
    return [i for i, gain in enumerate(gains) if gain < 0.5 * float(np.median(gains))]


def _consensus(best: Sequence[Target]) -> np.ndarray:
    """The sum of the graphs' best placements' directions: which way most of them move."""
    return sum(_direction(target) for target in best)


def _direction(target: Target) -> np.ndarray:
    """The target's moves [D, D] scaled to unit length: which way it moves groups."""
    norm = np.linalg.norm(target.moves)
    return target.moves / norm if norm else target.moves.astype(float)


def teacher_forced(env: PlacementEnv, target: np.ndarray):
    """Inputs of the episode that moves every group to ``target`` [G] (actions) in order:
    features [T, G, F], pool masks, current groups [T], and the target action of each step."""
    actions = np.asarray(target, dtype=np.int32)[env.order]
    episode = reinforce.Episode(actions=actions, start=env.start(np.random.default_rng(0)),
                                scores=np.zeros(env.num_steps + 1),
                                best_actions=np.asarray(target), best_score=0.0)
    feats, masks, current = reinforce.episode_features(env, episode)
    return feats, masks, current, actions, actions != episode.start[env.order]


def clone(policy: PlacetoPolicy, envs: Sequence[PlacementEnv], targets: Sequence[np.ndarray],
          *, epochs: int, learning_rate: float = 3e-3, move_weight: float = 3.0,
          progress: bool = False) -> list[tuple[int, float, float, float]]:
    """Train ``policy`` in place to reach ``targets[i]`` on ``envs[i]`` (see the module doc):
    ``epochs`` passes over the graphs in order, one Adam step per graph.

    Returns per epoch (epoch, mean loss, share of steps whose argmax is the target, the same
    among the steps that move their group)."""
    if len(envs) != len(targets) or not envs:
        raise ConfigError(f"clone needs one target per environment, got {len(envs)} "
                          f"environments and {len(targets)} targets")
    if not move_weight > 0:
        raise ConfigError(f"move_weight must be > 0, got {move_weight!r}")
    data = []
    for env, target in zip(envs, targets):
        feats, masks, current, actions, moved = teacher_forced(env, target)
        weights = tf.constant(np.where(moved, move_weight, 1.0), tf.float32)
        data.append((env, feats, masks, current, actions, moved, weights))
    optimizer = tf.keras.optimizers.Adam(learning_rate=learning_rate)
    curve, t0 = [], time.perf_counter()
    for epoch in range(epochs):
        losses, hits, move_hits = [], [], []
        for env, feats, masks, current, actions, moved, weights in data:
            with tf.GradientTape() as tape:
                logits = policy.logits(feats, env.view.edge_src, env.view.edge_dst, masks,
                                       current)
                log_p = tfp.distributions.Categorical(logits=logits).log_prob(actions)
                loss = -tf.reduce_sum(weights * log_p) / tf.reduce_sum(weights)
            grads = tape.gradient(loss, policy.trainable_variables)
            optimizer.apply_gradients(zip(grads, policy.trainable_variables))
            right = np.argmax(logits.numpy(), axis=1) == actions
            losses.append(float(loss))
            hits.append(right.mean())
            move_hits.append(right[moved].mean() if moved.any() else 1.0)
        curve.append((epoch, float(np.mean(losses)), float(np.mean(hits)),
                      float(np.mean(move_hits))))
        if progress:
            print(f"\r[imitation] epoch {epoch + 1}/{epochs} loss {curve[-1][1]:.4f} "
                  f"target actions {curve[-1][2]:.3f} (moves {curve[-1][3]:.3f}) "
                  f"({time.perf_counter() - t0:.0f} s)", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    return curve


@dataclasses.dataclass(frozen=True)
class Clone:
    """One policy cloned by :func:`clone_best_of`."""

    seed: int  # of its initial weights
    weights: list  # its trained weights (``PlacetoPolicy.get_weights``)
    curve: list  # :func:`clone`'s curve
    train_gain: float  # mean greedy gain over the training graphs (``pretrain.mean_greedy_gain``)


def clone_best_of(problems: Sequence, env_config, targets: Sequence[np.ndarray],
                  policy_config: dict, seeds: Sequence[int], *, epochs: int,
                  learning_rate: float = 3e-3, move_weight: float = 3.0, workers: int = 1,
                  progress: bool = False) -> tuple[PlacetoPolicy, list[Clone]]:
    """Clone one policy per seed in ``seeds`` (``PlacetoPolicy(**policy_config, seed=s)``, then
    :func:`clone` on ``targets``, a target per problem in ``env_config``'s MDP), and return the
    one whose greedy episodes gain most over the start placement on those same training
    graphs (the mean; the first of equals), with every clone's record.

    The same targets cloned from other initial weights give policies far apart on held-out
    graphs. On the NMT family the shipped targets cloned from seeds 0-4 gain 7.12 / 6.59 /
    5.54 / 6.91 / 6.43% on the held-out graphs (mean), 7.12 / 6.74 / 6.19 / 7.41 / 6.84% on the
    training graphs: the training graphs single out the poor draws (the three lowest are the
    same), though not the best of the good ones (BENCHMARKS.md). The choice needs no held-out
    graph. With ``workers`` > 1 the clones train in that many processes (``spawn``); a clone
    does not depend on where it ran."""
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"clone_best_of needs distinct seeds, got {seeds!r}")
    if len(problems) != len(targets) or not problems:
        raise ConfigError(f"clone_best_of needs one target per problem, got {len(problems)} "
                          f"problems and {len(targets)} targets")
    in_process = workers == 1 or len(seeds) == 1  # then cloning can show each epoch
    tasks = [(problems, env_config, targets, dict(policy_config, seed=seed), epochs,
              learning_rate, move_weight, progress and in_process) for seed in seeds]
    clones = _map_in_order(
        _clone_task, tasks, 1 if in_process else workers, (
            lambda done, seconds: f"[imitation] clone {len(done)}/{len(tasks)} (initial weights "
            f"seed {done[-1].seed}): target actions {done[-1].curve[-1][2]:.3f}, training "
            f"graphs' mean greedy gain {done[-1].train_gain:.2%} ({seconds:.0f} s)")
        if progress else None)
    best = max(clones, key=lambda made: made.train_gain)
    policy = PlacetoPolicy(**dict(policy_config, seed=best.seed))
    policy.set_weights(best.weights)
    return policy, clones


def _clone_task(args) -> Clone:
    """Clone a fresh policy and score it on the training graphs (runs in a worker)."""
    problems, env_config, targets, policy_config, epochs, learning_rate, move_weight, \
        progress = args
    envs = [PlacementEnv(problem, env_config) for problem in problems]
    policy = PlacetoPolicy(**policy_config)
    curve = clone(policy, envs, targets, epochs=epochs, learning_rate=learning_rate,
                  move_weight=move_weight, progress=progress)
    return Clone(seed=policy_config["seed"], weights=policy.get_weights(), curve=curve,
                 train_gain=mean_greedy_gain(policy, envs))
