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
  Grappler passes. They cost nothing in a real step, so their time is 0, not missing; an op
  that ran on another kind's device in that run is left out for the kind (no time is known).

An op that runs more than once in a step (inside a while loop) gets the sum of its executions.
Nodes the runtime adds (Send/Recv, Grappler's new nodes) are not graph ops and are not written;
the description counts them with the rest.
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import numpy as np
import tensorflow as tf

from tf_autoplace.core.cluster import same_device
from tf_autoplace.errors import ConfigError
from tf_autoplace.hw.runner import RunConfig, TracedStep, canonical_device, run
from tf_autoplace.hw.workload import Workload
from tf_autoplace.proto import cost_profile_pb2

DEFAULT_CONFIG = RunConfig(steps=1, warmup_steps=3, trace_steps=10)


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


@functools.lru_cache(maxsize=None)
def _lane_on(lane: str, device: str) -> bool:
    """Whether step-stats lane ``lane`` (a device, or one of its streams) is ``device``'s."""
    base = lane.split("/stream:")[0].split("/memcpy")[0]
    try:
        return same_device(tf.DeviceSpec.from_string(base), tf.DeviceSpec.from_string(device))
    except (ValueError, TypeError):
        return False


def op_times(trace: TracedStep, kind: str, graph_names,
             device: str | None = None) -> dict[str, float]:
    """Seconds each graph op took on devices of ``kind`` in one traced step (module doc); on
    ``device``'s lanes only, when given (one task's device of a TensorFlow cluster)."""
    graph_names = set(graph_names)
    lanes = collections.defaultdict(lambda: collections.defaultdict(float))
    for d, name, start, end in zip(trace.device.tolist(), trace.names, trace.start.tolist(),
                                   trace.end.tolist()):
        lane_kind, lane = _lane_kind(trace.devices[d])
        if lane_kind != kind or (device is not None and not _lane_on(trace.devices[d], device)):
            continue
        node = name if name in graph_names else name.rsplit(":", 1)[0]
        if node in graph_names:
            lanes[lane][node] += end - start
    out = dict(lanes["device"])
    kernels = lanes["all"] or lanes["stream"]
    out.update(kernels)  # on a GPU, kernel time replaces the launch's span
    return out


def profile_ops(workload: Workload, *, kinds=None, config: RunConfig = DEFAULT_CONFIG,
                description: str = "", devices=None) -> cost_profile_pb2.CostProfile:
    """Measure every op of ``workload`` on each of ``kinds`` (default: :func:`local_kinds`; the
    kinds of ``devices`` when given) and return the profile (module docstring).
    ``config.trace_steps`` (>= 1) steps are traced. ``devices`` (kind -> device name; default
    ``/device:<kind>:0``) says which device of each kind runs the graph: on a TensorFlow
    cluster (``config.target``), one task's (``/job:worker/replica:0/task:1/device:CPU:0``)."""
    if config.trace_steps < 1:
        raise ConfigError(f"profiling needs trace_steps >= 1, got {config.trace_steps}")
    devices = dict(devices or {})
    if kinds is None:
        kinds = tuple(devices) if devices else local_kinds()
    kinds = tuple(kinds)
    nodes = list(workload.graph_def.node)
    names = [n.name for n in nodes]
    profile = cost_profile_pb2.CostProfile()
    notes = []
    for kind in kinds:
        device = devices.get(kind, f"/device:{kind}:0")
        cfg = config if kind == "CPU" else dataclasses.replace(config, soft_placement=True)
        measured = run(workload, {name: device for name in names}, cfg)
        per_step = [op_times(trace, kind, names, device if devices else None)
                    for trace in measured.traces]
        ran_anywhere = set()
        for trace in measured.traces:
            ran_anywhere.update(trace.names)
        timed = skipped = 0
        for node in nodes:
            samples = [step.get(node.name) for step in per_step]
            if all(s is None for s in samples):
                if node.name in ran_anywhere:
                    continue  # ran on another kind (soft placement): unknown here
                skipped += 1
                value = 0.0
            else:
                timed += 1
                value = float(np.median([s or 0.0 for s in samples]))
            profile.op.add(name=node.name, device_kind=kind, compute_time_us=value * 1e6,
                           op_type=node.op)
        notes.append(f"{kind}: {timed} ops timed, {skipped} did not execute in a step (0), "
                     f"step {measured.step_time_s * 1e3:.2f} ms")
    profile.description = "; ".join(
        ([description] if description else [])
        + [f"median of {config.trace_steps} traced steps after {config.warmup_steps} warm-up"]
        + notes)
    return profile

