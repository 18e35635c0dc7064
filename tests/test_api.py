"""autoplace end to end on real TF training graphs, executed on 2 logical CPU devices."""

import sys

import numpy as np
import pytest
import tensorflow as tf

import tf_autoplace
from tf_autoplace import Cluster, Device
from tf_autoplace.cost import TableCostModel
from tf_autoplace.placers import DEFAULT_PLACER
from tf_autoplace.testing import TrainingGraph, run_training_steps, small_cnn

CPU2 = "testdata/cpu2_independent.pbtxt"


def _devices(graph):
    return {op.name: op.device for op in graph.get_operations()}


def test_placed_training_graph_runs_with_soft_placement_off_and_same_loss():
    tg = small_cnn()
    reference, ref_devices = run_training_steps(tg)
    assert ref_devices == {"/job:localhost/replica:0/task:0/device:CPU:0"}

    report = tf_autoplace.autoplace(tg.graph, cluster=CPU2, placer="m_etf", seed=0)
    placed = _devices(tg.graph)
    assert set(placed.values()) == {"/job:localhost/replica:0/task:0/device:CPU:0",
                                    "/job:localhost/replica:0/task:0/device:CPU:1"}
    assert report.assignment == placed

    losses, devices = run_training_steps(tg)
    assert devices == set(placed.values())  # the executed graph used both placed devices
    np.testing.assert_allclose(losses, reference, rtol=1e-5)
    assert losses[-1] < losses[0]  # it trains


def test_a_graph_fed_by_tf_data_runs_placed_with_soft_placement_off():
    # TF refuses some splits of a tf.data pipeline from its iterator at the session's first
    # run; random placements (several seeds) would meet one if ingest did not keep it whole.
    def build():
        g = tf.Graph()
        with g.as_default():
            tf.compat.v1.set_random_seed(0)
            features = np.random.default_rng(0).normal(size=(32, 6)).astype(np.float32)
            ds = tf.data.Dataset.from_tensor_slices(features).map(lambda x: x * 0.5)
            x = tf.compat.v1.data.make_one_shot_iterator(ds.batch(8).repeat()).get_next()
            w = tf.compat.v1.get_variable("w", [6, 1], initializer=tf.ones_initializer())
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
            train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
            init = tf.compat.v1.global_variables_initializer()
        return TrainingGraph(g, loss.name, train.name, init.name, {})

    reference, _ = run_training_steps(build())
    for seed in range(4):
        tg = build()
        tf_autoplace.autoplace(tg.graph, cluster=CPU2, placer="random", seed=seed)
        losses, _ = run_training_steps(tg)
        np.testing.assert_allclose(losses, reference, rtol=1e-5)


def _random_placements_run_as_unplaced(build, run, seeds=6):
    """Random placements of ``build()``'s graph (several seeds, which together use both
    devices) give what ``run`` gives for the unplaced graph."""
    reference = run(build())
    devices = set()
    for seed in range(seeds):
        g = build()
        tf_autoplace.autoplace(g, cluster=CPU2, placer="random", seed=seed)
        devices |= {op.device for op in g.get_operations()}
        np.testing.assert_allclose(run(g), reference, rtol=1e-5)
    assert len(devices) == 2  # the placements did split the graph


def test_a_feedable_iterator_runs_placed_with_soft_placement_off():
    # A TF1 program switches input pipelines by feeding an iterator's string handle: the
    # iterator made from the handle must sit where the handle's iterator does, though no edge
    # joins them. Random placements (several seeds) would split them if ingest did not.
    def build():
        g = tf.Graph()
        with g.as_default():
            features = np.random.default_rng(0).normal(size=(32, 6)).astype(np.float32)
            ds = tf.data.Dataset.from_tensor_slices(features).batch(8).repeat()
            train = tf.compat.v1.data.make_one_shot_iterator(ds)
            tf.identity(train.string_handle(), name="train_handle")
            handle = tf.compat.v1.placeholder(tf.string, [], name="handle")
            x = tf.compat.v1.data.Iterator.from_string_handle(
                handle, tf.compat.v1.data.get_output_types(ds),
                tf.compat.v1.data.get_output_shapes(ds)).get_next()
            w = tf.compat.v1.get_variable("w", [6, 1], initializer=tf.ones_initializer())
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0), name="loss")
            tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
            tf.compat.v1.global_variables_initializer()
        return g

    def run(g):
        config = tf.compat.v1.ConfigProto(allow_soft_placement=False, device_count={"CPU": 2})
        with tf.compat.v1.Session(graph=g, config=config) as sess:
            sess.run("init")
            feed = {"handle:0": sess.run("train_handle:0")}
            return [sess.run(["loss:0", "train"], feed)[0] for _ in range(3)]

    _random_placements_run_as_unplaced(build, run)


def test_resources_shared_by_name_run_placed_with_soft_placement_off():
    # One GraphDef imported twice (two towers) makes two handle ops of one variable, and two
    # queues with one shared_name are one queue: TF shares a resource by name on one device
    # only. Random placements (several seeds) would split them if ingest did not join them.
    tower = tf.Graph()
    with tower.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 6], name="x")
        w = tf.compat.v1.get_variable("w", [6, 6], use_resource=True,
                                      initializer=tf.compat.v1.glorot_uniform_initializer(1))
        tf.tanh(tf.matmul(x, w), name="out")
    tower_def, init_name = tower.as_graph_def(), w.initializer.name

    def build():
        g = tf.Graph()
        with g.as_default():
            features = tf.constant(np.random.default_rng(0).normal(size=(8, 6)), tf.float32)
            a, _ = tf.compat.v1.import_graph_def(tower_def, input_map={"x:0": features},
                                                 return_elements=["out:0", init_name],
                                                 name="a")
            (b,) = tf.compat.v1.import_graph_def(tower_def, input_map={"x:0": a},
                                                 return_elements=["out:0"], name="b")
            tf.group(tf.compat.v1.FIFOQueue(4, tf.float32, shared_name="q", name="producer")
                     .enqueue(tf.reduce_sum(b)), name="enqueue")
            tf.identity(tf.compat.v1.FIFOQueue(4, tf.float32, shared_name="q",
                                               name="consumer").dequeue(), name="loss")
        return g

    def run(g):
        config = tf.compat.v1.ConfigProto(allow_soft_placement=False, device_count={"CPU": 2},
                                          operation_timeout_in_ms=60_000)
        with tf.compat.v1.Session(graph=g, config=config) as sess:
            sess.run("a/" + init_name)
            sess.run("enqueue")
            return sess.run("loss:0")

    _random_placements_run_as_unplaced(build, run)


def test_report_figures_are_consistent():
    tg = small_cnn()
    report = tf_autoplace.autoplace(tg.graph, cluster=CPU2, placer="m_etf", seed=0)
    assert report.lower_bound_s <= report.lp_lower_bound_s <= report.step_time_s + 1e-12
    assert report.lp_lower_bound_s <= report.baseline_step_time_s + 1e-12
    assert "bound" in report.timings_s and "LP lower bound" in str(report)
    assert report.to_dict()["ratio_to_lp_lower_bound"] >= 1 - 1e-12
    assert sum(d.num_ops for d in report.devices) == report.num_ops == len(tg.graph.get_operations())
    assert report.baseline_devices[0].num_ops == report.num_ops
    assert all(d.fits for d in report.devices)
    assert "predicted step time" in str(report)
    assert '"step_time_s"' in report.to_json()


@pytest.mark.slow
def test_same_seed_same_placement_with_the_default_learned_placer():
    from tf_autoplace.placers import PlacetoPlacer

    # A sample budget (the time cap is far off): the result cannot depend on the machine.
    placers = [PlacetoPlacer(max_samples=60, budget_s=600) for _ in range(2)]
    a, b = (tf_autoplace.autoplace(small_cnn().graph, cluster=CPU2, seed=3, placer=p)
            for p in placers)
    assert a.placer == "placeto"
    assert a.assignment == b.assignment
    # Same zero-shot and fine-tuned results and sample counts, not just the same winner.
    timeless = [{k: v for k, v in p.stats.items() if not k.endswith("_s") and k != "seconds"}
                for p in placers]
    assert timeless[0] == timeless[1]
    assert timeless[0]["samples"] >= 60 and timeless[0]["fine_tune_iterations"] > 1


def test_graph_def_input_returns_placed_copy_and_keeps_input():
    graph_def = small_cnn().graph.as_graph_def()
    before = graph_def.SerializeToString()
    report = tf_autoplace.autoplace(graph_def, cluster=CPU2, placer="m_etf")
    assert graph_def.SerializeToString() == before
    assert {n.name: n.device for n in report.graph_def.node} == report.assignment


def test_device_annotations_the_placement_overrides_are_named_in_the_notes():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(np.ones((8, 8), np.float32), name="x")
        with tf.device("/device:CPU:1"):
            y = tf.matmul(x, x, name="pinned")
        with tf.device("/CPU:0"):
            tf.matmul(y, y, name="kept")
    report = tf_autoplace.autoplace(graph, cluster=CPU2, placer="single")
    assert graph.get_operation_by_name("pinned").device.endswith("CPU:0")
    replaced = [n for n in report.notes if "device annotation" in n]
    assert len(replaced) == 1 and "replaced 1 device annotation" in replaced[0]
    assert "'pinned' asked for '/device:CPU:1'" in replaced[0]
    # Placed again as it is now, nothing is overridden and nothing is said.
    again = tf_autoplace.autoplace(graph, cluster=CPU2, placer="single")
    assert not [n for n in again.notes if "device annotation" in n]


def test_graph_too_big_for_cluster_is_an_error_and_graph_untouched():
    tg = small_cnn()
    before = _devices(tg.graph)
    tiny = Cluster.uniform([Device("/device:CPU:0", "CPU", memory_bytes=1000),
                            Device("/device:CPU:1", "CPU", memory_bytes=1000)])
    # Bytes in the unit that fits them: not "0.00 GB".
    with pytest.raises(tf_autoplace.InfeasiblePlacementError,
                       match=r"variables need [\d.]+ [KM]B but the cluster's devices have "
                             r"2\.00 KB in all"):
        tf_autoplace.autoplace(tg.graph, cluster=tiny, placer="m_etf")
    assert _devices(tg.graph) == before


def test_transient_memory_too_big_is_an_error_and_graph_untouched():
    tg = small_cnn(batch=64)
    before = _devices(tg.graph)
    persistent = 200_000  # the variables fit (about 30 KB) but activations do not
    small = Cluster.uniform([Device("/device:CPU:0", "CPU", memory_bytes=persistent),
                             Device("/device:CPU:1", "CPU", memory_bytes=persistent)])
    with pytest.raises(tf_autoplace.InfeasiblePlacementError, match="does not fit in memory"):
        tf_autoplace.autoplace(tg.graph, cluster=small, placer="m_etf")
    assert _devices(tg.graph) == before


@pytest.mark.parametrize("kwargs, error", [
    (dict(placer="no_such_placer"), tf_autoplace.ConfigError),
    (dict(cluster="missing/cluster.pbtxt"), tf_autoplace.ClusterSpecError),
    (dict(cluster="k80x3"), tf_autoplace.ClusterSpecError),
    (dict(cluster=12), tf_autoplace.ConfigError),
    (dict(seed="x"), tf_autoplace.ConfigError),
    # Each of these once escaped as a plain Python exception (or was taken at face value).
    (dict(seed=-1), "seed must be an int in \\[0, 2\\*\\*63 - 1\\], got -1"),
    (dict(seed=2**63), "seed must be an int .*got 9223372036854775808"),
    (dict(seed=True), "seed must be an int .*got True"),
    (dict(cost_model="analytical"), "cost_model must be None .* got 'analytical'"),
    (dict(cost_profile=3), "cost_profile must be the path of a CostProfile file, got 3"),
    (dict(cost_profile="missing_profile.pbtxt"), "cannot read cost profile"),
    (dict(cost_profile="p.pbtxt", cost_model=TableCostModel({})),
     "give cost_model or cost_profile, not both"),
    (dict(unknown_dim="8"), "unknown_dim must be an int >= 1, got '8'"),
    (dict(unknown_dim=-5), "unknown_dim must be an int >= 1, got -5"),
    (dict(unknown_dim=0), "unknown_dim must be an int >= 1, got 0"),
    (dict(grouping=None), "grouping must be a GroupingConfig, got None"),
    (dict(budget_s=True), "budget_s must be None or a number >= 0, got True"),
    (dict(cluster="testdata/cpu2\0.pbtxt"), "cannot read cluster spec 'testdata/cpu2\\\\x00"),
])
def test_bad_arguments_are_typed_errors_and_graph_untouched(kwargs, error):
    tg = small_cnn()
    before = _devices(tg.graph)
    message = None
    if isinstance(error, str):
        error, message = tf_autoplace.AutoplaceError, error
    with pytest.raises(error, match=message):
        tf_autoplace.autoplace(tg.graph, **{"cluster": CPU2, "placer": "m_etf", **kwargs})
    assert _devices(tg.graph) == before


def test_a_proto_where_a_path_goes_is_named_in_one_short_line():
    # A RunMetadata (tens of thousands of characters as text) passed as the cost profile: the
    # error names its type, not the whole proto.
    tg = small_cnn()
    stats = tf.compat.v1.RunMetadata()
    for i in range(2000):
        stats.step_stats.dev_stats.add(device=f"/device:CPU:{i}")
    with pytest.raises(tf_autoplace.ConfigError) as caught:
        tf_autoplace.autoplace(tg.graph, cluster=CPU2, placer="m_etf", cost_profile=stats)
    message = str(caught.value)
    assert "tensorflow.core.protobuf.config_pb2.RunMetadata" in message
    assert len(message) < 300 and "\n" not in message


def test_a_path_with_a_nul_is_an_invalid_graph_error():
    with pytest.raises(tf_autoplace.InvalidGraphError, match="cannot read graph file 'a\\\\x00b"):
        tf_autoplace.autoplace("a\0b.pb", cluster=CPU2, placer="m_etf")


def test_an_input_of_terminal_escapes_is_quoted_escaped_in_the_error(tmp_path):
    # The text parser's message quotes the bytes it stopped at: shown raw, a terminal cleared
    # its screen and turned red.
    junk = tmp_path / "junk.pb"
    junk.write_bytes(b"\x1b[2J\x1b[31mpwned\x00")
    for given in (str(junk), junk.read_bytes()):
        with pytest.raises(tf_autoplace.InvalidGraphError) as caught:
            tf_autoplace.autoplace(given, cluster=CPU2, placer="m_etf")
        message = str(caught.value)
        assert "\\x1b" in message and not any(c in message for c in "\x1b\x00"), message


def test_the_tf2_door_checks_the_same_arguments_before_tracing():
    traced = []

    @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
    def double(x):
        traced.append(x)
        return 2.0 * x

    with pytest.raises(tf_autoplace.ConfigError, match="unknown_dim must be an int >= 1"):
        tf_autoplace.autoplace(double, cluster=CPU2, placer="m_etf", unknown_dim=0)
    with pytest.raises(tf_autoplace.ConfigError, match="cost_model must be None"):
        tf_autoplace.autoplace(double, cluster=CPU2, placer="m_etf", cost_model="analytical")
    assert not traced


def test_unknown_dim_sets_the_batch_of_the_step_as_of_the_memory():
    # A None batch placed with unknown_dim=N is predicted as the same graph with a static N:
    # op times counted batch 1 while tensors counted N (a 0.67 ms step for 17.1 ms).
    def graph(batch):
        g = tf.Graph()
        with g.as_default():
            x = tf.compat.v1.placeholder(tf.float32, [batch, 1024], name="x")
            w = tf.compat.v1.get_variable("w", [1024, 1024])
            tf.reduce_sum(tf.matmul(tf.matmul(x, w), w), name="y")
        return g

    static = tf_autoplace.autoplace(graph(2048), cluster="k80x2", placer="single")
    free = tf_autoplace.autoplace(graph(None), cluster="k80x2", placer="single",
                                  unknown_dim=2048)
    assert free.step_time_s == pytest.approx(static.step_time_s, rel=1e-9)
    assert free.ops_with_unknown_shapes > 0 == static.ops_with_unknown_shapes

    # An image batch: its other dimensions were lost too (counted unknown_dim long each: 35
    # GB at batch 256, "does not fit"), and so were the sizes its gradients read from Shape
    # ops (they cost nothing). The None graph has a few more shape ops than the static one.
    def convolution(batch):
        g = tf.Graph()
        with g.as_default():
            x = tf.compat.v1.placeholder(tf.float32, [batch, 64, 64, 3], name="x")
            k = tf.compat.v1.get_variable("k", [3, 3, 3, 8])
            loss = tf.reduce_mean(tf.nn.conv2d(x, k, 1, "SAME"))
            tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        return g

    static = tf_autoplace.autoplace(convolution(64), cluster="k80x2", placer="single")
    free = tf_autoplace.autoplace(convolution(None), cluster="k80x2", placer="single",
                                  unknown_dim=64)
    assert free.devices[0].peak_memory_bytes == pytest.approx(
        static.devices[0].peak_memory_bytes, rel=1e-3)
    assert free.step_time_s == pytest.approx(static.step_time_s, rel=0.1)  # (+ shape ops)


def test_every_default_on_this_machine_places_a_tiny_graph():
    # The local cluster of a CPU-only machine is one CPU, of a one-GPU machine one GPU beside
    # its host: the learned placer refused both ("a policy needs >= 2 devices"), and spent
    # minutes of policy updates on a 3-op graph where a few placements are all there is.
    g = tf.Graph()
    with g.as_default():
        b = tf.square(tf.constant([1.0, 2.0], name="a"), name="b")
        tf.identity(b, name="c")
    report = tf_autoplace.autoplace(g)  # the default placer on the local cluster
    assert report.placer == DEFAULT_PLACER
    assert all(op.device for op in g.get_operations())
    learned = tf_autoplace.autoplace(g, placer="placeto")
    assert all(op.device for op in g.get_operations())
    assert any(note.startswith("placeto:") and "(no search)" in note
               for note in learned.notes), learned.notes


def test_a_function_places_with_the_profile_of_its_graph(tmp_path):
    # The README profiles a TF2 function with profile_ops(Workload.from_function(...)) and
    # places "with it through cost_profile=", which was a ConfigError for a function.
    from google.protobuf import text_format

    from tf_autoplace import tf2
    from tf_autoplace.hw.profiler import profile_ops
    from tf_autoplace.hw.runner import RunConfig
    from tf_autoplace.hw.workload import Workload

    w = tf.Variable(tf.ones((16, 16)), name="w")

    @tf.function(input_signature=[tf.TensorSpec([8, 16], tf.float32)])
    def step(x):
        loss = tf.reduce_sum(tf.nn.relu(tf.matmul(x, w)))
        w.assign_sub(0.01 * tf.ones_like(w))
        return loss

    x = tf.ones((8, 16))
    profile = profile_ops(Workload.from_function(step, x), kinds=("CPU",), partners=False,
                          config=RunConfig(steps=1, warmup_steps=1, trace_steps=2))
    path = tmp_path / "step.pbtxt"
    path.write_text(text_format.MessageToString(profile))
    placed = tf_autoplace.autoplace(step, cluster="local", placer="m_etf", cost_profile=path,
                                    progress=False)
    notes = " | ".join(placed.report.notes)
    assert "the profiled CPU op times were scaled by" in notes, notes
    assert "Grappler's analytical estimates" not in notes  # every op measured
    # The function's own variable-initialising ops are in its profile (as not run in the
    # step), not in the graph placed: nothing to say about them.
    assert "ops of the cost profile are not in this graph" not in notes, notes
    assert float(placed(x)) == pytest.approx(float(tf.reduce_sum(tf.nn.relu(
        tf.matmul(x, w + 0.01)))))  # the placed step runs (w moved once more)
    # The same through autoplace_function; measure_steps stays for graphs.
    _, report = tf2.autoplace_function(step, cluster="local", placer="m_etf",
                                       cost_profile=path)
    assert report.assignment == placed.report.assignment
    with pytest.raises(tf_autoplace.ConfigError, match="measure_steps is for graphs"):
        tf_autoplace.autoplace(step, cluster="local", cost_profile=path, measure_steps=15)
    with pytest.raises(tf_autoplace.ConfigError, match="measure_feeds feeds the steps"):
        tf_autoplace.autoplace(step, cluster="local", placer="m_etf", measure_feeds={})


def test_a_live_graph_is_not_imported_again_and_a_graph_def_is(monkeypatch):
    """The engine tells ingestion whether it reads a live tf.Graph (which TensorFlow checked
    op by op as it was made) or a GraphDef from elsewhere (which TensorFlow's importer checks
    before Grappler sees it); both place to the same devices."""
    from tf_autoplace.graph import ingest

    imported = []
    real = ingest.check_tensorflow_accepts
    monkeypatch.setattr(ingest, "check_tensorflow_accepts",
                        lambda graph_def: imported.append(1) or real(graph_def))
    graph = small_cnn().graph
    graph_def = graph.as_graph_def()
    from_def = tf_autoplace.autoplace(graph_def, cluster=CPU2, placer="m_etf", seed=0)
    assert imported == [1]
    live = tf_autoplace.autoplace(graph, cluster=CPU2, placer="m_etf", seed=0)
    assert imported == [1]
    assert live.assignment == from_def.assignment


def test_the_keras_and_tf2_doors_are_attributes_after_a_bare_import():
    # Asked of the package's own attribute hook, so an earlier import of the submodule (which
    # sets the attribute too) cannot make this pass: after ``import tf_autoplace`` alone,
    # ``tf_autoplace.keras.autoplace_model`` must work, whatever was used before it.
    import importlib
    for door in ("keras", "tf2"):
        assert tf_autoplace.__getattr__(door) is importlib.import_module(f"tf_autoplace.{door}")
    with pytest.raises(AttributeError, match="no attribute 'flagz'"):
        tf_autoplace.__getattr__("flagz")
    # Completion and help() list the lazy names, loaded or not.
    assert {"autoplace", "Cluster", "apply_placement", "keras", "tf2"} <= set(
        tf_autoplace.__dir__())


def test_a_core_group_wider_than_this_process_is_named_in_the_notes(monkeypatch):
    """Placing for the shipped ``cpu2`` spec (a 2-core host) in a process limited to one core
    (``taskset -c 0``, faked) predicts concurrency the graph would not get here: the notes
    say so. With the cores it describes, nothing is said."""
    from tf_autoplace.pipeline import engine

    graph_def = small_cnn().graph.as_graph_def()
    monkeypatch.setattr(engine, "inter_op_threads", lambda: 0)  # TensorFlow's default pool
    monkeypatch.setattr(engine, "available_cpus", lambda: 2)
    quiet = tf_autoplace.autoplace(graph_def, cluster="cpu2", placer="m_etf")
    assert not [n for n in quiet.notes if "core group" in n], quiet.notes
    monkeypatch.setattr(engine, "available_cpus", lambda: 1)
    noted = tf_autoplace.autoplace(graph_def, cluster="cpu2", placer="m_etf")
    said = [n for n in noted.notes if "core group" in n]
    assert len(said) == 1 and "runs 2 ops at once, but this process runs at most 1" in said[0]
    assert noted.assignment == quiet.assignment  # a note, nothing else


def test_a_function_or_keras_step_placed_with_analytic_costs_says_so_too():
    # The TF2 and Keras doors time ops with Grappler's estimates under a PinnedCostModel:
    # their reports printed the prediction without the note the graph door gives.
    from tf_autoplace import tf2

    step = tf.function(lambda x: tf.reduce_sum(tf.matmul(x, x)))
    x = tf.ones((16, 16))
    notes = {cluster: tf2.autoplace_function(step, x, cluster=cluster, placer="single",
                                             progress=False)[1].notes
             for cluster in ("local", "k80x2")}
    assert any("Grappler's analytical estimates" in n for n in notes["local"]), notes["local"]
    assert not any("analytical estimates" in n for n in notes["k80x2"])
    # ... with what a function takes: not measure_steps or verify (refused for it).
    advice = next(n for n in notes["local"] if "analytical estimates" in n)
    assert "time the placed function by calling it" in advice and "measure" not in advice


def test_one_device_verify_names_the_annotations_it_could_not_compare_and_analytic_costs_say_so():
    # A program pinned towers to /device:CPU:1, which its Sessions have (device_count) but
    # "local" in this process does not: verify had nothing to compare and said only that,
    # and the analytical CPU times (an order of magnitude from the real step here) were
    # printed as the prediction without a word.
    tg = small_cnn()
    with tg.graph.as_default(), tf.device("/device:CPU:1"):
        tf.constant(1.0, name="pinned")
    with tg.graph.as_default(), tf.device("/device:CPU:*"):  # a sharded Saver's: any CPU
        tf.constant(1.0, name="anywhere")
    report = tf_autoplace.autoplace(tg.graph, cluster="local", verify=15, placer="single",
                                    cache=False, progress=False)
    notes = " | ".join(report.notes)
    assert "annotations name devices it lacks (/device:CPU:1)" in notes
    assert "Grappler's analytical estimates" in notes
    # ... and it does not send the user to verify, which they asked for and which measures
    # nothing on one device.
    assert "measure them (measure_steps) or give a cost profile" in notes, notes
    # Shipped GPU specs correct the analytical model (their speeds); no such note there.
    other = tf_autoplace.autoplace(small_cnn().graph, cluster="k80x2", placer="single",
                                   cache=False, progress=False)
    assert not any("analytical estimates" in n for n in other.notes)


def test_function_errors_name_the_users_function_and_variable():
    # They named TensorFlow's own: "captured resource 'mul/ReadVariableOp/resource'" for the
    # variable my_weight, "__inference_train_step_10" for train_step; and a call with another
    # dtype was told "a ConcreteFunction does not check shapes".
    my_weight = tf.Variable(1.0, name="my_weight")

    @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
    def train_step(x):
        return x * my_weight

    gpus = Cluster.uniform([Device("/device:GPU:0", "GPU", 10**10)])
    with pytest.raises(tf_autoplace.ConfigError, match=r"^captured variable 'my_weight' lives "
                                                       r"on '.*CPU:0', which is not a device"):
        tf_autoplace.autoplace(train_step, cluster=gpus, placer="m_etf", progress=False)
    placed = tf_autoplace.autoplace(train_step, cluster="local", placer="m_etf", progress=False)
    with pytest.raises(tf_autoplace.ConfigError,
                       match=r"^train_step: argument 'x' was traced as \[2\] float32, and this "
                             r"call gives \[2\] int32: the placed graph takes the traced dtype "
                             r".*Cast the argument to float32"):
        placed(tf.constant([1, 2]))
    with pytest.raises(TypeError, match=r"^train_step\(\) takes 1 positional arguments"):
        placed(tf.constant([1.0, 2.0]), 3)


def test_an_address_space_limit_without_room_is_refused_before_the_graph_is_touched(
        monkeypatch):
    # With ulimit -v a few tens of MB above what the process mapped, placement aborted the
    # process (LLVM's bad_alloc), could not start threads or failed an import, untyped.
    import resource

    from tf_autoplace.core import limits

    monkeypatch.setattr(resource, "getrlimit", lambda which: (10**6, 10**6))  # below VmSize
    assert limits.address_space_left() < 0
    tg = small_cnn()
    before = [op.device for op in tg.graph.get_operations()]
    with pytest.raises(tf_autoplace.ConfigError, match=r"ulimit -v"):
        tf_autoplace.autoplace(tg.graph, cluster=CPU2, placer="m_etf", progress=False)
    assert [op.device for op in tg.graph.get_operations()] == before


def test_a_graph_placed_on_devices_this_machine_lacks_says_so():
    # Placed for 8 GPUs on a machine without them, a tf.Graph's report said nothing; the run
    # then failed with TensorFlow's "Cannot assign a device for operation ...".
    if len(tf.config.list_physical_devices("GPU")) >= 8:
        pytest.skip("this machine has the cluster's GPUs")
    tg = small_cnn()
    report = tf_autoplace.autoplace(tg.graph, cluster="k80x8", placer="m_etf", progress=False)
    (note,) = [n for n in report.notes if "the placement uses devices it lacks" in n]
    assert "/device:GPU:0" in note and "soft placement off" in note
    # A GraphDef is placed to run elsewhere, and a placement for this machine runs here.
    offline = tf_autoplace.autoplace(small_cnn().graph.as_graph_def(), cluster="k80x8",
                                     placer="m_etf", progress=False)
    here = tf_autoplace.autoplace(small_cnn().graph, cluster="local", progress=False)
    assert not any("devices it lacks" in n for n in offline.notes + here.notes)


def test_the_graph_of_a_tf_function_being_traced_is_refused_not_half_placed():
    # autoplace(get_default_graph()) inside a trace placed the ops traced so far and returned a
    # report; the ops traced after it had no device. The refusal leaves the trace as the
    # ConfigError it is, not as AutoGraph's StagingError.
    @tf.function
    def step(x):
        y = tf.matmul(x, x, name="first_matmul")
        tf_autoplace.autoplace(tf.compat.v1.get_default_graph(), cluster=CPU2, placer="m_etf",
                               progress=False)
        return tf.nn.relu(y)

    with pytest.raises(tf_autoplace.ConfigError, match="a tf.function's being traced"):
        step(tf.ones((2, 2)))


def test_the_outer_graph_of_a_trace_is_refused_from_inside_a_cond_branch():
    # Inside a tf.cond branch the default graph is the branch's: the outer function's graph,
    # half built, was placed.
    @tf.function
    def step(x):
        outer = tf.compat.v1.get_default_graph()
        y = tf.matmul(x, x, name="first_matmul")

        def branch():
            tf_autoplace.autoplace(outer, cluster=CPU2, placer="m_etf", progress=False)
            return y

        return tf.cond(x[0, 0] > 0, branch, lambda: y)

    with pytest.raises(tf_autoplace.ConfigError, match="a tf.function's being traced"):
        step(tf.ones((2, 2)))


def test_autograph_leaves_the_doors_unconverted_inside_a_trace(monkeypatch):
    # Called inside a tf.function, autoplace was converted by AutoGraph, and with it every
    # function of the package it calls (slowly, with "could not transform" warnings): a
    # converted function runs from a file AutoGraph generated, not from api.py.
    import tf_autoplace.api as api

    callers = []

    def place_graph(graph, options):
        callers.append(sys._getframe(1).f_code.co_filename)
        raise tf_autoplace.ConfigError("stop here")

    monkeypatch.setattr(api.engine, "place_graph", place_graph)

    @tf.function
    def step(x):
        tf_autoplace.autoplace(tf.Graph(), cluster=CPU2, placer="m_etf", progress=False)
        return x

    with pytest.raises(tf_autoplace.ConfigError, match="stop here"):
        step(tf.ones(()))
    assert callers == [api.__file__]
