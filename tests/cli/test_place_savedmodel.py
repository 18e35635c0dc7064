"""``tf-autoplace place`` on SavedModels: SavedModel in, SavedModel out.

The placed models must be loaded and run on two logical CPU devices, which only a fresh
interpreter can configure, so the work happens in tests/cli/savedmodel_child.py (one process:
build TF2 and TF1 SavedModels, place them with the tool's ``run()``, load and compare). A real
command line on a corrupt SavedModel runs beside it. Both start once per module.
"""

import json
import os
import subprocess
import sys

import pytest

HOST = "/job:localhost/replica:0/task:0/device:"
BOTH = [f"{HOST}CPU:0", f"{HOST}CPU:1"]


@pytest.fixture(scope="module")
def results(tmp_path_factory, repo_root):
    workdir = tmp_path_factory.mktemp("savedmodel")
    corrupt = workdir / "corrupt_in"
    corrupt.mkdir()
    (corrupt / "saved_model.pb").write_bytes(b"\x0a\x05\x0a\x03abc\xff\xff not a SavedModel")
    (workdir / "cli").mkdir()
    pythonpath = os.pathsep.join(p for p in (repo_root, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=pythonpath)
    child = subprocess.Popen(
        [sys.executable, os.path.join("tests", "cli", "savedmodel_child.py"), str(workdir)],
        cwd=repo_root, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cli = subprocess.Popen(
        [sys.executable, "-m", "tf_autoplace.cli", "place", f"--input={corrupt}",
         f"--output={workdir / 'cli' / 'out'}", "--cluster=testdata/cpu2_independent.pbtxt",
         f"--report_json={workdir / 'cli' / 'report.json'}"],
        cwd=repo_root, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err[-3000:]
    got = json.loads(out.strip().splitlines()[-1])
    cli_out, cli_err = cli.communicate(timeout=300)
    got["cli"] = {"rc": cli.returncode, "stderr": cli_err, "left": os.listdir(workdir / "cli")}
    return got


def test_tf2_savedmodel_round_trip_equal_outputs_on_placed_devices(results):
    assert results["tf2_rc"] == 0
    r = results["tf2"]
    assert r["signatures"] == ["double", "serving_default"]  # the other signature survives
    assert r["equal"] == {"serving_default": True, "double": True}
    assert r["executed"] == BOTH  # the loaded, placed signature ran on both devices
    assert all(d["num_ops"] > 0 for d in results["tf2_report"])


def test_tf1_savedmodel_round_trip(results):
    assert results["tf1_rc"] == 0
    assert results["tf1"]["equal"] == {"serving_default": True}
    # A v1 Session keeps every placed device; tf.saved_model.load re-creates TF1 variables on
    # the default device (documented), so only the Session view is checked for devices.
    assert results["tf1_session_devices"] == BOTH


@pytest.mark.parametrize("case", ["bad_signature", "bad_tags", "bad_tf1_signature"])
def test_bad_choice_fails_and_writes_nothing(results, case):
    assert results[case] == {"rc": 1, "exists": False, "contents": None, "report": False}
    if case == "bad_tf1_signature":  # a TF1 SavedModel is placed whole, but names its own
        assert "has no signature 'no_such_signature'" in results[case + "_stderr"]
        assert "['serving_default']" in results[case + "_stderr"]


@pytest.mark.parametrize("case", ["missing_variables", "truncated_variables"])
def test_broken_input_is_one_error_line_about_the_input(results, case):
    assert results[case] == {"rc": 1, "exists": False, "contents": None, "report": False}
    lines = results[case + "_stderr"].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: tf.saved_model.load(")
    assert "cannot write output" not in lines[0]


@pytest.mark.parametrize("case", ["tf1_missing_variables", "tf1_truncated_variables",
                                  "tf1_empty_variables"])
def test_a_tf1_savedmodel_whose_variables_are_damaged_is_refused(results, case):
    # A TF1 SavedModel is placed from its proto, not loaded: its checkpoint is checked, or the
    # output was written whole and failed only when loaded.
    assert results[case] == {"rc": 1, "exists": False, "contents": None, "report": False}
    lines = results[case + "_stderr"].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "would not load" in lines[0]


def test_existing_output_is_not_overwritten(results):
    assert results["output_exists"] == {"rc": 1, "exists": True, "contents": ["keep"],
                                        "report": False}
    assert results["leftovers"] == []  # no temporary directories left behind


def test_corrupt_savedmodel_on_the_command_line(results):
    cli = results["cli"]
    assert cli["rc"] != 0
    assert "not a readable SavedModel" in cli["stderr"]
    assert cli["left"] == []
