r"""Reusing a fine-tuned policy on a model changed a little: placements to reach a step time.

    PYTHONPATH=. python experiments/bench_policy_reuse.py --placer=placeto --model=nmt \
        --base=layers=2 --variant=layers=3 --variant=batch=96 --cluster=k80x2 --seeds=0,1,2 \
        --out_json=reuse.json

For each seed: the placer (``--placer``: placeto, hdp or gdp, the placers that keep a policy)
fine-tunes its default policy on the base model (``--base`` knobs) within the budget and saves
the policy it kept (``save_policy``); then, on each variant (the base knobs with one changed),
two placers run with the same seed and budget, one from the default policy and one from the
saved policy (``policy=dir``). The default policy is the shipped one for Placeto and GDP; HDP
ships none, so its default is a fresh policy, as the paper trains one per model ("fresh" in the
table). The budget is ``--samples`` placements: Placeto's ``max_samples`` (its zero-shot
episode's placements come on top) and HDP's (which stops after the update that reaches it);
GDP runs ``--samples`` // ``--samples_per_step`` updates of ``--samples_per_step`` placements
each, plus the zero-shot, hint and final greedy placements. The time cap is too long to end a
search: budgets do.

Each run's curve (``stats["curve"]``: placements simulated, best R so far; its first point is
the zero-shot placement for Placeto and GDP, the best of the first update for HDP) gives:

- ``target``: the worse of the two runs' final best R, which both reach; ``default_n`` and
  ``saved_n``: the placements each needed to reach it (the issue's "placements needed to reach
  the same step time");
- ``saved_to_default``: the placements the saved-policy run needed to reach the default run's
  final best R (None: it never did);
- the first and final best R of both.

R is the simulated step time (memory-penalised; equal to the step time for a placement that
fits). Rows are printed as a markdown table and written as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from absl import app, flags

from tf_autoplace import zoo
from tf_autoplace.core.cluster import Cluster, resolve_cluster
from tf_autoplace.graph import ingest
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.placers import PLACERS, policy_placers
from tf_autoplace.placers.placeto.pretrain import samples_to_reach

# The policy each placer starts from without policy=.
DEFAULT_POLICY = {"placeto": "shipped", "hdp": "fresh", "gdp": "shipped"}

flags.DEFINE_enum("placer", "placeto", policy_placers(), "The placer that keeps a policy.")
flags.DEFINE_string("model", "nmt", "Zoo model (tf_autoplace.zoo.MODELS).")
flags.DEFINE_multi_string("base", ["layers=2"], "Knob of the base model, name=int; repeatable.")
flags.DEFINE_multi_string("variant", ["layers=3"], "One changed knob per variant, name=int.")
flags.DEFINE_string("cluster", "k80x2", "A shipped cluster name or a cluster spec file.")
flags.DEFINE_list("seeds", ["0"], "Seeds; each fine-tunes its own policy on the base model.")
flags.DEFINE_integer("samples", 512, "Placements each run simulates (the budget, module doc).")
flags.DEFINE_integer("samples_per_step", 16, "GDP: placements per PPO update.")
flags.DEFINE_string("out_json", None, "Write the rows here.")
FLAGS = flags.FLAGS


def make_placer(name: str, samples: int, samples_per_step: int, policy=None):
    """Placer ``name`` with a budget of about ``samples`` placements, starting from the saved
    policy in ``policy`` (None: its default one)."""
    if name == "gdp":
        budget = dict(max_steps=max(1, samples // samples_per_step), samples=samples_per_step)
    else:
        budget = dict(max_samples=samples)
    return PLACERS[name](budget_s=1e9, policy=policy, **budget)


def compare(default_curve, saved_curve) -> dict:
    """Placements to the same best R of a run from the default policy and one from the saved
    policy, from their curves of (placements, best R so far)."""
    target = max(default_curve[-1][1], saved_curve[-1][1])
    return dict(target_ms=target * 1e3, default_n=samples_to_reach(default_curve, target),
                saved_n=samples_to_reach(saved_curve, target),
                saved_to_default=samples_to_reach(saved_curve, default_curve[-1][1]))


def _problem(knobs: dict, cluster: Cluster):
    start = time.perf_counter()
    model = zoo.build(FLAGS.model, **knobs)
    problem, _ = build_problem(ingest.load_meta_graph(model.graph), cluster)
    print(f"built {FLAGS.model} {knobs}: {problem.graph.num_ops} ops in "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return problem


def _run(problem, seed: int, policy=None) -> dict:
    placer = make_placer(FLAGS.placer, FLAGS.samples, FLAGS.samples_per_step, policy)
    start = time.perf_counter()
    placer.place(problem, seed=seed)
    curve = [(int(n), float(r)) for n, r in placer.stats["curve"]]
    return dict(curve=curve, first_ms=curve[0][1] * 1e3, final_ms=curve[-1][1] * 1e3,
                samples=curve[-1][0], seconds=time.perf_counter() - start,
                started_from=placer.stats["policy"], placer=placer)


def _never(n):
    return "never" if n is None else n


def markdown(rows: list[dict], base: dict, default: str) -> list[str]:
    """The rows as a markdown table; ``default`` names the default policy (shipped, fresh)."""
    lines = [f"| variant | ops | seed | {default}: first -> final (ms) | saved: first -> final "
             f"(ms) | target (ms) | placements to target ({default} / saved) | saved reaches "
             f"{default}'s final |",
             "| --- | ---: | ---: | --- | --- | ---: | ---: | --- |"]
    for r in rows:
        changed = ", ".join(f"{k}={v}" for k, v in r["variant"].items() if base.get(k) != v)
        lines.append(f"| {changed} | {r['ops']} | {r['seed']} | {r['default_first_ms']:.2f} -> "
                     f"{r['default_final_ms']:.2f} | {r['saved_first_ms']:.2f} -> "
                     f"{r['saved_final_ms']:.2f} | {r['target_ms']:.2f} | "
                     f"{_never(r['default_n'])} / {_never(r['saved_n'])} | "
                     f"{_never(r['saved_to_default'])} |")
    return lines


def main(argv):
    del argv
    cluster = resolve_cluster(FLAGS.cluster)
    base = zoo.parse_knobs(FLAGS.base)
    variants = [dict(base, **zoo.parse_knobs([v])) for v in FLAGS.variant]
    base_problem = _problem(base, cluster)
    variant_problems = [_problem(v, cluster) for v in variants]
    default = DEFAULT_POLICY[FLAGS.placer]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in (int(s) for s in FLAGS.seeds):
            tuned = _run(base_problem, seed)
            policy = os.path.join(tmp, f"seed{seed}")
            tuned["placer"].save_policy(policy)
            print(f"seed {seed}: {FLAGS.placer} fine-tuned the {default} policy on the base "
                  f"model, {tuned['first_ms']:.2f} -> {tuned['final_ms']:.2f} ms in "
                  f"{tuned['samples']} placements ({tuned['seconds']:.0f} s)", file=sys.stderr,
                  flush=True)
            for knobs, problem in zip(variants, variant_problems):
                runs = dict(default=_run(problem, seed), saved=_run(problem, seed, policy))
                row = dict(placer=FLAGS.placer, variant=knobs, ops=problem.graph.num_ops,
                           seed=seed, base_first_ms=tuned["first_ms"],
                           base_final_ms=tuned["final_ms"],
                           **compare(runs["default"]["curve"], runs["saved"]["curve"]))
                for name, run in runs.items():
                    row.update({f"{name}_{k}": run[k] for k in (
                        "first_ms", "final_ms", "samples", "seconds", "started_from", "curve")})
                rows.append(row)
                print(markdown([row], base, default)[-1], file=sys.stderr, flush=True)
                if FLAGS.out_json:
                    with open(FLAGS.out_json, "w", encoding="utf-8") as f:
                        json.dump(rows, f, indent=1)
    print("\n".join(markdown(rows, base, default)))
    return 0


if __name__ == "__main__":
    app.run(main)
