"""Per-op times measured on this machine's devices, as a ``CostProfile``
(``protos/cost_profile.proto``).

:func:`profile_ops` runs a workload with every op on the first device of each kind this machine
has ("CPU"; "GPU" when there is one), traces ``trace_steps`` steps, and writes for every op of
the graph and every kind the median over those steps of the op's time on that kind:

* **CPU**: the span of the op's execution in the step stats, from the executor picking it up
  to its outputs being handed on (``all_start`` to ``all_end``), so the executor's per-op work
  is in it, as the simulator's op time wants (the cluster's ``op_overhead_s`` is not added to a
  profile).
* **GPU**: the time of the op's kernels on the GPU's streams (the ``stream:all`` lane when the
  tracer gives one, else every ``stream:`` lane), or the op's span on the GPU device lane when
  it ran no kernel (ops on host memory). The GPU run allows soft placement, as TF needs for ops
  without a GPU kernel; those run on the CPU and get no GPU time.
* **ops that did not execute** in any traced step of a kind's run: outside the fan-in of the
  step (initializers), or folded into constants or fused into another op by the session's
  Grappler passes. They cost nothing in a real step, so their time is 0, not missing, and
  they are marked ``did_not_run`` (the simulator then runs the graph TensorFlow executes,
  :mod:`tf_autoplace.graph.executed`); an op that ran on another kind's device in that run is
  left out for the kind (no time is known).

An op that runs more than once in a step (inside a while loop) gets the sum of its executions.
A node Grappler's arithmetic optimizer rewrote under a new name (``scope/ArithmeticOptimizer/
FoldTransposeIntoMatMul_MatMul_2``, a BatchMatMul with a Transpose folded into it) is the op
it came from (``scope/MatMul_2``, :func:`grappler_origin`). A functional loop, conditional or
call (``While`` of ``tf.compat.v1.nn.dynamic_rnn``, ``If``, ``PartitionedCall``) runs as nodes
named under it (``rnn/while/body/_1/add``) and may not appear itself: it gets the time its
nodes ran, overlaps counted once (:func:`body_ops`). Other nodes the runtime adds
(Send/Recv, Grappler's new constants) are not graph ops and are not written; the description
counts them with the rest.

Each kind's run also records its untraced step and its median traced step (``DeviceRun``).
The untraced step calibrates every op time (:func:`tf_autoplace.pipeline.prepare.calibrate`),
so it is measured as placements are (:func:`tf_autoplace.hw.runner.run_interleaved`):
:data:`STEP_SESSIONS` Sessions of the single-device placement, stepped in interleaved rounds,
and the median of their medians. On a shared machine one Session's median moves by a fifth
from one Session to the next (more on steps of a millisecond or two), and Sessions run one
after another also see the machine at different moments. In the traced step, the sum of the
ops' times over the traced step they were measured in is how
many ops the process ran at once (:func:`parallelism`), which ``tf-autoplace profile`` writes
into the cluster's core group. The traced step, not the untraced one: on a shared machine the
load changes between the untraced and the traced steps, and a ratio across them swings with
it, while the ratio within the traced steps holds.

**Partners** (lost rewrites). Some kernels exist only when two ops share a device: oneDNN's
MaxPoolGrad reads a workspace its MaxPool writes when both run in one partition, and without
it runs a much slower kernel. The candidates are the ops whose type is another op type with
``Grad`` in it, reading an output of an op of that type (MaxPoolGrad of a MaxPool,
FusedBatchNormGradV3 of a FusedBatchNormV3, LRNGrad of an LRN), that TF colocation lets be
apart. When the kind has a second device (a second logical CPU; a second GPU), a calibration
run places every candidate (with its colocation group) there and the rest on the first
device; a candidate whose kernel (the op type the runtime's trace names) differs from the
single-device run gets its forward op as ``partner`` and its time in the calibration run as
``partner_apart_time_us``.
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import numpy as np
import tensorflow as tf

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.tasks import same_device
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph import ingest
from tf_autoplace.graph.executed import CALL_OPS, CONTROL_FLOW_OPS
from tf_autoplace.graph.opgraph import OpGraph
from tf_autoplace.graph.pins import device_pins, pinned_groups, python_callers
from tf_autoplace.hw.runner import RunConfig, TracedStep, canonical_device, run, run_interleaved
from tf_autoplace.hw.workload import Workload
from tf_autoplace.proto import cost_profile_pb2

DEFAULT_CONFIG = RunConfig(steps=10, trace_steps=10)
STEP_SESSIONS = 5  # interleaved Sessions whose median untraced step is the run's step
_ARITHMETIC = "ArithmeticOptimizer/"


def local_kinds() -> tuple[str, ...]:
    """The device kinds this machine has: ("CPU",) or ("CPU", "GPU")."""
    return ("CPU", "GPU") if tf.config.list_physical_devices("GPU") else ("CPU",)


def _lane_kind(device: str) -> tuple[str, str]:
    """(kind, lane) of a step-stats device: lane "device" for the device itself, "all" for a
    GPU's ``stream:all`` lane, "stream" for another stream, "other" for anything else."""
    try:
        kind = canonical_device(device.split("/stream:")[0].split("/memcpy")[0]).split(":")[0]
    except ConfigError:  # a lane that names no local device
        return "", "other"
    if "/stream:all" in device:
        return kind, "all"
    if "/stream:" in device:
        return kind, "stream"
    if "/memcpy" in device:
        return kind, "other"
    return kind, "device"


def grappler_origin(node: str) -> str:
    """The graph op a node renamed by Grappler's arithmetic optimizer came from:
    ``scope/ArithmeticOptimizer/<Stage>_<op>`` -> ``scope/<op>`` (e.g.
    ``attention/ArithmeticOptimizer/FoldTransposeIntoMatMul_MatMul_2`` ->
    ``attention/MatMul_2``); any other name is returned unchanged."""
    at = node.find(_ARITHMETIC)
    if at < 0 or (at > 0 and node[at - 1] != "/"):
        return node
    stage, sep, op = node[at + len(_ARITHMETIC):].partition("_")
    return node[:at] + op if sep and stage and op else node


def _graph_op(name: str, graph_names, bodies=frozenset()) -> str | None:
    """The graph op a traced node is (itself, without an output suffix, or the op Grappler
    renamed), or, for a node of the body of a loop, conditional or call, the op of ``bodies``
    its name is under (``rnn/while/body/_1/add`` -> ``rnn/while``; the longest such name); None
    for a node the runtime added."""
    for node in (name, name.rsplit(":", 1)[0]):
        if node in graph_names:
            return node
        origin = grappler_origin(node)
        if origin in graph_names:
            return origin
    if bodies:
        parts = name.rsplit(":", 1)[0].split("/")
        for k in range(len(parts) - 1, 0, -1):
            prefix = "/".join(parts[:k])
            if prefix in bodies:
                return prefix
    return None


def body_ops(graph_def) -> frozenset:
    """Names of the nodes of ``graph_def`` whose work runs as nodes of their own (functional
    control flow and calls: :data:`tf_autoplace.graph.executed.CONTROL_FLOW_OPS`,
    ``CALL_OPS``)."""
    return frozenset(n.name for n in graph_def.node if n.op in CONTROL_FLOW_OPS
                     or n.op in CALL_OPS)


def _union(spans) -> float:
    """Seconds covered by at least one of the ``(start, end)`` spans."""
    total, reach = 0.0, -np.inf
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


@functools.lru_cache(maxsize=None)
def _lane_on(lane: str, device: str) -> bool:
    """Whether step-stats lane ``lane`` (a device, or one of its streams) is ``device``'s."""
    base = lane.split("/stream:")[0].split("/memcpy")[0]
    try:
        return same_device(tf.DeviceSpec.from_string(base), tf.DeviceSpec.from_string(device))
    except (ValueError, TypeError):
        return False


def op_times(trace: TracedStep, kind: str, graph_names,
             device: str | None = None, bodies=frozenset()) -> dict[str, float]:
    """Seconds each graph op took on devices of ``kind`` in one traced step (module doc); on
    ``device``'s lanes only, when given (one task's device of a TensorFlow cluster). An op of
    ``bodies`` (:func:`body_ops`) gets the time its body's nodes ran, overlaps counted once."""
    graph_names = set(graph_names)
    lanes = collections.defaultdict(lambda: collections.defaultdict(float))
    spans = collections.defaultdict(list)  # (lane, body op) -> its nodes' spans
    for d, name, start, end in zip(trace.device.tolist(), trace.names, trace.start.tolist(),
                                   trace.end.tolist()):
        lane_kind, lane = _lane_kind(trace.devices[d])
        if lane_kind != kind or (device is not None and not _lane_on(trace.devices[d], device)):
            continue
        node = _graph_op(name, graph_names, bodies)
        if node is None:
            continue
        if node in bodies:
            spans[lane, node].append((start, end))
        else:
            lanes[lane][node] += end - start
    for (lane, node), body in spans.items():
        lanes[lane][node] += _union(body)
    out = dict(lanes["device"])
    kernels = lanes["all"] or lanes["stream"]
    out.update(kernels)  # on a GPU, kernel time replaces the launch's span
    return out


def kernels_run(trace: TracedStep, graph_names) -> dict[str, str]:
    """The kernel (op type the trace names) each graph op ran as in one traced step; an op
    that ran several kernels (a while loop) keeps the last."""
    graph_names = set(graph_names)
    out = {}
    for name, kernel in zip(trace.names, trace.kernels):
        node = _graph_op(name, graph_names)
        if node is not None and kernel:
            out[node] = kernel
    return out


def partner_candidates(graph: OpGraph) -> dict[int, int]:
    """{op: partner}: ops whose type is another op type with ``Grad`` in it, reading an output
    of an op of that type in another TF colocation group (module docstring, "Partners"). When
    several inputs come from ops of that type (a MaxPoolGrad of a MaxPool that reads another
    MaxPool), the partner is the one the gradient is named after (``gradients/<op>_grad/``),
    else the producer of the last such input (the forward op's output comes after its input
    in MaxPoolGrad, LRNGrad and FusedBatchNormGrad)."""
    types, names = graph.op_types, graph.names
    found: dict[int, list[int]] = {}
    for t, consumer in zip(graph.edge_tensor.tolist(), graph.edge_dst.tolist()):
        producer = int(graph.tensor_op[t])
        kind = types[consumer]
        if ("Grad" in kind and types[producer] == kind.replace("Grad", "", 1)
                and graph.colocation[producer] != graph.colocation[consumer]):
            found.setdefault(consumer, []).append(producer)
    out = {}
    for op, producers in found.items():
        named = [p for p in producers if f"/{names[p]}_grad/" in f"/{names[op]}"]
        out[op] = (named or producers)[-1]
    return out


def _keeping_pins(workload: Workload, assignment: dict, python_device: str | None = None,
                  graph: OpGraph | None = None) -> dict:
    """``assignment`` with the workload's pinned ops on their own devices
    (:func:`tf_autoplace.graph.pins.device_pins`): the members of a collective all-reduce on
    one device wait for each other forever, so a profile of "every op on one device" runs
    them where the program put them. With ``python_device``, the ops that call the program's
    Python (:func:`tf_autoplace.graph.pins.python_callers`) run there: on a cluster of
    several processes TensorFlow finds their callback only in the client's. Each pinned op's
    TF colocation group goes with it, as in a placement
    (:func:`tf_autoplace.graph.pins.pinned_groups`): the ``IteratorGetNext`` of an iterator
    over a generator runs the generator where it is placed. ``graph``: the workload's
    OpGraph (:func:`tf_autoplace.graph.ingest.to_opgraph`), read here when not given."""
    pins = {name: device for name, (device, _) in device_pins(workload.graph_def).items()}
    if python_device is not None:
        for name in python_callers(workload.graph_def):
            pins.setdefault(name, python_device)
    if not pins:
        return dict(assignment)
    if graph is None:
        graph = ingest.to_opgraph(ingest.load_meta_graph(workload.graph_def))
    pins = pinned_groups(pins, graph)
    return {name: pins.get(name, device) for name, device in assignment.items()}


def _second_device(kind: str) -> str | None:
    """A second device of ``kind`` this machine can run on: a second logical CPU always
    (a Session makes as many as it is asked for), a second GPU when there is one."""
    if kind == "CPU":
        return "/device:CPU:1"
    return f"/device:{kind}:1" if len(tf.config.list_physical_devices(kind)) >= 2 else None


def measure_partners(workload: Workload, graph: OpGraph, kind: str, single_kernels: dict,
                     config: RunConfig) -> dict[str, tuple[str, float]]:
    """{op name: (partner name, seconds)} for the candidates (:func:`partner_candidates`) whose
    kernel differs from ``single_kernels`` (the single-device run's) when a calibration run of
    ``config.trace_steps`` traced steps puts them, with their colocation groups, on a second
    device of ``kind`` (module docstring); {} when the kind has no second device or there is
    no candidate."""
    candidates = partner_candidates(graph)
    other = _second_device(kind)
    if not candidates or other is None:
        return {}
    moved = np.isin(graph.colocation, graph.colocation[list(candidates)])
    first = f"/device:{kind}:0"
    assignment = _keeping_pins(workload, {name: other if move else first
                                          for name, move in zip(graph.names, moved.tolist())},
                               graph=graph)
    cfg = config if kind == "CPU" else dataclasses.replace(config, soft_placement=True)
    measured = run(workload, assignment, dataclasses.replace(cfg, steps=1))
    per_step = [op_times(trace, kind, graph.names) for trace in measured.traces]
    kernels = {}
    for trace in measured.traces:
        kernels.update(kernels_run(trace, graph.names))
    out = {}
    for op, partner in sorted(candidates.items()):
        name = graph.names[op]
        apart = kernels.get(name)
        if apart and single_kernels.get(name) and apart != single_kernels[name]:
            seconds = float(np.median([step.get(name, 0.0) for step in per_step]))
            out[name] = (graph.names[partner], seconds)
    return out


def profile_ops(workload: Workload, *, kinds=None, config: RunConfig = DEFAULT_CONFIG,
                description: str = "", partners: bool = True,
                devices=None, python_device: str | None = None
                ) -> cost_profile_pb2.CostProfile:
    """Measure every op of ``workload`` on each of ``kinds`` (default: :func:`local_kinds`; the
    kinds of ``devices`` when given) and return the profile (module docstring).
    ``config.steps`` untraced rounds of :data:`STEP_SESSIONS` interleaved Sessions time the run
    (its step is the median of their medians), then, in another Session,
    ``config.trace_steps`` (>= 1) steps are traced (its ``DeviceRun``). ``partners``: also run
    the calibration that finds the ops whose kernel changes apart from a partner. ``devices`` (kind -> device name; default
    ``/device:<kind>:0``) says which device of each kind runs the graph: on a TensorFlow
    cluster (``config.target``), one task's (``/job:worker/replica:0/task:1/device:CPU:0``).
    ``python_device``: where the ops that call the program's Python run, whichever device
    the others are timed on (on a cluster of tasks, the target task's CPU,
    :meth:`~tf_autoplace.core.cluster.Cluster.client_cpu`: the only process that has their
    callbacks)."""
    if config.trace_steps < 1:
        raise ConfigError(f"profiling needs trace_steps >= 1, got {config.trace_steps}")
    devices = dict(devices or {})
    if kinds is None:
        kinds = tuple(devices) if devices else local_kinds()
    kinds = tuple(kinds)
    nodes = list(workload.graph_def.node)
    names = [n.name for n in nodes]
    name_set = set(names)
    bodies = body_ops(workload.graph_def)
    # The graph's static output sizes go into the profile: they tell it from a profile of the
    # same model at another batch size (cost.profile, "output_bytes").
    graph = ingest.to_opgraph(ingest.load_meta_graph(workload.graph_def))
    index = {name: i for i, name in enumerate(graph.names)}
    sizes = {name: int(graph.output_bytes[i]) for name, i in index.items()
             if graph.shape_known[i] and graph.output_bytes[i] > 0}
    profile = cost_profile_pb2.CostProfile()
    notes = []
    for kind in kinds:
        device = devices.get(kind, f"/device:{kind}:0")
        cfg = config if kind == "CPU" else dataclasses.replace(config, soft_placement=True)
        assignment = _keeping_pins(workload, {name: device for name in names}, python_device,
                                   graph)
        # The untraced step calibrates the op times: measured as placements are (module
        # docstring), in interleaved Sessions, before the traced Session.
        step_s = float(np.median([m.step_time_s for m in run_interleaved(
            workload, [assignment] * STEP_SESSIONS, dataclasses.replace(cfg, trace_steps=0))]))
        # The traced Session's own timed steps are not used: one is enough before the traces.
        measured = run(workload, assignment, dataclasses.replace(cfg, steps=1))
        per_step = [op_times(trace, kind, names, device if devices else None, bodies)
                    for trace in measured.traces]
        ran_anywhere = set()
        single_kernels = {}
        for trace in measured.traces:
            ran_anywhere.update(_graph_op(name, name_set, bodies) for name in trace.names)
            single_kernels.update(kernels_run(trace, name_set))
        apart = (measure_partners(workload, graph, kind, single_kernels, config)
                 if partners else {})
        timed = skipped = 0
        for node in nodes:
            samples = [step.get(node.name) for step in per_step]
            entry = cost_profile_pb2.OpCost(name=node.name, device_kind=kind, op_type=node.op,
                                            output_bytes=sizes.get(node.name, 0))
            if all(s is None for s in samples):
                if node.name in ran_anywhere:
                    continue  # ran on another kind (soft placement): unknown here
                skipped += 1
                entry.did_not_run = True
            else:
                timed += 1
                entry.compute_time_us = float(np.median([s or 0.0 for s in samples])) * 1e6
            if node.name in apart:
                entry.partner = apart[node.name][0]
                entry.partner_apart_time_us = apart[node.name][1] * 1e6
            profile.op.append(entry)
        profile.run.add(device_kind=kind, step_time_us=step_s * 1e6,
                        traced_step_time_us=float(np.median(
                            [trace.span_s for trace in measured.traces])) * 1e6)
        notes.append(f"{kind}: {timed} ops timed, {skipped} did not execute in a step (0), "
                     f"{len(apart)} change kernel apart from a partner, "
                     f"step {step_s * 1e3:.2f} ms (median of {STEP_SESSIONS} interleaved sessions)")
    profile.description = "; ".join(
        ([description] if description else [])
        + [f"median of {config.trace_steps} traced steps after {config.warmup_steps} warm-up"]
        + notes)
    return profile


def parallelism(profile: cost_profile_pb2.CostProfile, kind: str = "CPU") -> float | None:
    """How many ops the profiled process ran at once on ``kind``, on average: the sum of the
    ops' times over the traced step they were measured in (``DeviceRun``, module docstring);
    None when the profile records no traced run of that kind."""
    step = [run.traced_step_time_us for run in profile.run if run.device_kind == kind]
    if not step or not step[0] > 0:
        return None
    return sum(op.compute_time_us for op in profile.op if op.device_kind == kind) / step[0]


def with_step(profile: cost_profile_pb2.CostProfile, kind: str, step_s: float
              ) -> cost_profile_pb2.CostProfile:
    """A copy of ``profile`` whose run on ``kind`` has the untraced step ``step_s``: the op
    times then calibrate to that step (a single-device step measured at another moment, such
    as beside the placements a fidelity check compares)."""
    out = cost_profile_pb2.CostProfile()
    out.CopyFrom(profile)
    for device_run in out.run:
        if device_run.device_kind == kind:
            device_run.step_time_us = step_s * 1e6
    return out


def with_profiled_cores(cluster: Cluster, profile: cost_profile_pb2.CostProfile
                        ) -> tuple[Cluster, float | None]:
    """``cluster`` whose core groups of CPU devices get as many cores as the profiled process
    ran ops at once (:func:`parallelism` of its CPU run, rounded, at least 1 and at most the
    group's cores: the host's for ``Cluster.local``), and that parallelism (None, and the
    cluster unchanged, when the profile has no CPU run)."""
    ran = parallelism(profile, "CPU")
    if ran is None:
        return cluster, None
    groups = tuple(
        (name, int(min(max(np.floor(ran + 0.5), 1), cores))
         if any(d.core_group == name and d.kind == "CPU" for d in cluster.devices) else cores)
        for name, cores in cluster.core_groups)
    return dataclasses.replace(cluster, core_groups=groups), ran
