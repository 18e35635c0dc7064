"""Child process for tests/test_keras.py: Keras 3 and tf_keras models trained with fit on two
logical CPU devices, placed and unplaced.

Logical devices must be configured before TensorFlow initialises its runtime, so these checks
run in a fresh interpreter and print one JSON object (check name -> result) on the last line.

    python tests/keras_child.py [CHECK ...]   # the named checks (CHECKS), or all of them
"""

import sys

import numpy as np
import tensorflow as tf

from tf2_child import CPU2, executed_devices, run_checks  # configures two logical CPUs

import tf_autoplace  # noqa: E402
from tf_autoplace import keras as tk  # noqa: E402

PLACE = dict(cluster=CPU2, placer="random", seed=0, progress=False)


def data(n=40, shape=(16,), seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, *shape)).astype(np.float32),
            rng.normal(size=(n, 1)).astype(np.float32))


def keras3_model():
    """A functional Keras 3 model with BatchNormalization (moving statistics are variables the
    train step assigns)."""
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((16,))
    a = keras.layers.BatchNormalization()(keras.layers.Dense(32, activation="relu")(inp))
    b = keras.layers.Dense(32, activation="tanh")(inp)
    out = keras.layers.Dense(1)(keras.layers.Concatenate()([a, b]))
    model = keras.Model(inp, out)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse", metrics=["mae"],
                  jit_compile=False)
    return model


def tf_keras_model():
    import tf_keras

    tf.keras.utils.set_random_seed(0)
    init = tf_keras.initializers.GlorotUniform(seed=0)
    model = tf_keras.Sequential([
        tf_keras.Input((16,)),
        tf_keras.layers.Dense(32, activation="relu", kernel_initializer=init),
        tf_keras.layers.BatchNormalization(),
        tf_keras.layers.Dense(32, activation="tanh", kernel_initializer=init),
        tf_keras.layers.Dense(1, kernel_initializer=init)])
    model.compile(optimizer=tf_keras.optimizers.Adam(1e-2), loss="mse", metrics=["mae"])
    return model


def batch_losses(callbacks_module):
    class Losses(callbacks_module.Callback):
        def __init__(self):
            super().__init__()
            self.losses = []

        def on_train_batch_end(self, batch, logs=None):
            self.losses.append(float(logs["loss"]))

    return Losses()


def fit_placed_and_unplaced(build, callbacks_module, *, through_autoplace=False):
    """The losses of fit (2 epochs of 3 batches, the last one short) for the model unplaced
    and placed, with what the placed run executed where, and evaluate/predict of both."""
    x, y = data()
    reference = build()
    ref_losses = batch_losses(callbacks_module)
    reference.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0,
                  callbacks=[ref_losses])

    model = build()
    placement = (tf_autoplace.autoplace(model, **PLACE) if through_autoplace
                 else tk.autoplace_model(model, **PLACE))
    losses = batch_losses(callbacks_module)
    _, executed = executed_devices(lambda: model.fit(
        x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[losses]))
    train_function, train_report = model.train_function, placement.reports["train"]
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[losses])
    return {
        "reference": ref_losses.losses, "losses": losses.losses,
        "is_placement": isinstance(placement, tk.KerasPlacement),
        "executed": executed,
        "report_devices": [d.num_ops for d in train_report.devices],
        "reused": model.train_function is train_function
        and placement.reports["train"] is train_report,
        "evaluate": [model.evaluate(x, y, verbose=0), reference.evaluate(x, y, verbose=0)],
        "predict_diff": float(np.abs(model.predict(x, verbose=0)
                                     - reference.predict(x, verbose=0)).max()),
        "kinds": sorted(placement.reports),
    }


def check_keras3():
    import keras

    return fit_placed_and_unplaced(keras3_model, keras.callbacks, through_autoplace=True)


def check_tf_keras():
    import tf_keras

    return fit_placed_and_unplaced(tf_keras_model, tf_keras.callbacks)


def check_placed_and_given_back_from_callbacks():
    """autoplace(model) from a callback in the middle of fit (and remove() in a later one):
    Keras' loop read the function attribute at the next batch and found None (TypeError)."""
    import keras

    placements = []

    class Place(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                placements.append(tf_autoplace.autoplace(self.model, **PLACE))
            if batch == 3:
                placements[0].remove()

    model = keras3_model()
    history = model.fit(*data(), batch_size=8, epochs=2, verbose=0, callbacks=[Place()])
    return {"losses": history.history["loss"],
            "placed": placements[0].reports["train"].num_ops > 0}


def check_single_device_bitwise():
    """Placed on one device, the train step gives the unplaced losses bit for bit."""
    import keras

    x, y = data()
    losses = {}
    for placed in (False, True):
        model = keras3_model()
        if placed:
            tk.autoplace_model(model, **dict(PLACE, placer="single"))
        recorder = batch_losses(keras.callbacks)
        model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[recorder])
        losses[placed] = recorder.losses
    # On this machine's devices, the note on analytical times points to what this door takes.
    model = keras3_model()
    local = tk.autoplace_model(model, **dict(PLACE, placer="single", cluster="local"))
    model.fit(x[:16], y[:16], batch_size=16, epochs=1, verbose=0)
    return {"reference": losses[False], "losses": losses[True],
            "local_notes": list(local.reports["train"].notes)}


def dropout_model(flavour):
    """Dense, Dropout, Dense with Adam: Dropout's seed generator and Adam's step counter are
    state the train step advances whether or not its batch arrives."""
    if flavour == "keras3":
        import keras as k

        k.utils.set_random_seed(0)
    else:
        import tf_keras as k

        tf.keras.utils.set_random_seed(0)
    model = k.Sequential([k.Input((16,)), k.layers.Dense(32, activation="relu"),
                          k.layers.Dropout(0.3), k.layers.Dense(1)])
    model.compile(optimizer=k.optimizers.Adam(1e-2), loss="mse", **(
        {"jit_compile": False} if flavour == "keras3" else {}))
    return model, k


def check_unknown_length():
    """fit on data of unknown length (a filtered tf.data dataset; a Python generator): Keras'
    step runs once more on the exhausted iterator at each epoch's end, which fails after its
    counters advanced. Placed (split over both devices) and unplaced: losses and counters; and
    the same after a fit on arrays, whose step was placed for batches of 16 features."""
    x, y = data()

    def dataset():
        return tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda a, b: True).batch(16)

    def generator():
        return ((x[i:i + 16], y[i:i + 16]) for i in range(0, len(x), 16))

    def unplaced_and_placed(flavour, fits):
        """The losses and step counter of ``fits(model, recorder)``, unplaced then placed."""
        runs = []
        for placed in (False, True):
            model, k = dropout_model(flavour)
            if placed:
                tk.autoplace_model(model, **PLACE)
            recorder = batch_losses(k.callbacks)
            try:
                fits(model, recorder)
            except tf_autoplace.AutoplaceError as e:
                recorder.losses.append([type(e).__name__, str(e)])
            runs.append({"losses": recorder.losses,
                         "iterations": int(model.optimizer.iterations.numpy())})
        return runs

    def epochs(source):
        def fits(model, recorder):
            for _ in range(3):  # a generator is read once: one fit per epoch
                model.fit(dataset() if source == "dataset" else generator(), epochs=1,
                          verbose=0, callbacks=[recorder])
        return fits

    # Arrays first, then a source whose iterator spec leaves every dimension free (tf_keras'
    # Python generators; a dataset with a loose signature): Keras traces its step again with
    # that spec, and the batches fit the step placed for the arrays in all but the spec.
    loose_signature = (tf.TensorSpec([None, None]), tf.TensorSpec([None, None]))

    def arrays_then(source):
        def fits(model, recorder):
            model.fit(x, y, batch_size=16, shuffle=False, verbose=0, callbacks=[recorder])
            model.fit(generator() if source == "generator" else tf.data.Dataset.from_generator(
                generator, output_signature=loose_signature), verbose=0, callbacks=[recorder])
        return fits

    out = {f"{flavour}_{source}": unplaced_and_placed(flavour, epochs(source))
           for flavour, source in (("keras3", "dataset"), ("keras3", "generator"),
                                   ("tf_keras", "dataset"))}
    for flavour, source in (("tf_keras", "generator"), ("keras3", "loose_dataset")):
        out[f"{flavour}_arrays_then_{source}"] = unplaced_and_placed(flavour, arrays_then(source))
    return out


def sequence_model():
    return sequence_model_of(4)


def sequence_model_of(features):
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((None, features))  # sequences of any length
    h = keras.layers.Dense(8, activation="relu")(inp)
    out = keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(h))
    model = keras.Model(inp, out)
    model.compile(optimizer="sgd", loss="mse", jit_compile=False)
    return model


def check_changing_shapes():
    """Sequences of length 5, then 7: without input_spec the second fit gets a step placed for
    its shapes (as Keras traces one), with the unplaced losses; refused with the shapes named
    when input_spec fixed the length; run with one placement when input_spec leaves it free."""
    short, long_ = data(8, (5, 4), seed=1), data(8, (7, 4), seed=2)
    out = {}
    for name, spec in (("replaced", None),
                       ("refused", (tf.TensorSpec([None, 5, 4]), tf.TensorSpec([None, 1]))),
                       ("free", (tf.TensorSpec([None, None, 4]), tf.TensorSpec([None, 1])))):
        reference, model = sequence_model(), sequence_model()
        placement = tk.autoplace_model(model, input_spec=spec, **PLACE)
        try:
            out[name] = [model.fit(*d, batch_size=8, verbose=0).history["loss"][0]
                         for d in (short, long_)]
        except tf_autoplace.AutoplaceError as e:
            out[name] = [type(e).__name__, str(e)]
        out[name + "_reference"] = [reference.fit(*d, batch_size=8, verbose=0).history[
            "loss"][0] for d in (short, long_)]
    placement.remove()  # Keras' own functions again
    model.fit(*short, batch_size=8, verbose=0)
    out["removed"] = ("make_train_function" not in model.__dict__
                      and not hasattr(model, tk._ATTR))
    first = tk.autoplace_model(model, **PLACE)
    second = tk.autoplace_model(model, **PLACE)
    first.remove()  # replaced by the second already: the second stays
    model.fit(*short, batch_size=8, verbose=0)
    out["stale_remove_kept"] = (getattr(model, tk._ATTR, None) is second
                                and second.report is not None)
    return out


def check_spec_parts_and_joined_predict():
    """One input_spec (x, y, sample_weight) serves fit's weighted batches, its validation
    batches (x, y) and predict (x); tf_keras' predict with steps_per_execution=2 joins the
    batches of an execution. Each against the unplaced model."""
    x, y = data(16, (5, 4), seed=3)
    weights = np.linspace(0.5, 1.5, 16).astype(np.float32)
    spec = (tf.TensorSpec([None, None, 4]), tf.TensorSpec([None, 1]), tf.TensorSpec([None]))
    runs = []
    for placed in (False, True):
        model = sequence_model()
        if placed:
            tk.autoplace_model(model, input_spec=spec, **PLACE)
        history = model.fit(x, y, sample_weight=weights, validation_data=(x[:8], y[:8]),
                            batch_size=8, verbose=0).history
        runs.append([history["loss"][0], history["val_loss"][0],
                     model.predict(x, batch_size=8, verbose=0).tolist()])

    predictions = []
    for placed in (False, True):
        model = tf_keras_model()
        model.compile(optimizer="sgd", loss="mse", steps_per_execution=2)
        if placed:
            tk.autoplace_model(model, **PLACE)
        predictions.append(model.predict(data(40)[0], batch_size=8, verbose=0).tolist())
    # A fit validated on weighted batches (x, y, w), then evaluate on (x, y): each structure
    # gets its own placed step, with and without an input_spec.
    structures = []
    for placed, given in ((False, None), (True, None), (True, spec)):
        model = sequence_model()
        if placed:
            tk.autoplace_model(model, input_spec=given, **PLACE)
        history = model.fit(x, y, sample_weight=weights, batch_size=8, verbose=0,
                            validation_data=(x[:8], y[:8], weights[:8])).history
        structures.append([history["val_loss"][0], model.evaluate(x, y, batch_size=8,
                                                                  verbose=0)])
    # predict on the dataset fit reads, (x, y) batches: predict_step does not read y.
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    on_dataset = []
    for placed, given in ((False, None), (True, None), (True, spec[:2])):
        model = sequence_model()
        if placed:
            tk.autoplace_model(model, input_spec=given, **PLACE)
        model.fit(dataset, verbose=0)
        on_dataset.append(model.predict(dataset, verbose=0).tolist())
    return {"spec_runs": runs, "tf_keras_predict": predictions, "structures": structures,
            "predict_on_fit_dataset": on_dataset}


def static_batch_models(keras):
    """Models whose call() reads the static batch size: a reshape to (x.shape[0], 8) and a
    Python branch on whether it is known (Keras traces fit's batches from arrays of whole
    batches with it known)."""
    class Flatten8(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, t):
            return self.dense(tf.reshape(t, (t.shape[0], 8)))

    class StaticBranch(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, t):
            h = self.dense(tf.reshape(t, (-1, 8)))
            return h * 2.0 if t.shape[0] is not None else h

    return Flatten8, StaticBranch


def check_batch_shapes_as_keras_traces_them():
    """The step traced with the static batch size where Keras' own is (fit on arrays of whole
    batches), train_on_batch/test_on_batch with an (x, y) input_spec (Keras 3 passes (x, y,
    None)), and ragged or sparse batches refused before anything is placed."""
    import keras
    import tf_keras

    x, y = data(32, (2, 4), seed=4)
    out = {}
    def unplaced_and_placed(module, cls, run):
        results = []
        for placed in (False, True):
            module.utils.set_random_seed(0)
            model = cls()
            model.compile(optimizer="sgd", loss="mse", jit_compile=False)
            if placed:
                tk.autoplace_model(model, **PLACE)
            results.append(run(model))
        return results

    for module in (keras, tf_keras):
        for cls in static_batch_models(module):
            out[f"{module.__name__}_{cls.__name__}"] = unplaced_and_placed(
                module, cls, lambda model: model.fit(x, y, batch_size=8, shuffle=False,
                                                     verbose=0).history["loss"])

    # A step placed for a fixed batch size does not serve an iterator whose batch size is
    # free: there Keras' call() sees None (the evaluate of a dataset with a short last batch
    # after one of whole batches).
    features, target = data(36, (2, 4), seed=7)
    dataset = tf.data.Dataset.from_tensor_slices((features, target))
    out["fixed_then_free"] = unplaced_and_placed(
        keras, static_batch_models(keras)[1],
        lambda model: [model.evaluate(dataset.batch(8, drop_remainder=drop), verbose=0)
                       for drop in (True, False)])

    # An iterator whose batch size is free, and a call() that needs it: Keras' own step
    # cannot be traced, and neither is the placed one, before any batch trains (it was
    # placed for the first batch's size, trained on it, and failed at the second).
    Flatten8 = static_batch_models(keras)[0]
    keras.utils.set_random_seed(0)
    model = Flatten8()
    model.compile(optimizer="sgd", loss="mse", jit_compile=False)
    model.build((None, 2, 4))
    before = [w.numpy().tolist() for w in model.weights]
    tk.autoplace_model(model, **PLACE)
    try:
        model.fit(features, target, batch_size=8, shuffle=False, verbose=0)
        out["free_batch_untraceable"] = None
    except tf_autoplace.AutoplaceError as e:
        out["free_batch_untraceable"] = [type(e).__name__, str(e),
                                         [w.numpy().tolist() for w in model.weights] == before]

    # Batches read in Python (train_on_batch): the first traced with its own batch size (its
    # call() needs one), a shorter one after it with the batch size free, which cannot be
    # traced either: an error at that batch, as Keras' own retrace is.
    keras.utils.set_random_seed(0)
    model = Flatten8()
    model.compile(optimizer="sgd", loss="mse", jit_compile=False)
    tk.autoplace_model(model, **PLACE)
    model.train_on_batch(features[:8], target[:8])
    try:
        model.train_on_batch(features[:4], target[:4])
        out["short_batch_untraceable"] = None
    except tf_autoplace.AutoplaceError as e:
        out["short_batch_untraceable"] = [type(e).__name__, str(e)]

    # A step that cannot be traced with the dimension that changed left free is an error at
    # that batch, as Keras' own trace is, not a placement per new shape.
    class Lengths(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, t):
            return self.dense(tf.reshape(t, (-1, t.shape[1] * t.shape[2])))

    model = Lengths()
    model.compile(optimizer="sgd", loss="mse", jit_compile=False)
    tk.autoplace_model(model, **PLACE)
    model.train_on_batch(*data(4, (5, 2), seed=8))
    try:
        model.train_on_batch(*data(4, (6, 2), seed=9))
        out["new_length"] = None
    except tf_autoplace.AutoplaceError as e:
        out["new_length"] = [type(e).__name__, str(e)]

    batches = [data(8, (5, 3), seed=5), data(8, (7, 3), seed=6)]
    spec = (tf.TensorSpec([None, None, 3]), tf.TensorSpec([None, 1]))
    on_batch = []
    for placed in (False, True):
        model = sequence_model_of(3)
        if placed:
            tk.autoplace_model(model, input_spec=spec, **PLACE)
        on_batch.append([model.train_on_batch(*b) for b in batches]
                        + [model.test_on_batch(*b) for b in batches])
    out["on_batch"] = on_batch

    ragged = tf.ragged.constant([[1.0, 2.0, 3.0], [4.0, 5.0], [6.0], [7.0, 8.0, 9.0, 1.0]])
    sparse = tf.sparse.from_dense(tf.constant(np.eye(4, 8, dtype=np.float32)))
    target = np.zeros((4, 1), np.float32)
    for name, features in (("ragged", ragged), ("sparse", sparse)):
        model = keras.Sequential([keras.layers.Lambda(
            lambda t: tf.reduce_sum(t, axis=1, keepdims=True)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", jit_compile=False)
        tk.autoplace_model(model, **PLACE)
        try:
            model.fit(tf.data.Dataset.from_tensor_slices((features, target)).batch(4), verbose=0)
            out[name] = None
        except tf_autoplace.AutoplaceError as e:
            out[name] = [type(e).__name__, str(e)]
    return out


def errors():
    import keras

    def compiled(**kwargs):
        model = keras3_model()
        model.compile(optimizer="sgd", loss="mse", **kwargs)
        return model

    def fit_with_spec(spec):
        model = keras3_model()
        tk.autoplace_model(model, input_spec=spec, **PLACE)
        model.fit(*data(8), batch_size=8, verbose=0)

    def recompiled_with_xla():
        model = keras3_model()
        placement = tk.autoplace_model(model, **PLACE)
        model.compile(optimizer="sgd", loss="mse", jit_compile=True)
        try:
            model.fit(*data(8), batch_size=8, verbose=0)
        finally:  # the way back the error names: the model fits unplaced, with XLA
            placement.remove()
            model.fit(*data(8), batch_size=8, verbose=0)

    def devices_absent_without_soft_placement():
        model = keras3_model()
        tk.autoplace_model(model, **dict(PLACE, cluster="k80x2"))
        soft = tf.config.get_soft_device_placement()
        tf.config.set_soft_device_placement(False)
        try:
            model.fit(*data(8), batch_size=8, verbose=0)
        finally:
            tf.config.set_soft_device_placement(soft)

    def fit_under_a_strategy():  # placed outside the strategy's scope, then fit inside it
        model = keras3_model()
        tk.autoplace_model(model, **PLACE)
        with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
            model.fit(*data(8), batch_size=8, verbose=0)

    def tf_keras_under_run_functions_eagerly():  # compiled without run_eagerly: follows it
        model = tf_keras_model()
        model.compile(optimizer="sgd", loss="mse")
        tf.config.run_functions_eagerly(True)
        try:
            tk.autoplace_model(model, **PLACE)
        finally:
            tf.config.run_functions_eagerly(False)

    uncompiled = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    cases = {
        "uncompiled": lambda: tk.autoplace_model(uncompiled, **PLACE),
        "run_eagerly": lambda: tk.autoplace_model(compiled(run_eagerly=True), **PLACE),
        "run_functions_eagerly": tf_keras_under_run_functions_eagerly,
        "jit_compile": lambda: tk.autoplace_model(compiled(jit_compile=True), **PLACE),
        "recompiled_jit_compile": recompiled_with_xla,
        "not_a_model": lambda: tk.autoplace_model(object(), **PLACE),
        "verify": lambda: tf_autoplace.autoplace(keras3_model(), verify=15, **PLACE),
        # the Keras door's own function: Python's TypeError (an unexpected keyword argument)
        "verify_model": lambda: tk.autoplace_model(keras3_model(), verify=15, **PLACE),
        # out of verify's range too: what the model cannot take is said first
        "verify_below_range": lambda: tf_autoplace.autoplace(keras3_model(), verify=2, **PLACE),
        # feeds of measured graph steps: dropped without a word
        "measure_feeds": lambda: tf_autoplace.autoplace(keras3_model(), measure_feeds={},
                                                        **PLACE),
        "measure_feeds_model": lambda: tk.autoplace_model(keras3_model(), measure_feeds={},
                                                          **PLACE),
        # another feature size than the model's and the batch's: refused before Keras traces
        "input_spec": lambda: fit_with_spec((tf.TensorSpec([None, 17]),
                                             tf.TensorSpec([None, 1]))),
        # TF would fail at the first batch with its own "Unable to find any devices"
        "absent_devices": devices_absent_without_soft_placement,
        "fit_under_a_strategy": fit_under_a_strategy,
    }
    out = {}
    for name, case in cases.items():
        try:
            case()
            out[name] = None
        except tf_autoplace.AutoplaceError as e:
            out[name] = [type(e).__name__, str(e)]
    return out


CHECKS = {"keras3": check_keras3, "tf_keras": check_tf_keras,
          "single": check_single_device_bitwise,
          "callbacks": check_placed_and_given_back_from_callbacks,
          "shapes": check_changing_shapes,
          "spec_parts": check_spec_parts_and_joined_predict,
          "unknown_length": check_unknown_length,
          "batch_shapes": check_batch_shapes_as_keras_traces_them,
          "errors": errors}


def main(names):
    """Run the checks ``names`` (``CHECKS``' keys; every check when there are none)."""
    run_checks([(name, CHECKS[name]) for name in names or CHECKS])


if __name__ == "__main__":
    main(sys.argv[1:])
