"""TF2 front door: place a ``tf.function`` / ``ConcreteFunction``; SavedModel in, SavedModel out.

How a function is placed (one engine: :func:`tf_autoplace.pipeline.engine.place_graph` on a GraphDef):

1. Trace: ``fn.get_concrete_function(*args, **kwargs)`` (a ConcreteFunction is used as is).
2. ``graph_def = cf.graph.as_graph_def()``. Nested function calls (``PartitionedCall`` /
   ``StatefulPartitionedCall``, e.g. a SavedModel signature calling the restored function) are
   inlined first with Grappler's function optimizer (private ``tf_optimizer`` API, the same call
   TF's own ``convert_to_constants`` makes), so their ops are placed one by one. Calls Grappler
   does not inline (XLA-compiled or ``_noinline`` functions) and functional control flow
   (``If``/``While``) stay single ops; the report's notes count them. A call Grappler
   specializes instead (tf_keras' LSTM and GRU) names a new function of the GraphDef's library,
   which is registered with the eager runtime before the placed function is built.
3. Captured resources (variables, optimizer slots, ...) enter the function graph as ``Placeholder``
   ops of dtype ``resource``. Their resource lives on a fixed device, and TF requires readers and
   updaters to sit with it, so each is pinned to that device: every other device gets ``inf``
   time for it in the cost model (:class:`tf_autoplace.cost.PinnedCostModel`), which the
   placers treat like a missing kernel, so the whole colocation group (reads, updates) follows
   the variable and the
   simulated figures already include the pin. In the copy that is placed (not the one that runs)
   such a placeholder becomes a ``VarHandleOp`` of the variable's dtype and shape, so Grappler
   infers the shapes of its reads and the variable's memory is counted on its device.
4. The placed GraphDef is imported (``tf.graph_util.import_graph_def``, under the name scope
   ``placed/``) into a new ``tf.function`` traced with the same structured input signature: its
   arguments and the *same* captured tensors (hence the same variables) are mapped onto the old
   placeholders, and the outputs are packed into the same structure. Imported stateful ops become
   the new function's control outputs through automatic control dependencies, as in any
   ``tf.function``.

The result is a :class:`PlacedFunction`: call it as before (arguments positionally or with the
names of the original signature); ``.report`` is the PlacementReport and ``.concrete_function``
the placed ConcreteFunction (e.g. to save as a SavedModel signature). A GradientTape around a
call watches the original's variables (they are registered with the placed graph as read).

Not supported: ``jit_compile=True`` functions (an XLA cluster ignores per-op devices;
:class:`ConfigError`), arguments that are not tensors or nests of tensors (Python constants are
fine: they are baked into the trace), composite tensors (ragged/sparse) as inputs or outputs,
variables as arguments (use them captured), and captured resources on a device the cluster does
not have (:class:`ConfigError`).

SavedModels (:func:`place_saved_model`): a TF2 SavedModel (one with an object graph) is loaded with
``tf.saved_model.load``; the chosen signature is placed as above and the loaded object is saved
again with that signature replaced by the placed function (its variables, other signatures and
functions come along unchanged). A TF1 SavedModel (no object graph) has the MetaGraphDef with the
given tags placed as a whole (all its signatures share that graph) and is written back with its
``variables/`` and ``assets/`` copied. Either kind keeps its ``assets.extra/`` (TF Serving's
warm-up requests); links in what is copied are followed, so that the copy stands alone (dangling
ones stay links; a FIFO, socket or device is left out, and a note says so). The placement is
done in memory first; only then is the output written to a temporary directory beside
``output_dir`` and renamed into place (:mod:`tf_autoplace.outputs.files`), so an error or an
interrupt leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import os
import shutil
import stat
from typing import Callable, Mapping

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2, types_pb2
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2
from tensorflow.python.eager import context  # private; TF's SavedModel loader uses it so

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.cost import AnalyticalCostModel, CostModel, PinnedCostModel
from tf_autoplace.errors import ConfigError, InvalidGraphError
from tf_autoplace.graph import ingest
from tf_autoplace.graph.executed import CALL_OPS, CONTROL_FLOW_OPS
from tf_autoplace.grouping import GroupingConfig
from tf_autoplace.hw.runner import missing_devices
from tf_autoplace.outputs import files
from tf_autoplace.cost.profile import ProfileCostModel
from tf_autoplace.pipeline.engine import place_graph, profile_notes
from tf_autoplace.pipeline.options import PlaceOptions
from tf_autoplace.placers import DEFAULT_PLACER
from tf_autoplace.rewrite import apply_to_graph_def

_LOWERING = "_lower_using_switch_merge"
_MARKER = "_tf_autoplace_lowering"
_SPECIALIZED = "_GrapplerSpecializedFunc"
_PINNED_DTYPES = (tf.resource, tf.variant)
_IMPORT_SCOPE = "placed"


def is_function(obj) -> bool:
    """True for a ``tf.function`` (GenericFunction) or a ConcreteFunction."""
    return isinstance(obj, (tf.types.experimental.GenericFunction,
                            tf.types.experimental.ConcreteFunction))


# ------------------------------------------------------------------------- pinned resources
def _cluster_device(cluster: Cluster, device: str, what: str) -> str:
    """The name of ``cluster``'s device that ``device`` (a TF device string) denotes."""
    spec = tf.DeviceSpec.from_string(device)
    specs = [(name, tf.DeviceSpec.from_string(name)) for name in cluster.names]
    exact = [name for name, s in specs if s.to_string() == spec.to_string()]
    if exact:
        return exact[0]
    loose = [name for name, s in specs
             if s.device_type == spec.device_type and s.device_index == spec.device_index]
    if len(loose) == 1:
        return loose[0]
    raise ConfigError(
        f"{what} lives on {device!r}, which is not a device of the cluster "
        f"{list(cluster.names)}; TF keeps a resource's readers and updaters on its device, so "
        "use a cluster that includes it (or create the variables on a cluster device)")


def _fn_name(cf) -> str:
    """The name a user knows a ConcreteFunction by: its Python function's (``train_step``), not
    TensorFlow's own (``__inference_train_step_10``), which messages would otherwise show."""
    name = getattr(cf.graph, "name", None) or cf.name
    return name.decode() if isinstance(name, bytes) else str(name)


# ---------------------------------------------------------------------------------- tracing
def _concrete_function(fn, args, kwargs):
    if isinstance(fn, tf.types.experimental.ConcreteFunction):
        if args or kwargs:
            raise ConfigError("a ConcreteFunction is already traced; pass no example arguments")
        cf = fn
    elif isinstance(fn, tf.types.experimental.GenericFunction):
        if getattr(fn, "_jit_compile", None):
            raise _xla_error(getattr(fn, "__name__", "the function"))
        try:
            cf = fn.get_concrete_function(*args, **kwargs)
        except (TypeError, ValueError) as e:  # ValueError: a restored function has no trace
            # for these shapes, or the function's own code refuses them
            raise ConfigError(
                f"cannot trace {getattr(fn, '__name__', fn)!r} with the arguments given "
                f"({type(e).__name__}: {_shortened(str(e))}); "
                "pass example arguments or TensorSpecs, e.g. "
                "tf_autoplace.tf2.autoplace_function(fn, x, y, cluster=...), or give the "
                "tf.function an input_signature") from e
    else:
        raise ConfigError(f"expected a tf.function or ConcreteFunction, got "
                          f"{type(fn).__name__}")
    attr = cf.function_def.attr
    if "_XlaMustCompile" in attr and attr["_XlaMustCompile"].b:
        raise _xla_error(_fn_name(cf))
    _check_arguments(cf)
    return cf


def _check_arguments(cf) -> None:
    """ConfigError for an argument the placed function could not take as the original does:
    a composite tensor (its components would be fed as separate inputs) or a variable (its
    placeholder is a resource handle, which the placed graph would be fed its value for)."""
    args_sig, kwargs_sig = cf.structured_input_signature
    function = _fn_name(cf)
    names = [f"argument {k}" for k in range(len(args_sig))] + [f"argument {k!r}"
                                                               for k in kwargs_sig]
    for name, spec in zip(names, list(args_sig) + list(kwargs_sig.values())):
        for leaf in tf.nest.flatten(spec):
            if isinstance(leaf, (tf.RaggedTensorSpec, tf.SparseTensorSpec)):
                raise ConfigError(f"{function}: {name} is a {type(leaf).__name__}: ragged and "
                                  "sparse tensors are not supported as arguments; pass dense "
                                  "tensors (e.g. .to_tensor()) or their component tensors")
            if type(leaf).__name__ == "VariableSpec":
                raise ConfigError(f"{function}: {name} is a tf.Variable: variables are not "
                                  "supported as arguments; use the variable inside the "
                                  "function (captured), where it is pinned to its device")


def _xla_error(name) -> ConfigError:
    if name == "restored_function_body":  # (TF's name for every function of a SavedModel)
        name = "this function restored from a SavedModel"
    return ConfigError(
        f"{name!s} is compiled with XLA (jit_compile=True): an XLA cluster runs on one device "
        "and ignores per-op devices, so it cannot be placed op by op; drop jit_compile or "
        "place the function without it")


def _call_ops(graph_def: graph_pb2.GraphDef) -> list:
    library = {f.signature.name for f in graph_def.library.function}
    return [n for n in graph_def.node if n.op in CALL_OPS or n.op in library]


def _control_flow_nodes(graph_def: graph_pb2.GraphDef):
    yield from (n for n in graph_def.node if n.op in CONTROL_FLOW_OPS)
    for function in graph_def.library.function:
        yield from (n for n in function.node_def if n.op in CONTROL_FLOW_OPS)


def _inline_calls(cf, graph_def: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
    """Inline nested function calls with Grappler's function optimizer (aggressive mode), keeping
    the function's inputs, outputs and control outputs (so training updates survive).

    The optimizer would also lower functional If/While to v1 Switch/Merge, which cannot be
    imported into a tf.function; lowering is switched off for the pass (as TF's
    ``convert_to_constants`` does) and switched back on afterwards on exactly the nodes that had
    it, found by a marker attr that inlining carries along."""
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
    from tensorflow.python.grappler import tf_optimizer  # private; see the module docstring

    graph_def = _copy(graph_def)
    for node in _control_flow_nodes(graph_def):
        if _LOWERING in node.attr and node.attr[_LOWERING].b:
            node.attr[_LOWERING].b = False
            node.attr[_MARKER].b = True
    meta_graph = meta_graph_pb2.MetaGraphDef(graph_def=graph_def)
    fetch = meta_graph.collection_def["train_op"].node_list.value
    fetch.extend([t.name for t in list(cf.graph.inputs) + list(cf.graph.outputs)])
    fetch.extend([op.name for op in cf.graph.control_outputs])
    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.min_graph_nodes = -1
    rewrite.optimizers.append("function")
    rewrite.function_optimization = rewriter_config_pb2.RewriterConfig.AGGRESSIVE
    rewrite.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    try:
        out = tf_optimizer.OptimizeGraph(config, meta_graph)
    except (tf.errors.OpError, ValueError) as e:
        raise InvalidGraphError(f"Grappler could not inline the function calls of {_fn_name(cf)}: "
                                f"{e}") from e
    for node in _control_flow_nodes(out):
        if _MARKER in node.attr:
            del node.attr[_MARKER]
            node.attr[_LOWERING].b = True
    for function in out.library.function:
        # Grappler marks the functions it specialized; TF's SavedModel loader refuses function
        # attrs outside its allowlist, so a placed function saved with it would not load.
        if _SPECIALIZED in function.attr:
            del function.attr[_SPECIALIZED]
    return out


def _copy(graph_def: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    return out


def _resource_as_variable(node, internal) -> bool:
    """Turn the resource Placeholder ``node`` into a VarHandleOp of its variable's dtype and
    shape (in place) when the handle data says what it holds."""
    from tensorflow.python.ops import handle_data_util  # tf.__internal__.ops export

    try:
        data = handle_data_util.get_resource_handle_data(internal)
    except (AssertionError, ValueError, tf.errors.OpError):
        return False
    if not data.is_set or len(data.shape_and_type) != 1:
        return False
    entry = data.shape_and_type[0]
    if entry.dtype == types_pb2.DT_INVALID or entry.shape.unknown_rank:
        return False
    node.op = "VarHandleOp"
    node.ClearField("attr")
    node.attr["dtype"].type = entry.dtype
    node.attr["shape"].shape.CopyFrom(entry.shape)
    node.attr["container"].s = b""
    node.attr["shared_name"].s = node.name.encode()
    return True


# ------------------------------------------------------------------------------ the wrapper
@dataclasses.dataclass(frozen=True, eq=False)
class PlacedFunction:
    """A placed function; call it as the original.

    Attributes:
      concrete_function: the placed ConcreteFunction (its graph's ops carry the devices).
      report: the PlacementReport (op names in ``report.assignment`` are the original ones; in
        the placed graph they sit under the name scope ``placed/``).
      original: the ConcreteFunction that was placed.
      defaults: parameter name -> default value of the ``tf.function`` traced (none for a
        ConcreteFunction given as it is: it takes no defaults for its tensor parameters).
      varargs: the ``tf.function``'s Python function takes ``*args``: it was traced for the
        number of positional arguments it was given, which the placed function takes alone.
    """

    concrete_function: object
    report: object
    original: object
    defaults: Mapping[str, object] = dataclasses.field(default_factory=dict)
    varargs: bool = False

    def __call__(self, *args, **kwargs):
        """Call the placed function as the original.

        Raises:
          ConfigError: it was placed on devices this process does not have and soft device
            placement is off, so TensorFlow cannot run it here (TF's own error would name an
            op of the placed graph, not why); an argument whose shape or dtype the traced
            signature does not take (:meth:`_check_specs`), or whose structure it does not
            bind (a dict with another key, a longer list); also what :meth:`_bind` raises.
        """
        if self._missing and not tf.config.get_soft_device_placement():
            raise cannot_run_here(self._name, self._missing)
        # The common call (every argument a tensor, positionally, as traced, and no
        # keyword-only parameter whose default _bind would fill in) goes straight through;
        # any other is bound to the original's parameters first (_bind).
        if (kwargs or self._traced[2] or len(args) != self._num_positional
                or not all(map(tf.is_tensor, args))):
            args, kwargs = self._bind(args, kwargs)
        self._check_specs(args, kwargs)
        try:
            return self.concrete_function(*args, **kwargs)
        except TypeError as e:  # TF's binding: arguments of another structure than traced
            _, args_sig, kwargs_sig = self._traced
            given = _nest_text((tuple(args), kwargs))
            raise ConfigError(
                f"{self._name}: this call's arguments {given} do not bind to the ones it was "
                f"traced with, {_nest_text((args_sig, kwargs_sig))}: the "
                "placed graph takes the traced structure (TF would trace the function again); "
                "give the arguments as traced, or place the function again for these") from e

    def _check_specs(self, args, kwargs) -> None:
        """Raise ConfigError for a tensor argument the traced signature does not take.

        A ConcreteFunction runs the graph it was traced for and does not check its arguments'
        shapes: a function traced with an ``[8, 4]`` tensor and called with a ``[3, 4]`` one
        returns numbers computed with the traced 8 (a ``tf.shape`` folded into a constant),
        without a word. The original ``tf.function`` would trace again for the new shape (or
        reject it, with an ``input_signature``); the placed graph cannot, so the call is
        refused, with what to do. Arguments whose structure differs from the traced one are
        left to the function's own binding."""
        names, args_sig, kwargs_sig = self._traced
        pairs = [(n, v, t) for n, v, t in zip(names, args, args_sig)]
        pairs += [(name, v, kwargs_sig[name]) for name, v in kwargs.items() if name in kwargs_sig]
        for name, value, traced in pairs:
            try:
                leaves = list(zip(tf.nest.flatten(value, expand_composites=False),
                                  tf.nest.flatten(traced, expand_composites=False)))
            except (ValueError, TypeError):
                continue
            if len(tf.nest.flatten(value)) != len(tf.nest.flatten(traced)):
                continue
            for v, t in leaves:
                position = (f"positional argument {name[1:]}" if name.startswith("#")
                            else f"argument {name!r}")
                if isinstance(t, tf.TensorSpec):  # (one that no binding above converted)
                    _refuse_numpy_of_another_dtype(v, t, f"{self._name}: {position}")
                if not isinstance(t, tf.TypeSpec) and tf.is_tensor(v) and \
                        _another_constant(v, t):  # (TF's binding: an untyped TypeError)
                    raise _constant_error(self._name, position, t, v)
                if isinstance(t, tf.TensorSpec) and tf.is_tensor(v) and t.dtype != v.dtype:
                    raise ConfigError(
                        f"{self._name}: {position} was traced as {_spec_text(t)}, and this "
                        f"call gives {_spec_text(v)}: the placed graph takes the traced dtype "
                        f"(TF would trace the function again). Cast the argument to "
                        f"{t.dtype.name}, or place the function again for this dtype")
                if isinstance(t, tf.TensorSpec) and tf.is_tensor(v) and \
                        not t.is_compatible_with(v):
                    raise ConfigError(
                        f"{self._name}: {position} was traced as {_spec_text(t)} (None: any "
                        f"size), and this call gives {_spec_text(v)}: the placed graph is "
                        "the traced one and a ConcreteFunction does not check shapes (TF "
                        "would run it with the traced shapes). Place the function again for "
                        "this shape, or trace it with an input_signature that has None in the "
                        "dimensions that vary")

    @functools.cached_property
    def _traced(self) -> tuple[list[str], tuple, dict]:
        """The positional parameters' names (``#i`` where unknown) and the structured input
        signature, read once: :meth:`_check_specs` runs on every call."""
        args_sig, kwargs_sig = self.original.structured_input_signature
        names = [p[0] for p in self._parameters] or [f"#{i}" for i in range(len(args_sig))]
        return names, args_sig, kwargs_sig

    @functools.cached_property
    def _missing(self) -> list[str]:
        """The placement's devices this process has no logical device for."""
        return devices_missing_here(self.report.assignment)

    @functools.cached_property
    def _parameters(self) -> list:
        """``(name, kind, traced)`` for each parameter of the original, in order: its
        ``inspect.Parameter`` kind and what it was traced with (a nest of TensorSpecs and
        Python constants), from its structured input signature."""
        args_sig, kwargs_sig = self.original.structured_input_signature
        params = list(self.original.function_type.parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                       p.POSITIONAL_OR_KEYWORD)]
        keyword = [p for p in params if p.kind == p.KEYWORD_ONLY]
        if len(positional) != len(args_sig) or {p.name for p in keyword} != set(kwargs_sig):
            return []  # not a signature this binding understands: TF's own binding decides
        return ([(p.name, p.kind, traced) for p, traced in zip(positional, args_sig)]
                + [(p.name, p.kind, kwargs_sig[p.name]) for p in keyword])

    @functools.cached_property
    def _num_positional(self) -> int:
        return len(self.original.structured_input_signature[0])

    @functools.cached_property
    def _names(self) -> frozenset:
        return frozenset(p[0] for p in self._parameters)

    def _bind(self, args, kwargs):
        """``(args, kwargs)`` as the placed ConcreteFunction takes them: each argument at the
        position or name it was traced at, NumPy arrays (of the traced dtype) and Python
        numbers made tensors of the traced dtype, an omitted Python constant given its traced
        value.

        Raises:
          TypeError: arguments the original could not take either (too many, unknown or
            repeated names, a missing tensor argument), as Python would.
          ConfigError: a Python constant other than the one traced: it is part of the placed
            graph; a NumPy value of another dtype than the traced one, or a Python value
            TensorFlow does not convert to it (:func:`_tensor_of_dtype`).
        """
        params = self._parameters
        if not params:
            return args, kwargs
        positional = self._num_positional  # the traced positional parameters come first
        if self.varargs and len(args) != positional:
            raise ConfigError(
                f"{self._name} takes *args and was traced with {positional} positional "
                f"arguments, and this call gives {len(args)}: the placed graph takes the traced "
                "number (TF would trace the function again); place the function again for "
                "this call")
        if len(args) > positional:
            raise TypeError(f"{self._name}() takes {positional} positional arguments "
                            f"but {len(args)} were given")
        given = dict(zip((p[0] for p in params), args))
        for name, value in kwargs.items():
            if name in given:
                raise TypeError(f"{self._name}() got multiple values for argument {name!r}")
            if name not in self._names:
                raise TypeError(f"{self._name}() got an unexpected keyword argument {name!r}")
            given[name] = value
        out_args, out_kwargs = [], {}
        for name, kind, traced in params:
            if name in given:
                value = _as_traced(given[name], traced, name, self._name)
            elif not any(isinstance(leaf, tf.TypeSpec) for leaf in tf.nest.flatten(traced)):
                value = traced  # a constant left out: the one the graph was traced with
            elif name in self.defaults:  # a tensor parameter left out: the tf.function's default
                value = _as_traced(self.defaults[name], traced, name, self._name)
            else:
                raise TypeError(f"{self._name}() missing a required argument: {name!r}")
            if kind == inspect.Parameter.KEYWORD_ONLY:
                out_kwargs[name] = value
            else:
                out_args.append(value)
        return out_args, out_kwargs

    @property
    def _name(self) -> str:
        return _fn_name(self.original)

    @property
    def graph(self):
        return self.concrete_function.graph


def _python_parameters(fn) -> list:
    """The ``inspect.Parameter``s of ``fn``'s Python function, for a ``tf.function`` (a
    ConcreteFunction keeps none: [])."""
    python = getattr(fn, "python_function", None)
    if not isinstance(fn, tf.types.experimental.GenericFunction) or python is None:
        return []
    try:
        return list(inspect.signature(python).parameters.values())
    except (TypeError, ValueError):  # a callable inspect cannot read
        return []


def _defaults(fn) -> dict:
    """Parameter name -> default value of ``fn``'s Python function, for a ``tf.function``
    (a ConcreteFunction keeps none)."""
    return {p.name: p.default for p in _python_parameters(fn)
            if p.default is not inspect.Parameter.empty}


def _as_traced(value, traced, name: str, function: str):
    """``value`` for a parameter traced with ``traced`` (a nest of TensorSpecs and constants):
    each array, number or list where ``traced`` has a TensorSpec made a tensor of its dtype
    (:func:`_tensor_of_dtype`);
    where it has a constant, that constant (ConfigError if ``value`` holds another one). A
    value whose structure differs is returned as it is, for the function's own binding to
    accept or reject."""
    def convert(v, t):
        if isinstance(t, tf.TensorSpec):
            if not tf.is_tensor(v) and isinstance(v, (np.ndarray, np.generic, int, float,
                                                      bool, list)):
                return _tensor_of_dtype(v, t, f"{function}: argument {name!r}")
            return v
        if not isinstance(t, tf.TypeSpec) and _another_constant(v, t):
            raise _constant_error(function, f"argument {name!r}", t, v)
        return v

    if isinstance(traced, tf.TypeSpec) or not tf.nest.is_nested(traced):
        return convert(value, traced)
    try:
        return tf.nest.map_structure(convert, value, traced)
    except ConfigError:  # a leaf refused (a ValueError too): not a structure to leave to TF
        raise
    except (ValueError, TypeError):
        return value


def _refuse_numpy_of_another_dtype(value, traced: tf.TensorSpec, what: str) -> None:
    """ConfigError if ``value`` is a NumPy array or scalar of another dtype than ``traced``'s
    (:func:`_tensor_of_dtype` says why; TF's own binding would cast it without a word). For a
    traced ``tf.string``, NumPy's bytes and str arrays are that dtype."""
    dtype = traced.dtype
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype != dtype.as_numpy_dtype \
            and not (dtype == tf.string and value.dtype.kind in "SU"):
        # (NumPy holds strings as bytes_ or str_ arrays, which TF converts to tf.string
        # without tracing again; tf.string's own NumPy dtype is object.)
        raise ConfigError(
            f"{what} was traced as {_spec_text(traced)}, and this call gives a NumPy "
            f"{value.dtype.name} value: the placed graph takes the traced dtype (TF would trace "
            f"the function again for {value.dtype.name}). Cast the argument to {dtype.name}, "
            "or place the function again for this dtype")


def _tensor_of_dtype(value, traced: tf.TensorSpec, what: str):
    """``value`` (a NumPy array or scalar, a Python number or list) as a tensor of ``traced``'s
    dtype. A NumPy value must have that dtype, as a tensor must (:meth:`PlacedFunction.
    _check_specs`): the original ``tf.function`` traces again for a NumPy value of another
    dtype and computes in it, while a cast would compute other numbers without a word (uint8
    arithmetic wraps, int32 does not). A Python value has no dtype of its own: it is converted
    by TensorFlow's rule for the traced dtype (``2`` as float32; ``1.7`` as int32 refused)."""
    dtype = traced.dtype
    _refuse_numpy_of_another_dtype(value, traced, what)
    try:
        return tf.convert_to_tensor(value, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{what} was traced as {_spec_text(traced)}, and this call gives "
                          f"{value!r:.80}, which TensorFlow does not convert to {dtype.name} "
                          f"({' '.join(str(e).split())})") from e


class _Text(str):
    def __repr__(self) -> str:
        return str(self)


def _nest_text(structure) -> str:
    """``structure`` (a nest of tensors, TensorSpecs and Python values) with each tensor or
    spec as ``[8, 4] float32``: the shape of a call's arguments, not their values."""
    def leaf(v):
        if isinstance(v, tf.TypeSpec) or tf.is_tensor(v):
            try:
                return _Text(_spec_text(v))
            except (AttributeError, ValueError):
                return _Text(type(v).__name__)
        return v
    return str(tf.nest.map_structure(leaf, structure))


def _spec_text(t) -> str:
    """``[8, 4] float32`` for a TensorSpec or a tensor."""
    shape = t.shape.as_list() if t.shape.rank is not None else "unknown rank"
    return f"{shape} {t.dtype.name}"


def _another_constant(value, traced) -> bool:
    """Whether ``value``, given where the Python constant ``traced`` was traced, is another
    value (a tensor of the same value is not: TF's own binding takes it)."""
    if tf.is_tensor(value):
        try:
            value = value.numpy()
        except (AttributeError, ValueError, TypeError):  # symbolic: its value is not known
            return True
        if isinstance(value, (np.ndarray, np.generic)):  # (a string scalar's is bytes)
            value = value.item() if value.ndim == 0 else value.tolist()
    return not _same(value, traced)


def _constant_error(function: str, what: str, traced, value) -> ConfigError:
    given = repr(value)
    if tf.is_tensor(value):
        try:
            number = value.numpy()
            given = f"a tensor of {getattr(number, 'tolist', lambda: number)()!r}"
        except (AttributeError, ValueError, TypeError, NotImplementedError):
            given = "a tensor"
    return ConfigError(
        f"{function}: {what} was traced with the Python constant {traced!r}, and this call "
        f"gives {given}: a constant is part of the placed graph; give {traced!r} (or leave it "
        "out), or place the function again traced with this argument (a tensor there if it "
        "varies)")


def _same(a, b) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except (ValueError, TypeError):  # e.g. arrays: not a constant TF traced
        return False


def _is_tensor_like(x) -> bool:
    return isinstance(x, (tf.Tensor, tf.TensorSpec)) or tf.is_tensor(x)


def _check_captures_last(cf) -> int:
    """The number of ``cf``'s arguments; InvalidGraphError unless its graph's inputs are its
    arguments followed by its captures, the calling convention the placed function keeps."""
    graph = cf.graph
    num_args = len(graph.inputs) - len(graph.captures)
    if [id(t) for t in graph.inputs[num_args:]] != [id(i) for _, i in graph.captures]:
        raise InvalidGraphError(
            f"{_fn_name(cf)}: its inputs do not end with its captures, so it cannot be called "
            "placed as it is called now (a function that calls run() of a tf.distribute "
            "strategy over several devices, such as MirroredStrategy, is traced so: place "
            "the function without that strategy)")
    return num_args


def _rebuild(cf, placed: graph_pb2.GraphDef):
    """A ConcreteFunction with ``cf``'s calling convention running the ``placed`` GraphDef."""
    graph = cf.graph
    captures = list(graph.captures)  # (external, internal)
    num_args = _check_captures_last(cf)
    arg_names = [t.name for t in graph.inputs[:num_args]]
    capture_names = [internal.name for _, internal in captures]
    externals = [external for external, _ in captures]
    variables = list(graph.variables)  # the original's, read through the captured handles
    dropped = {t.op.name for t in graph.inputs}
    body_def = graph_pb2.GraphDef()
    body_def.CopyFrom(placed)
    del body_def.node[:]
    body_def.node.extend(n for n in placed.node if n.name not in dropped)
    for node in body_def.node:  # colocation with a dropped input: its device is explicit now
        if "_class" in node.attr:
            keep = [c for c in node.attr["_class"].list.s
                    if not (c.startswith(b"loc:@") and c[len(b"loc:@"):].decode() in dropped)]
            if keep:
                node.attr["_class"].list.s[:] = keep
            else:
                del node.attr["_class"]
    structure = cf.structured_outputs
    flat_structure = tf.nest.flatten(structure, expand_composites=True)
    # The structured outputs are the graph's first outputs; a GradientTape that ran the
    # function appends the intermediates its gradient needs, which the placed one recomputes.
    num_outputs = sum(map(_is_tensor_like, flat_structure))
    out_names = [t.name for t in graph.outputs[:num_outputs]]
    read = {(name if ":" in name else f"{name}:0")
            for node in body_def.node for name in node.input if not name.startswith("^")}
    control_names = [op.name for op in graph.control_outputs
                     if op.name not in dropped]
    if num_outputs > len(graph.outputs):
        raise ConfigError(f"{_fn_name(cf)}: only dense tensors (in any nest) are supported as "
                          "outputs")
    args_sig, kwargs_sig = cf.structured_input_signature

    def body(*args, **kwargs):
        flat = [t for t in tf.nest.flatten((args, kwargs), expand_composites=True)
                if _is_tensor_like(t)]
        if len(flat) != num_args:
            raise ConfigError(f"{_fn_name(cf)}: only tensors (in any nest) and Python constants "
                              f"are supported as arguments ({len(flat)} tensors for "
                              f"{num_args} inputs)")
        func_graph = tf.compat.v1.get_default_graph()
        # Only what some op reads: import_graph_def refuses to map a tensor no node names (an
        # argument the function does not use, a capture Grappler pruned away).
        input_map = {name: t for name, t in zip(arg_names, flat) if name in read}
        input_map.update({name: func_graph.capture(ext)
                          for name, ext in zip(capture_names, externals) if name in read})
        before = len(func_graph.get_operations())
        elements = tf.graph_util.import_graph_def(
            body_def, input_map=input_map, return_elements=out_names + control_names,
            name=_IMPORT_SCOPE)
        _loop_handle_data(func_graph.get_operations()[before:])
        for variable in variables:  # so that a GradientTape around a call watches them
            func_graph.watch_variable(variable)
        outs = iter(elements[:len(out_names)])
        return tf.nest.pack_sequence_as(
            structure, [next(outs) if _is_tensor_like(x) else x for x in flat_structure],
            expand_composites=True)

    body.__name__ = f"placed_{cf.name.decode() if isinstance(cf.name, bytes) else cf.name}"
    _register_functions(placed)
    return tf.function(body, autograph=False).get_concrete_function(*args_sig, **kwargs_sig)


_LOOP_GRAPHS = itertools.count()  # numbers the control-flow graphs _loop_handle_data builds


def _branches(op) -> list[tuple[str, str, list]]:
    """``(function name, attribute TF's gradient caches its graph in, the graph's inputs)`` for
    each function of a While, If or Case op (none for other ops)."""
    if op.type in ("While", "StatelessWhile"):
        inputs = list(op.inputs)
        return [(op.get_attr("cond").name, "_cond_graph", inputs),
                (op.get_attr("body").name, "_body_graph", inputs)]
    if op.type in ("If", "StatelessIf"):
        inputs = list(op.inputs[1:])  # after the predicate
        return [(op.get_attr("then_branch").name, "_true_graph", inputs),
                (op.get_attr("else_branch").name, "_false_graph", inputs)]
    if op.type in ("Case", "StatelessCase"):
        inputs = list(op.inputs[1:])  # after the branch index
        return [(f.name, f"_branch_graph_{i}", inputs)
                for i, f in enumerate(op.get_attr("branches"))]
    return []


def _loop_handle_data(ops) -> None:
    """Give the imported While, If and Case ops among ``ops`` the graphs of their functions,
    each with a name of its own and the handle data of the variables it reads, kept on the op
    where TF's gradient looks for them first.

    An imported op has no handle data on its functions' inputs (a FunctionDef's arguments do
    not carry what each resource holds), and the gradient of a loop whose body calls another
    function (a GradientTape around the placed call) fails without it: loops get it on their
    outputs too, as ``tf.while_loop`` gives it. A gradient rewrites the op's functions into new
    ones named after these graphs plus ``_rewritten``; with the original's names, the placed
    function's rewrite and the original's would clash in the eager context ("a duplicate
    function ... where the previous and current definitions differ"), breaking whichever is
    differentiated second, the original included. Ops inside those graphs get the same. A
    graph that cannot be built here is left for TF to build when a gradient needs it. ``ops``
    are in the order they were created, so an op's inputs have theirs first."""
    from tensorflow.python.ops import control_flow_util_v2, handle_data_util  # internal

    for op in ops:
        branches = _branches(op)
        if not branches:
            continue
        if op.type in ("While", "StatelessWhile"):
            for inp, out in zip(op.inputs, op.outputs):
                if out.dtype == tf.resource:
                    handle_data_util.copy_handle_data(inp, out)
        for name, cached, inputs in branches:
            if getattr(op, cached, None) is not None:
                continue
            shapes = ([tf.TensorShape(s) for s in op.get_attr("output_shapes")]
                      if op.type in ("While", "StatelessWhile") else [t.shape for t in inputs])
            try:
                graph = control_flow_util_v2.get_func_graph(op, shapes, name)
            except (tf.errors.OpError, KeyError, ValueError):
                # Not readable here (a rewritten function whose definition differs from the
                # one the eager runtime holds under its name): left for TF to build, as before.
                continue
            for inp, arg in zip(inputs, graph.inputs):
                if arg.dtype == tf.resource:
                    handle_data_util.copy_handle_data(inp, arg)
            graph.name = f"{graph.name}_placed{next(_LOOP_GRAPHS)}"
            _loop_handle_data(graph.get_operations())
            setattr(op, cached, graph)


def _register_functions(graph_def: graph_pb2.GraphDef) -> None:
    """Register the functions of ``graph_def``'s library that the eager runtime does not know.

    A call Grappler does not inline but specializes (a ``_noinline`` or ``api_implements``
    function such as tf_keras' LSTM and GRU, called with a constant argument) names a new
    function, ``<f>_specialized_for_<node>_at_graph_to_optimize``, that exists only in the
    placed GraphDef's library. ``import_graph_def`` adds it to the placed function's graph, but
    an eager call looks functions up in the context, where only functions created by tracing
    were registered: the placed function would fail with "Can't find a function" on its first
    call. Functions already registered (the original's) are left as they are."""
    ctx = context.context()
    for fdef in graph_def.library.function:
        if not ctx.has_function(fdef.signature.name):
            ctx.add_function_def(fdef)


# ---------------------------------------------------------------------------- public doors
def autoplace_function(fn, *args, cluster=None, placer=DEFAULT_PLACER, seed: int = 0,
                       grouping: GroupingConfig = GroupingConfig(),
                       cost_model: CostModel | None = None, cost_profile=None,
                       unknown_dim: int = 1, cache=None, progress=None,
                       budget_s: float | None = None, ray_address: str | None = None,
                       policy=None, measure_steps: int = 0, verify: int = 0, **kwargs):
    """Place a ``tf.function`` (traced with ``*args, **kwargs``) or a ConcreteFunction.

    Args:
      fn: a ``tf.function`` or ConcreteFunction. Not modified.
      *args, **kwargs: example arguments or ``tf.TensorSpec``s to trace ``fn`` with (none for a
        ConcreteFunction or a tf.function with an ``input_signature``). The names of the
        options below are taken by this function.
      cluster, placer, seed, grouping, cost_model, unknown_dim, cache, progress, budget_s,
        ray_address, policy: as for :func:`tf_autoplace.autoplace` (None: no cache, no
        progress).
      measure_steps, verify: refused with a ConfigError that says how a function is timed
        (they are for graphs).
      cost_profile: the path of a text ``CostProfile`` of this function (what
        ``tf_autoplace.hw.profiler.profile_ops(Workload.from_function(fn, *args))`` measures):
        its op times replace Grappler's estimates, as for a graph.

    Returns:
      ``(placed, report)``: a :class:`PlacedFunction` (called like ``fn``, running the same
      variables) and its PlacementReport (also ``placed.report``).
    """
    options = PlaceOptions.make(placer=placer, cluster=cluster, seed=seed, grouping=grouping,
                                cost_model=cost_model, cost_profile=cost_profile,
                                unknown_dim=unknown_dim, cache=cache, progress=progress,
                                budget_s=budget_s, ray_address=ray_address, policy=policy,
                                measure_steps=measure_steps, verify=verify)
    return place_function(fn, args, kwargs, options)


def _shortened(message: str, limit: int = 300) -> str:
    """TensorFlow's message on one line and cut at ``limit`` characters: a tracing error
    repeats the example arguments, tensor values and all, and a reader's error its paths."""
    line = " ".join(message.split())
    return line if len(line) <= limit else line[:limit] + " ..."


def place_function(fn, args, kwargs, options: PlaceOptions, *, runs_here: bool = True):
    """:func:`autoplace_function` with its options checked: ``fn`` traced with ``args`` and
    ``kwargs`` and placed as ``options`` say (not ``measure_steps`` or ``verify``, which are
    for graphs: a function is timed by calling it). A ``cost_profile`` names the ops of the
    graph placed here, the function's with its captured resources as variables, which is the
    graph ``Workload.from_function`` profiles. With ``runs_here`` (the placed function is
    called in this process, not saved for another) the notes name the devices it uses that
    this process does not have. Returns ``(placed, report)``."""
    if options.measure_steps or options.verify:
        raise ConfigError("measure_steps and verify are for graphs: time a placed function by "
                          "calling it, or profile it (tf_autoplace.hw.profiler.profile_ops("
                          "Workload.from_function(fn, *args))) and give cost_profile")
    if options.measure_feeds is not None:  # what measured graph steps are fed: none here
        raise ConfigError("measure_feeds feeds the steps measure_steps times, which are for "
                          "graphs: a placed function is called with its own arguments")
    cf = _concrete_function(fn, args, kwargs)
    _check_captures_last(cf)  # before the search, not after it
    cluster = options.resolved_cluster()
    graph_def = cf.graph.as_graph_def()
    if _call_ops(graph_def):
        graph_def = _inline_calls(cf, graph_def)

    # The copy that is placed: captured variables as VarHandleOps, pinned to their devices.
    to_place = _copy(graph_def)
    nodes = {n.name: n for n in to_place.node}
    pins = {}
    # A captured variable is named as the user named it (``my_weight``), not by the op that
    # reads it inside the function (``mul/ReadVariableOp/resource``).
    variables = {id(v.handle): v.name.split(":")[0] for v in cf.graph.variables}
    for external, internal in cf.graph.captures:
        name = internal.op.name
        if external.dtype not in _PINNED_DTYPES or name not in nodes:
            continue
        what = (f"captured variable {variables[id(external)]!r}" if id(external) in variables
                else f"captured {external.dtype.name} {name!r}")
        if not external.device:
            raise ConfigError(f"{what} of {_fn_name(cf)} has no device; cannot pin its "
                              "readers to it")
        pins[name] = _cluster_device(cluster, external.device, what)
        # Its device, written on the copy: ingestion sees which resources live apart (a loop
        # reading variables on two devices is then not one group; tf_autoplace.graph.ingest).
        nodes[name].device = pins[name]
        if external.dtype == tf.resource:
            _resource_as_variable(nodes[name], internal)

    meta_graph = ingest.load_meta_graph(to_place)
    estimated = AnalyticalCostModel(meta_graph, unknown_dim=options.unknown_dim)
    base = options.cost_model or estimated
    if options.cost_profile is not None:  # measured times; what it lacks is estimated
        base = ProfileCostModel.from_file(options.cost_profile, fallback=estimated)
    pinned = PinnedCostModel(base, pins)
    advice = options.trust_advice or (
        "for figures to trust, time the placed function by calling it"
        + ("" if options.cost_profile is not None
           else ", or place it with a cost profile (tf-autoplace profile)"))
    report = place_graph(to_place, options.replace(cluster=cluster, cost_model=pinned,
                                                   cost_profile=None, trust_advice=advice))
    placed_def = apply_to_graph_def(graph_def, report.assignment)
    apart = _loops_over_two_devices(placed_def, pins)
    for node in apart:
        node.device = ""

    notes = list(report.notes)
    if options.cost_profile is not None:
        notes += profile_notes(base, options.cost_profile)
    if pins:
        notes.append(f"{len(pins)} captured resources were pinned to the devices they live on "
                     "(their readers and updaters follow them)")
    if apart:
        notes.append(
            f"{len(apart)} loop(s) read resources that live on two devices (e.g. "
            f"{apart[0].name!r}): TensorFlow places such a loop's body with each resource and "
            "its While op by them, so the op is left without a device for it (a device on it "
            "breaks a GradientTape around the call); the simulated figures assumed "
            f"{report.assignment.get(apart[0].name, 'a device')!r}")
    single = _call_ops(placed_def) + [n for n in placed_def.node if n.op in CONTROL_FLOW_OPS]
    if single:
        notes.append(f"{len(single)} function calls and functional control-flow ops "
                     f"(If/While/Case) are placed as single ops (e.g. {single[0].name!r})")
    seen = {n.name for n in single}
    carriers = [n for n in placed_def.node if n.name not in seen and _runs_functions(n)]
    if carriers:  # a loop over a dataset in a tf.function: AutoGraph's Scan/ReduceDataset
        notes.append(
            f"{len(carriers)} ops run functions of their own (e.g. {carriers[0].name!r}, a "
            f"{carriers[0].op}): what those functions do runs where the op is, not placed op "
            "by op; a training loop written as `for batch in dataset` inside a tf.function "
            "is such an op, so place the step function and loop over the dataset outside it")
    if runs_here:
        notes.extend(_missing_devices_note(report.assignment))
    report = dataclasses.replace(report, notes=tuple(notes), graph_def=placed_def)
    placed = PlacedFunction(concrete_function=_rebuild(cf, placed_def), report=report,
                            original=cf, defaults=_defaults(fn),
                            varargs=any(p.kind == p.VAR_POSITIONAL
                                        for p in _python_parameters(fn)))
    return placed, report


def _loops_over_two_devices(graph_def, pins: Mapping[str, str]) -> list:
    """The ``While`` nodes of ``graph_def`` whose resource loop variables come from captured
    resources (``pins``: placeholder -> device) on two devices, through other loops.

    TensorFlow pins a function's resource outputs to the device their producer asks for: a
    loop given a device, whose loop variables include a variable on another device, fails
    ("a reference or resource edge connects colocation groups with incompatible assigned
    devices") as soon as a GradientTape makes the loop's outputs outputs of the function.
    Without a device, TF's placer puts it by its resources, as it does unplaced."""
    by_name = {node.name: node for node in graph_def.node}
    out = []
    for node in graph_def.node:
        if node.op not in ingest.WHILE_OPS:
            continue
        devices = set()
        for port in range(sum(not i.startswith("^") for i in node.input)):
            origin = ingest.resource_origin(by_name, node.name, port)
            if origin in pins:
                devices.add(pins[origin])
        if len(devices) > 1:
            out.append(node)
    return out


def _runs_functions(node) -> bool:
    """Whether ``node`` has a function among its attributes (tf.data's Map/Scan/Reduce
    datasets, a py_function's host-side call aside): TF runs that function as part of it."""
    return any(value.HasField("func") or (value.HasField("list") and len(value.list.func))
               for value in node.attr.values())


def devices_missing_here(assignment) -> list[str]:
    """The devices of ``assignment`` (op name -> device) this process has no logical device
    for, sorted (none: an empty list)."""
    def local(name):  # eager names this process's devices without a job: "/device:CPU:0"
        spec = tf.DeviceSpec.from_string(name)
        return (spec.replace(job="localhost", replica=0, task=0) if spec.job is None
                else spec).to_string()

    return missing_devices(sorted({d for d in assignment.values() if d}),
                           [local(d.name) for d in tf.config.list_logical_devices()])


def cannot_run_here(what: str, missing) -> ConfigError:
    """The error for calling ``what`` (a placed function, a Keras model's step) here: it was
    placed on the devices ``missing``, which this process lacks, and soft device placement is
    off, so TensorFlow would fail with an error naming one op of the placed graph."""
    return ConfigError(
        f"{what} was placed on devices this process does not have ({', '.join(missing)}) and "
        "soft device placement is off, so TensorFlow cannot run it here: place for this "
        "process's devices (cluster='local' or a spec of them; logical CPUs need "
        "tf.config.set_logical_device_configuration before TensorFlow starts), or turn soft "
        "placement on, which runs those ops on the devices there are")


def _missing_devices_note(assignment) -> list:
    """A note naming the devices of ``assignment`` this process has no logical device for
    (none: an empty list). TF's soft placement (on by default in TF2) then runs their ops on
    devices it has, so what runs is not the placement the report describes; with soft
    placement off, the call fails."""
    missing = devices_missing_here(assignment)
    if not missing:
        return []
    return [f"this process has no device {', '.join(missing)}: TensorFlow's soft placement "
            "runs their ops on the devices it has (with soft placement off, the call fails), "
            "so what runs is not the placement described here; plan for these devices, run "
            "where they exist (for logical CPUs: tf.config.set_logical_device_configuration "
            "before TensorFlow starts)"]


# ------------------------------------------------------------------------------- SavedModel
def is_saved_model(path) -> bool:
    """True when ``path`` is a directory holding a ``saved_model.pb`` (or ``.pbtxt``)."""
    path = os.fspath(path)
    return os.path.isdir(path) and any(
        os.path.isfile(os.path.join(path, f)) for f in ("saved_model.pb", "saved_model.pbtxt"))


def _read_saved_model(path: str) -> saved_model_pb2.SavedModel:
    from google.protobuf import message, text_format

    proto = saved_model_pb2.SavedModel()
    binary = os.path.join(path, "saved_model.pb")
    try:
        if os.path.isfile(binary):
            with open(binary, "rb") as f:
                proto.ParseFromString(f.read())
        else:
            with open(os.path.join(path, "saved_model.pbtxt"), encoding="utf-8") as f:
                text_format.Parse(f.read(), proto)
    except (OSError, UnicodeDecodeError, message.DecodeError, text_format.ParseError) as e:
        raise InvalidGraphError(f"{path!r} is not a readable SavedModel: {e}") from e
    if not proto.meta_graphs:
        raise InvalidGraphError(f"{path!r}: the SavedModel holds no MetaGraph")
    return proto


@dataclasses.dataclass(frozen=True, eq=False)
class PlacedSavedModel:
    """A placed SavedModel, in memory until written.

    Attributes:
      report: the PlacementReport.
      write: ``write(directory)`` saves the placed SavedModel into ``directory`` (existing and
        empty).
    """

    report: object
    write: Callable[[str], None]


def place_saved_model(input_dir, output_dir, *, cluster=None, placer=DEFAULT_PLACER, seed: int = 0,
                      signature: str | None = None, tags=("serve",),
                      grouping: GroupingConfig = GroupingConfig(),
                      cost_model: CostModel | None = None, unknown_dim: int = 1, cache=None,
                      progress=None):
    """Place a SavedModel and write the placed SavedModel to ``output_dir`` (see the module
    docstring for TF2 vs TF1 SavedModels; ``cache`` and ``progress`` as for
    :func:`tf_autoplace.autoplace`, None: none). Returns the PlacementReport.

    ``signature`` names the TF2 SavedModel's signature to place (None: ``serving_default``);
    a TF1 SavedModel's whole MetaGraph (of ``tags``) is placed, and a signature given must be
    one of its signatures (a ConfigError naming them otherwise).

    ``output_dir`` must not exist (or be an empty directory), its parent must exist, and it
    must lie outside ``input_dir``; all are checked before any work. Nothing is written until the placement is done, and the
    directory then appears whole (:mod:`tf_autoplace.outputs.files`). Raises an
    :class:`AutoplaceError` on bad input and an OSError when the output cannot be written,
    leaving nothing behind.
    """
    options = PlaceOptions.make(placer=placer, cluster=cluster, seed=seed, grouping=grouping,
                                cost_model=cost_model, unknown_dim=unknown_dim, cache=cache,
                                progress=progress)
    output_dir = files.check_output_path(output_dir, "output", directory=True)
    if files.is_within(output_dir, input_dir):
        raise ConfigError(f"output_dir {output_dir!r} lies in the input SavedModel "
                          f"{os.fspath(input_dir)!r}, which must stay as it is: write the placed "
                          "SavedModel outside it")
    placed = load_and_place_saved_model(input_dir, options, signature=signature, tags=tags)
    outputs = files.Outputs()
    outputs.add_directory(output_dir, placed.write)
    outputs.commit()
    return placed.report


def load_and_place_saved_model(input_dir, options: PlaceOptions, *,
                               signature: str | None = None,
                               tags=("serve",)) -> PlacedSavedModel:
    """Place the SavedModel in ``input_dir`` as ``options`` say, without writing anything
    (``signature`` and ``tags`` as for :func:`place_saved_model`): a :class:`PlacedSavedModel`
    to write where the caller chooses, e.g. together with other outputs."""
    if options.cost_profile is not None or options.measure_steps or options.verify:
        raise ConfigError("a SavedModel is placed without a cost profile or measured steps: "
                          "its function graph has other op names than a profile's, and it "
                          "has no training step to time")
    input_dir = os.fspath(input_dir)
    if not is_saved_model(input_dir):
        raise InvalidGraphError(f"{input_dir!r} is not a SavedModel directory (no "
                                "saved_model.pb)")
    proto = _read_saved_model(input_dir)
    if any(len(mg.object_graph_def.nodes) for mg in proto.meta_graphs):  # TF2
        return _place_tf2_saved_model(input_dir, options,
                                      signature=signature or "serving_default", tags=tags)
    return _place_tf1_saved_model(input_dir, proto, options, signature=signature, tags=tags)


KERAS_METADATA = "keras_metadata.pb"  # written beside saved_model.pb by tf_keras' model.save


_SPECIAL_KINDS = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
                  (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _copy_served_files(input_dir, name, directory=None) -> list[str]:
    """Copy ``input_dir/name`` (``assets.extra/``, TF Serving's warm-up requests, or a TF1
    SavedModel's ``variables/`` and ``assets/``) to ``directory/name``, as ``cp -rL`` would,
    and return notes on what was left out; ``directory`` None copies nothing and only returns
    the notes (for the report, which is made before the output is written).

    A link whose target exists is followed and its contents copied, so that the placed
    SavedModel is self-contained: a relative link out of the model's directory (a warm-up
    file shared by versions, ``../../warmup``) dangled in the copy, and the server lost the
    file without a word. A link that dangles already is kept as the same link (it dangled
    before too; it must not fail the placement); one to a directory holding it (a cycle)
    becomes a relative link to that directory's copy, so the copy neither recurses forever
    nor points back at the input. A FIFO, socket or device is never opened (reading a FIFO
    would block): it is left out, and a note says so. ``name`` may be a directory or a plain
    file; absent, nothing happens.
    """
    notes = []
    ancestors = {}  # (st_dev, st_ino) of the directories being copied -> their copy: a link
    # back to one would copy forever

    def copy(src, dst, rel):
        try:
            info = os.stat(src)  # follows links; opens nothing
        except OSError:
            info = None
        if info is None:  # a dangling link: the same link
            if directory is not None:
                os.symlink(os.readlink(src), dst)
            return
        if stat.S_ISDIR(info.st_mode) and (info.st_dev, info.st_ino) in ancestors:
            # A cycle (a link to a directory holding it): a link to that directory's copy,
            # so the placed SavedModel neither copies forever nor points back at the input.
            if directory is not None:
                target = ancestors[(info.st_dev, info.st_ino)]
                os.symlink(os.path.relpath(target, os.path.dirname(dst)), dst)
            return
        if stat.S_ISDIR(info.st_mode):
            if directory is not None:
                os.mkdir(dst)
            ancestors[(info.st_dev, info.st_ino)] = dst
            for entry in sorted(os.listdir(src)):
                copy(os.path.join(src, entry), dst and os.path.join(dst, entry),
                     f"{rel}/{entry}")
            del ancestors[(info.st_dev, info.st_ino)]
            if directory is not None:
                shutil.copystat(src, dst)
        elif stat.S_ISREG(info.st_mode):
            if directory is not None:
                shutil.copy2(src, dst)
        else:
            kind = next((k for test, k in _SPECIAL_KINDS if test(info.st_mode)),
                        "not a regular file")
            notes.append(f"{rel} in the input SavedModel is {kind}, not a file: the placed "
                         "SavedModel leaves it out")

    src = os.path.join(input_dir, name)
    if os.path.lexists(src):
        copy(src, directory and os.path.join(directory, name), name)
    return notes


def _place_tf2_saved_model(input_dir, options, *, signature, tags):
    try:
        loaded = tf.saved_model.load(input_dir, tags=list(tags) if tags else None)
    except Exception as e:  # noqa: BLE001 - TF's loader on a user's files: a missing
        # variables/ directory is an OSError, a truncated shard an IndexError, a bad proto
        # a ValueError; each means this input cannot be read, and says so in one line.
        raise InvalidGraphError(f"tf.saved_model.load({input_dir!r}) failed: "
                                f"{type(e).__name__}: {' '.join(str(e).split())}") from e
    signatures = dict(loaded.signatures)
    if signature not in signatures:
        raise ConfigError(f"{input_dir!r} has no signature {signature!r}; it has "
                          f"{sorted(signatures)}")
    placed, report = place_function(signatures[signature], (), {}, options, runs_here=False)
    signatures[signature] = placed.concrete_function
    # Files for the server (warm-up requests) that tf.saved_model.save does not write.
    report = dataclasses.replace(report, notes=report.notes + tuple(
        _copy_served_files(input_dir, "assets.extra")))
    if os.path.exists(os.path.join(input_dir, KERAS_METADATA)):
        # tf_keras' own record of the layers, which tf.saved_model.save does not write: the
        # copy serves, but tf_keras.models.load_model no longer rebuilds a Keras model from it.
        report = dataclasses.replace(report, notes=report.notes + (
            f"the input is a tf_keras SavedModel ({KERAS_METADATA}): the placed copy keeps its "
            "signatures, functions and variables (tf.saved_model.load, TF Serving), but not "
            "that Keras metadata, so tf_keras.models.load_model reads it as a plain object "
            "without fit or predict; to train or predict with a placed Keras model, place it "
            "in the program that builds it (tf_autoplace.autoplace(model))",))

    def write(directory):
        try:
            tf.saved_model.save(loaded, directory, signatures=signatures)
        except tf.errors.OpError as e:  # a write TF's file system refused (no space, a
            # size limit): an I/O error, as for every other output
            raise OSError(f"tf.saved_model.save: {e.message}") from e
        _copy_served_files(input_dir, "assets.extra", directory)

    return PlacedSavedModel(report=report, write=write)


_VARIABLE_OPS = frozenset({"VariableV2", "Variable", "VarHandleOp"})


def _check_tf1_variables(input_dir, meta_graph) -> None:
    """InvalidGraphError unless a TF1 SavedModel whose graph has variables has them in
    ``variables/``: an index TensorFlow reads, and data shards at least as large as the
    numeric tensors the index lists (the output copies ``variables/`` as it is, and a missing
    or truncated checkpoint only fails when the placed model is loaded)."""
    if not any(node.op in _VARIABLE_OPS for node in meta_graph.graph_def.node):
        return
    prefix = os.path.join(input_dir, "variables", "variables")
    try:
        reader = tf.train.load_checkpoint(prefix)
        shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    except Exception as e:  # noqa: BLE001 - TF's reader on a user's files, in one line
        raise InvalidGraphError(f"{input_dir!r}: its variables cannot be read "
                                f"({type(e).__name__}: {_shortened(str(e))}); "
                                "the placed SavedModel would not load") from e
    need = sum(int(np.prod(shapes[name], dtype=np.int64)) * dtypes[name].size
               for name in shapes if dtypes[name] != tf.string)
    shards = [os.path.join(os.path.dirname(prefix), f)
              for f in os.listdir(os.path.dirname(prefix)) if f.startswith("variables.data-")]
    have = sum(os.path.getsize(f) for f in shards)
    if have < need:
        raise InvalidGraphError(f"{input_dir!r}: its variables' data holds {have} bytes, and "
                                f"its index describes {need}: the checkpoint is truncated; "
                                "the placed SavedModel would not load")


def _place_tf1_saved_model(input_dir, proto, options, *, signature, tags):
    wanted = set(tags)
    found = [i for i, mg in enumerate(proto.meta_graphs)
             if set(mg.meta_info_def.tags) == wanted]
    if not found:
        raise ConfigError(f"{input_dir!r} has no MetaGraph tagged {sorted(wanted)}; it has "
                          f"{[sorted(mg.meta_info_def.tags) for mg in proto.meta_graphs]}")
    meta_graph = proto.meta_graphs[found[0]]
    if signature is not None and signature not in meta_graph.signature_def:
        raise ConfigError(f"{input_dir!r} has no signature {signature!r} in its MetaGraph "
                          f"tagged {sorted(wanted)}; it has {sorted(meta_graph.signature_def)} "
                          "(the whole MetaGraph is placed: no signature needs naming)")
    _check_tf1_variables(input_dir, meta_graph)
    report = place_graph(meta_graph, options)
    copied = ("variables", "assets", "assets.extra")  # fingerprint.pb would be stale
    report = dataclasses.replace(report, notes=report.notes + tuple(
        note for sub in copied for note in _copy_served_files(input_dir, sub)))
    out = saved_model_pb2.SavedModel()
    out.CopyFrom(proto)
    out.meta_graphs[found[0]].graph_def.CopyFrom(report.graph_def)
    data = out.SerializeToString(deterministic=True)  # same input and seed, same bytes

    def write(directory):
        with open(os.path.join(directory, "saved_model.pb"), "wb") as f:
            f.write(data)
        for sub in copied:
            _copy_served_files(input_dir, sub, directory)

    return PlacedSavedModel(report=report, write=write)
