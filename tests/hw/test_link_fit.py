"""The fit of the links between TensorFlow tasks on the user's graph: on measurements made up
from the simulator at a known latency, the fit finds that latency; the cluster it returns
changes the links between tasks only."""

import dataclasses
import json

import numpy as np
import pytest

from tf_autoplace import zoo
from tf_autoplace.core.cluster import Cluster, resolve_cluster
from tf_autoplace.cost import AnalyticalCostModel
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph import ingest
from tf_autoplace.hw import link_fit
from tf_autoplace.hw.protocol import ProtocolResult, StepTimes
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.proto import cost_profile_pb2

TF_CONFIG = json.dumps({"cluster": {"worker": ["localhost:2222", "localhost:2223"]},
                        "task": {"type": "worker", "index": 0}})


@pytest.fixture(scope="module")
def two_tasks():
    # Two tasks of one host, each pinned to two cores of its own (cpu2's description with a
    # core group that is not the host's: tasks given the host's share its cores).
    cpu2 = resolve_cluster("cpu2")
    pinned = dataclasses.replace(
        cpu2, devices=tuple(dataclasses.replace(d, core_group="pinned") for d in cpu2.devices),
        core_groups=(("pinned", dict(cpu2.core_groups)["host"]),))
    cluster = Cluster.from_tf(TF_CONFIG, devices=pinned)
    meta_graph = ingest.load_meta_graph(zoo.build("two_tower").graph)
    return cluster, meta_graph


def test_with_task_latency_changes_the_links_between_tasks_only(two_tasks):
    cluster, _ = two_tasks
    out = link_fit.with_latency(cluster, link_fit.task_pairs(cluster), 3e-4)
    tasks = cluster.device_tasks
    across = tasks[:, None] != tasks[None, :]
    assert (out.latency[across] == 3e-4).all()
    np.testing.assert_array_equal(out.latency[~across], cluster.latency[~across])
    np.testing.assert_array_equal(out.bandwidth, cluster.bandwidth)


def _made_up_by(truth, cluster, slower=None, spread=None):
    """A stand-in for the protocol: each placement's steps are ``truth``'s simulated step
    (times ``slower[label]`` where given; spread evenly over +-``spread[label]`` of it where
    given, else all equal)."""
    index = {name: d for d, name in enumerate(cluster.names)}
    slower, spread = slower or {}, spread or {}

    def measure(workload, assignments, **kwargs):
        del workload, kwargs
        placed = []
        for label, assignment in assignments.items():
            devices = np.array([index[assignment[op]] for op in truth.graph.names], np.int32)
            step = truth.simulator.makespan(devices) * slower.get(label, 1.0)
            placed.append(StepTimes.of(label, step * np.linspace(
                1 - spread.get(label, 0.0), 1 + spread.get(label, 0.0), 15)))
        return ProtocolResult(placements=tuple(placed), steps=15, warmup_steps=80,
                              load_before=0.0, load_after=0.0)
    return measure


@pytest.mark.parametrize("true_latency_s", [2e-5, 4e-4])
def test_the_fit_finds_the_latency_the_measurements_were_made_with(two_tasks, monkeypatch,
                                                                   true_latency_s):
    cluster, meta_graph = two_tasks
    # No op times in the profile: the analytical model, uncalibrated, makes up the steps.
    truth, _ = build_problem(meta_graph, link_fit.with_latency(
        cluster, link_fit.task_pairs(cluster), true_latency_s),
                             cost_model=AnalyticalCostModel(meta_graph))
    monkeypatch.setattr(link_fit, "measure_placements", _made_up_by(truth, cluster))
    fitted, fit = link_fit.fit_latency(cluster, cost_profile_pb2.CostProfile(), meta_graph,
                                       workload=None, reference=0,
                                       pairs=link_fit.task_pairs(cluster), what="between tasks")
    assert len(fit.labels) == len(link_fit.SHARES)
    assert all(t > 0 for t in fit.transfers)
    # The grid's nearest point (41 points over four decades: a factor 1.26 apart).
    assert true_latency_s / 1.3 <= fit.latency_s <= true_latency_s * 1.3
    assert fit.median_error(fit.predicted_s) < 0.02
    assert fitted.latency[0, 2] == fit.latency_s and fitted.latency[0, 1] == cluster.latency[0, 1]
    # A light split is measured beside the fitted ones, not fitted; the larger error goes
    # with the cluster: auto's least gain for a split.
    label, predicted_s = fit.light
    assert label == "moved 0.02" and label not in fit.labels
    assert fit.light_error == pytest.approx(abs(predicted_s / fit.measured[label].median_s - 1))
    assert cluster.prediction_error is None
    assert fitted.prediction_error == fit.prediction_error == max(
        fit.median_error(fit.predicted_s), fit.light_error_bound)
    assert "a light split (moved 0.02)" in fit.summary()


def test_a_light_split_the_model_misses_raises_the_clusters_error_not_the_latency(two_tasks,
                                                                                 monkeypatch):
    cluster, meta_graph = two_tasks
    pairs = link_fit.task_pairs(cluster)
    truth, _ = build_problem(meta_graph, link_fit.with_latency(cluster, pairs, 2e-4),
                             cost_model=AnalyticalCostModel(meta_graph))

    def fit(slower, spread=None):
        monkeypatch.setattr(link_fit, "measure_placements",
                            _made_up_by(truth, cluster, slower, spread))
        return link_fit.fit_latency(cluster, cost_profile_pb2.CostProfile(), meta_graph,
                                    workload=None, reference=0, pairs=pairs,
                                    what="between tasks")

    exact, exact_fit = fit({})
    missed, missed_fit = fit({"moved 0.02": 1.3})  # the light split ran 1.3x the model's step
    assert missed_fit.latency_s == exact_fit.latency_s  # it is not fitted
    assert exact.prediction_error < 0.02
    assert missed_fit.light_error == pytest.approx(1 - missed_fit.light[1] / (
        missed_fit.measured["moved 0.02"].median_s), abs=1e-9)
    assert missed.prediction_error == missed_fit.light_error_bound == missed_fit.light_error
    assert missed.prediction_error > 0.2
    # A light split the model prices right, but whose steps spread +-30%: its median is
    # not sure to within 10%, and neither are the predictions auto applies a split on.
    noisy, noisy_fit = fit({}, {"moved 0.02": 0.3})
    assert noisy_fit.latency_s == exact_fit.latency_s and noisy_fit.light_error < 0.02
    step = noisy_fit.measured["moved 0.02"]
    assert noisy.prediction_error == noisy_fit.light_error_bound > 0.1
    predicted_s = noisy_fit.light[1]
    assert noisy_fit.light_error_bound == pytest.approx(
        max(predicted_s / step.low_s - 1, 1 - predicted_s / step.high_s))
    assert "within its interval" in noisy_fit.summary()


def test_with_task_speeds_the_other_tasks_speed_is_measured_in_the_same_rounds(two_tasks,
                                                                                monkeypatch):
    """Task 1 runs its ops 1.25x slower than the profile says: the speed measured beside the
    reference in the rounds replaces the profile's, and the latency is still found."""
    cluster, meta_graph = two_tasks
    slow = tuple(dataclasses.replace(d, speed=0.8) if t == 1 else d
                 for d, t in zip(cluster.devices, cluster.device_tasks.tolist()))
    true_latency_s = 1e-4
    truth, _ = build_problem(meta_graph, link_fit.with_latency(
        dataclasses.replace(cluster, devices=slow), link_fit.task_pairs(cluster),
        true_latency_s), cost_model=AnalyticalCostModel(meta_graph))
    monkeypatch.setattr(link_fit, "measure_placements", _made_up_by(truth, cluster))
    fitted, fit = link_fit.fit_latency(cluster, cost_profile_pb2.CostProfile(), meta_graph,
                                       workload=None, reference=0,
                                       pairs=link_fit.task_pairs(cluster), what="between tasks",
                                       task_speeds=True)
    assert "on worker:1" in [p.name for p in fit.measured.placements]
    assert "on worker:1" not in fit.labels
    ((task, before, after),) = fit.task_speeds
    assert task == "worker:1" and before == 1.0
    # Per-op overheads do not scale with the speed: the step's ratio is a little above 0.8.
    assert 0.8 <= after < 0.9
    speeds = [d.speed for d in fitted.devices]
    assert speeds[:2] == [1.0, 1.0] and speeds[2:] == [after, after]
    assert true_latency_s / 1.3 <= fit.latency_s <= true_latency_s * 1.3
    assert "task worker:1 speed" in fit.summary()
    # Without task_speeds the profile's speeds stay.
    fitted, fit = link_fit.fit_latency(cluster, cost_profile_pb2.CostProfile(), meta_graph,
                                       workload=None, reference=0,
                                       pairs=link_fit.task_pairs(cluster), what="between tasks")
    assert fit.task_speeds == () and all(d.speed == 1.0 for d in fitted.devices)


def test_pairs_between_tasks_and_within_a_core_group(two_tasks):
    cluster, _ = two_tasks  # cpu2 per task: two logical CPUs of one core group in each
    np.testing.assert_array_equal(link_fit.task_pairs(cluster),
                                  [[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]])
    local = Cluster.local(num_logical_cpus=2)
    np.testing.assert_array_equal(link_fit.core_group_pairs(local), [[0, 1], [1, 0]])
    np.testing.assert_array_equal(link_fit.core_group_pairs(local.independent()), 0)


def test_moves_go_only_to_the_devices_the_pairs_name(two_tasks):
    cluster, meta_graph = two_tasks
    problem, _ = build_problem(meta_graph, cluster, cost_model=AnalyticalCostModel(meta_graph))
    targets = np.array([False, False, True, False])
    devices = link_fit.moved_share(problem, 0.5, np.random.default_rng(0), home=0,
                                   targets=targets)
    assert set(devices.tolist()) == {0, 2}


def test_a_reference_without_a_partner_device_is_refused(two_tasks):
    _, meta_graph = two_tasks
    local = Cluster.local(num_logical_cpus=2).independent()
    with pytest.raises(ConfigError, match="no device pair"):
        link_fit.fit_latency(local, cost_profile_pb2.CostProfile(), meta_graph, None,
                             reference=0, pairs=link_fit.core_group_pairs(local),
                             what="within a core group")


def test_with_delay_the_fit_finds_latency_and_delay_one_latency_cannot_match(two_tasks,
                                                                            monkeypatch):
    """Steps made up with 50 us of sender work and 631 us in flight per transfer (points of
    the grids): one latency cannot price both the light and the heavy moved placements, the
    pair does, exactly."""
    cluster, meta_graph = two_tasks
    pairs = link_fit.task_pairs(cluster)
    latency_s, delay_s = link_fit.LATENCIES_S[17], link_fit.DELAYS_S[15]
    assert (round(latency_s * 1e6), round(delay_s * 1e6)) == (50, 631)
    truth, _ = build_problem(meta_graph, link_fit.with_latency(cluster, pairs, latency_s,
                                                               delay_s),
                             cost_model=AnalyticalCostModel(meta_graph))
    monkeypatch.setattr(link_fit, "measure_placements", _made_up_by(truth, cluster))

    def fit(**kwargs):
        return link_fit.fit_latency(cluster, cost_profile_pb2.CostProfile(), meta_graph,
                                    workload=None, reference=0, pairs=pairs,
                                    what="between tasks", **kwargs)

    fitted, both = fit(with_delay=True)
    assert (both.latency_s, both.delay_s) == (latency_s, delay_s)
    assert both.prediction_error < 1e-9
    assert (fitted.delay[pairs] == delay_s).all() and not fitted.delay[~pairs].any()
    assert "631.0 us in flight" in both.summary()
    one_cluster, one = fit()
    assert one.delay_s == 0 and not one_cluster.delay.any()
    assert one.prediction_error > 0.05  # the best single latency is 5% off or more


def test_a_delay_goes_only_where_a_transfer_flies(two_tasks):
    cluster, _ = two_tasks
    pairs = np.ones((4, 4), bool)  # every pair, those within each task's core group too
    out = link_fit.with_latency(cluster, pairs, 1e-4, 3e-4)
    across = link_fit.task_pairs(cluster)
    assert (out.delay[across] == 3e-4).all() and not out.delay[~across].any()
    assert (out.latency[~np.eye(4, dtype=bool)] == 1e-4).all()
