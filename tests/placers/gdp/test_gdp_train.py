"""GDP's training: PPO's clipped loss and advantages, the update loop (batch and single graph,
following the best placement, seeds), batch pretraining's checkpoint selection, and the corpus
builder's cache."""

import numpy as np
import pytest
import tensorflow as tf

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.errors import ConfigError
from tf_autoplace.learning import ppo
from tf_autoplace.learning.rollouts import Evaluator
from tf_autoplace.placers.gdp import pretrain as gdp_pretrain
from tf_autoplace.placers.gdp import train as gdp_train
from tf_autoplace.placers.gdp.features import FeatureConfig, graph_features
from tf_autoplace.placers.gdp.policy import GdpPolicy
from tf_autoplace.testing.problems import random_problem
from tf_autoplace.zoo.corpora import gdp as gdp_corpus
from tf_autoplace.zoo.corpora.families import FamilyConfig

FEATURES = FeatureConfig(max_groups=40)


def test_advantages_use_the_previous_trials_as_baseline_and_a_floor():
    rewards = np.array([-1.0, -2.0, -3.0])
    first = ppo.advantages(rewards, None, floor=1e-3)
    np.testing.assert_allclose(first, (rewards + 2.0) / rewards.std())
    history = np.array([-1.0, -1.0])
    later = ppo.advantages(rewards, history, floor=1e-3)
    np.testing.assert_allclose(later, (rewards + 1.0) / np.concatenate([history, rewards]).std())
    same = ppo.advantages(np.full(4, -1.0), None, floor=0.5)
    np.testing.assert_allclose(same, 0.0)
    # Every placement 0 s (a graph whose ops take no time): the floor is 0 too, no NaN.
    with np.errstate(all="raise"):
        np.testing.assert_array_equal(ppo.advantages(np.zeros(4), np.zeros(2), floor=0.0), 0.0)


def test_clipped_loss_is_reinforce_at_ratio_one_and_stops_past_the_clip():
    logits = tf.Variable(np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32))
    actions = np.array([[0, 1, 2, 0, 1], [2, 2, 1, 0, 0]], np.int32)
    log_p = tf.nn.log_softmax(logits).numpy()
    old = np.take_along_axis(log_p[None], actions[..., None], -1)[..., 0]
    adv = np.array([1.0, -0.5])
    mask = np.array([1, 1, 1, 0, 1], np.float32)
    with tf.GradientTape() as tape:
        loss = ppo.clipped_loss(logits, actions, old, adv, mask, clip=0.2, entropy_weight=0.0)
    grad = tape.gradient(loss, logits).numpy()
    with tf.GradientTape() as tape:
        lp = tf.nn.log_softmax(logits)
        taken = tf.reduce_sum(tf.one_hot(actions, 3) * lp[None], -1)
        reinforce = -tf.reduce_sum(adv[:, None] * taken * mask) / (2 * mask.sum())
    np.testing.assert_allclose(grad, tape.gradient(reinforce, logits).numpy(), atol=1e-6)
    assert float(loss) == pytest.approx(-(adv.mean()), abs=1e-6)
    # Positive advantages whose ratio is already past 1 + clip give no gradient.
    with tf.GradientTape() as tape:
        clipped = ppo.clipped_loss(logits, actions[:1], old[:1] - 1.0, adv[:1], mask, clip=0.2,
                                   entropy_weight=0.0)
    np.testing.assert_allclose(tape.gradient(clipped, logits).numpy(), 0.0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(samples=0), "samples must be an int >= 1, got 0"),
    (dict(clip=1.5), "clip must be a finite number > 0 and < 1, got 1.5"),
    (dict(steps=-1), "steps must be an int >= 0, got -1"),
    (dict(final_learning_rate=0), "final_learning_rate must be None or a finite number > 0, got 0"),
])
def test_ppo_config_checks_its_values(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        gdp_train.PPOConfig(**kwargs)


def _setup(num, hint):
    problems = [random_problem(120, seed=s, num_gpus=2 + 2 * (s % 2)) for s in range(num)]
    graphs = [graph_features(p, FEATURES, hint=hint) for p in problems]
    return graphs, [Evaluator(p) for p in problems]


@pytest.mark.slow
def test_a_search_that_follows_its_best_placement_keeps_it_as_the_hint():
    graphs, evaluators = _setup(1, hint=True)
    policy = GdpPolicy(hidden=16, segment=16, hint=True)
    start = evaluators[0].evaluate(graphs[0].op_placement(
        np.argmax(graphs[0].hint, axis=1)[None])).scores[0]
    seen = []
    config = gdp_train.PPOConfig(steps=4, samples=8, epochs=1, seed=3)
    state = gdp_train.train(policy, graphs, evaluators, config,
                            on_step=lambda s: seen.append(s.best_scores[0]))
    assert state.step == 4 and state.samples == 1 + 4 * 8  # the hint, then the samples
    assert state.best_scores[0] <= start
    assert seen == sorted(seen, reverse=True)
    assert len(state.curve) == 4
    # Training on from this state starts at its best placement, not at the heuristic's.
    more = gdp_train.train(policy, graphs, evaluators,
                           gdp_train.PPOConfig(steps=5, samples=8, epochs=1, seed=3),
                           state=state)
    assert more.step == 5 and more.samples == 1 + 5 * 8


@pytest.mark.slow
def test_batch_training_is_seeded_and_takes_distinct_graphs_per_step():
    results = []
    for _ in range(2):
        graphs, evaluators = _setup(3, hint=False)
        policy = GdpPolicy(hidden=16, segment=16, seed=1)
        config = gdp_train.PPOConfig(steps=3, samples=4, graphs_per_step=2, epochs=2, seed=5)
        state = gdp_train.train(policy, graphs, evaluators, config)
        steps = [[g for _, g, _ in state.curve[2 * i:2 * i + 2]] for i in range(3)]
        assert all(len(set(s)) == 2 for s in steps)
        assert state.samples == 3 * 2 * 4
        results.append((state.best_scores, [w.copy() for w in policy.get_weights()]))
    assert results[0][0] == results[1][0]
    for a, b in zip(results[0][1], results[1][1]):
        np.testing.assert_array_equal(a, b)


def test_pretraining_keeps_the_checkpoint_that_scored_best_on_validation():
    problems = [random_problem(120, seed=s, num_gpus=2) for s in range(2)]
    validation = gdp_pretrain.Scored.build(["a", "b"], problems, FEATURES, 2.0, hint=True)
    policy = GdpPolicy(hidden=16, segment=16, hint=True)
    config = gdp_train.PPOConfig(steps=3, samples=4, epochs=1)
    results = gdp_pretrain.pretrain(policy, ["x", "y"], problems, validation, config, FEATURES,
                                    select_every=1)
    steps, ratios = zip(*results["selection_curve"])
    assert steps == (0, 1, 2, 3)
    assert results["chosen_step"] == steps[int(np.argmin(ratios))]
    np.testing.assert_allclose(validation.ratios(policy), list(results["validation"].values()))
    assert set(results["train_best_ratio"]) == {"x", "y"}


@pytest.mark.slow
def test_corpus_builds_each_graph_once_per_cluster_and_reads_the_cache(tmp_path):
    config = gdp_corpus.CorpusConfig(
        families=("ptb",),
        family=FamilyConfig(num_graphs=3, train_fraction=2 / 3,
                            ptb=dict(batch=4, length=2, nodes=2, hidden=8, vocab=50)),
        zoo=(("rnnlm", dict(layers=1, length=2, batch=2, hidden=8, embedding_dim=8,
                            vocab=20)),))
    clusters = [(n, Cluster.from_file(f"testdata/{n}.pbtxt")) for n in ("k80x2", "k80x4")]
    first = gdp_corpus.build_corpus(config, clusters, cache_dir=tmp_path)
    assert [(e.name, e.cluster, e.split) for e in first] == [
        ("ptb_0", "k80x2", "train"), ("ptb_0", "k80x4", "train"),
        ("ptb_1", "k80x2", "train"), ("ptb_1", "k80x4", "train"),
        ("ptb_2", "k80x2", "validation"), ("ptb_2", "k80x4", "validation"),
        ("rnnlm(batch=2,embedding_dim=8,hidden=8,layers=1,length=2,vocab=20)", "k80x2", "train"),
        ("rnnlm(batch=2,embedding_dim=8,hidden=8,layers=1,length=2,vocab=20)", "k80x4", "train")]
    assert len(list(tmp_path.glob("*.npz"))) == 8
    again = gdp_corpus.build_corpus(config, clusters, cache_dir=tmp_path)
    for a, b in zip(first, again):
        assert a.problem.graph.names == b.problem.graph.names
        np.testing.assert_array_equal(a.problem.op_time, b.problem.op_time)
    with pytest.raises(ConfigError, match="unknown family"):
        gdp_corpus.CorpusConfig(families=("mnist",))
