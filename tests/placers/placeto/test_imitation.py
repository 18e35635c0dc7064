"""Pretraining by imitating the placer's search (tf_autoplace.placers.placeto.imitation), on small graphs."""

import dataclasses
import math

import numpy as np
import pytest

from tf_autoplace.errors import ConfigError
from tf_autoplace.placers.placeto import imitation, reinforce
from tf_autoplace.placers.placeto.env import EnvConfig, PlacementEnv
from tf_autoplace.placers.placeto.policy import KEEP_INIT, PlacetoPolicy
from tf_autoplace.placers.placeto.pretrain import mean_greedy_gain
from tf_autoplace.placers.placeto.search import PlacetoConfig

from tests.placers.placeto.test_placeto import _problem, _random_dag

ENV = EnvConfig(max_groups=12, start="single", undo_worse=True)
SEARCH = PlacetoConfig(env=ENV)


def _problems():
    rng = np.random.default_rng(21)
    return [_problem(12, _random_dag(rng, 12), speeds=(1.0, 1.5)) for _ in range(2)]


@pytest.fixture(scope="module")
def targets():
    """The search targets of ``_problems()`` (40 samples, seed 3), found in this process."""
    return imitation.search_targets(_problems(), SEARCH, samples=40, seed=3, workers=1)


@pytest.mark.slow
def test_search_targets_are_the_searchs_best(targets):
    problems = _problems()
    for a, problem in zip(targets, problems):
        env = PlacementEnv(problem, ENV)
        assert a.score == pytest.approx(env.score(a.actions))
        # Device 1 is faster: the search moves groups there and beats the start placement.
        assert a.score < a.start_score == pytest.approx(env.score(env.start(None)))
        assert a.moved == np.count_nonzero(a.actions != env.start(None)) > 0
        start = env.start(None)
        for src in range(2):
            for dst in range(2):
                expected = 0 if src == dst else np.sum((start == src) & (a.actions == dst))
                assert a.moves[src, dst] == expected
        assert 40 <= a.samples < 60  # stops at the first update past the budget
    with pytest.raises(ConfigError, match="samples"):
        imitation.search_targets(problems, SEARCH, samples=0, seed=3)


def test_worker_processes_return_results_in_task_order():
    # The pool that search_targets and clone_best_of use (spawn), on a function whose worker
    # imports nothing heavy; the searches themselves run in workers in the slow suite.
    progress = []
    powers = imitation._map_in_order(math.pow, 2.0, [4.0, 0.0, 3.0, 1.0, 2.0], workers=2,
                                     ray_address=None,
                                     progress_line=lambda done, s: progress.append(len(done)))
    assert powers == [16.0, 1.0, 8.0, 2.0, 4.0]
    assert progress == [1, 2, 3, 4, 5]


@pytest.mark.slow
@pytest.mark.slow
def test_search_targets_do_not_depend_on_the_workers(targets):
    two = imitation.search_targets(_problems(), SEARCH, samples=40, seed=3, workers=2)
    for a, b in zip(targets, two):
        np.testing.assert_array_equal(a.actions, b.actions)
        assert (a.score, a.samples, a.moves.tolist()) == (b.score, b.samples, b.moves.tolist())


@pytest.mark.slow
def test_with_several_searches_the_target_is_the_best_of_them():
    problem = _problems()[1]
    best = imitation.search_targets([problem], SEARCH, samples=20, seed=5, searches=3)[0]
    alone = [imitation._search_one(problem, SEARCH, 20,
                                   int(np.random.default_rng([5, 0, k]).integers(2**31 - 1)))
             for k in range(3)]
    assert len({t.score for t in alone}) > 1  # not vacuous: the searches differ
    assert best.score == min(t.score for t in alone)
    assert best.samples == sum(t.samples for t in alone)
    with pytest.raises(ConfigError, match="searches"):
        imitation.search_targets([problem], SEARCH, samples=20, seed=5, searches=0)


@pytest.mark.slow
@pytest.mark.slow
def test_cloning_teaches_the_greedy_episode_to_reach_the_target(targets):
    problem = _problems()[0]
    target = targets[0].actions  # graph 0's search is seeded [3, 0] in a list of one, too
    # Without undoing, the greedy episode's last placement is exactly the moves it chose.
    env = PlacementEnv(problem, dataclasses.replace(ENV, undo_worse=False))
    start = env.start(None)
    assert (target != start).any()  # not vacuous: the target moves groups

    def greedy_result(policy):
        episode = reinforce.rollout(policy, env, np.random.default_rng(0), greedy=True)
        final = start.copy()
        final[env.order] = episode.actions
        return final

    policy = PlacetoPolicy(2, env.num_features, seed=0)
    assert (greedy_result(policy) != target).any()
    curve = imitation.clone(policy, [env], [target], epochs=60, learning_rate=1e-2)
    assert [epoch for epoch, *_ in curve] == list(range(60))
    assert curve[0][2] < 1.0 and curve[-1][1] < curve[0][1]
    assert curve[-1][2] == curve[-1][3] == 1.0  # every step's argmax is the target action
    np.testing.assert_array_equal(greedy_result(policy), target)


@pytest.mark.slow
@pytest.mark.slow
def test_the_loss_is_the_target_devices_cross_entropy_with_moving_steps_weighted(targets):
    problem = _problems()[0]
    env = PlacementEnv(problem, ENV)
    target = targets[0].actions
    moved = np.count_nonzero(target[env.order] != env.start(None)[env.order])
    kept = env.num_steps - moved
    # Untrained, a policy's only preference is the keep prior on the group's current device,
    # and in the teacher-forced episode the group being placed is still on its start device.
    p_keep = 1 / (1 + np.exp(-KEEP_INIT))
    for weight in (1.0, 5.0):
        policy = PlacetoPolicy(2, env.num_features, seed=0)
        (_, loss, hits, move_hits), = imitation.clone(policy, [env], [target], epochs=1,
                                                      move_weight=weight)
        expected = -(kept * np.log(p_keep) + weight * moved * np.log(1 - p_keep)) / (
            kept + weight * moved)
        assert loss == pytest.approx(expected, rel=1e-5)
        assert hits == pytest.approx(kept / env.num_steps) and move_hits == 0.0


def test_cloning_checks_its_arguments():
    env = PlacementEnv(_problems()[0], ENV)
    policy = PlacetoPolicy(2, env.num_features, seed=0)
    with pytest.raises(ConfigError, match="one target per environment"):
        imitation.clone(policy, [env], [], epochs=1)
    with pytest.raises(ConfigError, match="move_weight"):
        imitation.clone(policy, [env], [env.start(None)], epochs=1, move_weight=0.0)


def _clones(workers: int):
    """``clone_best_of`` on ``_problems()`` from seeds 4, 0, 7, with arbitrary targets."""
    problems = _problems()
    envs = [PlacementEnv(problem, ENV) for problem in problems]
    rng = np.random.default_rng(8)  # any placements will do as targets
    targets = [rng.integers(0, 2, env.view.num_groups) for env in envs]
    config = PlacetoPolicy(2, envs[0].num_features).config
    policy, clones = imitation.clone_best_of(problems, ENV, targets, config, [4, 0, 7],
                                             epochs=4, learning_rate=1e-2, workers=workers)
    return problems, envs, targets, config, policy, clones


@pytest.mark.slow
def test_of_several_clones_the_one_that_gains_most_on_the_training_graphs_is_kept():
    problems, envs, targets, config, policy, clones = _clones(workers=1)
    assert [made.seed for made in clones] == [4, 0, 7]
    assert len({made.train_gain for made in clones}) == 3  # not vacuous: the clones differ
    best = max(clones, key=lambda made: made.train_gain)
    assert policy.config == dict(config, seed=best.seed)
    # The kept policy is what cloning from its seed alone gives, and its record says so.
    alone = PlacetoPolicy(**dict(config, seed=best.seed))
    assert imitation.clone(alone, envs, targets, epochs=4, learning_rate=1e-2) == best.curve
    for a, b, c in zip(alone.get_weights(), best.weights, policy.get_weights()):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert best.train_gain == mean_greedy_gain(alone, envs)
    with pytest.raises(ConfigError, match="distinct seeds"):
        imitation.clone_best_of(problems, ENV, targets, config, [1, 1], epochs=1)
    with pytest.raises(ConfigError, match="one target per problem"):
        imitation.clone_best_of(problems, ENV, targets[:1], config, [1], epochs=1)


@pytest.mark.slow
def test_clones_in_worker_processes_are_the_clones_made_here():
    # Worker processes (spawn) are covered by the search targets' test; this checks that a
    # clone's weights, curve and gain survive the trip through them unchanged.
    *_, here = _clones(workers=1)
    *_, there = _clones(workers=2)
    assert [(m.seed, m.train_gain, m.curve) for m in there] == \
        [(m.seed, m.train_gain, m.curve) for m in here]
    for a, b in zip(here, there):
        for x, y in zip(a.weights, b.weights):
            np.testing.assert_array_equal(x, y)
