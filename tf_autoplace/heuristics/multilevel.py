"""A multilevel k-way graph partitioner in the style of METIS (Karypis & Kumar, "A fast and
high quality multilevel scheme for partitioning irregular graphs", SIAM J. Sci. Comput. 1998),
used by the ``metis`` placer where ``pymetis`` is not installed: pymetis is a dependency of
tf_autoplace where it has wheels (Linux x86_64, macOS), and this partitioner serves Windows and
Linux aarch64, where it would have to be built from source.

Problem: split an undirected graph with vertex weights ``w`` and edge weights ``c`` into ``k``
parts so that every part weighs at most ``(1 + imbalance) * sum(w) / k`` and the total weight
of the edges between parts (the cut) is small.

Three phases, as in METIS:

1. **Coarsening by heavy-edge matching.** Vertices are visited in a seeded random order; an
   unmatched vertex is matched with the unmatched neighbour joined by the heaviest edge, unless
   the pair would weigh more than ``1.5 * sum(w) / coarsen_to`` (METIS's limit, which keeps
   coarse vertices small enough to balance). Matched pairs become one vertex; parallel edges
   are summed. Repeated until at most ``coarsen_to = max(20 k, 60)`` vertices remain or a
   level shrinks the graph by less than 5 %.
2. **Initial partition by greedy graph growing** on the coarsest graph: parts ``0..k-2`` are
   grown one after another from a random unassigned vertex, each time adding the unassigned
   vertex with the most edge weight into the growing part (a random one if none touches it),
   until the part holds ``sum(w) / k`` (a vertex is added while its midpoint stays below that
   target); the last part takes the rest. Several seeded tries; the best after refinement
   (balanced first, then smallest cut) is kept.
3. **Uncoarsening with refinement.** The partition is projected to each finer level and
   improved by (a) a balancing step: while the heaviest part is over the limit, the move out
   of it with the best cut gain into a part that stays under the limit (or, failing that,
   that stays lighter than the heaviest part) is made; and (b) greedy k-way boundary
   refinement with Fiduccia-Mattheyses gains: boundary vertices are visited in random order,
   and each moves to the adjacent part with the largest gain (edge weight to that part minus
   edge weight to its own) if the gain is positive and the target stays under the limit, or
   if the gain is zero and the move makes the two parts more even. Passes repeat until
   nothing moves (at most 10). Like METIS's own k-way refinement this is greedy: there are no
   negative-gain moves with rollback as in the original two-way FM.

Deterministic for a given seed. Pure numpy and Python; about a second for a few thousand
vertices.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tf_autoplace.errors import ConfigError


@dataclasses.dataclass(frozen=True, eq=False)
class CSRGraph:
    """An undirected graph in CSR form, both directions of every edge stored.

    Attributes:
      xadj: [n + 1] int64, the neighbours of v are ``adjncy[xadj[v]:xadj[v + 1]]``.
      adjncy: [2m] int64 neighbour ids (no self loops, no duplicates).
      eweight: [2m] float64 weight of each stored edge (the same in both directions).
      vweight: [n] float64 vertex weights (>= 0).
    """

    xadj: np.ndarray
    adjncy: np.ndarray
    eweight: np.ndarray
    vweight: np.ndarray

    @property
    def num_vertices(self) -> int:
        return len(self.vweight)

    def sources(self) -> np.ndarray:
        """[2m] int64: the vertex each stored edge starts from."""
        return np.repeat(np.arange(self.num_vertices), np.diff(self.xadj))


def csr_from_edges(num_vertices: int, src, dst, weight, vweight) -> CSRGraph:
    """Symmetrise directed weighted edges: ``u -> v`` and ``v -> u`` become one undirected
    edge whose weight is the sum of both; self loops are dropped."""
    src = np.asarray(src, np.int64)
    dst = np.asarray(dst, np.int64)
    weight = np.asarray(weight, np.float64)
    keep = src != dst
    return _build(num_vertices, np.concatenate([src[keep], dst[keep]]),
                  np.concatenate([dst[keep], src[keep]]),
                  np.concatenate([weight[keep], weight[keep]]), vweight)


def _build(num_vertices: int, u: np.ndarray, v: np.ndarray, w: np.ndarray,
           vweight) -> CSRGraph:
    """CSR from stored edges ``u -> v`` (both directions present, no self loops); parallel
    edges are merged by summing their weights."""
    keys, inverse = np.unique(u * num_vertices + v, return_inverse=True)
    summed = np.zeros(len(keys))
    np.add.at(summed, inverse.reshape(-1), w)
    a, b = np.divmod(keys, num_vertices)
    return CSRGraph(xadj=np.searchsorted(a, np.arange(num_vertices + 1)).astype(np.int64),
                    adjncy=b.astype(np.int64), eweight=summed,
                    vweight=np.asarray(vweight, np.float64))


def edge_cut(graph: CSRGraph, part: np.ndarray) -> float:
    """Total weight of the edges whose ends lie in different parts."""
    cross = part[graph.sources()] != part[graph.adjncy]
    return float(graph.eweight[cross].sum()) / 2


# ----------------------------------------------------------------------------- coarsening
def _heavy_edge_matching(graph: CSRGraph, rng: np.random.Generator,
                         max_vweight: float) -> tuple[np.ndarray, int]:
    """``(cmap [n], number of coarse vertices)``: coarse id of each vertex."""
    n = graph.num_vertices
    xadj, adjncy = graph.xadj.tolist(), graph.adjncy.tolist()
    eweight, vweight = graph.eweight.tolist(), graph.vweight.tolist()
    match = [-1] * n
    for v in rng.permutation(n).tolist():
        if match[v] >= 0:
            continue
        best, best_w = v, -1.0
        for j in range(xadj[v], xadj[v + 1]):
            u = adjncy[j]
            if match[u] < 0 and eweight[j] > best_w and \
                    vweight[u] + vweight[v] <= max_vweight:
                best, best_w = u, eweight[j]
        match[v] = best
        match[best] = v
    match = np.asarray(match)
    leader = np.minimum(np.arange(n), match)
    unique, cmap = np.unique(leader, return_inverse=True)
    return cmap.reshape(-1).astype(np.int64), len(unique)


def _contract(graph: CSRGraph, cmap: np.ndarray, num_coarse: int) -> CSRGraph:
    src = cmap[graph.sources()]
    dst = cmap[graph.adjncy]
    keep = src != dst
    return _build(num_coarse, src[keep], dst[keep], graph.eweight[keep],
                  np.bincount(cmap, weights=graph.vweight, minlength=num_coarse))


# ------------------------------------------------------------------------ initial partition
def _grow(graph: CSRGraph, k: int, rng: np.random.Generator) -> np.ndarray:
    """Greedy graph growing (module docstring, phase 2)."""
    n = graph.num_vertices
    target = graph.vweight.sum() / k
    part = np.full(n, k - 1, np.int64)
    free = np.ones(n, bool)
    for p in range(k - 1):
        conn = np.zeros(n)
        weight = 0.0
        while free.any():
            candidates = np.flatnonzero(free)
            touching = candidates[conn[candidates] > 0]
            if len(touching):
                v = int(touching[np.argmax(conn[touching])])
            else:
                v = int(rng.choice(candidates))
            if weight > 0 and weight + graph.vweight[v] / 2 > target:
                break
            part[v], free[v] = p, False
            weight += graph.vweight[v]
            lo, hi = graph.xadj[v], graph.xadj[v + 1]
            np.add.at(conn, graph.adjncy[lo:hi], graph.eweight[lo:hi])
    return part


# ----------------------------------------------------------------------------- refinement
def _connectivity(graph: CSRGraph, part: np.ndarray, k: int) -> np.ndarray:
    """[n, k]: edge weight from each vertex into each part."""
    conn = np.zeros((graph.num_vertices, k))
    np.add.at(conn, (graph.sources(), part[graph.adjncy]), graph.eweight)
    return conn


def _balance(graph: CSRGraph, part: np.ndarray, k: int, limit: float) -> None:
    """Move vertices out of the heaviest part while it is over ``limit`` (in place)."""
    vw = graph.vweight
    pw = np.bincount(part, weights=vw, minlength=k)
    for _ in range(graph.num_vertices):
        heavy = int(np.argmax(pw))
        if pw[heavy] <= limit:
            return
        members = np.flatnonzero(part == heavy)
        conn = _connectivity(graph, part, k)[members]
        gain = conn - conn[:, [heavy]]  # [m, k]
        after = pw[None, :] + vw[members, None]
        for ok in (after <= limit, after < pw[heavy]):
            ok = ok.copy()
            ok[:, heavy] = False
            if ok.any():
                break
        else:
            return  # nothing can make the heaviest part lighter
        masked = np.where(ok, gain, -np.inf)
        i, p = np.unravel_index(int(np.argmax(masked)), masked.shape)
        v = int(members[i])
        part[v] = p
        pw[heavy] -= vw[v]
        pw[p] += vw[v]


def _refine(graph: CSRGraph, part: np.ndarray, k: int, limit: float,
            rng: np.random.Generator, passes: int = 10) -> None:
    """Greedy k-way boundary refinement with FM gains (module docstring, phase 3b; in place)."""
    xadj, adjncy, eweight = graph.xadj.tolist(), graph.adjncy.tolist(), graph.eweight.tolist()
    vw = graph.vweight.tolist()
    pw = np.bincount(part, weights=graph.vweight, minlength=k).tolist()
    where = part.tolist()
    for _ in range(passes):
        src = graph.sources()
        boundary = np.unique(src[part[src] != part[graph.adjncy]])
        moved = 0
        for v in rng.permutation(boundary).tolist():
            a = where[v]
            conn: dict[int, float] = {}
            for j in range(xadj[v], xadj[v + 1]):
                p = where[adjncy[j]]
                conn[p] = conn.get(p, 0.0) + eweight[j]
            internal = conn.get(a, 0.0)
            best, best_gain = -1, 0.0
            for p, c in conn.items():
                if p == a or pw[p] + vw[v] > limit:
                    continue
                gain = c - internal
                evens = pw[p] + vw[v] < pw[a]
                if gain > best_gain or (gain == best_gain and evens and (
                        best < 0 or pw[p] < pw[best])):
                    best, best_gain = p, gain
            if best >= 0:
                where[v] = best
                part[v] = best
                pw[a] -= vw[v]
                pw[best] += vw[v]
                moved += 1
        if not moved:
            return


# ---------------------------------------------------------------------------------- driver
def partition(graph: CSRGraph, k: int, *, imbalance: float = 0.03, seed: int = 0,
              tries: int = 4) -> np.ndarray:
    """[n] int64 part of each vertex, in ``0..k-1`` (module docstring).

    Args:
      graph: the graph; vertex weights are what is balanced, edge weights what is cut.
      k: number of parts (>= 1).
      imbalance: a part may weigh up to ``(1 + imbalance) * total / k`` (METIS's ufactor /
        1000; 0.03 is METIS's k-way default).
      seed: seeds matching order, growing and refinement order.
      tries: initial partitions tried on the coarsest graph.
    """
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ConfigError(f"k must be an int >= 1, got {k!r}")
    if not imbalance >= 0:
        raise ConfigError(f"imbalance must be >= 0, got {imbalance!r}")
    n = graph.num_vertices
    if k == 1 or n == 0:
        return np.zeros(n, np.int64)
    if n <= k:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    total = float(graph.vweight.sum())
    limit = (1 + imbalance) * total / k
    coarsen_to = max(20 * k, 60)

    levels = [graph]
    maps = []
    while levels[-1].num_vertices > coarsen_to:
        current = levels[-1]
        cmap, num = _heavy_edge_matching(current, rng, 1.5 * total / coarsen_to)
        if num > 0.95 * current.num_vertices:
            break
        maps.append(cmap)
        levels.append(_contract(current, cmap, num))

    coarsest = levels[-1]
    best, best_key = None, None
    for _ in range(tries):
        part = _grow(coarsest, k, rng)
        _balance(coarsest, part, k, limit)
        _refine(coarsest, part, k, limit, rng)
        over = max(np.bincount(part, weights=coarsest.vweight, minlength=k).max() - limit, 0)
        key = (over, edge_cut(coarsest, part))
        if best_key is None or key < best_key:
            best, best_key = part.copy(), key

    part = best
    for level in range(len(maps) - 1, -1, -1):
        part = part[maps[level]]
        finer = levels[level]
        _balance(finer, part, k, limit)
        _refine(finer, part, k, limit, rng)
    return part
