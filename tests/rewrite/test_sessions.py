"""A graph an open Session has run keeps the devices it ran with: placing it is a ConfigError,
the graph is left as it was; closed sessions and sessions that have not run do not count, and
a session whose creation was not seen is named in the report's notes."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.client import session as tf_session

import tf_autoplace
from tf_autoplace.core import registry
from tf_autoplace.errors import ConfigError
from tf_autoplace.rewrite import apply_to_graph, sessions

CPU2 = "testdata/cpu2_independent.pbtxt"
PLACE = dict(cluster=CPU2, placer="m_etf", seed=0, progress=False)


def _two_branches():
    """Two independent matmul chains and their sum: m_etf puts one chain on each device."""
    graph = tf.Graph()
    with graph.as_default():
        branches = []
        for i in range(2):
            w = tf.Variable(tf.random.stateless_normal((128, 128), seed=(i, 0)), name=f"w{i}")
            h = w
            for j in range(4):
                h = tf.matmul(h, w, name=f"mm{i}_{j}")
            branches.append(tf.reduce_sum(h))
        tf.add(*branches, name="out")
        tf.compat.v1.global_variables_initializer()
    return graph


def _session(graph):
    config = tf.compat.v1.ConfigProto(device_count={"CPU": 2}, allow_soft_placement=False)
    return tf.compat.v1.Session(graph=graph, config=config)


def _run(session):
    """Run ``out`` once; the devices its nodes ran on (from the partition graphs) and its
    value."""
    options = tf.compat.v1.RunOptions(output_partition_graphs=True)
    metadata = tf.compat.v1.RunMetadata()
    value = session.run("out:0", options=options, run_metadata=metadata)
    devices = {n.device for g in metadata.partition_graphs for n in g.node}
    return sorted(tf.DeviceSpec.from_string(d).device_index for d in devices), value


def _devices(graph):
    return {op.name: op.device for op in graph.get_operations()}


def test_a_graph_an_open_session_ran_is_refused_and_left_as_it_was():
    graph = _two_branches()
    session = _session(graph)
    session.run("init")
    before = _devices(graph)
    with pytest.raises(ConfigError, match="already been run by 1 open tf.compat.v1.Session.*"
                                          "Place the graph before the first session.run"):
        tf_autoplace.autoplace(graph, **PLACE)
    assert _devices(graph) == before
    session.close()  # a closed session cannot run again: placing is fine now
    report = tf_autoplace.autoplace(graph, **PLACE)
    assert {d.num_ops > 0 for d in report.devices} == {True}
    with _session(graph) as fresh:
        fresh.run("init")
        assert _run(fresh)[0] == [0, 1]


def test_a_session_that_runs_the_graph_while_the_search_runs_is_seen_before_the_write(
        monkeypatch):
    # Another thread's session may run the graph during a long search; here the placer runs
    # it itself, so the order is certain. The check at the start had passed.
    graph = _two_branches()
    session = _session(graph)
    placer = registry.entry("m_etf").load()
    search = placer.place

    def place_while_a_session_runs(self, problem, *args, **kwargs):
        session.run("init")
        return search(self, problem, *args, **kwargs)

    monkeypatch.setattr(placer, "place", place_while_a_session_runs)
    before = _devices(graph)
    with pytest.raises(ConfigError, match="already been run by 1 open tf.compat.v1.Session"):
        tf_autoplace.autoplace(graph, **PLACE)
    assert _devices(graph) == before
    assert _run(session)[0] == [0]
    session.close()


def test_a_run_whose_graph_the_runtime_refused_is_not_counted(monkeypatch):
    # A run is recorded before the runtime copies the graph (so that a placement written at
    # the same time sees it); if the copy fails, the session holds nothing of the graph.
    graph = _two_branches()
    with _session(graph) as session:
        def refused(_):
            raise RuntimeError("the runtime refused the graph")

        monkeypatch.setattr(tf_session.tf_session, "ExtendSession", refused)
        with pytest.raises(RuntimeError, match="refused"):
            session.run("init")
        assert sessions.sessions_that_ran(graph) == []
        monkeypatch.undo()
        session.run("init")
        assert sessions.sessions_that_ran(graph) == [session]


def test_why_the_check_is_needed_tensorflow_ignores_devices_set_after_a_run():
    graph = _two_branches()
    with _session(graph) as session:
        session.run("init")
        assert _run(session)[0] == [0]
        apply_to_graph(graph, {op.name: f"/device:CPU:{i % 2}"
                               for i, op in enumerate(graph.get_operations())})
        assert _run(session)[0] == [0]  # still where it first ran
    with _session(graph) as fresh:  # a new session takes the devices
        fresh.run("init")
        assert _run(fresh)[0] == [0, 1]


def test_a_session_created_before_placing_takes_the_placement_if_it_has_not_run():
    graph = _two_branches()
    with _session(graph) as session:
        report = tf_autoplace.autoplace(graph, **PLACE)
        assert not any("created before tf_autoplace was imported" in n for n in report.notes)
        session.run("init")
        devices, value = _run(session)
    assert devices == [0, 1]
    with _session(_two_branches()) as unplaced:
        unplaced.run("init")
        np.testing.assert_allclose(value, _run(unplaced)[1], rtol=1e-6)


def test_a_session_whose_creation_was_not_seen_is_named_in_the_notes(monkeypatch):
    graph = _two_branches()
    with _session(graph) as session, _session(graph):
        # As if made before tf_autoplace was imported, in a process that has not placed yet
        # (the sessions from before are found at the first placement); the second session was
        # created since, and is never in the list.
        sessions._created.discard(session)
        monkeypatch.setattr(sessions, "_before", None)
        report = tf_autoplace.autoplace(graph, **PLACE)
        assert sessions.unseen_sessions(graph) == [session]
        with _session(graph) as later:  # created after the first search: not listed either
            later.run("init")
            assert sessions.unseen_sessions(graph) == [session]
            assert sessions.unseen_sessions(_two_branches()) == []
    assert any(n.startswith("1 open tf.compat.v1.Session(s) on this graph were created before "
                            "tf_autoplace was imported") for n in report.notes)
    assert sessions.unseen_sessions(graph) == []  # closed


_IMPORTED_FIRST = """
import tf_autoplace, sys
assert "tensorflow" not in sys.modules  # the package still loads TensorFlow lazily
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
graph = tf.Graph()
with graph.as_default():
    w = tf.compat.v1.get_variable("w", [8, 8])
    out = tf.reduce_sum(tf.matmul(w, w) + tf.matmul(w, w), name="out")
    init = tf.compat.v1.global_variables_initializer()
session = tf.compat.v1.Session(graph=graph)
session.run(init)
session.run(out)
before = {op.name: op.device for op in graph.get_operations()}
try:
    tf_autoplace.autoplace(graph, cluster="cpu2", placer="random", progress=False)
    print("placed")
except tf_autoplace.ConfigError as e:
    same = before == {op.name: op.device for op in graph.get_operations()}
    print("refused" if "already been run" in str(e) and same else f"other: {e}")
"""


def test_runs_are_recorded_from_import_tf_autoplace_before_tensorflow(repo_root):
    # The README's order: import tf_autoplace, then TensorFlow; a session trains; placing
    # its graph is refused (the package loads TensorFlow lazily, the recorder starts anyway).
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _IMPORTED_FIRST], cwd=repo_root, text=True,
                          capture_output=True, timeout=300,
                          env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "refused"
