"""Build a model-zoo training graph, place it, print the report.

    python tools/place_model.py --model=inception_v3 --cluster=k80x2

Knobs of the model (batch, layers, ...) are passed as --knob=name=value, e.g.
``--model=nmt --knob=layers=2 --knob=batch=128``.
"""

from __future__ import annotations

import sys

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "inception_v3", "Model zoo name (tf_autoplace.zoo.MODELS).")
flags.DEFINE_multi_string("knob", [], "Model size knob as name=value (int), repeatable.")
flags.DEFINE_string("cluster", "k80x2", "Shipped cluster name, cluster spec file or 'local'.")
flags.DEFINE_string("placer", "auto", "Placer name (default: the default placer, auto).")
flags.DEFINE_integer("seed", 0, "Random seed.")
flags.DEFINE_string("report_json", None, "Also write the report as JSON here.")


def parse_knobs(pairs: list[str]) -> dict:
    knobs = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise app.UsageError(f"--knob wants name=value, got {pair!r}")
        try:
            knobs[name] = int(value)
        except ValueError:
            raise app.UsageError(f"--knob {name} wants an integer, got {value!r}") from None
    return knobs


def main(argv):
    del argv
    import tf_autoplace
    from tf_autoplace import zoo

    try:
        model = zoo.build(FLAGS.model, **parse_knobs(FLAGS.knob))
        report = tf_autoplace.autoplace(model.graph, cluster=FLAGS.cluster,
                                        placer=FLAGS.placer, seed=FLAGS.seed)
    except tf_autoplace.AutoplaceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"model {model.name}: {len(model.graph.get_operations())} ops")
    print(report)
    if FLAGS.report_json:
        with open(FLAGS.report_json, "w", encoding="utf-8") as f:
            f.write(report.to_json())
    return 0


if __name__ == "__main__":
    app.run(main)
