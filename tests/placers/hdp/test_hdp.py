"""HDP (the Hierarchical Planner): the view, the policy, REINFORCE and the placer, on small
graphs."""

import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_autoplace
from tf_autoplace import flags as ap_flags
from tf_autoplace.core.cluster import Cluster, Device
from tf_autoplace.core.problem import rank_placements
from tf_autoplace.cost import TableCostModel
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.grouping import Grouping
from tf_autoplace.learning.eager import policy_context
from tf_autoplace.learning.rollouts import Evaluator
from tf_autoplace.placers import HDPConfig, HDPPlacer, PlacementProblem, check_placement, get_placer
from tf_autoplace.placers.gdp.placer import SHIPPED_POLICY as SHIPPED_GDP_POLICY
from tf_autoplace.placers.hdp.policy import HDPPolicy
from tf_autoplace.placers.hdp.search import (
    fit_placer_to_hint,
    gumbel,
    sample,
    sample_groupings,
    search,
    update,
)
from tf_autoplace.placers.hdp.view import build_view
from tf_autoplace.testing.problems import cluster, random_dag, random_problem
from tf_autoplace.testing.problems import problem as make_problem
from tf_autoplace.zoo.benchmark import search_curve

GB = 10**9
# Small networks and budgets: every test builds (and traces) its own policy.
# The paper's uniform start: most tests pin the paper's mechanics; the heuristic start (the
# placer's default) has its own tests at the end and runs behind every door (tests/conftest.py).
SMALL = dict(num_groups=6, samples_per_update=4, max_samples=8, start="uniform", type_embed=4,
             grouper_hidden=8, hidden=8, device_embed=4, attention=8)


def _colocated_problem(seed=0, n=60):
    """A random DAG whose ops 10-14 and 30-33 are two colocation groups, on two GPUs and a CPU
    host, with ops 20 and 31 CPU-only (so the second colocation group is CPU-only as a whole)."""
    base = random_dag(n, seed)
    colocation = np.arange(n)
    colocation[10:15] = 10
    colocation[30:34] = 30
    kernels = np.ones((n, 2), bool)
    kernels[[20, 31]] = [True, False]
    graph = dataclasses.replace(base, colocation=colocation, kernels=kernels)
    return make_problem(graph, cluster(2), 1e-3)


def test_the_grouper_assigns_colocation_groups_and_fixes_what_cannot_run_on_gpus():
    problem = _colocated_problem()
    view = build_view(problem, 6)
    cpu = problem.cluster.index("/device:CPU:0")
    units = view.units.labels
    # One unit per colocation group: 60 ops, two groups of 5 and 4 ops -> 53 units; the
    # CPU-only op 20 and the colocation group of op 31 are fixed on the host.
    assert view.units.num_groups == 53
    assert len(view.learned) == 51
    assert view.unit_device[units[20]] == view.unit_device[units[31]] == cpu
    assert units[10] == units[14] and units[30] == units[33]
    np.testing.assert_array_equal(view.unit_device[view.learned], -1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_sampled_placement_splits_a_colocation_group_or_breaks_a_kernel(seed):
    problem = _colocated_problem(seed)
    view = build_view(problem, 6)
    with policy_context():
        # Random (not uniform) heads, so that units really land in different groups.
        policy = HDPPolicy(6, view.num_devices, view.type_vocab, hidden=8, seed=seed)
        policy.set_weights([w + np.random.default_rng(seed).normal(0, 0.1, w.shape)
                            for w in policy.get_weights()])
        batch = sample(policy, view, 16, np.random.default_rng(seed))
    assert len({tuple(row) for row in batch.labels}) > 1  # the groupings differ
    for devices in batch.placements:
        assert check_placement(problem, devices) == []
        assert len(set(devices[10:15].tolist())) == 1 and len(set(devices[30:34].tolist())) == 1
        assert devices[20] == devices[31] == problem.cluster.index("/device:CPU:0")
    # The GPUs take the learned units: across the batch both are used.
    assert set(np.unique(batch.placements)) == {0, 1, 2}


def test_the_step_by_step_sampler_and_the_fused_teacher_forced_decoder_agree():
    problem = _colocated_problem()
    view = build_view(problem, 6)
    rng = np.random.default_rng(4)
    with policy_context():
        policy = HDPPolicy(6, view.num_devices, view.type_vocab, hidden=8, seed=1)
        policy.set_weights([w + rng.normal(0, 0.5, w.shape) for w in policy.get_weights()])
        batch = sample(policy, view, 8, rng)
        noise = gumbel(rng, (8, 6, view.num_devices))
        sampled = policy.sample_devices(batch.group_features, noise).numpy()
        logits = policy.teacher_forced_logits(batch.group_features, sampled).numpy()
    # Every step's logits are the ones the sampler drew from, given the devices before it.
    np.testing.assert_array_equal((logits + noise).argmax(axis=-1), sampled)
    assert len(np.unique(sampled)) > 1


def test_group_features_count_types_sizes_and_bytes_between_groups():
    # 0 -> 1 -> 2 and 0 -> 3; ops 0, 1 are MatMul, 2, 3 Relu. Groups {0, 1} and {2, 3}.
    graph = from_edges(4, [(0, 1, 100), (1, 2, 300), (0, 3, 100)],
                       op_types=("MatMul", "MatMul", "Relu", "Relu"))
    problem = make_problem(graph, cluster(2), 1e-3)
    view = build_view(problem, 3)
    assert view.type_vocab == ("MatMul", "Relu")
    features = view.group_features(np.array([[0, 0, 1, 1]]))[0]
    v = view.num_types
    np.testing.assert_allclose(features[0, :v], [1, 0, 0])
    np.testing.assert_allclose(features[1, :v], [0, 1, 0])
    np.testing.assert_array_equal(features[2], 0)  # the empty group
    adjacency = features[:, v + 6:v + 6 + 3]
    # Op 0's tensor (100 bytes) is read inside group 0 (by op 1) and sent to group 1 (op 3);
    # op 1 sends 300 to group 1. Shares of 500 bytes, as log(1 + 3 * share).
    expected = np.log1p(3 * np.array([[100, 400, 0], [0, 0, 0], [0, 0, 0]]) / 500)
    np.testing.assert_allclose(adjacency, expected, rtol=1e-6)
    np.testing.assert_allclose(features[:, v + 6 + 3:], expected.T, rtol=1e-6)
    # Each group holds half the ops: log(1 + 3 / 2).
    assert features[0, v + 5] == pytest.approx(np.log1p(1.5))
    placement = view.op_placement(np.array([[0, 0, 1, 1]]), np.array([[1, 0, 0]]))
    np.testing.assert_array_equal(placement, [[1, 1, 0, 0]])


def test_grouping_samples_follow_the_probabilities():
    probabilities = np.array([[1.0, 0.0, 0.0], [0.0, 0.25, 0.75]])
    labels = sample_groupings(probabilities, 4000, np.random.default_rng(0))
    assert (labels[:, 0] == 0).all()
    assert set(np.unique(labels[:, 1])) == {1, 2}
    assert (labels[:, 1] == 2).mean() == pytest.approx(0.75, abs=0.03)


def _two_ops_two_speeds():
    """Two ops in a chain, on two GPUs; GPU 1 is ten times faster."""
    graph = from_edges(2, [(0, 1, 1000)])
    cluster = Cluster.uniform([Device(f"/device:GPU:{i}", "GPU", 10 * GB, speed=s)
                               for i, s in enumerate((1.0, 10.0))])
    op_time = TableCostModel({"GPU": np.full(2, 10e-3)}).op_time(graph, cluster)
    return PlacementProblem(graph, cluster, op_time, Grouping.from_labels(graph, [0, 1]))


def test_the_reinforce_step_moves_probability_towards_the_faster_device():
    problem = _two_ops_two_speeds()
    assert problem.op_time[0, 1] < problem.op_time[0, 0]
    config = HDPConfig(**dict(SMALL, num_groups=2, samples_per_update=16), learning_rate=0.05)
    view = build_view(problem, 2)
    with policy_context():
        policy = config.make_policy(view, seed=0)
        batch = sample(policy, view, 16, np.random.default_rng(0))
        assert {0, 1} <= set(np.unique(batch.placements))  # both devices were tried
        with Evaluator(problem) as evaluator:
            rewards = -np.sqrt(evaluator.evaluate(batch.placements).scores)

        def log_p_devices(device):  # log p(every group on ``device``) given batch 0's grouping
            actions = np.full((1, 2), device, np.int32)
            _, placer, _, _ = policy.log_probs(view.unit_features, batch.labels[:1],
                                               batch.group_features[:1], actions)
            return float(placer[0])

        fast, slow = log_p_devices(1), log_p_devices(0)
        update(policy, tf.keras.optimizers.SGD(learning_rate=0.05), view, batch,
               rewards - rewards.mean(), config)
        assert log_p_devices(1) > fast
        assert log_p_devices(0) < slow


def test_search_learns_the_faster_device():
    problem = _two_ops_two_speeds()
    config = HDPConfig(**dict(SMALL, num_groups=2, max_samples=160, samples_per_update=8),
                       learning_rate=0.05)
    view = build_view(problem, config.num_groups)
    with policy_context():
        policy = config.make_policy(view, seed=0)
        before = sample(policy, view, 64, np.random.default_rng(9)).placements
        found = search(problem, config, seed=0, policy=policy, view=view)
        after = sample(policy, view, 64, np.random.default_rng(9)).placements
    assert found.best_devices.tolist() == [1, 1]
    # the policy itself learned it (the best sample alone could be luck): fresh samples from
    # the trained policy put nearly every op on the faster GPU, where the untrained one did not
    assert (before == 1).mean() < 0.7 and (after == 1).mean() > 0.9
    assert found.samples == 160 and found.updates == 20
    assert [c[0] for c in found.curve] == list(range(8, 161, 8))


def _placer(**overrides):
    return HDPPlacer(**dict(SMALL, **overrides))


def test_same_seed_same_placement_and_curve():
    problem = random_problem(80, seed=4)
    a, b = _placer(), _placer()
    first, second = a.place(problem, seed=5), b.place(problem, seed=5)
    np.testing.assert_array_equal(first.devices, second.devices)
    assert a.stats["curve"] == b.stats["curve"]


def test_placer_stats_give_the_benchmark_a_timed_curve():
    problem = random_problem(80, seed=4)
    placer = _placer(max_samples=12)
    placer.place(problem, seed=5)
    curve, timed = search_curve(placer.stats, placer.stats["seconds"])
    assert timed and placer.stats["stopped"] == "samples"
    assert [n for n, _, _ in curve] == [4, 8, 12]
    seconds = [t for _, t, _ in curve]
    assert 0 < seconds[0] <= seconds[1] <= seconds[2] <= placer.stats["seconds"]
    bests = [best for _, _, best in curve]
    assert bests == sorted(bests, reverse=True)  # best so far never gets worse


def test_checkpoint_round_trip_gives_identical_outputs(tmp_path):
    problem = _colocated_problem()
    config = HDPConfig(**SMALL)
    view = build_view(problem, config.num_groups)
    with policy_context():
        policy = config.make_policy(view, seed=3)
        batch = sample(policy, view, 4, np.random.default_rng(0))
        update(policy, tf.keras.optimizers.Adam(0.1), view, batch,
               np.array([1.0, -1.0, 0.5, -0.5]), config)  # weights away from their init
        policy.save(str(tmp_path))
        loaded = HDPPolicy.load(str(tmp_path))
        assert loaded.config == policy.config
        np.testing.assert_array_equal(loaded.group_probabilities(view.unit_features),
                                      policy.group_probabilities(view.unit_features))
        noise = gumbel(np.random.default_rng(1), (4, config.num_groups, view.num_devices))
        np.testing.assert_array_equal(loaded.sample_devices(batch.group_features, noise),
                                      policy.sample_devices(batch.group_features, noise))
        for a, b in zip(loaded.log_probs(view.unit_features, batch.labels,
                                         batch.group_features, batch.devices),
                        policy.log_probs(view.unit_features, batch.labels,
                                         batch.group_features, batch.devices)):
            np.testing.assert_array_equal(a, b)
    with open(os.path.join(tmp_path, "policy.json"), encoding="utf-8") as f:
        assert json.load(f)["type_vocab"] == list(view.type_vocab)
    with pytest.raises(ConfigError, match="cannot load an HDP policy"):
        HDPPolicy.load(str(tmp_path / "missing"))


def test_the_placer_is_registered_budgeted_and_never_worse_than_the_best_heuristic():
    placer = get_placer("hdp", budget_s=30)
    assert isinstance(placer, HDPPlacer) and placer.config.budget_s == 30
    problem = random_problem(80, seed=2)
    placer = _placer()
    placement = placer.place(problem, seed=0)
    best = get_placer("best_heuristic").place(problem)
    assert placement.sim.makespan <= best.sim.makespan
    assert placer.stats["samples"] == 8 and placer.stats["updates"] == 2
    assert placement.notes[0].startswith("hdp: best learned")
    if placer.stats["winner"] != "hdp":
        assert "is used instead" in placement.notes[0]


def test_one_gpu_leaves_nothing_to_learn_and_gives_the_heuristic_placement():
    problem = make_problem(random_dag(30, 0), cluster(1), 1e-3)
    placer = _placer()
    placement = placer.place(problem, seed=0)
    np.testing.assert_array_equal(placement.devices,
                                  get_placer("best_heuristic").place(problem).devices)
    assert placer.stats["samples"] == 0 and "nothing to learn" in placement.notes[0]
    assert placer.trained_policy is None  # nothing was trained, so nothing to keep
    assert "was not used" not in placement.notes[0]


def test_the_policy_runs_inside_a_users_graph_without_touching_it():
    problem = random_problem(40, seed=1)
    graph = tf.Graph()
    with graph.as_default():
        assert not tf.executing_eagerly()
        devices = _placer().place(problem, seed=0).devices
    assert graph.get_operations() == []
    assert check_placement(problem, devices) == []


@pytest.mark.parametrize("field, value, message", [
    ("max_samples", 0, "max_samples must be None or an int >= 1, got 0"),
    ("num_groups", 1.5, "num_groups must be an int >= 1, got 1.5"),
    ("budget_s", -1, "budget_s must be a number > 0, got -1"),
    ("baseline_decay", 1.0, "baseline_decay must be a finite number >= 0 and < 1, got 1.0"),
    ("hidden", 0, "hidden must be an int >= 1, got 0"),
    ("grad_clip", 0, "grad_clip must be None or a finite number > 0, got 0"),
])
def test_config_errors_repeat_the_value(field, value, message):
    with pytest.raises(ConfigError, match=message):
        HDPConfig(**{field: value})


# ------------------------------------------------------------ keeping and reusing a policy
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """An HDPPlacer with the default networks trained on a random problem for one update of 16
    placements, its policy saved."""
    problem = random_problem(60, seed=6)
    placer = HDPPlacer(max_samples=16, start_steps=20)
    placer.place(problem, seed=0)
    directory = str(tmp_path_factory.mktemp("hdp_policy") / "trained")
    placer.save_policy(directory)
    return problem, placer, directory


def test_a_saved_trained_policy_reloads_with_identical_outputs(trained):
    problem, placer, directory = trained
    assert sorted(os.listdir(directory)) == ["manifest.json", "policy.json", "weights.npz"]
    with policy_context():
        loaded = HDPPolicy.load(directory)
        kept = placer.trained_policy.build()
        for a, b in zip(loaded.get_weights(), placer.trained_policy.weights):
            np.testing.assert_array_equal(a, b)
        view = build_view(problem, loaded.num_groups, loaded.type_vocab, _hint(problem))
        batch = sample(loaded, view, 3, np.random.default_rng(1))
        noise = gumbel(np.random.default_rng(2), (3, view.num_groups, view.num_devices))
        for policy in (loaded, kept):
            np.testing.assert_array_equal(policy.group_probabilities(view.unit_features),
                                          loaded.group_probabilities(view.unit_features))
            np.testing.assert_array_equal(policy.sample_devices(batch.group_features, noise),
                                          loaded.sample_devices(batch.group_features, noise))
        # The update trained the fresh policy: this is not the one it started from.
        fresh = HDPPolicy(**loaded.config)
        assert not np.allclose(fresh.group_probabilities(view.unit_features),
                               loaded.group_probabilities(view.unit_features))
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["placer"] == "hdp" and manifest["fine_tuned_from"] == "fresh"
    assert manifest["graph"]["ops"] == 60 and manifest["action_devices"] == 2
    assert manifest["policy_config"]["num_groups"] == 256 and "HDPConfig(" in \
        manifest["placer_config"]
    assert manifest["results"]["samples"] == 16 and manifest["results"]["updates"] == 1
    assert manifest["results"]["learned_ms"] == pytest.approx(placer.stats["learned_ms"])


def test_a_later_placer_starts_from_the_saved_policy_with_the_same_seed_semantics(trained):
    problem, _, directory = trained
    runs = []
    for _ in range(2):
        again = HDPPlacer(max_samples=16, policy=directory)
        runs.append(again.place(problem, seed=5))
        assert again.stats["policy"] == directory
        assert again.trained_policy.manifest["fine_tuned_from"] == directory
    np.testing.assert_array_equal(runs[0].devices, runs[1].devices)
    assert f"from the policy in {directory}" in runs[0].notes[0]
    # On one GPU the policy has nothing to choose: the note says it went unused (it did not).
    one = HDPPlacer(policy=directory).place(make_problem(random_dag(30, 0), cluster(1), 1e-3))
    assert f"(the policy in {directory} was not used)" in one.notes[0]
    # It searched from the saved weights: the same search on the loaded policy by hand.
    with policy_context():
        by_hand = search(problem, again.config, _search_seed(5), policy=HDPPolicy.load(directory),
                         hint=_hint(problem))
    assert again.stats["curve"] == [(n, best) for n, best, _ in by_hand.curve]
    assert get_placer("hdp", policy=directory).config.policy_dir == directory


def _hint(problem):
    """The placement the HDP placer's heuristic start begins from: the best heuristic's."""
    return rank_placements(problem, HDPPlacer()._heuristics(problem))[0][3]


def _search_seed(seed):
    """The search seed a placer draws from the placement seed (``Placer.propose``)."""
    return int(np.random.default_rng(seed).integers(2**31 - 1))


def test_the_doors_start_hdp_from_a_saved_policy(trained, tiny_graph, one_update_hdp):
    _, _, directory = trained
    report = tf_autoplace.autoplace(tiny_graph, cluster="testdata/k80x2.pbtxt", placer="hdp",
                                    policy=directory, progress=False)
    assert any(f"from the policy in {directory}" in n for n in report.notes)
    assert report.policy.manifest["fine_tuned_from"] == directory
    assert all(op.device for op in tiny_graph.get_operations())
    settings = ap_flags.AutoplaceSettings(placer="hdp", policy=directory)
    assert settings.place_options().placer.config.policy_dir == directory


def test_a_saved_policy_that_does_not_fit_is_a_config_error_naming_what_differs(trained):
    problem, _, directory = trained
    with pytest.raises(ConfigError, match=r"does not fit the placer's settings: it was made with "
                                          r"num_groups=256 \(the placer's num_groups=6\), "
                                          r"type_embed=16 \(the placer's type_embed=4\)"):
        _placer(policy=directory).place(problem, seed=0)
    with pytest.raises(ConfigError, match=r"the HDP policy in .* places on 2 devices; this "
                                          r"cluster has 4 action devices"):
        HDPPlacer(max_samples=16, policy=directory).place(random_problem(40, num_gpus=4))
    with pytest.raises(ConfigError, match=r"the policy in .*gdp' is not an HDP policy .another "
                                          r"placer's.*no \['num_devices', 'num_groups', "
                                          r"'type_vocab'\]"):
        HDPPlacer(policy=SHIPPED_GDP_POLICY).place(problem, seed=0)
    with pytest.raises(ConfigError, match="policy_dir must be None or a directory, got 3"):
        HDPConfig(policy_dir=3)



def test_hint_order_runs_through_each_device_in_topological_order():
    # A chain of 8 ops; the hint puts ops 0-2 and 6-7 on GPU 1, ops 3-5 on GPU 0.
    problem = make_problem(from_edges(8, [(i, i + 1, 100) for i in range(7)]), cluster(2), 1e-3)
    hint = np.array([1, 1, 1, 0, 0, 0, 1, 1])
    view = build_view(problem, 4, hint=hint)
    plain = build_view(problem, 4)
    assert view.hinted and not plain.hinted
    np.testing.assert_array_equal(np.floor(view.hint_order * 2), hint)  # device d: [d/2, (d+1)/2)
    # Device 0's three units fill [0, 1/2) in order, device 1's five fill [1/2, 1).
    np.testing.assert_allclose(view.hint_order, [(1 + (r + .5) / 5) / 2 for r in range(3)]
                               + [(r + .5) / 3 / 2 for r in range(3)]
                               + [(1 + (r + .5) / 5) / 2 for r in range(3, 5)])
    np.testing.assert_allclose(view.unit_features[:, -1], 2 * view.hint_order - 1, rtol=1e-6)
    assert view.unit_features.shape[1] == plain.unit_features.shape[1] + 1
    labels = np.array([[0, 0, 0, 1, 1, 1, 2, 2]])
    features = view.group_features(labels)[0]
    assert features.shape[-1] == view.num_group_features == plain.num_group_features + 1
    v = view.num_types
    # The groups' mean place in the hint order, as 2 q - 1, after the plain numeric columns.
    np.testing.assert_allclose(features[:3, v + 6],
                               [2 * view.hint_order[i].mean() - 1
                                for i in (slice(0, 3), slice(3, 6), slice(6, 8))], rtol=1e-6)
    np.testing.assert_array_equal(np.delete(features, v + 6, axis=-1),
                                  plain.group_features(labels)[0])


@pytest.mark.slow
def test_the_heuristic_start_places_as_the_hint_before_any_reinforce_step():
    problem = random_problem(80, num_gpus=2, seed=3)
    hint = np.where(np.arange(80) < 35, 0, 1).astype(np.int32)
    config = HDPConfig(**dict(SMALL, num_groups=8, start="heuristic"), start_sharpness=3.0,
                       start_steps=150)
    view = build_view(problem, 8, hint=hint)
    with policy_context():
        policy = config.make_policy(view, seed=0)
        assert policy.hinted
        uniform = policy.group_probabilities(view.unit_features).numpy()
        policy.start_grouper_from_hint(config.start_sharpness)
        probabilities = policy.group_probabilities(view.unit_features).numpy()
        # Each unit's likeliest group is one whose centre is nearest its hint order (a unit
        # exactly between two centres may take either).
        distance = np.abs((np.arange(8) + 0.5) / 8 - view.hint_order[:, None])
        np.testing.assert_allclose(distance[np.arange(80), probabilities.argmax(axis=1)],
                                   distance.min(axis=1), atol=1e-6)
        assert probabilities.max(axis=1).mean() > 0.7 and np.allclose(uniform, 1 / 8)
        steps = []  # the caller hears of every step (its progress lines during the fit)
        loss = fit_placer_to_hint(policy, view, config, np.random.default_rng(0),
                                  on_step=lambda: steps.append(1))
        assert len(steps) == config.start_steps
        labels = probabilities.argmax(axis=1)[None].astype(np.int32)
        features = view.group_features(labels)
        greedy = policy.sample_devices(features, np.zeros((1, 8, 2), np.float32)).numpy()
        # The fit scores the runs' devices while the decoder reads devices some of which
        # were redrawn: a device read at step t changes the logits of the later steps only.
        targets = np.repeat([0, 1], 4).astype(np.int32)[None]
        fed = targets.copy()
        fed[0, 2] = 1
        plain = policy.teacher_forced_logits(features, targets).numpy()[0]
        redrawn = policy.teacher_forced_logits(features, fed).numpy()[0]
        np.testing.assert_array_equal(plain[:3], redrawn[:3])
        assert np.abs(plain[3:] - redrawn[3:]).max(axis=1).min() > 0
        loss_plain, _ = policy.placer_imitation_gradients(features, targets, targets)
        loss_redrawn, _ = policy.placer_imitation_gradients(features, targets, fed)
        assert float(loss_plain) != float(loss_redrawn)
        # A deadline already passed leaves the placer as it was: no step is taken.
        before = policy.get_weights()
        assert np.isnan(fit_placer_to_hint(policy, view, config, np.random.default_rng(0),
                                           deadline=0.0))
        for a, b in zip(before, policy.get_weights()):
            np.testing.assert_array_equal(a, b)
    assert loss < 1.0
    np.testing.assert_array_equal(view.op_placement(labels, greedy)[0],
                                  problem.cluster.compute_devices()[hint])


def test_the_placer_fit_redraws_the_devices_its_decoder_reads():
    problem = random_problem(40, num_gpus=2, seed=1)
    view = build_view(problem, 6, hint=np.where(np.arange(40) < 20, 0, 1).astype(np.int32))
    fitted = []
    with policy_context():
        for noise in (0.0, 0.0, 0.5):
            config = HDPConfig(**dict(SMALL, start="heuristic"), start_steps=1,
                               start_noise=noise)
            policy = config.make_policy(view, seed=0)
            policy.start_grouper_from_hint(config.start_sharpness)
            fit_placer_to_hint(policy, view, config, np.random.default_rng(0))
            fitted.append(policy.get_weights())
    # The same noise gives the same step; redrawn devices give another.
    for a, b in zip(fitted[0], fitted[1]):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, c) for a, c in zip(fitted[0], fitted[2]))


def test_the_heuristic_start_needs_a_hint_and_a_policy_trained_with_the_same_start(tmp_path):
    problem = random_problem(40, num_gpus=2, seed=1)
    config = HDPConfig(**dict(SMALL, start="heuristic"))
    with policy_context():
        with pytest.raises(ConfigError, match="heuristic start needs a hint"):
            search(problem, config, 0)
        plain = HDPConfig(**SMALL).make_policy(build_view(problem, 6), seed=0)
        with pytest.raises(ConfigError, match="trained with start='uniform'"):
            search(problem, config, 0, policy=plain, hint=np.zeros(40, np.int32))
    for field, value in [("start", "expert"), ("start_sharpness", 0), ("start_steps", 0),
                         ("start_noise", 1.0), ("learning_rate", 0)]:
        with pytest.raises(ConfigError, match=field):
            HDPConfig(**{field: value})
    assert HDPConfig(start="uniform").rate == 3e-3 and HDPConfig().rate == 1e-3
    assert HDPConfig(start="heuristic", learning_rate=0.01).rate == 0.01


def test_hdp_from_the_heuristic_start_is_seeded_never_worse_and_keeps_a_hinted_policy(tmp_path):
    problem = random_problem(60, num_gpus=2, seed=2)
    overrides = dict(SMALL, max_samples=16, start="heuristic", start_steps=20)
    placers = [HDPPlacer(**overrides) for _ in range(2)]
    a, b = (p.place(problem, seed=4) for p in placers)
    np.testing.assert_array_equal(a.devices, b.devices)
    assert placers[0].stats["curve"] == placers[1].stats["curve"]
    assert check_placement(problem, a.devices) == []
    best = min(problem.simulator.run(HDPPlacer()._heuristics(problem)[0][1]).makespan,
               placers[0].stats["learned_ms"] / 1e3)
    assert problem.simulator.run(a.devices).makespan == pytest.approx(best)
    placers[0].save_policy(str(tmp_path))
    with policy_context():
        loaded = HDPPolicy.load(str(tmp_path))
    assert loaded.hinted and loaded.config["hinted"] is True
    # A policy saved by the heuristic start goes on from where it stopped, with the same start.
    again = HDPPlacer(**overrides, policy=str(tmp_path)).place(problem, seed=4)
    assert check_placement(problem, again.devices) == []
    with pytest.raises(ConfigError, match="trained with start='heuristic'"):
        HDPPlacer(**dict(SMALL, max_samples=4), policy=str(tmp_path)).place(problem, seed=0)
