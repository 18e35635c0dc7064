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
# The doors that are modules of their own: ``tf_autoplace.keras.autoplace_model(...)`` works
# after a bare ``import tf_autoplace``, whatever was used before it.
_DOORS = ("keras", "tf2")


def __getattr__(name):
    if name in _DOORS:
        return _import_whole(f"tf_autoplace.{name}")
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(_import_whole(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tf_autoplace' has no attribute {name!r}")


def __dir__():
    """The lazy names and doors too, so that completion in a notebook or ``help()`` lists
    ``autoplace`` and ``Cluster`` before their modules are loaded."""
    return sorted(set(globals()) | set(_LAZY) | set(_DOORS))


def _import_whole(module: str):
    """Import ``module`` with signals held back until the import is done (then delivered).

    The first ``tf_autoplace.autoplace`` loads numba, networkx and the simulator, which takes
    seconds: an interrupt in the middle would leave half-initialised packages in
    ``sys.modules`` (numba without ``numba.core``), and every later call in that process (a
    notebook's) would fail on them. So would any signal whose Python handler raises: a
    training script's SIGTERM or SIGALRM handler that calls ``sys.exit``. Each such signal
    (Ctrl-C's included, whose default handler raises KeyboardInterrupt) is held while the
    modules load and then raised again, once, to the handler it was meant for. Signals
    without a Python handler keep their own action (a default SIGTERM still ends the
    process, which leaves nothing half-loaded behind). Only the main thread runs Python's
    signal handlers."""
    import importlib
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return importlib.import_module(module)
    names = ("SIGINT", "SIGTERM", "SIGALRM", "SIGHUP", "SIGUSR1", "SIGUSR2")
    previous = {sig: signal.getsignal(sig) for sig in
                (getattr(signal, name) for name in names if hasattr(signal, name))}
    handled = [sig for sig, handler in previous.items() if callable(handler)]
    held = []
    for sig in handled:
        signal.signal(sig, lambda signum, frame: held.append(signum))
    try:
        return importlib.import_module(module)
    finally:
        for sig in handled:
            signal.signal(sig, previous[sig])
        for sig in dict.fromkeys(held):  # in the order they came, each once
            signal.raise_signal(sig)


from tf_autoplace import _session_recorder

_session_recorder.start()  # placing a graph an open Session ran is refused; see that module

__all__ = ["AutoplaceError", "Cluster", "ClusterSpecError", "ConfigError", "Device",
           "InfeasiblePlacementError", "InvalidGraphError", "Placement", "PlacementReport",
           "apply_placement", "autoplace", "place_cost_graph"]
