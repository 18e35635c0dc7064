"""The flags of ``tf-autoplace profile``, declared apart from the command (which imports
TensorFlow) so that ``tf-autoplace profile --help`` lists them without importing it."""

import os

from absl import flags

from tf_autoplace.errors import ConfigError
from tf_autoplace.outputs import files

flags.DEFINE_string("graph", None, "GraphDef or MetaGraphDef file (binary or text).")
flags.DEFINE_string("model", None, "A model zoo name instead (tf_autoplace.zoo.MODELS).")
flags.DEFINE_multi_string("knob", [], "Zoo model size knob as name=value (int), repeatable.")
flags.DEFINE_list("fetches", None, "What one step runs (default: the train op).")
flags.DEFINE_list("init", None, "Ops run once first (default: the variable initializer).")
flags.DEFINE_multi_string("feed_shape", [], "NAME=D0,D1,...: made-up inputs of this shape for "
                          "placeholder NAME, whose static shape is not fully known (a None "
                          "batch dimension); repeatable.")
flags.DEFINE_integer("num_logical_cpus", 2, "Logical CPU devices of the local cluster (0: this "
                     "machine's GPUs and its CPU host).", lower_bound=0)
flags.DEFINE_string("cluster", None, "Profile the servers of this TensorFlow cluster instead (a "
                    "text ClusterSpec with tasks and a target, as serve-local writes).")
flags.DEFINE_integer("warmup_steps", 80, "untimed steps per placement first, fewer where they take over "
                     "2 s (TensorFlow's executor settles in about 70: hw.runner.WARMUP_STEPS)")
flags.DEFINE_integer("steps", 10, "Timed untraced steps (their median is the run's step).")
flags.DEFINE_integer("trace_steps", 10, "Traced steps whose per-op median is written.")
flags.DEFINE_integer("transfer_steps", None, "Timed rounds of each link and Send benchmark of "
                     "--out_cluster (default: tf_autoplace.hw.transfers' own, 30 and 40).",
                     lower_bound=1)
flags.DEFINE_bool("partners", True, "Also time the ops whose kernel changes when a partner op "
                  "is on another device (a calibration run).")
flags.DEFINE_integer("seed", 0, "Seed of the made-up inputs.")
flags.DEFINE_string("out_profile", None, "Write the CostProfile (text) here.")
flags.DEFINE_string("out_cluster", None, "Also measure the links and write the ClusterSpec "
                    "(text) here.")
flags.mark_flags_as_required(["out_profile"])


def check() -> None:
    """--out_profile and --out_cluster, before anything is imported or measured (the command
    line's dispatcher runs it first): each must be a file that can be written, the two must
    differ, and neither may be the --graph it profiles (an AutoplaceError naming the flag
    otherwise); exactly one of --graph and --model, and --feed_shape only with --graph."""
    if bool(flags.FLAGS.graph) == bool(flags.FLAGS.model):
        raise ConfigError("give exactly one of --graph and --model")
    if flags.FLAGS.feed_shape and not flags.FLAGS.graph:
        raise ConfigError("--feed_shape gives the inputs of a --graph (a zoo model makes its "
                          "own)")
    seen = {os.path.realpath(flags.FLAGS.graph): "graph"} if flags.FLAGS.graph else {}
    for flag in ("out_profile", "out_cluster"):
        path = getattr(flags.FLAGS, flag)
        if path:
            full = os.path.realpath(files.check_output_path(path, f"--{flag}"))
            if full in seen:
                raise ConfigError(f"--{flag} and --{seen[full]} are the same file {path!r}")
            seen[full] = flag
