"""The Placeto placer: a pretrained policy run zero-shot, then fine-tuned on the user's graph.

(Addanki et al., "Placeto: Learning Generalizable Device Placement Algorithms", NeurIPS 2019.)

``place()`` does, within ``max_samples`` simulated placements (and at most ``budget_s`` s):

1. builds the MDP of the problem (:class:`tf_autoplace.rl.env.PlacementEnv`) and loads the
   policy shipped in ``tf_autoplace/pretrained`` for that number of action devices (or the one
   in ``policy_dir``); with none for that device count it starts from a fresh policy and says so;
2. **zero-shot**: one greedy episode (argmax actions); the best placement met on the way counts;
3. **fine-tuning**: REINFORCE on this graph alone (:func:`tf_autoplace.rl.reinforce.train`),
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
   won and by how much.
"""

from __future__ import annotations

import time

import numpy as np

from tf_autoplace.errors import ConfigError
from tf_autoplace.heuristics import HEURISTICS
from tf_autoplace.placers.learned import LearnedPlacer
from tf_autoplace.problem import PlacementProblem, rank_placements
from tf_autoplace.rl.eager import policy_context
from tf_autoplace.rl.env import PlacementEnv
from tf_autoplace.rl.placeto_search import PlacetoConfig, pretrained_policy_dir, search
from tf_autoplace.rl.policies.placeto import PlacetoPolicy


class PlacetoPlacer(LearnedPlacer):
    """Learned placement (see module docstring). ``stats`` holds the last run's figures."""

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
        env = PlacementEnv(problem, cfg.env)
        with policy_context():  # the policy runs eagerly whatever mode the caller is in
            policy, source = self.load_policy(env)
            found = search(policy, env, cfg, seed, pretrained=source is not None,
                           deadline=start + cfg.budget_s)
        zero, samples = found.zero_shot, found.samples
        learned = env.op_placement(found.best_actions)

        contenders = [("placeto", learned)]
        for name in cfg.heuristics:
            contenders.append((name, HEURISTICS[name]().propose(problem)))
        scored = rank_placements(problem, contenders)
        _, makespan, winner, devices = scored[0]
        learned_ms = next(m for _, m, n, _ in scored if n == "placeto") * 1e3
        self.stats = dict(zero_shot_s=found.zero_shot_s, zero_shot_ms=zero.best_score * 1e3,
                          learned_ms=learned_ms, samples=samples, winner=winner,
                          policy=source or "fresh", seconds=time.perf_counter() - start,
                          fine_tune_iterations=found.iterations, curve=found.curve,
                          restarts=found.restarts)
        summary = (f"placeto: zero-shot {zero.best_score * 1e3:.2f} ms in "
                   f"{found.zero_shot_s:.1f} s, "
                   f"best learned {learned_ms:.2f} ms after {samples} simulated placements")
        if found.restarts:
            summary += (f" (restarted {len(found.restarts)} time(s) from the start placement "
                        "with a fresh policy, when the search stalled)")
        if winner != "placeto":
            summary += (f"; the {winner} heuristic is faster ({makespan * 1e3:.2f} ms) and is "
                        "used instead")
        self.notes.append(summary)
        return devices
