"""Ingestion: tf.Graph / GraphDef / MetaGraphDef (objects or files) -> OpGraph.

Two steps, both public:

- :func:`load_meta_graph` normalises whatever the caller has into a ``MetaGraphDef`` (files in
  binary or text format; corrupt input raises :class:`InvalidGraphError`).
- :func:`to_opgraph` reads that graph into an :class:`OpGraph`: per op its type, output tensor
  sizes (Grappler static shape inference), persistent memory (variables), data and control edges,
  colocation groups and the device kinds it has kernels for.

Shape fallback: a dimension Grappler cannot infer (-1) counts as ``unknown_dim`` elements (default
1, so an unknown batch dimension makes a tensor look small) and the op is marked
``shape_known=False``; an unknown rank counts as a scalar. The report says how many ops were
affected, so a user can feed static shapes and place again.

Colocation (what TF's placer enforces and we must not split):
- ``_class`` attrs ``loc:@name`` put a node in ``name``'s group;
- an edge carrying a resource handle or a reference (variables and their readers, assigners and
  optimizer updates) joins producer and consumer.

v1 while loops: the ``NextIteration -> Merge`` back edge is dropped, so the rest is a DAG.
"""

from __future__ import annotations

import os
from typing import Union

import numpy as np
import tensorflow as tf
from google.protobuf import message as _pb_message
from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow.python.framework import op_def_registry

from tf_autoplace.errors import InvalidGraphError
from tf_autoplace.graph import grappler
from tf_autoplace.graph.kernels import kernel_kinds
from tf_autoplace.graph.opgraph import KERNEL_KINDS, OpGraph

GraphLike = Union[tf.Graph, graph_pb2.GraphDef, meta_graph_pb2.MetaGraphDef, bytes, str,
                  os.PathLike]

VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable", "TemporaryVariable"})


# ------------------------------------------------------------------------------------ loading
def load_meta_graph(source: GraphLike) -> meta_graph_pb2.MetaGraphDef:
    """Return a MetaGraphDef for a tf.Graph, GraphDef, MetaGraphDef, serialized bytes or a file
    path (binary or text format). Never modifies ``source``."""
    if isinstance(source, tf.Graph):
        return meta_graph_pb2.MetaGraphDef(graph_def=source.as_graph_def())
    if isinstance(source, meta_graph_pb2.MetaGraphDef):
        out = meta_graph_pb2.MetaGraphDef()
        out.CopyFrom(source)
        return out
    if isinstance(source, graph_pb2.GraphDef):
        return meta_graph_pb2.MetaGraphDef(graph_def=source)
    if isinstance(source, (bytes, bytearray)):
        return _parse(bytes(source), what="the given bytes")[0]
    if isinstance(source, (str, os.PathLike)):
        return read_graph_file(source)[0]
    raise InvalidGraphError(
        f"cannot place a {type(source).__name__}; expected tf.Graph, GraphDef, MetaGraphDef, "
        "bytes or a file path")


def read_graph_file(path: str | os.PathLike) -> tuple[meta_graph_pb2.MetaGraphDef, bool]:
    """Read a GraphDef or MetaGraphDef file (binary or text). Returns the graph as a
    MetaGraphDef and whether the file held a MetaGraphDef."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InvalidGraphError(f"cannot read graph file {path!r}: {e.strerror}") from e
    return _parse(data, what=repr(path))


def _looks_valid(graph_def: graph_pb2.GraphDef) -> bool:
    return len(graph_def.node) > 0 and all(n.name and n.op for n in graph_def.node)


def _parse(data: bytes, what: str) -> tuple[meta_graph_pb2.MetaGraphDef, bool]:
    """Binary first (MetaGraphDef, then GraphDef), then text format, keeping the first parse that
    yields a non-empty graph whose nodes all have a name and an op. Returns (graph, was_meta)."""
    errors = []
    for fmt in ("binary", "text"):
        if fmt == "text":
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                break
        for cls in (meta_graph_pb2.MetaGraphDef, graph_pb2.GraphDef):
            msg = cls()
            try:
                if fmt == "binary":
                    msg.ParseFromString(data)
                else:
                    text_format.Parse(text, msg)
            except (_pb_message.DecodeError, text_format.ParseError, ValueError,
                    RuntimeError) as e:
                errors.append(f"{fmt} {cls.__name__}: {e}")
                continue
            graph_def = msg.graph_def if cls is meta_graph_pb2.MetaGraphDef else msg
            if _looks_valid(graph_def):
                if cls is meta_graph_pb2.MetaGraphDef:
                    return msg, True
                return meta_graph_pb2.MetaGraphDef(graph_def=graph_def), False
    detail = "; ".join(errors[-2:]) if errors else "no nodes found"
    raise InvalidGraphError(
        f"{what} is not a GraphDef or MetaGraphDef in binary or text format ({detail})")


# ---------------------------------------------------------------------------------- reading
class _UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def labels(self) -> np.ndarray:
        roots = [self.find(i) for i in range(len(self.parent))]
        _, dense = np.unique(roots, return_inverse=True)
        return dense.astype(np.int32)


def _split_input(inp: str) -> tuple[str, int, bool]:
    """'^a' -> (a, -1, True); 'a:2' -> (a, 2, False); 'a' -> (a, 0, False)."""
    if inp.startswith("^"):
        return inp[1:], -1, True
    name, _, idx = inp.partition(":")
    return name, int(idx) if idx else 0, False


def _num_elements(shape, unknown_dim: int) -> tuple[int, bool]:
    if shape.unknown_rank:
        return 1, False
    count, known = 1, True
    for d in shape.dim:
        if d.size < 0:
            count *= unknown_dim
            known = False
        else:
            count *= d.size
    return count, known


def _variable_bytes(node) -> int:
    if node.op not in VARIABLE_OPS or "shape" not in node.attr or "dtype" not in node.attr:
        return 0
    elements, _ = _num_elements(node.attr["shape"].shape, unknown_dim=1)
    return elements * grappler.dtype_size(node.attr["dtype"].type)


def to_opgraph(meta_graph: meta_graph_pb2.MetaGraphDef, *, unknown_dim: int = 1) -> OpGraph:
    """Read a MetaGraphDef into an OpGraph (see the module docstring for the rules)."""
    nodes = list(meta_graph.graph_def.node)
    if not nodes:
        raise InvalidGraphError("the graph has no nodes")
    library_functions = {f.signature.name for f in meta_graph.graph_def.library.function}
    index: dict[str, int] = {}
    for i, node in enumerate(nodes):
        if node.name in index:
            raise InvalidGraphError(f"two nodes are named {node.name!r}")
        if op_def_registry.get(node.op) is None and node.op not in library_functions:
            raise InvalidGraphError(
                f"node {node.name!r} has unknown op type {node.op!r} (not registered in this "
                "TensorFlow build and not a function of the graph's library)")
        index[node.name] = i
    for node in nodes:  # before Grappler, which would fail on a dangling input less clearly
        for inp in node.input:
            if _split_input(inp)[0] not in index:
                raise InvalidGraphError(f"node {node.name!r} reads {inp!r}, which does not exist")

    props = grappler.output_properties(meta_graph)

    # Output tensors: every output Grappler knows of, plus any output index an edge reads.
    n = len(nodes)
    tensor_id: dict[tuple[int, int], int] = {}
    tensor_op, tensor_bytes, tensor_dtype = [], [], []
    shape_known = np.ones(n, dtype=bool)

    def add_tensor(op: int, port: int, nbytes: int, dtype: int) -> int:
        tensor_id[(op, port)] = len(tensor_op)
        tensor_op.append(op)
        tensor_bytes.append(nbytes)
        tensor_dtype.append(dtype)
        return tensor_id[(op, port)]

    for i, node in enumerate(nodes):
        for port, tp in enumerate(props.get(node.name, [])):
            elements, known = _num_elements(tp.shape, unknown_dim)
            shape_known[i] &= known
            add_tensor(i, port, elements * grappler.dtype_size(tp.dtype), tp.dtype)

    uf = _UnionFind(n)
    edge_tensor, edge_dst, ctrl_src, ctrl_dst = [], [], [], []
    n_back = 0
    for i, node in enumerate(nodes):
        for inp in node.input:
            name, port, is_ctrl = _split_input(inp)
            src = index[name]
            if nodes[src].op in ("NextIteration", "RefNextIteration"):
                n_back += 1  # while-loop back edge: orders iterations, not ops within a step
                continue
            if is_ctrl:
                ctrl_src.append(src)
                ctrl_dst.append(i)
                continue
            t = tensor_id.get((src, port))
            if t is None:
                shape_known[src] = False
                t = add_tensor(src, port, 0, 0)
            if grappler.is_handle_or_ref(tensor_dtype[t]):
                uf.union(src, i)
            edge_tensor.append(t)
            edge_dst.append(i)
        cls = node.attr["_class"].list.s if "_class" in node.attr else []
        for entry in cls:
            entry = entry.decode("utf-8", "replace")
            if entry.startswith("loc:@"):
                target = entry[len("loc:@"):]
                if target not in index:
                    raise InvalidGraphError(
                        f"node {node.name!r} asks to be colocated with {target!r}, which does "
                        "not exist")
                uf.union(index[target], i)

    kernels = np.array([[kind in kernel_kinds(node, library_functions) for kind in KERNEL_KINDS]
                        for node in nodes], dtype=bool)
    for i, node in enumerate(nodes):
        if not kernels[i].any():
            raise InvalidGraphError(
                f"node {node.name!r} (op {node.op!r}) has no CPU or GPU kernel for its attrs")

    return OpGraph(
        names=tuple(n.name for n in nodes), op_types=tuple(n.op for n in nodes),
        persistent_bytes=np.array([_variable_bytes(n) for n in nodes], dtype=np.int64),
        tensor_op=np.array(tensor_op, dtype=np.int32),
        tensor_bytes=np.array(tensor_bytes, dtype=np.int64),
        edge_tensor=np.array(edge_tensor, dtype=np.int32),
        edge_dst=np.array(edge_dst, dtype=np.int32),
        ctrl_src=np.array(ctrl_src, dtype=np.int32), ctrl_dst=np.array(ctrl_dst, dtype=np.int32),
        colocation=uf.labels(), kernels=kernels, shape_known=shape_known,
        kernel_kinds=KERNEL_KINDS, n_back_edges=n_back)
