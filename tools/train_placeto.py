"""Pretrain the Placeto policy that ships in tf_autoplace/pretrained, and write its manifest.

    python tools/train_placeto.py --out_dir=tf_autoplace/pretrained/placeto_d2 --families=nmt \
        --iterations=100 --select_every=25 --select_graphs=6 --workers=1 --episodes=1 \
        --estimator=all_actions --behaviour=keep --discount=0 --entropy=0 \
        --learning_rate=3e-3 --final_learning_rate_ratio=1 --seed=0 --cache_dir=/tmp/placeto_cache

(the shipped policy: about 2 minutes of training on 2 cores once the families are built;
BENCHMARKS.md says why these settings). Builds the graph families (Placeto A.3; the first half
of each family trains, the rest is held out), trains with a policy gradient
(tf_autoplace.rl.reinforce: sampled REINFORCE, or the all-action estimator), evaluates
zero-shot on the held-out graphs against the heuristics and writes ``policy.json``,
``weights.npz`` and ``manifest.json`` (what it was trained on, the configs, the seed, this
command, and the measured results). Progress goes to stderr; TensorBoard summaries to ``--logdir`` if given.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to write the policy and its manifest.")
flags.DEFINE_string("cluster", "testdata/k80x2.pbtxt", "Cluster spec the policy places on.")
flags.DEFINE_list("families", ["nmt", "ptb", "cifar10"], "Graph families to train on.")
flags.DEFINE_integer("num_graphs", 32, "Graphs per family (half train, half held out).")
flags.DEFINE_integer("iterations", 300, "Policy updates.")
flags.DEFINE_integer("workers", 2, "Worker processes per update, each on its own graph.")
flags.DEFINE_integer("episodes", 1, "Episodes each worker runs per update, in lockstep.")
flags.DEFINE_integer("seed", 0, "Seed of the families, the policy and training.")
flags.DEFINE_integer("max_groups", 256, "Merge-and-Colocate groups per graph in the MDP.")
flags.DEFINE_float("learning_rate", 3e-3, "Adam's initial learning rate.")
flags.DEFINE_float("final_learning_rate_ratio", 10.0, "The learning rate decays by this factor.")
flags.DEFINE_float("entropy", 3e-4, "Initial entropy bonus (see --final_entropy_ratio).")
flags.DEFINE_bool("normalize_advantages", False,
                  "Divide each step's advantage by the spread of that step's returns.")
flags.DEFINE_enum("estimator", "reinforce", ["reinforce", "all_actions"],
                  "Policy-gradient estimator (tf_autoplace.rl.reinforce): sampled actions, or "
                  "the expectation over every action of each step (needs --discount=0).")
flags.DEFINE_enum("behaviour", "sample", ["sample", "keep"],
                  "States the episodes visit: the policy's own actions, or the start placement "
                  "kept (needs --estimator=all_actions).")
flags.DEFINE_enum("episode_start", "env", ["env", "best"],
                  "Where a graph's episodes start: the environment's start placement, or the "
                  "best placement found on that graph so far.")
flags.DEFINE_bool("undo_worse", False, "Undo a move that makes the runtime worse (its negative "
                  "reward stays; tf_autoplace.rl.env).")
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
flags.mark_flag_as_required("out_dir")


def main(argv):
    del argv
    from tf_autoplace.api import resolve_cluster
    from tf_autoplace.placers.placeto_policy import PlacetoPolicy
    from tf_autoplace.rl import families, reinforce
    from tf_autoplace.rl.env import EnvConfig
    from tf_autoplace.rl.pretrain import pretrain

    cluster = resolve_cluster(FLAGS.cluster)
    knobs = json.loads(FLAGS.family_knobs)
    config = families.FamilyConfig(num_graphs=FLAGS.num_graphs, seed=FLAGS.seed, **knobs)
    train, test, made = [], [], {}
    t = time.perf_counter()
    for family in FLAGS.families:
        tr, te = families.family_problems(family, config, cluster, cache_dir=FLAGS.cache_dir,
                                          progress=True)
        train += tr
        test += te
        made[family] = dict(train=len(tr), held_out=len(te),
                            ops=[p.graph.num_ops for p in tr + te])
    build_s = time.perf_counter() - t

    env_config = EnvConfig(max_groups=FLAGS.max_groups, undo_worse=FLAGS.undo_worse)
    train_config = reinforce.TrainConfig(
        iterations=FLAGS.iterations, workers=FLAGS.workers, episodes=FLAGS.episodes,
        seed=FLAGS.seed, learning_rate=FLAGS.learning_rate,
        final_learning_rate=FLAGS.learning_rate / FLAGS.final_learning_rate_ratio,
        entropy=FLAGS.entropy, final_entropy=FLAGS.entropy / FLAGS.final_entropy_ratio,
        discount=FLAGS.discount,
        normalize_advantages=FLAGS.normalize_advantages, estimator=FLAGS.estimator,
        behaviour=FLAGS.behaviour, episode_start=FLAGS.episode_start)
    from tf_autoplace.rl.env import PlacementEnv

    probe = PlacementEnv(train[0], env_config)
    policy = PlacetoPolicy(probe.view.num_devices, probe.num_features, seed=FLAGS.seed)
    results = pretrain(policy, train, test, env_config, train_config,
                       select_every=FLAGS.select_every, select_graphs=FLAGS.select_graphs,
                       logdir=FLAGS.logdir, progress=True)

    os.makedirs(FLAGS.out_dir, exist_ok=True)
    policy.save(FLAGS.out_dir)
    manifest = dict(
        what="Placeto policy (tf_autoplace.placers.placeto_policy.PlacetoPolicy)",
        command=" ".join(shlex.quote(a) for a in ["python"] + sys.argv),
        cluster=FLAGS.cluster, action_devices=probe.view.num_devices,
        trained_on=dict(families=made, family_config=repr(config)),
        env_config=repr(env_config), train_config=repr(train_config),
        policy_config=policy.config, seed=FLAGS.seed, build_seconds=build_s,
        machine=f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        results=results)
    with open(os.path.join(FLAGS.out_dir, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=True, default=float)
    print(f"wrote {FLAGS.out_dir}: trained {results['iterations']} iterations, "
          f"{results['samples']} samples in {results['train_seconds']:.0f} s")
    for row in results["held_out"]:
        best_h = min(row["heuristics_R"].values())
        print(f"  held-out graph {row['graph']}: {row['ops']} ops, zero-shot "
              f"{row['zero_shot_R'] * 1e3:.2f} ms (untrained {row['untrained_zero_shot_R'] * 1e3:.2f}"
              f" ms, best heuristic {best_h * 1e3:.2f} ms) in {row['zero_shot_seconds']:.1f} s")


if __name__ == "__main__":
    app.run(main)
