"""Placeto's search on one graph: a greedy zero-shot episode of a policy, then REINFORCE
fine-tuning with restarts (Addanki et al., "Placeto: Learning Generalizable Device Placement
Algorithms", NeurIPS 2019; the placer is :class:`tf_autoplace.placers.PlacetoPlacer`).

:func:`search` is the learned part of the placer, shared by the placer, the imitation
pretraining (:mod:`tf_autoplace.placers.placeto.imitation`, which clones what it finds) and
``python experiments/eval_placeto.py``. :class:`PlacetoConfig` holds every setting of the placer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.resources
import os
import time

import numpy as np

from tf_autoplace.core.registry import HEURISTICS
from tf_autoplace.core.settings import (check_directory, check_int, check_names, check_number,
                                        check_seconds, plain_numbers)
from tf_autoplace.errors import ConfigError
from tf_autoplace.learning.measured import check_reward
from tf_autoplace.learning.workers import check_ray_address
from tf_autoplace.outputs.progress import QUIET, Progress
from tf_autoplace.placers.placeto import reinforce
from tf_autoplace.placers.placeto.env import EnvConfig, PlacementEnv

PRETRAINED_DIR = str(importlib.resources.files("tf_autoplace").joinpath("pretrained"))


def pretrained_policy_dir(num_devices: int) -> str | None:
    """Directory of the shipped policy for ``num_devices`` action devices, if there is one."""
    path = os.path.join(PRETRAINED_DIR, f"placeto_d{num_devices}")
    return path if os.path.exists(os.path.join(path, "weights.npz")) else None


@dataclasses.dataclass(frozen=True)
class PlacetoConfig:
    """Attributes:
      budget_s: wall-time cap for zero-shot plus fine-tuning (> 0).
      max_samples: placements simulated while fine-tuning (None: until ``budget_s``). The
        default stops on this count, so the same seed gives the same placement; if the time cap
        stops the search first, the result depends on the machine's speed.
      fine_tune: False runs the zero-shot episode only.
      policy_dir: a saved policy to start from; None = the shipped one for the device count.
      env: the MDP settings. Moves that make R worse are undone (``EnvConfig.undo_worse``):
        from a good placement most single moves are harmful, and in the paper's MDP every
        later move of an episode is judged on the worse placement (docs/experiments.md).
      learning_rate: Adam's rate while fine-tuning (constant; the budget decides the length).
      entropy: entropy bonus while fine-tuning, against per-step normalised advantages (each
        of order 1). The policy's moves are mostly harmful and the head's ReLU features are
        shared by all groups, so without a strong bonus every group's move probability falls
        together to about 0, the good ones' included, before the network learns to tell them
        apart (docs/experiments.md).
      discount: gamma of the returns (see ``reinforce.TrainConfig``). 0 credits each action
        with the improvement it made itself, the lowest-variance choice with intermediate
        rewards.
      normalize_advantages: per-step advantage normalisation (``reinforce.TrainConfig``).
      episodes: episodes per update, rolled out in lockstep (``reinforce.TrainConfig``).
      estimator: "reinforce" (sampled actions) or "all_actions" (every action of each step
        scored and followed in expectation; ``reinforce.TrainConfig``).
      episode_start: "best" starts every fine-tuning episode from the best placement found so
        far (the zero-shot episode's, to begin with), "env" from ``env.start``
        (``reinforce.TrainConfig``).
      temperature: a pretrained policy's logits are divided by it before fine-tuning (after the
        zero-shot episode, whose argmax it would not change; a fresh policy is left alone): a
        nearly deterministic policy's sampled episodes repeat its greedy one, and tempering
        spreads them. With harmful moves undone, 1 (no tempering) is the default.
      restart_after: fine-tuning placements without improvement after which the search gives
        the rest of the budget to a fresh policy searching from the environment's start
        placement, seeded differently (None: never). A search that improves by single-group
        moves ends in a local optimum of them, and which one depends on its first episodes
        (fresh searches with different seeds end in different optima; docs/experiments.md).
        Each restart is another draw.
      heuristics: placers the result must not be worse than (``best_heuristic`` runs all the
        fast ones).
      workers: fine-tuning workers, each rolling out ``episodes`` episodes per update (so an
        update sees ``workers * episodes`` episodes, as with the paper's 8 workers): local
        processes, or Ray actors when ``ray_address`` is set; 1 without an address runs in
        this process. The placement depends on ``workers``, not on where they run.
      ray_address: roll out on a Ray cluster (``"auto"``, ``"HOST:PORT"``, ``"local"``;
        :mod:`tf_autoplace.learning.workers`); None: local processes.
      reward: "simulated" (default) or "measured": every placement an episode scores is run on
        this machine (:class:`~tf_autoplace.learning.measured.MeasuredEvaluator`, about a second
        each on a small graph: keep ``max_samples`` to tens or hundreds), and the heuristics'
        placements are compared by measured step time too.
      measure_steps: timed steps per measured placement (>= 1; with ``reward="measured"``).
    """

    budget_s: float = 120.0
    max_samples: int | None = 512
    fine_tune: bool = True
    policy_dir: str | None = None
    env: EnvConfig = EnvConfig(undo_worse=True)
    learning_rate: float = 3e-3
    entropy: float = 0.5
    discount: float = 0.0
    normalize_advantages: bool = True
    episodes: int = 1
    estimator: str = "reinforce"
    episode_start: str = "best"
    temperature: float = 1.0
    restart_after: int | None = 128
    heuristics: tuple[str, ...] = ("best_heuristic",)
    workers: int = 1
    ray_address: str | None = None
    reward: str = "simulated"
    measure_steps: int = 5

    def __post_init__(self):
        plain_numbers(self)
        check_seconds("budget_s", self.budget_s)
        check_int("max_samples", self.max_samples, low=1, none_ok=True)
        check_number("temperature", self.temperature, low=0, low_ok=False)
        check_int("restart_after", self.restart_after, low=1, none_ok=True)
        check_int("workers", self.workers, low=1)
        check_names("heuristics", self.heuristics, sorted(HEURISTICS), "heuristics")
        check_directory("policy_dir", self.policy_dir)
        check_ray_address(self.ray_address)
        self.train_config(0)  # the fine-tuning settings, checked by reinforce.TrainConfig
        check_reward(self.reward, self.measure_steps, self.workers, self.ray_address)

    def train_config(self, seed: int):
        """REINFORCE settings for fine-tuning on one graph (constant rate and bonus; the
        sample or time budget decides how long)."""
        return reinforce.TrainConfig(
            iterations=10**9, workers=self.workers, episodes=self.episodes, seed=seed,
            learning_rate=self.learning_rate, final_learning_rate=self.learning_rate,
            entropy=self.entropy, final_entropy=self.entropy, discount=self.discount,
            normalize_advantages=self.normalize_advantages, estimator=self.estimator,
            episode_start=self.episode_start)


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """What :func:`search` found on one graph."""

    zero_shot: "reinforce.Episode | None"  # the greedy episode (None if not run)
    zero_shot_s: float
    iterations: int  # fine-tuning's policy updates, over all its searches (0: did not run)
    best_actions: np.ndarray  # [G] the best placement met, as actions
    best_score: float  # its memory-penalised simulated runtime R
    curve: list  # [(placements simulated so far, best R so far)], zero-shot included
    restarts: list = dataclasses.field(default_factory=list)  # placements simulated when
    # each fresh search took over from a stalled one
    # The policy's weights to keep (``PlacetoPolicy.get_weights()`` order): as the search that
    # found the best placement ended (the first one, which starts from the given policy, unless
    # a restart found a better placement); the given policy's if nothing was fine-tuned.
    weights: list = dataclasses.field(default_factory=list, repr=False)

    @property
    def samples(self) -> int:
        return self.curve[-1][0]


def restart_seed(seed: int, k: int) -> int:
    """The seed of the k-th restart of a search seeded ``seed`` (k >= 1), drawn apart from
    every other search's own seed and restarts."""
    return int(np.random.SeedSequence([seed, k]).generate_state(1)[0] >> 1)


def search(policy, env: PlacementEnv, config: PlacetoConfig, seed: int, *,
           pretrained: bool, zero_shot: bool = True, deadline: float | None = None,
           progress: Progress = QUIET) -> SearchResult:
    """The learned part of the placer on ``env``'s graph (the MDP of ``env.config``; the rest
    of ``config`` sets fine-tuning), ``policy`` trained in place: a greedy
    zero-shot episode (unless ``zero_shot`` is False), then, for a ``pretrained`` policy,
    tempering (``config.temperature``), then REINFORCE on this graph seeded with the zero-shot
    placement, until ``config.max_samples`` fine-tuning placements or ``deadline`` (a
    ``time.perf_counter()`` value; None: no time limit). A search that goes
    ``config.restart_after`` placements without improving hands the rest of the budget to a
    fresh policy searching from the environment's start placement (``policy`` itself, its
    weights drawn afresh, so nothing is compiled again; policy and search seeded
    :func:`restart_seed`), which may stall and restart in turn. Fine-tuning reports the
    placements simulated and the best R so far to ``progress`` after every update. The placer
    and the experiments (``python experiments/eval_placeto.py``) all run this."""
    start = time.perf_counter()
    state = reinforce.TrainState()
    zero, curve, restarts = None, [], []
    if zero_shot:
        zero = reinforce.rollout(policy, env, np.random.default_rng(seed), greedy=True)
        state.best_scores[0], state.best_placements[0] = zero.best_score, zero.best_actions
        curve.append((zero.samples, zero.best_score))
    zero_shot_s = time.perf_counter() - start
    offset = zero.samples if zero else 0
    done = iterations = 0  # fine-tuning placements and updates of the stalled searches
    best_score, best_actions = state.best_scores.get(0, np.inf), state.best_placements.get(0)

    def out_of_budget(s: reinforce.TrainState) -> bool:
        return ((deadline is not None and time.perf_counter() >= deadline) or
                (config.max_samples is not None and done + s.samples >= config.max_samples))

    def stalled(s: reinforce.TrainState) -> bool:
        nonlocal last_gain
        if s.best_scores[0] < last_gain[1]:
            last_gain = (s.samples, s.best_scores[0])
        return config.restart_after is not None and s.samples - last_gain[0] >= config.restart_after

    def should_stop(s: reinforce.TrainState) -> bool:
        progress.update(done + s.samples, min(s.best_scores[0], best_score))
        return out_of_budget(s) or stalled(s)

    if config.fine_tune and pretrained and not out_of_budget(state):
        policy.temper(config.temperature)
    train_config = config.train_config(seed)
    pool = None  # workers elsewhere than here: built once, kept over the restarts
    if config.fine_tune and (config.workers > 1 or config.ray_address is not None):
        pool = reinforce.training_pool(policy, [env.problem], env.config,
                                       workers=config.workers, ray_address=config.ray_address)
    weights = None  # the policy of the search that holds the best placement, as it ended
    fine_tuning = progress.phase("placeto: fine-tuning", config.max_samples, deadline=deadline)
    with (fine_tuning if config.fine_tune else contextlib.nullcontext()), \
            (contextlib.closing(pool) if pool is not None else contextlib.nullcontext()):
        while config.fine_tune and not out_of_budget(state):
            last_gain = (0, state.best_scores.get(0, np.inf))
            reinforce.train(policy, [env.problem], env.config, train_config, state=state,
                            should_stop=should_stop, envs=None if pool else [env], pool=pool)
            curve += [(offset + done + samples, min(best, best_score))
                      for samples, _, best in state.curve]
            iterations += state.iteration
            if weights is None or state.best_scores[0] < best_score:
                weights = policy.get_weights()
            if state.best_scores[0] < best_score:
                best_score, best_actions = state.best_scores[0], state.best_placements[0]
            if out_of_budget(state):
                break
            done += state.samples  # stalled: a fresh policy takes the rest of the budget
            restarts.append(offset + done)
            k = restart_seed(seed, len(restarts))
            policy.reinitialize(k)
            state, train_config = reinforce.TrainState(), config.train_config(k)
    if best_actions is None:
        raise ConfigError("search() ran neither the zero-shot episode nor fine-tuning")
    return SearchResult(zero_shot=zero, zero_shot_s=zero_shot_s, iterations=iterations,
                        best_actions=best_actions, best_score=float(best_score), curve=curve,
                        restarts=restarts,
                        weights=policy.get_weights() if weights is None else weights)
