"""Keras door: ``model.fit``, ``evaluate`` and ``predict`` run placed functions.

Keras 3 (TensorFlow backend) and tf_keras both run a model through three functions they build
on first use, ``model.train_function``, ``test_function`` and ``predict_function``: each takes
batches from the epoch's iterator and calls a ``tf.function`` of ``train_step`` /
``test_step`` / ``predict_step`` on one batch (Keras 3's ``TensorFlowTrainer._make_function``,
tf_keras' ``Model.make_train_function``; checked with Keras 3.15 and tf_keras 2.21).
:func:`autoplace_model` replaces the model's ``make_train_function``, ``make_test_function``
and ``make_predict_function`` with ones that build the same loop around a *placed* step:

1. On the first batch a function sees, its step (``model.train_step(data)``, for tf_keras
   followed by the model's step counter, as tf_keras does) is traced as a ``tf.function`` with
   the batch's structure and dtypes and the shapes Keras' own step would be traced with: the
   ``element_spec`` of the ``tf.data`` iterator Keras reads in its graph (fit and evaluate;
   fixed batch size when the arrays hold whole batches, free when the last one is short), else
   the batch's shapes with the batch dimension free (any batch size runs), or, if the step
   cannot be traced so (a ``call`` that reshapes to ``x.shape[0]``), the batch's own shapes;
   or with the ``input_spec`` given.
2. That function is placed by the TF2 door (:func:`tf_autoplace.tf2.place_function`: its
   graph placed by the engine, the model's and optimizer's variables pinned to the devices
   they live on) and kept: every later batch runs it, and a later ``fit``/``evaluate``/
   ``predict`` reuses it. ``compile()`` again drops it (Keras builds its functions anew then),
   and the next batch places the new step.
3. Its report is in :attr:`KerasPlacement.reports` under ``"train"``, ``"test"`` or
   ``"predict"``. A batch of another structure (``(x, y)`` after ``(x, y, sample_weight)``:
   an evaluate after a fit validated with weights) gets a step placed for it, as Keras traces
   one per structure; so does a batch of another batch size no placed step takes, traced
   with the batch dimension free (as ``tf.function``'s ``reduce_retracing`` relaxes Keras'
   trace), so the batch size costs at most one more placement (a step that cannot be traced
   so is a ConfigError at that batch, where Keras' own trace fails too); the report is then
   the latest placement's. A batch runs on the most specific placed step whose spec
   takes what Keras' step would be traced with (the iterator's spec, else the batch), so a
   step placed for a fixed batch size does not serve an iterator whose batch size is free,
   and an iterator whose spec leaves free what its batches fix (tf_keras' Python generators
   leave every dimension free) gets a step traced with that spec, as Keras' own is.

Free dimensions are counted at the first batch's size in the cost model (``unknown_dim``),
so the simulated figures are the first batch's. A batch whose other dimensions differ from
every placed step's (a sequence length, a feature size), or that does not fit the
``input_spec`` given, is a ConfigError that names both shapes: give ``input_spec`` with None
in the dimensions that vary. So is an ``input_spec`` the first batch does not fit
(another structure, dtype, rank or fixed size), before anything is traced; and a ragged or
sparse batch, before anything is placed.

Not supported (ConfigError at :func:`autoplace_model`): a model in a program that disabled
eager execution (``tf.compat.v1.disable_eager_execution()``: tf_keras then trains with its TF1
loop, a Session running the default graph, which the training-binary door places:
``--autoplace`` or ``tf_autoplace.flags.install``), a model not compiled, compiled with
``run_eagerly=True`` (nothing is traced) or ``jit_compile=True`` (an XLA cluster runs on one
device and ignores per-op devices; compile with ``jit_compile=False``, which is also what
Keras picks on machines without GPUs), created under a ``tf.distribute`` strategy (the
strategy places the replicas; a placed model fit, evaluated or predicted inside a strategy's
scope is a ConfigError at its first batch), or a Keras 3 backend other than TensorFlow.
"""

from __future__ import annotations

import sys

import tensorflow as tf

from tf_autoplace.cost import CostModel
from tf_autoplace.errors import ConfigError
from tf_autoplace.grouping import GroupingConfig
from tf_autoplace.pipeline.options import PlaceOptions
from tf_autoplace.placers import DEFAULT_PLACER
from tf_autoplace.tf2 import cannot_run_here, devices_missing_here, place_function

KINDS = ("train", "test", "predict")
_ATTR = "_tf_autoplace_placement"  # where a model keeps its KerasPlacement


def _flavour(obj) -> str | None:
    """"keras" for a Keras 3 model, "tf_keras" for a tf_keras one, else None. Looks only at
    the Keras packages already imported: a model's own package is."""
    for package in ("keras", "tf_keras"):
        module = sys.modules.get(package)
        model_class = getattr(module, "Model", None) if module is not None else None
        if isinstance(model_class, type) and isinstance(obj, model_class):
            return package
    return None


def is_keras_model(obj) -> bool:
    """True for a Keras 3 or tf_keras ``Model`` (``Sequential`` and functional ones included)."""
    return _flavour(obj) is not None


def _steps_per_execution(model) -> int:
    value = getattr(model, "steps_per_execution", 1)
    if hasattr(value, "numpy"):  # tf_keras keeps it in a variable
        value = value.numpy()
    return max(int(value or 1), 1)


def _check_model(model, flavour: str) -> None:
    """ConfigError unless ``model`` runs compiled ``tf.function`` steps on the default
    strategy, the only way it can run placed steps."""
    name = type(model).__name__
    if flavour == "keras":
        import keras

        if keras.backend.backend() != "tensorflow":
            raise ConfigError(f"this {name} runs on Keras 3's {keras.backend.backend()!r} "
                              "backend; tf_autoplace places TensorFlow graphs: set "
                              "KERAS_BACKEND=tensorflow")
    if not tf.compat.v1.executing_eagerly_outside_functions():
        # tf_keras then runs fit/evaluate/predict with its TF1 loop (training_v1): functions
        # of the default graph run by a Session, never the make_*_function this door replaces.
        raise ConfigError(
            f"eager execution is disabled (tf.compat.v1.disable_eager_execution()), so this "
            f"{name} trains with Keras' TF1 loop in the default graph, run by a Session, "
            "which the Keras door does not see; place that graph as it runs with the "
            "training-binary door: the --autoplace flag, or tf_autoplace.flags.install("
            "tf_autoplace.flags.AutoplaceSettings(placer=..., cluster=...)) before fit")
    if not getattr(model, "compiled", getattr(model, "_is_compiled", False)):
        raise ConfigError(f"call {name}.compile(...) before autoplace_model: the functions "
                          "fit, evaluate and predict run are built from the compiled model")
    if model.run_eagerly:
        # tf_keras' run_eagerly also follows tf.config.run_functions_eagerly(True) when the
        # model was compiled without saying: name the switch that is on.
        raise ConfigError(
            f"this {name} runs eagerly (" + (
                "tf.config.run_functions_eagerly(True) is on, and the model was compiled "
                "without run_eagerly" if tf.config.functions_run_eagerly()
                and getattr(model, "_run_eagerly", True) is None
                else "it was compiled with run_eagerly=True")
            + "): nothing is traced, so there is no graph to place; compile with "
            "run_eagerly=False" + (" or call tf.config.run_functions_eagerly(False)"
                                   if tf.config.functions_run_eagerly() else ""))
    if model.jit_compile:
        raise ConfigError(f"this {name} was compiled with jit_compile=True (Keras picks it on "
                          "machines with a GPU): an XLA cluster runs on one device and "
                          "ignores per-op devices; compile with jit_compile=False to place it")
    strategy = getattr(model, "_distribute_strategy", None) or getattr(
        model, "_distribution_strategy", None)
    if strategy is not None:
        raise ConfigError(f"this {name} was created under a tf.distribute strategy "
                          f"({type(strategy).__name__}), which places its replicas itself; "
                          "create the model outside the strategy's scope to place it")


def _step_function(model, kind: str, flavour: str):
    """The ``tf.function`` Keras runs for one batch of ``kind`` on the default strategy."""
    step = getattr(model, f"{kind}_step")
    if flavour == "keras":  # Keras 3 traces its step without AutoGraph
        return tf.function(lambda data: step(data), autograph=False)
    counter = getattr(model, f"_{kind}_counter")

    def run(data):  # tf_keras' run_step: the step, then its counter once the step succeeded
        outputs = step(data)
        first = [t for t in tf.nest.flatten(outputs, expand_composites=True)
                 if not isinstance(t, tf.Variable)][:1]
        with tf.control_dependencies(first):
            counter.assign_add(1)
        return outputs

    return tf.function(run)


def _as_tensors(data):
    """A batch as the placed function takes it: Keras 3's ``tf.experimental.Optional``
    entries (an absent sample weight) as None, arrays as tensors."""
    def convert(value):
        if value is None or isinstance(value, tf.experimental.Optional):
            return None
        return value if tf.is_tensor(value) else tf.convert_to_tensor(value)

    return tf.nest.map_structure(convert, data)


def _free_batch_dimension(data):
    """``data``'s TensorSpecs with the first dimension of every non-scalar tensor free."""
    def spec(t):
        if t is None:
            return None
        shape = t.shape.as_list()
        return tf.TensorSpec([None] + shape[1:] if shape else [], t.dtype)

    return tf.nest.map_structure(spec, data)


def _own_shapes(data):
    """``data``'s TensorSpecs, every dimension as the batch has it."""
    return tf.nest.map_structure(
        lambda t: None if t is None else tf.TensorSpec(t.shape, t.dtype), data)


def _dense_specs(element_spec):
    """An iterator's ``element_spec`` as the placed step takes batches (TensorSpecs, None for
    anything else: Keras 3's absent sample weight), or None without one."""
    if element_spec is None:
        return None
    return tf.nest.map_structure(
        lambda s: s if isinstance(s, tf.TensorSpec) else None, element_spec)


def _takes(spec, seen) -> bool:
    """Whether a step traced with ``spec`` takes batches of ``seen`` (a batch, or the
    TensorSpecs of an iterator's batches) as Keras' trace for them would: the same structure
    and dtypes, and every dimension ``spec`` fixes fixed to that size in ``seen`` too."""
    leaves = _leaves(spec, seen)
    return leaves is not None and all(
        s is None and t is None or (
            s is not None and t is not None and s.dtype == t.dtype
            and s.shape.rank == t.shape.rank
            and all(a is None or a == b for a, b in zip(s.shape.as_list(), t.shape.as_list())))
        for s, t in leaves)


def _known_dims(spec) -> int:
    """How many dimensions ``spec`` fixes: the more, the more specific its trace."""
    return sum(sum(d is not None for d in s.shape.as_list())
               for s in tf.nest.flatten(spec) if s is not None)


def _relaxed(spec, data):
    """The most specific spec that both ``spec`` and ``data`` (same structure, dtypes and
    ranks) fit: every dimension they disagree on free."""
    return tf.nest.map_structure(
        lambda s, t: None if s is None else tf.TensorSpec(
            s.shape.most_specific_compatible_shape(t.shape), s.dtype), spec, data)


def _only_batch_freed(spec, relaxed) -> bool:
    """Whether ``relaxed`` frees no dimension of ``spec`` but the batch dimension (the first):
    a feature size that changes is a model's misuse or needs an ``input_spec``, not a step
    placed again for it."""
    return all(s is None or s.shape.as_list()[1:] == r.shape.as_list()[1:]
               for s, r in zip(tf.nest.flatten(spec), tf.nest.flatten(relaxed)))


def _batch_size(data) -> int:
    for t in tf.nest.flatten(data):
        if t is not None and t.shape.rank:
            return int(t.shape[0])
    return 1


def _shapes(structure) -> str:
    return str(tf.nest.map_structure(
        lambda t: None if t is None else t.shape.as_list(), structure))


def _specs(structure) -> str:
    """``structure``'s shapes and dtypes, as ``[[None, 8] float32, ...]``."""
    return str(tf.nest.map_structure(
        lambda t: None if t is None else f"{t.shape.as_list()} {t.dtype.name}", structure))


def _leaves(spec, data) -> list | None:
    """``[(spec leaf, data leaf)]`` when ``data`` has ``spec``'s structure, else None."""
    try:
        tf.nest.assert_same_structure(spec, data)
    except (ValueError, TypeError):
        return None
    return list(zip(tf.nest.flatten(spec), tf.nest.flatten(data)))


def _fits(spec, data) -> bool:
    """Whether the batch ``data`` (tensors and None) has the structure of ``spec`` and each
    tensor fits its TensorSpec (dtype, and every dimension the spec fixes)."""
    leaves = _leaves(spec, data)
    return leaves is not None and all(
        s is None and t is None or (s is not None and t is not None and s.is_compatible_with(t))
        for s, t in leaves)


def _spec_for(spec, kind: str, data):
    """The part of the user's ``input_spec`` (``(x, y)`` or ``(x, y, sample_weight)``) that
    ``kind``'s batch ``data`` carries: the whole spec, or its first entries when the batch has
    fewer (validation batches of a fit with sample weights are ``(x, y)``), or x alone or as
    ``(x,)`` (predict's batches, unless it reads fit's dataset), or the spec with None for
    the batch's absent entries (``(x, y, None)``). A spec no part of which fits
    is returned whole (predict: x), for the caller's error."""
    if not isinstance(spec, (tuple, list)) or not spec:
        return spec
    # predict takes x, (x,), or the (x, y[, w]) batches of the dataset fit reads; Keras 3's
    # train_on_batch and test_on_batch pass (x, y, None) for an (x, y) spec
    parts = [tuple(spec[:k]) for k in range(len(spec), 1, -1)] + [spec[0], (spec[0],)]
    if isinstance(data, tuple) and len(data) > len(spec):
        parts.append(tuple(spec) + (None,) * (len(data) - len(spec)))
    for part in parts:
        if _fits(part, data):
            return part
    return spec[0] if kind == "predict" else spec


class _PlacedStep:
    """One kind's step: placed on the first batch of each structure it is called with (a fit
    with sample weights validates on ``(x, y, w)`` batches, a later evaluate may pass ``(x,
    y)``, as Keras traces a step per structure), then reused for that structure."""

    def __init__(self, placement: "KerasPlacement", kind: str):
        self._placement, self._kind = placement, kind
        self._placed: list = []  # (spec, placed function), one per batch structure
        self._last = None  # the placed function the last batch ran
        self._past: dict = {}  # id(placed function) -> its run past the end (past_the_end)

    def __call__(self, data, element_spec=None):
        """Run ``data`` (one batch) on the placed step for its shapes, placing one first if
        none fits; ``element_spec``: the spec of the iterator the batch came from, when Keras'
        own step function reads it in its graph (and so is traced with it)."""
        if tf.distribute.has_strategy():  # the model was placed outside, then run inside one
            strategy = type(tf.distribute.get_strategy()).__name__
            raise ConfigError(f"{self._kind} ran under a tf.distribute strategy ({strategy}), "
                              "which places its replicas itself; run the placed model outside "
                              "the strategy's scope")
        composite = [type(t).__name__ for t in tf.nest.flatten(data)
                     if isinstance(t, (tf.RaggedTensor, tf.SparseTensor))]
        if composite:
            raise ConfigError(
                f"the model's {self._kind} batches hold a {composite[0]}: the Keras door "
                "places steps on dense batches only; convert the batches to dense tensors, or "
                "call remove() on the placement autoplace_model returned to run the model "
                "unplaced")
        data = _as_tensors(data)
        element_spec = _dense_specs(element_spec)
        if element_spec is not None and not _fits(element_spec, data):
            element_spec = None
        # What Keras' step would be traced with: the iterator's spec, else the batch. A step
        # placed for it is one whose spec takes it, the most specific one (as tf.function
        # picks among its traces): a step traced with a fixed batch size does not serve an
        # iterator whose batch size is free, where call() sees None.
        seen = data if element_spec is None else element_spec
        takes = [(_known_dims(spec), k) for k, (spec, _, given) in enumerate(self._placed)
                 if (_fits(spec, data) if given else _takes(spec, seen))]
        if takes:
            self._last = self._placed[max(takes)[1]][1]
            return self._last(data)
        for spec, _, given in self._placed:
            if not _same_structure(spec, data):
                continue
            # A batch whose own dimensions differ beyond the batch size is refused; an
            # iterator's spec may be looser than its batches (a generator's leaves every
            # dimension free), and Keras traces its step with that spec: so does this.
            relaxed = _relaxed(spec, seen)
            if given or not _only_batch_freed(spec, _relaxed(spec, data)):
                raise ConfigError(
                    f"the model's {self._kind} function was placed for batches shaped "
                    f"{_shapes(spec)} (None: any size)"
                    + (", as input_spec says," if given else "") + " and this batch is "
                    f"shaped {_shapes(data)}: give tf_autoplace.keras.autoplace_model(..., "
                    "input_spec=...) with None in every dimension that varies between "
                    "batches, or feed batches of one shape")
            # Keras traces its step again for batches of another batch size, with that
            # dimension left free (tf.function's reduce_retracing): so does this.
            self._last = self._place(data, relaxed, relaxed=True)
            return self._last(data)
        self._last = self._place(data, element_spec)
        return self._last(data)

    def past_the_end(self, iterator) -> None:
        """Run the step on ``iterator.get_next()`` in one graph, as Keras' own step function
        does once an iterator of unknown length is exhausted: that run fails with OutOfRange,
        but only after the step's stateful ops that do not read the batch ran (the
        optimizer's ``iterations``, a Dropout layer's seed generator). Keras' step does so at
        the end of every epoch of a generator or a filtered dataset; without this run those
        counters fall a step behind the unplaced model's per epoch, and every later Dropout
        mask and Adam step differs. Nothing is run before the step was placed on a batch."""
        if self._last is None:
            return
        run = self._past.get(id(self._last))
        if run is None:  # one per placed function (traced once per kind of iterator)
            # The step as traced, unplaced: this run computes nothing that is kept, and on
            # one device its ops that do not read the batch run before the failure stops it,
            # as the unplaced model's do; split over devices, some wait on a transfer that
            # the failure cancels.
            step = self._last.original
            run = self._past[id(self._last)] = tf.function(
                lambda it: step(_as_tensors(it.get_next())), autograph=False)
        try:
            run(iterator)
        except (StopIteration, tf.errors.OutOfRangeError):
            pass
        except (TypeError, ValueError):  # a step traced for a fixed batch size does not take
            pass  # the iterator's batches of any size: nothing runs, the counters stay behind

    def _place(self, data, element_spec=None, *, relaxed: bool = False):
        """Trace, place and keep the step for ``data``'s batches. The spec it is traced with:
        the user's ``input_spec`` (the part this batch carries); else ``element_spec`` when
        the batch fits it (the spec Keras' own step sees when it reads its iterator in the
        graph; where that cannot be traced, Keras' step fails too); else the batch's with its
        batch dimension free, so that one placement serves every batch size; and if the step
        cannot be traced so (a ``call`` that reads the static batch size, ``x.shape[0]``), the
        batch's own shapes, as Keras traces a first batch read in Python. ``relaxed``:
        ``element_spec`` is the relaxed spec of a batch no placed step takes, the one Keras
        would trace with: if the step cannot be traced so, Keras' cannot either, and neither is
        a step fixed to this batch's shapes placed (each new shape would be placed again)."""
        p = self._placement
        spec = _spec_for(p.input_spec, self._kind, data)
        if spec is not None and not _fits(spec, data):  # else Keras' ValueError when traced
            raise ConfigError(
                f"input_spec {_specs(spec)} does not fit the model's first {self._kind} batch "
                f"{_specs(data)}: give the structure fit passes to the step ((x, y) or (x, y, "
                "sample_weight)), its dtypes, and None in every dimension that varies")
        given = spec is not None
        if given:
            candidates = [spec]
        elif relaxed:
            candidates = [element_spec]
        else:
            element_spec = _dense_specs(element_spec)
            # Keras traces an iterator's batches with its spec, and fails where that fails
            candidates = ([element_spec] if element_spec is not None
                          and _fits(element_spec, data)
                          else [_free_batch_dimension(data), _own_shapes(data)])
        for k, spec in enumerate(candidates):
            step = _step_function(p.model, self._kind, p.flavour)
            try:
                step.get_concrete_function(spec)
                break
            except (TypeError, ValueError) as e:
                if k + 1 == len(candidates):
                    raise ConfigError(
                        f"cannot trace the model's {self._kind} step for batches "
                        f"{_specs(spec)} ({type(e).__name__}: {' '.join(str(e).split())})"
                        + ("" if given or relaxed
                           else f", nor for batches {_specs(candidates[0])}")
                        + ("; the step was placed for other shapes, and Keras would trace it "
                           "with these for this batch: feed batches of the shapes it was "
                           "placed for" if relaxed else "")
                        + "; give autoplace_model(..., input_spec=...) the batch shapes the "
                        "model can be traced with") from e
        options = p.options.replace(trust_advice="for figures to trust, time the placed "
                                    "model by fitting it (Keras prints its time per step)")
        if p.unknown_dim is None:  # free dimensions count at the first batch's size
            options = options.replace(unknown_dim=_batch_size(data))
        placed, report = place_function(step, (spec,), {}, options)
        missing = devices_missing_here(report.assignment)
        if missing and not tf.config.get_soft_device_placement():
            # TF would fail at this batch with "Unable to find any devices for spec"; a
            # Keras user never sees the report's note that says why.
            raise cannot_run_here(f"the model's {self._kind} step", missing)
        self._placed.append((spec, placed, given))
        p.reports[self._kind] = report
        return placed


def _same_structure(spec, data) -> bool:
    """Whether ``data`` has ``spec``'s structure and, leaf by leaf, its dtypes and ranks (so
    that only a dimension's size can keep it from fitting)."""
    leaves = _leaves(spec, data)
    return leaves is not None and all((s is None) == (t is None) and (s is None or (
        s.dtype == t.dtype and s.shape.rank == t.shape.rank)) for s, t in leaves)


def _reads_in_graph(iterator) -> bool:
    """Whether Keras' own step function reads ``iterator``'s batches inside its graph (a
    ``tf.data`` iterator; other iterables are read in Python)."""
    return isinstance(iterator, (tf.data.Iterator, tf.distribute.DistributedIterator))


def _iterator_function(step: _PlacedStep, model, flavour: str, *, join: bool = False):
    """Keras' train/test function and tf_keras' predict function: up to
    ``steps_per_execution`` batches from the iterator; the last one's outputs returned, or
    with ``join`` (tf_keras' predict) every batch's outputs joined on axis 0, as tf_keras'
    own predict function joins them (its caller keeps one result per execution)."""
    def function(iterator):
        outputs = []
        steps = _steps_per_execution(model)
        for _ in range(steps):
            try:
                data = next(iterator)
            except (StopIteration, tf.errors.OutOfRangeError):
                # Keras 3 reads one batch per call in its graph (several: as optionals, which
                # have no side effects); tf_keras reads every batch in its graph.
                if _reads_in_graph(iterator) and (flavour == "tf_keras" or steps == 1):
                    step.past_the_end(iterator)
                break
            outputs.append(step(data, getattr(iterator, "element_spec", None)
                                if _reads_in_graph(iterator) else None))
        if not outputs:
            raise StopIteration
        return _joined(outputs) if join else outputs[-1]

    return function


def _joined(outputs: list):
    """The outputs of several batches (one structure each) joined on axis 0, scalars
    stacked, as Keras' predict loops join them."""
    if len(outputs) == 1:
        return outputs[0]

    def join(*parts):
        return tf.stack(parts) if parts[0].shape.rank == 0 else tf.concat(parts, axis=0)

    return tf.nest.map_structure(join, *outputs)


def _keras3_predict_function(step: _PlacedStep):
    """Keras 3's predict function: a list of batches in, their outputs joined on axis 0."""
    def function(batches):
        return _joined([step(data) for data in batches])

    return function


class KerasPlacement:
    """What :func:`autoplace_model` did to a model: its functions run placed steps.

    Attributes:
      model: the model.
      flavour: ``"keras"`` (Keras 3) or ``"tf_keras"``.
      options: how its steps are placed.
      input_spec: the batch spec given, or None (each function's first batch).
      unknown_dim: elements counted per free dimension, or None (the first batch's size).
      reports: ``"train"``, ``"test"``, ``"predict"`` -> the PlacementReport of that
        function's placed step, once it ran.
    """

    def __init__(self, model, flavour: str, options: PlaceOptions, input_spec=None,
                 unknown_dim: int | None = None):
        self.model, self.flavour, self.options = model, flavour, options
        self.input_spec, self.unknown_dim = input_spec, unknown_dim
        self.reports: dict = {}
        self._originals: dict = {}

    @property
    def report(self):
        """The train function's report (None until ``fit`` ran a batch)."""
        return self.reports.get("train")

    def _install(self) -> None:
        for kind in KINDS:
            attribute = f"{kind}_function"
            self._originals[kind] = self.model.__dict__.get(f"make_{attribute}")

            def make(force=False, kind=kind, attribute=attribute):
                current = getattr(self.model, attribute, None)
                if current is not None and not force:
                    return current
                try:  # compile() may have changed the model since it was placed
                    _check_model(self.model, self.flavour)
                except ConfigError as e:
                    raise ConfigError(
                        f"{e}; or run it unplaced: it changed after autoplace_model "
                        "(compiled again, or run_eagerly or jit_compile set), and remove() on "
                        "the placement gives the model back Keras' own functions") from None
                step = _PlacedStep(self, kind)
                function = (_keras3_predict_function(step)
                            if kind == "predict" and self.flavour == "keras"
                            else _iterator_function(step, self.model, self.flavour,
                                                    join=kind == "predict"))
                setattr(self.model, attribute, function)
                return function

            setattr(self.model, f"make_{attribute}", make)
            setattr(self.model, attribute, _BuiltOnFirstCall(self.model, kind))

    def remove(self) -> None:
        """Give the model back Keras' own functions (built again on their next use). A
        placement that a later one replaced, or that was removed already, does nothing: the
        model's current placement stays."""
        if getattr(self.model, _ATTR, None) is not self:
            return
        for kind, original in self._originals.items():
            name = f"make_{kind}_function"
            if original is None:
                self.model.__dict__.pop(name, None)
            else:
                setattr(self.model, name, original)
            setattr(self.model, f"{kind}_function", _BuiltOnFirstCall(self.model, kind))
        delattr(self.model, _ATTR)


class _BuiltOnFirstCall:
    """What ``model.<kind>_function`` is until its first call, which builds the function with
    ``model.make_<kind>_function(force=True)`` (placed or Keras' own) and runs it.

    Keras builds the function when ``fit``/``evaluate``/``predict`` starts and then reads the
    attribute at every batch: None there (what Keras itself sets after ``compile()``) would
    be a TypeError in Keras' loop when the model is placed, or given back, from a callback in
    the middle of a fit. This builds it at the next batch instead."""

    def __init__(self, model, kind: str):
        self._model, self._kind = model, kind

    def __call__(self, *args, **kwargs):
        getattr(self._model, f"make_{self._kind}_function")(force=True)  # (Keras 3's
        # returns nothing: it sets the attribute)
        function = getattr(self._model, f"{self._kind}_function")
        if function is None or isinstance(function, _BuiltOnFirstCall):
            raise ConfigError(f"make_{self._kind}_function() built no {self._kind} function: "
                              "this Keras version builds its functions otherwise than the "
                              "Keras door expects (module doc)")
        return function(*args, **kwargs)


def autoplace_model(model, cluster=None, placer=DEFAULT_PLACER, seed: int = 0, *,
                    input_spec=None, grouping: GroupingConfig = GroupingConfig(),
                    cost_model: CostModel | None = None, unknown_dim: int | None = None,
                    budget_s: float | None = None, ray_address: str | None = None,
                    policy=None, cache=False, progress=True, cost_profile=None,
                    measure_steps: int = 0, measure_feeds=None,
                    verify: int = 0) -> KerasPlacement:
    """Make ``model.fit``, ``evaluate`` and ``predict`` run placed functions (module doc).

    Call it after ``model.compile(...)`` and before ``fit``; the placement happens on the
    first batch each function runs. Called from a callback during ``fit`` (or
    :meth:`KerasPlacement.remove` there), the batches after it run the placed step (or Keras'
    own).

    Args:
      model: a compiled Keras 3 (TensorFlow backend) or tf_keras ``Model``.
      cluster, placer, seed, grouping, cost_model, budget_s, ray_address, policy, cache,
        progress: as for :func:`tf_autoplace.autoplace`.
      input_spec: TensorSpecs of one batch as ``fit``/``evaluate`` pass it to the step
        (``(x, y)`` or ``(x, y, sample_weight)``, each a nest like the data), with None in
        every dimension that varies between batches; a function whose batches carry fewer
        entries uses the first ones (``evaluate`` on ``(x, y)`` batches of a spec with sample
        weights; ``predict`` x alone). None: each function's first batch, traced as Keras
        would trace it (module doc).
      unknown_dim: elements counted per free dimension in the cost model; None: the first
        batch's size.
      cost_profile, measure_steps, measure_feeds, verify: refused with a ConfigError that
        says how a Keras model is timed (they are for graphs; taken here so that the refusal
        is the same as ``autoplace(model, ...)``'s, not Python's TypeError).

    Returns:
      The :class:`KerasPlacement` (its ``reports`` fill as the functions first run). Calling
      this again on the same model replaces the earlier one.

    Raises:
      ConfigError: a model that cannot run placed functions (module doc), or options out of
        range. Errors of the placement itself come from the first ``fit``/``evaluate``/
        ``predict`` batch, and leave the model's variables as they were.
    """
    refuse_measuring(verify, measure_steps, cost_profile, measure_feeds)
    options = PlaceOptions.make(
        placer=placer, cluster=cluster, seed=seed, budget_s=budget_s, ray_address=ray_address,
        policy=policy, grouping=grouping, cost_model=cost_model,
        unknown_dim=1 if unknown_dim is None else unknown_dim, cache=cache,
        progress=progress)
    return place_model(model, options, input_spec=input_spec,
                       unknown_dim_given=unknown_dim is not None)


def refuse_measuring(verify, measure_steps, cost_profile, measure_feeds=None) -> None:
    """ConfigError when any of ``verify``, ``measure_steps``, ``measure_feeds`` or
    ``cost_profile`` is given: they run or time a graph's step, and a Keras model is timed by
    fitting it."""
    if verify or measure_steps or cost_profile is not None or measure_feeds is not None:
        raise ConfigError("verify, measure_steps, measure_feeds and cost_profile are for "
                          "graphs; a Keras model is timed by fitting it")


def place_model(model, options: PlaceOptions, *, input_spec=None,
                unknown_dim_given: bool = False) -> KerasPlacement:
    """:func:`autoplace_model` with its options checked (``autoplace(model, ...)`` comes
    here); ``unknown_dim_given``: the options' ``unknown_dim`` is the caller's, not to be
    replaced by the first batch's size. Returns the :class:`KerasPlacement`."""
    flavour = _flavour(model)
    if flavour is None:
        raise ConfigError(f"expected a Keras 3 or tf_keras Model, got "
                          f"{type(model).__module__}.{type(model).__qualname__}")
    _check_model(model, flavour)
    if input_spec is not None and not all(
            isinstance(s, tf.TensorSpec) or s is None for s in tf.nest.flatten(input_spec)):
        raise ConfigError(f"input_spec must be a nest of tf.TensorSpec (None for an absent "
                          f"entry), got {input_spec!r}")
    previous = getattr(model, _ATTR, None)
    if previous is not None:
        previous.remove()
    placement = KerasPlacement(model, flavour, options, input_spec=input_spec,
                               unknown_dim=options.unknown_dim if unknown_dim_given else None)
    placement._install()
    setattr(model, _ATTR, placement)
    return placement
