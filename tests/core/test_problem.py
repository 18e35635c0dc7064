"""A PlacementProblem with what a profile measured (the executed graph, partner times): its
simulator uses them, a restricted problem keeps them, and inconsistent ones are refused."""

import threading

import numpy as np
import pytest

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.problem import PlacementProblem, Placer
from tf_autoplace.graph.executed import executed_graph
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.grouping import Grouping

# x -> c_id -> y, the identity removed by Grappler; y's kernel changes apart from x.
GRAPH = from_edges(3, [(0, 1, 1000), (1, 2, 1000)], names=["x", "c_id", "y"],
                   op_types=["MaxPool", "Identity", "MaxPoolGrad"])


def _problem(**measured):
    cluster = Cluster.local(num_logical_cpus=2)
    op_time = np.full((3, 2), 1e-3)
    return PlacementProblem(graph=GRAPH, cluster=cluster, op_time=op_time,
                            grouping=Grouping.from_labels(GRAPH, GRAPH.colocation), **measured)


def test_the_simulator_runs_the_executed_graph_with_partner_times():
    executed = executed_graph(GRAPH, np.array([True, False, True]))
    apart = np.full((3, 2), 1e-3)
    apart[2] = 7e-3
    problem = _problem(executed=executed, partner=np.array([-1, -1, 0]), partner_time=apart)
    assert problem.sim_graph is executed and _problem().sim_graph is GRAPH
    placement = np.array([0, 1, 0], np.int32)  # only the removed identity elsewhere
    assert problem.simulator.run(placement).num_transfers == 0
    assert _problem().simulator.run(placement).num_transfers == 2
    split = problem.simulator.run(np.array([1, 1, 0], np.int32))
    assert split.end[2] - split.start[2] == pytest.approx(7e-3)
    np.testing.assert_array_equal(problem.fastest_op_time, np.full((3, 2), 1e-3))

    one = problem.restricted([1])
    assert one.executed is executed and one.partner is problem.partner
    np.testing.assert_array_equal(one.partner_time, apart[:, [1]])


@pytest.mark.parametrize("measured, match", [
    (dict(executed=from_edges(3, [], names=["a", "b", "c"])), "the graph's ops"),
    (dict(partner=np.array([-1, -1, 0])), "give both or neither"),
    (dict(partner=np.array([-1, -1, 0]), partner_time=np.ones((3, 1))), "partner_time has shape"),
])
def test_inconsistent_measurements_are_refused(measured, match):
    with pytest.raises(ValueError, match=match):
        _problem(**measured)


def test_one_placer_shared_by_two_threads_gives_each_placement_its_own_run_state():
    # Two threads that shared one placer object got each other's notes (and could get each
    # other's fine-tuned policy): the run state lives on the object. A second call now waits.
    from tf_autoplace.testing.problems import random_problem

    first_in, second_in, go = threading.Event(), threading.Event(), threading.Event()

    class Holding(Placer):
        name = "holding"

        def _place(self, problem, rng):
            self.notes.append(f"placed {problem.graph.num_ops} ops")
            self.trained_policy = problem.graph.num_ops
            (second_in if first_in.is_set() else first_in).set()
            go.wait(timeout=60)  # (a bound only: released below)
            return np.zeros(problem.graph.num_ops, np.int32)

    placer, results = Holding(), {}
    problems = {n: random_problem(n, seed=1) for n in (20, 30)}
    run = lambda n: results.setdefault(n, placer.place(problems[n]))  # noqa: E731
    threads = [threading.Thread(target=run, args=(n,)) for n in problems]
    threads[0].start()
    assert first_in.wait(timeout=60)
    threads[1].start()
    second_in.wait(timeout=1)  # the second run would be in by now if it did not wait
    go.set()
    for thread in threads:
        thread.join(timeout=60)
    for n, placement in results.items():
        assert placement.notes == (f"placed {n} ops",) and placement.trained_policy == n
