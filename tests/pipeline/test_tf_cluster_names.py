"""Job and task names everywhere a device name is, placing on a TensorFlow cluster's tasks (no
server needed to place): the graph's existing annotations, kernels and colocation across tasks,
the rewritten graph, the report, the Chrome trace and the saved placement; a job or task the
cluster lacks is a ClusterSpecError naming it."""

import json

import numpy as np
import pytest
import tensorflow as tf

import tf_autoplace
from tf_autoplace.core.cluster import Cluster
from tf_autoplace.errors import ClusterSpecError
from tf_autoplace.outputs.timeline import chrome_trace, short_device_name
from tf_autoplace.testing.graphs import small_cnn

SPEC = {"ps": ["localhost:2222"], "worker": ["localhost:2223", "10.0.0.2:2222"]}
W1_GPU = "/job:worker/replica:0/task:1/device:GPU:0"


@pytest.fixture(scope="module")
def cluster():
    return Cluster.from_tf(SPEC, devices={"ps": "cpu2", "worker:1": "k80x2", "worker": "cpu2"})


def _graph_with_string_op():
    """A small training graph with an op that has no GPU kernel, colocated with a variable."""
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(0)
        x = tf.compat.v1.placeholder(tf.float32, [4, 8], name="x")
        w = tf.compat.v1.get_variable("w", [8, 8], use_resource=True)
        with tf.compat.v1.colocate_with(w.handle):
            tf.strings.as_string(tf.reduce_sum(w.read_value()), name="w_as_string")
        loss = tf.reduce_sum(tf.matmul(x, w), name="loss")
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
    return graph


def test_placing_on_tasks_writes_job_and_task_names_and_keeps_kernels_and_colocation(cluster):
    graph = _graph_with_string_op()
    report = tf_autoplace.autoplace(graph, cluster=cluster, placer="m_topo", progress=False)
    devices = {op.name: op.device for op in graph.get_operations()}
    assert set(devices.values()) <= set(cluster.names)
    assert all(tf.DeviceSpec.from_string(d).job in ("ps", "worker") for d in devices.values())
    # No GPU kernel for AsString: never on a GPU; and it stays with its variable's group.
    assert "GPU" not in devices["w_as_string"]
    assert devices["w_as_string"] == devices["w"]
    assert [d.name for d in report.devices] == list(cluster.names)
    saved = report.to_proto()
    assert {op.device for op in saved.op} <= set(cluster.names)
    again = tf_autoplace.apply_placement(_graph_with_string_op(), saved, cluster=cluster)
    assert again.assignment == report.assignment


def test_a_graph_annotated_for_another_cluster_is_refused_naming_op_and_task(cluster):
    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/job:ps/task:0"):
            tf.constant(1.0, name="fine")
        with tf.device("/job:ps/task:3"):
            tf.constant(2.0, name="elsewhere")
    with pytest.raises(ClusterSpecError, match="op 'elsewhere'.*task 3 of job 'ps'"):
        tf_autoplace.autoplace(graph, cluster=cluster, placer="single", progress=False)
    assert graph.get_operation_by_name("elsewhere").device == "/job:ps/task:3"  # untouched
    # A one-machine cluster replaces annotations, as it always did (the notes say so).
    report = tf_autoplace.autoplace(graph, cluster="cpu2", placer="single", progress=False)
    assert any("replaced 2 device annotation" in n for n in report.notes)


def test_a_saved_placement_on_an_unknown_task_is_a_cluster_spec_error(cluster):
    graph = small_cnn().graph
    report = tf_autoplace.autoplace(graph, cluster=cluster, placer="single", progress=False)
    saved = report.to_proto()
    for op in saved.op:
        op.device = "/job:worker/replica:0/task:7/device:CPU:0"
    with pytest.raises(ClusterSpecError, match="task 7 of job 'worker'"):
        tf_autoplace.apply_placement(small_cnn().graph, saved, cluster=cluster)


def test_the_trace_and_labels_name_the_task(cluster):
    graph = small_cnn().graph
    report = tf_autoplace.autoplace(graph.as_graph_def(), cluster=cluster, placer="random",
                                    progress=False)
    t = report.timeline
    events = chrome_trace(t.graph, t.cluster, t.placement, t.sim)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    labels = {e["pid"]: e["args"]["labels"] for e in events if e["name"] == "process_labels"}
    assert list(names.values()) == list(cluster.names)
    assert labels[0] == "task ps:0" and labels[cluster.num_devices - 1] == "task worker:1"
    transfers = {e["name"].rsplit(" -> ", 1)[1] for e in events if e.get("cat") == "Transfer"}
    assert transfers <= {short_device_name(n) for n in cluster.names}
    json.dumps(events)
    assert short_device_name(W1_GPU) == "worker:1/GPU:0"
    assert short_device_name("/job:localhost/replica:0/task:0/device:GPU:1") == "GPU:1"
    assert len({short_device_name(n) for n in cluster.names}) == cluster.num_devices
    assert "/job:worker/replica:0/task:1/device:GPU:0" in str(report)
    np.testing.assert_array_equal(t.placement, [cluster.index(report.assignment[n])
                                                for n in t.graph.names])


def test_measured_rewards_run_on_the_clusters_servers(cluster):
    import dataclasses

    from tf_autoplace.hw.workload import Workload
    from tf_autoplace.learning.measured import MeasuredEvaluator
    from tf_autoplace.pipeline.prepare import build_problem
    from tf_autoplace.graph import ingest

    tg = small_cnn()
    problem, _ = build_problem(ingest.load_meta_graph(tg.graph), cluster)
    workload = Workload(graph_def=tg.graph.as_graph_def(), fetches=(tg.train_op,))
    evaluator = MeasuredEvaluator(dataclasses.replace(problem, workload=workload))
    assert evaluator.config.target == cluster.target == "grpc://localhost:2223"


def test_moving_a_variable_off_the_task_its_annotation_names_is_said(cluster):
    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/job:ps/task:0"):
            w = tf.compat.v1.get_variable("w", [8], use_resource=True)
            tf.constant(1.0, name="c")
        # One client's work on both workers (in-graph): not a between-graph replica, whose
        # shared variables would stay on ps (tests/graph/test_pins.py).
        with tf.device("/job:worker/task:0"):
            total = tf.reduce_sum(w.read_value(), name="total")
        with tf.device("/job:worker/task:1"):
            tf.identity(total, name="copy")
    report = tf_autoplace.autoplace(graph, cluster=cluster, placer="single", progress=False)
    assert graph.get_operation_by_name("w").device.startswith("/job:worker")  # the target's
    moved = [n for n in report.notes if "variable(s) moved to another task" in n]
    assert len(moved) == 1 and "'w' from '/job:ps/task:0'" in moved[0], report.notes
    assert moved[0].startswith("1 variable(s)")  # the constant moved too, and is not one

    plain = tf.Graph()  # without annotations on a task: nothing to say
    with plain.as_default():
        tf.compat.v1.get_variable("w", [8], use_resource=True)
    report = tf_autoplace.autoplace(plain, cluster=cluster, placer="single", progress=False)
    assert not any("moved to another task" in n for n in report.notes)


def test_a_job_annotation_on_a_cluster_without_tasks_is_only_replaced():
    """On one process (``cpu2``: no tasks, a local Session) there are no servers and no other
    clients: a variable annotated for ``/job:ps`` is counted among the replaced annotations,
    without the note on between-graph replication."""
    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
                ps_tasks=1, worker_device="/job:worker/task:0")):
            w = tf.compat.v1.get_variable("w", [8], use_resource=True)
            tf.reduce_sum(w.read_value(), name="total")
    report = tf_autoplace.autoplace(graph, cluster="cpu2", placer="single", progress=False)
    assert graph.get_operation_by_name("w").device.startswith("/job:localhost")
    assert any("replaced" in n and "'/job:ps/task:0'" in n for n in report.notes), report.notes
    assert not any("moved to another task" in n for n in report.notes), report.notes
