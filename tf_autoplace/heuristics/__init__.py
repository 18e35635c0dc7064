"""The fast heuristic placers: each places an 8k-op graph in about a second, without learning.

They sit below the learned machinery (:mod:`tf_autoplace.placers`), which starts its searches from
them and falls back to them, and below the registry of every placer
(:mod:`tf_autoplace.placers`).
"""

from tf_autoplace.heuristics.best import DEFAULT_CANDIDATES, FAST_HEURISTICS, BestHeuristicPlacer
from tf_autoplace.heuristics.cpu_only import CpuOnlyPlacer
from tf_autoplace.heuristics.expert import ExpertPlacer
from tf_autoplace.heuristics.metf import MemoryAwareETFPlacer
from tf_autoplace.heuristics.metis import MetisPlacer
from tf_autoplace.heuristics.random_placer import RandomPlacer
from tf_autoplace.heuristics.replica_setter import ReplicaDeviceSetterPlacer
from tf_autoplace.heuristics.single import SingleDevicePlacer
from tf_autoplace.heuristics.topo import MemoryAwareTopoPlacer

HEURISTICS = {
    **FAST_HEURISTICS,
    "cpu_only": CpuOnlyPlacer,
    "random": RandomPlacer,
    "best_heuristic": BestHeuristicPlacer,
    "replica_device_setter": ReplicaDeviceSetterPlacer,
}

__all__ = ["DEFAULT_CANDIDATES", "FAST_HEURISTICS", "HEURISTICS", "BestHeuristicPlacer",
           "CpuOnlyPlacer", "ExpertPlacer", "MemoryAwareETFPlacer", "MemoryAwareTopoPlacer",
           "MetisPlacer", "RandomPlacer", "ReplicaDeviceSetterPlacer", "SingleDevicePlacer"]
