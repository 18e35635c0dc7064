"""Shared fixtures: a temporary placement cache directory, the repository root, a tiny
hand-checkable TF graph, proto writers, a runner for the repository's scripts as
subprocesses (and for child scripts of checks), and an ``hdp`` registered with a one-update sample budget.

The suite leaves the environment it runs in as it found it: the session records which
``tf_autoplace`` is installed in the interpreter before the first test and fails if it differs
after the last (:func:`installed_tf_autoplace`)."""

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import site
import subprocess
import sys

import pytest

from tf_autoplace.core import registry
from tf_autoplace.placers import HDPConfig, HDPPlacer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def installed_tf_autoplace():
    """What the running interpreter has installed as ``tf_autoplace`` in its site-packages
    (not a checkout's ``*.egg-info`` on the path): (version, the distribution's metadata
    directory, SHA-256 of its file list and install origin), or None when it is not
    installed."""
    places = site.getsitepackages() + [site.getusersitepackages()]
    for dist in importlib.metadata.distributions(path=places):
        if dist.metadata["Name"] and dist.metadata["Name"].replace("-", "_") == "tf_autoplace":
            listing = (dist.read_text("RECORD") or "") + (dist.read_text("direct_url.json")
                                                          or "")
            return (dist.version, str(getattr(dist, "_path", "")),
                    hashlib.sha256(listing.encode()).hexdigest())
    return None


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # the controller, not an xdist worker
        session.config.stash[_INSTALLED] = installed_tf_autoplace()


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput") or _INSTALLED not in session.config.stash:
        return
    before, after = session.config.stash[_INSTALLED], installed_tf_autoplace()
    if before != after:
        session.config.get_terminal_writer().line(
            f"ERROR: the test session changed the installed tf_autoplace: {before} -> {after}",
            red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_INSTALLED = pytest.StashKey()

# Modules that take tens of seconds each (child processes running TensorFlow programs, model
# builds, policy training), heaviest first. They are collected first: pytest-xdist's
# ``--dist loadfile`` hands whole modules to its workers in collection order, and a heavy
# module handed out last keeps one worker busy while the other has nothing left to run.
HEAVY_FIRST = (
    "test_keras.py", "test_fuzz.py", "placers/placeto/test_placeto.py", "test_modes.py",
    "cli/test_place.py", "zoo/test_zoo.py", "test_flags.py", "hw/test_local_cluster.py",
    "placers/hdp/test_hdp.py", "test_placement_goldens.py", "cli/test_interrupts.py",
    "pipeline/test_cache.py", "cli/test_profile_command.py", "test_tf2.py",
    "learning/test_shared_trace.py", "outputs/test_progress.py",
)


def pytest_configure(config):
    # With worker processes (pytest-xdist), the kernels are compiled once, in a process of
    # their own, while the workers start (tests/warm_kernels.py): in a new environment every
    # worker and child process reaching a kernel before its cache entry exists compiles it.
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    pythonpath = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
    config.stash[_WARMING] = subprocess.Popen(
        [sys.executable, os.path.join(REPO, "tests", "warm_kernels.py")], cwd=REPO,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=pythonpath),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def pytest_unconfigure(config):
    warming = config.stash.get(_WARMING, None)
    if warming is not None and warming.poll() is None:
        warming.kill()
        warming.wait()


_WARMING = pytest.StashKey()


def pytest_collection_modifyitems(items):
    rank = {name: k for k, name in enumerate(HEAVY_FIRST)}

    def key(item):
        path = os.path.relpath(str(item.path), os.path.join(REPO, "tests")).replace(os.sep, "/")
        return rank.get(path, len(rank))

    items.sort(key=key)  # stable: the other modules keep their order, after these


@pytest.fixture(scope="session", autouse=True)
def user_cache_dir(tmp_path_factory):
    """The placement cache's default directory (``TF_AUTOPLACE_CACHE_DIR``) of the whole
    session, and of the scripts it runs, is a temporary one: the cache (on by default in
    training binaries) never writes into the user's, and no test reads what another run left
    there. The compiled simulator kernels stay in the user's cache directory."""
    path = tmp_path_factory.mktemp("placement_cache")
    old = os.environ.get("TF_AUTOPLACE_CACHE_DIR")
    os.environ["TF_AUTOPLACE_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        del os.environ["TF_AUTOPLACE_CACHE_DIR"]
    else:
        os.environ["TF_AUTOPLACE_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def repo_root():
    return REPO


@pytest.fixture
def tiny_graph():
    """A fresh tf.Graph small enough to check by hand (float32 = 4 bytes):

    - ``x``: Placeholder [8, 16] (512 bytes);
    - ``w``: resource variable [16, 4] (256 persistent bytes), initialised from ``zeros`` by
      ``w/Assign``, read by ``w/Read/ReadVariableOp`` and ``y/ReadVariableOp``;
    - ``y = x @ w``: MatMul [8, 4] (128 bytes);
    - ``z = identity(x)`` with a control dependency on ``y``.
    """
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [8, 16], name="x")
        w = tf.Variable(tf.zeros([16, 4]), name="w")
        y = tf.matmul(x, w, name="y")
        with tf.control_dependencies([y]):
            tf.identity(x, name="z")
    return g


@pytest.fixture(scope="session")
def write_proto():
    """``write_proto(path, message, text=False)``: write a proto in binary or text format and
    return the path as a str."""
    from google.protobuf import text_format

    def write(path, message, text=False):
        path = os.fspath(path)
        if text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text_format.MessageToString(message))
        else:
            with open(path, "wb") as f:
                f.write(message.SerializeToString())
        return path

    return write


@pytest.fixture(scope="session")
def start_scripts():
    """``start_scripts({name: [script, *args]})`` starts each script with this Python, from the
    repository root, all at once (each imports TensorFlow, seconds of CPU), with the checkout
    importable and TF's C++ logging off, and returns ``wait(timeout=300)``, which returns
    ``{name: (returncode, stdout, stderr)}``. A test does its in-process work between the two,
    while the scripts import TensorFlow."""

    def start(argvs):
        pythonpath = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=pythonpath)
        procs = {name: subprocess.Popen([sys.executable, *argv], cwd=REPO, env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for name, argv in argvs.items()}

        def wait(timeout=300):
            results = {}
            try:
                for name, proc in procs.items():
                    stdout, stderr = proc.communicate(timeout=timeout)
                    results[name] = (proc.returncode, stdout, stderr)
            finally:
                for proc in procs.values():
                    if proc.poll() is None:
                        proc.kill()
                        proc.communicate()
            return results

        return wait

    return start


@pytest.fixture(scope="session")
def run_scripts(start_scripts):
    """``run_scripts({name: [script, *args]}, timeout=300)``: :func:`start_scripts` and wait
    for them. Returns ``{name: (returncode, stdout, stderr)}``."""

    def run(argvs, timeout=300):
        return start_scripts(argvs)(timeout)

    return run


@pytest.fixture(scope="session")
def run_checks(run_scripts):
    """``run_checks(script, *args, timeout=300)`` runs a child script (``tests/tf2_child.py``,
    ...) that prints one JSON object of check results on its last line of stdout, and returns
    that object; a child that exits with an error fails the test with the end of its stderr."""

    def run(script, *args, timeout=300):
        code, stdout, stderr = run_scripts({"checks": [script, *args]}, timeout=timeout)["checks"]
        assert code == 0, stderr[-3000:]
        return json.loads(stdout.strip().splitlines()[-1])

    return run


@dataclasses.dataclass(frozen=True)
class _OneUpdateHDPConfig(HDPConfig):
    max_samples: int | None = 16  # one update of 16 placements
    start_steps: int = 20  # a short fit of the heuristic start's placer


class _OneUpdateHDP(HDPPlacer):
    config_class = _OneUpdateHDPConfig


@pytest.fixture
def one_update_hdp():
    """``hdp`` by name (``autoplace``, the flags, the offline tool) searches one policy update:
    the doors pass no sample budget, and a sample budget, not the clock, must end a test's
    search."""
    with registry.temporarily(dataclasses.replace(registry.entry("hdp"), target=_OneUpdateHDP)):
        yield
