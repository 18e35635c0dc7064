"""Warm-starting GDP's policy by imitating Post's searches on the training graphs, before its
PPO batch training (expert iteration, with Post as the expert).

PPO alone, from a policy that copies the heuristic's hint (:mod:`tf_autoplace.placers.gdp.features`),
learns slowly across graphs: almost every random departure from a good placement is worse, so
the clipped updates mostly teach the policy to copy the hint, and the few departures that pay
are drowned in the batch. A search on one graph finds many such departures at once. So:

1. :func:`search_targets` runs Post (:func:`tf_autoplace.placers.post.search.search`, from the best
   heuristic's placement, the hint the policy reads) on every training problem and turns its
   best op placement into one action device per GDP group (:func:`group_actions`: where most
   of the group's compute sits). A target that simulates slower than the hint itself is
   replaced by the hint, so the policy never learns to make a graph worse;
2. :func:`clone` trains the policy to put every group on its target device: the cross-entropy
   of each movable group's target under the policy's logits, with the groups the target moves
   away from the hint weighted ``move_weight`` times the others (a tenth or less of the groups
   move; unweighted, copying the hint is the cheap answer);
3. after every epoch ``on_epoch`` is called (the pretraining tool scores the policy zero-shot on
   the validation graphs there and keeps the best epoch's weights).

The targets are whole placements of one graph, many groups moved together; what a policy learns
from them is which kinds of group (by features and position) a good placement moves off the
heuristic's device, and where to.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.core.settings import check_number
from tf_autoplace.errors import ConfigError
from tf_autoplace.heuristics import BestHeuristicPlacer
from tf_autoplace.learning.adam import FusedAdam
from tf_autoplace.learning.rollouts import Evaluator
from tf_autoplace.outputs.progress import StatusLine
from tf_autoplace.placers.gdp.features import GdpGraph
from tf_autoplace.placers.gdp.policy import GdpPolicy, inputs
from tf_autoplace.placers.post import search as post_search


@dataclasses.dataclass(frozen=True)
class Target:
    """What Post found on one training problem, as the policy's actions.

    Attributes:
      actions: [G] action device per group.
      score: R of ``actions`` (memory-penalised simulated runtime).
      hint_score: R of the hint placement (the best heuristic's).
      moved: movable groups ``actions`` puts elsewhere than the hint.
      samples: placements Post simulated.
    """

    actions: np.ndarray
    score: float
    hint_score: float
    moved: int
    samples: int


def hint_actions(graph: GdpGraph) -> np.ndarray:
    """[G] the hint's action device per group (0 for groups the policy does not place)."""
    return np.argmax(graph.hint, axis=1).astype(np.int32)


def group_actions(graph: GdpGraph, devices: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """[G] for an op placement ``devices`` [n]: each group's action device holding the most of
    its ``weights`` [n] (compute time), ties to the lower index; ops on a non-action device
    (the host) count for none, and a group with all of them there keeps its hint."""
    column = np.full(int(max(graph.action_devices.max(), devices.max())) + 1, -1)
    column[graph.action_devices] = np.arange(graph.num_devices)
    action = column[devices]
    on_action = action >= 0
    mass = np.zeros((graph.num_groups, graph.num_devices))
    np.add.at(mass, (graph.grouping.labels[on_action], action[on_action]),
              weights[on_action] + 1e-12)
    return np.where(mass.any(axis=1), np.argmax(mass, axis=1),
                    hint_actions(graph)).astype(np.int32)


def search_target(problem: PlacementProblem, graph: GdpGraph, config: post_search.PostConfig,
                  seed: int) -> Target:
    """Post on ``problem`` from the best heuristic's placement, as a :class:`Target`."""
    heuristic = BestHeuristicPlacer().propose(problem)
    with Evaluator(problem, memory_penalty=config.memory_penalty) as evaluator:
        found = post_search.search(problem, config, seed, heuristic=heuristic,
                                   evaluator=evaluator)
        time_per_op = np.where(np.isfinite(problem.op_time), problem.op_time, 0).max(axis=1)
        hint = hint_actions(graph)
        candidates = np.stack([group_actions(graph, found.devices, time_per_op), hint])
        scores = evaluator.evaluate(graph.op_placement(candidates)).scores
    best = 0 if scores[0] < scores[1] else 1
    moved = int(((candidates[best] != hint) & graph.movable).sum())
    return Target(candidates[best], float(scores[best]), float(scores[1]), moved,
                  found.samples)


def search_targets(problems: Sequence[PlacementProblem], graphs: Sequence[GdpGraph],
                   config: post_search.PostConfig, *, seed: int,
                   progress: bool = False) -> list[Target]:
    """:func:`search_target` on every problem, problem i with seed ``[seed, i]``."""
    targets, t0 = [], time.perf_counter()
    status = StatusLine("gdp imitation") if progress else None
    for i, (problem, graph) in enumerate(zip(problems, graphs)):
        rng_seed = int(np.random.default_rng([seed, i]).integers(2**31 - 1))
        targets.append(search_target(problem, graph, config, rng_seed))
        if status:
            t = targets[-1]
            status.update(f"target {i + 1}/{len(problems)}: R {t.score * 1e3:.1f} ms vs hint "
                          f"{t.hint_score * 1e3:.1f} ms, {t.moved} groups moved "
                          f"({time.perf_counter() - t0:.0f} s)")
    if status:
        status.close()
    return targets


@dataclasses.dataclass(frozen=True)
class CloneConfig:
    """Attributes:
      epochs: passes over the training problems (one Adam step per problem).
      learning_rate: Adam's rate (constant).
      move_weight: weight of a group the target moves off its hint device, against 1 for one
        it keeps there.
      max_grad_norm: gradients are clipped to this global norm.
      seed: the order of the problems in each epoch.
    """

    epochs: int = 30
    learning_rate: float = 1e-3
    move_weight: float = 5.0
    max_grad_norm: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if not (isinstance(self.epochs, int) and self.epochs >= 0):
            raise ConfigError(f"epochs must be an int >= 0, got {self.epochs!r}")
        for name in ("learning_rate", "max_grad_norm"):
            check_number(name, getattr(self, name), low=0, low_ok=False)
        check_number("move_weight", self.move_weight, low=1)


def imitation_loss(policy: GdpPolicy, tensors: tuple, target: np.ndarray,
                   weights: np.ndarray) -> tf.Tensor:
    """Weighted mean cross-entropy of ``target`` [G] under the policy's logits for one graph
    (``weights`` [G]: 0 for groups the policy does not place)."""
    logits = policy.logits(*tensors)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=target, logits=logits)
    w = tf.constant(weights, tf.float32)
    return tf.reduce_sum(ce * w) / tf.maximum(tf.reduce_sum(w), 1e-9)


def clone(policy: GdpPolicy, graphs: Sequence[GdpGraph], targets: Sequence[Target],
          config: CloneConfig, *, on_epoch: Callable[[int], None] | None = None,
          progress: bool = False) -> list[float]:
    """Train ``policy`` in place towards ``targets`` (module doc, step 2); returns the mean
    loss of every epoch. ``on_epoch(epoch)`` runs after each (1-based)."""
    if len(graphs) != len(targets) or not graphs:
        raise ConfigError(f"need one target per graph and at least one graph, got "
                          f"{len(graphs)} graphs and {len(targets)} targets")
    optimizer = FusedAdam(policy.trainable_variables)
    tensors = [inputs(g) for g in graphs]
    weights = []
    for g, t in zip(graphs, targets):
        moved = t.actions != hint_actions(g)
        weights.append(g.movable * np.where(moved, config.move_weight, 1.0))
    losses, t0 = [], time.perf_counter()
    status = StatusLine("gdp imitation") if progress else None
    for epoch in range(1, config.epochs + 1):
        order = np.random.default_rng([config.seed, epoch]).permutation(len(graphs))
        total = 0.0
        for i in order.tolist():
            with tf.GradientTape() as tape:
                loss = imitation_loss(policy, tensors[i], targets[i].actions, weights[i])
            grads = tape.gradient(loss, policy.trainable_variables)
            grads = [tf.zeros_like(v) if g is None else g
                     for g, v in zip(grads, policy.trainable_variables)]
            optimizer.apply(grads, config.learning_rate, config.max_grad_norm)
            total += float(loss)
        losses.append(total / len(graphs))
        if status:
            status.update(f"epoch {epoch}/{config.epochs} loss {losses[-1]:.4f} "
                          f"({time.perf_counter() - t0:.0f} s)")
        if on_epoch:
            on_epoch(epoch)
    if status:
        status.close()
    return losses
