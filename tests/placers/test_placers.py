"""Placers on hand-made graphs with hand-set costs: validity, constraints, memory, determinism."""

import numpy as np
import pytest

from tf_autoplace.core.cluster import Cluster, Device
from tf_autoplace.cost import TableCostModel
from tf_autoplace.errors import ConfigError, InfeasiblePlacementError
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.grouping import Grouping, GroupingConfig, merge_and_colocate
from tf_autoplace.placers import (
    MemoryAwareETFPlacer,
    MemoryAwareSCTPlacer,
    PlacementProblem,
    SingleDevicePlacer,
    get_placer,
    validate,
)

GB = 10**9


def _cluster(gpu_memory=10 * GB, num_gpus=2):
    gpus = [Device(f"/device:GPU:{i}", "GPU", memory_bytes=gpu_memory) for i in range(num_gpus)]
    host = Device("/device:CPU:0", "CPU", memory_bytes=100 * GB)
    return Cluster.uniform(gpus + [host], bandwidth_gbps=1.0, latency_us=10.0)


def _problem(graph, cluster, gpu_ms, cpu_ms=None, max_groups=None):
    n = graph.num_ops
    gpu = np.full(n, gpu_ms * 1e-3)
    cpu = gpu * 10 if cpu_ms is None else np.full(n, cpu_ms * 1e-3)
    op_time = TableCostModel({"GPU": gpu, "CPU": cpu}).op_time(graph, cluster)
    grouping = (Grouping.from_labels(graph, graph.colocation) if max_groups is None
                else merge_and_colocate(graph, GroupingConfig(max_groups=max_groups)))
    return PlacementProblem(graph=graph, cluster=cluster, op_time=op_time, grouping=grouping)


# A fork-join: 0 -> {1..4 in two independent chains} -> 5; the chains are long and the tensors
# small, so splitting them over two GPUs halves the middle of the step.
FORK = [(0, 1, 1000), (1, 2, 1000), (0, 3, 1000), (3, 4, 1000), (2, 5, 1000), (4, 5, 1000)]


def test_single_device_puts_everything_on_first_gpu_except_cpu_only_ops():
    kernels = np.ones((6, 2), bool)
    kernels[5] = [True, False]  # op5 has only a CPU kernel
    graph = from_edges(6, FORK, kernels=kernels)
    placement = SingleDevicePlacer().place(_problem(graph, _cluster(), gpu_ms=1))
    assert placement.devices.tolist() == [0, 0, 0, 0, 0, 2]


def test_single_device_moves_whole_colocation_group_when_one_member_is_cpu_only():
    kernels = np.ones((6, 2), bool)
    kernels[4] = [True, False]
    graph = from_edges(6, FORK, kernels=kernels, colocation=[0, 1, 2, 3, 3, 4])
    devices = SingleDevicePlacer().place(_problem(graph, _cluster(), gpu_ms=1)).devices
    assert devices[3] == devices[4] == 2
    assert devices[[0, 1, 2, 5]].tolist() == [0, 0, 0, 0]


def test_m_etf_splits_parallel_chains_and_beats_single_device():
    graph = from_edges(6, FORK)
    problem = _problem(graph, _cluster(), gpu_ms=10)
    single = SingleDevicePlacer().place(problem)
    metf = MemoryAwareETFPlacer().place(problem)
    assert metf.devices[1] == metf.devices[2] and metf.devices[3] == metf.devices[4]
    assert metf.devices[1] != metf.devices[3]
    # single: 6 ops * 10 ms. split: op0 (10 ms); one chain stays, the other gets op0's output
    # after 10 us + 1000 B / 1 GB/s = 11 us; both chains take 20 ms; op5 sits with the late
    # chain (ends at 30.011 ms) and gets the other chain's tensor at 30 ms + 11 us = 30.011 ms.
    assert single.sim.makespan == pytest.approx(0.060)
    assert metf.sim.makespan == pytest.approx(0.040 + 11e-6)


def test_m_etf_keeps_groups_together_and_respects_kernels():
    rng = np.random.default_rng(0)
    n = 60
    edges = [(i, j, int(rng.integers(1, 10**6))) for j in range(1, n)
             for i in rng.choice(j, size=min(j, 2), replace=False)]
    kernels = np.ones((n, 2), bool)
    kernels[rng.choice(n, 5, replace=False)] = [True, False]
    colocation = np.arange(n)
    colocation[10:14] = 10
    graph = from_edges(n, edges, kernels=kernels, colocation=colocation)
    problem = _problem(graph, _cluster(), gpu_ms=1, max_groups=20)
    devices = MemoryAwareETFPlacer().place(problem).devices
    labels = problem.grouping.labels
    for g in range(problem.grouping.num_groups):
        assert len(set(devices[labels == g].tolist())) == 1
    assert len(set(devices[10:14].tolist())) == 1
    assert (devices[~kernels[:, 1]] == 2).all()


def test_m_etf_respects_memory_where_single_gpu_does_not_fit():
    # Four independent variables of 4 GB each: 16 GB do not fit one 10 GB GPU but fit two.
    graph = from_edges(5, [(0, 4, 8), (1, 4, 8), (2, 4, 8), (3, 4, 8)],
                       persistent_bytes=[4 * GB] * 4 + [0])
    problem = _problem(graph, _cluster(gpu_memory=10 * GB), gpu_ms=1, cpu_ms=1000)
    with pytest.raises(InfeasiblePlacementError, match="does not fit in memory"):
        SingleDevicePlacer().place(problem)
    placement = MemoryAwareETFPlacer().place(problem)
    assert (placement.sim.peak_memory <= problem.cluster.memory).all()
    assert set(placement.devices[:4].tolist()) == {0, 1}


def test_m_etf_reports_variables_that_fit_nowhere():
    graph = from_edges(2, [(0, 1, 8)], persistent_bytes=[20 * GB, 0])
    problem = _problem(graph, _cluster(gpu_memory=10 * GB), gpu_ms=1)
    small_host = Cluster.uniform(list(problem.cluster.devices[:2]) +
                                 [Device("/device:CPU:0", "CPU", memory_bytes=GB)])
    with pytest.raises(InfeasiblePlacementError, match="m_etf: no compute device has room.*"
                       "keeps a group that can run on the compute devices on them"):
        MemoryAwareETFPlacer().place(_problem(graph, small_host, gpu_ms=1))
    with pytest.raises(InfeasiblePlacementError, match="m_sct: no compute device has room"):
        MemoryAwareSCTPlacer().place(_problem(graph, small_host, gpu_ms=1))


def test_placers_are_deterministic():
    rng = np.random.default_rng(1)
    n = 80
    edges = [(i, j, int(rng.integers(1, 10**7))) for j in range(1, n)
             for i in rng.choice(j, size=min(j, 3), replace=False)]
    problem = _problem(from_edges(n, edges), _cluster(num_gpus=4), gpu_ms=2)
    for name in ("single", "m_etf"):
        a = get_placer(name).place(problem, seed=5).devices
        b = get_placer(name).place(problem, seed=5).devices
        assert a.tolist() == b.tolist()


def test_validate_names_each_broken_constraint():
    kernels = np.ones((6, 2), bool)
    kernels[5] = [True, False]
    graph = from_edges(6, FORK, kernels=kernels, colocation=[0, 1, 1, 2, 3, 4])
    problem = _problem(graph, _cluster(), gpu_ms=1)
    with pytest.raises(InfeasiblePlacementError, match="no kernel"):
        validate(problem, np.array([0, 0, 0, 0, 0, 0]))
    with pytest.raises(InfeasiblePlacementError, match="colocation group"):
        validate(problem, np.array([0, 0, 1, 0, 0, 2]))
    with pytest.raises(InfeasiblePlacementError, match="outside"):
        validate(problem, np.array([0, 0, 0, 0, 7, 2]))
    with pytest.raises(InfeasiblePlacementError, match="shape"):
        validate(problem, np.array([0, 0]))


def test_unknown_placer_name_lists_the_choices():
    with pytest.raises(ConfigError, match="m_etf"):
        get_placer("nope")


def test_best_heuristic_returns_the_fastest_candidate_and_names_it():
    rng = np.random.default_rng(3)
    n = 40
    edges = [(int(i), j, int(rng.integers(1, 10**6))) for j in range(1, n)
             for i in rng.choice(j, size=min(j, 2), replace=False)]
    problem = _problem(from_edges(n, edges), _cluster(num_gpus=2), gpu_ms=2)
    placer = get_placer("best_heuristic")
    best = placer.place(problem, seed=0)
    times = {name: get_placer(name).place(problem).sim.makespan
             for name in ("m_etf", "expert", "metis", "m_topo", "single")}
    assert best.sim.makespan == pytest.approx(min(times.values()))
    winner = min(times, key=times.get)
    assert best.notes[0].startswith(f"best_heuristic: {winner}")
