"""Child process for tests/test_modes.py: the default placer in a TF1-style program.

``tf.compat.v1.disable_eager_execution()`` changes the whole process, so this runs in a fresh
interpreter: it disables eager execution first, as TF1 training binaries do, builds a small
training graph, places it with the default placer (and with Placeto, whose policy runs TF ops)
and trains it on 2 logical CPUs with soft placement off. The last line of stdout is one JSON
object: placer -> {"losses": [...], "devices": [...]}, plus "reference" for the unplaced graph.
"""

import json
import sys

import tensorflow as tf

tf.compat.v1.disable_eager_execution()

import tf_autoplace  # noqa: E402
from tf_autoplace.placers import PlacetoPlacer  # noqa: E402
from tf_autoplace.testing import run_training_steps, small_cnn  # noqa: E402

CPU2 = "testdata/cpu2_independent.pbtxt"

assert not tf.executing_eagerly()
out = {"reference": run_training_steps(small_cnn())[0]}
for name, placer in (("auto", "auto"), ("placeto", PlacetoPlacer(max_samples=16))):
    tg = small_cnn()
    report = tf_autoplace.autoplace(tg.graph, cluster=CPU2, placer=placer, seed=0)
    losses, devices = run_training_steps(tg)
    out[name] = {"losses": losses, "devices": sorted(devices), "placer": report.placer}
sys.stdout.flush()
print(json.dumps(out))
