"""The default placer: fast heuristics as starts, then a local search in the simulator.

The door is :mod:`.placer`; the rest of the folder is its search, network and training."""

from tf_autoplace.placers.auto.placer import AutoConfig, AutoPlacer

__all__ = ["AutoConfig", "AutoPlacer"]
