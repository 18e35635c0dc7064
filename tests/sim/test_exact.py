"""The exact solver (tf_autoplace.sim.exact): its optimum is the brute-force optimum over all
group placements, simulated, and its bound never exceeds a simulated placement."""

import dataclasses
import itertools

import numpy as np
import pytest

from tf_autoplace.core.cluster import Cluster, Device
from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.grouping import Grouping
from tf_autoplace.heuristics import BestHeuristicPlacer, SingleDevicePlacer
from tf_autoplace.sim import lp_lower_bound
from tf_autoplace.sim.simulator import Simulator
from tf_autoplace.sim.exact import interchangeable, relaxed_step, solve_placement
from tf_autoplace.testing import problems

GB = problems.GB
# Generous: these problems solve in well under a second; the limit only guards a hang, and the
# assertions on the bound hold whenever it stops.
LIMIT_S = 300.0


def _brute_force(problem):
    """The fastest simulated group placement that fits, over all D^G of them."""
    best = np.inf
    sim, labels = problem.simulator, problem.grouping.labels
    for combo in itertools.product(range(problem.cluster.num_devices),
                                   repeat=problem.grouping.num_groups):
        group_devices = np.array(combo)
        if not problem.group_allowed[np.arange(len(combo)), group_devices].all():
            continue
        r = sim.run(group_devices[labels].astype(np.int32))
        if (r.peak_memory <= problem.cluster.memory).all():
            best = min(best, r.makespan)
    return best


def _solve(problem, starts=None):
    starts = starts or [BestHeuristicPlacer().propose(problem)]
    return solve_placement(problem.graph, problem.cluster, problem.op_time,
                           problem.grouping.labels, starts, time_limit_s=LIMIT_S)


TINY = [  # (layers, GPUs, seed, host)
    (4, 2, 0, False), (5, 2, 1, False), (6, 2, 2, False), (7, 2, 3, False), (5, 3, 4, False),
    (6, 3, 5, False), (4, 4, 6, False), (4, 2, 7, True), (5, 2, 8, True),
]


@pytest.mark.parametrize("layers,gpus,seed,host", TINY)
def test_the_optimum_is_the_brute_force_optimum(layers, gpus, seed, host):
    problem = problems.training_problem(layers, seed, num_gpus=gpus, host=host)
    result = _solve(problem)
    best = _brute_force(problem)
    assert result.optimal and result.status == "optimal"
    assert result.step_s == pytest.approx(best, rel=1e-12)
    assert result.bound_s <= best * (1 + 1e-9)
    assert result.bound_s >= best * (1 - 2e-6)
    assert problem.simulator.run(result.devices).makespan == result.step_s


def test_the_optimum_respects_memory():
    # GPUs too small for all the weights at once: the fastest placement that fits.
    problem = problems.training_problem(5, 11, num_gpus=2, gpu_memory=int(0.06 * GB))
    single = SingleDevicePlacer().propose(problem)
    assert (problem.simulator.run(single).peak_memory > problem.cluster.memory).any()
    result = _solve(problem)
    assert result.optimal
    assert result.step_s == pytest.approx(_brute_force(problem), rel=1e-12)
    assert (problem.simulator.run(result.devices).peak_memory <= problem.cluster.memory).all()


@pytest.mark.parametrize("cores", [1, 2])
def test_devices_sharing_cores_match_the_brute_force(cores):
    # GPUs 1 and 2 share `cores` cores: with 2 they may run two ops at once, which the MILP
    # must not forbid.
    base = problems.training_problem(5, 12, num_gpus=3)
    devices = tuple(dataclasses.replace(d, core_group="shared" if k else "")
                    for k, d in enumerate(base.cluster.devices))
    shared = dataclasses.replace(base.cluster, devices=devices, core_groups=(("shared", cores),))
    problem = dataclasses.replace(base, cluster=shared)
    result = _solve(problem)
    assert result.optimal
    assert result.step_s == pytest.approx(_brute_force(problem), rel=1e-12)


def test_a_device_with_two_cores_runs_two_ops_at_once():
    # Four independent 1 ms ops; GPU 1 has two cores (a core group of its own), GPU 0 one core
    # and 2.5 ms per op: the optimum runs them two at a time on GPU 1, 2 ms. A MILP that ran
    # them one at a time there would stop at one op on GPU 0 (2.5 ms).
    graph = from_edges(4, [])
    two = problems.cluster(2, host=False)
    devices = (two.devices[0], dataclasses.replace(two.devices[1], core_group="pair"))
    two = dataclasses.replace(two, devices=devices, core_groups=(("pair", 2),))
    op_time = np.tile([[2.5e-3, 1e-3]], (4, 1))
    problem = PlacementProblem(graph=graph, cluster=two, op_time=op_time,
                               grouping=Grouping.from_labels(graph, np.arange(4)))
    result = _solve(problem, [np.zeros(4, np.int32)])
    assert result.optimal and result.step_s == pytest.approx(2e-3)
    assert result.bound_s <= 2e-3 * (1 + 1e-9)


def test_random_dags_with_a_host_match_the_brute_force():
    for seed in range(3):
        problem = problems.random_problem(14, seed, num_gpus=2, max_groups=6)
        result = _solve(problem)
        assert result.optimal
        assert result.step_s == pytest.approx(_brute_force(problem), rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_every_bound_is_at_most_every_simulated_placement(seed):
    problem = problems.training_problem(14, seed, num_gpus=2 + 2 * (seed % 2), host=seed > 1)
    rng = np.random.default_rng(seed)
    G, D = problem.grouping.num_groups, problem.cluster.num_devices
    placements = []
    while len(placements) < 200:
        group_devices = rng.integers(0, D, G)
        if problem.group_allowed[np.arange(G), group_devices].all():
            placements.append(group_devices[problem.grouping.labels].astype(np.int32))
    result = solve_placement(problem.graph, problem.cluster, problem.op_time,
                             problem.grouping.labels, [placements[0]], time_limit_s=LIMIT_S,
                             max_solves=8)
    lp = lp_lower_bound(problem.graph, problem.cluster, problem.op_time)
    steps = [problem.simulator.run(p) for p in placements]
    fastest = min(r.makespan for r in steps if (r.peak_memory <= problem.cluster.memory).all())
    assert result.bound_s <= fastest * (1 + 1e-9)
    assert lp.value_s <= result.bound_s * (1 + 1e-9)  # the MILP only adds to the LP bound
    assert result.bound_s <= result.step_s <= fastest


def test_a_stopped_search_keeps_a_proven_bound():
    problem = problems.training_problem(7, 3, num_gpus=2)  # needs several MILPs to prove
    start = SingleDevicePlacer().propose(problem)
    result = solve_placement(problem.graph, problem.cluster, problem.op_time,
                             problem.grouping.labels, [start], time_limit_s=LIMIT_S,
                             max_solves=1)
    assert result.status == "solve limit" and result.solves == 1 and not result.optimal
    best = _brute_force(problem)
    assert result.bound_s <= best < result.step_s <= problem.simulator.run(start).makespan


def test_devices_that_differ_are_never_interchangeable():
    gpus = [Device(f"/device:GPU:{i}", "GPU", memory_bytes=10 * GB) for i in range(3)]
    uniform = Cluster.uniform(gpus, bandwidth_gbps=1.0, latency_us=10.0)
    op_time = np.ones((2, 3))
    assert interchangeable(uniform, op_time) == [[0, 1, 2]]
    slow = op_time.copy()
    slow[:, 2] = 2.0
    assert interchangeable(uniform, slow) == [[0, 1], [2]]
    latency = np.array(uniform.latency, dtype=float)
    latency[0, 1] = latency[1, 0] = 1e-3  # GPUs 0 and 1 close to each other, far from 2
    skewed = Cluster(devices=uniform.devices, bandwidth=uniform.bandwidth, latency=latency)
    assert interchangeable(skewed, op_time) == [[0, 1], [2]]


def test_the_relaxation_of_a_placement_lies_between_the_bound_and_its_simulated_step():
    # No bound the solver proves exceeds the relaxed step of any placement, and the relaxed
    # step never exceeds the simulated one.
    for seed in range(3):
        problem = problems.training_problem(5, 20 + seed, num_gpus=2)
        result = _solve(problem)
        labels, G = problem.grouping.labels, problem.grouping.num_groups
        for combo in itertools.product(range(2), repeat=G):
            devices = np.array(combo)[labels]
            relaxed, optimal = relaxed_step(problem.graph, problem.cluster, problem.op_time,
                                            labels, devices, time_limit_s=LIMIT_S)
            assert optimal
            assert result.bound_s <= relaxed * (1 + 1e-9)
            assert relaxed <= problem.simulator.run(devices.astype(np.int32)).makespan


def test_the_relaxation_takes_the_best_order_where_the_simulator_takes_the_first():
    # GPU 0 runs A (10 ms) and B (1 ms), both ready at 0; B feeds C (10 ms) on GPU 1. The
    # simulator starts A first (op-index order): C waits for A and B, 21 ms and a transfer.
    # B first lets C run beside A: 11 ms and a transfer.
    graph = from_edges(3, [(1, 2, 1000)])
    two = problems.cluster(2, host=False, latency_us=10.0)
    op_time = np.array([[10e-3] * 2, [1e-3] * 2, [10e-3] * 2])
    devices = np.array([0, 0, 1])
    transfer = 10e-6 + 1000 / 1e9
    assert Simulator(graph, two, op_time).run(devices.astype(np.int32)).makespan == \
        pytest.approx(21e-3 + transfer)
    relaxed, optimal = relaxed_step(graph, two, op_time, np.arange(3), devices)
    assert optimal and relaxed == pytest.approx(11e-3 + transfer, rel=1e-6)
    # With A and B in one chain the order is forced: the relaxation is the simulator.
    chain = from_edges(3, [(0, 1, 1000), (1, 2, 1000)])
    relaxed, _ = relaxed_step(chain, two, op_time, np.arange(3), devices)
    assert relaxed == pytest.approx(
        Simulator(chain, two, op_time).run(devices.astype(np.int32)).makespan, rel=1e-6)


def test_bad_arguments_are_config_errors():
    problem = problems.training_problem(4, 0)
    start = [SingleDevicePlacer().propose(problem)]
    args = (problem.graph, problem.cluster, problem.op_time, problem.grouping.labels)
    with pytest.raises(ConfigError, match="time_limit_s"):
        solve_placement(*args, start, time_limit_s=0)
    with pytest.raises(ConfigError, match="max_solves"):
        solve_placement(*args, start, max_solves=0)
    with pytest.raises(ConfigError, match="start placement"):
        solve_placement(*args, [])
    split = start[0].copy()
    split[np.flatnonzero(problem.grouping.labels == 0)[0]] = 1
    with pytest.raises(ConfigError, match="splits a group"):
        solve_placement(*args, [split])
    with pytest.raises(ConfigError, match="splits a group"):
        relaxed_step(*args, split)
    with pytest.raises(ConfigError, match="device indices"):
        relaxed_step(*args, start[0] + 5)
    with pytest.raises(ConfigError, match="time_limit_s"):
        relaxed_step(*args, start[0], time_limit_s=-1)
