r"""How well the simulator ranks and times placements on this machine's logical CPUs when its
costs come from ``tf-autoplace profile``: the graph TensorFlow executes, the Send cost and the
cores the profile measured, the partner times (variant "profiled, executed graph" of
``tf_autoplace.hw.fidelity``), against the variants before it.

  PYTHONPATH=. python experiments/fidelity_executed.py --graphs=lstm,transformer,cnn_branches \
      --steps=20 --out_json=/tmp/fidelity_executed.json

Graphs: ``lstm`` and ``transformer`` of ``tf_autoplace.hw.fidelity.GRAPHS``, and
``cnn_branches``, a Keras CNN (not in the zoo) whose blocks have four parallel branches (1x1,
two 3x3, 5x5, 3x3 max-pool then 1x1), joined by a concat and followed by a 2x2 max-pool.

Per graph: the placements of ``fidelity.collect_placements`` (every device alone, moved
shares, random ones, every fast heuristic) and ``auto``'s, deduplicated; one profile of the
graph (``profile_ops``: op times, ops that did not run, the run's steps, partner times); the
placements measured together in ``--steps`` interleaved rounds (``run_interleaved``). Printed
per graph and variant: Spearman between predicted and measured median steps, the same with
*round-normalised* medians (each step divided by the median of its round over all placements,
which takes out the load that changes from round to round on a shared machine), the median of
``|predicted / measured - 1|``, and the split-half Spearman of the measurements, raw and
round-normalised (medians of the odd rounds against the even ones: the ceiling noise puts on
any model's Spearman). The
1-minute load average is recorded before and after each graph. The links (chains of copies,
and the CPU work of a Send between the two logical CPUs) are measured once per run.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from tf_autoplace import zoo
from tf_autoplace.core.cluster import Cluster
from tf_autoplace.cost import AnalyticalCostModel
from tf_autoplace.cost.profile import ProfileCostModel
from tf_autoplace.graph import ingest
from tf_autoplace.hw import fidelity
from tf_autoplace.hw.profiler import profile_ops, with_profiled_cores
from tf_autoplace.hw.runner import RunConfig, run_interleaved
from tf_autoplace.hw.transfers import profile_links, profile_send_costs
from tf_autoplace.hw.workload import Workload
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.placers import get_placer
from tf_autoplace.sim import Simulator
from tf_autoplace.zoo.base import GraphBuilder
from tf_autoplace.zoo.keras_classifier import _keras_seed

flags.DEFINE_list("graphs", ["lstm", "transformer", "cnn_branches"], "graphs to evaluate")
flags.DEFINE_integer("steps", 20, "interleaved timed rounds per graph")
flags.DEFINE_integer("warmup_steps", 3, "untimed steps per placement first")
flags.DEFINE_integer("seed", 0, "placer and round-order seed")
flags.DEFINE_string("out_json", None, "write every figure here")
FLAGS = flags.FLAGS

VARIANTS = ("analytical", "profiled", "profiled, executed graph")


def cnn_branches(batch=8, size=32, channels=32, blocks=3, classes=10):
    """The Keras CNN with parallel branches (module docstring), as a zoo ModelGraph."""
    from tf_keras import layers

    builder = GraphBuilder("cnn_branches")
    with builder.graph.as_default():
        tf.compat.v1.set_random_seed(0)
        x = builder.placeholder("images", [batch, size, size, 3], tf.float32)
        y = builder.placeholder("labels", [batch], tf.int32, classes)
        with _keras_seed(0):
            conv = lambda h, k, name: layers.Conv2D(channels, k, padding="same",
                                                    activation="relu", name=name)(h)
            h = conv(x, 3, "stem")
            for k in range(blocks):
                b1 = conv(h, 1, f"b{k}_1x1")
                b2 = conv(conv(h, 3, f"b{k}_3x3a"), 3, f"b{k}_3x3b")
                b3 = conv(h, 5, f"b{k}_5x5")
                b4 = conv(layers.MaxPool2D(3, 1, padding="same", name=f"b{k}_pool")(h), 1,
                          f"b{k}_pool1x1")
                h = conv(layers.Concatenate(name=f"b{k}_concat")([b1, b2, b3, b4]), 1,
                         f"b{k}_reduce")
                if k < blocks - 1:
                    h = layers.MaxPool2D(2, name=f"b{k}_down")(h)
            logits = layers.Dense(classes, name="logits")(layers.GlobalAveragePooling2D()(h))
    return builder.finish(logits, y, tf.compat.v1.train.AdamOptimizer(1e-3))


def build(name):
    if name == "cnn_branches":
        return cnn_branches()
    model_name, knobs = fidelity.GRAPHS[name]
    return zoo.build(model_name, **knobs)


def placements(problem, seed, log):
    """fidelity's placements without its learned placers, and auto's."""
    learned, fidelity.LEARNED = fidelity.LEARNED, ()  # the learned ones take long here
    try:
        out = fidelity.collect_placements(problem, fidelity.Config(seed=seed), log)
    finally:
        fidelity.LEARNED = learned
    auto = get_placer("auto").propose(problem, seed=seed)
    same = next((k for k, (_, d) in enumerate(out) if np.array_equal(d, auto)), None)
    if same is None:
        out.append(("auto", auto))
    else:
        out[same] = (f"{out[same][0]} = auto", out[same][1])
    return out


def spearman_ceiling(steps: np.ndarray) -> float:
    """Split-half Spearman of [P, R] step times: odd rounds' medians against even ones'."""
    return fidelity.spearman(np.median(steps[:, ::2], 1), np.median(steps[:, 1::2], 1))


def round_normalised(steps: np.ndarray) -> np.ndarray:
    """[P, R] step times each divided by the median of its round (column)."""
    return steps / np.median(steps, 0, keepdims=True)


def evaluate(name, cluster, log):
    model = build(name)
    workload = Workload.from_model(model, seed=FLAGS.seed)
    meta_graph = ingest.load_meta_graph(model.graph)
    local = Cluster.local(num_logical_cpus=2)
    analytical = AnalyticalCostModel(meta_graph)
    problem, _ = build_problem(meta_graph, local, cost_model=analytical)
    found = placements(problem, FLAGS.seed, log)
    labels, devices = [label for label, _ in found], [d for _, d in found]
    log(f"{name}: {problem.graph.num_ops} ops, {len(found)} placements")

    load_before = os.getloadavg()
    profile = profile_ops(workload, description=name)
    log(f"  profile: {profile.description}")
    profiled = ProfileCostModel.from_proto(profile, fallback=analytical)
    names, ops = local.names, problem.graph.names
    assignments = [dict(zip(ops, (names[d] for d in x.tolist()))) for x in devices]
    run = RunConfig(steps=FLAGS.steps, warmup_steps=FLAGS.warmup_steps)
    measured = run_interleaved(workload, assignments, run, seed=FLAGS.seed)
    load_after = os.getloadavg()
    steps = np.array([m.step_times_s for m in measured])  # [P, R]
    median = np.median(steps, 1)
    normalised = np.median(round_normalised(steps), 1)

    executed_cluster, ran = with_profiled_cores(cluster, profile)
    executed, _ = build_problem(meta_graph, executed_cluster, cost_model=profiled)
    sims = {"analytical": problem.simulator,
            "profiled": Simulator(problem.graph, cluster, profiled.op_time(problem.graph,
                                                                            cluster)),
            "profiled, executed graph": executed.simulator}
    out = dict(graph=name, ops=problem.graph.num_ops, labels=labels,
               load_before=load_before, load_after=load_after, profile=profile.description,
               parallelism=ran, cores=executed_cluster.core_groups,
               partners=int((executed.partner >= 0).sum()) if executed.partner is not None
               else 0, measured_s=median.tolist(), normalised=normalised.tolist(),
               split_half=spearman_ceiling(steps),
               split_half_normalised=spearman_ceiling(round_normalised(steps)), variants={})
    for variant in VARIANTS:
        runs = [sims[variant].run(x) for x in devices]
        pred = np.array([r.makespan for r in runs])
        out["variants"][variant] = dict(
            predicted_s=pred.tolist(), transfers=[r.num_transfers for r in runs],
            spearman=fidelity.spearman(pred, median),
            spearman_normalised=fidelity.spearman(pred, normalised),
            error=fidelity.median_relative_error(pred, median))
    return out


def table(results) -> str:
    lines = ["| graph | ops | placements | load (1 min) before -> after | split-half (raw, "
             "normalised) | variant | Spearman | Spearman (round-normalised) | median abs rel "
             "error |", "| --- | ---: | ---: | --- | --- | --- | ---: | ---: | ---: |"]
    for r in results:
        for variant, v in r["variants"].items():
            lines.append(f"| {r['graph']} | {r['ops']} | {len(r['labels'])} | "
                         f"{r['load_before'][0]:.2f} -> {r['load_after'][0]:.2f} | "
                         f"{r['split_half']:.3f}, {r['split_half_normalised']:.3f} | {variant} | "
                         f"{v['spearman']:.3f} | {v['spearman_normalised']:.3f} | "
                         f"{v['error']:.3f} |")
    return "\n".join(lines)


def main(argv):
    del argv
    log = lambda message: print(message, file=sys.stderr, flush=True)
    began = time.perf_counter()
    local = Cluster.local(num_logical_cpus=2)
    cluster, links = profile_links(local)
    cluster, sends = profile_send_costs(cluster)
    fit = next(iter(sends.values()))
    chain = next(iter(links.values()))
    log(f"links: chain {chain.latency_s * 1e6:.2f} us; one Send {fit.send_s * 1e6:.2f} us of CPU "
        f"work (sends {fit.sends})")
    results = []
    for name in FLAGS.graphs:
        results.append(evaluate(name, cluster, log))
        text = table(results)
        log(text)
        if FLAGS.out_json:
            with open(FLAGS.out_json, "w", encoding="utf-8") as f:
                json.dump(dict(chain_latency_s=chain.latency_s, send_s=fit.send_s,
                               ladder_sends=fit.sends, ladder_cpu_s=fit.seconds,
                               results=results), f, indent=1, default=str)
    print(table(results))
    log(f"done in {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    app.run(main)
