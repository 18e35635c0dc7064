"""Where rollout work runs: in this process, in local ``spawn`` processes, or on Ray actors.

Every learned placer and pretraining tool farms work out the same way: each worker is built
once from the same arguments (a problem, or a policy architecture and its problems) into a
*context*, and then runs many small tasks on it (simulate a chunk of placements, roll out a
policy's episodes and return their gradient, search one training graph). A
:class:`WorkerPool` is that pattern, with three backends behind :func:`worker_pool`:

* ``workers=1`` and no Ray address: :class:`InProcessPool`, the context built in this
  process and the tasks run one after another;
* ``workers > 1`` and no Ray address: :class:`ProcessPool`, ``spawn`` processes (TensorFlow
  does not survive a fork), each building its context once in the pool's initializer;
* a Ray address (``"auto"``, ``"HOST:PORT"``, ``"ray://HOST:PORT"``, or ``"local"`` for a
  fresh single-machine Ray): :class:`RayPool`, ``workers`` Ray actors on the cluster. The
  build arguments are put in Ray's object store once (``ray.put``) and every actor builds its
  context from that one object, so a problem travels to each node once, not with each task.
  Actors are created with ``max_restarts=-1`` and ``max_task_retries=-1``: an actor whose
  process dies (a killed worker, a lost node) is started again by Ray, rebuilds its context
  from the object store, and the tasks it had are run again, so the work finishes.

:meth:`WorkerPool.map` returns results in task order whatever worker ran what. The callers
put every seed in the task itself and keep no worker state between tasks beyond the context,
so a result depends on the tasks alone: the same seed gives the same result with every backend
and any number of workers (the callers' tests check it).

If Ray is already initialised in this process (``ray.init`` was called, e.g. by a test with
``ray.init(num_cpus=2)``), a :class:`RayPool` uses that connection whatever its address;
otherwise it calls ``ray.init(address=...)`` and leaves the connection open for the next pool
(Ray disconnects when the process exits). Each actor asks Ray for one CPU; a pool that asks for
more workers than the cluster has CPUs is refused with a :class:`ConfigError` (the actors would
wait forever), and one whose actors do not start within ``start_timeout_s`` is closed with a
:class:`WorkerError` that says so.
"""

from __future__ import annotations

import abc
import concurrent.futures
import multiprocessing
import os
import re
import signal
import socket
from typing import Any, Callable, Iterator, Sequence

from tf_autoplace.core.settings import check_int
from tf_autoplace.errors import ConfigError, WorkerError

RAY_INSTALL = "pip install 'tf_autoplace[ray]'"


class WorkerPool(abc.ABC):
    """``size`` workers, each holding the context ``setup(*args)``; see the module doc.

    Use as a context manager (or call :meth:`close`) so that workers end with the work."""

    size: int = 1
    backend: str = ""

    @abc.abstractmethod
    def imap(self, fn: Callable[[Any, Any], Any], tasks: Sequence) -> Iterator:
        """``fn(context, task)`` for each task, spread over the workers, yielded in task order
        as soon as each is done (and those before it). ``fn`` must be a module-level function
        (it is pickled by reference)."""

    def map(self, fn: Callable[[Any, Any], Any], tasks: Sequence) -> list:
        """``[fn(context, task) for task in tasks]``, spread over the workers."""
        return list(self.imap(fn, tasks))

    def close(self) -> None:
        """End the workers (idempotent)."""

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class InProcessPool(WorkerPool):
    """One worker: this process. The context is built when the pool is."""

    backend = "in-process"

    def __init__(self, setup: Callable, args: tuple):
        self.context = setup(*args)

    def imap(self, fn, tasks):
        return (fn(self.context, task) for task in tasks)


_CONTEXT: Any = None  # the context of a ProcessPool worker process


def _init_process(builds) -> None:
    global _CONTEXT
    # Ctrl-C at a terminal signals the whole process group: the parent stops the pool; a
    # worker that took it too would die printing a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    setup, args = builds.get()
    _CONTEXT = setup(*args)


def _run_in_process(item):
    fn, task = item
    return fn(_CONTEXT, task)


class ProcessPool(WorkerPool):
    """``workers`` local ``spawn`` processes; ``setup(*args)`` runs once in each.

    The build arguments (a problem: megabytes) reach each process through a queue its
    initializer reads, not with the process itself: multiprocessing writes a new process's
    start-up data to a pipe the parent keeps open until the write is done, so a process that
    dies before reading all of it (the usual way: spawn runs the main script again in each
    process, and a script that places a graph without an ``if __name__ == "__main__":`` guard
    fails there) left the parent blocked on that write forever. With small start-up data the
    pool sees the process die and the map fails with a :class:`WorkerError` saying why."""

    backend = "processes"

    def __init__(self, setup: Callable, args: tuple, workers: int):
        self.size = workers
        context = multiprocessing.get_context("spawn")
        self._builds = context.Queue()
        for _ in range(workers):
            self._builds.put((setup, args))
        self._pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=_init_process,
            initargs=(self._builds,))

    def imap(self, fn, tasks):
        results = self._pool.map(_run_in_process, [(fn, task) for task in tasks])

        def checked():
            try:
                yield from results
            except concurrent.futures.process.BrokenProcessPool as e:
                raise WorkerError(
                    f"a worker process ended before its work was done ({e}); a worker that "
                    "dies as it starts usually ran the main script again (local worker "
                    "processes are started with multiprocessing's spawn): put the script's "
                    "work under `if __name__ == \"__main__\":`, or use workers=1 (threads)"
                    ) from e
        return checked()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)  # an interrupt leaves queued tasks
            self._pool = None
            self._builds.close()
            self._builds.cancel_join_thread()  # builds no worker took: not worth waiting on


class _RayWorker:
    """The body of one Ray actor: builds the context from the object store, runs tasks.

    Ray resolves the arguments' reference before the constructor runs, also when it restarts
    the actor; the pool holds the reference, so the object stays in the store meanwhile (Ray
    logs a reminder of that when the actors are created)."""

    def __init__(self, setup: Callable, args: tuple):
        self.context = setup(*args)

    def pid(self) -> int:
        """The actor's process id (a test kills it to check that Ray replaces it)."""
        return os.getpid()

    def run(self, fn, task):
        return fn(self.context, task)


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError(f"a Ray address was given but Ray is not installed: {RAY_INSTALL}"
                          ) from None
    return ray


def connect(address: str):
    """The ``ray`` module, connected: the running connection if this process has one, else
    ``ray.init(address=address)``. ConfigError when Ray is missing or the address fails.

    ``"local"`` starts a Ray of this process's own, even where a Ray cluster runs on the
    machine or ``RAY_ADDRESS`` names one (``ray.init(address=None)`` would join it). A
    ``HOST:PORT`` is first checked to accept a connection within seconds: ``ray.init``
    retries an address nothing listens at for about twelve minutes, deaf to SIGTERM."""
    check_ray_address(address)
    ray = _import_ray()
    if not ray.is_initialized():
        if address not in ("auto", "local") and "://" not in address:
            _check_listening(address)
        try:
            ray.init(address=address, logging_level="warning", log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise ConfigError(f"cannot connect to Ray at ray_address={address!r}: {e}") from e
    return ray


RAY_CONNECT_TIMEOUT_S = 5.0


def _check_listening(address: str) -> None:
    """ConfigError unless something accepts a TCP connection at ``address`` (HOST:PORT, a Ray
    head's GCS) within :data:`RAY_CONNECT_TIMEOUT_S`."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)),
                                      timeout=RAY_CONNECT_TIMEOUT_S):
            pass
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot connect to Ray at ray_address={address!r}: nothing accepts "
                          f"a connection there within {RAY_CONNECT_TIMEOUT_S:g} s ({e}); "
                          "start the head (ray start --head) or give its address") from None


def cluster_cpus(address: str) -> int:
    """CPUs of the Ray cluster at ``address`` (connecting to it, see :func:`connect`)."""
    return int(connect(address).cluster_resources().get("CPU", 0))


class RayPool(WorkerPool):
    """``workers`` Ray actors (see the module doc). ``actors`` are their handles."""

    backend = "ray"

    def __init__(self, setup: Callable, args: tuple, workers: int, address: str, *,
                 start_timeout_s: float = 300.0):
        ray = connect(address)
        self._ray = ray
        cpus = ray.cluster_resources().get("CPU", 0)
        if workers > cpus:
            raise ConfigError(f"workers={workers} Ray actors need one CPU each, but the Ray "
                              f"cluster at {address!r} has {cpus:g} CPUs")
        self.size = workers
        self._args = ray.put(args)  # once: every actor (and every restart) reads this object
        actor = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=-1)(_RayWorker)
        self.actors = [actor.remote(setup, self._args) for _ in range(workers)]
        ready, _ = ray.wait([a.pid.remote() for a in self.actors], num_returns=workers,
                            timeout=start_timeout_s)
        if len(ready) < workers:
            self.close()
            raise WorkerError(f"{workers - len(ready)} of {workers} Ray workers did not start "
                              f"within {start_timeout_s:g} s on the cluster at {address!r}")
        try:
            ray.get(ready)  # a context that failed to build raises here
        except ray.exceptions.RayError as e:  # the actor died in its constructor
            self.close()
            first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise WorkerError(f"a Ray worker on the cluster at {address!r} could not set up "
                              f"its work ({first}); every machine of the cluster needs the "
                              "same tf_autoplace version and extras as this one") from e

    def pids(self) -> list[int]:
        """The process id of each actor now."""
        return self._ray.get([a.pid.remote() for a in self.actors])

    def imap(self, fn, tasks):
        """Tasks go to whichever actor is free next (so a slow or restarting actor holds up
        only its own task); results are yielded in task order."""
        ray = self._ray
        done: dict = {}  # task index -> result, until every task before it is yielded
        pending: dict = {}  # object ref -> (task index, actor)
        free, k, first = list(self.actors), 0, 0
        while first < len(tasks):
            while free and k < len(tasks):
                actor = free.pop(0)
                pending[actor.run.remote(fn, tasks[k])] = (k, actor)
                k += 1
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            index, actor = pending.pop(ref)
            done[index] = ray.get(ref)
            free.append(actor)
            while first in done:
                yield done.pop(first)
                first += 1

    def close(self) -> None:
        for a in getattr(self, "actors", []):
            self._ray.kill(a)
        self.actors = []


def as_given(context):
    """The setup of a pool whose context is its argument as it is (a module-level function,
    and a light one: a ``spawn`` worker imports only this module to run it)."""
    return context


def worker_pool(setup: Callable, args: tuple, *, workers: int = 1,
                ray_address: str | None = None) -> WorkerPool:
    """The pool the arguments ask for (module doc): Ray actors when ``ray_address`` is set,
    else local processes when ``workers > 1``, else this process."""
    check_int("workers", workers, low=1)
    workers = int(workers)
    if ray_address is not None:
        return RayPool(setup, args, workers, ray_address)
    if workers > 1:
        return ProcessPool(setup, args, workers)
    return InProcessPool(setup, args)


# What ray.init takes: "auto", "local", a Ray client or dashboard URL, or a head's HOST:PORT.
_RAY_ADDRESS = re.compile(r"(auto|local|(ray|https?)://\S+|([^\s:/\[\]]+|\[[0-9A-Fa-f:.]+\])"
                          r":\d{1,5})")


def check_ray_address(ray_address) -> None:
    """ConfigError unless ``ray_address`` is None or has a form Ray connects to (for configs
    and flags: a typo is said when the settings are made, not when the search starts)."""
    if ray_address is not None and not (isinstance(ray_address, str)
                                        and _RAY_ADDRESS.fullmatch(ray_address)):
        raise ConfigError(f"ray_address must be None, 'auto', 'local', 'HOST:PORT' or "
                          f"'ray://HOST:PORT', got {ray_address!r}")
