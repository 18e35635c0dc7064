"""Workload: one training step of a graph, as something that can be run on real devices.

A placed graph can only be timed when we know what a step runs (the fetches: the train op),
what it is fed, and how its variables get their first values. A :class:`Workload` holds those
with the GraphDef; :mod:`tf_autoplace.hw.runner` runs it under any device assignment.

Defaults, when the caller does not say (:meth:`Workload.from_graph`):

* **fetches**: a graph's or MetaGraphDef's ``train_op`` collection; else an op named
  ``train_op`` or ``train``; else every sink (an op nobody reads) that is not an initializer, a
  Saver op (``save/``), a dead end of the initializer's fan-in, an op that depends on an
  initializer (a group of them, ``iterator.initializer`` of a strategy's iterator: run in a
  step, it would initialize again at every step) or a queue's close op (a queue
  runner's: fetched, it would close the queue the step reads), and of those, when some apply
  an optimizer's update (``ApplyAdam``, ``ResourceApply*``, ...), only those: the step, not a
  ``Scaffold``'s init and ready ops or the summaries a program writes. With them, the
  enqueue ops a queue runner runs (sinks) of the queues the step reads and nothing else fills.
* **init**: an op named ``init`` (what ``tf.compat.v1.global_variables_initializer`` makes, or
  ``local_variables_initializer`` when it was made first) and every variable's initializer,
  the ``<variable>/Assign`` op that assigns it. Then the
  lookup tables' initializers (a graph's or MetaGraphDef's ``table_initializer`` collection,
  else an op named ``init_all_tables``, and ``InitializeTable*`` ops and the table imports
  that read no checkpoint, ``KeyValueTensorInitializer``'s) and every iterator's
  (``MakeIterator``, ``MultiDeviceIteratorInit``), which a TF1 program runs with
  ``tf.compat.v1.tables_initializer()`` and ``iterator.initializer`` before its steps.
* **feeds**: every ``Placeholder`` in the fan-in of the fetches and init gets a value of its
  static shape, drawn from ``numpy.random.default_rng(seed)``: standard normal floats, zero
  integers (a valid index for every embedding table and class count) and ``False`` booleans.
  A needed placeholder whose shape is not fully known is a :class:`ConfigError` naming it: give
  its value in ``feeds``. Step times do not depend on the values of these ops' inputs, only on
  their shapes, with the exception of data-dependent ops (e.g. ``Unique``), which would need the
  real data: feed it.

A step that dequeues from a queue nothing in the step or its init fills (a queue runner's
thread does, in the program) cannot be run on its own: the first step would wait forever. That
is a :class:`MeasurementError` naming the dequeue, when the workload is made.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2, types_pb2

from tf_autoplace.errors import ConfigError, InputValueError, MeasurementError
from tf_autoplace.graph import grappler, ingest

_VARIABLE_OPS = ingest.VARIABLE_OPS


def _node_name(tensor_or_op: str) -> str:
    return tensor_or_op.lstrip("^").split(":")[0]


def _fan_out(graph_def: graph_pb2.GraphDef, roots) -> set[str]:
    """Names of the nodes that depend on the nodes ``roots``, the roots included."""
    consumers: dict[str, list[str]] = {n.name: [] for n in graph_def.node}
    for n in graph_def.node:
        for i in n.input:
            consumers.setdefault(_node_name(i), []).append(n.name)
    return _reach(consumers, roots)


def fan_in(graph_def: graph_pb2.GraphDef, roots) -> set[str]:
    """Names of the nodes ``roots`` (op or tensor names) depend on, the roots included."""
    return _reach({n.name: [_node_name(i) for i in n.input] for n in graph_def.node}, roots)


def _reach(edges: dict[str, list[str]], roots) -> set[str]:
    """The nodes of ``edges`` (name -> the names it leads to) reached from ``roots`` (op or
    tensor names), the roots included."""
    seen, stack = set(), [_node_name(r) for r in roots]
    while stack:
        name = stack.pop()
        if name in seen or name not in edges:
            continue
        seen.add(name)
        stack.extend(edges[name])
    return seen


_DEQUEUE_OPS = frozenset({"QueueDequeue", "QueueDequeueV2", "QueueDequeueMany",
                          "QueueDequeueManyV2", "QueueDequeueUpTo", "QueueDequeueUpToV2"})
_ENQUEUE_OPS = frozenset({"QueueEnqueue", "QueueEnqueueV2", "QueueEnqueueMany",
                          "QueueEnqueueManyV2"})


def _with_queue_fillers(graph_def, by_name, fetches: tuple[str, ...], init) -> tuple[str, ...]:
    """``fetches`` and the enqueue ops, run by nothing else (sinks: a queue runner's), of the
    queues the step dequeues from that neither it nor the init fills: one step then fills
    what it reads, as the program's queue runner thread would."""
    needed = fan_in(graph_def, list(fetches) + list(init))
    filled = {_node_name(by_name[n].input[0]) for n in needed
              if by_name[n].op in _ENQUEUE_OPS and by_name[n].input}
    read = {_node_name(by_name[n].input[0]) for n in fan_in(graph_def, fetches)
            if by_name[n].op in _DEQUEUE_OPS and by_name[n].input}
    sinks = set(grappler.sink_nodes(graph_def))
    fillers = [n.name for n in graph_def.node if n.op in _ENQUEUE_OPS and n.input
               and n.name in sinks and _node_name(n.input[0]) in read - filled]
    return tuple(fetches) + tuple(f for f in fillers if f not in fetches)


def _check_queues_are_filled(by_name, step: set[str], needed: set[str]) -> None:
    """MeasurementError if the step dequeues from a queue that no enqueue of the step or of
    its init (``needed``) fills (module docstring)."""
    filled = {_node_name(by_name[name].input[0]) for name in needed
              if by_name[name].op in _ENQUEUE_OPS and by_name[name].input}
    for name in sorted(step):
        node = by_name[name]
        if node.op in _DEQUEUE_OPS and node.input and _node_name(node.input[0]) not in filled:
            raise MeasurementError(
                f"the step dequeues from queue {_node_name(node.input[0])!r} ({name!r}), which "
                "nothing in the step fills (a queue runner's thread does, in the program): it "
                "cannot be run on its own; place without measuring, or give fetches that "
                "enqueue too")


@dataclasses.dataclass(frozen=True, eq=False)
class Workload:
    """One training step of a graph (see the module docstring).

    Attributes:
      graph_def: the graph; its nodes' ``device`` fields are what a run uses unless it is
        given an assignment.
      fetches: op or tensor names one step runs (the train op).
      init: op names run once before the first step (variable initializers).
      feeds: tensor name -> value fed to every step (and to init).
    """

    graph_def: graph_pb2.GraphDef
    fetches: tuple[str, ...]
    init: tuple[str, ...] = ()
    feeds: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        names = {n.name for n in self.graph_def.node}
        if not self.fetches:
            raise ConfigError("a workload needs at least one fetch (the train op)")
        for what, items in (("fetch", self.fetches), ("init op", self.init),
                            ("feed", tuple(self.feeds))):
            missing = [x for x in items if _node_name(x) not in names]
            if missing:
                raise ConfigError(f"{what} {missing[0]!r} is not a node of the graph "
                                  f"({len(missing)} missing)")

    @classmethod
    def from_graph(cls, source, *, fetches=None, init=None, feeds: Mapping | None = None,
                   seed: int = 0, live_graph: tf.Graph | None = None) -> "Workload":
        """A workload of ``source`` (tf.Graph, GraphDef, MetaGraphDef, bytes or file path), its
        fetches, init ops and missing feeds found as the module docstring says.
        ``live_graph``: the tf.Graph that ``source`` (its MetaGraphDef) was read from, whose
        ``train_op`` and ``table_initializer`` collections then count as the MetaGraphDef's
        (what they are for a tf.Graph ``source``)."""
        meta_graph = ingest.load_meta_graph(source)
        live = source if isinstance(source, tf.Graph) else live_graph
        if live is not None:  # (the MetaGraphDef of a tf.Graph carries no collections)
            for key in _STEP_COLLECTIONS:
                ops = [getattr(t, "op", t) for t in live.get_collection(key)]
                names = [op.name for op in ops if isinstance(op, tf.Operation)]
                if names and key not in meta_graph.collection_def:
                    meta_graph.collection_def[key].node_list.value.extend(names)
        graph_def = meta_graph.graph_def
        by_name = {n.name: n for n in graph_def.node}
        init = tuple(init) if init is not None else _default_init(meta_graph, by_name)
        if fetches is None:
            fetches = _with_queue_fillers(graph_def, by_name,
                                          _default_fetches(meta_graph, by_name, init), init)
        fetches = (fetches,) if isinstance(fetches, str) else tuple(fetches)
        given = {}
        for key, value in (feeds or {}).items():
            name, value = _feed(key, value)
            _check_feed(by_name.get(name.rsplit(":", 1)[0]), name, value)
            given[name] = value
        rng = np.random.default_rng(seed)
        needed = fan_in(graph_def, fetches + init)
        _check_queues_are_filled(by_name, fan_in(graph_def, fetches), needed)
        for node in graph_def.node:  # graph order: the draws do not depend on dict order
            name = f"{node.name}:0"
            if node.op != "Placeholder" or node.name not in needed or name in given:
                continue
            given[name] = _synthetic_value(node, rng)
        return cls(graph_def=graph_def, fetches=fetches, init=init, feeds=given)

    @classmethod
    def from_function(cls, fn, *args, **kwargs) -> "Workload":
        """The workload of a ``tf.function`` (traced with ``args``) or a ConcreteFunction: its
        graph, run in a Session. Each captured variable becomes a variable of that graph of the
        same name, initialised with the variable's current value (the function's op names stay
        as they are, so a profile of them fits the function's graph); other captured tensors
        become constants; the arguments are fed and every output and stateful op is fetched.
        A captured resource that is not a variable (a table, a dataset) is a ConfigError."""
        if isinstance(fn, tf.types.experimental.ConcreteFunction):
            concrete = fn
        elif isinstance(fn, tf.types.experimental.GenericFunction):
            concrete = fn.get_concrete_function(*args, **kwargs)
        else:
            raise ConfigError(f"expected a tf.function or ConcreteFunction, got "
                              f"{type(fn).__name__}")
        graph_def = graph_pb2.GraphDef()
        graph_def.CopyFrom(concrete.graph.as_graph_def())
        by_name = {n.name: n for n in graph_def.node}
        init = []
        captured = set()
        for external, internal in concrete.graph.captures:
            node = by_name[internal.op.name]
            captured.add(internal.name)
            if internal.dtype == tf.resource:
                try:
                    value = _variable_value(external, internal)
                except (tf.errors.OpError, TypeError, ValueError, AssertionError) as e:
                    raise ConfigError(f"the function captures {internal.op.name!r}, a resource "
                                      f"that is not a readable variable ({e}); only variables "
                                      "can be run in a Session of their own") from e
                node.op = "VarHandleOp"
                node.ClearField("attr")
                node.attr["dtype"].type = value.dtype.as_datatype_enum
                node.attr["shape"].shape.CopyFrom(value.shape.as_proto())
                node.attr["container"].s = b""
                node.attr["shared_name"].s = node.name.encode()
                const = graph_def.node.add(name=f"{node.name}/_autoplace_initial_value",
                                           op="Const", device=node.device)
                const.attr["dtype"].type = value.dtype.as_datatype_enum
                const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value.numpy()))
                assign = graph_def.node.add(name=f"{node.name}/_autoplace_init",
                                            op="AssignVariableOp", device=node.device,
                                            input=[node.name, const.name])
                assign.attr["dtype"].type = value.dtype.as_datatype_enum
                init.append(assign.name)
            else:
                node.op = "Const"
                node.ClearField("attr")
                node.attr["dtype"].type = internal.dtype.as_datatype_enum
                node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(external.numpy()))
        inputs = [t for t in concrete.inputs if t.name not in captured]
        values = tf.nest.flatten((args, kwargs), expand_composites=True)
        values = [v for v in values if isinstance(v, (tf.Tensor, np.ndarray, tf.Variable))]
        if len(values) != len(inputs):
            raise ConfigError(f"the function takes {len(inputs)} tensor inputs; pass example "
                              f"arguments for them (got {len(values)} tensors)")
        feeds = {t.name: np.asarray(v) for t, v in zip(inputs, values)}
        fetches = [t.name for t in concrete.outputs if t.dtype != tf.resource]
        fetches += [op.name for op in concrete.graph.control_outputs]
        return cls(graph_def=graph_def, fetches=tuple(dict.fromkeys(fetches)), init=tuple(init),
                   feeds=feeds)

    @classmethod
    def from_model(cls, model, seed: int = 0) -> "Workload":
        """The workload of a :class:`tf_autoplace.zoo.ModelGraph` (its train op, initializer
        and ``sample_feed(seed)``)."""
        return cls(graph_def=model.graph.as_graph_def(), fetches=(model.train_op,),
                   init=(model.init_op,), feeds=model.sample_feed(seed))


# A tf.Graph's collections that say what a step and its init run (op names in a MetaGraphDef).
_STEP_COLLECTIONS = ("train_op", tf.compat.v1.GraphKeys.TABLE_INITIALIZERS)


# Ops a TF1 program runs once before its steps besides the variables' initializer: lookup
# tables' initializers (tf.compat.v1.tables_initializer) and initializable iterators'.
_RESOURCE_INIT_OPS = frozenset({"InitializeTable", "InitializeTableV2",
                                "InitializeTableFromTextFile", "InitializeTableFromTextFileV2",
                                "InitializeTableFromDataset", "MakeIterator",
                                "MultiDeviceIteratorInit"})
# A table's import of its keys and values: an initializer (KeyValueTensorInitializer's, in TF
# 2.x) unless it imports what a Saver's restore read from a checkpoint.
_TABLE_IMPORT_OPS = frozenset({"LookupTableImport", "LookupTableImportV2"})
_RESTORE_OPS = frozenset({"Restore", "RestoreV2", "RestoreSlice"})
# Sinks that are not part of a step: closing a queue ends every later step's reads.
_NOT_A_STEP_OPS = frozenset({"QueueClose", "QueueCloseV2"})
# The ops by which an optimizer updates a variable (ApplyAdam, ResourceApplyAdam,
# ResourceSparseApplyAdagrad, ...).
_UPDATE_PREFIXES = ("Apply", "ResourceApply", "SparseApply", "ResourceSparseApply")


def _default_init(meta_graph, by_name) -> tuple[str, ...]:
    graph_def = meta_graph.graph_def
    node = by_name.get("init")
    # An op named "init" is the first initializer a program made: global_variables_
    # initializer's, or local_variables_initializer's when that came first (a Scaffold's
    # local_init_op); so every variable's own initializer runs too (twice is harmless).
    out = ["init"] if node is not None and node.op == "NoOp" else []
    for n in graph_def.node:
        if n.op in ("Assign", "AssignVariableOp") and n.name.endswith("/Assign") and n.input:
            source = by_name.get(_node_name(n.input[0]))
            # A variable's own initializer is "<variable>/Assign"; another "/Assign" of it is
            # a step's update (TF1 Adam's "Adam/Assign" of beta1_power reads other variables).
            if source is not None and source.op in _VARIABLE_OPS \
                    and n.name == source.name + "/Assign":
                out.append(n.name)
    # Tables: the MetaGraph's table_initializer collection (what tables_initializer() runs),
    # else the op it makes; and every op that can only be an initializer.
    tables = meta_graph.collection_def.get("table_initializer")
    tables = list(tables.node_list.value) if tables is not None else []
    if not tables and getattr(by_name.get("init_all_tables"), "op", None) == "NoOp":
        tables = ["init_all_tables"]
    out += tables + [n.name for n in graph_def.node if n.op in _RESOURCE_INIT_OPS]
    imports = [n.name for n in graph_def.node if n.op in _TABLE_IMPORT_OPS]
    if imports:
        restored = _fan_out(graph_def, [n.name for n in graph_def.node if n.op in _RESTORE_OPS])
        out += [name for name in imports if name not in restored]
    return tuple(dict.fromkeys(out))


def _default_fetches(meta_graph, by_name, init) -> tuple[str, ...]:
    collection = meta_graph.collection_def.get("train_op")
    if collection is not None and collection.node_list.value:
        return tuple(collection.node_list.value)
    for name in ("train_op", "train"):
        if name in by_name:
            return (name,)
    init_side = fan_in(meta_graph.graph_def, init)
    # A sink that depends on an initializer runs it again at every step: a group of
    # initializers (a strategy's iterator.initializer), or the per-device datasets a
    # MultiDeviceIterator makes from its initializer's incarnation, which are not a step.
    after_init = _fan_out(meta_graph.graph_def, init)
    sinks = [s for s in grappler.sink_nodes(meta_graph.graph_def)
             if s not in init_side and s not in after_init and not s.startswith("save/")
             and by_name[s].op not in _NOT_A_STEP_OPS]
    if not sinks:
        raise ConfigError("cannot tell what one step of this graph runs (no train_op collection, "
                          "no op named train_op or train, no sink outside the initializers); "
                          "give fetches=")
    # A training graph: the sinks that apply an optimizer's update are the step; the others
    # (a Scaffold's init and ready ops, summaries and their writer) would re-initialize the
    # variables or write the user's event files at every measured step.
    updates = [n.name for n in meta_graph.graph_def.node if n.op.startswith(_UPDATE_PREFIXES)]
    after = _fan_out(meta_graph.graph_def, updates)
    return tuple([s for s in sinks if s in after] or sinks)


def _variable_value(handle, placeholder) -> tf.Tensor:
    """The current value of the variable behind the eager resource ``handle``, captured by the
    function graph's ``placeholder`` (whose handle data names the variable's dtype)."""
    from tensorflow.python.ops import handle_data_util  # tf.__internal__ export

    data = handle_data_util.get_resource_handle_data(placeholder)
    if not data.is_set or len(data.shape_and_type) != 1:
        raise ValueError("its handle says nothing of a variable's dtype")
    dtype = tf.dtypes.as_dtype(data.shape_and_type[0].dtype)
    return tf.raw_ops.ReadVariableOp(resource=handle, dtype=dtype)


def _feed(key, value) -> tuple[str, np.ndarray]:
    """``(tensor name, value as an array)`` of one given feed; ConfigError for a key that is
    not a tensor or op name, or a value that is not data (a symbolic tf.Tensor, say)."""
    if not isinstance(key, str) or not key or not _TENSOR_NAME.fullmatch(
            key if ":" in key else f"{key}:0"):
        raise ConfigError(f"feeds: keys are tensor names ('x:0', or an op name 'x' for its "
                          f"first output), got {key!r}")
    name = key if ":" in key else f"{key}:0"
    if tf.is_tensor(value) and not hasattr(value, "numpy"):
        raise ConfigError(f"feeds: {name!r} is given a symbolic {type(value).__name__}; give "
                          "its value (a NumPy array or a Python value)")
    try:
        return name, np.asarray(value)
    except Exception as e:  # noqa: BLE001 (whatever the object's __array__ raises)
        raise ConfigError(f"feeds: {name!r} is given a {type(value).__name__}, which is not an "
                          f"array of values ({e})") from e


_TENSOR_NAME = re.compile(r"[^:]+:\d+")


def _check_feed(node, name: str, value: np.ndarray) -> None:
    """ConfigError for a feed that names an op the graph lacks, or another output than a
    placeholder's one, or a value a placeholder's dtype or static shape rules out
    (TensorFlow would raise a TypeError or ValueError at the first measured step, after the
    warm-up's wait)."""
    op, index = name.rsplit(":", 1)
    if node is None:
        raise ConfigError(f"feeds: {name!r} names no op of the graph ({op!r})")
    if node.op != "Placeholder":
        return  # another tensor: fed as TF takes it (a shape or dtype it refuses: ConfigError)
    if int(index) != 0:
        raise ConfigError(f"feeds: {name!r}: placeholder {op!r} has one output, {op}:0")
    if "dtype" in node.attr:
        dtype = tf.dtypes.as_dtype(node.attr["dtype"].type)
        if dtype == tf.string:
            fits = value.dtype.kind in "SUO"
        else:
            try:  # as TensorFlow converts a fed value
                np.asarray(value, dtype=dtype.as_numpy_dtype)
                fits = True
            except (TypeError, ValueError, OverflowError):
                fits = False
        if not fits:
            raise ConfigError(f"feeds: {name!r} is given a value of dtype {value.dtype}, which "
                              f"placeholder {op!r} ({dtype.name}) does not take")
    if "shape" not in node.attr:
        return
    shape = node.attr["shape"].shape
    if shape.unknown_rank:
        return
    dims = [d.size for d in shape.dim]
    if value.ndim != len(dims) or any(d >= 0 and d != v for d, v in zip(dims, value.shape)):
        raise ConfigError(f"feeds: {name!r} is given a value of shape {list(value.shape)}, and "
                          f"the placeholder takes {dims} (-1: any size)")


_GIVE_VALUE = ("give its value (autoplace(..., measure_feeds={name: value}), feeds= of "
               "Workload.from_graph), its shape on the command line (--feed_shape=NAME=D0,D1,"
               "...: made-up values), or give the placeholder a static shape")


def parse_feed_shapes(items) -> dict[str, tuple[int, ...]]:
    """``["x=32,16", "step="]`` -> ``{"x": (32, 16), "step": ()}``: the command line's
    ``--feed_shape`` items, a placeholder's name and the shape its made-up values get.
    ConfigError for a malformed item, a negative size or a name given twice."""
    out = {}
    for item in items or ():
        name, sep, text = str(item).partition("=")
        name = name.strip().removesuffix(":0")
        try:
            dims = tuple(int(d) for d in text.split(",")) if text.strip() else ()
        except ValueError:
            dims = None
        if not sep or not name or dims is None or any(d < 0 for d in dims):
            raise ConfigError(f"--feed_shape is NAME=D0,D1,... (sizes >= 0; NAME= for a "
                              f"scalar), got {item!r}")
        if name in out:
            raise ConfigError(f"--feed_shape gives {name!r} twice")
        out[name] = dims
    return out


def made_up_feeds(source, shapes: Mapping[str, Sequence[int]], seed: int = 0
                  ) -> dict[str, np.ndarray]:
    """Values for the placeholders named in ``shapes`` (name -> shape), made up as a workload
    makes them for a placeholder of fully known shape: the feeds of a graph whose inputs have
    a free (batch) dimension, for the command line's ``--feed_shape``. ``source``: as for
    :meth:`Workload.from_graph`. ConfigError for a name that is not a placeholder, or a shape
    its static shape rules out."""
    by_name = {n.name: n for n in ingest.load_meta_graph(source).graph_def.node}
    rng = np.random.default_rng(seed)
    out = {}
    for name, dims in sorted(shapes.items()):
        node = by_name.get(name)
        if node is None or node.op != "Placeholder":
            raise ConfigError(f"--feed_shape names {name!r}, which is not a placeholder of the "
                              "graph")
        value = _synthetic_value(node, rng, dims=list(dims))
        _check_feed(node, f"{name}:0", value)
        out[f"{name}:0"] = value
    return out


def _synthetic_value(node, rng: np.random.Generator, *, dims=None) -> np.ndarray:
    if dims is None:
        shape = node.attr["shape"].shape if "shape" in node.attr else None
        dims = None if shape is None or shape.unknown_rank else [d.size for d in shape.dim]
    if dims is None or any(d < 0 for d in dims):
        raise InputValueError(f"placeholder {node.name!r} has no fully known static shape, so "
                              f"no input can be made up for it; {_GIVE_VALUE}")
    dtype = tf.dtypes.as_dtype(node.attr["dtype"].type)
    if dtype.is_floating:
        return rng.standard_normal(dims).astype(dtype.as_numpy_dtype)
    if dtype.is_integer or dtype == tf.bool:
        return np.zeros(dims, dtype=dtype.as_numpy_dtype)
    if node.attr["dtype"].type == types_pb2.DT_STRING:
        return np.full(dims, b"", dtype=object)
    raise InputValueError(f"placeholder {node.name!r} has dtype {dtype.name}; {_GIVE_VALUE}")
