"""Measure GDP's own placements on the benchmark pairs: zero-shot, fine-tuned, a long search,
and ablated policies, beside the expert and the best fast heuristic.

    PYTHONPATH=. python experiments/eval_gdp.py --out_md=gdp_eval.md \\
        --ablations=no_superposition=build/gdp_abl/nosup,no_attention=build/gdp_abl/noattn

Every GDP figure here is the learned placement itself (``GdpPlacer(heuristics=())``), before
the placer's fallback to the best heuristic, so it shows what the policy does; the placer
returns the faster of it and the best heuristic. Per pair (``--pairs``, default the 16 paper
pairs of ``tf_autoplace.zoo.benchmark.FULL_PAIRS``): simulated step time of the expert placement
(the model's layer scopes) and of the best fast heuristic; of GDP zero-shot (greedy placement
of the policy in ``--policy_dir``, default the shipped one) and fine-tuned (PPO for at most
``--steps`` updates and ``--budget_s`` seconds); with ``--long_steps`` > 0, of a long
search (``--long_steps`` updates within ``--long_budget_s`` s) on ``--long_pairs``; and
zero-shot and fine-tuned for each ``--ablations`` policy on ``--ablation_pairs``. ``*`` marks a
placement that does not fit memory.
Seconds are wall time on this machine (the fine-tuning figure includes loading the policy and
grouping the graph).
"""

from __future__ import annotations

import json
import math
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_list("pairs", None, "model:cluster pairs (default: the 16 paper pairs).")
flags.DEFINE_bool("quick", False, "Small model knobs (tf_autoplace.zoo.benchmark.QUICK_KNOBS).")
flags.DEFINE_string("policy_dir", None, "GDP policy to measure (default: the shipped one).")
flags.DEFINE_list("ablations", [], "label=policy_dir items: more policies, zero-shot and "
                  "fine-tuned.")
flags.DEFINE_list("ablation_pairs", None, "Pairs the --ablations run on (default: all).")
flags.DEFINE_integer("steps", 40, "Fine-tuning updates.", lower_bound=1)
flags.DEFINE_float("budget_s", 60.0, "Fine-tuning time cap in seconds.")
flags.DEFINE_integer("long_steps", 0, "Updates of the long search (0: none).", lower_bound=0)
flags.DEFINE_float("long_budget_s", 600.0, "Time cap of the long search in seconds.")
flags.DEFINE_list("long_pairs", None, "Pairs the long search runs on (default: all).")
flags.DEFINE_integer("seed", 0, "Placement seed.")
flags.DEFINE_string("out_md", None, "Write the markdown table here.")
flags.DEFINE_string("out_json", None, "Write every figure as JSON here.")


def _ms(seconds: float, oom: bool = False) -> str:
    return "" if seconds is None or not math.isfinite(seconds) else \
        f"{seconds * 1e3:.1f}{'*' if oom else ''}"


def main(argv):
    del argv
    from tf_autoplace.core.cluster import resolve_cluster
    from tf_autoplace.core.problem import rank_placements
    from tf_autoplace.heuristics import BestHeuristicPlacer
    from tf_autoplace.pipeline.prepare import build_problem
    from tf_autoplace.placers import GdpPlacer
    from tf_autoplace.zoo import benchmark as bench

    pairs = bench.parse_pairs(FLAGS.pairs or bench.FULL_PAIRS)
    all_pairs = [f"{m}:{c}" for m, c in pairs]
    long_pairs = set(FLAGS.long_pairs or all_pairs)
    ablation_pairs = set(FLAGS.ablation_pairs or all_pairs)
    policies = [("gdp", FLAGS.policy_dir)] + [tuple(item.split("=", 1))
                                              for item in FLAGS.ablations]
    placers = {}
    for label, path in policies:
        placers[label, "zero"] = GdpPlacer(policy_dir=path, budget_s=0, heuristics=())
        placers[label, "tuned"] = GdpPlacer(policy_dir=path, max_steps=FLAGS.steps,
                                            budget_s=FLAGS.budget_s, heuristics=())
    long_placer = GdpPlacer(policy_dir=FLAGS.policy_dir, max_steps=FLAGS.long_steps,
                            budget_s=FLAGS.long_budget_s, heuristics=())
    rows = []
    start = time.perf_counter()
    models = {}
    for model_name, cluster_name in pairs:
        pair = f"{model_name}:{cluster_name}"
        if model_name not in models:
            models.clear()  # pairs come grouped by model; keep one graph in memory
            models[model_name] = bench.load_model(model_name, quick=FLAGS.quick)
        model, meta_graph = models[model_name]
        problem, _ = build_problem(meta_graph, resolve_cluster(cluster_name))
        expert_oom, expert_s = rank_placements(problem, [("expert", bench.make_placer(
            "expert", model).propose(problem))])[0][:2]
        heuristic = BestHeuristicPlacer()
        best_s = rank_placements(problem, [("best", heuristic.propose(problem))])[0][1]
        row = dict(pair=pair, ops=problem.graph.num_ops, expert_s=expert_s,
                   expert_oom=expert_oom, best_heuristic_s=best_s,
                   best_heuristic=heuristic.notes[-1])
        runs = [(key, placer) for key, placer in placers.items()
                if key[0] == "gdp" or pair in ablation_pairs]
        if FLAGS.long_steps and pair in long_pairs:
            runs.append((("gdp", "long"), long_placer))
        for (label, kind), placer in runs:
            bench.progress(f"{pair}: {label} {kind}")
            placer.propose(problem, seed=FLAGS.seed)
            stats = placer.stats
            row[f"{label}_{kind}"] = dict(
                step_s=stats["learned_ms"] / 1e3, oom=stats["learned_oom"],
                seconds=stats["seconds"], steps=stats["steps"], samples=stats["samples"],
                groups=stats["groups"])
        rows.append(row)
        _write(rows, policies)
    bench.progress(f"done in {time.perf_counter() - start:.0f} s")
    print(_markdown(rows, policies))
    return 0


def _markdown(rows, policies) -> str:
    head = ["pair", "ops", "groups", "expert (ms)", "best heuristic (ms)", "GDP zero-shot (ms)",
            "GDP fine-tuned (ms)", "fine-tune s (steps)", "GDP long (ms)", "long s (steps)"]
    for label, _ in policies[1:]:
        head += [f"{label} zero-shot (ms)", f"{label} fine-tuned (ms)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        zero, tuned, long = r["gdp_zero"], r["gdp_tuned"], r.get("gdp_long")
        cells = [r["pair"], str(r["ops"]), str(zero["groups"]),
                 _ms(r["expert_s"], r["expert_oom"]), _ms(r["best_heuristic_s"]),
                 _ms(zero["step_s"], zero["oom"]),
                 _ms(tuned["step_s"], tuned["oom"]),
                 f"{tuned['seconds']:.1f} ({tuned['steps']})",
                 _ms(long["step_s"], long["oom"]) if long else "",
                 f"{long['seconds']:.0f} ({long['steps']})" if long else ""]
        for label, _ in policies[1:]:
            cells += [_ms(r[f"{label}_{kind}"]["step_s"], r[f"{label}_{kind}"]["oom"])
                      if f"{label}_{kind}" in r else "" for kind in ("zero", "tuned")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _write(rows, policies) -> None:
    if FLAGS.out_md:
        with open(FLAGS.out_md, "w", encoding="utf-8") as f:
            f.write(_markdown(rows, policies))
    if FLAGS.out_json:
        with open(FLAGS.out_json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2, sort_keys=True)


if __name__ == "__main__":
    app.run(main)
