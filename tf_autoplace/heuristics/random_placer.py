"""Uniformly random placement of groups: the floor every placer should beat.

Each group (``problem.grouping``) goes to a device drawn uniformly from the devices that can
run all of its ops (the CPU host included). This is what an untrained RL policy with a uniform
softmax samples (Mirhoseini et al. 2017; Placeto's randomly initialised policy). Seeded: the
same seed gives the same placement.
"""

from __future__ import annotations

import numpy as np

from tf_autoplace.core.problem import PlacementProblem, Placer


class RandomPlacer(Placer):
    """Each group to a uniformly random allowed device (see module docstring)."""

    name = "random"

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        allowed = problem.group_allowed  # [G, D]
        counts = allowed.sum(axis=1)
        # The k-th allowed device of each group, k uniform in [0, count).
        pick = np.floor(rng.random(len(counts)) * counts).astype(np.int64)
        cumulative = np.cumsum(allowed, axis=1)
        group_device = np.argmax(cumulative > pick[:, None], axis=1)
        return problem.grouping.expand(group_device).astype(np.int32)
