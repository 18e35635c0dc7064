"""The shared evaluator of placement batches: the same figures in-process and in a pool."""

import numpy as np
import pytest

from tf_autoplace.errors import ConfigError
from tf_autoplace.learning.rollouts import Evaluator
from tf_autoplace.sim import memory_penalized_runtime
from tf_autoplace.testing.problems import GB, random_problem


def _placements(problem, count, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, problem.cluster.num_devices, size=(count, problem.graph.num_ops))


def test_scores_are_the_simulators_memory_penalised_runtime():
    problem = random_problem(120, seed=3, gpu_memory=GB // 1000)
    batch = _placements(problem, 6, seed=0)
    with Evaluator(problem, memory_penalty=2.0) as evaluator:
        got = evaluator.evaluate(batch)
        assert evaluator.samples == 6
    for b, devices in enumerate(batch):
        sim = problem.simulator.run(devices)
        assert got.makespan[b] == sim.makespan
        assert got.scores[b] == memory_penalized_runtime(sim, problem.cluster, 2.0)
        over = (sim.peak_memory - problem.cluster.memory).max() / 1e9
        assert got.overflow_gb[b] == pytest.approx(max(over, 0.0))
        assert got.fits[b] == (over <= 0)
    assert not got.fits.all()  # the tiny GPUs overflow somewhere: the penalty is exercised


@pytest.mark.slow
def test_a_process_pool_gives_the_same_figures_in_the_same_order():
    problem = random_problem(150, seed=4)
    batch = _placements(problem, 7, seed=1)
    with Evaluator(problem) as local, Evaluator(problem, workers=2) as pool:
        a, b = local.evaluate(batch), pool.evaluate(batch)
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.overflow_gb, b.overflow_gb)


def test_threads_give_the_same_figures_in_the_same_order():
    problem = random_problem(150, seed=5)
    batch = _placements(problem, 7, seed=2)
    with Evaluator(problem) as one, Evaluator(problem, threads=3) as three:
        a, b = one.evaluate(batch), three.evaluate(batch)
        assert three.threads == 3 and three.samples == 7
        single = three.evaluate(batch[:1])  # one row: no thread needed
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.overflow_gb, b.overflow_gb)
    assert single.scores[0] == a.scores[0]


def test_bad_arguments_are_config_errors():
    problem = random_problem(20, seed=0)
    with pytest.raises(ConfigError, match="workers"):
        Evaluator(problem, workers=0)
    with pytest.raises(ConfigError, match="memory_penalty"):
        Evaluator(problem, memory_penalty=-1)
    for threads in (0, 1.5, True):
        with pytest.raises(ConfigError, match="threads"):
            Evaluator(problem, threads=threads)
    with pytest.raises(ConfigError, match=r"shape \[B, 20\]"):
        Evaluator(problem).evaluate(np.zeros((2, 19), int))
