"""Tests of tf_autoplace.sim.layout: the simulator on ops renumbered in run order gives the same
results, field by field, as on the graph's own numbering; a numbering that breaks one of the
orders the simulator reads does not."""

import numpy as np
import pytest

from tf_autoplace.errors import InfeasiblePlacementError
from tf_autoplace.graph.opgraph import KERNEL_KINDS, OpGraph
from tf_autoplace.sim import Simulator
from tf_autoplace.sim.layout import OrderedSimulator, relabel, run_order

from tests.sim.test_simulator import (
    _assert_matches_reference,
    make_cluster,
    random_aliases,
    random_core_groups,
    random_delays,
    random_graph,
    random_partners,
    random_times,
)

FIELDS = ("peak_memory", "start", "end", "busy", "transfer_tensor", "transfer_op",
          "transfer_src", "transfer_dst", "transfer_start", "transfer_end")


def _shuffled(rng, graph):
    """The graph with its ops numbered at random (so not in topological order)."""
    return relabel(graph, rng.permutation(graph.num_ops))[0]


def _differences(a, b) -> list[str]:
    diff = [] if a.makespan == b.makespan else ["makespan"]
    diff += [f for f in FIELDS if not np.array_equal(getattr(a, f), getattr(b, f))]
    return diff + ([] if a.transfer_bytes == b.transfer_bytes else ["transfer_bytes"])


def _case(seed, *, memory=None, partners=None):
    """A random case: graph, cluster, op times; with ``memory`` (default: on 3 seeds of 4)
    views, shared buffers and in-place kernels (:func:`random_aliases`), with ``partners``
    (default: on every other seed) partner times; ``partners`` is ``(partner,
    partner_time)`` or None."""
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(2, 60)), int(rng.integers(1, 5))
    graph = random_graph(rng, n, max_bytes=int(rng.choice([1, 4 * 10**6])))
    if memory if memory is not None else seed % 4 != 0:
        graph = random_aliases(rng, graph)
    graph = _shuffled(rng, graph)
    cluster = make_cluster(d, bandwidth_gbps=float(rng.uniform(0.5, 10)),
                           latency_us=float(rng.choice([0.0, 25.0])))
    if seed % 2:
        cluster = random_core_groups(rng, cluster)
    op_time = random_times(rng, n, d, ties=seed % 3 != 0)  # ties: same-time events decide
    mates = (random_partners(rng, op_time) if (partners if partners is not None
                                               else seed % 4 >= 2) else None)
    return rng, graph, cluster, op_time, mates


def _simulators(graph, cluster, op_time, mates):
    kwargs = {} if mates is None else dict(partner=mates[0], partner_time=mates[1])
    return (Simulator(graph, cluster, op_time, **kwargs),
            OrderedSimulator(graph, cluster, op_time, **kwargs))


@pytest.mark.parametrize("seed", range(40))
def test_same_results_as_the_graphs_own_numbering(seed):
    rng, graph, cluster, op_time, mates = _case(seed)
    plain, ordered = _simulators(graph, cluster, op_time, mates)
    for _ in range(5):
        placement = rng.integers(0, cluster.num_devices, graph.num_ops)
        a, b = plain.run(placement), ordered.run(placement)
        assert _differences(a, b) == []
        assert ordered.makespan(placement) == a.makespan
        summary = ordered.summary(placement)  # its own numbering, the same totals
        assert summary.makespan == a.makespan and summary.transfer_bytes == a.transfer_bytes
        np.testing.assert_array_equal(summary.peak_memory, a.peak_memory)
        np.testing.assert_array_equal(summary.busy, a.busy)


@pytest.mark.parametrize("seed", range(8))
def test_matches_the_reference_simulator(seed):
    # Against the plain-Python reference of tests/sim/test_simulator.py, with buffer reuse,
    # core groups and partners.
    rng, graph, cluster, op_time, mates = _case(seed, memory=True, partners=seed % 2 == 0)
    _, ordered = _simulators(graph, cluster, op_time, mates)
    partner, partner_time = (None, None) if mates is None else mates
    for _ in range(3):
        _assert_matches_reference(ordered, graph, cluster, op_time,
                                  rng.integers(0, cluster.num_devices, graph.num_ops),
                                  partner, partner_time)


@pytest.mark.parametrize("seed", range(24))
def test_restricted_gives_what_a_simulator_built_for_the_subset_gives(seed):
    # best_heuristic tries each heuristic on prefixes of the devices; the prefixes'
    # simulators share the full one's graph arrays (PlacementProblem.restricted) and must
    # give, field by field, what one built for the smaller cluster gives: core groups,
    # partners and delays included.
    rng, graph, cluster, op_time, mates = _case(seed)
    if seed % 3 == 0:
        cluster = random_delays(rng, cluster)
    if cluster.num_devices == 1:
        return
    devices = np.sort(rng.choice(cluster.num_devices, int(rng.integers(1, cluster.num_devices)),
                                 replace=False))
    sub = cluster.subset(devices)
    sub_times = op_time[:, devices]
    sub_mates = None if mates is None else (mates[0], mates[1][:, devices])
    built = _simulators(graph, sub, sub_times, sub_mates)
    shared = tuple(sim.restricted(devices) for sim in _simulators(graph, cluster, op_time, mates))
    for _ in range(4):
        placement = rng.integers(0, len(devices), graph.num_ops)
        for a, b in zip(built, shared):
            assert _differences(a.run(placement), b.run(placement)) == []
            for x, y in zip(a.summaries(placement[None]), b.summaries(placement[None])):
                np.testing.assert_array_equal(x, y)
    with pytest.raises(InfeasiblePlacementError):  # the subset's devices only
        shared[1].run(np.full(graph.num_ops, len(devices)))


def _broken(make, **case) -> int:
    """On how many of 40 cases ``make(graph, cluster, op_time)`` simulates differently."""
    broken = 0
    for seed in range(40):
        rng, graph, cluster, op_time, _ = _case(seed, **case)
        placement = rng.integers(0, cluster.num_devices, graph.num_ops)
        broken += bool(_differences(Simulator(graph, cluster, op_time).run(placement),
                                    make(graph, cluster, op_time).run(placement)))
    return broken


def test_a_numbering_that_breaks_the_orders_changes_results():
    # The same check fails when the renumbered simulator does not keep an order the module
    # docstring lists: the ops without dependencies (numbered in reverse) or each tensor's
    # consumers (visited by their new index).
    def reverse(graph, cluster, op_time):
        return OrderedSimulator(graph, cluster, op_time, order=np.arange(graph.num_ops)[::-1])
    assert _broken(reverse, memory=False, partners=False) >= 20

    def new_consumer_order(graph, cluster, op_time):
        ordered = OrderedSimulator(graph, cluster, op_time)
        renumbered, _ = relabel(graph, ordered.order)
        ordered._inner = Simulator(renumbered, cluster, ordered.op_time[ordered.order])
        return ordered
    assert _broken(new_consumer_order, memory=False, partners=False) >= 10


def test_run_order_keeps_the_ops_without_inputs_first_in_their_order():
    _, graph, _, _, _ = _case(3)
    order = run_order(graph)
    assert sorted(order.tolist()) == list(range(graph.num_ops))
    has_input = np.zeros(graph.num_ops, bool)
    has_input[graph.edge_dst] = has_input[graph.ctrl_dst] = True
    sources = np.flatnonzero(~has_input)
    np.testing.assert_array_equal(order[:len(sources)], sources)
    position = np.empty(graph.num_ops, np.int64)
    position[order] = np.arange(graph.num_ops)
    src = np.concatenate([graph.edge_src, graph.ctrl_src])
    dst = np.concatenate([graph.edge_dst, graph.ctrl_dst])
    assert np.all(position[src] < position[dst])  # a FIFO device starts producers first


def test_a_bad_placement_is_named_as_the_simulator_names_it():
    _, graph, cluster, op_time, _ = _case(4)
    ordered = OrderedSimulator(graph, cluster, op_time)
    with pytest.raises(InfeasiblePlacementError, match="expected"):
        ordered.run(np.zeros(graph.num_ops + 1, np.int32))
    bad = np.zeros(graph.num_ops, np.int32)
    bad[1] = cluster.num_devices
    with pytest.raises(InfeasiblePlacementError, match=repr(graph.names[1])):
        ordered.run(bad)


@pytest.mark.parametrize("seed", range(40))
def test_a_batch_gives_each_rows_makespan_and_peak_memory(seed):
    # summaries() simulates a batch in one kernel call: each row as run() gives it, with
    # buffer reuse, core groups and partners, in the graph's numbering and renumbered.
    rng, graph, cluster, op_time, mates = _case(seed)
    for sim in _simulators(graph, cluster, op_time, mates):
        placements = rng.integers(0, cluster.num_devices, (6, graph.num_ops))
        makespan, peak = sim.summaries(placements)
        for row, m, p in zip(placements, makespan, peak):
            one = sim.run(row)
            assert m == one.makespan
            np.testing.assert_array_equal(p, one.peak_memory)
        empty = sim.summaries(placements[:0])
        assert empty[0].shape == (0,) and empty[1].shape == (0, cluster.num_devices)


@pytest.mark.parametrize("seed", range(40))
def test_a_batch_cut_off_below_a_step_time_is_exact_for_every_faster_row(seed):
    # summaries(below=t) simulates without the memory model and stops at t: a row whose step
    # takes t or more is inf (peak 0), any faster row is exactly as run() gives it. Cutting
    # each row at its own step time and just after it checks, row by row, that the cut-off
    # loop (no memory model) reaches the same step time as the full one.
    rng, graph, cluster, op_time, mates = _case(seed)
    if seed % 3 == 0:  # transfers that fly on after their bus or core is free
        cluster = random_delays(rng, cluster)
    for sim in _simulators(graph, cluster, op_time, mates):
        placements = rng.integers(0, cluster.num_devices, (6, graph.num_ops))
        full, full_peak = sim.summaries(placements)
        for t in (np.median(full), full.min(), full.max()):
            makespan, peak = sim.summaries(placements, below=t)
            kept = full < t
            np.testing.assert_array_equal(makespan[kept], full[kept])
            np.testing.assert_array_equal(peak[kept], full_peak[kept])
            assert np.isinf(makespan[~kept]).all() and (peak[~kept] == 0).all()
        for row, m, p in zip(placements, full, full_peak):
            at = sim.summaries(row[None], below=m)
            after = sim.summaries(row[None], below=np.nextafter(m, np.inf))
            assert np.isinf(at[0][0]) and after[0][0] == m
            np.testing.assert_array_equal(after[1][0], p)


def test_a_bad_row_of_a_batch_is_named_as_the_simulator_names_it():
    _, graph, cluster, op_time, _ = _case(4)
    ordered = OrderedSimulator(graph, cluster, op_time)
    with pytest.raises(InfeasiblePlacementError, match="expected"):
        ordered.summaries(np.zeros((2, graph.num_ops + 1), np.int32))
    with pytest.raises(InfeasiblePlacementError, match="integer"):
        ordered.summaries(np.zeros((2, graph.num_ops)))
    bad = np.zeros((3, graph.num_ops), np.int32)
    bad[2, 1] = cluster.num_devices
    with pytest.raises(InfeasiblePlacementError, match=repr(graph.names[1])):
        ordered.summaries(bad)


def test_a_graph_without_tensors_whose_control_edge_crosses_devices():
    # Control dummies are the only transfers; there is no tensor to renumber them by.
    graph = OpGraph(names=("a", "b"), op_types=("NoOp", "NoOp"),
                    persistent_bytes=np.zeros(2, np.int64), tensor_op=np.zeros(0, np.int64),
                    tensor_bytes=np.zeros(0, np.int64), edge_tensor=np.zeros(0, np.int64),
                    edge_dst=np.zeros(0, np.int64), ctrl_src=[0], ctrl_dst=[1],
                    colocation=np.arange(2), kernels=np.ones((2, len(KERNEL_KINDS)), bool),
                    shape_known=np.ones(2, bool))
    cluster = make_cluster(2, bandwidth_gbps=1.0, latency_us=25.0)
    op_time = np.full((2, 2), 1e-4)
    placement = np.array([0, 1])
    plain, ordered = _simulators(graph, cluster, op_time, None)
    a, b = plain.run(placement), ordered.run(placement)
    assert list(b.transfer_tensor) == [-1] and b.transfer_op.tolist() == [0]
    assert not _differences(a, b)
