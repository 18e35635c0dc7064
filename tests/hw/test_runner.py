"""The runner's warm-up and rounds, on stand-in Sessions whose steps report set durations (no
TensorFlow, no clock): how many steps each placement runs, and which are timed."""

import ast
import pathlib

import numpy as np
import pytest

from tf_autoplace.errors import ConfigError
from tf_autoplace.hw import runner
from tf_autoplace.hw.runner import RunConfig, time_rounds, warm_up


class FakeSession:
    """A placed Session whose every step takes ``step_s`` and is logged."""

    def __init__(self, name, step_s, log):
        self.name, self.step_s, self.log = name, step_s, log

    def step(self):
        self.log.append(self.name)
        return self.step_s


def test_each_placement_warms_up_for_the_configured_steps():
    log = []
    sessions = [FakeSession("a", 0.001, log), FakeSession("b", 0.002, log)]
    warm_up(sessions, RunConfig(warmup_steps=runner.WARMUP_STEPS))
    assert log.count("a") == log.count("b") == runner.WARMUP_STEPS


def test_a_slow_placement_stops_warming_up_after_warmup_s_past_its_setup_steps():
    log = []
    sessions = [FakeSession("fast", 0.001, log), FakeSession("slow", 0.5, log)]
    warm_up(sessions, RunConfig(warmup_steps=80, warmup_s=2.0), np.random.default_rng(0))
    # The setup steps always run; then 0.5 s steps until 2 s are spent: four more.
    assert log.count("slow") == runner.SETUP_STEPS + 4
    assert log.count("fast") == 80


def test_warm_up_runs_in_shuffled_rounds():
    log = []
    sessions = [FakeSession(k, 0.001, log) for k in range(4)]
    warm_up(sessions, RunConfig(warmup_steps=5), np.random.default_rng(1))
    rounds = [log[i:i + 4] for i in range(0, len(log), 4)]
    assert all(sorted(r) == [0, 1, 2, 3] for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1


def test_every_timed_step_follows_its_own_rewarm_step():
    log = []
    sessions = [FakeSession(k, 0.001 * (k + 1), log) for k in range(3)]
    config = RunConfig(steps=6, warmup_steps=2, rewarm_steps=1)
    wall, cpu = time_rounds(sessions, config, np.random.default_rng(0))
    assert wall.shape == cpu.shape == (3, 6)
    np.testing.assert_allclose(wall, np.array([[0.001], [0.002], [0.003]]).repeat(6, axis=1))
    timed = log[2 * 3:]
    pairs = [timed[i:i + 2] for i in range(0, len(timed), 2)]
    assert len(pairs) == 18 and all(p[0] == p[1] for p in pairs)


def test_before_timing_runs_once_between_the_warm_up_and_the_first_timed_round():
    log = []
    sessions = [FakeSession(k, 0.001, log) for k in range(3)]
    config = RunConfig(steps=4, warmup_steps=5, rewarm_steps=1)
    time_rounds(sessions, config, np.random.default_rng(0),
                before_timing=lambda: log.append("settle") or 0.0)
    assert log.count("settle") == 1
    assert log.index("settle") == 3 * 5  # after every warm-up step, before any timed one
    assert len(log) == 3 * 5 + 1 + 3 * 4 * 2


def test_after_a_pause_untimed_rounds_run_for_a_second_before_timing(monkeypatch):
    clock = {"now": 0.0}
    monkeypatch.setattr(runner.time, "perf_counter", lambda: clock["now"])

    class Ticking(FakeSession):
        def step(self):
            clock["now"] += self.step_s
            return super().step()

    log = []
    sessions = [Ticking(k, 0.05, log) for k in range(2)]
    config = RunConfig(steps=3, warmup_steps=0, rewarm_steps=1)
    time_rounds(sessions, config, np.random.default_rng(0), before_timing=lambda: 30.0)
    # Rounds of 2 x 0.05 s until 1 s has passed: 10 rounds, then 3 timed rounds of 2 steps.
    assert len(log) == 2 * 10 + 2 * 3 * 2
    assert log.count(0) == log.count(1)


def test_no_rewarm_step_when_configured_off():
    log = []
    sessions = [FakeSession(k, 0.001, log) for k in range(3)]
    time_rounds(sessions, RunConfig(steps=4, warmup_steps=0, rewarm_steps=0),
                np.random.default_rng(0))
    assert len(log) == 12


@pytest.mark.parametrize("field, value", [("warmup_s", 0), ("warmup_s", -1.0),
                                          ("warmup_s", True), ("rewarm_steps", -1)])
def test_bad_warm_up_settings_are_config_errors(field, value):
    with pytest.raises(ConfigError, match=field):
        RunConfig(**{field: value})


@pytest.mark.parametrize("path", ["tf_autoplace/cli/profile_flags.py",
                                  "tf_autoplace/cli/fidelity_flags.py",
                                  "experiments/bench_tf_cluster.py"])
def test_the_commands_warm_up_as_the_runner_does(path):
    # Flag modules do not import TensorFlow, so they cannot import the runner's constant; each
    # command's --warmup_steps default must still be it. Read from the source: the commands
    # define flags of one name in the one absl registry and cannot be imported together.
    tree = ast.parse((pathlib.Path(__file__).parents[2] / path).read_text())
    defaults = [call.args[1].value for call in ast.walk(tree)
                if isinstance(call, ast.Call) and getattr(call.func, "attr", "") ==
                "DEFINE_integer" and call.args[0].value == "warmup_steps"]
    assert defaults == [runner.WARMUP_STEPS]


def test_nothing_is_released_on_a_cluster_while_one_of_its_tasks_is_down():
    # A Session on a cluster with a task down waits for the task without end: when a ps task
    # died in the middle of a verification, releasing the measured variables hung the process
    # (Ctrl-C too). The cleanup must return at once instead.
    import socket
    import threading

    import tensorflow as tf

    from tf_autoplace.core.cluster import Cluster

    graph = tf.Graph()
    with graph.as_default():
        tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[2], shared_name="w", container="c")
    with socket.socket() as alive, socket.socket() as dead:
        alive.bind(("127.0.0.1", 0))
        alive.listen()  # accepts connections, answers no RPC: a Session there never starts
        dead.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        addresses = [f"127.0.0.1:{s.getsockname()[1]}" for s in (alive, dead)]
        cluster = Cluster.from_tf({"worker": addresses})
        config = runner.on_cluster(cluster)
        assert config.target == f"grpc://{addresses[0]}" and config.servers == tuple(addresses)
        done = threading.Event()
        threading.Thread(target=lambda: (runner.release_container(
            graph.as_graph_def(), "c", config), done.set()), daemon=True).start()
        assert done.wait(60)
    with pytest.raises(ConfigError, match="servers must be a tuple"):
        RunConfig(servers=["127.0.0.1:1"])


def test_a_session_on_a_cluster_with_a_task_down_is_closed_without_waiting():
    # Closing a Session on a cluster whose task has died blocks in TensorFlow's C++ until the
    # task is back (found when a ps task died mid-verify; Ctrl-C could not end it).
    import socket
    import threading
    import time

    release = threading.Event()
    closed = []

    class _Blocking:
        def close(self):
            closed.append(threading.current_thread())
            release.wait(60)

    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))  # bound, not listening
        placed = object.__new__(runner.PlacedSession)
        placed.session = _Blocking()
        placed.config = RunConfig(target=f"grpc://127.0.0.1:{dead.getsockname()[1]}",
                                  servers=(f"127.0.0.1:{dead.getsockname()[1]}",))
        placed._close_session()  # returns at once
        assert not release.is_set()
    release.set()
    for _ in range(200):  # the closing thread has started, or soon will
        if closed:
            break
        time.sleep(0.01)
    assert closed and closed[0] is not threading.main_thread() and closed[0].daemon


def test_a_step_whose_master_died_is_a_measurement_error_not_a_wait(monkeypatch):
    # TensorFlow reports a worker that dies during a step, but a step whose master (the
    # target) died waited for the 10-minute operation timeout, and a ThreadPoolExecutor's
    # thread blocked there would have held the process at exit too.
    import socket
    import threading

    from tf_autoplace.errors import MeasurementError

    monkeypatch.setattr(runner, "SERVER_CHECK_S", 0.0)  # check at the first poll
    release = threading.Event()
    ran_on = []

    def blocked_step():
        ran_on.append(threading.current_thread())
        release.wait(30)

    class _Session:
        def close(self):
            pass

    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))  # bound, not listening: the master that died
        address = f"127.0.0.1:{dead.getsockname()[1]}"
        placed = object.__new__(runner.PlacedSession)
        placed.session, placed._worker = _Session(), None
        placed.config = RunConfig(target=f"grpc://{address}", servers=(address,))
        try:
            with pytest.raises(MeasurementError, match=f"a step on the TensorFlow cluster at "
                               f"grpc://{address} stopped: cannot reach the TensorFlow server"):
                placed._run_interruptibly(blocked_step)
        finally:
            release.set()
    assert placed._worker is None  # the blocked thread is left; a new one serves what follows
    assert ran_on[0] is not threading.main_thread() and ran_on[0].daemon


def test_a_session_is_not_opened_on_a_cluster_whose_task_died_since_the_last(monkeypatch):
    # A task that died after the start-up check (between verify's profile and its measured
    # Sessions) made the next Session wait in list_devices without end, deaf to Ctrl-C: each
    # new Session now checks the servers first.
    import socket

    import tensorflow as tf

    from tf_autoplace.errors import MeasurementError
    from tf_autoplace.hw.workload import Workload

    graph = tf.Graph()
    with graph.as_default():
        tf.identity(tf.constant(1.0), name="train")
    workload = Workload.from_graph(graph, fetches=["train"])

    def opened(*args, **kwargs):
        raise AssertionError("a Session was opened on a cluster with a task down")

    monkeypatch.setattr(runner, "open_session", opened)
    with socket.socket() as alive, socket.socket() as dead:
        alive.bind(("127.0.0.1", 0))
        alive.listen()

        def answer():  # as a gRPC server does: its HTTP/2 SETTINGS frame
            conn, _ = alive.accept()
            with conn:
                conn.sendall(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
                conn.recv(64)

        import threading

        threading.Thread(target=answer, daemon=True).start()
        dead.bind(("127.0.0.1", 0))  # bound, not listening: the task that died
        addresses = tuple(f"127.0.0.1:{s.getsockname()[1]}" for s in (alive, dead))
        config = RunConfig(target=f"grpc://{addresses[0]}", servers=addresses)
        device = "/job:worker/replica:0/task:0/device:CPU:0"
        with pytest.raises(MeasurementError, match=f"cannot reach .*{addresses[1]}"):
            runner.PlacedSession(workload, {"Const": device, "train": device}, config)
