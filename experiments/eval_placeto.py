"""``python experiments/eval_placeto.py``: measure Placeto the way the paper does; print markdown for
BENCHMARKS.md.

    # from scratch: best runtime vs placements sampled, beside the heuristics
    python experiments/eval_placeto.py --experiment=scratch --model=nmt --max_samples=20000
    # transfer: samples the pretrained policy needs to reach the from-scratch result (exactly,
    # and within --reach_tolerance of it, as the paper counts)
    python experiments/eval_placeto.py --experiment=transfer --family=nmt --graphs=3 --max_samples=6000
    # the same over all 16 held-out graphs, in two processes (the other: --first_graph=8)
    python experiments/eval_placeto.py --experiment=transfer --graphs=8 --first_graph=0 --max_samples=2500
    # the same on graphs the shipped policy was trained on (is it generalisation that falls short?)
    python experiments/eval_placeto.py --experiment=transfer --split=train --graphs=8 --max_samples=2500
    # zero-shot on a large graph, then fine-tuning within a time budget
    python experiments/eval_placeto.py --experiment=zero_shot --model=inception_v3 --budget_s=60
    # what single-group moves from the start placement are worth on held-out graphs
    python experiments/eval_placeto.py --experiment=landscape --family=nmt --graphs=3
    # seconds per episode (rollout + gradient) with 1 and 16 episodes in lockstep
    python experiments/eval_placeto.py --experiment=speed --family=nmt --graphs=1

Model knobs come from ``--knob=name=value`` (paper sizes by default, e.g. NMT with
``--knob=layers=2``). Everything is simulated on ``--cluster`` (K80-class by default).
"""

from __future__ import annotations

import ast
import dataclasses
import time

import numpy as np
from absl import app, flags

from tf_autoplace import zoo
from tf_autoplace.core.cluster import resolve_cluster
from tf_autoplace.graph import ingest
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.placers import PlacetoPlacer
from tf_autoplace.placers.placeto import reinforce
from tf_autoplace.placers.placeto.env import PlacementEnv
from tf_autoplace.placers.placeto.policy import PlacetoPolicy
from tf_autoplace.placers.placeto.pretrain import (
    best_within,
    heuristic_scores,
    single_move_landscape,
    transfer_counts,
    zero_shot,
)
from tf_autoplace.placers.placeto.search import PlacetoConfig, pretrained_policy_dir, search
from tf_autoplace.zoo.corpora import families

FLAGS = flags.FLAGS
flags.DEFINE_enum("experiment", "scratch",
                  ["scratch", "transfer", "zero_shot", "landscape", "speed"], "What to run.")
flags.DEFINE_string("model", "nmt", "Zoo model for scratch / zero_shot.")
flags.DEFINE_multi_string("knob", [], "Model knob name=value (int).")
flags.DEFINE_string("family", "nmt", "Graph family for transfer, landscape and speed.")
flags.DEFINE_enum("split", "held_out", ["held_out", "train"], "Which half of the family those "
                  "take their graphs from: the held-out one (the paper's measure), or the one "
                  "the shipped policy was trained on.")
flags.DEFINE_integer("graphs", 3, "Graphs of --split for transfer, landscape and speed.",
                     lower_bound=1)
flags.DEFINE_integer("first_graph", 0, "Index of the first of them in --split (0: the family's "
                     "graph num_train for held_out, graph 0 for train), so that runs can share "
                     "them out.", lower_bound=0)
flags.DEFINE_string("cluster", "k80x2", "Shipped cluster name or cluster spec file.")
flags.DEFINE_string("policy_dir", None, "Pretrained policy (default: the shipped one).")
flags.DEFINE_integer("max_samples", 10000, "Placements to sample per learning curve.")
flags.DEFINE_float("budget_s", 60.0, "Fine-tuning budget for zero_shot.")
flags.DEFINE_float("reach_tolerance", 0.01, "Transfer also counts a run as having reached the "
                   "from-scratch best R once it is within this fraction of it (the paper's own "
                   "transfer runs end 1.2% and 3.3% slower than from scratch, Table 1).",
                   lower_bound=0.0)
flags.DEFINE_integer("max_groups", 256, "Groups in the MDP.")
flags.DEFINE_integer("seed", 0, "Seed.")
flags.DEFINE_string("cache_dir", None, "Family problem cache: a private directory of yours "
                    "(default: tf_autoplace/problems in your cache directory).")
flags.DEFINE_multi_string("fine_tune", [], "Fine-tuning setting name=value overriding "
                          "PlacetoConfig's (e.g. estimator=all_actions; env.name=value for its "
                          "EnvConfig, e.g. env.undo_worse=False); used by every curve.")


def _policy(env, fresh: bool):
    if fresh:
        return PlacetoPolicy(env.view.num_devices, env.num_features, seed=FLAGS.seed)
    path = FLAGS.policy_dir or pretrained_policy_dir(env.view.num_devices)
    if path is None:
        raise app.UsageError("no pretrained policy for this device count; give --policy_dir")
    return PlacetoPolicy.load(path)


def _curve_points(curve, every: int):
    out, next_mark = [], every
    for samples, best in curve:
        if samples >= next_mark:
            out.append((samples, best))
            next_mark += every
    return out + [curve[-1]]


def main(argv):
    del argv
    cluster = resolve_cluster(FLAGS.cluster)
    # The curves use the placer's own fine-tuning settings, from scratch and pretrained alike.
    def literal(text):
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text

    overrides, env_overrides = {}, {}
    for name, _, value in (s.partition("=") for s in FLAGS.fine_tune):
        if name.startswith("env."):
            env_overrides[name[len("env."):]] = literal(value)
        else:
            overrides[name] = literal(value)
    try:
        placeto_config = dataclasses.replace(PlacetoConfig(), **overrides)
        env_config = dataclasses.replace(placeto_config.env, max_groups=FLAGS.max_groups,
                                         **env_overrides)
    except TypeError as e:  # a name PlacetoConfig (or EnvConfig) does not have
        raise app.UsageError(f"--fine_tune: {e}") from None
    # The curves run the placer's own search (placeto.search), without its time cap.
    curve_config = dataclasses.replace(placeto_config, env=env_config,
                                       max_samples=FLAGS.max_samples)

    def from_scratch(problem):
        """The curve of a fresh policy trained on ``problem`` alone (no zero-shot episode)."""
        env = PlacementEnv(problem, env_config)
        return search(_policy(env, fresh=True), env, curve_config, FLAGS.seed,
                      pretrained=False, zero_shot=False).curve

    knobs = {k: int(v) for k, _, v in (s.partition("=") for s in FLAGS.knob)}
    what = "held-out" if FLAGS.split == "held_out" else "training"  # for the headings

    def split_problems():
        """[(name, problem)] of the chosen graphs of --split, named by their index in the
        family."""
        config = families.FamilyConfig(num_graphs=32, seed=0)
        train, test = families.family_problems(FLAGS.family, config, cluster,
                                               cache_dir=FLAGS.cache_dir or True)
        half, offset = (train, 0) if FLAGS.split == "train" else (test, config.num_train)
        first = offset + FLAGS.first_graph
        chosen = half[FLAGS.first_graph:FLAGS.first_graph + FLAGS.graphs]
        if not chosen:
            raise app.UsageError(f"--first_graph={FLAGS.first_graph}: the family's {what} half "
                                 f"has {len(half)} graphs")
        return [(f"{FLAGS.family}_{first + i}", problem) for i, problem in enumerate(chosen)]

    def model_problem():
        model = zoo.build(FLAGS.model, **knobs)
        problem, _ = build_problem(ingest.load_meta_graph(model.graph), cluster)
        return problem

    if FLAGS.experiment == "scratch":
        problem = model_problem()
        env = PlacementEnv(problem, env_config)
        heur = heuristic_scores(problem)
        t = time.perf_counter()
        curve = from_scratch(problem)
        seconds = time.perf_counter() - t
        print(f"### From scratch: {FLAGS.model} {knobs} ({problem.graph.num_ops} ops, "
              f"{env.view.num_groups} groups) on {FLAGS.cluster}, {seconds:.0f} s\n")
        print("| placements sampled | best R so far (ms) |\n| ---: | ---: |")
        for samples, best in _curve_points(curve, max(FLAGS.max_samples // 10, 1)):
            print(f"| {samples} | {best * 1e3:.2f} |")
        print("\nheuristics (R, ms): " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in heur.items()))
        best_h = min(heur.values())
        print(f"best learned {curve[-1][1] * 1e3:.2f} ms vs best heuristic {best_h * 1e3:.2f} ms "
              f"({'better' if curve[-1][1] < best_h else 'not better'})")
    elif FLAGS.experiment == "landscape":
        print(f"### Single-group moves from the start placement: {what} {FLAGS.family} graphs "
              f"on {FLAGS.cluster}\n")
        print("| graph | ops | start R (ms) | moves that help | best move | all helping moves, "
              "greedily (ms) | placements simulated |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, problem in split_problems():
            env = PlacementEnv(problem, env_config)
            row = single_move_landscape(env)
            print(f"| {name} | {problem.graph.num_ops} | "
                  f"{row['start'] * 1e3:.2f} | {row['helping']}/{row['moves']} | "
                  f"{row['best_gain'] * 100:.2f}% | {row['greedy'] * 1e3:.2f} "
                  f"({row['greedy_gain'] * 100:.1f}%) | {row['samples']} |")
    elif FLAGS.experiment == "speed":
        print(f"### Episode cost: {what} {FLAGS.family} graphs on {FLAGS.cluster}\n")
        print("| graph | groups | episodes in lockstep | rollout (s) | gradients (s) | "
              "per episode (s) |\n| --- | ---: | ---: | ---: | ---: | ---: |")
        for name, problem in split_problems():
            env = PlacementEnv(problem, env_config)
            policy = _policy(env, fresh=True)
            def timed(batch):
                t = time.perf_counter()
                rngs = [np.random.default_rng([FLAGS.seed, j]) for j in range(batch)]
                episodes = reinforce.rollouts(policy, env, rngs)
                rollout_s = time.perf_counter() - t
                t = time.perf_counter()
                for e in episodes:
                    reinforce.episode_gradient(policy, env, e, e.returns(env, 0.0), 0.0)
                return rollout_s, time.perf_counter() - t

            for batch in (1, 16):
                timed(batch)  # compiles the policy for these shapes
                rollout_s, grad_s = timed(batch)
                print(f"| {name} | {env.view.num_groups} | {batch} | "
                      f"{rollout_s:.2f} | {grad_s:.2f} | {(rollout_s + grad_s) / batch:.3f} |")
    elif FLAGS.experiment == "transfer":
        test = split_problems()
        print(f"### Transfer: {what} {FLAGS.family} graphs on {FLAGS.cluster}, "
              f"{FLAGS.max_samples} samples from scratch\n")
        tol = FLAGS.reach_tolerance
        print(f"Samples to reach the from-scratch best R (*exact*), and to come within "
              f"{tol:.1%} of it (*near*). Speed-ups: exact / exact; *paper*: scratch exact / "
              f"pretrained near (how the paper's Table 1 counts); *near*: near / near.\n")
        print("| graph | ops | scratch best R (ms) | scratch samples exact / near | pretrained "
              "samples exact / near | speed-up exact | paper | near | pretrained zero-shot "
              "R (ms) | pretrained best R (ms) |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        speedups, curves = {"exact": [], "paper": [], "near": []}, []
        for name, problem in test:
            scratch = from_scratch(problem)
            target = scratch[-1][1]
            env = PlacementEnv(problem, env_config)
            tuned = search(_policy(env, fresh=False), env, curve_config, FLAGS.seed,
                           pretrained=True)
            counts = transfer_counts(scratch, tuned.curve, tol)
            row = counts.speedups()
            for k, v in row.items():
                speedups[k].append(v)
            curves.append((name, scratch, tuned.curve))
            print(f"| {name} | {problem.graph.num_ops} | {target * 1e3:.2f} | "
                  f"{counts.scratch_exact} / {counts.scratch_near} | "
                  f"{counts.tuned_exact or 'never'} / {counts.tuned_near or 'never'} | "
                  + " | ".join(f"{v:.1f}x" for v in row.values()) + " | "
                  f"{tuned.zero_shot.best_score * 1e3:.2f} | {tuned.best_score * 1e3:.2f} |")
        print("\n" + "; ".join(f"{k}: median {np.median(v):.1f}x, {sum(x >= 3 for x in v)} of "
                               f"{len(v)} at 3x or more" for k, v in speedups.items()))
        # The same runs at equal budgets: what a caller who stops early gets from each.
        budgets = [FLAGS.max_samples // 2**k for k in (5, 4, 3, 2, 1, 0)]
        print("\nBest R (ms), scratch / pretrained, after this many placements sampled:\n")
        print("| graph | " + " | ".join(str(n) for n in budgets) + " |")
        print("| --- |" + " ---: |" * len(budgets))
        for name, scratch, tuned_curve in curves:
            cells = [" / ".join("-" if np.isinf(r) else f"{r * 1e3:.2f}"  # - : none yet
                                for r in (best_within(scratch, n), best_within(tuned_curve, n)))
                     for n in budgets]
            print(f"| {name} | " + " | ".join(cells) + " |")
    else:
        problem = model_problem()
        env = PlacementEnv(problem, env_config)
        shot = zero_shot(_policy(env, fresh=False), problem, env_config)
        heur = heuristic_scores(problem)
        placer = PlacetoPlacer(placeto_config, budget_s=FLAGS.budget_s, max_samples=None,
                               env=env_config, policy_dir=FLAGS.policy_dir)
        placement = placer.place(problem, seed=FLAGS.seed)
        print(f"### Zero-shot and {FLAGS.budget_s:.0f} s fine-tuning: {FLAGS.model} {knobs} "
              f"({problem.graph.num_ops} ops, {shot['groups']} groups) on {FLAGS.cluster}\n")
        print(f"- zero-shot episode: {shot['seconds']:.1f} s ({shot['steps']} steps), "
              f"best R {shot['best_R'] * 1e3:.2f} ms, fits: {shot['fits']}")
        stats = dict(placer.stats)
        curve = stats.pop("curve")
        print(f"- fine-tuned (placer stats): {stats}")
        print("- best R (ms) after N placements: " + ", ".join(
            f"{n}: {best * 1e3:.2f}" for n, best in _curve_points(curve, 250)))
        print(f"- placement returned: {placement.sim.makespan * 1e3:.2f} ms "
              f"({placer.stats['winner']})")
        print("- heuristics (R, ms): " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in heur.items()))


if __name__ == "__main__":
    app.run(main)
