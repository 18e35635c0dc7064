"""Every placer behind one interface (:class:`~tf_autoplace.problem.Placer`), by name.

The fast heuristics live in :mod:`tf_autoplace.heuristics`; the learned placers here are thin
doors over :mod:`tf_autoplace.rl` (config, budget, start, fallback to the best heuristic).
"""

from __future__ import annotations

import inspect

from tf_autoplace.errors import ConfigError
from tf_autoplace.heuristics import (HEURISTICS, BestHeuristicPlacer, CpuOnlyPlacer, ExpertPlacer,
                                     MemoryAwareETFPlacer, MemoryAwareTopoPlacer, MetisPlacer,
                                     RandomPlacer, SingleDevicePlacer)
from tf_autoplace.placers.auto import AutoConfig, AutoPlacer
from tf_autoplace.placers.gdp import GdpConfig, GdpPlacer
from tf_autoplace.placers.hdp import HDPPlacer
from tf_autoplace.placers.placeto import PlacetoConfig, PlacetoPlacer
from tf_autoplace.placers.post import PostPlacer
from tf_autoplace.rl.post_search import PostConfig
from tf_autoplace.problem import (Placement, PlacementProblem, Placer, check_memory,
                                  check_placement, validate)
from tf_autoplace.rl.hdp_search import HDPConfig

DEFAULT_PLACER = "auto"

PLACERS = {
    "auto": AutoPlacer,
    "single": SingleDevicePlacer,
    "cpu_only": CpuOnlyPlacer,
    "random": RandomPlacer,
    "expert": ExpertPlacer,
    "metis": MetisPlacer,
    "m_topo": MemoryAwareTopoPlacer,
    "m_etf": MemoryAwareETFPlacer,
    "best_heuristic": BestHeuristicPlacer,
    "placeto": PlacetoPlacer,
    "post": PostPlacer,
    "hdp": HDPPlacer,
    "gdp": GdpPlacer,
}
assert set(HEURISTICS) <= set(PLACERS)


def get_placer(name_or_placer, *, budget_s: float | None = None) -> Placer:
    """A Placer instance from a registered name (or the instance itself).

    ``budget_s`` is the search-time budget of placers that search (``auto``, ``placeto``,
    ``post``, ``hdp``, ``gdp``); placers that return at once ignore it."""
    if isinstance(name_or_placer, Placer):
        return name_or_placer
    if not isinstance(name_or_placer, str) or name_or_placer not in PLACERS:
        raise ConfigError(
            f"unknown placer {name_or_placer!r}; choose one of {sorted(PLACERS)}")
    cls = PLACERS[name_or_placer]
    if budget_s is not None and takes_budget(cls):
        return cls(budget_s=budget_s)
    return cls()


def takes_budget(placer_or_class) -> bool:
    """Whether a placer searches within a time budget (its constructor takes ``budget_s``)."""
    cls = placer_or_class if isinstance(placer_or_class, type) else type(placer_or_class)
    return "budget_s" in inspect.signature(cls).parameters


__all__ = ["DEFAULT_PLACER", "PLACERS", "AutoConfig", "AutoPlacer", "BestHeuristicPlacer",
           "CpuOnlyPlacer", "ExpertPlacer", "GdpConfig", "GdpPlacer", "HDPConfig", "HDPPlacer",
           "MemoryAwareETFPlacer", "MemoryAwareTopoPlacer", "MetisPlacer", "Placement",
           "PlacementProblem", "Placer", "PlacetoConfig", "PlacetoPlacer", "PostConfig",
           "PostPlacer", "RandomPlacer",
           "SingleDevicePlacer", "check_memory", "check_placement", "get_placer", "takes_budget",
           "validate"]
