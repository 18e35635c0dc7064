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


def training_problem(num_layers: int, seed: int, *, num_gpus: int = 2, host: bool = False,
                     gpu_memory: int = 10 * GB) -> PlacementProblem:
    """A random training-like graph of ``num_layers`` layers, one placement group each, on
    ``num_gpus`` GPUs (and a CPU host 10x slower with ``host``) linked as in Placeto's setup
    (7.6 GB/s, 25 us).

    Layer l has a forward op ``F_l`` reading one earlier layer's output (the previous one, or
    with probability 0.4 one or two of the four before it: branches and skips), a backward op
    ``B_l`` (twice the forward time) reading the gradients of the layers that read ``F_l``
    (the loss's for the last layers), the activations ``F_l`` read and ``F_l``'s own output,
    and sending a gradient to each of its inputs' backward ops; two layers in three also have
    a variable ``V_l`` (persistent weights, read by ``F_l`` and ``B_l``, which applies the
    update). Forward times are log-normal (median 1 ms), activations log-normal (median 2 MB),
    weights 1-50 MB. Each layer is one TF colocation group and one placement group (the loss
    joins the last), as ``colocate_gradients_with_ops`` and the variable's colocation would
    keep them: every placer, whether it moves groups or colocation groups, then searches the
    same placements.
    """
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    rng = np.random.default_rng([seed, 47])
    parents = [[]]
    for layer in range(1, num_layers):
        if rng.random() < 0.6 or layer < 2:
            parents.append([layer - 1])
        else:
            lo = max(0, layer - 4)
            k = min(layer - lo, int(rng.integers(1, 3)))
            parents.append(sorted(rng.choice(np.arange(lo, layer), size=k, replace=False)
                                  .tolist()))
    children = [[] for _ in range(num_layers)]
    for layer, ps in enumerate(parents):
        for p in ps:
            children[p].append(layer)
    fwd_s = rng.lognormal(np.log(1e-3), 0.7, num_layers)
    act = rng.lognormal(np.log(2e6), 0.8, num_layers).astype(np.int64) + 1
    has_var = rng.random(num_layers) < 2 / 3
    weights = rng.integers(10**6, 5 * 10**7, num_layers)

    names, times, persistent, label = [], [], [], []

    def op(name, seconds, layer, nbytes=0):
        names.append(name)
        times.append(seconds)
        persistent.append(nbytes)
        label.append(layer)
        return len(names) - 1

    F = [op(f"F{layer}", fwd_s[layer], layer) for layer in range(num_layers)]
    loss = op("loss", 1e-5, num_layers - 1)
    B = [op(f"B{layer}", 2 * fwd_s[layer], layer) for layer in range(num_layers)]
    V = {layer: op(f"V{layer}", 0.0, layer, int(weights[layer]))
         for layer in range(num_layers) if has_var[layer]}
    edges = []
    for layer in range(num_layers):
        for p in parents[layer]:
            edges.append((F[p], F[layer], int(act[p])))      # forward activation
            edges.append((F[p], B[layer], int(act[p])))      # saved for the backward pass
            edges.append((B[layer], B[p], int(act[p])))      # gradient to the input
        edges.append((F[layer], B[layer], int(act[layer])))
        if not children[layer]:
            edges.append((F[layer], loss, int(act[layer])))
            edges.append((loss, B[layer], int(act[layer])))
        if layer in V:
            edges.append((V[layer], F[layer], int(weights[layer])))
            edges.append((V[layer], B[layer], int(weights[layer])))
    graph = from_edges(len(names), edges, names=names, persistent_bytes=persistent,
                       colocation=label)
    clus = cluster(num_gpus, gpu_memory=gpu_memory, host=host, bandwidth_gbps=7.6,
                   latency_us=25.0)
    gpu = np.asarray(times)
    times_by_kind = {"GPU": gpu, "CPU": gpu * 10}
    op_time = TableCostModel({k: times_by_kind[k] for k in {d.kind for d in clus.devices}}
                             ).op_time(graph, clus)
    return PlacementProblem(graph=graph, cluster=clus, op_time=op_time,
                            grouping=Grouping.from_labels(graph, label))
