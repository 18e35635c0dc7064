"""Samples per second of the rollout evaluator against the number of workers, on Ray and on the
local process pool, with the time of each stage.

    PYTHONPATH=. python experiments/bench_ray.py --pair=nmt4:k80x4 --workers=1,2 --batch=16 \
        --batches=20 [--ray_address=local] [--cache_dir=DIR]

The pair's problem is built at paper size (``experiments/bench_sim.py --pairs`` builds it the same
way and shares ``--cache_dir``). A batch is ``--batch`` random placements (each group on a
uniformly random allowed device, a different draw per placement), the work a learned placer
that samples whole placements hands to :class:`tf_autoplace.learning.rollouts.Evaluator`. For each
backend and worker count it prints:

- start: the seconds to start the pool (Ray: the actors, which receive the problem through the
  object store and build their simulator; processes: the spawn pool, which gets it pickled);
- first: the first batch (each worker loads the simulator's compiled kernel);
- samples/s: placements scored per second over the next ``--batches`` batches;
- the stages of a batch: the slowest worker's time simulating its chunk (timed in the
  worker; its CPU time beside it shows how much of it the worker waited for a core), and the
  rest of the batch's wall time: sending the placements, scheduling, collecting results.

"in this process" is the same measurement without workers (the chunk is the whole batch).

``--ray_address=local`` (default) starts a Ray of this machine with as many CPUs as the most
workers asked for; ``auto`` or ``HOST:PORT`` uses a running cluster. Timings on a shared
machine are noisy: the load average is printed with them.
"""

from __future__ import annotations

import os
import time

import numpy as np
from absl import app, flags

flags.DEFINE_string("pair", "nmt4:k80x4", "zoo model:cluster pair (tf-autoplace benchmark names)")
flags.DEFINE_list("workers", ["1", "2"], "worker counts to measure")
flags.DEFINE_integer("batch", 16, "placements per batch")
flags.DEFINE_integer("batches", 20, "timed batches per setting")
flags.DEFINE_string("ray_address", "local", "'local' (a Ray of this machine), 'auto', HOST:PORT")
flags.DEFINE_bool("processes", True, "also measure the local process pool")
flags.DEFINE_string("cache_dir", None, "keep the built problem here (as experiments/bench_sim.py)")
FLAGS = flags.FLAGS


def random_batch(problem, batch: int, first_seed: int) -> np.ndarray:
    from tf_autoplace.heuristics import RandomPlacer

    return np.stack([RandomPlacer().propose(problem, seed=first_seed + k) for k in range(batch)])


def _setup(problem):
    problem.simulator  # noqa: B018  (built once per worker, as the Evaluator's workers do)
    return problem


def _timed_chunk(problem, placements):
    """A worker's chunk, with the worker's own wall and CPU seconds for it."""
    from tf_autoplace.learning.rollouts import evaluate_batch

    t0, c0 = time.perf_counter(), time.process_time()
    rows = evaluate_batch(problem, placements, 2.0)
    return rows, time.perf_counter() - t0, time.process_time() - c0


def measure(problem, workers: int, ray_address: str | None, batches: list[np.ndarray]) -> str:
    """Score the batches as the Evaluator does (one contiguous chunk per worker), on a pool
    whose tasks also report their own time (module docstring)."""
    from tf_autoplace.learning.workers import worker_pool

    t0 = time.perf_counter()
    with worker_pool(_setup, (problem,), workers=workers, ray_address=ray_address) as pool:
        start_s = time.perf_counter() - t0
        first_s = wall = slowest = cpu = 0.0
        for k, batch in enumerate(batches):
            t0 = time.perf_counter()
            out = pool.map(_timed_chunk, [c for c in np.array_split(batch, workers) if len(c)])
            seconds = time.perf_counter() - t0
            if k == 0:
                first_s = seconds
                continue
            wall += seconds
            slowest += max(w for _, w, _ in out)
            cpu += max(c for _, _, c in out)
    n = len(batches) - 1
    placements = sum(len(b) for b in batches[1:])
    return (f"start {start_s:.1f} s, first batch {first_s:.2f} s, "
            f"{placements / wall:.1f} samples/s; per batch {wall / n * 1e3:.0f} ms = slowest "
            f"worker simulating {slowest / n * 1e3:.0f} ms (CPU {cpu / n * 1e3:.0f} ms) + "
            f"transport and scheduling {(wall - slowest) / n * 1e3:.0f} ms")


def main(argv):
    del argv
    from tf_autoplace.learning.workers import connect
    from tf_autoplace.zoo.benchmark import pair_problem, parse_pairs

    [(model, cluster)] = parse_pairs([FLAGS.pair])
    problem = pair_problem(model, cluster, cache_dir=FLAGS.cache_dir)
    counts = [int(w) for w in FLAGS.workers]
    batches = [random_batch(problem, FLAGS.batch, k * FLAGS.batch)
               for k in range(FLAGS.batches + 1)]
    print(f"{FLAGS.pair}: {problem.graph.num_ops} ops, {problem.grouping.num_groups} groups; "
          f"batches of {FLAGS.batch} random placements")
    print(f"in this process: {measure(problem, 1, None, batches)}")
    if FLAGS.ray_address:
        t0 = time.perf_counter()
        if FLAGS.ray_address == "local":
            import ray

            ray.init(num_cpus=max(counts), logging_level="error", log_to_driver=False)
        connect(FLAGS.ray_address)
        print(f"ray: connected in {time.perf_counter() - t0:.1f} s")
    for workers in counts:
        if FLAGS.ray_address:
            print(f"ray, {workers} worker(s): "
                  f"{measure(problem, workers, FLAGS.ray_address, batches)}")
        if FLAGS.processes and workers > 1:
            print(f"processes, {workers} workers: {measure(problem, workers, None, batches)}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    app.run(main)
