"""Measure HDP's search cost on zoo pairs: placements and seconds to reach the expert, and to
converge; print markdown.

    PYTHONPATH=. python experiments/eval_hdp.py --pairs=nmt2:k80x2,nmt4:k80x4,nmt8:k80x8 \\
        --max_samples=4096 --out_md=hdp_curves.md
    PYTHONPATH=. python experiments/eval_hdp.py --pairs=nmt2:k80x2 --quick --set=learning_rate=3e-3

For each ``model:cluster`` pair (``tools/benchmark.py``'s names; paper sizes unless
``--quick``), the expert's, the best heuristic's and one GPU's simulated step times, then the
``hdp`` placer (:class:`tf_autoplace.placers.HDPPlacer`, seeded ``--seed`` as the benchmark
seeds it, so with the default settings its search is the one ``tools/benchmark.py`` runs) with
``--max_samples`` placements and no time cap: the step time of the best placement it learned
(before its guard compares it with the heuristics), its memory-penalised runtime R, which
placement the guard returned, and from the search's curve (read as the benchmark reads it,
:func:`tf_autoplace.zoo.benchmark.search_curve` and :func:`~tf_autoplace.zoo.benchmark.reach`) the
placements and seconds it took to reach
the expert's step time (if it did) and to come within ``--converged`` of its final best R.
``--set=name=value`` overrides an ``HDPConfig`` field (``--set=start=uniform``);
``--policy_dir`` starts every pair's search from a saved HDP policy (``tf-autoplace place
--placer=hdp --save_policy=DIR`` or ``HDPPlacer.save_policy``) instead of a fresh one.
"""

from __future__ import annotations

from absl import app, flags

from tf_autoplace import zoo
from tf_autoplace.core.cluster import resolve_cluster
from tf_autoplace.errors import AutoplaceError, ConfigError
from tf_autoplace.graph import ingest
from tf_autoplace.heuristics import BestHeuristicPlacer, SingleDevicePlacer
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.placers import HDPPlacer, parse_options
from tf_autoplace.placers.hdp.search import HDPConfig, load_policy
from tf_autoplace.zoo import benchmark as bench

FLAGS = flags.FLAGS
flags.DEFINE_list("pairs", ["nmt2:k80x2"], "model:cluster pairs (tools/benchmark.py's names)")
flags.DEFINE_bool("quick", False, "small model knobs (tf_autoplace.zoo.benchmark.QUICK_KNOBS)")
flags.DEFINE_integer("max_samples", 4096, "placements HDP samples per pair", lower_bound=1)
flags.DEFINE_float("converged", 0.01, "a curve has converged once its best is within this "
                   "fraction of its final best", lower_bound=0.0)
flags.DEFINE_integer("seed", 0, "the placer's seed (tools/benchmark.py's --seed)")
flags.DEFINE_multi_string("set", [], "HDPConfig field override, name=value (a number, or the "
                          "text of a text field: --set=start=uniform)")
flags.DEFINE_string("policy_dir", None, "start from this saved HDP policy (default: a fresh "
                    "one, as the benchmark does)")
flags.DEFINE_string("out_md", None, "also write the markdown here (rewritten after each pair)")


def parse_overrides(items) -> dict:
    try:
        return parse_options("hdp", items)
    except ConfigError as e:
        raise app.UsageError(f"--set: {e}") from None


def measure(model_name: str, cluster_name: str, config: HDPConfig) -> str:
    """One markdown row for one pair."""
    zoo_name, knobs = bench.model_knobs(model_name, FLAGS.quick)
    model = zoo.build(zoo_name, **knobs)
    cluster = resolve_cluster(cluster_name)
    problem, _ = build_problem(ingest.load_meta_graph(model.graph), cluster)
    steps = {}
    for name, placer in (("expert", bench.make_placer("expert", model)),
                         ("best heuristic", BestHeuristicPlacer()),
                         ("one GPU", SingleDevicePlacer())):
        steps[name] = problem.simulator.run(placer.propose(problem)).makespan
    placer = HDPPlacer(config)
    placer.propose(problem, seed=FLAGS.seed)
    stats = placer.stats
    curve, _ = bench.search_curve(stats, stats["seconds"])  # timed: HDP gives curve_s
    final = curve[-1][2]
    reached = bench.reach(curve, steps["expert"])
    converged = bench.reach(curve, final * (1 + FLAGS.converged))
    reach = "never" if reached is None else f"{reached[0]} / {reached[1]:.0f} s"
    learned = f"{stats['learned_ms']:.1f}{'' if stats['learned_fits'] else ' (OOM)'}"
    return (f"| {model_name} | {cluster_name} | {problem.graph.num_ops} | "
            f"{steps['expert'] * 1e3:.1f} | {steps['best heuristic'] * 1e3:.1f} | "
            f"{steps['one GPU'] * 1e3:.1f} | {learned} | {final * 1e3:.1f} | "
            f"{stats['winner']} | {reach} | {converged[0]} / {converged[1]:.0f} s | "
            f"{stats['samples']} / {stats['seconds']:.0f} s |")


def main(argv):
    del argv
    try:
        pairs = bench.parse_pairs(FLAGS.pairs)
        config = HDPConfig(max_samples=FLAGS.max_samples, budget_s=1e6,
                           policy_dir=FLAGS.policy_dir, **parse_overrides(FLAGS.set))
        if config.policy_dir:
            load_policy(config)  # a bad directory fails here, before any graph is built
    except AutoplaceError as e:
        raise app.UsageError(str(e)) from None
    lines = [f"HDP search cost, {'quick' if FLAGS.quick else 'paper'} sizes, seed {FLAGS.seed}, "
             f"{config}", "",
             "| model | cluster | ops | expert (ms) | best heuristic (ms) | one GPU (ms) | "
             "HDP learned (ms) | its R (ms) | returned | to reach the expert (placements / s) "
             f"| to converge (within {FLAGS.converged:.0%}) | total (placements / s) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for model_name, cluster_name in pairs:
        bench.progress(f"{model_name} on {cluster_name}")
        lines.append(measure(model_name, cluster_name, config))
        text = "\n".join(lines) + "\n"
        if FLAGS.out_md:
            with open(FLAGS.out_md, "w", encoding="utf-8") as f:
                f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    app.run(main)
