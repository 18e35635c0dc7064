"""Tests of the simulator's cutoff: a simulation stops early exactly when its step time is at
least the cutoff, and otherwise gives what a simulation without one gives."""

import math

import numpy as np
import pytest

from tf_autoplace.sim import Simulator

from tests.sim.test_layout import FIELDS, _case, _simulators
from tests.sim.test_simulator import make_cluster, make_graph, times_ms


def _same(a, b) -> bool:
    return (a.makespan == b.makespan and a.transfer_bytes == b.transfer_bytes
            and all(np.array_equal(getattr(a, f), getattr(b, f)) for f in FIELDS))


@pytest.mark.parametrize("seed", range(40))
def test_cut_exactly_when_the_step_time_reaches_the_cutoff(seed):
    # Random graphs with memory rules, core groups, partners and same-time events; cutoffs
    # far under, just under, at, just over and far over each placement's step time.
    rng, graph, cluster, op_time, mates = _case(seed)
    plain, ordered = _simulators(graph, cluster, op_time, mates)
    for _ in range(5):
        placement = rng.integers(0, cluster.num_devices, graph.num_ops)
        full = plain.run(placement)
        step = full.makespan
        for cutoff in (0.0, 0.5 * step, np.nextafter(step, 0.0), step,
                       np.nextafter(step, math.inf), step * (1 + 1e-12), 1.001 * step,
                       2 * step, math.inf):
            for sim, result in ((plain, plain.run(placement, cutoff=cutoff)),
                                (ordered, ordered.summary(placement, cutoff=cutoff))):
                if step >= cutoff:
                    assert result is None, (cutoff, step)
                else:
                    assert result is not None, (cutoff, step)
                    reference = full if sim is plain else ordered.summary(placement)
                    assert _same(result, reference)


def test_the_bound_on_work_left_cuts_before_the_last_event():
    # A chain of 40 ops of 1 ms, the first on device 0 and the rest on device 1: from the
    # first check on, device 1's work left ends at the step time, so a cutoff just under it
    # stops the simulation with most ops still to run; a cutoff just over it never does.
    n = 40
    graph = make_graph(n, [(i, 8) for i in range(n)], [(i, i + 1) for i in range(n - 1)])
    sim = Simulator(graph, make_cluster(2), times_ms([1.0] * n, 2))
    placement = np.ones(n, np.int32)
    placement[0] = 0
    step = sim.run(placement).makespan
    assert sim.run(placement, cutoff=step * (1 + 1e-6)) is not None
    assert sim.run(placement, cutoff=step * (1 - 1e-6)) is None
    ended = sim._simulate(placement, step * (1 - 1e-6))[0]  # ops that ended before the cut
    assert ended < n // 2
