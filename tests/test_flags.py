"""The absl flag door: tools/example_train.py run as a user runs it, with and without --autoplace.

Each run is a subprocess importing TensorFlow (seconds each), so all of them start together once
per module and the tests read their results. In-process checks cover what a subprocess would
observe only slowly: the hook installed with explicit settings (a placement error, a
MonitoredSession, a second session, uninstall), budget pass-through, the session device check.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from absl.testing import flagsaver

import tf_autoplace
from tf_autoplace import flags as ap_flags  # defines the flags on absl's global FLAGS; harmless
from tf_autoplace.core import registry
from tf_autoplace.core import cluster as cluster_module
from tf_autoplace.core.cluster import Cluster, resolve_cluster
from tf_autoplace.errors import ConfigError
from tf_autoplace.outputs.files import umask
from tf_autoplace.outputs.saved_placement import read_placement
from tf_autoplace.placers import SingleDevicePlacer
from tf_autoplace.placers.placeto.search import pretrained_policy_dir
from tf_autoplace.testing import small_cnn

HOST = "/job:localhost/replica:0/task:0/device:"
CPU2 = "testdata/cpu2_independent.pbtxt"
TINY = """
device { name: "/job:localhost/replica:0/task:0/device:CPU:0" kind: "CPU" memory_bytes: 1000 }
device { name: "/job:localhost/replica:0/task:0/device:CPU:1" kind: "CPU" memory_bytes: 1000 }
"""
CONFIG2 = dict(device_count={"CPU": 2}, allow_soft_placement=False,
               inter_op_parallelism_threads=1, intra_op_parallelism_threads=1)

# name -> extra flags ({dir} is the module's temp dir).
RUNS = {
    "plain": ["--print_devices"],
    "placed": ["--print_devices", "--autoplace=m_etf", f"--autoplace_cluster={CPU2}",
               "--autoplace_report={dir}/report.json"],
    # A placer's setting from the command line (a Post search of 24 placements) and a profile
    # of one op and one the graph lacks (every other op keeps its analytical time, and the
    # report says so).
    "post_option_profiled": ["--autoplace=post", f"--autoplace_cluster={CPU2}",
                             "--autoplace_placer_option=max_samples=24",
                             "--autoplace_cost_profile={dir}/profile.pbtxt",
                             "--autoplace_report={dir}/r_post.json"],
}
# Runs whose flags this process parses too (test_bad_flags_are_refused_at_parsing_with_a_clear_
# message, test_settings_without_autoplace_warn_once_at_parsing); run with ``-m slow``.
SLOW_RUNS = {
    "plain": RUNS["plain"],
    # Settings of a placement that is off: a warning at parsing, then the unplaced run.
    "settings_without_autoplace": ["--autoplace_cluster=cpu2", "--autoplace_budget_s=5"],
    "bad_placer": ["--autoplace=no_such_placer", f"--autoplace_cluster={CPU2}"],
}


def _run_binaries(runs, tmp_path_factory, repo_root):
    """Run tools/example_train.py with each of ``runs``' flags, all at once; returns {name:
    (returncode, stdout, stderr, the temp dir)}."""
    workdir = tmp_path_factory.mktemp("example_train")
    (workdir / "profile.pbtxt").write_text(
        'op { name: "left/Relu" device_kind: "CPU" compute_time_us: 5 }\n'
        'op { name: "not_in_the_graph" device_kind: "CPU" compute_time_us: 5 }')
    pythonpath = os.pathsep.join(p for p in (repo_root, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=pythonpath)
    procs = {}
    for name, extra in runs.items():
        argv = [sys.executable, "tools/example_train.py", "--steps=4"]
        argv += [flag.format(dir=workdir) for flag in extra]
        procs[name] = subprocess.Popen(argv, cwd=repo_root, env=env, text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        results[name] = (proc.returncode, out, err, workdir)
    return results


@pytest.fixture(scope="module")
def runs(tmp_path_factory, repo_root):
    return _run_binaries(RUNS, tmp_path_factory, repo_root)


@pytest.fixture(scope="module")
def slow_runs(tmp_path_factory, repo_root):
    return _run_binaries(SLOW_RUNS, tmp_path_factory, repo_root)


def _losses(out):
    return [float(line.split()[-1]) for line in out.splitlines() if line.startswith("step ")]


def _devices(out):
    lines = [line for line in out.splitlines() if line.startswith("devices ")]
    assert len(lines) == 1, out
    return set(lines[0].split()[1:])


def test_without_flag_nothing_is_placed(runs):
    rc, out, err, _ = runs["plain"]
    assert rc == 0, err
    assert len(_losses(out)) == 4
    assert _devices(out) == {f"{HOST}CPU:0"}
    assert "autoplace:" not in err  # the hook was never installed


@pytest.mark.slow
def test_autoplace_settings_without_autoplace_warn_at_parsing(slow_runs):
    runs = slow_runs
    rc, out, err, _ = runs["settings_without_autoplace"]
    assert rc == 0, err
    warnings = [line for line in err.splitlines() if "given without --autoplace" in line]
    assert len(warnings) == 1, err
    assert "--autoplace_budget_s, --autoplace_cluster given without --autoplace: " \
           "autoplacement is off and they do nothing" in warnings[0]
    assert _losses(out) == _losses(runs["plain"][1])  # and nothing was placed
    assert "autoplace: placed" not in err


def test_a_binarys_own_autoplace_named_flags_are_not_taken_for_settings(repo_root):
    # A binary may define a flag of its own whose name starts with autoplace_ before the
    # import: it is not one of ours, and giving it is no reason to warn.
    code = ("from absl import flags\n"
            "flags.DEFINE_string('autoplace_logdir', '/tmp/x', 'the binary\\'s own')\n"
            "from tf_autoplace import flags as ap\n"
            "print('autoplace_logdir' in ap._SETTINGS_FLAGS, 'autoplace_cluster' in "
            "ap._SETTINGS_FLAGS)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo_root, text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]


def test_with_flag_same_losses_and_both_devices_execute(runs):
    rc, out, err, _ = runs["placed"]
    assert rc == 0, err
    assert "autoplace: placed" in err
    plain = _losses(runs["plain"][1])
    placed = _losses(out)
    assert len(placed) == 4
    np.testing.assert_allclose(placed, plain, rtol=1e-6)
    assert placed[-1] < placed[0]
    assert _devices(out) == {f"{HOST}CPU:0", f"{HOST}CPU:1"}


def test_report_json_is_written_and_valid(runs, repo_root):
    rc, _, err, workdir = runs["placed"]
    assert rc == 0, err
    report = json.loads((workdir / "report.json").read_text())
    assert report["placer"] == "m_etf"
    assert sum(d["num_ops"] for d in report["devices"]) == report["num_ops"] > 0
    assert {d["name"] for d in report["devices"] if d["num_ops"]} == {f"{HOST}CPU:0",
                                                                     f"{HOST}CPU:1"}
    # Paths as the binary resolved them when it parsed its flags (its main() may chdir).
    assert report["flags"] == {"autoplace": "m_etf",
                               "autoplace_cluster": os.path.join(repo_root, CPU2),
                               "autoplace_budget_s": None, "budget_passed_to_placer": False,
                               "autoplace_placement": None, "autoplace_cache": True,
                               "autoplace_policy": None, "autoplace_cost_profile": None,
                               "autoplace_placer_option": [], "autoplace_verify": 0,
                               "autoplace_unknown_dim": 1}
    # The permissions a plain open() gives under the binary's umask (it inherits ours), as
    # every other output of the tool; not a temporary file's 0600.
    assert (workdir / "report.json").stat().st_mode & 0o777 == 0o666 & ~umask()


@pytest.mark.slow
def test_a_bad_flag_stops_the_binary_before_it_trains(slow_runs):
    rc, out, err, _ = slow_runs["bad_placer"]
    assert rc != 0
    assert "'no_such_placer' is not a placer" in err
    assert "step " not in out


@pytest.mark.parametrize("argv, message", [
    (["--autoplace=m_etf", "--autoplace_cluster={dir}/bad.pbtxt"], "malformed cluster spec"),
    (["--autoplace=m_etf", f"--autoplace_cluster={CPU2}", "--autoplace_budget_s=-1"],
     "--autoplace_budget_s must be >= 0"),
    (["--autoplace=m_etf", f"--autoplace_cluster={CPU2}", "--autoplace_policy={dir}"],
     "go with a learned placer"),
    (["--autoplace=no_such_placer", f"--autoplace_cluster={CPU2}"],
     "'no_such_placer' is not a placer"),
])
def test_bad_flags_are_refused_at_parsing_with_a_clear_message(tmp_path, argv, message):
    # In this process, as the binary above parses them (each binary imports TensorFlow).
    (tmp_path / "bad.pbtxt").write_text('device { name: "/device:CPU:0" kind: ')
    try:
        with pytest.raises(flags.Error, match=re.escape(message)):
            flags.FLAGS(["train.py", *(arg.format(dir=tmp_path) for arg in argv)])
    finally:
        flags.FLAGS.unparse_flags()


def test_settings_without_autoplace_warn_once_at_parsing(caplog, monkeypatch):
    # The validator the binary's parsing runs (the binary's own run: -m slow), called on the
    # flags as that parsing leaves them: parsing here would run the validators of every flag
    # this process has defined, other commands' required flags too.
    monkeypatch.setattr(ap_flags, "_warned", set())
    validator = ap_flags._warn_settings_without_autoplace
    assert any(v.checker is validator for v in flags.FLAGS["autoplace_cluster"].validators)
    with flagsaver.flagsaver():
        flags.FLAGS["autoplace_cluster"].parse("cpu2")
        flags.FLAGS["autoplace_budget_s"].parse("5")
        values = {name: flags.FLAGS[name].value for name in
                  ("autoplace", "autoplace_placement", *ap_flags._SETTINGS_FLAGS)}
        assert validator(values) and validator(values)  # a warning, not a refusal; once
        assert validator(dict(values, autoplace="m_etf"))  # on: nothing to say
    warnings = [r.getMessage() for r in caplog.records if "given without" in r.getMessage()]
    assert warnings == ["--autoplace_budget_s, --autoplace_cluster given without --autoplace: "
                        "autoplacement is off and they do nothing; add --autoplace=auto (or "
                        "another placer) to place the graph"], warnings


def test_the_unknown_dim_flag_reaches_the_placement_options():
    # A binary that feeds a None-batch placeholder had no way to give its batch: every
    # figure was batch 1's.
    try:  # (not FLAGS(argv): other modules of the suite define flags it would require)
        flags.FLAGS.unparse_flags()
        flags.FLAGS.mark_as_parsed()
        dims = []
        for given in ({}, {"autoplace_unknown_dim": 64}):
            with flagsaver.flagsaver(autoplace="m_etf", autoplace_cluster="k80x2", **given):
                dims.append(ap_flags.settings_from_flags().place_options().unknown_dim)
    finally:
        flags.FLAGS.unparse_flags()
    assert dims == [1, 64]


def test_a_placer_option_reaches_the_placer(runs):
    rc, out, err, workdir = runs["post_option_profiled"]
    assert rc == 0, err
    report = json.loads((workdir / "r_post.json").read_text())
    assert report["flags"]["autoplace_placer_option"] == ["max_samples=24"]
    samples = [int(n) for n in re.findall(r"post: .* after (\d+) simulated placements",
                                          " ".join(report["notes"]))]
    assert samples and samples[0] <= 24  # the default search simulates 2,400
    assert _losses(out) == _losses(runs["plain"][1])


def test_the_cost_profile_flag_reaches_the_placement(runs):
    rc, out, err, workdir = runs["post_option_profiled"]
    assert rc == 0, err
    report = json.loads((workdir / "r_post.json").read_text())
    assert report["flags"]["autoplace_cost_profile"].endswith("profile.pbtxt")
    notes = " ".join(report["notes"])
    assert "1 ops of the cost profile are not in this graph" in notes
    assert f"{report['num_ops'] - 1} ops are not in the cost profile" in notes
    assert _losses(out) == _losses(runs["plain"][1])


# ----------------------------------------------------------------------------- in process
class _BudgetPlacer(SingleDevicePlacer):
    name = "budgeted"

    def __init__(self, budget_s):
        self.budget_s = budget_s


def _placer(name, budget_s=60.0, ray_address=None, policy=None):
    """The placer the flags' settings build for ``--autoplace=name``."""
    return ap_flags.AutoplaceSettings(placer=name, budget_s=budget_s, ray_address=ray_address,
                                      policy=policy).place_options().placer


def test_paths_are_the_ones_the_binary_was_started_with_after_main_changes_directory(
        tmp_path, monkeypatch):
    # A binary's main() that chdirs to its model directory made relative --autoplace_* paths
    # point elsewhere at the first run (a report's FileNotFoundError, a placement not found).
    start, elsewhere = tmp_path / "start", tmp_path / "elsewhere"
    (start / "out").mkdir(parents=True)
    elsewhere.mkdir()
    (start / "cluster.pbtxt").write_text((Path(__file__).parent.parent / "testdata"
                                          / "cpu2_independent.pbtxt").read_text())
    monkeypatch.chdir(start)
    try:  # (not FLAGS(argv): other modules of the suite define flags it would require)
        flags.FLAGS.unparse_flags()
        flags.FLAGS.mark_as_parsed()
        with flagsaver.flagsaver(autoplace="m_etf", autoplace_report="out/r.json",
                                 autoplace_cluster="cluster.pbtxt"):
            settings = ap_flags.settings_from_flags()  # what install() reads after parsing
    finally:
        flags.FLAGS.unparse_flags()
    monkeypatch.chdir(elsewhere)  # main() runs after install()
    assert settings.report_path == str(start / "out" / "r.json")
    assert settings.cluster == str(start / "cluster.pbtxt")


def _cannot_create_in(directory: str) -> bool:
    """Whether a file cannot be made in ``directory`` (root may write where modes say no)."""
    try:
        with open(os.path.join(directory, ".tf_autoplace_probe"), "w"):
            pass
    except OSError:
        return os.path.isdir(directory)
    os.remove(os.path.join(directory, ".tf_autoplace_probe"))
    return False


@pytest.mark.skipif(not _cannot_create_in("/proc"),
                    reason="needs a directory this user cannot write to")
def test_a_report_that_cannot_be_written_is_a_config_error_naming_it(hook):
    # It was an untyped FileNotFoundError out of the first run, after placing the graph.
    hook(placer="m_etf", cluster=CPU2, verify=0, cache=False, report_path="/proc/r.json")
    graph, x, loss, train = _unknown_batch_graph(batch=4)
    with graph.as_default():
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(**CONFIG2)) as sess:
        with pytest.raises(tf_autoplace.ConfigError, match="cannot write the report to "
                                                           "'/proc/r.json'"):
            sess.run(init)


def test_installing_with_autoplace_off_removes_an_earlier_hook(hook):
    hook(placer="m_etf", cluster=CPU2)
    from tensorflow.python.client import session as tf_session

    assert tf_session.BaseSession._extend_graph is ap_flags._extend_graph
    try:
        flags.FLAGS.unparse_flags()
        flags.FLAGS.mark_as_parsed()  # parsed, --autoplace off (its default)
        assert ap_flags.install() is False
    finally:
        flags.FLAGS.unparse_flags()
    assert tf_session.BaseSession._extend_graph is not ap_flags._extend_graph


def test_a_program_in_which_no_session_ran_a_graph_is_warned_at_exit(hook, caplog,
                                                                     monkeypatch):
    # An eager TF2 program or a Keras fit in eager mode never hands a graph to a Session: the
    # hook places nothing, and the binary ended with no placement and no report, without a word.
    registered = []
    monkeypatch.setattr(ap_flags, "_exit_check", [False])
    monkeypatch.setattr(ap_flags, "_handed", [0])
    monkeypatch.setattr(ap_flags.atexit, "register", registered.append)
    hook(placer="m_etf", cluster=CPU2, verify=0, cache=False)
    assert registered == [ap_flags._warn_if_no_session_ran]

    def warned():
        return [r.getMessage() for r in caplog.records
                if "no Session ran a graph" in r.getMessage()]

    ap_flags._warn_if_no_session_ran()
    assert len(warned()) == 1 and "tf_autoplace.autoplace(function or model)" in warned()[0]
    caplog.clear()
    tg = small_cnn()
    with tf.compat.v1.Session(graph=tg.graph, config=tf.compat.v1.ConfigProto(**CONFIG2)) as sess:
        sess.run(tg.init_op)  # placed by the hook
    ap_flags._warn_if_no_session_ran()
    assert warned() == []


def test_budget_is_passed_to_placers_that_take_one():
    entry = registry.PlacerEntry("budgeted", _BudgetPlacer, "search", "", {"budget_s"})
    with registry.temporarily(entry):
        assert _placer("budgeted", 12.5).budget_s == 12.5
    assert _placer("placeto", 12.5).config.budget_s == 12.5
    # Without --autoplace_budget_s a placer keeps its own cap, as autoplace() gives it (the
    # flag's 60 s once cut auto's 120 s search short in training binaries).
    from tf_autoplace.placers import AutoConfig, get_placer
    assert not flags.FLAGS["autoplace_budget_s"].default
    assert _placer("auto", flags.FLAGS["autoplace_budget_s"].default).config.budget_s == \
        get_placer("auto").config.budget_s == AutoConfig().budget_s
    assert isinstance(_placer("single", 12.5), SingleDevicePlacer)
    with pytest.raises(tf_autoplace.ConfigError, match="unknown placer"):
        _placer("nope", 1.0)


def test_ray_address_goes_only_to_placers_that_take_one():
    assert _placer("auto", 60.0, "auto").config.ray_address == "auto"
    with pytest.raises(tf_autoplace.ConfigError, match="'m_etf' runs no simulations"):
        _placer("m_etf", 60.0, "auto")
    with pytest.raises(flags.ValidationError, match="--autoplace_ray_address='auto'"):
        ap_flags._check_placer_and_cluster({"autoplace": "m_etf", "autoplace_cluster": "local",
                                            "autoplace_ray_address": "auto",
                                            "autoplace_placement": None})
    assert ap_flags._check_placer_and_cluster({"autoplace": "auto", "autoplace_cluster": "local",
                                               "autoplace_ray_address": "auto",
                                               "autoplace_placement": None})
    # A malformed address stops the binary at flag parsing, not at its first session.run.
    with pytest.raises(flags.ValidationError, match="--autoplace_ray_address: ray_address must"):
        ap_flags._check_placer_and_cluster({"autoplace": "auto", "autoplace_cluster": "local",
                                            "autoplace_ray_address": "not-an-address",
                                            "autoplace_placement": None})


def test_placer_options_and_the_cost_profile_are_checked_at_parsing(tmp_path):
    base = {"autoplace_cluster": "local", "autoplace_ray_address": None,
            "autoplace_placement": None}
    check = ap_flags._check_placer_and_cluster
    assert check({**base, "autoplace": "hdp", "autoplace_placer_option": ["start=uniform"]})
    # A budget the placer refuses stops the binary at parsing, not at its first session.run.
    with pytest.raises(flags.ValidationError, match="--autoplace_budget_s=0.0: budget_s must be"):
        check({**base, "autoplace": "auto", "autoplace_budget_s": 0.0})
    assert check({**base, "autoplace": "gdp", "autoplace_budget_s": 0.0})  # zero-shot
    with pytest.raises(flags.ValidationError, match="the m_etf placer has no settings to set"):
        check({**base, "autoplace": "m_etf", "autoplace_placer_option": ["max_samples=8"]})
    with pytest.raises(flags.ValidationError, match="start must be one of"):  # the config's
        check({**base, "autoplace": "hdp", "autoplace_placer_option": ["start=sideways"]})
    with pytest.raises(flags.ValidationError, match="applies a saved placement"):
        check({**base, "autoplace": "off", "autoplace_placement": "saved.pbtxt",
               "autoplace_placer_option": ["start=uniform"]})
    # Beside a saved placement the placer is not run, but a name that is none is refused.
    assert check({**base, "autoplace": "", "autoplace_placement": "saved.pbtxt"})
    assert check({**base, "autoplace": "auto", "autoplace_placement": "saved.pbtxt"})
    with pytest.raises(flags.ValidationError, match="'bogus' is not a placer"):
        check({**base, "autoplace": "bogus", "autoplace_placement": "saved.pbtxt"})
    assert ap_flags._check_cost_profile(None)
    with pytest.raises(flags.ValidationError, match="cannot read cost profile"):
        ap_flags._check_cost_profile(str(tmp_path / "missing.pbtxt"))
    # A cache directory that is a file: at parsing (was a ConfigError at the first run, after
    # the model was built); one that does not exist yet, or cannot be made, is no error.
    (tmp_path / "a_file").write_text("")
    with pytest.raises(flags.ValidationError, match="a_file' is not a directory"):
        ap_flags._check_cache_dir(str(tmp_path / "a_file"))
    assert ap_flags._check_cache_dir(None)
    assert ap_flags._check_cache_dir(str(tmp_path / "new" / "cache"))
    assert ap_flags._check_cache_dir(str(tmp_path / "a_file" / "sub"))


def test_the_policy_flags_go_with_every_placer_that_keeps_a_policy(tmp_path):
    tmp_path.rmdir()  # a saved policy's files (placers check them when they are given one)
    shutil.copytree(pretrained_policy_dir(2), tmp_path)
    for name in ("placeto", "hdp", "gdp"):
        assert ap_flags._check_policy_flags({"autoplace": name, "autoplace_policy": str(tmp_path),
                                             "autoplace_save_policy": None})
        assert _placer(name, 60.0, policy=str(tmp_path)).config.policy_dir == str(tmp_path)
    with pytest.raises(flags.ValidationError, match=r"\['gdp', 'hdp', 'placeto'\]\), not "
                                                    r"--autoplace='post'"):
        ap_flags._check_policy_flags({"autoplace": "post", "autoplace_policy": None,
                                      "autoplace_save_policy": str(tmp_path / "out")})


@pytest.mark.parametrize("soft", [False, True])
def test_session_without_the_cluster_devices(soft):
    cluster = resolve_cluster(CPU2)
    config = tf.compat.v1.ConfigProto(device_count={"CPU": 1}, allow_soft_placement=soft)
    with tf.compat.v1.Session(graph=tf.Graph(), config=config) as sess:
        if soft:
            ap_flags._check_session_devices(sess, cluster, "cpu2.pbtxt")
        else:
            with pytest.raises(tf_autoplace.ConfigError, match="device_count"):
                ap_flags._check_session_devices(sess, cluster, "cpu2.pbtxt")
    config = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
    with tf.compat.v1.Session(graph=tf.Graph(), config=config) as sess:
        ap_flags._check_session_devices(sess, cluster, "cpu2.pbtxt")
    # Names without a task are the session's own devices of that type and index.
    short = Cluster.from_text('device { name: "/device:CPU:0" kind: "CPU" memory_bytes: 1000 }')
    with tf.compat.v1.Session(graph=tf.Graph(), config=config) as sess:
        ap_flags._check_session_devices(sess, short, "one_cpu.pbtxt")
    short = Cluster.from_text('device { name: "/device:CPU:0" kind: "CPU" memory_bytes: 1000 }\n'
                              'device { name: "/device:CPU:1" kind: "CPU" memory_bytes: 1000 }')
    with tf.compat.v1.Session(graph=tf.Graph(), config=tf.compat.v1.ConfigProto()) as sess:
        with pytest.raises(tf_autoplace.ConfigError, match="device_count"):
            ap_flags._check_session_devices(sess, short, "two_cpus.pbtxt")
    # Devices of tasks the session does not have: soft placement cannot help there.
    ps_worker = Cluster.from_tf({"ps": ["localhost:1"], "worker": ["localhost:2"]})
    config = tf.compat.v1.ConfigProto(allow_soft_placement=soft)
    with tf.compat.v1.Session(graph=tf.Graph(), config=config) as sess:
        with pytest.raises(tf_autoplace.ConfigError, match="tasks this session cannot reach"):
            ap_flags._check_session_devices(sess, ps_worker, "spec.pbtxt")


# The hook itself, in process: installed with explicit settings, always uninstalled.
@pytest.fixture
def hook():
    def install(**kwargs):
        ap_flags.install(ap_flags.AutoplaceSettings(**kwargs))

    yield install
    ap_flags.uninstall()


def _op_devices(graph):
    return {op.name: op.device for op in graph.get_operations()}


def test_placement_error_stops_the_run_and_leaves_the_graph(hook, tmp_path):
    (tmp_path / "tiny.pbtxt").write_text(TINY)
    hook(placer="m_etf", cluster=str(tmp_path / "tiny.pbtxt"),
         report_path=str(tmp_path / "r.json"))
    tg = small_cnn()
    before = _op_devices(tg.graph)
    config = tf.compat.v1.ConfigProto(**CONFIG2)
    with tf.compat.v1.Session(graph=tg.graph, config=config) as sess:
        with pytest.raises(tf_autoplace.InfeasiblePlacementError, match=r"2\.00 KB in all"):
            sess.run(tg.init_op)
    assert _op_devices(tg.graph) == before
    assert not (tmp_path / "r.json").exists()


def _unknown_batch_graph(batch=None):
    """A training graph whose input has no static batch size (``batch`` None): only the
    program can feed it."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [batch, 8], name="x")
        w = tf.compat.v1.get_variable("w", [8, 4])
        loss = tf.reduce_sum(tf.matmul(x, w) ** 2)
        train = tf.compat.v1.train.GradientDescentOptimizer(1e-3).minimize(loss)
    return graph, x, loss, train


@pytest.mark.parametrize("by_default", [False, True])
def test_verify_on_a_graph_only_the_program_can_feed(hook, monkeypatch, by_default, caplog):
    # Asked for, the error says what a binary can do (no flag reaches measure_feeds); on by
    # default, the graph keeps TensorFlow's placement and the binary trains on (README).
    hook(placer="m_etf", cluster="cpu2", verify=15, verify_by_default=by_default)
    graph, x, loss, train = _unknown_batch_graph()
    with graph.as_default():
        init = tf.compat.v1.global_variables_initializer()
    before = _op_devices(graph)
    feed = {x: np.ones((4, 8), np.float32)}
    with tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(**CONFIG2)) as sess:
        if not by_default:
            with pytest.raises(tf_autoplace.ConfigError, match=(
                    r"--autoplace_verify cannot step the graph on its own: placeholder 'x' has "
                    r"no fully known static shape.*set --autoplace_verify=0")):
                sess.run(init)
            assert _op_devices(graph) == before
            return
        sess.run(init)
        assert sess.run(loss, feed) > 0 and sess.run(train, feed) is None
    assert _op_devices(graph) == before
    # The warning's advice is a binary's: it named --feed_shape, a flag binaries lack.
    (warning,) = [r.getMessage() for r in caplog.records
                  if "could not run the graph on its own" in r.getMessage()]
    assert "placeholder 'x' has no fully known static shape" in warning
    assert "--feed_shape" not in warning and "measure_feeds" not in warning, warning
    assert "Give the placeholder a static shape, or set --autoplace_verify=0" in warning


@pytest.mark.parametrize("by_default", [False, True])
def test_verify_in_a_session_that_lacks_cluster_devices(hook, by_default, caplog):
    """Soft placement on, a device of the cluster missing: the warning said the run would go
    on, and then verification refused the placement (it cannot measure where there is no
    device). On by default, verification is off for it; asked for, that is said at once."""
    hook(placer="m_etf", cluster="cpu2", verify=15, verify_by_default=by_default)
    tg = small_cnn()
    before = _op_devices(tg.graph)
    config = tf.compat.v1.ConfigProto(device_count={"CPU": 1}, allow_soft_placement=True)
    with tf.compat.v1.Session(graph=tg.graph, config=config) as sess:
        if not by_default:
            with pytest.raises(tf_autoplace.ConfigError, match=(
                    r"--autoplace_verify measures .* this session lacks .*CPU:1.* set "
                    r"--autoplace_verify=0")):
                sess.run(tg.init_op)
            assert _op_devices(tg.graph) == before
            return
        sess.run(tg.init_op)  # placed, then run with soft placement
    assert "placing without verification: the session lacks cluster devices" in caplog.text
    report = ap_flags.report_for(tg.graph)
    assert report is not None and report.verification is None
    assert _op_devices(tg.graph) != before


def test_a_binary_that_verifies_places_and_trains(hook):
    # Verification runs its Sessions' steps on threads of their own; the hook once took those
    # Sessions for the user's and waited for the placement that waited for them (deadlock).
    import faulthandler

    hook(placer="random", cluster="cpu2", verify=15)  # a split to measure
    graph, x, loss, train = _unknown_batch_graph(batch=4)  # verification can feed it
    with graph.as_default():
        init = tf.compat.v1.global_variables_initializer()
    feed = {x: np.ones((4, 8), np.float32)}
    faulthandler.dump_traceback_later(300, exit=True)  # a deadlock fails, not hangs, the run
    try:
        with tf.compat.v1.Session(graph=graph,
                                  config=tf.compat.v1.ConfigProto(**CONFIG2)) as sess:
            sess.run(init)
            assert sess.run(loss, feed) > 0 and sess.run(train, feed) is None
    finally:
        faulthandler.cancel_dump_traceback_later()
    report = ap_flags._placed[graph]
    assert report is not None and report.verification is not None


def test_local_is_the_sessions_cpus(hook):
    # --autoplace_cluster=local (the default) for a Session of two CPU devices was one CPU:
    # every op went to CPU:0 and verify said there was nothing to measure, replacing the
    # program's own two-device placement unmeasured.
    hook(placer="m_etf", cluster="local", verify=0, cache=False)
    graph, x, loss, train = _unknown_batch_graph(batch=4)
    with graph.as_default():
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(**CONFIG2)) as sess:
        sess.run(init)
    report = ap_flags._placed[graph]
    assert [d.name for d in report.devices] == [f"{HOST}CPU:0", f"{HOST}CPU:1"]


def test_local_is_the_sessions_one_cpu_whatever_the_process_configured(hook, monkeypatch):
    # A Session given its own ConfigProto does not take the logical CPUs the program set up
    # with tf.config (here: said to be two): "local" was those two, and the first run failed
    # with the session lacking CPU:1.
    monkeypatch.setattr(cluster_module, "configured_logical_cpus", lambda: 2)
    hook(placer="m_etf", cluster="local", verify=0, cache=False)
    graph, x, loss, train = _unknown_batch_graph(batch=4)
    with graph.as_default():
        init = tf.compat.v1.global_variables_initializer()
    config = tf.compat.v1.ConfigProto(device_count={"CPU": 1}, allow_soft_placement=False)
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        sess.run(init)
    report = ap_flags._placed[graph]
    assert [d.name for d in report.devices] == [f"{HOST}CPU:0"]


def test_a_second_graphs_report_is_written_beside_the_first(hook, tmp_path):
    # A binary with a training and an evaluation graph: the evaluation graph's report once
    # replaced the training graph's at --autoplace_report without a word.
    hook(placer="m_etf", cluster=CPU2, verify=0, cache=False,
         report_path=str(tmp_path / "report.json"))
    sizes = []
    for batch in (4, 2):
        graph, x, loss, train = _unknown_batch_graph(batch=batch)
        with graph.as_default():
            init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session(graph=graph,
                                  config=tf.compat.v1.ConfigProto(**CONFIG2)) as sess:
            sess.run(init)
        sizes.append(ap_flags._placed[graph].num_ops)
    first = json.loads((tmp_path / "report.json").read_text())
    second = json.loads((tmp_path / "report.2.json").read_text())
    assert [first["num_ops"], second["num_ops"]] == sizes
    assert ap_flags.report_path("out/r.json", 3) == "out/r.3.json"


def test_a_binarys_placement_is_saved_and_applies_again_without_a_search(hook, tmp_path):
    # A binary could write only the JSON report, which holds no op's device, so the
    # placement could not be given back with --autoplace_placement.
    hook(placer="m_etf", cluster=CPU2, verify=0, cache=False,
         save_placement=str(tmp_path / "placement.pbtxt"))
    placed = []
    for _ in range(2):  # the second binary run: the same graph, the saved placement
        graph, x, loss, train = _unknown_batch_graph(batch=4)
        with graph.as_default():
            init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session(graph=graph,
                                  config=tf.compat.v1.ConfigProto(**CONFIG2)) as sess:
            sess.run(init)
        placed.append((_op_devices(graph), ap_flags._placed[graph]))
        hook(placer="off", placement=str(tmp_path / "placement.pbtxt"), cluster=CPU2, verify=0,
             cache=False)
    (devices, report), (again, applied) = placed
    assert len(set(devices.values())) == 2 and again == devices
    assert report.placer == "m_etf" and applied.placer.startswith("saved")
    with pytest.raises(ConfigError, match="is a placement report .JSON. and holds no op's "
                                          "device"):
        read_placement(json.dumps(report.to_dict()).encode())


def test_monitored_session_graph_is_placed_once_before_it_runs(hook):
    hook(placer="m_etf", cluster=CPU2)
    tg = small_cnn()
    with tg.graph.as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        creator = tf.compat.v1.train.ChiefSessionCreator(
            config=tf.compat.v1.ConfigProto(**CONFIG2))
        with tf.compat.v1.train.MonitoredSession(session_creator=creator) as sess:
            assert tg.graph.finalized
            meta = tf.compat.v1.RunMetadata()
            sess.run(tg.train_op, tg.feed, run_metadata=meta,
                     options=tf.compat.v1.RunOptions(output_partition_graphs=True))
    report = ap_flags.report_for(tg.graph)
    assert report is not None and report.assignment[step.op.name] == step.op.device
    executed = {n.device for pg in meta.partition_graphs for n in pg.node}
    assert executed == {f"{HOST}CPU:0", f"{HOST}CPU:1"}
    placed = _op_devices(tg.graph)
    with tf.compat.v1.Session(graph=tg.graph, config=tf.compat.v1.ConfigProto(**CONFIG2)) as s:
        s.run(tg.init_op)  # a second session on the same graph: not placed again
    assert ap_flags.report_for(tg.graph) is report and _op_devices(tg.graph) == placed


def test_a_graph_the_script_placed_itself_keeps_its_placement(hook):
    hook(placer="cpu_only", cluster=CPU2)
    tg = small_cnn()
    tf_autoplace.autoplace(tg.graph, cluster=CPU2, placer="m_etf", seed=0, progress=False)
    placed = _op_devices(tg.graph)
    assert len(set(placed.values())) == 2  # m_etf used both devices; cpu_only would not
    with tf.compat.v1.Session(graph=tg.graph, config=tf.compat.v1.ConfigProto(**CONFIG2)) as s:
        s.run(tg.init_op)
    assert _op_devices(tg.graph) == placed and ap_flags.report_for(tg.graph) is None


class _EagerPlacer(SingleDevicePlacer):
    """Runs a TF op while placing, as a learned policy does, and records where it ran."""

    name = "eager_probe"
    seen = []

    def _place(self, problem, rng):
        value = tf.constant(2.0) * 3.0
        self.seen.append((tf.executing_eagerly(), float(value) if tf.executing_eagerly() else None))
        return super()._place(problem, rng)


def test_placer_ops_run_eagerly_outside_the_users_graph(hook):
    _EagerPlacer.seen.clear()
    with registry.temporarily(registry.PlacerEntry("eager_probe", _EagerPlacer, "heuristic",
                                                   "")):
        hook(placer="eager_probe", cluster=CPU2)
        tg = small_cnn()
        num_ops = len(tg.graph.get_operations())
        with tf.compat.v1.Session(graph=tg.graph,
                                  config=tf.compat.v1.ConfigProto(**CONFIG2)) as s:
            s.run(tg.init_op)  # inside `with Session`, the user's graph is the default graph
    assert _EagerPlacer.seen and all(seen == (True, 6.0) for seen in _EagerPlacer.seen)
    assert len(tg.graph.get_operations()) == num_ops
    assert ap_flags.report_for(tg.graph).placer == "eager_probe"


def test_install_before_the_flags_are_parsed_is_a_config_error(monkeypatch):
    monkeypatch.setattr(ap_flags, "FLAGS", flags.FlagValues())  # nothing parsed
    with pytest.raises(tf_autoplace.ConfigError, match="needs parsed flags"):
        ap_flags.install()


def test_uninstall_restores_the_session(hook):
    hook(placer="m_etf", cluster=CPU2)
    ap_flags.uninstall()
    tg = small_cnn()
    with tf.compat.v1.Session(graph=tg.graph, config=tf.compat.v1.ConfigProto(**CONFIG2)) as s:
        s.run(tg.init_op)
    assert ap_flags.report_for(tg.graph) is None
    assert set(_op_devices(tg.graph).values()) == {""}


def _run_once(tg):
    with tf.compat.v1.Session(graph=tg.graph, config=tf.compat.v1.ConfigProto(**CONFIG2)) as s:
        s.run(tg.init_op)
    return ap_flags.report_for(tg.graph)


def test_a_restarted_binary_gets_its_placement_from_the_cache(hook, tmp_path):
    cluster = CPU2
    hook(placer="m_etf", cluster=cluster, cache_dir=str(tmp_path))
    first_graph = small_cnn()
    first = _run_once(first_graph)
    ap_flags.uninstall()  # the process ends; a new one starts with the same flags
    hook(placer="m_etf", cluster=cluster, cache_dir=str(tmp_path))
    tg = small_cnn()
    again = _run_once(tg)
    assert not first.from_cache and again.from_cache
    assert _op_devices(tg.graph) == _op_devices(first_graph.graph) == again.assignment
    ap_flags.uninstall()
    hook(placer="m_etf", cluster=cluster, cache_dir=str(tmp_path), cache=False)
    assert not _run_once(small_cnn()).from_cache


def test_a_saved_placement_is_applied_instead_of_a_search(hook, tmp_path):
    cluster = CPU2
    saved = tf_autoplace.autoplace(small_cnn().graph, cluster=cluster, placer="m_etf", seed=2,
                                   progress=False)
    (tmp_path / "placement.pb").write_bytes(saved.to_proto().SerializeToString())
    hook(placer="off", cluster=cluster, placement=str(tmp_path / "placement.pb"))
    tg = small_cnn()
    report = _run_once(tg)
    assert report.placer == "saved" and _op_devices(tg.graph) == saved.assignment
    assert "made by m_etf (seed 2) for this graph" in report.notes[0]


@pytest.mark.parametrize("kwargs, match", [
    (dict(placer="off"), "off"),
    (dict(placer="m_etf", budget_s=-1), "budget_s must be >= 0"),
    (dict(placer="auto", ray_address=""), "ray_address must be None, 'auto'"),
    (dict(placer="m_etf", unknown_dim=0), "unknown_dim must be an int >= 1, got 0"),
])
def test_settings_are_checked(kwargs, match):
    with pytest.raises(tf_autoplace.ConfigError, match=match):
        ap_flags.AutoplaceSettings(**kwargs)
