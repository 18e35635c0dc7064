"""Tests of the path with transfers and the LP bound (tf_autoplace.sim.bounds, sim.lp_bound).

The bounds must hold for every valid placement, so the randomized tests check them against the
simulator: heads against every op's start, tails against the time after every op's end, and the
bound against the makespan, for random valid placements and every heuristic's placement. Hand
cases pin the values. Links are 1 GB/s with 10 us latency unless a test says otherwise.
"""

import dataclasses
import functools
import itertools
import os
import subprocess
import sys

import numpy as np
import pytest

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.grouping import Grouping
from tf_autoplace.heuristics import HEURISTICS
from tf_autoplace.sim import (
    Simulator,
    device_heads_and_tails,
    heads_and_tails,
    lower_bound,
    lp_lower_bound,
    transfer_path_bound,
)
from tf_autoplace.sim import lp_bound
from tf_autoplace.sim.lp_bound import device_classes, lagrangian_bound
from tf_autoplace.testing.problems import GB, cluster, problem, random_dag, random_problem

MS = 1e-3
MB = 10**6


def gpus(num, *, host=False):
    return cluster(num, host=host)


def times(values_ms, cluster_, cpu_factor=1.0):
    """[n, D] op times: values_ms on GPUs, cpu_factor times that on CPUs."""
    base = np.asarray(values_ms, np.float64)[:, None] * MS
    scale = np.array([cpu_factor if d.kind == "CPU" else 1.0 for d in cluster_.devices])
    return base * scale[None, :]


# ================================================================ the path with transfers
DIAMOND_EDGES = [(0, 1, MB), (0, 2, MB), (1, 3, MB), (2, 3, MB)]
DIAMOND = from_edges(4, DIAMOND_EDGES)


def test_diamond_must_serialise_or_pay_a_transfer():
    # Every op 1 ms; a 1 MB transfer takes 1.01 ms. Op 3 waits for both 1 and 2: on one device
    # they take 2 ms after op 0 (head 3 ms), split one of them pays 1.01 ms (3.01 ms).
    c = gpus(2)
    op_time = times([1, 1, 1, 1], c)
    head, tail, fastest = heads_and_tails(DIAMOND, c, op_time)
    np.testing.assert_allclose(head, np.array([0, 1, 1, 3]) * MS)
    np.testing.assert_allclose(tail, np.array([3, 1, 1, 0]) * MS)
    np.testing.assert_allclose(fastest, np.ones(4) * MS)
    assert transfer_path_bound(DIAMOND, c, op_time) == pytest.approx(4 * MS)
    assert lower_bound(DIAMOND, c, op_time) == pytest.approx(3 * MS)
    best = min(Simulator(DIAMOND, c, op_time).makespan(np.array(p)) for p in
               np.ndindex(2, 2, 2, 2))
    assert best == pytest.approx(4 * MS)  # the bound is tight here


def test_cheap_transfer_lets_the_branches_overlap():
    # Tiny tensors: 10 us + 1 us per transfer, so splitting is cheaper than serialising.
    g = from_edges(4, [(0, 1, 1000), (0, 2, 1000), (1, 3, 1000), (2, 3, 1000)])
    c = gpus(2)
    head, _, _ = heads_and_tails(g, c, times([1, 1, 1, 1], c))
    assert head[3] == pytest.approx(2 * MS + 11e-6)


def test_one_device_serialises_every_join():
    # One device: no transfer is possible, so both parents always run one after the other.
    head, _, _ = heads_and_tails(DIAMOND, gpus(1), times([1, 1, 1, 1], gpus(1)))
    assert head[3] == pytest.approx(3 * MS)


def test_colocation_and_kernels_decide_who_may_share_a_device():
    # Ops 1 and 2 are colocated with op 3: they must share its device, whatever transfers
    # cost, so the head of 3 is 1 + 1 + 1 ms even with free links.
    c = Cluster.uniform(gpus(2).devices, bandwidth_gbps=1e9, latency_us=0)
    g = from_edges(4, DIAMOND_EDGES, colocation=[0, 1, 1, 1])
    head, _, _ = heads_and_tails(g, c, times([1, 1, 1, 1], c))
    assert head[3] == pytest.approx(3 * MS)
    # Op 1 runs only on the CPU, op 3 only on GPUs: 1 -> 3 always crosses, costing 1.01 ms.
    c = gpus(1, host=True)
    kernels = np.array([[1, 1], [1, 0], [1, 1], [0, 1]], bool)  # (CPU, GPU)
    g = from_edges(4, DIAMOND_EDGES, kernels=kernels)
    op_time = np.where(kernels[:, ::-1], 1 * MS, np.inf)  # columns: GPU:0, CPU:0
    head, _, _ = heads_and_tails(g, c, op_time)
    assert head[3] >= 1 * MS + 1 * MS + 1.01 * MS - 1e-12


def test_an_op_pays_for_the_device_it_runs_on_and_the_transfers_that_takes():
    # A chain a -> b -> c on a GPU and a host: a and c take 1 ms on the GPU and 4 ms on the
    # host, b the reverse; each edge carries 1 MB (1.01 ms on a link). With every op at its
    # fastest time and no transfer the path is 3 ms, but b runs 1 ms only on the host, where
    # a and c do not: the best is a, c on the GPU and b on the host, 1 + 1.01 + 1 + 1.01 + 1.
    c = gpus(1, host=True)
    g = from_edges(3, [(0, 1, MB), (1, 2, MB)])
    op_time = np.array([[1, 4], [4, 1], [1, 4]]) * MS
    best = Simulator(g, c, op_time).run(np.array([0, 1, 0])).makespan
    assert best == pytest.approx(5.02 * MS)
    assert transfer_path_bound(g, c, op_time) == pytest.approx(best)
    assert lp_lower_bound(g, c, op_time).value_s == pytest.approx(best)
    head, tail, _ = device_heads_and_tails(g, c, op_time)
    np.testing.assert_allclose(head[1], [1 * MS, 2.01 * MS])  # after a there, or a's tensor
    np.testing.assert_allclose(tail[1], [1 * MS, 2.01 * MS])


@pytest.mark.parametrize("seed", range(12))
def test_device_heads_hold_for_every_placement_of_small_graphs(seed):
    # Every placement of 4-7 ops on one or two GPUs and a host (op times drawn per device,
    # so an op's fastest device is often another than its neighbours'; a colocated pair and
    # an op without a host kernel): the heads and tails of each op on the device it got hold,
    # and no placement beats the bounds.
    rng = np.random.default_rng([seed, 47])
    n = int(rng.integers(4, 8))
    dag = random_dag(n, seed, fan_in=2, max_bytes=4 * MB)
    edges = list(zip(dag.edge_src.tolist(), dag.edge_dst.tolist(),
                     dag.tensor_bytes[dag.edge_tensor].tolist()))
    coloc = np.arange(n)
    coloc[n - 1] = coloc[int(rng.integers(0, n - 1))]
    c = cluster(int(rng.integers(1, 3)), latency_us=float(rng.uniform(0, 500)))
    op_time = rng.lognormal(np.log(1e-3), 1.0, (n, c.num_devices))
    op_time[int(rng.integers(0, n)), -1] = np.inf  # no host kernel
    g = from_edges(n, edges, colocation=np.unique(coloc, return_inverse=True)[1])
    prob = PlacementProblem(graph=g, cluster=c, op_time=op_time,
                            grouping=Grouping.from_labels(g, g.colocation))
    bound = lp_lower_bound(g, c, op_time).value_s
    per_device = device_heads_and_tails(g, c, op_time)
    steps = []
    for choice in itertools.product(*(np.flatnonzero(row) for row in prob.colocation_allowed)):
        p = np.array(choice)[g.colocation]
        r = prob.simulator.run(p)
        assert_device_heads_hold(per_device, p, r)
        steps.append(r.makespan)
    assert bound <= min(steps) * (1 + 1e-9)
    assert transfer_path_bound(g, c, op_time) <= min(steps) * (1 + 1e-9)


def random_valid_placements(prob: PlacementProblem, rng, count):
    groups = prob.colocation_allowed
    for _ in range(count):
        choice = np.array([rng.choice(np.flatnonzero(row)) for row in groups])
        yield choice[prob.graph.colocation]


@functools.cache
def random_cases():
    """Random DAGs with control edges, colocation groups, CPU-only ops, 1-4 GPUs and a host."""
    rng = np.random.default_rng(2024)
    cases = []
    for seed in range(24):
        n = int(rng.integers(5, 60))
        dag = random_dag(n, seed, fan_in=int(rng.integers(1, 5)), max_bytes=4 * MB)
        edges = list(zip(dag.edge_src.tolist(), dag.edge_dst.tolist(),
                         dag.tensor_bytes[dag.edge_tensor].tolist()))
        control = sorted({tuple(sorted(map(int, rng.choice(n, 2, replace=False))))
                          for _ in range(n // 4)} - {(s, d) for s, d, _ in edges})
        coloc = np.arange(n)
        for _ in range(n // 6):  # a few colocation groups of two ops
            a, b = rng.choice(n, 2, replace=False)
            coloc[coloc == coloc[b]] = coloc[a]
        kernels = np.ones((n, 2), bool)
        kernels[rng.random(n) < 0.1, 1] = False  # CPU-only ops
        persistent = np.where(rng.random(n) < 0.2, rng.integers(0, MB, n), 0)
        g = from_edges(n, edges, control=control, kernels=kernels, persistent_bytes=persistent,
                       colocation=np.unique(coloc, return_inverse=True)[1])
        c = cluster(int(rng.integers(1, 5)), bandwidth_gbps=float(rng.uniform(0.5, 10)),
                    latency_us=float(rng.uniform(0, 50)))
        cases.append(problem(g, c, rng.lognormal(np.log(1e-3), 1.0, n),
                             rng.lognormal(np.log(3e-3), 1.0, n)))
    return tuple(cases)


@pytest.mark.parametrize("case", range(24))
def test_bounds_hold_for_random_and_heuristic_placements(case):
    prob = random_cases()[case]
    g, c, op_time = prob.graph, prob.cluster, prob.op_time
    head, tail, _ = heads_and_tails(g, c, op_time)
    lp = lp_lower_bound(g, c, op_time)
    per_device = device_heads_and_tails(g, c, op_time)
    lifted = device_heads_and_tails(g, c, op_time, windows=True)
    assert lp.value_s >= lp.simple_s and lp.value_s >= lp.path_s
    assert lp.value_s >= lower_bound(g, c, op_time)
    assert lp.status in ("optimal", "dominated")
    placements = list(random_valid_placements(prob, np.random.default_rng(case), 25))
    for name, heuristic in HEURISTICS.items():
        if name != "expert":  # the expert needs a model's layer scopes
            placements.append(heuristic().propose(prob, seed=0))
    for p in placements:
        r = prob.simulator.run(p)
        assert (head <= r.start + 1e-12).all()
        assert (tail <= r.makespan - r.end + 1e-12).all()
        assert lp.value_s <= r.makespan * (1 + 1e-9)
        assert_device_heads_hold(per_device, p, r)
        assert_device_heads_hold(lifted, p, r)


def assert_device_heads_hold(device_bounds, placement, result):
    """The heads and tails (``device_bounds``: :func:`device_heads_and_tails`) of every op on
    the device ``placement`` gives it hold in the simulated ``result``."""
    head, tail, runs = device_bounds
    ops = np.arange(len(placement))
    assert np.isfinite(runs[ops, placement]).all()
    assert (head[ops, placement] <= result.start + 1e-12).all()
    assert (tail[ops, placement] <= result.makespan - result.end + 1e-12).all()


@pytest.mark.parametrize("case", range(0, 24, 2))
def test_bounds_hold_with_core_groups(case):
    # The same problems with devices sharing cores at random (a group may have more cores
    # than devices, so one device may run several ops at once).
    base = random_cases()[case]
    rng = np.random.default_rng([case, 7])
    label = rng.integers(-1, 2, base.cluster.num_devices)
    groups = tuple((f"g{g}", int(rng.integers(1, 4))) for g in sorted(set(label.tolist()) - {-1}))
    devices = tuple(dataclasses.replace(d, core_group=f"g{g}" if g >= 0 else "")
                    for d, g in zip(base.cluster.devices, label.tolist()))
    c = dataclasses.replace(base.cluster, devices=devices, core_groups=groups)
    assert_bounds_hold(dataclasses.replace(base, cluster=c), case)
    # Link delays too, between devices of different executors (within a core group a
    # transfer is a hand-over, with no flight).
    executor, _ = c.executors()
    delay = np.where(executor[:, None] == executor[None, :], 0.0,
                     rng.uniform(0, 5e-3, (c.num_devices,) * 2))
    assert_bounds_hold(dataclasses.replace(base, cluster=dataclasses.replace(c, delay=delay)),
                       case)


def assert_bounds_hold(prob, seed):
    """Every bound of ``prob`` holds for 25 random valid placements; returns the LP bound."""
    g, c, op_time = prob.graph, prob.cluster, prob.op_time
    head, tail, _ = heads_and_tails(g, c, op_time)
    lp = lp_lower_bound(g, c, op_time)
    per_device = device_heads_and_tails(g, c, op_time)
    lifted = device_heads_and_tails(g, c, op_time, windows=True)
    for p in random_valid_placements(prob, np.random.default_rng(seed), 25):
        r = prob.simulator.run(p)
        assert (head <= r.start + 1e-12).all()
        assert (tail <= r.makespan - r.end + 1e-12).all()
        assert_device_heads_hold(per_device, p, r)
        assert_device_heads_hold(lifted, p, r)
        assert lower_bound(g, c, op_time) <= r.makespan * (1 + 1e-9)
        assert lp.value_s <= r.makespan * (1 + 1e-9)
    return lp


def test_a_device_with_two_cores_halves_the_load_bound():
    # Four independent 1 ms ops on one device with 2 cores: 2 ms, and the bounds say so.
    g = from_edges(4, [])
    one = cluster(1, host=False)
    two = dataclasses.replace(
        one, devices=(dataclasses.replace(one.devices[0], core_group="host"),),
        core_groups=(("host", 2),))
    op_time = np.full((4, 1), 1 * MS)
    assert lower_bound(g, one, op_time) == pytest.approx(4 * MS)
    assert lower_bound(g, two, op_time) == pytest.approx(2 * MS)
    assert Simulator(g, two, op_time).makespan(np.zeros(4, int)) == pytest.approx(2 * MS)
    assert lp_lower_bound(g, two, op_time).value_s == pytest.approx(2 * MS, rel=1e-6)
    # A join of those four in one colocation group: on one core it starts at 4 ms, on two
    # cores at 2 ms, and its head must allow that.
    join = from_edges(5, [(i, 4, 100) for i in range(4)], colocation=np.zeros(5, int))
    op_time = np.full((5, 1), 1 * MS)
    assert heads_and_tails(join, one, op_time)[0][4] == pytest.approx(4 * MS)
    start = Simulator(join, two, op_time).run(np.zeros(5, int)).start[4]
    assert start == pytest.approx(2 * MS)
    assert heads_and_tails(join, two, op_time)[0][4] <= start + 1e-12


def test_lp_beats_the_simple_bound_on_load_bound_problems():
    # Random problems with a host 10x slower than the GPUs are limited by load: the simple bound
    # divides the work by all devices, the LP sees that the host does little.
    for seed in range(3):
        prob = random_problem(n=200, seed=seed)
        lp = lp_lower_bound(prob.graph, prob.cluster, prob.op_time)
        assert lp.value_s > 1.3 * lp.simple_s
        best = min(prob.simulator.makespan(h().propose(prob, seed=0))
                   for name, h in HEURISTICS.items() if name != "expert")
        assert lp.value_s <= best


@pytest.mark.slow
def test_solving_the_lp_prints_nothing(tmp_path, repo_root):
    # HiGHS's Python wrapper prints a banner on stdout the first time a process builds a
    # solver: a line in every user's program output. A fresh process, so that it is the first.
    script = ("from tf_autoplace.sim import lp_lower_bound\n"
              "from tf_autoplace.testing.problems import random_problem\n"
              "p = random_problem(n=50, seed=0)\n"
              "assert lp_lower_bound(p.graph, p.cluster, p.op_time).status == 'optimal'\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join(filter(None, [str(repo_root), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


# ======================================================================== the LP by hand
def test_lp_value_of_independent_ops_on_two_gpus_and_a_slow_host():
    # Six independent 1 ms ops (4 ms on the host). Simple bound: max(1 ms, 6 ms / 3) = 2 ms.
    # LP: GPU class work X_G * 1 ms <= 2 T, host X_C * 4 ms <= T, X_G + X_C = 6 ops, so
    # 2 T / 1 ms + T / 4 ms = 6: T = 6 / 2.25 ms = 2.667 ms. The best placement takes 3 ms.
    c = gpus(2, host=True)
    g = from_edges(6, [])
    op_time = times([1] * 6, c, cpu_factor=4)
    lp = lp_lower_bound(g, c, op_time)
    assert lp.simple_s == pytest.approx(2 * MS)
    assert lp.path_s == pytest.approx(1 * MS)
    assert lp.lp_s == pytest.approx(8 / 3 * MS, rel=1e-9)
    assert lp.value_s == pytest.approx(8 / 3 * MS, rel=1e-9)
    assert lp.status == "optimal" and lp.rows >= 6 + 2 and lp.cols == 6 * 2 + 1
    assert Simulator(g, c, op_time).makespan(np.array([0, 0, 0, 1, 1, 1])) == pytest.approx(3 * MS)


def test_lp_counts_persistent_memory():
    # Four 1 ms ops holding 6 GB each, two 10 GB GPUs and a 100 GB host 4x slower. Without
    # memory each GPU takes two ops (2 ms). With it a GPU holds at most one op's variables in a
    # valid placement; the class rows allow 20 GB on the GPUs: X_G * 6 GB <= 20 GB, so at least
    # 4 - 10/3 ops run on the host: T >= (4 - 10/3) * 4 ms = 2.667 ms.
    c = gpus(2, host=True)
    g = from_edges(4, [], persistent_bytes=[6 * GB] * 4)
    lp = lp_lower_bound(g, c, times([1] * 4, c, cpu_factor=4))
    assert lp.value_s == pytest.approx(8 / 3 * MS, rel=1e-9)


def test_device_classes_group_identical_columns():
    op_time = np.array([[1, 1, 4, 1], [2, 2, 8, 3]], float)
    np.testing.assert_array_equal(device_classes(op_time), [0, 0, 1, 2])


def test_lagrangian_bound_is_a_bound_for_any_multipliers():
    # min z0 + z1  s.t.  z0 + 2 z1 >= 2,  z0 - z1 <= 0.5,  0 <= z <= 10.  Optimum: 1 at
    # (0, 1); the duals there are y = (1/2, 0): L = 1. Any other y gives at most 1.
    rows, cols = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])
    vals = np.array([1.0, 2.0, 1.0, -1.0])
    args = (np.ones(2), np.zeros(2), np.full(2, 10.0), np.array([2.0, -np.inf]),
            np.array([np.inf, 0.5]))
    assert lagrangian_bound(rows, cols, vals, np.array([0.5, 0.0]), *args) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    for _ in range(200):
        assert lagrangian_bound(rows, cols, vals, rng.normal(size=2) * 3, *args) <= 1.0 + 1e-12


# ============================================================== fallbacks and checking
def test_a_solve_stopped_without_duals_falls_back_to_the_proven_bounds():
    prob = random_problem(n=2000, seed=1, num_gpus=4)
    lp = lp_lower_bound(prob.graph, prob.cluster, prob.op_time, time_limit_s=1e-9)
    assert "time limit" in lp.status and np.isnan(lp.lp_s)
    assert lp.value_s == max(lp.simple_s, lp.path_s)


def test_no_valid_placement_is_reported_not_solved():
    # A colocation group of a CPU-only op and a GPU-only op fits no device.
    c = gpus(1, host=True)
    kernels = np.array([[1, 0], [0, 1]], bool)
    g = from_edges(2, [(0, 1, MB)], colocation=[0, 0], kernels=kernels)
    op_time = np.where(kernels[:, ::-1], 1 * MS, np.inf)
    lp = lp_lower_bound(g, c, op_time)
    assert lp.status.startswith("no valid placement") and "op0" in lp.status
    assert lp.value_s == max(lp.simple_s, lp.path_s) and np.isnan(lp.lp_s)


def test_time_limit_is_checked():
    with pytest.raises(ConfigError, match="time_limit_s.*-1"):
        lp_lower_bound(DIAMOND, gpus(2), times([1] * 4, gpus(2)), time_limit_s=-1)


def solved_anyway(prob) -> float:
    """The LP part of ``prob``'s bound solved with HiGHS whatever the cheapest point says."""
    g, c, op_time = prob.graph, prob.cluster, prob.op_time
    head, tail, runs = device_heads_and_tails(g, c, op_time, windows=True)
    known = max(lower_bound(g, c, op_time), float((head + runs + tail).min(axis=1).max()))
    head, tail, runs = device_heads_and_tails(g, c, op_time)
    through = head + runs + tail
    model, num_x, _, sends = lp_bound._build(g, c, op_time, through, scale=known)
    sends.add_to(model)
    value, status = lp_bound._solve(model, num_x, 30.0)
    assert status == "optimal"
    return value * known


def test_an_lp_left_unsolved_could_not_have_raised_the_bound():
    # The random cases are of both kinds: the path binds on some, the load on others.
    statuses = {}
    for prob in random_cases() + tuple(random_problem(n=200, seed=s) for s in range(3)):
        lp = lp_lower_bound(prob.graph, prob.cluster, prob.op_time)
        statuses[lp.status] = statuses.get(lp.status, 0) + 1
        solved = solved_anyway(prob)
        if lp.status == "dominated":
            assert np.isnan(lp.lp_s) and solved <= lp.value_s * (1 + 1e-9)
        else:
            assert lp.status == "optimal" and lp.value_s == max(lp.simple_s, lp.path_s, lp.lp_s)
            assert lp.lp_s == pytest.approx(solved, rel=1e-9, abs=1e-15)
    assert statuses.get("dominated", 0) >= 2 and statuses.get("optimal", 0) >= 3, statuses


def test_a_chain_needs_no_solve():
    # Four 1 ms ops in a chain on two GPUs: the path (4 ms) binds, and every op on a GPU meets
    # the load rows at 4 ms, so HiGHS is not asked.
    c = gpus(2, host=True)
    g = from_edges(4, [(i, i + 1, 0) for i in range(3)])
    lp = lp_lower_bound(g, c, times([1] * 4, c, cpu_factor=4))
    assert lp.status == "dominated" and lp.solve_s == 0 and np.isnan(lp.lp_s)
    assert lp.value_s == pytest.approx(4 * MS) and lp.rows > 0


def test_no_solve_where_the_path_keeps_an_op_off_its_least_work_device():
    # a -> b -> c with 10 MB tensors (10.01 ms a transfer) on a GPU and a host: b is 1 ms on
    # the host and 4 ms on the GPU, a and c 1 ms on the GPU. b's least work is the host, but
    # through the host its path is 23.02 ms; on the GPU all three take 6 ms, the bound. With
    # every group on its least work among the classes its path allows, every row holds.
    c = gpus(1, host=True)
    g = from_edges(3, [(0, 1, 10 * MB), (1, 2, 10 * MB)])
    op_time = np.array([[1, 4], [4, 1], [1, 4]]) * MS
    lp = lp_lower_bound(g, c, op_time)
    assert lp.value_s == pytest.approx(6 * MS)
    assert lp.status == "dominated" and lp.solve_s == 0 and lp.rows > 0


def test_zero_time_graphs_need_no_lp():
    c = gpus(2)
    lp = lp_lower_bound(DIAMOND, c, np.zeros((4, 2)))
    assert lp.value_s == 0 and lp.status == "not needed"


@pytest.mark.parametrize("case", range(1, 24, 2))
def test_bounds_hold_with_link_delays(case):
    # Delays (time in flight that holds no bus or core) enter the bounds' transfer gaps: a
    # consumer cannot start before its input arrives, so the bounds stay bounds and tighten.
    base = random_cases()[case]
    rng = np.random.default_rng([case, 11])
    d = base.cluster.num_devices
    delay = np.where(rng.random((d, d)) < 0.7, rng.uniform(0, 2e-3, (d, d)), 0.0)
    c = dataclasses.replace(base.cluster, delay=delay)
    lp = assert_bounds_hold(dataclasses.replace(base, cluster=c), case)
    assert lp.path_s >= lp_lower_bound(base.graph, base.cluster, base.op_time).path_s


def test_a_delay_lengthens_the_path_bound_by_what_a_transfer_must_wait():
    # DIAMOND with 5 ms branches on two GPUs: running the branches at once puts one transfer
    # on the path, so a 2 ms delay on every link raises the path bound by 2 ms.
    c = gpus(2)
    op_time = times([1, 5, 5, 1], c)
    delayed = dataclasses.replace(c, delay=np.where(np.eye(2, dtype=bool), 0.0, 2e-3))
    without = lp_lower_bound(DIAMOND, c, op_time).path_s
    assert lp_lower_bound(DIAMOND, delayed, op_time).path_s == pytest.approx(without + 2e-3)


def test_lp_prices_the_sends_a_split_between_kinds_of_device_needs():
    # Four pairs a -> b with a 10 MB tensor (10.01 ms to send), a 1 ms on the host and 4 ms on
    # the GPU, b the reverse. Each op on its fast device loads both devices by 4 ms, and a
    # pair's path is 5 ms whether it stays on one device or pays the send, so without the send
    # rows the LP stays at the path's 5 ms. With them, s pairs split (a on the host, b on the
    # GPU) hold the host's bus 10.01 s ms and the others take 5 ms on one device: each device
    # 10 - 1.5 s ms, equal to the bus at s = 10 / 11.51, T = 8.697 ms. No placement is faster
    # (the best takes 10 ms: two pairs whole on each device).
    c = gpus(1, host=True)
    g = from_edges(8, [(2 * i, 2 * i + 1, 10 * MB) for i in range(4)])
    host = np.array([d.kind == "CPU" for d in c.devices])
    op_time = np.where(host[None, :] == (np.arange(8) % 2 == 0)[:, None], 1 * MS, 4 * MS)
    lp = lp_lower_bound(g, c, op_time)
    assert lp.path_s == pytest.approx(5 * MS) and lp.simple_s == pytest.approx(4 * MS)
    assert lp.status == "optimal"
    assert lp.lp_s == pytest.approx((10 - 1.5 * 10 / 11.51) * MS, rel=1e-6)
    sim = Simulator(g, c, op_time)
    steps = [sim.makespan(np.array(p)) for p in itertools.product(range(2), repeat=8)]
    assert min(steps) == pytest.approx(10 * MS)
    assert lp.value_s <= min(steps)


def test_sends_on_cores_are_left_to_the_load_rows():
    # A GPU's sends to the host go over its bus, and the host's (outside any core group) over
    # the host's: a send column out of each class. Two devices of one core group (logical
    # CPUs of one process) or of two (the CPUs of two TensorFlow tasks) send on their cores,
    # not a bus: no send columns.
    g = from_edges(2, [(0, 1, MB)])
    op_time = np.array([[1, 2], [2, 1]]) * MS
    c = gpus(1, host=True)
    columns = lp_bound._sends(g, c, device_classes(op_time), np.ones((2, 2), bool), 1.0)
    np.testing.assert_array_equal(columns[0], [0, 1])
    np.testing.assert_allclose(columns[2], [1.01 * MS] * 2)  # 10 us + 1 MB at 1 GB/s
    for names in (("host", "host"), ("task0", "task1")):
        grouped = dataclasses.replace(
            c, devices=tuple(dataclasses.replace(d, core_group=name)
                             for d, name in zip(c.devices, names)),
            core_groups=tuple((name, 1) for name in sorted(set(names))))
        assert len(lp_bound._sends(g, grouped, device_classes(op_time),
                                   np.ones((2, 2), bool), 1.0)[0]) == 0
