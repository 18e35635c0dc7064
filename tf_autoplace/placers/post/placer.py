"""The Post placer: cross-entropy minimisation with PPO over softmax placement tables, searched
on the user's graph.

(Gao et al., "Post: Device Placement with Cross-Entropy Minimization and Proximal Policy
Optimization", NeurIPS 2018.)

``place()`` does, within ``max_samples`` simulated placements (and at most ``budget_s`` s):

1. runs the fast heuristics the result is compared with (``best_heuristic`` by default);
2. runs Algorithm 1 (:func:`tf_autoplace.placers.post.search.search`): softmax tables per placement
   unit, batches of K placements simulated by the shared evaluator, PPO with the KL penalty
   after every batch, the closed-form cross-entropy step and uniform mixing every N
   placements; the best placement sampled counts. It needs no pretrained weights and no
   TensorFlow: the tables and their updates are numpy;
3. returns the faster of the best sampled placement and the heuristics' that fits memory, so
   the result is never worse than the best heuristic; the report's notes say which won and by
   how much.

With one action device there is nothing to learn: the fastest heuristic placement is returned
without a search.

With ``reward="measured"`` every sampled placement, and the final comparison, is timed on this
machine instead of simulated, as the paper's placements were (:mod:`tf_autoplace.learning.measured`).
"""

from __future__ import annotations

import time

import numpy as np

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.learning.learned import LearnedPlacer, ended_by_clock, time_cap_note
from tf_autoplace.learning.measured import MeasuredEvaluator
from tf_autoplace.placers.post.search import PostConfig, search


class PostPlacer(LearnedPlacer):
    """Post (see module docstring). ``stats`` holds the last run's figures."""

    name = "post"
    config_class = PostConfig
    no_policy_reason = ("its policy is one softmax table per placement unit of this graph's "
                        "grouping, which does not carry over to another graph; for the same "
                        "graph the placement cache gives its result back")

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        cfg = self.config
        start = time.perf_counter()
        seed = int(rng.integers(2**31 - 1))
        contenders = self._heuristics(problem)
        single = self._nothing_to_learn(problem, contenders, start)
        if single is not None:
            return single
        heuristic = dict(contenders).get("best_heuristic")  # None: search() runs it if needed
        searching = time.perf_counter()
        measured = None
        if cfg.reward == "measured":
            measured = MeasuredEvaluator(problem, memory_penalty=cfg.memory_penalty,
                                         steps=cfg.measure_steps)
        found = search(problem, cfg, seed, heuristic=heuristic, deadline=start + cfg.budget_s,
                       evaluator=measured, progress=self.progress)
        clock = ended_by_clock(start + cfg.budget_s, found.samples, cfg.max_samples)
        choice = self._choose(problem, found.devices, contenders,
                              None if measured is None else measured.step_time)
        learned_ms = choice.learned_s * 1e3
        self.stats = dict(learned_ms=learned_ms, samples=found.samples, winner=choice.winner,
                          seconds=time.perf_counter() - start, units=found.units.num_units,
                          ppo_updates=found.ppo_updates, ce_updates=found.ce_updates,
                          curve=[(p.samples, p.best_score) for p in found.curve],
                          # seconds since place() began, the heuristics' runs included
                          curve_s=[searching - start + p.seconds for p in found.curve],
                          batch_means=[p.batch_mean for p in found.curve])
        summary = (f"post: best sampled placement {learned_ms:.2f} ms after {found.samples} "
                   f"{'simulated' if measured is None else 'measured'} placements of "
                   f"{found.units.num_units} units "
                   f"({cfg.algorithm}, {found.ce_updates} cross-entropy and "
                   f"{found.ppo_updates} PPO updates)")
        if not found.fits:
            summary += " (it does not fit in memory)"
        if clock:
            summary += time_cap_note("post", cfg.budget_s, found.samples, cfg.max_samples)
        self.notes.append(summary + choice.note)
        return choice.devices
