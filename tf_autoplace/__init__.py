"""tf_autoplace: learned and heuristic device placement for TensorFlow graphs.

    import tf_autoplace
    report = tf_autoplace.autoplace(graph, cluster="k80x2")
    print(report)
    open("placement.pb", "wb").write(report.to_proto().SerializeToString())
    # later, or in a restarted job: the same placement, without searching
    tf_autoplace.apply_placement(graph, "placement.pb", cluster="k80x2")

A graph from elsewhere comes as a cost graph (``protos/cost_graph.proto``)::

    report = tf_autoplace.place_cost_graph("model.costgraph.pbtxt", cluster="k80x4")

The core (OpGraph, grouping, simulator, placers) is plain numpy; TensorFlow is imported only when
an entry point that needs it (``autoplace``) is first used, and numpy when ``Cluster`` is (so
that ``tf-autoplace COMMAND --help`` starts at once).
"""

from tf_autoplace.errors import (
    AutoplaceError,
    ClusterSpecError,
    ConfigError,
    InfeasiblePlacementError,
    InvalidGraphError,
)

_LAZY = {
    "Cluster": ("tf_autoplace.core.cluster", "Cluster"),
    "Device": ("tf_autoplace.core.cluster", "Device"),
    "autoplace": ("tf_autoplace.api", "autoplace"),
    "place_cost_graph": ("tf_autoplace.api", "place_cost_graph"),
    "apply_placement": ("tf_autoplace.api", "apply_placement"),
    "Placement": ("tf_autoplace.placers", "Placement"),
    "PlacementReport": ("tf_autoplace.outputs.report", "PlacementReport"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tf_autoplace' has no attribute {name!r}")


from tf_autoplace import _session_recorder

_session_recorder.start()  # placing a graph an open Session ran is refused; see that module

__all__ = ["AutoplaceError", "Cluster", "ClusterSpecError", "ConfigError", "Device",
           "InfeasiblePlacementError", "InvalidGraphError", "Placement", "PlacementReport",
           "apply_placement", "autoplace", "place_cost_graph"]
