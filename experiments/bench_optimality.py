"""How far the placers are from the best possible placement: proven optima on small problems.

  PYTHONPATH=. python experiments/bench_optimality.py --out_csv=opt.csv --out_md=opt.md
  PYTHONPATH=. python experiments/bench_optimality.py --zoo --out_csv=zoo_opt.csv
  PYTHONPATH=. python experiments/bench_optimality.py --from_csv=a.csv,b.csv --out_md=opt.md

Two sets of problems:

* **Random training-like graphs** (default): ``--graphs`` graphs of ``--min_layers`` to
  ``--max_layers`` layers (:func:`tf_autoplace.testing.problems.training_problem`, one group
  per layer, seeds 0, 1, ...), each on every GPU count of ``--gpus``.
* **Zoo graphs** (``--zoo``): each pair of ``--pairs`` at the papers' size, with its TF
  colocation groups merged by Merge-and-Colocate into at most ``--zoo_groups`` groups that
  become the graph's colocation groups, so every placer (those that move colocation groups,
  like ``auto``, and those that move groups) searches the same placements as the solver.

On each problem every placer of ``--placers`` places (seed 0, default settings) and
:func:`tf_autoplace.sim.exact.solve_placement` starts from all their placements that fit, within
``--time_limit_s``: it returns the fastest placement it simulated (``best``, never slower than
any placer's) and a proven bound no placement of the groups that fits in memory can beat in
the simulator. When they meet, ``best`` is the optimum. A placer's step over the bound is how
much slower than optimal it may be (an upper estimate of its distance); over ``best``, how
much slower than a placement that exists (a lower estimate); both are the distance itself
where the optimum is proven. Over its *relaxed step* (the solver's MILP with the devices fixed
to the placer's, :func:`tf_autoplace.sim.exact.relaxed_step`): the part of its distance to the
bound that is the relaxation's (the best order of ops on a device instead of the simulator's
first come, first served), which no bound of this solver can close. ``--part=i/k`` runs
every k-th problem from the i-th, for running in several processes; ``--skip_csv`` skips the
problems earlier runs hold (a run with other placers can go on from them); ``--solver_csv``
places with more placers on problems an earlier run solved, keeping its bound (still proven)
and its best unless a new placer's placement is faster; ``--from_csv`` renders CSVs together.
"""

from __future__ import annotations

import csv
import dataclasses
import time

import numpy as np
from absl import app, flags

from tf_autoplace.errors import AutoplaceError
from tf_autoplace.core.problem import PlacementProblem, check_memory
from tf_autoplace.grouping import Grouping, GroupingConfig, merge_and_colocate
from tf_autoplace.placers import get_placer
from tf_autoplace.sim.exact import relaxed_step, solve_placement
from tf_autoplace.testing.problems import training_problem
from tf_autoplace.zoo import benchmark as bench

flags.DEFINE_integer("graphs", 50, "random training-like graphs")
flags.DEFINE_integer("min_layers", 20, "fewest layers (groups) of a random graph")
flags.DEFINE_integer("max_layers", 60, "most layers (groups) of a random graph")
flags.DEFINE_list("gpus", ["2", "4"], "GPU counts each random graph is placed on")
flags.DEFINE_bool("zoo", False, "the zoo pairs instead of random graphs")
flags.DEFINE_list("pairs", None, "zoo model:cluster pairs; default: the papers' 16")
flags.DEFINE_integer("zoo_groups", 60, "most groups of a zoo graph")
flags.DEFINE_string("cache_dir", None, "where built zoo problems are kept between runs")
flags.DEFINE_list("placers", ["auto", "best_heuristic", "post", "placeto", "m_sct", "m_etf"],
                  "placers to compare with the optimum")
flags.DEFINE_float("time_limit_s", 60.0, "the solver's time limit per problem")
flags.DEFINE_float("relaxed_s", 10.0, "time limit of each placer's relaxed step (the solver's "
                   "MILP at its placement); 0: not computed")
flags.DEFINE_string("part", "0/1", "i/k: run problems i, i+k, i+2k, ...")
flags.DEFINE_list("from_csv", None, "render these CSVs instead of running")
flags.DEFINE_list("skip_csv", None, "skip the problems these CSVs already hold")
flags.DEFINE_list("solver_csv", None, "take each problem's best and bound from the solver rows "
                  "of these CSVs instead of solving (for placers added to an earlier run)")
flags.DEFINE_string("out_csv", None, "write the rows here")
flags.DEFINE_string("out_md", None, "write the summary here")
FLAGS = flags.FLAGS

FIELDS = ("problem", "devices", "groups", "ops", "placer", "step_s", "seconds", "best_s",
          "bound_s", "optimal", "solve_s", "solves", "relaxed_s")


@dataclasses.dataclass
class Row:
    problem: str
    devices: int
    groups: int
    ops: int
    placer: str
    step_s: float
    seconds: float
    best_s: float = np.nan
    bound_s: float = np.nan
    optimal: bool = False
    solve_s: float = np.nan
    solves: int = 0
    relaxed_s: float = np.nan


def random_problems():
    rng = np.random.default_rng(47)
    layers = rng.integers(FLAGS.min_layers, FLAGS.max_layers + 1, FLAGS.graphs)
    for seed, n in enumerate(layers.tolist()):
        for gpus in FLAGS.gpus:
            yield (f"train{n}_s{seed}_g{gpus}",
                   lambda n=n, seed=seed, gpus=int(gpus): training_problem(n, seed,
                                                                           num_gpus=gpus))


def coarse_zoo_problem(problem: PlacementProblem, max_groups: int) -> PlacementProblem:
    """The problem with its colocation groups merged into at most ``max_groups`` groups that
    become its TF colocation groups (module docstring)."""
    labels = merge_and_colocate(problem.graph, GroupingConfig(max_groups=max_groups)).labels
    graph = dataclasses.replace(problem.graph, colocation=labels)
    return PlacementProblem(graph=graph, cluster=problem.cluster, op_time=problem.op_time,
                            grouping=Grouping.from_labels(graph, labels))


def zoo_problems():
    for model, cluster in bench.parse_pairs(FLAGS.pairs or bench.FULL_PAIRS):
        yield (f"{model}:{cluster}",
               lambda model=model, cluster=cluster: coarse_zoo_problem(
                   bench.pair_problem(model, cluster, cache_dir=FLAGS.cache_dir),
                   FLAGS.zoo_groups))


def run(name: str, problem: PlacementProblem, solved: dict | None = None) -> list[Row]:
    rows, starts = [], []
    shape = dict(problem=name, devices=problem.cluster.num_devices,
                 groups=problem.grouping.num_groups, ops=problem.graph.num_ops)
    for placer_name in FLAGS.placers:
        began = time.perf_counter()
        try:
            devices = get_placer(placer_name).propose(problem, seed=0)
        except AutoplaceError as e:
            print(f"{name} {placer_name}: {e}", flush=True)
            continue
        seconds = time.perf_counter() - began
        sim = problem.simulator.run(devices)
        if check_memory(problem, sim):
            print(f"{name} {placer_name}: does not fit in memory", flush=True)
            continue
        starts.append(devices)
        relaxed = (relaxed_step(problem.graph, problem.cluster, problem.op_time,
                                problem.grouping.labels, devices,
                                time_limit_s=FLAGS.relaxed_s, simulator=problem.simulator)[0]
                   if FLAGS.relaxed_s > 0 else np.nan)
        rows.append(Row(**shape, placer=placer_name, step_s=sim.makespan, seconds=seconds,
                        relaxed_s=relaxed))
    if solved is not None:  # an earlier run's solver row: its bound holds for any placer
        earlier = solved[name]
        best_s = min([earlier.best_s] + [r.step_s for r in rows])
        for row in rows:
            row.best_s, row.bound_s, row.solve_s, row.solves = (
                best_s, earlier.bound_s, earlier.solve_s, earlier.solves)
            row.optimal = earlier.optimal and best_s == earlier.best_s
        return rows
    found = solve_placement(problem.graph, problem.cluster, problem.op_time,
                            problem.grouping.labels, starts, time_limit_s=FLAGS.time_limit_s,
                            simulator=problem.simulator)
    rows.append(Row(**shape, placer="solver", step_s=found.step_s, seconds=found.seconds))
    for row in rows:
        row.best_s, row.bound_s, row.optimal = found.step_s, found.bound_s, found.optimal
        row.solve_s, row.solves = found.seconds, found.solves
    return rows


def read_csv(paths) -> list[Row]:
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for r in csv.DictReader(f):
                out.append(Row(problem=r["problem"], devices=int(r["devices"]),
                               groups=int(r["groups"]), ops=int(r["ops"]), placer=r["placer"],
                               step_s=float(r["step_s"]), seconds=float(r["seconds"]),
                               best_s=float(r["best_s"]), bound_s=float(r["bound_s"]),
                               optimal=r["optimal"] == "True", solve_s=float(r["solve_s"]),
                               solves=int(r["solves"]),
                               relaxed_s=float(r.get("relaxed_s") or np.nan)))
    return out


def write_csv(path: str, rows: list[Row]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS)
        for r in rows:
            w.writerow([getattr(r, k) for k in FIELDS])


def _stats(values) -> str:
    v = np.asarray(values, np.float64)
    return f"{np.median(v):.4f} | {v.max():.4f}" if len(v) else "- | -"


def summary(rows: list[Row]) -> str:
    """Per device count and placer: median and largest step / bound and step / best, how many
    problems it is within 2% and 5% of the bound; and the solver's figures."""
    lines = []
    for devices in sorted({r.devices for r in rows}):
        sub = [r for r in rows if r.devices == devices]
        problems = sorted({r.problem for r in sub})
        solver = list({r.problem: r for r in sub}.values())  # every row carries the solve
        best_of = {p: min(r.best_s for r in sub if r.problem == p) for p in problems}
        proven = sum(r.optimal for r in solver)
        lines += [
            f"**{devices} devices**: {len(problems)} problems, "
            f"{min(r.groups for r in sub)}-{max(r.groups for r in sub)} groups, "
            f"{min(r.ops for r in sub)}-{max(r.ops for r in sub)} ops; optimum proven on "
            f"{proven}; solver time median {np.median([r.solve_s for r in solver]):.1f} s, "
            f"max {max(r.solve_s for r in solver):.1f} s; best / bound median "
            f"{np.median([best_of[r.problem] / r.bound_s for r in solver]):.4f}, max "
            f"{max(best_of[r.problem] / r.bound_s for r in solver):.4f}.",
            "",
            "| placer | step / bound: median | max | step / best: median | max | "
            "within 2% of bound | within 5% of bound | step / relaxed: median | max | "
            "placer time median (s) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for placer in dict.fromkeys(r.placer for r in sub):
            if placer == "solver":
                continue
            mine = [r for r in sub if r.placer == placer]
            to_bound = [r.step_s / r.bound_s for r in mine]
            to_best = [r.step_s / best_of[r.problem] for r in mine]
            to_relaxed = [r.step_s / r.relaxed_s for r in mine if np.isfinite(r.relaxed_s)]
            lines.append(f"| {placer} | {_stats(to_bound)} | {_stats(to_best)} | "
                         f"{sum(x <= 1.02 for x in to_bound)}/{len(mine)} | "
                         f"{sum(x <= 1.05 for x in to_bound)}/{len(mine)} | "
                         f"{_stats(to_relaxed)} | {np.median([r.seconds for r in mine]):.2f} |")
        lines.append("")
    return "\n".join(lines)


def per_problem(rows: list[Row]) -> str:
    """One line per problem: every placer's step (ms), the best and the bound."""
    placers = [p for p in dict.fromkeys(r.placer for r in rows) if p != "solver"]
    lines = ["| problem | groups | ops | " + " | ".join(placers) + " | best | bound | proven |",
             "| --- | ---: | ---: | " + " | ".join("---:" for _ in placers) + " | ---: | ---: | --- |"]
    for problem in dict.fromkeys(r.problem for r in rows):
        mine = {r.placer: r for r in rows if r.problem == problem}
        any_row = next(iter(mine.values()))
        cells = [f"{mine[p].step_s * 1e3:.2f}" if p in mine else "-" for p in placers]
        lines.append(f"| {problem} | {any_row.groups} | {any_row.ops} | " + " | ".join(cells)
                     + f" | {any_row.best_s * 1e3:.2f} | {any_row.bound_s * 1e3:.2f} | "
                       f"{'yes' if any_row.optimal else 'no'} |")
    return "\n".join(lines)


def main(argv):
    del argv
    if FLAGS.from_csv:
        rows = read_csv(FLAGS.from_csv)
    else:
        index, _, count = FLAGS.part.partition("/")
        index, count = int(index), int(count)
        rows = []
        todo = list(zoo_problems() if FLAGS.zoo else random_problems())
        done = {r.problem for r in read_csv(FLAGS.skip_csv or [])}
        solved = ({r.problem: r for r in read_csv(FLAGS.solver_csv) if r.placer == "solver"}
                  if FLAGS.solver_csv else None)
        for k, (name, build) in enumerate(todo):
            if k % count != index or name in done or (solved is not None
                                                      and name not in solved):
                continue
            rows += run(name, build(), solved)
            solver = rows[-1]
            print(f"{name}: " + ", ".join(f"{r.placer} {r.step_s * 1e3:.2f}" for r in rows
                                          if r.problem == name)
                  + f"; bound {solver.bound_s * 1e3:.2f} ms ({'optimal' if solver.optimal else 'open'},"
                    f" {solver.solve_s:.1f} s)", flush=True)
            if FLAGS.out_csv:
                write_csv(FLAGS.out_csv, rows)
    text = summary(rows)
    print(text)
    if FLAGS.out_md:
        with open(FLAGS.out_md, "w", encoding="utf-8") as f:
            f.write(text + "\n" + per_problem(rows) + "\n")
    return 0


if __name__ == "__main__":
    app.run(main)
