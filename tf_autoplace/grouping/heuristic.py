"""Merge-and-Colocate within a given placement: groups that never straddle two devices.

Post and GDP start from the best fast heuristic's placement and let their policy move groups
away from it; Placeto's environment does the same from its heuristic start. Each needs a
grouping in which that placement is a group placement, so that "keep the heuristic's device"
is an action. :func:`heuristic_grouping` gets it from Merge-and-Colocate itself: every op gets
one pseudo kernel kind, its device in the placement, and Merge-and-Colocate never merges ops
whose kinds do not intersect.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tf_autoplace.graph.opgraph import OpGraph
from tf_autoplace.grouping.merge_colocate import Grouping, GroupingConfig, merge_and_colocate


def heuristic_grouping(graph: OpGraph, device_names: Sequence[str], devices: np.ndarray,
                       max_groups: int) -> Grouping:
    """Merge-and-Colocate into at most ``max_groups`` groups, none of which straddles two
    devices of the op placement ``devices`` [n] (indices into ``device_names``), so that
    placement is a group placement.

    Args:
      graph: the op graph (n ops).
      device_names: the cluster's device names, in device-index order.
      devices: [n] device index per op.
      max_groups: the most groups to make.

    Returns:
      The grouping.
    """
    pseudo = np.zeros((graph.num_ops, len(device_names)), dtype=bool)
    pseudo[np.arange(graph.num_ops), devices] = True
    partition = graph.with_kernels(pseudo, tuple(device_names))
    return merge_and_colocate(partition, GroupingConfig(max_groups=max_groups))
