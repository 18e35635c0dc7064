"""Kernel kinds from TF's registry, and from the shipped GPU snapshot where TF has no GPU
kernels (tensorflow-cpu, macOS, Linux aarch64)."""

import contextlib
import types

import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels as tf_kernels

import tf_autoplace
from tf_autoplace.graph import kernels
from tf_autoplace.testing import small_cnn


def _clear():
    kernels._registered.cache_clear()
    kernels.gpu_kernels_registered.cache_clear()


@contextlib.contextmanager
def _without_gpu_kernels():
    """This TensorFlow's registry without its GPU kernels, as a CPU-only build has it."""

    def without_gpu(registry):
        out = type(registry)()
        out.kernel.extend(k for k in registry.kernel if k.device_type != "GPU")
        return out

    fake = types.SimpleNamespace(
        get_all_registered_kernels=lambda: without_gpu(tf_kernels.get_all_registered_kernels()),
        get_registered_kernels_for_op=lambda op: without_gpu(
            tf_kernels.get_registered_kernels_for_op(op)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "tf_kernels", fake)
        _clear()
        try:
            yield
        finally:
            _clear()


@pytest.fixture
def cpu_only_tensorflow():
    with _without_gpu_kernels():
        yield


def _nodes():
    g = tf.Graph()
    with g.as_default():
        a = tf.compat.v1.placeholder(tf.float32, [2, 2], name="a")
        tf.matmul(a, a, name="float_matmul")
        i = tf.compat.v1.placeholder(tf.int32, [2, 2], name="i")
        tf.matmul(i, i, name="int_matmul")
        tf.strings.length(tf.constant(["x"]), name="string_length")
    return {n.name: n for n in g.as_graph_def().node}


def _gpu_constraints_of_this_tensorflow(op_type):
    """Each distinct type constraint set of op_type's GPU kernels (TF registers some kernels
    twice, differing only in host-memory arguments)."""
    distinct = {tuple(sorted((name, tuple(sorted(allowed)) if field == "type" else ())
                             for name, field, allowed in constraints))
                for device, constraints in kernels._registered(op_type) if device == "GPU"}
    return sorted(distinct)


def _attr_nodes():
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 2, 2, 4], name="x")
        tf.gather_nd(x, [[0, 1]], name="gather_nd")
        tf.nn.depth_to_space(x, 2, name="nhwc")
        tf.nn.depth_to_space(tf.transpose(x, [0, 3, 1, 2]), 2, data_format="NCHW", name="nchw")
    return {n.name: n for n in g.as_graph_def().node}


def test_constraints_on_string_attrs_are_compared_as_strings():
    # GatherNd's kernels constrain bad_indices_policy (a string) besides their types, the CPU
    # DepthToSpace data_format: read as types, no node met them, and a graph using tf.gather_nd
    # (or tf.sparse.from_dense, or a gradient of tf.tensor_scatter_nd_update) could not be
    # placed at all.
    nodes = _attr_nodes()
    assert kernels.kernel_kinds(nodes["gather_nd"]) == {"CPU", "GPU"}
    assert kernels.kernel_kinds(nodes["nhwc"]) == {"CPU", "GPU"}
    assert kernels.kernel_kinds(nodes["nchw"]) == {"GPU"}  # TF's CPU kernel is NHWC only
    with _without_gpu_kernels():  # the snapshot keeps types only: the rest is not checked
        assert kernels.kernel_kinds(nodes["gather_nd"]) == {"CPU", "GPU"}
        assert kernels.kernel_kinds(nodes["nchw"]) == {"GPU"}
    graph = tf.Graph()
    with graph.as_default():
        v = tf.compat.v1.get_variable("v", [8, 4])
        loss = tf.reduce_sum(tf.gather_nd(v, [[0, 1], [3, 2]]))
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    report = tf_autoplace.autoplace(graph, cluster="cpu2", placer="m_etf", seed=0,
                                    progress=False)
    assert report.assignment[graph.get_operation_by_name("GatherNd").name]


def test_the_shipped_snapshot_is_this_tensorflows_gpu_registry():
    if not kernels.gpu_kernels_registered():
        pytest.skip("this TensorFlow has no GPU kernels to compare the snapshot with")
    snapshot = kernels.gpu_snapshot()
    ops = (sorted(snapshot["kernels"]) if tf.__version__ == snapshot["tensorflow"]
           else ["MatMul", "Conv2D", "AddV2", "Relu", "ResourceApplyAdam", "Transpose"])
    for op in ops:
        shipped = sorted(tuple(sorted((name, tuple(allowed)) for name, allowed in kernel))
                         for kernel in snapshot["kernels"].get(op, []))
        assert shipped == _gpu_constraints_of_this_tensorflow(op), op


def test_a_tensorflow_without_gpu_kernels_reads_them_from_the_snapshot(cpu_only_tensorflow):
    assert not kernels.gpu_kernels_registered()
    nodes = _nodes()
    assert kernels.kernel_kinds(nodes["float_matmul"]) == {"CPU", "GPU"}
    assert kernels.kernel_kinds(nodes["int_matmul"]) == {"CPU"}  # the snapshot's constraints
    assert kernels.kernel_kinds(nodes["string_length"]) == {"CPU"}
    assert "TensorFlow 2." in kernels.gpu_kernel_note()


def test_a_gpu_cluster_planned_without_gpu_kernels_is_placed_as_with_them():
    if not kernels.gpu_kernels_registered():
        pytest.skip("this TensorFlow has no GPU kernels to compare with")
    real = tf_autoplace.autoplace(small_cnn().graph, cluster="k80x2", placer="m_etf", seed=0)
    assert not any("has no GPU kernels" in note for note in real.notes)
    with _without_gpu_kernels():
        planned = tf_autoplace.autoplace(small_cnn().graph, cluster="k80x2", placer="m_etf",
                                         seed=0)
        on_cpus = tf_autoplace.autoplace(small_cnn().graph, cluster="testdata/cpu2_independent.pbtxt", placer="m_etf",
                                         seed=0)
    assert planned.assignment == real.assignment
    assert any("has no GPU kernels" in note for note in planned.notes)
    assert not any("has no GPU kernels" in note for note in on_cpus.notes)  # no GPU to plan
