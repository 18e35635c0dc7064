"""Placers behind one interface (:class:`Placer`), and a registry of them by name."""

from __future__ import annotations

from tf_autoplace.errors import ConfigError
from tf_autoplace.placers.base import (Placement, PlacementProblem, Placer, check_memory,
                                       check_placement, validate)
from tf_autoplace.placers.metf import MemoryAwareETFPlacer
from tf_autoplace.placers.single import SingleDevicePlacer

PLACERS = {
    "single": SingleDevicePlacer,
    "m_etf": MemoryAwareETFPlacer,
}


def get_placer(name_or_placer) -> Placer:
    """A Placer instance from a registered name (or the instance itself)."""
    if isinstance(name_or_placer, Placer):
        return name_or_placer
    try:
        return PLACERS[name_or_placer]()
    except (KeyError, TypeError):
        raise ConfigError(
            f"unknown placer {name_or_placer!r}; choose one of {sorted(PLACERS)}") from None


__all__ = ["PLACERS", "MemoryAwareETFPlacer", "Placement", "PlacementProblem", "Placer",
           "SingleDevicePlacer", "check_memory", "check_placement", "get_placer", "validate"]
