"""Measure the lower bounds on the zoo pairs: simple bound, path with transfers, LP bound, MILP.

  PYTHONPATH=. python experiments/bench_bound.py [--pairs=nmt8:k80x8,...] [--quick] [--out_md=...]
  PYTHONPATH=. python experiments/bench_bound.py --milp_s=300 [--cache_dir=DIR]

For every (model, cluster) pair (default: the papers' pairings, ``tf_autoplace.zoo.benchmark``),
builds the problem as the benchmark does and runs :func:`tf_autoplace.sim.lp_lower_bound` once:
prints a markdown row with the simple bound, the path with transfers, the certified LP value,
the bound reported (the largest), HiGHS's status, the LP's size, the seconds HiGHS ran and the
seconds the whole call took (heads and tails, building the LP, solving, certifying). Timings are
wall-clock on whatever machine runs it. Placed / bound ratios come from ``tf-autoplace benchmark``.

With ``--milp_s``, it also runs :func:`tf_autoplace.sim.exact.solve_placement` over the graph's
TF colocation groups (every valid placement), started from the best heuristic's placement, for
that many seconds: its bound holds for the full graph whether or not the search ends (the
scheduling MILP with ``--max_pairs`` disjunctive pairs among the longest ops). The row then
adds the MILP's bound, the bound reported (the largest of all), its status and seconds.
"""

from __future__ import annotations

import time

from absl import app, flags

from tf_autoplace import zoo
from tf_autoplace.core.cluster import resolve_cluster
from tf_autoplace.errors import AutoplaceError
from tf_autoplace.graph import ingest
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.heuristics import BestHeuristicPlacer
from tf_autoplace.sim import lp_lower_bound
from tf_autoplace.sim.exact import solve_placement
from tf_autoplace.zoo import benchmark as bench

flags.DEFINE_list("pairs", None, "model:cluster pairs; default: the papers' pairs")
flags.DEFINE_bool("quick", False, "small model knobs (tf_autoplace.zoo.benchmark.QUICK_KNOBS)")
flags.DEFINE_float("time_limit_s", 30.0, "HiGHS's time limit per LP")
flags.DEFINE_string("out_md", None, "also write the table here")
flags.DEFINE_float("milp_s", 0.0, "seconds for the MILP bound per pair (0: no MILP)")
flags.DEFINE_integer("max_pairs", 2000, "the MILP's disjunctive pairs")
flags.DEFINE_string("cache_dir", None, "where built problems are kept between runs")
FLAGS = flags.FLAGS

HEADER = ("| model | cluster | ops | simple (s) | path with transfers (s) | LP (s) | bound (s) | "
          "bound / simple | status | LP rows | LP cols | HiGHS (s) | call (s) |\n"
          "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |")


def main(argv):
    del argv
    try:
        pairs = bench.parse_pairs(FLAGS.pairs or bench.FULL_PAIRS)
    except AutoplaceError as e:
        raise app.UsageError(str(e)) from None
    header = HEADER if not FLAGS.milp_s else (
        HEADER.replace(" call (s) |\n", " call (s) | MILP (s) | best bound (s) | MILP status | "
                       "MILP call (s) |\n") + " ---: | ---: | --- | ---: |")
    lines = [header]
    print(header, flush=True)
    built = {}
    for model_name, cluster_name in pairs:
        if FLAGS.cache_dir:
            problem = bench.pair_problem(model_name, cluster_name, quick=FLAGS.quick,
                                         cache_dir=FLAGS.cache_dir)
            cluster = problem.cluster
        else:
            if model_name not in built:
                zoo_name, knobs = bench.model_knobs(model_name, FLAGS.quick)
                built = {model_name: (ingest.load_meta_graph(
                    zoo.build(zoo_name, **knobs).graph), None)}
            meta_graph, cost_model = built[model_name]
            cluster = resolve_cluster(cluster_name)
            problem, cost_model = build_problem(meta_graph, cluster, cost_model=cost_model)
            built[model_name] = (meta_graph, cost_model)
        start = time.perf_counter()
        b = lp_lower_bound(problem.graph, cluster, problem.op_time,
                           time_limit_s=FLAGS.time_limit_s)
        call_s = time.perf_counter() - start
        line = (f"| {model_name} | {cluster_name} | {problem.graph.num_ops} | {b.simple_s:.4g} | "
                f"{b.path_s:.4g} | {b.lp_s:.4g} | {b.value_s:.4g} | "
                f"{b.value_s / b.simple_s:.3f} | {b.status} | {b.rows} | {b.cols} | "
                f"{b.solve_s:.2f} | {call_s:.2f} |")
        if FLAGS.milp_s:
            start = time.perf_counter()
            found = solve_placement(problem.graph, cluster, problem.op_time,
                                    problem.graph.colocation,
                                    [BestHeuristicPlacer().propose(problem)],
                                    time_limit_s=FLAGS.milp_s, max_pairs=FLAGS.max_pairs,
                                    simulator=problem.simulator)
            line += (f" {found.bound_s:.4g} | {max(found.bound_s, b.value_s):.4g} | "
                     f"{found.status} | {time.perf_counter() - start:.0f} |")
        lines.append(line)
        print(line, flush=True)
    if FLAGS.out_md:
        with open(FLAGS.out_md, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    app.run(main)
