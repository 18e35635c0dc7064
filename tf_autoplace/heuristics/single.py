"""All ops on one device, except ops that have no kernel there (the papers' "single GPU" and
"CPU only" baselines).

Works on TF colocation groups, the finest split TF allows: a colocation group that cannot run on
the chosen device goes to the first device that can run all of it (the CPU host, for CPU-only
ops such as string handling)."""

from __future__ import annotations

import numpy as np

from tf_autoplace.core.problem import PlacementProblem, Placer
from tf_autoplace.errors import InfeasiblePlacementError


class SingleDevicePlacer(Placer):
    """Args:
      device: cluster index or name of the device; default the first GPU, else device 0.
    """

    name = "single"

    def __init__(self, device: int | str | None = None):
        self._device = device

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        cluster = problem.cluster
        if self._device is None:
            target = cluster.default_device()
        elif isinstance(self._device, str):
            target = cluster.index(self._device)
        else:
            target = int(self._device)
            if not 0 <= target < cluster.num_devices:
                raise InfeasiblePlacementError(
                    f"device index {target} is outside the cluster's {cluster.num_devices} devices")
        allowed = problem.colocation_allowed  # [C, D]
        if not allowed.any(axis=1).all():
            c = int(np.flatnonzero(~allowed.any(axis=1))[0])
            op = problem.graph.names[int(np.flatnonzero(problem.graph.colocation == c)[0])]
            raise InfeasiblePlacementError(
                f"no device in the cluster can run the colocation group of op {op!r}")
        choice = np.where(allowed[:, target], target, np.argmax(allowed, axis=1))
        return choice[problem.graph.colocation].astype(np.int32)
