"""The default placer in every kind of TF program a user runs: eager TF2, inside
``graph.as_default()``, inside a Session, and TF1 graph mode after
``tf.compat.v1.disable_eager_execution()`` (in a child process, tests/modes_child.py). Each
places a real training graph and trains it on 2 logical CPUs with soft placement off: the
same losses as the unplaced graph, on both devices.

The eager and TF1 programs name ``auto`` with its default settings. Inside ``as_default()``
and a Session, ``auto`` searches ``SAMPLES`` placements instead of its default sample budget:
the same starts on this graph and the same steps, only a shorter local search, whose length
no mode changes (seconds less each)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tf_autoplace
from tf_autoplace.placers import AutoPlacer
from tf_autoplace.testing import run_training_steps, small_cnn

from tests.conftest import REPO

CPU2 = "testdata/cpu2_independent.pbtxt"
SAMPLES = 1000
BOTH = ["/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1"]


@pytest.fixture(scope="module")
def reference():
    return run_training_steps(small_cnn())[0]


def _check(tg, report, reference):
    assert report.placer == "auto"
    ops = {op.name: op.device for op in tg.graph.get_operations()}
    assert report.assignment == ops
    losses, devices = run_training_steps(tg)
    np.testing.assert_allclose(losses, reference, rtol=1e-5)
    assert sorted(devices) == BOTH


def test_eager_program(reference):
    assert tf.executing_eagerly()
    tg = small_cnn()
    _check(tg, tf_autoplace.autoplace(tg.graph, cluster=CPU2), reference)


def test_inside_graph_as_default(reference):
    tg = small_cnn()
    before = len(tg.graph.get_operations())
    with tg.graph.as_default():
        report = tf_autoplace.autoplace(tg.graph, cluster=CPU2,
                                        placer=AutoPlacer(max_samples=SAMPLES))
    assert len(tg.graph.get_operations()) == before  # nothing the placer ran landed here
    _check(tg, report, reference)


def test_inside_a_session(reference):
    tg = small_cnn()
    with tf.compat.v1.Session(graph=tg.graph):
        report = tf_autoplace.autoplace(tg.graph, cluster=CPU2,
                                        placer=AutoPlacer(max_samples=SAMPLES))
    _check(tg, report, reference)


def test_tf1_program_after_disable_eager_execution():
    proc = subprocess.run([sys.executable, os.path.join("tests", "modes_child.py")], cwd=REPO,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in ("auto", "placeto"):
        assert out[name]["placer"] == name
        np.testing.assert_allclose(out[name]["losses"], out["reference"], rtol=1e-5)
        assert out[name]["devices"] == BOTH
    # A tf_keras model in this mode: the Keras door says which door places it, and that door
    # does (its Session's fit gives the unplaced losses).
    keras = out["keras_v1"]
    assert "disable_eager_execution" in keras["placed"]["error"]
    assert "--autoplace" in keras["placed"]["error"]
    assert keras["reference"]["error"] is None and keras["reference"]["devices"] == []
    np.testing.assert_allclose(keras["placed"]["losses"], keras["reference"]["losses"],
                               rtol=1e-6)
    assert keras["placed"]["devices"] == BOTH
