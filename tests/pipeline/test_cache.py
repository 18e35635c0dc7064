"""The placement cache: a hit returns without searching and gives the same placement; a changed
graph, placer setting or seed misses; damaged, foreign or invalid entries are ignored with a
warning and replaced; concurrent writers never leave a partial entry."""

import dataclasses
import glob
import logging
import os
import sys
import threading
import time

import numpy as np
import pytest

import tf_autoplace
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.fingerprint import fingerprint
from tf_autoplace.pipeline import cache as cache_module
from tf_autoplace.pipeline.cache import PlacementCache, as_cache, default_directory
from tf_autoplace.placers import AutoPlacer, SavedPlacement
from tf_autoplace.proto import placement_pb2
from tf_autoplace.sim.simulator import Simulator
from tf_autoplace.testing import problems, small_cnn

CPU2 = "testdata/cpu2_independent.pbtxt"


@pytest.fixture
def simulations(monkeypatch):
    """Counts every simulation (``Simulator.run``, and each row of ``Simulator.summaries``,
    which the searches' evaluator calls)."""
    count = [0]
    original_run, original_summaries = Simulator.run, Simulator.summaries

    def run(self, devices):
        count[0] += 1
        return original_run(self, devices)

    def summaries(self, placements, **kwargs):
        count[0] += len(placements)
        return original_summaries(self, placements, **kwargs)

    monkeypatch.setattr(Simulator, "run", run)
    monkeypatch.setattr(Simulator, "summaries", summaries)
    return count


def _place(cache, *, graph=None, samples=200, seed=0):
    graph = small_cnn().graph if graph is None else graph
    report = tf_autoplace.autoplace(graph, cluster=CPU2, placer=AutoPlacer(max_samples=samples),
                                    seed=seed, cache=cache, progress=False)
    return graph, report


def _entries(directory):
    return sorted(glob.glob(os.path.join(str(directory), "*.pb")))


def test_a_hit_does_not_search_and_gives_the_same_placement(tmp_path, simulations):
    graph, first = _place(tmp_path)
    searched = simulations[0]
    assert not first.from_cache and searched > 100 and len(_entries(tmp_path)) == 1
    simulations[0] = 0
    again_graph, again = _place(tmp_path)
    assert again.from_cache
    assert simulations[0] == 2  # the check of the cached placement and the baseline
    assert again.assignment == first.assignment
    assert again_graph.as_graph_def().SerializeToString(deterministic=True) == \
        graph.as_graph_def().SerializeToString(deterministic=True)
    assert again.step_time_s == first.step_time_s
    assert "read from the placement cache" in str(again) and again.cache_entry
    assert again.notes == first.notes  # the search's own notes, kept
    # The placement's bytes are the search's: where it was read from is the report's to say.
    assert again.to_proto().SerializeToString(deterministic=True) == \
        first.to_proto().SerializeToString(deterministic=True)
    with pytest.raises(ConfigError, match="keeps placements, not policies"):
        again.save_policy(str(tmp_path / "policy"))


def test_a_changed_graph_placer_setting_or_seed_misses(tmp_path):
    _place(tmp_path)
    small = small_cnn(batch=4).graph  # another batch size: the same ops, other shapes
    assert not _place(tmp_path, graph=small)[1].from_cache
    assert not _place(tmp_path, samples=150)[1].from_cache
    assert not _place(tmp_path, seed=1)[1].from_cache
    assert len(_entries(tmp_path)) == 4
    assert _place(tmp_path, graph=small_cnn(batch=4).graph)[1].from_cache


def test_without_a_cache_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv("TF_AUTOPLACE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for off in (False, None):
        assert not _place(off)[1].from_cache
    assert not os.path.exists(tmp_path / "tf_autoplace")
    assert as_cache(True).directory == str(tmp_path / "tf_autoplace" / "placements")


def test_a_truncated_entry_is_ignored_with_a_warning_and_replaced(tmp_path, caplog):
    _, first = _place(tmp_path)
    (entry,) = _entries(tmp_path)
    with open(entry, "rb") as f:
        data = f.read()
    with open(entry, "wb") as f:
        f.write(data[:len(data) // 2])
    with caplog.at_level(logging.WARNING):
        _, again = _place(tmp_path)
    assert not again.from_cache and again.assignment == first.assignment
    assert "ignoring the placement cache entry" in caplog.text and "does not parse" in caplog.text
    assert _place(tmp_path)[1].from_cache  # the search's result replaced the damaged entry
    open(entry, "wb").close()  # cut to nothing: it parsed, as an entry of "another key"
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert not _place(tmp_path)[1].from_cache
    assert "it is empty (a truncated file)" in caplog.text


def _rewrite(entry, edit, *, checksum=True):
    """Edit the entry's proto; with ``checksum``, as a writer would have stored it (the
    checks behind the checksum are what is tested)."""
    proto = placement_pb2.PlacementResult()
    with open(entry, "rb") as f:
        proto.ParseFromString(f.read())
    edit(proto)
    if checksum:
        proto.cache_checksum = cache_module._checksum(proto)  # noqa: SLF001
    with open(entry, "wb") as f:
        f.write(proto.SerializeToString())


def test_an_entry_whose_bytes_changed_anywhere_is_not_read_back(tmp_path, caplog):
    # Damage outside what is checked against the graph (a note) still parses and matches:
    # only the checksum tells it was damaged.
    _place(tmp_path)
    (entry,) = _entries(tmp_path)
    _rewrite(entry, lambda p: p.note.append("a note no writer wrote"), checksum=False)
    with caplog.at_level(logging.WARNING):
        assert not _place(tmp_path)[1].from_cache
    assert "do not match its checksum" in caplog.text


@pytest.mark.parametrize("edit,reason", [
    (lambda p: setattr(p, "graph_fingerprint", "0" * 64), "made for another graph"),
    (lambda p: setattr(p, "cache_key", "1" * 64), "holds another key"),
    (lambda p: p.op.pop(), "it places 249 ops, the graph has 250"),
    (lambda p: setattr(p.op[0], "device", "/device:GPU:0"), "which the cluster does not have"),
])
def test_an_entry_for_something_else_is_not_trusted(tmp_path, caplog, edit, reason):
    _place(tmp_path)
    (entry,) = _entries(tmp_path)
    _rewrite(entry, edit)
    with caplog.at_level(logging.WARNING):
        assert not _place(tmp_path)[1].from_cache
    assert reason in caplog.text


def test_a_cached_placement_that_breaks_a_constraint_is_searched_again(tmp_path, caplog):
    graph, first = _place(tmp_path)
    (entry,) = _entries(tmp_path)

    def split_a_variable(proto):
        op = next(op for op in proto.op if op.name == "left/kernel")
        op.device = op.device[:-1] + ("1" if op.device.endswith("0") else "0")

    _rewrite(entry, split_a_variable)
    with caplog.at_level(logging.WARNING):
        _, again = _place(tmp_path)
    assert not again.from_cache and again.assignment == first.assignment
    assert "colocation group" in caplog.text


def test_keys_follow_the_placer_settings_and_the_seed():
    problem = problems.random_problem(40, 0)
    fp = fingerprint(problem.graph)
    key = PlacementCache.key(problem, AutoPlacer(max_samples=10), 0, fp)
    assert key == PlacementCache.key(problem, AutoPlacer(max_samples=10), 0, fp)
    assert key != PlacementCache.key(problem, AutoPlacer(max_samples=11), 0, fp)
    assert key != PlacementCache.key(problem, AutoPlacer(max_samples=10), 1, fp)
    assert key != PlacementCache.key(problems.random_problem(40, 0, num_gpus=3),
                                     AutoPlacer(max_samples=10), 0, fp)
    d = problem.cluster.num_devices  # links with a delay are other links
    delayed = dataclasses.replace(problem, cluster=dataclasses.replace(
        problem.cluster, delay=np.full((d, d), 1e-4)))
    assert key != PlacementCache.key(delayed, AutoPlacer(max_samples=10), 0, fp)
    # The prediction error decides whether auto keeps a split (a stale entry served a split
    # for a spec whose error says one device).
    for change in (dict(prediction_error=0.9), dict(prediction_error=0.1)):
        other = dataclasses.replace(problem, cluster=dataclasses.replace(problem.cluster,
                                                                         **change))
        assert key != PlacementCache.key(other, AutoPlacer(max_samples=10), 0, fp), change
    saved = placement_pb2.PlacementResult(op=[placement_pb2.OpPlacement(name="a", device="b")])
    assert PlacementCache.key(problem, SavedPlacement(saved), 0, fp) is None


def test_keys_follow_the_executed_graph_but_not_the_order_of_its_control_edges():
    problem = problems.random_problem(40, 0)
    fp, graph = fingerprint(problem.graph), problem.graph
    src = graph.tensor_op[graph.edge_tensor][:6]  # control edges beside data edges: acyclic
    dst = graph.edge_dst[:6]

    def key(order):
        executed = dataclasses.replace(graph, ctrl_src=src[order], ctrl_dst=dst[order])
        return PlacementCache.key(dataclasses.replace(problem, executed=executed),
                                  AutoPlacer(max_samples=10), 0, fp)

    assert key(np.arange(6)) == key(np.arange(6)[::-1])  # TF lists them sorted by raw name
    assert key(np.arange(6)) != key(np.arange(5))
    assert key(np.arange(6)) != PlacementCache.key(problem, AutoPlacer(max_samples=10), 0, fp)


def _entry(problem, fp, device, note):
    entry = placement_pb2.PlacementResult(placer="auto", graph_fingerprint=fp, note=[note])
    for name in problem.graph.names:
        entry.op.add(name=name, device=problem.cluster.names[device])
    return entry


def test_a_writer_stopped_half_way_leaves_the_entry_whole(tmp_path, monkeypatch):
    """A second writer is held in the middle of writing its entry; meanwhile a reader finds
    the first entry whole, then the second one whole, and no temporary file is left."""
    from tf_autoplace.outputs import saved_placement

    problem = problems.random_problem(40, 0)
    fp = fingerprint(problem.graph)
    cache, key = PlacementCache(tmp_path), "a" * 64
    first, second = _entry(problem, fp, 0, "first"), _entry(problem, fp, 1, "x" * 5000)
    cache.store(key, first)
    halfway, resume = threading.Event(), threading.Event()

    class Held:
        """A file whose write stops half way until the test lets it go on."""

        def __init__(self, f):
            self.f = f

        def write(self, data):
            self.f.write(data[:len(data) // 2])
            self.f.flush()
            halfway.set()
            resume.wait(60)
            return self.f.write(data[len(data) // 2:])

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def __getattr__(self, name):
            return getattr(self.f, name)

    real_fdopen, real_open = os.fdopen, open
    monkeypatch.setattr(saved_placement.os, "fdopen", lambda *a, **k: Held(real_fdopen(*a, **k)))
    monkeypatch.setattr(saved_placement, "open", lambda *a, **k: Held(real_open(*a, **k)),
                        raising=False)  # a writer that wrote the entry in place would use it
    writer = threading.Thread(target=cache.store, args=(key, second))
    writer.start()
    assert halfway.wait(60)
    hit = cache.load(key, problem, fp)
    resume.set()
    writer.join()
    assert hit is not None and hit.notes == ("first",)
    assert cache.load(key, problem, fp).notes == ("x" * 5000,)
    assert not glob.glob(os.path.join(str(tmp_path), ".tmp_*"))


def test_the_directory_keeps_at_most_max_entries(tmp_path):
    cache = PlacementCache(tmp_path, max_entries=3)
    entry = placement_pb2.PlacementResult(op=[placement_pb2.OpPlacement(name="a", device="b")])
    for k in range(5):
        cache.store(f"{k:064d}", entry)
        os.utime(cache.path(f"{k:064d}"), (k, k))  # written in this order
    assert [os.path.basename(p)[:-3] for p in _entries(tmp_path)] == \
        [f"{k:064d}" for k in (2, 3, 4)]


def test_pruning_removes_entries_only_never_the_users_files(tmp_path):
    # A cache directory the user also keeps graphs in: pruning used to remove the oldest of
    # every *.pb file there.
    theirs = ["model.pb", "placed.pb", f"{'a' * 63}.pb", f"{'A' * 64}.pb", f"{0:064d}.pb.pb"]
    for k, name in enumerate(theirs):
        (tmp_path / name).write_bytes(b"user data")
        os.utime(tmp_path / name, (k, k))  # older than any entry
    cache = PlacementCache(tmp_path, max_entries=1)
    entry = placement_pb2.PlacementResult(op=[placement_pb2.OpPlacement(name="a", device="b")])
    for k in range(3):
        cache.store(f"{k + 1:064x}", entry)
    assert sorted(os.listdir(tmp_path)) == sorted(theirs + [f"{3:064x}.pb"])
    assert all((tmp_path / name).read_bytes() == b"user data" for name in theirs)


def test_a_killed_writers_temporary_is_removed_once_it_is_old(tmp_path):
    # A writer killed between its temporary and the rename (SIGKILL, the OOM killer) left
    # .tmp_autoplace_* files in the cache for good: pruning counted only entries.
    old, fresh = tmp_path / ".tmp_autoplace_k1ll3d_0", tmp_path / ".tmp_autoplace_wr1t1ng_"
    journal = tmp_path / ".tmp_autoplace_0123abcd.plan"  # another run's output set: its own
    for path in (old, fresh, journal):
        path.write_bytes(b"half an entry")
    day_ago = time.time() - 86400
    for path in (old, journal):
        os.utime(path, (day_ago, day_ago))
    cache = PlacementCache(tmp_path)
    entry = placement_pb2.PlacementResult(op=[placement_pb2.OpPlacement(name="a", device="b")])
    cache.store(f"{1:064x}", entry)
    assert not old.exists() and fresh.exists() and journal.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [fresh.name, journal.name, f"{1:064x}.pb"])


def test_cache_arguments_are_checked(monkeypatch, tmp_path):
    monkeypatch.setenv("TF_AUTOPLACE_CACHE_DIR", str(tmp_path / "mine"))
    assert default_directory() == str(tmp_path / "mine")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # a "~" no shell expanded (Docker ENV)
    monkeypatch.setenv("TF_AUTOPLACE_CACHE_DIR", "~/placements")
    assert default_directory() == str(tmp_path / "home" / "placements")
    monkeypatch.delenv("TF_AUTOPLACE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):  # platformdirs reads XDG_CACHE_HOME on Linux
        assert default_directory() == str(tmp_path / "xdg" / "tf_autoplace" / "placements")
    assert as_cache(str(tmp_path)).directory == str(tmp_path)
    for bad in (1, "", object()):
        with pytest.raises(ConfigError, match="cache must be"):
            as_cache(bad)
    with pytest.raises(ConfigError, match="max_entries"):
        PlacementCache(tmp_path, max_entries=0)


def test_a_cache_that_cannot_be_written_does_not_fail_the_placement(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with caplog.at_level(logging.WARNING):
        _, report = _place(blocker / "cache")
    assert not report.from_cache and "cannot write the placement cache entry" in caplog.text
    assert np.isfinite(report.step_time_s)


def test_an_entry_that_is_not_a_regular_file_is_ignored_never_opened(tmp_path, caplog):
    _, first = _place(tmp_path)
    (entry,) = _entries(tmp_path)
    outside = tmp_path.parent / f"{tmp_path.name}_outside.pb"
    os.replace(entry, outside)
    os.mkfifo(entry)  # opening it to read would wait for a writer forever
    with caplog.at_level(logging.WARNING):
        _, again = _place(tmp_path)
    assert not again.from_cache and again.assignment == first.assignment
    assert "it is a FIFO, not a regular file" in caplog.text
    assert _place(tmp_path)[1].from_cache  # replaced by the search's result
    os.unlink(entry)
    os.symlink(outside, entry)  # a whole, valid entry, but out of the cache directory
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert not _place(tmp_path)[1].from_cache
    assert "it is a symbolic link, not a regular file" in caplog.text


def test_a_cache_directory_others_can_write_or_own_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    with pytest.raises(ConfigError, match="can be written by other users"):
        as_cache(str(shared))
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        with pytest.raises(ConfigError, match="is owned by another user"):
            _place(theirs)
