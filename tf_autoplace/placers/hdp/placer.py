"""The Hierarchical Planner placer: a grouper and a seq2seq placer trained together on the
user's graph with REINFORCE.

(Mirhoseini et al., "A Hierarchical Model for Device Placement", ICLR 2018.)

``place()`` does, within ``max_samples`` simulated placements (and at most ``budget_s`` s):

1. builds HDP's view of the problem (:mod:`tf_autoplace.placers.hdp.view`): the TF colocation groups
   are the units the grouper assigns, so no placement can split one; units that cannot run on
   every action device (GPU) are fixed to a device that can;
2. trains a fresh policy (:mod:`tf_autoplace.placers.hdp.policy`) on this graph, as the paper
   does for each model (by default started from the fastest of the heuristics below; with
   ``start="uniform"`` from the paper's uniform start: :mod:`tf_autoplace.placers.hdp.search` says
   why the default differs from the paper), or the one saved in
   ``policy_dir`` (``policy=`` to the constructor: a
   policy an earlier placement trained and saved, whose ``num_groups`` and widths must be the
   config's and whose device count must be the cluster's; a ConfigError says what differs):
   REINFORCE on reward ``-sqrt(R)`` with a moving-average baseline, K placements sampled and
   simulated per update (:mod:`tf_autoplace.placers.hdp.search`), keeping the best placement
   sampled;
3. compares it with the fast heuristics (all of them, through ``best_heuristic``, by default)
   in the simulator and returns the faster one that fits memory, so the result is never worse
   than the best heuristic; the report's notes say which won and by how much;
4. keeps the policy it trained (:class:`~tf_autoplace.learning.trained_policy.TrainedPolicy`: the
   weights as the search ended, with a manifest of the graph, the cluster, the settings and the
   results) in ``trained_policy``: ``save_policy(dir)`` (or ``report.save_policy(dir)``)
   writes it, and ``HDPPlacer(policy=dir)`` starts from it on the next graph.

With one action device there is nothing to learn: the heuristic placement is used, no policy
is trained, and ``trained_policy`` stays None.
"""

from __future__ import annotations

import time

import numpy as np

from tf_autoplace.core.problem import PlacementProblem, rank_placements
from tf_autoplace.learning.eager import policy_context
from tf_autoplace.learning.learned import LearnedPlacer, ended_by_clock, time_cap_note
from tf_autoplace.placers.hdp.policy import HDPPolicy
from tf_autoplace.placers.hdp.search import HDPConfig, search


class HDPPlacer(LearnedPlacer):
    """Learned placement (see module docstring). ``stats`` holds the last run's figures:
    ``learned_ms`` (the best sampled placement's step time), ``samples``, ``updates``,
    ``winner``, ``policy`` (the directory it started from, or ``fresh``), ``seconds``,
    ``stopped`` (what ended the search: ``samples``, ``deadline``, or
    ``one device``), and the search's ``curve`` (placements, best R so far) with
    ``curve_s``, the seconds of each point since ``place`` began: the shape the benchmark's
    search table reads (:func:`tf_autoplace.zoo.benchmark.search_curve`)."""

    name = "hdp"
    config_class = HDPConfig

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        cfg = self.config
        start = time.perf_counter()
        seed = int(rng.integers(2**31 - 1))
        heuristics = self._heuristics(problem)
        single = self._nothing_to_learn(problem, heuristics, start)
        if single is not None:
            return single
        searching = time.perf_counter()
        # The heuristic start begins from the best of the heuristics it is compared with.
        hint = rank_placements(problem, heuristics)[0][3] if cfg.start == "heuristic" else None
        with policy_context():  # the policy runs eagerly whatever mode the caller is in
            found = search(problem, cfg, seed, deadline=start + cfg.budget_s, hint=hint,
                           progress=self.progress)
        clock = ended_by_clock(start + cfg.budget_s, found.samples, cfg.max_samples)
        choice = self._choose(problem, found.best_devices, heuristics)
        learned_s, learned_oom = choice.learned_s, choice.learned_oom
        self.stats = dict(learned_ms=learned_s * 1e3, learned_fits=not learned_oom,
                          samples=found.samples, updates=found.updates, winner=choice.winner,
                          policy=cfg.policy_dir or "fresh",
                          stopped="deadline" if clock else "samples",
                          seconds=time.perf_counter() - start,
                          curve=[(n, best) for n, best, _ in found.curve],
                          # seconds since place() began, the heuristics' runs included
                          curve_s=[searching - start + t for _, _, t in found.curve])
        self._keep_policy(problem, HDPPolicy, found.policy_config, found.weights,
                          source=cfg.policy_dir, seed=seed, groups=found.units,
                          action_devices=found.policy_config["num_devices"],
                          curve=self.stats["curve"],
                          results=("learned_ms", "samples", "updates", "winner"))
        summary = (f"hdp: best learned {learned_s * 1e3:.2f} ms"
                   f"{' (out of memory)' if learned_oom else ''} after {found.samples} "
                   f"simulated placements in {found.updates} policy updates"
                   f"{f' from the policy in {cfg.policy_dir}' if cfg.policy_dir else ''}"
                   + (time_cap_note("hdp", cfg.budget_s, found.samples, cfg.max_samples)
                      if clock else ""))
        self.notes.append(summary + choice.note)
        return choice.devices
