"""REINFORCE for Placeto (appendix A.1, A.7): rollouts, per-step baselines, the update, workers.

One training iteration, as in the paper's parameter-server setup:

1. every worker takes the current weights, a graph (workers take different graphs when training
   on a family) and its own seed, rolls out one episode of the MDP (:mod:`tf_autoplace.rl.env`)
   sampling from the policy, and computes the gradient of

       loss = - sum_t (G_t - b_t) * log pi(a_t | s_t)  -  beta * sum_t H(pi(. | s_t))

   where ``G_t = sum_k gamma^k r_{t+k}`` is the return from step t and ``b_t`` the graph's
   **per-step baseline**: the mean of ``G_t`` over that graph's last k episodes (k = 10). The
   paper's return is undiscounted (gamma = 1, the default here). With intermediate rewards each
   r_t is exactly the improvement action t made, and on our graphs one bad move can cost 20%
   while a good one gains 1-3%, so the undiscounted G_t of an early step is mostly the noise of
   the later moves; the shipped policy and fine-tuning use gamma = 0 (each action credited with
   its own improvement);
2. the coordinator sums the workers' gradients (in worker order, so results are reproducible)
   and takes one Adam step; the learning rate and the entropy weight beta decay linearly.

Workers are processes (``spawn``, each with its own TensorFlow) when ``workers > 1``, or run in
the calling process when ``workers == 1``; the same code computes an episode either way.

Training state is an explicit value (:class:`TrainState`); seeds are explicit: iteration i,
worker w draws from ``np.random.default_rng([seed, i, w])``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import multiprocessing
import sys
import time
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from tf_autoplace.errors import ConfigError
from tf_autoplace.placers.placeto_policy import PlacetoPolicy, pool_masks
from tf_autoplace.rl.env import PlacementEnv


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Attributes:
      iterations: parameter updates; each uses ``workers`` episodes.
      workers: episodes per update (processes when > 1). Paper: 8.
      learning_rate, final_learning_rate: Adam's rate, decayed linearly (paper: 1e-3..1e-4).
      entropy, final_entropy: entropy bonus beta, decayed linearly.
      baseline_window: k, episodes per graph averaged into the per-step baseline (paper: 10).
      discount: gamma in G_t = sum_k gamma^k r_{t+k}; 1 is the paper's undiscounted return.
      seed: everything random derives from it.
    """

    iterations: int = 100
    workers: int = 1
    learning_rate: float = 1e-3
    final_learning_rate: float = 1e-4
    entropy: float = 0.02
    final_entropy: float = 0.001
    baseline_window: int = 10
    discount: float = 1.0
    seed: int = 0

    def __post_init__(self):
        for name in ("iterations", "workers", "baseline_window"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("learning_rate", "final_learning_rate"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not 0 <= self.discount <= 1:
            raise ConfigError(f"discount must be in [0, 1], got {self.discount!r}")
        for name in ("entropy", "final_entropy"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)!r}")

    def schedule(self, iteration: int) -> tuple[float, float]:
        """(learning rate, entropy weight) at an iteration, decayed linearly."""
        frac = min(iteration / max(self.iterations - 1, 1), 1.0)
        lr = self.learning_rate + frac * (self.final_learning_rate - self.learning_rate)
        beta = self.entropy + frac * (self.final_entropy - self.entropy)
        return lr, beta


@dataclasses.dataclass(frozen=True)
class Episode:
    """One rollout. T steps; scores has T + 1 entries (R_0 is the start placement's)."""

    actions: np.ndarray  # [T] int32 action-device index chosen at each step
    start: np.ndarray  # [G] int32 start placement
    scores: np.ndarray  # [T + 1] memory-penalised runtimes
    best_actions: np.ndarray  # [G] the best placement seen during the episode
    best_score: float

    def returns(self, env: PlacementEnv, discount: float = 1.0) -> np.ndarray:
        """[T] G_t = sum_k discount^k r_{t+k}, the (discounted) rewards from step t on."""
        rewards = env.rewards(self.scores)
        out = np.empty_like(rewards)
        running = 0.0
        for t in range(len(rewards) - 1, -1, -1):
            running = rewards[t] + discount * running
            out[t] = running
        return out


def _policy_step(policy, env: PlacementEnv, placement, step, placed) -> np.ndarray:
    """[D] logits for step ``step`` of an episode in state ``placement``."""
    feats = env.features(placement, step, placed)[None]
    current = env.order[step:step + 1]
    logits = policy.logits(feats, env.view.edge_src, env.view.edge_dst,
                           pool_masks(env.view.ancestors, current), current)
    return logits.numpy()[0].astype(np.float64)


def rollout(policy, env: PlacementEnv, rng: np.random.Generator, *, greedy: bool = False,
            start: np.ndarray | None = None) -> Episode:
    """Run one episode: sample (or, with ``greedy``, take the argmax of) each action."""
    # A private copy: the episode edits it in place, the start must stay as it was.
    placement = np.array(env.start(rng) if start is None else start, dtype=np.int32)
    first = placement.copy()
    placed = np.zeros(env.view.num_groups, dtype=np.float32)
    scores = [env.score(placement)]
    best, best_score = placement.copy(), scores[0]
    actions = np.empty(env.num_steps, dtype=np.int32)
    for t in range(env.num_steps):
        logits = _policy_step(policy, env, placement, t, placed)
        if greedy:
            a = int(np.argmax(logits))
        else:
            p = np.exp(logits - logits.max())
            a = int(rng.choice(len(p), p=p / p.sum()))
        v = env.order[t]
        actions[t] = a
        placement[v] = a
        placed[v] = 1.0
        scores.append(env.score(placement))
        if scores[-1] < best_score:
            best, best_score = placement.copy(), scores[-1]
    return Episode(actions=actions, start=first, scores=np.array(scores), best_actions=best,
                   best_score=float(best_score))


def episode_features(env: PlacementEnv, episode: Episode):
    """Batched inputs for re-evaluating a whole episode: features [T, G, F], masks, current."""
    placement = episode.start.copy()
    placed = np.zeros(env.view.num_groups, dtype=np.float32)
    feats = np.empty((env.num_steps, env.view.num_groups, env.num_features), np.float32)
    for t in range(env.num_steps):
        feats[t] = env.features(placement, t, placed)
        v = env.order[t]
        placement[v] = episode.actions[t]
        placed[v] = 1.0
    return feats, pool_masks(env.view.ancestors, env.order), env.order


def episode_gradient(policy, env: PlacementEnv, episode: Episode, advantages: np.ndarray,
                     entropy_weight: float):
    """Gradients (list of numpy arrays) of the REINFORCE loss of one episode, and its loss."""
    feats, masks, current = episode_features(env, episode)
    with tf.GradientTape() as tape:
        logits = policy.logits(feats, env.view.edge_src, env.view.edge_dst, masks, current)
        dist = tfp.distributions.Categorical(logits=logits)
        loss = -tf.reduce_sum(tf.constant(advantages, tf.float32) * dist.log_prob(episode.actions))
        loss -= entropy_weight * tf.reduce_sum(dist.entropy())
    grads = tape.gradient(loss, policy.trainable_variables)
    return [g.numpy() for g in grads], float(loss)


class StepBaselines:
    """Per graph, per step: the mean return of the graph's last k episodes (Placeto A.7).

    A graph's first episode has no baseline (None): its worker then uses the episode's own
    returns, so that episode only seeds the baseline. A baseline of 0 there would push every
    action of the first, random episode down, and a policy can collapse on that one update."""

    def __init__(self, window: int):
        self._history: dict[int, collections.deque] = collections.defaultdict(
            lambda: collections.deque(maxlen=window))

    def __call__(self, graph_id: int) -> np.ndarray | None:
        history = self._history.get(graph_id)
        if not history:
            return None
        return np.mean(np.stack(history), axis=0)

    def record(self, graph_id: int, returns: np.ndarray) -> None:
        self._history[graph_id].append(np.asarray(returns, dtype=np.float64))


# --------------------------------------------------------------------------------- workers
@dataclasses.dataclass(frozen=True)
class _Task:
    weights: list
    graph_id: int
    seed: tuple
    baseline: np.ndarray
    entropy_weight: float
    discount: float = 1.0


@dataclasses.dataclass(frozen=True)
class _Result:
    graph_id: int
    gradient: list
    loss: float
    returns: np.ndarray
    episode: Episode


class _Worker:
    """Holds a policy and the environments; turns a task into a gradient."""

    def __init__(self, policy_config: dict, problems, env_config):
        self.envs = [PlacementEnv(p, env_config) for p in problems]
        self.policy = PlacetoPolicy(**policy_config)

    def __call__(self, task: _Task) -> _Result:
        env = self.envs[task.graph_id]
        self.policy.set_weights(task.weights)
        episode = rollout(self.policy, env, np.random.default_rng(list(task.seed)))
        returns = episode.returns(env, task.discount)
        baseline = returns if task.baseline is None else task.baseline
        gradient, loss = episode_gradient(self.policy, env, episode, returns - baseline,
                                          task.entropy_weight)
        return _Result(task.graph_id, gradient, loss, returns, episode)


_PROCESS_WORKER: _Worker | None = None


def _init_process_worker(policy_config, problems, env_config):
    global _PROCESS_WORKER
    _PROCESS_WORKER = _Worker(policy_config, problems, env_config)


def _run_process_worker(task: _Task) -> _Result:
    return _PROCESS_WORKER(task)


# --------------------------------------------------------------------------------- trainer
@dataclasses.dataclass
class TrainState:
    """What training has produced so far (the policy's weights live in the policy)."""

    iteration: int = 0
    samples: int = 0  # placements simulated
    best_scores: dict = dataclasses.field(default_factory=dict)  # graph id -> best R seen
    best_placements: dict = dataclasses.field(default_factory=dict)  # graph id -> [G] actions
    curve: list = dataclasses.field(default_factory=list)  # (samples, graph id, best R so far)


def train(policy, problems: Sequence, env_config, config: TrainConfig, *,
          state: TrainState | None = None, graph_ids: Sequence[int] | None = None,
          should_stop: Callable[[TrainState], bool] | None = None,
          logdir: str | None = None, progress: bool = False) -> TrainState:
    """Train ``policy`` in place on ``problems`` (PlacementProblems) with REINFORCE.

    Args:
      graph_ids: which problems to train on (default all); worker w of iteration i takes
        ``graph_ids[(i * workers + w) % len(graph_ids)]``.
      should_stop: checked after every iteration (a time or sample budget).
      logdir: write TensorBoard summaries (best and final runtime per graph, loss) here.
      progress: print a progress line to stderr.
    Returns the final TrainState (best placement per graph included).
    """
    state = state or TrainState()
    graph_ids = list(range(len(problems))) if graph_ids is None else list(graph_ids)
    baselines = StepBaselines(config.baseline_window)
    optimizer = tf.keras.optimizers.Adam(learning_rate=config.learning_rate)
    writer = None
    if logdir:
        try:
            import tensorboard  # noqa: F401  (tf.summary needs it; TF no longer installs it)
        except ImportError:
            raise ConfigError("TensorBoard summaries need the tensorboard package: "
                              "pip install 'tf_autoplace[train]'") from None
        writer = tf.summary.create_file_writer(logdir)
    policy_config = dict(policy.config)

    if config.workers == 1:
        worker = _Worker(policy_config, problems, env_config)
        envs = worker.envs
        run_all = lambda tasks: [worker(t) for t in tasks]  # noqa: E731
        pool = None
    else:
        envs = [PlacementEnv(p, env_config) for p in problems]
        pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=config.workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_process_worker, initargs=(policy_config, problems, env_config))
        run_all = lambda tasks: list(pool.map(_run_process_worker, tasks))  # noqa: E731
    t0 = time.perf_counter()
    try:
        while state.iteration < config.iterations:
            i = state.iteration
            lr, beta = config.schedule(i)
            weights = policy.get_weights()
            tasks = []
            for w in range(config.workers):
                g = graph_ids[(i * config.workers + w) % len(graph_ids)]
                tasks.append(_Task(weights, g, (config.seed, i, w),
                                   baselines(g), beta, config.discount))
            results = run_all(tasks)
            total = [np.zeros_like(w) for w in weights]
            for r in results:
                for acc, grad in zip(total, r.gradient):
                    acc += grad
            optimizer.learning_rate.assign(lr)
            optimizer.apply_gradients(zip([tf.constant(g) for g in total],
                                          policy.trainable_variables))
            for r in results:
                baselines.record(r.graph_id, r.returns)
                state.samples += len(r.episode.scores)
                if r.episode.best_score < state.best_scores.get(r.graph_id, np.inf):
                    state.best_scores[r.graph_id] = r.episode.best_score
                    state.best_placements[r.graph_id] = r.episode.best_actions
                state.curve.append((state.samples, r.graph_id, state.best_scores[r.graph_id]))
            state.iteration += 1
            if writer:
                with writer.as_default(step=i):
                    for r in results:
                        tf.summary.scalar(f"graph_{r.graph_id}/final_runtime",
                                          r.episode.scores[-1])
                        tf.summary.scalar(f"graph_{r.graph_id}/best_runtime",
                                          state.best_scores[r.graph_id])
                    tf.summary.scalar("loss", float(np.mean([r.loss for r in results])))
                    tf.summary.scalar("learning_rate", lr)
                    tf.summary.scalar("entropy_weight", beta)
            if progress:
                elapsed = time.perf_counter() - t0
                best = np.mean([state.best_scores[g] for g in state.best_scores])
                print(f"\r[placeto] iteration {state.iteration}/{config.iterations} "
                      f"samples {state.samples} mean best R {best * 1e3:.2f} ms "
                      f"({elapsed:.0f} s)", end="", file=sys.stderr, flush=True)
            if should_stop and should_stop(state):
                break
    finally:
        if pool is not None:
            pool.shutdown()
        if writer:
            writer.flush()
        if progress:
            print(file=sys.stderr)
    return state
