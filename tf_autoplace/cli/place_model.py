r"""``tf-autoplace place-model``: build a model-zoo training graph, place it, print the report.

    tf-autoplace place-model --model=inception_v3 --cluster=k80x2

Knobs of the model (batch, layers, ...) are passed as --knob=name=value, e.g.
``--model=nmt --knob=layers=2 --knob=batch=128``.

With ``--measure_steps=N`` the placed graph and the single-device baseline also run N timed
steps on this machine (the cluster must be this machine's: ``--cluster=local`` or
``testdata/cpu2.pbtxt``), and the report shows the measured step times beside the predicted ones:

    tf-autoplace place-model --model=nmt --knob=layers=2 --knob=batch=16 --knob=length=8 \
        --knob=hidden=128 --knob=embedding_dim=128 --knob=vocab=1000 --cluster=local \
        --measure_steps=20
"""

from __future__ import annotations

import resource
import sys
import time

from absl import flags

from tf_autoplace import zoo
from tf_autoplace.api import autoplace
from tf_autoplace.cli import place_model_flags  # noqa: F401  (defines this command's flags)
from tf_autoplace.errors import AutoplaceError, ConfigError
from tf_autoplace.outputs import files
from tf_autoplace.placers import get_placer

FLAGS = flags.FLAGS  # this command's flags: tf_autoplace.cli.place_model_flags


def main(argv):
    del argv
    try:
        if FLAGS.report_json:  # before the work: a path that cannot be written fails at once
            files.check_output_path(FLAGS.report_json, "--report_json")
        if FLAGS.budget_s is not None and FLAGS.budget_s < 0:
            raise ConfigError(f"--budget_s must be >= 0, got {FLAGS.budget_s!r}")
        began = time.perf_counter()
        placer = get_placer(FLAGS.placer, budget_s=FLAGS.budget_s,
                            ray_address=FLAGS.ray_address, options=FLAGS.placer_option)
        model = zoo.build(FLAGS.model, **zoo.parse_knobs(FLAGS.knob))
        build_s = time.perf_counter() - began
        report = autoplace(model.graph, cluster=FLAGS.cluster, placer=placer,
                           seed=FLAGS.seed, measure_steps=FLAGS.measure_steps,
                           measure_feeds=model.sample_feed(FLAGS.seed))
    except AutoplaceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    total_s = time.perf_counter() - began
    print(f"model {model.name}: {len(model.graph.get_operations())} ops, built in "
          f"{build_s:.1f} s")
    print(report)
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in report.timings_s.items())
    # ru_maxrss is in KiB on Linux: the peak resident set of this process so far.
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    print(f"stages: build {build_s:.1f} s, {stages}; total {total_s:.1f} s; "
          f"peak RSS {peak_gb:.2f} GB")
    if FLAGS.report_json:
        outputs = files.Outputs()
        outputs.add_file(FLAGS.report_json, report.to_json().encode())
        outputs.commit()
    return 0
