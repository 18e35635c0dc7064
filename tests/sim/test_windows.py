"""Windows between ops of a chain (tf_autoplace.sim.windows) and the heads they lift."""

import dataclasses
import itertools

import numpy as np
import pytest

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.grouping import Grouping
from tf_autoplace.sim import Simulator, device_heads_and_tails, lp_lower_bound
from tf_autoplace.sim import windows as win
from tf_autoplace.sim.bounds import _edge_pairs, _group_times
from tf_autoplace.testing.problems import cluster, random_dag

MS = 1e-3
MB = 10**6


def module(branches: int, depth: int, nbytes: int):
    """A fork, ``branches`` chains of ``depth`` ops, and their join: ``(graph, fork, join)``."""
    n = 2 + branches * depth
    join = n - 1
    edges = []
    for b in range(branches):
        ops = [1 + b * depth + k for k in range(depth)]
        edges += [(0, ops[0], nbytes)] + list(zip(ops, ops[1:], [nbytes] * depth))
        edges.append((ops[-1], join, nbytes))
    return from_edges(n, edges), 0, join


def best_step(g, c, op_time):
    """The least simulated step over every placement of ``g`` on ``c``."""
    return min(Simulator(g, c, op_time).makespan(np.array(p))
               for p in itertools.product(range(c.num_devices), repeat=g.num_ops))


def path_bound(g, c, op_time, windows):
    head, tail, time = device_heads_and_tails(g, c, op_time, windows=windows)
    return float((head + time + tail).min(axis=1).max())


def test_a_window_sees_every_branch_between_a_fork_and_its_join():
    # Four branches of two 1 ms ops between a fork and a join, on two GPUs whose links take
    # 100 ms for a tensor: the best placement keeps all ten ops on one GPU, 1 + 8 + 1 ms.
    # Without windows the join's head sees its parents, the last op of each branch (1 + 1 +
    # 4 ms); the window between fork and join holds all eight.
    g, _, _ = module(4, 2, 100 * MB)
    c = cluster(2, host=False)
    op_time = np.full((g.num_ops, 2), 1 * MS)
    best = best_step(g, c, op_time)
    assert best == pytest.approx(10 * MS)
    assert path_bound(g, c, op_time, windows=False) == pytest.approx(7 * MS)
    assert path_bound(g, c, op_time, windows=True) == pytest.approx(10 * MS)
    assert lp_lower_bound(g, c, op_time).value_s == pytest.approx(10 * MS)


def test_a_branch_may_leave_the_window_for_the_price_of_two_transfers():
    # The same module with 10 KB tensors (20 us a transfer at 1 GB/s and 10 us latency): the
    # best placement runs two branches on each GPU and the join after the last transfer (1 +
    # 4 + 0.02 + 1 ms). The window lets a branch leave the fork's GPU once its path with both
    # transfers fits (2.04 ms), so only the load of both GPUs is left: 8 ms over two, 1 + 4
    # + 1.
    g, _, _ = module(4, 2, 10_000)
    c = cluster(2, host=False)
    op_time = np.full((g.num_ops, 2), 1 * MS)
    best = best_step(g, c, op_time)
    assert best == pytest.approx(6.02 * MS)
    assert path_bound(g, c, op_time, windows=True) == pytest.approx(6 * MS)


def small_problem(seed: int) -> PlacementProblem:
    """4-7 ops on one to three GPUs and a host: identical GPUs (their cases shared) or not,
    core groups, link delays, a colocated pair and an op without a host kernel at random."""
    rng = np.random.default_rng([seed, 48])
    n = int(rng.integers(4, 8))
    dag = random_dag(n, seed, fan_in=int(rng.integers(1, 4)),
                     max_bytes=int(rng.choice([1, 4, 40])) * MB)
    edges = list(zip(dag.edge_src.tolist(), dag.edge_dst.tolist(),
                     dag.tensor_bytes[dag.edge_tensor].tolist()))
    coloc = np.arange(n)
    if rng.random() < 0.5:
        coloc[n - 1] = coloc[int(rng.integers(0, n - 1))]
    c = cluster(int(rng.integers(1, 4)), latency_us=float(rng.uniform(0, 500)),
                bandwidth_gbps=float(rng.uniform(0.5, 10)))
    if rng.random() < 0.3:
        label = rng.integers(-1, 2, c.num_devices)
        groups = tuple((f"g{x}", int(rng.integers(1, 4)))
                       for x in sorted(set(label.tolist()) - {-1}))
        devices = tuple(dataclasses.replace(d, core_group=f"g{x}" if x >= 0 else "")
                        for d, x in zip(c.devices, label.tolist()))
        c = dataclasses.replace(c, devices=devices, core_groups=groups)
    if rng.random() < 0.3:
        executor, _ = c.executors()
        c = dataclasses.replace(c, delay=np.where(executor[:, None] == executor[None, :], 0.0,
                                                  rng.uniform(0, 2e-3, (c.num_devices,) * 2)))
    op_time = rng.lognormal(np.log(1e-3), 1.0, (n, c.num_devices))
    if rng.random() < 0.5:
        op_time[:, 1:-1] = op_time[:, [0]]
    if rng.random() < 0.3:
        op_time[int(rng.integers(0, n)), -1] = np.inf
    g = from_edges(n, edges, colocation=np.unique(coloc, return_inverse=True)[1])
    return PlacementProblem(graph=g, cluster=c, op_time=op_time,
                            grouping=Grouping.from_labels(g, g.colocation))


def test_lifted_heads_hold_for_every_placement_of_small_graphs():
    # Every valid placement of 40 small problems: the heads and tails with windows hold for
    # each op on the device it got, and are never below those without. The windows lift
    # some of them (else this would test nothing).
    lifted = 0
    for seed in range(40):
        prob = small_problem(seed)
        g, c, op_time = prob.graph, prob.cluster, prob.op_time
        plain = device_heads_and_tails(g, c, op_time)
        head, tail, _ = device_heads_and_tails(g, c, op_time, windows=True)
        assert (head >= plain[0]).all() and (tail >= plain[1]).all()
        lifted += bool((head > plain[0] + 1e-12).any() or (tail > plain[1] + 1e-12).any())
        ops = np.arange(g.num_ops)
        for choice in itertools.product(*(np.flatnonzero(r) for r in prob.colocation_allowed)):
            p = np.array(choice)[g.colocation]
            r = prob.simulator.run(p)
            assert (head[ops, p] <= r.start + 1e-12).all(), seed
            assert (tail[ops, p] <= r.makespan - r.end + 1e-12).all(), seed
    assert lifted >= 5


def test_devices_are_interchangeable_only_when_nothing_tells_them_apart():
    c = cluster(4)  # four GPUs and a host, uniform links
    time = np.ones((3, 5))
    time[:, 4] = 3.0  # the host is slower
    assert win.interchangeable(c, time).tolist() == [0, 0, 0, 0, 1]
    slow = time.copy()
    slow[1, 2] = 2.0  # GPU 2 runs an op slower
    assert win.interchangeable(c, slow).tolist() == [0, 0, 1, 0, 2]
    latency = np.array(c.latency, np.float64)
    latency[0, 4] *= 2  # GPU 0's link to the host is slower
    far = dataclasses.replace(c, latency=latency)
    assert win.interchangeable(far, time).tolist() == [0, 1, 1, 1, 2]
    shared = dataclasses.replace(  # GPUs 0 and 1 share a core group: neither is alone
        c, devices=tuple(dataclasses.replace(d, core_group="g" if i < 2 else "")
                         for i, d in enumerate(c.devices)), core_groups=(("g", 2),))
    assert win.interchangeable(shared, time).tolist() == [0, 1, 2, 2, 3]


def test_one_case_per_kind_of_pair_gives_the_lengths_of_every_pair():
    # Two modules in a row on four identical GPUs and a host: the lengths computed once per
    # case equal those computed for every (du, dv) pair of devices.
    first, _, join = module(3, 2, 20 * MB)
    edges = list(zip(first.edge_src.tolist(), first.edge_dst.tolist(),
                     first.tensor_bytes[first.edge_tensor].tolist()))
    n = first.num_ops
    edges += [(join + s, join + d, b) for s, d, b in edges]  # the second module forks at join
    g = from_edges(2 * n - 1, edges)
    c = cluster(4, bandwidth_gbps=4.0)
    rng = np.random.default_rng(3)
    gpu = rng.uniform(0.5, 2.0, g.num_ops) * MS
    op_time = np.column_stack([gpu] * 4 + [gpu * rng.uniform(0.5, 4.0, g.num_ops)])
    time, _ = _group_times(g, op_time)
    src, dst, nbytes = _edge_pairs(g)
    coloc = g.colocation.astype(np.int64)
    found = win.window_lengths(g, c, time, coloc, src, dst, nbytes)
    assert len(found.u) > 0 and found.length.shape[1] == 5  # (same GPU, two GPUs, ...)
    D = c.num_devices
    label = win.interchangeable(c, time)
    every_u = np.repeat(np.arange(D), D)
    every_v = np.tile(np.arange(D), D)
    executor, cores = c.executors()
    pos = np.empty(g.num_ops, np.int64)
    pos[g.topological_order()] = np.arange(g.num_ops)
    by_dst, by_src = np.argsort(dst, kind="stable"), np.argsort(src, kind="stable")
    par_ptr = np.searchsorted(dst[by_dst], np.arange(g.num_ops + 1)).astype(np.int64)
    ch_ptr = np.searchsorted(src[by_src], np.arange(g.num_ops + 1)).astype(np.int64)
    links = [np.ascontiguousarray(a, np.float64) for a in (c.latency, c.bandwidth, c.delay)]
    path = win.chain(g, time.min(axis=1))
    u, v, every = win._window_lengths(
        path, pos, par_ptr, src[by_dst], nbytes[by_dst], ch_ptr, dst[by_src], nbytes[by_src],
        coloc, np.ascontiguousarray(time), *links, executor, cores, every_u, every_v,
        win._subsets(c, label, every_u, every_v), 24, 128)
    np.testing.assert_array_equal(u, found.u)
    np.testing.assert_array_equal(v, found.v)
    for du, dv in itertools.product(range(D), repeat=2):
        np.testing.assert_array_equal(found.length[:, found.case[du, dv]],
                                      every[:, du * D + dv])


def test_the_chain_is_a_longest_path():
    g, fork, join = module(3, 2, MB)
    weight = np.ones(g.num_ops)
    weight[3] = 5.0  # the second branch's first op
    assert win.chain(g, weight).tolist() == [fork, 3, 4, join]
