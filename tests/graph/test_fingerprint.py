"""The graph fingerprint: equal for the same graph built again (TF's name counters included),
different when structure, sizes, op types or constraints change."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tf_autoplace.graph import ingest
from tf_autoplace.graph.fingerprint import fingerprint, normalized_name
from tf_autoplace.graph.opgraph import from_edges

EDGES = [(0, 1, 100), (0, 2, 200), (1, 3, 50), (2, 3, 50)]
NAMES = ["input", "dense/MatMul", "dense_1/MatMul", "loss"]


def _graph(**overrides):
    edges = overrides.pop("edges", EDGES)
    args = dict(names=NAMES, op_types=["Placeholder", "MatMul", "MatMul", "Mean"])
    args.update(overrides)
    return from_edges(4, edges, **args)


@pytest.mark.parametrize("name,expected", [
    ("dense", "dense"), ("dense_1", "dense"), ("dense_12/MatMul_3", "dense/MatMul"),
    ("gradients/dense_2/MatMul_grad/MatMul_1", "gradients/dense/MatMul_grad/MatMul"),
    ("dense_1_1/MatMul", "dense/MatMul"), ("conv2d_1x1", "conv2d_1x1"), ("_3", ""),
    ("a_b_7/c", "a_b/c"), ("gradients/Mean_1_grad/Shape", "gradients/Mean_grad/Shape"),
    ("gradients_1/sub_2_grad_1/Neg", "gradients/sub_grad/Neg"), ("my_grad", "my_grad")])
def test_normalized_names_drop_tf_counters_only(name, expected):
    assert normalized_name(name) == expected


def test_same_graph_same_fingerprint_whatever_the_counters():
    base = fingerprint(_graph())
    assert len(base) == 64 and base == fingerprint(_graph())
    renamed = ["input_1", "dense_4/MatMul", "dense_5/MatMul", "loss_2"]
    assert fingerprint(_graph(names=renamed)) == base


def test_the_order_of_control_edges_does_not_count():
    forward = _graph(control=[(1, 3), (2, 3), (0, 3)])
    assert fingerprint(_graph(control=[(0, 3), (2, 3), (1, 3)])) == fingerprint(forward)
    assert fingerprint(_graph(control=[(1, 3), (2, 3)])) != fingerprint(forward)


def _grouped(first: str, second: str) -> tf.Graph:
    """Two constants in the scopes ``first`` and ``second`` and a step that waits for both."""
    g = tf.Graph()
    with g.as_default():
        with tf.name_scope(first):
            a = tf.constant(1.0, name="a")
        with tf.name_scope(second):
            b = tf.constant(2.0, name="b")
        with tf.control_dependencies([a, b]):
            tf.no_op(name="step")
    return g


def test_control_inputs_listed_in_another_order_by_the_counters_keep_the_fingerprint():
    # TF lists a node's control inputs sorted by name: "s/b" before "s_1/a" here, "s/a"
    # before "s_1/b" there, the same graph with the counters on other scopes.
    first, again = _grouped("s_1/", "s/"), _grouped("s/", "s_1/")
    step = lambda g: list(g.as_graph_def().node[-1].input)  # noqa: E731
    assert step(first) == ["^s/b", "^s_1/a"] and step(again) == ["^s/a", "^s_1/b"]
    opgraph = lambda g: ingest.to_opgraph(ingest.load_meta_graph(g))  # noqa: E731
    assert fingerprint(opgraph(first)) == fingerprint(opgraph(again))


@pytest.mark.parametrize("change", [
    dict(names=["input", "dense/MatMul", "other/MatMul", "loss"]),  # a renamed scope
    dict(op_types=["Placeholder", "MatMul", "BatchMatMul", "Mean"]),
    dict(edges=[(0, 1, 100), (0, 2, 201), (1, 3, 50), (2, 3, 50)]),  # a tensor's size
    dict(edges=[(0, 1, 100), (0, 2, 200), (1, 3, 50), (2, 3, 50), (1, 2, 10)]),  # an edge
    dict(control=[(1, 2)]),
    dict(colocation=[0, 0, 1, 2]),
    dict(persistent_bytes=[0, 4, 0, 0]),
    dict(kernels=np.array([[True, True], [True, False], [True, True], [True, True]])),
])
def test_what_a_placement_depends_on_changes_the_fingerprint(change):
    assert fingerprint(_graph(**change)) != fingerprint(_graph())


def test_unknown_shapes_and_back_edges_change_the_fingerprint():
    graph = _graph()
    assert fingerprint(dataclasses.replace(graph, shape_known=[True, False, True, True])) != \
        fingerprint(graph)
    assert fingerprint(dataclasses.replace(graph, n_back_edges=1)) != fingerprint(graph)


def _keras_graph(taken=(), units: int = 4, batch: int = 2):
    """A two-layer Keras MLP in a fresh graph where the names ``taken`` are already used, so TF
    counts the layers' scopes on (``dense_3``, ``dense_1_1``) as in a program that built
    other layers before."""
    import tf_keras

    g = tf.Graph()
    with g.as_default():
        for name in taken:
            g.unique_name(name)
        x = tf.compat.v1.placeholder(tf.float32, [batch, 3], name="x")
        h = tf_keras.layers.Dense(units, activation="relu")(x)
        tf.reduce_sum(tf_keras.layers.Dense(1)(h), name="loss")
    return g


def test_a_keras_model_built_again_after_others_keeps_its_fingerprint():
    first = _keras_graph()
    again = _keras_graph(taken=("dense", "dense_1", "dense_2"))
    renamed = {op.name for op in again.get_operations()} - {op.name for op in
                                                             first.get_operations()}
    assert len(renamed) > 10  # the layers' ops all carry other counters
    opgraph = lambda g: ingest.to_opgraph(ingest.load_meta_graph(g))  # noqa: E731
    assert fingerprint(opgraph(first)) == fingerprint(opgraph(again))
    assert fingerprint(opgraph(_keras_graph(units=5))) != fingerprint(opgraph(first))
    assert fingerprint(opgraph(_keras_graph(batch=3))) != fingerprint(opgraph(first))
