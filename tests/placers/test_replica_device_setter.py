"""replica_device_setter: variables to the least-loaded parameter server by bytes, in graph order,
with what TF colocates with them; everything else on the worker; the same as TensorFlow's own
replica_device_setter with a greedy byte-size strategy on a real graph; and a start of auto's on
a cluster of tasks only."""

import numpy as np
import pytest
import tensorflow as tf

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.placers import AutoPlacer, ReplicaDeviceSetterPlacer, get_placer
from tf_autoplace.testing import problems

JOBS = {"ps": ["localhost:1", "localhost:2"], "worker": ["localhost:3", "localhost:4"]}
MB = 10**6


def _tf_cluster(jobs=JOBS, devices="cpu2"):
    return Cluster.from_tf(jobs, devices=devices)


def _graph():
    """Three variables (4, 3 and 2 MB) with a read each (colocated with it), a slot variable
    colocated with the first, and compute reading them."""
    types = ["VarHandleOp", "ReadVariableOp", "VarHandleOp", "ReadVariableOp", "VarHandleOp",
             "ReadVariableOp", "VarHandleOp", "MatMul", "MatMul", "Add"]
    persistent = [4 * MB, 0, 3 * MB, 0, 2 * MB, 0, 4 * MB, 0, 0, 0]
    colocation = [0, 0, 2, 2, 4, 4, 6, 7, 8, 9]
    colocation[6] = 0  # the slot variable lives with its variable
    edges = [(1, 7, 100), (3, 7, 100), (5, 8, 100), (7, 9, 100), (8, 9, 100)]
    return from_edges(10, edges, op_types=types, persistent_bytes=persistent,
                      colocation=colocation)


def test_variables_go_greedily_by_bytes_to_the_ps_tasks_and_the_rest_to_the_worker():
    cluster = _tf_cluster()
    problem = problems.problem(_graph(), cluster, gpu_s=1e-3, cpu_s=1e-3)
    devices = ReplicaDeviceSetterPlacer().place(problem).devices
    names = [cluster.names[d] for d in devices]
    ps0, ps1, worker0 = (cluster.names[cluster.index(f"/job:{t}/device:CPU:0")]
                         for t in ("ps/task:0", "ps/task:1", "worker/task:0"))
    # 4 MB -> ps:0 (both empty: the first); 3 MB -> ps:1; 2 MB -> ps:1 (3 < 4 MB), the slot
    # variable with its variable on ps:0 (it adds no load).
    assert names[:7] == [ps0, ps0, ps1, ps1, ps1, ps1, ps0]
    assert names[7:] == [worker0] * 3


def test_the_worker_device_is_the_target_task_the_client_runs_as():
    # Between-graph replication: worker 1's script says worker_device="/job:worker/task:1";
    # every worker's compute was put on worker:0 (worker 1's run took 1 step of 40).
    graph = _graph()
    for target, worker in (("localhost:4", "worker/task:1"), ("localhost:3", "worker/task:0"),
                           ("localhost:1", "worker/task:0")):  # (a ps target: the first)
        cluster = Cluster.from_tf(JOBS, devices="cpu2", target=f"grpc://{target}")
        problem = problems.problem(graph, cluster, gpu_s=1e-3, cpu_s=1e-3)
        names = [cluster.names[d] for d in ReplicaDeviceSetterPlacer().place(problem).devices]
        assert names[7:] == [cluster.names[cluster.index(f"/job:{worker}/device:CPU:0")]] * 3
        assert {n.split("/")[1] for n in names[:7]} == {"job:ps"}


def test_kernels_are_kept_within_the_task_and_clusters_without_ps_or_tasks():
    graph = _graph()
    kernels = np.ones((10, 2), bool)
    kernels[8] = [True, False]  # CPU only (kernel kinds are CPU, GPU)
    graph = from_edges(10, [(1, 7, 100), (3, 7, 100), (5, 8, 100), (7, 9, 100), (8, 9, 100)],
                       op_types=graph.op_types, persistent_bytes=graph.persistent_bytes,
                       colocation=graph.colocation, kernels=kernels)
    cluster = _tf_cluster({"ps": ["localhost:1"], "worker": ["localhost:3"]},
                          devices={"ps": "cpu2", "worker": "k80x2"})
    problem = problems.problem(graph, cluster, gpu_s=1e-3)
    devices = ReplicaDeviceSetterPlacer().place(problem).devices
    names = [cluster.names[d] for d in devices]
    assert names[7] == names[9] == "/job:worker/replica:0/task:0/device:GPU:0"
    assert names[8] == "/job:worker/replica:0/task:0/device:CPU:0"  # its task's CPU
    assert set(names[:7]) == {"/job:ps/replica:0/task:0/device:CPU:0"}

    # No ps job: TF's replica_device_setter sets no device; every op on the worker device.
    workers = _tf_cluster({"worker": ["localhost:3", "localhost:4"]})
    devices = ReplicaDeviceSetterPlacer().place(problems.problem(graph, workers, 1e-3)).devices
    assert set(devices.tolist()) == {0}
    # One machine: every op on the default device, as single places it.
    one = problems.cluster(2)
    problem = problems.problem(_graph(), one, gpu_s=1e-3)
    np.testing.assert_array_equal(ReplicaDeviceSetterPlacer().place(problem).devices,
                                  get_placer("single").place(problem).devices)


def test_it_matches_tensorflows_replica_device_setter_on_a_real_graph():
    from tf_autoplace.graph import ingest
    from tf_autoplace.pipeline.prepare import build_problem

    graph = tf.Graph()
    sizes = [(300, 200), (500, 100), (100, 100), (400, 300), (50, 50)]
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [8, 300], name="x")
        h = x
        made = []
        for k, (rows, cols) in enumerate(sizes):
            w = tf.compat.v1.get_variable(f"w{k}", [rows, cols], use_resource=True)
            made.append(w)
        h = tf.reduce_sum(tf.matmul(h, made[0]))
        for w in made[1:]:
            h += tf.reduce_sum(w)
        tf.compat.v1.train.AdamOptimizer(0.1).minimize(h, name="train")
    cluster = _tf_cluster()
    problem, _ = build_problem(ingest.load_meta_graph(graph), cluster)
    ours = ReplicaDeviceSetterPlacer().place(problem).devices

    # TensorFlow's own device function with GreedyLoadBalancingStrategy(byte_size_load_fn),
    # which tf.contrib.training had: the least-loaded ps task by bytes, the first on a tie.
    loads = [0, 0]

    def greedy(op):
        task = int(np.argmin(loads))
        shape = tf.TensorShape(op.get_attr("shape"))
        loads[task] += shape.num_elements() * op.get_attr("dtype").size
        return task

    theirs_graph = tf.Graph()
    with theirs_graph.as_default():
        setter = tf.compat.v1.train.replica_device_setter(
            cluster=JOBS, worker_device="/job:worker/task:0", ps_strategy=greedy)
        with tf.compat.v1.device(setter):
            x = tf.compat.v1.placeholder(tf.float32, [8, 300], name="x")
            made = [tf.compat.v1.get_variable(f"w{k}", [r, c], use_resource=True)
                    for k, (r, c) in enumerate(sizes)]
    theirs = {op.name: op.device for op in theirs_graph.get_operations()
              if op.type == "VarHandleOp"}
    for k in range(len(sizes)):
        i = problem.graph.index(f"w{k}")
        assert tf.DeviceSpec.from_string(theirs[f"w{k}"]).task == \
            cluster.task_of(int(ours[i])).index
        assert cluster.task_of(int(ours[i])).job == "ps"
    assert cluster.task_of(int(ours[problem.graph.index("x")])).name == "worker:0"


def test_auto_starts_from_it_on_a_cluster_of_tasks_only():
    graph = problems.random_dag(30, seed=1)
    tasks = problems.problem(graph, _tf_cluster(), gpu_s=1e-3, cpu_s=1e-3)
    placer = AutoPlacer(max_samples=50, learned=())
    placer.notes = []
    starts, _ = placer.starts(tasks, seed=0, max_samples=50, deadline=float("inf"))
    assert "replica_device_setter" in [label for label, _, _ in starts] or any(
        np.array_equal(d, ReplicaDeviceSetterPlacer().propose(tasks)) for _, d, _ in starts)
    one = problems.problem(graph, problems.cluster(2), gpu_s=1e-3)
    starts, _ = placer.starts(one, seed=0, max_samples=50, deadline=float("inf"))
    assert "replica_device_setter" not in [label for label, _, _ in starts]


@pytest.mark.parametrize("name", ["replica_device_setter"])
def test_it_is_registered(name):
    assert get_placer(name).name == name
