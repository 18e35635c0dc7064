"""Ingestion: every input form gives the same OpGraph; byte sizes, colocation, kernels, control
edges and while loops are read right; bad input is an InvalidGraphError naming the problem, and
a graph TensorFlow rejects never reaches Grappler (which may abort the process on one)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2, types_pb2
from tensorflow.core.protobuf import meta_graph_pb2

import tf_autoplace
from tf_autoplace.errors import InfeasiblePlacementError, InvalidGraphError
from tf_autoplace.graph import ingest
from tf_autoplace.graph.pins import python_callers
from tf_autoplace.testing import small_cnn, while_loop_graph

F32 = 4  # bytes per float32


def _opgraph(source, **kwargs):
    return ingest.to_opgraph(ingest.load_meta_graph(source), **kwargs)


def _by_name(opgraph, values):
    return dict(zip(opgraph.names, np.asarray(values).tolist()))


def _summary(g):
    """Everything ingestion decides, keyed by op names (independent of op numbering)."""
    n = g.names
    groups = {}
    for name, c in zip(n, g.colocation.tolist()):
        groups.setdefault(c, set()).add(name)
    return dict(
        ops=list(zip(n, g.op_types, g.persistent_bytes.tolist(), g.kernels.tolist(),
                     g.shape_known.tolist())),
        tensors=sorted(zip([n[i] for i in g.tensor_op], g.tensor_bytes.tolist())),
        edges=sorted(zip([n[i] for i in g.edge_src], [n[i] for i in g.edge_dst],
                         g.tensor_bytes[g.edge_tensor].tolist())),
        ctrl=sorted(zip([n[i] for i in g.ctrl_src], [n[i] for i in g.ctrl_dst])),
        colocation=sorted(sorted(s) for s in groups.values()),
        n_back_edges=g.n_back_edges)


def _assert_topological(g):
    order = g.topological_order()
    assert sorted(order.tolist()) == list(range(g.num_ops))
    position = np.empty(g.num_ops, dtype=int)
    position[order] = np.arange(g.num_ops)
    src = np.concatenate([g.edge_src, g.ctrl_src])
    dst = np.concatenate([g.edge_dst, g.ctrl_dst])
    assert (position[src] < position[dst]).all()


# ------------------------------------------------------------------------------ input forms
@pytest.fixture(scope="module")
def cnn():
    return small_cnn()


@pytest.mark.parametrize("form", ["graph_def", "meta_graph", "bytes", "graph_def.pb",
                                  "graph_def.pbtxt", "meta_graph.pb", "meta_graph.pbtxt"])
def test_every_input_form_gives_the_same_opgraph(cnn, form, tmp_path, write_proto):
    reference = _opgraph(cnn.graph)
    graph_def = cnn.graph.as_graph_def()
    meta_graph = tf.compat.v1.train.export_meta_graph(graph=cnn.graph, graph_def=graph_def)
    message = meta_graph if form.startswith("meta_graph") else graph_def
    if "." in form:
        path = write_proto(tmp_path / form, message, text=form.endswith(".pbtxt"))
        source = path
        read, was_meta = ingest.read_graph_file(path)
        assert was_meta == form.startswith("meta_graph")
        assert read.graph_def.node == graph_def.node
    elif form == "bytes":
        source = graph_def.SerializeToString()
    else:
        source = message
    before = message.SerializeToString()

    assert _summary(_opgraph(source)) == _summary(reference)
    assert message.SerializeToString() == before  # the caller's object is not modified
    assert reference.num_ops == len(graph_def.node)


# ------------------------------------------------------------------------------- byte sizes
def test_tiny_graph_sizes_edges_and_colocation(tiny_graph):
    g = _opgraph(tiny_graph)
    assert g.names == ("x", "zeros", "w", "w/IsInitialized/VarIsInitializedOp", "w/Assign",
                       "w/Read/ReadVariableOp", "y/ReadVariableOp", "y", "z")
    assert g.shape_known.all()
    out = _by_name(g, g.output_bytes)
    assert out["x"] == 8 * 16 * F32
    assert out["y"] == 8 * 4 * F32
    assert out["z"] == 8 * 16 * F32
    assert out["zeros"] == out["y/ReadVariableOp"] == 16 * 4 * F32
    assert out["w"] == 0  # a resource handle has no size
    persistent = _by_name(g, g.persistent_bytes)
    assert persistent == {name: (16 * 4 * F32 if name == "w" else 0) for name in g.names}

    edges = sorted(zip([g.names[i] for i in g.edge_src], [g.names[i] for i in g.edge_dst],
                       g.tensor_bytes[g.edge_tensor].tolist()))
    assert edges == [
        ("w", "w/Assign", 0), ("w", "w/IsInitialized/VarIsInitializedOp", 0),
        ("w", "w/Read/ReadVariableOp", 0), ("w", "y/ReadVariableOp", 0),
        ("x", "y", 8 * 16 * F32), ("x", "z", 8 * 16 * F32),
        ("y/ReadVariableOp", "y", 16 * 4 * F32), ("zeros", "w/Assign", 16 * 4 * F32),
    ]
    assert list(zip([g.names[i] for i in g.ctrl_src], [g.names[i] for i in g.ctrl_dst])) == [
        ("y", "z")]

    # The resource variable stays with every op that reads or assigns it, and with nothing else.
    summary = _summary(g)["colocation"]
    assert sorted(["w", "w/Assign", "w/IsInitialized/VarIsInitializedOp",
                   "w/Read/ReadVariableOp", "y/ReadVariableOp"]) in summary
    assert len(summary) == 5  # x, zeros, y, z alone
    _assert_topological(g)


def _unknown_batch_graph():
    """p: [?, 16] placeholder, y = p @ ones [16, 4], anything: a placeholder of unknown rank."""
    g = tf.Graph()
    with g.as_default():
        p = tf.compat.v1.placeholder(tf.float32, [None, 16], name="p")
        tf.matmul(p, tf.ones([16, 4], name="ones"), name="y")
        tf.compat.v1.placeholder(tf.float32, None, name="anything")  # unknown rank
    return g


def test_unknown_dimension_uses_unknown_dim():
    g = _unknown_batch_graph()
    small, big = _opgraph(g), _opgraph(g, unknown_dim=32)
    assert _by_name(small, small.shape_known) == {"p": False, "ones": True, "y": False,
                                                  "anything": False}
    assert _by_name(small, small.output_bytes) == {"p": 16 * F32, "ones": 64 * F32,
                                                   "y": 4 * F32, "anything": F32}
    assert _by_name(big, big.output_bytes) == {"p": 32 * 16 * F32, "ones": 64 * F32,
                                               "y": 32 * 4 * F32, "anything": F32}


# ------------------------------------------------------------------ colocation and kernels
def test_reference_variable_is_colocated_with_its_assign_and_read():
    g = tf.Graph()
    with g.as_default():
        v = tf.compat.v1.Variable(tf.zeros([3], name="init"), name="v", use_resource=False)
        tf.add(v, 1.0, name="plus")
    og = _opgraph(g)
    assert _by_name(og, og.persistent_bytes)["v"] == 3 * F32
    assert ["v", "v/Assign", "v/read"] in _summary(og)["colocation"]
    assert ["plus"] in _summary(og)["colocation"]


@pytest.mark.parametrize("second", ["/device:CPU:1", "/device:CPU:0", ""])
def test_a_loop_reading_variables_on_two_devices_is_not_one_group(second):
    """A functional While reading variables annotated with two devices (a tf.function's
    loop over variables that live apart): TF's placer does not colocate the loop with its
    resources, and one group of both devices could not be placed. With one device (or one
    unannotated), the loop and its variables are one group, as any resource reader; a read
    of the loop's resource output joins the variable it is."""
    g = tf.Graph()
    with g.as_default():
        with tf.device("/device:CPU:0"):
            a = tf.Variable(tf.ones([4, 4]), name="a")
        with tf.device(second):
            b = tf.Variable(tf.ones([4]), name="b")
        out = tf.while_loop(lambda i, h, r: i < 3,
                            lambda i, h, r: (i + 1, tf.tanh(h @ a + b), r),
                            (0, tf.ones([2, 4]), b.handle), name="loop")
        tf.identity(out[1], name="h")
        tf.raw_ops.ReadVariableOp(resource=out[2], dtype=tf.float32, name="read_b")
    og = _opgraph(g)
    loop = [name for name, op in zip(og.names, og.op_types) if op in ingest.WHILE_OPS]
    assert len(loop) == 1, og.op_types  # a functional loop (control flow v2)
    group = _by_name(og, og.colocation)
    if second == "/device:CPU:1":
        assert len({group["a"], group["b"], group[loop[0]]}) == 3
    else:
        assert group["a"] == group["b"] == group[loop[0]]
    assert group["read_b"] == group["b"]  # the loop passes b's handle through
    assert ingest._on_two_devices(["/CPU:0", "/job:localhost/device:CPU:1"])
    assert not ingest._on_two_devices(["/CPU:0", "/job:localhost/replica:0/device:cpu:0", ""])


def test_class_attr_and_colocate_with_are_honoured():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0, name="a")
        b = tf.constant(2.0, name="b")
        with tf.compat.v1.colocate_with(a):
            c = tf.add(a, b, name="c")
        with tf.compat.v1.colocate_with(c):
            tf.identity(b, name="d")  # joins a's group through c
        tf.identity(b, name="e")
    groups = _summary(_opgraph(g))["colocation"]
    assert groups == [["a", "c", "d"], ["b"], ["e"]]


@pytest.mark.parametrize("iterator", ["one_shot", "initializable"])
def test_a_tf_data_pipeline_and_its_iterator_are_one_group(iterator):
    g = tf.Graph()
    with g.as_default():
        ds = tf.data.Dataset.from_tensor_slices(tf.zeros([8])).map(lambda x: x + 1.0)
        ds = ds.batch(4).repeat()
        if iterator == "one_shot":  # joined to the pipeline by its _class only
            it = tf.compat.v1.data.make_one_shot_iterator(ds)
        else:  # joined through MakeIterator's variant and resource inputs
            it = tf.compat.v1.data.make_initializable_iterator(ds)
        tf.reduce_sum(it.get_next(), name="total")
    og = _opgraph(g)
    label = _by_name(og, og.colocation)
    pipeline = [name for name, op in zip(og.names, og.op_types)
                if "Dataset" in op or "Iterator" in op]
    assert {"TensorSliceDataset", "MapDataset", "RepeatDataset"} <= set(pipeline)
    assert len({label[name] for name in pipeline}) == 1
    assert label["total"] != label["TensorSliceDataset"]  # what reads the batch stays free


@pytest.mark.parametrize("feedable", [True, False])
def test_a_feedable_iterator_joins_every_iterator_it_could_be_fed(feedable):
    g = tf.Graph()
    with g.as_default():
        ds = tf.data.Dataset.from_tensor_slices(tf.zeros([8])).batch(4).repeat()
        other = tf.data.Dataset.from_tensor_slices(tf.ones([8])).batch(4).repeat()
        train = tf.compat.v1.data.make_one_shot_iterator(ds)
        valid = tf.compat.v1.data.make_initializable_iterator(other)
        tf.identity(train.string_handle(), name="train_handle")
        tf.identity(valid.string_handle(), name="valid_handle")
        if feedable:  # the program feeds one of the two handles above
            handle = tf.compat.v1.placeholder(tf.string, [], name="handle")
            it = tf.compat.v1.data.Iterator.from_string_handle(
                handle, tf.compat.v1.data.get_output_types(ds),
                tf.compat.v1.data.get_output_shapes(ds))
            tf.reduce_sum(it.get_next(), name="total")
    og = _opgraph(g)
    label = _by_name(og, og.colocation)
    iterators = [name for name, op in zip(og.names, og.op_types)
                 if op in ("OneShotIterator", "IteratorV2", "IteratorFromStringHandleV2")]
    assert len(iterators) == 2 + feedable
    assert len({label[name] for name in iterators}) == (1 if feedable else 2)
    if feedable:
        assert label["handle"] != label["OneShotIterator"]  # the fed string stays free


def test_kernel_kinds_come_from_the_kernel_registry():
    g = tf.Graph()
    with g.as_default():
        s = tf.strings.join([tf.constant("a", name="s1"), tf.constant("b", name="s2")], name="sj")
        f = tf.ones([2, 2], name="f")
        tf.matmul(f, f, name="mm_float")
        i = tf.ones([2, 2], tf.int32, name="i")
        tf.matmul(i, i, name="mm_int")
        del s
    og = _opgraph(g)
    kernels = {n: tuple(k) for n, k in zip(og.names, og.kernels.tolist())}
    assert og.kernel_kinds == ("CPU", "GPU")
    assert kernels["sj"] == (True, False)       # StringJoin: CPU only
    assert kernels["mm_float"] == (True, True)  # MatMul float: CPU and GPU
    assert kernels["mm_int"] == (True, False)   # MatMul int32: no GPU kernel


# ------------------------------------------------------------------------------ while loops
def test_v1_while_loop_back_edges_are_dropped_and_counted():
    g = _opgraph(while_loop_graph())
    assert {"Enter", "Merge", "Switch", "NextIteration", "Exit", "LoopCond"} <= set(g.op_types)
    assert g.n_back_edges == 2  # one NextIteration -> Merge per loop variable
    merges = [i for i, t in enumerate(g.op_types) if t == "Merge"]
    next_iterations = {i for i, t in enumerate(g.op_types) if t == "NextIteration"}
    assert not next_iterations & set(g.edge_src[np.isin(g.edge_dst, merges)].tolist())
    _assert_topological(g)


# ----------------------------------------------------------------------------------- errors
def _node(name, op, *inputs, **attrs):
    node = graph_pb2.GraphDef().node.add(name=name, op=op, input=list(inputs))
    for key, value in attrs.items():
        node.attr[key].CopyFrom(value)
    return node


def _const(name):
    return _node(name, "Const",
                 value=tf.compat.v1.AttrValue(tensor=tf.make_tensor_proto(1.0)),
                 dtype=tf.compat.v1.AttrValue(type=tf.float32.as_datatype_enum))


def _graph_def(*nodes):
    return graph_pb2.GraphDef(node=list(nodes))


F32_TYPE = tf.compat.v1.AttrValue(type=tf.float32.as_datatype_enum)


def _f32(name, op, *inputs, **attrs):
    """A node whose type attr ``T`` is float32."""
    return _node(name, op, *inputs, T=F32_TYPE, **attrs)


def _matrix(name, rows, cols, *, content_shape=None):
    """A float32 Const of shape [rows, cols]; ``content_shape`` overrides the declared shape
    (so the bytes held do not match it)."""
    node = _node(name, "Const", dtype=F32_TYPE, value=tf.compat.v1.AttrValue(
        tensor=tf.make_tensor_proto(np.ones((rows, cols), np.float32))))
    if content_shape is not None:
        shape = node.attr["value"].tensor.tensor_shape
        del shape.dim[:]
        shape.dim.extend(tf.TensorShape(content_shape).as_proto().dim)
    return node


def _const_holding(name, dtype):
    """A float32 Const whose value tensor claims the DataType number ``dtype``."""
    tensor = tf.make_tensor_proto(1.0)
    tensor.dtype = dtype
    return _node(name, "Const", dtype=F32_TYPE, value=tf.compat.v1.AttrValue(tensor=tensor))


def _variable(name, *dims):
    node = _node(name, "VarHandleOp", dtype=F32_TYPE,
                 shared_name=tf.compat.v1.AttrValue(s=name.encode()))
    node.attr["shape"].shape.CopyFrom(tf.TensorShape(dims).as_proto())
    return node


def _on(device, node):
    node.device = device
    return node


def _placeholder(name, *dims):
    node = _node(name, "Placeholder", dtype=F32_TYPE)
    for d in dims:  # any size, even one TensorShape refuses
        node.attr["shape"].shape.dim.add(size=d)
    return node


@pytest.mark.parametrize("source, message", [
    (b"\x08\x96\x01\xff\xfe not a graph", "the given bytes is not a GraphDef or MetaGraphDef"),
    (b"", "not a GraphDef or MetaGraphDef"),
    (_graph_def(_const("a"), _node("b", "NoSuchOp", "a")),
     "node 'b' has unknown op type 'NoSuchOp'"),
    (_graph_def(_const("a"), _node("b", "Identity", "ghost:0")),
     "node 'b' reads 'ghost:0', which does not exist"),
    (_graph_def(_const("a"), _node("b", "NoOp", "^ghost")),
     "node 'b' reads '\\^ghost', which does not exist"),
    (_graph_def(_const("a"), _const("a")), "two nodes are named 'a'"),
    (_graph_def(_const("a"), _node("b", "NoOp", _class=tf.compat.v1.AttrValue(
        list=tf.compat.v1.AttrValue.ListValue(s=[b"loc:@ghost"])))),
     "node 'b' asks to be colocated with 'ghost'"),
    (graph_pb2.GraphDef(), "the graph has no nodes"),
    (meta_graph_pb2.MetaGraphDef(), "the graph has no nodes"),
    (42, "cannot place a int; expected tf.Graph, GraphDef, MetaGraphDef"),
    ([graph_pb2.GraphDef()], "cannot place a list"),
])
def test_bad_graphs_are_invalid_graph_errors(source, message):
    with pytest.raises(InvalidGraphError, match=message):
        _opgraph(source)


def _calling(*functions, caller="f"):
    """A graph whose node ``call`` runs library function ``caller`` through PartitionedCall;
    ``functions`` are (name, the function it calls or None) pairs for the library."""
    gd = _graph_def(_const("a"))
    for name, calls in functions:
        f = gd.library.function.add()
        f.signature.name = name
        f.signature.input_arg.add(name="x", type=tf.float32.as_datatype_enum)
        f.signature.output_arg.add(name="y", type=tf.float32.as_datatype_enum)
        if calls:
            f.node_def.add(name="inner", op=calls, input=["x"])
            f.ret["y"] = "inner:y"
        else:
            f.ret["y"] = "x"
    call = gd.node.add(name="call", op="PartitionedCall", input=["a"])
    call.attr["f"].func.name = caller
    call.attr["Tin"].list.type.append(tf.float32.as_datatype_enum)
    call.attr["Tout"].list.type.append(tf.float32.as_datatype_enum)
    return gd


@pytest.mark.parametrize("source, message", [
    # TF's Grappler raised "Op type not registered" (a RuntimeError) on the first.
    (_calling(caller="gone"), "node 'call' calls function 'gone', which the graph's library"),
    (_calling(("f", "gone")), "node 'inner' in function 'f' has unknown op type 'gone'"),
    # TF's importer crashed the process on these (SIGSEGV).
    (_calling(("f", "f")), "function that calls itself: 'f' -> 'f'"),
    (_calling(("f", "g"), ("g", "h"), ("h", "g")), "calls itself: 'g' -> 'h' -> 'g'"),
])
def test_calls_of_missing_or_recursive_functions_are_invalid_graph_errors(source, message):
    with pytest.raises(InvalidGraphError, match=message):
        _opgraph(source)


def test_looking_for_function_calls_leaves_the_graph_def_as_it_was():
    # Reading a missing key of a proto map adds it: a call op without its "f" attr must not
    # come out of the check with an empty one.
    gd = _graph_def(_const("a"), _node("call", "PartitionedCall", "a"))
    before = gd.SerializeToString(deterministic=True)
    ingest._check_function_calls(gd, set())
    assert gd.SerializeToString(deterministic=True) == before


def test_a_library_function_called_from_several_places_is_not_recursion():
    og = _opgraph(_calling(("f", "g"), ("g", None), ("h", "g")))
    assert "call" in og.names


# Graphs TensorFlow's importer or Const kernel rejects. Each was once placed and returned (or
# crashed Grappler with an IndexError / RuntimeError); now each is rejected before Grappler.
REJECTED = {
    "malformed input": (_graph_def(_const("a"), _f32("b", "Identity", "a:x")),
                        "node 'b' has the malformed input 'a:x'"),
    "control input with a port": (_graph_def(_const("a"), _node("b", "NoOp", "^a:1")),
                                  "node 'b' has the malformed input '\\^a:1'"),
    "output out of range": (_graph_def(_const("a"), _f32("b", "Identity", "a:5")),
                            "rejects node 'b': Connecting to invalid output 5"),
    "reading a NoOp": (_graph_def(_node("a", "NoOp"), _f32("b", "Identity", "a")),
                       "rejects node 'b': Connecting to invalid output 0 .* 0 outputs"),
    "MatMul with one input": (_graph_def(_matrix("a", 2, 2), _f32("b", "MatMul", "a")),
                              "rejects node 'b': .*do not match 1 inputs"),
    "MatMul with three inputs": (_graph_def(_matrix("a", 2, 2),
                                            _f32("b", "MatMul", "a", "a", "a")),
                                 "rejects node 'b': .*do not match 3 inputs"),
    "missing attr T": (_graph_def(_const("a"), _node("b", "Identity", "a")),
                       "rejects node 'b': NodeDef missing attr 'T'"),
    "shapes that do not multiply": (
        _graph_def(_matrix("a", 2, 3), _matrix("c", 5, 7), _f32("b", "MatMul", "a", "c")),
        "rejects node 'b': Dimensions must be equal, but are 3 and 5"),
    "attr T as a string": (_graph_def(_const("a"), _node("b", "Identity", "a", T=(
        tf.compat.v1.AttrValue(s=b"float")))), "rejects node 'b': .*type 'string'"),
    "int32 Identity fed a float": (
        _graph_def(_const("a"), _node("b", "Identity", "a", T=tf.compat.v1.AttrValue(
            type=tf.int32.as_datatype_enum))),
        "rejects node 'b': Input 0 of node b was passed float"),
    "Const holding 8 bytes for [1000]": (
        _graph_def(_matrix("a", 1, 2, content_shape=[1000]), _f32("b", "Identity", "a")),
        "rejects node 'a' \\(Const\\): its value holds 8 bytes where shape \\[1000\\]"),
    "Const whose value has another dtype": (
        _graph_def(_node("a", "Const", dtype=tf.compat.v1.AttrValue(
            type=tf.int32.as_datatype_enum), value=tf.compat.v1.AttrValue(
            tensor=tf.make_tensor_proto(1.0)))),
        "rejects node 'a' \\(Const\\): its value is a DT_FLOAT tensor but its dtype is DT_INT32"),
    "device TF cannot parse": (_graph_def(_on("/bogus", _node("a", "NoOp"))),
                               "node 'a' has the device '/bogus', which TensorFlow cannot parse"),
    "Const whose value has no dtype TF knows": (
        _graph_def(_const_holding("a", dtype=999)),
        "rejects node 'a' \\(Const\\): its value is a dtype 999 tensor but its dtype is DT_FLOAT"),
    "Placeholder of shape [-7]": (_graph_def(_placeholder("p", -7)),
                                  "rejects node 'p': Shape \\[-7\\]"),
    "variable of 2**80 elements": (
        _graph_def(_variable("v", 2**40, 2**40)), "rejects node 'v': .*too large"),
}  # (a Const without a value aborts Grappler: checked in a subprocess below)


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_graphs_tensorflow_rejects_are_invalid_graph_errors_naming_the_node(case):
    graph_def, message = REJECTED[case]
    before = graph_def.SerializeToString(deterministic=True)
    with pytest.raises(InvalidGraphError, match=message):
        _opgraph(graph_def)
    assert graph_def.SerializeToString(deterministic=True) == before


def test_graph_too_big_to_count_is_infeasible_not_an_overflow():
    # TF imports a [2**31, 2**31] float variable (2**62 elements), but its 2**64 bytes do not
    # fit in int64: no cluster holds it.
    graph_def = _graph_def(_variable("v", 2**31, 2**31),
                           _node("r", "ReadVariableOp", "v", dtype=F32_TYPE))
    with pytest.raises(InfeasiblePlacementError, match="add up to 3.69e\\+19 bytes"):
        _opgraph(graph_def)


def test_a_placeholder_too_big_for_grappler_counts_its_declared_size():
    # Grappler gives no shape for 2**60 elements, which counted as unknown (4 bytes): a 4 EiB
    # input "fitted" a 10.7 GB GPU with a peak of 0.000 GB.
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4, 4], name="x")
        tf.identity(x * 2.0, name="out")
    graph_def = g.as_graph_def()
    shape = next(n for n in graph_def.node if n.name == "x").attr["shape"].shape
    shape.dim[0].size, shape.dim[1].size = 2**31, 2**29  # TF's API refuses; the file is valid
    with pytest.raises(InfeasiblePlacementError, match="node 'x' alone has 4.61e\\+18 bytes"):
        _opgraph(graph_def)


def test_huge_unknown_dim_is_infeasible_not_an_overflow():
    g = _unknown_batch_graph()
    big = _opgraph(g, unknown_dim=2**50)  # 2**56 bytes: still counted
    assert _by_name(big, big.output_bytes)["p"] == 2**50 * 16 * F32
    with pytest.raises(InfeasiblePlacementError, match="node 'p' alone has 2.95e\\+20 bytes"):
        _opgraph(g, unknown_dim=2**62)


def test_a_graph_grappler_would_abort_on_is_an_error_and_the_process_lives(repo_root):
    """A Const without a value read by an Identity made Grappler abort the interpreter
    (SIGABRT, a C++ check); it must be an InvalidGraphError in a process that goes on."""
    code = (
        "import tensorflow as tf, tf_autoplace\n"
        "from tensorflow.core.framework import graph_pb2\n"
        "g = graph_pb2.GraphDef()\n"
        "g.node.add(name='a', op='Const').attr['dtype'].type = tf.float32.as_datatype_enum\n"
        "g.node.add(name='b', op='Identity', input=['a']).attr['T'].type = "
        "tf.float32.as_datatype_enum\n"
        "try:\n"
        "    tf_autoplace.autoplace(g, cluster='testdata/cpu2_independent.pbtxt', placer='m_etf')\n"
        "except tf_autoplace.InvalidGraphError as e:\n"
        "    print('InvalidGraphError:', e)\n"
        "print('alive')\n")
    pythonpath = os.pathsep.join(p for p in (repo_root, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=pythonpath)
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo_root, env=env, text=True,
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "alive"
    assert lines[0].startswith("InvalidGraphError: TensorFlow rejects node 'a': NodeDef missing "
                               "attr 'value'"), proc.stdout


@pytest.mark.parametrize("content, message", [
    (None, "cannot read graph file '.*graph.pb'"),
    (b"\x00\x01\x02\xff corrupt", "'.*graph.pb' is not a GraphDef or MetaGraphDef"),
    (b'node { name: "a" op: ', "'.*graph.pb' is not a GraphDef or MetaGraphDef .*text"),
    (b"node { name: 'a' }", "text GraphDef: a node has no name or op"),
    # A text file with no node (say only a comment) named the binary parser's errors.
    (b"# only a comment\n", "text GraphDef: parses, but has no nodes"),
])
def test_bad_graph_files_are_invalid_graph_errors(tmp_path, content, message):
    path = tmp_path / "graph.pb"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InvalidGraphError, match=message):
        ingest.read_graph_file(path)
    with pytest.raises(InvalidGraphError, match=message):
        ingest.load_meta_graph(str(path))


def test_a_directory_that_is_not_a_saved_model_is_named_as_such(tmp_path):
    # The message was the OS's "Is a directory", for a user who meant a SavedModel.
    (tmp_path / "variables").mkdir()
    with pytest.raises(InvalidGraphError, match="is a directory and not a SavedModel .no "
                                                "saved_model.pb"):
        ingest.read_graph_file(tmp_path)


def test_a_saved_models_own_file_given_as_a_graph_points_at_its_directory(tmp_path):
    saved_model = tmp_path / "model"
    saved_model.mkdir()
    (saved_model / "saved_model.pb").write_bytes(b"\x08\x01\x12\x04\xff\xfe a SavedModel")
    with pytest.raises(InvalidGraphError, match="a SavedModel's own file: give the "
                                                "SavedModel's directory .'.*model'."):
        ingest.read_graph_file(saved_model / "saved_model.pb")


def test_a_device_is_refused_and_a_pipe_is_read(tmp_path, monkeypatch):
    # /dev/zero never ends: it used to be read until the memory ran out.
    with pytest.raises(InvalidGraphError, match="'/dev/zero': it is a device, not a file"):
        ingest.read_graph_file("/dev/zero")
    read, write = os.pipe()  # `cat graph.pb | tf-autoplace place --input=/dev/stdin`
    with os.fdopen(write, "wb") as f:
        f.write(_graph_def(_const("a")).SerializeToString())
    meta_graph, _ = ingest.read_graph_file(f"/dev/fd/{read}")
    os.close(read)
    assert [n.name for n in meta_graph.graph_def.node] == ["a"]
    monkeypatch.setattr(ingest, "MAX_GRAPH_FILE_BYTES", 4)
    (tmp_path / "big.pb").write_bytes(_graph_def(_const("a")).SerializeToString())
    with pytest.raises(InvalidGraphError, match="'.*big.pb' is larger than 2 GiB"):
        ingest.read_graph_file(tmp_path / "big.pb")


def test_a_live_graph_is_read_the_same_without_importing_it_again(monkeypatch):
    """A live tf.Graph's ops were checked by TensorFlow as they were made: reading its
    GraphDef with ``live_graph=True`` skips the importer and gives the same OpGraph and
    properties."""
    meta_graph = ingest.load_meta_graph(small_cnn().graph)
    checked, checked_props = ingest.read_graph(meta_graph)

    def not_again(graph_def):
        raise AssertionError("imported again")

    monkeypatch.setattr(ingest, "check_tensorflow_accepts", not_again)
    live, live_props = ingest.read_graph(meta_graph, live_graph=True)
    assert _summary(live) == _summary(checked)
    assert live_props.keys() == checked_props.keys()


def test_reading_a_live_graph_in_one_call_gives_what_load_and_read_give(monkeypatch):
    """read_live_graph holds the graph as bytes while Grappler runs: the MetaGraphDef it
    returns, the OpGraph and the properties are those of load_meta_graph then read_graph,
    without the importer, and the time of the read is recorded."""
    graph = small_cnn().graph
    meta_graph = ingest.load_meta_graph(graph)
    reference, reference_props = ingest.read_graph(meta_graph, live_graph=True)

    def not_again(graph_def):
        raise AssertionError("imported again")

    monkeypatch.setattr(ingest, "check_tensorflow_accepts", not_again)
    timings = {}
    read_meta_graph, read, props = ingest.read_live_graph(graph, timings=timings)
    assert read_meta_graph == meta_graph
    assert _summary(read) == _summary(reference)
    assert props == reference_props
    assert timings["ingest"] > 0


def test_a_live_graphs_constants_are_still_checked():
    """TensorFlow checks a Const's bytes against its shape only when the kernel is built: a
    live graph whose Const was given a short value is still an InvalidGraphError."""
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(np.zeros(1000, np.float32), name="a")
        tf.identity(a, name="b")
    short = tf.make_tensor_proto(np.zeros(2, np.float32))
    short.tensor_shape.dim[0].size = 1000
    g.get_operation_by_name("a")._set_attr("value", tf.compat.v1.AttrValue(tensor=short))
    with pytest.raises(InvalidGraphError, match="its value holds 8 bytes where shape \\[1000\\]"):
        ingest.read_graph(ingest.load_meta_graph(g), live_graph=True)
    with pytest.raises(InvalidGraphError, match="its value holds 8 bytes where shape \\[1000\\]"):
        ingest.read_live_graph(g)


def test_a_cost_graph_given_as_a_graph_names_its_door(tmp_path):
    # autoplace("model.costgraph.pbtxt") said only that it is not a GraphDef ("no field named
    # format_version").
    import tf_autoplace
    from tf_autoplace.errors import InvalidGraphError

    path = tmp_path / "m.costgraph.pbtxt"
    path.write_text('format_version: 2\nop { name: "a" type: "X" '
                    'time { device_kind: "CPU" seconds: 1e-3 } }\n')
    with pytest.raises(InvalidGraphError, match="reads as a cost graph .*place_cost_graph"):
        tf_autoplace.autoplace(str(path), cluster="cpu2")


def _nested_calls(depth: int) -> graph_pb2.GraphDef:
    """x -> F0(x), where each function Fi applies a Relu and calls F(i+1), ``depth`` deep."""
    graph_def = graph_pb2.GraphDef()
    for i in range(depth + 1):
        f = graph_def.library.function.add()
        f.signature.name = f"F{i}"
        f.signature.input_arg.add(name="a", type=types_pb2.DT_FLOAT)
        f.signature.output_arg.add(name="o", type=types_pb2.DT_FLOAT)
        relu = f.node_def.add(name="r", op="Relu", input=["a"])
        relu.attr["T"].type = types_pb2.DT_FLOAT
        out = "r:activations:0"
        if i < depth:
            call = f.node_def.add(name="c", op="PartitionedCall", input=[out])
            call.attr["Tin"].list.type.append(types_pb2.DT_FLOAT)
            call.attr["Tout"].list.type.append(types_pb2.DT_FLOAT)
            call.attr["f"].func.name = f"F{i + 1}"
            out = "c:output:0"
        f.ret["o"] = out
    x = graph_def.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = types_pb2.DT_FLOAT
    x.attr["shape"].shape.dim.add(size=2)
    call = graph_def.node.add(name="call", op="PartitionedCall", input=["x"])
    call.attr["Tin"].list.type.append(types_pb2.DT_FLOAT)
    call.attr["Tout"].list.type.append(types_pb2.DT_FLOAT)
    call.attr["f"].func.name = "F0"
    return graph_def


def test_functions_nested_past_pythons_recursion_are_an_invalid_graph_error():
    # TensorFlow runs a chain of 1,200 nested calls; the walks over the call graph recursed
    # per level and ended in a RecursionError out of the door.
    assert python_callers(_nested_calls(50)) == []
    with pytest.raises(InvalidGraphError, match="call each other more deeply than this tool"):
        python_callers(_nested_calls(1_200))


@pytest.mark.slow  # TensorFlow checks the 1,200 functions first: half a minute
def test_reading_functions_nested_past_pythons_recursion_is_an_invalid_graph_error():
    assert ingest.to_opgraph(meta_graph_pb2.MetaGraphDef(graph_def=_nested_calls(50))).num_ops
    with pytest.raises(InvalidGraphError, match="call each other more deeply than this tool"):
        ingest.to_opgraph(meta_graph_pb2.MetaGraphDef(graph_def=_nested_calls(1_200)))
    # The door reads a GraphDef with read_graph, not to_opgraph.
    with pytest.raises(InvalidGraphError, match="call each other more deeply than this tool"):
        tf_autoplace.autoplace(_nested_calls(1_200), cluster="cpu2", placer="m_topo",
                               progress=False)
