"""The profiler: a small training graph run and traced on a logical CPU gives a CostProfile that
survives the proto's text format and drives ProfileCostModel, whose problem then simulates the
graph TensorFlow executes."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.cost import AnalyticalCostModel
from tf_autoplace.cost.profile import ProfileCostModel
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph import ingest
from tf_autoplace.hw.cluster_profile import _speed
from tf_autoplace.hw.profiler import (_keeping_pins, body_ops, grappler_origin, kernels_run,
                                      op_times, parallelism, profile_ops, with_profiled_cores)
from tf_autoplace.hw.runner import RunConfig
from tf_autoplace.hw.trace import TracedStep, kernel_type
from tf_autoplace.hw.workload import Workload
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.proto import cost_profile_pb2
from tf_autoplace.testing.graphs import small_cnn

CONFIG = RunConfig(steps=1, warmup_steps=1, trace_steps=2)


@pytest.fixture(scope="module")
def cnn():
    tg = small_cnn()
    workload = Workload.from_graph(tg.graph, fetches=[tg.train_op], feeds=tg.feed)
    return tg, workload, profile_ops(workload, kinds=("CPU",), config=CONFIG,
                                     description="small_cnn")


def test_profile_round_trips_through_the_proto_and_drives_the_cost_model(cnn):
    tg, workload, profile = cnn
    text = text_format.MessageToString(profile)
    back = text_format.Parse(text, cost_profile_pb2.CostProfile())
    assert back == profile
    assert back.description.startswith("small_cnn; median of 2 traced steps")
    by_name = {op.name: op for op in back.op}
    names = [n.name for n in workload.graph_def.node]
    assert set(by_name) == set(names)  # every graph op, on the one kind profiled
    assert {op.device_kind for op in back.op} == {"CPU"}
    # Grappler fuses Conv2D, BiasAdd and Relu into one kernel named after the Relu: the Relu
    # carries the time, the Conv2D did not run as a kernel of its own.
    assert by_name["left/Relu"].compute_time_us > 0
    assert by_name["left/Conv2D"].compute_time_us == 0
    assert by_name["left/Conv2D"].op_type == "Conv2D"
    # An initializer is outside a step: it costs nothing in one.
    assert by_name["left/kernel/Assign"].compute_time_us == 0

    meta_graph = ingest.load_meta_graph(tg.graph)
    cluster = Cluster.from_file("testdata/cpu2_independent.pbtxt")
    model = ProfileCostModel.from_text(text, fallback=AnalyticalCostModel(meta_graph))
    problem, _ = build_problem(meta_graph, cluster, cost_model=model)
    i = problem.graph.names.index("left/Relu")
    # calibrated: scaled so that the simulated single-device step is the profiled run's
    scale = problem.time_scale["CPU"]
    assert 0 < scale < np.inf and set(problem.time_scale) == {"CPU"}
    expected = by_name["left/Relu"].compute_time_us * 1e-6 * scale
    np.testing.assert_allclose(problem.op_time[i], expected / np.array(
        [d.speed for d in cluster.devices]))
    single = problem.simulator.makespan(np.zeros(problem.graph.num_ops, np.int32))
    assert single == pytest.approx(back.run[0].step_time_us * 1e-6)
    # The profile carries the graph's output sizes: the same model at another batch size is
    # refused (its times would be another workload's).
    assert by_name["left/Relu"].output_bytes == problem.graph.output_bytes[i] > 0
    bigger = ingest.load_meta_graph(small_cnn(batch=32).graph)
    with pytest.raises(ConfigError, match="other tensor sizes"):
        build_problem(bigger, cluster, cost_model=ProfileCostModel.from_text(
            text, fallback=AnalyticalCostModel(bigger)))


def test_op_times_take_each_ops_span_and_sum_repeats():
    trace = TracedStep(devices=("/job:localhost/replica:0/task:0/device:CPU:0",
                                "/job:localhost/replica:0/task:0/device:GPU:0/stream:all"),
                       device=np.array([0, 0, 0, 1], np.int32),
                       names=("a", "loop/body", "loop/body", "b"),
                       start=np.array([0.0, 1.0, 3.0, 0.0]), end=np.array([0.5, 2.0, 3.5, 9.0]))
    cpu = op_times(trace, "CPU", ["a", "loop/body", "b"])
    assert cpu == pytest.approx({"a": 0.5, "loop/body": 1.5})  # two executions in one step
    assert op_times(trace, "GPU", ["a", "loop/body", "b"]) == pytest.approx({"b": 9.0})


def test_profiling_needs_a_traced_step(cnn):
    _, workload, _ = cnn
    with pytest.raises(ConfigError, match="trace_steps >= 1, got 0"):
        profile_ops(workload, config=RunConfig(steps=1, trace_steps=0))


@pytest.mark.parametrize("node, origin", [
    ("attention/ArithmeticOptimizer/FoldTransposeIntoMatMul_MatMul_12", "attention/MatMul_12"),
    ("ArithmeticOptimizer/AddOpsRewrite_add_1", "add_1"),
    ("a/ArithmeticOptimizer/NoUnderscore", "a/ArithmeticOptimizer/NoUnderscore"),
    ("a/MyArithmeticOptimizer/Stage_op", "a/MyArithmeticOptimizer/Stage_op"),
    ("plain/MatMul", "plain/MatMul"),
])
def test_grappler_origin(node, origin):
    assert grappler_origin(node) == origin


def test_a_node_grappler_renamed_is_timed_as_the_op_it_came_from():
    trace = TracedStep(devices=("/job:localhost/replica:0/task:0/device:CPU:0",),
                       device=np.zeros(2, np.int32),
                       names=("att/ArithmeticOptimizer/FoldTransposeIntoMatMul_MatMul", "x:0"),
                       start=np.array([0.0, 1.0]), end=np.array([2.0, 1.5]),
                       kernels=("_MklBatchMatMulV2", "Relu"))
    assert op_times(trace, "CPU", ["att/MatMul", "x"]) == pytest.approx({"att/MatMul": 2.0,
                                                                         "x": 0.5})
    assert kernels_run(trace, ["att/MatMul", "x"]) == {"att/MatMul": "_MklBatchMatMulV2",
                                                       "x": "Relu"}


def test_kernel_type_reads_the_timeline_label():
    assert kernel_type("g/MaxPoolGrad = _MklNativeMaxPoolGrad(a, b, c)") == "_MklNativeMaxPoolGrad"
    assert kernel_type("no label") == ""


def _profile_with_run(times_us, step_us):
    profile = cost_profile_pb2.CostProfile()
    for k, t in enumerate(times_us):
        profile.op.add(name=f"op{k}", device_kind="CPU", compute_time_us=t)
    profile.op.add(name="gpu_op", device_kind="GPU", compute_time_us=1e6)
    profile.run.add(device_kind="CPU", step_time_us=10 * step_us, traced_step_time_us=step_us)
    return profile


@pytest.mark.parametrize("times_us, step_us, ran, cores", [
    ([300, 300], 400, 1.5, 2),  # half way rounds up
    ([300, 300], 500, 1.2, 1),
    ([300, 300], 900, 600 / 900, 1),  # less than one op at once: at least one core
    ([3000, 3000], 1000, 6.0, 2),  # no more than the host's cores
])
def test_core_groups_get_the_parallelism_of_the_profiled_run(times_us, step_us, ran, cores):
    profile = _profile_with_run(times_us, step_us)
    assert parallelism(profile) == pytest.approx(ran)
    host = Cluster.local(num_logical_cpus=2)
    host = dataclasses.replace(host, core_groups=((host.core_groups[0][0], 2),))
    cluster, got = with_profiled_cores(host, profile)
    assert got == pytest.approx(ran)
    assert cluster.core_groups == ((host.core_groups[0][0], cores),)
    no_run = cost_profile_pb2.CostProfile(op=profile.op)
    assert parallelism(no_run) is None
    assert with_profiled_cores(host, no_run) == (host, None)


def test_a_profiled_problem_simulates_the_graph_tensorflow_executes(cnn):
    tg, _, profile = cnn
    meta_graph = ingest.load_meta_graph(tg.graph)
    cluster = Cluster.local(num_logical_cpus=2)
    analytical = AnalyticalCostModel(meta_graph)
    model = ProfileCostModel.from_proto(profile, fallback=analytical)
    problem, _ = build_problem(meta_graph, cluster, cost_model=model)
    plain, _ = build_problem(meta_graph, cluster, cost_model=analytical)
    assert plain.executed is None and plain.partner is None  # estimates: the graph as written
    graph = problem.graph
    assert problem.sim_graph is problem.executed
    did_not_run = {op.name for op in profile.op if op.did_not_run}
    gone = [graph.index(name) for name in did_not_run]
    # Ops that did not run have no edges left, and the rest read only from ops that ran.
    sim = problem.sim_graph
    touched = set(sim.edge_src.tolist()) | set(sim.edge_dst.tolist()) | set(
        sim.ctrl_src.tolist()) | set(sim.ctrl_dst.tolist())
    assert not touched & set(gone)
    # Every op on its own device in turn: fewer transfers on the executed graph.
    alternate = (np.arange(graph.num_ops) % 2).astype(np.int32)[graph.colocation]
    assert (problem.simulator.run(alternate).num_transfers
            < plain.simulator.run(alternate).num_transfers)
    if any(op.partner for op in profile.op):
        grad = graph.index("gradients/right_pool/MaxPool_grad/MaxPoolGrad")
        assert problem.partner[grad] == graph.index("right_pool/MaxPool")


def test_the_runs_step_is_the_median_over_interleaved_sessions(cnn, monkeypatch):
    from tf_autoplace.hw import profiler
    from tf_autoplace.hw.runner import Measurement

    _, workload, profile = cnn
    real_interleaved, calls = profiler.run_interleaved, []

    def run_interleaved(workload, assignments, config):
        measured = real_interleaved(workload, assignments, config)
        calls.append((len(assignments), config.trace_steps))
        steps = (0.030, 0.001, 0.002, 0.003, 0.004)  # a slow Session, then faster ones
        return [Measurement(step_times_s=np.full(3, step), traces=m.traces, devices=m.devices)
                for step, m in zip(steps, measured)]

    monkeypatch.setattr(profiler, "run_interleaved", run_interleaved)
    again = profile_ops(workload, kinds=("CPU",), config=CONFIG, partners=False)
    assert calls == [(profiler.STEP_SESSIONS, 0)] and profiler.STEP_SESSIONS == 5  # untraced
    assert again.run[0].step_time_us == pytest.approx(3000.0)  # the median, not the first
    assert "median of 5 interleaved sessions" in again.description




def test_the_nodes_of_a_loop_body_count_for_the_loop_once_where_they_overlap():
    # A functional While runs as nodes under its name; the While itself is not in the trace.
    cpu = "/job:localhost/replica:0/task:0/device:CPU:0"
    trace = TracedStep(devices=(cpu,), device=np.zeros(5, np.int32),
                       names=("x", "rnn/while/body/_1/add", "rnn/while/body/_1/mul",
                              "rnn/while/next_iteration/_3", "_SOURCE"),
                       start=np.array([0.0, 1.0, 1.5, 3.0, 0.0]),
                       end=np.array([0.5, 2.0, 2.5, 3.5, 9.0]))
    names = ["x", "rnn/while"]
    times = op_times(trace, "CPU", names, bodies=frozenset({"rnn/while"}))
    assert times == pytest.approx({"x": 0.5, "rnn/while": 2.0})  # [1, 2.5] and [3, 3.5]
    assert op_times(trace, "CPU", names) == pytest.approx({"x": 0.5})  # as before: none
    graph_def = tf.compat.v1.GraphDef()
    graph_def.node.add(name="rnn/while", op="StatelessWhile")
    graph_def.node.add(name="rnn/while/x", op="Identity")
    graph_def.node.add(name="f", op="StatefulPartitionedCall")
    assert body_ops(graph_def) == {"rnn/while", "f"}


def test_ops_that_call_python_are_profiled_on_the_clients_cpu_when_told():
    # On a cluster of tasks, a py_func run on another task than the client's fails ("Could not
    # find callback"): each task's turn of a cluster profile keeps it on the target's CPU.
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.py_func(lambda a: a * 2, [tf.ones((2,))], tf.float32, name="double")
        tf.identity(x, name="out")
    workload = Workload(graph_def=graph.as_graph_def(), fetches=("out",))
    everywhere = {node.name: "/job:w/task:1/device:CPU:0" for node in workload.graph_def.node}
    home = "/job:w/task:0/device:CPU:0"
    kept = _keeping_pins(workload, everywhere, home)
    assert kept["double"] == home
    assert {name: d for name, d in kept.items() if name != "double"} == {
        name: d for name, d in everywhere.items() if name != "double"}
    assert _keeping_pins(workload, everywhere) == everywhere  # one process: no pin


@pytest.mark.parametrize("source", ["from_generator", "map_py_function"])
def test_the_iterator_of_a_pipeline_that_calls_python_is_read_on_the_clients_cpu(source):
    # The iterator stayed on the client's CPU, but its IteratorGetNext, which runs the
    # pipeline's functions (the generator's PyFunc) where it is placed, went to the task whose
    # turn it was: "Could not find callback with key=pyfunc_... [[IteratorGetNext]]".
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        if source == "from_generator":
            data = tf.data.Dataset.from_generator(
                lambda: iter([np.ones(4, np.float32)]),
                output_signature=tf.TensorSpec((4,), tf.float32))
        else:
            data = tf.data.Dataset.from_tensors(tf.ones((4,))).map(
                lambda t: tf.py_function(lambda a: a * 2, [t], tf.float32))
        x = v1.data.make_one_shot_iterator(data).get_next(name="next")
        x.set_shape((4,))
        tf.reduce_sum(x * 3.0, name="out")
    workload = Workload(graph_def=graph.as_graph_def(), fetches=("out",))
    names = [node.name for node in workload.graph_def.node]
    assert "next" in names and "OneShotIterator" in names
    everywhere = {name: "/job:w/task:1/device:CPU:0" for name in names}
    home = "/job:w/task:0/device:CPU:0"
    kept = _keeping_pins(workload, everywhere, home)
    assert kept["OneShotIterator"] == kept["next"] == home
    assert kept["out"] == everywhere["out"]  # reads the element, not the iterator
    graph_ops = ingest.to_opgraph(ingest.load_meta_graph(workload.graph_def))
    assert _keeping_pins(workload, everywhere, home, graph_ops) == kept
    assert _keeping_pins(workload, everywhere) == everywhere  # one process: no pin


def test_a_tasks_speed_counts_only_the_ops_both_tasks_timed():
    def profile(**times_us):
        out = cost_profile_pb2.CostProfile()
        for name, t in times_us.items():
            out.op.add(name=name, device_kind="CPU", compute_time_us=t)
        return out
    # The reference (target) task also timed the py_func, which the other task never ran.
    reference, other = profile(a=10.0, b=30.0, py=500.0), profile(a=20.0, b=60.0)
    assert _speed(reference, other) == pytest.approx(0.5)
    assert _speed(reference, reference) == 1.0
    assert _speed(reference, profile(c=5.0)) is None
