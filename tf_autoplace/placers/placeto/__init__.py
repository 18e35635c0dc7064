"""Placeto (Addanki et al. 2019): a graph-embedding policy over Placeto"s MDP.

The door is :mod:`.placer`; the rest of the folder is its search, network and training."""

from tf_autoplace.placers.placeto.placer import PlacetoConfig, PlacetoPlacer

__all__ = ["PlacetoConfig", "PlacetoPlacer"]
