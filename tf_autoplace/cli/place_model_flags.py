"""The flags of ``tf-autoplace place-model``, declared apart from the command (which imports
TensorFlow) so that ``tf-autoplace place-model --help`` lists them without importing it."""

from absl import flags

from tf_autoplace.core import registry

flags.DEFINE_string("model", "inception_v3", "Model zoo name (tf_autoplace.zoo.MODELS).")
flags.DEFINE_multi_string("knob", [], "Model size knob as name=value (int), repeatable.")
flags.DEFINE_string("cluster", "k80x2", "Shipped cluster name, cluster spec file or 'local'.")
flags.DEFINE_string("placer", "auto", f"Placer: {registry.listing()} (default: auto).")
flags.DEFINE_multi_string("placer_option", [], "NAME=VALUE: a setting of the placer's config "
                          "(e.g. --placer=hdp --placer_option=start=uniform); repeatable.")
flags.DEFINE_float("budget_s", None, registry.budget_help())
flags.DEFINE_integer("seed", 0, "Random seed.", lower_bound=0)
flags.DEFINE_string("report_json", None, "Also write the report as JSON here.")
flags.DEFINE_string("ray_address", None, "Simulate on this Ray cluster ('auto', HOST:PORT or "
                    "'local'); default: this machine's processes.")
flags.DEFINE_integer("measure_steps", 0, "Also time this many steps of the placed graph and of "
                     "the single-device baseline on this machine (0: do not).")
