"""Placement problems built by hand, for tests of the numpy core (no TensorFlow graph).

``random_problem(n, seed)`` is a random DAG with log-normal op times on a cluster of
``num_gpus`` GPUs (plus a CPU host 10x slower, unless ``host=False``) linked at 1 GB/s with
10 us latency, grouped by Merge-and-Colocate: the same recipe every placer's tests use, so a
placer can be compared with the heuristics on problems nobody tuned it for.
"""

from __future__ import annotations

import numpy as np

from tf_autoplace.core.cluster import Cluster, Device
from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.cost import TableCostModel
from tf_autoplace.graph.opgraph import OpGraph, from_edges
from tf_autoplace.grouping import Grouping, GroupingConfig, merge_and_colocate

GB = 10**9


def cluster(num_gpus: int = 2, *, gpu_memory: int = 10 * GB, host: bool = True,
            bandwidth_gbps: float = 1.0, latency_us: float = 10.0) -> Cluster:
    """``num_gpus`` GPUs named ``/device:GPU:i`` and, with ``host``, ``/device:CPU:0``."""
    devices = [Device(f"/device:GPU:{i}", "GPU", memory_bytes=gpu_memory)
               for i in range(num_gpus)]
    if host:
        devices.append(Device("/device:CPU:0", "CPU", memory_bytes=100 * GB))
    return Cluster.uniform(devices, bandwidth_gbps=bandwidth_gbps, latency_us=latency_us)


def random_dag(n: int, seed: int, *, fan_in: int = 3, max_bytes: int = 10**6) -> OpGraph:
    """n ops; op j reads up to ``fan_in`` earlier ops' outputs of 1..max_bytes bytes."""
    rng = np.random.default_rng(seed)
    edges = [(int(i), j, int(rng.integers(1, max_bytes))) for j in range(1, n)
             for i in rng.choice(j, size=min(j, fan_in), replace=False)]
    return from_edges(n, edges)


def problem(graph: OpGraph, cluster_: Cluster, gpu_s, cpu_s=None, *,
            max_groups: int | None = None) -> PlacementProblem:
    """A problem with op times ``gpu_s`` on GPUs and ``cpu_s`` (default 10x) on CPUs, grouped
    by colocation (``max_groups=None``) or by Merge-and-Colocate into ``max_groups``."""
    gpu = np.broadcast_to(np.asarray(gpu_s, np.float64), (graph.num_ops,))
    cpu = gpu * 10 if cpu_s is None else np.broadcast_to(np.asarray(cpu_s, np.float64),
                                                         (graph.num_ops,))
    times = {"GPU": gpu, "CPU": cpu}
    op_time = TableCostModel({k: times[k] for k in {d.kind for d in cluster_.devices}}
                             ).op_time(graph, cluster_)
    grouping = (Grouping.from_labels(graph, graph.colocation) if max_groups is None
                else merge_and_colocate(graph, GroupingConfig(max_groups=max_groups)))
    return PlacementProblem(graph=graph, cluster=cluster_, op_time=op_time, grouping=grouping)


def random_problem(n: int = 200, seed: int = 0, *, num_gpus: int = 2, max_groups: int = 64,
                   gpu_memory: int = 10 * GB, host: bool = True,
                   fan_in: int = 3) -> PlacementProblem:
    """A random DAG (:func:`random_dag`) with log-normal op times (median 1 ms) on
    :func:`cluster`, grouped into at most ``max_groups`` groups."""
    graph = random_dag(n, seed, fan_in=fan_in)
    times = np.random.default_rng([seed, 1]).lognormal(np.log(1e-3), 1.0, n)
    return problem(graph, cluster(num_gpus, gpu_memory=gpu_memory, host=host), times,
                   max_groups=max_groups)
