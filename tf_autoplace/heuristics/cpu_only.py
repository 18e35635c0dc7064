"""Everything on the CPU host: the papers' "CPU only" baseline (Mirhoseini et al. 2018,
Table 1). A :class:`SingleDevicePlacer` on the cluster's first CPU device."""

from __future__ import annotations

import numpy as np

from tf_autoplace.core.problem import PlacementProblem, Placer
from tf_autoplace.errors import InfeasiblePlacementError
from tf_autoplace.heuristics.single import SingleDevicePlacer


class CpuOnlyPlacer(Placer):
    """All ops on the first device of kind ``CPU`` (colocation groups with no CPU kernel go to
    the first device that can run them, as in :class:`SingleDevicePlacer`)."""

    name = "cpu_only"

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        cpus = [i for i, d in enumerate(problem.cluster.devices) if d.kind == "CPU"]
        if not cpus:
            raise InfeasiblePlacementError(
                f"cpu_only needs a CPU device; the cluster has {list(problem.cluster.names)}")
        return SingleDevicePlacer(cpus[0])._place(problem, rng)  # pylint: disable=protected-access
