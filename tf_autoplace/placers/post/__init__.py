"""Post (Gao et al. 2018): softmax tables trained by cross-entropy and PPO.

The door is :mod:`.placer`; the rest of the folder is its search, network and training."""

from tf_autoplace.placers.post.placer import PostPlacer

__all__ = ["PostPlacer"]
