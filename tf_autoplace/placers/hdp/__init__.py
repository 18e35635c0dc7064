"""The Hierarchical Planner (Mirhoseini et al. 2018): grouper and seq2seq placer.

The door is :mod:`.placer`; the rest of the folder is its search, network and training."""

from tf_autoplace.placers.hdp.placer import HDPPlacer

__all__ = ["HDPPlacer"]
