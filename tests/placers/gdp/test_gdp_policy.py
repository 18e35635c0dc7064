"""GDP's features and policy network: invariance to op labels and order, one policy for every
device count, checkpoint round trips, and Transformer-XL segment recurrence against a plain
numpy implementation of the network."""

import dataclasses

import numpy as np
import pytest

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.cost import TableCostModel
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.grouping import Grouping
from tf_autoplace.heuristics import BestHeuristicPlacer
from tf_autoplace.placers.gdp import features as gdp_features
from tf_autoplace.placers.gdp.features import FeatureConfig, graph_features
from tf_autoplace.placers.gdp.policy import GdpPolicy, greedy, log_softmax, sample
from tf_autoplace.testing.problems import cluster, random_dag, random_problem

N = 60


def _labelled_problem(perm=None, num_gpus=2):
    """A 60-op random DAG with varied costs, bytes and op types; with ``perm``, the same graph
    with op i renamed ``perm[i]`` and stored at index ``perm[i]``."""
    base = random_dag(N, seed=3)
    rng = np.random.default_rng(7)
    times = rng.lognormal(np.log(1e-3), 1.0, N)
    types = [("MatMul", "Add", "Relu", "Conv2D", "Identity")[i % 5] for i in range(N)]
    persistent = rng.integers(0, 10**7, N) * (rng.random(N) < 0.2)
    out_bytes = base.tensor_bytes
    edges = [(int(s), int(d), int(out_bytes[s])) for s, d in zip(base.edge_src, base.edge_dst)]
    perm = np.arange(N) if perm is None else np.asarray(perm)
    inv = np.argsort(perm)
    graph = from_edges(
        N, [(int(perm[s]), int(perm[d]), b) for s, d, b in edges],
        op_types=[types[i] for i in inv], names=[f"op{i}" for i in inv],
        persistent_bytes=persistent[inv])
    clu = cluster(num_gpus)
    op_time = TableCostModel({"GPU": times[inv], "CPU": 10 * times[inv]}).op_time(graph, clu)
    return PlacementProblem(graph=graph, cluster=clu, op_time=op_time,
                            grouping=Grouping.from_labels(graph, graph.colocation))


def _randomize(policy, seed=0, scale=0.3):
    """Every weight drawn at random (a fresh policy's output layer and superposition layers are
    zero, which would make several checks trivially true)."""
    rng = np.random.default_rng(seed)
    policy.set_weights([rng.normal(0.0, scale, w.shape).astype(np.float32)
                        for w in policy.get_weights()])
    return policy


def test_relabelling_and_reordering_ops_permutes_the_distribution():
    perm = np.random.default_rng(11).permutation(N)
    a, b = _labelled_problem(), _labelled_problem(perm)
    fa, fb = graph_features(a), graph_features(b)  # max_groups 512 > 60 ops: one op per group
    assert fa.num_groups == fb.num_groups == N
    policy = _randomize(GdpPolicy(segment=16), scale=0.5)  # 4 segments: recurrence is used
    la, lb = policy.graph_logits(fa), policy.graph_logits(fb)
    pa, pb = np.exp(log_softmax(la)), np.exp(log_softmax(lb))
    # Group ids are numbered by lowest op index, so map op -> group on both sides.
    ga, gb = fa.grouping.labels, fb.grouping.labels
    np.testing.assert_allclose(pb[gb[perm]], pa[ga], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(fb.node[gb[perm]], fa.node[ga], rtol=1e-5, atol=1e-6)
    assert (la[:, 0] - la[:, 1]).std() > 0.1  # the groups' distributions do differ


def test_with_a_hint_the_network_permutes_with_the_ops_too():
    perm = np.random.default_rng(12).permutation(N)
    fa, fb = graph_features(_labelled_problem()), graph_features(_labelled_problem(perm))
    ga, gb = fa.grouping.labels, fb.grouping.labels  # one op per group
    hint_a = np.eye(2, dtype=np.float32)[np.random.default_rng(0).integers(0, 2, N)][ga]
    hint_b = np.empty_like(hint_a)
    hint_b[gb[perm]] = hint_a[ga]
    policy = _randomize(GdpPolicy(segment=16, hint=True), scale=0.5)
    la = policy.graph_logits(dataclasses.replace(fa, hint=hint_a))
    lb = policy.graph_logits(dataclasses.replace(fb, hint=hint_b))
    np.testing.assert_allclose(lb[gb[perm]], la[ga], rtol=1e-4, atol=1e-5)
    plain = policy.graph_logits(fa)  # all-zero hint: the logits do read it
    assert np.abs(plain - la).max() > 0.1


def test_the_hint_is_the_best_heuristics_placement_of_groups_that_never_straddle_it():
    problem = random_problem(400, seed=6, num_gpus=4)
    heuristic = BestHeuristicPlacer().propose(problem)
    graph = graph_features(problem, FeatureConfig(max_groups=40), hint=True)
    assert graph.num_groups <= 40 + 4  # merging stops at device boundaries only
    copied = graph.op_placement(np.argmax(graph.hint, axis=1))
    np.testing.assert_array_equal(copied, heuristic)
    assert (graph.hint.sum(axis=1) == 1).all()
    assert not graph_features(problem).hint.any()


def test_one_policy_places_on_2_4_and_8_devices():
    policy = _randomize(GdpPolicy(segment=32))
    for d in (2, 4, 8):
        graph = graph_features(random_problem(150, seed=1, num_gpus=d))
        logits = policy.graph_logits(graph)
        assert logits.shape == (graph.num_groups, d)
        assert graph.device.shape == (d, gdp_features.NUM_DEVICE_FEATURES)
        placement = graph.op_placement(sample(logits, np.random.default_rng(0), 3))
        assert placement.shape == (3, 150)
        assert set(np.unique(placement)) <= set(range(d))  # GPUs only: no CPU-only ops here


def test_fresh_policy_is_uniform_and_sampling_follows_the_probabilities():
    graph = graph_features(random_problem(100, seed=2, num_gpus=4))
    logits = GdpPolicy().graph_logits(graph)
    np.testing.assert_allclose(logits, 0.0)
    skewed = np.tile(np.log([[0.7, 0.2, 0.1]]), (graph.num_groups, 1))
    draws = sample(skewed, np.random.default_rng(0), 2000)
    np.testing.assert_allclose(np.bincount(draws.ravel()) / draws.size, [0.7, 0.2, 0.1],
                               atol=0.01)
    assert greedy(skewed).tolist() == [0] * graph.num_groups


def test_cpu_only_groups_are_fixed_to_a_device_that_runs_them():
    problem = _labelled_problem()
    kernels = np.ones((N, 2), bool)
    kernels[[5, 17], 1] = False  # CPU only
    graph = from_edges(N, [(int(s), int(d), 100) for s, d in
                           zip(problem.graph.edge_src, problem.graph.edge_dst)],
                       kernels=kernels)
    op_time = TableCostModel({"GPU": np.full(N, 1e-3), "CPU": np.full(N, 1e-2)}).op_time(
        graph, problem.cluster)
    p = PlacementProblem(graph=graph, cluster=problem.cluster, op_time=op_time,
                         grouping=Grouping.from_labels(graph, graph.colocation))
    feats = graph_features(p)  # one op per group
    devices = feats.op_placement(np.ones(feats.num_groups, np.int32))  # everything on GPU 1
    assert devices[5] == devices[17] == 2  # the host
    assert (devices[np.setdiff1d(np.arange(N), [5, 17])] == 1).all()
    merged = graph_features(p, FeatureConfig(max_groups=20))
    assert (merged.op_placement(np.zeros(merged.num_groups, np.int32))[[5, 17]] == 2).all()
    assert merged.num_groups <= 20 and not merged.movable.all()


def test_checkpoint_round_trip_gives_identical_outputs(tmp_path):
    policy = _randomize(GdpPolicy(hidden=16, heads=4, segment=8, superposition=True))
    graph = graph_features(random_problem(80, seed=4, num_gpus=4))
    policy.save(str(tmp_path))
    loaded = GdpPolicy.load(str(tmp_path))
    assert loaded.config == policy.config
    np.testing.assert_array_equal(loaded.graph_logits(graph), policy.graph_logits(graph))
    with pytest.raises(ConfigError, match="cannot load a GDP policy"):
        GdpPolicy.load(str(tmp_path / "missing"))


def test_weights_of_another_network_name_the_version(tmp_path):
    """A policy whose weights are not the ones its policy.json's network has (saved before a
    layer changed) is refused with a message that says so, not only a shape."""
    policy = GdpPolicy(hidden=16, heads=4, segment=8, superposition=True)
    policy.save(str(tmp_path))
    weights = dict(np.load(tmp_path / "weights.npz"))
    np.savez(tmp_path / "weights.npz", **{k: w[..., :-1] if i == 3 else w
                                         for i, (k, w) in enumerate(sorted(weights.items()))})
    with pytest.raises(ConfigError, match=r"do not fit a GDP policy as its policy.json "
                                          r"describes it .*has shape.*another version"):
        GdpPolicy.load(str(tmp_path))
    np.savez(tmp_path / "weights.npz", **dict(sorted(weights.items())[:-1]))
    with pytest.raises(ConfigError, match=r"expected \d+ weight arrays.*another version"):
        GdpPolicy.load(str(tmp_path))


@pytest.mark.parametrize("kwargs", [dict(hidden=0), dict(hidden=30, heads=4),
                                    dict(segment=1.5), dict(attention="yes")])
def test_bad_architecture_is_a_config_error(kwargs):
    with pytest.raises(ConfigError, match=str(list(kwargs.values())[0])):
        GdpPolicy(**kwargs)


# ------------------------------------------------------------------- numpy reference network
def _dense(layer, x, x0=None):
    if layer.u is not None:
        x = x * 2.0 * _sigmoid(x0 @ layer.u.numpy() + layer.a.numpy())
    return x @ layer.w.numpy() + layer.b.numpy()


def _norm(layer, x):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * layer.gamma.numpy() + layer.beta.numpy()


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _reference_logits(policy, graph, segment):
    """The network of the module doc in plain numpy (float64), segments run one after the
    other, each layer's input of the previous segment cached as that layer's memory
    (Transformer-XL as written)."""
    cfg = policy.config
    node = graph.node.astype(np.float64)
    hint = graph.hint.astype(np.float64)
    if cfg["hint"]:  # each group also reads its hint device's features and whether it has one
        node = np.concatenate([node, hint @ graph.device, hint.sum(1, keepdims=True)], 1)
    h = np.maximum(_dense(policy.embed, node), 0)
    for sage in policy.sage:
        m_in, m_out = _sigmoid(_dense(sage.msg_in, h)), _sigmoid(_dense(sage.msg_out, h))
        agg_in, agg_out = np.zeros_like(h), np.zeros_like(h)
        for s, d in zip(graph.edge_src, graph.edge_dst):
            agg_in[d] = np.maximum(agg_in[d], m_in[s])
            agg_out[s] = np.maximum(agg_out[s], m_out[d])
        h = np.maximum(_dense(sage.update, np.concatenate([h, agg_in, agg_out], 1)), 0)
    pooled = np.concatenate([h.mean(0), h.max(0), graph.graph])[None]
    x0 = np.tanh(_dense(policy.graph_embed, pooled))
    seq = h[graph.order]
    outputs, memories = [], [None] * len(policy.blocks)
    for start in range(0, len(seq), segment):
        x = seq[start:start + segment]
        for i, block in enumerate(policy.blocks):
            if cfg["attention"]:
                context = x if memories[i] is None else np.concatenate([memories[i], x])
                memories[i] = x
                q = _dense(block.q, _norm(block.norm_attn, x), x0)
                k = _dense(block.k, _norm(block.norm_attn, context), x0)
                v = _dense(block.v, _norm(block.norm_attn, context), x0)
                dh = q.shape[1] // cfg["heads"]
                out = np.zeros_like(q)
                for head in range(cfg["heads"]):
                    cols = slice(head * dh, (head + 1) * dh)
                    scores = q[:, cols] @ k[:, cols].T / np.sqrt(dh)
                    w = np.exp(scores - scores.max(1, keepdims=True))
                    out[:, cols] = (w / w.sum(1, keepdims=True)) @ v[:, cols]
                x = x + _dense(block.o, out, x0)
            hidden = np.maximum(_dense(block.ffn_in, _norm(block.norm_ffn, x), x0), 0)
            x = x + _dense(block.ffn_out, hidden, x0)
        outputs.append(x)
    y = np.empty_like(seq)
    y[graph.order] = np.concatenate(outputs)
    y = _norm(policy.norm_out, y)
    node = _dense(policy.node_proj, y, x0)
    device = _dense(policy.device_proj, graph.device.astype(np.float64))
    pair = node[:, None, :] + device[None, :, :]
    match = _dense(policy.node_key, y, x0) @ _dense(policy.device_key, graph.device).T
    if not cfg["hint"]:
        return _dense(policy.out, np.maximum(pair, 0), x0)[..., 0] + match
    pair = np.maximum(pair + hint[..., None] * policy.hint_u.numpy(), 0)
    return _dense(policy.out, pair, x0)[..., 0] + match + policy.keep.numpy() * hint


@pytest.mark.parametrize("superposition, attention, hint", [
    (True, True, False), (False, True, False), (True, False, False), (True, True, True)])
def test_network_matches_the_numpy_reference(superposition, attention, hint):
    graph = graph_features(random_problem(70, seed=5, num_gpus=4), hint=hint)
    policy = _randomize(GdpPolicy(hidden=8, heads=2, segment=16, ffn=12,
                                  superposition=superposition, attention=attention, hint=hint),
                        seed=1)
    np.testing.assert_allclose(policy.graph_logits(graph),
                               _reference_logits(policy, graph, segment=16),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_segment_recurrence_equals_full_attention_when_one_segment_covers_the_graph():
    graph = graph_features(random_problem(70, seed=5, num_gpus=4))
    weights = _randomize(GdpPolicy(hidden=8, heads=2, segment=16, ffn=12), seed=2).get_weights()
    covering = GdpPolicy(hidden=8, heads=2, segment=graph.num_groups, ffn=12)
    covering.set_weights(weights)
    full = _reference_logits(covering, graph, segment=10**6)  # plain attention over all
    np.testing.assert_allclose(covering.graph_logits(graph), full, rtol=1e-4, atol=1e-4)
    larger = GdpPolicy(hidden=8, heads=2, segment=4 * graph.num_groups, ffn=12)
    larger.set_weights(weights)
    np.testing.assert_allclose(larger.graph_logits(graph), full, rtol=1e-4, atol=1e-4)
    # With shorter segments the context is cut: the outputs differ from full attention.
    short = GdpPolicy(hidden=8, heads=2, segment=16, ffn=12)
    short.set_weights(weights)
    assert np.abs(short.graph_logits(graph) - full).max() > 1e-3
