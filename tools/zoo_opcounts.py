"""Build the full-size zoo models and print their sizes: one row per model with its knobs,
op count, variable count (optimizer slots included), trainable parameters and build time.

  python tools/zoo_opcounts.py [--models=nmt,rnnlm] [--variants]

By default each model is built once with its default (full, paper-size) knobs; ``--variants``
also builds the other paper variants (NMT and Transformer with 2 and 4 layers, RNNLM with 2,
WaveNet with 2 stacks, NASNet-Large).
"""

from __future__ import annotations

import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from tf_autoplace import zoo

flags.DEFINE_list("models", list(zoo.MODELS), "models to build")
flags.DEFINE_bool("variants", False, "also build the smaller/other paper variants")
FLAGS = flags.FLAGS

VARIANTS = {
    "nasnet": [{"variant": "large"}],
    "nmt": [{"layers": 2}, {"layers": 4}],
    "rnnlm": [{"layers": 2}],
    "transformer": [{"layers": 2}, {"layers": 4}],
    "wavenet": [{"stacks": 2}],
}


def _row(name: str, knobs: dict) -> str:
    start = time.perf_counter()
    model = zoo.build(name, **knobs)
    seconds = time.perf_counter() - start
    graph = model.graph
    variables = graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
    params = sum(int(np.prod(v.shape)) for v in
                 graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES))
    knob_text = " ".join(f"{k}={v}" for k, v in model.knobs.items())
    return (f"{name:<12} {len(graph.get_operations()):>8} {len(variables):>6} "
            f"{params / 1e6:>8.1f} {seconds:>7.1f}  {knob_text}")


def main(argv):
    del argv
    print(f"{'model':<12} {'ops':>8} {'vars':>6} {'params_M':>8} {'build_s':>7}  knobs")
    for name in FLAGS.models:
        for knobs in [{}] + (VARIANTS.get(name, []) if FLAGS.variants else []):
            print(_row(name, knobs), flush=True)


if __name__ == "__main__":
    app.run(main)
