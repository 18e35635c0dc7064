"""The Placeto placer: a pretrained policy run zero-shot, then fine-tuned on the user's graph.

(Addanki et al., "Placeto: Learning Generalizable Device Placement Algorithms", NeurIPS 2019.)

``place()`` does, within ``max_samples`` simulated placements (and at most ``budget_s`` s):

1. builds the MDP of the problem (:class:`tf_autoplace.placers.placeto.env.PlacementEnv`) and loads the
   policy shipped in ``tf_autoplace/pretrained`` for that number of action devices (or the one
   in ``policy_dir``, ``policy=`` to the constructor: a policy an earlier placement fine-tuned
   and saved); with none for that device count it starts from a fresh policy and says so;
2. **zero-shot**: one greedy episode (argmax actions); the best placement met on the way counts;
3. **fine-tuning**: REINFORCE on this graph alone (:func:`tf_autoplace.placers.placeto.reinforce.train`),
   each episode starting from the best placement found so far, in the MDP that undoes a move
   that makes the step slower (``EnvConfig.undo_worse``), until the budget or ``max_samples``
   simulated placements are spent, keeping the best placement sampled (the pretrained
   policy's logits can first be divided by ``temperature``; not by default). A search that
   goes ``restart_after`` placements without improving on its best is in a local optimum its
   single-group moves do not leave, and the rest of the budget goes to a fresh policy's search
   from the heuristic placement (which may stall and restart in turn);
4. compares the best learned placement with the fast heuristics (all of them, through
   ``best_heuristic``, by default) in the simulator and returns the faster one that fits
   memory, so the result is never worse than the best heuristic; the report's notes say which
   won and by how much;
5. keeps the policy it fine-tuned (:class:`~tf_autoplace.learning.trained_policy.TrainedPolicy`, the
   weights of the search that found the best learned placement, with a manifest of the graph,
   the cluster, the settings and the results) in ``trained_policy``: ``save_policy(dir)`` (or
   ``report.save_policy(dir)``) writes it, and ``PlacetoPlacer(policy=dir)`` starts from it on
   the next graph.

No search when there is nothing to learn. When the movable groups have few placements in all
(``D ** G`` for G movable groups on D action devices, at most :data:`EXHAUSTIVE_LIMIT` and at
most ``max_samples``), every one is simulated and the best taken: exact, and no more samples
than a search would spend. That covers one action device (a CPU-only machine, one GPU beside its
host, any one-device spec: a single placement, where a policy has nothing to choose between)
and tiny graphs (where a search spends long on policy updates to learn nothing the enumeration
does not find exactly; docs/experiments.md, "Placeto" has the measurement). A start placement
that already simulates at the lower bound (:func:`tf_autoplace.sim.lower_bound`) is not
searched either: nothing can beat it. Step 4 runs in every case; step 5 does not (no policy
was fine-tuned, so ``trained_policy`` stays None and ``save_policy`` says so).

With ``reward="measured"`` every placement the search scores, and the final comparison, is
timed on this machine instead of simulated (:mod:`tf_autoplace.learning.measured`).
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.errors import ConfigError
from tf_autoplace.learning.eager import policy_context
from tf_autoplace.learning.learned import LearnedPlacer, ended_by_clock, time_cap_note
from tf_autoplace.learning.measured import MeasuredEvaluator
from tf_autoplace.placers.placeto.env import PlacementEnv
from tf_autoplace.placers.placeto.policy import PlacetoPolicy
from tf_autoplace.placers.placeto.search import PlacetoConfig, pretrained_policy_dir, search
from tf_autoplace.sim import lower_bound

# Movable groups with at most this many placements in all are enumerated, not searched.
EXHAUSTIVE_LIMIT = 512
# The figures of ``stats`` a kept policy's manifest records.
RESULTS = ("zero_shot_ms", "learned_ms", "samples", "winner", "fine_tune_iterations", "restarts")


class PlacetoPlacer(LearnedPlacer):
    """Learned placement (see module docstring). ``stats`` holds the last run's figures.

    Args:
      config: the settings (:class:`PlacetoConfig`), or its fields as keywords.
      budget_s: the wall-time cap (``config.budget_s``).
      policy: a saved policy's directory to start from (``config.policy_dir``): one a placement
        fine-tuned and saved (``save_policy``), or a pretrained one.
    """

    name = "placeto"
    config_class = PlacetoConfig

    def load_policy(self, env: PlacementEnv):
        """The policy to start from, or a fresh one (with a note) if none fits ``env``."""
        path = self.config.policy_dir or pretrained_policy_dir(env.view.num_devices)
        if path:
            policy = PlacetoPolicy.load(path)
            if (policy.num_devices, policy.config["num_features"]) == \
                    (env.view.num_devices, env.num_features):
                return policy, path
            if self.config.policy_dir:
                raise ConfigError(
                    f"the policy in {path!r} places on {policy.num_devices} devices; this "
                    f"cluster has {env.view.num_devices} action devices")
        self.notes.append(f"placeto: no pretrained policy for {env.view.num_devices} devices; "
                          "trained from scratch within the budget")
        return PlacetoPolicy(env.view.num_devices, env.num_features, seed=0), None

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        cfg = self.config
        start = time.perf_counter()
        seed = int(rng.integers(2**31 - 1))
        evaluator = None
        if cfg.reward == "measured":
            evaluator = MeasuredEvaluator(problem, memory_penalty=cfg.env.memory_penalty,
                                          steps=cfg.measure_steps)
        env = PlacementEnv(problem, cfg.env, evaluator=evaluator)
        # Measured rewards: no shortcut (its bound is simulated; enumerating would run them
        # all), but for one action device, whose one placement is run once.
        shortcut = (self._without_search(env)
                    if evaluator is None or env.view.num_devices == 1 else None)
        found = None  # no search, so no fine-tuned policy to keep
        if shortcut is not None:
            learned, score, samples, summary = shortcut
            stats = dict(zero_shot_s=0.0, zero_shot_ms=None, samples=samples, policy=None,
                         fine_tune_iterations=0, curve=[(samples, score)], restarts=[])
        else:
            with policy_context():  # the policy runs eagerly whatever mode the caller is in
                policy, source = self.load_policy(env)
                found = search(policy, env, cfg, seed, pretrained=source is not None,
                               deadline=start + cfg.budget_s, progress=self.progress)
            clock = cfg.fine_tune and ended_by_clock(start + cfg.budget_s, found.samples,
                                                     cfg.max_samples)  # zero-shot: no search
            zero, samples = found.zero_shot, found.samples
            learned = env.op_placement(found.best_actions)
            stats = dict(zero_shot_s=found.zero_shot_s, zero_shot_ms=zero.best_score * 1e3,
                         samples=samples, policy=source or "fresh",
                         fine_tune_iterations=found.iterations, curve=found.curve,
                         restarts=found.restarts)
            # No wall times in notes: they go into the PlacementResult, which the same input
            # and seed must give byte for byte (stats keep them).
            summary = (f"placeto: zero-shot {zero.best_score * 1e3:.2f} ms, best learned "
                       f"{{learned_ms:.2f}} ms after "
                       f"{samples} {'simulated' if evaluator is None else 'measured'} "
                       "placements")
            if found.restarts:
                summary += (f" (restarted {len(found.restarts)} time(s) from the start "
                            "placement with a fresh policy, when the search stalled)")
            if clock:
                summary += time_cap_note("placeto", cfg.budget_s, samples, cfg.max_samples)

        choice = self._choose(problem, learned, self._heuristics(problem),
                              None if evaluator is None else evaluator.step_time)
        learned_ms = choice.learned_s * 1e3
        self.stats = dict(stats, learned_ms=learned_ms, winner=choice.winner,
                          seconds=time.perf_counter() - start)
        summary = summary.format(learned_ms=learned_ms)
        if found is not None:
            self._keep_policy(problem, PlacetoPolicy, policy.config, found.weights,
                              source=source, seed=seed, groups=env.view.num_groups,
                              action_devices=env.view.num_devices, curve=found.curve,
                              results=RESULTS)
        self.notes.append(summary + choice.note)
        return choice.devices

    def _without_search(self, env: PlacementEnv):
        """``(op placement, its R, placements simulated, note)`` when a search cannot pay
        (module docstring): the best of every placement of few movable groups, or a start
        placement already at the lower bound; else None."""
        movable, d = int(env.movable.sum()), env.view.num_devices
        count = d ** movable
        if count <= min(EXHAUSTIVE_LIMIT, self.config.max_samples or EXHAUSTIVE_LIMIT):
            actions = np.zeros(env.view.num_groups, dtype=np.int64)
            best_score, best = np.inf, None
            for choice in itertools.product(range(d), repeat=movable):  # first best on ties
                actions[env.movable] = choice
                score = env.score(actions)
                if score < best_score:
                    best_score, best = score, actions.copy()
            kind = env.problem.cluster.devices[int(env.action_devices[0])].kind
            why = (f"one {kind} to place on, so nothing to learn" if d == 1 else
                   f"{movable} movable groups on {d} {kind}s have {count} placements in all"
                   ) + self._policy_unused()
            return (env.op_placement(best), best_score, count,
                    f"placeto: {why}; simulated each (no search), best {{learned_ms:.2f}} ms")
        problem = env.problem
        start = env.start(np.random.default_rng(0))
        score = env.score(start)
        if score <= lower_bound(problem.graph, problem.cluster, problem.op_time) * (1 + 1e-9):
            return (env.op_placement(start), score, 1, "placeto: the start placement simulates "
                    "at the lower bound, {learned_ms:.2f} ms; nothing can beat it (no search)")
        return None
