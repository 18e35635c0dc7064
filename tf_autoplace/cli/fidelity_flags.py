"""The flags of ``tf-autoplace fidelity``, declared apart from the command (which imports
TensorFlow) so that ``tf-autoplace fidelity --help`` lists them without importing it."""

from absl import flags

from tf_autoplace.outputs import files

flags.DEFINE_list("graphs", None, "graphs among tf_autoplace.hw.fidelity.GRAPHS (cnn, lstm, "
                  "transformer, ...; default: all of them; --graphs= for none)")
flags.DEFINE_multi_string("graph_file", [], "a training graph of your own (GraphDef or "
                          "MetaGraphDef, binary or text); repeatable")
flags.DEFINE_integer("num_logical_cpus", 2, "logical CPU devices (0: the GPUs and the CPU host)")
flags.DEFINE_integer("random_placements", 8, "uniformly random placements per graph")
flags.DEFINE_integer("learned_samples", 2000, "simulated placements per learned placer")
flags.DEFINE_integer("steps", 30, "timed steps per placement (rounds; the protocol's least is "
                     "15, and more separate placements that differ by little)")
flags.DEFINE_integer("warmup_steps", 80, "untimed steps per placement first, fewer where they take over "
                     "2 s (TensorFlow's executor settles in about 70: hw.runner.WARMUP_STEPS)")
flags.DEFINE_integer("trace_steps", 10, "traced steps for the op profile")
flags.DEFINE_integer("interleave", 64, "placements measured together (at once: all of them)")
flags.DEFINE_float("max_load", None, "wait until the 1-minute load average is at most this "
                   "before profiling a graph and again before its timed rounds")
flags.DEFINE_integer("seed", 0, "placer seed")
flags.DEFINE_string("out_md", None, "write the markdown tables here")
flags.DEFINE_string("out_json", None, "write every figure as JSON here")
flags.DEFINE_bool("components", False, "check the simulator's parts one at a time instead "
                  "(tf_autoplace.hw.components)")
flags.DEFINE_list("component", None, "with --components: which parts, among "
                  "tf_autoplace.hw.components.COMPONENTS (default: all of them)")


def check() -> None:
    """--out_md and --out_json, before anything is imported or measured (the command line's
    dispatcher runs it first): each must be a file that can be written (an AutoplaceError
    naming the flag otherwise; the run's minutes of measuring were lost at its end)."""
    for flag in ("out_md", "out_json"):
        if getattr(flags.FLAGS, flag):
            files.check_output_path(getattr(flags.FLAGS, flag), f"--{flag}")
