"""Ops that keep the device the program gave them (tf_autoplace.graph.pins): collective ops,
and ops a function body colocates with on a device of its own. Each graph is placed and then
trained in a Session on two CPU devices with soft placement off."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import collective_ops
from tensorflow.core.framework import graph_pb2

import tf_autoplace
from tf_autoplace.errors import ConfigError, InvalidGraphError
from tf_autoplace.graph import ingest
from tf_autoplace.graph.pins import (device_pins, pinned_groups, python_callers,
                                     replica_shared_state)

CPU = "/job:localhost/replica:0/task:0/device:CPU:"
CONFIG = dict(allow_soft_placement=False, device_count={"CPU": 2})


def towers_with_an_all_reduce():
    """Two towers, one per CPU, averaging their gradient with a collective all-reduce."""
    graph = tf.Graph()
    rng = np.random.default_rng(0)
    with graph.as_default():
        w = tf.compat.v1.get_variable("w", [4, 1],
                                      initializer=tf.compat.v1.constant_initializer(0.1))
        losses, grads = [], []
        for i in range(2):
            with tf.device(f"/device:CPU:{i}"):
                x = tf.constant(rng.normal(size=(8, 4)).astype(np.float32))
                y = tf.constant(rng.normal(size=(8, 1)).astype(np.float32))
                loss = tf.reduce_mean(tf.square(x @ w - y))
                (grad,) = tf.gradients(loss, [w])
                grads.append(collective_ops.all_reduce(grad, group_size=2, group_key=1,
                                                       instance_key=1, merge_op="Add",
                                                       final_op="Div"))
                losses.append(loss)
        with tf.device("/device:CPU:0"):
            loss = tf.add_n(losses, name="loss")
            train = tf.group(tf.compat.v1.assign_sub(w, 0.1 * grads[0]), grads[1])
        init = tf.compat.v1.global_variables_initializer()
    return graph, loss, train, init


def six_layers() -> list:
    """Six small layers of one variable, in the default graph: work for a placer to spread."""
    x = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
    w = tf.compat.v1.get_variable("w", [4, 4], initializer=tf.compat.v1.constant_initializer(0.1))
    return [tf.tanh(x @ w * float(i)) for i in range(6)]


def a_cond_colocated_with_an_op():
    """A v2 cond built under a device scope and ``colocate_with(anchor)``: its branches' ops
    carry ``loc:@anchor`` and the scope's device."""
    graph = tf.Graph()
    with graph.as_default():
        layers = six_layers()
        with tf.device("/device:CPU:0"):
            anchor = tf.identity(tf.add_n(layers), name="anchor")
            with tf.compat.v1.colocate_with(anchor):
                c = tf.cond(tf.reduce_sum(anchor) > 0, lambda: tf.ones([3, 4]) * 2.0,
                            lambda: tf.zeros([3, 4]))
        loss = tf.reduce_sum(anchor * c, name="loss")
        train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss)
        init = tf.compat.v1.global_variables_initializer()
    return graph, loss, train, init


def a_cond_whose_branch_colocates_with_an_op():
    """A cond whose branch's ops (only: not the cond) are colocated with an op of the graph,
    without a device: nothing is pinned, but TensorFlow inlines the branch and places those
    ops with the anchor, so the cond must go with it (as a cond that reads an iterator
    argument through an optional does)."""
    graph = tf.Graph()
    with graph.as_default():
        layers = six_layers()
        anchor = tf.identity(tf.add_n(layers[:3]), name="anchor")
        gate = tf.reduce_sum(tf.add_n(layers[3:]))

        def branch():
            with tf.compat.v1.colocate_with(anchor.op):
                return tf.ones([3, 4]) * 2.0

        c = tf.cond(gate > 0, branch, lambda: tf.zeros([3, 4]))
        loss = tf.reduce_sum(anchor * c, name="loss")
        train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss)
        init = tf.compat.v1.global_variables_initializer()
    return graph, loss, train, init


def test_a_cond_whose_branch_colocates_with_an_op_is_in_its_group():
    graph = a_cond_whose_branch_colocates_with_an_op()[0]
    opgraph = ingest.to_opgraph(ingest.load_meta_graph(graph))
    group = dict(zip(opgraph.names, opgraph.colocation.tolist()))
    assert group["cond"] == group["anchor"]


def a_mirrored_strategy_program():
    """TF1 MirroredStrategy on both CPUs, fed by ``make_dataset_iterator`` (a
    MultiDeviceIterator, whose replicas' functions call back to its device)."""
    graph = tf.Graph()
    xs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    with graph.as_default():
        strategy = tf.compat.v1.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            w = tf.compat.v1.get_variable("w", [4, 1],
                                          initializer=tf.compat.v1.constant_initializer(0.1))
            optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)

            def step(x):
                loss = tf.reduce_mean(tf.square(x @ w))
                with tf.control_dependencies([optimizer.minimize(loss)]):
                    return tf.identity(loss)

            iterator = strategy.make_dataset_iterator(
                tf.data.Dataset.from_tensor_slices(xs).batch(8).repeat())
            per_replica = strategy.extended.call_for_each_replica(
                step, args=(iterator.get_next(),))
            loss = strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)
        init = tf.group(tf.compat.v1.global_variables_initializer(), iterator.initializer)
        train = tf.no_op()
    return graph, loss, train, init


def losses(graph, loss, train, init):
    # A hang (collective members that wait for each other) fails the test instead of stopping it.
    options = tf.compat.v1.RunOptions(timeout_in_ms=60_000)
    with tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(**CONFIG)) as sess:
        sess.run(init)
        return [float(sess.run([loss, train], options=options)[0]) for _ in range(3)]


def test_collective_ops_are_pinned_to_their_devices():
    graph = towers_with_an_all_reduce()[0]
    pins = device_pins(graph.as_graph_def())
    reduces = sorted(op.name for op in graph.get_operations() if op.type == "CollectiveReduce")
    assert sorted(pins) == reduces
    assert sorted(device for device, _ in pins.values()) == ["/device:CPU:0", "/device:CPU:1"]


def test_an_op_a_function_body_colocates_with_is_pinned_to_the_bodys_device():
    graph = a_cond_colocated_with_an_op()[0]
    pins = device_pins(graph.as_graph_def())
    assert pins["anchor"][0] == "/device:CPU:0" and "function" in pins["anchor"][1]


def test_one_op_pinned_to_two_devices_is_an_invalid_graph():
    graph_def = a_cond_colocated_with_an_op()[0].as_graph_def()
    bodies = [f for f in graph_def.library.function
              if any(n.device for n in f.node_def)]
    node = next(n for n in bodies[0].node_def if n.device)
    node.device = CPU + "0"  # the same device written in full: still one pin
    assert device_pins(graph_def)["anchor"][0] in ("/device:CPU:0", CPU + "0")
    node.device = "/device:CPU:1"  # one branch's op now on CPU:1, the other's on CPU:0
    with pytest.raises(InvalidGraphError, match="'anchor' must be on"):
        device_pins(graph_def)


@pytest.mark.parametrize("build", [towers_with_an_all_reduce, a_cond_colocated_with_an_op,
                                   a_cond_whose_branch_colocates_with_an_op,
                                   a_mirrored_strategy_program])
@pytest.mark.parametrize("placer", ["m_etf", "metis", "single"])
def test_a_placed_graph_with_pinned_ops_trains_to_the_unplaced_losses(build, placer):
    check_placed_graph_trains(build, placer)


def test_auto_keeps_the_pins_through_its_search_and_its_single_device_answer():
    check_placed_graph_trains(towers_with_an_all_reduce, "auto")


def check_placed_graph_trains(build, placer):
    # m_etf and single put both collective members on CPU:0 (a hang), metis moved the anchor
    # away from its cond's branches ("Cannot colocate nodes") and a multi-device iterator
    # away from where its replicas look for it ("Attempted create an iterator on device").
    reference = losses(*build())
    graph, *ops = build()
    pinned = device_pins(graph.as_graph_def())
    report = tf_autoplace.autoplace(graph, cluster="cpu2", placer=placer, seed=0,
                                    progress=False, cache=False)
    for name, (device, _) in pinned.items():
        assert report.assignment[name] == CPU + device[-1]
    np.testing.assert_allclose(losses(graph, *ops), reference, rtol=1e-6)


def test_verify_measures_a_graph_with_collectives_with_their_members_apart():
    # Verification profiles the graph with every op on one device and fits the links on
    # placements moved from it: both once put the all-reduce's members on one device, and the
    # first step waited forever.
    import faulthandler

    graph, *ops = towers_with_an_all_reduce()
    reference = losses(*towers_with_an_all_reduce())
    faulthandler.dump_traceback_later(300, exit=True)  # a deadlock fails, not hangs, the run
    try:
        report = tf_autoplace.autoplace(graph, cluster=tf_autoplace.Cluster.local(
            num_logical_cpus=2), placer="m_etf", seed=0, progress=False, cache=False,
            verify=15)
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert report.verification is not None
    np.testing.assert_allclose(losses(graph, *ops), reference, rtol=1e-6)


def test_a_pin_to_a_device_the_cluster_lacks_is_a_config_error():
    graph = towers_with_an_all_reduce()[0]
    before = graph.as_graph_def().SerializeToString(deterministic=True)
    one_cpu = tf_autoplace.Cluster.local(num_logical_cpus=1)
    with pytest.raises(ConfigError, match="collective op.*give a cluster with that device"):
        tf_autoplace.autoplace(graph, cluster=one_cpu, placer="m_etf", progress=False,
                               cache=False)
    assert graph.as_graph_def().SerializeToString(deterministic=True) == before


def _python_calling_training_graph():
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        data = tf.data.Dataset.from_generator(  # a pipeline whose function calls Python
            lambda: iter(np.ones((8, 4), np.float32)),
            output_signature=tf.TensorSpec((4,), tf.float32)).batch(2)
        x = v1.data.make_one_shot_iterator(data).get_next()
        x = v1.py_func(lambda a: a * 2, [x], tf.float32, name="double")
        x.set_shape((2, 4))
        w = v1.get_variable("w", (4, 1))
        loss = tf.reduce_mean(tf.matmul(x, w), name="loss")
        v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    return graph.as_graph_def()


def test_ops_that_call_python_stay_in_the_clients_process_on_a_cluster_of_tasks():
    # A py_func or a pipeline from a generator placed on another task than the target's fails
    # at the first run (TensorFlow finds the Python callback only in the process that made it),
    # after autoplace had applied the placement without a word.
    graph_def = _python_calling_training_graph()
    callers = python_callers(graph_def)
    assert "double" in callers and "OneShotIterator" in callers
    assert "loss" not in callers and "w" not in callers
    cluster = tf_autoplace.Cluster.from_tf({"worker": ["localhost:1", "localhost:2"]},
                                           devices="cpu2", target="grpc://localhost:2")
    for seed in range(6):
        report = tf_autoplace.autoplace(graph_def, cluster=cluster, placer="random", seed=seed,
                                        progress=False)
        assert {report.assignment[n] for n in callers} == {
            "/job:worker/replica:0/task:1/device:CPU:0"}, seed
    # One process (no tasks): nothing to keep them from, so no pin.
    report = tf_autoplace.autoplace(graph_def, cluster="cpu2", placer="random", seed=1,
                                    progress=False)
    assert len({report.assignment[n] for n in report.assignment}) == 2


def test_a_pinned_ops_colocation_group_goes_with_it_where_placers_put_it():
    # The profiler pins the ops that call Python with pinned_groups: the iterator's
    # IteratorGetNext runs the generator wherever it is, so it stays in the client's process
    # too, as every placement keeps it (the iterator's colocation group moves whole).
    graph_def = _python_calling_training_graph()
    graph = ingest.to_opgraph(ingest.load_meta_graph(graph_def))
    home = "/job:worker/replica:0/task:1/device:CPU:0"
    kept = pinned_groups({name: home for name in python_callers(graph_def)}, graph)
    assert {"OneShotIterator", "IteratorGetNext", "double"} <= set(kept)
    assert "loss" not in kept and "w" not in kept and set(kept.values()) == {home}
    cluster = tf_autoplace.Cluster.from_tf({"worker": ["localhost:1", "localhost:2"]},
                                           devices="cpu2", target="grpc://localhost:2")
    for seed in range(3):
        report = tf_autoplace.autoplace(graph_def, cluster=cluster, placer="random", seed=seed,
                                        progress=False)
        assert {report.assignment[n] for n in kept} == {home}, seed
    # An op with a pin keeps it; the rest of its group takes the first pin's device; a pin of
    # an op the graph lacks is kept.
    two = pinned_groups({"IteratorGetNext": "/device:CPU:1", "OneShotIterator": "/device:CPU:0",
                         "elsewhere": "/device:CPU:0"}, graph)
    assert two["IteratorGetNext"] == "/device:CPU:1" and two["elsewhere"] == "/device:CPU:0"
    assert two["OneShotIterator"] == "/device:CPU:0"
    assert two["FlatMapDataset"] == two["IteratorToStringHandle"] == "/device:CPU:1"
    assert "loss" not in two


SPEC = {"ps": ["localhost:1"], "worker": ["localhost:2", "localhost:3"]}


def _replica_graph(task: int = 1, worker_device: str | None = None):
    """Worker ``task``'s graph of a between-graph replicated program."""
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default(), v1.device(v1.train.replica_device_setter(
            cluster=tf.train.ClusterSpec(SPEC),
            worker_device=(f"/job:worker/task:{task}" if worker_device is None
                           else worker_device or None))):
        x = tf.ones((2, 4))
        w = v1.get_variable("w", (4, 1), use_resource=True)
        step = v1.train.get_or_create_global_step()
        loss = tf.reduce_mean(tf.matmul(x, w), name="loss")
        v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    return graph


def test_the_shared_variables_of_a_between_graph_replica_are_found():
    graph_def = _replica_graph().as_graph_def()
    shared = replica_shared_state(graph_def, other_tasks=2)
    assert set(shared) == {"w", "global_step"} and set(shared.values()) == {"/job:ps/task:0"}
    assert replica_shared_state(graph_def, other_tasks=1) == {}  # the only worker: one client
    unannotated = graph_pb2.GraphDef()
    unannotated.CopyFrom(graph_def)
    for node in unannotated.node:
        node.device = ""
    assert replica_shared_state(unannotated, other_tasks=2) == {}
    # One client spreading its work over both workers itself (in-graph): its own variables.
    spread = graph_pb2.GraphDef()
    spread.CopyFrom(graph_def)
    next(n for n in spread.node if n.name == "loss").device = "/job:worker/task:0"
    assert replica_shared_state(spread, other_tasks=2) == {}

    # A setter without worker_device leaves the compute unannotated; an input made under
    # tf.device("/cpu:0") names no task: both are still one worker's replica.
    free = _replica_graph(worker_device="").as_graph_def()
    assert set(replica_shared_state(free, other_tasks=2)) == {"w", "global_step"}
    next(n for n in free.node if n.name == "loss").device = "/cpu:0"
    assert set(replica_shared_state(free, other_tasks=2)) == {"w", "global_step"}


def test_a_between_graph_replica_keeps_its_shared_variables_on_the_ps_task():
    # Placed, the variables went to each worker's own task: the chief initialized its copy and
    # the other worker waited forever for its own (MonitoredTrainingSession), without an error.
    graph_def = _replica_graph().as_graph_def()
    cluster = tf_autoplace.Cluster.from_tf(SPEC, devices="cpu2", target="grpc://localhost:3")
    ps = "/job:ps/replica:0/task:0/device:CPU:0"
    for seed in range(4):
        report = tf_autoplace.autoplace(graph_def, cluster=cluster, placer="random", seed=seed,
                                        progress=False)
        assert report.assignment["w"] == report.assignment["global_step"] == ps, seed
        assert any("kept on the parameter-server tasks" in n for n in report.notes)



def _sync_replicas_graph():
    """Worker 1's graph of a between-graph program training with SyncReplicasOptimizer: its
    token queue and gradient accumulators live on ps, beside the global step."""
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default(), v1.device(v1.train.replica_device_setter(
            cluster=tf.train.ClusterSpec(SPEC), worker_device="/job:worker/task:1")):
        x = tf.ones((2, 4))
        w = v1.get_variable("w", (4, 1), use_resource=True)
        step = v1.train.get_or_create_global_step()
        loss = tf.reduce_mean(tf.matmul(x, w), name="loss")
        sync = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1),
                                              replicas_to_aggregate=2, total_num_replicas=2)
        sync.minimize(loss, global_step=step)
        sync.get_chief_queue_runner()
    return graph


def test_a_between_graph_replica_keeps_its_queues_and_accumulators_on_the_ps_task():
    # Placed, SyncReplicasOptimizer's token queue went to each worker's own task: the chief
    # filled its copy and the other worker waited forever on its own, without an error.
    graph_def = _sync_replicas_graph().as_graph_def()
    ops = {node.name: node.op for node in graph_def.node}
    shared = replica_shared_state(graph_def, other_tasks=2)
    kinds = {ops[name] for name in shared}
    assert {"VarHandleOp", "FIFOQueueV2", "ResourceConditionalAccumulator"} <= kinds, kinds
    assert "sync_token_q" in shared and "loss" not in shared
    cluster = tf_autoplace.Cluster.from_tf(SPEC, devices="cpu2", target="grpc://localhost:3")
    ps = "/job:ps/replica:0/task:0/device:CPU:0"
    for seed in range(3):
        report = tf_autoplace.autoplace(graph_def, cluster=cluster, placer="random", seed=seed,
                                        progress=False)
        assert {report.assignment[name] for name in shared} == {ps}, seed
        assert any("holding shared state" in n for n in report.notes)


def test_a_shared_table_on_a_ps_with_a_gpu_stays_on_its_cpu():
    # The pin took the ps task's first GPU, where a MutableHashTable has no kernel: the graph
    # became infeasible, where TensorFlow puts the table on the task's CPU.
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default(), v1.device(v1.train.replica_device_setter(
            cluster=tf.train.ClusterSpec(SPEC), worker_device="/job:worker/task:1")):
        table = tf.lookup.experimental.MutableHashTable(tf.string, tf.int64, -1)
        w = v1.get_variable("w", (4, 1), use_resource=True)
        loss = tf.reduce_sum(tf.matmul(tf.ones((2, 4)), w) * tf.cast(
            table.lookup(tf.constant(["a"])), tf.float32), name="loss")
        v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    cluster = tf_autoplace.Cluster.from_tf(SPEC, devices={"ps": "k80x2", "worker": "cpu2"},
                                           target="grpc://localhost:3")
    report = tf_autoplace.autoplace(graph.as_graph_def(), cluster=cluster, placer="m_etf",
                                    progress=False)
    assert report.assignment["MutableHashTable"] == "/job:ps/replica:0/task:0/device:CPU:0"
    assert report.assignment["w"] == "/job:ps/replica:0/task:0/device:GPU:0"  # as TF would
