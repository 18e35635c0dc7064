"""The GDP placer: zero-shot and fine-tuned placement, budgets, determinism, the doors, the
fallback to the best heuristic, keeping and reusing a fine-tuned policy, and graphs from 100 to
45,000 ops."""

import json
import os

import numpy as np
import pytest

import tf_autoplace
from tf_autoplace import flags as ap_flags
from tf_autoplace.errors import ConfigError
from tf_autoplace.heuristics import BestHeuristicPlacer
from tf_autoplace.learning.eager import policy_context
from tf_autoplace.learning.rollouts import Evaluator
from tf_autoplace.placers import GdpConfig, GdpPlacer, get_placer
from tf_autoplace.placers.gdp.features import NUM_NODE_FEATURES, FeatureConfig, graph_features
from tf_autoplace.placers.gdp.placer import SHIPPED_POLICY
from tf_autoplace.placers.gdp.policy import GdpPolicy
from tf_autoplace.placers.gdp.train import greedy_placement
from tf_autoplace.placers.placeto.search import pretrained_policy_dir
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
    assert placer.stats["curve"] == [(1, pytest.approx(placer.stats["zero_shot_R_ms"] / 1e3))]
    assert placement.devices.shape == (300,)
    # Zero-shot tuned nothing: there is no policy to keep.
    assert placer.trained_policy is None
    with pytest.raises(ConfigError, match="the gdp placer has no fine-tuned policy"):
        placer.save_policy("unused")
    assert GdpConfig(max_steps=0).zero_shot and get_placer("gdp", budget_s=0).config.zero_shot
    assert not GdpConfig(budget_s=0.5).zero_shot


def test_one_action_device_fine_tunes_nothing_and_keeps_no_policy():
    problem = random_problem(120, seed=5, num_gpus=1)  # one GPU (and its host)
    placer = GdpPlacer(max_steps=3, samples=4, epochs=1, features=SMALL)
    placer.place(problem, seed=0)
    assert placer.stats["steps"] == 0 and placer.trained_policy is None
    assert any("one action device, nothing to learn" in n for n in placer.notes)
    # ... and runs no policy to find that out (its greedy episode took seconds of TensorFlow).
    assert placer.stats["samples"] == 0 and placer.stats["policy"] == "unused"


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
        # The curve: zero-shot, after each update, after the final greedy placement.
        curve, stats = placer.stats["curve"], placer.stats
        assert [n for n, _ in curve] == [1] + [1 + hint + 4 * k for k in (1, 2, 3)] + [
            stats["samples"]]
        assert curve[0][1] == pytest.approx(stats["zero_shot_R_ms"] / 1e3)
        assert curve[-1][1] == pytest.approx(stats["learned_R_ms"] / 1e3)
        assert all(a[1] >= b[1] for a, b in zip(curve, curve[1:]))
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
    assert ap_flags.AutoplaceSettings(placer="gdp", budget_s=12.5).place_options() \
        .placer.config.budget_s == 12.5
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


# ------------------------------------------------------------ keeping and reusing a policy
@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A GdpPlacer fine-tuned from the shipped policy for two steps, its policy saved."""
    problem = random_problem(200, seed=2, num_gpus=2)
    placer = GdpPlacer(max_steps=2, samples=4, epochs=1, features=SMALL, heuristics=())
    placer.place(problem, seed=0)
    directory = str(tmp_path_factory.mktemp("gdp_policy") / "tuned")
    placer.save_policy(directory)
    return problem, placer, directory


def _logits(policy, problem):
    return policy.graph_logits(graph_features(problem, SMALL, hint=policy.config["hint"]))


def test_a_saved_fine_tuned_policy_reloads_with_identical_outputs(tuned):
    problem, placer, directory = tuned
    assert sorted(os.listdir(directory)) == ["manifest.json", "policy.json", "weights.npz"]
    with policy_context():
        loaded = GdpPolicy.load(directory)
        for a, b in zip(loaded.get_weights(), placer.trained_policy.weights):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(_logits(loaded, problem),
                                      _logits(placer.trained_policy.build(), problem))
        # Fine-tuning changed the shipped policy: this is not the shipped one again.
        assert not np.allclose(_logits(loaded, problem),
                               _logits(GdpPolicy.load(SHIPPED_POLICY), problem))
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["placer"] == "gdp" and manifest["fine_tuned_from"] == SHIPPED_POLICY
    assert manifest["graph"]["ops"] == 200 and manifest["action_devices"] == 2
    assert manifest["results"]["steps"] == 2
    assert manifest["results"]["samples"] == placer.stats["samples"]
    # The search's curve as stats gives it: the zero-shot placement first, then each update.
    assert manifest["results"]["curve"] == [[n, pytest.approx(r * 1e3)]
                                            for n, r in placer.stats["curve"]]
    assert manifest["results"]["curve"][0][1] == pytest.approx(
        placer.stats["zero_shot_R_ms"])
    assert "GdpConfig(" in manifest["placer_config"]


@pytest.mark.slow
def test_a_later_placer_starts_from_the_saved_policy(tuned):
    problem, _, directory = tuned
    zero = GdpPlacer(max_steps=0, features=SMALL, heuristics=(), policy=directory)
    zero.place(problem, seed=0)
    assert zero.stats["policy"] == directory and zero.trained_policy is None
    with policy_context(), Evaluator(problem) as evaluator:
        loaded = GdpPolicy.load(directory)
        graph = graph_features(problem, SMALL, hint=loaded.config["hint"])
        _, greedy_r = greedy_placement(loaded, graph, evaluator)
    assert zero.stats["zero_shot_R_ms"] == pytest.approx(greedy_r * 1e3)
    # Fine-tuned again from it: the same seed gives the same placement, and it keeps a policy.
    runs = []
    for _ in range(2):
        again = GdpPlacer(max_steps=1, samples=4, epochs=1, features=SMALL, policy=directory)
        runs.append(again.place(problem, seed=3).devices)
        assert again.trained_policy.manifest["fine_tuned_from"] == directory
    np.testing.assert_array_equal(runs[0], runs[1])
    assert get_placer("gdp", policy=directory).config.policy_dir == directory


def test_the_doors_start_gdp_from_a_saved_policy(tuned, tiny_graph):
    _, _, directory = tuned
    report = tf_autoplace.autoplace(tiny_graph, cluster="testdata/k80x2.pbtxt", placer="gdp",
                                    policy=directory, budget_s=0, progress=False)
    assert any(f"from the policy in {directory}" in n for n in report.notes)
    with pytest.raises(ConfigError, match="the gdp placer kept no fine-tuned policy"):
        report.save_policy("unused")  # zero-shot
    assert all(op.device for op in tiny_graph.get_operations())
    settings = ap_flags.AutoplaceSettings(placer="gdp", budget_s=0.0, policy=directory)
    assert settings.place_options().placer.config.policy_dir == directory


def test_a_saved_policy_that_does_not_fit_is_a_config_error_naming_what_differs(tmp_path):
    problem = random_problem(50)
    with policy_context():
        GdpPolicy(num_features=5).save(str(tmp_path / "narrow"))
    with pytest.raises(ConfigError, match=r"reads other features than this version makes: "
                                          rf"num_features=5 \(this version's features: "
                                          rf"{NUM_NODE_FEATURES}\)"):
        GdpPlacer(policy=tmp_path / "narrow", max_steps=0).place(problem, seed=0)
    with pytest.raises(ConfigError, match=r"is not a GDP policy .another placer's.*settings "
                                          r"GdpPolicy does not take: \['embed', 'head', "
                                          r"'num_devices', 'rounds'\]"):
        GdpPlacer(policy=pretrained_policy_dir(2), max_steps=0).place(problem, seed=0)
    with pytest.raises(ConfigError, match="policy_dir must be None or a directory, got ''"):
        GdpConfig(policy_dir="")
