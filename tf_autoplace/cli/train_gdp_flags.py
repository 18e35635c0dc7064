"""The flags of ``tf-autoplace train-gdp``, declared apart from the command (which imports
TensorFlow) so that ``tf-autoplace train-gdp --help`` lists them without importing it, and
:func:`check` checks the settings it can before TensorFlow loads."""

from absl import flags

from tf_autoplace.cli import policy_out
from tf_autoplace.core.cluster import resolve_cluster
from tf_autoplace.errors import ConfigError

flags.DEFINE_string("out_dir", None, "Where to write the policy and its manifest: a new or "
                    "empty directory, or a policy's directory, whose files are replaced as one "
                    "set.")
flags.DEFINE_string("cache_dir", None, "Cache the corpus's problems here.")
flags.DEFINE_list("clusters", ["k80x2", "k80x4", "k80x8"],
                  "Clusters every graph is placed on: shipped names or spec files.")
flags.DEFINE_list("families", ["cifar10", "ptb", "nmt"], "Graph families in the corpus.")
flags.DEFINE_integer("family_graphs", 12, "Graphs per family; the first two thirds train, "
                     "the rest choose the checkpoint.", lower_bound=2)
flags.DEFINE_bool("zoo", True, "Add the zoo sequence models at unpaired sizes "
                  "(tf_autoplace.zoo.corpora.gdp.ZOO_GRAPHS).")
flags.DEFINE_integer("steps", 150, "PPO updates (0: save the fresh policy, scored on the "
                     "validation graphs).", lower_bound=0)
flags.DEFINE_integer("graphs_per_step", 4, "Graphs per update (the paper's batch).",
                     lower_bound=1)
flags.DEFINE_integer("samples", 16, "Placements sampled per graph per update.", lower_bound=1)
flags.DEFINE_integer("epochs", 4, "PPO epochs per update.", lower_bound=1)
flags.DEFINE_float("learning_rate", 1e-3, "Adam's initial learning rate.")
flags.DEFINE_float("final_learning_rate", 1e-4, "Adam's rate at the last update (linear).")
flags.DEFINE_float("entropy", 0.01, "Entropy bonus.")
flags.DEFINE_float("clip", 0.2, "PPO's clip epsilon.")
flags.DEFINE_integer("select_every", 25, "Score the validation graphs every N updates.",
                     lower_bound=1)
flags.DEFINE_integer("max_groups", 512, "Merge-and-Colocate groups the policy places.",
                     lower_bound=1)
flags.DEFINE_integer("hidden", 32, "Policy width.", lower_bound=1)
flags.DEFINE_integer("gnn_layers", 2, "GraphSAGE rounds.", lower_bound=1)
flags.DEFINE_integer("attention_layers", 2, "Transformer-XL blocks.", lower_bound=1)
flags.DEFINE_integer("heads", 2, "Attention heads.", lower_bound=1)
flags.DEFINE_integer("segment", 128, "Groups per Transformer-XL segment.", lower_bound=1)
flags.DEFINE_integer("ffn", 64, "Feed-forward width of each block.", lower_bound=1)
flags.DEFINE_bool("superposition", True, "Parameter superposition (false: the ablation).")
flags.DEFINE_bool("attention", True, "Attention sub-layers (false: the ablation).")
flags.DEFINE_bool("hint", True, "The policy reads the best fast heuristic's placement (our "
                  "addition; false: the paper's model, which places from nothing).")
flags.DEFINE_integer("seed", 0, "Seed of the policy's weights and of training.")
flags.DEFINE_integer("clone_epochs", 60, "Epochs of imitating Post's searches before PPO "
                     "(0: PPO from the fresh policy).", lower_bound=0)
flags.DEFINE_integer("post_samples", 2400, "Placements of each Post search the policy "
                     "imitates.", lower_bound=1)
flags.DEFINE_float("clone_learning_rate", 3e-4, "Adam's rate while imitating.")
flags.DEFINE_float("move_weight", 5.0, "Weight of a group Post moves off the hint's device.")
flags.DEFINE_list("keep_offsets", ["0", "1", "2", "3", "4", "6"], "Offsets tried on the "
                  "hint's logit weight after training; the best on validation is kept (empty: "
                  "none).")
flags.DEFINE_integer("clone_select_every", 5, "Score the validation graphs every N imitation "
                     "epochs.", lower_bound=1)
flags.mark_flags_as_required(["out_dir"])


def keep_offsets(values) -> list[float]:
    """--keep_offsets as numbers; ConfigError naming the flag otherwise."""
    try:
        return [float(x) for x in values]
    except ValueError:
        raise ConfigError(f"--keep_offsets must be numbers, got {list(values)}") from None


def check() -> None:
    """--keep_offsets, --out_dir and --clusters, before anything is imported or built (the
    command line's dispatcher runs it first; ConfigError or ClusterSpecError naming the flag's
    problem)."""
    keep_offsets(flags.FLAGS.keep_offsets)
    policy_out.check_out_dir(flags.FLAGS.out_dir)
    for path in flags.FLAGS.clusters:
        resolve_cluster(path)
