"""Measured step times of a placed graph come back in the report (text, JSON, proto, Chrome
trace), and a graph that cannot be timed here is left exactly as it was."""

import math

import numpy as np
import pytest
import tensorflow as tf

import tf_autoplace
from tf_autoplace.errors import ConfigError, MeasurementError
from tf_autoplace.hw.runner import RunConfig, canonical_device, run, run_interleaved
from tf_autoplace.hw.workload import Workload
from tf_autoplace.outputs import timeline
from tf_autoplace.testing.graphs import small_cnn

CPU2 = "testdata/cpu2_independent.pbtxt"


def _devices(graph):
    return {op.name: op.device for op in graph.get_operations()}


def test_measured_step_times_come_back_in_the_report():
    tg = small_cnn()
    report = tf_autoplace.autoplace(tg.graph, cluster=CPU2, placer="m_etf",
                                    measure_steps=15, measure_feeds=tg.feed)
    assert report.measure_steps == 15
    assert report.measured_step_time_s > 0 and report.measured_baseline_step_time_s > 0
    low, high = report.measured_step_interval_s
    assert low <= report.measured_step_time_s <= high
    assert all(load >= 0 for load in report.measure_load)
    assert report.measured_speedup == pytest.approx(
        report.measured_baseline_step_time_s / report.measured_step_time_s)
    assert "measured step time" in str(report)
    proto = report.to_proto()
    assert proto.measure_steps == 15
    assert (proto.measured_step_low_s, proto.measured_step_high_s) == (low, high)
    assert proto.measured_step_time_s == report.measured_step_time_s
    assert report.to_dict()["measured_baseline_step_time_s"] == \
        report.measured_baseline_step_time_s
    # The placement was written after measuring, and it used both devices.
    assert {canonical_device(d) for d in _devices(tg.graph).values()} == {"CPU:0", "CPU:1"}
    t = report.timeline
    trace = timeline.chrome_trace(t.graph, t.cluster, t.placement, t.sim, t.measured)
    lanes = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert "measured /job:localhost/replica:0/task:0/device:CPU:1" in lanes
    measured = [e for e in trace["traceEvents"] if e.get("cat") == "Measured"]
    assert "left/Relu" in {e["name"] for e in measured}  # the fused convolution
    assert min(e["pid"] for e in measured) >= t.cluster.num_devices  # beside, not on top


def test_a_report_without_measurement_says_nan():
    tg = small_cnn()
    report = tf_autoplace.autoplace(tg.graph, cluster=CPU2, placer="m_etf")
    assert report.measure_steps == 0 and math.isnan(report.measured_step_time_s)
    assert "measured" not in str(report)


def test_a_cluster_this_machine_lacks_leaves_the_graph_untouched():
    tg = small_cnn()
    before = _devices(tg.graph)
    with pytest.raises(ConfigError, match="this machine does not have"):
        tf_autoplace.autoplace(tg.graph, cluster="testdata/k80x2.pbtxt", placer="m_etf",
                               measure_steps=15, measure_feeds=tg.feed)
    assert _devices(tg.graph) == before


def test_bad_measure_steps_are_config_errors():
    tg = small_cnn()
    with pytest.raises(ConfigError, match="-1"):
        tf_autoplace.autoplace(tg.graph, cluster=CPU2, placer="m_etf", measure_steps=-1)
    with pytest.raises(ConfigError, match="at least 15 steps"):
        tf_autoplace.autoplace(tg.graph, cluster=CPU2, placer="m_etf", measure_steps=3)


def test_workload_finds_the_train_op_and_makes_up_feeds():
    tg = small_cnn()
    workload = Workload.from_graph(tg.graph)
    assert workload.fetches == ("train",)
    assert workload.init[0] == "init" and "left/kernel/Assign" in workload.init
    assert workload.feeds["images:0"].shape == (8, 16, 16, 3)
    assert workload.feeds["labels:0"].dtype == np.int32 and not workload.feeds["labels:0"].any()
    m = run(workload, None, RunConfig(steps=2, warmup_steps=1, trace_steps=1))
    assert m.step_times_s.shape == (2,) and m.step_time_s > 0
    assert "left/Relu" in m.traces[0].names


@pytest.mark.parametrize("feeds, message", [
    # Each raised TensorFlow's or numpy's own error (ValueError, TypeError, NotImplementedError)
    # once the measurement ran, not a ConfigError.
    ({"images": np.full((8, 16, 16, 3), "a")}, "dtype <U1, which placeholder 'images' .float32"),
    ({"images": np.array([[object()]] * 8, dtype=object)}, "dtype object, which placeholder"),
    ({"images:3": np.zeros((8, 16, 16, 3), np.float32)}, "placeholder 'images' has one output"),
    ({"nowhere:0": np.zeros(3)}, "'nowhere:0' names no op of the graph"),
    ({7: np.zeros(3)}, "keys are tensor names"),
    ({"images": "symbolic"}, "given a symbolic"),
])
def test_bad_feeds_are_config_errors_before_anything_runs(feeds, message):
    tg = small_cnn()
    if isinstance(feeds.get("images"), str):  # the marker: a symbolic tensor of this graph
        with tg.graph.as_default():
            feeds = {"images": tf.zeros((8, 16, 16, 3))}
    with pytest.raises(ConfigError, match=message):
        Workload.from_graph(tg.graph, feeds=feeds)
    # A tensor that is not a placeholder, fed a value of another shape: TF's ValueError when
    # the session is made, as a ConfigError.
    loss = next(op.name for op in tg.graph.get_operations() if op.type == "Mean")
    workload = Workload.from_graph(tg.graph, feeds={f"{loss}:0": np.zeros((3, 3), np.float32)})
    with pytest.raises(ConfigError, match="feeds or fetches do not fit the graph: Cannot "
                                          "feed value of shape"):
        run(workload, None, RunConfig(steps=1, warmup_steps=1))


def test_interleaved_runs_time_each_placement():
    tg = small_cnn()
    workload = Workload.from_graph(tg.graph, feeds=tg.feed)
    names = [op.name for op in tg.graph.get_operations()]
    on = [{n: f"/device:CPU:{k}" for n in names} for k in (0, 1)]
    a, b = run_interleaved(workload, on, RunConfig(steps=2, warmup_steps=1, trace_steps=1))
    assert a.step_times_s.shape == b.step_times_s.shape == (2,)
    trace = b.traces[0]
    ran_on = {canonical_device(trace.devices[d]) for d, name in zip(trace.device.tolist(),
                                                                    trace.names) if name in names}
    assert ran_on == {"CPU:1"}  # the graph's ops; feeds and fetches pass through CPU:0


def test_workload_of_a_tf_function_runs_in_a_session():
    v = tf.Variable(tf.ones([4, 4]), name="w")

    @tf.function
    def step(x):
        v.assign_sub(0.1 * tf.matmul(x, v))
        return tf.reduce_sum(v)

    workload = Workload.from_function(step, tf.ones([4, 4]))
    assert workload.init and workload.feeds
    m = run(workload, None, RunConfig(steps=1, warmup_steps=1))
    assert m.step_time_s > 0
    assert float(v.numpy().sum()) == 16.0  # the eager variable is not touched


def _tf1_inputs_graph():
    """A TF1 step that reads a lookup table, an initializable iterator and a queue fed by a
    queue runner (whose close op is a sink), with no train op collection."""
    g = tf.Graph()
    with g.as_default():
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(["a", "b"]),
                                                tf.constant([1, 2], tf.int64)), -1)
        ids = table.lookup(tf.constant(["a", "b", "c"]))
        iterator = tf.compat.v1.data.make_initializable_iterator(
            tf.data.Dataset.from_tensors(tf.ones([3])).repeat())
        queue = tf.queue.FIFOQueue(8, tf.float32, shapes=[[3]])
        enqueue = queue.enqueue(tf.ones([3]))
        tf.compat.v1.train.add_queue_runner(tf.compat.v1.train.QueueRunner(queue, [enqueue]))
        w = tf.compat.v1.get_variable("w", [3], initializer=tf.compat.v1.ones_initializer())
        loss = tf.reduce_sum(w * (iterator.get_next() + tf.cast(ids, tf.float32)
                                  + queue.dequeue()))
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="step")
        tf.compat.v1.global_variables_initializer()
        tf.compat.v1.tables_initializer()
    return g


def test_a_tf1_step_gets_its_tables_and_iterators_initialized_and_keeps_its_queue_open():
    # verify and measure_steps time the graph's own step: its tables and iterators must be
    # initialized first (TF: "Table not initialized"), and a queue runner's close op is not
    # part of a step (fetched, it closed the queue the step reads: "Queue is closed").
    workload = Workload.from_graph(_tf1_inputs_graph())
    ops = {n.name: n.op for n in workload.graph_def.node}
    assert "init" in workload.init and "MakeIterator" in {ops[i] for i in workload.init}
    assert any(ops[i] == "LookupTableImportV2" or i == "init_all_tables" for i in workload.init)
    assert not any(ops[f.split(":")[0]].startswith("QueueClose") for f in workload.fetches)
    assignment = {name: "/device:CPU:0" for name in ops}  # (iterator ops say "CPU:*")
    m = run(workload, assignment, RunConfig(steps=2, warmup_steps=1))
    assert m.step_time_s > 0


def test_a_strategys_multi_device_iterator_is_initialized_once_not_at_every_step():
    # A TF1 MirroredStrategy over two CPUs reads a MultiDeviceIterator: its initializer (and
    # the group iterator.initializer makes of it, and the per-device datasets made from its
    # incarnation) were taken for sinks of the step, so every measured step initialized it
    # again: "Invalid incarnation id. Provided: 1; Expected: 2" under verify.
    from tf_autoplace.hw.workload import _fan_out

    g = tf.Graph()
    with g.as_default():
        strategy = tf.compat.v1.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            w = tf.Variable(tf.ones([4, 4]))
        iterator = strategy.make_dataset_iterator(
            tf.data.Dataset.from_tensor_slices(np.ones([16, 4], np.float32)).repeat().batch(4))
        per_replica = strategy.run(lambda x: tf.reduce_sum(x @ w), args=(iterator.get_next(),))
        strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        tf.compat.v1.global_variables_initializer()
        tf.group(iterator.initializer, name="inputs_init")
    workload = Workload.from_graph(g)
    ops = {n.name: n.op for n in workload.graph_def.node}
    assert "MultiDeviceIteratorInit" in {ops[i] for i in workload.init}
    fetched = {f.split(":")[0] for f in workload.fetches}
    assert not fetched & _fan_out(workload.graph_def, workload.init), fetched
    assert "inputs_init" not in fetched


def test_a_table_is_initialized_without_tables_initializer_and_no_restore_runs():
    # A program that leaves tables_initializer() to its MonitoredTrainingSession: TF 2.x's
    # KeyValueTensorInitializer imports the keys (LookupTableImportV2), which the init missed
    # ("Table not initialized"); a Saver's restore of a MutableHashTable is an import too, of
    # what it reads from a checkpoint, and not an initializer.
    g = tf.Graph()
    with g.as_default():
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(["a", "b"], tf.constant([0, 1], tf.int64)), 0)
        tf.lookup.experimental.MutableHashTable(tf.string, tf.int64, -1)
        emb = tf.compat.v1.get_variable("emb", [2, 3],
                                        initializer=tf.compat.v1.ones_initializer())
        loss = tf.reduce_sum(tf.gather(emb, table.lookup(tf.constant(["a", "b"]))))
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        tf.compat.v1.global_variables_initializer()
        tf.compat.v1.train.Saver()
    for source in (g, g.as_graph_def()):  # the collection, or the op itself
        workload = Workload.from_graph(source)
        assert "key_value_init/LookupTableImportV2" in workload.init
        assert not any(name.startswith("save/") for name in workload.init)
    m = run(workload, {n.name: "/device:CPU:0" for n in workload.graph_def.node},
            RunConfig(steps=1, warmup_steps=1))
    assert m.step_time_s > 0


def test_a_graph_measured_by_autoplace_runs_the_step_of_its_train_op_collection():
    # The engine made the workload from the graph's MetaGraphDef, which has no collections:
    # a hand-written update in the train_op collection (no Apply* op) was passed over for
    # every sink, and an evaluation iterator among them ran out after three steps.
    g = tf.Graph()
    with g.as_default():
        w = tf.compat.v1.get_variable("w", [3], initializer=tf.compat.v1.ones_initializer())
        grad = tf.gradients(tf.reduce_sum(w * w), w)[0]
        step = tf.compat.v1.assign_sub(w, 0.1 * grad, name="my_step")
        g.add_to_collection("train_op", step.op)
        tf.compat.v1.data.make_one_shot_iterator(tf.data.Dataset.range(3)).get_next()
        tf.compat.v1.global_variables_initializer()
    report = tf_autoplace.autoplace(g, cluster=CPU2, placer="m_topo", measure_steps=15,
                                    progress=False)
    assert report.measured_step_time_s > 0


def test_a_step_that_needs_a_queue_runner_is_a_measurement_error_not_a_hang():
    # The train op alone dequeues from a queue only the queue runner's thread fills: run on
    # its own, its first step would wait forever.
    g = _tf1_inputs_graph()
    with pytest.raises(MeasurementError, match="dequeues from queue 'fifo_queue'.*queue runner"):
        Workload.from_graph(g, fetches=["step"])
    enqueue = [op.name for op in g.get_operations() if op.type == "QueueEnqueueV2"]
    assert Workload.from_graph(g, fetches=["step", *enqueue]).fetches  # fills it itself


def test_workload_errors_name_the_problem():
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        tf.reduce_sum(x, name="train")
    with pytest.raises(ConfigError, match="'x' has no fully known static shape"):
        Workload.from_graph(g)
    with pytest.raises(ConfigError, match="'nope' is not a node"):
        Workload.from_graph(g, fetches=["nope"], feeds={"x": np.zeros([2, 3], np.float32)})
    # A value the placeholder's shape rules out: named before anything runs (was TF's
    # ValueError at the first timed step).
    for bad in (np.zeros([2, 4], np.float32), np.zeros([3], np.float32)):
        with pytest.raises(ConfigError, match=r"'x:0' is given a value of shape .* takes \[-1, 3\]"):
            Workload.from_graph(g, feeds={"x": bad})
    assert Workload.from_graph(g, feeds={"x": np.zeros([7, 3], np.float32)}).feeds


@pytest.mark.parametrize("placed, same, load, want", [
    ((12.0, 11.8, 12.2), False, 0.5, ["ran slower than the single-device one beyond noise"]),
    ((8.0, 7.8, 8.2), False, 0.5, []),
    # Slower by median, within noise: the predicted speedup did not show (was not said).
    ((10.3, 9.9, 10.6), False, 0.5, ["ran no faster than the single-device one beyond noise"]),
    ((9.9, 9.7, 10.1), False, 0.5, ["ran no faster than the single-device one beyond noise"]),
    ((10.1, 9.9, 10.3), True, 0.5, ["the single-device one, timed once for both figures"]),
    ((8.0, 7.8, 8.2), False, 2.5, ["the machine was busy"]),
])
def test_the_notes_say_when_a_measurement_says_slower_nothing_or_little(monkeypatch, placed,
                                                                        same, load, want):
    # Made-up medians and intervals (ms) stand in for the protocol's timed rounds.
    from tf_autoplace.hw import measure as measure_module
    from tf_autoplace.hw.protocol import ProtocolResult, StepTimes

    asked = []

    def fake(workload, assignments, **kwargs):
        asked.append(sorted(assignments))
        figures = {"placed": placed, "baseline": (10.0, 9.8, 10.2)}
        return ProtocolResult(placements=tuple(
            StepTimes(name=n, times_s=np.full(15, f[0] / 1e3), median_s=f[0] / 1e3,
                      low_s=f[1] / 1e3, high_s=f[2] / 1e3) for n, f in figures.items()),
            steps=15, warmup_steps=3, load_before=load, load_after=load)

    monkeypatch.setattr(measure_module, "measure_placements", fake)
    tg = small_cnn()
    report = tf_autoplace.autoplace(tg.graph, cluster=CPU2,
                                    placer="single" if same else "m_etf")
    import dataclasses

    report = measure_module.measure(dataclasses.replace(report, timeline=None), None, steps=15)
    got = [n for n in report.notes if n.startswith("measured")]
    assert len(got) == len(want) and all(w in n for w, n in zip(want, got)), got
    # One graph is timed once: its speedup over itself is 1, not the noise of two timings.
    assert asked == [["placed"] if same else ["baseline", "placed"]]
    if same:
        assert report.measured_step_time_s == report.measured_baseline_step_time_s


def test_ctrl_c_ends_a_step_that_blocks_at_once():
    # A queue the init fills with one batch: the second step waits for a batch nothing makes.
    # The interrupt came out after TensorFlow's 10-minute timeout, as pybind11's RuntimeError
    # (or was lost); the step now runs on the session's thread and Ctrl-C cancels it.
    import _thread
    import signal
    import threading

    from tf_autoplace.hw.runner import PlacedSession

    g = tf.Graph()
    with g.as_default():
        q = tf.queue.FIFOQueue(4, tf.float32, shapes=[[2]])
        fill = q.enqueue(tf.ones([2]), name="fill")
        step = tf.reduce_sum(q.dequeue(), name="step")
    workload = Workload.from_graph(g, fetches=(step.op.name,), init=(fill.name,))
    session = PlacedSession(workload, {op.name: "/device:CPU:0" for op in g.get_operations()},
                            RunConfig())
    # Ctrl-C reaches a program whose SIGINT is at its default; pytest started in the
    # background by a shell without job control inherits it ignored, and then
    # ``interrupt_main`` does nothing.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert session.step() >= 0  # the one batch
        interrupt = threading.Timer(0.5, _thread.interrupt_main)  # as Ctrl-C would
        # (A guard, so that a regression fails instead of waiting for TF's timeout: closing
        # the session cancels the step with a MeasurementError, not a KeyboardInterrupt.)
        guard = threading.Timer(120, session.session.close)
        interrupt.start()
        guard.start()
        with pytest.raises(KeyboardInterrupt):
            session.step()
        interrupt.join()
        guard.cancel()
    finally:
        signal.signal(signal.SIGINT, previous)
        session.close()
    # Without Ctrl-C, TF's operation timeout ends it: the message says what ran out (TF's
    # says only "Deadline Exceeded"). (The step waits forever: any timeout fires.)
    session = PlacedSession(workload, {op.name: "/device:CPU:0" for op in g.get_operations()},
                            RunConfig(timeout_s=1))
    try:
        session.step()
        with pytest.raises(MeasurementError, match="no step ended within the 1 s operation "
                                                   "timeout here"):
            session.step()
    finally:
        session.close()


def test_an_optimizers_assign_of_a_variable_is_not_taken_for_its_initializer():
    # TF1 Adam updates beta1_power with an op named "Adam/Assign": taken for an initializer,
    # it ran before the variables were initialized and verification could not run the graph.
    g = tf.Graph()
    with g.as_default():
        w = tf.compat.v1.get_variable("w", [3, 1], use_resource=False)
        loss = tf.reduce_sum(tf.matmul(tf.ones([4, 3]), w) ** 2)
        tf.compat.v1.train.AdamOptimizer(0.1).minimize(loss)  # the step: "Adam"
        tf.compat.v1.global_variables_initializer()
    workload = Workload.from_graph(g)
    assert "Adam/Assign" in {op.name for op in g.get_operations()}
    assert "Adam/Assign" not in workload.init and "w/Assign" in workload.init
    assert run(workload, None, RunConfig(steps=2, warmup_steps=1)).step_times_s.shape == (2,)


def test_the_step_of_a_scaffold_graph_is_its_train_op_and_every_variable_is_initialized():
    # A MonitoredTrainingSession's graph after Scaffold.finalize: local_variables_initializer
    # made first takes the name "init" (its variables only), and the init, ready and summary
    # ops are sinks beside the train op. The measurement failed ("Could not find variable"),
    # or re-initialized every variable and wrote summaries at each measured step.
    g = tf.Graph()
    with g.as_default():
        local_init = tf.compat.v1.local_variables_initializer()
        x = tf.compat.v1.placeholder(tf.float32, [4, 3], name="x")
        w = tf.compat.v1.get_variable("w", [3, 1])
        loss = tf.reduce_mean(tf.matmul(x, w) ** 2)
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="sgd")
        tf.compat.v1.summary.scalar("loss", loss)
        tf.compat.v1.summary.merge_all(name="summaries")
        tf.compat.v1.train.Scaffold(local_init_op=local_init).finalize()  # (finalizes g too)
    assert local_init.name == "init"
    workload = Workload.from_graph(g)
    assert workload.fetches == ("sgd",)
    assert "w/Assign" in workload.init
    m = run(workload, None, RunConfig(steps=2, warmup_steps=1))
    assert m.step_times_s.shape == (2,)
    # A tf.Graph's own train_op collection names the step (its MetaGraphDef here has none).
    g = tf.Graph()
    with g.as_default():
        w = tf.compat.v1.get_variable("w", [3, 1])
        loss = tf.reduce_sum(w)
        w.assign_sub(0.1 * w)  # another sink
        tf.compat.v1.add_to_collection("train_op", loss.op)
    assert Workload.from_graph(g).fetches == (loss.op.name,)
