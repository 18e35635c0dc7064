"""Cost graphs: placement's input for a graph built or profiled anywhere, without TensorFlow.

A :class:`CostGraph` is an :class:`~tf_autoplace.graph.opgraph.OpGraph` (ops, output tensor
sizes, persistent bytes, data and control edges, colocation groups, kernels) together with each
op's time on each kind of device: everything placement reads about a graph. It is stored as a
``tf_autoplace.CostGraph`` proto (``protos/cost_graph.proto``, which documents every field)
in one of three forms, chosen by the file name (:func:`file_format`):

- text format, ``*.pbtxt`` / ``*.txt`` (``graph.costgraph.pbtxt``);
- JSON, ``*.json``: the proto's JSON mapping with its own field names (``output_bytes``; the
  camelCase names are read too; 64-bit integers may be numbers or strings, and are written as
  strings, as the mapping says);
- binary, anything else (``graph.costgraph.pb``).

The format is versioned (``format_version``, now :data:`FORMAT_VERSION`): a reader refuses a
version it does not know rather than misreading the file. Every problem in a file is an
:class:`~tf_autoplace.errors.InvalidGraphError` that names the op and what is wrong.

Meaning, as placement reads it: op ``i`` on a device of kind ``k`` takes ``times[k][i]``
seconds, as measured (overhead included), on the kind's reference device of the cluster
(:meth:`~tf_autoplace.core.cluster.Cluster.reference_device`); another device of the kind
divides it by its speed relative to that one, as a cost profile's times are taken. A spec's
absolute ``speed`` (a shipped host CPU's 16, an H100's 2) corrects an analytical cost model and
does not shrink a measured time. Version 1 files took times "at speed 1", divided by each
device's absolute speed: they are still read so (``CostGraph.format_version``), and placing one
on a cluster where that divides a time says so in the report. An op runs only on the kinds it
has a time for (its kernels); ops with the same non-empty ``colocation_group`` share a device.

Reading builds the OpGraph in the file's order: op ``i`` is the file's ``i``-th op, its output
tensors are numbered op by op in output order, data edges consumer by consumer in input order,
control edges likewise, and colocation groups by first appearance (the numbering
:func:`tf_autoplace.graph.ingest.to_opgraph` gives too); which outputs share a buffer comes from
the op types and inputs, as ingestion derives it (:mod:`tf_autoplace.graph.buffers`). Writing lists an op's tensors in
tensor-index order as its outputs and names each colocation group of more than one op after its
first op. So writing and reading again gives back the same OpGraph whenever its tensors are
numbered op by op (what ingestion produces), and an equivalent one (the same simulation)
otherwise.

:func:`is_cost_graph_file` is how the offline tool tells a cost graph from a GraphDef:
``*.costgraph.pbtxt``, ``*.costgraph.txt``, ``*.costgraph.pb`` or ``*.json``.
"""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np
from google.protobuf import json_format, text_format
from google.protobuf import message as _pb_message

from tf_autoplace.errors import ConfigError, InvalidGraphError
from tf_autoplace.graph import buffers
from tf_autoplace.graph.opgraph import KERNEL_KINDS, OpGraph
from tf_autoplace.proto import cost_graph_pb2, cost_profile_pb2

FORMAT_VERSION = 2
# Versions a reader takes: 1 differs only in what a time means (module doc).
READABLE_VERSIONS = (1, 2)
# The most the ops' times on one device kind may add up to: a step no machine runs, and sums
# of such times (schedules, bounds) would overflow a float long before a time does.
MAX_TOTAL_SECONDS = 1e9
FORMATS = ("text", "json", "binary")
_NEXT_ITERATION = ("NextIteration", "RefNextIteration")
_MERGE = ("Merge", "RefMerge")


@dataclasses.dataclass(frozen=True, eq=False)
class CostGraph:
    """A graph with its per-op costs (see module doc).

    Attributes:
      graph: the ops, tensors, edges and constraints (n ops).
      times: ``{kind: [n] float64 seconds}`` for every kind in ``graph.kernel_kinds``; finite
        and >= 0 exactly where the op has a kernel for that kind, ``inf`` elsewhere.
      description: how the graph and its costs were made.
      format_version: what a time means (module doc): 2, as measured on the kind's reference
        device; 1 (files of that version), at speed 1, divided by each device's speed.
    """

    graph: OpGraph
    times: dict
    description: str = ""
    format_version: int = FORMAT_VERSION

    def __post_init__(self):
        if self.format_version not in READABLE_VERSIONS:
            raise InvalidGraphError(f"format_version is {self.format_version!r}; expected one "
                                    f"of {READABLE_VERSIONS}")
        n, kinds = self.graph.num_ops, self.graph.kernel_kinds
        if set(self.times) != set(kinds):
            raise InvalidGraphError(f"times has device kinds {sorted(self.times)}; expected the "
                                    f"graph's kernel kinds {sorted(kinds)}")
        times = {}
        for j, kind in enumerate(kinds):
            arr = np.array(self.times[kind], dtype=np.float64)
            if arr.shape != (n,):
                raise InvalidGraphError(f"times[{kind!r}] has shape {arr.shape}, expected ({n},)")
            has = self.graph.kernels[:, j]
            bad = np.flatnonzero(has & ~(np.isfinite(arr) & (arr >= 0)))
            if len(bad):
                raise InvalidGraphError(f"op {self.graph.names[bad[0]]!r} has time "
                                        f"{arr[bad[0]]!r} on {kind}; must be finite and >= 0")
            arr[~has] = np.inf
            arr.setflags(write=False)
            times[kind] = arr
        object.__setattr__(self, "times", times)


# ------------------------------------------------------------------------------ the proto
_ADVICE = ("profile the graph with `tf-autoplace profile`, or export a costed graph with "
           "tf_autoplace.pipeline.prepare.export_cost_graph")
_TF_FORMATS_HINT = ("; TensorFlow's own CostGraphDef (RunMetadata.cost_graph) is another "
                    f"format: {_ADVICE}")
# TensorFlow's own profiling formats, by the first field of their text or JSON form.
_TF_FIRST_FIELDS = {
    "step_stats": "RunMetadata", "stepStats": "RunMetadata", "cost_graph": "RunMetadata",
    "costGraph": "RunMetadata", "partition_graphs": "RunMetadata",
    "partitionGraphs": "RunMetadata", "dev_stats": "StepStats", "devStats": "StepStats",
    "node": "CostGraphDef", "cost": "CostGraphDef", "traceEvents": "Chrome trace (timeline)"}


def tensorflow_format(data: bytes) -> str | None:
    """Which of TensorFlow's own formats text or JSON ``data`` is in, by its first field:
    "RunMetadata", "StepStats", "CostGraphDef" or "Chrome trace (timeline)" (what a user who
    ran a FULL_TRACE step has at hand, and gives where this package's own formats go), or
    "GraphDef" (a model saved as text or JSON, given where a cost graph or profile goes); None
    for anything else. Both the cost graph and the cost profile readers name it. A GraphDef
    and a CostGraphDef both begin with ``node``; a GraphDef's node has an ``op``, a
    CostGraphDef's none, and its first node shows within its first few hundred bytes."""
    head = data[:200].decode("utf-8", "replace").lstrip().lstrip("{").lstrip().lstrip('"')
    match = re.match(r"[A-Za-z_]+", head)
    found = _TF_FIRST_FIELDS.get(match.group()) if match else None
    if found == "CostGraphDef" and match.group() == "node" and re.search(
            r'(^|[\s{,])"?op"?\s*:', data[:2000].decode("utf-8", "replace")):
        return "GraphDef"
    return found


def from_proto(proto: cost_graph_pb2.CostGraph) -> CostGraph:
    """Read a ``CostGraph`` proto (see module doc for the checks)."""
    if proto.format_version not in READABLE_VERSIONS:
        raise InvalidGraphError(
            f"cost graph format_version is {proto.format_version}"
            f"{' (unset)' if proto.format_version == 0 else ''}; this reader knows versions "
            f"{' and '.join(map(str, READABLE_VERSIONS))}"
            + (_TF_FORMATS_HINT if proto.format_version == 0 else ""))
    ops = list(proto.op)
    if not ops:
        raise InvalidGraphError("the cost graph has no ops")
    index: dict[str, int] = {}
    for i, op in enumerate(ops):
        if not op.name:
            raise InvalidGraphError(f"op {i} of the cost graph has no name")
        if op.name in index:
            raise InvalidGraphError(f"two ops are named {op.name!r}")
        index[op.name] = i

    n = len(ops)
    first_tensor = np.zeros(n + 1, dtype=np.int64)
    first_tensor[1:] = np.cumsum([len(op.output_bytes) for op in ops])
    times = {kind: np.full(n, np.inf) for kind in KERNEL_KINDS}
    edge_tensor, edge_dst, ctrl_src, ctrl_dst, group_of = [], [], [], [], {}
    colocation = np.empty(n, dtype=np.int32)
    tensor_alias = []
    for i, op in enumerate(ops):
        what = f"op {op.name!r}"
        if any(b < 0 for b in op.output_bytes) or op.persistent_bytes < 0:
            raise InvalidGraphError(f"{what} has a negative byte size")
        if not op.time:
            raise InvalidGraphError(f"{what} has no time on any device kind: list at least one "
                                    f"(its kinds are where it can run; kinds: {KERNEL_KINDS})")
        for entry in op.time:
            if entry.device_kind not in times:
                raise InvalidGraphError(f"{what} has a time for device kind "
                                        f"{entry.device_kind!r}; kinds are {KERNEL_KINDS}")
            if np.isfinite(times[entry.device_kind][i]):
                raise InvalidGraphError(f"{what} lists device kind {entry.device_kind!r} twice")
            if not (np.isfinite(entry.seconds) and entry.seconds >= 0):
                raise InvalidGraphError(f"{what} takes {entry.seconds!r} s on "
                                        f"{entry.device_kind}; must be finite and >= 0")
            times[entry.device_kind][i] = entry.seconds
        for ref in op.input:
            src = index.get(ref.op)
            if src is None:
                raise InvalidGraphError(f"{what} reads {ref.op!r}, which does not exist")
            if not 0 <= ref.output < len(ops[src].output_bytes):
                raise InvalidGraphError(f"{what} reads output {ref.output} of {ref.op!r}, which "
                                        f"has {len(ops[src].output_bytes)} output(s)")
            if ops[src].type in _NEXT_ITERATION and op.type in _MERGE:
                raise InvalidGraphError(
                    f"{what} reads {ref.op!r}: a v1 while loop's back edge (NextIteration -> "
                    "Merge), which makes a cycle; a cost graph is acyclic: leave that input out "
                    "(each step runs the loop's ops once, as `tf-autoplace profile` and "
                    "export_cost_graph write it)")
            edge_tensor.append(first_tensor[src] + ref.output)
            edge_dst.append(i)
        tensor_alias += _output_aliases(op, what, edge_tensor[len(edge_tensor) - len(op.input):])
        for name in op.control_input:
            if name not in index:
                raise InvalidGraphError(f"{what} waits for {name!r}, which does not exist")
            ctrl_src.append(index[name])
            ctrl_dst.append(i)
        key = op.colocation_group or (None, i)  # no group: a group of its own
        colocation[i] = group_of.setdefault(key, len(group_of))
    for kind, t in times.items():
        with np.errstate(over="ignore"):  # a sum past the largest float is inf, said below
            total = t[np.isfinite(t)].sum()
        if not total <= MAX_TOTAL_SECONDS:
            raise InvalidGraphError(
                f"the ops' times on {kind} add up to {total:.3g} s, more than "
                f"{MAX_TOTAL_SECONDS:.0e} s (30 years) for one step: check their unit "
                "(seconds)")

    graph = OpGraph(
        names=tuple(op.name for op in ops), op_types=tuple(op.type for op in ops),
        persistent_bytes=[op.persistent_bytes for op in ops],
        tensor_op=np.repeat(np.arange(n), np.diff(first_tensor)),
        tensor_bytes=[b for op in ops for b in op.output_bytes],
        edge_tensor=edge_tensor, edge_dst=edge_dst, ctrl_src=ctrl_src, ctrl_dst=ctrl_dst,
        colocation=colocation,
        kernels=np.stack([np.isfinite(times[kind]) for kind in KERNEL_KINDS], axis=1),
        shape_known=[not op.shape_unknown for op in ops], kernel_kinds=KERNEL_KINDS,
        tensor_alias=np.array(tensor_alias, dtype=np.int32))
    return CostGraph(graph=graph, times=times, description=proto.description,
                     format_version=proto.format_version)


def _output_aliases(op, what: str, inputs: list) -> list[int]:
    """The ``tensor_alias`` entries of ``op``'s outputs: its ``output_alias`` (input positions
    turned into the tensors those inputs read), else derived from its type."""
    if not op.output_alias:
        return buffers.output_aliases(op.type, len(op.output_bytes), inputs)
    if len(op.output_alias) != len(op.output_bytes):
        raise InvalidGraphError(f"{what} has {len(op.output_alias)} output_alias entries for "
                                f"{len(op.output_bytes)} outputs; give one per output or none")
    out = []
    for a in op.output_alias:
        if a in (buffers.ALIAS_NONE, buffers.ALIAS_VIEW):
            out.append(int(a))
        elif 0 <= a < len(inputs):
            out.append(int(inputs[a]))
        else:
            raise InvalidGraphError(f"{what} has output_alias {a}; expected -1 (own buffer), "
                                    f"-2 (a view of a variable) or an input index in "
                                    f"[0, {len(inputs)})")
    return out


def to_proto(cost_graph: CostGraph) -> cost_graph_pb2.CostGraph:
    """The ``CostGraph`` proto of a cost graph (see module doc for how it is laid out)."""
    graph = cost_graph.graph
    out = cost_graph_pb2.CostGraph(format_version=cost_graph.format_version,
                                   description=cost_graph.description)
    order = np.argsort(graph.tensor_op, kind="stable")  # each op's tensors in index order
    output_of = np.empty(len(order), dtype=np.int64)  # tensor -> its position among its op's
    counts = np.bincount(graph.tensor_op, minlength=graph.num_ops)
    output_of[order] = np.arange(len(order)) - np.repeat(np.cumsum(counts) - counts, counts)
    first_of_group = {}
    for i, c in enumerate(graph.colocation.tolist()):
        first_of_group.setdefault(c, i)
    group_sizes = np.bincount(graph.colocation)
    ops = []
    for i, name in enumerate(graph.names):
        op = out.op.add(name=name, type=graph.op_types[i],
                        persistent_bytes=int(graph.persistent_bytes[i]),
                        shape_unknown=not bool(graph.shape_known[i]))
        c = int(graph.colocation[i])
        if group_sizes[c] > 1:
            op.colocation_group = graph.names[first_of_group[c]]
        for kind in graph.kernel_kinds:
            if np.isfinite(cost_graph.times[kind][i]):
                op.time.add(device_kind=kind, seconds=float(cost_graph.times[kind][i]))
        ops.append(op)
    for t in order.tolist():
        ops[int(graph.tensor_op[t])].output_bytes.append(int(graph.tensor_bytes[t]))
    inputs = [[] for _ in ops]  # each op's input tensors, in the order written
    for t, dst in zip(graph.edge_tensor.tolist(), graph.edge_dst.tolist()):
        src = int(graph.tensor_op[t])
        ops[dst].input.add(op=graph.names[src], output=int(output_of[t]))
        inputs[dst].append(t)
    # output_alias only where the op type would say otherwise (a reader derives it then).
    outputs = np.split(order, np.cumsum(counts)[:-1])
    for i, op in enumerate(ops):
        actual = graph.tensor_alias[outputs[i]].tolist()
        if actual != buffers.output_aliases(op.type, len(actual), inputs[i]):
            op.output_alias.extend(a if a < 0 else (inputs[i].index(a) if a in inputs[i]
                                                    else buffers.ALIAS_NONE) for a in actual)
    for src, dst in zip(graph.ctrl_src.tolist(), graph.ctrl_dst.tolist()):
        ops[dst].control_input.append(graph.names[src])
    return out


# ------------------------------------------------------------------------------- files
def file_format(path: str | os.PathLike) -> str:
    """``"text"`` for ``*.pbtxt`` / ``*.txt``, ``"json"`` for ``*.json``, else ``"binary"``."""
    name = os.fspath(path).lower()
    if name.endswith((".pbtxt", ".txt")):
        return "text"
    return "json" if name.endswith(".json") else "binary"


def is_cost_graph_file(path: str | os.PathLike) -> bool:
    """Whether a file name says it holds a cost graph (``*.costgraph.{pbtxt,txt,pb}``,
    ``*.json``) rather than a TensorFlow graph."""
    name = os.path.basename(os.fspath(path)).lower()
    return name.endswith((".costgraph.pbtxt", ".costgraph.txt", ".costgraph.pb", ".json"))


def encode(cost_graph: CostGraph, fmt: str) -> bytes:
    """The cost graph's bytes in ``fmt`` (one of :data:`FORMATS`)."""
    proto = to_proto(cost_graph)
    if fmt == "text":
        return text_format.MessageToString(proto).encode("utf-8")
    if fmt == "json":
        return json_format.MessageToJson(proto, preserving_proto_field_name=True,
                                         indent=1).encode("utf-8")
    if fmt == "binary":
        return proto.SerializeToString()
    raise ConfigError(f"fmt must be one of {FORMATS}, got {fmt!r}")


def _not_a_cost_graph(data: bytes, fmt: str, what: str, error: Exception) -> str:
    """Why ``data`` did not parse as a ``fmt`` cost graph, naming what it is where that can be
    told: TensorFlow's own profiling formats (what a user with a FULL_TRACE step has at hand),
    a cost profile of this package (which goes with its graph, as ``cost_profile``), or binary
    data of neither."""
    other = tensorflow_format(data) if fmt != "binary" else None
    if other == "GraphDef":
        return (f"{what} is a TensorFlow GraphDef, not this package's CostGraph: a file named "
                "*.json or *.costgraph.{pbtxt,txt,pb} is read as a cost graph; give the "
                "GraphDef as .pb or .pbtxt (a MetaGraphDef as .meta)")
    if other:
        return f"{what} is TensorFlow's own {other}, not this package's CostGraph: {_ADVICE}"
    if fmt == "text":
        try:
            profile = text_format.Parse(data.decode("utf-8"), cost_profile_pb2.CostProfile())
        except (text_format.ParseError, UnicodeDecodeError):
            profile = None
        if profile is not None and profile.op:
            return (f"{what} is a cost profile (tf-autoplace profile --out_profile), not a "
                    "cost graph: give it with the graph it times, as --cost_profile "
                    "(cost_profile=)")
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return (f"{what} is not a {fmt} CostGraph ({first})"
            + (": TensorFlow's binary RunMetadata, StepStats and CostGraphDef are other "
               f"formats; {_ADVICE}" if fmt == "binary" else ""))


def decode(data: bytes, fmt: str, *, what: str = "the cost graph") -> CostGraph:
    """A cost graph from its bytes in ``fmt`` (one of :data:`FORMATS`); ``what`` names the
    source in error messages."""
    if fmt not in FORMATS:
        raise ConfigError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    proto = cost_graph_pb2.CostGraph()
    try:
        if fmt == "binary":
            proto.ParseFromString(data)
        elif fmt == "text":
            text_format.Parse(data.decode("utf-8"), proto)
        else:
            json_format.Parse(data.decode("utf-8"), proto)
    except (_pb_message.DecodeError, text_format.ParseError, json_format.ParseError,
            UnicodeDecodeError) as e:
        raise InvalidGraphError(_not_a_cost_graph(data, fmt, what, e)) from e
    try:
        return from_proto(proto)
    except InvalidGraphError as e:
        raise InvalidGraphError(f"{what}: {e}") from e


def read(path: str | os.PathLike) -> CostGraph:
    """Read a cost graph file, in the form its name says (:func:`file_format`)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        shown = repr(os.fspath(path))
        hint = ""
        if len(shown) > 120 or isinstance(path, bytes) and b"\n" in path:
            shown = shown[:60] + "..."
            hint = ("; that looks like a cost graph's contents, not a path: decode them with "
                    "tf_autoplace.graph.costgraph.decode(data, format)")
        raise InvalidGraphError(f"cannot read cost graph {shown}: "
                                f"{getattr(e, 'strerror', None) or e}{hint}") from e
    return decode(data, file_format(path), what=repr(os.fspath(path)))


def write(path: str | os.PathLike, cost_graph: CostGraph) -> None:
    """Write a cost graph in the form its file name says (raises OSError if it cannot)."""
    data = encode(cost_graph, file_format(path))
    with open(path, "wb") as f:
        f.write(data)
