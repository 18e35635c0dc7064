"""``tf-autoplace train-placeto``: pretrain the Placeto policy that ships in
tf_autoplace/pretrained, and write its manifest.

    tf-autoplace train-placeto

With no flags it reproduces the shipped policy (tf_autoplace/pretrained/placeto_d2, rewritten in
place; it takes tens of minutes once the families are built): 32 graphs of the NMT family on
the K80 x2 cluster, the first 16 for training, and the imitation objective with the settings
its manifest records (``tests/cli/test_train_placeto.py`` checks that the defaults and the
manifest's command both give those settings). Add ``--cache_dir=DIR`` to keep the built
graphs for the next run. Builds the graph families (Placeto A.3; the first half of each family
trains, the rest is held out) and trains with one of two objectives:

- ``imitation`` (tf_autoplace.placers.placeto.imitation, the default): the placer's own search from scratch
  runs on every training graph (``--target_samples`` placements each, ``--workers``
  processes), and the policy learns to reach the best placement found in one greedy episode
  (``--epochs`` passes; with ``--clone_inits`` > 1, that many policies from differently seeded
  initial weights, and the one that gains most on the training graphs is kept);
- ``policy_gradient`` (tf_autoplace.placers.placeto.reinforce): sampled REINFORCE as in the paper, or the
  all-action estimator; the iteration, estimator, entropy and episode flags apply to it.

``--ray_address=auto`` (or ``HOST:PORT``) runs the ``--workers`` on a Ray cluster instead of
local processes (README, "Ray"); the same seed gives the same policy either way.

Then it evaluates zero-shot on the held-out graphs against the heuristics and writes
``policy.json``, ``weights.npz`` and ``manifest.json`` (what it was trained on, the settings
(:func:`recipe`), the seed, this command, and the measured results). Progress goes to stderr;
TensorBoard summaries (policy gradient only) to ``--logdir`` if given.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
import time

from absl import flags

from tf_autoplace.cli import one_line_errors, policy_out
from tf_autoplace.cli import train_placeto_flags  # this command's flags and their checks
from tf_autoplace.core.cluster import resolve_cluster
from tf_autoplace.learning.checkpoints import command_line
from tf_autoplace.placers.placeto import imitation, reinforce
from tf_autoplace.placers.placeto.env import EnvConfig, PlacementEnv
from tf_autoplace.placers.placeto.policy import PlacetoPolicy
from tf_autoplace.placers.placeto.pretrain import held_out, pretrain
from tf_autoplace.placers.placeto.search import PlacetoConfig
from tf_autoplace.zoo.corpora import families

FLAGS = flags.FLAGS  # this command's flags: tf_autoplace.cli.train_placeto_flags


def recipe() -> dict:
    """What the flags ask for, before anything is built or trained, as the manifest records
    it: the cluster, the families and their config, the objective, the MDP (``env_config``),
    the training settings (``train_config``) and the policy's sizes and seed (``policy``)."""
    knobs = train_placeto_flags.family_knobs(FLAGS.family_knobs)
    family_config = families.FamilyConfig(num_graphs=FLAGS.num_graphs, seed=FLAGS.seed,
                                          **knobs)
    if FLAGS.objective == "imitation":
        # The targets come from the placer's search without restarts: the shipped policy's
        # were made so, and a restart only pays within the placer's small budget.
        search = PlacetoConfig(restart_after=None)
        env_config = dataclasses.replace(search.env, max_groups=FLAGS.max_groups)
        train_config = dict(
            target_search=dataclasses.replace(search, env=env_config),
            target_samples=FLAGS.target_samples, target_searches=FLAGS.target_searches,
            clone_inits=FLAGS.clone_inits, epochs=FLAGS.epochs,
            learning_rate=FLAGS.learning_rate, move_weight=FLAGS.move_weight)
    else:
        env_config = EnvConfig(max_groups=FLAGS.max_groups, undo_worse=FLAGS.undo_worse)
        train_config = reinforce.TrainConfig(
            iterations=FLAGS.iterations, workers=FLAGS.workers, episodes=FLAGS.episodes,
            seed=FLAGS.seed, learning_rate=FLAGS.learning_rate,
            final_learning_rate=FLAGS.learning_rate / FLAGS.final_learning_rate_ratio,
            entropy=FLAGS.entropy, final_entropy=FLAGS.entropy / FLAGS.final_entropy_ratio,
            discount=FLAGS.discount, normalize_advantages=FLAGS.normalize_advantages,
            estimator=FLAGS.estimator, episode_start=FLAGS.episode_start)
    return dict(cluster=FLAGS.cluster, families=list(FLAGS.families),
                family_config=family_config, objective=FLAGS.objective, env_config=env_config,
                train_config=train_config,
                policy=dict(embed=FLAGS.policy_embed, hidden=FLAGS.policy_hidden,
                            head=FLAGS.policy_head, rounds=FLAGS.policy_rounds, seed=FLAGS.seed))


def recorded(settings: dict) -> dict:
    """:func:`recipe`'s settings as the manifest writes them (configs as their reprs)."""
    train_config = settings["train_config"]
    if isinstance(train_config, dict):
        train_config = dict(train_config, target_search=repr(train_config["target_search"]))
    return dict(settings, family_config=repr(settings["family_config"]),
                env_config=repr(settings["env_config"]), train_config=repr(train_config))


def _policy_gradient(settings: dict, policy, train, test):
    return pretrain(policy, train, test, settings["env_config"], settings["train_config"],
                    select_every=FLAGS.select_every, select_graphs=FLAGS.select_graphs,
                    logdir=FLAGS.logdir, progress=True, ray_address=FLAGS.ray_address)


def _imitate(settings: dict, policy, train, test):
    """Search every training graph from scratch with the placer's settings, then clone."""
    env_config, config = settings["env_config"], settings["train_config"]
    t = time.perf_counter()
    targets = imitation.search_targets(train, config["target_search"],
                                       samples=config["target_samples"],
                                       searches=config["target_searches"], seed=FLAGS.seed,
                                       workers=FLAGS.workers, ray_address=FLAGS.ray_address,
                                       progress=True)
    search_s = time.perf_counter() - t
    seeds = [FLAGS.seed + k for k in range(config["clone_inits"])]
    t = time.perf_counter()
    policy, clones = imitation.clone_best_of(
        train, env_config, [target.actions for target in targets], policy.config, seeds,
        epochs=config["epochs"], learning_rate=config["learning_rate"],
        move_weight=config["move_weight"], workers=FLAGS.workers, ray_address=FLAGS.ray_address,
        progress=True)
    untrained = PlacetoPolicy(**policy.config)  # the chosen clone's initial weights
    curve = next(made.curve for made in clones if made.seed == policy.config["seed"])
    print(f"[imitation] kept the clone seeded {policy.config['seed']} of {len(clones)}",
          file=sys.stderr, flush=True)
    results = dict(
        search_seconds=search_s, train_seconds=time.perf_counter() - t,
        iterations=config["epochs"], samples=sum(target.samples for target in targets),
        targets=[dict(graph=i, start_R=target.start_score, target_R=target.score,
                      moved=target.moved, moves=target.moves.tolist())
                 for i, target in enumerate(targets)],
        clone_curve=curve[::10] + curve[-1:],
        clones=[dict(seed=made.seed, fit=made.curve[-1], train_mean_greedy_gain=made.train_gain)
                for made in clones],
        held_out=held_out(policy, untrained, test, env_config))
    return policy, results


@one_line_errors
def main():
    """Train (see the module docstring)."""
    settings = recipe()
    out_dir = policy_out.check_out_dir(FLAGS.out_dir)  # before hours of training
    cluster = resolve_cluster(settings["cluster"])
    train_placeto_flags.check_cluster(cluster)
    with policy_out.staging_dir(out_dir) as staged:  # made now: a bad place fails at once
        _train(settings, cluster, out_dir, staged)


def _train(settings, cluster, out_dir: str, staged: str) -> None:
    train, test, made = [], [], {}
    t = time.perf_counter()
    for family in settings["families"]:
        tr, te = families.family_problems(family, settings["family_config"], cluster,
                                          cache_dir=FLAGS.cache_dir, progress=True)
        train += tr
        test += te
        made[family] = dict(train=len(tr), held_out=len(te),
                            ops=[p.graph.num_ops for p in tr + te])
    build_s = time.perf_counter() - t

    env = PlacementEnv(train[0], settings["env_config"])  # sizes the policy's input and output
    policy = PlacetoPolicy(env.view.num_devices, env.num_features, **settings["policy"])
    if settings["objective"] == "imitation":
        policy, results = _imitate(settings, policy, train, test)
    else:
        results = _policy_gradient(settings, policy, train, test)

    written = recorded(settings)
    manifest = dict(
        what="Placeto policy (tf_autoplace.placers.placeto.policy.PlacetoPolicy)",
        command=command_line(),
        cluster=written["cluster"], action_devices=policy.num_devices,
        trained_on=dict(families=made, family_config=written["family_config"]),
        objective=written["objective"], env_config=written["env_config"],
        train_config=written["train_config"],
        policy_config=policy.config, seed=FLAGS.seed, build_seconds=build_s,
        machine=f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        results=results)
    policy.save(staged)
    policy_out.commit(out_dir, staged, manifest)
    print(f"wrote {FLAGS.out_dir}: trained {results['iterations']} "
          f"{'epochs' if settings['objective'] == 'imitation' else 'iterations'}, "
          f"{results['samples']} samples in {results['train_seconds']:.0f} s")
    for row in results["held_out"]:
        best_h = min(row["heuristics_R"].values())
        print(f"  held-out graph {row['graph']}: {row['ops']} ops, zero-shot "
              f"{row['zero_shot_R'] * 1e3:.2f} ms (untrained "
              f"{row['untrained_zero_shot_R'] * 1e3:.2f} ms, best heuristic "
              f"{best_h * 1e3:.2f} ms) in {row['zero_shot_seconds']:.1f} s")

