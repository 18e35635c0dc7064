"""Cost models: per-op compute time per device, transfer time per link."""

from tf_autoplace.cost.model import (AnalyticalCostModel, CostModel, PinnedCostModel,
                                     TableCostModel)

__all__ = ["AnalyticalCostModel", "CostModel", "PinnedCostModel", "TableCostModel"]
