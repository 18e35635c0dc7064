"""GDP's imitation phase: Post's placements as group targets, never worse than the hint; the
policy learns a per-group device preference from them (the gradient reaches the graph
embedding); pretraining keeps the imitation epoch that scored best on validation."""

import dataclasses

import numpy as np
import pytest

from tf_autoplace.errors import ConfigError
from tf_autoplace.placers.gdp import imitation as gdp_imitation
from tf_autoplace.placers.gdp import pretrain as gdp_pretrain
from tf_autoplace.placers.gdp import train as gdp_train
from tf_autoplace.placers.gdp.features import FeatureConfig, graph_features
from tf_autoplace.placers.gdp.policy import GdpPolicy, greedy
from tf_autoplace.placers.post import search as post_search
from tf_autoplace.testing.problems import random_problem

FEATURES = FeatureConfig(max_groups=40)
SHORT_POST = post_search.PostConfig(max_samples=120)


def test_group_actions_take_the_device_holding_most_of_each_groups_compute():
    graph = graph_features(random_problem(60, seed=3, num_gpus=2), FEATURES, hint=True)
    labels = graph.grouping.labels
    devices = graph.action_devices[np.zeros(len(labels), np.int64)]  # every op on action 0
    weights = np.ones(len(labels))
    first = np.flatnonzero(labels == labels[0])
    devices[first] = graph.action_devices[1]  # group of op 0: all of it on action 1
    actions = gdp_imitation.group_actions(graph, devices, weights)
    assert actions[labels[0]] == 1
    assert (np.delete(actions, labels[0]) == 0).all()
    # one heavy op outweighs the rest of its group
    if len(first) > 1:
        devices[first] = graph.action_devices[0]
        devices[first[0]] = graph.action_devices[1]
        weights[first[0]] = 10.0 * len(first)
        assert gdp_imitation.group_actions(graph, devices, weights)[labels[0]] == 1


def test_a_target_is_never_slower_than_the_hint_and_counts_its_moves():
    problem = random_problem(150, seed=4, num_gpus=4)
    graph = graph_features(problem, FEATURES, hint=True)
    target = gdp_imitation.search_target(problem, graph, SHORT_POST, seed=0)
    assert target.score <= target.hint_score
    # on this problem Post finds a faster placement, and the target is it, not the hint
    assert target.score < target.hint_score and target.moved > 0
    hint = gdp_imitation.hint_actions(graph)
    assert target.moved == int(((target.actions != hint) & graph.movable).sum())
    assert target.samples == 120
    again = gdp_imitation.search_target(problem, graph, SHORT_POST, seed=0)
    np.testing.assert_array_equal(target.actions, again.actions)


@pytest.mark.slow
def test_cloning_learns_which_groups_to_move_not_just_to_copy_the_hint():
    """Targets that move every group in the later half of the graph to another device than
    the hint's: a policy whose head lets no gradient reach the embedding (every device of a
    group sharing one ReLU pattern) can only learn a constant move rate and gets the moved
    groups wrong."""
    problems = [random_problem(160, seed=s, num_gpus=2) for s in range(2)]
    graphs = [graph_features(p, FEATURES, hint=True) for p in problems]
    position = 13  # compute_position in gdp_features._SCALAR_FEATURES
    targets = []
    for g in graphs:
        hint = gdp_imitation.hint_actions(g)
        late = (g.node[:, position] > np.median(g.node[:, position])) & g.movable
        targets.append(gdp_imitation.Target(np.where(late, 1 - hint, hint).astype(np.int32),
                                            0.0, 0.0, int(late.sum()), 0))
    policy = GdpPolicy(hidden=16, segment=32, hint=True, seed=0)
    gdp_imitation.clone(policy, graphs, targets,
                        gdp_imitation.CloneConfig(epochs=120, learning_rate=3e-3))
    for g, t in zip(graphs, targets):
        hint = gdp_imitation.hint_actions(g)
        moved = (t.actions != hint) & g.movable
        kept = (t.actions == hint) & g.movable
        placed = greedy(policy.graph_logits(g))
        assert (placed[moved] == t.actions[moved]).mean() >= 0.8
        assert (placed[kept] == t.actions[kept]).mean() >= 0.8


def test_clone_config_checks_its_values():
    with pytest.raises(ConfigError, match="move_weight"):
        gdp_imitation.CloneConfig(move_weight=0.5)
    with pytest.raises(ConfigError, match="epochs"):
        gdp_imitation.CloneConfig(epochs=-1)


@pytest.mark.slow  # pretraining and PPO updates: seconds
def test_pretraining_keeps_the_imitation_epoch_that_scored_best_then_runs_ppo_from_it():
    problems = [random_problem(120, seed=s, num_gpus=2) for s in range(2)]
    validation = gdp_pretrain.Scored.build(["a", "b"], problems, FEATURES, 2.0, hint=True)
    policy = GdpPolicy(hidden=16, segment=16, hint=True)
    imitation = gdp_pretrain.Imitation(post=SHORT_POST,
                                       clone=gdp_imitation.CloneConfig(epochs=4), select_every=1)
    results = gdp_pretrain.pretrain(
        policy, ["x", "y"], problems, validation, gdp_train.PPOConfig(steps=0, samples=2),
        FEATURES, select_every=1, imitation=imitation)
    phase1 = results["imitation"]
    epochs, ratios = zip(*phase1["selection_curve"])
    assert epochs == (0, 1, 2, 3, 4)
    assert phase1["chosen_epoch"] == epochs[int(np.argmin(ratios))]
    assert phase1["target_ratio_to_hint"] <= 1.0
    # PPO's step 0 is the policy as imitation left it
    assert results["selection_curve"][0] == (0, pytest.approx(min(ratios)))
    assert dataclasses.asdict(imitation.clone)["epochs"] == len(phase1["losses"])


def test_calibration_keeps_the_hint_weight_offset_that_scored_best_on_validation():
    problems = [random_problem(120, seed=s, num_gpus=2) for s in range(2)]
    validation = gdp_pretrain.Scored.build(["a", "b"], problems, FEATURES, 2.0, hint=True)
    policy = GdpPolicy(hidden=16, segment=16, hint=True)
    rng = np.random.default_rng(0)  # a policy whose own opinion competes with the hint
    policy.set_weights([rng.normal(0.0, 0.5, w.shape).astype(np.float32)
                        for w in policy.get_weights()])
    start = float(policy.keep.numpy())
    result = gdp_pretrain.calibrate_keep(policy, validation, [-3.0, 0.0, 4.0])
    offsets, means = zip(*result["curve"])
    assert offsets == (-3.0, 0.0, 4.0)
    assert result["offset"] == offsets[int(np.argmin(means))]
    assert float(policy.keep.numpy()) == pytest.approx(start + result["offset"])
    np.testing.assert_allclose(validation.ratios(policy), result["ratios"])
    assert len(set(np.round(means, 9))) > 1  # the offsets did change what the policy places
