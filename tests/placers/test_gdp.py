"""The GDP placer: zero-shot and fine-tuned placement, budgets, determinism, the doors, the
fallback to the best heuristic, and graphs from 100 to 45,000 ops."""

import numpy as np
import pytest

import tf_autoplace
from tf_autoplace import flags as ap_flags
from tf_autoplace.errors import ConfigError
from tf_autoplace.heuristics import BestHeuristicPlacer
from tf_autoplace.placers import GdpConfig, GdpPlacer, get_placer
from tf_autoplace.rl.gdp_features import FeatureConfig
from tf_autoplace.testing.graphs import small_cnn
from tf_autoplace.testing.problems import random_problem

SMALL = FeatureConfig(max_groups=48)


@pytest.fixture(scope="module")
def short_placer():
    """One fine-tuning step (a placer traces its policy once; its weights are reset per call)."""
    return GdpPlacer(max_steps=1, samples=2, epochs=1)


def test_zero_shot_when_the_budget_or_the_step_budget_is_zero():
    problem = random_problem(300, seed=1, num_gpus=4)
    placer = GdpPlacer(budget_s=0, features=SMALL)
    placement = placer.place(problem, seed=0)
    assert placer.stats["steps"] == 0 and placer.stats["samples"] == 1
    assert placement.devices.shape == (300,)
    assert GdpConfig(max_steps=0).zero_shot and get_placer("gdp", budget_s=0).config.zero_shot
    assert not GdpConfig(budget_s=0.5).zero_shot


def test_fine_tuning_runs_its_steps_and_the_same_seed_gives_the_same_placement():
    problem = random_problem(250, seed=2, num_gpus=2)
    runs = []
    for _ in range(2):
        placer = GdpPlacer(max_steps=3, samples=4, epochs=2, features=SMALL, heuristics=())
        runs.append(placer.place(problem, seed=7).devices)
        assert placer.stats["steps"] == 3 and placer.stats["winner"] == "gdp"
        # zero-shot, the hint (a policy that reads one), the samples, the final greedy placement
        hint = placer.load_policy()[0].config["hint"]
        assert placer.stats["samples"] == 1 + hint + 3 * 4 + 1
    np.testing.assert_array_equal(runs[0], runs[1])
    # The placer's own second run starts again from the saved weights: same answer.
    again = placer.place(problem, seed=7).devices
    np.testing.assert_array_equal(again, runs[0])


def test_never_worse_than_the_best_heuristic_and_the_notes_say_who_won(short_placer):
    problem = random_problem(300, seed=3, num_gpus=2)
    placement = short_placer.place(problem, seed=0)
    heuristic = BestHeuristicPlacer().place(problem)
    stats = short_placer.stats
    assert placement.sim.makespan == pytest.approx(min(heuristic.sim.makespan,
                                                       stats["learned_ms"] / 1e3))
    # A tie goes to gdp: it is listed first, and problem.rank_placements keeps the given order.
    assert stats["winner"] == ("gdp" if stats["learned_ms"] / 1e3 <= heuristic.sim.makespan
                               else "best_heuristic")
    assert any(n.startswith("gdp: zero-shot") for n in placement.notes)


@pytest.mark.parametrize("kwargs, match", [
    (dict(budget_s=-1), "budget_s must be a number >= 0, got -1"),
    (dict(max_steps=-2), "max_steps must be an int >= 0, got -2"),
    (dict(samples=0), "samples must be an int >= 1, got 0"),
    (dict(heuristics=("nope",)), "nope"),
    (dict(workers=0), "workers must be an int >= 1, got 0"),
])
def test_bad_settings_are_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        GdpConfig(**kwargs)


def test_a_missing_policy_dir_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no GDP policy"):
        GdpPlacer(policy_dir=str(tmp_path), max_steps=0).place(random_problem(50), seed=0)


def test_the_doors_pass_the_budget_and_zero_means_zero_shot():
    assert ap_flags.make_placer("gdp", 12.5).config.budget_s == 12.5
    graph = small_cnn(batch=4).graph
    report = tf_autoplace.autoplace(graph, cluster="testdata/k80x2.pbtxt", placer="gdp",
                                    budget_s=0)
    assert any("gdp: zero-shot" in n for n in report.notes)
    assert all(op.device for op in graph.get_operations())


@pytest.mark.parametrize("num_ops, num_gpus", [(100, 8), (5000, 2)])
def test_places_graphs_of_any_size(short_placer, num_ops, num_gpus):
    problem = random_problem(num_ops, seed=4, num_gpus=num_gpus, max_groups=64)
    placement = short_placer.place(problem, seed=0)
    assert placement.devices.shape == (num_ops,)
    assert short_placer.stats["groups"] == min(num_ops, 512)
    assert short_placer.stats["steps"] == 1


@pytest.mark.slow
def test_places_a_45000_op_graph(short_placer):
    problem = random_problem(45000, seed=5, num_gpus=8, max_groups=2000)
    placement = short_placer.place(problem, seed=0)
    assert placement.devices.shape == (45000,)
    assert short_placer.stats["groups"] == 512
