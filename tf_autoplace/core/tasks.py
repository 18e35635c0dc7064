"""The jobs and tasks of a TensorFlow cluster, and the class of the link between two of them.

A TensorFlow cluster (``tf.train.ClusterSpec``) is a set of *jobs* (``"ps"``, ``"worker"``), each
a list of *tasks*; a task is one ``tf.distribute.Server`` process at ``host:port``, and the
devices of task ``i`` of job ``j`` are named ``/job:j/replica:0/task:i/device:...``.
:func:`parse_tasks` reads the tasks from any of the forms TensorFlow hands them around in:

- a ``tf.train.ClusterSpec`` (anything with ``as_dict()``);
- a dict ``{job: [address, ...]}`` or ``{job: {index: address}}`` (sparse tasks), as
  ``tf.train.ClusterSpec`` takes;
- a ``TF_CONFIG`` value, as a JSON string or its dict: ``{"cluster": {...}, "task": {"type":
  job, "index": i}}``;
- a cluster resolver (``tf.distribute.cluster_resolver.ClusterResolver``: anything with
  ``cluster_spec()``; its ``master()`` is the target).

It also returns the *target* a client Session connects to: the resolver's ``master()``; the
task ``TF_CONFIG`` names; else the first task of the job ``chief``, ``master`` or ``worker``
(in that order), else of the first job.

**Link classes.** A transfer between two devices costs what the link between them costs, and
links come in three classes (:data:`LINK_CLASSES`, :func:`link_class`): ``"task"``, inside
one task (host memory, or a GPU's PCIe bus: what the task's own device description says);
``"host"``, between two tasks on one machine (gRPC over loopback); ``"network"``, between
tasks on different machines. Two tasks share a machine when their addresses name the same host,
every loopback name (``localhost``, ``127.0.0.0/8``, ``::1``) counting as one. The classes'
default figures (:data:`DEFAULT_LINK_CLASSES`) are stand-ins until measured
(``tf_autoplace.hw.cluster_profile``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import math
import numbers
import re
import socket

from tf_autoplace.errors import ClusterSpecError

LINK_CLASSES = ("task", "host", "network")
JOB_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")  # TensorFlow's rule for job names
# The jobs whose first task a client Session targets by default, in order.
MASTER_JOBS = ("chief", "master", "worker")
LOOPBACK = "loopback"
# Device names and specs carry a task index as an int64 (DeviceSpec, cluster.proto).
MAX_TASK_INDEX = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class LinkClass:
    """Bandwidth (GB/s, 1e9 bytes per second; > 0) and latency (us per transfer; >= 0) of
    every link of one class."""

    bandwidth_gbps: float
    latency_us: float

    def __post_init__(self):
        for field, zero_ok in (("bandwidth_gbps", False), ("latency_us", True)):
            value = getattr(self, field)
            if (isinstance(value, bool) or not isinstance(value, numbers.Real)
                    or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok)):
                raise ClusterSpecError(f"a link class has {field}={value!r}; must be finite and "
                                       f"{'>= 0' if zero_ok else '> 0'}")


# Stand-ins until measured. "host": a tensor sent by gRPC between two processes of one machine
# costs about a copy through the kernel and a serialisation on each side (1 GB/s and 200 us
# per transfer on this project's 2-core machine, tf_autoplace.hw.cluster_profile); "network":
# 10 Gb/s Ethernet (1.25 GB/s), with gRPC's per-message cost and a switch hop on top.
DEFAULT_LINK_CLASSES = {"host": LinkClass(1.0, 200.0), "network": LinkClass(1.25, 300.0)}


@dataclasses.dataclass(frozen=True)
class Task:
    """One task of a TensorFlow cluster.

    Attributes:
      job: the job's name (TensorFlow's rule: ``[A-Za-z][A-Za-z0-9_]*``).
      index: the task's index in its job (>= 0).
      address: ``host:port`` of its server ("" when not known).
    """

    job: str
    index: int
    address: str = ""

    def __post_init__(self):
        if not isinstance(self.job, str) or not JOB_NAME.fullmatch(self.job):
            raise ClusterSpecError(f"job name {self.job!r} is not one TensorFlow takes "
                                   "([A-Za-z][A-Za-z0-9_]*)")
        if isinstance(self.index, bool) or not isinstance(self.index, numbers.Integral) \
                or not 0 <= self.index <= MAX_TASK_INDEX:
            raise ClusterSpecError(f"task {self.job}:{self.index!r} has a bad index; must be an "
                                   f"int in [0, {MAX_TASK_INDEX}]")
        object.__setattr__(self, "index", int(self.index))
        if not isinstance(self.address, str):
            raise ClusterSpecError(f"task {self.name} has the address {self.address!r}; must be "
                                   "a 'host:port' string")
        if self.address and not is_server_address(self.address):
            raise ClusterSpecError(f"task {self.name} has the address {self.address!r}, which "
                                   "TensorFlow cannot connect to: it must be 'host:port'")

    @property
    def name(self) -> str:
        """``"worker:1"``."""
        return f"{self.job}:{self.index}"

    @property
    def device_prefix(self) -> str:
        """``"/job:worker/replica:0/task:1"``: what the names of its devices start with."""
        return f"/job:{self.job}/replica:0/task:{self.index}"

    @property
    def host(self) -> str:
        """The machine of the task's address: its host part, :data:`LOOPBACK` for any loopback
        name, "" when the address is not known."""
        return host_of(self.address)


def is_server_address(address: str) -> bool:
    """Whether TensorFlow's gRPC runtime takes ``address`` as a server's: ``host:port`` with a
    port that parses as an unsigned 32-bit number and no ``/`` in the host (or a ``/bns/``
    name), the rule its channel cache applies when a Session or server first uses a cluster.
    A spec that breaks it places, then fails at the first run on the cluster; so it is refused
    when it is read."""
    if address.startswith("/bns/"):
        return True
    host, colon, port = address.rpartition(":")
    return bool(colon) and "/" not in host and port.isascii() and port.isdigit() \
        and int(port) < 2**32


def host_of(address: str) -> str:
    """``"10.0.0.2:2222"`` -> ``"10.0.0.2"``; an address of this machine -> :data:`LOOPBACK`
    (``"localhost:2222"``, ``"127.0.0.1:1"``, ``"[::1]:1"``, ``ip6-localhost``, this
    machine's own name as ``socket.gethostname()`` gives it, and ``"0.0.0.0:1"`` or
    ``"[::]:1"``, which a client's connection takes to this machine); "" -> "". Names are
    compared, never looked up: a name lookup can wait on a network."""
    if not address:
        return ""
    host = address.rsplit(":", 1)[0] if ":" in address else address
    host = host.strip("[]").lower()
    if host in ("localhost", "ip6-localhost", "ip6-loopback", socket.gethostname().lower()):
        return LOOPBACK
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    return LOOPBACK if ip.is_loopback or ip.is_unspecified else host


def link_class(a: Task, b: Task) -> str:
    """The class of the links between a device of task ``a`` and one of task ``b``
    (module docstring). Tasks whose machines are not known are taken as different machines."""
    if (a.job, a.index) == (b.job, b.index):
        return "task"
    if a.host and a.host == b.host:
        return "host"
    return "network"


def parse_tasks(spec) -> tuple[tuple[Task, ...], str]:
    """``(tasks, target)`` of a TensorFlow cluster given in any of the forms of the module
    docstring: its tasks sorted by job name and index (as ``tf.train.ClusterSpec`` lists
    them), and the ``grpc://`` address a client Session connects to ("" if none can be told).

    Raises ClusterSpecError for anything else, a TF_CONFIG that is not JSON or has no
    ``"cluster"``, a bad job name, index or address, a task listed twice (``{0: a, "0": b}``),
    or a cluster without tasks."""
    target, chosen = "", None
    if hasattr(spec, "cluster_spec") and callable(spec.cluster_spec):  # a cluster resolver
        master = spec.master() if callable(getattr(spec, "master", None)) else ""
        target = _grpc(master) if master else ""
        spec = spec.cluster_spec()
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except (json.JSONDecodeError, RecursionError) as e:  # (nested thousands deep)
            raise ClusterSpecError(f"a TF_CONFIG string must be JSON: {e} (got {spec[:80]!r})") \
                from None
    if hasattr(spec, "as_dict") and callable(spec.as_dict):  # tf.train.ClusterSpec
        spec = spec.as_dict()
    if isinstance(spec, dict) and ("cluster" in spec or "task" in spec):  # TF_CONFIG
        if not isinstance(spec.get("cluster"), dict):
            raise ClusterSpecError(f"a TF_CONFIG needs a 'cluster' dict of jobs; got "
                                   f"{spec.get('cluster')!r}")
        task = spec.get("task") or {}
        if task:
            if not isinstance(task, dict) or "type" not in task:
                raise ClusterSpecError(f"TF_CONFIG's 'task' must be {{'type': job, 'index': i}}, "
                                       f"got {task!r}")
            chosen = (task["type"], task.get("index", 0))
        spec = spec["cluster"]
    if not isinstance(spec, dict):
        raise ClusterSpecError(
            f"a TensorFlow cluster is a tf.train.ClusterSpec, a dict of jobs, a TF_CONFIG (JSON "
            f"string or dict) or a cluster resolver; got {type(spec).__name__}")
    tasks = []
    for job in sorted(spec, key=str):
        addresses = spec[job]
        if isinstance(addresses, dict):
            items = sorted(addresses.items(), key=lambda kv: str(kv[0]))
        elif isinstance(addresses, (list, tuple)):
            items = list(enumerate(addresses))
        else:
            raise ClusterSpecError(f"job {job!r} must list its tasks' addresses (a list, or a "
                                   f"dict index -> address), got {addresses!r}")
        seen = {}
        for index, address in sorted(items, key=lambda kv: _index(job, kv[0])):
            if not isinstance(address, str) or not address:
                raise ClusterSpecError(f"task {job}:{index} has the address {address!r}; must be "
                                       "'host:port'")
            value = _index(job, index)
            if value in seen:  # {0: ..., "0": ...}: two keys, one task
                raise ClusterSpecError(f"task {job}:{value} is listed twice (as {seen[value]!r} "
                                       f"and {index!r})")
            seen[value] = index
            tasks.append(Task(job, value, address))
    if not tasks:
        raise ClusterSpecError("the TensorFlow cluster has no tasks")
    if chosen is not None:
        found = [t for t in tasks if (t.job, t.index) == (chosen[0], _index(*chosen))]
        if not found:
            raise ClusterSpecError(f"TF_CONFIG's task {chosen[0]}:{chosen[1]} is not in its "
                                   f"cluster ({', '.join(t.name for t in tasks)})")
        target = target or _grpc(found[0].address)
    if not target:
        for job in MASTER_JOBS + tuple(t.job for t in tasks):
            first = next((t for t in tasks if t.job == job), None)
            if first is not None:
                target = _grpc(first.address)
                break
    return tuple(tasks), target


def _index(job, index) -> int:
    try:
        value = int(index)
    except (TypeError, ValueError):
        raise ClusterSpecError(f"job {job!r} has the task index {index!r}; must be an int >= 0") \
            from None
    if not 0 <= value <= MAX_TASK_INDEX or (isinstance(index, float) and index != value):
        raise ClusterSpecError(f"job {job!r} has the task index {index!r}; must be an int in "
                               f"[0, {MAX_TASK_INDEX}]")
    return value


def _grpc(address: str) -> str:
    return address if address.startswith("grpc://") else f"grpc://{address}"


def same_device(a, b) -> bool:
    """Whether TensorFlow could resolve DeviceSpecs ``a`` and ``b`` to one device: every field
    that both give (job, replica, task, device type and index) agrees."""
    return all(x is None or y is None or x == y
               for x, y in ((a.job, b.job), (a.replica, b.replica), (a.task, b.task),
                            (a.device_type, b.device_type), (a.device_index, b.device_index)))
