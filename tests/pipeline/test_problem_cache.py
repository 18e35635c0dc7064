"""The problem cache: built problems round-trip exactly through npz files; nothing read from it
runs code (a planted pickle is never executed); damaged, foreign and non-regular entries are
ignored with a warning and rebuilt; its directory is private."""

import dataclasses
import logging
import os
import pickle
import stat

import numpy as np
import pytest

from tf_autoplace.core.cluster import resolve_cluster
from tf_autoplace.errors import ConfigError
from tf_autoplace.pipeline import problem_cache
from tf_autoplace.pipeline.problem_cache import ProblemCache, as_problem_cache
from tf_autoplace.testing import problems

from tests.sim.test_simulator import random_aliases


class Planted:
    """Unpickling this creates the file ``path``: proof that a pickle was run."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _problem():
    """A random problem whose tensors include views and shared buffers."""
    problem = problems.random_problem(40, 3, num_gpus=2, max_groups=12)
    graph = random_aliases(np.random.default_rng(3), problem.graph)
    assert (graph.tensor_alias != -1).any()
    return dataclasses.replace(problem, graph=graph)


def _same(a, b):
    for field in dataclasses.fields(a.graph):  # every field, so that a new one is not lost
        x, y = getattr(a.graph, field.name), getattr(b.graph, field.name)
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, field.name)
            assert x.dtype == y.dtype, field.name
        else:
            assert x == y, field.name
    np.testing.assert_array_equal(a.op_time, b.op_time)
    np.testing.assert_array_equal(a.grouping.labels, b.grouping.labels)
    assert a.cluster is b.cluster or a.cluster.to_proto() == b.cluster.to_proto()


def test_a_problem_round_trips_exactly(tmp_path):
    problem = _problem()
    cache = ProblemCache(tmp_path / "problems")
    assert cache.load("p", problem.cluster) is None
    path = cache.store("p", problem)
    assert stat.S_IMODE(os.stat(tmp_path / "problems").st_mode) == 0o700
    assert path.endswith("p.npz") and os.listdir(tmp_path / "problems") == ["p.npz"]
    again = cache.load("p", problem.cluster)
    _same(problem, again)
    sim = problem.simulator.run(np.zeros(problem.graph.num_ops, np.int32))
    assert again.simulator.run(np.zeros(problem.graph.num_ops, np.int32)).makespan == sim.makespan


def test_a_planted_pickle_is_never_executed(tmp_path, caplog):
    problem = _problem()
    cache = ProblemCache(tmp_path)
    marker = tmp_path / "executed"
    # A raw pickle where the entry goes, and an npz whose array is a pickled object.
    with open(cache.path("raw"), "wb") as f:
        pickle.dump(Planted(str(marker)), f)
    np.savez(cache.path("objects"), header=np.array([Planted(str(marker))], dtype=object))
    with caplog.at_level(logging.WARNING):
        assert cache.load("raw", problem.cluster) is None
        assert cache.load("objects", problem.cluster) is None
    assert not marker.exists()
    assert caplog.text.count("ignoring the problem cache entry") == 2


@pytest.mark.parametrize("damage, reason", [
    (lambda data: data[:len(data) // 2], "it is not a whole npz archive"),
    (lambda data: b"", "it is not a whole npz archive"),
    (lambda data: data.replace(f'"format": {problem_cache.FORMAT}'.encode(), b'"format": 9'),
     "Bad CRC-32"),
])
def test_a_damaged_entry_is_ignored_with_a_warning(tmp_path, caplog, damage, reason):
    problem = _problem()
    cache = ProblemCache(tmp_path)
    data = problem_cache.encode(problem)
    with open(cache.path("p"), "wb") as f:
        f.write(damage(data))
    with caplog.at_level(logging.WARNING):
        assert cache.load("p", problem.cluster) is None
    assert reason in caplog.text


def test_an_entry_of_wrong_arrays_or_another_cluster_is_not_trusted(tmp_path, caplog):
    problem = _problem()
    cache = ProblemCache(tmp_path)
    cache.store("p", problem)
    with caplog.at_level(logging.WARNING):
        assert cache.load("p", resolve_cluster("k80x4")) is None
    assert "costed for another cluster" in caplog.text
    with np.load(cache.path("p")) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["op_time"] = arrays["op_time"].astype(np.float32)
    np.savez(cache.path("q"), **arrays)
    arrays["op_time"] = np.full_like(arrays["op_time"].astype(np.float64), np.nan)
    np.savez(cache.path("r"), **arrays)
    arrays["op_time"] = np.zeros((3, 3))
    np.savez(cache.path("s"), **arrays)
    header = arrays["header"].tobytes().replace(f'"format": {problem_cache.FORMAT}'.encode(),
                                                b'"format": 9')
    np.savez(cache.path("t"), **{**arrays, "header": np.frombuffer(header, np.uint8)})
    with caplog.at_level(logging.WARNING):
        assert cache.load("q", problem.cluster) is None
        assert cache.load("r", problem.cluster) is None
        assert cache.load("s", problem.cluster) is None
        assert cache.load("t", problem.cluster) is None
    assert f"it has format 9, this version reads {problem_cache.FORMAT}" in caplog.text
    assert "array 'op_time' is float32, not float64" in caplog.text
    assert "NaN or negative" in caplog.text
    assert "does not hold a valid problem (op_time has shape (3, 3)" in caplog.text


def test_an_entry_that_is_not_a_regular_file_is_not_opened(tmp_path, caplog):
    problem = _problem()
    cache = ProblemCache(tmp_path)
    os.mkfifo(cache.path("fifo"))  # opening it for reading would wait for a writer forever
    os.symlink("/etc/hostname", cache.path("link"))
    with caplog.at_level(logging.WARNING):
        assert cache.load("fifo", problem.cluster) is None
        assert cache.load("link", problem.cluster) is None
    assert "it is a FIFO, not a regular file" in caplog.text
    assert "it is a symbolic link, not a regular file" in caplog.text


def test_cache_directories_and_names_are_checked(tmp_path, monkeypatch):
    assert as_problem_cache(None) is None and as_problem_cache(False) is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert as_problem_cache(True).directory == str(tmp_path / "xdg" / "tf_autoplace" /
                                                   "problems")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    with pytest.raises(ConfigError, match="can be written by other users"):
        as_problem_cache(str(shared))
    with pytest.raises(ConfigError, match="cache_dir must be"):
        as_problem_cache(3)
    with pytest.raises(ConfigError, match="plain file name"):
        ProblemCache(tmp_path).path("../escape")


def test_a_cache_that_cannot_be_written_does_not_fail(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = ProblemCache(blocker / "problems")
    with caplog.at_level(logging.WARNING):
        assert cache.store("p", _problem()) is None
    assert "cannot keep the built problem" in caplog.text


def test_a_problem_with_what_entries_do_not_hold_is_not_kept(tmp_path, caplog):
    scaled = dataclasses.replace(_problem(), time_scale={"GPU": 1.5})
    cache = ProblemCache(tmp_path / "problems")
    with caplog.at_level(logging.WARNING):
        assert cache.store("p", scaled) is None
    assert "not kept" in caplog.text and cache.load("p", scaled.cluster) is None
