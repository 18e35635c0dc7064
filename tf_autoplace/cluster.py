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
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import os
from typing import Sequence

import numpy as np
from google.protobuf import message as _pb_message
from google.protobuf import text_format

from tf_autoplace.errors import ClusterSpecError, ConfigError
from tf_autoplace.proto import cluster_pb2

DEVICE_KINDS = ("CPU", "GPU")

# The shipped cluster specs: package data, one ``<name>.pbtxt`` per cluster.
SPEC_SUFFIX = ".pbtxt"
_SPECS = importlib.resources.files("tf_autoplace").joinpath("clusters")

# Placeto's published setup (appendix A.5, A.7 and DESIGN.md).
PLACETO_BANDWIDTH_GBPS = 7.6
PLACETO_LATENCY_US = 25.0
PLACETO_OP_OVERHEAD_US = 5.7


@dataclasses.dataclass(frozen=True)
class Device:
    """One device.

    Attributes:
      name: full TF device string written into placed graphs.
      kind: "CPU" or "GPU"; decides which kernels it can run.
      memory_bytes: memory the graph may use on it (> 0).
      speed: op costs of its kind are divided by this (> 0).
      num_cores, frequency_mhz, memory_bandwidth_gbps, architecture: hardware numbers fed to
        Grappler's analytical cost estimator (SMs for a GPU, cores for a CPU).
    """

    name: str
    kind: str
    memory_bytes: int
    speed: float = 1.0
    num_cores: int = 1
    frequency_mhz: int = 1000
    memory_bandwidth_gbps: float = 10.0
    architecture: str = ""

    def __post_init__(self):
        if not self.name or not self.name.startswith("/"):
            raise ClusterSpecError(
                f"device name {self.name!r} is not a TF device string like '/device:GPU:0'")
        if self.kind not in DEVICE_KINDS:
            raise ClusterSpecError(
                f"device {self.name!r} has kind {self.kind!r}; expected one of {DEVICE_KINDS}")
        for field in ("memory_bytes", "speed", "num_cores", "frequency_mhz",
                      "memory_bandwidth_gbps"):
            value = getattr(self, field)
            if not value > 0:
                raise ClusterSpecError(f"device {self.name!r} has {field}={value!r}; must be > 0")

    @property
    def hardware_key(self) -> tuple:
        """Devices with the same key get the same analytical op costs (before ``speed``)."""
        return (self.kind, self.num_cores, self.frequency_mhz, self.memory_bandwidth_gbps,
                self.architecture)


@dataclasses.dataclass(frozen=True, eq=False)
class Cluster:
    """A set of devices and the links between them.

    Attributes:
      devices: the devices, in the order placements index them.
      bandwidth: [D, D] bytes per second from device i to device j (diagonal unused).
      latency: [D, D] seconds per transfer from i to j.
      op_overhead_s: fixed cost added to every op's compute time.
    """

    devices: tuple[Device, ...]
    bandwidth: np.ndarray
    latency: np.ndarray
    op_overhead_s: float = PLACETO_OP_OVERHEAD_US * 1e-6

    def __post_init__(self):
        if not self.devices:
            raise ClusterSpecError("the cluster has no devices")
        names = [d.name for d in self.devices]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ClusterSpecError(f"device names must be unique; repeated: {dup}")
        d = len(self.devices)
        for field in ("bandwidth", "latency"):
            arr = np.array(getattr(self, field), dtype=np.float64)
            if arr.shape != (d, d):
                raise ClusterSpecError(f"{field} has shape {arr.shape}; expected {(d, d)}")
            off = arr[~np.eye(d, dtype=bool)]
            if field == "bandwidth" and not (off > 0).all():
                raise ClusterSpecError(f"link bandwidths must be > 0, got {off.min()}")
            if field == "latency" and not (off >= 0).all():
                raise ClusterSpecError(f"link latencies must be >= 0, got {off.min()}")
            arr.setflags(write=False)
            object.__setattr__(self, field, arr)
        if not self.op_overhead_s >= 0:
            raise ClusterSpecError(f"op_overhead_s must be >= 0, got {self.op_overhead_s}")

    # --------------------------------------------------------------------------- accessors
    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.devices)

    @property
    def memory(self) -> np.ndarray:
        """[D] int64 memory capacity per device."""
        return np.array([d.memory_bytes for d in self.devices], dtype=np.int64)

    def kind_mask(self, kinds: Sequence[str]) -> np.ndarray:
        """[len(kinds), D] bool: device d is of kind ``kinds[k]``."""
        return np.array([[d.kind == k for d in self.devices] for k in kinds], dtype=bool)

    def compute_devices(self) -> np.ndarray:
        """[k] int64: the devices placers spread work over, ascending: those of the default
        device's kind (the GPUs when there are any, else every device)."""
        kind = self.devices[self.default_device()].kind
        return np.flatnonzero([d.kind == kind for d in self.devices]).astype(np.int64)

    def index(self, name: str) -> int:
        for i, d in enumerate(self.devices):
            if d.name == name:
                return i
        raise ClusterSpecError(f"no device named {name!r}; devices are {list(self.names)}")

    def default_device(self) -> int:
        """The device a single-device placement uses: the first GPU, else the first device."""
        for i, d in enumerate(self.devices):
            if d.kind == "GPU":
                return i
        return 0

    def subset(self, indices: Sequence[int]) -> "Cluster":
        """The cluster of the devices ``indices`` (in that order) with their links."""
        idx = np.asarray(indices, dtype=np.int64)
        if len(idx) == 0 or len(set(idx.tolist())) != len(idx) or idx.min() < 0 or \
                idx.max() >= self.num_devices:
            raise ClusterSpecError(f"a subset needs distinct device indices in "
                                   f"[0, {self.num_devices}), got {idx.tolist()}")
        return Cluster(devices=tuple(self.devices[i] for i in idx.tolist()),
                       bandwidth=self.bandwidth[np.ix_(idx, idx)],
                       latency=self.latency[np.ix_(idx, idx)], op_overhead_s=self.op_overhead_s)

    # ------------------------------------------------------------------------- constructors
    @classmethod
    def uniform(cls, devices: Sequence[Device], *, bandwidth_gbps: float = PLACETO_BANDWIDTH_GBPS,
                latency_us: float = PLACETO_LATENCY_US,
                op_overhead_us: float = PLACETO_OP_OVERHEAD_US) -> "Cluster":
        """All pairs of devices linked with the same bandwidth and latency."""
        if not bandwidth_gbps > 0 or not latency_us >= 0:
            raise ClusterSpecError(
                f"bandwidth_gbps must be > 0 and latency_us >= 0, got {bandwidth_gbps}, {latency_us}")
        d = len(devices)
        return cls(devices=tuple(devices), bandwidth=np.full((d, d), bandwidth_gbps * 1e9),
                   latency=np.full((d, d), latency_us * 1e-6), op_overhead_s=op_overhead_us * 1e-6)

    @classmethod
    def from_proto(cls, spec: cluster_pb2.ClusterSpec) -> "Cluster":
        devices = []
        for ds in spec.device:
            kwargs = dict(name=ds.name, kind=ds.kind, memory_bytes=ds.memory_bytes,
                          speed=ds.speed or 1.0, architecture=ds.architecture)
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
            op_overhead_us=given("op_overhead_us", PLACETO_OP_OVERHEAD_US))
        bw, lat = cluster.bandwidth.copy(), cluster.latency.copy()
        for link in spec.link:
            i, j = cluster.index(link.src), cluster.index(link.dst)
            if link.HasField("bandwidth_gbps"):
                bw[i, j] = link.bandwidth_gbps * 1e9
            if link.HasField("latency_us"):
                lat[i, j] = link.latency_us * 1e-6
        return cls(devices=cluster.devices, bandwidth=bw, latency=lat,
                   op_overhead_s=cluster.op_overhead_s)

    @classmethod
    def from_text(cls, text: str) -> "Cluster":
        """Parse a text-format ``ClusterSpec``."""
        try:
            spec = text_format.Parse(text, cluster_pb2.ClusterSpec())
        except (text_format.ParseError, _pb_message.DecodeError) as e:
            raise ClusterSpecError(f"malformed cluster spec: {e}") from e
        return cls.from_proto(spec)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "Cluster":
        try:
            with open(path, "r", encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ClusterSpecError(f"cannot read cluster spec {str(path)!r}: {e}") from e
        try:
            return cls.from_text(text)
        except ClusterSpecError as e:
            raise ClusterSpecError(f"{path}: {e}") from e

    @classmethod
    def local(cls, num_logical_cpus: int = 0) -> "Cluster":
        """The devices TensorFlow sees on this machine.

        With ``num_logical_cpus > 0`` the host is described as that many logical CPU devices
        (``/device:CPU:0..N-1``), the way a v1 Session with ``device_count={'CPU': N}`` runs it;
        each gets the host's memory, since they share it.
        """
        total = _host_memory_bytes()
        cores = os.cpu_count() or 1
        if num_logical_cpus < 0:
            raise ClusterSpecError(f"num_logical_cpus must be >= 0, got {num_logical_cpus}")
        devices = [
            Device(name=f"/job:localhost/replica:0/task:0/device:CPU:{i}", kind="CPU",
                   memory_bytes=total, num_cores=cores, frequency_mhz=2000,
                   memory_bandwidth_gbps=20.0)
            for i in range(max(num_logical_cpus, 1))
        ]
        if num_logical_cpus == 0:
            from tensorflow.python.client import device_lib  # TF only at the edge

            for i, dev in enumerate(d for d in device_lib.list_local_devices()
                                    if d.device_type == "GPU"):
                devices.append(Device(name=f"/job:localhost/replica:0/task:0/device:GPU:{i}",
                                      kind="GPU", memory_bytes=int(dev.memory_limit),
                                      num_cores=80, frequency_mhz=1400,
                                      memory_bandwidth_gbps=900.0, architecture="7.0"))
        # Logical devices on one host exchange tensors through host memory.
        return cls.uniform(devices, bandwidth_gbps=10.0, latency_us=5.0)

    def to_proto(self) -> cluster_pb2.ClusterSpec:
        spec = cluster_pb2.ClusterSpec(op_overhead_us=self.op_overhead_s * 1e6)
        for d in self.devices:
            spec.device.add(name=d.name, kind=d.kind, memory_bytes=d.memory_bytes, speed=d.speed,
                            num_cores=d.num_cores, frequency_mhz=d.frequency_mhz,
                            memory_bandwidth_gbps=d.memory_bandwidth_gbps,
                            architecture=d.architecture)
        for i, a in enumerate(self.devices):
            for j, b in enumerate(self.devices):
                if i != j:
                    spec.link.add(src=a.name, dst=b.name,
                                  bandwidth_gbps=self.bandwidth[i, j] / 1e9,
                                  latency_us=self.latency[i, j] * 1e6)
        return spec


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

