"""The Hierarchical Planner's search on one graph: REINFORCE on the grouper and the placer
together (Mirhoseini et al., "A Hierarchical Model for Device Placement", ICLR 2018, section
2; the placer is :class:`tf_autoplace.placers.HDPPlacer`).

Each policy update:

1. the grouper's distribution is computed once and K groupings are sampled from it (one
   independent draw per unit, by inverse CDF from the search's seeded generator);
2. for each grouping the group features are built (:meth:`HDPView.group_features`) and the
   seq2seq placer samples a device per group (Gumbel noise from the same generator), all K in
   one batched decoder pass;
3. the K op placements are scored by :class:`tf_autoplace.learning.rollouts.Evaluator`, the worker
   pool every learned placer uses: the memory-penalised simulated runtime ``R = r + c *
   ReLU(m - M)`` (the simulator stands in for the paper's measurements on real GPUs);
4. the reward of sample k is the paper's ``-sqrt(R_k)``; its advantage is the reward minus an
   exponential moving average of past rewards (the baseline; decay 0.9 by default), and one
   Adam step follows the gradient of ``mean_k A_k (log p(g_k) + log p(d_k | g_k))``: the
   paper's ``J = sum_g sum_d p(g) p(d | g) R_d`` differentiated with REINFORCE, through both
   networks at once. The baseline then absorbs the batch's mean reward.

Where the paper is silent or its setting does not carry over, we chose:

- **Samples per update** (K = 16): the paper's controllers each update from the runtimes of 4
  workers, asynchronously, 4 controllers against one parameter server. Our updates are
  synchronous and on 2 CPU cores the decoder's 256 sequential steps cost per step, not per
  sample, so a larger batch buys a less noisy gradient for little more time.
- **The baseline's first value** is the first batch's mean reward (not 0, which would push
  every first sample's probability down together).
- **Gradient clipping** to a global norm of 1, as TF's hierarchical controller did
  (``grad_bound``), and an optional entropy bonus (0 by default: the paper has none).
- **Adam** at a constant rate, 1e-3 from the heuristic start and 3e-3 from the paper's (the
  paper names no optimiser settings in this text).
- **Failures**: an out-of-memory placement is scored by the memory penalty, as in every
  learned placer here, rather than by a fixed failing runtime.

**Start.** ``start="heuristic"`` (the default; ours) starts from a hint placement, the best
heuristic's when :class:`~tf_autoplace.placers.HDPPlacer` runs it, as the other learned placers
here do: the view and both networks read the hint order (:mod:`tf_autoplace.placers.hdp.view`), the
grouper is set to group units in runs of that order (:meth:`HDPPolicy.start_grouper_from_hint`),
and the placer is fitted to put each group on its run's device (``start_steps`` Adam steps of
cross-entropy on groupings sampled from that grouper) before REINFORCE begins. Samples then
differ from the hint where the placer or the grouper strays, so the search explores around the
heuristic, and its best sample is one or a few moves better. ``start="uniform"`` is the
paper's: fresh networks whose heads start uniform. It is not the default because within this
search's budget it does not recover from its first placements: on NMT the placer settles on one
GPU before the grouper forms groups, and its best placement ends far above the expert's step
time, where the paper's NMT-2 and NMT-4 end below the expert after 1,000 updates on real
hardware (docs/experiments.md).

Three settings keep the samples near the hint, so that a move that helps is not drowned by
others that hurt (the measurements behind each: docs/experiments.md):

- ``start_sharpness`` (10): a unit whose hint order lies near the end of its device's run may
  be drawn into the next group, which the placer puts on the next device; a sharper start
  keeps such units in their run's group, so samples that keep every group on its run's device
  also keep its ops there.
- ``start_noise`` (0.05): during the fit the decoder reads the devices chosen before each step
  with this fraction of them redrawn at random. Fitted on the runs alone, a decoder that
  sampled one unexpected device sometimes followed it with dozens more, and those samples then
  dominate REINFORCE's gradient; fitted on redrawn inputs, it returns to the runs.
- the fit's rate, ``FIT_RATE``, and REINFORCE's rate of 1e-3 (``learning_rate=None``).

The search stops after ``max_samples`` placements (the default; reproducible) or at the
deadline, whichever comes first, and returns the best placement sampled.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable

import numpy as np
import tensorflow as tf

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.core.registry import HEURISTICS
from tf_autoplace.core.settings import (check_directory, check_int, check_names, check_number,
                                        check_seconds, plain_numbers)
from tf_autoplace.errors import ConfigError
from tf_autoplace.learning.adam import KerasAdam
from tf_autoplace.learning.rollouts import Evaluator
from tf_autoplace.learning.workers import check_ray_address
from tf_autoplace.outputs.progress import QUIET, Progress
from tf_autoplace.placers.hdp.policy import HDPPolicy
from tf_autoplace.placers.hdp.view import HDPView, build_view


@dataclasses.dataclass(frozen=True)
class HDPConfig:
    """Attributes:
      budget_s: wall-time cap of the search (> 0). The default is well above the time the
        default sample count takes on the zoo's graphs, so the count, not the clock, ends the
        search (docs/experiments.md, "HDP", and BENCHMARKS.md have the times).
      max_samples: placements simulated (None: until ``budget_s``), in whole updates (the
        search stops after the update that reaches it). The default stops on this count, so
        the same seed gives the same placement; if the time cap stops the search first, the
        result depends on the machine's speed. At least one update always runs. 1,024 is 64
        updates of 16, where the paper ran 1,000 updates on 4 GPUs with real measurements; on
        NMT-2 the best placement stopped improving before the count ran out
        (docs/experiments.md, "HDP").
      num_groups: N, groups the grouper assigns colocation groups to (the paper's M; 256).
      samples_per_update: K, placements sampled and simulated per policy update (module doc).
      learning_rate: Adam's rate (constant; the budget decides the length); None: 3e-3 from
        the uniform start (on NMT-2 the rates tried ended close together; docs/experiments.md,
        "HDP"), 1e-3 from the heuristic start (module doc).
      start: ``"heuristic"`` (from the best heuristic's placement) or ``"uniform"`` (the
        paper's fresh networks; module doc).
      start_sharpness: with the heuristic start, how much a unit prefers the group of its
        place in the hint order over the neighbouring ones (a logit difference at the group's
        centre; module doc).
      start_steps: with the heuristic start, the Adam steps that fit the placer to the hint.
      start_noise: with the heuristic start, the fraction of the decoder's previous devices
        redrawn at random while it is fitted (module doc), in [0, 1).
      baseline_decay: the moving-average baseline's decay per update (TF's ``bl_dec``: 0.9).
      entropy: weight beta of an entropy bonus, beta times the entropy of the grouping plus
        the placer's summed per-step entropy (0: the paper's plain REINFORCE).
      grad_clip: global-norm bound of each update's gradient (None: unclipped).
      memory_penalty: c in R = r + c * ReLU(m - M), seconds per GB over capacity.
      workers: workers that simulate: local processes (1: the calling process), or Ray actors
        when ``ray_address`` is set (``rollouts.Evaluator``). The placement does not depend on
        it.
      ray_address: simulate on a Ray cluster (``"auto"``, ``"HOST:PORT"``, ``"local"``;
        :mod:`tf_autoplace.learning.workers`); None: local processes.
      type_embed, grouper_hidden, hidden, device_embed, attention: the networks' widths
        (:class:`HDPPolicy`; why these sizes: its module doc).
      heuristics: placers the result must not be worse than (``best_heuristic`` runs all the
        fast ones).
      policy_dir: a saved HDP policy to start from instead of a fresh one (one a placement
        trained and saved: ``HDPPlacer.save_policy``); None: a fresh policy, as the paper
        does. Its ``num_groups`` and widths must be this config's (:func:`load_policy`), its
        device count the cluster's; op types it never saw share its "other" column.
    """

    budget_s: float = 600.0
    max_samples: int | None = 1024
    num_groups: int = 256
    samples_per_update: int = 16
    learning_rate: float | None = None
    baseline_decay: float = 0.9
    entropy: float = 0.0
    grad_clip: float | None = 1.0
    memory_penalty: float = 2.0
    workers: int = 1
    ray_address: str | None = None
    type_embed: int = 16
    grouper_hidden: int = 64
    hidden: int = 32
    device_embed: int = 16
    attention: int = 32
    heuristics: tuple[str, ...] = ("best_heuristic",)
    policy_dir: str | None = None
    start: str = "heuristic"
    start_sharpness: float = 10.0
    start_steps: int = 300
    start_noise: float = 0.05

    def __post_init__(self):
        plain_numbers(self)
        check_seconds("budget_s", self.budget_s)
        check_names("heuristics", self.heuristics, sorted(HEURISTICS), "heuristics")
        check_int("max_samples", self.max_samples, low=1, none_ok=True)
        check_int("num_groups", self.num_groups, low=1)
        check_int("samples_per_update", self.samples_per_update, low=1)
        check_int("workers", self.workers, low=1)
        check_ray_address(self.ray_address)
        check_number("learning_rate", self.learning_rate, low=0, low_ok=False, none_ok=True)
        if self.start not in STARTS:
            raise ConfigError(f"start must be one of {STARTS}, got {self.start!r}")
        check_number("start_sharpness", self.start_sharpness, low=0, low_ok=False)
        check_int("start_steps", self.start_steps, low=1)
        check_number("start_noise", self.start_noise, low=0, high=1, high_ok=False)
        check_number("baseline_decay", self.baseline_decay, low=0, high=1, high_ok=False)
        check_number("entropy", self.entropy, low=0)
        check_number("grad_clip", self.grad_clip, low=0, low_ok=False, none_ok=True)
        check_number("memory_penalty", self.memory_penalty, low=0)
        for name in POLICY_WIDTHS:
            check_int(name, getattr(self, name), low=1)
        check_directory("policy_dir", self.policy_dir)

    @property
    def rate(self) -> float:
        """Adam's rate: ``learning_rate``, or the start's default when it is None."""
        if self.learning_rate is not None:
            return float(self.learning_rate)
        return 1e-3 if self.start == "heuristic" else 3e-3

    def make_policy(self, view: HDPView, seed: int) -> HDPPolicy:
        """A fresh policy for ``view`` with this config's widths."""
        return HDPPolicy(self.num_groups, view.num_devices, view.type_vocab, seed=seed,
                         hinted=view.hinted,
                         **{name: getattr(self, name) for name in POLICY_WIDTHS})


STARTS = ("uniform", "heuristic")
POLICY_WIDTHS = ("type_embed", "grouper_hidden", "hidden", "device_embed", "attention")


def load_policy(config: HDPConfig) -> HDPPolicy:
    """The policy saved in ``config.policy_dir``; ConfigError naming each of its architecture's
    settings (``num_groups`` and the widths) that differs from the config's."""
    policy = HDPPolicy.load(config.policy_dir)
    wrong = [f"{name}={policy.config[name]!r} (the placer's {name}={getattr(config, name)!r})"
             for name in ("num_groups",) + POLICY_WIDTHS
             if policy.config[name] != getattr(config, name)]
    if wrong:
        raise ConfigError(f"the HDP policy in {config.policy_dir!r} does not fit the placer's "
                          f"settings: it was made with {', '.join(wrong)}; give the placer the "
                          "policy's settings")
    return policy


@dataclasses.dataclass(frozen=True)
class HDPSearchResult:
    """What :func:`search` found. ``curve`` holds ``(placements simulated, best R so far,
    seconds since the search started)`` after every update."""

    best_devices: np.ndarray  # [n] cluster device per op
    best_score: float  # its memory-penalised simulated runtime R
    updates: int
    curve: list
    units: int = 0  # the learned units (colocation groups) the grouper assigned
    # The trained policy: its ``config`` (what rebuilds it) and its weights as the search ended
    # (``HDPPolicy.get_weights()`` order).
    policy_config: dict = dataclasses.field(default_factory=dict, repr=False)
    weights: list = dataclasses.field(default_factory=list, repr=False)

    @property
    def samples(self) -> int:
        return self.curve[-1][0] if self.curve else 0


def sample_groupings(probabilities: np.ndarray, count: int,
                     rng: np.random.Generator) -> np.ndarray:
    """[count, M] int32 groupings: for each unit an independent draw from its row of
    ``probabilities`` [M, N] (inverse CDF on the generator's uniforms)."""
    cdf = np.cumsum(probabilities.astype(np.float64), axis=1)
    cdf /= cdf[:, -1:]
    uniforms = rng.random((count, len(cdf)))
    last = cdf.shape[1] - 1
    return np.stack([np.minimum((cdf < u[:, None]).sum(axis=1), last) for u in uniforms]
                    ).astype(np.int32)


def gumbel(rng: np.random.Generator, shape) -> np.ndarray:
    """Gumbel(0, 1) noise as float32 (argmax of logits + noise samples the softmax)."""
    return (-np.log(-np.log(rng.random(shape)))).astype(np.float32)


@dataclasses.dataclass
class Samples:
    """K sampled placements and what the policy needs to score them again."""

    labels: np.ndarray  # [K, M] group of each learned unit
    group_features: np.ndarray  # [K, N, F]
    devices: np.ndarray  # [K, N] action device of each group
    placements: np.ndarray  # [K, n] cluster device of each op


def sample(policy: HDPPolicy, view: HDPView, count: int, rng: np.random.Generator) -> Samples:
    """``count`` placements from the policy (grouper, then placer), drawn with ``rng``."""
    probabilities = policy.group_probabilities(view.unit_features).numpy()
    labels = sample_groupings(probabilities, count, rng)
    features = view.group_features(labels)
    noise = gumbel(rng, (count, view.num_groups, view.num_devices))
    devices = policy.sample_devices(features, noise).numpy()
    return Samples(labels, features, devices, view.op_placement(labels, devices))


def update(policy: HDPPolicy, optimizer, view: HDPView, batch: Samples,
           advantages: np.ndarray, config: HDPConfig) -> float:
    """One Adam step on the REINFORCE loss of ``batch`` (clipped as configured); the loss."""
    loss, grads = policy.reinforce_gradients(
        view.unit_features, batch.labels, batch.group_features, batch.devices,
        advantages.astype(np.float32), np.float32(config.entropy))
    if config.grad_clip is not None:
        grads, _ = tf.clip_by_global_norm(grads, config.grad_clip)
    optimizer.apply_gradients(zip(grads, policy.trainable_variables))
    return float(loss)


# Adam's rate while the placer is fitted to the hint. At 3e-3 the fit's steps leave the placer
# far from the hint on NMT-8 (every sample puts some groups off their run's device and runs
# slower than the hint); at 1e-2 it fits the hint closely (docs/experiments.md, "HDP" has the
# measurements).
FIT_RATE = 1e-2
FIT_PHASE = "hdp: fitting the placer to the heuristic"  # the fit's progress label


def fit_placer_to_hint(policy: HDPPolicy, view: HDPView, config: HDPConfig,
                      rng: np.random.Generator, deadline: float | None = None,
                      on_step: Callable[[], None] | None = None) -> float:
    """The heuristic start's placer fit (module doc): ``config.start_steps`` Adam steps
    (rate ``FIT_RATE``) of the placer's cross-entropy towards putting group g on the action
    device whose runs of the hint order hold g's centre, on 8 groupings per step sampled from
    the policy's grouper, the decoder reading those devices with ``config.start_noise`` of
    them redrawn; fewer steps if ``deadline`` (a ``time.perf_counter()`` value) passes first
    (it counts against the search's ``budget_s``); ``on_step()`` after each step (the caller's
    progress: the fit takes a minute or more on a large graph). Returns the last step's
    loss."""
    n, d = view.num_groups, view.num_devices
    targets = np.tile(np.minimum(np.arange(n) * d // n, d - 1).astype(np.int32), (8, 1))
    probabilities = policy.group_probabilities(view.unit_features).numpy()
    optimizer = KerasAdam(learning_rate=FIT_RATE)
    variables = policy.placer_variables()
    loss = np.nan
    for _ in range(config.start_steps):
        if deadline is not None and time.perf_counter() >= deadline:
            break
        features = view.group_features(sample_groupings(probabilities, 8, rng))
        redraw = rng.random(targets.shape) < config.start_noise
        fed = np.where(redraw, rng.integers(0, d, targets.shape), targets).astype(np.int32)
        loss, grads = policy.placer_imitation_gradients(features, targets, fed)
        optimizer.apply_gradients(zip(grads, variables))
        if on_step is not None:
            on_step()
    return float(loss)


def search(problem: PlacementProblem, config: HDPConfig, seed: int, *,
           deadline: float | None = None, policy: HDPPolicy | None = None,
           view: HDPView | None = None, hint: np.ndarray | None = None,
           progress: Progress = QUIET) -> HDPSearchResult:
    """Train a policy on ``problem`` (``policy`` in place; else the one saved in
    ``config.policy_dir``; else a fresh one seeded from ``seed``, started as ``config.start``
    says from ``hint``, [n] cluster device per op, which the heuristic start needs) until
    ``config.max_samples`` placements or ``deadline`` (a ``time.perf_counter()`` value);
    returns the best placement sampled and the policy's weights as the search ended. Run
    inside ``learning.eager.policy_context()``. After every policy update, ``progress`` is told the
    placements simulated and the best R so far."""
    start = time.perf_counter()
    where = "the policy"
    hinted = config.start == "heuristic"
    if hinted and hint is None and (view is None or not view.hinted):
        raise ConfigError("HDP's heuristic start needs a hint placement (the HDP placer gives "
                          "it the best heuristic's)")
    if policy is None and config.policy_dir:
        policy, where = load_policy(config), f"the HDP policy in {config.policy_dir!r}"
    if policy is not None and policy.hinted != hinted:
        raise ConfigError(f"{where} was trained with start="
                          f"{'heuristic' if policy.hinted else 'uniform'!r}; the search has "
                          f"start={config.start!r}")
    # A policy reads the op types it was made with; the graph's others go to "other".
    view = view or build_view(problem, config.num_groups,
                              None if policy is None else policy.type_vocab,
                              hint if hinted else None)
    if view.hinted != hinted:
        raise ConfigError(f"the view given was built {'with' if view.hinted else 'without'} a "
                          f"hint; the search has start={config.start!r}")
    if policy is None:
        policy = config.make_policy(view, int(np.random.SeedSequence([seed, 0])
                                               .generate_state(1)[0] >> 1))
        if hinted:
            policy.start_grouper_from_hint(config.start_sharpness)
            # A minute or more on a large graph: say what the wait is for.
            with progress.phase(FIT_PHASE, None, deadline=deadline):
                fit_placer_to_hint(policy, view, config, np.random.default_rng([seed, 1]),
                                   deadline, on_step=lambda: progress.update(0, math.inf))
    elif policy.num_devices != view.num_devices:
        raise ConfigError(f"{where} places on {policy.num_devices} devices; this cluster has "
                          f"{view.num_devices} action devices")
    elif policy.num_groups != view.num_groups:
        raise ConfigError(f"{where} places {policy.num_groups} groups; this search has "
                          f"{view.num_groups}")
    elif policy.type_vocab != view.type_vocab:
        raise ConfigError(f"{where} reads the {len(policy.type_vocab)} op types it was made "
                          f"with; the view given has {len(view.type_vocab)} other ones (build "
                          "it with the policy's type_vocab)")
    optimizer = KerasAdam(learning_rate=config.rate)
    baseline = None
    best_score, best_devices, curve, updates = np.inf, None, [], 0
    with Evaluator(problem, workers=config.workers, memory_penalty=config.memory_penalty,
                   ray_address=config.ray_address) as evaluator, \
            progress.phase("hdp: search", config.max_samples, deadline=deadline):
        while best_devices is None or not (
                (config.max_samples is not None and evaluator.samples >= config.max_samples)
                or (deadline is not None and time.perf_counter() >= deadline)):
            batch = sample(policy, view, config.samples_per_update,
                           np.random.default_rng([seed, updates]))
            scores = evaluator.evaluate(batch.placements).scores
            k = int(np.argmin(scores))
            if scores[k] < best_score:
                best_score, best_devices = float(scores[k]), batch.placements[k].copy()
            rewards = -np.sqrt(scores)
            baseline = rewards.mean() if baseline is None else baseline
            update(policy, optimizer, view, batch, rewards - baseline, config)
            baseline = (config.baseline_decay * baseline +
                        (1 - config.baseline_decay) * rewards.mean())
            updates += 1
            curve.append((evaluator.samples, best_score, time.perf_counter() - start))
            progress.update(evaluator.samples, best_score)
    return HDPSearchResult(best_devices=best_devices, best_score=best_score, updates=updates,
                           curve=curve, units=view.num_learned,
                           policy_config=dict(policy.config), weights=policy.get_weights())
