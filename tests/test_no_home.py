"""Without a writable home or cache directory (service accounts, containers run as an arbitrary
user), every door still places: the simulator's kernels are compiled without numba's on-disk
cache (one warning) and the placement cache is off or not written, never a failure.

Each case is a child process (tests/no_home_child.py) running every door: autoplace on a
tf.Graph and a GraphDef, place_cost_graph, a tf.function, a SavedModel, ``tf-autoplace place``
and the ``--autoplace`` session hook, each with the placement cache asked for. A child compiles
the simulator's kernels without a cache (about 13 s of CPU), so these run with ``-m slow``; the
default suite covers the same two mechanisms in-process: the kernels' fallback
(``test_kernels_compile_without_a_usable_cache_directory_with_one_warning``) and a placement
cache that cannot be written (tests/pipeline/test_cache.py).
"""

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from tf_autoplace.core import jit

from tests.conftest import REPO

CHILD = os.path.join(REPO, "tests", "no_home_child.py")
NUMBA_WARNING = "the simulator's kernels are compiled without an on-disk cache"
DOORS = 7
CACHE_VARIABLES = ("HOME", "XDG_CACHE_HOME", "TF_AUTOPLACE_CACHE_DIR", "NUMBA_CACHE_DIR")


def _start(workdir, variables, user=None):
    """The child, started with ``variables`` as the only cache-related environment."""
    pythonpath = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
    env.update(PYTHONPATH=pythonpath, TF_CPP_MIN_LOG_LEVEL="3", **variables)
    return subprocess.Popen([sys.executable, CHILD, str(workdir)], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            user=user)


def _check(proc):
    stdout, stderr = proc.communicate(timeout=900)
    results = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    failed = [r for r in results if not r["ok"]]
    assert proc.returncode == 0 and len(results) == DOORS and not failed, (
        proc.returncode, failed, stderr[-3000:])
    assert stderr.count(NUMBA_WARNING) == 1, stderr[-3000:]  # one warning, not one per kernel
    return stderr


def test_kernels_compile_without_a_usable_cache_directory_with_one_warning(tmp_path, monkeypatch,
                                                                           caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setattr(jit, "_warned", False)
    with caplog.at_level(logging.WARNING):
        for where in (blocker / "numba", None):  # unwritable, then no cache directory at all
            if where is None:
                monkeypatch.delenv(jit.CACHE_ENV)
                monkeypatch.setattr(jit, "default_cache_dir", lambda: None)
            else:
                monkeypatch.setenv(jit.CACHE_ENV, str(where))

            def double(x):
                return 2 * x

            assert jit.cached_njit(double)(21) == 42
    assert caplog.text.count(NUMBA_WARNING) == 1
    assert "'" + str(blocker / "numba") + "' cannot be created (Not a directory)" in caplog.text


@pytest.mark.slow
def test_every_door_places_with_home_unset_or_missing_and_unwritable_cache_dirs(tmp_path):
    blocker = tmp_path / "a_file"  # nothing can be created beneath a file, not even by root
    blocker.write_text("")
    unwritable = {"XDG_CACHE_HOME": str(blocker / "cache"),
                  "TF_AUTOPLACE_CACHE_DIR": str(blocker / "placements"),
                  "NUMBA_CACHE_DIR": str(blocker / "numba")}
    cases = {"missing home": {"HOME": str(blocker / "home"), **unwritable},
             "home unset": unwritable}
    procs = {}
    for name, variables in cases.items():
        workdir = tmp_path / name.replace(" ", "_")
        workdir.mkdir()
        procs[name] = (workdir, _start(workdir, variables))
    for name, (workdir, proc) in procs.items():
        stderr = _check(proc)
        assert "cannot write the placement cache entry" in stderr, name
        assert not [n for n in os.listdir(workdir) if n.startswith(("~", ".cache"))], name


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="running as another user needs root")
def test_every_door_places_as_a_user_without_home_or_passwd_entry():
    # An arbitrary UID with no password-database entry and HOME unset: no home directory at
    # all, as in a container started with --user 12345.
    workdir = tempfile.mkdtemp(prefix="tf_autoplace_nohome_")
    try:
        os.chown(workdir, 12345, 12345)
        try:
            proc = _start(workdir, {}, user=12345)
        except PermissionError:
            pytest.skip(f"{sys.executable} cannot be run by another user here")
        stderr = _check(proc)
        assert "the user has no cache directory" in stderr
        assert sorted(os.listdir(workdir)) == sorted(
            ["cnn.costgraph.pbtxt", "cnn.pb", "placed.pb", "report.json", "sm", "sm_placed"])
    finally:
        shutil.rmtree(workdir)
