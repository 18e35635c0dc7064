"""Verified placement run for real: a small graph on two logical CPUs of this machine, its
candidates measured under the protocol, the decision rule's choice applied and reported.
Nothing here depends on which placement is faster: the tests check that what was applied is
what the rule says for the figures measured, never a timing."""

import dataclasses
import re

import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from google.protobuf import text_format

import tf_autoplace
from tf_autoplace import Cluster
from tf_autoplace import flags as ap_flags
from tf_autoplace.errors import ConfigError
from tf_autoplace.hw.verify import SINGLE, confirm, decide, kept
from tf_autoplace.testing import small_cnn


def _devices(graph):
    return {op.name: op.device for op in graph.get_operations()}


@pytest.fixture(scope="module")
def verified(tmp_path_factory):
    tg = small_cnn()
    report = tf_autoplace.autoplace(tg.graph, cluster=Cluster.local(num_logical_cpus=2),
                                    placer="random", seed=3, verify=15, progress=False,
                                    cache=str(tmp_path_factory.mktemp("cache")))
    return tg, report


def test_the_applied_candidate_is_the_decision_rules_for_what_was_measured(verified):
    tg, report = verified
    v = report.verification
    names = [c.name for c in v.candidates]
    assert SINGLE in names and "random" in names
    expected = decide(v.candidates, v.measured)
    baseline = kept(v.candidates, v.measured)
    if expected.applied not in (SINGLE, baseline):  # confirmed (or not) in new sessions
        expected = confirm(expected, v.measured, v.confirmation, baseline=baseline)
    else:
        assert v.confirmation is None
    assert expected == v.decision
    applied = next(c for c in v.candidates if c.name == v.decision.applied)
    assert _devices(tg.graph) == applied.assignment == report.assignment
    single = v.measured[SINGLE]
    assert not single.faster_than(v.measured[applied.name])  # never slower than one device
    assert v.measured.steps == 15 and all(m.times_s.shape == (15,) for m in v.measured.placements)


def test_the_report_shows_every_candidate_measured_beside_its_prediction(verified):
    _, report = verified
    text = str(report)
    assert "verified by running each candidate" in text
    assert report.verification.decision.reason in text
    # The header says a run checked it, whichever candidate won (it said nothing when the
    # placer's own did).
    assert text.startswith(f"tf_autoplace report (random; verified: "
                           f"{report.verification.decision.applied} applied)"), text[:80]
    v = report.verification
    own = dataclasses.replace(report, verification=dataclasses.replace(
        v, decision=dataclasses.replace(v.decision, applied="random")))
    assert str(own).startswith("tf_autoplace report (random; verified: random applied)")
    (note,) = [n for n in report.notes if n.startswith("verified on this machine: applied")]
    # Another candidate applied: the placer's own notes describe what was replaced, said so.
    applied = report.verification.decision.applied
    assert (f"applied {applied} in place of the random placement the notes above describe"
            in note) == (applied != "random"), note
    proto = report.to_proto()
    assert [c.name for c in proto.verified] == [c.name for c in report.verification.candidates]
    assert sum(c.applied for c in proto.verified) == 1
    assert proto.verify_reason == report.verification.decision.reason
    measured = report.verification.measured
    assert proto.verify_steps == 15 and f"of 15 timed steps; {measured.load_text()}" in text
    assert (proto.verify_load_before, proto.verify_load_after) == (measured.load_before,
                                                                   measured.load_after)
    assert len(proto.verify_confirmed) == (0 if report.verification.confirmation is None else 2)
    # The applied placement and one device were measured: the report's measured figures.
    applied = report.verification.decision.applied
    assert report.measure_steps == 15
    assert report.measured_step_time_s == measured[applied].median_s
    assert report.measured_baseline_step_time_s == measured[SINGLE].median_s
    assert report.measured_step_interval_s == (measured[applied].low_s, measured[applied].high_s)
    assert "measured step time" in text and proto.measured_step_time_s > 0
    rows = report.to_dict()["verification"]["candidates"]
    assert all(r["measured_low_s"] <= r["measured_s"] <= r["measured_high_s"] for r in rows)
    # Every prediction at this run's speed is scaled by the one factor that puts the
    # single-device prediction on its measurement.
    scale = report.verification.speed_scale()
    single = next(r for r in rows if r["name"] == SINGLE)
    assert single["predicted_at_run_speed_s"] == pytest.approx(single["measured_s"])
    assert all(r["predicted_at_run_speed_s"] == pytest.approx(r["predicted_s"] * scale)
               for r in rows)
    assert [c.predicted_at_run_speed_s for c in proto.verified] == pytest.approx(
        [r["predicted_at_run_speed_s"] for r in rows])
    assert f"measured {scale:.2f}x its prediction" in text
    profiled = [n for n in report.notes if "profiled on this machine" in n]
    assert len(profiled) == 1  # ... and the note says why the cache will not serve it again
    assert "the cache serves this placement to no later run" in profiled[0]
    # The predictions rest on op times measured now: at which load (they were scaled to a
    # step taken at a load nobody was told of).
    assert re.search(r"at this machine.s load \d+\.\d\d -> \d+\.\d\d", profiled[0]), profiled[0]
    # The two logical CPUs share cores: the transfer between them was fitted on this graph,
    # and the search's cluster carries it.
    fitted = [n for n in report.notes if "links within a core group fitted on the graph" in n]
    assert len(fitted) == 1
    latency_us = float(fitted[0].split("graph: ")[1].split(" us")[0])
    assert report.timeline.cluster.latency[0, 1] * 1e6 == pytest.approx(latency_us, abs=0.06)


@pytest.mark.slow
def test_measure_steps_beside_verify_says_whose_sessions_the_measured_figures_are():
    # Two measurements of the same placements printed two figures for one device, with
    # intervals that did not overlap and no word of why.
    report = tf_autoplace.autoplace(small_cnn().graph, cluster=Cluster.local(num_logical_cpus=2),
                                    placer="random", seed=3, verify=15, measure_steps=15,
                                    progress=False)
    notes = [n for n in report.notes if n.startswith("the measured step times are "
                                                     "measure_steps' own sessions")]
    assert report.verification is not None and report.measure_steps == 15 and len(notes) == 1
    # Nothing measured by verification (every candidate one device): no such note.
    alone = tf_autoplace.autoplace(small_cnn().graph, cluster=Cluster.local(num_logical_cpus=2),
                                   placer="single", verify=15, measure_steps=15, progress=False)
    assert alone.verification is None and not any("measure_steps' own" in n
                                                  for n in alone.notes)


def test_verify_needs_this_machines_devices_and_enough_steps():
    tg = small_cnn()
    before = _devices(tg.graph)
    with pytest.raises(ConfigError, match="this machine does not have"):
        tf_autoplace.autoplace(tg.graph, cluster="k80x2", placer="m_etf", verify=15)
    with pytest.raises(ConfigError, match="at least 15"):
        tf_autoplace.autoplace(tg.graph, cluster="local", placer="m_etf", verify=5)
    assert _devices(tg.graph) == before
    fn = tf.function(lambda x: x * 2.0, input_signature=[tf.TensorSpec([2], tf.float32)])
    for steps in (15, 5):  # out of range too: what a function cannot take is said first
        with pytest.raises(ConfigError, match="verify is for graphs"):
            tf_autoplace.autoplace(fn, cluster="local", verify=steps)


def test_the_flag_verifies_by_default_where_the_binary_runs_the_graph(tmp_path):
    assert ap_flags._verify_steps(-1, "local") == (15, True)
    assert ap_flags._verify_steps(-1, "k80x2") == (0, False)
    # A TensorFlow cluster's spec with a target: the binary is about to run on its servers.
    served = Cluster.from_tf({"worker": ["localhost:1", "localhost:2"]}, devices="cpu2",
                             target="grpc://localhost:1")
    (tmp_path / "served.pbtxt").write_text(text_format.MessageToString(served.to_proto()))
    assert ap_flags._verify_steps(-1, str(tmp_path / "served.pbtxt")) == (15, True)
    assert ap_flags._verify_steps(0, str(tmp_path / "served.pbtxt")) == (0, False)
    assert ap_flags._verify_steps(-1, str(tmp_path / "missing.pbtxt")) == (0, False)
    assert ap_flags._verify_steps(20, "cpu2") == (20, False)
    with pytest.raises(ConfigError, match="does not have"):
        ap_flags.AutoplaceSettings(placer="m_etf", cluster="k80x2", verify=15)
    base = {"autoplace": "m_etf", "autoplace_placement": None}
    assert ap_flags._check_verify({**base, "autoplace_cluster": "k80x2", "autoplace_verify": -1})
    with pytest.raises(flags.ValidationError, match="does not have"):
        ap_flags._check_verify({**base, "autoplace_cluster": "k80x2", "autoplace_verify": 15})
    with pytest.raises(flags.ValidationError, match="at least 15"):
        ap_flags._check_verify({**base, "autoplace_cluster": "local", "autoplace_verify": 3})


def test_on_one_device_nothing_is_measured_and_the_placement_is_the_best_possible():
    tg = small_cnn()
    report = tf_autoplace.autoplace(tg.graph, cluster=Cluster.local(num_logical_cpus=1),
                                    verify=15, progress=False)
    assert report.verification is None
    assert any(n.startswith("verify: the cluster has one device") for n in report.notes)
    # One placement exists, so it is the best possible one: the certificate says 0%.
    assert report.optimality_gap == 0.0 and report.lp_lower_bound_s == report.step_time_s


def test_the_graphs_own_annotations_are_a_candidate_what_the_user_had():
    # A graph the user placed by hand: verification measures that placement too (it measured
    # only the placer's, the best heuristic's and one device, so a good hand placement could
    # be replaced by a placement never measured against it). No measurement here: which
    # placements would be measured.
    from tf_autoplace.graph import ingest
    from tf_autoplace.pipeline.engine import ANNOTATED, annotated_placement, \
        verification_candidates
    from tf_autoplace.pipeline.prepare import build_problem

    tg = small_cnn()
    cluster = Cluster.from_file("testdata/cpu2_independent.pbtxt")
    cpu1 = cluster.names.index(next(n for n in cluster.names if n.endswith("CPU:1")))
    hand = [op for op in tg.graph.get_operations() if op.type == "VarHandleOp"][:2]
    for op in hand:
        op._set_device("/device:CPU:1")
    graph_def = tg.graph.as_graph_def()
    problem, _ = build_problem(ingest.load_meta_graph(tg.graph), cluster)
    devices = annotated_placement(problem, graph_def)
    coloc = problem.graph.colocation
    pinned = {int(coloc[problem.graph.index(op.name)]) for op in hand}
    on_cpu1 = np.isin(coloc, list(pinned))
    assert (devices[on_cpu1] == cpu1).all() and (devices[~on_cpu1] != cpu1).all()
    names = [c.name for c in verification_candidates(problem, "m_etf", devices * 0,
                                                     annotated=devices)]
    assert ANNOTATED in names and SINGLE in names
    # A placer (or the best heuristic) that returns what the user had: measured once, under
    # the user's name, or the decision rule no longer keeps it on a tie with one device.
    same = verification_candidates(problem, "m_etf", devices, annotated=devices)
    assert [c.name for c in same].count(ANNOTATED) == 1 and SINGLE in [c.name for c in same]
    assert next(c for c in same if c.name == ANNOTATED).assignment == dict(zip(
        problem.graph.names, (cluster.names[d] for d in devices.tolist())))
    assert "m_etf" not in [c.name for c in same]
    # Unannotated, or annotated with devices the cluster lacks: nothing of the user's.
    assert annotated_placement(problem, small_cnn().graph.as_graph_def()) is None
    for op in hand:
        op._set_device("/device:GPU:3")
    assert annotated_placement(problem, tg.graph.as_graph_def()) is None
    graph_def = tg.graph.as_graph_def()
    graph_def.node[0].device = "not a device::"  # (TF's parser raises on it)
    assert annotated_placement(problem, graph_def) is None


def test_a_replica_device_setter_placement_is_what_the_user_had():
    """replica_device_setter annotates variables with a task and no device (/job:ps/task:0):
    the user's placement then had no candidate (or a wrong one, when a Saver's ops named the
    device in full). TF puts such an op on the task's first device with its kernel."""
    from tf_autoplace.graph import ingest
    from tf_autoplace.pipeline.engine import annotated_placement
    from tf_autoplace.pipeline.prepare import build_problem

    cluster = Cluster.from_tf({"ps": ["localhost:2222"], "worker": ["localhost:2223"]},
                              devices="cpu2")
    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
                ps_tasks=1, worker_device="/job:worker/task:0")):
            w = tf.compat.v1.get_variable("w", [8, 8])
            step = tf.compat.v1.train.get_or_create_global_step()
            loss = tf.reduce_sum(tf.matmul(tf.ones([4, 8]), w))
            train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
                loss, global_step=step)
        tf.compat.v1.train.Saver()  # its ops name /job:ps/task:0/device:CPU:0 in full
    del train
    graph_def = graph.as_graph_def()
    assert graph.get_operation_by_name("w").device == "/job:ps/task:0"
    problem, _ = build_problem(ingest.load_meta_graph(graph), cluster)
    devices = annotated_placement(problem, graph_def)
    assert devices is not None
    names = problem.cluster.names
    placed = {problem.graph.names[i]: names[d] for i, d in enumerate(devices.tolist())}
    ps0 = "/job:ps/replica:0/task:0/device:CPU:0"
    assert placed["w"] == placed["global_step"] == ps0
    assert placed["MatMul"].startswith("/job:worker/replica:0/task:0/")
