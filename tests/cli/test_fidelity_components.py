"""``tf-autoplace fidelity --components`` as a user runs it (one subprocess): the transfer check,
with the command line, the commit and the load printed for whoever reruns it, and every figure
in the JSON."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_components_prints_the_command_commit_load_and_tables(tmp_path):
    out_json, out_md = tmp_path / "c.json", tmp_path / "c.md"
    args = ["fidelity", "--components", "--component=transfers", "--steps=3",
            "--warmup_steps=1", f"--out_json={out_json}", f"--out_md={out_md}"]
    done = subprocess.run([sys.executable, "-m", "tf_autoplace.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    text = out_md.read_text()
    assert text in done.stdout
    assert "## Simulator components against this machine" in text
    assert "Command: `tf-autoplace fidelity --components --component=transfers --steps=3" in text
    assert "1-minute load at the start" in text and "commit " in text
    assert "### Cross-device transfers" in text and "### Peak memory" not in text
    doc = json.loads(out_json.read_text())
    assert doc["command"].startswith("tf-autoplace fidelity --components")
    transfers = doc["results"]["transfers"]
    assert transfers["counts"] == [0, 1, 4, 8, 16, 32]
    assert len(transfers["measured_s"]) == 6 and doc["results"]["memory"] == []


@pytest.mark.slow
def test_a_graph_file_that_cannot_be_read_is_one_error_line_before_any_timing(tmp_path):
    bad = tmp_path / "bad.pb"
    bad.write_bytes(b"not a graph")
    done = subprocess.run([sys.executable, "-m", "tf_autoplace.cli", "fidelity", "--graphs=",
                           f"--graph_file={bad}"], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 1
    lines = [line for line in done.stderr.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "is not a GraphDef or MetaGraphDef" in lines[0]
    assert "link " not in done.stdout + done.stderr and "USAGE" not in done.stderr
