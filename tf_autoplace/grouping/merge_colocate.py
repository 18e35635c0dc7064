"""Merge-and-Colocate: shrink an op graph to at most N groups of ops that share a device.

Reference: Addanki et al., "Placeto: Learning Generalizable Device Placement Algorithms for
Distributed Machine Learning" (NeurIPS 2019), appendix A.6:

    "Given any input graph G, the Merge-and-Colocate heuristic first merges the node with the
    lowest cost into its neighbor. If the node has no neighbors, then its predecessor is used
    instead. This step is repeated until the graph size reaches a desired value N or
    alternatively until there are no more nodes with cost below a certain threshold C. The
    merged nodes are then colocated together on to the same device. [...] we use the size of
    the output tensor of an operation as the cost metric."

How we read it (the paper leaves the details open):

* **Atomic nodes.** The nodes we start from are TensorFlow's colocation groups
  (:attr:`OpGraph.colocation`), not single ops: ops that TF requires on one device are merged
  before anything else happens and are never split. Atomic nodes are numbered by the lowest op
  index they contain.
* **Cost.** A node's cost is the total output bytes of its member ops
  (:attr:`OpGraph.output_bytes` summed), i.e. the size of everything it produces, including
  tensors consumed inside the node. Merging only adds costs.
* **Neighbours.** Two nodes are neighbours when a data or control edge joins an op of one to
  an op of the other. A directed pair ``a -> b`` is weighted by the sum, over the data edges
  from ops of ``a`` to ops of ``b``, of the tensor's bytes (a tensor read by two ops of ``b``
  counts twice here; control edges count 0). :func:`group_graph` counts transfers instead.
* **Which neighbour.** The popped node ``x`` is merged into, in order of preference:

  1. its predecessor (a node with an edge *into* ``x``) sending it the most bytes, i.e. the
     producer of its largest input. Merging a consumer into its producer keeps the contracted
     graph closer to acyclic and removes the largest transfer ``x`` receives;
  2. when no predecessor is compatible, its successor receiving the most bytes from it.

  Ties are broken by the lower node index (the lowest op index in the node). We read the
  paper's "if the node has no neighbors, then its predecessor is used instead" as this
  preference for predecessors, not as a fallback to some non-adjacent node: a node with no
  compatible neighbour at all (an isolated op, or one whose neighbours have no kernel kind in
  common with it) is left as is and skipped from then on (until something else is merged into
  it). An isolated node is therefore never merged, and the group count can stay above N.
* **Kernel constraints.** Two nodes are merged only when the AND of their kernel rows
  (:attr:`OpGraph.kernels`) is non-empty, so every group can be placed on some device kind;
  otherwise the next candidate neighbour in the order above is tried. Merging only removes
  kinds, so a node that has no compatible neighbour never gains one by others merging.
* **Order and stop.** The lowest-cost node is taken first, ties to the lower node index.
  Merging stops when at most ``max_groups`` (N) nodes remain, or, when
  ``cost_threshold_bytes`` (C) is set, when every node that could still be merged costs at
  least C (nodes at or above C are never merged away, though a cheaper node may be merged
  *into* them).

The contracted group graph may have cycles (``a -> b -> c`` with ``a`` and ``c`` merged): this
is fine, because placement is evaluated at op level and only ever uses a group as "these ops
share a device". :func:`group_graph` reports such edges as they are.

Implementation (:func:`_merge_loop`, compiled with numba: the default placer's local search
runs it on the whole graph whenever it re-aligns its blocks to a placement): a binary heap of
``(cost, index)`` with lazy invalidation, per node lists of the atomic edges into and out of
it that a merge links together, and a union-find over atomic nodes that says which node an
edge's other end is in now.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tf_autoplace.core.jit import cached_njit
from tf_autoplace.core.settings import is_int
from tf_autoplace.errors import ConfigError, InfeasiblePlacementError
from tf_autoplace.graph.opgraph import OpGraph


def _frozen_array(array, dtype, ndim: int) -> np.ndarray:
    out = np.ascontiguousarray(np.asarray(array, dtype=dtype))
    if out.ndim != ndim:
        raise ConfigError(f"expected an array with {ndim} dimension(s), got shape {out.shape}")
    out.setflags(write=False)
    return out


@dataclasses.dataclass(frozen=True)
class GroupingConfig:
    """Options of :func:`merge_and_colocate`.

    Attributes:
      max_groups: N, stop merging once at most this many groups remain (>= 1).
      cost_threshold_bytes: C, also stop once no node that could still be merged has a cost
        (total output bytes) below C (>= 0). ``None``: stop on N alone.
    """

    max_groups: int = 2000
    cost_threshold_bytes: int | None = None

    def __post_init__(self):
        if not is_int(self.max_groups) or self.max_groups < 1:
            raise ConfigError(
                f"GroupingConfig.max_groups must be an int >= 1, got {self.max_groups!r}")
        c = self.cost_threshold_bytes
        if c is not None and (not is_int(c) or c < 0):
            raise ConfigError(
                f"GroupingConfig.cost_threshold_bytes must be None or an int >= 0, got {c!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class Grouping:
    """A partition of a graph's ops into groups that are placed together.

    With n ops, G groups and k kernel kinds:

    ===========  ==========  ==============================================================
    field        shape       meaning
    ===========  ==========  ==============================================================
    labels       [n] int32   group of each op; ids are dense ``0..G-1``, numbered by the
                             lowest op index they contain (group 0 holds op 0)
    num_groups   int         G
    kernels      [G, k] bool kinds every op of the group has a kernel for (AND over members)
    ===========  ==========  ==============================================================

    Build one with :func:`merge_and_colocate` or :meth:`from_labels`.
    """

    labels: np.ndarray
    num_groups: int
    kernels: np.ndarray

    def __post_init__(self):
        labels = _frozen_array(self.labels, np.int32, 1)
        kernels = _frozen_array(self.kernels, bool, 2)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "kernels", kernels)
        g = self.num_groups
        if not is_int(g) or g < 1:
            raise ConfigError(f"Grouping.num_groups must be an int >= 1, got {g!r}")
        object.__setattr__(self, "num_groups", int(g))
        if len(labels) == 0:
            raise ConfigError("Grouping.labels is empty")
        counts = np.bincount(labels, minlength=g) if labels.min() >= 0 else None
        if counts is None or len(counts) != g or not counts.all():
            raise ConfigError(
                f"Grouping.labels must use every id in 0..{g - 1} and nothing else; got ids in "
                f"[{labels.min()}, {labels.max()}] with {len(np.unique(labels))} distinct")
        if kernels.shape[0] != g:
            raise ConfigError(f"Grouping.kernels has {kernels.shape[0]} rows for {g} groups")
        order = np.argsort(labels, kind="stable").astype(np.int32)
        order.setflags(write=False)
        starts = np.concatenate([[0], np.cumsum(counts)])
        object.__setattr__(self, "_order", order)
        object.__setattr__(self, "_starts", starts)

    @classmethod
    def from_labels(cls, graph: OpGraph, labels) -> "Grouping":
        """A grouping of ``graph`` with the given per-op labels, renumbered densely by each
        group's lowest op index; ``kernels`` is computed as the AND over members. Does not
        check colocation or that every group has a kernel kind."""
        labels = np.asarray(labels)
        if labels.shape != (graph.num_ops,):
            raise ConfigError(
                f"labels has shape {labels.shape}, expected ({graph.num_ops},) for this graph")
        dense, num = _dense_by_first(labels)
        return cls(labels=dense, num_groups=num, kernels=_and_rows(graph.kernels, dense, num))

    @property
    def num_ops(self) -> int:
        return len(self.labels)

    def sizes(self) -> np.ndarray:
        """[G] int64: number of ops in each group."""
        return np.diff(self._starts)

    def members(self, g: int) -> np.ndarray:
        """[m] int32: the ops of group ``g``, ascending."""
        if not is_int(g) or not 0 <= g < self.num_groups:
            raise ConfigError(f"group id must be an int in [0, {self.num_groups}), got {g!r}")
        return self._order[self._starts[g]:self._starts[g + 1]]

    def expand(self, group_placement) -> np.ndarray:
        """[G] device per group -> [n] device per op (a fresh array of the same dtype)."""
        gp = np.asarray(group_placement)
        if gp.shape != (self.num_groups,):
            raise ConfigError(
                f"group_placement has shape {gp.shape}, expected ({self.num_groups},)")
        return gp[self.labels]


@dataclasses.dataclass(frozen=True, eq=False)
class GroupedGraph:
    """The contracted view of an :class:`OpGraph` under a :class:`Grouping`, for placers.

    With G groups, E group-level edges and k kernel kinds:

    ================  ==========  ==========================================================
    field             shape       meaning
    ================  ==========  ==========================================================
    grouping          -           the grouping this view contracts by
    num_ops           [G] int32   ops in each group
    output_bytes      [G] int64   total output bytes of the group's ops (its cost)
    persistent_bytes  [G] int64   total persistent bytes of the group's ops (variables)
    kernels           [G, k] bool kinds every op of the group has a kernel for
    edge_src          [E] int32   group-level edge ``src -> dst`` (src != dst), sorted by
    edge_dst          [E] int32   (src, dst), one per ordered pair joined by >= 1 data or
                                  control edge between their ops
    edge_bytes        [E] int64   bytes sent along it: each tensor counted once per
                                  consuming group (what a transfer would carry), 0 for a
                                  control-only edge
    ================  ==========  ==========================================================

    The group graph may contain cycles even though the op graph does not (see the module doc).
    """

    grouping: Grouping
    num_ops: np.ndarray
    output_bytes: np.ndarray
    persistent_bytes: np.ndarray
    kernels: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_bytes: np.ndarray

    def __post_init__(self):
        for name, dtype, ndim in (("num_ops", np.int32, 1), ("output_bytes", np.int64, 1),
                                  ("persistent_bytes", np.int64, 1), ("kernels", bool, 2),
                                  ("edge_src", np.int32, 1), ("edge_dst", np.int32, 1),
                                  ("edge_bytes", np.int64, 1)):
            object.__setattr__(self, name, _frozen_array(getattr(self, name), dtype, ndim))

    @property
    def num_groups(self) -> int:
        return self.grouping.num_groups


# ------------------------------------------------------------------------------- helpers
def _dense_by_first(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Renumber arbitrary ids densely, in order of first occurrence."""
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse.reshape(-1)].astype(np.int32), len(first)


def _and_rows(kernels: np.ndarray, labels: np.ndarray, num: int) -> np.ndarray:
    """[num, k] bool: AND of ``kernels`` rows over each label."""
    out = np.empty((num, kernels.shape[1]), bool)
    for j in range(kernels.shape[1]):
        out[:, j] = np.bincount(labels, weights=~kernels[:, j], minlength=num) == 0
    return out


def _sum_by(labels: np.ndarray, values: np.ndarray, num: int) -> np.ndarray:
    # int64 sums without a float round trip (bincount's weights are float64).
    out = np.zeros(num, np.int64)
    np.add.at(out, labels, values.astype(np.int64))
    return out


def _op_edges(graph: OpGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Data and control edges as ``src, dst, bytes`` (int64 arrays; control edges 0 bytes)."""
    src = np.concatenate([graph.edge_src, graph.ctrl_src]).astype(np.int64)
    dst = np.concatenate([graph.edge_dst, graph.ctrl_dst]).astype(np.int64)
    nbytes = np.concatenate([graph.tensor_bytes[graph.edge_tensor],
                             np.zeros(len(graph.ctrl_src), np.int64)]).astype(np.int64)
    return src, dst, nbytes


# ------------------------------------------------------------------------------- algorithm
def merge_and_colocate(graph: OpGraph, config: GroupingConfig = GroupingConfig()) -> Grouping:
    """Group ``graph``'s ops with Merge-and-Colocate (see the module doc for the exact rules).

    Returns a :class:`Grouping` in which no TF colocation group is split, every group has at
    least one kernel kind common to all its ops, and the number of groups is at most
    ``config.max_groups`` unless isolated nodes, kernel constraints, colocation groups or the
    cost threshold prevent it. Deterministic: the same graph and config give the same labels.

    Raises:
      InfeasiblePlacementError: a colocation group's ops have no kernel kind in common.
    """
    if not isinstance(config, GroupingConfig):
        raise ConfigError(f"config must be a GroupingConfig, got {type(config).__name__}")
    return _merge_levels(graph, config, [config.max_groups])[0]


def merge_and_colocate_levels(graph: OpGraph, levels, *, spare: bool = False) -> list[Grouping]:
    """Merge-and-Colocate at several group counts in one merge pass.

    Item k equals ``merge_and_colocate(graph, GroupingConfig(max_groups=levels[k]))``: the
    merges do not depend on the target count (only where they stop does), so the grouping at
    each level is a snapshot of one run, and coarser levels nest finer ones.

    With ``spare=True`` a level counts groups beyond those that never merge: the run goes on
    until no merge is possible (``F`` groups left, e.g. ops whose every neighbour has no
    kernel kind in common with them) and level ``L`` is the snapshot with ``F + L`` groups. On
    a graph partitioned by a placement (one pseudo kernel kind per device), ``L`` then counts
    the blocks that really hold the work, whatever the number of isolated leftovers.
    """
    levels = [GroupingConfig(max_groups=x).max_groups for x in levels]  # validated
    if not levels:
        return []
    if not spare:
        return _merge_levels(graph, GroupingConfig(max_groups=min(levels)), levels)
    # Every merge possible; F = atoms - merges groups never merge, and level L is the
    # snapshot with F + L groups.
    atom, num_atoms = _dense_by_first(graph.colocation)
    gone, keep = _merges(graph, atom, num_atoms, GroupingConfig(max_groups=1))
    return [_snapshot(graph, atom, num_atoms, gone, keep, max(0, len(gone) - level))
            for level in levels]


def _as_grouping(graph: OpGraph, atom: np.ndarray, parent: np.ndarray) -> Grouping:
    """The Grouping of a union-find ``parent`` array over atoms."""
    while True:  # parents always point at a node merged later: no cycles
        grand = parent[parent]
        if np.array_equal(grand, parent):
            break
        parent = grand
    labels, num = _dense_by_first(parent[atom])
    return Grouping(labels=labels, num_groups=num, kernels=_and_rows(graph.kernels, labels, num))


def _merge_levels(graph: OpGraph, config: GroupingConfig, levels) -> list[Grouping]:
    """The groupings at ``levels`` of one merge run down to ``config.max_groups``."""
    atom, num_atoms = _dense_by_first(graph.colocation)
    gone, keep = _merges(graph, atom, num_atoms, config)
    # The grouping at level L is the one the run had when at most L nodes were left (after
    # ``num_atoms - L`` merges), or its end if it stopped before.
    return [_snapshot(graph, atom, num_atoms, gone, keep, max(0, num_atoms - level))
            for level in levels]


def _snapshot(graph: OpGraph, atom: np.ndarray, num_atoms: int, gone: np.ndarray,
              keep: np.ndarray, count: int) -> Grouping:
    """The Grouping after the first ``count`` merges (all of them if there are fewer)."""
    parent = np.arange(num_atoms)
    parent[gone[:count]] = keep[:count]  # a node is merged away once: no index repeats
    return _as_grouping(graph, atom, parent)


def _merges(graph: OpGraph, atom: np.ndarray, num_atoms: int, config: GroupingConfig
            ) -> tuple[np.ndarray, np.ndarray]:
    """The merges of the run down to ``config.max_groups``, in order, as (gone, kept) atom
    arrays (the module doc's rules; the loop is :func:`_merge_loop`).

    Raises:
      InfeasiblePlacementError: a colocation group's ops have no kernel kind in common.
    """
    atom_kernels = _and_rows(graph.kernels, atom, num_atoms)
    empty = np.flatnonzero(~atom_kernels.any(axis=1))
    if len(empty):
        ops = np.flatnonzero(atom == empty[0])
        names = [graph.names[i] for i in ops[:5]]
        raise InfeasiblePlacementError(
            f"colocated ops {names}{' ...' if len(ops) > 5 else ''} have no device kind in "
            f"common among {list(graph.kernel_kinds)}; they cannot share a device")
    if num_atoms <= config.max_groups:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    src, dst, nbytes = _op_edges(graph)
    a_src, a_dst = atom[src].astype(np.int64), atom[dst].astype(np.int64)
    between = a_src != a_dst
    pair = a_src[between] * num_atoms + a_dst[between]
    uniq, inverse = np.unique(pair, return_inverse=True)
    weight = np.zeros(len(uniq), np.int64)
    np.add.at(weight, inverse.reshape(-1), nbytes[between])
    # A threshold beyond int64 is none: every sum of bytes fits in one. (A max_groups that
    # large returned above: there are fewer atoms.)
    big = np.iinfo(np.int64).max
    threshold = config.cost_threshold_bytes
    cost = _sum_by(atom, graph.output_bytes, num_atoms)
    gone, keep, count = _merge_loop(
        num_atoms, cost, np.argsort(cost, kind="stable"), _kernel_words(atom_kernels),
        uniq // num_atoms, uniq % num_atoms, weight, config.max_groups,
        -1 if threshold is None or threshold >= big else threshold)
    return gone[:count], keep[:count]


def _kernel_words(kernels: np.ndarray) -> np.ndarray:
    """[rows, W] uint64: each row of a bool matrix as bits. Only ANDs and tests for a
    non-zero word read them, so the order of the bits does not matter."""
    packed = np.packbits(kernels, axis=1)
    pad = (-packed.shape[1]) % 8
    packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed).view(np.uint64)


@cached_njit
def _merge_loop(num_atoms, cost, order, mask, pair_src, pair_dst, pair_weight, max_groups,
                threshold):
    """The merge loop of the module doc on atomic nodes ``0..num_atoms-1`` with ``cost``
    ([A] int64), kernel bits ``mask`` ([A, W] uint64, ANDed on merge) and directed edges
    ``pair_src -> pair_dst`` of ``pair_weight`` bytes (one per ordered pair); stops at
    ``max_groups`` nodes, or when the cheapest node that could merge costs at least
    ``threshold`` (-1: no threshold). Returns (gone, kept, count): the first ``count``
    entries are the merges made, in order (``gone`` merged into ``kept``).

    How, in arrays only (numba compiles typed dicts for many seconds, once per install):

    * a binary heap of (cost, key, node, stamp) ordered by (cost, key), with lazy
      invalidation (a node's stamp grows at every merge into it; an entry with an older
      stamp, or of a node merged away, is skipped). ``key``, the lowest atomic index in the
      node, is unique among live nodes, so the entries that are not skipped come in one
      order, whatever order the heap gives entries that tie;
    * per node and side (its producers, its consumers) a linked list of (atom, bytes)
      entries, one per atomic edge to start; a merge links the gone node's lists onto the
      kept one's, and a union-find over atoms says which node an entry's atom is in now;
    * a popped node sums its entries by node (skipping itself) into the weights the module
      doc's rules read, and rewrites its list as those sums, so that each list stays as
      long as the node's neighbours (plus what merged in since it was last popped).

    Which of two merged nodes keeps its number changes no group (groups are sets of
    atoms, and the keys break ties), so the merges' groupings are the rules' whatever it is."""
    words = mask.shape[1]
    cost, mask = cost.copy(), mask.copy()
    key = np.arange(num_atoms)
    version = np.zeros(num_atoms, np.int64)
    alive = np.ones(num_atoms, np.bool_)
    uf = np.arange(num_atoms)  # union-find over atoms: the node each atom is in
    # Entry lists: side 0 a node's producers, side 1 its consumers.
    num_pairs = pair_src.shape[0]
    head = np.full((2, num_atoms), -1, np.int64)
    tail = np.full((2, num_atoms), -1, np.int64)
    entry_atom = np.empty(2 * num_pairs, np.int64)
    entry_bytes = np.empty(2 * num_pairs, np.int64)
    entry_next = np.full(2 * num_pairs, -1, np.int64)
    for e in range(num_pairs):
        for side in range(2):
            owner = pair_dst[e] if side == 0 else pair_src[e]
            slot = 2 * e + side
            entry_atom[slot] = pair_src[e] if side == 0 else pair_dst[e]
            entry_bytes[slot] = pair_weight[e]
            if head[side, owner] == -1:
                head[side, owner] = slot
            else:
                entry_next[tail[side, owner]] = slot
            tail[side, owner] = slot
    # Scratch for summing one node's entries by neighbour.
    seen_at = np.full(num_atoms, -1, np.int64)
    summed = np.zeros(num_atoms, np.int64)
    touched = np.empty(num_atoms, np.int64)
    tick = 0
    # The heap: entry k is (h_cost[k], h_key[k], h_node[k], h_stamp[k]), ordered as tuples.
    # One entry per node to start, one more per merge.
    size = 2 * num_atoms
    h_cost = np.empty(size, np.int64)
    h_key = np.empty(size, np.int64)
    h_node = np.empty(size, np.int64)
    h_stamp = np.zeros(size, np.int64)
    h_cost[:num_atoms] = cost[order]  # sorted by (cost, index): a heap
    h_key[:num_atoms] = order
    h_node[:num_atoms] = order
    heap_n = num_atoms
    gone_out = np.empty(num_atoms, np.int64)
    keep_out = np.empty(num_atoms, np.int64)
    count = 0
    live = num_atoms
    while live > max_groups and heap_n > 0:
        # pop the smallest entry: the last one takes the root's place and sifts down
        c, x, stamp = h_cost[0], h_node[0], h_stamp[0]
        heap_n -= 1
        if heap_n > 0:
            tc, tk, tn, ts = h_cost[heap_n], h_key[heap_n], h_node[heap_n], h_stamp[heap_n]
            at = 0
            while True:
                child = 2 * at + 1
                if child >= heap_n:
                    break
                right = child + 1
                if right < heap_n and (h_cost[right] < h_cost[child] or (
                        h_cost[right] == h_cost[child] and h_key[right] < h_key[child])):
                    child = right
                if tc < h_cost[child] or (tc == h_cost[child] and tk < h_key[child]):
                    break
                h_cost[at], h_key[at] = h_cost[child], h_key[child]
                h_node[at], h_stamp[at] = h_node[child], h_stamp[child]
                at = child
            h_cost[at], h_key[at], h_node[at], h_stamp[at] = tc, tk, tn, ts
        if not alive[x] or version[x] != stamp:
            continue  # stale entry
        if threshold >= 0 and c >= threshold:
            break  # every node still in the heap costs at least C
        # The compatible neighbour with the most bytes, ties to the lowest key: producers
        # first, then consumers; none: left as is until something merges into it.
        target = -1
        for side in range(2):
            # Sum x's entries of this side by the node their atom is in now.
            tick += 1
            num = 0
            slot = head[side, x]
            while slot != -1:
                r = entry_atom[slot]
                while uf[r] != r:  # find, halving the path
                    uf[r] = uf[uf[r]]
                    r = uf[r]
                if r != x:
                    if seen_at[r] != tick:
                        seen_at[r] = tick
                        summed[r] = 0
                        touched[num] = r
                        num += 1
                    summed[r] += entry_bytes[slot]
                slot = entry_next[slot]
            # ... and rewrite the list as those sums, in its first ``num`` entries.
            slot, last = head[side, x], -1
            for t in range(num):
                entry_atom[slot] = touched[t]
                entry_bytes[slot] = summed[touched[t]]
                last, slot = slot, entry_next[slot]
            if num == 0:
                head[side, x] = tail[side, x] = -1
            else:
                entry_next[last] = -1
                tail[side, x] = last
            best_w, best_k = -1, 0
            for t in range(num):
                nb = touched[t]
                w = summed[nb]
                ok = False
                for j in range(words):
                    if mask[nb, j] & mask[x, j]:
                        ok = True
                        break
                if ok and (w > best_w or (w == best_w and key[nb] < best_k)):
                    target, best_w, best_k = nb, w, key[nb]
            if target >= 0:
                break
        if target < 0:
            continue
        kept, gone = target, x
        for side in range(2):  # gone's entries join kept's
            if head[side, gone] == -1:
                continue
            if head[side, kept] == -1:
                head[side, kept] = head[side, gone]
            else:
                entry_next[tail[side, kept]] = head[side, gone]
            tail[side, kept] = tail[side, gone]
            head[side, gone] = tail[side, gone] = -1
        uf[gone] = kept
        alive[gone] = False
        gone_out[count] = gone
        keep_out[count] = kept
        count += 1
        cost[kept] += cost[gone]
        for j in range(words):
            mask[kept, j] &= mask[gone, j]
        key[kept] = min(key[kept], key[gone])
        version[kept] += 1
        live -= 1
        # push (cost, key, node, stamp) of kept: sift up
        tc, tk, tn, ts = cost[kept], key[kept], kept, version[kept]
        at = heap_n
        heap_n += 1
        while at > 0:
            up = (at - 1) >> 1
            if h_cost[up] < tc or (h_cost[up] == tc and h_key[up] < tk):
                break
            h_cost[at], h_key[at] = h_cost[up], h_key[up]
            h_node[at], h_stamp[at] = h_node[up], h_stamp[up]
            at = up
        h_cost[at], h_key[at], h_node[at], h_stamp[at] = tc, tk, tn, ts
    return gone_out, keep_out, count


# ------------------------------------------------------------------------------- view
def group_graph(graph: OpGraph, grouping: Grouping) -> GroupedGraph:
    """The contracted view of ``graph`` under ``grouping`` (see :class:`GroupedGraph`)."""
    if grouping.num_ops != graph.num_ops:
        raise ConfigError(
            f"grouping covers {grouping.num_ops} ops but the graph has {graph.num_ops}")
    labels = grouping.labels.astype(np.int64)
    g = grouping.num_groups
    # Data edges: one transfer per (tensor, consuming group), dropped inside a group.
    t_src = labels[graph.tensor_op[graph.edge_tensor]]
    t_dst = labels[graph.edge_dst]
    cross = t_src != t_dst
    tensor_pairs = np.unique(graph.edge_tensor[cross].astype(np.int64) * g + t_dst[cross])
    tensors, consumers = np.divmod(tensor_pairs, g)
    d_src = labels[graph.tensor_op[tensors]]
    d_bytes = graph.tensor_bytes[tensors]
    # Control edges add 0-byte edges.
    c_src, c_dst = labels[graph.ctrl_src], labels[graph.ctrl_dst]
    c_keep = c_src != c_dst
    src = np.concatenate([d_src, c_src[c_keep]])
    dst = np.concatenate([consumers, c_dst[c_keep]])
    nbytes = np.concatenate([d_bytes, np.zeros(int(c_keep.sum()), np.int64)])
    pairs, inverse = np.unique(src * g + dst, return_inverse=True)
    summed = np.zeros(len(pairs), np.int64)
    np.add.at(summed, inverse.reshape(-1), nbytes)
    e_src, e_dst = np.divmod(pairs, g)
    return GroupedGraph(
        grouping=grouping,
        num_ops=grouping.sizes(),
        output_bytes=_sum_by(labels, graph.output_bytes, g),
        persistent_bytes=_sum_by(labels, graph.persistent_bytes, g),
        kernels=grouping.kernels,
        edge_src=e_src, edge_dst=e_dst, edge_bytes=summed)
