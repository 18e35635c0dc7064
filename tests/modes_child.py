"""Child process for tests/test_modes.py: the default placer in a TF1-style program.

``tf.compat.v1.disable_eager_execution()`` changes the whole process, so this runs in a fresh
interpreter: it disables eager execution first, as TF1 training binaries do, builds a small
training graph, places it with the default placer (and with Placeto, whose policy runs TF ops)
and trains it on 2 logical CPUs with soft placement off; and fits a tf_keras model, which the
Keras door refuses in this mode, placed by the training-binary door. The last line of stdout is
one JSON object: placer -> {"losses": [...], "devices": [...]}, plus "reference" for the
unplaced graph, and "keras_v1" for the Keras fits.
"""

import json
import sys

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()

import tf_autoplace  # noqa: E402
from tf_autoplace.placers import PlacetoPlacer  # noqa: E402
from tf_autoplace.testing import run_training_steps, small_cnn  # noqa: E402

CPU2 = "testdata/cpu2_independent.pbtxt"



def keras_v1_fit(place: bool) -> dict:
    """A tf_keras model fit with Keras' TF1 loop (eager execution is off): unplaced, or placed
    by the training-binary door, after the Keras door refused it."""
    import tf_keras

    from tf_autoplace import flags as ap_flags
    from tf_autoplace.keras import autoplace_model

    tf_keras.backend.clear_session()
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.layers.Dense(8, activation="relu", input_shape=(6,)),
                                 tf_keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).normal(size=(32, 6)).astype("f")
    error = None
    if place:
        try:
            autoplace_model(model, cluster=CPU2)
        except tf_autoplace.ConfigError as e:
            error = str(e)
        ap_flags.install(ap_flags.AutoplaceSettings(placer="m_etf", cluster=CPU2, verify=0))
    try:
        history = model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0, shuffle=False)
    finally:
        if place:
            ap_flags.uninstall()
    graph = tf.compat.v1.get_default_graph()
    return {"losses": history.history["loss"], "error": error,
            "devices": sorted({op.device for op in graph.get_operations() if op.device})}


assert not tf.executing_eagerly()
out = {"reference": run_training_steps(small_cnn())[0],
       "keras_v1": {"reference": keras_v1_fit(False), "placed": keras_v1_fit(True)}}
for name, placer in (("auto", "auto"), ("placeto", PlacetoPlacer(max_samples=16))):
    tg = small_cnn()
    report = tf_autoplace.autoplace(tg.graph, cluster=CPU2, placer=placer, seed=0)
    losses, devices = run_training_steps(tg)
    out[name] = {"losses": losses, "devices": sorted(devices), "placer": report.placer}
sys.stdout.flush()
print(json.dumps(out))
