"""Cost models: how long each op takes on each device, and how long a transfer takes.

A :class:`CostModel` turns an OpGraph and a Cluster into ``op_time[n, D]`` (seconds; ``inf`` where
the device has no kernel for the op). The simulator and the placers only read that matrix, so a
measured profile can replace the analytical model without touching them.

:class:`AnalyticalCostModel` asks Grappler's op-level cost estimator (virtual cluster
``MeasureCosts``) once per distinct device hardware in the cluster, then

    op_time[i, d] = cluster.op_overhead_s + grappler_time[i, kind(d)] / speed[d]

Fallback for ops Grappler leaves out (pruned or uncosted): a memory-bound estimate, the op's
output bytes read and written once at the device's memory bandwidth. Grappler itself already
costs ops it does not know by their memory traffic.

Transfers (Placeto A.5): ``latency[src, dst] + bytes / bandwidth[src, dst]``.
"""

from __future__ import annotations

import abc
from typing import Mapping

import numpy as np

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.opgraph import OpGraph


class CostModel(abc.ABC):
    """Per-op compute time for every device of a cluster.

    Attributes:
      estimates: the times are a model's estimates that nothing on the cluster's devices
        measured (Grappler's analytical costs), which the report says where they can be far
        from a real step.
    """

    estimates: bool = False

    def op_time(self, graph: OpGraph, cluster: Cluster) -> np.ndarray:
        """[n, D] float64 seconds; ``inf`` where device d has no kernel for op i."""
        base = np.asarray(self._op_time(graph, cluster), dtype=np.float64)
        if base.shape != (graph.num_ops, cluster.num_devices):
            raise ConfigError(f"{type(self).__name__} returned shape {base.shape}, expected "
                              f"{(graph.num_ops, cluster.num_devices)}")
        allowed = graph.kernels @ cluster.kind_mask(graph.kernel_kinds)  # [n, D]
        return np.where(allowed, base, np.inf)

    @abc.abstractmethod
    def _op_time(self, graph: OpGraph, cluster: Cluster) -> np.ndarray:
        """[n, D] seconds, kernels ignored (the public method masks them)."""

    def executed_ops(self, graph: OpGraph, cluster: Cluster) -> np.ndarray | None:
        """[n] bool, op i runs as a kernel of its own on the cluster's devices, as a measured
        run saw it (the rest were folded or fused by Grappler;
        :mod:`tf_autoplace.graph.executed`); None when the model does not know (every op is
        taken to run). An estimate knows nothing of this: None."""
        return None

    def partner_times(self, graph: OpGraph, cluster: Cluster, op_time: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray] | None:
        """``(partner [n] int32, partner_time [n, D])`` for ops whose kernel changes when a
        partner op is on another device (:mod:`tf_autoplace.sim.simulator`, "Partners"), with
        ``op_time`` (this model's) where an op has none; None when no op has one. An estimate
        knows of none: None."""
        return None

    def measured_steps(self) -> dict[str, float]:
        """``{device kind: seconds}``: the untraced step of the run the op times were measured
        in, every op on one device of that kind (a profile's runs). The problem's op times of
        that kind are scaled so that the simulated single-device step equals it
        (:func:`tf_autoplace.pipeline.prepare.build_problem`). An estimate measured nothing:
        empty."""
        return {}

    @staticmethod
    def transfer_time(cluster: Cluster, nbytes: float, src: int, dst: int) -> float:
        if src == dst:
            return 0.0
        return float(cluster.latency[src, dst] + nbytes / cluster.bandwidth[src, dst]
                     + cluster.delay[src, dst])


class PinnedCostModel(CostModel):
    """``base``'s op times with some ops allowed on one device only: every other device gets
    ``inf`` for them, which placers treat like a missing kernel (the op's colocation group
    follows it). What else ``base`` knows of the graph (the ops a measured run executed,
    partner times, measured steps, its other attributes) is ``base``'s.

    Args:
      base: the cost model that times the ops.
      pins: op name -> name of the one cluster device the op may run on.
    """

    def __init__(self, base: CostModel, pins: Mapping[str, str]):
        self._base = base
        self._pins = dict(pins)

    def __getattr__(self, name):  # (only for attributes this class lacks)
        if name.startswith("_"):  # (copy and pickle look for hooks before _base is set)
            raise AttributeError(name)
        return getattr(self._base, name)

    def _op_time(self, graph: OpGraph, cluster: Cluster) -> np.ndarray:
        times = np.array(self._base.op_time(graph, cluster), dtype=np.float64)
        index = {name: i for i, name in enumerate(graph.names)}
        for name, device in self._pins.items():
            i, d = index[name], cluster.index(device)
            keep = times[i, d]
            times[i, :] = np.inf
            times[i, d] = keep
        return times

    def executed_ops(self, graph: OpGraph, cluster: Cluster) -> np.ndarray | None:
        return self._base.executed_ops(graph, cluster)

    def partner_times(self, graph: OpGraph, cluster: Cluster, op_time: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray] | None:
        return self._base.partner_times(graph, cluster, op_time)

    def measured_steps(self) -> dict[str, float]:
        return self._base.measured_steps()

    @property
    def estimates(self) -> bool:
        return self._base.estimates


class AnalyticalCostModel(CostModel):
    """Grappler's analytical per-op costs (needs the MetaGraphDef the OpGraph was read from).

    Args:
      meta_graph: the graph the OpGraph was read from.
      tensor_properties: Grappler's output properties of ``meta_graph`` where ingestion
        inferred them already (:func:`tf_autoplace.graph.ingest.read_graph`); None: inferred
        when first needed.
      unknown_dim: the length each unknown dimension of a placeholder is costed with: the
        ``unknown_dim`` the OpGraph's tensor sizes were counted with, so that an op's time and
        its tensors' bytes assume the same batch.
    """

    estimates = True

    def __init__(self, meta_graph, *, tensor_properties: dict | None = None,
                 unknown_dim: int = 1):
        self._meta_graph = meta_graph
        self._tensor_properties = tensor_properties
        self._unknown_dim = int(unknown_dim)
        self._costed = None  # the properties measure_costs reads (grappler.costing_properties)
        self._cache: dict[tuple, dict[str, float]] = {}
        self.num_fallback_ops = 0

    def _grappler_times(self, device) -> dict[str, float]:
        from tf_autoplace.graph import grappler  # TF only at this edge

        key = device.hardware_key
        if key not in self._cache:
            props = grappler.device_properties(
                device.kind, num_cores=device.num_cores, frequency_mhz=device.frequency_mhz,
                memory_bandwidth_gbps=device.memory_bandwidth_gbps,
                architecture=device.architecture)  # no memory_size: we judge memory ourselves
            if self._costed is None:  # once for every kind of device
                self._costed = grappler.costing_properties(
                    self._meta_graph, self._unknown_dim, self._tensor_properties)
            self._cache[key] = grappler.measure_costs(
                self._meta_graph, device.kind, props, tensor_properties=self._costed,
                unknown_dim=self._unknown_dim)
        return self._cache[key]

    def _op_time(self, graph: OpGraph, cluster: Cluster) -> np.ndarray:
        out = np.empty((graph.num_ops, cluster.num_devices))
        out_bytes = graph.output_bytes
        fallback = set()
        for d, device in enumerate(cluster.devices):
            times = self._grappler_times(device)
            memory_bound = 2.0 * out_bytes / (device.memory_bandwidth_gbps * 1e9)
            col = np.array([times.get(name, np.nan) for name in graph.names])
            missing = np.isnan(col)
            fallback.update(np.flatnonzero(missing).tolist())
            col[missing] = memory_bound[missing]
            out[:, d] = cluster.op_overhead_s + col / device.speed
        self.num_fallback_ops = len(fallback)
        return out


class TableCostModel(CostModel):
    """Fixed per-op times per device kind, e.g. a cost graph's or a test fixture's.

    Args:
      times: {kind: [n] seconds}; a device of that kind gets ``times[kind] / speed``
        (``op_overhead_s`` is not added: the table is taken as the whole op time).
      relative_speeds: divide by each device's speed relative to its kind's reference device
        (:meth:`~tf_autoplace.core.cluster.Cluster.relative_speeds`) instead: the times are
        measured ones, which hold on that device as they are (a cost graph's).
    """

    def __init__(self, times: dict[str, np.ndarray], *, relative_speeds: bool = False):
        self._times = {k: np.asarray(v, dtype=np.float64) for k, v in times.items()}
        self._relative = bool(relative_speeds)

    def _op_time(self, graph: OpGraph, cluster: Cluster) -> np.ndarray:
        cols = []
        speeds = (cluster.relative_speeds() if self._relative
                  else [device.speed for device in cluster.devices])
        for device, speed in zip(cluster.devices, speeds):
            if device.kind not in self._times:
                raise ConfigError(f"no op times for device kind {device.kind!r} (the table "
                                  f"has {sorted(self._times)})")
            cols.append(self._times[device.kind] / speed)
        return np.stack(cols, axis=1)
