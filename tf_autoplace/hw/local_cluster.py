"""A TensorFlow cluster of server processes on this machine: a real distributed runtime to place
graphs on, measure them on and test against, with loopback in place of a network.

::

    from tf_autoplace.hw import local_cluster

    with local_cluster(2) as cluster:            # two tf.distribute.Server processes
        report = tf_autoplace.autoplace(graph, cluster=cluster)
        with tf.compat.v1.Session(cluster.target, graph=graph) as session:
            session.run(init); session.run(train_op)
    # every server process has ended here

:func:`local_cluster` picks ``num_tasks`` free TCP ports on loopback, starts one server process
per task (:mod:`tf_autoplace.hw.server`), waits until each serves, and yields a
:class:`~tf_autoplace.core.cluster.Cluster` of them (:meth:`Cluster.from_tf`) whose ``target``
is the ``grpc://localhost:PORT`` of the first worker, the address a Session connects to.

**Cores.** Each task is pinned to cores of its own where the machine has enough
(``os.sched_setaffinity`` on the cores this process may use, split evenly) and runs as many
inter-op and intra-op threads as it has cores. With more tasks than cores, tasks share cores
round-robin (task k on core k mod C); a warning says so, and the cluster says so too: the
devices of the tasks that share a set of cores form one core group of that many cores
(``Cluster.core_groups``), which the simulator runs together. Each task's devices are
``cpus_per_task`` logical CPU devices, described as :meth:`Cluster.local` describes this
machine's CPU (host memory, clock) with the task's cores; GPUs are hidden from the servers
(``CUDA_VISIBLE_DEVICES=""``). Links between tasks get the ``"host"`` class's default figures
until measured (:mod:`tf_autoplace.hw.cluster_profile`), or those given in ``links``.

**No process left behind.** Leaving the block, normally or by an exception (Ctrl-C's
KeyboardInterrupt and SIGTERM's SystemExit included), closes each server's standard input,
which ends it, then terminates and finally kills what has not ended within a few seconds, and
reaps every process. If this process dies without running that code (SIGKILL), the servers end
anyway: each is killed by the kernel when its parent dies (Linux) and ends when the pipe from
its parent closes (:mod:`tf_autoplace.hw.server`). Close your Sessions inside the block: a
Session whose server is gone waits on it when closed.

TensorFlow's server listens on every interface of the machine at its port, and its gRPC
service has no authentication: on a machine others can reach, keep those ports behind a
firewall.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from typing import Iterator

from absl import logging

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.tasks import JOB_NAME
from tf_autoplace.errors import ConfigError, WorkerError

PS_JOB = "ps"
_PORT_ATTEMPTS = 3  # a port found free may be taken before the server binds it
_STOP_S = 5.0  # seconds a server gets to end after each step of stopping it


@dataclasses.dataclass(frozen=True)
class TaskCores:
    """Where each task runs: ``cores[k]``, the cores task k is pinned to (all this process may
    use when not pinned), and ``shared``, whether some tasks share cores."""

    cores: tuple[tuple[int, ...], ...]
    shared: bool


def task_cores(num_tasks: int, available, *, pin: bool = True) -> TaskCores:
    """Split the ``available`` cores between ``num_tasks`` tasks (module docstring): contiguous
    equal shares when there are enough, else core k mod C for task k; every task gets all of
    them when ``pin`` is False."""
    available = tuple(sorted(available))
    if not available:
        raise ConfigError("no cores to run the servers on")
    if not pin:
        return TaskCores((available,) * num_tasks, shared=num_tasks > 1)
    c = len(available)
    if num_tasks <= c:
        return TaskCores(tuple(available[k * c // num_tasks:(k + 1) * c // num_tasks]
                               for k in range(num_tasks)), shared=False)
    return TaskCores(tuple((available[k % c],) for k in range(num_tasks)), shared=True)


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on loopback now (the system's choice)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@contextlib.contextmanager
def local_cluster(num_tasks: int = 2, *, ps_tasks: int = 0, job: str = "worker",
                  cpus_per_task: int = 1, threads: int | None = None, pin: bool = True,
                  links=None, startup_timeout_s: float = 120.0) -> Iterator[Cluster]:
    """Run a TensorFlow cluster of ``num_tasks`` server processes on this machine for the
    duration of the block (module docstring).

    Args:
      num_tasks: server processes (>= 1).
      ps_tasks: how many of them form the job ``"ps"`` (parameter servers, where
        ``replica_device_setter`` puts variables); the others form ``job``.
      job: the name of the other tasks' job (TensorFlow's rule for job names:
        ``[A-Za-z][A-Za-z0-9_]*``).
      cpus_per_task: logical CPU devices per task (>= 1); more than one gives links inside a
        task.
      threads: inter-op and intra-op threads of each server; None: as many as its cores.
      pin: pin each task to cores of its own where there are enough (module docstring).
      links: link class figures for :meth:`Cluster.from_tf` (default: its defaults).
      startup_timeout_s: how long the servers may take to start (> 0).

    Yields:
      The Cluster of the tasks' devices (tasks ``ps:0..``, then ``<job>:0..``), ``target`` the
      first ``job`` task's ``grpc://localhost:PORT``.

    Raises:
      ConfigError: a bad argument.
      WorkerError: a server did not start (its error and the end of its log in the message).
    """
    for name, value, low in (("num_tasks", num_tasks, 1), ("ps_tasks", ps_tasks, 0),
                             ("cpus_per_task", cpus_per_task, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{name} must be an int >= {low}, got {value!r}")
    if ps_tasks >= num_tasks:
        raise ConfigError(f"ps_tasks={ps_tasks} leaves no {job!r} task of num_tasks={num_tasks}")
    if not isinstance(job, str) or not JOB_NAME.fullmatch(job):
        raise ConfigError(f"job {job!r} is not a job name TensorFlow takes "
                          "([A-Za-z][A-Za-z0-9_]*): its servers would abort on the device names")
    if job == PS_JOB:
        raise ConfigError(f"job must not be {PS_JOB!r}: that job holds the ps_tasks")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ConfigError(f"threads must be None or an int >= 1, got {threads!r}")
    if not (isinstance(startup_timeout_s, (int, float)) and startup_timeout_s > 0):
        raise ConfigError(f"startup_timeout_s must be > 0, got {startup_timeout_s!r}")
    names = [(PS_JOB, i) for i in range(ps_tasks)] + [(job, i)
                                                      for i in range(num_tasks - ps_tasks)]
    available = (os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity")
                 else range(os.cpu_count() or 1))
    placement = task_cores(num_tasks, available, pin=pin)
    if placement.shared:
        logging.warning("local_cluster: %d tasks on %d cores: tasks share cores (%s)", num_tasks,
                        len(tuple(available)), _describe(names, placement))
    with contextlib.ExitStack() as stack:
        logs = stack.enter_context(tempfile.TemporaryDirectory(prefix="tf_autoplace_servers_"))
        for attempt in range(_PORT_ATTEMPTS):
            ports = free_ports(num_tasks)
            spec = {}
            for (job_name, _), port in zip(names, ports):
                spec.setdefault(job_name, []).append(f"localhost:{port}")
            processes = []
            stack.callback(_stop, processes)
            error = _start(processes, spec, names, placement, threads, cpus_per_task, logs,
                           startup_timeout_s)
            if error is None:
                break
            _stop(processes)
            if "already in use" not in error.lower() or attempt == _PORT_ATTEMPTS - 1:
                raise WorkerError(f"local_cluster: {error}")
        yield describe(spec, placement, cpus_per_task=cpus_per_task, links=links)


def _describe(names, placement: TaskCores) -> str:
    return ", ".join(f"{job}:{i} on cores {list(cores)}"
                     for (job, i), cores in zip(names, placement.cores))


def _start(processes: list, spec: dict, names, placement: TaskCores, threads, cpus: int,
           logs: str, timeout_s: float) -> str | None:
    """Start one server per task into ``processes`` and wait until every one serves; None, or
    what went wrong."""
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join(filter(None, [package_root,
                                                        os.environ.get("PYTHONPATH")])))
    for (job, index), cores in zip(names, placement.cores):
        settings = dict(cluster=spec, job=job, index=index, cores=list(cores),
                        threads=threads or len(cores), cpus=cpus, parent=os.getpid())
        log = open(os.path.join(logs, f"{job}_{index}.log"), "wb")
        try:
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "tf_autoplace.hw.server", json.dumps(settings)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env))
        finally:
            log.close()
    deadline = time.monotonic() + timeout_s
    waiting = {p.stdout.fileno(): (p, name) for p, name in zip(processes, names)}
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            return (f"{len(waiting)} server(s) did not start within {timeout_s:g} s "
                    f"({', '.join(f'{j}:{i}' for _, (j, i) in waiting.items())})")
        ready, _, _ = select.select(list(waiting), [], [], left)
        for fd in ready:
            process, (job, index) = waiting.pop(fd)
            line = process.stdout.readline().decode("utf-8", "replace").strip()
            if not line.startswith("ready"):
                tail = _tail(os.path.join(logs, f"{job}_{index}.log"))
                return (f"the server of task {job}:{index} did not start: "
                        f"{line or 'it exited'}{tail}")
    return None


def _tail(path: str, lines: int = 5) -> str:
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    return ("; its log ends: " + " | ".join(text[-lines:])) if text else ""


def _stop(processes: list) -> None:
    """End every process of ``processes``: close its pipe, then terminate, then kill, and reap
    each (module docstring). Safe to call twice."""
    for process in processes:
        with contextlib.suppress(OSError, ValueError):
            process.stdin.close()
    for step in ("wait", "terminate", "kill"):
        alive = [p for p in processes if p.poll() is None]
        if not alive:
            break
        if step != "wait":
            for process in alive:
                with contextlib.suppress(OSError):
                    getattr(process, step)()
        deadline = time.monotonic() + _STOP_S
        for process in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        with contextlib.suppress(OSError, ValueError):
            process.stdout.close()
        if process.poll() is None:  # a process SIGKILL did not end within the wait
            process.wait()


def describe(spec: dict, placement: TaskCores, *, cpus_per_task: int = 1,
             links=None) -> Cluster:
    """The Cluster of local servers: :meth:`Cluster.from_tf` of ``spec`` (job -> addresses, its
    tasks in the order of ``placement.cores``) with each task's ``cpus_per_task`` logical CPUs
    described as this machine's (:meth:`Cluster.local`) on the task's cores, and one core group
    per set of cores the tasks run on (module docstring).

    Args:
      spec: the TensorFlow cluster the servers were started with.
      placement: the cores of each task, jobs in ``spec``'s order, tasks by index.
      cpus_per_task: logical CPU devices per task.
      links: link class figures for :meth:`Cluster.from_tf`.

    Returns:
      The Cluster, its target the first task of the job ``chief``, ``master`` or ``worker``.
    """
    names = [f"{job}:{index}" for job, addresses in spec.items()
             for index in range(len(addresses))]
    if len(names) != len(placement.cores):
        raise ConfigError(f"{len(placement.cores)} tasks' cores for the {len(names)} tasks of "
                          f"{spec}")
    cluster = Cluster.from_tf(spec, devices=Cluster.local(num_logical_cpus=cpus_per_task),
                              links=links)
    by_task = dict(zip(names, placement.cores))
    groups: dict[tuple[int, ...], str] = {}
    for cores in placement.cores:
        groups.setdefault(cores, f"cores {','.join(map(str, cores))}")
    devices = []
    for i, device in enumerate(cluster.devices):
        cores = by_task[cluster.task_of(i).name]
        devices.append(dataclasses.replace(device, num_cores=len(cores),
                                           core_group=groups[cores]))
    return dataclasses.replace(cluster, devices=tuple(devices),
                               core_groups=tuple((name, len(cores))
                                                 for cores, name in groups.items()))
