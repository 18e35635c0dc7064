"""Built placement problems kept between runs, in a file format that cannot run code.

Building a zoo graph's problem (the TensorFlow graph, Grappler's costs, the grouping) takes
seconds to minutes. The training corpora (:mod:`tf_autoplace.zoo.corpora`) and the tools that
time one stage on a zoo graph (:func:`tf_autoplace.zoo.benchmark.pair_problem`) keep the
problems they build in a :class:`ProblemCache`, so the next run reads them back.

- **Format**: one ``<name>.npz`` per problem, numpy arrays only (``numpy.savez``, read with
  ``allow_pickle=False``): every array of the OpGraph (module :mod:`tf_autoplace.graph.opgraph`),
  ``op_time``, the grouping's labels and kernels, and a JSON header (as bytes) with the format
  version, the op names and types, and the SHA-256 of the cluster the problem was costed for.
  Nothing in an entry is code, and reading one runs none (no pickle anywhere).
- **Where**: a private directory (:func:`tf_autoplace.core.cachedir.private_directory`: created
  with mode 0700; one another user owns, or others can write to, is a ConfigError), by default
  ``tf_autoplace/problems`` in the user's cache directory
  (:func:`tf_autoplace.core.cachedir.user_cache_dir`), never a shared place such as ``/tmp``.
- **Trust nothing read**: an entry that is not a regular file (a FIFO, socket, device,
  directory or symbolic link: never opened in a way that blocks or follows it), does not load
  (truncated, not an npz, an object array), holds arrays of other types or shapes, fails the
  OpGraph and Grouping checks, or was costed for another cluster, is ignored with a warning;
  the caller builds the problem again and the new entry replaces it.
- **Writes** are atomic (:func:`tf_autoplace.outputs.files.write_atomically`): a concurrent
  reader sees the old entry or the whole new one. A cache that cannot be written (a read-only
  directory, no home) only means the problem is not kept (a warning).
"""

from __future__ import annotations

import hashlib
import io
import json
import os

import numpy as np
from absl import logging

from tf_autoplace.core.cachedir import (
    check_private_directory,
    private_directory,
    read_entry,
    user_cache_dir,
)
from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.npz import NpzError, load_npz
from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.errors import AutoplaceError, ConfigError
from tf_autoplace.graph.opgraph import OpGraph
from tf_autoplace.grouping import Grouping
from tf_autoplace.outputs.files import write_atomically

SUFFIX = ".npz"
# Bumped when the entry format changes; entries of another format are rebuilt. Format 2 keeps
# tensor_alias (format 1 lost it: its problems counted views and shared buffers as new bytes).
FORMAT = 2

# OpGraph array fields and the dtype each is stored with: every array field an OpGraph has
# (tests/pipeline/test_problem_cache.py checks that none is left out).
_GRAPH_ARRAYS = {"persistent_bytes": np.int64, "tensor_op": np.int32, "tensor_bytes": np.int64,
                 "edge_tensor": np.int32, "edge_dst": np.int32, "ctrl_src": np.int32,
                 "ctrl_dst": np.int32, "colocation": np.int32, "kernels": np.bool_,
                 "shape_known": np.bool_, "tensor_alias": np.int32}
_OTHER_ARRAYS = {"op_time": np.float64, "group_labels": np.int32, "group_kernels": np.bool_,
                 "header": np.uint8}


class EntryError(ValueError):
    """An entry that is not a problem this cache wrote for the cluster asked for."""


def cluster_digest(cluster: Cluster) -> str:
    """SHA-256 of the cluster's serialized spec (what a stored problem was costed for)."""
    return hashlib.sha256(cluster.to_proto().SerializeToString(deterministic=True)).hexdigest()


def encode(problem: PlacementProblem) -> bytes:
    """The ``.npz`` bytes of ``problem`` (module docstring; its workload is not kept)."""
    graph, grouping = problem.graph, problem.grouping
    header = {"format": FORMAT, "names": list(graph.names), "op_types": list(graph.op_types),
              "kernel_kinds": list(graph.kernel_kinds), "n_back_edges": int(graph.n_back_edges),
              "num_groups": int(grouping.num_groups), "cluster": cluster_digest(problem.cluster)}
    arrays = {name: np.asarray(getattr(graph, name), dtype) for name, dtype in
              _GRAPH_ARRAYS.items()}
    arrays.update(op_time=np.asarray(problem.op_time, np.float64),
                  group_labels=np.asarray(grouping.labels, np.int32),
                  group_kernels=np.asarray(grouping.kernels, np.bool_),
                  header=np.frombuffer(json.dumps(header).encode("utf-8"), np.uint8))
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def decode(data: bytes, cluster: Cluster) -> PlacementProblem:
    """The problem in ``data`` (bytes :func:`encode` wrote), on ``cluster``.

    Raises:
      EntryError: the bytes are not such a problem (damaged, another format) or it was costed
        for another cluster; the message says which.
    """
    try:
        arrays = load_npz(data)
    except NpzError as e:
        raise EntryError(str(e)) from e
    for name, dtype in {**_GRAPH_ARRAYS, **_OTHER_ARRAYS}.items():
        if name not in arrays:
            raise EntryError(f"it has no array {name!r}")
        if arrays[name].dtype != np.dtype(dtype):
            raise EntryError(f"its array {name!r} is {arrays[name].dtype}, not "
                             f"{np.dtype(dtype)}")
    try:
        header = json.loads(arrays["header"].tobytes().decode("utf-8"))
        if header["format"] != FORMAT:
            raise EntryError(f"it has format {header['format']!r}, this version reads {FORMAT}")
        if header["cluster"] != cluster_digest(cluster):
            raise EntryError("it was costed for another cluster")
        graph = OpGraph(names=tuple(str(n) for n in header["names"]),
                        op_types=tuple(str(t) for t in header["op_types"]),
                        kernel_kinds=tuple(str(k) for k in header["kernel_kinds"]),
                        n_back_edges=int(header["n_back_edges"]),
                        **{name: arrays[name] for name in _GRAPH_ARRAYS})
        op_time = arrays["op_time"]
        if np.isnan(op_time).any() or (op_time < 0).any():
            raise EntryError("its op times hold NaN or negative values")
        grouping = Grouping(labels=arrays["group_labels"], num_groups=int(header["num_groups"]),
                            kernels=arrays["group_kernels"])
        return PlacementProblem(graph=graph, cluster=cluster, op_time=op_time,
                                grouping=grouping)
    except EntryError:
        raise
    except (AutoplaceError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise EntryError(f"it does not hold a valid problem ({e})") from e


class ProblemCache:
    """Built problems by name in one private directory (module docstring).

    Args:
      directory: where entries live (created, mode 0700, on the first store); None: the
        user's (``tf_autoplace/problems`` in the user's cache directory).

    Raises:
      ConfigError: no ``directory`` and the user has no cache directory; or the directory
        exists but another user owns it or others can write to it.
    """

    def __init__(self, directory=None):
        if directory is None:
            directory = user_cache_dir("problems")
            if directory is None:
                raise ConfigError("the user has no cache directory (no home directory): give "
                                  "the problem cache a directory")
        if not (isinstance(directory, (str, os.PathLike)) and os.fspath(directory)):
            raise ConfigError(f"directory must be a non-empty path or None, got {directory!r}")
        self.directory = os.path.abspath(os.fspath(directory))
        check_private_directory(self.directory, "the problem cache")

    def __repr__(self) -> str:
        return f"ProblemCache({self.directory!r})"

    def path(self, name: str) -> str:
        """Where the entry ``name`` lives; ConfigError for a name that is not one plain file
        name."""
        if not name or os.path.basename(name) != name or name.startswith("."):
            raise ConfigError(f"a problem cache entry's name is a plain file name, got {name!r}")
        return os.path.join(self.directory, name + SUFFIX)

    def load(self, name: str, cluster: Cluster) -> PlacementProblem | None:
        """The problem stored as ``name`` for ``cluster``; None if there is none, or (with a
        warning) if the entry is not trusted (module docstring)."""
        path = self.path(name)
        data, why = read_entry(path)
        if data is None:
            return _ignore(path, why) if why else None
        try:
            return decode(data, cluster)
        except EntryError as e:
            return _ignore(path, str(e))

    def store(self, name: str, problem: PlacementProblem) -> str | None:
        """Keep ``problem`` as ``name`` (atomically); returns the entry's path, or None (with
        a warning) if it cannot be written."""
        path = self.path(name)
        if problem.partner is not None or problem.time_scale:
            logging.warning("tf_autoplace: a problem with profiled partner times or time "
                            "scales is not kept in the problem cache (its entries hold "
                            "neither); it will be built again next time")
            return None
        try:
            private_directory(self.directory, "the problem cache")
            write_atomically(path, encode(problem))
        except (OSError, ConfigError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else e
            logging.warning("tf_autoplace: cannot keep the built problem in %s (%s); it will be "
                            "built again next time", path, reason)
            return None
        return path


def as_problem_cache(value) -> ProblemCache | None:
    """A ProblemCache from what a ``cache_dir`` argument takes: None or False (no cache), True
    (the user's; none, with a warning, for a user without a cache directory), a directory
    path, or a ProblemCache. ConfigError for anything else, or a directory another user owns
    or others can write to."""
    if isinstance(value, ProblemCache):
        return value
    if value is None or value is False:
        return None
    if value is True:
        if user_cache_dir("problems") is None:
            logging.warning("tf_autoplace: the user has no cache directory (no home "
                            "directory); built problems are not kept")
            return None
        return ProblemCache()
    if isinstance(value, (str, os.PathLike)) and os.fspath(value):
        return ProblemCache(value)
    raise ConfigError(f"cache_dir must be None, True or a directory, got {value!r}")


def _ignore(path: str, reason: str) -> None:
    logging.warning("tf_autoplace: ignoring the problem cache entry %s: %s; building the "
                    "problem again", path, reason)
    return None


__all__ = ["ProblemCache", "as_problem_cache", "cluster_digest", "decode", "encode"]
