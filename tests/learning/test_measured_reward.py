"""reward="measured": the searches take their scores from runs on this machine's devices."""

import dataclasses

import numpy as np
import pytest

import tf_autoplace
from tf_autoplace.core.cluster import Cluster
from tf_autoplace.errors import ConfigError, MeasurementError
from tf_autoplace.grouping import GroupingConfig
from tf_autoplace.hw.runner import canonical_device
from tf_autoplace.learning import measured
from tf_autoplace.learning.measured import MeasuredEvaluator
from tf_autoplace.placers import AutoPlacer, PlacetoPlacer
from tf_autoplace.placers.post.placer import PostPlacer
from tf_autoplace.testing.graphs import small_cnn
from tf_autoplace.testing.problems import random_problem

CPU2 = "testdata/cpu2_independent.pbtxt"


class _FakeRun:
    """Stands in for hw.runner.run: a step time per placement, counted."""

    def __init__(self, fail_on_device_1=False):
        self.calls = 0
        self.fail = fail_on_device_1

    def __call__(self, workload, assignment, config):
        self.calls += 1
        ones = sum(d.endswith("1") for d in assignment.values())
        if self.fail and ones:
            raise MeasurementError("TensorFlow could not run the placed graph: boom")
        return type("M", (), {"step_time_s": 0.001 * (1 + ones)})()


@pytest.fixture
def problem():
    p = random_problem(20, 0, num_gpus=2, host=False)
    return dataclasses.replace(p, workload=object())


def test_scores_are_measured_step_times_run_once_per_placement(problem, monkeypatch):
    fake = _FakeRun()
    monkeypatch.setattr(measured, "run", fake)
    evaluator = MeasuredEvaluator(problem, memory_penalty=0.0)
    n = problem.graph.num_ops
    a, b = np.zeros(n, np.int32), np.zeros(n, np.int32)
    b[:3] = 1
    out = evaluator.evaluate(np.stack([a, b, a]))
    np.testing.assert_allclose(out.makespan, [0.001, 0.004, 0.001])
    np.testing.assert_allclose(out.scores, out.makespan)
    assert fake.calls == 2 and evaluator.runs == 2 and evaluator.samples == 3


def test_a_placement_tensorflow_rejects_scores_inf(problem, monkeypatch):
    monkeypatch.setattr(measured, "run", _FakeRun(fail_on_device_1=True))
    evaluator = MeasuredEvaluator(problem)
    n = problem.graph.num_ops
    out = evaluator.evaluate(np.stack([np.zeros(n, np.int32), np.ones(n, np.int32)]))
    assert np.isfinite(out.scores[0]) and np.isinf(out.scores[1])


def test_auto_refuses_to_choose_when_every_measured_run_failed(problem, monkeypatch):
    # A graph TensorFlow cannot run here at all (its one-epoch data runs out, say): every
    # placement scored inf, and auto applied one anyway, saying only "inf -> inf ms".
    def fail(workload, assignment, config):
        raise MeasurementError("TensorFlow could not run the placed graph: OutOfRangeError")

    monkeypatch.setattr(measured, "run", fail)
    with pytest.raises(MeasurementError, match="ran none of the .* placements measured.*"
                                               "first failure: TensorFlow could not run the "
                                               "placed graph: OutOfRangeError"):
        AutoPlacer(reward="measured", max_samples=8, learned=()).place(problem, seed=0)


def test_a_placement_over_memory_is_not_run(monkeypatch):
    p = random_problem(20, 0, num_gpus=2, host=False, gpu_memory=1)
    p = dataclasses.replace(p, workload=object())
    fake = _FakeRun()
    monkeypatch.setattr(measured, "run", fake)
    out = MeasuredEvaluator(p).evaluate(np.zeros((1, p.graph.num_ops), np.int32))
    assert fake.calls == 0 and out.overflow_gb[0] > 0
    assert out.makespan[0] == p.simulator.run(np.zeros(p.graph.num_ops, np.int32)).makespan


def test_measured_reward_needs_a_workload_and_a_known_name():
    with pytest.raises(ConfigError, match="workload"):
        MeasuredEvaluator(random_problem(20, 0))
    with pytest.raises(ConfigError, match="'real'"):
        AutoPlacer(reward="real")
    with pytest.raises(ConfigError, match="'real'"):
        PlacetoPlacer(reward="real")
    with pytest.raises(ConfigError, match="measure_steps must be an int >= 1, got 0"):
        PostPlacer(reward="measured", measure_steps=0)
    assert PostPlacer(reward="measured").needs_workload
    assert not PostPlacer().needs_workload


@pytest.mark.parametrize("placer", [AutoPlacer, PlacetoPlacer, PostPlacer])
def test_measured_reward_runs_here_not_on_workers(placer):
    # Measured placements run in this process, one at a time: a worker pool or a Ray cluster
    # would simulate them instead, so asking for both is an error, not a silent simulation.
    with pytest.raises(ConfigError, match="ray_address='auto'"):
        placer(reward="measured", ray_address="auto")
    with pytest.raises(ConfigError, match="workers=2"):
        placer(reward="measured", workers=2)
    assert placer(reward="measured", workers=1).needs_workload
    assert placer(reward="simulated", workers=2, ray_address="auto").config.workers == 2


@pytest.mark.parametrize("placer", [
    AutoPlacer(reward="measured", max_samples=6, measure_steps=1, starts=1, seeds_per_start=1),
    PostPlacer(reward="measured", max_samples=6, batch=3, ce_period=6, measure_steps=1),
    # Placeto scores the placement after every group move (~80 runs here, about a minute).
    pytest.param(PlacetoPlacer(reward="measured", max_samples=4, measure_steps=1),
                 marks=pytest.mark.slow),
], ids=["auto", "post", "placeto"])
def test_learned_placers_search_on_measured_runs(placer, monkeypatch):
    tg = small_cnn()
    runs = []
    real_run = measured.run
    monkeypatch.setattr(measured, "run", lambda *a, **k: runs.append(1) or real_run(*a, **k))
    # Few groups: Placeto scores the placement after every group it moves.
    report = tf_autoplace.autoplace(tg.graph, cluster=CPU2, placer=placer,
                                    grouping=GroupingConfig(max_groups=4),
                                    measure_feeds=tg.feed)
    assert runs, "no placement was run"
    assert any("measured placements" in note for note in report.notes)
    assert {canonical_device(d) for d in report.assignment.values()} <= {"CPU:0", "CPU:1"}
    if isinstance(placer, AutoPlacer):  # one timing each: no gain claimed beyond its noise
        summary = next(n for n in report.notes if "measured placements" in n)
        assert "each timed once" in summary and "% faster" not in summary


def test_measured_rewards_keep_the_one_device_answers(monkeypatch):
    # Measured auto on devices of one core group (the shipped cpu2) searched its whole budget
    # and applied a split measured slower than one device; measured Placeto on one device
    # failed ("a policy needs >= 2 devices"). Both answer as their simulated forms do.
    tg = small_cnn()
    runs = []
    real_run = measured.run
    monkeypatch.setattr(measured, "run", lambda *a, **k: runs.append(1) or real_run(*a, **k))
    report = tf_autoplace.autoplace(tg.graph, cluster="cpu2", measure_feeds=tg.feed,
                                    placer=AutoPlacer(reward="measured", measure_steps=1))
    assert not runs and len(set(report.assignment.values())) == 1
    assert any("they share one core group" in note for note in report.notes), report.notes
    one = Cluster.local(num_logical_cpus=1)
    report = tf_autoplace.autoplace(tg.graph, cluster=one, measure_feeds=tg.feed,
                                    placer=PlacetoPlacer(reward="measured", measure_steps=1))
    assert set(report.assignment.values()) == {one.names[0]}
    assert any("nothing to learn" in note for note in report.notes), report.notes
