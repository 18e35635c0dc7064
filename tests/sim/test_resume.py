"""Tests of simulations resumed from a trace (``Simulator.trace``, ``run(trace=...)``): the same
totals as a whole simulation, on random graphs and on placements that differ from the traced
one in a few ops, as a search's candidates do."""

import dataclasses
import math

import numpy as np
import pytest

from tf_autoplace.errors import ConfigError

from tests.sim.test_layout import _case, _simulators

TOTALS = ("makespan", "transfer_bytes")


def _assert_same_totals(a, b):
    assert a.makespan == b.makespan and a.transfer_bytes == b.transfer_bytes
    np.testing.assert_array_equal(a.peak_memory, b.peak_memory)
    np.testing.assert_array_equal(a.busy, b.busy)
    assert a.num_transfers == b.num_transfers


def _nearby(rng, placement, num_devices, graph):
    """``placement`` with a few ops moved: one op, a run of consecutive ops, or a colocation
    group's worth, to random devices."""
    out = placement.copy()
    n = len(out)
    kind = rng.integers(3)
    if kind == 0:
        out[rng.integers(n)] = rng.integers(num_devices)
    elif kind == 1:
        a = int(rng.integers(n))
        out[a:a + int(rng.integers(1, 6))] = rng.integers(num_devices)
    else:
        out[rng.choice(n, size=min(n, 3), replace=False)] = rng.integers(num_devices)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_resumed_totals_equal_a_whole_simulation(seed):
    # Random graphs with memory rules (views, shared and taken-over buffers), core groups,
    # partners and same-time events; small snapshot budgets so that snapshots are dense.
    rng, graph, cluster, op_time, mates = _case(seed)
    plain, ordered = _simulators(graph, cluster, op_time, mates)
    for _ in range(3):
        base = rng.integers(0, cluster.num_devices, graph.num_ops)
        for sim, run in ((plain, plain.run), (ordered, ordered.summary)):
            trace = sim.trace(base, max_bytes=int(rng.choice([1, 10**4, 10**9])),
                              events=[None, 3, 10**4][int(rng.integers(3))])
            assert 1 <= len(trace.events) <= 32
            assert np.all(np.diff(trace.events) > 0)
            _assert_same_totals(run(base, trace=trace), run(base))
            for _ in range(6):
                other = _nearby(rng, base, cluster.num_devices, graph)
                _assert_same_totals(run(other, trace=trace), run(other))
                whole = run(other)
                for cutoff in (whole.makespan, np.nextafter(whole.makespan, math.inf)):
                    got = run(other, trace=trace, cutoff=cutoff)
                    assert (got is None) == (whole.makespan >= cutoff)


def test_a_late_change_resumes_from_a_late_snapshot():
    # A change read late in the step restarts late: the ops that ended before the restored
    # snapshot have no start time in the resumed run (the trace would not pay otherwise).
    rng, graph, cluster, op_time, mates = _case(5, memory=False, partners=False)
    plain, _ = _simulators(graph, cluster, op_time, mates)
    base = rng.integers(0, cluster.num_devices, graph.num_ops)
    trace = plain.trace(base, max_bytes=10**9)
    late = int(np.argmax(trace.first))
    other = base.copy()
    other[late] = (base[late] + 1) % cluster.num_devices
    resumed, whole = plain.run(other, trace=trace), plain.run(other)
    _assert_same_totals(resumed, whole)
    assert np.isnan(resumed.start).sum() > graph.num_ops // 4
    assert not np.isnan(whole.start).any()


def test_first_reads_are_where_each_op_is_first_looked_at():
    rng, graph, cluster, op_time, mates = _case(7, memory=False, partners=False)
    plain, _ = _simulators(graph, cluster, op_time, mates)
    trace = plain.trace(rng.integers(0, cluster.num_devices, graph.num_ops))
    has_input = np.zeros(graph.num_ops, bool)
    has_input[graph.edge_dst] = has_input[graph.ctrl_dst] = True
    assert np.all((trace.first == -1) == ~has_input)
    assert np.all(trace.first[has_input] >= 0)


def test_a_trace_of_another_graph_size_is_a_config_error():
    _, graph, cluster, op_time, mates = _case(8)
    plain, _ = _simulators(graph, cluster, op_time, mates)
    placement = np.zeros(graph.num_ops, np.int32)
    trace = plain.trace(placement)
    shorter = dataclasses.replace(trace, placement=trace.placement[:-1])
    with pytest.raises(ConfigError, match="trace"):
        plain.run(placement, trace=shorter)
