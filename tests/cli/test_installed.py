"""``tf-autoplace`` as a user gets it: installed by pip from the package's entry point, run from
a directory outside the repository, importing the installed copy (not this checkout).

pip installs into a ``--target`` directory of its own: with ``--prefix`` it first uninstalls
the ``tf_autoplace`` of the interpreter running the tests, the user's own install."""

import os
import shutil
import subprocess
import sys

import pytest
from tensorflow.core.framework import graph_pb2

from tf_autoplace.cli.main import COMMANDS
from tf_autoplace.testing import small_cnn

from tests.conftest import installed_tf_autoplace


@pytest.fixture(scope="module")
def installed(tmp_path_factory, repo_root):
    """(path of the installed tf-autoplace, its environment, a directory outside the repo)."""
    work = tmp_path_factory.mktemp("installed")
    source = work / "source"  # a copy: pip builds in the source tree (build/, *.egg-info)
    source.mkdir()
    for name in ("setup.py", "README.md"):
        shutil.copy(os.path.join(repo_root, name), source)
    shutil.copytree(os.path.join(repo_root, "tf_autoplace"), source / "tf_autoplace",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    target = work / "site"
    before = installed_tf_autoplace()
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", "--no-warn-script-location", f"--target={target}",
         str(source)], capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-3000:]
    assert installed_tf_autoplace() == before, "pip changed the running interpreter's install"
    env = dict(os.environ, PYTHONPATH=str(target), TF_CPP_MIN_LOG_LEVEL="3")
    outside = work / "elsewhere"
    outside.mkdir()
    return target / "bin" / "tf-autoplace", env, outside


def _run(installed, *args):
    command, env, outside = installed
    return subprocess.run([str(command), *args], cwd=outside, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow
def test_installed_command_helps_and_places_a_small_graph(installed):
    command, env, outside = installed
    assert command.is_file()
    where = subprocess.run(
        [sys.executable, "-c", "import tf_autoplace; print(tf_autoplace.__file__)"],
        cwd=outside, env=env, capture_output=True, text=True, timeout=300)
    assert where.stdout.startswith(str(command.parent.parent)), where  # the installed copy

    helped = _run(installed, "--help")
    assert helped.returncode == 0, helped.stderr
    assert all(f"  {name} " in helped.stdout for name in COMMANDS)
    unknown = _run(installed, "no-such-command")
    assert unknown.returncode == 2 and "unknown command 'no-such-command'" in unknown.stderr

    graph_def = small_cnn().graph.as_graph_def()
    (outside / "model.pb").write_bytes(graph_def.SerializeToString())
    # --cluster by a shipped name: the installed copy has the specs as package data.
    placed = _run(installed, "place", "--input=model.pb", "--output=placed.pb",
                  "--cluster=cpu2", "--placer=random", "--report_json=report.json")
    assert placed.returncode == 0, placed.stderr[-3000:]
    assert "predicted step time" in placed.stdout and "wrote placed.pb" in placed.stdout
    out = graph_pb2.GraphDef.FromString((outside / "placed.pb").read_bytes())
    assert [n.name for n in out.node] == [n.name for n in graph_def.node]
    assert {n.device for n in out.node} == {f"/job:localhost/replica:0/task:0/device:CPU:{i}"
                                            for i in range(2)}
    assert (outside / "report.json").is_file()
