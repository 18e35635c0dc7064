"""Run a :class:`~tf_autoplace.hw.workload.Workload` on this machine's devices and time its steps.

:func:`run` imports the workload's graph into a fresh ``tf.Graph`` with the devices of an
assignment (op name -> device string), opens a v1 ``Session`` that has those devices (logical
CPU devices ``/device:CPU:0..N-1`` through ``ConfigProto.device_count``, every visible GPU) with
soft placement off, so a placement runs exactly as given or fails, initialises the variables,
runs its warm-up steps (:func:`warm_up`), then times ``steps`` steps one by one (wall time of ``Session.run`` around the fetches, feeds
included) and finally runs ``trace_steps`` more with full tracing, whose step stats give every
op's start and end on its device (:class:`TracedStep`). Tracing slows a step down, so the timed
steps are never traced.

On a TensorFlow cluster (``RunConfig.target``, a ``grpc://`` address of one of its servers, as
``Cluster.target`` gives it), the Session is one of that server's: the devices are the
servers' (``/job:worker/replica:0/task:1/device:CPU:0``), the client sends the graph and the
feeds and receives the fetches, and the master partitions the graph over the tasks. TensorFlow's
servers keep variables across sessions, by name: each placed session here gets a container of
its own (every stateful op's ``container`` attr), so that two placements of one graph measured
together do not step each other's variables, and its resources are destroyed on the servers
when it closes (:func:`release_container`).

**Warm-up.** The first step partitions and optimises the graph and allocates. The steps after
it keep getting faster for about :data:`WARMUP_STEPS` more: TensorFlow's executor starts every
kernel of a new Session as "expensive" (an estimate of 10^8 cycles), sends expensive kernels to
its thread pool instead of running them inline, and moves each kernel's estimate an eighth of
the way towards its measured cost each time it runs, so a kernel of a few microseconds is
inlined only after about 70 runs. On graphs of many small ops that is a large share of the step
(docs/experiments.md, "Simulator against this machine: what moved the figures"); a training
loop runs thousands of steps, so its steps are the settled ones. A Session therefore warms up
for :data:`WARMUP_STEPS` steps, or fewer where those after its first :data:`SETUP_STEPS` would
take more than ``warmup_s`` seconds: on a graph whose step takes that long, a kernel's dispatch
is a vanishing share of it.

The step time reported is the median of the timed steps: a shared machine has outliers, and the
median ignores a few. Nothing here depends on the machine being quiet, but the figures do:
report the load with them.

Session settings are TensorFlow's defaults unless :class:`RunConfig` says otherwise: as many
inter-op and intra-op threads as cores, and the Grappler optimisations of the session on, since
that is how a user's training step runs. Grappler folds constants and fuses ops (e.g. MatMul
and BiasAdd into one ``_FusedMatMul`` named after the BiasAdd), so a traced step has fewer
nodes than the graph: an op that does not appear did not run as its own kernel.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import os
import queue
import re
import threading
import time
from typing import Callable, Mapping

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2, node_def_pb2, types_pb2
from tensorflow.python.framework import op_def_registry

from tf_autoplace.core.tasks import same_device
from tf_autoplace.errors import ConfigError, MeasurementError
from tf_autoplace.hw.trace import TracedStep
from tf_autoplace.hw.workload import Workload

CANCEL_WAIT_S = 30.0  # how long an interrupted step may take to end once cancelled
INTERRUPT_POLL_S = 0.1  # how often the main thread looks for a Ctrl-C while a step runs
SERVER_CHECK_S = 2.0  # on a cluster, how often a step that still runs checks its servers
WARMUP_STEPS = 80  # a kernel's cost estimate falls from 1e8 cycles below 8e3 in ~71 runs
SETUP_STEPS = 3  # the first steps partition, optimise and allocate: never cut short
_DEVICE = re.compile(r"device:(CPU|GPU):(\d+)$", re.IGNORECASE)
_CONTAINERS = itertools.count()


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """How a workload is run.

    Attributes:
      steps: timed steps (>= 1); the step time is their median.
      warmup_steps: untimed steps before them (>= 0; module docstring).
      warmup_s: stop the warm-up of a placement earlier once its warm-up steps after the
        first :data:`SETUP_STEPS` took this many seconds (> 0).
      trace_steps: steps run afterwards with full tracing (>= 0), for per-op times.
      rewarm_steps: in interleaved rounds (:func:`run_interleaved`), untimed steps a placement
        runs at its turn just before its timed step (>= 0). A step that follows other
        Sessions' steps finds the caches and threads holding their work; a training loop's
        step follows its own. On graphs of small ops the first is markedly slower, and by how
        much depends on how many Sessions take turns, so timing it would measure the protocol
        rather than the placement.
      inter_op_threads, intra_op_threads: the Session's thread pools (0: TF's default, as many
        threads as cores).
      grappler: keep the Session's Grappler optimisations on (TF's default).
      soft_placement: let TF move ops whose device cannot run them (off: a placement runs as
        given or fails; the profiler turns it on to time a graph on a GPU whose ops are not all
        GPU ops).
      target: run on a TensorFlow cluster: the ``grpc://host:port`` of one of its servers
        (``Cluster.target``); "" runs in this process (module docstring).
      servers: the ``host:port`` of every task of that cluster (:func:`on_cluster` fills it):
        before the resources a measured placement left on the servers are released, each must
        accept a connection, since a Session on a cluster with a task down waits for the task
        without end (:func:`release_container`); empty: not checked.
      timeout_s: a step (or an init) that takes longer than this many seconds fails with a
        MeasurementError instead of waiting for a server that may have died, or for an input
        the program would have given it (0: no limit).
    """

    steps: int = 10
    warmup_steps: int = WARMUP_STEPS
    warmup_s: float = 2.0
    trace_steps: int = 0
    rewarm_steps: int = 1
    inter_op_threads: int = 0
    intra_op_threads: int = 0
    grappler: bool = True
    soft_placement: bool = False
    target: str = ""
    timeout_s: float = 600.0
    servers: tuple[str, ...] = ()

    def __post_init__(self):
        for field, low in (("steps", 1), ("warmup_steps", 0), ("trace_steps", 0),
                           ("rewarm_steps", 0), ("inter_op_threads", 0),
                           ("intra_op_threads", 0)):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{field} must be an int >= {low}, got {value!r}")
        if not isinstance(self.target, str) or (self.target
                                                and not self.target.startswith("grpc://")):
            raise ConfigError(f"target must be '' or a 'grpc://host:port' address, got "
                              f"{self.target!r}")
        if isinstance(self.warmup_s, bool) or not isinstance(self.warmup_s, (int, float)) \
                or not self.warmup_s > 0:
            raise ConfigError(f"warmup_s must be a number > 0, got {self.warmup_s!r}")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) \
                or not self.timeout_s >= 0:
            raise ConfigError(f"timeout_s must be a number >= 0, got {self.timeout_s!r}")
        if not (isinstance(self.servers, tuple)
                and all(isinstance(a, str) and a for a in self.servers)):
            raise ConfigError(f"servers must be a tuple of 'host:port' strings, got "
                              f"{self.servers!r}")


def on_cluster(cluster, config: RunConfig | None = None) -> RunConfig:
    """``config`` (default: :class:`RunConfig`'s) set to run on ``cluster``: its ``target``
    (a TensorFlow cluster's; "" for this process's own devices) and the addresses of its
    tasks (``servers``)."""
    return dataclasses.replace(config or RunConfig(), target=cluster.target,
                               servers=tuple(t.address for t in cluster.tasks if t.address))


@dataclasses.dataclass(frozen=True, eq=False)
class Measurement:
    """What running a workload measured.

    Attributes:
      step_times_s: [steps] wall time of each timed step (s).
      traces: the traced steps, in order.
      devices: the devices the Session had.
    """

    step_times_s: np.ndarray
    traces: tuple[TracedStep, ...]
    devices: tuple[str, ...]

    @property
    def step_time_s(self) -> float:
        """Median of the timed steps (s)."""
        return float(np.median(self.step_times_s))


def canonical_device(name: str) -> str:
    """``/job:localhost/replica:0/task:0/device:CPU:0`` and ``/device:CPU:0`` -> ``CPU:0``
    (raises ConfigError for a device string that names no CPU or GPU)."""
    match = _DEVICE.search(name or "")
    if match is None:
        raise ConfigError(f"{name!r} is not a local CPU or GPU device string")
    return f"{match.group(1).upper()}:{match.group(2)}"


def session_device_counts(device_names) -> dict[str, int]:
    """``ConfigProto.device_count`` for a session that has every device of ``device_names``:
    as many logical CPUs as the highest CPU index needs (at least one). A name without an
    index (``/device:CPU:*``, as TF annotates some ops of its own) needs none in particular."""
    cpus = []
    for name in device_names:
        spec = tf.DeviceSpec.from_string(name)
        if (spec.device_type or "").upper() == "CPU" and spec.device_index is not None:
            cpus.append(int(spec.device_index))
    return {"CPU": max(cpus, default=0) + 1}


def session_config(config: RunConfig, device_names=()) -> tf.compat.v1.ConfigProto:
    """The Session's ConfigProto for ``config``, with the devices of ``device_names`` (in
    this process; on a cluster the servers have theirs)."""
    proto = tf.compat.v1.ConfigProto(
        allow_soft_placement=config.soft_placement,
        inter_op_parallelism_threads=config.inter_op_threads,
        intra_op_parallelism_threads=config.intra_op_threads)
    proto.operation_timeout_in_ms = int(config.timeout_s * 1000)
    if not config.target:
        proto.device_count.update(session_device_counts(device_names))
    if not config.grappler:
        proto.graph_options.rewrite_options.disable_meta_optimizer = True
    return proto


_OWN = "_tf_autoplace_own"  # the attribute that marks a graph as tf_autoplace's own


def own_graph(graph: tf.Graph | None = None) -> tf.Graph:
    """``graph`` (a new one if None) marked as one tf_autoplace runs for itself (a placement
    measured, a cleanup), which the ``--autoplace`` session hook must never place
    (:func:`is_own_graph`): a measurement runs its Sessions' steps on threads of their own,
    where the hook's guard against placing inside a placement, kept per thread, does not
    hold, and the hook would wait for the placement that is waiting for it."""
    graph = tf.Graph() if graph is None else graph
    setattr(graph, _OWN, True)
    return graph


def is_own_graph(graph) -> bool:
    """Whether :func:`own_graph` marked ``graph``."""
    return bool(getattr(graph, _OWN, False))


def open_session(graph: tf.Graph, config: RunConfig, device_names=()) -> tf.compat.v1.Session:
    """A v1 Session on ``graph`` (marked :func:`own_graph`) as ``config`` says: in this
    process with the devices of ``device_names``, or on the TensorFlow cluster of
    ``config.target``."""
    return tf.compat.v1.Session(config.target, graph=own_graph(graph),
                                config=session_config(config, device_names))


def missing_devices(used, have) -> list[str]:
    """The device strings of ``used`` (placed ops' devices) that no device of ``have`` (a
    Session's) can be: compared as TensorFlow resolves them (``/device:CPU:0`` is
    ``/job:localhost/replica:0/task:0/device:CPU:0``)."""
    have = [tf.DeviceSpec.from_string(d) for d in have]
    return [d for d in used
            if not any(same_device(tf.DeviceSpec.from_string(d), h) for h in have)]


def placed_graph_def(graph_def: graph_pb2.GraphDef, assignment: Mapping[str, str] | None,
                     container: str = "") -> graph_pb2.GraphDef:
    """A copy of ``graph_def`` with ``assignment``'s devices (other nodes keep theirs), and
    with every stateful op that takes a ``container`` in ``container`` when one is given.
    Colocation attributes stay: a valid placement keeps colocated ops together anyway."""
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    if assignment:
        for node in out.node:
            device = assignment.get(node.name)
            if device is not None:
                node.device = device
    if container:
        for node in out.node:
            op_def = op_def_registry.get(node.op)
            if op_def is not None and any(a.name == "container" for a in op_def.attr):
                node.attr["container"].s = container.encode()
    return out


class _SessionThread:
    """The thread one session's calls run on, in turn (:meth:`PlacedSession.
    _run_interruptibly`). A daemon thread, unlike a ThreadPoolExecutor's, which Python joins
    at exit: a step on a TensorFlow cluster whose master died waits in TensorFlow's C++ until
    the 10-minute operation timeout, and must not hold the process that gave up on it."""

    def __init__(self):
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._serve, daemon=True, name="tf-autoplace-session").start()

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            future, fn, args, kwargs = call
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as e:  # noqa: B036  (handed to the waiting thread)
                    future.set_exception(e)

    def submit(self, fn, *args, **kwargs) -> concurrent.futures.Future:
        future = concurrent.futures.Future()
        self._calls.put((future, fn, args, kwargs))
        return future

    def shutdown(self) -> None:
        self._calls.put(None)


class PlacedSession:
    """One placement of a workload, imported and initialised in its own Session, ready to
    step. Use as a context manager (the Session is closed on exit).

    Raises ConfigError if the placement names a device this machine does not have, and
    MeasurementError (with TF's message) if TensorFlow cannot run the placed graph.
    """

    def __init__(self, workload: Workload, assignment: Mapping[str, str] | None,
                 config: RunConfig):
        self.config = config
        # TF's resource manager takes letters, digits, '.', '-' and '/' in a container name
        # (no '_': a one-shot iterator or a table would refuse it).
        self.container = (f"tf-autoplace-{os.getpid()}-{next(_CONTAINERS)}" if config.target
                          else "")
        self._graph_def = None
        self._worker = None  # the thread that runs the session's steps (_run_interruptibly)
        graph_def = placed_graph_def(workload.graph_def, assignment, self.container)
        self._graph_def = graph_def
        used = sorted({n.device for n in graph_def.node if n.device})
        graph = tf.Graph()
        try:
            with graph.as_default():
                tf.graph_util.import_graph_def(graph_def, name="")
        except (ValueError, tf.errors.OpError) as e:
            raise MeasurementError(f"TensorFlow cannot import the graph to run it: {e}") from e
        self._fetches = list(workload.fetches)
        self._feeds = dict(workload.feeds)
        # Every session: a server that died since the last one was opened makes a new one wait
        # in list_devices, without end and deaf to Ctrl-C, for the task.
        check_reachable(config.servers)
        with _tf_errors(config):
            self.session = open_session(graph, config, used)
        try:
            with _tf_errors(config):
                self.devices = tuple(d.name for d in self.session.list_devices())
            missing = missing_devices(used, self.devices)
            if missing:
                where = (f"the TensorFlow cluster at {config.target}" if config.target
                         else "this machine")
                raise ConfigError(f"the placement uses {missing}, which {where} does not have "
                                  f"(it has {list(self.devices)}); a measured run needs the "
                                  "cluster's devices")
            with _tf_errors(config), _feed_errors():
                if workload.init:
                    self._run_interruptibly(self.session.run, list(workload.init),
                                            self._feeds)
                self._step = self.session.make_callable(self._fetches,
                                                        feed_list=list(self._feeds))
        except BaseException:
            self._close_session()
            self._stop_worker()
            raise
        self._values = list(self._feeds.values())

    def _run_interruptibly(self, fn, *args, **kwargs):
        """``fn(*args)`` on this session's own thread while the calling (main) thread waits
        for it, so that Ctrl-C ends a step that blocks (a queue nothing fills): the session is
        closed, which cancels the step, and the KeyboardInterrupt goes on. While TensorFlow's
        C++ holds the main thread, Python sees the interrupt only when the step returns, at
        TensorFlow's 10-minute timeout, and then as pybind11's RuntimeError. Off the main
        thread (where no interrupt is delivered) ``fn`` runs in the caller's thread.

        On a TensorFlow cluster, a call still running after :data:`SERVER_CHECK_S` checks
        that every server answers, and again as often: TensorFlow reports a worker or ps task
        that dies during a step, but not the master (the target), for which the step waits
        until the operation timeout. A server that does not answer is a MeasurementError at
        once, and the step is left to its daemon thread."""
        if threading.current_thread() is not threading.main_thread():
            return fn(*args, **kwargs)
        if self._worker is None:
            self._worker = _SessionThread()
        future = self._worker.submit(fn, *args, **kwargs)
        check_at, down = time.monotonic() + SERVER_CHECK_S, None
        try:
            # Short waits, not one: the main thread sees a Ctrl-C when it next runs Python,
            # and a wait on a lock is not woken by a signal another thread received.
            while not concurrent.futures.wait([future], timeout=INTERRUPT_POLL_S).done:
                if self.config.servers and time.monotonic() >= check_at:
                    down = self._server_down()
                    if down is not None:
                        break
                    check_at = time.monotonic() + SERVER_CHECK_S
            else:
                return future.result()
        except BaseException:
            if not future.done():  # interrupted while the step runs: cancel it
                self._close_session()
                concurrent.futures.wait([future], timeout=CANCEL_WAIT_S)
            raise
        self._close_session()  # (on a thread of its own: a task is down)
        self._stop_worker()  # its thread waits in the step; a new one serves what follows
        raise MeasurementError(f"a step on the TensorFlow cluster at {self.config.target} "
                               f"stopped: {down}") from down.__cause__

    def _server_down(self) -> MeasurementError | None:
        """The error naming a server of the cluster that does not answer now, or None."""
        try:
            check_reachable(self.config.servers)
        except MeasurementError as e:
            return e
        return None

    def _timed_step(self) -> float:
        began = time.perf_counter()
        self._step(*self._values)
        return time.perf_counter() - began

    def step(self) -> float:
        """Run one step; its wall time in seconds (of the step alone, on the thread that runs
        it)."""
        with _tf_errors(self.config), _feed_errors():
            return self._run_interruptibly(self._timed_step)

    def traced_step(self) -> TracedStep:
        """Run one step with full tracing."""
        return TracedStep.from_step_stats(self.traced_metadata().step_stats)

    def traced_metadata(self) -> tf.compat.v1.RunMetadata:
        """Run one step with full tracing; its RunMetadata (every node's timing, outputs and
        allocations in ``step_stats``)."""
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        metadata = tf.compat.v1.RunMetadata()
        with _tf_errors(self.config):
            self._run_interruptibly(self.session.run, self._fetches, self._feeds,
                                    options=options, run_metadata=metadata)
        return metadata

    def partition_graphs(self) -> list:
        """Run one step and return the GraphDefs TensorFlow ran on each device: the graph
        after Grappler's passes and partitioning, with the Send/Recv pairs it added."""
        options = tf.compat.v1.RunOptions(output_partition_graphs=True)
        metadata = tf.compat.v1.RunMetadata()
        with _tf_errors(self.config):
            self._run_interruptibly(self.session.run, self._fetches, self._feeds,
                                    options=options, run_metadata=metadata)
        return list(metadata.partition_graphs)

    def _stop_worker(self) -> None:
        if self._worker is not None:
            self._worker.shutdown()
            self._worker = None

    def _close_session(self) -> None:
        """Close the Session; on a cluster with a task down, on a thread that is not waited
        for: a Session there blocks in ``close`` until the task is back, out of Python's
        reach (Ctrl-C included)."""
        if task_down(self.config):
            threading.Thread(target=self.session.close, daemon=True,
                             name="tf-autoplace-close").start()
            return
        self.session.close()

    def close(self) -> None:
        self._close_session()
        self._stop_worker()
        if self.container:
            release_container(self._graph_def, self.container, self.config)

    def __enter__(self) -> "PlacedSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


REACH_TIMEOUT_S = 5.0


def check_reachable(addresses, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Raise MeasurementError naming the first ``host:port`` of ``addresses`` that does not
    answer as a TensorFlow server within ``timeout_s`` (:func:`connection_error`).

    A Session on a TensorFlow cluster whose master or another task is down, stopped or hung
    does not fail: it waits for the task (``Session.list_devices`` without end, holding the
    interpreter: no thread and no Ctrl-C gets through) without a word. A handshake with each
    server first turns that into an error at once."""
    for address in addresses:
        error = connection_error(address, timeout_s)
        if error is not None:
            raise MeasurementError(f"cannot reach the TensorFlow server at {address!r} "
                                   f"({error}); start it, or measure without it") from error


# HTTP/2's client preface and an empty SETTINGS frame: a gRPC server (TensorFlow's) answers
# with a SETTINGS frame of its own (frame type 4, the fourth byte of its 9-byte header).
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_H2_SETTINGS = 4


def connection_error(address: str, timeout_s: float) -> Exception | None:
    """Why ``host:port`` (``[::1]:port`` too) does not answer as a gRPC server within
    ``timeout_s``, or None when it does: the connection failed; it was accepted but nothing
    answered the HTTP/2 handshake (a ``TimeoutError``: a stopped, hung or very busy process,
    whose port the kernel still accepts connections on); or what answered is not a gRPC
    server (a ``ConnectionError``)."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(_H2_PREFACE)
            header = b""
            while len(header) < 9:
                chunk = sock.recv(9 - len(header))
                if not chunk:
                    break
                header += chunk
    except TimeoutError:
        return TimeoutError("it accepts connections but does not answer: a stopped, hung or "
                            "overloaded server")
    except (OSError, ValueError) as e:
        return e
    if len(header) < 9 or header[3] != _H2_SETTINGS:
        return ConnectionError("what listens there is not a TensorFlow (gRPC) server")
    return None


def task_down(config: RunConfig) -> bool:
    """Whether a task of the cluster ``config`` runs on (``config.servers``) accepts no
    connection now; False where it names none."""
    try:
        check_reachable(config.servers)
    except MeasurementError:
        return True
    return False


def release_container(graph_def: graph_pb2.GraphDef, container: str, config: RunConfig) -> None:
    """Destroy, on the servers at ``config.target``, the resources ``graph_def``'s ops made in
    ``container``: the variables (and tables, ...) of a placement measured there.

    Servers keep resources by container and name after a session closes, so every measured
    placement would otherwise leave a copy of the model's variables on them until they stop
    (memory a training job that follows would not have). ``Session.reset`` would clear them
    too, but it also closes every other session of that master, the user's training session
    among them. So each resource-making op (a ``VarHandleOp``, a table: no inputs, a resource
    output and a ``container`` attr) is made again by name in a graph of its own and its
    resource destroyed. Ref variables (``VariableV2``, from programs that turn resource
    variables off) have no destroy op and stay. Best effort: a server that cannot be reached
    any more has nothing to keep, and while any task of the cluster (``config.servers``) is
    down nothing is released (a Session there would wait for that task without end)."""
    if task_down(config):
        return
    nodes = []
    for node in graph_def.node:
        op_def = op_def_registry.get(node.op)
        if (op_def is None or node.input or "container" not in node.attr
                or node.attr["container"].s != container.encode()
                or len(op_def.output_arg) != 1
                or op_def.output_arg[0].type != types_pb2.DT_RESOURCE):
            continue
        if node.op != "VarHandleOp" and not ("shared_name" in node.attr
                                             and node.attr["shared_name"].s):
            continue  # no shared name: a resource of that session's kernel alone (iterators)
        copy = node_def_pb2.NodeDef()
        copy.CopyFrom(node)
        if "_class" in copy.attr:  # colocated with ops the cleanup graph does not have
            del copy.attr["_class"]
        nodes.append(copy)
    if not nodes:
        return
    cleanup = graph_pb2.GraphDef()
    cleanup.versions.CopyFrom(graph_def.versions)
    cleanup.library.CopyFrom(graph_def.library)
    cleanup.node.extend(nodes)
    graph = own_graph()
    try:
        with graph.as_default():
            tf.graph_util.import_graph_def(cleanup, name="")
            destroy = []
            for node in nodes:
                with tf.device(node.device or None):  # where the resource lives
                    destroy.append(tf.raw_ops.DestroyResourceOp(
                        resource=graph.get_tensor_by_name(f"{node.name}:0"),
                        ignore_lookup_error=True))
        with tf.compat.v1.Session(config.target, graph=graph) as session:
            session.run(destroy, options=tf.compat.v1.RunOptions(timeout_in_ms=60_000))
    except (ValueError, tf.errors.OpError):
        pass


class _feed_errors:
    """Turn what TensorFlow's Python side raises for a feed or fetch it cannot take (a value
    of another shape or dtype for a tensor that is not a placeholder, a name it cannot read as
    a tensor or op) into ConfigError: the measurement's feeds and fetches are the caller's
    input."""

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if isinstance(error, (TypeError, ValueError)):
            raise ConfigError(f"the measurement's feeds or fetches do not fit the graph: "
                              f"{error}") from error
        return False


class _tf_errors:
    """Turn TensorFlow's runtime errors into MeasurementError; with the run's ``config``, a
    timeout says what ran out (TF's own message is only "Deadline Exceeded")."""

    def __init__(self, config: RunConfig | None = None):
        self.config = config

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if error is not None and isinstance(error, tf.errors.OpError):
            why = ""
            if isinstance(error, tf.errors.DeadlineExceededError) and self.config is not None:
                where = (f"on the servers at {self.config.target}" if self.config.target
                         else "here")
                why = (f" (no step ended within the {self.config.timeout_s:g} s operation "
                       f"timeout {where}: a server that stopped answering or died, or a step "
                       "that waits for input nothing in the graph provides)")
            raise MeasurementError(f"TensorFlow could not run the placed graph: "
                                   f"{type(error).__name__}: {error.message}{why}") from error
        return False


def warm_up(sessions, config: RunConfig, rng: np.random.Generator | None = None) -> None:
    """Run each of ``sessions`` (:class:`PlacedSession`) through its untimed warm-up steps
    (module docstring): ``config.warmup_steps`` each, a placement stopping once its own took
    ``config.warmup_s`` seconds after its first :data:`SETUP_STEPS`. With ``rng``, in rounds in an order it shuffles, as the timed
    steps of :func:`run_interleaved` are."""
    spent = [0.0] * len(sessions)
    for i in range(config.warmup_steps):
        order = rng.permutation(len(sessions)).tolist() if rng is not None else range(
            len(sessions))
        warming = [k for k in order if i < SETUP_STEPS or spent[k] < config.warmup_s]
        if not warming:
            return
        for k in warming:
            took = sessions[k].step()
            if i >= SETUP_STEPS:
                spent[k] += took


RUN_IN_S = 1.0  # after a pause, rounds of untimed steps for this long before timing again


def time_rounds(sessions, config: RunConfig, rng: np.random.Generator, *,
                before_timing: Callable[[], float] | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(wall [S, config.steps], cpu [S, config.steps])`` seconds of each timed step of each
    open :class:`PlacedSession` (each may run its own workload): their warm-up in rounds
    (:func:`warm_up`), then ``config.steps`` rounds in an order ``rng`` shuffles per round, in
    which each session runs ``config.rewarm_steps`` untimed steps and one timed step. ``cpu``
    is the process's CPU time over the timed step (every thread of TensorFlow's pools).
    ``before_timing`` (no arguments) is called once between the warm-up and the first round:
    the protocol reads the machine's load there, and may wait for it to settle; it returns the
    seconds it paused. The Sessions keep what the warm-up taught their executors, but the
    first half second of steps after seconds of idling runs slower (the cores, caches and
    thread pools wake up): after a pause, untimed rounds run for :data:`RUN_IN_S` first."""
    warm_up(sessions, config, rng)
    if before_timing is not None and before_timing() > 0:
        began = time.perf_counter()
        while time.perf_counter() - began < RUN_IN_S:
            for k in rng.permutation(len(sessions)).tolist():
                sessions[k].step()
    wall = np.empty((len(sessions), config.steps))
    cpu = np.empty_like(wall)
    for r in range(config.steps):
        for k in rng.permutation(len(sessions)).tolist():
            for _ in range(config.rewarm_steps):
                sessions[k].step()
            began = time.process_time()
            wall[k, r] = sessions[k].step()
            cpu[k, r] = time.process_time() - began
    return wall, cpu


def run(workload: Workload, assignment: Mapping[str, str] | None = None,
        config: RunConfig = RunConfig()) -> Measurement:
    """Run ``workload`` with the devices of ``assignment`` (op name -> device string; ops it
    does not name keep the graph's device) and time it (module docstring). Errors as
    :class:`PlacedSession`'s."""
    with PlacedSession(workload, assignment, config) as placed:
        warm_up([placed], config)
        times = np.array([placed.step() for _ in range(config.steps)])
        traces = tuple(placed.traced_step() for _ in range(config.trace_steps))
    return Measurement(step_times_s=times, traces=traces, devices=placed.devices)


def run_interleaved(workload: Workload, assignments, config: RunConfig = RunConfig(), *,
                    seed: int = 0, trace: int | None = None,
                    before_timing: Callable[[], float] | None = None) -> list[Measurement]:
    """Time several placements of ``workload`` together: every placement gets its own Session
    (all open at once), its warm-up steps (:func:`warm_up`, in rounds), then ``config.steps``
    rounds in which each placement runs ``config.rewarm_steps`` untimed steps and one timed
    step, in an order shuffled per round with ``seed``. A load that comes and goes on a shared
    machine then falls on every placement alike instead of on whichever ran at that moment. Traced steps (``config.trace_steps`` of every placement, and one more of
    placement number ``trace`` when given) follow the rounds; ``before_timing`` as
    :func:`time_rounds`'. Errors as :class:`PlacedSession`'s."""
    assignments = list(assignments)
    rng = np.random.default_rng(seed)
    sessions = []
    try:
        for assignment in assignments:
            sessions.append(PlacedSession(workload, assignment, config))
        times, _ = time_rounds(sessions, config, rng, before_timing=before_timing)
        return [Measurement(step_times_s=times[k],
                            traces=tuple(placed.traced_step()
                                         for _ in range(config.trace_steps + (k == trace))),
                            devices=placed.devices)
                for k, placed in enumerate(sessions)]
    finally:
        for placed in sessions:
            placed.close()
