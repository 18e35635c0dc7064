"""autoplace(): the one function model code calls; place_cost_graph(): the same for a graph
that comes as a cost graph rather than from TensorFlow; apply_placement(): apply a saved one.

Each checks its arguments once into a :class:`~tf_autoplace.pipeline.options.PlaceOptions`,
then ``autoplace`` dispatches on what it is given: a ``tf.function`` or ConcreteFunction goes to
the TF2 door (:mod:`tf_autoplace.tf2`), a Keras model to the Keras door
(:mod:`tf_autoplace.keras`), anything else is a graph and goes to
:func:`tf_autoplace.pipeline.engine.place_graph`. ``place_cost_graph`` goes to
:func:`tf_autoplace.pipeline.engine.place_cost_graph`.
"""

from __future__ import annotations

import tensorflow as tf

from tf_autoplace import keras, tf2
from tf_autoplace.cost import CostModel
from tf_autoplace.errors import ConfigError
from tf_autoplace.grouping import GroupingConfig
from tf_autoplace.pipeline import engine
from tf_autoplace.pipeline.options import PlaceOptions
from tf_autoplace.placers import DEFAULT_PLACER, SavedPlacement


# Called inside a tf.function, AutoGraph would otherwise convert every function of this package
# on the way, slowly and with warnings.
@tf.autograph.experimental.do_not_convert
def autoplace(graph, cluster=None, placer=DEFAULT_PLACER, seed: int = 0, *,
              grouping: GroupingConfig = GroupingConfig(), cost_model: CostModel | None = None,
              cost_profile=None, unknown_dim: int | None = None,
              budget_s: float | None = None,
              ray_address: str | None = None, policy=None, cache=False, progress=True,
              measure_steps: int = 0, measure_feeds: dict | None = None, verify: int = 0):
    """Choose a device for every op of ``graph`` and write it into the graph.

    Args:
      graph: a ``tf.Graph`` (rewritten in place), or a GraphDef, MetaGraphDef, serialized bytes
        or file path (left alone; the placed copy of its GraphDef is returned as
        ``report.graph_def``: for a MetaGraphDef, copy it and set its ``graph_def`` to keep
        its saver, collections and signatures, as ``tf-autoplace place`` does), or a
        ``tf.function`` with an ``input_signature`` / a ConcreteFunction (left alone; see
        Returns and :func:`tf_autoplace.tf2.autoplace_function`), or a compiled Keras 3 or
        tf_keras model (its fit/evaluate/predict then run placed functions, placed on their
        first batch: :func:`tf_autoplace.keras.autoplace_model`).
      cluster: a :class:`Cluster`, the name of a shipped spec (``"k80x4"``,
        :func:`tf_autoplace.core.cluster.shipped_clusters`), the path of a text ``ClusterSpec``, or
        ``"local"``/None for this machine's devices.
      placer: a registered placer name (``tf_autoplace.core.registry``) or a Placer. The
        default, ``auto``, starts from the best fast heuristic (and the learned policies'
        zero-shot placements) and improves it by local search in the simulator.
      seed: makes the placement reproducible.
      grouping: Merge-and-Colocate settings.
      cost_model: defaults to Grappler's analytical costs.
      cost_profile: graphs and functions, instead of ``cost_model``: the path of a text
        ``CostProfile`` (``protos/cost_profile.proto``; ``tf-autoplace profile`` writes one, on
        this machine or on the one the graph will train on, and for a function
        ``tf_autoplace.hw.profiler.profile_ops(Workload.from_function(fn, *args))``) whose
        measured op times replace the analytical estimates; ops it lacks keep the analytical
        estimate, and the report's notes count them and the profile's ops the graph lacks.
      unknown_dim: elements assumed for a dimension whose size is unknown (a TF1 graph's
        ``None`` batch: set it to the batch the graph will run with), in tensor sizes and in
        the estimated op times of the ops that follow such a placeholder; None: 1 (for a
        Keras model, the first batch's size).
      budget_s: wall-time cap in seconds (>= 0) for placers that search (``auto``, ``placeto``,
        ``post``, ``hdp``, ``gdp``; their default budgets are sample or step counts, which keep
        results reproducible; a time cap that cuts the search short makes them depend on the
        machine's speed). 0 asks for no search: ``gdp`` then places zero-shot; the others
        need more than 0.
      ray_address: simulate on a Ray cluster (placers that farm simulations out: ``auto``,
        ``placeto``, ``post``, ``hdp``): ``"auto"``, ``"HOST:PORT"``, ``"ray://HOST:PORT"``, or
        ``"local"``; None: this machine's processes. The placement does not depend on it.
      policy: with the name of a learned placer that keeps a policy (``placeto``, ``hdp``,
        ``gdp``; ``tf_autoplace.placers.policy_placers()``), the directory of a saved policy
        of that placer to start from instead of the shipped (or, for ``hdp``, a fresh) one
        (``report.save_policy(dir)`` writes one).
      cache: the placement cache (:mod:`tf_autoplace.pipeline.cache`): False (default) searches every
        time; True keeps placements in the user's cache directory, a path in that directory,
        or a ``tf_autoplace.pipeline.cache.PlacementCache``. With it, the same graph, cluster, placer
        and seed get the stored placement at once (``report.from_cache``).
      progress: True (default) shows a search that takes more than 2 s (a bar on a terminal,
        otherwise log lines of the Python logger ``tf_autoplace.progress``, which reach stderr
        with no logging set up), False shows nothing, or a
        ``tf_autoplace.outputs.progress.Progress`` (``SearchProgress(logdir=...)`` also writes
        the search curve as TensorBoard scalars).
      measure_steps: when > 0, also run the placed graph and the single-device baseline for
        this many timed steps on this machine (its devices must be the cluster's) and put the
        measured step times in the report (:func:`tf_autoplace.hw.measure.measure`); graphs only.
      measure_feeds: tensor name -> value for the measured steps; placeholders not given get
        made-up values of their static shape (:class:`tf_autoplace.hw.workload.Workload`).
      verify: when > 0 (at least 15), measure the placer's placement, the best fast
        heuristic's and the single-device one on this machine for this many timed steps each
        (interleaved rounds; median with a 95% interval) and apply the measured fastest; a
        placement not faster than the single-device one beyond noise is not applied
        (:mod:`tf_autoplace.hw.verify`). Without ``cost_model`` or ``cost_profile`` the op
        times are first profiled on these devices, so the search ranks its candidates by
        measured costs. The cluster must be this machine's devices; graphs only.

    Returns:
      A :class:`PlacementReport`; for a function, the placed callable
      (:class:`tf_autoplace.tf2.PlacedFunction`, called like the function, report in its
      ``.report``); for a Keras model, its :class:`tf_autoplace.keras.KerasPlacement`
      (reports in ``.reports`` once fit/evaluate/predict ran a batch).

    Raises:
      AutoplaceError: a subclass naming the problem; the graph is then left as it was.
        ``ConfigError``: settings out of range or that do not apply to this kind of input;
        ``ClusterSpecError``: a cluster that cannot be read or resolved;
        ``InvalidGraphError``: a graph that cannot be read or placed (a cycle, a device
        annotation that names no device of the cluster, an unsupported construct);
        ``InfeasiblePlacementError``: no placement that fits the devices' memory and kernels;
        ``MeasurementError``: a step that ``measure_steps`` or ``verify`` could not run.
    """
    # Settings that do not apply to the input are refused first: checking their range would
    # send the user to fix a value the input cannot take at all.
    is_model, is_function = keras.is_keras_model(graph), tf2.is_function(graph)
    if is_model:
        keras.refuse_measuring(verify, measure_steps, cost_profile, measure_feeds)
    elif is_function and verify:
        raise ConfigError("verify is for graphs (tf.Graph, GraphDef, MetaGraphDef): a "
                          "placed function is timed by calling it")
    elif is_function and measure_steps:
        raise ConfigError("measure_steps is for graphs: time a placed function by calling "
                          "it (placed(...)) or profile it with tf-autoplace profile")
    options = PlaceOptions.make(
        placer=placer, cluster=cluster, seed=seed, budget_s=budget_s, ray_address=ray_address,
        policy=policy, grouping=grouping, cost_model=cost_model, cost_profile=cost_profile,
        unknown_dim=1 if unknown_dim is None else unknown_dim, cache=cache, progress=progress,
        measure_steps=measure_steps, measure_feeds=measure_feeds, verify=verify)
    if is_model:
        return keras.place_model(graph, options, unknown_dim_given=unknown_dim is not None)
    if is_function:
        return tf2.place_function(graph, (), {}, options)[0]
    return engine.place_graph(graph, options)


@tf.autograph.experimental.do_not_convert
def place_cost_graph(cost_graph, cluster=None, placer=DEFAULT_PLACER, seed: int = 0, *,
                     grouping: GroupingConfig = GroupingConfig(), budget_s: float | None = None,
                     ray_address: str | None = None, policy=None, cache=False,
                     progress=True):
    """Choose a device for every op of a cost graph: a graph built or profiled anywhere, with
    its op times per device kind (``protos/cost_graph.proto``, :mod:`tf_autoplace.graph.costgraph`).

    Args:
      cost_graph: a :class:`tf_autoplace.graph.costgraph.CostGraph`, its
        ``tf_autoplace.CostGraph`` proto, or the path of one (``*.pbtxt``/``*.txt`` text,
        ``*.json`` JSON, else binary).
      cluster, placer, seed, grouping, budget_s, ray_address, policy, cache, progress: as for
        :func:`autoplace`.

    Returns:
      A :class:`PlacementReport` with the same figures as for a TF graph (step time, lower
      bounds, single-device baseline, per-device load and memory, timeline for
      ``write_chrome_trace`` / ``write_plot``); ``report.assignment`` (op name -> device) and
      ``report.to_proto()`` are the placement.

    Raises:
      AutoplaceError: a subclass naming the problem, as for :func:`autoplace`
        (``InvalidGraphError`` for a cost graph that cannot be read or is not a DAG).
    """
    return engine.place_cost_graph(cost_graph, PlaceOptions.make(
        placer=placer, cluster=cluster, seed=seed, budget_s=budget_s, ray_address=ray_address,
        policy=policy, grouping=grouping, cache=cache, progress=progress))


@tf.autograph.experimental.do_not_convert
def apply_placement(graph, placement, cluster=None, *,
                    grouping: GroupingConfig = GroupingConfig(),
                    cost_model: CostModel | None = None, unknown_dim: int = 1):
    """Write a saved placement into ``graph``, checked as any placement is, without searching.

    Args:
      graph: as for :func:`autoplace` (a ``tf.Graph`` is rewritten in place, atomically).
      placement: a ``PlacementResult`` (``report.to_proto()``), its serialized bytes, or its
        file, binary, text or JSON (``--placement_pb``).
      cluster: the cluster it was made for (as for :func:`autoplace`); every device it names
        must be there.
      grouping, cost_model, unknown_dim: as for :func:`autoplace` (they shape the report's
        figures and the placement of ops the file does not name).

    Ops are matched by position when the graph's fingerprint is the saved one (the same graph
    built again), else by name; ops the file does not name (the graph changed a little) are
    placed next to their neighbours, and the report's notes say how many
    (:class:`tf_autoplace.placers.SavedPlacement`).

    Returns:
      The :class:`PlacementReport` (for a function, the placed callable; for a Keras model,
      its ``KerasPlacement``), as :func:`autoplace` returns them.

    Raises:
      InvalidGraphError: the placement was made for another graph (saying what does not
        match), or ``graph`` cannot be read.
      InfeasiblePlacementError: the placement breaks colocation, kernels or memory on
        ``cluster`` (for example one made for a cluster with other devices).
      ConfigError, ClusterSpecError: ``placement`` or ``cluster`` cannot be read.
      Either way the graph is left as it was.
    """
    return autoplace(graph, cluster, placer=SavedPlacement(placement), grouping=grouping,
                     cost_model=cost_model, unknown_dim=unknown_dim, progress=False)
