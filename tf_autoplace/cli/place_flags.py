"""The flags of ``tf-autoplace place``, declared apart from the command (which imports
TensorFlow) so that ``tf-autoplace place --help`` lists them without importing it."""

from absl import flags

from tf_autoplace.core import registry

flags.DEFINE_string("input", None, "GraphDef or MetaGraphDef file (binary or text), a "
                    "SavedModel directory, or a cost graph (*.costgraph.pbtxt/.pb, *.json).")
flags.DEFINE_string("output", None, "Where to write the placed graph (a new directory for a "
                    "SavedModel; the placement, a PlacementResult, for a cost graph).")
flags.DEFINE_string("signature", "serving_default", "SavedModel input: the signature to "
                    "place (TF2); a TF1 SavedModel's whole MetaGraph is placed, and a "
                    "signature named must be one of its own.")
flags.DEFINE_list("saved_model_tags", ["serve"], "SavedModel input (TF1): the tags of the "
                  "MetaGraph to place.")
flags.DEFINE_string("cluster", "local", "Shipped cluster name (k80x2, cpu2, ...), cluster spec "
                    "file (text ClusterSpec) or 'local'.")
flags.DEFINE_string("placer", "auto", f"Placer: {registry.listing()} (default: auto).")
flags.DEFINE_multi_string("placer_option", [], "NAME=VALUE: a setting of the placer's config "
                          "(e.g. --placer=hdp --placer_option=start=uniform); repeatable.")
flags.DEFINE_float("budget_s", None, registry.budget_help())
flags.DEFINE_string("ray_address", None, "Simulate the search's placements on this Ray cluster "
                    "('auto', HOST:PORT, ray://HOST:PORT or 'local'; placers that take one: "
                    f"{', '.join(registry.able('ray_address'))}); default: this machine's "
                    "processes.")
flags.DEFINE_integer("seed", 0, "Random seed.", lower_bound=0)
flags.DEFINE_integer("max_groups", 2000, "Merge-and-Colocate: at most this many groups.")
flags.DEFINE_string("report_json", None, "Also write the report as JSON here.")
flags.DEFINE_string("trace_json", None, "Also write the simulated step as a Chrome trace "
                    "(JSON for chrome://tracing or ui.perfetto.dev) here.")
flags.DEFINE_string("plot_png", None, "Also write a PNG of per-device load and peak memory "
                    "here (needs matplotlib: pip install '.[plot]').")
flags.DEFINE_string("placement_pb", None, "Also write the placement as a PlacementResult "
                    "proto (protos/placement.proto) here; .pbtxt/.txt = text, .json = JSON, "
                    "else binary.")
flags.DEFINE_string("placement", None, "Apply this saved placement (a PlacementResult file, "
                    "as --placement_pb writes it) instead of searching.")
flags.DEFINE_bool("cache", False, "Keep placements in the placement cache and read them back "
                  "when the same graph, cluster, placer and seed come again.")
flags.DEFINE_string("cache_dir", None, "The placement cache's directory (default: the user's "
                    "cache directory).")
flags.DEFINE_string("policy", None, "A saved policy's directory for a learned placer "
                    f"({', '.join(registry.able('policy'))}) to start from.")
flags.DEFINE_string("save_policy", None, "Write the policy the learned placer fine-tuned to "
                    "this directory (a new or empty one, written with the other outputs).")
flags.DEFINE_bool("progress", True, "Show the search's progress (a bar on a terminal, log "
                  "lines otherwise).")
flags.DEFINE_string("progress_logdir", None, "Also write the search curve as TensorBoard "
                    "scalars here.")
flags.DEFINE_string("cost_profile", None, "GraphDef/MetaGraphDef input: a text CostProfile "
                    "(tf-autoplace profile writes one, here or on the training machine) whose "
                    "measured op times replace the analytical estimates; ops it lacks keep "
                    "them, and the report's notes count them.")
flags.DEFINE_integer("measure_steps", 0, "Also time this many steps (at least 15) of the placed "
                     "graph and of the single-device baseline on this machine (0: do not).")
flags.DEFINE_integer("verify", 0, "GraphDef/MetaGraphDef input on this machine's devices: "
                     "measure the placer's placement, the best heuristic's and the "
                     "single-device one for this many steps each (at least 15) and apply the "
                     "measured fastest (0: do not).")
flags.DEFINE_multi_string("feed_shape", [], "NAME=D0,D1,...: made-up inputs of this shape for "
                          "placeholder NAME in the steps --measure_steps and --verify time, "
                          "for one whose static shape is not fully known (a None batch "
                          "dimension); repeatable.")
flags.DEFINE_integer("unknown_dim", None, "Elements assumed for a dimension of unknown size "
                     "(a TF1 graph's None batch: the batch it will run with), in tensor sizes "
                     "and estimated op times (default 1); not for a cost graph, which has "
                     "its sizes.", lower_bound=1)
flags.mark_flags_as_required(["input", "output"])
