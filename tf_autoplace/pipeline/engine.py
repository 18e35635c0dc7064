"""The pass on one graph: prepare the problem, place it, report, rewrite.

:func:`place_graph` is what :func:`tf_autoplace.autoplace` runs for a graph (and the TF2 and
SavedModel doors run for the graph of a function): build the problem
(:mod:`tf_autoplace.pipeline.prepare`), place it and report (:func:`place_problem`), then write the
devices (a ``tf.Graph`` in place, atomically; otherwise a placed GraphDef copy).
:func:`place_cost_graph` is the same pass for a cost graph (:mod:`tf_autoplace.graph.costgraph`),
which has nothing to rewrite: its report's ``assignment`` is the placement.

:func:`place_problem` is the part they share: take the placement from the placement cache
when it has one for this graph, cluster, placer and seed (checked like any placement;
:mod:`tf_autoplace.pipeline.cache`), else run the placer outside the user's default graph, its search
reporting to the progress reporter (:mod:`tf_autoplace.outputs.progress`), and store the result in the
cache; simulate the single-device baseline, compute the lower bounds
(:func:`tf_autoplace.sim.lp_lower_bound`, its LP small enough to run on every call and capped by
HiGHS's time limit) and return the :class:`PlacementReport` with its timeline, the graph's
fingerprint (so the placement can be applied again) and a learned placer's fine-tuned policy.
It holds no algorithm.

With ``measure_steps``, :func:`place_graph` then times the placed graph and the single-device
baseline on this machine, or on the servers of a cluster of TensorFlow tasks (its ``target``;
:func:`tf_autoplace.hw.measure.measure`), before it rewrites a ``tf.Graph``, so a graph that
cannot be timed is left as it was.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
import tensorflow as tf

from tf_autoplace.core.cluster import resolve_cluster
from tf_autoplace.core.problem import Placement, PlacementProblem, Placer, validate
from tf_autoplace.cost import AnalyticalCostModel, CostModel
from tf_autoplace.cost.profile import ProfileCostModel
from tf_autoplace.errors import ConfigError, InfeasiblePlacementError
from tf_autoplace.graph import costgraph, ingest, kernels
from tf_autoplace.graph.fingerprint import fingerprint
from tf_autoplace.grouping import GroupingConfig
from tf_autoplace.heuristics import SingleDevicePlacer
from tf_autoplace.hw.measure import measure
from tf_autoplace.hw.runner import RunConfig
from tf_autoplace.hw.workload import Workload
from tf_autoplace.learning.eager import policy_context
from tf_autoplace.outputs.progress import as_progress
from tf_autoplace.outputs.report import PlacementReport, device_loads
from tf_autoplace.outputs.timeline import TimelineData
from tf_autoplace.pipeline.cache import PlacementCache, as_cache
from tf_autoplace.pipeline.prepare import build_problem, cost_graph_problem
from tf_autoplace.placers import DEFAULT_PLACER, get_placer
from tf_autoplace.proto import cost_graph_pb2
from tf_autoplace.rewrite import (apply_to_graph, apply_to_graph_def, check_annotations,
                                  replaced_devices)
from tf_autoplace.sim import lp_lower_bound

MAX_SEED = 2**63 - 1  # a PlacementResult's seed is an int64


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_arguments(*, seed, grouping, cost_model=None, unknown_dim=1, cache=None,
                    progress=None, cost_profile=None) -> None:
    """Raise ConfigError for an option of :func:`tf_autoplace.autoplace` that is out of range or
    of the wrong type, before any work (each door calls it first)."""
    as_cache(cache)  # each raises ConfigError for a value it does not take; neither touches disk
    as_progress(progress)
    if not (_is_int(seed) and 0 <= seed <= MAX_SEED):
        raise ConfigError(f"seed must be an int in [0, 2**63 - 1], got {seed!r}")
    if not isinstance(grouping, GroupingConfig):
        raise ConfigError(f"grouping must be a GroupingConfig, got {grouping!r}")
    if cost_model is not None and not isinstance(cost_model, CostModel):
        raise ConfigError(f"cost_model must be None (Grappler's analytical costs) or a "
                          f"tf_autoplace.cost.CostModel, got {cost_model!r}")
    if cost_profile is not None and not isinstance(cost_profile, (str, os.PathLike)):
        raise ConfigError(f"cost_profile must be the path of a CostProfile file, got "
                          f"{cost_profile!r}")
    if cost_profile is not None and cost_model is not None:
        raise ConfigError("give cost_model or cost_profile, not both")
    if not (_is_int(unknown_dim) and unknown_dim >= 1):
        raise ConfigError(f"unknown_dim must be an int >= 1, got {unknown_dim!r}")


def _profile_notes(profile: ProfileCostModel, path) -> list[str]:
    """What the report says of a cost profile that does not cover the graph exactly."""
    notes = []
    if profile.num_unprofiled_ops:
        notes.append(f"{profile.num_unprofiled_ops} ops are not in the cost profile "
                     f"{os.fspath(path)!r}; their times are Grappler's analytical estimates")
    if profile.num_unused:
        notes.append(f"{profile.num_unused} ops of the cost profile are not in this graph "
                     "and were ignored")
    return notes


def place_graph(graph, cluster=None, placer=DEFAULT_PLACER, seed: int = 0, *,
                grouping: GroupingConfig = GroupingConfig(), cost_model: CostModel | None = None,
                cost_profile: str | os.PathLike | None = None, unknown_dim: int = 1,
                cache=None, progress=None, measure_steps: int = 0,
                measure_feeds: dict | None = None) -> PlacementReport:
    """Place a ``tf.Graph`` (rewritten in place) or a GraphDef, MetaGraphDef, serialized bytes
    or file path (left alone; the placed copy is ``report.graph_def``); the arguments are
    :func:`tf_autoplace.autoplace`'s, ``placer`` a registered name or a Placer (``cache`` and
    ``progress`` None: none)."""
    placer, cluster = _check(placer, cluster, seed=seed, grouping=grouping,
                             cost_model=cost_model, cost_profile=cost_profile,
                             unknown_dim=unknown_dim, cache=cache, progress=progress)
    cache, progress = as_cache(cache), as_progress(progress)
    if not (_is_int(measure_steps) and measure_steps >= 0):
        raise ConfigError(f"measure_steps must be an int >= 0, got {measure_steps!r}")
    timings: dict[str, float] = {}
    meta_graph = ingest.load_meta_graph(graph)
    check_annotations(meta_graph.graph_def, cluster)  # written for another TF cluster?
    if cost_profile is not None:  # measured times; what the profile lacks is estimated
        cost_model = ProfileCostModel.from_file(cost_profile,
                                                fallback=AnalyticalCostModel(meta_graph))
    # What a step runs is found before anything is placed, so that a graph we could not time
    # is an error that leaves it untouched.
    workload = (Workload.from_graph(meta_graph, feeds=measure_feeds, seed=int(seed))
                if measure_steps or placer.needs_workload else None)
    problem, cost_model = build_problem(meta_graph, cluster, grouping=grouping,
                                        cost_model=cost_model, unknown_dim=unknown_dim,
                                        timings=timings)
    if placer.needs_workload:  # its reward comes from running placements here
        problem = dataclasses.replace(problem, workload=workload)
    notes = []
    if kernels.gpu_kernel_note() and any(d.kind == "GPU" for d in problem.cluster.devices):
        notes.append(kernels.gpu_kernel_note())
    if cost_profile is not None:
        notes += _profile_notes(cost_model, cost_profile)
    fallback = getattr(cost_model, "num_fallback_ops", 0)
    if fallback:
        notes.append(f"{fallback} ops were not costed by Grappler; their time is a "
                     "memory-bandwidth estimate")
    unknown = int((~problem.graph.shape_known).sum())
    if unknown:
        notes.append(f"{unknown} ops have outputs of unknown size (counted with "
                     f"{unknown_dim} per unknown dimension): give the inputs static shapes "
                     "for better memory and transfer estimates")
    report = place_problem(problem, placer, seed, timings=timings, notes=notes, cache=cache,
                           progress=progress)
    replaced = replaced_devices(meta_graph.graph_def, report.assignment)
    if replaced:
        name, asked, placed = replaced[0]
        report = dataclasses.replace(report, notes=report.notes + (
            f"the placement replaced {len(replaced)} device annotation(s) the graph had (e.g. "
            f"{name!r} asked for {asked!r} and is placed on {placed!r}): every op's device is "
            "the placer's choice, within kernel and colocation constraints",))
    if measure_steps:
        t = time.perf_counter()
        report = measure(report, workload, steps=int(measure_steps),
                         config=RunConfig(target=cluster.target))
        timings["measure"] = time.perf_counter() - t

    t = time.perf_counter()  # last: any error above leaves a tf.Graph as it was
    placed_graph_def = None
    if isinstance(graph, tf.Graph):
        apply_to_graph(graph, report.assignment)
    else:
        placed_graph_def = apply_to_graph_def(meta_graph.graph_def, report.assignment)
    timings["rewrite"] = time.perf_counter() - t
    return dataclasses.replace(report, graph_def=placed_graph_def)


def place_cost_graph(cost_graph, cluster=None, placer=DEFAULT_PLACER, seed: int = 0, *,
                     grouping: GroupingConfig = GroupingConfig(), cache=None,
                     progress=None) -> PlacementReport:
    """Place a cost graph (a :class:`~tf_autoplace.graph.costgraph.CostGraph`, its
    ``tf_autoplace.CostGraph`` proto, or the path of one in any of its forms); the other
    arguments are :func:`tf_autoplace.autoplace`'s. Returns the same report as for a TF graph,
    its ``assignment`` (op name -> device) the placement; ``graph_def`` is None. Anything else
    (TensorFlow's own ``CostGraphDef`` or ``RunMetadata`` among them: another format) is a
    ConfigError naming its type."""
    placer, cluster = _check(placer, cluster, seed=seed, grouping=grouping, cache=cache,
                             progress=progress)
    cache, progress = as_cache(cache), as_progress(progress)
    timings: dict[str, float] = {}
    if not isinstance(cost_graph, costgraph.CostGraph):
        t = time.perf_counter()
        if isinstance(cost_graph, cost_graph_pb2.CostGraph):
            cost_graph = costgraph.from_proto(cost_graph)
        elif isinstance(cost_graph, (str, bytes, os.PathLike)):
            cost_graph = costgraph.read(cost_graph)
        else:
            raise ConfigError(
                "cost_graph must be a CostGraph, a tf_autoplace.CostGraph proto "
                "(protos/cost_graph.proto) or the path of one, got a "
                f"{type(cost_graph).__module__}.{type(cost_graph).__qualname__}")
        timings["read"] = time.perf_counter() - t
    problem = cost_graph_problem(cost_graph, cluster, grouping=grouping, timings=timings)
    notes = []
    unknown = int((~problem.graph.shape_known).sum())
    if unknown:
        notes.append(f"{unknown} ops have output sizes the cost graph marks as estimates "
                     "(shape_unknown)")
    return place_problem(problem, placer, seed, timings=timings, notes=notes, cache=cache,
                         progress=progress)


def place_problem(problem: PlacementProblem, placer: Placer, seed: int, *,
                  timings: dict | None = None, notes=(), cache: PlacementCache | None = None,
                  progress=None) -> PlacementReport:
    """Place a built problem and report on it: the placement (from ``cache`` when it holds a
    valid one, else found outside the user's default graph, reporting to ``progress``, and
    stored in ``cache``), its simulated step and memory, the lower bounds, the single-device
    baseline and the timeline. ``timings`` (seconds per stage so far) gains ``place`` and
    ``bound``; ``notes`` follow the placer's own and the bound's."""
    timings = {} if timings is None else timings
    cluster = problem.cluster
    graph_fingerprint = fingerprint(problem.graph)
    key = cache.key(problem, placer, int(seed), graph_fingerprint) if cache else None
    t = time.perf_counter()
    placement = _from_cache(cache, key, problem, placer, graph_fingerprint) if key else None
    from_cache = placement is not None
    if not from_cache:
        with policy_context():  # nothing the placer runs lands in the user's graph
            placement = placer.place(problem, seed=int(seed), progress=as_progress(progress))
    timings["place"] = time.perf_counter() - t

    baseline = SingleDevicePlacer().propose(problem)
    baseline_sim = problem.simulator.run(baseline)
    baseline_assignment = dict(zip(problem.graph.names, [cluster.names[d] for d in baseline]))

    t = time.perf_counter()
    bound = lp_lower_bound(problem.graph, cluster, problem.op_time)
    timings["bound"] = time.perf_counter() - t
    bound_notes = []
    if bound.status not in ("optimal", "not needed"):  # "not needed": nothing to solve
        bound_notes.append(f"the LP lower bound's solve ended with '{bound.status}'; the bound "
                           "reported is the best of the proven ones it has")
    report = PlacementReport(
        placer=placer.name, step_time_s=float(placement.sim.makespan),
        lower_bound_s=bound.simple_s, lp_lower_bound_s=bound.value_s,
        devices=device_loads(cluster, placement.devices, placement.sim),
        baseline_step_time_s=float(baseline_sim.makespan),
        baseline_devices=device_loads(cluster, baseline, baseline_sim),
        num_ops=problem.graph.num_ops, num_groups=problem.grouping.num_groups,
        num_colocation_groups=int(problem.graph.colocation.max()) + 1,
        ops_with_unknown_shapes=int((~problem.graph.shape_known).sum()), timings_s=timings,
        notes=tuple(placement.notes) + tuple(bound_notes) + tuple(notes), seed=int(seed),
        graph_fingerprint=graph_fingerprint, from_cache=from_cache,
        assignment=dict(zip(problem.graph.names, placement.device_names(cluster))),
        timeline=TimelineData(problem.graph, cluster, placement.devices, placement.sim),
        policy=None if from_cache else placer.trained_policy,
        baseline_assignment=baseline_assignment)
    if key and not from_cache:
        entry = report.to_proto()
        del entry.note[:]
        entry.note.extend(placement.notes)  # the search's own; the rest is said again
        cache.store(key, entry)
    return report


def _check(placer, cluster, **options):
    """The placer (a name or a Placer) and the cluster (any form resolve_cluster takes),
    checked with the other ``options`` (:func:`check_arguments`) before any work."""
    check_arguments(**options)
    return get_placer(placer), resolve_cluster(cluster)


def _from_cache(cache: PlacementCache, key: str, problem: PlacementProblem, placer: Placer,
                graph_fingerprint: str) -> Placement | None:
    """The cached placement under ``key``, checked like any placement (colocation, kernels,
    memory), or None: no entry, or one that is not trusted (a warning says why)."""
    hit = cache.load(key, problem, graph_fingerprint)
    if hit is None:
        return None
    note = (f"read from the placement cache ({hit.path}), where {hit.placer} with seed "
            f"{hit.seed} stored it: nothing was searched")
    try:
        return validate(problem, hit.devices, placer_name=f"the cached {placer.name} placement",
                        notes=hit.notes + (note,))
    except InfeasiblePlacementError as e:
        cache.reject(hit, str(e))
        return None
