"""Buffer sharing: which op outputs TensorFlow hands over without allocating memory.

Many TF kernels do not allocate their output: they return a tensor that shares the buffer of
one of their inputs or of a variable. The simulator's memory accounting
(:mod:`tf_autoplace.sim.simulator`) reads this from :attr:`OpGraph.tensor_alias
<tf_autoplace.graph.opgraph.OpGraph.tensor_alias>`, which ingestion and the cost graph reader
fill with :func:`output_aliases`, one op at a time, from the op's type and the tensors it reads
(its data inputs in input order):

* **views of a variable** (:data:`VIEW_TYPES`): a variable op's output (a resource handle or a
  reference, whose bytes are the variable's persistent buffer) and ``ReadVariableOp``'s value,
  which is the variable's buffer itself until someone writes the variable while the value is
  still read (then TF copies; not modelled). They add no bytes. ``ALIAS_VIEW`` (-2).
* **forwarded inputs** (:data:`FORWARD_TYPES`): output ``p`` is input 0's buffer (input ``p``
  for ``IdentityN``): identities, reshapes (``Reshape``, ``ExpandDims``, ``Squeeze``,
  ``Bitcast``), checks (``CheckNumerics``, ``EnsureShape``), control-flow forwarding (``Enter``,
  ``Exit``, ``Switch``, ``NextIteration``) and the reference-variable updates (``Assign``,
  ``ApplyAdam``, ``ScatterUpdate``, ... return their variable input). The tensor's buffer
  lives until every holder of either tensor is done.
* every other output has its own buffer (``ALIAS_NONE``, -1). ``Snapshot`` copies on purpose.

Elementwise kernels (``AddV2``, ``Relu``, ``ReluGrad``, ``BiasAdd``, ``AddN``, ``Softmax``,
the cross-entropy's gradient, ...; :data:`REUSE_INPUTS`) go further at run time: they write an
output into an input's buffer when nothing else holds that buffer any more and it has the
output's size. Whether they can
depends on the schedule, so the simulator decides it as it runs (:func:`reuse_inputs` says which
inputs an op tries); a constant's or a fed value's buffer is never taken over
(:data:`NOT_REUSABLE`).

Checked against TF 2.21 on CPU: the outputs of the forwarding types and, when their input has
no other reader, of the reusing types carry their input's buffer address in a traced step's
allocation descriptions (``Snapshot``'s and ``Cast``'s do not).
"""

from __future__ import annotations

from typing import Sequence

ALIAS_NONE = -1  # the tensor has a buffer of its own
ALIAS_VIEW = -2  # the tensor is a view of a variable's persistent buffer

VARIABLE_TYPES = frozenset({"VarHandleOp", "VariableV2", "Variable", "TemporaryVariable"})
VIEW_TYPES = VARIABLE_TYPES | {"ReadVariableOp"}

_REF_UPDATE_PREFIXES = ("Apply", "SparseApply", "Assign", "Scatter")
# Ops of those prefixes that build a new tensor rather than return the variable they updated.
_NOT_REF_UPDATES = frozenset({"ScatterNd", "ScatterNdNonAliasingAdd"})
FORWARD_TYPES = frozenset({
    "Identity", "IdentityN", "RefIdentity", "StopGradient", "PreventGradient",
    "PlaceholderWithDefault", "Reshape", "ExpandDims", "Squeeze", "Bitcast", "EnsureShape",
    "CheckNumerics", "Enter", "RefEnter", "Exit", "RefExit", "Switch", "RefSwitch",
    "NextIteration", "RefNextIteration"})


def forwards_input(op_type: str) -> bool:
    """True when ``op_type``'s outputs share an input's buffer (module docstring)."""
    return op_type in FORWARD_TYPES or (op_type.startswith(_REF_UPDATE_PREFIXES)
                                        and op_type not in _NOT_REF_UPDATES)


def output_aliases(op_type: str, num_outputs: int, inputs: Sequence[int]) -> list[int]:
    """How each output of one op gets its buffer.

    Args:
      op_type: the op's TF type.
      num_outputs: how many output tensors it has.
      inputs: the tensor index of each of its data inputs, in input order.

    Returns:
      ``num_outputs`` ints: ``ALIAS_VIEW``, ``ALIAS_NONE`` or the index (from ``inputs``) of the
      tensor whose buffer the output shares (module docstring).
    """
    if op_type in VIEW_TYPES:
        return [ALIAS_VIEW] * num_outputs
    if not inputs or not forwards_input(op_type):
        return [ALIAS_NONE] * num_outputs
    if op_type == "IdentityN":
        return [int(inputs[p]) if p < len(inputs) else ALIAS_NONE for p in range(num_outputs)]
    return [int(inputs[0])] * num_outputs


# Kernels that write an output into an input's buffer when nothing else holds that buffer
# (TensorFlow's forward_input_or_allocate_output): type -> (that output, the inputs tried in
# order).
_UNARY = ("Relu", "Relu6", "Elu", "Selu", "Softplus", "LeakyRelu", "Tanh", "Sigmoid", "Neg",
          "Sqrt", "Rsqrt", "Square", "Exp", "Log", "Log1p", "Abs", "Sign", "Floor", "Round",
          "Reciprocal", "Erf", "Sin", "Cos", "ZerosLike", "OnesLike", "ClipByValue", "Softmax",
          "LogSoftmax")
_BINARY = ("AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "SquaredDifference", "Pow",
           "DivNoNan", "MulNoNan", "FloorDiv", "Xdivy", "ReluGrad", "Relu6Grad", "EluGrad",
           "SoftplusGrad", "TanhGrad", "SigmoidGrad", "RsqrtGrad", "SqrtGrad", "ReciprocalGrad")
REUSE_INPUTS = {**{t: (0, (0,)) for t in _UNARY}, **{t: (0, (0, 1)) for t in _BINARY},
                "BiasAdd": (0, (0,)), "Select": (0, (1, 2)), "SelectV2": (0, (1, 2)),
                # the gradient (output 1) goes into the logits' buffer
                "SparseSoftmaxCrossEntropyWithLogits": (1, (0,)),
                "SoftmaxCrossEntropyWithLogits": (1, (0,))}
# Producers whose buffers no kernel takes over: a constant's value lives in its kernel, a fed
# value in the caller's memory.
NOT_REUSABLE = frozenset({"Const", "HostConst", "Placeholder", "PlaceholderV2"})


def reuse_inputs(op_type: str, num_inputs: int) -> tuple[int, tuple[int, ...]]:
    """``(output, inputs)``: the output of an op of ``op_type`` with ``num_inputs`` data inputs
    that TensorFlow writes into the buffer of one of ``inputs`` (input positions, tried in
    this order) when nothing else holds that buffer and it has the output's size (its
    in-place kernels; ``AddN`` tries every input). ``(-1, ())`` for every other type."""
    if op_type == "AddN":
        return (0, tuple(range(num_inputs))) if num_inputs else (-1, ())
    output, inputs = REUSE_INPUTS.get(op_type, (-1, ()))
    inputs = tuple(p for p in inputs if p < num_inputs)
    return (output, inputs) if inputs else (-1, ())
