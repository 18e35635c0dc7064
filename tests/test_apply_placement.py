"""apply_placement on real TF training graphs: a saved placement round trip gives the same
devices and bytes; a changed graph is completed; another graph, a missing device or a broken
constraint is a typed error that leaves the graph as it was."""


import pytest
import tensorflow as tf
from google.protobuf import json_format, text_format

import tf_autoplace
from tf_autoplace.testing import run_training_steps, small_cnn

CPU2 = "testdata/cpu2_independent.pbtxt"


def _bytes(graph: tf.Graph) -> bytes:
    return graph.as_graph_def().SerializeToString(deterministic=True)


def _devices(graph: tf.Graph) -> dict:
    return {op.name: op.device for op in graph.get_operations()}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """small_cnn placed by the default placer within a small sample budget, its placed bytes,
    and its PlacementResult in a binary, a text and a JSON file."""
    from tf_autoplace.placers import AutoPlacer

    tg = small_cnn()
    report = tf_autoplace.autoplace(tg.graph, cluster=CPU2, seed=1, progress=False,
                                    placer=AutoPlacer(max_samples=200))
    out = tmp_path_factory.mktemp("saved")
    proto = report.to_proto()
    (out / "p.pb").write_bytes(proto.SerializeToString())
    (out / "p.pbtxt").write_text(text_format.MessageToString(proto))
    (out / "p.json").write_text(json_format.MessageToJson(proto))
    return report, _bytes(tg.graph), out


@pytest.mark.parametrize("name", ["p.pb", "p.pbtxt", "p.json"])
def test_round_trip_gives_the_same_assignment_and_bytes(saved, name):
    report, placed_bytes, out = saved
    tg = small_cnn()
    again = tf_autoplace.apply_placement(tg.graph, str(out / name), cluster=CPU2)
    assert _devices(tg.graph) == report.assignment == again.assignment
    assert _bytes(tg.graph) == placed_bytes
    assert again.placer == "saved" and again.step_time_s == report.step_time_s
    assert "made by auto (seed 1) for this graph" in again.notes[0]
    assert again.graph_fingerprint == report.graph_fingerprint


def test_a_graph_def_copy_is_placed_the_same(saved):
    report, _, out = saved
    graph_def = small_cnn().graph.as_graph_def()
    again = tf_autoplace.apply_placement(graph_def, str(out / "p.pb"), cluster=CPU2)
    assert {n.name: n.device for n in again.graph_def.node} == report.assignment
    assert all(not n.device for n in graph_def.node)  # the input is left alone


def test_a_graph_changed_a_little_is_completed_and_runs(saved):
    report, _, out = saved
    tg = small_cnn()
    with tg.graph.as_default():
        loss = tg.graph.get_tensor_by_name(tg.loss)
        tf.math.square(tf.identity(loss, name="extra/copy"), name="extra/square")
    again = tf_autoplace.apply_placement(tg.graph, str(out / "p.pb"), cluster=CPU2)
    devices = _devices(tg.graph)
    assert devices["extra/copy"] == devices["extra/square"] == devices[tg.loss.split(":")[0]]
    assert {k: v for k, v in devices.items() if not k.startswith("extra/")} == report.assignment
    assert "2 ops it does not place were placed next to their neighbours" in again.notes[0]
    # Names, not layers, carry the devices: a change that renames ops (a layer inserted before
    # auto-named ones) gives each name the devices of the op that had it, and the note says so.
    assert "the saved devices follow the names, not the layers" in again.notes[0]
    losses, used = run_training_steps(tg, steps=2)
    assert len(used) == 2 and losses[1] < losses[0]


def test_a_placement_for_another_graph_leaves_the_graph_alone(saved, tiny_graph):
    _, _, out = saved
    before = _bytes(tiny_graph)
    with pytest.raises(tf_autoplace.InvalidGraphError, match="made for another graph"):
        tf_autoplace.apply_placement(tiny_graph, str(out / "p.pb"), cluster=CPU2)
    assert _bytes(tiny_graph) == before


def test_a_device_outside_the_cluster_or_split_colocation_is_refused(saved):
    report, _, out = saved
    tg = small_cnn()
    before = _bytes(tg.graph)
    with pytest.raises(tf_autoplace.InfeasiblePlacementError, match="which the cluster does "
                                                                    "not have"):
        tf_autoplace.apply_placement(tg.graph, str(out / "p.pb"),
                                     cluster="k80x2")
    proto = report.to_proto()
    variable = next(op for op in proto.op if op.name == "left/kernel")
    # Away from its readers and its Adam slots.
    variable.device = variable.device[:-1] + ("1" if variable.device.endswith("0") else "0")
    with pytest.raises(tf_autoplace.InfeasiblePlacementError, match="colocation group"):
        tf_autoplace.apply_placement(tg.graph, proto, cluster=CPU2)
    assert _bytes(tg.graph) == before


def test_the_same_graph_with_counters_in_its_gradient_scopes_is_this_graph(tmp_path):
    # Names taken before the model is built give its ops counters (Mean_1), and the gradient
    # scopes carry them inside (gradients/Mean_1_grad/...): still the same graph.
    def build(taken=()):
        graph = tf.Graph()
        with graph.as_default():
            for name in taken:
                graph.unique_name(name)
            x = tf.compat.v1.placeholder(tf.float32, [8, 4], name="x")
            y = tf.compat.v1.placeholder(tf.float32, [8, 1], name="y")
            w = tf.compat.v1.get_variable("w", [4, 1])
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
            tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        return graph

    report = tf_autoplace.autoplace(build(), cluster=CPU2, placer="m_etf", progress=False)
    (tmp_path / "p.pb").write_bytes(report.to_proto().SerializeToString())
    rebuilt = build(taken=("Mean", "sub", "Square", "MatMul"))
    assert "gradients/Mean_1_grad/Reshape" in {op.name for op in rebuilt.get_operations()}
    again = tf_autoplace.apply_placement(rebuilt, str(tmp_path / "p.pb"), cluster=CPU2)
    assert again.graph_fingerprint == report.graph_fingerprint
    assert "for this graph (same fingerprint)" in again.notes[0]

    # The same file with its ops reordered (sorted by a script): the names no longer agree
    # with the positions, so ops are matched by name, each getting the device the file names
    # for it (by position they got their neighbours' devices); it is still this graph's
    # placement (the note called the graph another one).
    proto = report.to_proto()
    entries = sorted(((op.name, op.device) for op in proto.op), reverse=True)
    del proto.op[:]
    for name, device in entries:
        proto.op.add(name=name, device=device)
    proto.graph_fingerprint = report.graph_fingerprint
    graph = build()
    shuffled = tf_autoplace.apply_placement(graph, proto, cluster=CPU2)
    assert "for this graph (same fingerprint)" in shuffled.notes[0]
    assert {op.name: op.device for op in graph.get_operations()} == \
        {name: tf.DeviceSpec.from_string(device).to_string() for name, device in entries}


@pytest.mark.parametrize("name", ["p.pb", "p.pbtxt"])
def test_a_file_cut_short_is_refused_not_completed(saved, name):
    """A placement file cut at an op's end still parses, with fewer ops; applied, its lost ops
    were placed next to their neighbours as if the graph had changed. Its per-device counts
    say how many ops it had."""
    report, _, out = saved
    data = (out / name).read_bytes()
    proto = report.to_proto()
    kept = len(proto.op) // 2
    if name.endswith(".pbtxt"):  # up to the end of the kept-th op's entry
        end = 0
        for _ in range(kept):
            end = data.index(b"\n}\n", data.index(b"op {", end)) + 3
    else:  # the bytes of the fields before the ops and of the kept ops
        head = type(proto)()
        head.CopyFrom(proto)
        del head.op[kept:]
        for field, _ in head.ListFields():
            if field.number > type(proto).DESCRIPTOR.fields_by_name["op"].number:
                head.ClearField(field.name)
        end = len(head.SerializeToString())
        assert data[:end] == head.SerializeToString()  # fields are written in number order
    cut = out / f"cut_{name}"
    cut.write_bytes(data[:end])
    tg = small_cnn()
    before = _bytes(tg.graph)
    with pytest.raises(tf_autoplace.ConfigError, match=(
            rf"is incomplete or damaged: its devices hold {len(proto.op)} ops and it lists "
            rf"{kept} \(a copy cut short\?\)")):
        tf_autoplace.apply_placement(tg.graph, str(cut), cluster=CPU2)
    assert _bytes(tg.graph) == before
