"""Placeto: the MDP, the policy network, REINFORCE and the placer, on small graphs."""

import dataclasses
import itertools

import networkx as nx
import numpy as np
import pytest

from tf_autoplace.core.cluster import Cluster, Device
from tf_autoplace.cost import TableCostModel
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.grouping import Grouping
from tf_autoplace.learning import shared_trace
from tf_autoplace.placers import PlacementProblem, PlacetoPlacer, get_placer
from tf_autoplace.placers.placeto import pretrain, reinforce
from tf_autoplace.placers.placeto.env import EnvConfig, PlacementEnv, reachability
from tf_autoplace.placers.placeto.policy import KEEP_INIT, PlacetoPolicy, pool_masks
from tf_autoplace.placers.placeto.search import pretrained_policy_dir

GB = 10**9


def _problem(n, edges, *, speeds=(1.0, 1.0), op_ms=1.0):
    graph = from_edges(n, edges)
    cluster = Cluster.uniform([Device(f"/device:GPU:{i}", "GPU", 10 * GB, speed=s)
                               for i, s in enumerate(speeds)])
    op_time = TableCostModel({"GPU": np.full(n, op_ms * 1e-3)}).op_time(graph, cluster)
    return PlacementProblem(graph, cluster, op_time, Grouping.from_labels(graph, np.arange(n)))


def _random_dag(rng, n, fan_in=2):
    return [(int(i), j, int(rng.integers(1, 10**6))) for j in range(1, n)
            for i in rng.choice(j, size=min(j, fan_in), replace=False)]


CHAIN = [(i, i + 1, 1000) for i in range(9)]


def test_reachability_matches_networkx_with_cycles():
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 30, 60), rng.integers(0, 30, 60)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    g = nx.DiGraph(list(zip(src.tolist(), dst.tolist())))
    g.add_nodes_from(range(30))
    expected = np.zeros((30, 30), bool)
    for u in range(30):
        for v in nx.descendants(g, u):
            expected[u, v] = u != v
    np.testing.assert_array_equal(reachability(30, src, dst), expected)


@pytest.mark.parametrize("reward", ["intermediate", "terminal"])
def test_rewards_sum_to_the_relative_improvement(reward):
    env = PlacementEnv(_problem(10, CHAIN), EnvConfig(max_groups=10, reward=reward))
    scores = np.array([10.0, 9.0, 9.5, 7.0])
    rewards = env.rewards(scores)
    assert rewards.sum() == pytest.approx((10.0 - 7.0) / 10.0)
    if reward == "intermediate":
        np.testing.assert_allclose(rewards, [0.1, -0.05, 0.25])
    else:
        np.testing.assert_allclose(rewards, [0.0, 0.0, 0.3])


def test_discounted_returns():
    env = PlacementEnv(_problem(10, CHAIN), EnvConfig(max_groups=10))
    episode = reinforce.Episode(actions=np.zeros(3, np.int32), start=np.zeros(10, np.int32),
                                scores=np.array([10.0, 9.0, 9.5, 7.0]),
                                best_actions=np.zeros(10, np.int32), best_score=7.0)
    np.testing.assert_allclose(episode.returns(env), [0.3, 0.2, 0.25])
    np.testing.assert_allclose(episode.returns(env, 0.0), [0.1, -0.05, 0.25])
    np.testing.assert_allclose(episode.returns(env, 0.5),
                               [0.1 + 0.5 * (-0.05 + 0.5 * 0.25), -0.05 + 0.5 * 0.25, 0.25])
    with pytest.raises(ConfigError, match="discount"):
        reinforce.TrainConfig(discount=1.5)


def test_advantages_against_the_per_step_baselines():
    history = np.array([[0.00, 0.01, 0.02],
                        [0.02, 0.03, 0.02]])  # two past episodes, three steps
    returns = np.array([[0.04, 0.00, 0.02],
                        [0.00, 0.04, 0.02]])  # this update's two episodes
    # Baselines per step (history only) 0.01, 0.02, 0.02.
    np.testing.assert_allclose(reinforce.advantages(returns, history, normalize=False),
                               [[0.03, -0.02, 0.0], [-0.01, 0.02, 0.0]], atol=1e-12)
    # Spreads over history and batch: std(0, .02, .04, 0) and std(.01, .03, 0, .04), then 0,
    # which the floor replaces.
    scale = [np.std([0, 0.02, 0.04, 0]), np.std([0.01, 0.03, 0, 0.04]),
             reinforce.ADVANTAGE_FLOOR]
    np.testing.assert_allclose(reinforce.advantages(returns, history, normalize=True),
                               np.array([[0.03, -0.02, 0.0], [-0.01, 0.02, 0.0]]) / scale,
                               atol=1e-9)
    # No history yet: the batch is its own baseline; one episode alone gets advantages 0.
    np.testing.assert_allclose(reinforce.advantages(returns, None, normalize=False),
                               [[0.02, -0.02, 0.0], [-0.02, 0.02, 0.0]], atol=1e-12)
    np.testing.assert_array_equal(reinforce.advantages(returns[:1], None, normalize=True), 0)


def test_context_features_are_load_and_traffic_shares():
    # 0 -> 1 -> 2 -> 3 with 100, 200, 300 bytes; one group per op; groups 0 and 1 on device 0.
    problem = _problem(4, [(0, 1, 100), (1, 2, 200), (2, 3, 300)], op_ms=1.0)
    env = PlacementEnv(problem, EnvConfig(max_groups=4, start="single"))
    assert env.num_features == 5 + 3 * 2
    actions = np.zeros(env.view.num_groups, np.int32)
    op_to_group = env.grouping.labels
    actions[op_to_group[[2, 3]]] = 1
    feats = env.features(actions, 0, np.zeros(env.view.num_groups, np.float32))
    load, traffic = feats[:, 7:9], feats[:, 9:11]
    np.testing.assert_allclose(load, np.full((4, 2), 0.5))  # equal op times, 2 ops each side
    g1, g2 = op_to_group[1], op_to_group[2]
    # op 1 exchanges 100 bytes with device 0 (op 0) and 200 with device 1 (op 2)
    np.testing.assert_allclose(traffic[g1], [100 / 300, 200 / 300], rtol=1e-6)
    np.testing.assert_allclose(traffic[g2], [200 / 500, 300 / 500], rtol=1e-6)
    plain = PlacementEnv(problem, EnvConfig(max_groups=4, context_features=False))
    assert plain.num_features == 5 + 2


def test_single_move_landscape_finds_the_move_to_the_faster_device():
    # Two independent ops on one slow device: moving either to the fast device helps, moving
    # both is best; the greedy pass keeps both moves.
    problem = _problem(2, [], speeds=(1.0, 4.0))
    env = PlacementEnv(problem, EnvConfig(max_groups=2, start="single"))
    row = pretrain.single_move_landscape(env)
    assert row["moves"] == 2 and row["helping"] == 2
    assert row["greedy"] < row["start"] and row["best_gain"] > 0
    assert row["samples"] == 1 + 2 + 2
    assert row["greedy"] == pytest.approx(env.score(np.ones(2, np.int32)))


def test_env_config_is_checked():
    with pytest.raises(ConfigError, match="passes"):
        EnvConfig(passes=3)
    with pytest.raises(ConfigError, match="reward"):
        EnvConfig(reward="sparse")


@pytest.mark.parametrize("size", [dict(embed=0), dict(hidden=-1), dict(head=2.5),
                                  dict(rounds=0), dict(rounds=17)])
def test_policy_sizes_are_checked(size):
    (name,) = size
    with pytest.raises(ConfigError, match=name):
        PlacetoPolicy(2, **size)


def test_policy_is_invariant_to_relabelling_the_groups():
    rng = np.random.default_rng(1)
    n = 20
    edges = _random_dag(rng, n)
    env = PlacementEnv(_problem(n, edges), EnvConfig(max_groups=n))
    policy = PlacetoPolicy(2, env.num_features, seed=3)
    # Non-trivial state: random placement, half placed, a non-zero head so logits differ.
    policy.head.weights_[-1][0].assign(np.random.default_rng(2).normal(size=(16, 2)))
    placement = rng.integers(0, 2, n).astype(np.int32)
    placed = (rng.random(n) < 0.5).astype(np.float32)
    view = env.view
    perm = rng.permutation(n)  # new label of old group u is perm[u]
    inverse = np.argsort(perm)
    for step in range(0, env.num_steps, 5):
        v = env.order[step]
        feats = env.features(placement, step, placed)
        a = policy.logits(feats[None], view.edge_src, view.edge_dst,
                          pool_masks(view.ancestors, np.array([v])), np.array([v], np.int32))
        ancestors = view.ancestors[np.ix_(inverse, inverse)]
        b = policy.logits(feats[inverse][None], perm[view.edge_src].astype(np.int32),
                          perm[view.edge_dst].astype(np.int32),
                          pool_masks(ancestors, np.array([perm[v]])),
                          np.array([perm[v]], np.int32))
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
        assert abs(float(a[0, 0] - a[0, 1])) > 1e-4  # the check is not vacuous


def _prob_of_device(policy, env, device):
    n = env.view.num_groups
    probs = []
    for t in range(env.num_steps):
        logits = reinforce._policy_step(policy, env, np.zeros((1, n), np.int32), t,
                                        np.zeros(n, np.float32))[0]
        e = np.exp(logits - logits.max())
        probs.append(e[device] / e.sum())
    return float(np.mean(probs))


@pytest.mark.slow
@pytest.mark.parametrize("estimator,discount", [("reinforce", 1.0), ("all_actions", 0.0)])
def test_untrained_policy_only_prefers_keeping_and_training_moves_towards_the_faster_device(
        estimator, discount):
    # Device 1 runs every op 4x faster: moving any op there shortens the step.
    problem = _problem(10, CHAIN, speeds=(1.0, 4.0))
    env_config = EnvConfig(max_groups=10, start="single")
    env = PlacementEnv(problem, env_config)
    policy = PlacetoPolicy(2, env.num_features, seed=0)
    # Untrained: no device preference beyond the keep prior on the current device (device 0).
    assert _prob_of_device(policy, env, 1) == pytest.approx(1 / (1 + np.exp(KEEP_INIT)))
    # REINFORCE: the first episode only seeds the per-step baseline; the second one updates.
    reinforce.train(policy, [problem], env_config,
                    reinforce.TrainConfig(iterations=8, learning_rate=1e-2, seed=0,
                                          discount=discount, estimator=estimator))
    assert _prob_of_device(policy, env, 1) > 1 / (1 + np.exp(KEEP_INIT)) + 0.05


def _wide_policy(seed, n, max_groups, policy_seed, head_seed):
    """An environment on a random DAG of ``n`` ops and a 2-device policy whose logits depend
    on the state but sample widely, so that the runtimes of its episodes go up and down."""
    problem = _problem(n, _random_dag(np.random.default_rng(seed), n))
    env = PlacementEnv(problem, EnvConfig(max_groups=max_groups, start="random", passes=2))
    policy = PlacetoPolicy(2, env.num_features, seed=policy_seed)
    policy.head.weights_[-1][0].assign(np.random.default_rng(head_seed).normal(size=(16, 2)))
    return env, policy


@pytest.mark.slow
def test_lockstep_episodes_are_the_episodes_run_one_at_a_time():
    env, policy = _wide_policy(12, 24, 12, policy_seed=3, head_seed=4)
    policy.keep.assign(0.0)
    together = reinforce.rollouts(policy, env, [np.random.default_rng(s) for s in range(4)])
    for seed, batched in enumerate(together):
        alone = reinforce.rollout(policy, env, np.random.default_rng(seed))
        np.testing.assert_array_equal(batched.start, alone.start)
        np.testing.assert_array_equal(batched.actions, alone.actions)
        np.testing.assert_allclose(batched.scores, alone.scores)
        np.testing.assert_array_equal(batched.best_actions, alone.best_actions)
        assert batched.best_score == min(batched.scores) == alone.best_score
        assert env.score(batched.best_actions) == pytest.approx(batched.best_score)
    assert len({e.actions.tobytes() for e in together}) > 1  # the episodes do differ
    assert any(e.best_score < e.scores[0] for e in together[1:])  # and some improve


@pytest.mark.slow
def test_episodes_traced_without_xla_are_the_same_episodes():
    # The default placer's zero-shot episode runs the forward pass without XLA
    # (jit_compile = False): the same logits to float rounding, the same greedy and sampled
    # episodes.
    env, policy = _wide_policy(13, 30, 16, policy_seed=5, head_seed=6)
    episodes = {}
    for jit in (True, False):
        policy.jit_compile = jit
        episodes[jit] = [reinforce.rollout(policy, env, np.random.default_rng(seed),
                                           greedy=seed == 0) for seed in range(3)]
    for fused, traced in zip(episodes[True], episodes[False]):
        np.testing.assert_array_equal(fused.actions, traced.actions)
        np.testing.assert_array_equal(fused.best_actions, traced.best_actions)
    feats = np.random.default_rng(7).random((3, env.view.num_groups, env.num_features),
                                            dtype=np.float32)
    masks = pool_masks(env.view.ancestors, env.order[:3])
    args = (feats, env.view.edge_src, env.view.edge_dst, masks, env.order[:3])
    np.testing.assert_allclose(policy.traced_logits(*args).numpy(), policy.logits(*args).numpy(),
                               rtol=1e-5, atol=1e-6)


def test_all_action_episodes_score_every_device_of_every_step():
    rng = np.random.default_rng(12)
    problem = _problem(24, _random_dag(rng, 24), speeds=(1.0, 2.0, 3.0))
    env = PlacementEnv(problem, EnvConfig(max_groups=12, start="random", passes=2))
    policy = PlacetoPolicy(3, env.num_features, seed=3)
    policy.keep.assign(0.0)
    for seed in range(3):
        episode = reinforce.rollout(policy, env, np.random.default_rng(seed), all_actions=True)
        plain = reinforce.rollout(policy, env, np.random.default_rng(seed))
        # Scoring the other devices draws nothing: the same actions, the same runtimes.
        np.testing.assert_array_equal(episode.actions, plain.actions)
        np.testing.assert_allclose(episode.scores, plain.scores)
        placement = episode.start.copy()
        seen = [episode.scores[0]]
        moves = 0
        for t, v in enumerate(env.order):
            moves += episode.actions[t] != placement[v]
            for d in range(3):
                moved = placement.copy()
                moved[v] = d
                assert episode.action_scores[t, d] == pytest.approx(env.score(moved))
                seen.append(episode.action_scores[t, d])
            placement[v] = episode.actions[t]
            assert episode.action_scores[t, episode.actions[t]] == episode.scores[t + 1]
        assert episode.best_score == min(seen)
        assert env.score(episode.best_actions) == pytest.approx(episode.best_score)
        # Keeping the group where it is simulates nothing: D - 1 placements per step.
        assert episode.samples == 1 + 2 * env.num_steps
        # Without the alternatives, only the moves are simulated.
        assert 0 < moves < env.num_steps and plain.samples == 1 + moves


@pytest.mark.slow
def test_all_action_gradient_is_the_expectation_of_the_reinforce_gradient():
    # One group, one step, three devices: the state does not depend on the action, so the
    # expectation over the action of REINFORCE's gradient can be enumerated.
    problem = _problem(4, [(0, 1, 10), (1, 2, 10), (2, 3, 10)], speeds=(1.0, 2.0, 3.0))
    env = PlacementEnv(problem, EnvConfig(max_groups=1, start="single"))
    assert env.num_steps == 1
    policy = PlacetoPolicy(3, env.num_features, seed=2)
    policy.head.weights_[-1][0].assign(np.random.default_rng(5).normal(size=(16, 3)))
    episode = reinforce.rollout(policy, env, np.random.default_rng(0), all_actions=True)
    rewards = env.action_rewards(episode.scores, episode.action_scores)[0]
    assert rewards[0] == 0 and 0 < rewards[1] < rewards[2]  # faster devices help more
    logits = reinforce._policy_step(policy, env, episode.start[None], 0,
                                    np.zeros(1, np.float32))[0]
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    expected = None
    for a in range(3):
        forced = dataclasses.replace(episode, actions=np.array([a], np.int32))
        grad, _ = reinforce.episode_gradient(policy, env, forced, np.array([rewards[a]]), 0.0)
        expected = [probs[a] * g for g in grad] if expected is None else [
            e + probs[a] * g for e, g in zip(expected, grad)]
    exact, _ = reinforce.episode_gradient(policy, env, episode, None, 0.0)
    for e, g in zip(expected, exact):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-7)
    assert max(np.abs(g).max() for g in exact) > 1e-4  # not vacuous


def test_all_action_estimator_needs_each_actions_own_improvement():
    # The placer's fine-tuning settings are checked when they are made, not when placing.
    with pytest.raises(ConfigError, match="discount=0"):
        PlacetoPlacer(estimator="all_actions")  # normalised advantages are the default
    with pytest.raises(ConfigError, match="discount=0"):
        reinforce.TrainConfig(estimator="all_actions", discount=1.0)
    with pytest.raises(ConfigError, match="discount=0"):
        reinforce.TrainConfig(estimator="all_actions", discount=0.0, normalize_advantages=True)
    with pytest.raises(ConfigError, match="estimator"):
        reinforce.TrainConfig(estimator="sampled")
    problem = _problem(10, CHAIN)
    with pytest.raises(ConfigError, match="intermediate"):
        reinforce.train(PlacetoPolicy(2, seed=0), [problem], EnvConfig(reward="terminal"),
                        reinforce.TrainConfig(estimator="all_actions", discount=0.0))


@pytest.mark.slow
def test_pretraining_keeps_the_weights_that_did_best_on_the_training_graphs():
    rng = np.random.default_rng(9)
    problems = [_problem(12, _random_dag(rng, 12), speeds=(1.0, 1.5)) for _ in range(3)]
    env_config = EnvConfig(max_groups=12, start="single")
    policy = PlacetoPolicy(2, PlacementEnv(problems[0], env_config).num_features, seed=1)
    # Sampled REINFORCE at this rate peaks early and then gets worse: the last weights are not
    # the best ones, so keeping the last would fail the final check.
    config = reinforce.TrainConfig(iterations=8, workers=1, learning_rate=0.05, seed=0)
    results = pretrain.pretrain(policy, problems, [], env_config, config, select_every=2,
                                select_graphs=2)
    selection = results["selection"]
    assert selection["graphs"] == [0, 2]
    assert [it for it, _ in selection["curve"]] == [0, 2, 4, 6, 8]
    gains = [gain for _, gain in selection["curve"]]
    assert selection["chosen_mean_gain"] == max(gains) > gains[0]  # training helped
    assert selection["chosen_iteration"] == selection["curve"][int(np.argmax(gains))][0]
    assert gains[-1] < max(gains)  # not vacuous: the last weights are worse
    envs = [PlacementEnv(problems[i], env_config) for i in selection["graphs"]]
    assert np.mean([pretrain.greedy_gain(policy, e) for e in envs]) == pytest.approx(max(gains))


@pytest.mark.parametrize("episodes", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_training_with_a_fixed_seed_is_deterministic(episodes):
    rng = np.random.default_rng(4)
    problem = _problem(16, _random_dag(rng, 16))
    env_config = EnvConfig(max_groups=16)
    weights, curves = [], []
    policy = PlacetoPolicy(2, PlacementEnv(problem, env_config).num_features, seed=5)
    for _ in range(2):
        policy.reinitialize(5)  # the same start both times
        state = reinforce.train(policy, [problem], env_config,
                                reinforce.TrainConfig(iterations=3, episodes=episodes, seed=11))
        weights.append(policy.get_weights())
        curves.append(state.curve)
    assert curves[0] == curves[1]
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)


def test_policy_save_and_load_round_trip(tmp_path):
    policy = PlacetoPolicy(3, 8, seed=7, rounds=2)
    policy.save(str(tmp_path))
    loaded = PlacetoPolicy.load(str(tmp_path))
    assert loaded.config == policy.config
    for a, b in zip(policy.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ConfigError, match="cannot load"):
        PlacetoPolicy.load(str(tmp_path / "missing"))


def test_placer_is_never_worse_than_the_heuristics_and_reports_itself():
    rng = np.random.default_rng(6)
    problem = _problem(24, _random_dag(rng, 24))
    # The sample budget ends the search; the time cap is there only to be far off.
    placer = PlacetoPlacer(budget_s=3600, max_samples=30, env=EnvConfig(max_groups=12))
    placement = placer.place(problem, seed=0)
    for name in ("m_etf", "single"):
        assert placement.sim.makespan <= get_placer(name).place(problem).sim.makespan + 1e-12
    assert any(note.startswith("placeto:") for note in placement.notes)
    assert placer.stats["samples"] >= 30
    with pytest.raises(ConfigError, match="budget_s"):
        PlacetoPlacer(budget_s=0)


@pytest.mark.parametrize("devices", [
    [Device("/device:CPU:0", "CPU", 10 * GB)],  # a CPU-only machine
    [Device("/device:GPU:0", "GPU", 10 * GB), Device("/device:CPU:0", "CPU", 100 * GB)],
], ids=["one CPU", "one GPU and its host"])
def test_one_action_device_is_placed_at_once_with_a_note(devices):
    # A policy chooses among the action devices; with one there is nothing to learn (and a
    # policy cannot even be built: it raised "a policy needs >= 2 devices").
    graph = from_edges(30, _random_dag(np.random.default_rng(4), 30))
    cluster = Cluster.uniform(devices)
    op_time = TableCostModel({"GPU": np.full(30, 1e-3), "CPU": np.full(30, 1e-2)}
                             ).op_time(graph, cluster)
    problem = PlacementProblem(graph, cluster, op_time, Grouping.from_labels(graph,
                                                                             np.arange(30)))
    placer = PlacetoPlacer()  # every default
    placement = placer.place(problem, seed=0)
    assert placer.stats["samples"] == 1 and placer.stats["policy"] is None
    assert any(f"one {devices[0].kind} to place on, so nothing to learn" in note
               for note in placement.notes), placement.notes
    best = get_placer("best_heuristic").place(problem).sim.makespan
    assert placement.sim.makespan <= best + 1e-12
    # A policy the user gave is not used either, and the note says so (it said nothing).
    given = pretrained_policy_dir(2)
    placer = PlacetoPlacer(policy=given)
    placer.place(problem, seed=0)
    assert any(f"nothing to learn (the policy in {given} was not used)" in note
               for note in placer.notes), placer.notes


@pytest.mark.parametrize("seed", [0, 3])
def test_few_movable_groups_are_all_simulated_and_the_best_is_exact(seed):
    # 8 ops on two GPUs of different speeds: 256 placements, within the default 512 samples.
    problem = _problem(8, _random_dag(np.random.default_rng(seed), 8), speeds=(1.0, 2.0))
    placer = PlacetoPlacer()
    placement = placer.place(problem, seed=0)
    assert placer.stats["samples"] == 256 and placer.stats["policy"] is None
    assert any("8 movable groups on 2 GPUs have 256 placements in all" in note
               for note in placement.notes), placement.notes
    every = [problem.simulator.run(np.array(p, np.int32)).makespan
             for p in itertools.product(range(2), repeat=8)]
    assert placement.sim.makespan == min(every)  # here the environment's groups are the ops
    # More placements than max_samples allows: the policy runs as before (zero-shot here).
    searched = PlacetoPlacer(max_samples=100, fine_tune=False)
    searched.place(problem, seed=0)
    assert searched.stats["policy"] is not None and searched.stats["samples"] < 256


def test_a_start_placement_at_the_lower_bound_is_not_searched():
    # 20 independent 1 ms ops on two equal GPUs (2**20 placements): the heuristic's 10 + 10 is
    # the lower bound (total work / devices), so no search can gain anything.
    problem = _problem(20, [])
    placer = PlacetoPlacer()
    placement = placer.place(problem, seed=0)
    assert placer.stats["samples"] == 1 and placer.stats["policy"] is None
    assert placement.sim.makespan == pytest.approx(10e-3)
    assert any("at the lower bound, 10.00 ms; nothing can beat it" in note
               for note in placement.notes), placement.notes


@pytest.mark.slow  # fine-tuning compiles the policy's training step: seconds
def test_autoplace_with_placeto_inside_the_users_graph_adds_no_ops_to_it():
    # By default: auto's Placeto start inside graph.as_default() (tests/test_modes.py) and
    # Placeto fine-tuning in a TF1 program's own graph (tests/modes_child.py).
    import tf_autoplace
    from tf_autoplace.testing import small_cnn

    tg = small_cnn()
    before = len(tg.graph.get_operations())
    with tg.graph.as_default():
        report = tf_autoplace.autoplace(tg.graph, cluster="testdata/cpu2_independent.pbtxt",
                                        placer=PlacetoPlacer(max_samples=12))
    assert len(tg.graph.get_operations()) == before
    assert report.placer == "placeto"
    assert all(op.device for op in tg.graph.get_operations())


def test_autoplace_refuses_a_negative_budget_for_placeto_before_placing():
    import tf_autoplace
    from tf_autoplace.testing import small_cnn

    tg = small_cnn()
    before = [op.device for op in tg.graph.get_operations()]
    with pytest.raises(ConfigError, match="budget_s"):
        tf_autoplace.autoplace(tg.graph, placer="placeto", budget_s=-1)
    assert [op.device for op in tg.graph.get_operations()] == before


@pytest.mark.slow
def test_reinitialized_policy_is_a_fresh_one_and_compiles_nothing_again():
    rng = np.random.default_rng(12)
    env = PlacementEnv(_problem(12, _random_dag(rng, 12)), EnvConfig(max_groups=12))
    policy = PlacetoPolicy(2, env.num_features, seed=1)
    policy.keep.assign(7.0)
    placement = rng.integers(0, 2, 12).astype(np.int32)
    placed = np.zeros(12, np.float32)
    reinforce._policy_step(policy, env, placement[None], 2, placed)
    traced = shared_trace.shared_function(policy, "logits").experimental_get_tracing_count()
    policy.reinitialize(9)
    fresh = PlacetoPolicy(2, env.num_features, seed=9)
    assert policy.config == fresh.config
    for a, b in zip(policy.get_weights(), fresh.get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(reinforce._policy_step(policy, env, placement[None], 2, placed),
                                  reinforce._policy_step(fresh, env, placement[None], 2, placed))
    # Neither the reinitialised policy nor a new one of the architecture traces the pass again.
    assert shared_trace.shared_function(policy, "logits") is shared_trace.shared_function(
        fresh, "logits")
    assert shared_trace.shared_function(policy, "logits").experimental_get_tracing_count() == traced


@pytest.mark.slow
def test_training_with_one_worker_uses_the_callers_policy_and_environments(monkeypatch):
    rng = np.random.default_rng(14)
    problem, other = (_problem(8, _random_dag(rng, 8)) for _ in range(2))
    env_config = EnvConfig(max_groups=8)
    policy = PlacetoPolicy(2, seed=0)
    config = reinforce.TrainConfig(iterations=1, seed=0)
    with pytest.raises(ConfigError, match="envs must be"):
        reinforce.train(policy, [problem], env_config, config,
                        envs=[PlacementEnv(other, env_config)])
    with pytest.raises(ConfigError, match="envs must be"):
        reinforce.train(policy, [problem], env_config, config,
                        envs=[PlacementEnv(problem, EnvConfig(max_groups=4))])
    env = PlacementEnv(problem, env_config)
    before = policy.get_weights()

    def built_again(*args, **kwargs):
        raise AssertionError("train built a policy or an environment of its own")

    monkeypatch.setattr(reinforce, "PlacetoPolicy", built_again)
    monkeypatch.setattr(reinforce, "PlacementEnv", built_again)
    state = reinforce.train(policy, [problem], env_config, config, envs=[env])
    assert state.iteration == 1 and state.samples > 0
    assert any(not np.array_equal(a, b) for a, b in zip(before, policy.get_weights()))


def test_shipped_policy_loads_and_places_a_small_graph_validly():
    import json
    import os

    from tf_autoplace.placers.placeto.search import pretrained_policy_dir

    path = pretrained_policy_dir(2)
    assert path is not None
    with open(os.path.join(path, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    assert {"command", "seed", "trained_on", "results", "train_config"} <= set(manifest)
    assert pretrained_policy_dir(3) is None  # only a 2-device policy ships

    rng = np.random.default_rng(8)
    problem = _problem(30, _random_dag(rng, 30))
    placer = PlacetoPlacer(fine_tune=False, env=EnvConfig(max_groups=15))
    placement = placer.place(problem, seed=0)  # place() validates kernels, colocation, memory
    assert placer.stats["policy"] == path
    assert not any("no pretrained policy" in note for note in placement.notes)


@pytest.mark.slow
def test_every_episode_starts_from_the_heuristic_placement():
    rng = np.random.default_rng(9)
    problem = _problem(20, _random_dag(rng, 20))
    env = PlacementEnv(problem, EnvConfig(max_groups=10, start="heuristic"))
    start = env.heuristic_start.copy()
    policy = PlacetoPolicy(2, env.num_features, seed=0)
    for seed in range(3):
        episode = reinforce.rollout(policy, env, np.random.default_rng(seed))
        np.testing.assert_array_equal(episode.start, start)
        assert episode.scores[0] == pytest.approx(env.score(start))
    np.testing.assert_array_equal(env.heuristic_start, start)


def test_tempering_divides_the_logits_and_keeps_the_greedy_episode():
    rng = np.random.default_rng(5)
    problem = _problem(16, _random_dag(rng, 16))
    env = PlacementEnv(problem, EnvConfig(max_groups=16))
    policy = PlacetoPolicy(2, env.num_features, seed=2)
    policy.head.weights_[-1][0].assign(np.random.default_rng(3).normal(size=(16, 2)))
    policy.head.weights_[-1][1].assign([0.3, -0.2])
    placement = rng.integers(0, 2, 16).astype(np.int32)
    before = reinforce._policy_step(policy, env, placement[None], 3, np.zeros(16, np.float32))
    greedy = reinforce.rollout(policy, env, np.random.default_rng(0), greedy=True)
    policy.temper(4.0)
    after = reinforce._policy_step(policy, env, placement[None], 3, np.zeros(16, np.float32))
    np.testing.assert_allclose(after, before / 4.0, rtol=1e-5, atol=1e-6)
    assert abs(before[0, 0] - before[0, 1]) > 0.1  # not vacuous
    tempered = reinforce.rollout(policy, env, np.random.default_rng(0), greedy=True)
    np.testing.assert_array_equal(tempered.actions, greedy.actions)
    with pytest.raises(ConfigError, match="temperature"):
        policy.temper(0.0)
    with pytest.raises(ConfigError, match="temperature"):
        PlacetoPlacer(temperature=-1.0)


@pytest.mark.slow
@pytest.mark.parametrize("episode_start", ["env", "best"])
def test_episodes_start_from_the_incumbent_when_asked(episode_start):
    # A policy that never moves a group, with every action scored: every device of every group
    # is scored from the episode's start placement, so the best placement after one iteration
    # tells which placement the episode started from.
    rng = np.random.default_rng(10)
    problem = _problem(14, _random_dag(rng, 14), speeds=(1.0, 1.5))
    env_config = EnvConfig(max_groups=14, start="single")
    env = PlacementEnv(problem, env_config)
    incumbent = rng.integers(0, 2, env.view.num_groups).astype(np.int32)
    state = reinforce.TrainState(best_scores={0: env.score(incumbent)},
                                 best_placements={0: incumbent.copy()})
    config = reinforce.TrainConfig(iterations=1, discount=0.0, estimator="all_actions",
                                   episode_start=episode_start)
    policy = PlacetoPolicy(2, env.num_features, seed=0)
    policy.keep.assign(50.0)
    reinforce.train(policy, [problem], env_config, config, state=state)
    from_incumbent = reinforce.rollout(policy, env, np.random.default_rng(0), all_actions=True,
                                       start=incumbent)
    from_env = reinforce.rollout(policy, env, np.random.default_rng(0), all_actions=True)
    assert not from_incumbent.moves.any() and not from_env.moves.any()  # the policy stays put
    from_incumbent = from_incumbent.best_score
    from_env = min(env.score(incumbent), from_env.best_score)
    assert from_incumbent != pytest.approx(from_env)  # the two starts can be told apart
    expected = from_incumbent if episode_start == "best" else from_env
    assert state.best_scores[0] == pytest.approx(expected)
    with pytest.raises(ConfigError, match="episode_start"):
        reinforce.TrainConfig(episode_start="incumbent")


@pytest.mark.slow
def test_search_curve_starts_with_the_zero_shot_episode_and_fine_tunes_from_it(monkeypatch):
    from tf_autoplace.placers.placeto.search import PlacetoConfig, search

    rng = np.random.default_rng(11)
    problem = _problem(20, _random_dag(rng, 20), speeds=(1.0, 2.0))
    config = PlacetoConfig(max_samples=60, env=EnvConfig(max_groups=10), temperature=2.5)
    env = PlacementEnv(problem, config.env)
    policy = PlacetoPolicy(2, env.num_features, seed=0)
    tempered = []
    real_temper = PlacetoPolicy.temper
    monkeypatch.setattr(PlacetoPolicy, "temper",
                        lambda self, t: (tempered.append(t), real_temper(self, t)))
    found = search(policy, env, config, 0, pretrained=True)
    assert tempered == [2.5]  # a pretrained policy is tempered once, before fine-tuning
    zero = found.zero_shot
    assert found.curve[0] == (zero.samples, zero.best_score)
    samples = [s for s, _ in found.curve]
    bests = [b for _, b in found.curve]
    assert samples == sorted(samples) and found.samples >= zero.samples + 60
    assert bests == sorted(bests, reverse=True)  # best so far never gets worse
    assert found.best_score == bests[-1] == pytest.approx(env.score(found.best_actions))
    assert found.iterations > 0
    policy.reinitialize(0)  # a fresh policy's weights, compiled already
    scratch = search(policy, env, config, 0, pretrained=False, zero_shot=False)
    assert scratch.zero_shot is None and tempered == [2.5]  # a fresh policy is left alone
    assert scratch.samples >= 60 and scratch.iterations > 0


@pytest.mark.slow
def test_a_stalled_search_hands_the_rest_of_the_budget_to_a_fresh_search():
    from tf_autoplace.placers.placeto.search import PlacetoConfig, restart_seed, search

    rng = np.random.default_rng(21)
    problem = _problem(20, _random_dag(rng, 20), speeds=(1.0, 2.0))
    env_config = EnvConfig(max_groups=10, start="single", undo_worse=True)
    env = PlacementEnv(problem, env_config)
    start_score = env.score(env.start(np.random.default_rng(0)))

    policy = PlacetoPolicy(2, env.num_features, seed=0)  # compiled once, for every search

    def stuck_policy():  # never moves a group, however it is fine-tuned: it cannot improve
        policy.reinitialize(0)  # a fresh policy's weights (see the test of reinitialize)
        policy.keep.assign(50.0)
        return policy

    def run(restart_after, max_samples, pretrained=True):
        config = PlacetoConfig(max_samples=max_samples, env=env_config,
                               restart_after=restart_after)
        return search(stuck_policy(), env, config, 0, pretrained=pretrained,
                      zero_shot=pretrained)

    never = run(None, 8)
    assert never.restarts == [] and never.best_score == start_score
    found = run(3, 15)
    # Each episode of the stuck policy costs one placement (its start): 3 without a gain.
    assert found.restarts[0] == found.zero_shot.samples + 3
    assert found.best_score < start_score
    assert found.best_score == pytest.approx(env.score(found.best_actions))
    # A fresh search restarts alike (its first placement is its first gain).
    assert run(3, 6, pretrained=False).restarts[0] == 1 + 3
    # The rest is exactly a search from scratch with the budget left, seeded restart_seed,
    # from the environment's start placement, until it stalls in turn (if it does).
    k = restart_seed(0, 1)
    assert k not in (0, 1, restart_seed(1, 1))
    policy.reinitialize(k)
    scratch = search(policy, env,
                     PlacetoConfig(max_samples=12, env=env_config, restart_after=3), k,
                     pretrained=False, zero_shot=False)
    first = found.restarts[0]
    second = found.restarts[1] if len(found.restarts) > 1 else np.inf
    after = [(n - first, best) for n, best in found.curve if first < n <= second]
    assert after == [(n, best) for n, best in scratch.curve if n <= second - first]
    assert found.samples >= 15 + found.zero_shot.samples
    bests = [b for _, b in found.curve]
    assert bests == sorted(bests, reverse=True) and bests[-1] == found.best_score
    with pytest.raises(ConfigError, match="restart_after"):
        PlacetoConfig(restart_after=0)


def test_harmful_moves_are_undone_and_keep_their_negative_reward():
    rng = np.random.default_rng(13)
    problem = _problem(24, _random_dag(rng, 24), speeds=(1.0, 1.3))
    env = PlacementEnv(problem, EnvConfig(max_groups=24, start="random", undo_worse=True))
    policy = PlacetoPolicy(2, env.num_features, seed=3)
    policy.keep.assign(0.0)  # moves half the groups: many of them hurt
    for seed in range(3):
        episode = reinforce.rollout(policy, env, np.random.default_rng(seed))
        assert np.all(np.diff(episode.scores) <= 0)  # every state is at least as good
        assert episode.undone.any() and not episode.undone.all()
        np.testing.assert_array_equal(episode.undone, episode.move_scores > episode.scores[:-1])
        placement = episode.start.copy()
        feats, _, _ = reinforce.episode_features(env, episode)
        for t, v in enumerate(env.order):
            # The gradient re-evaluates the states the episode was in, undone moves left out.
            np.testing.assert_array_equal(feats[t][:, 3:5], np.eye(2)[placement])
            moved = placement.copy()
            moved[v] = episode.actions[t]
            assert episode.move_scores[t] == pytest.approx(env.score(moved))
            if not episode.undone[t]:
                placement = moved
            assert env.score(placement) == pytest.approx(episode.scores[t + 1])
        rewards = env.rewards(episode.scores, episode.move_scores)
        assert np.all(rewards[episode.undone] < 0)
        np.testing.assert_allclose(episode.returns(env, 0.0), rewards)
        assert episode.best_score == episode.scores[-1]
    with pytest.raises(ConfigError, match="temperature"):
        PlacetoPlacer(temperature=0)


@pytest.mark.slow  # the same property through the public door: tests/test_api.py
def test_placer_with_the_same_seed_gives_the_same_placement():
    rng = np.random.default_rng(14)
    problem = _problem(40, _random_dag(rng, 40), speeds=(1.0, 1.3))
    runs = []
    for seed in (3, 3):
        placer = PlacetoPlacer(max_samples=80, env=EnvConfig(max_groups=20, undo_worse=True),
                               heuristics=())
        runs.append((placer.place(problem, seed=seed).devices.tolist(), placer.stats["curve"]))
    assert runs[0] == runs[1]
    # Not vacuous: fine-tuning sampled several episodes, of different lengths.
    steps = np.diff([s for s, _ in runs[0][1]])
    assert len(steps) > 5 and len(set(steps.tolist())) > 1


def test_curves_are_read_for_the_transfer_speed_up_and_at_equal_budgets():
    # (placements sampled so far, best R so far), as search() draws it.
    curve = [(100, 0.9), (150, 0.8), (220, 0.8), (300, 0.7)]
    assert pretrain.samples_to_reach(curve, 0.8) == 150
    assert pretrain.samples_to_reach(curve, 0.7) == 300
    assert pretrain.samples_to_reach(curve, 0.69) is None
    assert pretrain.best_within(curve, 99) == float("inf")  # nothing sampled by then
    assert pretrain.best_within(curve, 100) == 0.9
    assert pretrain.best_within(curve, 299) == 0.8
    assert pretrain.best_within(curve, 10**6) == 0.7


def test_transfer_is_counted_exactly_as_the_paper_does_and_near_on_both_sides():
    # From scratch: within 1% of its final 1.0 at 400 placements, exactly there at 1200.
    scratch = [(100, 1.2), (400, 1.008), (1200, 1.0)]
    tuned = [(50, 1.009), (600, 1.0)]  # within 1% at once, exactly there at 600
    counts = pretrain.transfer_counts(scratch, tuned, tolerance=0.01)
    assert (counts.scratch_exact, counts.scratch_near) == (1200, 400)
    assert (counts.tuned_exact, counts.tuned_near) == (600, 50)
    assert counts.speedups() == {"exact": 2.0, "paper": 24.0, "near": 8.0}
    # A tighter tolerance than the tuned run's gap: it is near only where it is exact.
    tight = pretrain.transfer_counts(scratch, tuned, tolerance=0.005).speedups()
    assert tight == {"exact": 2.0, "paper": 2.0, "near": 2.0}
    # Never reached counts as no speed-up, not as a missing value.
    stuck = pretrain.transfer_counts(scratch, [(50, 1.05)], tolerance=0.01)
    assert stuck.tuned_exact is None and stuck.tuned_near is None
    assert stuck.speedups() == {"exact": 0.0, "paper": 0.0, "near": 0.0}
