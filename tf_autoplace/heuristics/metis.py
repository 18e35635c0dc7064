"""METIS: a k-way min-cut partition of the group graph over the GPUs, balanced by compute.

The graph-partitioning baseline of the placement papers: HDP's "MinCut" (Scotch restricted to
the GPUs; Mirhoseini et al. 2018), Post's "Metis" ("partitions the network into 2 parts (2-GPU
case), 4 parts (4-GPU case) or 8 parts (8-GPU case), each assigned to one device, according to
a cost model of operations"; Gao et al. 2018) and GDP's "TensorFlow METIS" (Zhou et al. 2019).

Setting:

* Vertices: the problem's groups that some compute device (GPU, see
  :func:`~tf_autoplace.heuristics._common.compute_devices`) can run; vertex weight = the group's
  compute time there (mean over the GPUs). Groups no GPU can run go to the first device that
  can (the CPU host) and are left out of the partition.
* Edges: the group graph (:func:`~tf_autoplace.grouping.group_graph`) made undirected; edge
  weight = bytes sent between the two groups in both directions (control-only edges weigh
  nothing in our partitioner and 1 in pymetis, which wants positive weights).
* Parts: ``k`` = number of GPUs, part ``p`` goes to the p-th GPU. A part may weigh
  ``1 + imbalance`` times its share (3 %, METIS's default ufactor of 30).
* Memory is not a constraint, as in the papers' baseline: ``Placer.place`` rejects a partition
  that does not fit, and the benchmark reports it as OOM.

Backends: METIS 5 itself through ``pymetis``, a dependency wherever pymetis publishes wheels
(Linux x86_64 and macOS, every supported Python), or our own multilevel partitioner
(:mod:`tf_autoplace.heuristics.multilevel`) where it does not: Windows and Linux aarch64, where
TensorFlow has wheels but pymetis only a source distribution that needs a C compiler and
meson to build (``pip install 'tf_autoplace[metis]'`` builds it there). The benchmark notes
compare the two backends' step times on the zoo. ``backend="auto"`` picks pymetis when it
is importable; force one with ``"pymetis"`` or ``"multilevel"``. For pymetis the weights are
scaled to integers: vertex weights to about 10^7 in total, edge weights to at most 10^5 (at
least 1). Both are seeded from the placer's seed.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import tempfile

import numpy as np

from tf_autoplace.core.fds import redirected
from tf_autoplace.core.problem import PlacementProblem, Placer
from tf_autoplace.errors import ConfigError
from tf_autoplace.grouping import group_graph
from tf_autoplace.heuristics._common import (
    compute_devices,
    fallback_device,
    fix_kernels,
    group_compute_time,
)
from tf_autoplace.heuristics.multilevel import CSRGraph, csr_from_edges, partition

BACKENDS = ("auto", "pymetis", "multilevel")


def pymetis_available() -> bool:
    try:
        import pymetis  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        return False
    return True


def _pymetis_partition(graph: CSRGraph, k: int, imbalance: float, seed: int) -> np.ndarray:
    import pymetis  # pylint: disable=import-outside-toplevel

    n = graph.num_vertices
    if k == 1 or n == 0:
        return np.zeros(n, np.int64)
    if n <= k:
        return np.arange(n, dtype=np.int64)
    total = graph.vweight.sum()
    vweights = np.maximum(1, np.round(graph.vweight / total * 1e7)) if total > 0 \
        else np.ones(n)
    top = graph.eweight.max() if len(graph.eweight) else 0.0
    eweights = (1 + np.round(graph.eweight / top * 1e5)) if top > 0 \
        else np.ones(len(graph.eweight))
    options = pymetis.Options(seed=int(seed), ufactor=int(round(imbalance * 1000)))
    adjacency = pymetis.CSRAdjacency(graph.xadj.astype(np.int64).tolist(),
                                     graph.adjncy.astype(np.int64).tolist())
    with _c_stdout_logged():
        _, parts = pymetis.part_graph(  # (xadj=/adjncy= warn DeprecationWarning since 2025.2)
            int(k), adjacency, vweights=vweights.astype(np.int64).tolist(),
            eweights=eweights.astype(np.int64).tolist(), options=options)
    return np.asarray(parts, np.int64)


@contextlib.contextmanager
def _c_stdout_logged():
    """METIS prints its warnings ("***Cannot bisect a graph with 0 vertices!", on a graph
    where one group outweighs a part) with C's printf, onto the process's standard output: a
    user's, where a report or a program's own output goes. While the block runs, file
    descriptor 1 goes to a temporary file; afterwards METIS's lines (they start with ``***``)
    are logged at debug level and anything else written there meanwhile (another thread's
    output) is written on. Threads that partition at once share one redirection
    (:func:`tf_autoplace.core.fds.redirected`); the last to finish passes the output on. Where
    descriptor 1 cannot be redirected, the block runs as is."""
    with contextlib.ExitStack() as stack:
        libc = None
        try:
            sys.stdout.flush()
            libc = ctypes.CDLL(None)  # (its fflush empties C's stdout buffer; POSIX only)
            stack.enter_context(redirected(1, tempfile.TemporaryFile, _pass_on))
        except (AttributeError, OSError, TypeError, ValueError):
            pass  # descriptor 1 cannot be redirected: the block runs as is
        try:
            yield
        finally:
            if libc is not None:
                libc.fflush(None)  # C's buffered stdout, before the descriptor may go back


def _pass_on(captured, fd: int) -> None:
    """What was written to descriptor ``fd`` while METIS ran: its own lines (``***``) logged
    at debug level, the rest written on to ``fd``."""
    captured.seek(0)
    rest = []
    for line in captured.read().splitlines(keepends=True):  # bytes: another's may be binary
        if line.strip().startswith(b"***"):
            logging.getLogger(__name__).debug("METIS: %s", line.strip().decode("ascii",
                                                                               "replace"))
        else:
            rest.append(line)
    if rest:
        os.write(fd, b"".join(rest))


class MetisPlacer(Placer):
    """Min-cut k-way partition over the GPUs (see module docstring).

    Args:
      backend: ``"auto"`` (pymetis if importable, else ours), ``"pymetis"`` or
        ``"multilevel"``.
      imbalance: allowed overweight of a part relative to total / k (>= 0).
    """

    name = "metis"

    def __init__(self, backend: str = "auto", imbalance: float = 0.03):
        if backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if not imbalance >= 0:
            raise ConfigError(f"imbalance must be >= 0, got {imbalance!r}")
        if backend == "pymetis" and not pymetis_available():
            raise ConfigError("backend='pymetis' but pymetis is not installed (it has no wheel "
                              "for this platform: pip install 'tf_autoplace[metis]' builds it "
                              "with a C compiler)")
        self.backend = backend
        self.imbalance = imbalance

    def resolved_backend(self) -> str:
        if self.backend == "auto":
            return "pymetis" if pymetis_available() else "multilevel"
        return self.backend

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        devices = compute_devices(problem)
        num_groups = problem.grouping.num_groups
        on = problem.group_allowed[:, devices].any(axis=1)
        vertex = np.full(num_groups, -1, np.int64)
        vertex[on] = np.arange(int(on.sum()))
        gg = group_graph(problem.graph, problem.grouping)
        keep = on[gg.edge_src] & on[gg.edge_dst]
        csr = csr_from_edges(int(on.sum()), vertex[gg.edge_src[keep]], vertex[gg.edge_dst[keep]],
                             gg.edge_bytes[keep],
                             group_compute_time(problem, devices)[on])
        seed = int(rng.integers(2**31 - 1))
        if self.resolved_backend() == "pymetis":
            parts = _pymetis_partition(csr, len(devices), self.imbalance, seed)
        else:
            parts = partition(csr, len(devices), imbalance=self.imbalance, seed=seed)
            if self.backend == "auto":
                self.notes.append("metis: pymetis is not installed (it has no wheel for this "
                                  "platform), so the partition comes from tf_autoplace's own "
                                  "multilevel partitioner (pip install 'tf_autoplace[metis]' "
                                  "builds METIS itself with a C compiler)")
        group_device = np.empty(num_groups, np.int64)
        group_device[on] = devices[parts]
        for g in np.flatnonzero(~on).tolist():
            group_device[g] = fallback_device(problem, g)
        group_device = fix_kernels(problem, group_device)
        return problem.grouping.expand(group_device).astype(np.int32)
