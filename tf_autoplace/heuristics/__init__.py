"""The heuristic placers, without learning: each places an 8k-op graph in about a second, but
m-SCT, whose linear program takes seconds to minutes on graphs of thousands of ops and edges
(hence not one of ``best_heuristic``'s candidates).

They sit below the searching and learned placers (:mod:`tf_autoplace.placers`), which start
from them and fall back to them. :data:`HEURISTICS` (name -> class) is the registry's view of
them (:mod:`tf_autoplace.core.registry`).
"""

from tf_autoplace.core.registry import HEURISTICS
from tf_autoplace.heuristics.best import DEFAULT_CANDIDATES, FAST_HEURISTICS, BestHeuristicPlacer
from tf_autoplace.heuristics.cpu_only import CpuOnlyPlacer
from tf_autoplace.heuristics.expert import ExpertPlacer
from tf_autoplace.heuristics.metf import MemoryAwareETFPlacer
from tf_autoplace.heuristics.metis import MetisPlacer
from tf_autoplace.heuristics.msct import MemoryAwareSCTPlacer
from tf_autoplace.heuristics.random_placer import RandomPlacer
from tf_autoplace.heuristics.replica_setter import ReplicaDeviceSetterPlacer
from tf_autoplace.heuristics.single import SingleDevicePlacer
from tf_autoplace.heuristics.topo import MemoryAwareTopoPlacer

__all__ = ["DEFAULT_CANDIDATES", "FAST_HEURISTICS", "HEURISTICS", "BestHeuristicPlacer",
           "CpuOnlyPlacer", "ExpertPlacer", "MemoryAwareETFPlacer", "MemoryAwareSCTPlacer",
           "MemoryAwareTopoPlacer", "MetisPlacer", "RandomPlacer", "ReplicaDeviceSetterPlacer",
           "SingleDevicePlacer"]
