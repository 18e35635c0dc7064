"""Does a heuristic help as a start of ``auto``? Its step with and without the extra starts.

    PYTHONPATH=. python experiments/bench_heuristic_starts.py --starts=m_sct [--graphs=50]

On the random training-like problems of ``experiments/bench_optimality.py`` (the same
generator and seed: 20-60 layers, 2 and 4 GPUs) ``auto`` places each problem with its
defaults and with ``heuristic_starts`` set to ``--starts`` (seed 0 both), and the script prints
per GPU count how many steps changed, how many got faster or slower and by how much at most,
the geometric mean of the ratios and the median placer times (wall times: loaded figures on a
shared machine). A start only changes which local optimum the race ends in unless its basin
is one the other starts miss, so the figure to compare with is the spread of another seed.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
from absl import app, flags

from tf_autoplace.placers import AutoPlacer
from tf_autoplace.testing.problems import training_problem

flags.DEFINE_list("starts", ["m_sct"], "heuristics added to auto's starts")
flags.DEFINE_integer("graphs", 50, "random training-like graphs")
flags.DEFINE_list("gpus", ["2", "4"], "GPU counts each graph is placed on")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    rng = np.random.default_rng(47)  # bench_optimality.random_problems' graphs
    layers = rng.integers(20, 60 + 1, FLAGS.graphs)
    rows = {int(g): [] for g in FLAGS.gpus}
    for seed, n in enumerate(layers.tolist()):
        for gpus in rows:
            problem = training_problem(n, seed, num_gpus=gpus)
            out = []
            for extra in ((), tuple(FLAGS.starts)):
                began = time.perf_counter()
                devices = AutoPlacer(heuristic_starts=extra).propose(problem, seed=0)
                out.append((problem.simulator.run(devices).makespan,
                            time.perf_counter() - began))
            rows[gpus].append(out)
            print(f"train{n}_s{seed}_g{gpus}: {out[0][0] * 1e3:.3f} -> {out[1][0] * 1e3:.3f} ms",
                  flush=True)
    print(f"\n| GPUs | problems | changed | faster | most faster | slower | most slower | "
          f"geometric mean | auto (s) | auto + {'+'.join(FLAGS.starts)} (s) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for gpus, found in rows.items():
        ratio = np.array([b[0] / a[0] for a, b in found])
        faster, slower = ratio < 1 - 1e-12, ratio > 1 + 1e-12
        print(f"| {gpus} | {len(ratio)} | {int((faster | slower).sum())} | {int(faster.sum())} | "
              f"{(1 - ratio.min()) * 100:.2f}% | {int(slower.sum())} | "
              f"{(ratio.max() - 1) * 100:.2f}% | {statistics.geometric_mean(ratio):.4f} | "
              f"{statistics.median(a[1] for a, _ in found):.2f} | "
              f"{statistics.median(b[1] for _, b in found):.2f} |")


if __name__ == "__main__":
    app.run(main)
