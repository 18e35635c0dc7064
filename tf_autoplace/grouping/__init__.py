"""Grouping ops before placement: Merge-and-Colocate (Placeto, appendix A.6)."""

from tf_autoplace.grouping.merge_colocate import (
    Grouping,
    GroupedGraph,
    GroupingConfig,
    group_graph,
    merge_and_colocate,
    merge_and_colocate_levels,
)

__all__ = ["Grouping", "GroupedGraph", "GroupingConfig", "group_graph", "merge_and_colocate",
           "merge_and_colocate_levels"]
