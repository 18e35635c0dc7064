"""Pretraining by imitating search: the policy learns to make, in one greedy episode, the moves
the placer's own search finds on each training graph (expert iteration, with the placer's search
as the expert).

1. :func:`search_targets` runs the placer's search from scratch
   (:func:`tf_autoplace.placers.placeto.search.search` with a fresh policy) on every training graph,
   once or a few times with different seeds, and keeps the best placement met as that graph's
   target;
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

The targets are whole placements, many groups moved at once, rather than the gains of single
moves: a policy trained on one-move gains learns which single moves help, and its greedy episode
then chains them into a different, shallower optimum than the search reaches. The cloned
policy's greedy episode lands in a local optimum of single-group moves; the placer's fine-tuning
(with restarts, ``PlacetoConfig.restart_after``) searches on from there.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Sequence

import numpy as np
import tensorflow as tf

from tf_autoplace.errors import ConfigError
from tf_autoplace.learning.adam import KerasAdam
from tf_autoplace.learning.workers import as_given, worker_pool
from tf_autoplace.outputs.progress import StatusLine, note
from tf_autoplace.placers.placeto import reinforce
from tf_autoplace.placers.placeto.env import PlacementEnv
from tf_autoplace.placers.placeto.policy import PlacetoPolicy
from tf_autoplace.placers.placeto.pretrain import mean_greedy_gain
from tf_autoplace.placers.placeto.search import search


@dataclasses.dataclass(frozen=True)
class Target:
    """What the search found on one training graph."""

    actions: np.ndarray  # [G] the best placement met, as actions
    score: float  # its memory-penalised simulated runtime R
    start_score: float  # R of the environment's start placement
    moved: int  # groups the placement puts elsewhere than the start placement does
    samples: int  # placements the search simulated
    moves: np.ndarray  # [D, D] groups moved from device a (start placement) to device b


# One policy object per architecture in each process. Every search and every clone starts from
# a fresh policy's weights (PlacetoPolicy.reinitialize draws exactly those of a new policy with
# that seed), while its compiled forward pass and gradient, seconds of XLA compilation per new
# policy object, are reused.
_POLICIES: dict[tuple, PlacetoPolicy] = {}


def _fresh_policy(**config) -> PlacetoPolicy:
    """A policy with the initial weights of ``PlacetoPolicy(**config)`` (see above)."""
    key = tuple(sorted((k, v) for k, v in config.items() if k != "seed"))
    policy = _POLICIES.get(key)
    if policy is None:
        policy = _POLICIES[key] = PlacetoPolicy(**config)
    else:
        policy.reinitialize(config["seed"])
    return policy


def _search_one(problem, placeto_config, samples: int, seed: int) -> Target:
    env = PlacementEnv(problem, placeto_config.env)
    config = dataclasses.replace(placeto_config, max_samples=samples)
    policy = _fresh_policy(num_devices=env.view.num_devices, num_features=env.num_features,
                           seed=seed)
    found = search(policy, env, config, seed, pretrained=False, zero_shot=False)
    start = env.start(np.random.default_rng(seed))
    moves = np.zeros((env.view.num_devices,) * 2, dtype=np.int64)
    np.add.at(moves, (start, found.best_actions), 1)
    np.fill_diagonal(moves, 0)
    return Target(actions=found.best_actions, score=found.best_score,
                  start_score=env.score(start), moved=int(moves.sum()), samples=found.samples,
                  moves=moves)


def _search_task(problems, task) -> Target:
    i, placeto_config, samples, seed = task
    return _search_one(problems[i], placeto_config, samples, seed)


def search_targets(problems: Sequence, placeto_config, *, samples: int, seed: int,
                   searches: int = 1, workers: int = 1, ray_address: str | None = None,
                   progress: bool = False) -> list[Target]:
    """The best placement the placer's search from scratch (``placeto_config``'s fine-tuning
    settings, a fresh policy) finds on each problem within ``samples`` placements; with
    ``searches`` > 1, the best of that many searches (each search's local optimum depends on
    its path; the first of equals). Search k of graph i is seeded with ``[seed, i, k]``
    (``[seed, i]`` for the only one), so the targets depend neither on ``workers`` (processes,
    ``spawn``) nor on ``ray_address`` (Ray actors instead; :mod:`tf_autoplace.learning.workers`);
    the workers get the problems once and a task names its graph by index. ``samples``
    counts the placements of one search, a target's ``samples`` those of all its graph's
    searches."""
    if not (isinstance(samples, int) and samples > 0):
        raise ConfigError(f"samples must be an int > 0, got {samples!r}")
    if not (isinstance(searches, int) and searches > 0):
        raise ConfigError(f"searches must be an int > 0, got {searches!r}")
    tasks = [(i, placeto_config, samples, int(np.random.default_rng(
                 [seed, i] if searches == 1 else [seed, i, k]).integers(2**31 - 1)))
             for i in range(len(problems)) for k in range(searches)]
    found = _map_in_order(_search_task, problems, tasks, workers, ray_address, (
        lambda done, seconds: f"[imitation] {len(done)}/{len(tasks)} searches ({seconds:.0f} s)")
        if progress else None)
    per_graph = [found[i * searches:(i + 1) * searches] for i in range(len(problems))]
    return [dataclasses.replace(min(mine, key=lambda target: target.score),
                                samples=sum(t.samples for t in mine)) for mine in per_graph]


def _map_in_order(fn, context, tasks: Sequence, workers: int, ray_address: str | None,
                  progress_line=None) -> list:
    """``fn(context, task)`` for each task, in order: in this process with one worker and no
    Ray address, else on up to ``workers`` workers that each get ``context`` once (``spawn``
    processes: TensorFlow does not survive a fork; or Ray actors; :mod:`tf_autoplace.learning.workers`).
    After each result, ``progress_line(results so far, seconds)`` goes to stderr, unless it is
    None."""
    results, t0 = [], time.perf_counter()
    if not tasks:
        return results
    with worker_pool(as_given, (context,), workers=max(1, min(workers, len(tasks))),
                     ray_address=ray_address) as pool:
        for result in pool.imap(fn, tasks):
            results.append(result)
            if progress_line is not None:
                note("imitation", progress_line(results, time.perf_counter() - t0))
    return results


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
    optimizer = KerasAdam(learning_rate=learning_rate)
    curve, t0 = [], time.perf_counter()
    status = StatusLine("imitation") if progress else None
    for epoch in range(epochs):
        losses, hits, move_hits = [], [], []
        for env, feats, masks, current, actions, moved, weights in data:
            with tf.GradientTape() as tape:
                logits = policy.logits(feats, env.view.edge_src, env.view.edge_dst, masks,
                                       current)
                log_p = reinforce.log_prob(logits, actions)
                loss = -tf.reduce_sum(weights * log_p) / tf.reduce_sum(weights)
            grads = tape.gradient(loss, policy.trainable_variables)
            optimizer.apply_gradients(zip(grads, policy.trainable_variables))
            right = np.argmax(logits.numpy(), axis=1) == actions
            losses.append(float(loss))
            hits.append(right.mean())
            move_hits.append(right[moved].mean() if moved.any() else 1.0)
        curve.append((epoch, float(np.mean(losses)), float(np.mean(hits)),
                      float(np.mean(move_hits))))
        if status:
            status.update(f"epoch {epoch + 1}/{epochs} loss {curve[-1][1]:.4f} target actions "
                          f"{curve[-1][2]:.3f} (moves {curve[-1][3]:.3f}) "
                          f"({time.perf_counter() - t0:.0f} s)")
    if status:
        status.close()
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
                  ray_address: str | None = None, progress: bool = False
                  ) -> tuple[PlacetoPolicy, list[Clone]]:
    """Clone one policy per seed in ``seeds`` (``PlacetoPolicy(**policy_config, seed=s)``, then
    :func:`clone` on ``targets``, a target per problem in ``env_config``'s MDP), and return the
    one whose greedy episodes gain most over the start placement on those same training
    graphs (the mean; the first of equals), with every clone's record.

    The same targets cloned from other initial weights give policies far apart on held-out
    graphs; the gain on the training graphs tells the poor draws apart (not always the best of
    the good ones), and needs no held-out graph. With ``workers`` > 1 the clones train in that
    many processes (``spawn``), or with ``ray_address`` on that many Ray actors; a clone does
    not depend on where it ran."""
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"clone_best_of needs distinct seeds, got {seeds!r}")
    if len(problems) != len(targets) or not problems:
        raise ConfigError(f"clone_best_of needs one target per problem, got {len(problems)} "
                          f"problems and {len(targets)} targets")
    # In this process, cloning can show each epoch.
    in_process = ray_address is None and (workers == 1 or len(seeds) == 1)
    tasks = [(dict(policy_config, seed=seed), epochs, learning_rate, move_weight,
              progress and in_process) for seed in seeds]
    clones = _map_in_order(
        _clone_task, (problems, env_config, targets), tasks, 1 if in_process else workers,
        ray_address, (
            lambda done, seconds: f"[imitation] clone {len(done)}/{len(tasks)} (initial weights "
            f"seed {done[-1].seed}): target actions {done[-1].curve[-1][2]:.3f}, training "
            f"graphs' mean greedy gain {done[-1].train_gain:.2%} ({seconds:.0f} s)")
        if progress else None)
    best = max(clones, key=lambda made: made.train_gain)
    policy = PlacetoPolicy(**dict(policy_config, seed=best.seed))
    policy.set_weights(best.weights)
    return policy, clones


def _clone_task(context, task) -> Clone:
    """Clone a fresh policy and score it on the training graphs (runs in a worker)."""
    problems, env_config, targets = context
    policy_config, epochs, learning_rate, move_weight, progress = task
    envs = [PlacementEnv(problem, env_config) for problem in problems]
    policy = _fresh_policy(**policy_config)
    curve = clone(policy, envs, targets, epochs=epochs, learning_rate=learning_rate,
                  move_weight=move_weight, progress=progress)
    return Clone(seed=policy_config["seed"], weights=policy.get_weights(), curve=curve,
                 train_gain=mean_greedy_gain(policy, envs))
