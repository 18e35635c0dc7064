"""Worker pools (tf_autoplace.learning.workers): the Ray backend gives what the local pool gives, for
the same seed, and survives a worker that is killed mid-search.

The Ray tests run on a local Ray of two CPUs (``ray.init(num_cpus=2)``, once for the module) and
are skipped where Ray is not installed (``pip install '.[ray]'``). Starting Ray and its workers
takes seconds, so the default suite keeps one local search and one Post search on Ray (the
first with a killed worker) and the check of the cluster's size; the default placer and
REINFORCE on Ray are marked slow.
"""

import os
import signal
import sys

import numpy as np
import pytest

from tf_autoplace.errors import ConfigError, WorkerError
from tf_autoplace.heuristics import BestHeuristicPlacer
from tf_autoplace.learning.rollouts import Evaluator
from tf_autoplace.learning.workers import InProcessPool, check_ray_address, worker_pool
from tf_autoplace.placers import AutoPlacer, PostPlacer, get_placer
from tf_autoplace.placers.auto.local_search import LocalSearch, LocalSearchConfig
from tf_autoplace.placers.auto.placer import AutoConfig
from tf_autoplace.testing.problems import random_problem


def _square_plus(context, task):
    return context + task * task


# ----------------------------------------------------------------------- without Ray

@pytest.mark.parametrize("address", ["auto", "local", "HOST:1", "10.0.0.1:6379",
                                     "ray://head:10001", "http://127.0.0.1:8265", "[::1]:6379"])
def test_ray_addresses_of_every_form_ray_takes_are_accepted(address):
    check_ray_address(address)


@pytest.mark.parametrize("address", ["not-an-address", "", " auto", "head:", "head:port", 6379])
def test_malformed_ray_addresses_are_config_errors_before_connecting(address):
    with pytest.raises(ConfigError, match="ray_address must be None, 'auto'"):
        check_ray_address(address)


UNGUARDED_SCRIPT = """
import numpy as np
from tf_autoplace.errors import WorkerError
from tf_autoplace.learning.rollouts import Evaluator
from tf_autoplace.testing.problems import random_problem

# Work at the top of the script, with no `if __name__ == "__main__":` guard, on a problem
# larger than a pipe holds (the parent wrote it into each worker's start-up pipe).
problem = random_problem(2000, seed=0)  # 700 KB pickled: far more than a pipe holds
try:
    with Evaluator(problem, workers=2) as evaluator:
        evaluator.evaluate(np.zeros((4, problem.graph.num_ops), np.int32))
    print("evaluated")
except WorkerError as e:
    print("WorkerError:", e)
"""


@pytest.mark.slow  # seconds: spawns worker processes that import TensorFlow
def test_a_script_without_a_main_guard_gets_a_worker_error_not_a_hang(tmp_path, repo_root):
    # spawn runs the main script again in each worker, which fails there; the parent was left
    # writing the problem into the dead worker's start-up pipe, forever.
    import subprocess

    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(repo_root), os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=120)
    assert "WorkerError:" in done.stdout and 'if __name__ == "__main__":' in done.stdout, (
        done.stdout, done.stderr[-2000:])


def _interrupted(context, task):
    os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends every process of the group
    return context + task


@pytest.mark.slow
def test_process_workers_leave_ctrl_c_to_the_parent():
    with worker_pool(int, (10,), workers=2) as pool:
        assert pool.map(_interrupted, [1, 2, 3]) == [11, 12, 13]
        assert pool.map(_square_plus, [2]) == [14]  # the workers are still there


def test_in_process_pool_runs_tasks_in_order_on_one_context():
    with worker_pool(lambda a, b: a + b, (1, 2)) as pool:
        assert isinstance(pool, InProcessPool) and pool.size == 1
        assert pool.map(_square_plus, [3, 1, 2]) == [12, 4, 7]
        assert list(pool.imap(_square_plus, [])) == []


@pytest.mark.parametrize("address", ["", 5, b"auto"])
def test_a_bad_ray_address_is_a_config_error_that_repeats_it(address):
    with pytest.raises(ConfigError, match="ray_address"):
        worker_pool(_square_plus, (0,), ray_address=address)
    with pytest.raises(ConfigError, match="ray_address"):
        AutoConfig(ray_address=address)


def test_ray_address_goes_only_to_placers_that_simulate_on_workers():
    placer = get_placer("auto", ray_address="auto")  # nothing connects before place()
    assert isinstance(placer, AutoPlacer) and placer.config.ray_address == "auto"
    assert get_placer("placeto", ray_address="HOST:1").config.ray_address == "HOST:1"
    assert get_placer("post", ray_address="HOST:1").config.ray_address == "HOST:1"
    assert get_placer("hdp", ray_address="HOST:1").config.ray_address == "HOST:1"
    with pytest.raises(ConfigError, match=r"'m_etf' runs no simulations.*"
                                          r"\['auto', 'hdp', 'placeto', 'post'\]"):
        get_placer("m_etf", ray_address="auto")


def test_local_starts_a_ray_of_its_own_and_a_dead_address_fails_in_seconds(monkeypatch):
    # "local" called ray.init(address=None), which joins a Ray running on the machine (or the
    # one RAY_ADDRESS names); an address nothing listens at was retried for about 12 minutes.
    import socket
    import types

    from tf_autoplace.learning import workers

    calls = []
    fake = types.SimpleNamespace(is_initialized=lambda: False,
                                 init=lambda **kw: calls.append(kw["address"]))
    monkeypatch.setattr(workers, "_import_ray", lambda: fake)
    workers.connect("local")
    assert calls == ["local"]
    with socket.socket() as s:  # a port nothing listens at once it is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConfigError, match=f"cannot connect to Ray at ray_address='127.0.0.1:"
                                          f"{port}': nothing accepts a connection there"):
        workers.connect(f"127.0.0.1:{port}")
    assert calls == ["local"]  # Ray was not asked


def test_without_ray_installed_a_ray_address_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'tf_autoplace\[ray\]'"):
        Evaluator(random_problem(20, seed=0), workers=2, ray_address="auto")


# -------------------------------------------------------------------------- on Ray
@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=2, logging_level="error", log_to_driver=False)
    yield ray
    ray.shutdown()


def _search(problem, evaluator, legs, kill=None):
    """A local search run in legs (sample counts), ``kill(evaluator)`` called between them."""
    start = BestHeuristicPlacer().propose(problem)
    search = LocalSearch(problem, start, LocalSearchConfig(sweep_below=0), seed=3,
                         evaluator=evaluator)
    for k, until in enumerate(legs):
        if k and kill is not None:
            kill(evaluator)
        search.run(until)
    return search


@pytest.mark.slow
def test_ray_search_matches_the_local_one_and_survives_a_killed_worker(local_ray):
    problem = random_problem(250, seed=6, num_gpus=2)
    with Evaluator(problem) as here:
        expected = _search(problem, here, [60, 160])
    killed = []

    def kill(evaluator):
        pids = evaluator.pool.pids()
        os.kill(pids[0], signal.SIGKILL)  # the worker process dies between two batches
        killed.append(pids)

    with Evaluator(problem, workers=2, ray_address="auto") as remote:
        assert remote.pool.backend == "ray" and remote.workers == 2
        got = _search(problem, remote, [60, 160], kill=kill)
        after = remote.pool.pids()
    assert got.samples == expected.samples == 160
    np.testing.assert_array_equal(got.current, expected.current)
    assert got.curve == expected.curve and len(got.curve) > 1  # it searched and gained
    assert after[0] != killed[0][0] and after[1] == killed[0][1]  # replaced; the other kept


@pytest.mark.slow
def test_the_default_placer_places_the_same_on_ray_as_in_process(local_ray):
    problem = random_problem(300, seed=2, num_gpus=2, max_groups=300)
    local = AutoPlacer(max_samples=150, budget_s=3600)  # samples, not the time cap, end it
    remote = AutoPlacer(max_samples=150, budget_s=3600, ray_address="auto")
    here, there = local.place(problem, seed=4), remote.place(problem, seed=4)
    np.testing.assert_array_equal(here.devices, there.devices)
    assert remote.stats["curve"] == local.stats["curve"]
    assert remote.stats["searches"] == local.stats["searches"]
    assert len(local.stats["curve"]) > 1  # the search gained: the curves say something


def test_post_places_the_same_on_ray_as_in_process(local_ray):
    problem = random_problem(80, seed=1, max_groups=20)
    runs = []
    for workers, ray_address in ((1, None), (2, "auto")):  # this process; two Ray actors
        # The sample budget ends both searches; the time cap, which a loaded machine could
        # reach first (Ray's start counts in it), must not.
        placer = PostPlacer(max_samples=120, budget_s=3600, workers=workers,
                            ray_address=ray_address, heuristics=())
        runs.append((placer.place(problem, seed=0).devices.tolist(), placer.stats["curve"]))
    assert runs[0] == runs[1] and len(runs[0][1]) > 1


def test_a_ray_worker_that_cannot_set_up_is_a_worker_error(local_ray):
    # Ray's own ActorDiedError came out of the pool (a machine of the cluster with another
    # tf_autoplace, or without an extra, fails to build the workers' context).
    # (A setup that fails wherever it runs: int() of text; the actors import only what the
    # pool pickles, so the test module's own functions would fail for another reason.)
    with pytest.raises(WorkerError, match=r"could not set up its work \(.*invalid literal for "
                                          r"int.*same tf_autoplace version"):
        worker_pool(int, ("not a number",), workers=1, ray_address="auto")


def test_more_workers_than_the_ray_cluster_has_cpus_is_a_config_error(local_ray):
    with pytest.raises(ConfigError, match=r"workers=3 Ray actors need one CPU each.*2 CPUs"):
        Evaluator(random_problem(20, seed=0), workers=3, ray_address="auto")


@pytest.mark.slow
def test_reinforce_gives_the_same_training_curve_on_ray_as_on_local_processes(local_ray):
    # Two workers, each on its own graph, for four updates: a TensorFlow policy in every
    # worker (seconds to start), so this is marked slow.
    from tf_autoplace.placers.placeto import reinforce
    from tf_autoplace.placers.placeto.env import EnvConfig, PlacementEnv
    from tf_autoplace.placers.placeto.policy import PlacetoPolicy

    problems = [random_problem(40, seed=s, num_gpus=2, max_groups=16, host=False)
                for s in (1, 2)]
    env_config = EnvConfig(max_groups=16)
    features = PlacementEnv(problems[0], env_config).num_features
    config = reinforce.TrainConfig(iterations=4, workers=2, episodes=2, seed=7)
    runs = []
    for ray_address in (None, "auto"):
        policy = PlacetoPolicy(2, features, seed=3)
        state = reinforce.train(policy, problems, env_config, config, ray_address=ray_address)
        runs.append((state.curve, policy.get_weights()))
    (local_curve, local_weights), (ray_curve, ray_weights) = runs
    assert ray_curve == local_curve and len(local_curve) == 4 * 2 * 2
    for a, b in zip(local_weights, ray_weights):
        np.testing.assert_array_equal(a, b)
