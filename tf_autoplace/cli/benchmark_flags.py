"""The flags of ``tf-autoplace benchmark``, declared apart from the command (which imports
TensorFlow) so that ``tf-autoplace benchmark --help`` lists them without importing it, and
:func:`check` checks the output paths before TensorFlow loads."""

from absl import flags

from tf_autoplace.outputs import files

flags.DEFINE_list("placers", None,
                  "placers to run (tf_autoplace.core.registry); name@SECONDS gives a placer "
                  "that searches that budget_s (gdp@0: GDP zero-shot); default: every fast "
                  "heuristic but best_heuristic (tf_autoplace.zoo.benchmark.PLACER_NAMES)")
flags.DEFINE_list("pairs", None, "model:cluster pairs; default: the papers' pairs "
                  "(tf_autoplace.zoo.benchmark.FULL_PAIRS; --quick: QUICK_PAIRS). Models: "
                  "tf_autoplace.zoo.benchmark.MODELS (inception_v3, resnet50, nasnet, rnnlm2, "
                  "nmt4, transformer8, wavenet2, ...); clusters: shipped names or spec files")
flags.DEFINE_bool("quick", False, "small model knobs (QUICK_KNOBS), a few minutes on 2 cores")
flags.DEFINE_string("out_md", None, "write the markdown tables here")
flags.DEFINE_string("out_csv", None, "write the placement rows as CSV here")
flags.DEFINE_string("plot_png", None, "write a grouped bar chart of step times here "
                    "(needs matplotlib)")
flags.DEFINE_integer("sim_runs", 20, "simulations timed per pair for the simulator speed",
                     lower_bound=1)
flags.DEFINE_integer("seed", 0, "seed given to every placer")
flags.DEFINE_list("from_csv", None, "render the markdown of earlier runs' CSV files (e.g. one "
                  "per placer subset on the same pairs) instead of running anything")
flags.DEFINE_float("budget_s", None, "time budget of every placer that searches (default: "
                   "each its own); a generous one lets sample budgets end the searches, so "
                   "step times do not depend on the machine's load")
flags.DEFINE_integer("max_groups", None, "Merge-and-Colocate N (default: "
                     "tf_autoplace.grouping.GroupingConfig's)")


def check() -> None:
    """--out_md, --out_csv and --plot_png, before anything is imported or built (the command
    line's dispatcher runs it first): each must be a file that can be written (an
    AutoplaceError naming the flag otherwise)."""
    for flag in ("out_md", "out_csv", "plot_png"):
        if getattr(flags.FLAGS, flag):
            files.check_output_path(getattr(flags.FLAGS, flag), f"--{flag}")
