"""Child process for tests/test_fuzz.py: runs fuzz cases and prints one JSON line per case.

Before a case it prints ``{"start": i}`` (flushed), after it the case's result, so a parent
whose child died (an abort in C++ code) or hangs can name the case.

    python tests/fuzz_child.py SEED FAMILY:FIRST:COUNT ... [all]

Each ``FAMILY:FIRST:COUNT`` runs cases FIRST.. of one family of ``fuzz.FAMILIES`` (``graphs``,
``cost_graphs``, ``policies``, ``caches``, ``tf_clusters``, ``keras``, ``verify``); results
carry ``family``. With ``all``, graph and cost graph cases also use the learned placer
(``fuzz.ALL_PLACERS``), which compiles its policy once: seconds.

The process has ``fuzz.LOGICAL_CPUS`` logical CPU devices, configured here before TensorFlow
starts its runtime (the ``keras`` family's placed functions run on them), and TensorFlow
functions run with soft device placement off, so that a device a placement names and TensorFlow
cannot honour is an error rather than a silent move. Neither changes what the v1 Sessions of
the other families run on: those give their own ``ConfigProto``.
"""

import json
import sys
import tempfile

import tensorflow as tf

from tf_autoplace.testing import fuzz

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * fuzz.LOGICAL_CPUS)
tf.config.set_soft_device_placement(False)


def main(seed: int, specs, placers=fuzz.PLACERS) -> None:
    with tempfile.TemporaryDirectory(prefix="fuzz_") as workdir:
        for spec in specs:
            family, first, count = spec.split(":")
            make, run = fuzz.FAMILIES[family]
            for index in range(int(first), int(first) + int(count)):
                print(json.dumps({"start": index, "family": family}), flush=True)
                result = run(make(seed, index, placers), workdir)
                print(json.dumps(dict(result, family=family)), flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]), [a for a in args[1:] if a != "all"],
         placers=fuzz.ALL_PLACERS if "all" in args else fuzz.PLACERS)
