"""Grappler's analytical costs of one node per distinct context equal the whole graph's.

``grappler.measure_costs`` costs a small graph holding one node of every distinct context
(op, attrs, input and output properties) with stand-in inputs; ``distinct=False`` costs the
whole graph, the reference. Both must give every node the same time, on graphs that exercise
each kind of input: values known to static inference, plain tensors, resource handles,
reference variables, partly known shapes (a placeholder without a batch size), a v1 while
loop and functions of the graph's library.
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_autoplace import zoo
from tf_autoplace.graph import grappler, ingest
from tf_autoplace.testing import small_cnn, while_loop_graph

# The whole graph's times come from the ends of each op on a nanosecond timeline, so the same
# op can come out 1 ns apart at two places of the graph; the small graph gives every copy one
# of those values.
NANOSECOND = 1e-9


def _ref_variable_mlp() -> tf.Graph:
    """TF1: reference variables, a placeholder of unknown batch size, SGD."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 16], name="x")
        h = x
        for k in range(3):
            w = tf.compat.v1.Variable(tf.ones([16, 16]) * 0.01, name=f"w{k}",
                                      use_resource=False)
            h = tf.nn.relu(h @ w)
        loss = tf.reduce_mean(h)
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    return g


def _function_graph() -> tf.Graph:
    """A graph calling a function of its library twice."""
    @tf.function
    def block(x):
        return tf.nn.relu(x @ tf.ones([8, 8]))

    g = tf.Graph()
    with g.as_default():
        x = tf.ones([4, 8])
        tf.identity(block(block(x)), name="out")
    return g


GRAPHS = {
    "small_cnn": lambda: small_cnn().graph,
    "nmt": lambda: zoo.build("nmt", layers=2, length=4, batch=4, hidden=32, embedding_dim=32,
                             vocab=100).graph,
    "ref_variables": _ref_variable_mlp,
    "while_loop": while_loop_graph,
    "function": _function_graph,
}
DEVICES = {
    "GPU": grappler.device_properties("GPU", num_cores=13, frequency_mhz=875,
                                      memory_bandwidth_gbps=240.0, architecture="3.7"),
    "CPU": grappler.device_properties("CPU", num_cores=4, frequency_mhz=2000,
                                      memory_bandwidth_gbps=20.0),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("kind", sorted(DEVICES))
def test_distinct_contexts_give_the_whole_graphs_times(name, kind):
    meta_graph = ingest.load_meta_graph(GRAPHS[name]())
    whole = grappler.measure_costs(meta_graph, kind, DEVICES[kind], distinct=False)
    distinct = grappler.measure_costs(meta_graph, kind, DEVICES[kind])
    assert set(distinct) == set(whole)
    names = sorted(whole)
    np.testing.assert_allclose([distinct[n] for n in names], [whole[n] for n in names],
                               rtol=0, atol=NANOSECOND)


def test_a_repeated_graph_is_costed_on_a_few_nodes():
    """NMT unrolls the same cell: far fewer contexts than nodes, and every node's stands for
    it exactly (same op, and the node itself when it is the first of its context)."""
    meta_graph = ingest.load_meta_graph(GRAPHS["nmt"]())
    properties = grappler.output_properties(meta_graph)
    small, representative = grappler._distinct_ops(meta_graph, properties)
    nodes = {n.name: n for n in meta_graph.graph_def.node}
    assert set(representative) == set(nodes)
    assert len(set(representative.values())) < len(nodes) / 3
    assert len(small.graph_def.node) < len(nodes) / 2
    for name, rep in representative.items():
        assert nodes[rep].op == nodes[name].op
    costed = {n.name for n in small.graph_def.node}
    assert set(representative.values()) <= costed


def test_two_shapes_are_two_contexts():
    """The same op on inputs of other shapes is costed on its own (a context is not the op)."""
    g = tf.Graph()
    with g.as_default():
        a, b = tf.ones([64, 64]), tf.ones([256, 256])
        tf.identity(a @ a, name="small")
        tf.identity(b @ b, name="large")
    meta_graph = ingest.load_meta_graph(g)
    times = grappler.measure_costs(meta_graph, "CPU", DEVICES["CPU"])
    matmuls = sorted(n.name for n in meta_graph.graph_def.node if n.op == "MatMul")
    assert times[matmuls[0]] != times[matmuls[1]]
