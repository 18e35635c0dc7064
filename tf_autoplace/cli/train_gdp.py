"""Pretrain the GDP policy that ships in tf_autoplace/pretrained/gdp, and write its manifest.

    tf-autoplace train-gdp --out_dir=tf_autoplace/pretrained/gdp \\
        --cache_dir=build/gdp_corpus

Builds the corpus (tf_autoplace.zoo.corpora.gdp: the cifar10 / ptb / nmt families and zoo
sequence models at sizes the benchmark does not pair, each on 2, 4 and 8 K80s; cached in
``--cache_dir``), refuses any zoo graph that is one of the benchmark's 16 held-out pairs at
paper size, warm-starts one GDP policy by imitating Post's searches on the training problems
(``--clone_epochs`` > 0; tf_autoplace.placers.gdp.imitation), then trains it with PPO,
``--graphs_per_step`` graphs per update (tf_autoplace.placers.gdp.pretrain), keeps after each phase
the checkpoint whose zero-shot placements are best on the validation graphs (the families'
last graphs, on every cluster), calibrates the weight it gives the hint on them
(``--keep_offsets``), and writes
``policy.json``, ``weights.npz`` and ``manifest.json`` (the data, the configs, the seed, this
command, the measured results). ``--superposition=false`` / ``--attention=false`` train the
paper's ablations. Progress goes to stderr.
"""

from __future__ import annotations

import os
import platform
import time

from absl import flags

from tf_autoplace import zoo
from tf_autoplace.cli import one_line_errors, policy_out
from tf_autoplace.cli import train_gdp_flags  # this command's flags and their checks
from tf_autoplace.core.cluster import resolve_cluster
from tf_autoplace.errors import ConfigError
from tf_autoplace.learning.checkpoints import command_line
from tf_autoplace.learning.eager import policy_context
from tf_autoplace.placers.gdp import imitation as gdp_imitation
from tf_autoplace.placers.gdp import pretrain as gdp_pretrain
from tf_autoplace.placers.gdp import train as gdp_train
from tf_autoplace.placers.gdp.features import FeatureConfig
from tf_autoplace.placers.gdp.policy import GdpPolicy
from tf_autoplace.placers.post import search as post_search
from tf_autoplace.zoo import benchmark
from tf_autoplace.zoo.corpora import families
from tf_autoplace.zoo.corpora import gdp as gdp_corpus

FLAGS = flags.FLAGS  # this command's flags: tf_autoplace.cli.train_gdp_flags


def held_out_check(zoo_entries) -> None:
    """Refuse a zoo training graph that is one of the benchmark's pairs at paper size."""

    paper = set()
    for pair in benchmark.FULL_PAIRS:
        name, knobs = benchmark.model_knobs(pair.partition(":")[0], quick=False)
        paper.add((name, tuple(sorted(zoo.all_knobs(name, **knobs).items()))))
    for name, knobs in zoo_entries:
        if (name, tuple(sorted(zoo.all_knobs(name, **knobs).items()))) in paper:
            raise ConfigError(f"zoo graph {name} {knobs} is a held-out benchmark pair")


@one_line_errors
def main():
    """Train (see the module docstring)."""
    out_dir = policy_out.check_out_dir(FLAGS.out_dir)
    with policy_out.staging_dir(out_dir) as staged:  # made now: a bad place fails at once
        _train(out_dir, staged)


def _train(out_dir: str, staged: str) -> None:
    config = gdp_corpus.CorpusConfig(
        families=tuple(FLAGS.families),
        family=families.FamilyConfig(num_graphs=FLAGS.family_graphs, train_fraction=2 / 3,
                                     nmt={"length": (6, 12)}),
        zoo=gdp_corpus.ZOO_GRAPHS if FLAGS.zoo else ())
    held_out_check(config.zoo)
    clusters = [(os.path.splitext(os.path.basename(p))[0], resolve_cluster(p))
                for p in FLAGS.clusters]
    t = time.perf_counter()
    entries = gdp_corpus.build_corpus(config, clusters, cache_dir=FLAGS.cache_dir,
                                      progress=True)
    build_s = time.perf_counter() - t
    train = [e for e in entries if e.split == "train"]
    validation = [e for e in entries if e.split == "validation"]
    features = FeatureConfig(max_groups=FLAGS.max_groups)
    ppo_config = gdp_train.PPOConfig(
        steps=FLAGS.steps, samples=FLAGS.samples, graphs_per_step=FLAGS.graphs_per_step,
        epochs=FLAGS.epochs, clip=FLAGS.clip, learning_rate=FLAGS.learning_rate,
        final_learning_rate=FLAGS.final_learning_rate, entropy=FLAGS.entropy, seed=FLAGS.seed)
    imitation = None if FLAGS.clone_epochs == 0 else gdp_pretrain.Imitation(
        post=post_search.PostConfig(max_samples=FLAGS.post_samples),
        clone=gdp_imitation.CloneConfig(epochs=FLAGS.clone_epochs,
                                        learning_rate=FLAGS.clone_learning_rate,
                                        move_weight=FLAGS.move_weight, seed=FLAGS.seed),
        select_every=FLAGS.clone_select_every, seed=FLAGS.seed)
    with policy_context():
        policy = GdpPolicy(hidden=FLAGS.hidden, gnn_layers=FLAGS.gnn_layers,
                           attention_layers=FLAGS.attention_layers, heads=FLAGS.heads,
                           segment=FLAGS.segment, ffn=FLAGS.ffn,
                           superposition=FLAGS.superposition, attention=FLAGS.attention,
                           hint=FLAGS.hint, seed=FLAGS.seed)
        scored = gdp_pretrain.Scored.build([f"{e.name}@{e.cluster}" for e in validation],
                                           [e.problem for e in validation], features,
                                           ppo_config.memory_penalty, hint=FLAGS.hint)
        results = gdp_pretrain.pretrain(
            policy, [f"{e.name}@{e.cluster}" for e in train], [e.problem for e in train],
            scored, ppo_config, features, select_every=FLAGS.select_every,
            imitation=imitation,
            keep_offsets=train_gdp_flags.keep_offsets(FLAGS.keep_offsets), progress=True)
        policy.save(staged)
    manifest = dict(
        what="GDP policy (tf_autoplace.placers.gdp.policy.GdpPolicy), one policy for every "
             "device count",
        command=command_line(),
        data=dict(
            corpus_config=repr(config), clusters=list(FLAGS.clusters),
            held_out="the 16 pairs of tf_autoplace.zoo.benchmark.FULL_PAIRS at paper size: "
                     "no zoo CNN is trained on, the zoo sequence models only at other layer "
                     "counts",
            train=[dict(graph=e.name, cluster=e.cluster, ops=e.problem.graph.num_ops)
                   for e in train],
            validation=[dict(graph=e.name, cluster=e.cluster, ops=e.problem.graph.num_ops)
                        for e in validation]),
        policy_config=policy.config, ppo_config=repr(ppo_config),
        feature_config=repr(features), seed=FLAGS.seed, build_seconds=build_s,
        machine=f"{platform.machine()}, {os.cpu_count()} cores (shared), "
                f"Python {platform.python_version()}",
        results=results)
    policy_out.commit(out_dir, staged, manifest)
    print(f"wrote {FLAGS.out_dir}: {results['steps']} updates, {results['samples']} samples in "
          f"{results['train_seconds']:.0f} s; chosen step {results['chosen_step']}, mean "
          f"validation ratio to the best heuristic {results['final_mean_ratio']:.3f}")

