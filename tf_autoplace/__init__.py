"""tf_autoplace: learned and heuristic device placement for TensorFlow graphs.

    import tf_autoplace
    report = tf_autoplace.autoplace(graph, cluster="testdata/k80x2.pbtxt")
    print(report)
"""

from tf_autoplace.api import autoplace
from tf_autoplace.cluster import Cluster, Device
from tf_autoplace.errors import (AutoplaceError, ClusterSpecError, ConfigError,
                                 InfeasiblePlacementError, InvalidGraphError)
from tf_autoplace.placers import Placement
from tf_autoplace.report import PlacementReport

__all__ = ["AutoplaceError", "Cluster", "ClusterSpecError", "ConfigError", "Device",
           "InfeasiblePlacementError", "InvalidGraphError", "Placement", "PlacementReport",
           "autoplace"]
