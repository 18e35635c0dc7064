"""OpGraph: the one internal graph type every stage after ingestion reads.

It is plain numpy (no TensorFlow), so grouping, cost, simulation and placers can be tested on
hand-made graphs. Ingestion (:mod:`tf_autoplace.graph.ingest`) builds it from TensorFlow graphs.

Shapes, with n ops, t tensors (op outputs), e data edges and c control edges:

==================  =========  ================================================================
field               shape      meaning
==================  =========  ================================================================
names               [n]        op names, unique
op_types            [n]        TF op type (``MatMul``)
persistent_bytes    [n] int64  bytes the op holds for the whole step (a variable's buffer)
tensor_op           [t] int32  op producing tensor i
tensor_bytes        [t] int64  size of tensor i (0 for resource handles and unknown dtypes)
edge_tensor         [e] int32  tensor read by data edge j
edge_dst            [e] int32  op reading it
ctrl_src, ctrl_dst  [c] int32  control dependency ``src -> dst``
colocation          [n] int32  colocation group id: ops with the same id share a device
kernels             [n, k] bool  ``kernels[i, j]``: op i has a kernel for ``kernel_kinds[j]``
shape_known         [n] bool   False where some output dimension was unknown (see ingest)
tensor_alias        [t] int32  where tensor i's buffer comes from (below)
==================  =========  ================================================================

``tensor_alias`` says which tensors TensorFlow hands over without allocating
(:mod:`tf_autoplace.graph.buffers`): -1 (``ALIAS_NONE``) a buffer of its own, -2
(``ALIAS_VIEW``) a view of a variable's persistent buffer (no bytes of its own), ``j >= 0`` the
buffer of tensor ``j``, an input of its producer (shared, not copied). Ingestion and the cost
graph reader derive it from the op types and inputs (so the fingerprint, which hashes those,
covers it); a graph built by hand without it gives every tensor its own buffer. Only the
simulator's memory accounting reads it, and it treats ``j`` as the tensor's own buffer when the
producer does not read ``j`` (a rewired graph) or reads it as a copy from another device.

The graph is acyclic: v1 while-loop back edges (``NextIteration -> Merge``) are dropped at
ingestion and counted in ``n_back_edges``; they do not order ops within one step.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Sequence

import networkx as nx
import numpy as np

from tf_autoplace.errors import InvalidGraphError
from tf_autoplace.graph.buffers import ALIAS_NONE, ALIAS_VIEW

KERNEL_KINDS = ("CPU", "GPU")
# The most bytes a graph's tensors and variables may add up to (4 EiB), and its tensors' bytes
# counted once per op that reads them: peaks, transfer totals and the grouping's edge weights
# are int64 sums of them, which must not wrap around.
MAX_TOTAL_BYTES = 2**62


def _as(array, dtype, name: str, ndim: int = 1) -> np.ndarray:
    out = np.ascontiguousarray(np.asarray(array, dtype=dtype))
    if out.ndim != ndim:
        raise InvalidGraphError(f"{name} must have {ndim} dimension(s), got shape {out.shape}")
    out.setflags(write=False)
    return out


def _on_cycles(stuck: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Of the ops a topological sort could not reach (``stuck``, [n] bool: on a cycle or after
    one), those on a cycle or between two, in index order: the stuck ops from which no other
    stuck op is reached are dropped, over and over, until none is left to drop."""
    stuck = stuck.copy()
    while True:
        inside = stuck[src] & stuck[dst]
        has_child = np.zeros(len(stuck), bool)
        has_child[src[inside]] = True
        ends = stuck & ~has_child
        if not ends.any():
            return np.flatnonzero(stuck)
        stuck &= ~ends


@dataclasses.dataclass(frozen=True, eq=False)
class OpGraph:
    """An op-level dataflow graph with memory sizes and placement constraints (see module doc)."""

    names: tuple[str, ...]
    op_types: tuple[str, ...]
    persistent_bytes: np.ndarray
    tensor_op: np.ndarray
    tensor_bytes: np.ndarray
    edge_tensor: np.ndarray
    edge_dst: np.ndarray
    ctrl_src: np.ndarray
    ctrl_dst: np.ndarray
    colocation: np.ndarray
    kernels: np.ndarray
    shape_known: np.ndarray
    kernel_kinds: tuple[str, ...] = KERNEL_KINDS
    n_back_edges: int = 0
    tensor_alias: np.ndarray | None = None

    def __post_init__(self):
        n = len(self.names)
        if n == 0:
            raise InvalidGraphError("the graph has no ops")
        if len(set(self.names)) != n:
            raise InvalidGraphError("op names must be unique")
        if len(self.op_types) != n:
            raise InvalidGraphError(f"op_types has {len(self.op_types)} entries for {n} ops")
        fields = {
            "persistent_bytes": (np.int64, 1), "tensor_op": (np.int32, 1),
            "tensor_bytes": (np.int64, 1), "edge_tensor": (np.int32, 1),
            "edge_dst": (np.int32, 1), "ctrl_src": (np.int32, 1), "ctrl_dst": (np.int32, 1),
            "colocation": (np.int32, 1), "kernels": (bool, 2), "shape_known": (bool, 1),
        }
        for name, (dtype, ndim) in fields.items():
            object.__setattr__(self, name, _as(getattr(self, name), dtype, name, ndim))
        for name in ("persistent_bytes", "colocation", "shape_known"):
            if len(getattr(self, name)) != n:
                raise InvalidGraphError(f"{name} has {len(getattr(self, name))} entries for {n} ops")
        if self.kernels.shape != (n, len(self.kernel_kinds)):
            raise InvalidGraphError(
                f"kernels has shape {self.kernels.shape}, expected {(n, len(self.kernel_kinds))}")
        if len(self.tensor_op) != len(self.tensor_bytes):
            raise InvalidGraphError("tensor_op and tensor_bytes differ in length")
        num_tensors = len(self.tensor_op)
        alias = (np.full(num_tensors, ALIAS_NONE, np.int32) if self.tensor_alias is None
                 else self.tensor_alias)
        object.__setattr__(self, "tensor_alias", _as(alias, np.int32, "tensor_alias"))
        if len(self.tensor_alias) != num_tensors:
            raise InvalidGraphError(f"tensor_alias has {len(self.tensor_alias)} entries for "
                                    f"{num_tensors} tensors")
        bad = (self.tensor_alias < ALIAS_VIEW) | (self.tensor_alias >= num_tensors) | (
            self.tensor_alias == np.arange(num_tensors))
        if bad.any():
            t = int(np.flatnonzero(bad)[0])
            raise InvalidGraphError(
                f"tensor_alias[{t}] is {int(self.tensor_alias[t])}; expected {ALIAS_NONE}, "
                f"{ALIAS_VIEW} or another tensor's index in [0, {num_tensors})")
        if len(self.edge_tensor) != len(self.edge_dst) or len(self.ctrl_src) != len(self.ctrl_dst):
            raise InvalidGraphError("edge arrays differ in length")
        for name, arr, hi in (("tensor_op", self.tensor_op, n), ("edge_dst", self.edge_dst, n),
                              ("edge_tensor", self.edge_tensor, len(self.tensor_op)),
                              ("ctrl_src", self.ctrl_src, n), ("ctrl_dst", self.ctrl_dst, n)):
            if len(arr) and (arr.min() < 0 or arr.max() >= hi):
                raise InvalidGraphError(f"{name} holds an index outside [0, {hi})")
        if (self.tensor_bytes < 0).any() or (self.persistent_bytes < 0).any():
            raise InvalidGraphError("byte sizes must be >= 0")
        total = (self.tensor_bytes.sum(dtype=np.float64)
                 + self.persistent_bytes.sum(dtype=np.float64))
        if total > MAX_TOTAL_BYTES:  # sums of them (memory, transfers) are int64
            per_op = self.persistent_bytes.astype(np.float64)
            np.add.at(per_op, self.tensor_op, self.tensor_bytes.astype(np.float64))
            big = self.names[int(per_op.argmax())]
            raise InvalidGraphError(
                f"the graph's byte sizes add up to {total:,.0f} bytes (op {big!r} alone "
                f"{per_op.max():,.0f}), more than the {MAX_TOTAL_BYTES:,} this package can "
                "count: no device holds that; check the sizes given")
        # Each read of a tensor counts its bytes again in the grouping's edge weights.
        read = self.tensor_bytes[self.edge_tensor].astype(np.float64)
        if read.sum() > MAX_TOTAL_BYTES:
            per_tensor = np.bincount(self.edge_tensor, weights=read,
                                     minlength=len(self.tensor_op))
            big = self.names[int(self.tensor_op[int(per_tensor.argmax())])]
            raise InvalidGraphError(
                f"the graph's ops read {read.sum():,.0f} bytes of tensors in all (the outputs "
                f"of op {big!r} alone {per_tensor.max():,.0f}, once per reading op), more "
                f"than the {MAX_TOTAL_BYTES:,} this package can count; check the sizes "
                "given")
        if not self.kernels.any(axis=1).all():
            bad = self.names[int(np.flatnonzero(~self.kernels.any(axis=1))[0])]
            raise InvalidGraphError(f"op {bad!r} has a kernel for no device kind")
        order = self._topological_order()
        object.__setattr__(self, "_topo", order)

    def with_kernels(self, kernels: np.ndarray, kernel_kinds: tuple[str, ...]) -> "OpGraph":
        """This graph with other kernel constraints (``kernels`` [n, K] bool over
        ``kernel_kinds``), checked as the constructor checks them. Only they are checked and
        the topological order is kept: a search that partitions the graph by each placement it
        tries (one pseudo kind per device) would otherwise check the whole graph each time.

        Raises:
          InvalidGraphError: ``kernels`` is not [n, len(kernel_kinds)], or an op has none.
        """
        out = copy.copy(self)
        object.__setattr__(out, "kernel_kinds", tuple(kernel_kinds))
        object.__setattr__(out, "kernels", _as(kernels, bool, "kernels", 2))
        if out.kernels.shape != (self.num_ops, len(out.kernel_kinds)):
            raise InvalidGraphError(f"kernels has shape {out.kernels.shape}, expected "
                                    f"{(self.num_ops, len(out.kernel_kinds))}")
        if not out.kernels.any(axis=1).all():
            bad = self.names[int(np.flatnonzero(~out.kernels.any(axis=1))[0])]
            raise InvalidGraphError(f"op {bad!r} has a kernel for no device kind")
        return out

    # ----------------------------------------------------------------- sizes and derived views
    @property
    def num_ops(self) -> int:
        return len(self.names)

    @property
    def edge_src(self) -> np.ndarray:
        """[e] int32: op producing the tensor of each data edge."""
        return self.tensor_op[self.edge_tensor]

    @property
    def output_bytes(self) -> np.ndarray:
        """[n] int64: total bytes of each op's outputs (Merge-and-Colocate's cost metric)."""
        return np.bincount(self.tensor_op, weights=self.tensor_bytes,
                           minlength=self.num_ops).astype(np.int64)

    def index(self, name: str) -> int:
        try:
            return self._index[name]
        except AttributeError:
            object.__setattr__(self, "_index", {n: i for i, n in enumerate(self.names)})
            return self._index[name]

    def topological_order(self) -> np.ndarray:
        """[n] int32: ops in an order where every producer comes before its consumers."""
        return self._topo

    def _topological_order(self) -> np.ndarray:
        n = self.num_ops
        src = np.concatenate([self.edge_src, self.ctrl_src]).astype(np.int64)
        dst = np.concatenate([self.edge_dst, self.ctrl_dst]).astype(np.int64)
        indeg = np.bincount(dst, minlength=n)
        order_idx = np.argsort(src, kind="stable")
        starts = np.searchsorted(src[order_idx], np.arange(n + 1))
        children = dst[order_idx]
        stack = list(np.flatnonzero(indeg == 0)[::-1])
        indeg = indeg.copy()
        out = []
        while stack:
            i = stack.pop()
            out.append(i)
            for c in children[starts[i]:starts[i + 1]]:
                indeg[c] -= 1
                if indeg[c] == 0:
                    stack.append(c)
        if len(out) != n:
            stuck = [self.names[i] for i in _on_cycles(indeg > 0, src, dst)[:5]]
            raise InvalidGraphError(
                f"the graph has a cycle that is not a v1 while loop; ops on it include {stuck}")
        return np.asarray(out, dtype=np.int32)

    def to_networkx(self) -> nx.DiGraph:
        """A networkx view: node i carries ``name``/``type``; edges carry ``bytes`` (data edges
        summed per op pair, control edges 0)."""
        g = nx.DiGraph()
        for i, (name, typ) in enumerate(zip(self.names, self.op_types)):
            g.add_node(i, name=name, type=typ)
        for s, d in zip(self.ctrl_src.tolist(), self.ctrl_dst.tolist()):
            g.add_edge(s, d, bytes=0)
        for s, d, b in zip(self.edge_src.tolist(), self.edge_dst.tolist(),
                           self.tensor_bytes[self.edge_tensor].tolist()):
            prev = g.edges[s, d]["bytes"] if g.has_edge(s, d) else 0
            g.add_edge(s, d, bytes=prev + b)
        return g


def from_edges(num_ops: int, edges: Sequence[tuple[int, int, int]], *,
               op_types: Sequence[str] | None = None,
               names: Sequence[str] | None = None,
               persistent_bytes: Sequence[int] | None = None,
               colocation: Sequence[int] | None = None,
               kernels: np.ndarray | None = None,
               control: Sequence[tuple[int, int]] = ()) -> OpGraph:
    """Build a small OpGraph by hand (tests and fakes). ``edges`` are ``(src, dst, bytes)``; every
    op has exactly one output tensor, whose size is the largest ``bytes`` among its out-edges."""
    names = tuple(names) if names is not None else tuple(f"op{i}" for i in range(num_ops))
    op_types = tuple(op_types) if op_types is not None else ("Identity",) * num_ops
    out_size = np.zeros(num_ops, dtype=np.int64)
    for s, _, b in edges:
        out_size[s] = max(out_size[s], b)
    return OpGraph(
        names=names, op_types=op_types,
        persistent_bytes=np.zeros(num_ops, np.int64) if persistent_bytes is None else persistent_bytes,
        tensor_op=np.arange(num_ops), tensor_bytes=out_size,
        edge_tensor=[s for s, _, _ in edges], edge_dst=[d for _, d, _ in edges],
        ctrl_src=[s for s, _ in control], ctrl_dst=[d for _, d in control],
        colocation=np.arange(num_ops) if colocation is None else colocation,
        kernels=np.ones((num_ops, len(KERNEL_KINDS)), bool) if kernels is None else kernels,
        shape_known=np.ones(num_ops, bool))
