r"""An ordinary TF1-style training binary that gains --autoplace from one import.

    python tools/example_train.py --steps=5                       # TF's default placement
    python tools/example_train.py --autoplace=m_etf --autoplace_cluster=cpu2 \
        --autoplace_report=report.json --print_devices           # placed before step 1

It trains ``tf_autoplace.testing.small_cnn`` (two-branch conv net, Adam, fixed seeds and a fixed
batch) for ``--steps`` steps in a v1 Session with ``--num_cpus`` logical CPU devices and soft
placement off, printing ``step <i> loss <value>`` per step. With ``--print_devices`` it then runs
one more step asking for the partition graphs and prints the devices that executed ops
(``devices <d1> <d2> ...``). Nothing here knows about placement except the import below: the
Session's config has to expose the cluster's devices (``--num_cpus=2`` for
``cpu2``, the default), as any script must for the devices it uses.
"""

from __future__ import annotations

from absl import app, flags

import tf_autoplace.flags  # noqa: F401  (the one line: defines --autoplace and friends)

FLAGS = flags.FLAGS
flags.DEFINE_integer("steps", 5, "Training steps.")
flags.DEFINE_integer("batch", 8, "Batch size.")
flags.DEFINE_integer("seed", 0, "Graph-level and data seed.")
flags.DEFINE_integer("num_cpus", 2, "Logical CPU devices of the Session "
                     "(ConfigProto.device_count['CPU']).")
flags.DEFINE_bool("print_devices", False, "Print the devices of the executed partition graphs.")


def main(argv):
    del argv
    # TensorFlow is imported here, not at the top, so that --help and flag errors answer fast.
    from tf_autoplace.testing import run_training_steps, small_cnn

    model = small_cnn(batch=FLAGS.batch, seed=FLAGS.seed)
    losses, devices = run_training_steps(model, steps=FLAGS.steps, num_cpus=FLAGS.num_cpus)
    for i, loss in enumerate(losses):
        print(f"step {i} loss {loss:.9g}")
    if FLAGS.print_devices:
        print("devices " + " ".join(sorted(devices)))


if __name__ == "__main__":
    app.run(main)
