"""Ingestion: tf.Graph / GraphDef / MetaGraphDef (objects or files) -> OpGraph.

Two steps, both public:

- :func:`load_meta_graph` normalises whatever the caller has into a ``MetaGraphDef`` (files in
  binary or text format; corrupt input raises :class:`InvalidGraphError`).
- :func:`to_opgraph` reads that graph into an :class:`OpGraph`: per op its type, output tensor
  sizes (Grappler static shape inference), persistent memory (variables), data and control edges,
  colocation groups, the device kinds it has kernels for, and which outputs share a buffer with
  an input or a variable (:func:`tf_autoplace.graph.buffers.output_aliases`).

Shape fallback: a dimension Grappler cannot infer (-1) counts as ``unknown_dim`` elements (default
1, so an unknown batch dimension makes a tensor look small) and the op is marked
``shape_known=False``; an unknown rank counts as a scalar. The report says how many ops were
affected, so a user can feed static shapes and place again.

Validation comes first, before Grappler sees the graph: Grappler's C++ code assumes a graph
TensorFlow accepts and may abort the whole process on one it does not (a ``Const`` without a
``value`` read by an ``Identity`` does). So the graph is imported into a scratch ``tf.Graph``
with TensorFlow's own importer (op signatures, attr types, input counts and dtypes, static shape
inference; its cost: docs/experiments.md, "Ingesting and costing large graphs"), and every
``Const`` must hold the bytes its shape needs (TF checks that only when the kernel is built, at
run time). Anything TensorFlow rejects is an :class:`InvalidGraphError` naming the node. A graph
whose tensors add up to more than 2**62 bytes (say a [2**31, 2**31] variable, which TF imports)
fits no device and cannot be counted in int64: an :class:`InfeasiblePlacementError`.

Colocation (what TF's placer enforces and we must not split):
- ``_class`` attrs ``loc:@name`` put a node in ``name``'s group;
- an edge carrying a resource handle or a reference (variables and their readers, assigners and
  optimizer updates) joins producer and consumer. A functional control-flow or call op
  (``While``, ``If``, ``Case``, ``PartitionedCall``, ...: :data:`FORWARDS_RESOURCES`) joins
  its resources too, except where they are annotated with two different devices (a loop of a
  ``tf.function`` that reads variables living on two devices): TF's placer exempts such an op
  (it forwards the handles to the ops of its body, which TF places with each resource), and
  a group of both devices could not be placed. A ``While``'s resource output is the loop's
  input at the same position, so its consumers join that input's producer;
- a ``tf.data`` pipeline is one group: a variant edge out of a dataset op (an op type with
  ``Dataset`` in its name) joins producer and consumer, and the iterator joins it through its
  ``_class`` (``make_one_shot_iterator``) or its ``MakeIterator``. TF's placer refuses some
  splits of a pipeline from its iterator (a source dataset on another device than the iterator
  fails at the session's first run with "Cannot colocate nodes"), and an input pipeline is
  host work too small to be worth splitting, so it is kept whole rather than split where TF
  happens to allow it;
- a feedable iterator (``Iterator.from_string_handle``) and every iterator of the graph are one
  group: the handle it reads names some iterator through a feed, and TensorFlow looks that
  iterator up on the feedable one's device only.
- an op that calls a library function (``If``, ``While``, a call) joins each op of the graph
  that a node of the function without a device of its own is colocated with (``_class``):
  TensorFlow inlines the function and places that node with the op;
- ops that make a resource under one ``shared_name`` (and ``container``) are one group: a
  variable, queue or table imported twice (two towers of one GraphDef) is one resource only
  on one device; on two, each finds its own ("Could not find variable", a dequeue that waits
  on an empty queue).

v1 while loops: the ``NextIteration -> Merge`` back edge is dropped, so the rest is a DAG.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import stat
import time
from typing import Union

import numpy as np
import tensorflow as tf
from google.protobuf import message as _pb_message
from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2, types_pb2
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow.python.framework import op_def_registry

from tf_autoplace.core.tasks import same_device
from tf_autoplace.errors import InfeasiblePlacementError, InvalidGraphError
from tf_autoplace.graph import buffers, grappler
from tf_autoplace.graph.kernels import kernel_kinds
from tf_autoplace.graph.opgraph import KERNEL_KINDS, OpGraph

GraphLike = Union[tf.Graph, graph_pb2.GraphDef, meta_graph_pb2.MetaGraphDef, bytes, str,
                  os.PathLike]

VARIABLE_OPS = buffers.VARIABLE_TYPES
CONST_OPS = frozenset({"Const", "HostConst"})
# Bytes a graph's tensors and variables may add up to: sums of sizes stay exact in int64.
MAX_GRAPH_BYTES = 2**62
_INPUT = re.compile(r"(\^?)([^:^]+)(?::(0|[1-9][0-9]*))?")


# ------------------------------------------------------------------------------------ loading
def nesting_limited(fn):
    """``fn`` with a RecursionError, which only a graph whose library functions call each
    other about a thousand levels deep causes (the walks over the call graph recurse per
    level), raised as an InvalidGraphError that says so."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RecursionError:
            raise InvalidGraphError(
                "the graph's library functions call each other more deeply than this tool "
                "follows (about a thousand levels, Python's recursion limit); TensorFlow may "
                "run it, but it cannot be placed here") from None
    return wrapper


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
        "bytes or a file path, a tf.function or ConcreteFunction (tf_autoplace.autoplace, "
        "tf_autoplace.tf2.autoplace_function), or a compiled Keras model "
        "(tf_autoplace.keras.autoplace_model: its fit, evaluate and predict run placed "
        "functions)")


MAX_GRAPH_FILE_BYTES = 2**31 - 1  # protobuf's limit on a serialized message


def read_graph_file(path: str | os.PathLike) -> tuple[meta_graph_pb2.MetaGraphDef, bool]:
    """Read a GraphDef or MetaGraphDef file (binary or text). Returns the graph as a
    MetaGraphDef and whether the file held a MetaGraphDef."""
    path = os.fspath(path)
    if os.path.isdir(path):  # (said "Is a directory", though a directory may be a SavedModel)
        raise InvalidGraphError(f"{path!r} is a directory and not a SavedModel (no "
                                "saved_model.pb or saved_model.pbtxt in it); give a GraphDef or "
                                "MetaGraphDef file, or a SavedModel's directory")
    data = None  # None: a device (/dev/zero would fill the memory)
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if not (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)):
                data = f.read(MAX_GRAPH_FILE_BYTES + 1)  # a pipe: to its end or the limit
    except OSError as e:
        raise InvalidGraphError(f"cannot read graph file {path!r}: {e.strerror or e}") from e
    except ValueError as e:  # a NUL in the path
        raise InvalidGraphError(f"cannot read graph file {path!r}: {e}") from e
    if data is None:
        raise InvalidGraphError(f"cannot read graph file {path!r}: it is a device, not a file "
                                "or a pipe")
    if len(data) > MAX_GRAPH_FILE_BYTES:
        raise InvalidGraphError(f"graph file {path!r} is larger than 2 GiB, more than a "
                                "GraphDef can hold")
    try:
        return _parse(data, what=repr(path))
    except InvalidGraphError as e:
        if os.path.basename(path) in ("saved_model.pb", "saved_model.pbtxt"):
            raise InvalidGraphError(f"{e}; it is a SavedModel's own file: give the SavedModel's "
                                    f"directory ({os.path.dirname(path) or '.'!r})") from e
        raise


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
            errors.append(f"{fmt} {cls.__name__}: parses, but has no nodes" if not
                          graph_def.node else f"{fmt} {cls.__name__}: a node has no name or op")
    detail = "; ".join(errors[-2:])
    hint = ("; it reads as a cost graph (format_version ...): place it with "
            "tf_autoplace.place_cost_graph, or tf-autoplace place with a *.costgraph.pbtxt name"
            if re.match(rb'\s*[{"]*\s*"?format_?[vV]ersion', data[:200]) else "")
    raise InvalidGraphError(
        f"{what} is not a GraphDef or MetaGraphDef in binary or text format ({detail}){hint}")


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


def _split_input(inp: str) -> tuple[str, int, bool] | None:
    """'^a' -> (a, -1, True); 'a:2' -> (a, 2, False); 'a' -> (a, 0, False); None for a string
    that is none of these ('a:x', '^a:1', '')."""
    match = _INPUT.fullmatch(inp)
    if match is None or (match[1] and match[3] is not None):
        return None
    if match[1]:
        return match[2], -1, True
    return match[2], int(match[3] or 0), False


def colocation_targets(node) -> list[str]:
    """Names in the node's ``_class`` attr entries ``loc:@name``."""
    entries = node.attr["_class"].list.s if "_class" in node.attr else []
    return [e.decode("utf-8", "replace")[len("loc:@"):] for e in entries
            if e.startswith(b"loc:@")]


# Ops that pass resource inputs on to the ops of a function they run, which TensorFlow places
# with each resource: its placer does not colocate them with their resource inputs
# (InputColocationExemptionRegistry and the placer's inspection of function-calling ops).
WHILE_OPS = frozenset({"While", "StatelessWhile"})
FORWARDS_RESOURCES = WHILE_OPS | frozenset({
    "If", "StatelessIf", "Case", "StatelessCase", "PartitionedCall", "StatefulPartitionedCall"})


def resource_origin(by_name, name: str, port: int) -> str:
    """The node whose resource node ``name``'s output ``port`` is (``by_name``: node name ->
    NodeDef): through ``While`` ops, which pass their loop variables on, the producer of the
    input at the same position; else ``name``."""
    for _ in range(len(by_name)):  # a chain of loops, each node at most once
        node = by_name.get(name)
        if node is None or node.op not in WHILE_OPS:
            return name
        data = [inp for inp in node.input if not inp.startswith("^")]
        split = _split_input(data[port]) if port < len(data) else None
        if split is None:
            return name
        name, port, _ = split
    return name


def _on_two_devices(devices) -> bool:
    """Whether two of the device strings ``devices`` name different devices: a field (job,
    replica, task, type, index) both give, with different values. Empty strings and strings
    TF cannot parse name none (ingestion checks device strings elsewhere)."""
    specs = []
    for device in set(filter(None, devices)):
        try:
            specs.append(tf.DeviceSpec.from_string(device))
        except ValueError:
            continue
    return any(not same_device(a, b) for a, b in itertools.combinations(specs, 2))


# Ops that make an iterator resource, and those that find one from a string handle (a feedable
# iterator, ``tf.compat.v1.data.Iterator.from_string_handle``).
_ITERATORS = frozenset({
    "Iterator", "IteratorV2", "OneShotIterator", "AnonymousIterator", "AnonymousIteratorV2",
    "AnonymousIteratorV3", "MultiDeviceIterator", "AnonymousMultiDeviceIterator",
    "AnonymousMultiDeviceIteratorV3"})
_FROM_HANDLE = frozenset({"IteratorFromStringHandle", "IteratorFromStringHandleV2",
                          "MultiDeviceIteratorFromStringHandle"})


def _join_feedable_iterators(nodes, uf: _UnionFind) -> None:
    """Put every feedable iterator and every iterator of the graph in one group. The handle a
    feedable iterator is fed comes from a feed, not an edge (the program runs another
    iterator's ``string_handle()`` and feeds the string back), so the graph does not say
    which iterator it names, and TensorFlow finds that iterator only on the feedable one's
    device ("Attempted create an iterator on device ... from handle defined on device ...")."""
    feedable = [i for i, node in enumerate(nodes) if node.op in _FROM_HANDLE]
    if not feedable:
        return
    for i, node in enumerate(nodes):
        if node.op in _ITERATORS or node.op in _FROM_HANDLE:
            uf.union(feedable[0], i)


def _join_shared_resources(nodes, uf: _UnionFind) -> None:
    """Put the ops that name one resource by a non-empty ``shared_name`` (in one
    ``container``) in one group: TensorFlow's resource manager is per device, so only
    together do they share it (module docstring)."""
    first: dict[tuple[bytes, bytes], int] = {}
    for i, node in enumerate(nodes):
        shared = node.attr["shared_name"].s if "shared_name" in node.attr else b""
        if shared:
            container = node.attr["container"].s if "container" in node.attr else b""
            uf.union(first.setdefault((container, shared), i), i)


def _node_in_message(message: str) -> str | None:
    """The node a TensorFlow error message is about, where it names one."""
    for pattern in (r"\{\{node ([^}\s]+)\}\}", r"[Nn]ode '([^']+)'", r"of node (\S+?) was"):
        found = re.search(pattern, message)
        if found:
            return found[1]
    return None


def check_tensorflow_accepts(graph_def: graph_pb2.GraphDef) -> None:
    """Raise InvalidGraphError unless TensorFlow's importer accepts ``graph_def`` (imported into
    a scratch graph; nothing of the caller's changes) and its constants hold what their shapes
    need (see the module docstring)."""
    try:
        with tf.Graph().as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
    except (ValueError, TypeError, KeyError, tf.errors.OpError) as e:
        message = str(e).strip()
        node = _node_in_message(message)
        if node:
            message = message.removeprefix(f"Node '{node}': ")
        where = f"node {node!r}" if node else "the graph"
        raise InvalidGraphError(f"TensorFlow rejects {where}: {message}") from e
    check_constants(graph_def)


def check_constants(graph_def: graph_pb2.GraphDef) -> None:
    """Raise InvalidGraphError unless every constant of ``graph_def`` holds the bytes its shape
    needs (TensorFlow checks that only when the kernel is built, at run time)."""
    for node in graph_def.node:
        if node.op in CONST_OPS:
            problem = _constant_problem(node)
            if problem:
                raise InvalidGraphError(f"TensorFlow rejects node {node.name!r} ({node.op}): "
                                        f"{problem}")


def _dtype_name(enum: int) -> str:
    """``DT_FLOAT`` for 1; the number itself for a value no DataType has."""
    try:
        return types_pb2.DataType.Name(enum)
    except ValueError:
        return f"dtype {enum}"


def _constant_problem(node) -> str | None:
    """Why TensorFlow's Const kernel would not build from ``node``'s ``value`` (as
    ``Tensor::FromProto`` reads it), or None."""
    tensor, dtype = node.attr["value"].tensor, node.attr["dtype"].type
    if tensor.dtype != dtype:
        return (f"its value is a {_dtype_name(tensor.dtype)} tensor but its dtype is "
                f"{_dtype_name(dtype)}")
    dims = [d.size for d in tensor.tensor_shape.dim]
    if tensor.tensor_shape.unknown_rank or any(d < 0 for d in dims):
        return f"its value has the incomplete shape {dims}"
    if not tensor.tensor_content or dtype in (types_pb2.DT_STRING, types_pb2.DT_RESOURCE,
                                              types_pb2.DT_VARIANT):
        return None  # typed values: TF repeats the last one (or zero) to fill the shape
    try:
        dt = tf.dtypes.as_dtype(dtype)
    except TypeError:
        return f"its dtype {dtype} is not a TensorFlow dtype"
    elements = 1
    for d in dims:
        elements *= d
    if len(tensor.tensor_content) != elements * dt.size:
        return (f"its value holds {len(tensor.tensor_content)} bytes where shape {dims} of "
                f"{dt.name} needs {elements * dt.size}")
    return None


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


def _declared_shapes(node) -> list:
    """The fully known output shapes ``node`` declares itself (a placeholder's ``shape``, the
    ``_output_shapes`` an export added), by output index; None where one is not fully known.
    Grappler's shape inference gives up on sizes it cannot count (more than about 2**60
    elements), which would otherwise count as unknown, a few bytes."""
    if "_output_shapes" in node.attr:
        shapes = list(node.attr["_output_shapes"].list.shape)
    elif node.op in ("Placeholder", "PlaceholderWithDefault") and "shape" in node.attr:
        shapes = [node.attr["shape"].shape]
    else:
        return []
    return [shape if _num_elements(shape, 1)[1] else None for shape in shapes]


def _variable_bytes(node) -> int:
    if node.op not in VARIABLE_OPS or "shape" not in node.attr or "dtype" not in node.attr:
        return 0
    elements, _ = _num_elements(node.attr["shape"].shape, unknown_dim=1)
    return elements * grappler.dtype_size(node.attr["dtype"].type)


def to_opgraph(meta_graph: meta_graph_pb2.MetaGraphDef, *, unknown_dim: int = 1) -> OpGraph:
    """Read a MetaGraphDef into an OpGraph (see the module docstring for the rules)."""
    return read_graph(meta_graph, unknown_dim=unknown_dim)[0]


def _check_nodes(graph_def: graph_pb2.GraphDef) -> None:
    """Raise InvalidGraphError for what would otherwise fail later with a less clear message
    (or bring the process down inside TensorFlow): no nodes, a repeated name, an unknown op
    type, a call of a function the library lacks or a function that calls itself, an input or
    colocation target that does not exist, a malformed input or device string."""
    nodes = graph_def.node
    if not nodes:
        raise InvalidGraphError("the graph has no nodes")
    library_functions = {f.signature.name for f in graph_def.library.function}
    _check_function_calls(graph_def, library_functions)
    index: dict[str, int] = {}
    for i, node in enumerate(nodes):
        if node.name in index:
            raise InvalidGraphError(f"two nodes are named {node.name!r}")
        if op_def_registry.get(node.op) is None and node.op not in library_functions:
            raise InvalidGraphError(
                f"node {node.name!r} has unknown op type {node.op!r} (not registered in this "
                "TensorFlow build and not a function of the graph's library)")
        index[node.name] = i
    for node in nodes:  # before TF's importer, whose messages for these are less clear
        for inp in node.input:
            split = _split_input(inp)
            if split is None:
                raise InvalidGraphError(f"node {node.name!r} has the malformed input {inp!r} "
                                        "(expected 'name', 'name:port' or '^name')")
            if split[0] not in index:
                raise InvalidGraphError(f"node {node.name!r} reads {inp!r}, which does not exist")
        for target in colocation_targets(node):
            if target not in index:
                raise InvalidGraphError(f"node {node.name!r} asks to be colocated with "
                                        f"{target!r}, which does not exist")
        if node.device:
            try:
                tf.DeviceSpec.from_string(node.device)
            except (ValueError, TypeError) as e:
                raise InvalidGraphError(f"node {node.name!r} has the device {node.device!r}, "
                                        f"which TensorFlow cannot parse: {e}") from e


def _function_attrs(op: str, cache: dict) -> list[str]:
    """The names of ``op``'s attrs that hold functions (``func`` or ``list(func)``, by its
    OpDef; none for a library function or an unknown op), cached per op type."""
    if op not in cache:
        op_def = op_def_registry.get(op)
        cache[op] = [a.name for a in op_def.attr if a.type in ("func", "list(func)")] \
            if op_def is not None else []
    return cache[op]


def _called_functions(node, library_functions, cache: dict) -> list[str]:
    """The functions ``node`` calls: its op if that is a library function, and the functions
    in its function attrs (``_function_attrs``; ``cache`` as there)."""
    named = [node.op] if node.op in library_functions else []
    for key in _function_attrs(node.op, cache):
        if key not in node.attr:  # (reading a missing key would add it to the map)
            continue
        value = node.attr[key]
        named += [value.func.name] if value.HasField("func") else [
            f.name for f in value.list.func]
    return named


def _join_body_colocations(graph_def: graph_pb2.GraphDef, nodes, index: dict,
                           uf: _UnionFind) -> None:
    """Put an op that calls a library function in the group of each op X of the graph that
    a node of that function (or of one it calls) is colocated with (``_class: loc:@X``) and
    has no device of its own: TensorFlow inlines the function when the step runs and places
    the node with X, so the caller's other inlined nodes and X are then one colocation group
    ("Cannot colocate nodes" if split; a ``cond`` that reads an iterator argument through an
    optional). A node with a device of its own pins X instead (:mod:`tf_autoplace.graph.pins`).
    """
    functions = {f.signature.name: f for f in graph_def.library.function}
    if not functions:
        return
    cache: dict[str, list[str]] = {}
    targets: dict[str, set[str]] = {}

    def colocated(name: str) -> set[str]:
        if name not in targets:
            targets[name] = set()  # (a function that calls itself is an error elsewhere)
            body = functions[name].node_def
            inner = {node.name for node in body}
            found = set()
            for node in body:
                if not node.device:
                    found.update(t for t in colocation_targets(node)
                                 if t in index and t not in inner)
                for called in _called_functions(node, functions, cache):
                    if called in functions:
                        found |= colocated(called)
            targets[name] = found
        return targets[name]

    for i, node in enumerate(nodes):
        for called in _called_functions(node, functions, cache):
            if called in functions:
                for target in colocated(called):
                    uf.union(index[target], i)


def _check_function_calls(graph_def: graph_pb2.GraphDef, library_functions: set[str]) -> None:
    """InvalidGraphError for a call of a function that is neither in the library nor an op
    (TF's Grappler then raises "Op type not registered"), or a library function that calls
    itself, directly or through others (TF's importer crashes the process on it). A call is a
    node whose op is a library function, or a function in one of its function attrs (``f`` of
    a call, the branches and bodies of If, Case and While, a dataset's map function)."""
    cache: dict[str, list[str]] = {}
    calls: dict[str, list[str]] = {f.signature.name: [] for f in graph_def.library.function}
    for where, nodes in [(None, graph_def.node)] + [
            (f.signature.name, f.node_def) for f in graph_def.library.function]:
        for node in nodes:
            if where is not None and node.op not in library_functions \
                    and op_def_registry.get(node.op) is None:
                raise InvalidGraphError(f"node {node.name!r} in function {where!r} has unknown "
                                        f"op type {node.op!r} (not registered in this "
                                        "TensorFlow build and not a function of the library)")
            for name in _called_functions(node, library_functions, cache):
                if name not in library_functions and op_def_registry.get(name) is None:
                    inside = f" in function {where!r}" if where else ""
                    raise InvalidGraphError(f"node {node.name!r}{inside} calls function "
                                            f"{name!r}, which the graph's library does not have")
                if where is not None and name in library_functions:
                    calls[where].append(name)
    state: dict[str, int] = {}  # 1: on the path being walked, 2: every call below it walked
    for root in sorted(calls):
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(calls[root]))]
        while stack:
            name, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[name] = 2
                stack.pop()
            elif state.get(child) == 1:
                path = [n for n, _ in stack]
                cycle = path[path.index(child):] + [child]
                raise InvalidGraphError("the graph's library has a function that calls itself: "
                                        + " -> ".join(repr(n) for n in cycle))
            elif child not in state:
                state[child] = 1
                stack.append((child, iter(calls[child])))


@nesting_limited
def read_graph(meta_graph: meta_graph_pb2.MetaGraphDef, *, unknown_dim: int = 1,
               live_graph: bool = False) -> tuple[OpGraph, dict]:
    """Read a MetaGraphDef into an OpGraph (see the module docstring for the rules).

    Args:
      meta_graph: the graph (not modified).
      unknown_dim: elements counted for a dimension static inference cannot tell.
      live_graph: ``meta_graph`` is a live ``tf.Graph``'s own GraphDef. TensorFlow checked
        each of its ops as it was created (signature, attrs, inputs, shapes), so its importer
        is not asked again (most of that import is making Python objects for a scratch graph
        of the same size); the constants' bytes are still checked. False for anything read
        from bytes, a file or a GraphDef someone built.

    Returns:
      ``(graph, tensor_properties)``: the OpGraph and Grappler's output properties it was
      read from (:func:`tf_autoplace.graph.grappler.output_properties`), which the analytical
      cost model can reuse instead of inferring them again.

    Raises:
      InvalidGraphError: TensorFlow or Grappler rejects the graph (the message names the node).
      InfeasiblePlacementError: the graph's bytes add up to more than ``MAX_GRAPH_BYTES``.
    """
    _check_before_grappler(meta_graph, live_graph)
    props = grappler.output_properties(meta_graph)
    return _opgraph(meta_graph, props, unknown_dim), props


@nesting_limited
def read_live_graph(graph: tf.Graph, *, unknown_dim: int = 1,
                    timings: dict | None = None
                    ) -> tuple[meta_graph_pb2.MetaGraphDef, OpGraph, dict]:
    """:func:`load_meta_graph` and :func:`read_graph` of a live ``tf.Graph`` in one, with the
    MetaGraphDef held as bytes while Grappler infers shapes. That inference sets the peak
    memory of ingestion on large graphs, and the parsed message takes about four times its
    bytes (0.05 GB of the peak on an 85k-op graph); nobody else holds it, since it is made
    here.

    Args:
      graph: the graph (not modified).
      unknown_dim: as for :func:`read_graph`.
      timings: if given, ``"ingest"`` is set to the seconds :func:`read_graph` would report
        (the graph's export to a GraphDef not included).

    Returns:
      ``(meta_graph, graph, tensor_properties)``: the MetaGraphDef, then as
      :func:`read_graph`.

    Raises:
      As :func:`read_graph`.
    """
    meta_graph = load_meta_graph(graph)
    start = time.perf_counter()
    _check_before_grappler(meta_graph, live_graph=True)
    pending = [grappler.item_bytes(meta_graph)]
    kept = meta_graph.SerializeToString()
    del meta_graph
    # Popped into the call, so that no name here keeps Grappler's bytes alive: the callee
    # drops them once Grappler has its copy.
    props = grappler.output_properties_of(pending.pop())
    meta_graph = meta_graph_pb2.MetaGraphDef.FromString(kept)
    del kept
    opgraph = _opgraph(meta_graph, props, unknown_dim)
    if timings is not None:
        timings["ingest"] = time.perf_counter() - start
    return meta_graph, opgraph, props


def _check_before_grappler(meta_graph: meta_graph_pb2.MetaGraphDef, live_graph: bool) -> None:
    """What :func:`read_graph` checks before asking Grappler, which may abort on what
    TensorFlow rejects."""
    _check_nodes(meta_graph.graph_def)
    if live_graph:
        check_constants(meta_graph.graph_def)
    else:
        check_tensorflow_accepts(meta_graph.graph_def)


def _opgraph(meta_graph: meta_graph_pb2.MetaGraphDef, props: dict, unknown_dim: int) -> OpGraph:
    """The OpGraph of a checked MetaGraphDef and its Grappler output properties. The nodes'
    Python views and name index are made here again rather than kept from the checks: held
    through Grappler's shape inference they would add to ingestion's peak memory."""
    nodes = list(meta_graph.graph_def.node)
    index = {node.name: i for i, node in enumerate(nodes)}
    library_functions = {f.signature.name for f in meta_graph.graph_def.library.function}

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
        declared = _declared_shapes(node)
        for port, serialized in enumerate(props.get(node.name, [])):
            tp = grappler.parse_properties(serialized)
            shape = tp.shape
            if (port < len(declared) and declared[port] is not None
                    and not _num_elements(shape, 1)[1]):
                shape = declared[port]  # known where Grappler gave up (sizes past 2**60)
            elements, known = _num_elements(shape, unknown_dim)
            shape_known[i] &= known
            add_tensor(i, port, elements * grappler.dtype_size(tp.dtype), tp.dtype)

    uf = _UnionFind(n)
    by_name = {node.name: node for node in nodes}

    def resource_source(src: int, port: int) -> int:
        return index[resource_origin(by_name, nodes[src].name, port)]

    forwarded: dict[int, list[int]] = {}  # a FORWARDS_RESOURCES op -> its resources' ops
    edge_tensor, edge_dst, ctrl_src, ctrl_dst = [], [], [], []
    inputs_of: list[list[int]] = [[] for _ in range(n)]  # data inputs' tensors, input order
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
                if node.op in FORWARDS_RESOURCES:
                    forwarded.setdefault(i, []).append(resource_source(src, port))
                else:
                    uf.union(resource_source(src, port), i)
            elif tensor_dtype[t] == types_pb2.DT_VARIANT and "Dataset" in nodes[src].op:
                uf.union(src, i)
            edge_tensor.append(t)
            edge_dst.append(i)
            inputs_of[i].append(t)
        for target in colocation_targets(node):
            uf.union(index[target], i)
    for i, sources in forwarded.items():
        if not _on_two_devices([nodes[src].device for src in sources]):
            for src in sources:
                uf.union(src, i)
    _join_feedable_iterators(nodes, uf)
    _join_shared_resources(nodes, uf)
    _join_body_colocations(meta_graph.graph_def, nodes, index, uf)

    ports_of: list[dict[int, int]] = [{} for _ in range(n)]  # op -> {port: tensor}
    for (i, port), t in tensor_id.items():
        ports_of[i][port] = t
    tensor_alias = np.full(len(tensor_op), buffers.ALIAS_NONE, np.int32)
    for i, ports in enumerate(ports_of):
        if ports:
            aliases = buffers.output_aliases(nodes[i].op, max(ports) + 1, inputs_of[i])
            for port, t in ports.items():
                tensor_alias[t] = aliases[port]
    persistent = [_variable_bytes(node) for node in nodes]
    _check_countable(nodes, persistent, tensor_op, tensor_bytes)
    kernels = np.array([[kind in kernel_kinds(node, library_functions) for kind in KERNEL_KINDS]
                        for node in nodes], dtype=bool)
    for i, node in enumerate(nodes):
        if not kernels[i].any():
            raise InvalidGraphError(
                f"node {node.name!r} (op {node.op!r}) has no CPU or GPU kernel for its attrs")

    return OpGraph(
        names=tuple(n.name for n in nodes), op_types=tuple(n.op for n in nodes),
        persistent_bytes=np.array(persistent, dtype=np.int64),
        tensor_op=np.array(tensor_op, dtype=np.int32),
        tensor_bytes=np.array(tensor_bytes, dtype=np.int64),
        edge_tensor=np.array(edge_tensor, dtype=np.int32),
        edge_dst=np.array(edge_dst, dtype=np.int32),
        ctrl_src=np.array(ctrl_src, dtype=np.int32), ctrl_dst=np.array(ctrl_dst, dtype=np.int32),
        colocation=uf.labels(), kernels=kernels, shape_known=shape_known,
        kernel_kinds=KERNEL_KINDS, n_back_edges=n_back, tensor_alias=tensor_alias)


def _check_countable(nodes, persistent: list, tensor_op: list, tensor_bytes: list) -> None:
    """Raise InfeasiblePlacementError when the graph's bytes add up to more than
    MAX_GRAPH_BYTES (Python ints, so nothing has overflowed yet)."""
    total = sum(persistent) + sum(tensor_bytes)
    if total <= MAX_GRAPH_BYTES:
        return
    sizes = list(zip(persistent, range(len(nodes))))
    sizes += list(zip(tensor_bytes, tensor_op))
    size, i = max(sizes)
    raise InfeasiblePlacementError(
        f"the graph's tensors and variables add up to {total:.3g} bytes, more than any "
        f"cluster holds (node {nodes[i].name!r} alone has {size:.3g} bytes)")
