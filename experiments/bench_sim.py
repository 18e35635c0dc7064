"""Benchmark the simulator: ms per simulation of a synthetic ~8,000-op graph.

The graph is a seeded random layered DAG shaped like a large training graph: ~8,000 ops,
~15,000 data edges, some ops with two outputs, a few control edges, lognormal op times
(median ~30 us) and tensor sizes (median ~256 KB), variables with persistent bytes. It is run
on 2 and 8 K80-like devices with Placeto's link numbers (7.6 GB/s, 25 us) under random
placements (uniform per op, and "blocky": contiguous layer ranges per device, which has far
fewer transfers). Prints the JIT compile time of the first call and the median (and min) ms of
``--runs`` simulations after warm-up, for ``Simulator.run`` and ``Simulator.makespan``.

  PYTHONPATH=. python experiments/bench_sim.py [--ops=8000] [--edges=15000] [--runs=100] [--seed=0]

The project's requirement: at most 10 ms per simulation of such a graph on one core.

With ``--pairs=inception_v3:k80x2,inception_v3:k80x8`` it times zoo graphs instead (paper size,
built, costed and grouped as ``tf-autoplace benchmark`` does): the median and min ms of
``Simulator.run`` over ``--runs`` random placements, each a different draw (seeds 0, 1, ...),
of two kinds: every Merge-and-Colocate group on a uniformly random allowed device
(``RandomPlacer``, what the benchmark's simulations-per-second column uses), and every TF
colocation group so (many more transfers: the hardest valid placement for the simulator),
as a markdown table, a row per pair and kind. The CPU time of each run
(``time.process_time``) is given beside the wall time: on a shared machine it leaves out the
time the process waited for a core. ``--cache_dir`` keeps the built problems (a problem
cache: npz files, no pickle) for the next run. The project's requirement
there: at most 2 ms (median) per random placement of the 8k-op Inception-V3 graph on k80x2,
k80x4 and k80x8.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time

import numpy as np
from absl import app, flags

from tf_autoplace.core.cluster import Cluster, Device
from tf_autoplace.graph.opgraph import OpGraph
from tf_autoplace.sim import Simulator, lower_bound

flags.DEFINE_integer("ops", 8000, "number of ops")
flags.DEFINE_integer("edges", 15000, "number of data edges (approximate)")
flags.DEFINE_integer("runs", 100, "timed simulations per setting")
flags.DEFINE_integer("seed", 0, "random seed")
flags.DEFINE_list("pairs", [], "zoo model:cluster pairs to time instead of the synthetic graph")
flags.DEFINE_string("cache_dir", None, "keep the zoo pairs' built problems here")
FLAGS = flags.FLAGS


def layered_graph(num_ops: int, num_edges: int, seed: int) -> tuple[OpGraph, np.ndarray]:
    """A random layered DAG and per-op base times (s). Ops in layer L read outputs of ops in
    the previous 1..3 layers; every op but the first layer has at least one input."""
    rng = np.random.default_rng(seed)
    width = 40
    layer = np.arange(num_ops) // width
    # Outputs: one tensor per op, a second one for 20% of ops.
    two = rng.random(num_ops) < 0.2
    tensor_op = np.sort(np.concatenate([np.arange(num_ops), np.flatnonzero(two)]))
    tensor_bytes = np.exp(rng.normal(np.log(256e3), 1.5, len(tensor_op))).astype(np.int64)
    first_tensor = np.searchsorted(tensor_op, np.arange(num_ops))
    n_out = np.bincount(tensor_op, minlength=num_ops)
    extra = max(num_edges - (num_ops - width), 0)
    consumers = np.concatenate([np.arange(width, num_ops),
                                rng.integers(width, num_ops, extra)])
    back = rng.integers(1, 4, len(consumers)) * width
    lo = np.maximum(consumers - back - width + 1 + consumers % width, 0)
    hi = (layer[consumers]) * width  # exclusive: first op of the consumer's layer
    producers = lo + (rng.random(len(consumers)) * (hi - lo)).astype(np.int64)
    tensors = first_tensor[producers] + (rng.random(len(producers)) * n_out[producers]).astype(int)
    pairs = np.unique(tensors * num_ops + consumers)
    edge_tensor, edge_dst = pairs // num_ops, pairs % num_ops
    # A few control edges between ops in consecutive layers.
    cs = rng.integers(0, num_ops - width, num_ops // 50)
    cd = cs + width + rng.integers(0, width, len(cs))
    cd = np.minimum(cd, num_ops - 1)
    persistent = np.where(rng.random(num_ops) < 0.05,
                          np.exp(rng.normal(np.log(4e6), 1.0, num_ops)), 0).astype(np.int64)
    graph = OpGraph(
        names=tuple(f"op{i}" for i in range(num_ops)), op_types=("MatMul",) * num_ops,
        persistent_bytes=persistent, tensor_op=tensor_op, tensor_bytes=tensor_bytes,
        edge_tensor=edge_tensor, edge_dst=edge_dst, ctrl_src=cs, ctrl_dst=cd,
        colocation=np.arange(num_ops), kernels=np.ones((num_ops, 2), bool),
        shape_known=np.ones(num_ops, bool))
    base_time = np.exp(rng.normal(np.log(30e-6), 1.2, num_ops)) + 5.7e-6
    return graph, base_time


def time_ms(fn, runs: int) -> str:
    """Median and min ms per call over ``runs`` calls (the min: the cost on a busy machine)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return f"{1e3 * statistics.median(times):.3f} (min {1e3 * min(times):.3f})"


def colocation_random(problem, seed: int) -> np.ndarray:
    """Every TF colocation group on a uniformly random device that can run all of it."""
    allowed = problem.colocation_allowed  # [C, D]
    rng = np.random.default_rng(seed)
    pick = np.floor(rng.random(len(allowed)) * allowed.sum(axis=1)).astype(np.int64)
    device = np.argmax(np.cumsum(allowed, axis=1) > pick[:, None], axis=1)
    return device[problem.graph.colocation].astype(np.int32)


def time_zoo_pairs(runs: int) -> None:
    """The ``--pairs`` mode (module docstring)."""
    from tf_autoplace.heuristics import RandomPlacer
    from tf_autoplace.zoo.benchmark import pair_problem, parse_pairs

    rows = []
    for model, cluster in parse_pairs(FLAGS.pairs):
        problem = pair_problem(model, cluster, cache_dir=FLAGS.cache_dir)
        sim = Simulator(problem.graph, problem.cluster, problem.op_time)
        kinds = (("random groups", lambda k: RandomPlacer().propose(problem, seed=k)),
                 ("random colocation groups", lambda k: colocation_random(problem, k)))
        for kind, draw in kinds:
            placements = [draw(k) for k in range(runs)]
            for p in placements[:3]:
                sim.run(p)  # warm-up (and the JIT compile in a fresh environment)
            times, cpu, transfers = [], [], []
            for p in placements:
                t0, c0 = time.perf_counter(), time.process_time()
                r = sim.run(p)
                cpu.append(time.process_time() - c0)
                times.append(time.perf_counter() - t0)
                transfers.append(r.num_transfers)
            rows.append((f"{model} : {cluster}", f"{problem.graph.num_ops:,}",
                         f"{int(problem.graph.colocation.max()) + 1:,}",
                         f"{problem.cluster.num_devices}", kind,
                         f"{statistics.median(transfers):,.0f}",
                         f"{1e3 * statistics.median(times):.3f}", f"{1e3 * min(times):.3f}",
                         f"{1e3 * statistics.median(cpu):.3f}"))
    print(f"One simulation of each of {runs} random placements per row, after three warm-up "
          f"runs; load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}.\n")
    header = ("graph : cluster", "ops", "colocation groups", "devices", "placement",
              "transfers (median)", "ms per run, wall (median)", "min", "CPU ms (median)")
    print("| " + " | ".join(header) + " |")
    print("| " + " | ".join(["---"] * 5 + ["---:"] * 4) + " |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main(argv):
    del argv
    if FLAGS.pairs:
        time_zoo_pairs(FLAGS.runs)
        return
    graph, base_time = layered_graph(FLAGS.ops, FLAGS.edges, FLAGS.seed)
    print(f"graph: {graph.num_ops} ops, {len(graph.tensor_op)} tensors, "
          f"{len(graph.edge_dst)} data edges, {len(graph.ctrl_dst)} control edges")
    rng = np.random.default_rng(FLAGS.seed + 1)
    first = True
    for num_devices in (2, 8):
        devices = [Device(f"/device:GPU:{i}", "GPU", 11 * 10**9) for i in range(num_devices)]
        cluster = Cluster.uniform(devices)
        op_time = np.repeat(base_time[:, None], num_devices, axis=1)
        t0 = time.perf_counter()
        sim = Simulator(graph, cluster, op_time)
        build_ms = 1e3 * (time.perf_counter() - t0)
        uniform = [rng.integers(0, num_devices, graph.num_ops) for _ in range(8)]
        blocky = [np.minimum(np.arange(graph.num_ops) * num_devices // graph.num_ops
                             + (rng.random(graph.num_ops) < 0.02), num_devices - 1)
                  for _ in range(8)]
        t0 = time.perf_counter()
        sim.run(uniform[0])
        first_s = time.perf_counter() - t0
        if first:
            print(f"first call (JIT compile, or load from numba's on-disk cache): {first_s:.2f} s")
            first = False
        for _ in range(5):  # warm-up
            sim.run(uniform[0])
        lb = lower_bound(graph, cluster, op_time)
        print(f"\nD={num_devices}: Simulator() {build_ms:.1f} ms; lower bound {lb * 1e3:.2f} ms")
        for kind, placements in (("uniform random", uniform), ("blocky random", blocky)):
            r = sim.run(placements[0])
            cycle = itertools.cycle(placements)
            run_ms = time_ms(lambda: sim.run(next(cycle)), FLAGS.runs)
            ms_ms = time_ms(lambda: sim.makespan(next(cycle)), FLAGS.runs)
            print(f"  {kind} placement: {r.num_transfers} transfers, makespan "
                  f"{r.makespan * 1e3:.2f} ms\n    run() {run_ms} ms/sim; "
                  f"makespan() {ms_ms} ms/sim")


if __name__ == "__main__":
    app.run(main)
