"""Peak memory per device read from TensorFlow's step stats (tf_autoplace.hw.memory): the
arithmetic on hand-made step stats, and a real traced step of a small graph on two logical CPUs
whose peaks are known by hand, which the simulator's memory model predicts too."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import step_stats_pb2

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph import ingest
from tf_autoplace.hw.memory import DeviceMemory, device_memory, measure_memory
from tf_autoplace.hw.runner import canonical_device
from tf_autoplace.hw.workload import Workload
from tf_autoplace.pipeline.prepare import build_problem

MIB = 1 << 20
DEV = "/job:localhost/replica:0/task:0/device:CPU:{}"


def _stats(devices) -> step_stats_pb2.StepStats:
    """devices: {index: [(node, [(micros, bytes), ...], persistent bytes)]}."""
    stats = step_stats_pb2.StepStats()
    for index, nodes in devices.items():
        dev = stats.dev_stats.add(device=DEV.format(index) if isinstance(index, int) else index)
        for name, records, persistent in nodes:
            node = dev.node_stats.add(node_name=name)
            node.memory_stats.persistent_memory_size = persistent
            if records:
                used = node.memory.add(allocator_name="cpu")
                for micros, nbytes in records:
                    used.allocation_records.add(alloc_micros=micros, alloc_bytes=nbytes)
    return stats


def test_transient_peak_sums_what_is_live_at_once_per_device():
    stats = _stats({
        0: [("a", [(10, 100), (30, -100)], 8),        # 100 bytes over [10, 30)
            ("b", [(20, 50), (25, 7), (26, -7), (40, -50)], 0),  # a temporary 7 inside
            ("c", [(30, 60), (31, -60)], 4)],          # starts as a is released: not on top
        1: [("d", [(5, 1000), (6, -1000)], 0)],
        "/job:localhost/replica:0/task:0/device:GPU:0/stream:all": [("k", [(1, 10**9)], 0)],
    })
    got = device_memory(stats)
    assert set(got) == {"CPU:0", "CPU:1"}  # a stream lane is not a device
    assert got["CPU:0"] == DeviceMemory("CPU:0", transient_peak_bytes=157, kernel_bytes=12,
                                        outliving_bytes=0, num_allocations=4)
    assert got["CPU:1"].transient_peak_bytes == 1000


def test_allocations_left_open_at_the_end_of_the_step_are_not_transient():
    # e's first 512 is released; its second (a variable's new buffer) outlives the step, as
    # does f's value. A release with no allocation in the step (an old buffer) is ignored.
    stats = _stats({0: [("e", [(1, 512), (2, 64), (3, -512), (4, 512), (5, -64)], 0),
                        ("f", [(6, 32)], 0), ("g", [(7, -4096)], 0)]})
    got = device_memory(stats)["CPU:0"]
    assert got.outliving_bytes == 512 + 32
    assert got.transient_peak_bytes == 512 + 64
    assert got.num_allocations == 4


def test_measure_memory_checks_its_steps():
    with pytest.raises(ConfigError, match="steps must be an int >= 1"):
        measure_memory(None, steps=0)


def _two_device_graph():
    """CPU:0: a (1 MiB, random) and b = concat(a, v) (2 MiB, v a 1 MiB variable); CPU:1:
    c = concat(b, b) along columns (4 MiB), d = sum(c) (4 bytes) added to a variable u. No op
    here can take over an input's buffer, and nothing is folded."""
    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/device:CPU:0"):
            v = tf.Variable(tf.ones([512, 512]), name="v")
            a = tf.random.uniform([512, 512], name="a")
            b = tf.concat([a, v.read_value()], 0, name="b")
        with tf.device("/device:CPU:1"):
            c = tf.concat([b, b], 1, name="c")
            d = tf.reduce_sum(c, name="d")
            u = tf.Variable(0.0, name="u")
            tf.group(u.assign_add(d), name="train")
        tf.compat.v1.global_variables_initializer()
    return graph


def test_peaks_read_from_a_real_run_metadata_on_two_logical_cpus():
    graph = _two_device_graph()
    workload = Workload.from_graph(graph, fetches=["train"])
    steps = measure_memory(workload, steps=2)
    assert len(steps) == 2
    for memory in steps:
        assert set(memory) == {"CPU:0", "CPU:1"}
        # CPU:0 runs b with a and b live (3 MiB); b is handed to CPU:1 by reference and
        # released there after c: it is still CPU:0's allocation. CPU:1: c, then d while c
        # is live. v's value is the variable's buffer; u is updated in place.
        assert memory["CPU:0"].transient_peak_bytes == 3 * MIB
        assert memory["CPU:1"].transient_peak_bytes == 4 * MIB + 4
        assert memory["CPU:0"].outliving_bytes == memory["CPU:1"].outliving_bytes == 0
        assert 0 < memory["CPU:0"].kernel_bytes < 64  # a's shape and b's axis, as constants

    # The simulator's memory model predicts the same peaks for the step's ops (the graph
    # pruned to what "train" runs: the initializers are not part of a step), up to the
    # constants, which it counts as tensors and TensorFlow as kernel memory.
    step_graph = tf.compat.v1.graph_util.extract_sub_graph(graph.as_graph_def(), ["train"])
    problem, _ = build_problem(ingest.load_meta_graph(step_graph),
                               Cluster.local(num_logical_cpus=2))
    g = problem.graph
    placement = np.array([int(canonical_device(n.device)[-1]) for n in step_graph.node])
    assert [n.name for n in step_graph.node] == list(g.names)
    result = problem.simulator.run(placement)
    variables = np.bincount(placement, weights=g.persistent_bytes, minlength=2)
    np.testing.assert_array_equal(variables, [MIB, 4])
    transient = result.peak_memory - variables
    measured = [steps[0]["CPU:0"].transient_peak_bytes, steps[0]["CPU:1"].transient_peak_bytes]
    assert (transient >= measured).all() and (transient - measured < 64).all()
