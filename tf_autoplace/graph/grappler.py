"""The one place that touches TensorFlow's private Grappler Python APIs.

``tensorflow.python.grappler.item.Item`` gives static shape inference (``GetOpProperties``) and
``tensorflow.python.grappler.cluster.Cluster`` a virtual cluster whose ``MeasureCosts`` runs
Grappler's analytical op-level cost estimator. Both are private, so every call goes through this
module; if a TF release moves them, only this file changes.

Facts this module relies on (checked on TF 2.21):
- ``Item`` needs fetch nodes, taken from the ``train_op`` collection; nodes outside the fan-in of
  the fetches are pruned. We therefore fetch every sink node (a node nobody consumes).
- ``MeasureCosts`` returns op performances only with ``disable_detailed_stats=False``, and costs
  the op on the device named in the node's ``device`` field, which must be a device of the
  virtual cluster. ``compute_cost`` is in nanoseconds but only to whole microseconds (it comes
  from ``op_end_rel_micros``), so sub-microsecond ops would cost 0; the step stats (timeline on)
  carry the same time in nanoseconds, which we read instead.
- Every ``Placeholder`` becomes a feed of the item, and ``GetOpProperties`` (static inference with
  ``assume_valid_feeds=False``) forgets the shape of fed tensors: a ``[8, 16]`` placeholder
  comes back with an unknown first dimension. For shape inference we therefore stand in an
  ``Empty`` op of the placeholder's static shape (not a feed, value unknown) for each
  placeholder whose shape is fully known.
- ``Item`` also allocates a made-up value of its static shape for every ``Placeholder`` it feeds
  (``GrapplerItemFromMetaGraphDef``): a ``[10**9, 4096]`` float placeholder is a 16 TB
  allocation, and the process dies with a segfault (1.6 GB for ``[10**5, 4096]``). Costing
  therefore reads the same ``Empty`` stand-ins, which nothing allocates. Grappler costs a
  Placeholder like a Const (nothing to compute), and an ``Empty`` by the bytes it writes, so each
  stand-in gets the time Grappler gives its shape's Const: the placeholder's own.
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
from tensorflow.python.grappler import cluster as gcluster
from tensorflow.python.grappler import item as gitem

from tf_autoplace.errors import InvalidGraphError

_VIRTUAL_DEVICE = {"GPU": "/device:GPU:0", "CPU": "/device:CPU:0"}
_STATIC_SHAPE = "_autoplace_static_shape"  # a placeholder's shape Const: <placeholder>/<this>


@contextlib.contextmanager
def _quiet_stderr():
    """Grappler logs one C++ line per node on a machine without CUDA; keep the terminal usable."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, io.UnsupportedOperation, ValueError):
        yield
        return
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def sink_nodes(graph_def) -> list[str]:
    """Names of nodes whose outputs nobody reads (data or control)."""
    consumed = set()
    for node in graph_def.node:
        for inp in node.input:
            consumed.add(inp.lstrip("^").split(":")[0])
    return [n.name for n in graph_def.node if n.name not in consumed]


def _item(meta_graph: meta_graph_pb2.MetaGraphDef) -> gitem.Item:
    mg = meta_graph_pb2.MetaGraphDef()
    mg.CopyFrom(meta_graph)
    fetch = mg.collection_def["train_op"].node_list.value
    del fetch[:]
    fetch.extend(sink_nodes(mg.graph_def))
    try:
        with _quiet_stderr():
            return gitem.Item(mg, ignore_colocation=True, ignore_user_placement=False)
    except (tf.errors.OpError, ValueError, TypeError) as e:
        raise InvalidGraphError(f"Grappler cannot read the graph: {e}") from e


def _unfeed_static_placeholders(meta_graph: meta_graph_pb2.MetaGraphDef):
    """A copy where each Placeholder of fully known shape (and a plain dtype) is an ``Empty`` of
    that shape, so Grappler does not treat it as a feed of unknown shape (module docstring)."""
    mg = meta_graph_pb2.MetaGraphDef()
    mg.CopyFrom(meta_graph)
    names = {n.name for n in mg.graph_def.node}
    for node in list(mg.graph_def.node):
        shape = node.attr["shape"].shape if "shape" in node.attr else None
        dtype = node.attr["dtype"].type if "dtype" in node.attr else types_pb2.DT_INVALID
        if (node.op != "Placeholder" or shape is None or shape.unknown_rank
                or any(d.size < 0 for d in shape.dim)
                or dtype in (types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT, types_pb2.DT_INVALID)):
            continue
        dims_name = f"{node.name}/{_STATIC_SHAPE}"
        if dims_name in names:
            continue
        dims = mg.graph_def.node.add(name=dims_name, op="Const", device=node.device)
        dims.attr["dtype"].type = types_pb2.DT_INT32
        dims.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(
            [d.size for d in shape.dim], dtype=tf.int32, shape=[len(shape.dim)]))
        node.op = "Empty"
        node.ClearField("attr")
        node.attr["dtype"].type = dtype
        node.input.append(dims.name)
    return mg


def output_properties(meta_graph: meta_graph_pb2.MetaGraphDef) -> dict:
    """Node name -> list of OpInfo.TensorProperties (dtype, shape with -1 for unknown dims)."""
    item = _item(_unfeed_static_placeholders(meta_graph))
    try:
        with _quiet_stderr():
            return item.GetOpProperties()
    except (tf.errors.OpError, ValueError, TypeError) as e:
        raise InvalidGraphError(f"Grappler cannot infer the graph's shapes: {e}") from e


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


def measure_costs(meta_graph: meta_graph_pb2.MetaGraphDef, kind: str,
                  props: device_properties_pb2.DeviceProperties) -> dict[str, float]:
    """Node name -> analytical compute time in seconds with every node on one device ``props``.

    Nodes Grappler does not report are absent from the result (the caller falls back)."""
    mg = _unfeed_static_placeholders(meta_graph)  # no made-up feeds (module docstring)
    device = _VIRTUAL_DEVICE[kind]
    for node in mg.graph_def.node:
        node.device = device
        node.attr.pop("_class", None)
    item = _item(mg)
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
            if ns.node_name in times:
                times[ns.node_name] = (ns.op_end_rel_nanos - ns.op_start_rel_nanos) * 1e-9
    placeholders = {n.name for n in meta_graph.graph_def.node if n.op == "Placeholder"}
    for node in mg.graph_def.node:  # a stand-in Empty costs what its placeholder does
        if node.op == "Empty" and node.name in placeholders:
            times.pop(node.name, None)
            shape_time = times.pop(f"{node.name}/{_STATIC_SHAPE}", None)
            if shape_time is not None:
                times[node.name] = shape_time
    return times


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
