"""Local TensorFlow server processes as a cluster (loopback only): placed training graphs run on
them with the unplaced loss (through autoplace, measure_steps and the --autoplace hook with a
MonitoredTrainingSession whose master is a server), profiling them, and no server process left
behind: after the block, after an exception in it, after the parent is killed, and after
serve-local ends."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format

import tf_autoplace
from tf_autoplace import flags as autoplace_flags
from tf_autoplace.core.cluster import Cluster
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph import ingest
from tf_autoplace.hw import link_fit, local_cluster
from tf_autoplace.hw.cluster_profile import profile_cluster, served_devices
from tf_autoplace.hw.local_cluster import describe, task_cores
from tf_autoplace.hw.runner import RunConfig
from tf_autoplace.hw.workload import Workload
from tf_autoplace.outputs.timeline import chrome_trace
from tf_autoplace.testing.graphs import run_training_steps, small_cnn

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc to find the server processes")
SERVER = b"tf_autoplace.hw.server"
HANG_GUARD_S = 180  # only against a hang: the servers normally start in seconds


def _servers(parent: int | None = None) -> list[int]:
    """Live (not zombie) server processes, the children of ``parent`` (default: any)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
        except OSError:
            continue
        state, ppid = fields[0], int(fields[1])
        if SERVER in command and state != b"Z" and (parent is None or ppid == parent):
            out.append(int(entry))
    return out


def _alive(pids) -> list[int]:
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] != b"Z":
                    alive.append(pid)
        except OSError:
            pass
    return alive


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(2, ps_tasks=1) as tf_cluster:
        yield tf_cluster


def test_the_cluster_has_a_ps_and_a_worker_task_with_a_target(cluster):
    assert [t.name for t in cluster.tasks] == ["ps:0", "worker:0"]
    assert cluster.names == ("/job:ps/replica:0/task:0/device:CPU:0",
                             "/job:worker/replica:0/task:0/device:CPU:0")
    assert cluster.target == f"grpc://{cluster.tasks[1].address}"
    assert cluster.link_class(0, 1) == "host"
    assert len(_servers(os.getpid())) == 2
    if len(os.sched_getaffinity(0)) >= 2:  # each pinned to a core of its own
        assert len(cluster.core_groups) == 2 and all(c == 1 for _, c in cluster.core_groups)


@pytest.mark.parametrize("placer", ["replica_device_setter", "random"])
def test_a_training_graph_placed_across_the_servers_runs_with_the_unplaced_loss(cluster,
                                                                                 placer):
    unplaced, _ = run_training_steps(small_cnn(), steps=3, num_cpus=1)
    tg = small_cnn()
    tf_autoplace.autoplace(tg.graph, cluster=cluster, placer=placer, progress=False)
    losses, devices = run_training_steps(tg, steps=3, target=cluster.target)
    np.testing.assert_allclose(losses, unplaced, rtol=1e-5)
    assert {tf.DeviceSpec.from_string(d).job for d in devices if d} == {"ps", "worker"}


@pytest.mark.slow
def test_verify_measures_the_candidates_on_the_servers(cluster):
    tg = small_cnn()
    report = tf_autoplace.autoplace(tg.graph.as_graph_def(), cluster=cluster, placer="metis",
                                    progress=False, verify=15)
    verification = report.verification
    names = [c.name for c in verification.candidates]
    assert "single device" in names and len(names) >= 2
    assert verification.decision.applied in names
    for name in names:
        times = verification.measured[name]
        assert np.isfinite(times.median_s) and times.median_s > 0
    assert set(report.assignment.values()) <= set(cluster.names)
    # The op times the search ranked the candidates by were profiled on the servers, not in
    # this client process, and the notes say where the candidates ran.
    assert any(n.startswith(f"op times were profiled on the servers at {cluster.target}")
               for n in report.notes), report.notes
    assert any(n.startswith(f"verified on the TensorFlow cluster at {cluster.target}: applied")
               for n in report.notes)


def test_autoplace_measures_on_the_servers_and_the_trace_names_the_tasks(cluster):
    tg = small_cnn()
    report = tf_autoplace.autoplace(tg.graph.as_graph_def(), cluster=cluster,
                                    placer="replica_device_setter", progress=False,
                                    measure_steps=15)
    assert np.isfinite(report.measured_step_time_s) and report.measured_step_time_s > 0
    trace = chrome_trace(report.timeline.graph, report.timeline.cluster,
                         report.timeline.placement, report.timeline.sim,
                         report.timeline.measured)["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in trace if e["name"] == "process_name"}
    assert processes[0] == cluster.names[0] and processes[1] == cluster.names[1]
    labels = {e["pid"]: e["args"]["labels"] for e in trace if e["name"] == "process_labels"}
    assert labels == {0: "task ps:0", 1: "task worker:0"}
    measured = {name for name in processes.values() if name.startswith("measured")}
    assert any("/job:ps/" in name for name in measured)
    assert any("/job:worker/" in name for name in measured)
    transfers = [e["name"] for e in trace if e.get("cat") == "Transfer"]
    assert transfers and all(name.endswith(("-> ps:0/CPU:0", "-> worker:0/CPU:0"))
                             for name in transfers)


def test_the_autoplace_flag_places_for_a_monitored_session_on_a_server(cluster, tmp_path):
    spec = tmp_path / "cluster.pbtxt"
    spec.write_text(text_format.MessageToString(cluster.to_proto()))
    unplaced, _ = run_training_steps(small_cnn(), steps=2, num_cpus=1)
    tg = small_cnn()
    autoplace_flags.install(autoplace_flags.AutoplaceSettings(
        placer="replica_device_setter", cluster=str(spec), cache=False, progress=False))
    try:
        losses = []
        with tg.graph.as_default():
            config = tf.compat.v1.ConfigProto(allow_soft_placement=False)
            with tf.compat.v1.train.MonitoredTrainingSession(
                    master=cluster.target, config=config, save_checkpoint_secs=None,
                    save_summaries_steps=None, log_step_count_steps=None) as session:
                for _ in range(2):
                    loss, _ = session.run([tg.loss, tg.train_op], tg.feed)
                    losses.append(float(loss))
    finally:
        autoplace_flags.uninstall()
    report = autoplace_flags.report_for(tg.graph)
    assert report is not None and report.placer == "replica_device_setter"
    np.testing.assert_allclose(losses, unplaced, rtol=1e-5)
    jobs = {tf.DeviceSpec.from_string(op.device).job for op in tg.graph.get_operations()}
    assert jobs == {"ps", "worker"}


def test_a_spec_with_devices_the_servers_lack_says_the_servers_decide(cluster):
    """A Session on servers gets its devices from them: the advice for a local Session
    (device_count) does nothing there."""
    spec = {}
    for task in cluster.tasks:
        spec.setdefault(task.job, []).append(task.address)
    wider = Cluster.from_tf(spec, devices="cpu2")  # the servers have one CPU each
    config = tf.compat.v1.ConfigProto(allow_soft_placement=False)
    with tf.compat.v1.Session(cluster.target, graph=tf.Graph(), config=config) as session:
        with pytest.raises(tf_autoplace.ConfigError, match="the servers decide their devices"):
            autoplace_flags._check_session_devices(session, wider, "wider.pbtxt")


@pytest.mark.slow
def test_profiling_the_servers_gives_links_over_grpc_and_op_costs_per_task(cluster):
    tg = small_cnn(batch=2)
    workload = Workload(graph_def=tg.graph.as_graph_def(), fetches=(tg.train_op,),
                        init=(tg.init_op,), feeds=tg.feed)
    quick = RunConfig(steps=3, warmup_steps=1, grappler=False)
    found = profile_cluster(cluster, workload, link_config=quick, sizes=(1 << 10, 1 << 16),
                            hops=4, op_config=RunConfig(steps=1, warmup_steps=1, trace_steps=2))
    assert set(found.link_fits) == {(0, 1)} and set(found.class_fits) == {"host"}
    fit = found.link_fits[(0, 1)]
    assert found.cluster.bandwidth[0, 1] == found.cluster.bandwidth[1, 0] == fit.bandwidth_bps
    assert found.reference == "worker:0" and set(found.task_seconds) == {"ps:0", "worker:0"}
    speeds = [d.speed for d in found.cluster.devices]
    assert speeds[1] == 1.0 and speeds[0] == pytest.approx(
        found.task_seconds["worker:0"] / found.task_seconds["ps:0"])
    profiled = {op.name for op in found.profile.op}
    assert {op.name for op in tg.graph.get_operations()} == profiled
    assert "task ps:0" in found.profile.description
    with pytest.raises(ConfigError, match="TensorFlow cluster"):
        profile_cluster(tf_autoplace.Cluster.local(), workload)

    # The link between the tasks, fitted on the graph's own split placements run on them.
    fitted, fit = link_fit.fit_latency(
        found.cluster, found.profile, ingest.load_meta_graph(tg.graph), workload,
        reference=link_fit.reference_device(found), pairs=link_fit.task_pairs(found.cluster),
        what="between tasks", config=RunConfig(warmup_steps=3), task_speeds=True)
    assert link_fit.reference_device(found) == 1  # worker:0's CPU: the profile's task
    light = [fit.light[0]] if fit.light is not None else []
    assert [p.name for p in fit.measured.placements] == [link_fit.SINGLE, *fit.labels, *light,
                                                         "on ps:0"]
    assert fitted.prediction_error == fit.prediction_error >= fit.median_error(fit.predicted_s)
    ((task, _, speed),) = fit.task_speeds  # ps:0's, measured beside worker:0 in the rounds
    assert task == "ps:0" and fitted.devices[0].speed == speed > 0
    assert fitted.devices[1].speed == found.cluster.devices[1].speed
    assert fit.labels and all(t > 0 for t in fit.transfers)
    assert fit.latency_s in link_fit.LATENCIES_S
    assert fitted.latency[0, 1] == fitted.latency[1, 0] == fit.latency_s
    np.testing.assert_array_equal(fitted.bandwidth, found.cluster.bandwidth)


def test_a_stopped_server_is_an_error_at_once_not_a_wait_without_end(cluster):
    # A server that accepts connections but does not answer (SIGSTOP, hung): the TCP check
    # passed, then list_devices waited without end, holding the interpreter (Ctrl-C and
    # SIGTERM did not get through).
    from tf_autoplace.errors import MeasurementError
    from tf_autoplace.hw.runner import check_reachable, connection_error

    addresses = [task.address for task in cluster.tasks]
    assert all(connection_error(a, HANG_GUARD_S) is None for a in addresses)
    servers = _servers(os.getpid())  # this module's cluster's
    assert len(servers) == 2
    for pid in servers:
        os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(MeasurementError, match="accepts connections but does not answer"):
            check_reachable(addresses, timeout_s=2.0)
    finally:
        for pid in servers:
            os.kill(pid, signal.SIGCONT)
    assert all(connection_error(a, HANG_GUARD_S) is None for a in addresses)


def test_what_is_not_a_tensorflow_server_is_named_as_such():
    import socket
    import threading

    from tf_autoplace.hw.runner import connection_error

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def answer():
        conn, _ = listener.accept()
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    with listener:
        error = connection_error(f"127.0.0.1:{listener.getsockname()[1]}", HANG_GUARD_S)
    assert "not a TensorFlow (gRPC) server" in str(error)


def test_the_servers_say_which_devices_each_task_has(cluster):
    spec = {}
    for task in cluster.tasks:
        spec.setdefault(task.job, []).append(task.address)
    served = served_devices(spec)
    assert set(served) == {"ps:0", "worker:0"}
    assert all(c.names == ("/device:CPU:0",) for c in served.values())
    # The host's memory, not the fixed 256 MiB TensorFlow lists for every CPU device (which
    # refused a 400 MB embedding the servers train).
    host = Cluster.local().memory[0]
    host_cores = dict(Cluster.local().core_groups)["host"]
    assert all(c.memory.tolist() == [host] for c in served.values()) and host > 2**28
    again = Cluster.from_tf(spec, devices=served)
    assert again.names == cluster.names and again.target == cluster.target
    # Two servers of this host share its cores (each was given all of them: a split over
    # them was predicted faster and ran 2.6x slower).
    assert dict(again.core_groups) == {"tasks on loopback/host": host_cores}
    assert {d.core_group for d in again.devices} == {"tasks on loopback/host"}


@pytest.mark.slow
def test_every_server_ends_after_the_block_and_after_an_exception_in_it():
    before = set(_servers(os.getpid()))  # the module's cluster
    with local_cluster(1) as one:
        pids = set(_servers(os.getpid())) - before
        assert len(pids) == 1 and one.target
    assert not _alive(pids)
    with pytest.raises(RuntimeError, match="inside"):
        with local_cluster(1):
            pids = set(_servers(os.getpid())) - before
            assert len(pids) == 1
            raise RuntimeError("inside the block")
    assert not _alive(pids)


# Two tasks, the client's task in this process: a Python callback exists only in the client's.
TWO_TASKS = """
import json, os, subprocess, sys
import numpy as np
import tensorflow as tf
import tf_autoplace
from tf_autoplace.hw.cluster_profile import profile_cluster
from tf_autoplace.hw.local_cluster import free_ports
from tf_autoplace.hw.runner import RunConfig
from tf_autoplace.hw.workload import Workload

spec = {"worker": [f"localhost:{port}" for port in free_ports(2)]}
other = subprocess.Popen(
    [sys.executable, "-m", "tf_autoplace.hw.server", json.dumps(
        {"cluster": spec, "job": "worker", "index": 1, "threads": 1, "cpus": 1,
         "parent": os.getpid()})], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
assert other.stdout.readline().startswith(b"ready")
server = tf.distribute.Server(spec, job_name="worker", task_index=0)  # the client's task
tf.compat.v1.disable_eager_execution()
v1 = tf.compat.v1
cluster = tf_autoplace.Cluster.from_tf(spec, target=server.target)
"""
PROFILE_PYTHON_OPS = TWO_TASKS + """
graph = tf.Graph()
with graph.as_default():
    x = v1.py_func(lambda a: a * 2, [tf.ones((2, 4))], tf.float32, name="double")
    x.set_shape((2, 4))
    loss = tf.reduce_mean(tf.matmul(x, v1.get_variable("w", (4, 1))), name="loss")
    train = v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    init = v1.global_variables_initializer()
workload = Workload(graph_def=graph.as_graph_def(), fetches=(train.name,), init=(init.name,))
found = profile_cluster(cluster, workload, links=False,
                        op_config=RunConfig(steps=1, warmup_steps=1, trace_steps=1))
print(json.dumps({"reference": found.reference,
                  "timed": sorted(op.name for op in found.profile.op if not op.did_not_run),
                  "speeds": [d.speed for d in found.cluster.devices]}))
"""


def _profile_in_a_client(tmp_path, code: str):
    """Run ``code`` (a client script over :data:`TWO_TASKS`) in a process of its own and
    return the JSON it prints last."""
    script = tmp_path / "client.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=REPO), timeout=HANG_GUARD_S * 3)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


@pytest.mark.slow
def test_a_cluster_profile_runs_ops_that_call_python_in_the_clients_process(tmp_path):
    # Each task's turn ran every op there, py_funcs too, which TensorFlow can run only in the
    # client's process: task 1's turn failed with "Could not find callback".
    found = _profile_in_a_client(tmp_path, PROFILE_PYTHON_OPS)
    assert found["reference"] == "worker:0" and "double" in found["timed"]
    assert all(speed > 0 for speed in found["speeds"])


PROFILE_PYTHON_PIPELINES = TWO_TASKS + """
def generate():
    for i in range(1000):
        yield np.full((4,), i, np.float32)

def pipeline(kind):
    if kind == "from_generator":
        return tf.data.Dataset.from_generator(
            generate, output_signature=tf.TensorSpec((4,), tf.float32)).batch(2)
    return tf.data.Dataset.from_tensors(tf.ones((2, 4))).repeat().map(
        lambda t: tf.py_function(lambda a: a * 2, [t], tf.float32))

out = {}
for kind in ("from_generator", "map_py_function"):
    graph = tf.Graph()
    with graph.as_default():
        x = v1.data.make_one_shot_iterator(pipeline(kind)).get_next()
        x.set_shape((2, 4))
        loss = tf.reduce_mean(tf.matmul(x, v1.get_variable("w", (4, 1))), name="loss")
        train = v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = v1.global_variables_initializer()
    workload = Workload(graph_def=graph.as_graph_def(), fetches=(train.name,),
                        init=(init.name,))
    try:
        found = profile_cluster(cluster, workload, links=False,
                                op_config=RunConfig(steps=1, warmup_steps=1, trace_steps=1))
    except Exception as e:  # each pipeline's failure told apart
        out[kind] = {"error": f"{type(e).__name__}: ...{str(e)[-300:]}"}
        continue
    out[kind] = {"reference": found.reference,
                 "timed": sorted(op.name for op in found.profile.op if not op.did_not_run),
                 "speeds": [d.speed for d in found.cluster.devices]}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_cluster_profile_runs_input_pipelines_that_call_python_in_the_clients_process(
        tmp_path):
    # The iterator of a pipeline from a generator (or mapped with a py_function) stayed on the
    # client's task, but not its IteratorGetNext, which runs the pipeline's functions where it
    # is: task 1's turn failed with "Could not find callback ... [[IteratorGetNext]]".
    found = _profile_in_a_client(tmp_path, PROFILE_PYTHON_PIPELINES)
    assert sorted(found) == ["from_generator", "map_py_function"]
    assert {kind: p["error"] for kind, p in found.items() if "error" in p} == {}
    for kind, profiled in found.items():
        assert profiled["reference"] == "worker:0", kind
        assert "IteratorGetNext" in profiled["timed"], (kind, profiled)
        assert all(speed > 0 for speed in profiled["speeds"]), kind


@pytest.mark.slow
def test_every_server_ends_when_its_parent_is_killed(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text("import time\nfrom tf_autoplace.hw import local_cluster\n"
                      "with local_cluster(2):\n    print('serving', flush=True)\n"
                      "    time.sleep(3600)\n")
    # A killed parent cannot remove its servers' log directory: keep it in this test's.
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, cwd=REPO,
                              env=dict(os.environ, PYTHONPATH=REPO, TMPDIR=str(tmp_path)))
    try:
        assert parent.stdout.readline().strip() == b"serving"
        pids = _servers(parent.pid)
        assert len(pids) == 2
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
    for _ in range(HANG_GUARD_S * 10):
        if not _alive(pids):
            break
        time.sleep(0.1)
    assert not _alive(pids)


@pytest.mark.slow  # seconds: starts the command and its servers in processes of their own
def test_serve_local_writes_the_spec_serves_and_ends_everything_on_sigterm(tmp_path):
    spec = tmp_path / "cluster.pbtxt"
    command = subprocess.Popen(
        [sys.executable, "-m", "tf_autoplace.cli", "serve-local", "--tasks=2",
         f"--out_cluster={spec}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        line = command.stdout.readline().decode()
        assert line.startswith("serving worker:0, worker:1 at grpc://localhost:"), line
        cluster = Cluster.from_file(spec)
        pids = _servers(command.pid)
        assert len(pids) == 2 and len(cluster.tasks) == 2 and cluster.target in line
        graph = tf.Graph()
        with graph.as_default():
            with tf.device(cluster.names[0]):
                a = tf.ones([4, 4])
            with tf.device(cluster.names[1]):
                b = tf.reduce_sum(tf.matmul(a, a))
        with tf.compat.v1.Session(cluster.target, graph=graph) as session:
            assert session.run(b) == 64.0
    finally:
        command.send_signal(signal.SIGTERM)
        out, _ = command.communicate(timeout=HANG_GUARD_S)
    assert command.returncode == 128 + signal.SIGTERM
    assert not spec.exists()
    assert not _alive(pids)


@pytest.mark.slow
def test_serve_local_ends_when_a_server_of_its_own_stops(tmp_path):
    """A server killed while serve-local serves (out of memory, by hand): the command ends
    with an error naming the task, removes the spec and ends the other servers, rather than
    serving a spec with a dead task in it."""
    spec = tmp_path / "cluster.pbtxt"
    command = subprocess.Popen(
        [sys.executable, "-m", "tf_autoplace.cli", "serve-local", "--tasks=2",
         f"--out_cluster={spec}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    try:
        assert command.stdout.readline().startswith(b"serving worker:0, worker:1")
        pids = _servers(command.pid)
        assert len(pids) == 2
        os.kill(pids[0], signal.SIGKILL)
        _, err = command.communicate(timeout=HANG_GUARD_S)
    finally:
        if command.poll() is None:
            command.kill()
            command.communicate()
    assert command.returncode == 1, err
    errors = [line for line in err.decode().splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "the server of task worker:" in errors[0], err
    assert "has stopped" in errors[0] and str(spec) in errors[0], err
    assert not spec.exists()
    assert not _alive(pids)


def test_serve_local_takes_no_file_but_the_spec_of_a_serve_local_that_has_ended(tmp_path):
    """serve-local removes its spec when it ends: a user's file at --out_cluster would be
    replaced, then removed; a live serve-local's spec would be taken from under it."""
    from tf_autoplace.cli import spec_file  # (the command's module would define its flags)

    mine = tmp_path / "cluster.pbtxt"
    mine.write_text("# my own cluster\n")
    with pytest.raises(ConfigError, match="exists and is not a spec serve-local wrote"):
        spec_file.check_free(str(mine))
    ended = subprocess.Popen(["true"])
    ended.wait()
    for pid, refused in ((ended.pid, False), (os.getpid(), True)):
        mine.write_text(spec_file._HEADER_FORMAT.format(tasks=2, pid=pid) + "task {}\n")
        if refused:
            with pytest.raises(ConfigError, match=f"still runs \\(pid {pid}\\)"):
                spec_file.check_free(str(mine))
        else:
            spec_file.check_free(str(mine))
    spec_file.check_free(str(tmp_path / "new.pbtxt"))
    # At the end only this run's spec is removed, not a file put there since.
    spec_file.remove_if_ours(str(mine), b"another spec")
    assert mine.exists()
    spec_file.remove_if_ours(str(mine), mine.read_bytes())
    assert not mine.exists()
    spec_file.remove_if_ours(str(mine), b"gone already")


@pytest.mark.parametrize("tasks,cores,expected,shared", [
    (2, [0, 1], [(0,), (1,)], False),
    (2, [0, 1, 2, 3], [(0, 1), (2, 3)], False),
    (4, [0, 1], [(0,), (1,), (0,), (1,)], True),
    (1, [3], [(3,)], False),
])
def test_tasks_get_cores_of_their_own_where_there_are_enough(tasks, cores, expected, shared):
    placement = task_cores(tasks, cores)
    assert placement.cores == tuple(expected) and placement.shared == shared
    assert task_cores(2, cores, pin=False).cores == (tuple(cores),) * 2


@pytest.mark.parametrize("kwargs,message", [
    (dict(num_tasks=0), "num_tasks must be an int >= 1"),
    (dict(num_tasks=2, ps_tasks=2), "leaves no 'worker' task"),
    (dict(num_tasks=2, job="ps"), "job must not be 'ps'"),
    (dict(num_tasks=1, job="trainer/a"), "'trainer/a' is not a job name TensorFlow takes"),
    (dict(num_tasks=1, job="Bad-Job"), "'Bad-Job' is not a job name TensorFlow takes"),
    (dict(num_tasks=1, threads=0), "threads must be None or an int >= 1"),
])
def test_bad_arguments_are_config_errors_before_any_process_starts(kwargs, message):
    before = set(_servers(os.getpid()))
    with pytest.raises(ConfigError, match=message):
        with local_cluster(**kwargs):
            pass
    assert set(_servers(os.getpid())) == before


def test_tasks_on_shared_cores_form_one_core_group_of_those_cores():
    spec = {"ps": ["localhost:1"], "worker": ["localhost:2", "localhost:3", "localhost:4"]}
    shared = describe(spec, task_cores(4, [0, 1]), cpus_per_task=2)
    assert dict(shared.core_groups) == {"cores 0": 1, "cores 1": 1}
    groups = {}
    for i, device in enumerate(shared.devices):
        groups.setdefault(device.core_group, set()).add(shared.task_of(i).name)
        assert device.num_cores == 1
    assert groups == {"cores 0": {"ps:0", "worker:1"}, "cores 1": {"worker:0", "worker:2"}}
    own = describe(spec, task_cores(4, range(8)))
    assert dict(own.core_groups) == {f"cores {2 * k},{2 * k + 1}": 2 for k in range(4)}
    assert [d.num_cores for d in own.devices] == [2] * 4
    assert own.target == "grpc://localhost:2"


@pytest.mark.slow
def test_more_tasks_than_cores_start_and_share_cores():
    available = sorted(os.sched_getaffinity(0))
    with local_cluster(len(available) + 1, startup_timeout_s=HANG_GUARD_S) as shared:
        sizes = {}
        for i, device in enumerate(shared.devices):
            sizes.setdefault(device.core_group, set()).add(shared.task_of(i).name)
        assert max(len(tasks) for tasks in sizes.values()) == 2  # task 0 and task C
        assert dict(shared.core_groups) == {f"cores {c}": 1 for c in available}


@pytest.mark.slow
def test_profile_command_profiles_the_servers_serve_local_runs(tmp_path):
    spec, profile, measured = (tmp_path / name for name in ("c.pbtxt", "p.pbtxt", "m.pbtxt"))
    server = subprocess.Popen(
        [sys.executable, "-m", "tf_autoplace.cli", "serve-local", "--tasks=2", "--ps_tasks=1",
         "--profile_links", f"--out_cluster={spec}"], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        assert server.stdout.readline().startswith(b"links of class host: ")
        assert server.stdout.readline().startswith(b"serving ps:0, worker:0")
        done = subprocess.run(
            [sys.executable, "-m", "tf_autoplace.cli", "profile", f"--cluster={spec}",
             "--model=rnnlm", "--knob=layers=1", "--knob=length=2", "--knob=batch=2",
             "--knob=hidden=8", "--knob=embedding_dim=8", "--knob=vocab=20",
             "--warmup_steps=1", "--trace_steps=2", f"--out_profile={profile}",
             f"--out_cluster={measured}"], capture_output=True, text=True, cwd=REPO,
            timeout=HANG_GUARD_S * 3)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "links of class host" in done.stdout
        assert "links between tasks fitted on the graph" in done.stdout
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=HANG_GUARD_S)
    cluster = Cluster.from_file(measured)
    assert [t.name for t in cluster.tasks] == ["ps:0", "worker:0"] and cluster.target
    assert cluster.devices[1].speed == 1.0 and cluster.devices[0].speed > 0
    text = profile.read_text()
    assert "op times of task worker:0" in text and "compute_time_us" in text


def test_a_tf_data_graph_is_measured_on_the_servers_and_nothing_measured_stays_there(cluster):
    # A one-shot iterator takes only letters, digits, '.', '-' and '/' in its container name
    # (the measured sessions' container had '_'); the measured copies of the variables are
    # destroyed on the servers when their session closes.
    graph = tf.Graph()
    with graph.as_default():
        xs = np.random.default_rng(0).normal(size=(64, 8)).astype(np.float32)
        x = tf.compat.v1.data.make_one_shot_iterator(
            tf.data.Dataset.from_tensor_slices(xs).repeat().batch(8)).get_next()
        w = tf.compat.v1.get_variable("w", [8, 1], use_resource=True)
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train_op")
    report = tf_autoplace.autoplace(graph, cluster=cluster, placer="random", progress=False,
                                    measure_steps=15, cache=False)
    assert np.isfinite(report.measured_step_time_s)
    from tf_autoplace.hw import runner

    used = next(runner._CONTAINERS) - 1  # noqa: SLF001 - the measured sessions' last one
    check = tf.Graph()
    with check.as_default():
        alive = []
        for k in (used - 1, used):  # the placement's and the single device's sessions
            for device in cluster.names:
                with tf.device(device):
                    handle = tf.raw_ops.VarHandleOp(
                        dtype=tf.float32, shape=[8, 1], shared_name="w",
                        container=f"tf-autoplace-{os.getpid()}-{k}")
                    alive.append(tf.raw_ops.VarIsInitializedOp(resource=handle))
    with tf.compat.v1.Session(cluster.target, graph=check) as session:
        assert not any(session.run(alive))


def test_measuring_on_a_cluster_whose_server_is_down_is_an_error_at_once():
    # Nothing listens at the cluster's one server: a Session there would wait ten minutes
    # (the RPC deadline) in list_devices before failing.
    import socket

    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        free = [a.getsockname()[1], b.getsockname()[1]]
    cluster = Cluster.from_tf({"worker": [f"127.0.0.1:{port}" for port in free]})
    assert cluster.target == f"grpc://127.0.0.1:{free[0]}"
    tg = small_cnn()
    before = {op.name: op.device for op in tg.graph.get_operations()}
    for kwargs in ({"verify": 15}, {"measure_steps": 15}):
        with pytest.raises(tf_autoplace.AutoplaceError, match=f"cannot reach .*:{free[0]}"):
            tf_autoplace.autoplace(tg.graph, cluster=cluster, placer="random", progress=False,
                                   **kwargs)
    assert {op.name: op.device for op in tg.graph.get_operations()} == before
    # Profiling its servers too (tf-autoplace profile --cluster=...), and asking them for
    # their devices (which waited the whole timeout for a DeadlineExceededError).
    with pytest.raises(tf_autoplace.AutoplaceError, match=f"cannot reach .*:{free[0]}"):
        profile_cluster(cluster, links=True)
    with pytest.raises(tf_autoplace.AutoplaceError, match=f"cannot reach .*:{free[0]}"):
        served_devices({"worker": [f"127.0.0.1:{port}" for port in free]}, timeout_s=20)
