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
(:func:`tf_autoplace.sim.lp_lower_bound`, its LP small enough to run on every call, and given
at most as long as the placement took or :data:`BOUND_FLOOR_S`, so that the report's bound
never costs far more than the placement on a long chain; a stopped solve still gives a
proven, weaker bound) and return the :class:`PlacementReport` with its timeline, the graph's
fingerprint (so the placement can be applied again) and a learned placer's fine-tuned policy.
It holds no algorithm, and checks no option: a door built the :class:`PlaceOptions` it reads
(:mod:`tf_autoplace.pipeline.options`).

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
from tensorflow.python.framework.func_graph import FuncGraph

from tf_autoplace.core.cluster import HOST_CORE_GROUP, Cluster, inter_op_threads
from tf_autoplace.core.limits import check_address_space
from tf_autoplace.core.tasks import LOOPBACK, same_device
from tf_autoplace.core.problem import (Placement, PlacementProblem, Placer, check_placement,
                                       validate)
from tf_autoplace.cost import AnalyticalCostModel
from tf_autoplace.cost.profile import ProfileCostModel
from tf_autoplace.errors import ClusterSpecError, ConfigError, InfeasiblePlacementError
from tf_autoplace.graph import costgraph, ingest, kernels
from tf_autoplace.graph.fingerprint import fingerprint
from tf_autoplace.graph.opgraph import KERNEL_KINDS
from tf_autoplace.graph.pins import PS_JOB, replica_shared_state
from tf_autoplace.heuristics import BestHeuristicPlacer, SingleDevicePlacer
from tf_autoplace.hw.cluster_profile import profile_cluster
from tf_autoplace.hw.link_fit import fit_core_group
from tf_autoplace.hw.measure import measure, runs_here
from tf_autoplace.hw.profiler import profile_ops, with_profiled_cores
from tf_autoplace.hw.protocol import load_average, load_text
from tf_autoplace.hw.runner import check_reachable, on_cluster
from tf_autoplace.hw.verify import ANNOTATED, SINGLE, Candidate, verify
from tf_autoplace.hw.workload import Workload
from tf_autoplace.learning.eager import policy_context
from tf_autoplace.learning.rollouts import available_cpus
from tf_autoplace.outputs.report import PlacementReport, device_loads
from tf_autoplace.outputs.timeline import TimelineData
from tf_autoplace.pipeline.cache import PlacementCache
from tf_autoplace.pipeline.options import PlaceOptions
from tf_autoplace.pipeline.prepare import build_problem, cost_graph_problem, speed_one_notes
from tf_autoplace.proto import cost_graph_pb2
from tf_autoplace.rewrite import (apply_to_graph, apply_to_graph_def, check_annotations,
                                  other_task, replaced_devices, sessions)
from tf_autoplace.sim import lp_lower_bound
from tf_autoplace.sim.lp_bound import DEFAULT_TIME_LIMIT_S as LP_TIME_LIMIT_S
from tf_autoplace.core.jit import interruptible


BOUND_FLOOR_S = 5.0  # the LP bound's time limit when the placement took less


def _cpus_here(cluster: Cluster) -> bool:
    """Whether ``cluster`` describes CPUs of this machine as they run a graph here: logical
    CPUs of this process (the host's core group, as ``"local"`` and ``cpu2`` give them), or a
    TensorFlow cluster whose tasks all serve on this host (loopback addresses, as
    ``local_cluster`` and ``serve-local`` start them). Analytical op times of such devices can
    be an order of magnitude or more from a real step, and a run here could measure them."""
    if cluster.target:
        return bool(cluster.tasks) and all(task.host == LOOPBACK for task in cluster.tasks)
    return any(d.core_group == HOST_CORE_GROUP for d in cluster.devices)


def _core_notes(cluster: Cluster) -> list[str]:
    """A note for each core group of this machine's CPU devices (a cluster of no servers) that
    has more cores than this process can run ops on at once: its CPU affinity (``taskset``)
    or a smaller inter-op pool (:func:`~tf_autoplace.core.cluster.inter_op_threads`). A spec
    may describe another machine, so this is a note, not an error; run here, the placement
    would get less concurrency than it was predicted with."""
    if cluster.target:
        return []
    threads = inter_op_threads()
    here = min(available_cpus(), threads) if threads else available_cpus()
    notes = []
    for name, cores in cluster.core_groups:
        members = [i for i, d in enumerate(cluster.devices) if d.core_group == name]
        if cores > here and runs_here(cluster.subset(members), local_gpus=0):
            notes.append(f"the cluster's core group {name!r} runs {cores} ops at once, but this "
                         f"process runs at most {here} (its CPU affinity and inter-op threads): "
                         "if the graph runs here, its step is predicted with concurrency it "
                         "will not get (cluster=\"local\" describes this process)")
    return notes


def profile_notes(profile: ProfileCostModel, path) -> list[str]:
    """What the report says of a cost profile that does not cover the graph exactly."""
    notes = []
    if profile.num_unprofiled_ops:
        counts = profile.unprofiled_counts
        kinds = "/".join(profile.unprofiled_kinds)
        # One count per kind: an op timed on the CPU but not on the GPUs is not "not in" it.
        notes.append((f"{profile.num_unprofiled_ops} ops are not in the cost profile "
                      f"{os.fspath(path)!r} for this cluster's {kinds} devices"
                      if len(counts) == 1 else
                      f"ops without a time in the cost profile {os.fspath(path)!r} on this "
                      f"cluster's devices: {', '.join(f'{c} on {k}' for k, c in counts.items())}")
                     + "; their times there are Grappler's analytical estimates"
                     + (", which on a CPU can be an order of magnitude or more from a real step "
                        "(for figures to trust, profile the whole graph as it runs)"
                        if "CPU" in profile.unprofiled_kinds else "")
                     + (f"; so the {'/'.join(profile.unprofiled_kinds)} op times are not "
                        "scaled to a measured step" if profile.profiled_steps else ""))
        unmeasured = [k for k in profile.unprofiled_kinds if k not in profile.profiled_kinds]
        if unmeasured and profile.profiled_kinds:
            kinds, measured = "/".join(unmeasured), "/".join(profile.profiled_kinds)
            notes.append(f"the cost profile times no op on {kinds} (it was measured on "
                         f"{measured}): comparisons between the {measured} and {kinds} "
                         "devices, the predicted speedup over one of them included, set "
                         f"measured times against estimates; profile on a machine with the "
                         f"cluster's {kinds}s for figures to trust")
    if profile.unstepped_kinds:  # (a profile written by hand, or from another tool's trace)
        kinds = "/".join(profile.unstepped_kinds)
        notes.append(f"the cost profile has no measured step (run) on {kinds}: its {kinds} op "
                     "times are their spans in traced steps, not scaled to an untraced step, "
                     "so predicted steps can be off by the factor such a calibration finds "
                     "(tf-autoplace profile records the step)")
    if profile.retyped:
        shown = ", ".join(f"{name!r} ({was} in the profile, {now} here)"
                          for name, was, now in profile.retyped[:3])
        notes.append(f"{len(profile.retyped)} ops have another type in the cost profile than "
                     f"in this graph ({shown}{' ...' if len(profile.retyped) > 3 else ''}); "
                     "their profiled times are another kernel's")
    if profile.num_unused_ran:  # (ops that did not run in the profiled step do not count)
        larger = [k for k in profile.unused_ran if k in profile.profiled_steps]
        notes.append(f"{profile.num_unused_ran} ops of the cost profile are not in this graph "
                     "and were ignored"
                     + (f"; {sum(profile.unused_ran[k] for k in larger)} of them ran in the "
                        f"profiled {'/'.join(larger)} step, so that run's measured step is "
                        f"another (larger) graph's, and this graph's {'/'.join(larger)} op "
                        "times are not scaled to it" if larger else ""))
    return notes


def _being_built(graph: FuncGraph) -> bool:
    """Whether ``graph`` is a tf.function's graph being traced in this thread: the default
    graph, or one it is nested in (a ``tf.cond`` branch's or an inner function's graph is
    the default while they are traced)."""
    inner = tf.compat.v1.get_default_graph()
    while inner is not None:
        if inner is graph:
            return True
        inner = getattr(inner, "outer_graph", None)
    return False


@interruptible
def place_graph(graph, options: PlaceOptions) -> PlacementReport:
    """Place a graph as ``options`` say.

    Args:
      graph: a ``tf.Graph`` (rewritten in place, atomically, once everything else succeeded)
        or a GraphDef, MetaGraphDef, serialized bytes or file path (left alone).
      options: how to place it, checked at the door.

    Returns:
      The PlacementReport; for a graph that is not a ``tf.Graph``, the placed copy is its
      ``graph_def``.

    Raises:
      KeyboardInterrupt: an interrupt, as such (never chained to numba's SystemError); a
        ``tf.Graph`` is left as it was.
      ConfigError: a ``tf.Graph`` that an open v1 Session has already run: TensorFlow fixed
        its devices there (:mod:`tf_autoplace.rewrite.sessions`).
      AutoplaceError: bad input, or no valid placement; a ``tf.Graph`` is left as it was.
    """
    check_address_space()  # before anything that maps memory no error can come out of
    notes = []
    if isinstance(graph, tf.Graph):
        if isinstance(graph, FuncGraph) and _being_built(graph):
            # A tf.function being traced: its graph is half built, and what comes after this
            # call would land unplaced.
            raise ConfigError(
                f"the graph given is a tf.function's being traced ({graph.name!r}): it is not "
                "built yet, so ops traced after this call would have no device; place the "
                "function instead, outside its trace (autoplace(fn) with an input_signature, "
                "or tf_autoplace.tf2.autoplace_function)")
        sessions.check_not_run(graph)
        unseen = len(sessions.unseen_sessions(graph))
        if unseen:
            notes.append(
                f"{unseen} open tf.compat.v1.Session(s) on this graph were created before "
                "tf_autoplace was imported: if one already ran the graph, TensorFlow keeps the "
                "devices it ran with in that session (check a step's "
                "RunMetadata.partition_graphs, or place before the first run)")
    placer, cluster, seed = options.placer, options.resolved_cluster(), options.seed
    cost_model, cost_profile = options.cost_model, options.cost_profile
    measure_steps = options.measure_steps
    local_gpus = len(tf.config.list_physical_devices("GPU"))  # (does not start the runtime)
    if (measure_steps or options.verify) and not cluster.target and not runs_here(
            cluster, local_gpus):
        raise ConfigError(
            f"{'verify' if options.verify else 'measure_steps'} runs placements on this "
            f"machine, and this machine does not have all of the cluster's devices "
            f"{cluster.names}: use cluster='local' (or Cluster.local(...)), a TensorFlow "
            "cluster with a target, or place without it")
    verifying = bool(options.verify) and cluster.num_devices > 1  # one device: nothing to choose
    if (measure_steps or verifying) and cluster.target:  # a server down: say so now
        check_reachable([task.address for task in cluster.tasks if task.address])
    timings: dict[str, float] = {}
    read = None
    if isinstance(graph, tf.Graph):  # read now: it keeps less memory through Grappler
        meta_graph, op_graph, properties = ingest.read_live_graph(
            graph, unknown_dim=options.unknown_dim, timings=timings)
        read = (op_graph, properties)
    else:
        meta_graph = ingest.load_meta_graph(graph)
    check_annotations(meta_graph.graph_def, cluster)  # written for another TF cluster?
    if cost_profile is not None:  # measured times; what the profile lacks is estimated
        cost_model = ProfileCostModel.from_file(cost_profile, fallback=AnalyticalCostModel(
            meta_graph, unknown_dim=options.unknown_dim))
    # What a step runs is found before anything is placed, so that a graph we could not time
    # is an error that leaves it untouched.
    workload = (Workload.from_graph(meta_graph, feeds=options.measure_feeds, seed=int(seed),
                                    live_graph=graph if isinstance(graph, tf.Graph) else None)
                if measure_steps or verifying or placer.needs_workload else None)
    profiled_here = verifying and cost_model is None
    if profiled_here:  # verified candidates are ranked by costs measured on these devices
        t, load_before = time.perf_counter(), load_average()
        if cluster.target:  # on the servers, each task alone (its speed against the target's)
            on_servers = profile_cluster(cluster, workload, links=False)
            profile, cluster = on_servers.profile, on_servers.cluster
        else:
            profile = profile_ops(workload)
        cost_model = ProfileCostModel.from_proto(profile, fallback=AnalyticalCostModel(
            meta_graph, unknown_dim=options.unknown_dim))
        # As tf-autoplace profile --out_cluster: the CPU core group runs as many ops at once
        # as the profiled process did, and a transfer between its devices costs what it
        # costs in this graph.
        cluster, _ = with_profiled_cores(cluster, profile)
        link_fit = None
        if not cluster.target:
            cluster, link_fit = fit_core_group(cluster, profile, meta_graph, workload,
                                               seed=int(seed))
        timings["profile"] = time.perf_counter() - t
        profile_load = load_text(load_before, load_average())
    problem, cost_model = build_problem(meta_graph, cluster, grouping=options.grouping,
                                        cost_model=cost_model,
                                        unknown_dim=options.unknown_dim, timings=timings,
                                        read=read)
    if placer.needs_workload:  # its reward comes from running placements here
        problem = dataclasses.replace(problem, workload=workload)
    estimated_here = cost_model.estimates and _cpus_here(cluster)
    if estimated_here and all(d.kind == "CPU" for d in cluster.devices):
        problem = dataclasses.replace(problem, estimated_here=True)
    if kernels.gpu_kernel_note() and any(d.kind == "GPU" for d in problem.cluster.devices):
        notes.append(kernels.gpu_kernel_note())
    notes += _core_notes(problem.cluster)
    if cost_profile is not None:
        notes += profile_notes(cost_model, cost_profile)
    if profiled_here:
        notes.append("op times were profiled "
                     + (f"on the servers at {cluster.target} (task "
                        f"{on_servers.reference}'s; the other tasks' devices run at their "
                        "measured speed against it)" if cluster.target
                        else "on this machine's devices")
                     + f" before the search (verify without a cost profile), at this machine's "
                     f"{profile_load}: the predicted step times below rest on these times"
                     + ("; measured times differ from run to run and are part of the placement "
                        "cache's key, so the cache serves this placement to no later run: give "
                        "a cost profile (tf-autoplace profile) to keep the key, or save the "
                        "placement" if options.cache else ""))
        if link_fit is not None:
            notes.append(f"the {link_fit.summary()}")
    for kind, factor in sorted(problem.time_scale.items()):
        notes.append(f"the profiled {kind} op times were scaled by {factor:.3g} so that the "
                     f"simulated single-device step equals the profiled run's measured step")
    fallback = getattr(cost_model, "num_fallback_ops", 0)
    if fallback:
        notes.append(f"{fallback} ops were not costed by Grappler; their time is a "
                     "memory-bandwidth estimate")
    unknown = int((~problem.graph.shape_known).sum())
    if unknown:
        notes.append(f"{unknown} ops have outputs of unknown size (counted with "
                     f"{options.unknown_dim} per unknown dimension): give the inputs static "
                     "shapes for better memory and transfer estimates")
    if options.verify and not verifying:
        annotations = {node.device for node in meta_graph.graph_def.node if node.device}
        lacking = sorted(d for d in annotations if not _names_some_device(cluster, d))
        notes.append("verify: the cluster has one device, so there is no placement to choose "
                     "between and none was measured"
                     + (f"; the graph's own device annotations name devices it lacks "
                        f"({', '.join(lacking[:3])}{' ...' if len(lacking) > 3 else ''}), so "
                        "they were not compared: give a cluster with them (for a Session "
                        "with device_count={'CPU': N}: Cluster.local(num_logical_cpus=N))"
                        if lacking else ""))
    if estimated_here:
        # What the user has not asked for yet: verify chooses nothing on one device.
        ways = [way for way, left in (("verify", cluster.num_devices > 1),
                                      ("measure_steps", not measure_steps)) if left]
        notes.append("op times are Grappler's analytical estimates, which on this machine's "
                     "CPU can be an order of magnitude or more from a real step: "
                     + (options.trust_advice or
                        (f"for figures to trust, measure them ({', '.join(ways)}) or "
                         if ways else "the measured step times in this report are this "
                         "machine's; for predictions to trust, ")
                        + "give a cost profile (tf-autoplace profile)"))
    report = place_problem(problem, options, timings=timings, notes=notes)
    if verifying:
        t = time.perf_counter()
        report = _verify(report, problem, workload, options,
                         annotated=annotated_placement(problem, meta_graph.graph_def))
        timings["verify"] = time.perf_counter() - t
    report = dataclasses.replace(report, notes=report.notes + _unchecked_split_notes(
        report, cluster, cost_model, options, checked=verifying or bool(measure_steps))
        + _annotation_notes(meta_graph.graph_def, report.assignment, problem.graph, cluster) + (
        _lacking_here(cluster, report.assignment, local_gpus)
        if isinstance(graph, tf.Graph) and not cluster.target else ()))
    if measure_steps:
        t = time.perf_counter()
        report = measure(report, workload, steps=int(measure_steps), seed=int(seed),
                         config=on_cluster(cluster))
        timings["measure"] = time.perf_counter() - t
        if report.verification is not None:  # two measurements of one placement: whose?
            report = dataclasses.replace(report, notes=report.notes + (
                "the measured step times are measure_steps' own sessions, run after "
                "verification's; the verification table's are from its sessions, and "
                "sessions of one placement can differ by more than their intervals",))

    t = time.perf_counter()  # last: any error above leaves a tf.Graph as it was
    placed_graph_def = None
    if isinstance(graph, tf.Graph):
        # Again: a session in another thread may have run the graph during the search.
        sessions.apply_unless_run(graph, lambda: apply_to_graph(graph, report.assignment))
    else:
        placed_graph_def = apply_to_graph_def(meta_graph.graph_def, report.assignment)
    timings["rewrite"] = time.perf_counter() - t
    return dataclasses.replace(report, graph_def=placed_graph_def)


@interruptible
def place_cost_graph(cost_graph, options: PlaceOptions) -> PlacementReport:
    """Place a cost graph as ``options`` say.

    Args:
      cost_graph: a :class:`~tf_autoplace.graph.costgraph.CostGraph`, its
        ``tf_autoplace.CostGraph`` proto, or the path of one in any of its forms.
      options: how to place it (no cost model, cost profile or measured steps: a cost graph
        carries its op times and is not run).

    Returns:
      The same report as for a TF graph, its ``assignment`` (op name -> device) the
      placement; ``graph_def`` is None.

    Raises:
      ConfigError: anything but a cost graph (TensorFlow's own ``CostGraphDef`` or
        ``RunMetadata`` among them: another format, named in the message), or options a cost
        graph cannot use.
      AutoplaceError: bad input, or no valid placement.
    """
    if options.cost_model is not None or options.cost_profile is not None:
        raise ConfigError("a cost graph carries its own op times; give it no cost_model or "
                          "cost_profile")
    if options.measure_steps:
        raise ConfigError("measure_steps runs a TensorFlow graph; a cost graph is placed "
                          "without it")
    cluster = options.resolved_cluster()
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
    problem = cost_graph_problem(cost_graph, cluster, grouping=options.grouping,
                                 timings=timings)
    notes = speed_one_notes(cost_graph, cluster)
    unknown = int((~problem.graph.shape_known).sum())
    if unknown:
        notes.append(f"{unknown} ops have output sizes the cost graph marks as estimates "
                     "(shape_unknown)")
    return place_problem(problem, options, timings=timings, notes=notes)


def place_problem(problem: PlacementProblem, options: PlaceOptions, *,
                  timings: dict | None = None, notes=()) -> PlacementReport:
    """Place a built problem and report on it: the placement (from the options' cache when it
    holds a valid one, else found outside the user's default graph, reporting to the options'
    progress, and stored in the cache), its simulated step and memory, the lower bounds, the
    single-device baseline and the timeline. ``timings`` (seconds per stage so far) gains
    ``place`` and ``bound``; ``notes`` follow the placer's own and the bound's."""
    timings = {} if timings is None else timings
    placer, seed, cache = options.placer, options.seed, options.cache
    cluster = problem.cluster
    graph_fingerprint = fingerprint(problem.graph)
    key = cache.key(problem, placer, int(seed), graph_fingerprint) if cache else None
    t = time.perf_counter()
    placement, cache_entry = (_from_cache(cache, key, problem, placer, graph_fingerprint)
                              if key else (None, ""))
    from_cache = placement is not None
    if not from_cache:
        with policy_context():  # nothing the placer runs lands in the user's graph
            placement = placer.place(problem, seed=int(seed), progress=options.progress)
    timings["place"] = time.perf_counter() - t

    baseline = SingleDevicePlacer().propose(problem)
    baseline_sim = problem.simulator.run(baseline)
    baseline_assignment = dict(zip(problem.graph.names, [cluster.names[d] for d in baseline]))

    t = time.perf_counter()
    bound = lp_lower_bound(problem.sim_graph, cluster, problem.fastest_op_time,
                           time_limit_s=min(LP_TIME_LIMIT_S, max(BOUND_FLOOR_S,
                                                                 timings["place"])))
    timings["bound"] = time.perf_counter() - t
    bound_notes = []
    if bound.status not in ("optimal", "not needed", "dominated"):  # the LP gave its all
        bound_notes.append(f"the LP lower bound's solve ended with '{bound.status}'; the bound "
                           "reported is the best of the proven ones it has")
    best_possible = bound.value_s
    if cluster.num_devices == 1:  # one placement exists: its step is the best possible
        best_possible = max(best_possible, float(placement.sim.makespan))
    report = PlacementReport(
        placer=placer.name, step_time_s=float(placement.sim.makespan),
        lower_bound_s=bound.simple_s, lp_lower_bound_s=best_possible,
        devices=device_loads(cluster, placement.devices, placement.sim),
        baseline_step_time_s=float(baseline_sim.makespan),
        baseline_devices=device_loads(cluster, baseline, baseline_sim),
        num_ops=problem.graph.num_ops, num_groups=problem.grouping.num_groups,
        num_colocation_groups=int(problem.graph.colocation.max()) + 1,
        ops_with_unknown_shapes=int((~problem.graph.shape_known).sum()), timings_s=timings,
        notes=tuple(placement.notes) + tuple(bound_notes) + tuple(notes), seed=int(seed),
        graph_fingerprint=graph_fingerprint, from_cache=from_cache, cache_entry=cache_entry,
        assignment=dict(zip(problem.graph.names, placement.device_names(cluster))),
        timeline=TimelineData(problem.graph, cluster, placement.devices, placement.sim),
        policy=None if from_cache else placement.trained_policy,
        baseline_assignment=baseline_assignment)
    if key and not from_cache:
        entry = report.to_proto()
        del entry.note[:]
        entry.note.extend(placement.notes)  # the search's own; the rest is said again
        cache.store(key, entry)
    return report


def _crossing(graph, devices: np.ndarray) -> int:
    """Tensors a placement sends between devices: (tensor, destination device) pairs whose
    producer is on another device, as TensorFlow makes one Send per pair."""
    producer = devices[graph.tensor_op[graph.edge_tensor]]
    consumer = devices[graph.edge_dst]
    cross = producer != consumer
    return len(set(zip(graph.edge_tensor[cross].tolist(), consumer[cross].tolist())))


def annotated_placement(problem: PlacementProblem, graph_def) -> np.ndarray | None:
    """The placement the graph's own device annotations give, as TensorFlow would run it
    before any placement: an op annotated with a device of the cluster on it, with its TF
    colocation group (the first annotated member's device), every other op where the
    single-device placement puts it. None when no op names a device of the cluster, or when
    that placement breaks a kernel, colocation or memory constraint (TF would not run it
    either, with soft placement off): then there is no placement of the user's to compare.
    """
    graph, cluster = problem.graph, problem.cluster
    index, found = {}, {}
    for node in graph_def.node:
        if not node.device:
            continue
        if node.device not in index:  # the cluster devices the annotation names, if any
            index[node.device] = _annotated_devices(cluster, node.device)
        candidates = index[node.device]
        if len(candidates) > 1:  # a task without a device (replica_device_setter's): TF takes
            try:                 # the first of them with a kernel for the op, GPUs first
                kinds = graph.kernels[graph.index(node.name)]
            except KeyError:  # a node the placed graph does not hold
                continue
            candidates = [d for d in candidates
                          if kinds[KERNEL_KINDS.index(cluster.devices[d].kind)]] or candidates
        if candidates:
            found[node.name] = candidates[0]
    if not found:
        return None
    devices = SingleDevicePlacer().propose(problem).astype(np.int32)
    coloc = graph.colocation
    group_device = {}
    for name, d in found.items():  # graph_def order: the first annotated member decides
        try:
            group_device.setdefault(int(coloc[graph.index(name)]), d)
        except KeyError:  # a node the placed graph does not hold
            continue
    if group_device:
        groups = np.fromiter(group_device, np.int64)
        lookup = np.full(int(coloc.max()) + 1, -1, np.int64)
        lookup[groups] = np.fromiter(group_device.values(), np.int64)
        annotated = lookup[coloc]
        devices = np.where(annotated >= 0, annotated, devices).astype(np.int32)
    if check_placement(problem, devices):
        return None
    sim = problem.simulator.run(devices)
    return None if (sim.peak_memory > cluster.memory).any() else devices


def _lacking_here(cluster: Cluster, assignment, local_gpus: int) -> tuple[str, ...]:
    """A note naming the devices ``assignment`` uses that a Session on this machine cannot
    make (none: no note). The doors that run what they place here (a tf.function, the flag
    door) refuse such a placement; a ``tf.Graph`` may be placed here and run elsewhere."""
    used = set(assignment.values())
    lacking = [name for i, name in enumerate(cluster.names)
               if name in used and not runs_here(cluster.subset([i]), local_gpus)]
    if not lacking:
        return ()
    return (f"this machine has {local_gpus or 'no'} GPU{'' if local_gpus == 1 else 's'} and "
            f"the placement uses devices it lacks ({', '.join(lacking[:3])}"
            f"{' ...' if len(lacking) > 3 else ''}): a Session here fails on their ops with "
            "soft placement off (allow_soft_placement=False, its default) and moves them to "
            "other devices with it on, so run the graph where the cluster's devices are",)


def _names_some_device(cluster: Cluster, device: str) -> bool:
    """Whether an annotation ``device`` may name a device of ``cluster``: the one it names, or
    any its partial or wildcard form (``/device:CPU:*``, as a sharded Saver writes) matches."""
    if _annotated_devices(cluster, device):
        return True
    try:
        spec = tf.DeviceSpec.from_string(device)
    except (ValueError, TypeError):
        return False
    return any(same_device(spec, tf.DeviceSpec.from_string(d.name)) for d in cluster.devices)


def _annotated_devices(cluster: Cluster, device: str) -> list[int]:
    """The devices of ``cluster`` TensorFlow may put an op annotated ``device`` on, in the
    order its placer prefers them: the one device it names; for an annotation that names a
    job or task but no device (``/job:ps/task:0``, as ``replica_device_setter`` writes them),
    that task's devices, GPUs first; none for a device the cluster lacks, an annotation that
    could be several named devices, or a string that is not a device."""
    try:
        return [cluster.index(device)]
    except ClusterSpecError:
        pass
    try:
        spec = tf.DeviceSpec.from_string(device)
    except (ValueError, TypeError):
        return []
    if spec.device_type is not None and spec.device_index is not None or spec.job is None:
        return []  # a named device the cluster lacks or cannot tell apart (index said why)
    matching = [i for i, d in enumerate(cluster.devices)
                if same_device(spec, tf.DeviceSpec.from_string(d.name))]
    return sorted(matching, key=lambda i: cluster.devices[i].kind != "GPU")


def verification_candidates(problem: PlacementProblem, name: str, devices: np.ndarray, *,
                            annotated: np.ndarray | None = None) -> list[Candidate]:
    """What verification measures against a placer's placement: that placement (``name``),
    the best fast heuristic's that fits, the placement the graph's own annotations give
    (``annotated``, :data:`ANNOTATED`: what the user had, when it differs from one device) and
    the single-device one, each once (a placement found twice keeps its first name, but the
    single-device one is always named :data:`~tf_autoplace.hw.verify.SINGLE` and the graph's
    own one :data:`ANNOTATED`, which the decision rule needs: a heuristic or placer that
    returns what the user had must not take from it the rule that keeps it on a tie).

    Args:
      problem: the placement problem (its simulator predicts each candidate's step).
      name: what the placer's placement is called in the measurement (the placer's name).
      devices: the placer's placement, a device index per op.
      annotated: :func:`annotated_placement`, or None.

    Returns:
      One to four :class:`~tf_autoplace.hw.verify.Candidate` s, the placer's first; one
      means every candidate was the single-device placement.
    """
    graph, names = problem.graph, problem.cluster.names
    single = SingleDevicePlacer().propose(problem)
    entries = [(name, np.asarray(devices, np.int32))]
    best = next((c for c in BestHeuristicPlacer().ranked(problem) if c.fits), None)
    if best is not None:
        entries.append((f"best heuristic ({best.label})", np.asarray(best.devices, np.int32)))
    if annotated is not None:
        entries.append((ANNOTATED, np.asarray(annotated, np.int32)))
    entries.append((SINGLE, single))
    candidates, seen = [], {}
    for label, placed in entries:
        key = placed.tobytes()
        if key in seen:  # the same placement twice: measured once, under its first name
            continue
        seen[key] = label
        candidates.append(Candidate(
            name=label, assignment=dict(zip(graph.names, (names[d] for d in placed.tolist()))),
            devices_used=int(np.unique(placed).size), crossing=_crossing(graph, placed),
            predicted_s=float(problem.simulator.run(placed).makespan)))
    fixed = [(SINGLE, single.tobytes())]
    if annotated is not None and np.asarray(annotated, np.int32).tobytes() != fixed[0][1]:
        fixed.append((ANNOTATED, np.asarray(annotated, np.int32).tobytes()))
    for label, key in fixed:  # found first under another name (the placer chose it)
        first = seen[key]
        candidates = [dataclasses.replace(c, name=label) if c.name == first else c
                      for c in candidates]
    return candidates


def _unchecked_split_notes(report: PlacementReport, cluster: Cluster, cost_model,
                          options: PlaceOptions, *, checked: bool) -> tuple[str, ...]:
    """The note on a split applied over this machine's CPUs (:func:`_cpus_here`) from
    measured op times (a profile) that no run has checked (``checked``: verify or
    measure_steps ran): the search's best split is the one its model is most optimistic
    about, so its predicted gain is the likeliest to be the model's error, and a run here
    could tell. (From estimates, ``auto`` applies no split there, and the estimates note
    says the rest.)"""
    if (checked or cost_model.estimates or not _cpus_here(cluster)
            or any(d.kind != "CPU" for d in cluster.devices)
            or len(set(report.assignment.values())) < 2):
        return ()
    return (f"the applied placement splits the graph over this machine's CPUs on a predicted "
            f"speedup ({report.speedup:.2f}x one device) that no run has checked: a search's "
            "best split is the one its model is most optimistic about, and may run no faster "
            "than one device; " + (options.trust_advice or
                                   "verify=N measures it beside one device and applies it "
                                   "only if faster beyond noise"),)


def _annotation_notes(graph_def, assignment, graph, cluster: Cluster) -> tuple[str, ...]:
    """Notes on the device annotations the graph had that the final placement replaced, and,
    apart, on variables it moved to another TensorFlow task than their annotation named when
    ``cluster`` is a TensorFlow cluster's tasks: a variable on a ``ps`` task is where other
    clients of the same servers look for it (between-graph replication), which the placement
    of one graph does not know. On a cluster without tasks (one process, a local Session)
    there are no servers nor other clients, and an annotation naming a job could not have run
    there as written: the first note says all there is."""
    shared = replica_shared_state(graph_def, sum(task.job != PS_JOB for task in cluster.tasks))
    kept = (f"{len(shared)} op(s) holding shared state (variables, and queues or accumulators "
            "if any) kept on the parameter-server tasks their annotations "
            f"name (e.g. {next(iter(shared))!r} on {next(iter(shared.values()))!r}): the graph "
            "may be one worker's replica of a between-graph replicated program (its other ops "
            "on one worker task of several, or on none), whose other workers look for them "
            "there",
            ) if shared else ()
    replaced = replaced_devices(graph_def, assignment)
    if not replaced:
        return kept
    name, asked, placed = replaced[0]
    notes = [*kept, f"the placement replaced {len(replaced)} device annotation(s) the graph "
             f"had (e.g. {name!r} asked for {asked!r} and is placed on {placed!r}): every op's "
             "device is the placer's choice, within kernel and colocation constraints"]
    stateful = {graph.names[i] for i in np.flatnonzero(graph.persistent_bytes > 0)}
    moved = [r for r in replaced if cluster.tasks and r[0] in stateful
             and other_task(r[1], r[2])]
    if moved:
        name, asked, placed = moved[0]
        notes.append(
            f"{len(moved)} variable(s) moved to another task than their annotation named (e.g. "
            f"{name!r} from {asked!r} to {placed!r}): another client of these servers that "
            "looks for them there (between-graph replication) will not find this graph's "
            "values: a placement is of one graph, so do not place the graphs of such a "
            "program")
    return tuple(notes)


def _verify(report: PlacementReport, problem: PlacementProblem, workload: Workload,
            options: PlaceOptions, *, annotated: np.ndarray | None = None) -> PlacementReport:
    """Measure the placer's placement, the best fast heuristic's, the graph's own annotated
    one (``annotated``) and the single-device one on this machine
    (:mod:`tf_autoplace.hw.verify`) and return the report of the one the decision rule
    applies, with what was measured and why."""
    cluster, graph = problem.cluster, problem.graph
    names = cluster.names
    chosen = np.array([names.index(report.assignment[n]) for n in graph.names], np.int32)
    candidates = verification_candidates(problem, report.placer, chosen, annotated=annotated)
    if len(candidates) == 1:
        return dataclasses.replace(report, notes=report.notes + (
            "verify: the placer, the best heuristic and the graph's own annotations all give "
            "the single-device placement; there was nothing to measure against it",))
    verification = verify(workload, candidates, steps=options.verify, seed=int(options.seed),
                          config=on_cluster(cluster))
    applied = next(c for c in candidates if c.name == verification.decision.applied)
    where = (f"the TensorFlow cluster at {cluster.target}" if cluster.target
             else "this machine")
    # Where another candidate than the placer's wins, the placer's notes above describe a
    # placement that is not applied ("applied the saved placement ..."): say it was replaced.
    instead = ("" if applied.assignment == report.assignment
               else f" in place of the {report.placer} placement the notes above describe")
    note = (f"verified on {where}: applied {applied.name}{instead}: "
            f"{verification.decision.reason}")
    # The applied placement and the single device were measured under the protocol: the
    # report's measured figures are theirs (the first set of sessions, where every candidate
    # ran), as measure_steps would give them.
    measured = verification.measured
    placed, single = measured[applied.name], measured[SINGLE]
    report = dataclasses.replace(
        report, measure_steps=measured.steps, measured_step_time_s=placed.median_s,
        measured_baseline_step_time_s=single.median_s,
        measured_step_interval_s=(placed.low_s, placed.high_s),
        measured_baseline_interval_s=(single.low_s, single.high_s),
        measure_load=(measured.load_before, measured.load_after))
    if applied.assignment == report.assignment:
        return dataclasses.replace(report, verification=verification,
                                   notes=report.notes + (note,))
    devices = np.array([names.index(applied.assignment[n]) for n in graph.names], np.int32)
    placement = validate(problem, devices, placer_name=f"the verified {applied.name} placement")
    return dataclasses.replace(
        report, step_time_s=float(placement.sim.makespan),
        devices=device_loads(cluster, devices, placement.sim),
        assignment=dict(applied.assignment), verification=verification,
        timeline=TimelineData(graph, cluster, devices, placement.sim),
        notes=report.notes + (note,))


def _from_cache(cache: PlacementCache, key: str, problem: PlacementProblem, placer: Placer,
                graph_fingerprint: str) -> tuple[Placement | None, str]:
    """The cached placement under ``key``, checked like any placement (colocation, kernels,
    memory), and its entry's path; (None, "") for no entry, or one that is not trusted (a
    warning says why). Its notes are the search's, as stored: the report says where it was
    read from, not the placement (``PlacementReport.cache_entry``)."""
    hit = cache.load(key, problem, graph_fingerprint)
    if hit is None:
        return None, ""
    try:
        return validate(problem, hit.devices, placer_name=f"the cached {placer.name} placement",
                        notes=hit.notes), hit.path
    except InfeasiblePlacementError as e:
        cache.reject(hit, str(e))
        return None, ""
