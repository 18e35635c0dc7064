"""REINFORCE for Placeto (appendix A.1, A.7): rollouts, per-step baselines, the update, workers.

One training iteration, as in the paper's parameter-server setup:

1. every worker takes the current weights, a graph (workers take different graphs when training
   on a family) and its own seeds, rolls out ``episodes`` episodes of the MDP
   (:mod:`tf_autoplace.placers.placeto.env`) on it in lockstep, sampling from the policy, and computes the
   gradient, summed over its episodes, of

       loss = - sum_t (G_t - b_t) * log pi(a_t | s_t)  -  beta * sum_t H(pi(. | s_t))

   where ``G_t = sum_k gamma^k r_{t+k}`` is the return from step t and ``b_t`` the graph's
   **per-step baseline**: the mean of ``G_t`` over that graph's last k episodes (k = 10). The
   paper's return is undiscounted (gamma = 1, the default here). With intermediate rewards each
   r_t is exactly the improvement action t made, and on our graphs one bad move can cost many
   times what a good one gains (docs/experiments.md, "Placeto"), so the undiscounted G_t of an
   early step is mostly the noise of the later moves; fine-tuning uses gamma = 0 (each action
   credited with its own improvement);
2. the coordinator sums the workers' gradients (in worker order, so results are reproducible)
   and takes one Adam step; the learning rate and the entropy weight beta decay linearly.

**Estimators.** ``estimator="reinforce"`` (default) is the sampled gradient above. With
``discount = 0`` the return of step t is the improvement its action made, and the simulator can
score every action there, not only the sampled one: ``estimator="all_actions"`` simulates the
visited group on each action device (D - 1 placements per step, the same count as one sampled
episode when D = 2) and follows the exact expectation over the action,

    loss = - sum_t sum_a pi(a | s_t) r_t(a)  -  beta * sum_t H(pi(. | s_t)),

whose gradient is REINFORCE's expected gradient at the states the episode visited (a
baseline would not change it: ``sum_a pi(a) b grad log pi(a) = 0``). On the NMT family the good
moves are a few groups whose probability must rise while hundreds of look-alikes' must fall;
with sampled actions each update sees a move of a group with probability ~0.1 and the
"move less" direction common to all groups is learned first, until no move is sampled any more
(measured in BENCHMARKS.md, "Placeto"). The expectation sees every group's every move in every
episode.

The states are those of the policy's own episodes. Fine-tuning on the user's graph
(:mod:`tf_autoplace.placers.placeto.search`) uses the sampled estimator, in the environment that
undoes harmful moves (``EnvConfig.undo_worse``), with each episode starting from the best
placement found so far (``episode_start="best"``).

Workers run in the calling process when ``workers == 1``, else in ``spawn`` processes (each
with its own TensorFlow), or, given a ``ray_address``, as Ray actors on a cluster
(:mod:`tf_autoplace.learning.workers`); each builds its policy and environments once and gets the
weights with every task. The same code computes an episode everywhere, and a task carries its
seeds, so the same seed gives the same training curve with every backend.

Training state is an explicit value (:class:`TrainState`); seeds are explicit: episode j of
worker w in iteration i draws from ``np.random.default_rng([seed, i, w, j])``.
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
from tf_autoplace.learning.adam import KerasAdam
from tf_autoplace.learning.workers import WorkerPool, worker_pool
from tf_autoplace.outputs.progress import StatusLine
from tf_autoplace.placers.placeto.env import PlacementEnv
from tf_autoplace.placers.placeto.policy import PlacetoPolicy, pool_masks

# Smallest per-step spread advantages are divided by: 0.1% of the start placement's runtime
# (returns are relative improvements), so steps whose every episode did the same stay quiet.
ADVANTAGE_FLOOR = 1e-3


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Attributes:
      iterations: parameter updates; each uses ``workers * episodes`` episodes.
      workers: worker processes (when > 1) per update, each on its own graph. Paper: 8.
      episodes: episodes each worker rolls out per update on its graph, in lockstep (one
        batched policy call per step); an update uses ``workers * episodes`` episodes.
      learning_rate, final_learning_rate: Adam's rate, decayed linearly (paper: 1e-3..1e-4).
      entropy, final_entropy: entropy bonus beta, decayed linearly.
      baseline_window: k, episodes per graph averaged into the per-step baseline (paper: 10).
      discount: gamma in G_t = sum_k gamma^k r_{t+k}; 1 is the paper's undiscounted return.
      normalize_advantages: divide each step's advantage by the spread of that step's returns
        over the baseline window and the batch (see :func:`advantages`). Without it, the few
        steps whose best action gains a little every time are drowned by the steps where a bad
        move costs many times that (docs/experiments.md, "Placeto"); with it, every step's
        signal has the same scale.
      estimator: "reinforce" (sampled actions, the paper's) or "all_actions" (the expectation
        over every action of each visited step; needs ``discount = 0``, intermediate rewards
        and no advantage normalisation; see the module doc).
      episode_start: where a graph's episodes start: "env" (the environment's start placement,
        ``EnvConfig.start``) or "best" (the best placement found on that graph so far, the
        env's start until there is one; a TrainState passed to :func:`train` can seed it).
        The paper's MDP starts from an arbitrary placement; "best" makes every episode an
        attempt to improve on the incumbent, as the fine-tuning of a pretrained policy
        (whose own episode already improved on the env's start) needs.
      seed: everything random derives from it.
    """

    iterations: int = 100
    workers: int = 1
    episodes: int = 1
    learning_rate: float = 1e-3
    final_learning_rate: float = 1e-4
    entropy: float = 0.02
    final_entropy: float = 0.001
    baseline_window: int = 10
    discount: float = 1.0
    normalize_advantages: bool = False
    estimator: str = "reinforce"
    episode_start: str = "env"
    seed: int = 0

    def __post_init__(self):
        for name in ("iterations", "workers", "episodes", "baseline_window"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("learning_rate", "final_learning_rate"):
            check_number(name, getattr(self, name), low=0, low_ok=False)
        check_number("discount", self.discount, low=0, high=1)
        for name in ("entropy", "final_entropy"):
            check_number(name, getattr(self, name), low=0)
        if self.estimator not in ("reinforce", "all_actions"):
            raise ConfigError(
                f"estimator must be 'reinforce' or 'all_actions', got {self.estimator!r}")
        if self.estimator == "all_actions" and (self.discount != 0 or self.normalize_advantages):
            raise ConfigError("estimator='all_actions' scores each action by its own "
                              "improvement: it needs discount=0 and normalize_advantages=False")
        if self.episode_start not in ("env", "best"):
            raise ConfigError(
                f"episode_start must be 'env' or 'best', got {self.episode_start!r}")

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
    scores: np.ndarray  # [T + 1] memory-penalised runtimes of the states
    best_actions: np.ndarray  # [G] the best placement seen during the episode
    best_score: float
    # [T, D] R after each action device at each step (``rollouts(all_actions=True)``), else None
    action_scores: np.ndarray | None = None
    # [T] R of the placement each action made (None: the next state's, ``scores[1:]``); it
    # differs from the next state's only when the move was undone (``EnvConfig.undo_worse``).
    move_scores: np.ndarray | None = None
    undone: np.ndarray | None = None  # [T] bool, the move was undone (None: none was)
    moves: np.ndarray | None = None  # [T] bool, the action changed the group's device

    @property
    def samples(self) -> int:
        """Placements simulated: the start, then one per action that moved its group (a step
        that keeps the group where it is changes nothing), or, with every action scored, D - 1
        per step (keeping the group where it is leaves the placement, and R, as they were)."""
        if self.action_scores is not None:
            return 1 + self.action_scores.shape[0] * (self.action_scores.shape[1] - 1)
        if self.moves is not None:
            return 1 + int(np.count_nonzero(self.moves))
        return len(self.scores)

    def returns(self, env: PlacementEnv, discount: float = 1.0) -> np.ndarray:
        """[T] G_t = sum_k discount^k r_{t+k}, the (discounted) rewards from step t on."""
        rewards = env.rewards(self.scores, self.move_scores)
        out = np.empty_like(rewards)
        running = 0.0
        for t in range(len(rewards) - 1, -1, -1):
            running = rewards[t] + discount * running
            out[t] = running
        return out


def _policy_step(policy, env: PlacementEnv, placements: np.ndarray, step: int,
                 placed: np.ndarray) -> np.ndarray:
    """[B, D] logits for step ``step`` of B episodes in states ``placements`` [B, G] (one call:
    every episode of a batch places the same group at the same step). ConfigError if they are
    not all finite: the policy's weights overflow on this graph (a damaged policy; a loaded one
    is checked for sane weights, but no magnitude check can rule out overflow on every graph),
    and no device can be drawn from them."""
    feats = np.stack([env.features(p, step, placed) for p in placements])
    current = np.full(len(placements), env.order[step], dtype=np.int32)
    masks = np.repeat(pool_masks(env.view.ancestors, current[:1]), len(placements), axis=0)
    logits = policy.step_logits(feats, env.view.edge_src, env.view.edge_dst, masks, current)
    logits = logits.numpy().astype(np.float64)
    if not np.isfinite(logits).all():
        source = getattr(policy, "loaded_from", None)
        which = f"the policy loaded from {source!r}" if source else "the policy"
        raise ConfigError(f"{which} gives NaN or infinite outputs at step {step} of this graph "
                          "(its weights overflow: a damaged policy, or one far from any trained "
                          "one); it cannot place")
    return logits


def rollouts(policy, env: PlacementEnv, rngs: Sequence[np.random.Generator], *,
             greedy: bool = False, start: np.ndarray | None = None,
             all_actions: bool = False) -> list[Episode]:
    """Run ``len(rngs)`` episodes in lockstep, episode i drawing from ``rngs[i]``: sample (or,
    with ``greedy``, take the argmax of) each action. With ``all_actions`` every action device
    of every step is scored (``Episode.action_scores``), and the best placement tracked is the
    best of them all.
    A step that leaves its group where it is is not simulated again; with the environment's
    ``undo_worse`` a move that makes R worse is undone (``Episode.undone``).

    The episodes of one graph visit the same group at the same step, so step t of all of them
    is one batched policy call; per-call overhead, not arithmetic, is what a step costs at our
    sizes, so 16 episodes in one call cost little more than one."""
    num_steps = env.num_steps
    # Private copies: the episodes edit them in place, the start must stay as it was.
    placements = np.array([env.start(rng) if start is None else start for rng in rngs],
                          dtype=np.int32).reshape(len(rngs), env.view.num_groups)
    firsts = placements.copy()
    placed = np.zeros(env.view.num_groups, dtype=np.float32)  # the same in every episode
    scores = np.empty((len(rngs), num_steps + 1))
    scores[:, 0] = [env.score(p) for p in placements]
    best, best_scores = placements.copy(), scores[:, 0].copy()
    actions = np.empty((len(rngs), num_steps), dtype=np.int32)
    move_scores = np.empty((len(rngs), num_steps))
    undone = np.zeros((len(rngs), num_steps), dtype=bool)
    moves = np.zeros((len(rngs), num_steps), dtype=bool)
    num_devices = env.view.num_devices
    action_scores = np.empty((len(rngs), num_steps, num_devices)) if all_actions else None
    for t in range(num_steps):
        v = env.order[t]
        logits = _policy_step(policy, env, placements, t, placed)
        for i, rng in enumerate(rngs):
            here = int(placements[i, v])
            if greedy:
                a = int(np.argmax(logits[i]))
            else:
                p = np.exp(logits[i] - logits[i].max())
                a = int(rng.choice(len(p), p=p / p.sum()))
            actions[i, t] = a
            moves[i, t] = a != here
            if all_actions:
                for d in range(num_devices):
                    if d == here:
                        action_scores[i, t, d] = scores[i, t]
                        continue
                    placements[i, v] = d
                    action_scores[i, t, d] = env.score(placements[i])
                    if action_scores[i, t, d] < best_scores[i]:
                        best[i], best_scores[i] = placements[i], action_scores[i, t, d]
                placements[i, v] = here
                move_scores[i, t] = action_scores[i, t, a]
            elif a == here:
                move_scores[i, t] = scores[i, t]  # nothing changed: no simulation
            else:
                placements[i, v] = a
                move_scores[i, t] = env.score(placements[i])
                placements[i, v] = here
            if env.config.undo_worse and move_scores[i, t] > scores[i, t]:
                undone[i, t] = True
                scores[i, t + 1] = scores[i, t]
                continue
            placements[i, v] = a
            scores[i, t + 1] = move_scores[i, t]
            if scores[i, t + 1] < best_scores[i]:
                best[i], best_scores[i] = placements[i], scores[i, t + 1]
        placed[v] = 1.0
    return [Episode(actions=actions[i], start=firsts[i], scores=scores[i],
                    best_actions=best[i].copy(), best_score=float(best_scores[i]),
                    action_scores=None if action_scores is None else action_scores[i],
                    move_scores=move_scores[i], undone=undone[i], moves=moves[i])
            for i in range(len(rngs))]


def rollout(policy, env: PlacementEnv, rng: np.random.Generator, *, greedy: bool = False,
            start: np.ndarray | None = None, all_actions: bool = False) -> Episode:
    """One episode (see :func:`rollouts`)."""
    return rollouts(policy, env, [rng], greedy=greedy, start=start,
                    all_actions=all_actions)[0]


def episode_features(env: PlacementEnv, episode: Episode):
    """Batched inputs for re-evaluating a whole episode: features [T, G, F], masks, current."""
    placement = episode.start.copy()
    placed = np.zeros(env.view.num_groups, dtype=np.float32)
    feats = np.empty((env.num_steps, env.view.num_groups, env.num_features), np.float32)
    for t in range(env.num_steps):
        feats[t] = env.features(placement, t, placed)
        v = env.order[t]
        if episode.undone is None or not episode.undone[t]:
            placement[v] = episode.actions[t]
        placed[v] = 1.0
    return feats, pool_masks(env.view.ancestors, env.order), env.order


def log_prob(logits, actions):
    """[T] log-probabilities of ``actions`` [T] under the categorical distributions of
    ``logits`` [T, D].

    This and :func:`entropy` are the arithmetic of TensorFlow Probability's ``Categorical``
    (its ``log_prob`` and ``entropy``, op for op, so gradients and the shipped policy's
    training are bit for bit what they were with it), without importing that library: a
    second per process that every program importing the package paid."""
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=actions, logits=logits)


def entropy(logits):
    """[T] entropies of the categorical distributions of ``logits`` [T, D] (see
    :func:`log_prob`): ``-sum p log p``, a term whose p is 0 counted as 0 even where its log
    is not finite."""
    log_p = tf.math.log_softmax(logits)
    p = tf.math.exp(log_p)
    return -tf.reduce_sum(tf.where(tf.math.equal(p, 0), tf.zeros_like(log_p), log_p) * p,
                          axis=-1)


def episode_gradient(policy, env: PlacementEnv, episode: Episode, advantages: np.ndarray | None,
                     entropy_weight: float):
    """Gradients (list of numpy arrays) of the REINFORCE loss of one episode, and its loss.

    ``advantages`` [T] weigh the sampled actions' log-probabilities; None takes the exact
    expectation over every action instead, from ``episode.action_scores`` (the
    ``all_actions`` estimator, see the module doc)."""
    feats, masks, current = episode_features(env, episode)
    if advantages is None:
        rewards = tf.constant(env.action_rewards(episode.scores, episode.action_scores),
                              tf.float32)
    with tf.GradientTape() as tape:
        logits = policy.logits(feats, env.view.edge_src, env.view.edge_dst, masks, current)
        if advantages is None:
            loss = -tf.reduce_sum(tf.math.softmax(logits) * rewards)
        else:
            loss = -tf.reduce_sum(tf.constant(advantages, tf.float32) *
                                  log_prob(logits, episode.actions))
        loss -= entropy_weight * tf.reduce_sum(entropy(logits))
    grads = tape.gradient(loss, policy.trainable_variables)
    return [g.numpy() for g in grads], float(loss)


def advantages(returns: np.ndarray, history: np.ndarray | None, normalize: bool) -> np.ndarray:
    """[B, T] advantages of a batch of B episodes' returns (one graph).

    ``G_t - b_t`` with the per-step baseline ``b_t``: the mean of G_t over ``history`` [k, T],
    the graph's last k episodes (Placeto A.7), or over the batch itself when there is no
    history yet (a single first episode then only seeds the baseline). With ``normalize``,
    divided by the per-step spread ``max(std G_t, ADVANTAGE_FLOOR)`` over the history and the
    batch together: a step where the window's episodes all did the same has no spread of its
    own, and a floor alone would turn one exploratory move there into a huge update."""
    seen = returns if history is None else np.concatenate([history, returns])
    out = returns - (returns if history is None else history).mean(axis=0)
    if normalize:
        out = out / np.maximum(seen.std(axis=0), ADVANTAGE_FLOOR)
    return out


class StepBaselines:
    """Per graph: the returns of its last k episodes, for the per-step baselines (Placeto A.7).

    A graph's first update has no history (None): its worker then uses the episodes it just ran
    (one episode alone then only seeds the baseline). A baseline of 0 there would push every
    action of the first, random episodes down, and a policy can collapse on that one update."""

    def __init__(self, window: int):
        self._history: dict[int, collections.deque] = collections.defaultdict(
            lambda: collections.deque(maxlen=window))

    def __call__(self, graph_id: int) -> np.ndarray | None:
        """[k, T] the graph's last k returns, or None before its first episode."""
        history = self._history.get(graph_id)
        return np.stack(history) if history else None

    def record(self, graph_id: int, returns: np.ndarray) -> None:
        self._history[graph_id].append(np.asarray(returns, dtype=np.float64))


# --------------------------------------------------------------------------------- workers
@dataclasses.dataclass(frozen=True)
class _Task:
    weights: list
    graph_id: int
    seeds: tuple  # one seed tuple per episode
    history: np.ndarray | None  # [k, T] the graph's last returns (StepBaselines)
    entropy_weight: float
    discount: float
    normalize: bool
    all_actions: bool
    start: np.ndarray | None  # [G] the episodes' start placement; None: the env's


@dataclasses.dataclass(frozen=True)
class _Result:
    graph_id: int
    gradient: list  # summed over the task's episodes
    loss: float
    returns: np.ndarray  # [B, T]
    episodes: list


class _Worker:
    """Holds a policy and the environments; turns a task into a gradient."""

    def __init__(self, policy, envs: Sequence[PlacementEnv]):
        self.policy, self.envs = policy, envs

    @classmethod
    def build(cls, policy_config: dict, problems, env_config) -> "_Worker":
        return cls(PlacetoPolicy(**policy_config), [PlacementEnv(p, env_config) for p in problems])

    def __call__(self, task: _Task) -> _Result:
        env = self.envs[task.graph_id]
        self.policy.set_weights(task.weights)
        episodes = rollouts(self.policy, env,
                            [np.random.default_rng(list(seed)) for seed in task.seeds],
                            all_actions=task.all_actions, start=task.start)
        returns = np.stack([e.returns(env, task.discount) for e in episodes])
        if task.all_actions:
            advs = [None] * len(episodes)
        else:
            advs = advantages(returns, task.history, task.normalize)
        gradient, loss = None, 0.0
        for episode, adv in zip(episodes, advs):
            grad, episode_loss = episode_gradient(self.policy, env, episode, adv,
                                                  task.entropy_weight)
            gradient = grad if gradient is None else [a + g for a, g in zip(gradient, grad)]
            loss += episode_loss
        return _Result(task.graph_id, gradient, loss, returns, episodes)


def _run_worker(worker: _Worker, task: _Task) -> _Result:
    return worker(task)


def training_pool(policy, problems, env_config, *, workers: int,
                  ray_address: str | None = None) -> WorkerPool:
    """Workers for :func:`train` (``pool=``) that outlive one call: each builds a policy of
    ``policy``'s architecture and the problems' environments once. A search that calls
    ``train`` again after every restart builds them once instead of at every call."""
    return worker_pool(_Worker.build, (dict(policy.config), problems, env_config),
                       workers=workers, ray_address=ray_address)


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
          logdir: str | None = None, progress: bool = False,
          envs: Sequence[PlacementEnv] | None = None,
          ray_address: str | None = None, pool: WorkerPool | None = None) -> TrainState:
    """Train ``policy`` in place on ``problems`` (PlacementProblems) with REINFORCE.

    With one worker, the rollouts and gradients run in this process on ``policy`` itself, so
    calling ``train`` again (the placer's restarts do) compiles nothing new.

    Args:
      graph_ids: which problems to train on (default all); worker w of iteration i takes
        ``graph_ids[(i * workers + w) % len(graph_ids)]``.
      should_stop: checked after every iteration (a time or sample budget).
      logdir: write TensorBoard summaries (best and final runtime per graph, loss) here.
      progress: print a progress line to stderr.
      envs: the problems' environments, if the caller has built them (with ``env_config``;
        one worker in this process only), so they are not built again.
      ray_address: run the ``config.workers`` workers as Ray actors on this cluster
        (``"auto"``, ``"HOST:PORT"``, ``"local"``; :mod:`tf_autoplace.learning.workers`); None:
        local processes (or this process for one worker).
      pool: run the workers' tasks on this pool (:func:`training_pool` of ``problems``; kept
        open), instead of workers built for this call.
    Returns the final TrainState (best placement per graph included).
    """
    if config.estimator == "all_actions" and env_config.reward != "intermediate":
        raise ConfigError("estimator='all_actions' needs the environment's intermediate rewards")
    in_process = pool is None and config.workers == 1 and ray_address is None
    if envs is not None and (not in_process or len(envs) != len(problems) or
                             any(e.problem is not p or e.config != env_config
                                 for e, p in zip(envs, problems))):
        raise ConfigError("envs must be the environments of problems under env_config, "
                          "with one worker in this process")
    state = state or TrainState()
    graph_ids = list(range(len(problems))) if graph_ids is None else list(graph_ids)
    baselines = StepBaselines(config.baseline_window)
    optimizer = KerasAdam(learning_rate=config.learning_rate)
    writer = None
    if logdir:
        try:
            import tensorboard  # noqa: F401  (tf.summary needs it; TF no longer installs it)
        except ImportError:
            raise ConfigError("TensorBoard summaries need the tensorboard package: "
                              "pip install 'tf_autoplace[train]'") from None
        writer = tf.summary.create_file_writer(logdir)
    own_pool = None
    if in_process:
        worker = _Worker(policy, envs or [PlacementEnv(p, env_config) for p in problems])
        run_all = lambda tasks: [worker(t) for t in tasks]  # noqa: E731
    else:
        if pool is None:
            pool = own_pool = training_pool(policy, problems, env_config,
                                            workers=config.workers, ray_address=ray_address)
        run_all = lambda tasks: pool.map(_run_worker, tasks)  # noqa: E731
    t0 = time.perf_counter()
    status = StatusLine("placeto") if progress else None
    try:
        while state.iteration < config.iterations:
            i = state.iteration
            lr, beta = config.schedule(i)
            weights = policy.get_weights()
            tasks = []
            for w in range(config.workers):
                g = graph_ids[(i * config.workers + w) % len(graph_ids)]
                seeds = tuple((config.seed, i, w, j) for j in range(config.episodes))
                start = (state.best_placements.get(g) if config.episode_start == "best"
                         else None)
                tasks.append(_Task(weights, g, seeds, baselines(g), beta, config.discount,
                                   config.normalize_advantages,
                                   config.estimator == "all_actions", start))
            results = run_all(tasks)
            total = [np.zeros_like(w) for w in weights]
            for r in results:
                for acc, grad in zip(total, r.gradient):
                    acc += grad
            optimizer.learning_rate = lr
            optimizer.apply_gradients(zip([tf.constant(g) for g in total],
                                          policy.trainable_variables))
            for r in results:
                for episode, returns in zip(r.episodes, r.returns):
                    baselines.record(r.graph_id, returns)
                    state.samples += episode.samples
                    if episode.best_score < state.best_scores.get(r.graph_id, np.inf):
                        state.best_scores[r.graph_id] = episode.best_score
                        state.best_placements[r.graph_id] = episode.best_actions
                    state.curve.append((state.samples, r.graph_id,
                                        state.best_scores[r.graph_id]))
            state.iteration += 1
            if writer:
                with writer.as_default(step=i):
                    for r in results:
                        tf.summary.scalar(f"graph_{r.graph_id}/final_runtime",
                                          np.mean([e.scores[-1] for e in r.episodes]))
                        tf.summary.scalar(f"graph_{r.graph_id}/best_runtime",
                                          state.best_scores[r.graph_id])
                    tf.summary.scalar("loss", float(np.mean([r.loss for r in results])))
                    tf.summary.scalar("learning_rate", lr)
                    tf.summary.scalar("entropy_weight", beta)
            if status:
                elapsed = time.perf_counter() - t0
                best = np.mean([state.best_scores[g] for g in state.best_scores])
                status.update(f"iteration {state.iteration}/{config.iterations} "
                              f"samples {state.samples} mean best R {best * 1e3:.2f} ms "
                              f"({elapsed:.0f} s)")
            if should_stop and should_stop(state):
                break
    finally:
        if own_pool is not None:
            own_pool.close()
        if writer:
            writer.flush()
        if status:
            status.close()
    return state
