"""``tf-autoplace place`` end to end, as a user runs it.

A process that runs the command imports TensorFlow (seconds each), so two invocations run as
commands (the default placer end to end, and a repeat whose bytes must equal those of a run in
another process), started once per module; the rest run the command's ``place.run`` in this
process, where TensorFlow is loaded already, with the settings its flags would give.
"""

import contextlib
import io
import json
import os
import re
import stat

import pytest
import tensorflow as tf
from absl import flags as absl_flags
from google.protobuf import json_format, text_format
from tensorflow.core.framework import graph_pb2
from tensorflow.core.protobuf import meta_graph_pb2

import tf_autoplace
from tf_autoplace.cli import place
from tf_autoplace.core.cluster import resolve_cluster
from tf_autoplace.graph import costgraph, ingest
from tf_autoplace.pipeline.prepare import build_problem, export_cost_graph
from tf_autoplace.proto import placement_pb2
from tf_autoplace.testing import free_batch_graph, small_cnn

from tests.conftest import REPO

HOST = "/job:localhost/replica:0/task:0/device:"
CPU2_SPLIT = os.path.join(REPO, "testdata", "cpu2_independent.pbtxt")
CPU2_DEVICES = {f"{HOST}CPU:0", f"{HOST}CPU:1"}

# name -> (input file, output file, extra flags): the invocations run as a user runs them, one
# process each (inputs are written by the fixture below).
RUNS = {
    # No --placer: the default placer (auto) runs end to end through the tool.
    "graph_def": ("cnn.pb", "placed.pb", ["--report_json={dir}/report.json"]),
    # The same input and seed as "repeat_in_process": the same bytes from another process.
    "repeat": ("cnn.pb", "repeat_1.pb", ["--placer=m_etf", "--seed=3"]),
}

# name -> (input file, output file, place.run settings): successful invocations run in this
# process, where TensorFlow is loaded already ({dir}: the module's directory).
IN_PROCESS_RUNS = {
    "meta_graph_text": ("cnn_meta.pbtxt", "placed_meta.pbtxt", dict(placer="m_etf")),
    # A cost graph in, its placement (a PlacementResult, JSON by the name) out.
    "cost_graph": ("cnn.costgraph.pbtxt", "placement.json", dict(placer="m_etf")),
    "measured": ("cnn_meta.pbtxt", "placed_measured.pbtxt",
                 dict(placer="m_etf", measure_steps=15, report_json="{dir}/r_measured.json",
                      trace_json="{dir}/t_measured.json")),
    "repeat_in_process": ("cnn.pb", "repeat_2.pb", dict(placer="m_etf", seed=3)),
    # A placement saved by an earlier run, applied without searching.
    "saved_placement": ("cnn.pb", "placed_saved.pb", dict(placement="{dir}/saved.pbtxt",
                                                          report_json="{dir}/r_saved.json")),
    # Measured op times (one op made very slow) instead of the analytical estimates.
    "profiled": ("cnn.pb", "placed_profiled.pb", dict(placer="m_etf",
                                                      cost_profile="{dir}/cnn_profile.pbtxt",
                                                      report_json="{dir}/r_profiled.json")),
    # A placeholder of unknown batch size, measured with made-up inputs of the shape given.
    "feed_shape": ("free_batch.pb", "placed_free.pb", dict(
        placer="m_etf", measure_steps=15, feed_shapes=["x=8,16"],
        report_json="{dir}/r_free.json")),
    # A placer's setting as the flag gives it: a Post search of 24 placements.
    "placer_option": ("cnn.pb", "placed_option.pb", dict(placer="post",
                                                         placer_options=["max_samples=24"],
                                                         report_json="{dir}/r_option.json")),
}

# name -> (input file, output file, place.run settings) for the failing invocations run in this
# process ({dir}: the module's directory).
ERROR_RUNS = {
    "corrupt_input": ("corrupt.pb", "out_corrupt.pb", dict(report_json="{dir}/r_corrupt.json")),
    "missing_input": ("missing.pb", "out_missing.pb", dict(report_json="{dir}/r_missing.json")),
    "bad_cluster": ("cnn.pb", "out_cluster.pb", dict(cluster="{dir}/bad_cluster.pbtxt",
                                                     report_json="{dir}/r_cluster.json")),
    "unknown_placer": ("cnn.pb", "out_placer.pb", dict(placer="no_such_placer",
                                                       report_json="{dir}/r_placer.json")),
    # --ray_address reaches the placer (place had no such flag): m_etf runs no simulations.
    "ray_for_a_heuristic": ("cnn.pb", "out_ray.pb", dict(ray_address="auto",
                                                         report_json="{dir}/r_ray.json")),
    "foreign_placement": ("tiny.pb", "out_foreign.pb", dict(placement="{dir}/saved.pbtxt",
                                                            report_json="{dir}/r_foreign.json")),
    # --placer, --policy and --budget_s with --placement were ignored without a word.
    "placement_with_search": ("cnn.pb", "out_search.pb", dict(
        placement="{dir}/saved.pbtxt", search_flags=["--placer", "--budget_s"],
        report_json="{dir}/r_search.json")),
    # --cache_dir without --cache: no cache was used, without a word
    "cache_dir_without_cache": ("cnn.pb", "out_cache_dir.pb", dict(
        cache_dir="{dir}/my_cache", report_json="{dir}/r_cache_dir.json")),
    "unfed": ("free_batch.pb", "out_unfed.pb", dict(placer="m_etf", measure_steps=15,
                                                    report_json="{dir}/r_unfed.json")),
    "feed_shape_not_a_placeholder": ("free_batch.pb", "out_y.pb", dict(
        placer="m_etf", measure_steps=15, feed_shapes=["w=16,4"],
        report_json="{dir}/r_y.json")),
    "feed_shape_wrong_shape": ("free_batch.pb", "out_17.pb", dict(
        placer="m_etf", measure_steps=15, feed_shapes=["x=8,17"],
        report_json="{dir}/r_17.json")),
    "feed_shape_unmeasured": ("free_batch.pb", "out_unmeasured.pb", dict(
        placer="m_etf", feed_shapes=["x=8,16"], report_json="{dir}/r_unmeasured.json")),
    "feed_shape_malformed": ("free_batch.pb", "out_malformed.pb", dict(
        placer="m_etf", measure_steps=15, feed_shapes=["x=8,-1"],
        report_json="{dir}/r_malformed.json")),
}


def _place_run(workdir, inp, out, settings):
    """``place.run`` in this process with the command's defaults and ``settings`` (strings
    formatted with ``dir=workdir``): (status, stdout, stderr)."""
    kwargs = dict(cluster=CPU2_SPLIT, placer="auto", seed=0, max_groups=2000,
                  report_json=None, progress=False)
    kwargs.update({key: value.format(dir=workdir) if isinstance(value, str) else value
                   for key, value in settings.items()})
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = place.run(str(workdir / inp), str(workdir / out), **kwargs)
    return status, stdout.getvalue(), stderr.getvalue()


def _run_failing(workdir, name):
    """``place.run`` of ERROR_RUNS[name] in this process: (status, stderr)."""
    inp, out, settings = ERROR_RUNS[name]
    status, _, stderr = _place_run(workdir, inp, out, {"placer": "m_etf", **settings})
    return status, stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory, start_scripts, write_proto):
    """Write the inputs, run every RUNS entry (all at once), return (dir, results, inputs)."""
    workdir = tmp_path_factory.mktemp("autoplace_graphdef")
    graph = small_cnn().graph
    graph_def = graph.as_graph_def()
    with graph.as_default():
        meta_graph = tf.compat.v1.train.export_meta_graph(graph=graph, graph_def=graph_def)
    write_proto(workdir / "cnn.pb", graph_def)
    write_proto(workdir / "cnn_meta.pbtxt", meta_graph, text=True)
    problem, _ = build_problem(ingest.load_meta_graph(graph_def), resolve_cluster("testdata/cpu2_independent.pbtxt"))
    costgraph.write(workdir / "cnn.costgraph.pbtxt", export_cost_graph(problem))
    (workdir / "corrupt.pb").write_bytes(b"\x0a\x05\x0a\x03abc\xff\xff truncated")
    (workdir / "bad_cluster.pbtxt").write_text('device { name: "/device:CPU:0" kind: ')
    saved = tf_autoplace.autoplace(graph_def, cluster="testdata/cpu2_independent.pbtxt", placer="m_etf",
                                   seed=4, progress=False)
    write_proto(workdir / "saved.pbtxt", saved.to_proto(), text=True)
    tiny = tf.Graph()
    with tiny.as_default():
        tf.identity(tf.constant(1.0, name="one"), name="out")
    write_proto(workdir / "tiny.pb", tiny.as_graph_def())
    write_proto(workdir / "free_batch.pb", free_batch_graph().as_graph_def())
    slow_op = next(n.name for n in graph_def.node if n.op == "Conv2D")
    (workdir / "cnn_profile.pbtxt").write_text(
        f'op {{ name: "{slow_op}" device_kind: "CPU" compute_time_us: 2000000 }}\n'
        'op { name: "not_in_the_graph" device_kind: "CPU" compute_time_us: 5 }\n')

    wait = start_scripts({
        name: ["-m", "tf_autoplace.cli", "place", f"--input={workdir / inp}",
               f"--output={workdir / out}", "--cluster=testdata/cpu2_independent.pbtxt",
               *(flag.format(dir=workdir) for flag in extra)]
        for name, (inp, out, extra) in RUNS.items()})
    try:  # in this process while the commands import TensorFlow
        results = {name: _place_run(workdir, *run) for name, run in IN_PROCESS_RUNS.items()}
    finally:
        commands = wait()
    results.update(commands)
    return workdir, results, {"graph_def": graph_def, "meta_graph": meta_graph, "saved": saved}


def _assert_placed(graph_def, reference):
    assert [n.name for n in graph_def.node] == [n.name for n in reference.node]
    assert {n.device for n in graph_def.node} <= CPU2_DEVICES
    assert all(n.device for n in graph_def.node)


def test_binary_graph_def_in_binary_out_with_json_report(runs):
    workdir, results, inputs = runs
    code, stdout, stderr = results["graph_def"]
    assert code == 0, stderr
    # Every file it wrote is listed, one line each.
    assert [line for line in stdout.splitlines() if line.startswith("wrote ")] == [
        f"wrote {workdir / 'placed.pb'}", f"wrote {workdir / 'report.json'}"]
    placed = graph_pb2.GraphDef.FromString((workdir / "placed.pb").read_bytes())
    _assert_placed(placed, inputs["graph_def"])
    assert {n.device for n in placed.node} == CPU2_DEVICES  # the placer uses both CPUs here
    report = json.loads((workdir / "report.json").read_text())
    assert report["placer"] == "auto" and report["step_time_s"] > 0
    assert report["num_ops"] == len(inputs["graph_def"].node)


def test_text_meta_graph_in_stays_a_text_meta_graph(runs):
    workdir, results, inputs = runs
    code, stdout, stderr = results["meta_graph_text"]
    assert code == 0, stderr
    placed = text_format.Parse((workdir / "placed_meta.pbtxt").read_text(),
                               meta_graph_pb2.MetaGraphDef())
    _assert_placed(placed.graph_def, inputs["graph_def"])
    original = inputs["meta_graph"]
    assert set(placed.collection_def) == set(original.collection_def) != set()
    assert placed.collection_def["train_op"] == original.collection_def["train_op"]
    assert placed.meta_info_def == original.meta_info_def
    # Every field but the graph as it came: a saver_def only where the input had one (an empty
    # one makes import_meta_graph fail), assets and the rest kept.
    rest, want = meta_graph_pb2.MetaGraphDef(), meta_graph_pb2.MetaGraphDef()
    rest.CopyFrom(placed)
    want.CopyFrom(original)
    rest.ClearField("graph_def")
    want.ClearField("graph_def")
    assert rest == want and [f.name for f, _ in rest.ListFields()] == [
        f.name for f, _ in want.ListFields()]
    with tf.Graph().as_default():
        tf.compat.v1.train.import_meta_graph(placed)
    assert "predicted step time" in stdout


def test_cost_graph_in_placement_out(runs):
    workdir, results, inputs = runs
    code, stdout, stderr = results["cost_graph"]
    assert code == 0, stderr
    assert f"wrote {workdir / 'placement.json'}" in stdout and "predicted step time" in stdout
    placement = json_format.Parse((workdir / "placement.json").read_text(),
                                  placement_pb2.PlacementResult())
    assert [op.name for op in placement.op] == [n.name for n in inputs["graph_def"].node]
    assert {op.device for op in placement.op} == CPU2_DEVICES
    assert placement.placer == "m_etf" and placement.step_time_s > 0


def test_measure_steps_put_measured_step_times_in_the_report_and_trace(runs):
    workdir, results, _ = runs
    code, stdout, stderr = results["measured"]
    assert code == 0, stderr
    report = json.loads((workdir / "r_measured.json").read_text())
    assert report["measure_steps"] == 15
    assert report["measured_step_time_s"] > 0 and report["measured_baseline_step_time_s"] > 0
    assert report["measured_speedup"] == pytest.approx(
        report["measured_baseline_step_time_s"] / report["measured_step_time_s"])
    assert "measured step time" in stdout and "measured single-device" in stdout
    trace = json.loads((workdir / "t_measured.json").read_text())["traceEvents"]
    lanes = {e["args"]["name"] for e in trace if e["name"] == "process_name"}
    assert {f"measured {d}" for d in CPU2_DEVICES} <= lanes  # both CPUs ran ops
    measured = [e for e in trace if e.get("cat") == "Measured"]
    assert measured and all(e["dur"] >= 0 for e in measured)
    assert "train" in {e["name"] for e in measured}  # graph ops, by name


def test_a_graph_of_unknown_batch_size_is_measured_with_the_feed_shape_given(runs):
    workdir, results, _ = runs
    code, stdout, stderr = results["feed_shape"]
    assert code == 0, stderr
    report = json.loads((workdir / "r_free.json").read_text())
    assert report["measured_step_time_s"] > 0 and report["measured_baseline_step_time_s"] > 0


def test_unknown_dim_sizes_a_none_batch_in_the_prediction(runs):
    # The command had no way to say the batch of a TF1 graph's None dimension: every figure
    # was batch 1's.
    workdir, _, _ = runs
    steps = {}
    for dim in (None, 100000):
        settings = {"placer": "single", "cluster": "k80x2", "unknown_dim": dim,
                    "report_json": f"{{dir}}/r_dim{dim}.json"}
        status, _, stderr = _place_run(workdir, "free_batch.pb", f"out_dim{dim}.pb", settings)
        assert status == 0, stderr
        report = json.loads((workdir / f"r_dim{dim}.json").read_text())
        steps[dim] = report["step_time_s"]
    assert steps[100000] > 1.5 * steps[None]
    status, stderr = _place_run(workdir, "cnn.costgraph.pbtxt", "out_dim.pbtxt",
                                {"placer": "m_etf", "unknown_dim": 8})[::2]
    assert status == 1 and "--unknown_dim sizes the unknown dimensions" in stderr


def test_a_placer_option_sets_the_placers_search(runs):
    workdir, results, _ = runs
    code, stdout, stderr = results["placer_option"]
    assert code == 0, stderr
    notes = " ".join(json.loads((workdir / "r_option.json").read_text())["notes"])
    samples = [int(n) for n in re.findall(r"post: .* after (\d+) simulated placements", notes)]
    assert samples and samples[0] <= 24  # the default search simulates 2,400


def test_a_cost_profile_replaces_the_estimates_of_the_ops_it_names(runs):
    workdir, results, inputs = runs
    code, stdout, stderr = results["profiled"]
    assert code == 0, stderr
    report = json.loads((workdir / "r_profiled.json").read_text())
    assert report["step_time_s"] >= 2.0  # the profiled 2 s convolution is on the path
    notes = " ".join(report["notes"])
    assert f"{report['num_ops'] - 1} ops are not in the cost profile" in notes
    assert "1 ops of the cost profile are not in this graph" in notes
    _assert_placed(graph_pb2.GraphDef.FromString((workdir / "placed_profiled.pb").read_bytes()),
                   inputs["graph_def"])


@pytest.mark.parametrize("name, message", [
    ("corrupt_input", "corrupt.pb' is not a GraphDef or MetaGraphDef"),
    ("missing_input", "cannot read graph file '.*missing.pb'"),
    ("bad_cluster", "bad_cluster.pbtxt: malformed cluster spec"),
    ("unknown_placer", "no_such_placer"),
    ("ray_for_a_heuristic", "'m_etf' runs no simulations"),
    ("placement_with_search", "--placer, --budget_s set a placer's search; --placement applies "
                              "a saved placement without one"),
    ("cache_dir_without_cache", "--cache_dir is the directory of the placement cache, which "
                                "--cache turns on: give both"),
    # a placeholder of unknown batch size: the error names the flag that gives its shape
    ("unfed", "'x' has no fully known static shape.*--feed_shape=NAME=D0,D1"),
    ("feed_shape_not_a_placeholder", "--feed_shape names 'w', which is not a placeholder"),
    ("feed_shape_wrong_shape", "shape \\[8, 17\\], and the placeholder takes \\[-1, 16\\]"),
    ("feed_shape_unmeasured", "--feed_shape gives the inputs of the steps --measure_steps"),
    ("feed_shape_malformed", "--feed_shape is NAME=D0,D1,... .sizes >= 0"),
])
def test_errors_exit_non_zero_with_a_message_and_write_nothing(runs, name, message):
    workdir, _, _ = runs
    code, stderr = _run_failing(workdir, name)
    assert code != 0
    error_lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(error_lines) == 1, stderr
    assert re.search(message, error_lines[0]), error_lines[0]
    assert "Traceback" not in stderr
    _, out, settings = ERROR_RUNS[name]
    assert not (workdir / out).exists()
    assert not os.path.exists(settings["report_json"].format(dir=workdir))
    assert not list(workdir.glob(".tmp_autoplace_*"))  # no half-written temporary left


@pytest.mark.parametrize("flags, message", [
    (dict(report_json="nodir/r.json"),
     "--report_json 'nodir/r.json': the directory '.*nodir' does not exist"),
    (dict(trace_json="nodir/t.json"),
     "--trace_json 'nodir/t.json': the directory '.*nodir' does not exist"),
    (dict(output="new/a/b/placed.pb", cluster="bad_cluster.pbtxt"),
     "--output 'new/a/b/placed.pb': the directory '.*new/a/b' does not exist"),
    (dict(report_json="same.json", trace_json="same.json"),
     "--trace_json and --report_json are the same file 'same.json'"),
    (dict(output="a_dir"), "--output 'a_dir' is a directory"),
    # --output=$OUT with OUT unset: was placed, then staged in the parent directory
    (dict(output=""), "--output must be a non-empty path, got ''"),
    # a device (as root, --output=/dev/null replaced the machine's /dev/null) or a FIFO
    (dict(output="fifo"), "--output 'fifo' is not a regular file .a device, FIFO or socket"),
    (dict(report_json="fifo"), "--report_json 'fifo' is not a regular file"),
    (dict(placer_options=["bogus=1"]), "the m_etf placer has no settings to set"),
    (dict(input="g.costgraph.pbtxt", cost_profile="p.pbtxt"),
     "a cost graph carries its own times"),
    (dict(report_json="in.pb"), "--report_json 'in.pb' would overwrite the input graph"),
    # A cost graph's output is a placement: over the input it replaced the cost graph.
    (dict(input="g.costgraph.pbtxt", output="g.costgraph.pbtxt"),
     "--output 'g.costgraph.pbtxt' would overwrite the input cost graph"),
    (dict(progress_logdir="in.pb"), "--progress_logdir 'in.pb' is a file, not a directory"),
    (dict(save_policy="policy"), "--save_policy keeps the policy a learned placer fine-tuned "
                                 r"\(placeto, hdp, gdp\); --placer=m_etf keeps none"),
    (dict(trace_json="alias/out.pb"), "--trace_json and --output are the same file"),
    (dict(input="sm", output="placed_sm", trace_json="sm/saved_model.pb"),
     "--trace_json 'sm/saved_model.pb' would overwrite the input SavedModel 'sm'"),
    (dict(input="sm", output="sm/placed", report_json=None),
     "--output 'sm/placed' would overwrite the input SavedModel 'sm' .an output goes outside"),
])
def test_unwritable_outputs_fail_before_the_work_and_nothing_is_written(
        tmp_path, monkeypatch, capsys, flags, message):
    # In this process (TF is loaded already): run() checks the paths and the options before
    # anything else.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_dir").mkdir()
    (tmp_path / "bad_cluster.pbtxt").write_text('device { name: "/device:CPU:0" kind: ')
    (tmp_path / "in.pb").write_bytes(small_cnn().graph.as_graph_def().SerializeToString())
    (tmp_path / "alias").symlink_to(tmp_path)  # the same directory under another name
    (tmp_path / "sm").mkdir()  # a SavedModel directory (the paths are checked before it is read)
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    os.mkfifo(tmp_path / "fifo")
    before = sorted(os.listdir(tmp_path))
    args = {"input": "in.pb", "output": "out.pb", "cluster": "testdata/cpu2_independent.pbtxt", "report_json": None,
            **flags}
    status = place.run(args.pop("input"), args.pop("output"), placer="m_etf", seed=0,
                       max_groups=2000, **args)
    assert status == 1
    error_lines = [line for line in capsys.readouterr().err.splitlines()
                   if line.startswith("error: ")]
    assert len(error_lines) == 1 and re.search(message, error_lines[0]), error_lines
    assert sorted(os.listdir(tmp_path)) == before  # no output, no directory, no temporary


def test_a_negative_seed_is_refused_at_flag_parsing():
    try:
        with pytest.raises(absl_flags.IllegalFlagValueError, match="-1"):
            absl_flags.FLAGS(["tf-autoplace place", "--input=a.pb", "--output=b.pb",
                              "--seed=-1"])
    finally:
        absl_flags.FLAGS.unparse_flags()


def test_same_input_and_seed_give_the_same_bytes_serialized_deterministically(runs):
    workdir, results, _ = runs
    assert results["repeat"][0] == results["repeat_in_process"][0] == 0, results["repeat"][2]
    first, second = (workdir / "repeat_1.pb").read_bytes(), (workdir / "repeat_2.pb").read_bytes()
    assert first == second
    # Deterministic serialization (maps sorted by key), not an accident of this run's order.
    assert first == graph_pb2.GraphDef.FromString(first).SerializeToString(deterministic=True)


def test_outputs_get_the_users_umask(runs):
    workdir, results, _ = runs
    assert results["graph_def"][0] == 0
    mask = os.umask(0)
    os.umask(mask)
    for name in ("placed.pb", "report.json"):
        assert stat.S_IMODE(os.stat(workdir / name).st_mode) == 0o666 & ~mask, name


def test_a_saved_placement_is_applied_without_searching(runs):
    workdir, results, inputs = runs
    rc, out, err = results["saved_placement"]
    assert rc == 0, err
    placed = graph_pb2.GraphDef()
    placed.ParseFromString((workdir / "placed_saved.pb").read_bytes())
    assert {n.name: n.device for n in placed.node} == inputs["saved"].assignment
    report = json.loads((workdir / "r_saved.json").read_text())
    assert report["placer"] == "saved" and "made by m_etf (seed 4)" in report["notes"][0]
    assert report["step_time_s"] == pytest.approx(inputs["saved"].step_time_s)


def test_a_placement_for_another_graph_fails_and_writes_nothing(runs):
    workdir, _, _ = runs
    rc, err = _run_failing(workdir, "foreign_placement")
    assert rc == 1 and "was made for another graph" in err
    assert not (workdir / "out_foreign.pb").exists() and not (workdir / "r_foreign.json").exists()


@pytest.mark.parametrize("flags, message", [
    (dict(save_policy="nodir/policy"),
     "--save_policy 'nodir/policy': the directory '.*nodir' does not exist"),
    (dict(save_policy="full_dir"), "--save_policy 'full_dir' exists; refusing to overwrite"),
    (dict(save_policy="out.pb"), "--save_policy and --output are the same file 'out.pb'"),
])
def test_a_save_policy_that_cannot_be_written_fails_before_the_work(
        tmp_path, monkeypatch, capsys, flags, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "full_dir").mkdir()
    (tmp_path / "full_dir" / "keep.txt").write_text("mine")
    (tmp_path / "in.pb").write_bytes(small_cnn().graph.as_graph_def().SerializeToString())
    before = sorted(os.listdir(tmp_path))
    status = place.run("in.pb", "out.pb", cluster=CPU2_SPLIT, placer="m_etf", seed=0,
                       max_groups=2000, report_json=None, progress=False, **flags)
    assert status == 1
    assert re.search(message, capsys.readouterr().err)
    assert sorted(os.listdir(tmp_path)) == before


def test_save_policy_without_a_fine_tuned_policy_writes_nothing_at_all(tmp_path, monkeypatch,
                                                                         capsys):
    # The placement succeeds, then there is no policy to keep: the run fails as a whole, so
    # neither the placed graph nor the report appears (outputs are written together).
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.pb").write_bytes(small_cnn().graph.as_graph_def().SerializeToString())
    before = sorted(os.listdir(tmp_path))
    # (gdp placing zero-shot, no update step, tunes nothing: a learned placer that keeps none.
    # A placer that never keeps one is refused before the search: test_unwritable_outputs_...)
    status = place.run("in.pb", "out.pb", cluster=CPU2_SPLIT, placer="gdp", seed=0,
                       max_groups=2000, report_json="r.json", save_policy="policy",
                       progress=False, placer_options=["max_steps=0"])
    assert status == 1
    assert "the gdp placer kept no fine-tuned policy" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.slow
def test_hdp_saves_its_policy_and_the_next_run_starts_from_it(tmp_path, monkeypatch,
                                                             one_update_hdp):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.pb").write_bytes(small_cnn().graph.as_graph_def().SerializeToString())
    options = dict(cluster="k80x2", placer="hdp", seed=0, max_groups=2000, report_json=None,
                   progress=False)
    assert place.run("in.pb", "out1.pb", save_policy="first", **options) == 0
    assert place.run("in.pb", "out2.pb", policy="first", save_policy="second", **options) == 0
    with open(os.path.join("second", "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["placer"] == "hdp" and manifest["fine_tuned_from"] == "first"
    assert manifest["results"]["updates"] == 1
