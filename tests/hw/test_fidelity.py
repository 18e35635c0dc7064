"""The fidelity tool's statistics on hand cases, and the placements it collects."""

import dataclasses
import math

import numpy as np
import pytest

from tf_autoplace.errors import ConfigError
from tf_autoplace.hw import fidelity
from tf_autoplace.hw.protocol import MIN_STEPS
from tf_autoplace.hw.runner import RunConfig
from tf_autoplace.testing.problems import random_problem


def test_spearman_on_a_hand_case():
    # Ranks of x: 1 2 3 4 5; of y: 2 1 4 3 5. d^2 sums to 4: rho = 1 - 6 * 4 / (5 * 24) = 0.8.
    assert fidelity.spearman([1, 2, 3, 4, 5], [20, 10, 40, 30, 50]) == pytest.approx(0.8)
    assert fidelity.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # Monotone but not linear: rank correlation 1 where Pearson's would not be.
    assert fidelity.spearman([1, 2, 3, 4], [1, 10, 100, 1000]) == pytest.approx(1.0)


def test_spearman_gives_ties_their_mean_rank():
    # x ranks 1.5 1.5 3 4; y ranks 1 2 3 4: Pearson of the ranks.
    rx, ry = np.array([1.5, 1.5, 3, 4]), np.array([1, 2, 3, 4.0])
    expected = np.corrcoef(rx, ry)[0, 1]
    assert fidelity.spearman([7, 7, 8, 9], [1, 2, 3, 4]) == pytest.approx(expected)
    assert expected < 1


def test_spearman_degenerate_cases():
    assert math.isnan(fidelity.spearman([1, 1, 1], [1, 2, 3]))  # a constant sample
    assert math.isnan(fidelity.spearman([1], [2]))
    with pytest.raises(ConfigError, match="one length"):
        fidelity.spearman([1, 2], [1, 2, 3])


def test_median_relative_error():
    # |sim / measured - 1| = 1, 0.5, 0.1 -> median 0.5.
    assert fidelity.median_relative_error([2, 1.5, 0.9], [1, 1, 1]) == pytest.approx(0.5)


def test_moved_share_moves_whole_colocation_groups_more_as_the_share_grows():
    problem = random_problem(60, 3, num_gpus=2, host=False)
    rng = np.random.default_rng(0)
    none = fidelity.moved_share(problem, 0.0, rng)
    assert (none == 0).all()
    everything = fidelity.moved_share(problem, 1.0, rng)
    assert (everything == 1).all()
    half = fidelity.moved_share(problem, 0.5, np.random.default_rng(1))
    colocation = problem.graph.colocation
    for c in np.unique(colocation):  # a colocation group stays together
        assert len(set(half[colocation == c].tolist())) == 1
    assert 0 < half.mean() < 1


def test_config_is_validated():
    with pytest.raises(ConfigError, match="-1"):
        fidelity.Config(num_logical_cpus=-1)
    with pytest.raises(ConfigError, match="max_load"):
        fidelity.Config(max_load=0)


@pytest.mark.slow
def test_a_users_graph_file_is_measured_under_the_protocol(tmp_path):
    from tf_autoplace.testing import small_cnn

    path = tmp_path / "model.pb"
    path.write_bytes(small_cnn().graph.as_graph_def().SerializeToString())
    # The protocol's least steps and a short warm-up: what is checked is that the file's graph
    # goes through every stage, not how settled its steps are.
    config = fidelity.Config(random_placements=2, learned=("auto",), learned_samples=20,
                             run=RunConfig(steps=MIN_STEPS, warmup_steps=5),
                             profile=RunConfig(steps=3, warmup_steps=5, trace_steps=3))
    result = fidelity.evaluate_file(str(path), config, fidelity.local_cluster(2))
    assert result.graph == "model.pb" and result.steps == MIN_STEPS
    assert len(result.measured_s) == len(result.labels) >= 5
    assert all(lo <= m <= hi for lo, m, hi in zip(result.measured_low_s, result.measured_s,
                                                 result.measured_high_s))
    hits, pairs = result.distinguishable
    assert pairs == len(result.labels) * (len(result.labels) - 1) // 2 and 0 <= hits <= pairs
    assert "distinguishable pairs" in fidelity.markdown([result], title="t")
    # A single-device Session measured in the rounds calibrates the last variant: its
    # single-device prediction is that Session's step, not the profile's.
    assert result.rounds_step_s > 0 and result.profile_step_s > 0
    single = result.labels.index(next(x for x in result.labels if x.startswith("single 0")))
    assert result.simulated_s[fidelity.IN_ROUNDS_VARIANT][single] == pytest.approx(
        result.rounds_step_s)
    assert result.simulated_s[fidelity.PRODUCT_VARIANT][single] == pytest.approx(
        result.profile_step_s)


def test_busy_figures_are_marked_not_publishable():
    busy = fidelity.GraphResult(graph="g", num_ops=1, labels=("a", "b"), transfers=(0, 1),
                                measured_s=(1.0, 2.0),
                                simulated_s={v: (1.0, 2.0) for v in fidelity.VARIANTS},
                                load=(0.5, 3.0), distinguishable=(1, 1), steps=15)
    assert not busy.quiet
    assert "Not publishable" in fidelity.markdown([busy], title="t")
    quiet = dataclasses.replace(busy, load=(0.5, 1.2))
    assert quiet.quiet and "Not publishable" not in fidelity.markdown([quiet], title="t")


def test_the_drift_compares_the_rounds_single_device_step_with_the_profiles():
    result = fidelity.GraphResult(
        graph="g", num_ops=1, labels=("single 0 = best_heuristic", "single 1", "random 0"),
        transfers=(0, 0, 5), measured_s=(0.012, 0.013, 0.02),
        simulated_s={v: (0.015, 0.015, 0.02) for v in fidelity.VARIANTS}, load=(0.5, 0.6),
        steps=15, profile_step_s=0.015, rounds_step_s=0.012)
    assert result.drift() == pytest.approx(0.8)
    assert "15.00 ms; a single-device Session in the rounds measured 12.00 ms (0.80x)" in (
        fidelity.markdown([result], title="t"))
    assert dataclasses.replace(result, profile_step_s=0.0).drift() is None
    assert dataclasses.replace(result, rounds_step_s=0.0).drift() is None
