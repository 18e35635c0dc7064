"""Stage timings of the placement pipeline on a real training graph (the foundation benchmark).

    python experiments/bench_foundation.py --model=inception_v3 --cluster=k80x2

Prints, for the zoo model's training graph: graph build time (not part of placement), ingestion
(MetaGraphDef -> OpGraph, Grappler shape inference), cost model (Grappler analytical costs),
Merge-and-Colocate grouping, one simulation of the UNGROUPED op graph (median and min over
``--sim_runs`` runs after a warm-up, which also pays numba's compile or cache load), and the
whole ``autoplace`` with the chosen heuristic, end to end, in a fresh graph. Targets from the
project's foundation issue: one simulation <= 10 ms, autoplace <= 30 s.
"""

from __future__ import annotations

import statistics
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "inception_v3", "Model zoo name.")
flags.DEFINE_string("cluster", "k80x2", "Shipped cluster name or cluster spec file.")
flags.DEFINE_string("placer", "m_etf", "Heuristic placer for the end-to-end run.")
flags.DEFINE_integer("sim_runs", 200, "Simulations to time.")
flags.DEFINE_integer("threads", 1, "TensorFlow intra/inter-op threads (1 = one core).")


def main(argv):
    del argv
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
    tf.config.threading.set_inter_op_parallelism_threads(FLAGS.threads)

    import tf_autoplace
    from tf_autoplace import zoo
    from tf_autoplace.core.cluster import resolve_cluster
    from tf_autoplace.cost import AnalyticalCostModel
    from tf_autoplace.graph import ingest
    from tf_autoplace.grouping import GroupingConfig, merge_and_colocate
    from tf_autoplace.placers import get_placer
    from tf_autoplace.sim import Simulator

    cluster = resolve_cluster(FLAGS.cluster)
    t = time.perf_counter()
    model = zoo.build(FLAGS.model)
    build_s = time.perf_counter() - t

    t = time.perf_counter()
    meta_graph = ingest.load_meta_graph(model.graph)
    graph = ingest.to_opgraph(meta_graph)
    ingest_s = time.perf_counter() - t

    t = time.perf_counter()
    op_time = AnalyticalCostModel(meta_graph).op_time(graph, cluster)
    cost_s = time.perf_counter() - t

    t = time.perf_counter()
    grouping = merge_and_colocate(graph, GroupingConfig())
    group_s = time.perf_counter() - t

    from tf_autoplace.placers import PlacementProblem

    problem = PlacementProblem(graph, cluster, op_time, grouping)
    placement = get_placer(FLAGS.placer).propose(problem)
    t = time.perf_counter()
    sim = Simulator(graph, cluster, op_time)
    sim_setup_s = time.perf_counter() - t
    t = time.perf_counter()
    sim.run(placement)  # warm-up: numba compile or cache load
    warmup_s = time.perf_counter() - t
    times = []
    for _ in range(FLAGS.sim_runs):
        t = time.perf_counter()
        sim.run(placement)
        times.append(time.perf_counter() - t)
    rng = np.random.default_rng(0)
    random_placement = rng.integers(0, cluster.num_devices, graph.num_ops).astype(np.int32)
    random_times = []
    for _ in range(FLAGS.sim_runs):
        t = time.perf_counter()
        sim.run(random_placement)
        random_times.append(time.perf_counter() - t)

    fresh = zoo.build(FLAGS.model)
    t = time.perf_counter()
    report = tf_autoplace.autoplace(fresh.graph, cluster=cluster, placer=FLAGS.placer)
    end_to_end_s = time.perf_counter() - t

    ms = lambda xs: f"median {statistics.median(xs) * 1e3:.2f} ms, min {min(xs) * 1e3:.2f} ms"  # noqa: E731
    print(f"model {FLAGS.model}: {graph.num_ops} ops, {len(graph.edge_dst)} data edges, "
          f"{grouping.num_groups} groups; cluster {FLAGS.cluster} ({cluster.num_devices} devices)")
    print(f"  graph build (not placement)    {build_s:8.2f} s")
    print(f"  ingestion                      {ingest_s:8.2f} s")
    print(f"  cost model (Grappler)          {cost_s:8.2f} s")
    print(f"  grouping (Merge-and-Colocate)  {group_s:8.2f} s")
    print(f"  simulator setup                {sim_setup_s * 1e3:8.2f} ms")
    print(f"  first simulation (JIT/cache)   {warmup_s:8.2f} s")
    print(f"  one simulation, {FLAGS.placer} placement: {ms(times)} ({FLAGS.sim_runs} runs)")
    print(f"  one simulation, random placement: {ms(random_times)}")
    print(f"  autoplace end to end ({FLAGS.placer}): {end_to_end_s:.2f} s "
          f"(stages: {', '.join(f'{k} {v:.2f} s' for k, v in report.timings_s.items())})")
    print(f"  predicted step {report.step_time_s * 1e3:.2f} ms, lower bound "
          f"{report.lower_bound_s * 1e3:.2f} ms, single device "
          f"{report.baseline_step_time_s * 1e3:.2f} ms")


if __name__ == "__main__":
    app.run(main)
