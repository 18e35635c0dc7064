"""Compile the package's numba kernels into the user's kernel cache (tests/conftest.py runs
this once per session, in a process of its own, while the test workers start): otherwise, in a
new environment, every worker and every child process that reaches a kernel before its cache
entry exists compiles it again. It places no TensorFlow graph: it exercises the kernels on
small random problems (the default placer's search and starts, every heuristic, the bounds)."""

import numpy as np

from tf_autoplace.errors import AutoplaceError
from tf_autoplace.heuristics import HEURISTICS
from tf_autoplace.placers import AutoPlacer
from tf_autoplace.sim.bounds import heads_and_tails, lower_bound, transfer_path_bound
from tf_autoplace.testing.problems import random_problem


def main() -> None:
    for host in (True, False):
        problem = random_problem(120, seed=0, num_gpus=2, host=host)
        AutoPlacer(max_samples=200).place(problem, seed=0)
        for heuristic in HEURISTICS.values():
            try:
                heuristic().place(problem)
            except AutoplaceError:  # one that does not apply here (cpu_only without a host)
                pass
        for bound in (lower_bound, transfer_path_bound, heads_and_tails):
            bound(problem.graph, problem.cluster, problem.op_time)
        problem.simulator.run(np.zeros(problem.graph.num_ops, np.int32))


if __name__ == "__main__":
    main()
