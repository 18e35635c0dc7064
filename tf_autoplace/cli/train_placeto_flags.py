"""The flags of ``tf-autoplace train-placeto``, declared apart from the command (which imports
TensorFlow) so that ``tf-autoplace train-placeto --help`` lists them without importing it, and
:func:`check` checks the settings it can before TensorFlow loads."""

import json

from absl import flags

from tf_autoplace.cli import policy_out
from tf_autoplace.core.cluster import resolve_cluster
from tf_autoplace.errors import ConfigError

flags.DEFINE_string("out_dir", "tf_autoplace/pretrained/placeto_d2",
                    "Where to write the policy and its manifest: a new or empty directory, or a "
                    "policy's directory, whose files are replaced as one set (default: the "
                    "shipped one, from the repository's root).")
flags.DEFINE_string("cluster", "k80x2", "Cluster the policy places on: a shipped name or a "
                    "spec file.")
flags.DEFINE_list("families", ["nmt"], "Graph families to train on (nmt, ptb, cifar10).")
flags.DEFINE_integer("num_graphs", 32, "Graphs per family (half train, half held out).",
                     lower_bound=2)
flags.DEFINE_enum("objective", "imitation", ["imitation", "policy_gradient"],
                  "Train with policy gradients, or imitate the placer's search (see above).")
flags.DEFINE_integer("target_samples", 1200, "imitation: placements the search from scratch "
                     "simulates on each training graph.")
flags.DEFINE_integer("target_searches", 1, "imitation: searches per training graph (different "
                     "seeds); the best placement of all of them is the target.")
flags.DEFINE_integer("clone_inits", 1, "imitation: policies cloned on the same targets, "
                     "their initial weights seeded --seed, --seed + 1, ... (in --workers "
                     "processes); the one whose greedy episodes gain most on the training "
                     "graphs (mean) is kept.", lower_bound=1)
flags.DEFINE_integer("policy_embed", 8, "Policy embedding width (the paper's 8).",
                     lower_bound=1)
flags.DEFINE_integer("policy_hidden", 8, "Policy message-passing MLP width.", lower_bound=1)
flags.DEFINE_integer("policy_head", 16, "Width of the policy head's two layers.",
                     lower_bound=1)
flags.DEFINE_integer("policy_rounds", 4, "Message-passing rounds k (the paper's 4..8).",
                     lower_bound=1, upper_bound=16)
flags.DEFINE_integer("epochs", 150, "imitation: passes over the training graphs.",
                     lower_bound=1)
flags.DEFINE_float("move_weight", 3.0, "imitation: weight of the steps whose target moves "
                   "the group (the others weigh 1).")
flags.DEFINE_integer("iterations", 300, "Policy updates.", lower_bound=1)
flags.DEFINE_integer("workers", 2, "Workers (processes, or Ray actors with --ray_address): per "
                     "policy-gradient update, each on its own graph; for imitation, searching "
                     "the training graphs and cloning.", lower_bound=1)
flags.DEFINE_string("ray_address", None, "Run the workers as Ray actors on this cluster: 'auto' "
                    "(the cluster `ray start` made on this machine), HOST:PORT, or 'local' (a "
                    "fresh Ray on this machine). Default: local processes. Needs "
                    "pip install '.[ray]'.")
flags.DEFINE_integer("episodes", 1, "Episodes each worker runs per update, in lockstep.")
flags.DEFINE_integer("seed", 0, "Seed of the families, the policy and training.")
flags.DEFINE_integer("max_groups", 256, "Merge-and-Colocate groups per graph in the MDP.")
flags.DEFINE_float("learning_rate", 3e-3, "Adam's initial learning rate.")
flags.DEFINE_float("final_learning_rate_ratio", 10.0, "The learning rate decays by this factor.")
flags.DEFINE_float("entropy", 3e-4, "Initial entropy bonus (see --final_entropy_ratio).")
flags.DEFINE_bool("normalize_advantages", False,
                  "Divide each step's advantage by the spread of that step's returns.")
flags.DEFINE_enum("estimator", "reinforce", ["reinforce", "all_actions"],
                  "Policy-gradient estimator (tf_autoplace.placers.placeto.reinforce): sampled actions, or "
                  "the expectation over every action of each step (needs --discount=0).")
flags.DEFINE_enum("episode_start", "env", ["env", "best"],
                  "Where a graph's episodes start: the environment's start placement, or the "
                  "best placement found on that graph so far.")
flags.DEFINE_bool("undo_worse", False, "Undo a move that makes the runtime worse (its negative "
                  "reward stays; tf_autoplace.placers.placeto.env).")
flags.DEFINE_integer("select_every", 0, "Every N iterations score greedy episodes on "
                     "--select_graphs training graphs and keep the best weights (0: last).")
flags.DEFINE_integer("select_graphs", 12, "Training graphs the selection scores.")
flags.DEFINE_float("final_entropy_ratio", 20.0, "The entropy bonus decays by this factor.")
flags.DEFINE_float("discount", 0.0, "Return discount gamma (1: the paper's undiscounted "
                   "return; 0: each action is credited with its own improvement).")
flags.DEFINE_string("cache_dir", None, "Cache built family problems here.")
flags.DEFINE_string("logdir", None, "TensorBoard summaries.")
flags.DEFINE_string("family_knobs", "{}",
                    "JSON {family: {knob: value or [low, high]}} overriding family knobs.")


def family_knobs(text: str) -> dict:
    """--family_knobs as a dict; ConfigError naming the flag unless it is a JSON object."""
    try:
        knobs = json.loads(text)
    except (ValueError, RecursionError) as e:  # (RecursionError: nested thousands deep)
        raise ConfigError(f"--family_knobs must be a JSON object: {e}") from None
    if not isinstance(knobs, dict):
        raise ConfigError(f"--family_knobs must be a JSON object, got {text!r}")
    return knobs


def check() -> None:
    """--family_knobs, --out_dir and --cluster, before anything is imported or built (the
    command line's dispatcher runs it first; ConfigError or ClusterSpecError naming the flag's
    problem)."""
    family_knobs(flags.FLAGS.family_knobs)
    policy_out.check_out_dir(flags.FLAGS.out_dir)
    check_cluster(resolve_cluster(flags.FLAGS.cluster))


def check_cluster(cluster) -> None:
    """ConfigError naming --cluster when it has fewer than two action devices: a policy
    chooses among them (found only after every graph was built, minutes later)."""
    action = cluster.compute_devices()
    if len(action) < 2:
        raise ConfigError(f"--cluster {flags.FLAGS.cluster!r} has {len(action)} device(s) a "
                          "policy can place ops on; a Placeto policy chooses among at least 2 "
                          "(give a cluster of 2 or more GPUs, or of logical CPUs, e.g. k80x2)")
