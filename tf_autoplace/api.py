"""autoplace() and its siblings: wire ingest -> cost -> group -> place -> rewrite.

This module holds no algorithm; each step lives in its own package.
"""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np
import tensorflow as tf

from tf_autoplace.cluster import Cluster
from tf_autoplace.cost import AnalyticalCostModel, CostModel
from tf_autoplace.errors import ConfigError, InfeasiblePlacementError
from tf_autoplace.graph import ingest
from tf_autoplace.grouping import GroupingConfig, merge_and_colocate
from tf_autoplace.placers import PlacementProblem, SingleDevicePlacer, get_placer
from tf_autoplace.report import PlacementReport, device_loads
from tf_autoplace.rewrite import apply_to_graph, apply_to_graph_def
from tf_autoplace.sim import lower_bound
from tf_autoplace.timeline import TimelineData


def resolve_cluster(cluster) -> Cluster:
    """A Cluster from a Cluster, a spec file path, ``"local"`` or None (= local)."""
    if cluster is None or (isinstance(cluster, str) and cluster == "local"):
        return Cluster.local()
    if isinstance(cluster, Cluster):
        return cluster
    if isinstance(cluster, (str, os.PathLike)):
        return Cluster.from_file(cluster)
    raise ConfigError(f"cluster must be a Cluster, a spec file path or 'local', got "
                      f"{type(cluster).__name__}")


def build_problem(meta_graph, cluster: Cluster, *, grouping: GroupingConfig = GroupingConfig(),
                  cost_model: CostModel | None = None, unknown_dim: int = 1,
                  timings: dict | None = None):
    """Ingest, cost and group a MetaGraphDef: returns ``(problem, cost_model)``."""
    timings = {} if timings is None else timings
    t = time.perf_counter()
    graph = ingest.to_opgraph(meta_graph, unknown_dim=unknown_dim)
    timings["ingest"] = time.perf_counter() - t
    _check_fits_at_all(graph, cluster)

    t = time.perf_counter()
    cost_model = cost_model or AnalyticalCostModel(meta_graph)
    op_time = cost_model.op_time(graph, cluster)
    timings["cost"] = time.perf_counter() - t
    unrunnable = ~np.isfinite(op_time).any(axis=1)
    if unrunnable.any():
        i = int(np.flatnonzero(unrunnable)[0])
        raise InfeasiblePlacementError(
            f"no device in the cluster can run op {graph.names[i]!r} ({graph.op_types[i]}); "
            f"its kernels are for {[k for k, ok in zip(graph.kernel_kinds, graph.kernels[i]) if ok]}")

    t = time.perf_counter()
    groups = merge_and_colocate(graph, grouping)
    timings["group"] = time.perf_counter() - t
    return PlacementProblem(graph=graph, cluster=cluster, op_time=op_time,
                            grouping=groups), cost_model


def _check_fits_at_all(graph, cluster: Cluster) -> None:
    need, have = int(graph.persistent_bytes.sum()), int(cluster.memory.sum())
    if need > have:
        raise InfeasiblePlacementError(
            f"the graph's variables need {need / 1e9:.2f} GB but the cluster's devices have "
            f"{have / 1e9:.2f} GB in all")


@contextlib.contextmanager
def outside_user_graph():
    """Run placement outside whatever graph is the default: inside ``with graph.as_default()``
    or ``with Session(...)`` a placer that runs TF ops (a learned policy) would otherwise add
    them to the graph being placed. Placement sees a throwaway default graph, and eager execution
    when the program has it (a TF1 program that disabled eager keeps graph mode)."""
    from tensorflow.python.eager import context

    with tf.Graph().as_default():
        if context.default_execution_mode == context.EAGER_MODE:
            with context.eager_mode():
                yield
        else:
            yield


def autoplace(graph, cluster=None, placer="placeto", seed: int = 0, *,
              grouping: GroupingConfig = GroupingConfig(), cost_model: CostModel | None = None,
              unknown_dim: int = 1, budget_s: float | None = None):
    """Choose a device for every op of ``graph`` and write it into the graph.

    Args:
      graph: a ``tf.Graph`` (rewritten in place), or a GraphDef, MetaGraphDef, serialized bytes
        or file path (left alone; the placed copy is returned as ``report.graph_def``), or a
        ``tf.function`` with an ``input_signature`` / a ConcreteFunction (left alone; see
        Returns and :func:`tf_autoplace.tf2.autoplace_function`).
      cluster: a :class:`Cluster`, the path of a text ``ClusterSpec``, or ``"local"``/None for
        this machine's devices.
      placer: a registered placer name (``tf_autoplace.placers.PLACERS``) or a Placer. The
        default, ``placeto``, runs the shipped policy zero-shot, fine-tunes it on this graph and
        falls back to the best fast heuristic when that simulates faster.
      seed: makes the placement reproducible.
      grouping: Merge-and-Colocate settings.
      cost_model: defaults to Grappler's analytical costs.
      unknown_dim: elements assumed for a dimension whose size is unknown.
      budget_s: wall-time cap in seconds for placers that search (``placeto``; its default
        budget is a sample count, which keeps results reproducible; a time cap that cuts the
        search short makes them depend on the machine's speed).

    Returns:
      A :class:`PlacementReport`; for a function, the placed callable
      (:class:`tf_autoplace.tf2.PlacedFunction`, called like the function, report in its
      ``.report``). Raises an :class:`AutoplaceError` subclass on bad input or when no valid
      placement is found; the graph is then left as it was.
    """
    from tf_autoplace import tf2  # the TF2 door; imports this module, hence here

    if budget_s is not None and not (isinstance(budget_s, (int, float)) and budget_s > 0):
        raise ConfigError(f"budget_s must be a number > 0, got {budget_s!r}")
    placer = get_placer(placer, budget_s=budget_s)
    if tf2.is_function(graph):
        return tf2.autoplace_function(graph, cluster=cluster, placer=placer, seed=seed,
                                      grouping=grouping, cost_model=cost_model,
                                      unknown_dim=unknown_dim)[0]
    if not isinstance(seed, (int, np.integer)):
        raise ConfigError(f"seed must be an int, got {seed!r}")
    cluster = resolve_cluster(cluster)
    timings: dict[str, float] = {}
    meta_graph = ingest.load_meta_graph(graph)
    problem, cost_model = build_problem(meta_graph, cluster, grouping=grouping,
                                        cost_model=cost_model, unknown_dim=unknown_dim,
                                        timings=timings)

    t = time.perf_counter()
    with outside_user_graph():
        placement = placer.place(problem, seed=int(seed))
    timings["place"] = time.perf_counter() - t

    baseline = SingleDevicePlacer().propose(problem)
    baseline_sim = problem.simulator.run(baseline)
    assignment = dict(zip(problem.graph.names, placement.device_names(cluster)))

    t = time.perf_counter()
    placed_graph_def = None
    if isinstance(graph, tf.Graph):
        apply_to_graph(graph, assignment)
    else:
        placed_graph_def = apply_to_graph_def(meta_graph.graph_def, assignment)
    timings["rewrite"] = time.perf_counter() - t

    notes = list(placement.notes)
    fallback = getattr(cost_model, "num_fallback_ops", 0)
    if fallback:
        notes.append(f"{fallback} ops were not costed by Grappler; their time is a "
                     "memory-bandwidth estimate")
    unknown = int((~problem.graph.shape_known).sum())
    if unknown:
        notes.append(f"{unknown} ops have outputs of unknown size (counted with "
                     f"{unknown_dim} per unknown dimension): give the inputs static shapes "
                     "for better memory and transfer estimates")
    report = PlacementReport(
        placer=placer.name, step_time_s=float(placement.sim.makespan),
        lower_bound_s=lower_bound(problem.graph, cluster, problem.op_time),
        devices=device_loads(cluster, placement.devices, placement.sim),
        baseline_step_time_s=float(baseline_sim.makespan),
        baseline_devices=device_loads(cluster, baseline, baseline_sim),
        num_ops=problem.graph.num_ops, num_groups=problem.grouping.num_groups,
        num_colocation_groups=int(problem.graph.colocation.max()) + 1,
        ops_with_unknown_shapes=unknown, timings_s=timings, notes=tuple(notes),
        seed=int(seed), assignment=assignment, graph_def=placed_graph_def,
        timeline=TimelineData(problem.graph, cluster, placement.devices, placement.sim))
    return report
