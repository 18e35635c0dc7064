"""Buffer sharing (tf_autoplace.graph.buffers): the op-type rules against TensorFlow's op
registry, and what ingestion records for a small graph."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session

from tf_autoplace.graph import buffers, ingest


def _registered_ops():
    data = pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList())
    ops = op_def_pb2.OpList()
    ops.ParseFromString(data)
    return ops.op


def test_reference_updates_forward_exactly_the_ops_that_return_a_reference():
    # The prefix rule for reference-variable updates: an op of those families forwards its
    # input exactly when TF declares its output a reference (the variable it updated).
    checked = 0
    for op in _registered_ops():
        if not op.name.startswith(("Apply", "SparseApply", "Assign", "Scatter")):
            continue
        if not op.output_arg:
            continue  # resource updates return nothing
        checked += 1
        returns_ref = any(arg.is_ref for arg in op.output_arg)
        assert buffers.forwards_input(op.name) == returns_ref, op.name
    assert checked > 30


def test_every_forwarding_type_is_a_registered_op():
    names = {op.name for op in _registered_ops()}
    assert buffers.FORWARD_TYPES <= names
    assert buffers.VIEW_TYPES <= names


def test_output_aliases():
    assert buffers.output_aliases("ReadVariableOp", 1, [7]) == [buffers.ALIAS_VIEW]
    assert buffers.output_aliases("VariableV2", 1, []) == [buffers.ALIAS_VIEW]
    assert buffers.output_aliases("Reshape", 1, [3, 4]) == [3]
    assert buffers.output_aliases("Switch", 2, [5, 6]) == [5, 5]
    assert buffers.output_aliases("IdentityN", 3, [1, 2]) == [1, 2, buffers.ALIAS_NONE]
    assert buffers.output_aliases("MatMul", 1, [1, 2]) == [buffers.ALIAS_NONE]
    assert buffers.output_aliases("Snapshot", 1, [1]) == [buffers.ALIAS_NONE]  # copies
    assert buffers.output_aliases("Identity", 1, []) == [buffers.ALIAS_NONE]


def test_ingestion_records_which_outputs_share_a_buffer():
    graph = tf.Graph()
    with graph.as_default():
        v = tf.Variable(tf.zeros([4, 4]), name="v")
        x = tf.compat.v1.placeholder(tf.float32, [4, 4], name="x")
        read = v.read_value()
        y = tf.matmul(x, read, name="y")
        r = tf.reshape(y, [16], name="r")
        tf.identity(r, name="out")
    g = ingest.to_opgraph(ingest.load_meta_graph(graph))
    out_tensor = {g.names[op]: t for t, op in enumerate(g.tensor_op.tolist())}
    alias = g.tensor_alias
    assert alias[out_tensor["v"]] == buffers.ALIAS_VIEW
    (value,) = [name for name, t in zip(g.names, g.op_types) if t == "ReadVariableOp"
                and name.startswith("Read")]
    assert alias[out_tensor[value]] == buffers.ALIAS_VIEW
    assert read.op.type == "Identity" and alias[out_tensor[read.op.name]] == out_tensor[value]
    assert alias[out_tensor["y"]] == buffers.ALIAS_NONE
    assert alias[out_tensor["r"]] == out_tensor["y"]
    assert alias[out_tensor["out"]] == out_tensor["r"]
    assert np.all(alias[[out_tensor["x"]]] == buffers.ALIAS_NONE)


def _forwarded(make_output) -> bool:
    """Does the op ``make_output(a, b)`` builds write into the buffer of ``a`` (a tensor only
    it reads) in a traced TF step?"""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [64, 64], name="x")
        a = tf.multiply(x, 2.0, name="a")
        b = tf.multiply(x, 3.0, name="b")
        y = make_output(a, b)
        total = tf.reduce_sum(y)
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        metadata = tf.compat.v1.RunMetadata()
        session.run(total, {x: np.ones([64, 64], np.float32)},
                    options=tf.compat.v1.RunOptions(trace_level=3), run_metadata=metadata)
    nodes = {node.node_name: node for dev in metadata.step_stats.dev_stats
             for node in dev.node_stats}
    ptr = {(name, out.slot): out.tensor_description.allocation_description.ptr
           for name, node in nodes.items() for out in node.output}
    # The same address alone could be a released buffer given out again: the op must also
    # have allocated nothing of the output's size.
    allocated = [r.alloc_bytes for used in nodes[y.op.name].memory
                 for r in used.allocation_records if r.alloc_bytes > 0]
    return ptr[(y.op.name, y.value_index)] == ptr[("a", 0)] != 0 and 64 * 64 * 4 not in allocated


@pytest.mark.parametrize("op_type, make", [
    ("AddV2", lambda a, b: tf.raw_ops.AddV2(x=a, y=b)),
    ("Mul", lambda a, b: tf.raw_ops.Mul(x=a, y=b)),
    ("Relu", lambda a, b: tf.raw_ops.Relu(features=a)),
    ("ReluGrad", lambda a, b: tf.raw_ops.ReluGrad(gradients=a, features=b)),
    ("Tanh", lambda a, b: tf.raw_ops.Tanh(x=a)),
    ("BiasAdd", lambda a, b: tf.raw_ops.BiasAdd(value=a, bias=tf.ones([64]))),
    ("AddN", lambda a, b: tf.raw_ops.AddN(inputs=[a, b])),
    ("SelectV2", lambda a, b: tf.raw_ops.SelectV2(condition=tf.ones([64, 64], tf.bool), t=a,
                                                  e=b)),
])
def test_the_reusing_types_write_into_an_input_only_they_hold(op_type, make):
    output, inputs = buffers.reuse_inputs(op_type, 2)
    assert output == 0 and inputs[0] in (0, 1)
    assert _forwarded(make)


def test_the_cross_entropy_writes_its_gradient_into_the_logits():
    assert buffers.reuse_inputs("SparseSoftmaxCrossEntropyWithLogits", 2) == (1, (0,))
    assert _forwarded(lambda a, b: tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(
        features=a, labels=tf.zeros([64], tf.int32))[1])


def test_a_type_outside_the_list_allocates():
    assert buffers.reuse_inputs("Cast", 1) == (-1, ()) == buffers.reuse_inputs("MatMul", 2)
    assert not _forwarded(lambda a, b: tf.cast(tf.cast(a, tf.int32), tf.float32))
    assert buffers.reuse_inputs("AddN", 3) == (0, (0, 1, 2))
