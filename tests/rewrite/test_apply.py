"""Rewrite: a placement sets every op's device in canonical form, all or nothing on a tf.Graph,
and on a copy of a GraphDef; which annotations it overrides."""

import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from tf_autoplace.errors import InfeasiblePlacementError, InvalidGraphError
from tf_autoplace.rewrite import (apply_to_graph, apply_to_graph_def, other_task,
                                  replaced_devices)

HOST = "/job:localhost/replica:0/task:0/device:"
USER_DEVICE = "/device:CPU:7"


def _devices(graph):
    return {op.name: op.device for op in graph.get_operations()}


def _alternating(names, devices=("/cpu:0", "/device:CPU:1")):
    return {name: devices[i % len(devices)] for i, name in enumerate(names)}


@pytest.fixture
def placed_by_user(tiny_graph):
    """The tiny graph with a device a user set on two ops before placement."""
    for name in ("x", "y"):
        op = tiny_graph.get_operation_by_name(name)
        op._set_device(USER_DEVICE)  # pylint: disable=protected-access
    return tiny_graph


def test_apply_to_graph_sets_every_device_canonically(placed_by_user):
    graph = placed_by_user
    names = [op.name for op in graph.get_operations()]
    placement = _alternating(names, ("/cpu:0", "/device:CPU:1", f"{HOST}GPU:1", "gpu:0"))
    apply_to_graph(graph, placement)
    canonical = {"/cpu:0": "/device:CPU:0", "/device:CPU:1": "/device:CPU:1",
                 f"{HOST}GPU:1": f"{HOST}GPU:1", "gpu:0": "/device:GPU:0"}
    assert _devices(graph) == {name: canonical[placement[name]] for name in names}
    # The user's devices were replaced too: the placement is the whole truth.
    assert graph.get_operation_by_name("x").device == "/device:CPU:0"


def _bad_placements(names):
    good = _alternating(names)
    one_bad_device = dict(good, **{names[-1]: "not a device"})
    no_type = dict(good, **{names[0]: "/job:worker"})
    missing = {n: d for n, d in good.items() if n != names[3]}
    extra = dict(good, ghost="/device:CPU:0")
    return [
        (one_bad_device, InfeasiblePlacementError, "'not a device' is not a TF device string"),
        (no_type, InfeasiblePlacementError, "'/job:worker' names no device type"),
        (missing, InvalidGraphError, rf"1 ops unplaced \(e.g. \['{names[3]}'\]\)"),
        (extra, InvalidGraphError, r"1 placed ops not in the graph \(e.g. \['ghost'\]\)"),
    ]


@pytest.mark.parametrize("case", range(4))
def test_bad_placement_raises_and_leaves_the_graph_as_it_was(placed_by_user, case):
    graph = placed_by_user
    names = [op.name for op in graph.get_operations()]
    before = _devices(graph)
    assert before["x"] == before["y"] == USER_DEVICE and before["z"] == ""
    placement, error, message = _bad_placements(names)[case]
    with pytest.raises(error, match=message):
        apply_to_graph(graph, placement)
    assert _devices(graph) == before


def test_failure_half_way_is_rolled_back(placed_by_user, monkeypatch):
    graph = placed_by_user
    before = _devices(graph)
    real_set_device = tf.Operation._set_device  # pylint: disable=protected-access
    calls = []

    def flaky_set_device(op, device):
        calls.append(op.name)
        if len(calls) == 4:
            raise RuntimeError("device rejected")
        real_set_device(op, device)

    monkeypatch.setattr(tf.Operation, "_set_device", flaky_set_device)
    with pytest.raises(RuntimeError, match="device rejected"):
        apply_to_graph(graph, _alternating(list(before)))
    assert len(calls) > 4  # three ops were changed, then restored
    assert _devices(graph) == before


def test_apply_to_graph_def_returns_a_placed_copy(placed_by_user):
    graph_def = placed_by_user.as_graph_def()
    before = graph_def.SerializeToString(deterministic=True)
    names = [node.name for node in graph_def.node]
    placement = _alternating(names)

    placed = apply_to_graph_def(graph_def, placement)
    assert placed is not graph_def
    assert graph_def.SerializeToString(deterministic=True) == before
    assert [node.name for node in placed.node] == names
    assert {node.name: node.device for node in placed.node} == {
        name: "/device:CPU:0" if placement[name] == "/cpu:0" else "/device:CPU:1"
        for name in names}
    for node, original in zip(placed.node, graph_def.node):  # nothing else changed
        node.device = original.device
    assert placed.SerializeToString(deterministic=True) == before

    for bad, error, message in _bad_placements(names):
        with pytest.raises(error, match=message):
            apply_to_graph_def(graph_def, bad)
        assert graph_def.SerializeToString(deterministic=True) == before


def test_replaced_devices_lists_the_annotations_a_placement_does_not_satisfy():
    graph_def = graph_pb2.GraphDef()
    asked = {"none": "", "type": "/device:GPU:*", "cpu0": "/CPU:0", "gpu1": "/device:GPU:1",
             "job": "/job:worker/device:GPU:0", "lower": "/cpu:0"}
    for name, device in asked.items():
        graph_def.node.add(name=name, op="NoOp", device=device)
    gpu0 = "/job:localhost/replica:0/task:0/device:GPU:0"
    cpu0 = "/job:localhost/replica:0/task:0/device:CPU:0"
    placement = {"none": gpu0, "type": gpu0, "cpu0": cpu0, "gpu1": gpu0, "job": gpu0,
                 "lower": cpu0}
    assert replaced_devices(graph_def, placement) == [
        ("gpu1", "/device:GPU:1", gpu0), ("job", "/job:worker/device:GPU:0", gpu0)]


def test_other_task_compares_only_the_job_and_task_an_annotation_names():
    worker = "/job:worker/replica:0/task:0/device:CPU:0"
    assert other_task("/job:ps/task:0", worker)
    assert other_task("/job:worker/task:1", worker)
    assert not other_task("/job:worker", worker)
    assert not other_task("/device:GPU:0", worker)  # no task named: nothing to say
