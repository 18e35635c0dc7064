"""GDP (Zhou et al. 2019): a pretrained GraphSAGE + attention policy.

The door is :mod:`.placer`; the rest of the folder is its search, network and training."""

from tf_autoplace.placers.gdp.placer import GdpConfig, GdpPlacer

__all__ = ["GdpConfig", "GdpPlacer"]
