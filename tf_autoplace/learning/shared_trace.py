"""Policy methods traced once per architecture and process, not once per policy.

A ``tf.function`` method of a ``tf.Module`` captures that module's variables, so every new
policy traces its methods again (and, under a gradient tape, builds their backward passes, and
with XLA compiles them per input shape): about half a second to a few seconds per method and
policy. The learned placers make policies often: one per graph placed, a fine-tuned copy, a
reloaded one, a fresh one per device count; the default placer makes one for its zero-shot
start on every run.

:func:`shared_method` replaces ``@tf.function(input_signature=...)`` on such a method. The
method is traced once per class, architecture (the policy's ``config`` without its ``seed``)
and process, with the policy's variables as *arguments*: during the trace the method runs on a
shallow copy of the first policy whose variables are the arguments' (:func:`_rebind`). Any
later policy of that architecture calls the same concrete function with its own variables.
Variables passed as arguments are read inside the graph, as captured ones are, and a gradient
tape around the call sees them, so results and gradients are those of a per-policy
``tf.function`` (the same ops on the same values).
"""

from __future__ import annotations

import functools
import json
import weakref

import tensorflow as tf

# (class, method, architecture) -> the tf.function shared by every policy of them.
_FUNCTIONS: dict[tuple, object] = {}
# policy -> {method: (concrete function, the policy's variables in tf.Module order)}.
_BOUND: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def architecture(policy) -> str:
    """What decides a policy's traced graph: its ``config`` without the seed, as a key."""
    return json.dumps({k: v for k, v in policy.config.items() if k != "seed"}, sort_keys=True,
                      default=str)


def shared_method(input_signature, *, jit_compile: bool = False):
    """Decorator for a method of a ``tf.Module`` policy with a ``config`` dict: the method as a
    ``tf.function`` of ``input_signature``, traced once per architecture and process (module
    doc). Arguments are converted to the signature's dtypes.

    Args:
      input_signature: the method's arguments after ``self`` (TensorSpecs; unknown dimensions
        as None, so one trace serves every shape).
      jit_compile: compile the method with XLA (once per input shape and process).
    """

    def decorate(body):
        name = body.__name__

        @functools.wraps(body)
        def method(self, *args):
            bound = _BOUND.setdefault(self, {})
            if name not in bound:
                variables = list(self.variables)
                fn = shared_function(self, name)
                if fn is None:
                    fn = _define(self, name, body, jit_compile)
                bound[name] = (fn.get_concrete_function(variables, *input_signature),
                               variables)
            concrete, variables = bound[name]
            return concrete(variables, *(tf.convert_to_tensor(arg, spec.dtype)
                                         for arg, spec in zip(args, input_signature)))

        return method

    return decorate


def shared_function(policy, name: str):
    """The ``tf.function`` that ``policy``'s method ``name`` runs, or None before its first
    call on a policy of this architecture (for tests: its tracing count)."""
    return _FUNCTIONS.get((type(policy), name, architecture(policy)))


def _define(template, name, body, jit_compile):
    """The shared ``tf.function`` of ``body`` for ``template``'s class and architecture; the
    trace runs ``body`` on ``template`` rebound to the variables it is given. The function
    keeps ``template`` alive (one policy per architecture and process) in case it traces
    again."""

    def traced(variables, *args):
        return body(_rebind(template, variables), *args)

    fn = tf.function(traced, jit_compile=jit_compile, autograph=False)
    _FUNCTIONS[(type(template), name, architecture(template))] = fn
    return fn


def _rebind(module: tf.Module, variables) -> tf.Module:
    """A shallow copy of ``module`` (and of the modules, lists, tuples and dicts under it) in
    which the i-th of ``module.variables`` is ``variables[i]``; everything else is shared."""
    new = {id(old): v for old, v in zip(module.variables, variables)}
    memo = {}  # id -> copy: a module reached twice is copied once

    def copy(obj):
        if isinstance(obj, tf.Variable):
            return new.get(id(obj), obj)
        if id(obj) in memo:
            return memo[id(obj)]
        if isinstance(obj, tf.Module):
            clone = memo[id(obj)] = object.__new__(type(obj))
            for key, value in vars(obj).items():
                object.__setattr__(clone, key, copy(value))
            return clone
        if isinstance(obj, tuple):
            return tuple(copy(x) for x in obj)
        if isinstance(obj, list):
            return [copy(x) for x in obj]
        if isinstance(obj, dict):
            return {key: copy(value) for key, value in obj.items()}
        return obj

    return copy(module)
