"""From a graph to a PlacementProblem: ingest -> cost -> group.

:func:`build_problem` is the first half of every TensorFlow door (``autoplace``, the TF2 and
SavedModel doors, the benchmark and the training-family builders): it reads a MetaGraphDef into
an OpGraph, costs every op on every device of the cluster, checks that the graph can be placed
at all, and groups it with Merge-and-Colocate. When the cost model measured how TensorFlow
runs the graph (a profile: which ops Grappler folded or fused away, which ops change kernel
apart from a partner), the problem carries that to its simulator (the executed graph,
:mod:`tf_autoplace.graph.executed`, and the partner times); with estimated costs it does
not. When it also measured the step those op times come from (a profile's untraced step, every
op on one device), the op times of that device kind are scaled so that the simulated
single-device step equals the measured one (:func:`calibrate`): traced op times run slower
than untraced steps, and a process runs a fractional number of ops at once where the
simulator's cores are whole; one measured point fixes the scale of both. :func:`cost_graph_problem` does the same for a
cost graph (:mod:`tf_autoplace.graph.costgraph`), whose op times come with it, and
:func:`export_cost_graph` turns a built problem into one, so a graph ingested and costed here
can be placed again, shared or inspected without TensorFlow.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import tensorflow as tf

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.core.units import format_bytes
from tf_autoplace.cost import AnalyticalCostModel, CostModel, PinnedCostModel, TableCostModel
from tf_autoplace.errors import ClusterSpecError, ConfigError, InfeasiblePlacementError
from tf_autoplace.graph import ingest
from tf_autoplace.graph.costgraph import CostGraph
from tf_autoplace.graph.executed import executed_graph
from tf_autoplace.graph.kernels import kernel_kinds
from tf_autoplace.graph.opgraph import OpGraph
from tf_autoplace.graph.pins import PS_JOB, device_pins, python_callers, replica_shared_state
from tf_autoplace.grouping import GroupingConfig, merge_and_colocate
from tf_autoplace.sim import Simulator

# The most calibration may scale a kind's op times by, either way. Traced op times run slower
# than the untraced step and the simulator's whole cores differ from a process's parallelism:
# factors near 1 on real profiles, an order of magnitude for a graph of one tiny op whose step
# is all Session overhead. A factor past this bound says the op times and the step do not belong
# together (a step from another run or graph, a unit slip, times lost to 0).
MAX_TIME_SCALE = 100.0


def build_problem(meta_graph, cluster: Cluster, *, grouping: GroupingConfig = GroupingConfig(),
                  cost_model: CostModel | None = None, unknown_dim: int = 1,
                  timings: dict | None = None, live_graph: bool = False,
                  read: tuple | None = None):
    """Ingest, cost and group a MetaGraphDef: returns ``(problem, cost_model)``.
    ``live_graph``: the MetaGraphDef is a live ``tf.Graph``'s
    (:func:`tf_autoplace.graph.ingest.read_graph`). ``read``: ``(graph, tensor_properties)``
    if the caller has already read ``meta_graph``
    (:func:`tf_autoplace.graph.ingest.read_live_graph`); its time is the caller's to record."""
    timings = {} if timings is None else timings
    if read is None:
        t = time.perf_counter()
        read = ingest.read_graph(meta_graph, unknown_dim=unknown_dim, live_graph=live_graph)
        timings["ingest"] = time.perf_counter() - t
    graph, tensor_properties = read
    cost_model = cost_model or AnalyticalCostModel(meta_graph,
                                                   tensor_properties=tensor_properties,
                                                   unknown_dim=unknown_dim)
    pins = _pins(meta_graph.graph_def, cluster)
    timed = PinnedCostModel(cost_model, pins) if pins else cost_model
    return _cost_and_group(graph, cluster, timed, grouping, timings), cost_model


def _pins(graph_def, cluster: Cluster) -> dict[str, str]:
    """Op name -> the cluster device it must stay on (:mod:`tf_autoplace.graph.pins`).

    Raises:
      ConfigError: the device is not one of the cluster's.
    """
    out = {}
    for name, (device, why) in device_pins(graph_def).items():
        try:
            out[name] = cluster.names[cluster.index(device)]
        except ClusterSpecError as e:
            raise ConfigError(f"op {name!r} must stay on {device!r} ({why}), and the cluster "
                              f"cannot hold it there: {e}; give a cluster with that device") \
                from e
    home = cluster.client_cpu()
    if home is not None:  # ops that call Python run only in the client's process
        for name in python_callers(graph_def):
            out.setdefault(name, home)
    others = sum(task.job != PS_JOB for task in cluster.tasks)
    shared = replica_shared_state(graph_def, others)
    if shared:
        nodes = {node.name: node for node in graph_def.node}
        for name, device in shared.items():
            out.setdefault(name, _task_device(cluster, device, kernel_kinds(nodes[name])))
    return out


def _task_device(cluster: Cluster, device: str, kinds) -> str:
    """The cluster device TensorFlow runs an op annotated ``device`` on: the device itself, or
    for a task without a device index (``/job:ps/task:0``, as ``replica_device_setter`` writes
    it; ``/job:ps/task:0/device:CPU:*``, as ``SyncReplicasOptimizer`` places its queue) the
    task's first GPU where the op has a GPU kernel (``kinds``: the device kinds with a kernel
    for it), else its first device of a kind in ``kinds``, else its first device; only devices
    of the annotation's type, if it names one.

    Raises:
      ConfigError: the cluster has no such device or task.
    """
    spec = tf.DeviceSpec.from_string(device)
    mine = [d for d, k in enumerate(cluster.device_tasks)
            if (cluster.tasks[k].job, cluster.tasks[k].index) == (spec.job, spec.task or 0)
            and spec.device_type in (None, cluster.devices[d].kind)]
    if spec.device_type and spec.device_index is not None:
        try:
            return cluster.names[cluster.index(device)]
        except ClusterSpecError as e:
            mine = []
            why = str(e)
    else:
        why = (f"no {spec.device_type + ' device on ' if spec.device_type else ''}task "
               f"{spec.job}:{spec.task or 0}")
    if not mine:
        raise ConfigError(f"an op holding state this replica shares with the other workers "
                          f"must stay on {device!r}, and the cluster has {why}; give the "
                          "cluster the program runs on")
    gpus = [d for d in mine if cluster.devices[d].kind == "GPU" and "GPU" in kinds]
    runs = [d for d in mine if cluster.devices[d].kind in kinds]
    return cluster.names[(gpus or runs or mine)[0]]


def cost_graph_problem(cost_graph: CostGraph, cluster: Cluster, *,
                       grouping: GroupingConfig = GroupingConfig(),
                       timings: dict | None = None) -> PlacementProblem:
    """Cost (with the cost graph's own times, :class:`TableCostModel`: measured times, or at
    speed 1 in a version 1 file; :mod:`tf_autoplace.graph.costgraph`) and group a cost
    graph."""
    timings = {} if timings is None else timings
    table = TableCostModel(cost_graph.times, relative_speeds=cost_graph.format_version >= 2)
    return _cost_and_group(cost_graph.graph, cluster, table, grouping, timings)


def speed_one_notes(cost_graph: CostGraph, cluster: Cluster) -> list[str]:
    """The note on a version 1 cost graph whose times ``cluster``'s absolute speeds divide
    (they were "at speed 1"; version 2 takes times as measured): which kinds, by how much."""
    if cost_graph.format_version >= 2:
        return []
    divided = sorted({(d.kind, d.speed) for d in cluster.devices
                      if d.speed != 1 and d.kind in cost_graph.times})
    if not divided:
        return []
    what = ", ".join(f"{kind} times by {speed:g}" for kind, speed in divided)
    return [f"the cost graph is format_version 1, whose times are at speed 1: the cluster's "
            f"speeds divided its {what}; for times measured on these devices, write "
            "format_version: 2 (times as measured)"]


def export_cost_graph(problem: PlacementProblem, description: str = "") -> CostGraph:
    """The cost graph of a built problem: its graph, and for each device kind of its cluster
    the op times on the kind's reference device (``op_time`` times the device's speed relative
    to it, so placing the cost graph on the same cluster gives ``op_time`` back, exactly when
    the relative speeds are powers of two, as they are 1 in the shipped clusters, else to
    rounding). A kind the cluster lacks gets no times, and the ops lose their kernels for it:
    the cost graph describes the graph as costed for this cluster.

    Raises:
      ConfigError: two devices of one kind have different times beyond their speeds
        (different hardware: a cost graph holds one time per kind); or the problem was costed
        from a profile that recorded what a cost graph cannot hold (ops TensorFlow folded or
        fused away, kernels that change with a partner op's device), so its export would
        simulate other step times than the problem."""
    graph, cluster = problem.graph, problem.cluster
    lost = [what for what, has in (
        ("ops TensorFlow folded or fused away (the executed graph)", problem.executed),
        ("kernels that change with a partner op's device", problem.partner)) if has is not None]
    if lost:
        raise ConfigError(f"this problem's cost profile records {' and '.join(lost)}, which "
                          "a cost graph cannot hold: its export would simulate other step "
                          "times; export the problem costed without the profile, or place "
                          "the TensorFlow graph with the profile")
    times = {kind: np.full(graph.num_ops, np.inf) for kind in graph.kernel_kinds}
    relative = cluster.relative_speeds()
    for kind in times:
        columns = [problem.op_time[:, d] * relative[d]
                   for d, device in enumerate(cluster.devices) if device.kind == kind]
        if any(not np.array_equal(c, columns[0]) for c in columns[1:]):
            raise ConfigError(f"the cluster's {kind} devices differ in op times beyond their "
                              "speeds; a cost graph holds one time per device kind")
        if columns:
            times[kind] = columns[0]
    kernels = np.stack([np.isfinite(times[kind]) for kind in graph.kernel_kinds], axis=1)
    return CostGraph(graph=dataclasses.replace(graph, kernels=kernels), times=times,
                     description=description)


def _cost_and_group(graph: OpGraph, cluster: Cluster, cost_model: CostModel,
                    grouping: GroupingConfig, timings: dict) -> PlacementProblem:
    """Check the graph fits at all, cost every op on every device, group: the problem."""
    _check_fits_at_all(graph, cluster)
    t = time.perf_counter()
    op_time = cost_model.op_time(graph, cluster)
    ran = cost_model.executed_ops(graph, cluster)
    executed = executed_graph(graph, ran) if ran is not None else None
    partner, partner_time = cost_model.partner_times(graph, cluster, op_time) or (None, None)
    timings["cost"] = time.perf_counter() - t
    unrunnable = ~np.isfinite(op_time).any(axis=1)
    if unrunnable.any():
        i = int(np.flatnonzero(unrunnable)[0])
        kinds = [k for k, ok in zip(graph.kernel_kinds, graph.kernels[i]) if ok]
        raise InfeasiblePlacementError(
            f"no device in the cluster can run op {graph.names[i]!r} ({graph.op_types[i]}); "
            f"its kernels are for {kinds}")
    op_time, partner_time, scale = calibrate(executed if executed is not None else graph,
                                             cluster, op_time, partner, partner_time,
                                             cost_model.measured_steps())

    t = time.perf_counter()
    groups = merge_and_colocate(graph, grouping)
    timings["group"] = time.perf_counter() - t
    return PlacementProblem(graph=graph, cluster=cluster, op_time=op_time, grouping=groups,
                            executed=executed, partner=partner, partner_time=partner_time,
                            time_scale=scale)


def calibrate(sim_graph: OpGraph, cluster: Cluster, op_time: np.ndarray,
              partner: np.ndarray | None, partner_time: np.ndarray | None,
              steps: dict[str, float]):
    """Scale each device kind's op times to the step they were measured in.

    For each kind in ``steps`` that the cluster has, the graph is simulated with every op on
    one device of that kind, as the profiled run placed it (the kind's
    :meth:`~tf_autoplace.core.cluster.Cluster.reference_device`), and the op times (and partner times) of all devices
    of that kind are multiplied by ``measured / simulated``.
    A kind some op cannot run on is left as it is: the profiled run then put those ops
    elsewhere, and the single-device step is not the run that was measured.
    A factor outside ``[1 / MAX_TIME_SCALE, MAX_TIME_SCALE]`` is a ConfigError: more than
    tracing and Session overhead explain, the profile's op times and its step disagree.

    Args:
      sim_graph: the graph the simulator runs (the executed graph when known).
      cluster: the devices.
      op_time: [n, D] seconds.
      partner, partner_time: as :class:`~tf_autoplace.core.problem.PlacementProblem`'s.
      steps: ``{device kind: measured single-device step in seconds}``
        (:meth:`~tf_autoplace.cost.model.CostModel.measured_steps`).

    Returns:
      ``(op_time, partner_time, {kind: factor})``: new arrays when a kind was scaled.
    """
    scale = {}
    for kind, step in sorted(steps.items()):
        ran = cluster.reference_device(kind)
        if ran is None:
            continue
        devices = [d for d, device in enumerate(cluster.devices) if device.kind == kind]
        if not np.isfinite(op_time[:, ran]).all():
            continue
        simulated = float(Simulator(sim_graph, cluster, op_time, partner=partner,
                                    partner_time=partner_time).makespan(
            np.full(sim_graph.num_ops, ran, np.int32)))
        factor = step / simulated if simulated > 0 else np.inf
        if not 1 / MAX_TIME_SCALE <= factor <= MAX_TIME_SCALE:
            raise ConfigError(
                f"the cost profile's {kind} op times simulate a single-device step of "
                f"{simulated * 1e3:.3g} ms and its measured {kind} step is {step * 1e3:.3g} ms: "
                f"calibration would scale the op times by {factor:.3g}, outside "
                f"[1/{MAX_TIME_SCALE:g}, {MAX_TIME_SCALE:g}], more than tracing overhead "
                "explains. The profile's op times and its step disagree (a step from another "
                "run or graph, or a unit error: compute_time_us and step_time_us are in "
                "microseconds); profile the graph again with tf-autoplace profile, or drop the "
                "profile's `run` entries to use the op times as they are")
        op_time = op_time.copy()
        op_time[:, devices] *= factor
        if partner_time is not None:
            partner_time = partner_time.copy()
            partner_time[:, devices] *= factor
        scale[kind] = factor
    return op_time, partner_time, scale


def _check_fits_at_all(graph, cluster: Cluster) -> None:
    # Python ints: a host given as "unlimited" (INT64_MAX bytes) must not wrap the sum.
    need = sum(int(b) for b in graph.persistent_bytes)
    have = sum(int(m) for m in cluster.memory)
    if need > have:
        raise InfeasiblePlacementError(
            f"the graph's variables need {format_bytes(need)} but the cluster's devices have "
            f"{format_bytes(have)} in all")
