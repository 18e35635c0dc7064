"""Outputs killed outright (SIGKILL) at every step of writing them: the next run finds the
complete new set or the complete previous one, and no temporary of the killed run.

Each kill is a child process (tests/outputs/kill_child.py) that SIGKILLs itself before the N-th
file-system step of ``Outputs.commit``; the test then recovers as the next run would (through
``check_output_path``) and reads what is there. The children import only
``tf_autoplace.outputs.files`` (no TensorFlow), so every step is covered in the default suite;
one more child runs ``tf-autoplace place`` itself, killed between two renames of its outputs,
and the next ``tf-autoplace place`` recovers.
"""

import json
import os
import signal
import subprocess
import sys


from tf_autoplace.outputs import files

from tests.conftest import REPO

CHILD = os.path.join(REPO, "tests", "outputs", "kill_child.py")
FILES = (("a", "graph.pb"), ("b", "report.json"), ("b", "placement.pbtxt"))


def _env():
    pythonpath = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=pythonpath, TF_CPP_MIN_LOG_LEVEL="3")


def _old_set(directory):
    for sub, name in FILES:
        os.makedirs(directory / sub, exist_ok=True)
        (directory / sub / name).write_bytes(b"old")


def _state(directory):
    """"old", "new", or what is mixed; and the temporaries left."""
    seen = {(directory / sub / name).read_bytes().decode() for sub, name in FILES}
    policy = directory / "b" / "policy"
    seen.add((policy / "weights").read_bytes().decode() if policy.exists() else "old")
    temps = [n for sub in ("a", "b") for n in os.listdir(directory / sub)
             if n.startswith(files.TEMP_PREFIX)]
    return (seen.pop() if len(seen) == 1 else f"mixed {sorted(seen)}"), temps


def test_a_kill_at_any_step_leaves_the_new_set_or_the_old_one_after_recovery(tmp_path):
    whole = tmp_path / "whole"
    _old_set(whole)
    done = subprocess.run([sys.executable, CHILD, "none", "outputs", str(whole), "new"],
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    steps = json.loads(done.stdout.splitlines()[-1])["all"]
    assert _state(whole) == ("new", [])
    assert steps >= 15  # plans, staged outputs, the commit record, renames, clean-up

    procs = {}
    for k in range(steps):
        directory = tmp_path / f"kill_{k}"
        _old_set(directory)
        procs[k] = subprocess.Popen([sys.executable, CHILD, str(k), "outputs", str(directory),
                                     "new"], env=_env(), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
    outcomes = {}
    for k, proc in procs.items():
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL, (k, stderr.decode()[-2000:])
        directory = tmp_path / f"kill_{k}"
        before, _ = _state(directory)
        # The next run checks its output paths, which recovers each directory first.
        for sub, name in FILES:
            files.check_output_path(directory / sub / name, "--out")
        after, temps = _state(directory)
        assert after in ("old", "new") and not temps, (k, before, after, temps)
        outcomes[k] = (before, after)
    # Early kills keep the old set, late ones give the new set; kills during the renames leave
    # a mix until the next run finishes it (and only those).
    assert outcomes[0] == ("old", "old") and outcomes[steps - 1] == ("new", "new")
    firsts = [k for k, (_, after) in outcomes.items() if after == "new"]
    assert all(outcomes[k][1] == "new" for k in range(firsts[0], steps))
    mixed = [k for k, (before, _) in outcomes.items() if before.startswith("mixed")]
    assert mixed and all(outcomes[k][1] == "new" for k in mixed)


def test_recovery_leaves_journals_of_other_users_and_running_writers_alone(tmp_path):
    run = "0" * 32
    planted = tmp_path / f"{files.TEMP_PREFIX}{run}.plan"
    planted.write_text(json.dumps({"format": 1, "commit": str(tmp_path / "x"), "plans": [],
                                   "outputs": [{"final": "/etc/passwd", "directory": False,
                                                "staged": str(tmp_path / "evil")}]}))
    (tmp_path / "evil").write_text("x")
    files.recover(tmp_path)  # a plan that breaks the protocol's names is not followed
    assert not planted.exists() and (tmp_path / "evil").exists()
    if os.geteuid() == 0:  # a plan someone else owns is not even removed
        planted.write_text("{}")
        os.chown(planted, 65534, 65534)
        files.recover(tmp_path)
        assert planted.exists()


def test_tf_autoplace_place_killed_between_renames_is_finished_by_the_next_run(
        tmp_path, run_scripts):
    from tf_autoplace.cli import place

    from tests.graph.test_costgraph import HAND

    (tmp_path / "in.costgraph.pbtxt").write_text(HAND)
    names = ("placement.pbtxt", "report.json", "trace.json")
    for name in names:
        (tmp_path / name).write_text("old")
    paths = dict(report_json=str(tmp_path / "report.json"),
                 trace_json=str(tmp_path / "trace.json"))
    args = ["place", f"--input={tmp_path}/in.costgraph.pbtxt", "--cluster=cpu2",
            "--placer=m_etf", "--noprogress", f"--output={tmp_path}/placement.pbtxt",
            *(f"--{flag}={path}" for flag, path in paths.items())]
    # One plan, then the commit record, then the renames: killed before the 4th os.replace, the
    # second output's rename, when the first output is new and the other two are old.
    (status, _, stderr), = run_scripts({"kill": [CHILD, "replace:3", "cli", *args]},
                                       timeout=600).values()
    assert status == -signal.SIGKILL, stderr[-3000:]
    assert sorted((tmp_path / n).read_text() == "old" for n in names) == [False, True, True]
    assert [n for n in os.listdir(tmp_path) if n.startswith(files.TEMP_PREFIX)]
    # The next run recovers before it checks its outputs: the killed run's set, complete.
    assert place.run(str(tmp_path / "in.costgraph.pbtxt"), str(tmp_path / "placement.pbtxt"),
                     cluster="cpu2", placer="m_etf", seed=0, max_groups=2000, progress=False,
                     **paths) == 0
    assert not [n for n in os.listdir(tmp_path) if n.startswith(files.TEMP_PREFIX)]
    assert all((tmp_path / n).read_text() != "old" for n in names)
