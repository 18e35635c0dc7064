"""Keeping a fine-tuned policy: the placer keeps the weights its search ended with, saves them
like the shipped policies, and a later placer starts from them with identical outputs."""

import json
import os

import numpy as np
import pytest

from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.fingerprint import fingerprint
from tf_autoplace.learning.eager import policy_context
from tf_autoplace.placers import (
    MemoryAwareETFPlacer,
    PlacetoPlacer,
    PostPlacer,
    get_placer,
    policy_placers,
)
from tf_autoplace.placers.placeto import reinforce
from tf_autoplace.placers.placeto.env import PlacementEnv
from tf_autoplace.placers.placeto.policy import PlacetoPolicy, pool_masks
from tf_autoplace.placers.placeto.search import pretrained_policy_dir
from tf_autoplace.testing import problems


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """PlacetoPlacer fine-tuned on a random problem within 30 placements, its policy saved."""
    problem = problems.random_problem(40, 2, max_groups=20)
    placer = PlacetoPlacer(max_samples=30, restart_after=None, heuristics=("m_etf",))
    placer.place(problem, seed=0)
    directory = str(tmp_path_factory.mktemp("policy") / "tuned")
    placer.save_policy(directory)
    return problem, placer, directory


def _logits(policy, env):
    """[T, D] the policy's logits at every step of an episode that keeps the start placement."""
    actions, placed = env.heuristic_start, np.zeros(env.view.num_groups, np.float32)
    features = np.stack([env.features(actions, t, placed) for t in range(env.num_steps)])
    current = np.asarray(env.order[:env.num_steps], np.int32)
    return policy.logits(features, env.view.edge_src, env.view.edge_dst,
                         pool_masks(env.view.ancestors, current), current).numpy()


@pytest.mark.slow
def test_a_saved_fine_tuned_policy_reloads_with_identical_outputs(tuned):
    problem, placer, directory = tuned
    assert sorted(os.listdir(directory)) == ["manifest.json", "policy.json", "weights.npz"]
    env = PlacementEnv(problem, placer.config.env)
    with policy_context():
        loaded = PlacetoPolicy.load(directory)
        kept = placer.trained_policy.build()
        shipped = PlacetoPolicy.load(pretrained_policy_dir(2))
        for a, b in zip(loaded.get_weights(), placer.trained_policy.weights):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(_logits(loaded, env), _logits(kept, env))
        # Fine-tuning changed the shipped policy: this is not the shipped one again.
        assert not np.allclose(_logits(loaded, env), _logits(shipped, env))


@pytest.mark.slow
def test_the_manifest_says_what_it_was_tuned_on(tuned):
    problem, placer, directory = tuned
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["fine_tuned_from"] == pretrained_policy_dir(2)
    assert manifest["graph"]["fingerprint"] == fingerprint(problem.graph)
    assert manifest["graph"]["ops"] == 40 and manifest["action_devices"] == 2
    assert manifest["results"]["samples"] == placer.stats["samples"]
    assert manifest["results"]["learned_ms"] == pytest.approx(placer.stats["learned_ms"])
    assert manifest["policy_config"]["num_devices"] == 2
    assert "PlacetoConfig(" in manifest["placer_config"]


@pytest.mark.slow
def test_a_later_placer_starts_from_the_saved_policy(tuned):
    problem, placer, directory = tuned
    again = PlacetoPlacer(fine_tune=False, heuristics=("m_etf",), policy=directory)
    again.place(problem, seed=0)
    assert again.stats["policy"] == directory
    with policy_context():
        env = PlacementEnv(problem, placer.config.env)
        greedy = reinforce.rollout(PlacetoPolicy.load(directory), env,
                                   np.random.default_rng(0), greedy=True)
    assert again.stats["zero_shot_ms"] == pytest.approx(greedy.best_score * 1e3)
    assert get_placer("placeto", policy=directory).config.policy_dir == directory
    # The cache keys on the policy's contents, not only its path.
    before = again.settings()
    with open(os.path.join(directory, "weights.npz"), "ab") as f:
        f.write(b"\0")
    assert again.settings() != before


@pytest.mark.slow
def test_saving_replaces_a_policy_and_refuses_anything_else(tuned, tmp_path):
    _, placer, _ = tuned
    target = tmp_path / "p"
    placer.save_policy(str(target))
    placer.save_policy(str(target))  # a saved policy is replaced
    assert sorted(os.listdir(target)) == ["manifest.json", "policy.json", "weights.npz"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="is not a saved policy"):
        placer.save_policy(str(tmp_path / "other"))
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp")]


def test_placers_without_a_policy_say_so():
    with pytest.raises(ConfigError, match="has no fine-tuned policy"):
        MemoryAwareETFPlacer().save_policy("unused")
    with pytest.raises(ConfigError, match="m_etf placer starts from no policy"):
        get_placer("m_etf", policy="somewhere")
    with pytest.raises(ConfigError, match="policy must be"):
        PlacetoPlacer(policy="")
    # Post's tables belong to one graph's units: it says why it takes no policy, at every door.
    with pytest.raises(ConfigError, match=r"post placer starts from no policy \(its policy is "
                                          r"one softmax table per placement unit"):
        get_placer("post", policy="somewhere")
    with pytest.raises(ConfigError, match="post placer starts from no saved policy: its policy"):
        PostPlacer(policy="somewhere")
    assert policy_placers() == ["gdp", "hdp", "placeto"]
