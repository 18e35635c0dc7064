r"""Reusing a fine-tuned policy on a model changed a little: placements to reach a step time.

    PYTHONPATH=. python tools/bench_policy_reuse.py --model=nmt --base=layers=2 \
        --variant=layers=3 --variant=batch=96 --cluster=k80x2 --seeds=0,1,2 \
        --out_json=reuse.json

For each seed: the Placeto placer fine-tunes the shipped policy on the base model (``--base``
knobs) within ``--samples`` placements and saves the policy it kept
(``PlacetoPlacer.save_policy``); then, on each variant (the base knobs with one changed), two
placers run with the same seed and budget, one from the shipped policy and one from the saved
policy (``PlacetoPlacer(policy=dir)``). Each run's curve (placements simulated, best R so far;
the zero-shot episode first) gives:

- ``target``: the worse of the two runs' final best R, which both reach; ``shipped_n`` and
  ``saved_n``: the placements each needed to reach it (the issue's "placements needed to reach
  the same step time");
- ``saved_to_shipped``: the placements the saved-policy run needed to reach the shipped-policy
  run's final best R (None: it never did);
- the zero-shot and final step times of both.

R is the simulated step time (memory-penalised; equal to the step time for a placement that
fits, as all of these do). Rows are printed as a markdown table and written as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from absl import app, flags

from tf_autoplace import zoo
from tf_autoplace.cluster import Cluster, resolve_cluster
from tf_autoplace.graph import ingest
from tf_autoplace.placers import PlacetoPlacer
from tf_autoplace.prepare import build_problem
from tf_autoplace.rl.pretrain import samples_to_reach

flags.DEFINE_string("model", "nmt", "Zoo model (tf_autoplace.zoo.MODELS).")
flags.DEFINE_multi_string("base", ["layers=2"], "Knob of the base model, name=int; repeatable.")
flags.DEFINE_multi_string("variant", ["layers=3"], "One changed knob per variant, name=int.")
flags.DEFINE_string("cluster", "k80x2", "A shipped cluster name or a cluster spec file.")
flags.DEFINE_list("seeds", ["0"], "Seeds; each fine-tunes its own policy on the base model.")
flags.DEFINE_integer("samples", 512, "Placements each Placeto run simulates (max_samples).")
flags.DEFINE_string("out_json", None, "Write the rows here.")
FLAGS = flags.FLAGS


def _knobs(items) -> dict:
    out = {}
    for item in items:
        name, _, value = item.partition("=")
        out[name] = int(value)
    return out


def _problem(knobs: dict, cluster: Cluster):
    start = time.perf_counter()
    model = zoo.build(FLAGS.model, **knobs)
    problem, _ = build_problem(ingest.load_meta_graph(model.graph), cluster)
    print(f"built {FLAGS.model} {knobs}: {problem.graph.num_ops} ops in "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return problem


def _run(problem, seed: int, policy=None) -> dict:
    placer = PlacetoPlacer(max_samples=FLAGS.samples, budget_s=1e9, policy=policy)
    start = time.perf_counter()
    placer.place(problem, seed=seed)
    stats = placer.stats
    return dict(curve=[(int(n), float(r)) for n, r in stats["curve"]],
                zero_shot_ms=stats["zero_shot_ms"], final_ms=stats["curve"][-1][1] * 1e3,
                samples=stats["samples"], restarts=len(stats["restarts"]),
                seconds=time.perf_counter() - start, placer=placer)


def main(argv):
    del argv
    cluster = resolve_cluster(FLAGS.cluster)
    base = _knobs(FLAGS.base)
    variants = [dict(base, **_knobs([v])) for v in FLAGS.variant]
    base_problem = _problem(base, cluster)
    variant_problems = [_problem(v, cluster) for v in variants]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in (int(s) for s in FLAGS.seeds):
            tuned = _run(base_problem, seed)
            policy = os.path.join(tmp, f"seed{seed}")
            tuned["placer"].save_policy(policy)
            print(f"seed {seed}: fine-tuned on the base model, {tuned['zero_shot_ms']:.2f} -> "
                  f"{tuned['final_ms']:.2f} ms in {tuned['samples']} placements "
                  f"({tuned['seconds']:.0f} s)", file=sys.stderr, flush=True)
            for knobs, problem in zip(variants, variant_problems):
                shipped, saved = _run(problem, seed), _run(problem, seed, policy=policy)
                target = max(shipped["curve"][-1][1], saved["curve"][-1][1])
                row = dict(variant=knobs, ops=problem.graph.num_ops, seed=seed,
                           base_final_ms=tuned["final_ms"], target_ms=target * 1e3,
                           shipped_n=samples_to_reach(shipped["curve"], target),
                           saved_n=samples_to_reach(saved["curve"], target),
                           saved_to_shipped=samples_to_reach(saved["curve"],
                                                             shipped["curve"][-1][1]))
                for name, run in (("shipped", shipped), ("saved", saved)):
                    row.update({f"{name}_{k}": run[k] for k in ("zero_shot_ms", "final_ms",
                                                                "samples", "restarts",
                                                                "seconds", "curve")})
                rows.append(row)
                print(f"seed {seed} {knobs}: shipped {shipped['zero_shot_ms']:.2f} -> "
                      f"{shipped['final_ms']:.2f} ms, saved {saved['zero_shot_ms']:.2f} -> "
                      f"{saved['final_ms']:.2f} ms; to {target * 1e3:.2f} ms: shipped "
                      f"{row['shipped_n']}, saved {row['saved_n']}", file=sys.stderr,
                      flush=True)
                if FLAGS.out_json:
                    with open(FLAGS.out_json, "w", encoding="utf-8") as f:
                        json.dump(rows, f, indent=1)
    print("| variant | ops | seed | shipped zero-shot ms | shipped final ms | saved zero-shot ms "
          "| saved final ms | target ms | placements to target (shipped / saved) | saved to "
          "shipped's final |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        changed = ", ".join(f"{k}={v}" for k, v in r["variant"].items() if base.get(k) != v)
        print(f"| {changed} | {r['ops']} | {r['seed']} | {r['shipped_zero_shot_ms']:.2f} | "
              f"{r['shipped_final_ms']:.2f} | {r['saved_zero_shot_ms']:.2f} | "
              f"{r['saved_final_ms']:.2f} | {r['target_ms']:.2f} | {r['shipped_n']} / "
              f"{r['saved_n']} | {r['saved_to_shipped']} |")
    return 0


if __name__ == "__main__":
    app.run(main)
