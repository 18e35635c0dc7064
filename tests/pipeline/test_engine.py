"""The engine's shared step (place_problem): what it spends on the report's lower bound."""

import socket

from tf_autoplace.pipeline import engine
from tf_autoplace.pipeline.options import PlaceOptions
from tf_autoplace.placers import get_placer
from tf_autoplace.sim.lp_bound import DEFAULT_TIME_LIMIT_S
from tf_autoplace.testing.problems import random_problem


def test_the_lp_bound_gets_at_most_as_long_as_the_placement_or_the_floor(monkeypatch):
    # A 30k-op chain on 8 GPUs: m_etf placed it in 0.2 s, then the report's LP bound took
    # HiGHS's whole 30 s limit, which budget_s did not cap.
    problem = random_problem(40, seed=1)
    limits, real = [], engine.lp_lower_bound
    monkeypatch.setattr(engine, "lp_lower_bound",
                        lambda *a, **k: limits.append(k["time_limit_s"]) or real(*a, **k))
    for place_s in (0.0, 12.0, 1000.0):  # the placement's seconds by the engine's clock
        ticks = iter([0.0, place_s] + [place_s + 1.0] * 1000)
        monkeypatch.setattr(engine.time, "perf_counter", lambda: next(ticks))
        options = PlaceOptions(placer=get_placer("m_etf"), cluster=problem.cluster)
        engine.place_problem(problem, options)
    assert limits == [engine.BOUND_FLOOR_S, 12.0, DEFAULT_TIME_LIMIT_S]


def _two_branches():
    """A training graph of two independent elementwise branches: a split halves the
    estimated compute."""
    import tensorflow as tf

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [256, 4096], name="x")
        a = b = x
        for _ in range(6):
            a = tf.tanh(a * 1.01 + 0.1)
            b = tf.sigmoid(b * 0.99 - 0.1)
        w = v1.get_variable("w", [1], use_resource=True)
        v1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(a + b) * w, name="train")
    return graph


def test_auto_applies_no_split_estimated_for_this_machines_server_cpus():
    # Two serve-local tasks pinned to a core each: auto applied a split predicted 1.89x
    # faster from Grappler's CPU estimates (20-45x too slow here) that ran 1.1-1.3x slower,
    # and the report did not say its figures were estimates.
    import tf_autoplace
    from tf_autoplace.hw.local_cluster import TaskCores, describe
    from tf_autoplace.placers import AutoPlacer

    def served(host):
        return describe({"worker": [f"{host}:2222", f"{host}:2223"]},
                        TaskCores(((0,), (1,)), shared=False))

    here = served("localhost")
    assert len({d.core_group for d in here.devices}) == 2  # no one-pool shortcut
    report = tf_autoplace.autoplace(_two_branches(), cluster=here, progress=False)
    assert len(set(report.assignment.values())) == 1
    assert any("this machine's CPUs" in n and "without a search" in n for n in report.notes)
    assert any("Grappler's analytical estimates" in n and "measure them" in n
               for n in report.notes), report.notes
    # The same servers by this machine's name, or by the unspecified address: here too.
    assert engine._cpus_here(served(socket.gethostname()))
    assert engine._cpus_here(served("0.0.0.0"))
    # Servers elsewhere: nothing here could measure them, and the search goes on.
    report = tf_autoplace.autoplace(_two_branches(), cluster=served("10.0.0.9"),
                                    placer=AutoPlacer(max_samples=2000), progress=False)
    assert len(set(report.assignment.values())) == 2, report.notes
    assert not any("this machine's CPUs" in n for n in report.notes)


def test_a_split_from_measured_times_on_this_machines_cpus_is_said_to_be_unchecked():
    # A profiled serve-local cluster: auto applied a split predicted 1.73x faster that ran
    # 0.95x, and nothing said the gain was unmeasured.
    import numpy as np

    import tf_autoplace
    from tf_autoplace.cost.model import CostModel
    from tf_autoplace.hw.local_cluster import TaskCores, describe

    class Measured(CostModel):  # op times as a profile gives them: not estimates
        def _op_time(self, graph, cluster):
            return np.full((graph.num_ops, cluster.num_devices), 1e-4)

    def served(host):
        return describe({"worker": [f"{host}:2222", f"{host}:2223"]},
                        TaskCores(((0,), (1,)), shared=False))

    for host, said in (("localhost", True), ("10.0.0.9", False)):
        report = tf_autoplace.autoplace(_two_branches(), cluster=served(host), placer="random",
                                        cost_model=Measured(), progress=False)
        assert len(set(report.assignment.values())) == 2
        unchecked = [n for n in report.notes if "that no run has checked" in n]
        assert len(unchecked) == int(said), report.notes
        if said:
            assert f"({report.speedup:.2f}x one device)" in unchecked[0]
            assert unchecked[0].endswith("applies it only if faster beyond noise")
