"""An installed copy works on its own: shipped clusters resolve by name from the installed
package data, and numba caches the simulator's kernels in the user's cache directory, never
inside the package (where ``pip uninstall`` would leave them behind).

The package is installed with pip into a temporary target directory (from a copy of the
sources, so the checkout gets no ``build/``), and used from a process whose working directory is
not the repository.
"""

import os
import shutil
import subprocess
import sys

import numba.core.config
import pytest

from tf_autoplace.core import jit

from tests.conftest import REPO

# Run in the installed copy: resolve a cluster by name, compile a simulator kernel.
CHILD = """
import os, sys
import numpy as np
import tf_autoplace
from tf_autoplace.core.cluster import resolve_cluster
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.sim import lower_bound

assert tf_autoplace.__file__.startswith(sys.argv[1]), tf_autoplace.__file__
cluster = resolve_cluster("k80x4")
graph = from_edges(3, [(0, 1, 8), (1, 2, 8)])
op_time = np.ones((3, cluster.num_devices))
print(cluster.num_devices, lower_bound(graph, cluster, op_time))
"""


def _files(root, suffixes=(".nbi", ".nbc")):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root)
                  for f in files if f.endswith(suffixes))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The package installed by pip into a fresh target directory (no dependencies: the
    test's own environment provides them)."""
    work = tmp_path_factory.mktemp("install")
    source = work / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc")
    shutil.copytree(os.path.join(REPO, "tf_autoplace"), source / "tf_autoplace", ignore=ignore)
    for name in ("setup.py", "README.md"):
        shutil.copy(os.path.join(REPO, name), source / name)
    target = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", f"--target={target}", str(source)],
                   check=True, cwd=work, capture_output=True, timeout=300)
    return work, target


def test_installed_copy_resolves_shipped_clusters_and_caches_numba_outside_itself(installed):
    work, target = installed
    assert sorted(os.listdir(target / "tf_autoplace" / "clusters")) == sorted(
        f for f in os.listdir(os.path.join(REPO, "tf_autoplace", "clusters"))
        if f.endswith(".pbtxt"))
    env = {k: v for k, v in os.environ.items() if k != jit.CACHE_ENV}
    env.update(PYTHONPATH=str(target), XDG_CACHE_HOME=str(work / "cache"),
               TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", CHILD, str(target)], cwd=work, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[0] == "5"  # k80x4: four GPUs and the host
    assert _files(target) == []  # nothing compiled landed in the installed package
    assert _files(work / "cache" / "tf_autoplace" / "numba")  # it went to the user's cache


def test_cache_dir_is_numbas_setting_when_given_else_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(jit.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert jit.cache_dir() == str(tmp_path / "xdg" / "tf_autoplace" / "numba")
    assert jit.cache_dir() == jit.default_cache_dir()
    monkeypatch.setenv(jit.CACHE_ENV, "")  # empty is unset, for numba too
    assert jit.cache_dir() == jit.default_cache_dir()
    monkeypatch.setenv(jit.CACHE_ENV, str(tmp_path / "mine"))
    assert jit.cache_dir() == str(tmp_path / "mine")


def test_cached_njit_writes_to_the_cache_dir_and_leaves_numbas_setting_alone(monkeypatch,
                                                                             tmp_path):
    # NUMBA_CACHE_DIR set after numba was imported (it is, by now) still counts.
    monkeypatch.setenv(jit.CACHE_ENV, str(tmp_path / "mine"))
    numba.core.config.reload_config()
    before = numba.core.config.CACHE_DIR

    def twice(x):
        return 2 * x

    assert jit.cached_njit(twice)(21) == 42
    assert _files(tmp_path / "mine")  # index and compiled kernel
    assert numba.core.config.CACHE_DIR == before
    monkeypatch.delenv(jit.CACHE_ENV)
    numba.core.config.reload_config()
