"""The placement cache: a placement searched for once is found again at once.

A training binary with ``--autoplace`` places its graph before every start; a preempted or
restarted job would search again (up to two minutes with the default budget, and with a time
budget the result could differ from one start to the next). With the cache (on for
``--autoplace`` by default, ``autoplace(..., cache=True)``), the first start stores what it
found and every later start with the same graph, cluster, placer and seed reads it back.

**Key** (:meth:`PlacementCache.key`): SHA-256 of everything the placement depends on:

- the graph's fingerprint (:mod:`tf_autoplace.graph.fingerprint`: structure, sizes, op types,
  colocation and kernel constraints, and names without TF's uniquifying counters, so a model
  built again after another one, ``dense_1`` for ``dense``, still hits);
- the op-time matrix of the cost model (shapes and the cost model's view of each device) and,
  from a measured profile, what the simulator takes from it besides (the executed graph's
  fingerprint, the partner times);
- the grouping (Merge-and-Colocate's groups);
- the cluster (every device's fields, core groups, link bandwidths, latencies and delays,
  per-op overhead, TensorFlow tasks and target, and the prediction error, which decides
  whether ``auto`` keeps a split at all);
- the placer's name and settings (``Placer.settings()``: its config, and for a learned placer
  the contents of the policy it starts from) and the seed;
- tf_autoplace's version (another version may search differently).

A placer whose ``settings()`` is None (a saved placement: nothing is searched) is not cached.

**Entries** are ``PlacementResult`` protos (``protos/placement.proto``, the format of a saved
placement; nothing read from the cache can run code) named ``<key>.pb`` in the cache directory
(:func:`default_directory`: the ``TF_AUTOPLACE_CACHE_DIR`` environment variable when set, else
``tf_autoplace/placements`` in the user's cache directory,
:func:`tf_autoplace.core.cachedir.user_cache_dir`: ``$XDG_CACHE_HOME`` or ``~/.cache`` on
Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows, beside the compiled
simulator kernels of :mod:`tf_autoplace.core.jit`). The directory is private
(:func:`tf_autoplace.core.cachedir.private_directory`): created with mode 0700 on the first
store, and one that another user owns or others can write to is a ConfigError when the cache
is opened. A user without a cache directory (no home) places without a cache, with a warning;
a directory that cannot be created or written only means that nothing is stored (a warning).
An entry holds its key, the graph's
fingerprint, the placer, the seed, the notes of the search, and every op's device in graph
order; with the same fingerprint the i-th entry is the i-th op, whatever counters its name
carries.

**Trust nothing read.** :meth:`PlacementCache.load` returns None, with a warning, for an entry
that is not a regular file (a FIFO, socket, device, directory or symbolic link: never opened in
a way that could block or follow it, :func:`tf_autoplace.core.cachedir.read_regular_file`),
that cannot be read or parsed (a truncated file), whose key or graph fingerprint is not the
one asked for, whose op count differs, or that names a device the cluster lacks; the engine
then checks a loaded placement like any other (colocation, kernels, memory) and treats a
failure the same way (:meth:`PlacementCache.reject`). The search then runs and its result
replaces the entry.

**Concurrent writers** cannot corrupt an entry: each writes a temporary file in the cache
directory and renames it over the entry (``os.replace``, atomic on one file system), so a reader
sees a whole entry, old or new. The directory keeps at most ``max_entries`` entries; the least
recently written go first. Only files named as entries (``<64 hex digits>.pb``) count and are
ever removed: a directory the user also keeps other files in loses none of them.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import re
import stat
import time
from importlib import metadata

import numpy as np
from absl import logging

from tf_autoplace.core.cachedir import (
    check_private_directory,
    private_directory,
    read_entry,
    user_cache_dir,
)
from tf_autoplace.core.problem import PlacementProblem, Placer
from tf_autoplace.errors import AutoplaceError, ConfigError
from tf_autoplace.graph.fingerprint import fingerprint
from tf_autoplace.outputs.files import TEMP_PREFIX, owned
from tf_autoplace.outputs.saved_placement import match, write_placement
from tf_autoplace.proto import placement_pb2

SUFFIX = ".pb"
ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.pb")  # an entry's file name: its key, SHA-256 in hex
# The temporary write_atomically writes an entry into (tempfile.mkstemp's name with our prefix)
# and the age after which one is a killed writer's.
ATOMIC_TEMP = re.compile(re.escape(TEMP_PREFIX) + r"[a-z0-9_]{8}")
STALE_TEMP_S = 3600.0
CACHE_ENV = "TF_AUTOPLACE_CACHE_DIR"
# Bumped when the key or the entry format changes, so that old entries are never read.
FORMAT = 4


def package_version() -> str:
    try:
        return metadata.version("tf_autoplace")
    except metadata.PackageNotFoundError:
        return "unknown"


def default_directory() -> str | None:
    """The user's cache directory for placements (module docstring); None when the user has no
    cache directory and ``TF_AUTOPLACE_CACHE_DIR`` is not set. A ``~`` at the start of the
    variable is the home directory, as a shell would have expanded it (a Dockerfile's ``ENV``
    or ``os.environ`` does not)."""
    value = os.environ.get(CACHE_ENV)
    return os.path.expanduser(value) if value else user_cache_dir("placements")


@dataclasses.dataclass(frozen=True)
class Hit:
    """A cache entry that matched: ``devices`` [n] int32 per op, what the entry says of its
    search (``placer``, ``seed``, ``notes``) and where it is (``path``)."""

    devices: np.ndarray
    placer: str
    seed: int
    notes: tuple[str, ...]
    path: str


class PlacementCache:
    """Placements by key in one directory (module docstring).

    Args:
      directory: where entries live (created, mode 0700, on the first store); None:
        :func:`default_directory`.
      max_entries: entries kept (>= 1); the least recently written are removed beyond it.

    Raises:
      ConfigError: a bad argument; no ``directory`` and the user has no cache directory; or
        the directory exists but another user owns it or others can write to it.
    """

    def __init__(self, directory=None, *, max_entries: int = 256):
        if not (isinstance(max_entries, int) and max_entries >= 1):
            raise ConfigError(f"max_entries must be an int >= 1, got {max_entries!r}")
        if directory is not None and not (isinstance(directory, (str, os.PathLike))
                                          and os.fspath(directory)):
            raise ConfigError(f"directory must be a non-empty path or None, got {directory!r}")
        if directory is None:
            directory = default_directory()
            if directory is None:
                raise ConfigError(f"the user has no cache directory (no home directory): give "
                                  f"the placement cache a directory, or set {CACHE_ENV}")
        self.directory = os.path.abspath(os.fspath(directory))
        check_private_directory(self.directory, "the placement cache")
        self.max_entries = max_entries

    def __repr__(self) -> str:
        return f"PlacementCache({self.directory!r}, max_entries={self.max_entries})"

    def path(self, key: str) -> str:
        return os.path.join(self.directory, key + SUFFIX)

    @staticmethod
    def key(problem: PlacementProblem, placer: Placer, seed: int,
            graph_fingerprint: str) -> str | None:
        """The key of ``placer``'s placement of ``problem`` with ``seed`` (module docstring),
        or None if the placer is not cached."""
        settings = placer.settings()
        if settings is None:
            return None
        h = hashlib.sha256()
        cluster = problem.cluster
        for part in (f"tf_autoplace.pipeline.cache/{FORMAT}", package_version(), graph_fingerprint,
                     repr(cluster.devices), repr(cluster.core_groups),
                     repr(cluster.op_overhead_s), repr(cluster.tasks), cluster.target,
                     repr(cluster.prediction_error), placer.name, settings, str(int(seed)),
                     f"estimated_here={problem.estimated_here}"):
            data = part.encode("utf-8")
            h.update(len(data).to_bytes(8, "little") + data)
        arrays = [problem.op_time, problem.grouping.labels, cluster.bandwidth, cluster.latency,
                  cluster.delay]
        if problem.executed is not None:  # the simulator runs the graph TF executes
            # (its fingerprint: its control edges in a canonical order, as the graph's)
            h.update(fingerprint(problem.executed).encode())
        if problem.partner is not None:
            arrays += [problem.partner, problem.partner_time]
        for array in arrays:
            array = np.ascontiguousarray(array)
            h.update(f"{array.dtype.str}{array.shape}".encode() + array.tobytes())
        return h.hexdigest()

    def load(self, key: str, problem: PlacementProblem, graph_fingerprint: str) -> Hit | None:
        """The entry stored under ``key`` if it is whole and for this graph and cluster; None
        (with a warning for an entry that exists but is not trusted) otherwise."""
        path = self.path(key)
        data, why = read_entry(path)
        if data is None:
            return self._ignore(path, why) if why else None
        if not data:  # (it would parse, as an entry of no key)
            return self._ignore(path, "it is empty (a truncated file)")
        entry = placement_pb2.PlacementResult()
        try:
            entry.ParseFromString(data)
        except Exception:  # protobuf raises DecodeError, or others on some damaged inputs
            return self._ignore(path, "it does not parse (a truncated or damaged file)")
        if entry.cache_checksum != _checksum(entry):
            return self._ignore(path, "its bytes do not match its checksum (a damaged file, or "
                                      "one written by an older version)")
        if entry.cache_key != key:
            return self._ignore(path, "it holds another key")
        if entry.graph_fingerprint != graph_fingerprint:
            return self._ignore(path, "it was made for another graph")
        if len(entry.op) != problem.graph.num_ops:
            return self._ignore(path, f"it places {len(entry.op)} ops, the graph has "
                                      f"{problem.graph.num_ops}")
        try:
            found = match(problem, entry, graph_fingerprint)
        except AutoplaceError as e:
            return self._ignore(path, str(e))
        return Hit(devices=found.devices, placer=entry.placer, seed=int(entry.seed),
                   notes=tuple(entry.note), path=path)

    def reject(self, hit: Hit, reason: str) -> None:
        """Say that the entry of ``hit`` is not used because ``reason`` (the engine's check of
        the placement failed); the search's result will replace it."""
        self._ignore(hit.path, reason)

    def store(self, key: str, entry: placement_pb2.PlacementResult) -> str | None:
        """Store ``entry`` (a PlacementResult for the key's graph) under ``key``, atomically;
        returns its path, or None (with a warning) if the directory cannot be written: a cache
        that fails never fails the placement."""
        out = placement_pb2.PlacementResult()
        out.CopyFrom(entry)
        out.cache_key = key
        out.cache_checksum = _checksum(out)
        path = self.path(key)
        try:
            private_directory(self.directory, "the placement cache")
            write_placement(path, out)
        except (OSError, ConfigError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else e
            logging.warning("autoplace: cannot write the placement cache entry %s (%s); the "
                            "placement is not cached", path, reason)
            return None
        self._prune()
        return path

    def _prune(self) -> None:
        """Keep the newest ``max_entries`` entries, and remove the temporaries of writers
        killed before their rename (SIGKILL, the OOM killer): ``write_atomically``'s names,
        an hour old (a live writer renames its own within milliseconds). Nothing else in the
        directory is touched: a user may keep files there, and another run's output set has
        its own journal (``outputs.files.recover``)."""
        now = time.time()
        for p in glob.glob(os.path.join(glob.escape(self.directory), TEMP_PREFIX + "*")):
            try:
                st = os.lstat(p)
            except OSError:  # renamed or removed meanwhile
                continue
            if (ATOMIC_TEMP.fullmatch(os.path.basename(p)) and stat.S_ISREG(st.st_mode)
                    and owned(st) and now - st.st_mtime > STALE_TEMP_S):
                try:
                    os.unlink(p)
                except OSError:
                    pass
        entries = []
        for p in glob.glob(os.path.join(glob.escape(self.directory), "*" + SUFFIX)):
            if not ENTRY_NAME.fullmatch(os.path.basename(p)):  # not ours: never removed
                continue
            try:
                entries.append((os.path.getmtime(p), p))
            except OSError:  # removed by another process meanwhile
                continue
        for _, p in sorted(entries)[:max(0, len(entries) - self.max_entries)]:
            try:
                os.unlink(p)
            except OSError:
                pass

    @staticmethod
    def _ignore(path: str, reason: str) -> None:
        logging.warning("autoplace: ignoring the placement cache entry %s: %s; searching again",
                        path, reason)
        return None


def as_cache(value) -> PlacementCache | None:
    """A PlacementCache from what ``autoplace(cache=...)`` takes: False or None (no cache),
    True (the user's cache directory; no cache, with a warning, for a user who has none), a
    directory path, or a PlacementCache. ConfigError for another value, or a directory another
    user owns or others can write to."""
    if isinstance(value, PlacementCache):
        return value
    if value is None or value is False:
        return None
    if value is True:
        if default_directory() is None:
            logging.warning("autoplace: the user has no cache directory (no home directory) and "
                            "%s is not set; placing without the placement cache", CACHE_ENV)
            return None
        return PlacementCache()
    if isinstance(value, (str, os.PathLike)) and os.fspath(value):
        return PlacementCache(value)
    raise ConfigError(f"cache must be True, False, a directory or a "
                      f"tf_autoplace.pipeline.cache.PlacementCache, got {value!r}")


def _checksum(entry: placement_pb2.PlacementResult) -> str:
    """SHA-256 (hex) of ``entry`` serialized deterministically with its ``cache_checksum``
    empty: a byte of an entry changed anywhere (a note, a figure, not only what is checked
    against the graph) no longer matches, and the entry is not read back."""
    copy = placement_pb2.PlacementResult()
    copy.CopyFrom(entry)
    copy.ClearField("cache_checksum")
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()
