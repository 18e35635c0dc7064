"""The one place that touches TensorFlow's private Grappler Python APIs.

A Grappler item (``tensorflow.python.grappler._pywrap_tf_item``) gives static shape inference
and ``tensorflow.python.grappler.cluster.Cluster`` a virtual cluster whose ``MeasureCosts`` runs
Grappler's analytical op-level cost estimator. Both are private, so every call goes through this
module; if a TF release moves them, only this file changes.

Facts this module relies on (checked on TF 2.21):
- An item needs fetch nodes, taken from the ``train_op`` collection; nodes outside the fan-in of
  the fetches are pruned. We therefore fetch every sink node (a node nobody consumes).
- ``MeasureCosts`` returns op performances only with ``disable_detailed_stats=False``, and costs
  the op on the device named in the node's ``device`` field, which must be a device of the
  virtual cluster. ``compute_cost`` is in nanoseconds but only to whole microseconds (it comes
  from ``op_end_rel_micros``), so sub-microsecond ops would cost 0; the step stats (timeline on)
  carry the same time in nanoseconds, which we read instead. On the CPU a few ops (Softmax
  of small tensors) end there tens of nanoseconds *before* they start, by an amount that
  depends on where the op is on the timeline; such a time is taken as 0.
- Every ``Placeholder`` becomes a feed of the item, and ``GetOpProperties`` (static inference with
  ``assume_valid_feeds=False``) forgets the shape of fed tensors: a ``[8, 16]`` placeholder
  comes back with an unknown first dimension, and a ``[None, 224, 224, 3]`` one with every
  dimension unknown. For shape inference we therefore stand in an ``Empty`` op of the
  placeholder's static shape (not a feed, value unknown) for each placeholder of known rank:
  where a dimension is unknown, its shape input packs a scalar of unknown value with the known
  sizes, and inference keeps those (``[?, 224, 224, 3]``).
- The item also allocates a made-up value of its static shape for every ``Placeholder`` it feeds
  (``GrapplerItemFromMetaGraphDef``): a ``[10**9, 4096]`` float placeholder is a 16 TB
  allocation, and the process dies with a segfault (1.6 GB for ``[10**5, 4096]``). Costing
  therefore reads the same ``Empty`` stand-ins, which nothing allocates. Grappler costs a
  Placeholder like a Const (nothing to compute), and an ``Empty`` by the bytes it writes, so each
  stand-in gets the time Grappler gives its shape's Const: the placeholder's own.
- The analytical estimate of one node is a function of its ``OpInfo`` alone: op type, attrs,
  the dtype, shape and (where static inference knows it) value of every input and output, and
  the device. Unrolled RNNs and stacked layers repeat the same few hundred contexts tens of
  thousands of times, so :func:`measure_costs` costs one node per distinct context
  (:func:`_distinct_ops`) in a small graph that gives each the same inputs, and hands its time
  to every node with that context (85k ops of an 8-layer NMT: 1.5k contexts). That the
  small graph gives the same times as the whole one is checked on real graphs
  (``tests/graph/test_grappler.py``), with ``distinct=False`` as the reference.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys

import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import device_properties_pb2
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow.core.grappler.costs import op_performance_data_pb2
from tensorflow.python.grappler import _pywrap_tf_item as tf_item
from tensorflow.python.grappler import cluster as gcluster

from tf_autoplace.core.fds import redirected
from tf_autoplace.errors import InvalidGraphError

_VIRTUAL_DEVICE = {"GPU": "/device:GPU:0", "CPU": "/device:CPU:0"}
_STATIC_SHAPE = "_autoplace_static_shape"  # a placeholder's shape Const: <placeholder>/<this>
_PARTIAL_SHAPE = "_autoplace_partial_shape"  # ... the Pack of one partly known
# The op types of v1 control flow (tf.compat.v1.while_loop, cond). Grappler's time for a
# loop's Merge depends on when its inputs arrive, not only on their properties, so a graph with
# any of them is costed whole (measure_costs).
V1_CONTROL_FLOW = frozenset({"Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond",
                             "RefSwitch", "RefMerge", "RefEnter", "RefExit",
                             "RefNextIteration"})


@contextlib.contextmanager
def _quiet_stderr():
    """Grappler logs one C++ line per node on a machine without CUDA; keep the terminal usable
    (standard error's descriptor goes to the null device meanwhile, shared between threads:
    :func:`tf_autoplace.core.fds.redirected`)."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, io.UnsupportedOperation, ValueError):
        yield
        return
    with redirected(fd, lambda: open(os.devnull, "w")):
        yield


def sink_nodes(graph_def) -> list[str]:
    """Names of nodes whose outputs nobody reads (data or control)."""
    consumed = set()
    for node in graph_def.node:
        for inp in node.input:
            consumed.add(inp.lstrip("^").split(":")[0])
    return [n.name for n in graph_def.node if n.name not in consumed]


class _Item:
    """A Grappler item made once from a graph's bytes. TensorFlow's ``Item`` wrapper keeps two
    Python copies of the graph and compares them on every use (to rebuild the item if the
    graph changed), for a graph nothing here changes after the item is made."""

    def __init__(self, data: bytes):
        self.tf_item = tf_item.TF_NewItem(data, True, False)


def _item_bytes(mg: meta_graph_pb2.MetaGraphDef) -> bytes:
    """``mg`` (a private copy, changed here) with its fetches set to the sinks, serialized for
    :func:`_item`. Separate so that callers can drop the copy, and then the bytes, before
    Grappler builds its own graph from them: on large graphs the three together set the peak
    of ingestion's memory."""
    fetch = mg.collection_def["train_op"].node_list.value
    del fetch[:]
    fetch.extend(sink_nodes(mg.graph_def))
    return mg.SerializeToString()


def _item(data: bytes) -> _Item:
    """A Grappler item of the MetaGraphDef bytes of :func:`_item_bytes`, ignoring colocation
    and keeping the graph's own device annotations."""
    try:
        with _quiet_stderr():
            return _Item(data)
    except (tf.errors.OpError, ValueError, TypeError) as e:
        raise InvalidGraphError(f"Grappler cannot read the graph: {e}") from e


def _shape_const(graph_def, name: str, shape, *, device: str = ""):
    """Add to ``graph_def`` an int32 Const holding the dims of ``shape`` (a fully known
    TensorShapeProto), the input an ``Empty`` of that shape reads; returns the node."""
    dims = graph_def.node.add(name=name, op="Const", device=device)
    dims.attr["dtype"].type = types_pb2.DT_INT32
    dims.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(
        [d.size for d in shape.dim], dtype=tf.int32, shape=[len(shape.dim)]))
    return dims


def _partly_known_placeholder(graph_def) -> bool:
    """Whether a Placeholder of ``graph_def`` has a shape of known rank with a dimension of
    unknown size."""
    return any(node.op == "Placeholder" and "shape" in node.attr
               and not node.attr["shape"].shape.unknown_rank
               and any(d.size < 0 for d in node.attr["shape"].shape.dim)
               for node in graph_def.node)


def _unknown_scalar(graph_def, names) -> str:
    """Add to ``graph_def`` an int32 scalar Placeholder (a value static inference does not
    know); returns its name."""
    name = "_autoplace_unknown_dim"
    while name in names:
        name += "_"
    node = graph_def.node.add(name=name, op="Placeholder")
    node.attr["dtype"].type = types_pb2.DT_INT32
    node.attr["shape"].shape.CopyFrom(tf.TensorShape([]).as_proto())
    names.add(name)
    return name


def _partial_shape(graph_def, name: str, shape, unknown: str, *, device: str = ""):
    """Add to ``graph_def`` the int32 vector of ``shape``'s dims (a TensorShapeProto of known
    rank), ``unknown`` where a dim is unknown, packed from scalars: static inference reads it
    as a partly known shape. Returns the Pack node."""
    inputs = []
    for k, d in enumerate(shape.dim):
        if d.size < 0:
            inputs.append(unknown)
            continue
        const = graph_def.node.add(name=f"{name}/{k}", op="Const", device=device)
        const.attr["dtype"].type = types_pb2.DT_INT32
        const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(d.size, dtype=tf.int32))
        inputs.append(const.name)
    pack = graph_def.node.add(name=name, op="Pack", input=inputs, device=device)
    pack.attr["T"].type = types_pb2.DT_INT32
    pack.attr["N"].i = len(inputs)
    pack.attr["axis"].i = 0
    return pack


def _unfeed_static_placeholders(meta_graph: meta_graph_pb2.MetaGraphDef, *,
                                unknown_dim: int | None = None):
    """A copy where each Placeholder of fully known shape (and a plain dtype) is an ``Empty`` of
    that shape, so Grappler does not treat it as a feed of unknown shape (module docstring).

    A Placeholder of known rank whose dimensions are partly unknown (a TF1 graph's ``None``
    batch) is one too. Without ``unknown_dim`` (ingestion's shape inference) its shape input
    packs a scalar of unknown value (itself a feed) where a dimension is unknown, so inference
    keeps the known ones ([?, 224, 224, 3], as TensorFlow's own): as a feed, every dimension of
    the image and of what follows it was unknown, each counted ``unknown_dim`` long. With
    ``unknown_dim`` (costing), each unknown dimension is ``unknown_dim`` long, so that op times
    count the batch the tensor sizes are counted with."""
    mg = meta_graph_pb2.MetaGraphDef()
    mg.CopyFrom(meta_graph)
    names = {n.name for n in mg.graph_def.node}
    unknown = None  # the scalar of unknown value that partly known shapes pack
    for node in list(mg.graph_def.node):
        shape = node.attr["shape"].shape if "shape" in node.attr else None
        dtype = node.attr["dtype"].type if "dtype" in node.attr else types_pb2.DT_INVALID
        if (node.op != "Placeholder" or shape is None or shape.unknown_rank
                or dtype in (types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT, types_pb2.DT_INVALID)):
            continue
        if unknown_dim is not None:
            shape = tf.TensorShape([unknown_dim if d.size < 0 else d.size
                                    for d in shape.dim]).as_proto()
        partial = any(d.size < 0 for d in shape.dim)
        # (Another name for a partly known shape: costing reads ingestion's properties by
        # name, and its stand-in there is the Const of the whole shape.)
        dims_name = f"{node.name}/{_PARTIAL_SHAPE if partial else _STATIC_SHAPE}"
        if dims_name in names:
            continue
        if partial:
            if unknown is None:
                unknown = _unknown_scalar(mg.graph_def, names)
            dims = _partial_shape(mg.graph_def, dims_name, shape, unknown, device=node.device)
        else:
            dims = _shape_const(mg.graph_def, dims_name, shape, device=node.device)
        node.op = "Empty"
        node.ClearField("attr")
        node.attr["dtype"].type = dtype
        node.input.append(dims.name)
    return mg


def output_properties(meta_graph: meta_graph_pb2.MetaGraphDef) -> dict[str, list[bytes]]:
    """Node name -> its outputs' ``OpInfo.TensorProperties`` (dtype, shape with -1 for unknown
    dims, value where static inference knows it), serialized as Grappler returns them: read
    one with :func:`parse_properties`. Kept serialized, they take a fraction of the memory of
    parsed messages, and equal properties are equal bytes."""
    return output_properties_of(item_bytes(meta_graph))


def item_bytes(meta_graph: meta_graph_pb2.MetaGraphDef) -> bytes:
    """The bytes :func:`output_properties_of` infers ``meta_graph``'s shapes from."""
    return _item_bytes(_unfeed_static_placeholders(meta_graph))


def output_properties_of(data: bytes) -> dict[str, list[bytes]]:
    """:func:`output_properties` from :func:`item_bytes`, for a caller that keeps neither the
    graph's message nor these bytes while Grappler infers shapes (the peak of ingestion's
    memory on large graphs)."""
    item = _item(data)
    del data  # Grappler has its own copy; ours would only add to the peak below
    try:
        with _quiet_stderr():
            return tf_item.TF_GetOpProperties(item.tf_item)
    except (tf.errors.OpError, ValueError, TypeError) as e:
        raise InvalidGraphError(f"Grappler cannot infer the graph's shapes: {e}") from e


def parse_properties(serialized: bytes) -> op_performance_data_pb2.OpInfo.TensorProperties:
    """One tensor's properties from :func:`output_properties`."""
    return op_performance_data_pb2.OpInfo.TensorProperties.FromString(serialized)


def device_properties(kind: str, *, num_cores: int, frequency_mhz: int,
                      memory_bandwidth_gbps: float, architecture: str = "",
                      memory_bytes: int = 0) -> device_properties_pb2.DeviceProperties:
    """DeviceProperties as Grappler's OpLevelCostEstimator reads them (bandwidth in KB/s)."""
    props = device_properties_pb2.DeviceProperties(
        type=kind, num_cores=num_cores, frequency=frequency_mhz,
        bandwidth=int(memory_bandwidth_gbps * 1e6), memory_size=memory_bytes)
    if kind == "GPU":
        props.environment["architecture"] = architecture or "7.0"
    return props


def costing_properties(meta_graph: meta_graph_pb2.MetaGraphDef, unknown_dim: int = 1,
                       tensor_properties: dict | None = None) -> dict[str, list[bytes]]:
    """:func:`output_properties` of ``meta_graph`` as :func:`measure_costs` costs it: with each
    unknown dimension of a placeholder ``unknown_dim`` long. What follows such a placeholder
    (a gradient's ``Shape``, the sizes a ``Conv2DBackpropInput`` reads) has values only then,
    and costs nothing without them. ``tensor_properties``: ingestion's output properties,
    returned as they are where no placeholder's shape is partly known (the same, inferred
    once); else inferred again."""
    if tensor_properties is not None and not _partly_known_placeholder(meta_graph.graph_def):
        return tensor_properties
    return output_properties_of(_item_bytes(
        _unfeed_static_placeholders(meta_graph, unknown_dim=unknown_dim)))


def measure_costs(meta_graph: meta_graph_pb2.MetaGraphDef, kind: str,
                  props: device_properties_pb2.DeviceProperties, *,
                  tensor_properties: dict | None = None, distinct: bool = True,
                  unknown_dim: int = 1) -> dict[str, float]:
    """Node name -> analytical compute time in seconds with every node on one device ``props``.

    Args:
      meta_graph: the graph (not modified).
      kind: ``"GPU"`` or ``"CPU"``, the kind of ``props``.
      props: the device, as :func:`device_properties` makes it.
      tensor_properties: :func:`costing_properties` of ``meta_graph`` and ``unknown_dim``, if
        the caller has them (a cost model costing several kinds of device does); else they
        are inferred here.
      distinct: cost one node per distinct context (module docstring), unless the graph has
        v1 control flow; False costs the whole graph, the reference the distinct path is
        tested against.
      unknown_dim: the length an unknown dimension of a placeholder is costed with (the
        elements ingestion counts for it), so that a ``None`` batch costs the batch assumed.

    Returns:
      The times; nodes Grappler does not report are absent (the caller falls back).

    Raises:
      InvalidGraphError: Grappler cannot read or cost the graph.
    """
    # No made-up feeds (module docstring); unknown dimensions of the assumed length.
    mg = _unfeed_static_placeholders(meta_graph, unknown_dim=unknown_dim)
    representative = None
    if distinct and not any(node.op in V1_CONTROL_FLOW for node in mg.graph_def.node):
        if tensor_properties is None:
            tensor_properties = costing_properties(meta_graph, unknown_dim)
        costed, representative = _distinct_ops(mg, tensor_properties)
    else:
        costed = mg
    device = _VIRTUAL_DEVICE[kind]
    for node in costed.graph_def.node:
        node.device = device
        node.attr.pop("_class", None)
    item = _item(_item_bytes(costed))
    cluster = gcluster.Cluster(disable_detailed_stats=False, disable_timeline=False,
                               devices=[device_properties_pb2.NamedDevice(name=device,
                                                                          properties=props)])
    try:
        with _quiet_stderr():
            op_perfs, _, step_stats = cluster.MeasureCosts(item)
    except tf.errors.OpError as e:
        raise InvalidGraphError(f"Grappler could not cost the graph: {e}") from e
    finally:
        cluster.Shutdown()
    times = {p.node: p.compute_cost * 1e-9 for p in op_perfs}  # whole microseconds only
    for dev_stats in step_stats.dev_stats:
        for ns in dev_stats.node_stats:
            if ns.node_name in times:  # some end before they start (module docstring): 0
                times[ns.node_name] = max(ns.op_end_rel_nanos - ns.op_start_rel_nanos, 0) * 1e-9
    if representative is not None:
        times = {name: times[rep] for name, rep in representative.items() if rep in times}
    placeholders = {n.name for n in meta_graph.graph_def.node if n.op == "Placeholder"}
    for node in mg.graph_def.node:  # a stand-in Empty costs what its placeholder does
        if node.op == "Empty" and node.name in placeholders:
            times.pop(node.name, None)
            shape_time = times.pop(f"{node.name}/{_STATIC_SHAPE}", None)
            if shape_time is not None:
                times[node.name] = shape_time
    return times


_HANDLE_TYPES = (types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT, types_pb2.DT_INVALID)


def _stand_in_kind(tp) -> str | None:
    """How an input of properties ``tp`` can be given to a node without its producer:
    ``"const"`` (static inference knows its value: a Const of that value), ``"empty"`` (a plain
    tensor of fully known shape: an ``Empty`` of that shape, which inference does not
    evaluate) or None (a handle, a reference, a partly known shape or no properties: only
    the producer itself gives the same properties)."""
    if tp is None or tp.dtype in _HANDLE_TYPES or tp.dtype > 100:
        return None
    if tp.HasField("value"):
        return "const"
    if (tp.dtype == types_pb2.DT_STRING or tp.shape.unknown_rank
            or any(d.size < 0 for d in tp.shape.dim)):
        return None
    return "empty"


def _distinct_ops(mg: meta_graph_pb2.MetaGraphDef, tensor_properties: dict
                  ) -> tuple[meta_graph_pb2.MetaGraphDef, dict[str, str]]:
    """A graph in which one node of every distinct costing context has inputs of the same
    properties as in ``mg``, and node name -> the name of the node costed for it.

    A node's context is its op type, its attrs (but ``_class``) and the properties of its
    inputs and outputs; an input of unknown properties is taken as the producer's own, so it
    matches nothing else. In the small graph each input of a costed node is a stand-in
    (:func:`_stand_in_kind`) or, where none gives the same properties, the node's own
    producer, itself with stand-ins for its inputs, and so on. Control inputs are dropped:
    they order ops but do not change what one costs.
    """
    nodes = mg.graph_def.node
    by_name = {node.name: node for node in nodes}

    def props_of(inp: str) -> bytes | None:
        name, _, port = inp.partition(":")
        outputs = tensor_properties.get(name)
        port = int(port or 0)
        return outputs[port] if outputs is not None and port < len(outputs) else None

    first: dict[tuple, str] = {}
    representative: dict[str, str] = {}
    for node in nodes:
        data = [inp for inp in node.input if not inp.startswith("^")]
        inputs = [props_of(inp) for inp in data]
        context = (node.op,
                   tuple(sorted((k, v.SerializeToString(deterministic=True))
                                for k, v in node.attr.items() if k != "_class")),
                   tuple(inp if tp is None else tp for tp, inp in zip(inputs, data)),
                   tuple(tensor_properties.get(node.name, ())))
        representative[node.name] = first.setdefault(context, node.name)

    small = meta_graph_pb2.MetaGraphDef()
    small.graph_def.versions.CopyFrom(mg.graph_def.versions)
    small.graph_def.library.CopyFrom(mg.graph_def.library)
    stand_ins: dict[bytes, str] = {}

    def stand_in(key: bytes, tp, how: str) -> str:
        name = stand_ins.get(key)
        if name is not None:
            return name
        name = f"_autoplace_stand_in_{len(stand_ins)}"
        while name in by_name or f"{name}/shape" in by_name:
            name += "_"
        stand_ins[key] = name
        if how == "const":
            const = small.graph_def.node.add(name=name, op="Const")
            const.attr["dtype"].type = tp.dtype
            const.attr["value"].tensor.CopyFrom(tp.value)
            return name
        dims = _shape_const(small.graph_def, f"{name}/shape", tp.shape)
        empty = small.graph_def.node.add(name=name, op="Empty", input=[dims.name])
        empty.attr["dtype"].type = tp.dtype
        return name

    todo = list(dict.fromkeys(representative.values()))
    added = set()
    while todo:
        name = todo.pop()
        if name in added:
            continue
        added.add(name)
        node = by_name[name]
        copy = small.graph_def.node.add()
        copy.CopyFrom(node)
        del copy.input[:]
        for inp in node.input:
            if inp.startswith("^"):
                continue
            key = props_of(inp)
            tp = None if key is None else parse_properties(key)
            how = _stand_in_kind(tp)
            if how is None:
                copy.input.append(inp)
                todo.append(inp.partition(":")[0])
            else:
                copy.input.append(stand_in(key, tp, how))
    return small, representative


def dtype_size(dtype_enum: int) -> int:
    """Bytes per element; 0 for handles and variable-size types (resource, variant, string)."""
    base = dtype_enum - 100 if dtype_enum > 100 else dtype_enum  # reference types
    if base in (types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT, types_pb2.DT_STRING,
                types_pb2.DT_INVALID):
        return 0
    try:
        return tf.dtypes.as_dtype(base).size
    except (TypeError, ValueError):
        return 0


def is_handle_or_ref(dtype_enum: int) -> bool:
    """True for resource handles and reference types: TF keeps such edges on one device."""
    return dtype_enum == types_pb2.DT_RESOURCE or dtype_enum > 100
