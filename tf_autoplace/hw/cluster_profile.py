"""Profile a TensorFlow cluster whose servers run: op costs per task, and the links between its
devices over gRPC, as a ClusterSpec and a CostProfile.

What ``tf-autoplace profile`` does for this machine (:mod:`~tf_autoplace.hw.profiler`,
:mod:`~tf_autoplace.hw.transfers`), :func:`profile_cluster` does for the tasks of a
:class:`~tf_autoplace.core.cluster.Cluster` with a ``target`` (one that
:func:`~tf_autoplace.hw.local_cluster.local_cluster` yields, or ``Cluster.from_tf`` of servers
that run elsewhere), through Sessions on that target:

1. **links**: for every pair of devices, chains of copies of several sizes are timed against
   the same chains without copies and ``latency + bytes / bandwidth`` is fitted
   (:func:`~tf_autoplace.hw.transfers.profile_links`): between two tasks the tensors go over
   gRPC (loopback, on one machine), within a task through memory. Each pair keeps its own fit;
   :attr:`ClusterProfile.class_fits` sums them up per link class (the median latency and
   bandwidth of the class's pairs), the figures ``Cluster.from_tf(links=...)`` takes;
2. **ops** (given a workload): the graph runs with every op on one task at a time, on its first
   device of each kind, and each op's median traced time on that task is kept
   (:func:`~tf_autoplace.hw.profiler.profile_ops`). The CostProfile holds the times of the
   *reference* task (the target's, where a graph runs without a hop to another server; else the
   first task). Ops that call the program's Python stay on the target task's CPU in every
   task's turn (TensorFlow has their callbacks only in the client's process), so only the
   target task times them. Every other task's devices get a ``speed``: the reference task's
   total time of the ops both timed over the task's own, so that the simulator's time of an op
   on a device of that task (the profile's time over the speed) has the task's total. Per-op
   differences between tasks are averaged into that one factor: a CostProfile holds one
   time per op and device kind.

Which devices each task has can be asked of its server too: :func:`served_devices` lists them
(``Session.list_devices`` on the target) for ``Cluster.from_tf(spec,
devices=served_devices(spec))``.

A task is profiled alone (the others idle), as ``tf-autoplace profile`` profiles one device at a
time: tasks that share cores slow each other when they run together, which the cluster's core
groups describe and the profile does not.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tf_autoplace.core.cluster import Cluster, Device
from tf_autoplace.core.tasks import LinkClass, parse_tasks
from tf_autoplace.errors import ConfigError, MeasurementError
from tf_autoplace.hw import profiler, transfers
from tf_autoplace.hw.runner import RunConfig, check_reachable, on_cluster, own_graph
from tf_autoplace.hw.workload import Workload
from tf_autoplace.proto import cost_profile_pb2


@dataclasses.dataclass(frozen=True, eq=False)
class ClusterProfile:
    """What :func:`profile_cluster` measured.

    Attributes:
      cluster: the cluster with the measured links and each task's ``speed``.
      profile: the reference task's op times (None when no workload was profiled).
      link_fits: ``(i, j) -> LinkFit`` of every pair of devices, ``i < j``.
      class_fits: link class -> the median latency and bandwidth of its pairs' fits.
      task_seconds: task name -> total measured op time of one step on it (s).
      reference: the name of the reference task ("" without a workload).
    """

    cluster: Cluster
    profile: cost_profile_pb2.CostProfile | None
    link_fits: dict
    class_fits: dict
    task_seconds: dict
    reference: str = ""


def profile_cluster(cluster: Cluster, workload: Workload | None = None, *, links: bool = True,
                    op_config: RunConfig = profiler.DEFAULT_CONFIG,
                    link_config: RunConfig = transfers.DEFAULT_CONFIG,
                    sizes=transfers.DEFAULT_SIZES, hops: int = 16,
                    description: str = "") -> ClusterProfile:
    """Measure ``cluster``'s links and, given ``workload``, its op costs per task (module
    docstring).

    Args:
      cluster: a cluster of TensorFlow tasks whose servers run at ``cluster.target``.
      workload: one training step of the graph to profile (None: links only).
      links: measure the links (False: keep the cluster's).
      op_config: how the ops are timed (``trace_steps`` traced steps after ``warmup_steps``);
        its target is the cluster's.
      link_config, sizes, hops: how the links are timed (:func:`tf_autoplace.hw.transfers.
        profile_links`); its target is the cluster's.
      description: said first in the profile's description.

    Returns:
      A :class:`ClusterProfile`.

    Raises:
      ConfigError: a cluster without tasks or without a target.
      MeasurementError: a server accepts no connection, or TensorFlow could not run a graph
        on the servers.
    """
    if not cluster.tasks or not cluster.target:
        raise ConfigError("profile_cluster profiles the servers of a TensorFlow cluster: give a "
                          "Cluster with tasks and a target (local_cluster, Cluster.from_tf); "
                          "for this machine alone, tf-autoplace profile")
    # A server that is down makes TensorFlow wait for it (ten minutes) without a word.
    check_reachable([task.address for task in cluster.tasks if task.address])
    measured, fits = cluster, {}
    if links:
        measured, fits = transfers.profile_links(
            cluster, sizes=sizes, hops=hops,
            config=on_cluster(cluster, link_config))
    class_fits = _class_fits(cluster, fits)
    if workload is None:
        return ClusterProfile(cluster=measured, profile=None, link_fits=fits,
                              class_fits=class_fits, task_seconds={})
    config = on_cluster(cluster, op_config)
    home = cluster.target_task()
    reference = home if home is not None else 0
    python_device = cluster.client_cpu()  # py_func and the like: on every task's turn
    profiles, totals = {}, {}
    for k, task in enumerate(cluster.tasks):
        devices = {}
        for d in np.flatnonzero(cluster.device_tasks == k).tolist():
            devices.setdefault(cluster.devices[d].kind, cluster.names[d])
        if not devices:
            continue
        profiles[k] = profiler.profile_ops(workload, config=config, devices=devices,
                                           partners=False, description=f"task {task.name}",
                                           python_device=python_device)
        totals[k] = sum(op.compute_time_us for op in profiles[k].op) * 1e-6
    if reference not in profiles:
        reference = min(profiles)
    devices = list(measured.devices)
    speeds = {k: _speed(profiles[reference], p) for k, p in profiles.items()}
    for d, device in enumerate(devices):
        k = int(cluster.device_tasks[d])
        if speeds.get(k) is not None:
            devices[d] = dataclasses.replace(device, speed=speeds[k])
    profile = profiles[reference]
    name = cluster.tasks[reference].name
    profile.description = "; ".join(filter(None, [
        description, f"op times of task {name} (the reference); the other tasks' devices have "
        "speed = its total op time / theirs (over the ops timed on both)",
        *(f"task {cluster.tasks[k].name}: {p.description.split('; ', 1)[1]}"
          for k, p in profiles.items())]))
    return ClusterProfile(cluster=dataclasses.replace(measured, devices=tuple(devices)),
                          profile=profile, link_fits=fits, class_fits=class_fits,
                          task_seconds={cluster.tasks[k].name: t for k, t in totals.items()},
                          reference=name)


def _speed(reference: cost_profile_pb2.CostProfile, task: cost_profile_pb2.CostProfile
           ) -> float | None:
    """A task's speed against the reference task: the reference's total time of the ops timed
    on both over the task's (an op that calls Python runs on the target task in every turn,
    so it is timed there only); None when either total is 0."""
    times = [{op.name: op.compute_time_us for op in p.op if not op.did_not_run}
             for p in (reference, task)]
    common = times[0].keys() & times[1].keys()
    ref, own = (sum(t[name] for name in common) for t in times)
    return ref / own if ref > 0 and own > 0 else None


def served_devices(spec, *, timeout_s: float = 60.0) -> dict[str, Cluster]:
    """The devices the servers of a running TensorFlow cluster have, per task: ``{"worker:0":
    one-machine Cluster, ...}``, what :meth:`Cluster.from_tf`'s ``devices`` takes.

    Args:
      spec: the TensorFlow cluster, in any form :meth:`Cluster.from_tf` takes (its target is
        the server asked).
      timeout_s: how long the servers may take to answer (> 0).

    Each task's CPU and GPU devices, as its server reports them (``Session.list_devices``:
    kind, index and, for a GPU, memory limit), with this machine's description of a device of
    the same kind (:meth:`Cluster.local`: cores, clock, memory bandwidth) where this machine
    has one, and the local cluster's links between them; profile the cluster to measure what
    matters. A CPU's memory is the host's, as :meth:`Cluster.local` gives it: TensorFlow lists
    every CPU device with a fixed 256 MiB limit it does not enforce, which would refuse models
    the servers run (a server on another host is taken to have this one's memory; give a
    cluster spec where it has less).

    Raises:
      ClusterSpecError: a malformed TensorFlow cluster.
      MeasurementError: a task accepts no connection (at once, not after ``timeout_s``), or
        the servers did not answer.
    """
    import tensorflow as tf  # TF only when servers are asked

    tasks, target = parse_tasks(spec)
    check_reachable([task.address for task in tasks if task.address])
    config = tf.compat.v1.ConfigProto(operation_timeout_in_ms=int(timeout_s * 1000))
    try:
        with tf.compat.v1.Session(target, graph=own_graph(), config=config) as session:
            listed = session.list_devices()
    except tf.errors.OpError as e:
        raise MeasurementError(f"the servers at {target} did not list their devices: "
                               f"{type(e).__name__}: {e.message}") from e
    here = Cluster.local()
    local = {d.kind: d for d in reversed(here.devices)}
    per_task: dict[str, list[Device]] = {}
    for attributes in listed:
        name = tf.DeviceSpec.from_string(attributes.name)
        if name.device_type not in ("CPU", "GPU"):
            continue
        like = local.get(name.device_type)
        device = Device(name=f"/device:{name.device_type}:{name.device_index}",
                        kind=name.device_type,
                        memory_bytes=int(attributes.memory_limit_bytes) or 2**30)
        if like is not None:
            memory = like.memory_bytes if name.device_type == "CPU" else device.memory_bytes
            device = dataclasses.replace(like, name=device.name, memory_bytes=memory)
        per_task.setdefault(f"{name.job}:{name.task}", []).append(device)
    missing = [t.name for t in tasks if t.name not in per_task]
    if missing:
        raise MeasurementError(f"the servers at {target} list no CPU or GPU device of "
                               f"task(s) {missing}")
    # A server's CPUs share this host's cores, as this machine's do (Cluster.from_tf then
    # shares them among the tasks of one host).
    return {name: Cluster.uniform(devices, bandwidth_gbps=10.0, latency_us=5.0,
                                  core_groups=[(group, cores) for group, cores in here.core_groups
                                               if any(d.core_group == group for d in devices)])
            for name, devices in per_task.items()}


def _class_fits(cluster: Cluster, fits: dict) -> dict[str, LinkClass]:
    """Link class -> the median latency and bandwidth of the fits of its pairs."""
    by_class: dict[str, list] = {}
    for (i, j), fit in fits.items():
        by_class.setdefault(cluster.link_class(i, j), []).append(fit)
    return {name: LinkClass(float(np.median([f.bandwidth_bps for f in group])) / 1e9,
                            float(np.median([f.latency_s for f in group])) * 1e6)
            for name, group in sorted(by_class.items())}
