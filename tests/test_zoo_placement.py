"""Placements of real zoo training graphs: TF's own constraints hold in the rewritten graph, and a
randomly split LSTM seq2seq training graph runs on 2 logical CPUs with the unplaced loss."""

import functools

import numpy as np
import pytest
import tensorflow as tf

import tf_autoplace
from tf_autoplace import zoo
from tf_autoplace.graph.kernels import kernel_kinds
from tf_autoplace.testing import TrainingGraph, run_training_steps

SMALL_NMT = dict(layers=2, length=4, batch=4, hidden=16, embedding_dim=16, vocab=50)


@functools.lru_cache(maxsize=None)
def _built(name, knobs):
    """One build per model for the placers that place it in turn (Keras models take seconds)."""
    return zoo.build(name, **dict(knobs))


def _assert_tf_constraints_hold(graph: tf.Graph):
    """Check the placed tf.Graph itself: ``_class`` colocation, resource/ref edges on one device,
    a kernel for every op on its device's kind."""
    by_name = {op.name: op for op in graph.get_operations()}
    for op in graph.get_operations():
        assert op.device, f"{op.name} has no device"
        kind = tf.DeviceSpec.from_string(op.device).device_type
        assert kind in kernel_kinds(op.node_def), f"{op.name} ({op.type}) has no {kind} kernel"
        for entry in op.colocation_groups():
            target = by_name[entry.decode()[len("loc:@"):]]
            assert target.device == op.device, f"{op.name} is not with {target.name}"
        for tensor in op.inputs:
            if tensor.dtype == tf.resource or tensor.dtype._is_ref_dtype:
                assert tensor.op.device == op.device, f"{op.name} reads {tensor.name} remotely"


@pytest.mark.parametrize("name, knobs, placer", [
    pytest.param("inception_v3", dict(batch=2, image_size=75, num_classes=10), "m_etf",
                 marks=pytest.mark.slow),
    pytest.param("inception_v3", dict(batch=2, image_size=75, num_classes=10), "random",
                 marks=pytest.mark.slow),
    ("nmt", SMALL_NMT, "m_etf"),
    ("nmt", SMALL_NMT, "random"),
])
def test_constraints_hold_on_real_training_graphs(name, knobs, placer):
    model = _built(name, tuple(sorted(knobs.items())))  # each placement rewrites every op
    report = tf_autoplace.autoplace(model.graph, cluster="k80x2",
                                    placer=placer, seed=1)
    _assert_tf_constraints_hold(model.graph)
    used = {op.device for op in model.graph.get_operations()}
    if placer == "random":
        assert len(used) >= 2  # the check above met cross-device edges
    assert report.num_ops == len(model.graph.get_operations())


def test_split_seq2seq_training_graph_runs_with_the_unplaced_loss():
    model = zoo.build("nmt", **SMALL_NMT)
    tg = TrainingGraph.from_model(model, seed=0)
    reference, _ = run_training_steps(tg, steps=3)
    tf_autoplace.autoplace(model.graph, cluster="testdata/cpu2_independent.pbtxt",
                           placer="random", seed=0)
    losses, devices = run_training_steps(tg, steps=3)
    assert len(devices) == 2
    np.testing.assert_allclose(losses, reference, rtol=1e-5)
