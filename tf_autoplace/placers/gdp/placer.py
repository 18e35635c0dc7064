"""The GDP placer: one pretrained policy, zero-shot on the user's graph, then PPO fine-tuning.

(Zhou et al., "GDP: Generalized Device Placement for Dataflow Graphs", 2019: "GDP-generalization
+finetune" and "GDP-generalization-zeroshot", section 4.3.)

``place()`` does:

1. loads the policy shipped in ``tf_autoplace/pretrained/gdp`` (or the one in ``policy_dir``,
   ``policy=`` to the constructor: a pretrained one, or one an earlier placement fine-tuned and
   saved, which must read the features this version makes; with none it starts from a fresh
   one and says so in the notes) and reads the problem as the
   policy sees it (:func:`tf_autoplace.placers.gdp.features.graph_features`: Merge-and-Colocate
   groups, their features, the action devices, and the best fast heuristic's placement when
   the policy reads that hint). One policy serves every device count;
2. **zero-shot**: the policy's most likely placement (every group on its argmax device), one
   forward pass and one simulation;
3. **fine-tuning** (unless ``budget_s`` or ``max_steps`` is 0): PPO on this graph alone
   (:func:`tf_autoplace.placers.gdp.train.train` with one graph, the paper's "individual training"),
   ``samples`` placements per update, for at most ``max_steps`` updates (the paper fine-tunes
   for "fewer than 50 steps") and at most ``budget_s`` seconds; the answer is the best
   placement met (a sample, or the greedy placement before or after);
4. compares it with the fast heuristics (``best_heuristic`` runs them all) in the simulator and
   returns the faster one that fits memory, so the result is never worse than the best
   heuristic; the notes say which won and by how much;
5. after fine-tuning, keeps the policy it fine-tuned
   (:class:`~tf_autoplace.learning.trained_policy.TrainedPolicy`: the weights as the last update left
   them, with a manifest of the graph, the cluster, the settings and the results) in
   ``trained_policy``: ``save_policy(dir)`` (or ``report.save_policy(dir)``) writes it, and
   ``GdpPlacer(policy=dir)`` starts from it on the next graph. Zero-shot fine-tunes nothing,
   so ``trained_policy`` stays None and ``save_policy`` says so.

The step budget is what keeps results reproducible: the same seed gives the same placement
when ``max_steps`` stops the search; a ``budget_s`` that stops it first makes the result depend
on the machine's speed.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import math
import os
import time

import numpy as np

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.core.settings import (check_directory, check_int, check_names, check_seconds,
                                        plain_numbers)
from tf_autoplace.errors import ConfigError
from tf_autoplace.heuristics import HEURISTICS
from tf_autoplace.learning.checkpoints import CONFIG_FILE, WEIGHTS_FILE
from tf_autoplace.learning.eager import policy_context
from tf_autoplace.learning.learned import LearnedPlacer, ended_by_clock, time_cap_note
from tf_autoplace.learning.rollouts import Evaluator
from tf_autoplace.placers.gdp import train as gdp_train
from tf_autoplace.placers.gdp.features import (
    NUM_DEVICE_FEATURES,
    NUM_GRAPH_FEATURES,
    NUM_NODE_FEATURES,
    FeatureConfig,
    graph_features,
)
from tf_autoplace.placers.gdp.policy import GdpPolicy

SHIPPED_POLICY = str(importlib.resources.files("tf_autoplace").joinpath("pretrained", "gdp"))
# The input widths a policy must read: the features this version makes.
FEATURE_WIDTHS = dict(num_features=NUM_NODE_FEATURES, device_features=NUM_DEVICE_FEATURES,
                      graph_features=NUM_GRAPH_FEATURES)
# The figures of ``stats`` a kept policy's manifest records.
RESULTS = ("zero_shot_R_ms", "learned_ms", "learned_R_ms", "steps", "samples", "winner")


@dataclasses.dataclass(frozen=True)
class GdpConfig:
    """Attributes:
      budget_s: wall-time cap in seconds (>= 0; 0: zero-shot only), counted from the start
        of the placement: no fine-tuning update starts after it.
      max_steps: PPO updates while fine-tuning (>= 0; 0: zero-shot only).
      samples: placements sampled (and simulated) per update.
      learning_rate, entropy, clip, epochs: PPO's settings while fine-tuning
        (:class:`tf_autoplace.placers.gdp.train.PPOConfig`; the rate is constant).
      features: how the graph is grouped for the policy (at most ``max_groups`` groups).
      policy_dir: a saved GDP policy to start from; None: the shipped one.
      heuristics: placers the result must not be worse than (``()``: return the learned
        placement as it is, for measuring the policy alone).
      workers: processes that simulate the samples (1: this process).
      memory_penalty: c in R = r + c * ReLU(m - M), seconds per GB over a device's memory.
    """

    budget_s: float = 60.0
    max_steps: int = 40
    samples: int = 16
    learning_rate: float = 1e-3
    entropy: float = 0.01
    clip: float = 0.2
    epochs: int = 4
    features: FeatureConfig = FeatureConfig()
    policy_dir: str | None = None
    heuristics: tuple[str, ...] = ("best_heuristic",)
    workers: int = 1
    memory_penalty: float = 2.0

    def __post_init__(self):
        plain_numbers(self)
        check_seconds("budget_s", self.budget_s, zero_ok=True)
        check_int("max_steps", self.max_steps, low=0)
        check_names("heuristics", self.heuristics, sorted(HEURISTICS), "heuristics")
        check_int("workers", self.workers, low=1)
        check_directory("policy_dir", self.policy_dir)
        self.ppo_config(0)  # the fine-tuning settings, checked by PPOConfig

    @property
    def zero_shot(self) -> bool:
        return self.budget_s == 0 or self.max_steps == 0

    def ppo_config(self, seed: int) -> gdp_train.PPOConfig:
        return gdp_train.PPOConfig(
            steps=self.max_steps, samples=self.samples, graphs_per_step=1, epochs=self.epochs,
            clip=self.clip, learning_rate=self.learning_rate, entropy=self.entropy,
            memory_penalty=self.memory_penalty, seed=seed)


class GdpPlacer(LearnedPlacer):
    """Learned placement with GDP (module doc). ``stats`` holds the last run's figures, with
    the search's ``curve``: (placements simulated, best R so far) after the zero-shot
    placement, after every update, and at the end (the final greedy placement): the shape of
    Placeto's and HDP's, which the benchmark's search table and the reuse tool read.

    Args:
      config: the settings (:class:`GdpConfig`), or its fields as keywords.
      budget_s: the wall-time cap (``config.budget_s``; 0: zero-shot).
      policy: a saved GDP policy's directory to start from (``config.policy_dir``).
    """

    name = "gdp"
    config_class = GdpConfig

    def __init__(self, config: GdpConfig | None = None, *, budget_s: float | None = None,
                 policy=None, **overrides):
        super().__init__(config, budget_s=budget_s, policy=policy, **overrides)
        self._policy: GdpPolicy | None = None  # built once, its weights reset for every graph
        self._initial: list | None = None

    def load_policy(self) -> tuple[GdpPolicy, str | None]:
        """The policy to start from (its saved weights; fresh if none is shipped) and its
        directory (None: fresh)."""
        path = self.config.policy_dir or SHIPPED_POLICY
        found = all(os.path.exists(os.path.join(path, f)) for f in (CONFIG_FILE, WEIGHTS_FILE))
        if self.config.policy_dir and not found:
            raise ConfigError(f"no GDP policy in {path!r} (expected {CONFIG_FILE} and "
                              f"{WEIGHTS_FILE})")
        if self._policy is None:
            policy = GdpPolicy.load(path) if found else GdpPolicy(seed=0)
            wrong = [f"{name}={policy.config[name]} (this version's features: {width})"
                     for name, width in FEATURE_WIDTHS.items() if policy.config[name] != width]
            if wrong:
                raise ConfigError(f"the GDP policy in {path!r} reads other features than this "
                                  f"version makes: {', '.join(wrong)}")
            self._policy, self._initial = policy, policy.get_weights()
        else:
            self._policy.set_weights(self._initial)  # undo the last graph's fine-tuning
        return self._policy, path if found else None

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        cfg = self.config
        start = time.perf_counter()
        seed = int(rng.integers(2**31 - 1))
        heuristics = self._heuristics(problem)
        single = self._nothing_to_learn(problem, heuristics, start)
        if single is not None:  # before the policy is loaded and run (seconds of TensorFlow)
            self.stats.update(steps=0, zero_shot_R_ms=math.nan, zero_shot_s=0.0,
                              learned_ms=problem.simulator.run(single).makespan * 1e3,
                              learned_oom=False, learned_R_ms=math.nan,
                              groups=int(problem.grouping.num_groups), policy="unused")
            return single
        with policy_context(), Evaluator(problem, workers=cfg.workers,
                                         memory_penalty=cfg.memory_penalty) as evaluator:
            policy, source = self.load_policy()
            graph = graph_features(problem, cfg.features, hint=policy.config["hint"])
            best_actions, zero_r = gdp_train.greedy_placement(policy, graph, evaluator)
            best_r, zero_s = zero_r, time.perf_counter() - start
            state, tuned, clock = gdp_train.TrainState(), None, False
            if not cfg.zero_shot:
                deadline = start + cfg.budget_s
                state = gdp_train.train(policy, [graph], [evaluator], cfg.ppo_config(seed),
                                        should_stop=lambda _: time.perf_counter() > deadline)
                clock = ended_by_clock(deadline, state.step, cfg.max_steps)
                if state.best_scores.get(0, np.inf) < best_r:
                    best_actions, best_r = state.best_actions[0], state.best_scores[0]
                if state.step:
                    actions, r = gdp_train.greedy_placement(policy, graph, evaluator)
                    if r < best_r:
                        best_actions, best_r = actions, r
                    tuned = policy.get_weights()  # read in eager mode, whatever the caller's
            samples = evaluator.samples
        curve = [(1, zero_r)] + [(1 + n, min(zero_r, best)) for n, _, best in state.curve]
        if samples > curve[-1][0]:  # the final greedy placement (or the hint alone)
            curve.append((samples, best_r))
        if source is None:
            self.notes.append("gdp: no pretrained policy found; started from a fresh one")

        choice = self._choose(problem, graph.op_placement(best_actions), heuristics)
        learned_oom, learned_ms = choice.learned_oom, choice.learned_s * 1e3
        self.stats = dict(zero_shot_R_ms=zero_r * 1e3, zero_shot_s=zero_s, learned_ms=learned_ms,
                          learned_oom=learned_oom, learned_R_ms=best_r * 1e3,
                          steps=state.step, samples=samples, curve=curve,
                          groups=graph.num_groups, winner=choice.winner,
                          policy=source or "fresh", seconds=time.perf_counter() - start)
        if tuned is not None:  # zero-shot (or no update within the budget) tuned nothing
            self._keep_policy(problem, GdpPolicy, policy.config, tuned,
                              source=source, seed=seed, groups=graph.num_groups,
                              action_devices=graph.num_devices, results=RESULTS,
                              curve=curve)
        summary = (f"gdp: zero-shot R {zero_r * 1e3:.2f} ms, best learned "  # no wall time:
                   # the notes go into the PlacementResult, the same bytes for the same seed
                   f"{learned_ms:.2f} ms after {state.step} fine-tuning steps "
                   f"({samples} simulated placements)"
                   f"{f' from the policy in {cfg.policy_dir}' if cfg.policy_dir else ''}"
                   + (time_cap_note("gdp", cfg.budget_s, state.step, cfg.max_steps,
                                    "fine-tuning steps") if clock else ""))
        self.notes.append(summary + choice.note)
        return choice.devices
