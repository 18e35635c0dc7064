"""Cluster: the devices a graph can be placed on, their memory and speed, and the links between.

A cluster comes from a text-format ``ClusterSpec`` proto (``protos/cluster.proto``), from
:meth:`Cluster.local` (the devices TensorFlow sees on this machine, with optional logical CPU
devices) or from Python. Specs for 2, 4 and 8 K80- and V100-class GPUs and for two logical CPUs
ship inside the package (``tf_autoplace/clusters/*.pbtxt``, package data, so an installed copy
has them too) and are named by their stem: ``resolve_cluster("k80x4")``, ``--cluster=k80x4``
(:func:`shipped_clusters` lists them). Every door that takes a cluster takes
:func:`resolve_cluster`'s forms: a Cluster, a shipped name, a spec file path, or ``"local"``.

Transfer model (Placeto A.5): moving ``b`` bytes from device i to device j takes
``latency[i, j] + b / bandwidth[i, j]`` seconds; each device has one outgoing transfer queue.
Our extension: the tensor then spends ``delay[i, j]`` seconds more in flight, holding neither
the sender's queue nor a core, before its consumers may start (0 unless measured: between the
tasks of a TensorFlow cluster part of a transfer is the sender's gRPC work, part a wait that
overlaps with other transfers; :mod:`tf_autoplace.hw.link_fit` fits both).

Every device must be one TensorFlow can address, checked before any work: its name is parsed
with ``tf.DeviceSpec`` (as TF parses it, plus TF's C++ rules that the Python parser skips: job
names ``[A-Za-z][A-Za-z0-9_]*``, indices >= 0) and kept in canonical form (``/gpu:0`` becomes
``/device:GPU:0``); it must name a device type and index, and the type must be the device's
``kind``. Two names TensorFlow could resolve to the same device (``/device:CPU:0`` and
``/job:localhost/replica:0/task:0/device:CPU:0``: every field given by both agrees) are one
device listed twice. Numbers must be finite and fit the int64 fields Grappler reads them into.

Shared cores. Devices may share processor cores: TensorFlow runs every logical CPU device of a
process (``ConfigProto(device_count={'CPU': N})``) on the same inter-op and intra-op thread
pools, so two logical CPUs of a 2-core host are not twice one. A *core group* names devices
that share ``cores`` cores (``Device.core_group``, ``Cluster.core_groups``); the simulator runs
the ops of a group's devices on those cores together (:mod:`tf_autoplace.sim.simulator`). A
device outside any group has cores of its own, as a GPU does. :meth:`Cluster.executors` gives
the simulator its view: one executor per group, and one per ungrouped device.

A TensorFlow cluster. The devices may live on the tasks of a TensorFlow cluster (jobs of
``tf.distribute.Server`` processes, :mod:`tf_autoplace.core.tasks`): ``Cluster.tasks`` lists
them and every device then names its task (``/job:worker/replica:0/task:1/device:CPU:0``);
``Cluster.target`` is the ``grpc://`` address a Session connects to to run a graph placed
there. :meth:`Cluster.from_tf` builds one from a ``tf.train.ClusterSpec``, a ``TF_CONFIG`` or a
cluster resolver, with each task's devices taken from a one-machine cluster (a shipped spec, a
spec file, a :class:`Cluster`) and the links between tasks from their class (same task, same
machine, over the network; :func:`tf_autoplace.core.tasks.link_class`); a text spec says the
same with ``task``, ``link_class`` and ``target`` (``protos/cluster.proto``), and ``link``
entries override single pairs. A device name that names a job or task the cluster lacks is a
:class:`ClusterSpecError` that names it, wherever it comes from (:meth:`Cluster.check_task`).
"""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import functools
import importlib.resources
import math
import numbers
import os
import re
from typing import Sequence

import numpy as np
from google.protobuf import message as _pb_message
from google.protobuf import text_format

from tf_autoplace.core.tasks import (
    DEFAULT_LINK_CLASSES,
    LINK_CLASSES,
    LOOPBACK,
    LinkClass,
    Task,
    host_of,
    is_server_address,
    link_class,
    parse_tasks,
    same_device,
)
from tf_autoplace.core.settings import is_int
from tf_autoplace.errors import ClusterSpecError, ConfigError
from tf_autoplace.proto import cluster_pb2

DEVICE_KINDS = ("CPU", "GPU")

# The shipped cluster specs: package data, one ``<name>.pbtxt`` per cluster.
SPEC_SUFFIX = ".pbtxt"
_SPECS = importlib.resources.files("tf_autoplace").joinpath("clusters")

# Placeto's published setup (appendix A.5 and A.7).
PLACETO_BANDWIDTH_GBPS = 7.6
PLACETO_LATENCY_US = 25.0
PLACETO_OP_OVERHEAD_US = 5.7
HOST_CORE_GROUP = "host"
# A link slower than a byte a second, or a latency or delay of over eleven days, is a unit slip
# (a bandwidth of 1e-320 made every transfer take forever: an infinite step time).
MIN_BANDWIDTH = 1.0  # bytes/s
MAX_LINK_SECONDS = 1e6
# So is a device a million times faster or slower than the cost model's (a speed of 1e-320
# made a GPU unusable without a word, numpy's overflow warning aside).
MIN_SPEED, MAX_SPEED = 1e-6, 1e6
# Devices a cluster may have: the placers' tables grow with ops x devices (and links with
# devices squared); a spec of thousands of devices took minutes and gigabytes to read.
MAX_DEVICES = 1024

INT64_MAX = 2**63 - 1
_JOB = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def device_spec(name: str):
    """``tf.DeviceSpec`` of a full device name (type and index given), or ClusterSpecError."""
    import tensorflow as tf  # TF only when a device is named; the numpy core stays light

    if not isinstance(name, str) or not name.startswith("/"):
        raise ClusterSpecError(
            f"device name {name!r} is not a TF device string like '/device:GPU:0'")
    try:
        spec = tf.DeviceSpec.from_string(name)
    except (ValueError, TypeError) as e:
        raise ClusterSpecError(f"device name {name!r} is not a TF device string: {e}") from e
    if spec.device_type is None or spec.device_index is None:
        raise ClusterSpecError(f"device name {name!r} names no device type and index (as in "
                               "'/device:GPU:0')")
    if spec.job is not None and not _JOB.fullmatch(spec.job):
        raise ClusterSpecError(f"device name {name!r} has the job name {spec.job!r}; "
                               "TensorFlow wants [A-Za-z][A-Za-z0-9_]*")
    for field in ("replica", "task", "device_index"):
        if getattr(spec, field) is not None and getattr(spec, field) < 0:
            raise ClusterSpecError(f"device name {name!r} has a negative {field}")
    return spec


def _same_host_form(address: str) -> str:
    """``host:port`` with an address of this machine written one way (``localhost``; see
    :func:`~tf_autoplace.core.tasks.host_of`), for comparing."""
    _, sep, port = address.rpartition(":")
    if not sep:
        return address
    return f"localhost:{port}" if host_of(address) == LOOPBACK else address


def _check_number(what: str, value, *, integer: bool = False, zero_ok: bool = False,
                  limit: float = math.inf) -> None:
    """Raise ClusterSpecError unless ``value`` is a finite number (an int where ``integer``),
    > 0 (>= 0 where ``zero_ok``) and at most ``limit``; ``what`` names it ("device 'x' has
    speed")."""
    low = ">= 0" if zero_ok else "> 0"
    ok = (not isinstance(value, bool)
          and isinstance(value, numbers.Integral if integer else numbers.Real)
          and (value >= 0 if zero_ok else value > 0) and value <= limit
          and (integer or math.isfinite(value)))
    if not ok:
        bound = f" and at most {limit:.4g}" if limit < math.inf else ""
        raise ClusterSpecError(f"{what}={value!r}; must be {low}, "
                               f"{'an integer' if integer else 'finite'}{bound}")


@dataclasses.dataclass(frozen=True)
class Device:
    """One device.

    Attributes:
      name: full TF device string written into placed graphs.
      kind: "CPU" or "GPU"; decides which kernels it can run.
      memory_bytes: memory the graph may use on it (> 0).
      speed: estimated op costs of its kind (analytical, a cost graph's) are divided by
        this (> 0); measured ones (a cost profile) by its speed relative to the kind's
        :meth:`Cluster.reference_device`, whose times they are.
      num_cores, frequency_mhz, memory_bandwidth_gbps, architecture: hardware numbers fed to
        Grappler's analytical cost estimator (SMs for a GPU, cores for a CPU).
      core_group: the name of the core group whose cores the device shares ("" = none; see
        the module docstring).
      model: the hardware as its driver names it (e.g. a GPU's ``device_name``); informational.
    """

    name: str
    kind: str
    memory_bytes: int
    speed: float = 1.0
    num_cores: int = 1
    frequency_mhz: int = 1000
    memory_bandwidth_gbps: float = 10.0
    architecture: str = ""
    core_group: str = ""
    model: str = ""

    def __post_init__(self):
        spec = device_spec(self.name)
        if self.kind not in DEVICE_KINDS:
            raise ClusterSpecError(
                f"device {self.name!r} has kind {self.kind!r}; expected one of {DEVICE_KINDS}")
        if spec.device_type != self.kind:
            raise ClusterSpecError(f"device {self.name!r} is a {spec.device_type} device but "
                                   f"has kind {self.kind!r}")
        object.__setattr__(self, "name", spec.to_string())
        # Grappler reads num_cores, frequency and bandwidth (KB/s) into int64 fields.
        for field, integer, limit in (("memory_bytes", True, INT64_MAX),
                                      ("speed", False, math.inf),
                                      ("num_cores", True, INT64_MAX),
                                      ("frequency_mhz", True, INT64_MAX),
                                      ("memory_bandwidth_gbps", False, INT64_MAX / 1e6)):
            _check_number(f"device {self.name!r} has {field}", getattr(self, field),
                          integer=integer, limit=limit)
        if not MIN_SPEED <= self.speed <= MAX_SPEED:
            raise ClusterSpecError(f"device {self.name!r} has speed={self.speed!r}; must be "
                                   f"between {MIN_SPEED:g} and {MAX_SPEED:g} (op times are "
                                   "divided by it)")
        if not isinstance(self.architecture, str):
            raise ClusterSpecError(f"device {self.name!r} has architecture "
                                   f"{self.architecture!r}; must be a string like '7.0'")
        for field in ("core_group", "model"):
            if not isinstance(getattr(self, field), str):
                raise ClusterSpecError(f"device {self.name!r} has {field} "
                                       f"{getattr(self, field)!r}; must be a string")

    @property
    def hardware_key(self) -> tuple:
        """Devices with the same key get the same analytical op costs (before ``speed``)."""
        return (self.kind, self.num_cores, self.frequency_mhz, self.memory_bandwidth_gbps,
                self.architecture)


def _check_device_count(count: int) -> None:
    """ClusterSpecError for more devices than a cluster may have (:data:`MAX_DEVICES`): said
    before anything is built for them ([D, D] link tables of a huge D take minutes and all
    memory)."""
    if count > MAX_DEVICES:
        raise ClusterSpecError(f"the cluster has {count} devices; at most {MAX_DEVICES} can be "
                               "placed on")


@dataclasses.dataclass(frozen=True, eq=False)
class Cluster:
    """A set of devices and the links between them.

    Attributes:
      devices: the devices, in the order placements index them.
      bandwidth: [D, D] bytes per second from device i to device j (diagonal unused).
      latency: [D, D] seconds per transfer from i to j, during which the sender's outgoing
        queue (or, between core groups, one of its cores) is busy.
      op_overhead_s: fixed cost added to every op's compute time.
      core_groups: (name, cores) of each core group the devices name, in order (module
        docstring); every group has at least one device and ``cores >= 1``.
      tasks: the tasks of the TensorFlow cluster the devices live on (module docstring; empty:
        one machine, run in a local Session). With tasks, every device names one of them.
      target: the ``grpc://host:port`` a Session connects to to run on the tasks ("": a local
        Session).
      prediction_error: how far the simulator's step times on this cluster were from measured
        steps, where they were measured (``tf-autoplace profile`` fits the links on a graph's
        split placements and records the error left after the fit,
        :attr:`tf_autoplace.hw.link_fit.LatencyFit.prediction_error`); None: never measured.
        A split predicted faster than one device by less than this is within what the
        predictions get wrong here, so the ``auto`` placer does not apply it.
      delay: [D, D] seconds a tensor sent from i to j is in flight after its ``latency +
        bytes / bandwidth``, holding no queue or core (module docstring); None: zeros. Zero
        between devices of one core group (a hand-over by reference has no flight).
    """

    devices: tuple[Device, ...]
    bandwidth: np.ndarray
    latency: np.ndarray
    op_overhead_s: float = PLACETO_OP_OVERHEAD_US * 1e-6
    core_groups: tuple[tuple[str, int], ...] = ()
    tasks: tuple[Task, ...] = ()
    target: str = ""
    prediction_error: float | None = None
    delay: np.ndarray | None = None

    def __post_init__(self):
        if not self.devices:
            raise ClusterSpecError("the cluster has no devices")
        if not all(isinstance(d, Device) for d in self.devices):
            raise ClusterSpecError(f"devices must be Device objects, got "
                                   f"{[type(d).__name__ for d in self.devices]}")
        _check_device_count(len(self.devices))
        specs = [device_spec(d.name) for d in self.devices]
        # Two names can be one device only with the same type and index (every name has both):
        # compare within those buckets, not every pair.
        buckets: dict[tuple, list[int]] = {}
        for j, spec in enumerate(specs):
            bucket = buckets.setdefault((spec.device_type, spec.device_index), [])
            for i in bucket:
                if same_device(specs[i], spec):
                    raise ClusterSpecError(
                        f"devices {self.devices[i].name!r} and {self.devices[j].name!r} are "
                        "one device to TensorFlow; device names must be unique")
            bucket.append(j)
        d = len(self.devices)
        for field in ("bandwidth", "latency"):
            try:
                arr = np.array(getattr(self, field), dtype=np.float64)
            except (TypeError, ValueError) as e:
                raise ClusterSpecError(f"{field} must be a [{d}, {d}] array of numbers, got "
                                       f"{getattr(self, field)!r} ({e})") from None
            if arr.shape != (d, d):
                raise ClusterSpecError(f"{field} has shape {arr.shape}; expected {(d, d)}")
            off = arr[~np.eye(d, dtype=bool)]
            bad = off[~np.isfinite(off) | ((off < MIN_BANDWIDTH) if field == "bandwidth"
                                           else ((off < 0) | (off > MAX_LINK_SECONDS)))]
            if len(bad):
                what = (("bandwidths", f">= {MIN_BANDWIDTH:g}", "bytes/s")
                        if field == "bandwidth"
                        else ("latencies", f">= 0 and <= {MAX_LINK_SECONDS:g}", "s"))
                raise ClusterSpecError(f"link {what[0]} must be finite and {what[1]}, got "
                                       f"{float(bad[0])!r} {what[2]}")
            arr.setflags(write=False)
            object.__setattr__(self, field, arr)
        delay = np.zeros((d, d)) if self.delay is None else np.array(self.delay, np.float64)
        if delay.shape != (d, d):
            raise ClusterSpecError(f"delay has shape {delay.shape}; expected {(d, d)}")
        np.fill_diagonal(delay, 0.0)
        fine = np.isfinite(delay) & (delay >= 0) & (delay <= MAX_LINK_SECONDS)
        if not fine.all():
            raise ClusterSpecError(f"link delays must be finite, >= 0 and <= "
                                   f"{MAX_LINK_SECONDS:g}, got {float(delay[~fine][0])!r} s")
        group = [dev.core_group for dev in self.devices]
        for i, j in zip(*np.nonzero(delay)):
            if group[i] and group[i] == group[j]:
                raise ClusterSpecError(
                    f"the link {self.devices[i].name!r} -> {self.devices[j].name!r} has a delay "
                    f"of {delay[i, j] * 1e6:g} us, but both devices are in core group "
                    f"{group[i]!r}, whose transfers are hand-overs with no flight; give it 0")
        delay.setflags(write=False)
        object.__setattr__(self, "delay", delay)
        _check_number("op_overhead_s", self.op_overhead_s, zero_ok=True)
        if self.prediction_error is not None:
            _check_number("prediction_error", self.prediction_error, zero_ok=True)
        if isinstance(self.core_groups, (str, bytes)) or not all(
                isinstance(g, (tuple, list)) and len(g) == 2 for g in self.core_groups):
            raise ClusterSpecError(f"core_groups must be (name, cores) pairs, got "
                                   f"{self.core_groups!r}")
        groups = tuple((str(name), cores) for name, cores in self.core_groups)
        object.__setattr__(self, "core_groups", groups)
        declared = [name for name, _ in groups]
        for name, cores in groups:
            if not name or declared.count(name) > 1:
                raise ClusterSpecError(f"core group names must be unique and non-empty, got "
                                       f"{declared}")
            if isinstance(cores, bool) or not isinstance(cores, (int, np.integer)) or cores < 1:
                raise ClusterSpecError(f"core group {name!r} has cores={cores!r}; must be an "
                                       "int >= 1")
            if not any(d.core_group == name for d in self.devices):
                raise ClusterSpecError(f"core group {name!r} has no device")
        for d in self.devices:
            if d.core_group and d.core_group not in declared:
                raise ClusterSpecError(f"device {d.name!r} names core group {d.core_group!r}, "
                                       f"which the cluster does not declare ({declared})")
        self._check_tasks(specs)

    def _check_tasks(self, specs) -> None:
        tasks = tuple(self.tasks)
        object.__setattr__(self, "tasks", tasks)
        if not all(isinstance(t, Task) for t in tasks):
            raise ClusterSpecError(f"tasks must be Task objects, got "
                                   f"{[type(t).__name__ for t in tasks]}")
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise ClusterSpecError(f"the cluster lists a task twice: {names}")
        if not isinstance(self.target, str) or (self.target and not (
                self.target.startswith("grpc://")
                and is_server_address(self.target.removeprefix("grpc://")))):
            raise ClusterSpecError(f"target {self.target!r} is not a 'grpc://host:port' address")
        if not tasks:
            return
        for d, spec in zip(self.devices, specs):
            if spec.job is None or spec.task is None:
                raise ClusterSpecError(
                    f"device {d.name!r} names no job and task; in a cluster of TensorFlow tasks "
                    f"({', '.join(names)}) every device names its task, as in "
                    f"'{tasks[0].device_prefix}/device:CPU:0'")
            self.check_task(d.name)

    # --------------------------------------------------------------------------- accessors
    @property
    def num_devices(self) -> int:
        """How many devices the cluster has (D)."""
        return len(self.devices)

    @property
    def names(self) -> tuple[str, ...]:
        """The devices' names, in device order (index i is device i)."""
        return tuple(d.name for d in self.devices)

    @property
    def jobs(self) -> tuple[str, ...]:
        """The jobs of the cluster's tasks, in task order (empty without tasks)."""
        return tuple(dict.fromkeys(t.job for t in self.tasks))

    @functools.cached_property
    def device_tasks(self) -> np.ndarray:
        """[D] int64: the index in ``tasks`` of each device's task (all -1 without tasks)."""
        where = {(t.job, t.index): k for k, t in enumerate(self.tasks)}
        out = np.full(self.num_devices, -1, np.int64)
        if where:
            for i, d in enumerate(self.devices):
                spec = device_spec(d.name)
                out[i] = where[(spec.job, spec.task)]
        out.setflags(write=False)
        return out

    def _device(self, device) -> int:
        """``device`` as a device index; ClusterSpecError unless it is an int in [0, D)."""
        if not is_int(device) or not 0 <= device < self.num_devices:
            raise ClusterSpecError(f"a device index is an int in [0, {self.num_devices}), got "
                                   f"{device!r}")
        return int(device)

    def task_of(self, device: int) -> Task | None:
        """The task device ``device`` (an index) lives on; None without tasks.

        Raises:
          ClusterSpecError: ``device`` is not a device index of this cluster.
        """
        k = int(self.device_tasks[self._device(device)])
        return self.tasks[k] if k >= 0 else None

    def link_class(self, i: int, j: int) -> str:
        """The class of the link from device ``i`` to device ``j``: ``"task"``, ``"host"`` or
        ``"network"`` (:func:`tf_autoplace.core.tasks.link_class`); "" without tasks.

        Raises:
          ClusterSpecError: ``i`` or ``j`` is not a device index of this cluster.
        """
        a, b = self.task_of(i), self.task_of(j)
        return link_class(a, b) if a is not None else ""

    def check_task(self, name: str) -> None:
        """Raise ClusterSpecError when the device string ``name`` (a full device name, or a
        partial one such as ``/job:ps/task:1``) names a job or a task the cluster's tasks lack;
        a cluster without tasks takes any."""
        if not self.tasks:
            return
        import tensorflow as tf  # TF only when a device is named

        try:
            spec = tf.DeviceSpec.from_string(name)
        except (ValueError, TypeError) as e:
            raise ClusterSpecError(f"device name {name!r} is not a TF device string: {e}") \
                from e
        if spec.job is not None and spec.job not in self.jobs:
            raise ClusterSpecError(
                f"{name!r} names the job {spec.job!r}, which the cluster lacks (its tasks: "
                f"{', '.join(t.name for t in self.tasks)})")
        if spec.task is not None:
            jobs = [spec.job] if spec.job is not None else list(self.jobs)
            if not any(t.job in jobs and t.index == spec.task for t in self.tasks):
                where = f"job {spec.job!r}" if spec.job is not None else "any job"
                raise ClusterSpecError(
                    f"{name!r} names task {spec.task} of {where}, which the cluster lacks (its "
                    f"tasks: {', '.join(t.name for t in self.tasks)})")

    @property
    def memory(self) -> np.ndarray:
        """[D] int64 memory capacity per device."""
        return np.array([d.memory_bytes for d in self.devices], dtype=np.int64)

    def kind_mask(self, kinds: Sequence[str]) -> np.ndarray:
        """[len(kinds), D] bool: device d is of kind ``kinds[k]``.

        Raises:
          ClusterSpecError: ``kinds`` is one string (``"GPU"`` would be read as the kinds
            "G", "P" and "U", and match nothing) rather than a sequence of them.
        """
        if isinstance(kinds, (str, bytes)):
            raise ClusterSpecError(f"kinds must be a sequence of device kinds, such as "
                                   f"[{kinds!r}], got the string {kinds!r}")
        return np.array([[d.kind == k for d in self.devices] for k in kinds], dtype=bool)

    def reference_device(self, kind: str) -> int | None:
        """The device of ``kind`` whose times a measurement of that kind holds (a profile, a
        measured step): the first with speed 1, else the first of the kind; None when the
        cluster has no device of ``kind``.

        A TensorFlow cluster's speeds are relative to its reference task (speed 1), whose
        devices the profile timed; a shipped spec's speeds correct an analytical cost model
        (a host CPU's ``speed: 16``), and a measured time needs no such correction: it holds
        for the kind's first device as measured. The other devices of the kind get it scaled
        by their speed relative to this one (:meth:`relative_speeds`)."""
        devices = [d for d, device in enumerate(self.devices) if device.kind == kind]
        if not devices:
            return None
        return next((d for d in devices if self.devices[d].speed == 1.0), devices[0])

    def relative_speeds(self) -> np.ndarray:
        """[D] float64: each device's speed over its kind's :meth:`reference_device`'s: what
        a measured time of the kind is divided by on that device."""
        return np.array([d.speed / self.devices[self.reference_device(d.kind)].speed
                         for d in self.devices])

    def compute_devices(self) -> np.ndarray:
        """[k] int64: the devices placers spread work over, ascending: those of the default
        device's kind (the GPUs when there are any, else every device)."""
        kind = self.devices[self.default_device()].kind
        return np.flatnonzero([d.kind == kind for d in self.devices]).astype(np.int64)

    def index(self, name: str) -> int:
        """The device ``name`` denotes: the one of that name, else the one TensorFlow would
        resolve it to (``/device:GPU:1`` for ``/job:localhost/replica:0/task:0/device:GPU:1``;
        names are canonical and no two devices are one). ClusterSpecError when there is none,
        when ``name`` could be several (``/device:CPU:0`` on a cluster of several tasks) or
        names a job or task the cluster lacks."""
        for i, d in enumerate(self.devices):
            if d.name == name:
                return i
        spec = device_spec(name)
        self.check_task(name)
        found = [i for i, d in enumerate(self.devices)
                 if same_device(spec, device_spec(d.name))]
        if len(found) > 1:
            raise ClusterSpecError(f"{name!r} could be any of {[self.names[i] for i in found]}; "
                                   "name the job and task")
        if found:
            return found[0]
        raise ClusterSpecError(f"no device named {name!r}; devices are {list(self.names)}")

    def default_device(self) -> int:
        """The device a single-device placement uses: the first GPU, else the first device; on
        a cluster of tasks, of the task the target names when it names one (the master, where
        a graph runs without a hop to another server)."""
        order = list(range(self.num_devices))
        home = self.target_task()
        if home is not None:
            order.sort(key=lambda i: int(self.device_tasks[i]) != home)
        for i in order:
            if self.devices[i].kind == "GPU":
                return i
        return order[0]

    def target_task(self) -> int | None:
        """The index in ``tasks`` of the task whose address the target is (None: no target, or
        none of the tasks'). The addresses of this machine (``localhost``, ``127.0.0.1``,
        ``::1``, its own name: :func:`~tf_autoplace.core.tasks.host_of`) are one host: a spec
        may name its target by one and its tasks by another."""
        address = _same_host_form(self.target.removeprefix("grpc://"))
        for k, task in enumerate(self.tasks):
            if address and _same_host_form(task.address) == address:
                return k
        return None

    def client_cpu(self) -> str | None:
        """On a cluster of several TensorFlow tasks, the name of a CPU device of the target task
        (the server the client's Session connects to, the only task that can be in the client's
        process, where ops that call the program's Python must run); None on one process,
        without a target task, or without a CPU there."""
        home = self.target_task()
        if len(self.tasks) < 2 or home is None:
            return None
        return next((d.name for d, task in zip(self.devices, self.device_tasks)
                     if task == home and d.kind == "CPU"), None)

    def executors(self) -> tuple[np.ndarray, np.ndarray]:
        """``(executor [D], cores [E])``: the executor that runs each device's ops and how many
        ops each runs at once. Core groups first, in declared order; then every device outside
        a group, with one core of its own."""
        index = {name: e for e, (name, _) in enumerate(self.core_groups)}
        cores = [c for _, c in self.core_groups]
        executor = np.empty(self.num_devices, np.int64)
        for i, d in enumerate(self.devices):
            if d.core_group:
                executor[i] = index[d.core_group]
            else:
                executor[i] = len(cores)
                cores.append(1)
        return executor, np.asarray(cores, np.int64)

    def independent(self) -> "Cluster":
        """The same cluster with no core groups: every device on cores of its own."""
        return dataclasses.replace(
            self, devices=tuple(dataclasses.replace(d, core_group="") for d in self.devices),
            core_groups=())

    def subset(self, indices: Sequence[int]) -> "Cluster":
        """The cluster of the devices ``indices`` (in that order) with their links.

        Raises:
          ClusterSpecError: ``indices`` are not distinct device indices of this cluster.
        """
        try:
            given = np.asarray(indices)
        except (TypeError, ValueError) as e:
            raise ClusterSpecError(f"a subset needs distinct device indices in "
                                   f"[0, {self.num_devices}), got {indices!r}") from e
        if given.dtype.kind not in "iu" and given.size:  # (0.5 or True is no index)
            raise ClusterSpecError(f"a subset needs distinct device indices in "
                                   f"[0, {self.num_devices}), got {indices!r}")
        idx = given.astype(np.int64)
        if idx.ndim != 1 or len(idx) == 0 or len(set(idx.tolist())) != len(idx) or \
                idx.min() < 0 or idx.max() >= self.num_devices:
            raise ClusterSpecError(f"a subset needs distinct device indices in "
                                   f"[0, {self.num_devices}), got {idx.tolist()}")
        devices = tuple(self.devices[i] for i in idx.tolist())
        kept = {d.core_group for d in devices}
        return Cluster(devices=devices, bandwidth=self.bandwidth[np.ix_(idx, idx)],
                       latency=self.latency[np.ix_(idx, idx)], op_overhead_s=self.op_overhead_s,
                       core_groups=tuple(g for g in self.core_groups if g[0] in kept),
                       tasks=self.tasks, target=self.target,
                       prediction_error=self.prediction_error,
                       delay=self.delay[np.ix_(idx, idx)])

    # ------------------------------------------------------------------------- constructors
    @classmethod
    def uniform(cls, devices: Sequence[Device], *, bandwidth_gbps: float = PLACETO_BANDWIDTH_GBPS,
                latency_us: float = PLACETO_LATENCY_US,
                op_overhead_us: float = PLACETO_OP_OVERHEAD_US,
                core_groups: Sequence[tuple[str, int]] = ()) -> "Cluster":
        """All pairs of devices linked with the same bandwidth and latency.

        Args:
          devices: a sequence of :class:`Device` (a list or tuple, at most
            :data:`MAX_DEVICES`).
          bandwidth_gbps, latency_us, op_overhead_us: every link's figures, every op's fixed
            cost.
          core_groups: ``(name, cores)`` pairs.

        Raises:
          ClusterSpecError: any of them malformed, named.
        """
        _check_number("bandwidth_gbps", bandwidth_gbps)
        _check_number("latency_us", latency_us, zero_ok=True)
        _check_number("op_overhead_us", op_overhead_us, zero_ok=True)
        if isinstance(devices, Device) or not isinstance(devices, (list, tuple)):
            raise ClusterSpecError(f"devices must be a list or tuple of Device objects, got "
                                   f"{type(devices).__name__}"
                                   + (" (one device: give [device])"
                                      if isinstance(devices, Device) else ""))
        _check_device_count(len(devices))
        if isinstance(core_groups, (str, bytes)) or \
                not isinstance(core_groups, collections.abc.Iterable):
            raise ClusterSpecError(f"core_groups must be (name, cores) pairs, got "
                                   f"{core_groups!r}")
        d = len(devices)
        return cls(devices=tuple(devices), bandwidth=np.full((d, d), bandwidth_gbps * 1e9),
                   latency=np.full((d, d), latency_us * 1e-6), op_overhead_s=op_overhead_us * 1e-6,
                   core_groups=tuple(core_groups))

    @classmethod
    def from_proto(cls, spec: cluster_pb2.ClusterSpec) -> "Cluster":
        """The cluster a parsed ``ClusterSpec`` message describes (``proto/cluster.proto``;
        the shipped specs in ``tf_autoplace/clusters/`` are examples).

        Args:
          spec: a ``tf_autoplace.proto.cluster_pb2.ClusterSpec``.

        Raises:
          ClusterSpecError: ``spec`` is not a ClusterSpec, or what it says is not a cluster
            (no devices, a malformed device, link or core group), named.
        """
        if not isinstance(spec, cluster_pb2.ClusterSpec):
            raise ClusterSpecError(f"from_proto takes a ClusterSpec message, got "
                                   f"{type(spec).__name__} (a spec's text: Cluster.from_text; "
                                   "a spec file: Cluster.from_file)")
        devices = []
        for ds in spec.device:
            kwargs = dict(name=ds.name, kind=ds.kind, memory_bytes=ds.memory_bytes,
                          speed=ds.speed or 1.0, architecture=ds.architecture,
                          core_group=ds.core_group, model=ds.model)
            for field in ("num_cores", "frequency_mhz", "memory_bandwidth_gbps"):
                if getattr(ds, field):
                    kwargs[field] = getattr(ds, field)
            devices.append(Device(**kwargs))
        if not devices:
            raise ClusterSpecError("the cluster spec lists no devices")
        def given(field, default):
            return getattr(spec, field) if spec.HasField(field) else default

        cluster = cls.uniform(
            devices,
            bandwidth_gbps=given("default_bandwidth_gbps", PLACETO_BANDWIDTH_GBPS),
            latency_us=given("default_latency_us", PLACETO_LATENCY_US),
            op_overhead_us=given("op_overhead_us", PLACETO_OP_OVERHEAD_US),
            core_groups=[(g.name, g.cores) for g in spec.core_group])
        tasks = tuple(Task(t.job, t.index, t.address) for t in spec.task)
        if spec.link_class and not tasks:
            raise ClusterSpecError("link classes (link_class) are for a cluster of TensorFlow "
                                   "tasks; this spec lists no task")
        classes = {}
        for entry in spec.link_class:
            if entry.name in classes:
                raise ClusterSpecError(f"link class {entry.name!r} is given twice")
            default = DEFAULT_LINK_CLASSES.get(entry.name, LinkClass(
                given("default_bandwidth_gbps", PLACETO_BANDWIDTH_GBPS),
                given("default_latency_us", PLACETO_LATENCY_US)))
            classes[entry.name] = LinkClass(
                entry.bandwidth_gbps if entry.HasField("bandwidth_gbps") else
                default.bandwidth_gbps,
                entry.latency_us if entry.HasField("latency_us") else default.latency_us)
        cluster = dataclasses.replace(cluster, tasks=tasks, target=spec.target,
                                      prediction_error=given("prediction_error", None))
        bw, lat, delay = cluster.bandwidth.copy(), cluster.latency.copy(), cluster.delay.copy()
        if tasks:
            _class_links([cluster.task_of(i) for i in range(cluster.num_devices)],
                         _link_classes(classes), bw, lat)
        seen = set()
        for link in spec.link:
            i, j = cluster.index(link.src), cluster.index(link.dst)
            if i == j:
                raise ClusterSpecError(f"a link entry goes from {link.src!r} to itself: a "
                                       "device sends nothing to itself; links join two devices")
            if (i, j) in seen:
                raise ClusterSpecError(f"two link entries go from {link.src!r} to {link.dst!r}; "
                                       "give each pair once")
            seen.add((i, j))
            if link.HasField("bandwidth_gbps"):
                bw[i, j] = link.bandwidth_gbps * 1e9
            if link.HasField("latency_us"):
                lat[i, j] = link.latency_us * 1e-6
            if link.HasField("delay_us"):
                delay[i, j] = link.delay_us * 1e-6
        return dataclasses.replace(cluster, bandwidth=bw, latency=lat, delay=delay)

    @classmethod
    def from_tf(cls, spec, devices=None, *, links=None, target: str | None = None) -> "Cluster":
        """The cluster of the tasks of a TensorFlow cluster.

        Args:
          spec: the TensorFlow cluster: a ``tf.train.ClusterSpec``, a dict of jobs, a
            ``TF_CONFIG`` (JSON string or dict) or a cluster resolver
            (:func:`tf_autoplace.core.tasks.parse_tasks`).
          devices: what each task holds, as a one-machine cluster whose devices the task gets
            under its own name (``/job:localhost/replica:0/task:0/device:GPU:1`` becomes
            ``/job:worker/replica:0/task:3/device:GPU:1``) with their links and core groups
            (a group per task): anything :func:`resolve_cluster` takes (a :class:`Cluster`, a
            shipped name such as ``"k80x2"``, a spec file, ``"local"``) for every task, or a
            dict from a job name (``"ps"``) or a task (``"worker:1"``, or ``("worker", 1)``) to
            one, the task's entry before its job's; tasks it does not cover, None and
            ``"local"`` get ``local(configured=False)``'s devices (each task taken for a
            process of a machine like this one, whatever logical CPUs this process
            configured). Tasks whose addresses name one host and whose devices are this
            machine's CPU (its core group :data:`HOST_CORE_GROUP`: ``"local"``'s, and
            ``served_devices``') share the host's cores, as their server processes do (one
            core group: two servers on a 2-core machine have 2 cores between them, not 2
            each); devices described otherwise keep a core group per task. The devices
            running servers have: :func:`tf_autoplace.hw.cluster_profile.served_devices`;
            their measured speeds and links:
            :func:`tf_autoplace.hw.cluster_profile.profile_cluster`.
          links: the link classes' figures, ``{"task" | "host" | "network": LinkClass or
            (bandwidth_gbps, latency_us)}``; a class not given keeps its default (for "task":
            the links of the task's own devices; else
            :data:`tf_autoplace.core.tasks.DEFAULT_LINK_CLASSES`).
          target: the ``grpc://`` address a Session connects to; None: the one ``spec`` gives
            (:func:`tf_autoplace.core.tasks.parse_tasks`).

        Returns:
          The Cluster, its devices in task order (tasks sorted by job and index), ``tasks`` and
          ``target`` set; its op overhead is the first task's.

        Raises:
          ClusterSpecError: a malformed TensorFlow cluster; a key of ``devices`` naming a job
            or task the cluster lacks; a task's devices that already name another task; an
            unknown link class.
        """
        tasks, found = parse_tasks(spec)
        templates = _task_templates(tasks, devices)
        classes = _link_classes(links)
        # Tasks of one host with this machine's CPU: the cores of that host, shared.
        machine = [dict(t.core_groups).get(HOST_CORE_GROUP) for t in templates]
        hosts = collections.Counter(t.host for t, m in zip(tasks, machine) if m and t.host)
        out, groups, owner = [], [], []
        for task, template, m in zip(tasks, templates, machine):
            shared = f"tasks on {task.host}/{HOST_CORE_GROUP}" if m and hosts[task.host] > 1 \
                else None

            def group_of(name: str) -> str:
                return shared if shared and name == HOST_CORE_GROUP else f"{task.name}/{name}"

            for device in template.devices:
                out.append(dataclasses.replace(_in_task(device, task), core_group=group_of(
                    device.core_group) if device.core_group else ""))
                owner.append(task)
            for name, cores in template.core_groups:
                if group_of(name) not in dict(groups):
                    groups.append((group_of(name), cores))
        d = len(out)
        bw, lat, delay = np.zeros((d, d)), np.zeros((d, d)), np.zeros((d, d))
        start = 0
        for template in templates:
            block = slice(start, start + template.num_devices)
            bw[block, block], lat[block, block] = template.bandwidth, template.latency
            delay[block, block] = template.delay
            start += template.num_devices
        _class_links(owner, classes, bw, lat)
        return cls(devices=tuple(out), bandwidth=bw, latency=lat, delay=delay,
                   op_overhead_s=templates[0].op_overhead_s, core_groups=tuple(groups),
                   tasks=tasks, target=found if target is None else target)

    @classmethod
    def from_text(cls, text: str) -> "Cluster":
        """The cluster a text-format ``ClusterSpec`` describes (what a spec file holds).

        Args:
          text: the spec's text (str, or UTF-8 bytes).

        Raises:
          ClusterSpecError: ``text`` is not text, does not parse as a ClusterSpec, or what it
            says is not a cluster, named.
        """
        if not isinstance(text, (str, bytes)):
            raise ClusterSpecError(f"from_text takes a spec's text, got {type(text).__name__} "
                                   "(a file's path: Cluster.from_file)")
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ClusterSpecError(f"a cluster spec's bytes must be UTF-8 text: {e}") from e
        try:
            spec = text_format.Parse(text, cluster_pb2.ClusterSpec())
        except (text_format.ParseError, _pb_message.DecodeError) as e:
            raise ClusterSpecError(f"malformed cluster spec: {e}") from e
        return cls.from_proto(spec)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "Cluster":
        """The cluster a text ``ClusterSpec`` file describes.

        Raises:
          ClusterSpecError: ``path`` is not a path (an int would be read as an open file
            descriptor, and closed), or the file cannot be read or is not a spec.
        """
        if not isinstance(path, (str, os.PathLike)):
            raise ClusterSpecError(f"a cluster spec's path must be a str or os.PathLike, got "
                                   f"{type(path).__name__} {path!r}")
        try:
            with open(path, "r", encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError, ValueError) as e:  # ValueError: a NUL in it
            raise ClusterSpecError(f"cannot read cluster spec {str(path)!r}: {e}") from e
        try:
            return cls.from_text(text)
        except ClusterSpecError as e:
            raise ClusterSpecError(f"{path}: {e}") from e

    @classmethod
    def local(cls, num_logical_cpus: int = 0, *, configured: bool = True) -> "Cluster":
        """The devices TensorFlow sees on this machine, described as TensorFlow describes them.

        * **CPU.** With ``num_logical_cpus > 0`` the host is that many logical CPU devices
          (``/device:CPU:0..N-1``), the way a v1 Session with ``device_count={'CPU': N}`` runs
          it; otherwise the logical CPU devices the program configured
          (``tf.config.set_logical_device_configuration``, :func:`configured_logical_cpus`;
          read without starting TensorFlow's runtime, which would fix the configuration), one
          when it configured none (or with ``configured=False``: the devices another
          process of this machine has by default, as a TensorFlow server's task does). Every
          CPU device gets the host's memory (they share it)
          and its cores and clock as TensorFlow reads them (:func:`_tf_device_properties`), and
          all of them form one core group, ``"host"``, with the host's cores: TensorFlow runs
          every CPU device of a process on one thread pool of that many threads, so N logical
          CPUs run no more ops at once than one does (module docstring). Where the program
          made that pool smaller (:func:`inter_op_threads`), the group has that many cores:
          the pool, not the host, then bounds how many ops run at once.
        * **GPUs** (only without ``num_logical_cpus``): each with its name and compute
          capability (``tf.config.experimental.get_device_details``), the memory TensorFlow
          may use on it (``memory_limit``), and its streaming multiprocessors, clock and memory
          bandwidth as TensorFlow's cost model reads them from the CUDA driver. If TensorFlow
          does not give those three (its private Grappler API changed), they are a V100's (80
          SMs, 1400 MHz, 900 GB/s), which only Grappler's analytical op costs use.

        Links: 10 GB/s and 5 us per transfer, a stand-in for host-memory copies until measured
        (``tf-autoplace profile`` writes a spec with measured links).
        """
        if (isinstance(num_logical_cpus, bool) or not isinstance(num_logical_cpus, (int, np.integer))
                or num_logical_cpus < 0):
            raise ClusterSpecError(f"num_logical_cpus must be an int >= 0, got "
                                   f"{num_logical_cpus!r}")
        _check_device_count(int(num_logical_cpus))  # before building them
        props = _tf_device_properties()
        cpu = props.get("CPU:0")
        cores = int(cpu.num_cores) if cpu is not None and cpu.num_cores > 0 else \
            (os.cpu_count() or 1)
        threads = inter_op_threads()
        group_cores = min(cores, threads) if threads else cores
        mhz = int(cpu.frequency) if cpu is not None and cpu.frequency > 0 else 2000
        total = _host_memory_bytes()
        devices = [
            Device(name=f"/job:localhost/replica:0/task:0/device:CPU:{i}", kind="CPU",
                   memory_bytes=total, num_cores=cores, frequency_mhz=mhz,
                   memory_bandwidth_gbps=20.0, core_group=HOST_CORE_GROUP)
            for i in range(num_logical_cpus or (configured_logical_cpus() if configured else 1))
        ]
        if num_logical_cpus == 0:
            devices += _local_gpus(props)
        # Logical devices on one host exchange tensors through host memory.
        return cls.uniform(devices, bandwidth_gbps=10.0, latency_us=5.0,
                           core_groups=[(HOST_CORE_GROUP, group_cores)])

    def to_proto(self) -> cluster_pb2.ClusterSpec:
        """The cluster as a ``ClusterSpec`` message (what :meth:`from_proto` reads back)."""
        spec = cluster_pb2.ClusterSpec(op_overhead_us=self.op_overhead_s * 1e6)
        for d in self.devices:
            spec.device.add(name=d.name, kind=d.kind, memory_bytes=d.memory_bytes, speed=d.speed,
                            num_cores=d.num_cores, frequency_mhz=d.frequency_mhz,
                            memory_bandwidth_gbps=d.memory_bandwidth_gbps,
                            architecture=d.architecture, core_group=d.core_group,
                            model=d.model)
        for name, cores in self.core_groups:
            spec.core_group.add(name=name, cores=int(cores))
        for task in self.tasks:
            spec.task.add(job=task.job, index=task.index, address=task.address)
        spec.target = self.target
        if self.prediction_error is not None:
            spec.prediction_error = self.prediction_error
        for i, a in enumerate(self.devices):
            for j, b in enumerate(self.devices):
                if i != j:
                    link = spec.link.add(src=a.name, dst=b.name,
                                         bandwidth_gbps=self.bandwidth[i, j] / 1e9,
                                         latency_us=self.latency[i, j] * 1e6)
                    if self.delay[i, j]:
                        link.delay_us = self.delay[i, j] * 1e6
        return spec


def _link_classes(links) -> dict[str, LinkClass]:
    """``links`` (as :meth:`Cluster.from_tf` takes it) with the defaults of the classes it does
    not give ("task" stays absent: the task's own links)."""
    if links is None:
        links = {}
    if not isinstance(links, dict):
        raise ClusterSpecError(f"links must be a dict of link classes {LINK_CLASSES}, got "
                               f"{type(links).__name__}")
    out = dict(DEFAULT_LINK_CLASSES)
    for name, value in links.items():
        if name not in LINK_CLASSES:
            raise ClusterSpecError(f"unknown link class {name!r}; the classes are {LINK_CLASSES}")
        if isinstance(value, LinkClass):
            out[name] = value
        elif isinstance(value, (tuple, list)) and len(value) == 2:
            out[name] = LinkClass(*value)
        else:
            raise ClusterSpecError(f"link class {name!r} must be a LinkClass or (bandwidth_gbps, "
                                   f"latency_us), got {value!r}")
    return out


def _class_links(owner: list, classes: dict[str, LinkClass], bandwidth: np.ndarray,
                 latency: np.ndarray) -> None:
    """Set, in place, every link between devices whose tasks are ``owner[i]`` to the figures of
    its class in ``classes`` (a class absent from it keeps the links given)."""
    for i, a in enumerate(owner):
        for j, b in enumerate(owner):
            figures = classes.get(link_class(a, b)) if i != j else None
            if figures is not None:
                bandwidth[i, j] = figures.bandwidth_gbps * 1e9
                latency[i, j] = figures.latency_us * 1e-6


def _task_templates(tasks: tuple[Task, ...], devices) -> list[Cluster]:
    """The one-machine cluster of each task (see :meth:`Cluster.from_tf`'s ``devices``)."""
    # A task is another process (a server), with the devices a process of this machine has
    # by default, whatever logical CPUs the calling process configured for itself.
    local = functools.cache(functools.partial(Cluster.local, configured=False))

    def resolve(value) -> Cluster:
        return local() if value is None or (isinstance(value, str) and value == "local") \
            else resolve_cluster(value)

    if not isinstance(devices, dict):
        template = resolve(devices)
        templates = [template] * len(tasks)
    else:
        by_name = {}
        for key, value in devices.items():
            if isinstance(key, tuple) and len(key) == 2:
                key = f"{key[0]}:{key[1]}"
            if not isinstance(key, str) or not any(key in (t.job, t.name) for t in tasks):
                raise ClusterSpecError(
                    f"devices are given for {key!r}, which is neither a job nor a task of the "
                    f"cluster (its tasks: {', '.join(t.name for t in tasks)})")
            by_name[key] = value
        templates = []
        for task in tasks:
            value = by_name.get(task.name, by_name.get(task.job))
            templates.append(resolve(value))
    for task, template in zip(tasks, templates):
        if template.tasks:
            raise ClusterSpecError(f"the devices of task {task.name} must be one machine's; the "
                                   f"cluster given for it has tasks of its own")
    return templates


def _in_task(device: Device, task: Task) -> Device:
    """``device`` of a one-machine cluster, renamed into ``task`` (core group too)."""
    spec = device_spec(device.name)
    if spec.job not in (None, "localhost") or (spec.task or 0) or (spec.replica or 0):
        raise ClusterSpecError(f"the devices of task {task.name} must be one machine's "
                               f"(/job:localhost/replica:0/task:0 or no job); got {device.name!r}")
    return dataclasses.replace(
        device, name=f"{task.device_prefix}/device:{spec.device_type}:{spec.device_index}",
        core_group=f"{task.name}/{device.core_group}" if device.core_group else "")


@functools.lru_cache(maxsize=1)
def _tf_device_properties() -> dict:
    """{"CPU:0": DeviceProperties, "GPU:0": ...}: TensorFlow's own description of this
    machine's devices, the numbers its Grappler cost model uses (cores and clock; for a GPU its
    multiprocessors, clock, memory bandwidth and compute capability, read from the CUDA driver).

    They come from Grappler's single-machine cluster, a private TensorFlow API. It is called
    here, not in :mod:`tf_autoplace.graph.grappler` (the module that wraps Grappler otherwise),
    because the cluster sits below the graph package and cannot import it. Read once per
    process; if the API fails, the result is empty and the callers keep their defaults.
    """
    try:
        from tensorflow.python.grappler import cluster as gcluster  # TF only at the edge

        machine = gcluster.Cluster(allow_soft_placement=True, disable_detailed_stats=True,
                                   disable_timeline=True)
        try:
            listed = machine.ListDevices()
        finally:
            machine.Shutdown()
    except Exception:  # noqa: BLE001  (a private API: any failure means "not available")
        return {}
    out = {}
    for named in listed:
        kind, _, index = named.name.rpartition("device:")[2].partition(":")
        out[f"{kind.upper()}:{index}"] = named.properties
    return out


def inter_op_threads() -> int:
    """How many ops TensorFlow's inter-op thread pool runs at once in this process, where the
    program limited it; 0 where it did not (the pool then has a thread per core).

    A Session created without a config takes the process's threading settings
    (``tf.config.threading.set_inter_op_parallelism_threads``), and so do ``tf.function`` and
    eager ops; without a setting TensorFlow reads ``TF_NUM_INTEROP_THREADS``. A negative
    setting (or variable) runs every op in the caller's thread: one at a time. A Session given its own
    ``ConfigProto`` is not seen here (describe its cores with a cluster spec).
    """
    import tensorflow as tf  # TF only at the edge

    setting = int(tf.config.threading.get_inter_op_parallelism_threads())
    if setting == 0:
        try:
            setting = int(os.environ.get("TF_NUM_INTEROP_THREADS", "0"))
        except ValueError:  # TensorFlow ignores a value it cannot read
            setting = 0
    return 1 if setting < 0 else setting


def configured_logical_cpus() -> int:
    """How many CPU devices this process's TensorFlow has: the logical devices the program
    configured on its CPU (``tf.config.set_logical_device_configuration``), else one. Reads
    the configuration only: TensorFlow's runtime is not started, so the program may still
    configure its devices afterwards."""
    import tensorflow as tf  # TF only at the edge

    cpus = tf.config.list_physical_devices("CPU")
    configured = tf.config.get_logical_device_configuration(cpus[0]) if cpus else None
    return max(len(configured or ()), 1)


def _local_gpus(props: dict) -> list[Device]:
    """This machine's GPUs as devices (see :meth:`Cluster.local`)."""
    import tensorflow as tf  # TF only at the edge
    from tensorflow.python.client import device_lib

    memory = {}
    for dev in device_lib.list_local_devices():
        if dev.device_type == "GPU":
            memory[dev.name.rpartition("device:")[2].upper()] = int(dev.memory_limit)
    out = []
    for i, physical in enumerate(tf.config.list_physical_devices("GPU")):
        details = tf.config.experimental.get_device_details(physical)
        capability = details.get("compute_capability")
        gpu = props.get(f"GPU:{i}")
        known = gpu is not None and gpu.num_cores > 0 and gpu.frequency > 0 and gpu.bandwidth > 0
        out.append(Device(
            name=f"/job:localhost/replica:0/task:0/device:GPU:{i}", kind="GPU",
            memory_bytes=memory.get(f"GPU:{i}") or int(gpu.memory_size if gpu else 0) or 2**30,
            num_cores=int(gpu.num_cores) if known else 80,
            frequency_mhz=int(gpu.frequency) if known else 1400,
            memory_bandwidth_gbps=gpu.bandwidth / 1e6 if known else 900.0,  # KB/s -> GB/s
            architecture=(f"{capability[0]}.{capability[1]}" if capability
                          else gpu.environment.get("architecture", "") if gpu else ""),
            model=details.get("device_name", "")))
    return out


def _host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 * 2**30


def shipped_clusters() -> tuple[str, ...]:
    """The names of the cluster specs shipped in the package (``tf_autoplace/clusters``),
    sorted: ``("cpu2", "k80x2", ...)``."""
    return tuple(sorted(entry.name.removesuffix(SPEC_SUFFIX) for entry in _SPECS.iterdir()
                        if entry.name.endswith(SPEC_SUFFIX)))


def shipped_cluster(name: str) -> Cluster:
    """The shipped cluster spec ``name`` (see :func:`shipped_clusters`)."""
    if name not in shipped_clusters():
        raise ClusterSpecError(f"no shipped cluster named {name!r}; shipped: "
                               f"{', '.join(shipped_clusters())}")
    spec = _SPECS.joinpath(name + SPEC_SUFFIX)
    try:
        return Cluster.from_text(spec.read_text(encoding="utf-8"))
    except ClusterSpecError as e:
        raise ClusterSpecError(f"shipped cluster {name!r}: {e}") from e


def resolve_cluster(cluster) -> Cluster:
    """A Cluster from any of the forms the public doors accept:

    - a :class:`Cluster`, returned as is;
    - ``"local"`` or None: :meth:`Cluster.local`;
    - the name of a shipped spec (``"k80x4"``, see :func:`shipped_clusters`);
    - the path of a text ``ClusterSpec`` file (``str`` or ``os.PathLike``).

    A string is a name when it is a shipped name and no file of that name exists here (a file
    always wins, so a user's own file called ``k80x4`` is read as a file); anything else is a
    path. A string without directory or extension that is neither a file nor a shipped name
    is a :class:`ClusterSpecError` that lists the shipped names.
    """
    if cluster is None or (isinstance(cluster, str) and cluster == "local"):
        return Cluster.local()
    if isinstance(cluster, Cluster):
        return cluster
    if isinstance(cluster, str) and not os.path.isfile(cluster):
        if cluster in shipped_clusters():
            return shipped_cluster(cluster)
        if not os.path.splitext(cluster)[1] and not os.path.dirname(cluster):
            raise ClusterSpecError(  # a name, not a path: say which names there are
                f"cannot read cluster spec {cluster!r}: it is neither a file nor a shipped "
                f"cluster ({', '.join(shipped_clusters())}, or 'local')")
    if isinstance(cluster, (str, os.PathLike)):
        return Cluster.from_file(cluster)
    raise ConfigError(f"cluster must be a Cluster, a shipped cluster name, a spec file path or "
                      f"'local', got {type(cluster).__name__}")

