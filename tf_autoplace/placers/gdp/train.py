"""Training GDP's policy with PPO on one graph or a batch of graphs (Zhou et al., section 3,
eq. 1: "the case when N = 1 as individual training and the case when N > 1 as batch
training").

One update (:func:`train`, step i):

1. take ``graphs_per_step`` of the training graphs (drawn without replacement from
   ``numpy.random.default_rng([seed, i])``); for each, one forward pass gives every group's
   device distribution, and ``samples`` whole placements are drawn from it (graph g's draws from
   ``default_rng([seed, i, g])``);
2. simulate them (an :class:`~tf_autoplace.learning.rollouts.Evaluator` per graph) and score each
   with the memory-penalised runtime ``R = r + c * ReLU(m - M)``; the reward is ``-sqrt(R)``
   (GDP section 4.1: "the negative square root of the run time"; a placement that does not fit
   memory is penalised through R instead of a constant -10, so the policy still learns which of
   two over-full placements is closer to fitting). Colocation and kernels cannot be broken:
   the policy places whole groups, and only on devices every op of the group can run on;
3. advantages per graph (:func:`tf_autoplace.learning.ppo.advantages`: baseline = mean reward of that
   graph's last ``baseline_window`` trials);
4. ``epochs`` PPO epochs over the batch (:func:`tf_autoplace.learning.ppo.clipped_loss`, the mean
   over the step's graphs), each one Adam step on gradients clipped to ``max_grad_norm``; the
   learning rate decays linearly from ``learning_rate`` to ``final_learning_rate``.

The state (:class:`TrainState`) keeps the best placement met on every graph: a search's answer
is its best sample, not its last policy.

**Following the best placement** (``follow_best``, our addition, for policies that read the
heuristic's placement as a hint; :mod:`tf_autoplace.placers.gdp.features`). Such a policy draws
placements near its hint. When a sample beats the hint, the graph's hint becomes that sample
for the next updates: the search then proposes changes of the best placement so far, an
iterated local search whose proposals the policy learns, rather than changes of the heuristic's
placement forever. A placement is a placement of groups that never straddle the heuristic's
devices, so the best one is always exactly a hint. The hint a graph starts with is simulated
once first, so that only a sample that beats it replaces it. Seeds are explicit; with one evaluator process or many
the same seed gives the same placements.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from tf_autoplace.core.settings import check_number
from tf_autoplace.errors import ConfigError
from tf_autoplace.learning import ppo
from tf_autoplace.learning.adam import FusedAdam
from tf_autoplace.learning.rollouts import Evaluator
from tf_autoplace.outputs.progress import StatusLine
from tf_autoplace.placers.gdp.features import GdpGraph
from tf_autoplace.placers.gdp.policy import GdpPolicy, greedy, inputs, log_softmax, sample


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Attributes:
      steps: policy updates.
      samples: placements sampled per graph per update.
      graphs_per_step: graphs per update (N of the paper's batch training; 1 to fine-tune).
      epochs: PPO epochs (Adam steps) per update, over the same samples.
      clip: PPO's epsilon.
      learning_rate, final_learning_rate: Adam's rate, decayed linearly over ``steps``
        (``final_learning_rate=None`` keeps it constant).
      entropy: weight of the mean per-group entropy bonus.
      baseline_window: previous trials of a graph averaged into its reward baseline.
      advantage_floor: the smallest reward spread advantages are divided by, relative to the
        graph's mean |reward| (0.1% by default: steps whose samples all did the same stay quiet).
      max_grad_norm: gradients are clipped to this global norm.
      memory_penalty: c in R = r + c * ReLU(m - M), seconds per GB over capacity.
      follow_best: for a policy that reads a hint (``GdpPolicy(hint=True)``), a graph's hint
        becomes the best placement found on it so far, as soon as one beats it (module doc).
      seed: everything random derives from it.
    """

    steps: int = 100
    samples: int = 16
    graphs_per_step: int = 1
    epochs: int = 4
    clip: float = 0.2
    learning_rate: float = 1e-3
    final_learning_rate: float | None = None
    entropy: float = 0.01
    baseline_window: int = 64
    advantage_floor: float = 1e-3
    max_grad_norm: float = 1.0
    memory_penalty: float = 2.0
    follow_best: bool = True
    seed: int = 0

    def __post_init__(self):
        for name in ("samples", "graphs_per_step", "epochs", "baseline_window"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        if not (isinstance(self.steps, int) and self.steps >= 0):
            raise ConfigError(f"steps must be an int >= 0, got {self.steps!r}")
        check_number("clip", self.clip, low=0, low_ok=False, high=1, high_ok=False)
        for name in ("learning_rate", "max_grad_norm"):
            check_number(name, getattr(self, name), low=0, low_ok=False)
        check_number("final_learning_rate", self.final_learning_rate, low=0, low_ok=False,
                     none_ok=True)
        for name in ("entropy", "advantage_floor", "memory_penalty"):
            check_number(name, getattr(self, name), low=0)

    def rate(self, step: int) -> float:
        if self.final_learning_rate is None:
            return self.learning_rate
        frac = min(step / max(self.steps - 1, 1), 1.0)
        return self.learning_rate + frac * (self.final_learning_rate - self.learning_rate)


@dataclasses.dataclass
class TrainState:
    """What training has produced so far (the weights live in the policy).

    Attributes:
      step: updates done. samples: placements simulated.
      best_scores, best_actions: per graph id, the lowest R met and its [G] actions.
      curve: (samples so far, graph id, that graph's best R so far) after every update.
      history: per graph id, its last rewards (the baseline's window).
    """

    step: int = 0
    samples: int = 0
    best_scores: dict = dataclasses.field(default_factory=dict)
    best_actions: dict = dataclasses.field(default_factory=dict)
    curve: list = dataclasses.field(default_factory=list)
    history: dict = dataclasses.field(default_factory=dict)

    def record(self, graph_id: int, actions: np.ndarray, scores: np.ndarray) -> bool:
        """Keep the best of ``actions`` [B, G] with their R ``scores`` [B]; True if it beats
        the graph's best so far."""
        self.samples += len(scores)
        i = int(np.argmin(scores))
        if scores[i] < self.best_scores.get(graph_id, np.inf):
            self.best_scores[graph_id] = float(scores[i])
            self.best_actions[graph_id] = actions[i].copy()
            return True
        return False


def _hinted(graph: GdpGraph, actions: np.ndarray) -> GdpGraph:
    """``graph`` with the placement ``actions`` [G] as its hint (movable groups only)."""
    hint = np.zeros_like(graph.hint)
    hint[np.arange(graph.num_groups), actions] = 1.0
    return dataclasses.replace(graph, hint=hint * graph.movable[:, None])


def greedy_placement(policy: GdpPolicy, graph: GdpGraph, evaluator: Evaluator):
    """The policy's most likely placement: ``(actions [G], R)`` (one forward, one simulation)."""
    actions = greedy(policy.graph_logits(graph))
    return actions, float(evaluator.evaluate(graph.op_placement(actions[None])).scores[0])


@dataclasses.dataclass
class _Rollout:
    graph_id: int
    tensors: tuple
    actions: np.ndarray  # [B, G]
    old_log_probs: np.ndarray  # [B, G]
    advantages: np.ndarray  # [B]
    mask: np.ndarray  # [G] float32


def train(policy: GdpPolicy, graphs: Sequence[GdpGraph], evaluators: Sequence[Evaluator],
          config: PPOConfig, *, state: TrainState | None = None,
          should_stop: Callable[[TrainState], bool] | None = None,
          on_step: Callable[[TrainState], None] | None = None,
          progress: bool = False) -> TrainState:
    """Train ``policy`` in place on ``graphs`` (``evaluators[i]`` scores graph i's placements)
    until ``config.steps`` updates are done or ``should_stop(state)`` (checked after every
    update, and before the first) says so. ``on_step`` is called after every update (a
    checkpoint selection hook). Returns the state."""
    if len(graphs) != len(evaluators) or not graphs:
        raise ConfigError(f"need one evaluator per graph and at least one graph, got "
                          f"{len(graphs)} graphs and {len(evaluators)} evaluators")
    state = state or TrainState()
    optimizer = FusedAdam(policy.trainable_variables)
    graphs = list(graphs)
    follow = config.follow_best and policy.config["hint"]
    if follow:
        for i, g in enumerate(graphs):
            if i in state.best_actions:  # go on from the best found so far
                graphs[i] = _hinted(g, state.best_actions[i])
            else:  # the hint itself is the placement to beat (one simulation)
                actions = np.argmax(g.hint, axis=1).astype(np.int32)[None]
                state.record(i, actions, evaluators[i].evaluate(g.op_placement(actions)).scores)
    tensors = [inputs(g) for g in graphs]
    masks = [g.movable.astype(np.float32) for g in graphs]
    t0 = time.perf_counter()
    status = StatusLine("gdp") if progress else None
    while state.step < config.steps and not (should_stop and should_stop(state)):
        step = state.step
        picks = np.random.default_rng([config.seed, step]).choice(
            len(graphs), size=min(config.graphs_per_step, len(graphs)), replace=False)
        batch = []
        for gid in picks.tolist():
            graph = graphs[gid]
            logits = policy.logits(*tensors[gid]).numpy().astype(np.float64)
            actions = sample(logits, np.random.default_rng([config.seed, step, gid]),
                             config.samples)
            log_p = log_softmax(logits)
            old = np.take_along_axis(log_p[None], actions[..., None], axis=-1)[..., 0]
            scores = evaluators[gid].evaluate(graph.op_placement(actions)).scores
            rewards = -np.sqrt(scores)
            history = state.history.setdefault(
                gid, collections.deque(maxlen=config.baseline_window))
            past = np.asarray(history) if history else None
            floor = config.advantage_floor * float(np.abs(rewards).mean())
            adv = ppo.advantages(rewards, past, floor)
            history.extend(rewards.tolist())
            improved = state.record(gid, actions, scores)
            batch.append(_Rollout(gid, tensors[gid], actions, old.astype(np.float32), adv,
                                  masks[gid]))
            if follow and improved:
                graphs[gid] = _hinted(graph, state.best_actions[gid])
                tensors[gid] = inputs(graphs[gid])
        for _ in range(config.epochs):
            _ppo_epoch(policy, optimizer, batch, config, config.rate(step))
        state.step += 1
        for r in batch:
            state.curve.append((state.samples, r.graph_id, state.best_scores[r.graph_id]))
        if on_step:
            on_step(state)
        if status:
            best = np.mean(list(state.best_scores.values()))
            status.update(f"step {state.step}/{config.steps} samples {state.samples} "
                          f"mean best R {best * 1e3:.2f} ms ({time.perf_counter() - t0:.0f} s)")
    if status:
        status.close()
    return state


def _ppo_epoch(policy: GdpPolicy, optimizer: FusedAdam, batch: list[_Rollout],
               config: PPOConfig, learning_rate: float) -> float:
    variables = policy.trainable_variables
    with tf.GradientTape() as tape:
        loss = tf.add_n([ppo.clipped_loss(policy.logits(*r.tensors), r.actions,
                                          r.old_log_probs, r.advantages, r.mask,
                                          clip=config.clip, entropy_weight=config.entropy)
                         for r in batch]) / len(batch)
    grads = tape.gradient(loss, variables)
    grads = [tf.zeros_like(v) if g is None else g for g, v in zip(grads, variables)]
    optimizer.apply(grads, learning_rate, config.max_grad_norm)
    return float(loss)

