"""Measure Post's search the way the paper's ablation does; print markdown.

    # the ablation: CE+PPO, CE alone and PPO alone, each from the heuristic and the uniform
    # start, three seeds, on the paper's NMT pairs
    PYTHONPATH=. python experiments/eval_post.py --pairs=nmt2:k80x2,nmt4:k80x4 \\
        --algorithms=ce+ppo,ce,ppo --inits=heuristic,uniform --seeds=0,1,2
    # placement units: the aligned groups at two sizes, the problem's groups, TF colocation
    PYTHONPATH=. python experiments/eval_post.py --pairs=nmt2:k80x2 --algorithms=ce+ppo \\
        --units=aligned:256,aligned:512,groups:2000,ops

Each run is :func:`tf_autoplace.placers.post.search.search` with the given settings (the paper's
everywhere else, :class:`~tf_autoplace.placers.post.search.PostConfig`) on the zoo pair at paper
size, without the placer's final comparison with the heuristics, so the figures are the
search's own. Per run: the best sampled step time, its ratio to the expert's (the layer-per-GPU
placement the benchmark calls ``expert``), the placements and seconds the search took until
its best first reached the expert's step time and until it came within 1% of its own final
best, and its wall time. Seconds are wall time on whatever machine runs this: on a shared one
they are noisy; placements are exact.
"""

from __future__ import annotations

import statistics
import time

from absl import app, flags

from tf_autoplace.core.cluster import resolve_cluster
from tf_autoplace.errors import AutoplaceError
from tf_autoplace.heuristics import BestHeuristicPlacer
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.placers.post.search import PostConfig, search
from tf_autoplace.zoo import benchmark as bench

flags.DEFINE_list("pairs", ["nmt2:k80x2", "nmt4:k80x4"], "model:cluster pairs (benchmark's)")
flags.DEFINE_list("algorithms", ["ce+ppo", "ce", "ppo"], "PostConfig.algorithm values")
flags.DEFINE_list("inits", ["heuristic"], "PostConfig.init values")
flags.DEFINE_list("units", [f"{PostConfig().units}:{PostConfig().max_groups}"],
                  "PostConfig.units values, with :max_groups where it applies")
flags.DEFINE_list("seeds", ["0"], "search seeds")
flags.DEFINE_integer("max_samples", PostConfig().max_samples, "placements per search")
flags.DEFINE_multi_string("set", [], "another PostConfig field=value for every run (a number), "
                          "e.g. --set=epsilon=0.02")
flags.DEFINE_string("out_md", None, "also write the markdown here")
FLAGS = flags.FLAGS


def _cell(point) -> str:
    return "never" if point is None else f"{point[0]} / {point[1]:.1f} s"


def _overrides() -> dict:
    out = {}
    for item in FLAGS.set:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set takes field=value, got {item!r}")
        out[name] = float(value) if any(c in value for c in ".e") else int(value)
    return out


def _configs():
    extra_fields = _overrides()
    for units in FLAGS.units:
        name, _, groups = units.partition(":")
        extra = {"max_groups": int(groups)} if groups else {}
        for init in FLAGS.inits:
            for algorithm in FLAGS.algorithms:
                yield PostConfig(max_samples=FLAGS.max_samples, budget_s=10**6, units=name,
                                 init=init, algorithm=algorithm, **extra, **extra_fields)


def main(argv):
    del argv
    try:
        pairs = bench.parse_pairs(FLAGS.pairs)
        configs = list(_configs())
        seeds = [int(s) for s in FLAGS.seeds]
    except (AutoplaceError, ValueError, TypeError) as e:
        raise app.UsageError(str(e)) from None
    lines = ["| pair | units | init | algorithm | seed | best (ms) | / expert | to the expert | "
             "to within 1% of its best | wall (s) |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | --- | --- | ---: |"]
    summary = ["| pair | units | init | algorithm | mean best (ms) | min | max | "
               "mean / expert |", "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for model_name, cluster_name in pairs:
        model, meta_graph = bench.load_model(model_name, quick=False)
        cluster = resolve_cluster(cluster_name)
        problem, _ = build_problem(meta_graph, cluster)
        expert = problem.simulator.run(
            bench.make_placer("expert", model).propose(problem)).makespan
        heuristic = BestHeuristicPlacer().propose(problem)
        pair = f"{model_name}:{cluster_name}"
        bench.progress(f"{pair}: expert {expert * 1e3:.2f} ms, best heuristic "
                       f"{problem.simulator.run(heuristic).makespan * 1e3:.2f} ms")
        for cfg in configs:
            units = f"{cfg.units}" + (f" {cfg.max_groups}" if cfg.units != "ops" else "")
            bests = []
            for seed in seeds:
                start = time.perf_counter()
                found = search(problem, cfg, seed, heuristic=heuristic)
                wall = time.perf_counter() - start
                curve = [(p.samples, p.seconds, p.best_score) for p in found.curve]
                bests.append(found.score)
                row = (f"| {pair} | {units} | {cfg.init} | {cfg.algorithm} | {seed} | "
                       f"{found.score * 1e3:.2f}{'' if found.fits else ' (OOM)'} | "
                       f"{found.score / expert:.3f} | {_cell(bench.reach(curve, expert))} | "
                       f"{_cell(bench.reach(curve, found.score * 1.01))} | {wall:.1f} |")
                bench.progress(row)
                lines.append(row)
            summary.append(f"| {pair} | {units} | {cfg.init} | {cfg.algorithm} | "
                           f"{statistics.mean(bests) * 1e3:.2f} | {min(bests) * 1e3:.2f} | "
                           f"{max(bests) * 1e3:.2f} | {statistics.mean(bests) / expert:.3f} |")
    head = (f"{FLAGS.max_samples} placements per search; other PostConfig settings: "
            f"{', '.join(FLAGS.set) or 'the defaults'}.")
    text = "\n".join([head, ""] + lines + [""] + summary) + "\n"
    if FLAGS.out_md:
        with open(FLAGS.out_md, "w", encoding="utf-8") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    app.run(main)
