"""Transfer cost between this machine's devices, fitted from timed copies (the simulator's
``latency + bytes / bandwidth``, Placeto A.5).

For two devices ``a`` and ``b`` and each of several sizes ``s``, :func:`time_copies` builds a
chain: a float32 variable of ``s`` bytes on ``a`` is read, then passed through ``hops``
``Identity`` ops alternately on ``b`` and ``a``, so each hop is one cross-device edge (one
Send/Recv pair, as TF's partitioner makes) and the next hop waits for it. A step of that chain
is timed (median of ``steps``) against the same chain with every identity on ``a``; the
difference divided by ``hops`` is the time one transfer of ``s`` bytes adds to a dependency
path, which is what the simulator charges per transfer. A chain, not many independent copies:
independent ones overlap each other on several threads, and their mean cost would be a
throughput, not the duration the simulator needs. Hops alternate direction, so the figure is
the mean of ``a -> b`` and ``b -> a``, and both directions get it. The session's Grappler
passes are off for these graphs, so nothing is folded away.

:func:`fit_transfer` fits ``t(s) = latency + s / bandwidth`` to those points by non-negative
least squares (neither term may be negative: with two terms that is the unconstrained fit when
both come out >= 0, else the better of the two one-term fits, so no solver is needed). When the
per-byte term comes out zero, copies cost no more as they grow: logical CPU devices of one
process hand a tensor over by reference, without copying. The bandwidth is then
:data:`NO_COPY_BANDWIDTH_GBPS`, which stands for "no per-byte cost" (the cluster needs a finite
number).

:func:`profile_links` does this for every pair of a cluster's devices and returns the cluster
with the fitted links (and the fits, to print).

**Sends within a core group.** Between two logical CPU devices of one process a transfer is
not a copy: a Send kernel hands the tensor by reference to a Recv kernel, work the executor's
threads do on the cores the devices share, whatever the size. A chain of copies isolates one
such pair; in a real step TensorFlow adds more around each Send, and many Sends share the
cores with the ops. :func:`measure_send_cost` times that in context: a *ladder* of
``width`` chains of ``length`` small ops (each reads its chain's and its neighbour chain's
previous value, as layers of a network do), under placements that cut from none to every
edge (all on one device, alternate chains, a share of ops moved, random). For each placement
TensorFlow's own Send count is read from the partition graphs it runs (Grappler on, as in a
user's step), and the placements run in interleaved rounds. The median CPU time the process
spends on a step (all its threads) regressed on the Send count gives the work one Send adds,
which is what the simulator charges (work on the group's cores); the median wall time
regressed the same way gives what one Send adds to a step (:attr:`SendFit.step_send_s`,
reported beside it). The
rounds come in :data:`LADDER_BLOCKS` blocks, each fitted on its own, and the fit keeps the
median of the blocks' slopes: a ladder step is short, and on a shared machine its speed and the
cores it gets change from one tenth of a second to the next, so one block, or one fit over all
rounds, can land far from the others, while the median of the blocks stays steady from fit to
fit (docs/experiments.md, "Simulator against this machine: what moved the figures" has the
measurements).
The simulator charges the work as the link latency between two devices of a core group
(:func:`profile_send_costs`; ``tf-autoplace profile --out_cluster`` writes it).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import tensorflow as tf

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.errors import ConfigError
from tf_autoplace.hw.runner import PlacedSession, RunConfig, open_session, time_rounds
from tf_autoplace.hw.workload import Workload

NO_COPY_BANDWIDTH_GBPS = 1e6
DEFAULT_SIZES = (1 << 10, 1 << 16, 1 << 20, 1 << 23)  # 1 KiB .. 8 MiB
DEFAULT_CONFIG = RunConfig(steps=30, grappler=False)
LADDER_CONFIG = RunConfig(steps=40)  # Grappler on, as in a user's step
LADDER_MOVED_SHARES = (0.05, 0.2, 0.5)
LADDER_BLOCKS = 5  # blocks of rounds fitted apart; the fit is their median


@dataclasses.dataclass(frozen=True)
class LinkFit:
    """A fitted link: ``latency_s + bytes / bandwidth_bps`` seconds per transfer.

    Attributes:
      latency_s: fixed cost per transfer (s, >= 0).
      bandwidth_bps: bytes per second (> 0; ``NO_COPY_BANDWIDTH_GBPS * 1e9`` when the per-byte
        cost was not measurable).
      nbytes, seconds: the points it was fitted to.
      rms_error_s: root-mean-square residual of the fit (s).
    """

    latency_s: float
    bandwidth_bps: float
    nbytes: tuple[float, ...] = ()
    seconds: tuple[float, ...] = ()
    rms_error_s: float = 0.0

    def time(self, nbytes) -> np.ndarray:
        return self.latency_s + np.asarray(nbytes, np.float64) / self.bandwidth_bps


def fit_transfer(nbytes, seconds) -> LinkFit:
    """Fit ``seconds = latency + nbytes / bandwidth`` (module docstring). Needs at least two
    distinct sizes."""
    b = np.asarray(nbytes, np.float64)
    t = np.asarray(seconds, np.float64)
    if b.shape != t.shape or b.ndim != 1 or len(np.unique(b)) < 2:
        raise ConfigError(f"a link fit needs times for at least two distinct sizes, got sizes "
                          f"{b.tolist()} and {t.size} times")
    if not (np.isfinite(t).all() and np.isfinite(b).all() and (b >= 0).all()):
        raise ConfigError(f"link timings must be finite with sizes >= 0, got {t.tolist()}")
    latency, per_byte = _nonnegative_line(b, t)
    bandwidth = 1.0 / per_byte if per_byte > 0 else NO_COPY_BANDWIDTH_GBPS * 1e9
    bandwidth = min(bandwidth, NO_COPY_BANDWIDTH_GBPS * 1e9)
    fit = LinkFit(latency_s=float(latency), bandwidth_bps=float(bandwidth))
    residual = t - fit.time(b)
    return dataclasses.replace(fit, nbytes=tuple(b.tolist()), seconds=tuple(t.tolist()),
                               rms_error_s=float(np.sqrt(np.mean(residual ** 2))))


def _nonnegative_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(a, c) >= 0 minimising ``sum((a + c * x - y) ** 2)``."""
    c, a = np.polyfit(x, y, 1)
    if a >= 0 and c >= 0:
        return float(a), float(c)
    candidates = [(max(float(y.mean()), 0.0), 0.0)]  # intercept only
    candidates.append((0.0, max(float(x @ y / (x @ x)), 0.0) if x @ x > 0 else 0.0))  # slope only
    return min(candidates, key=lambda ac: float(np.sum((ac[0] + ac[1] * x - y) ** 2)))


def _chain_graph(a: str, b: str, nbytes: int, hops: int):
    """A variable of ``nbytes`` on ``a``, read and passed through ``hops`` identities
    alternately on ``b`` and ``a``; returns (graph, step op, init op)."""
    graph = tf.Graph()
    with graph.as_default():
        with tf.device(a):
            # One name per size: a TensorFlow cluster's servers keep variables by name.
            value = tf.Variable(tf.zeros([max(nbytes // 4, 1)]), name=f"value{nbytes}")
            x = value.read_value()
        for k in range(hops):
            with tf.device(b if k % 2 == 0 else a):
                x = tf.identity(x, name=f"hop{k}")
        with tf.device(x.device):
            step = tf.group(x, name="step")
        init = tf.compat.v1.global_variables_initializer()
    return graph, step, init


def time_copies(a: str, b: str, nbytes: int, *, hops: int = 16,
                config: RunConfig = DEFAULT_CONFIG) -> float:
    """Median seconds of one step of the chain of ``hops`` copies of ``nbytes`` between ``a``
    and ``b`` (``a == b``: the same chain without a transfer), in this process or on the
    TensorFlow cluster of ``config.target``."""
    graph, step, init = _chain_graph(a, b, nbytes, hops)
    with open_session(graph, config, [a, b]) as session:
        session.run(init)
        call = session.make_callable(step)
        for _ in range(config.warmup_steps):
            call()
        times = []
        for _ in range(config.steps):
            began = time.perf_counter()
            call()
            times.append(time.perf_counter() - began)
    return float(np.median(times))


def measure_link(a: str, b: str, *, sizes=DEFAULT_SIZES, hops: int = 16,
                 config: RunConfig = DEFAULT_CONFIG) -> LinkFit:
    """Time chains of copies of each size between ``a`` and ``b`` against none and fit the
    link (module docstring)."""
    if a == b:
        raise ConfigError(f"a link joins two devices; got {a!r} twice")
    if not (isinstance(hops, int) and hops >= 1):
        raise ConfigError(f"hops must be an int >= 1, got {hops!r}")
    per_transfer = []
    for nbytes in sizes:
        cross = time_copies(a, b, nbytes, hops=hops, config=config)
        local = time_copies(a, a, nbytes, hops=hops, config=config)
        per_transfer.append((cross - local) / hops)
    return fit_transfer([4 * max(s // 4, 1) for s in sizes], per_transfer)


def profile_links(cluster: Cluster, *, sizes=DEFAULT_SIZES, hops: int = 16,
                  config: RunConfig = DEFAULT_CONFIG) -> tuple[Cluster, dict]:
    """``cluster`` with every link's latency and bandwidth measured (one fit per pair of
    devices, used both ways), and the fits by (i, j) with ``i < j``. Its devices must be this
    machine's, or its servers' when ``config.target`` is a TensorFlow cluster's address (over
    gRPC between two tasks, in memory within one)."""
    bandwidth, latency = cluster.bandwidth.copy(), cluster.latency.copy()
    fits = {}
    for i in range(cluster.num_devices):
        for j in range(i + 1, cluster.num_devices):
            fit = measure_link(cluster.names[i], cluster.names[j], sizes=sizes, hops=hops,
                               config=config)
            fits[(i, j)] = fit
            bandwidth[i, j] = bandwidth[j, i] = fit.bandwidth_bps
            latency[i, j] = latency[j, i] = fit.latency_s
    return dataclasses.replace(cluster, bandwidth=bandwidth, latency=latency), fits


@dataclasses.dataclass(frozen=True)
class SendFit:
    """The work one Send adds to a step, fitted on ladder placements (module docstring).

    Attributes:
      send_s: CPU seconds of work one Send/Recv pair adds to a step (>= 0; the median of the
        blocks' slopes).
      step_send_s: wall seconds one Send adds to a step (>= 0; the median of the blocks'
        slopes).
      base_s: the fitted CPU seconds of a step without a Send over all rounds (>= 0).
      sends: TensorFlow's Send count of each placement.
      seconds: the median CPU seconds of a step of each placement over all rounds.
      rms_error_s: root-mean-square residual of the CPU fit over all rounds (s).
      block_send_s: each block's CPU slope.
    """

    send_s: float
    step_send_s: float
    base_s: float
    sends: tuple[int, ...]
    seconds: tuple[float, ...]
    rms_error_s: float
    block_send_s: tuple[float, ...] = ()

    def summary(self) -> str:
        """One line for a log: what one Send adds and what the fit stands on."""
        return (f"one Send adds {self.send_s * 1e6:.2f} us of CPU work and "
                f"{self.step_send_s * 1e6:.2f} us to a step (ladder, {min(self.sends)}.."
                f"{max(self.sends)} Sends, median of {len(self.block_send_s)} blocks of rounds "
                f"whose CPU slopes range {min(self.block_send_s, default=0) * 1e6:.2f}-"
                f"{max(self.block_send_s, default=0) * 1e6:.2f} us, rms residual "
                f"{self.rms_error_s * 1e6:.1f} us)")


def _ladder_graph(width: int, length: int, size: int = 2048):
    """The ladder (module docstring) on no device: ``x[c, s] = tanh(x[c, s-1] + a_s *
    x[c-1, s-1])`` on [size] float32 values; returns (GraphDef, op names per rung [width,
    length], the step op's name, the initializer's name)."""
    graph = tf.Graph()
    rungs = np.empty((width, length), object)
    with graph.as_default():
        value = tf.Variable(tf.random.stateless_normal([size], seed=[0, 0]), name="value")
        start = value.read_value()
        prev = [start * float(c + 1) for c in range(width)]  # distinct chains: no CSE
        for s in range(length):
            cur = []
            for c in range(width):
                with tf.name_scope(f"rung_{c}_{s}") as scope:
                    cur.append(tf.tanh(prev[c] + prev[c - 1] * (0.5 + 0.01 * s)))
                rungs[c, s] = scope
            prev = cur
        step = tf.reduce_sum(tf.add_n(prev), name="step")
        init = tf.compat.v1.global_variables_initializer()
    return graph.as_graph_def(), rungs, step.op.name, init.name


def ladder_placements(width: int, length: int, seed: int = 0) -> dict[str, np.ndarray]:
    """[width, length] 0/1 device choices per rung: all on the first device, alternate
    chains, a share of the rungs moved (:data:`LADDER_MOVED_SHARES`), two random ones."""
    rng = np.random.default_rng(seed)
    out = {"single": np.zeros((width, length), int),
           "alternate chains": np.tile((np.arange(width) % 2)[:, None], (1, length))}
    for share in LADDER_MOVED_SHARES:
        out[f"moved {share:g}"] = (rng.random((width, length)) < share).astype(int)
    for k in range(2):
        out[f"random {k}"] = rng.integers(0, 2, (width, length))
    return out


def count_sends(partition_graphs) -> int:
    """TensorFlow's Send nodes in the partition graphs of one step."""
    return sum(node.op in ("_Send", "_HostSend") for g in partition_graphs for node in g.node)


def measure_send_cost(a: str, b: str, *, width: int = 8, length: int = 40, seed: int = 0,
                      config: RunConfig = LADDER_CONFIG, blocks: int = LADDER_BLOCKS) -> SendFit:
    """Run the ladder's placements between devices ``a`` and ``b`` in interleaved rounds and
    fit the work one Send adds to a step (module docstring). ``blocks`` (>= 1) blocks of
    ``config.steps`` rounds after ``config.warmup_steps``; ``seed`` draws the placements and
    the rounds' orders."""
    if a == b:
        raise ConfigError(f"a Send joins two devices; got {a!r} twice")
    for what, value, least in (("width", width, 2), ("length", length, 2),
                               ("blocks", blocks, 1)):
        if not (isinstance(value, int) and value >= least):
            raise ConfigError(f"the ladder's {what} must be an int >= {least}, got {value!r}")
    graph_def, rungs, step, init = _ladder_graph(width, length)
    workload = Workload(graph_def=graph_def, fetches=(step,), init=(init,))
    assignments = []
    for choice in ladder_placements(width, length, seed).values():
        device = {scope: (a, b)[k] for scope, k in zip(rungs.ravel(), choice.ravel().tolist())}
        assignments.append({node.name: device.get(node.name.split("/")[0] + "/", a)
                            for node in graph_def.node})
    sessions = []
    try:
        for assignment in assignments:
            sessions.append(PlacedSession(workload, assignment, config))
        sends = [count_sends(placed.partition_graphs()) for placed in sessions]
        wall, cpu = time_rounds(sessions, dataclasses.replace(config, steps=config.steps * blocks),
                                np.random.default_rng(seed))
    finally:
        for placed in sessions:
            placed.close()
    x = np.asarray(sends, np.float64)
    if len(np.unique(x)) < 2:
        raise ConfigError(f"the ladder's placements between {a} and {b} all made {sends[0]} "
                          "Sends; nothing to fit")
    cpu_slopes, wall_slopes = [], []
    for block in np.split(np.arange(wall.shape[1]), blocks):
        cpu_slopes.append(_nonnegative_line(x, np.median(cpu[:, block], axis=1))[1])
        wall_slopes.append(_nonnegative_line(x, np.median(wall[:, block], axis=1))[1])
    seconds = np.median(cpu, axis=1)
    base, per_send = _nonnegative_line(x, seconds)
    residual = seconds - (base + per_send * x)
    return SendFit(send_s=float(np.median(cpu_slopes)),
                   step_send_s=float(np.median(wall_slopes)), base_s=base,
                   sends=tuple(sends), seconds=tuple(seconds.tolist()),
                   rms_error_s=float(np.sqrt(np.mean(residual ** 2))),
                   block_send_s=tuple(float(v) for v in cpu_slopes))


def profile_send_costs(cluster: Cluster, *, config: RunConfig = LADDER_CONFIG,
                       seed: int = 0) -> tuple[Cluster, dict[str, SendFit]]:
    """``cluster`` with the latency between every two devices of a core group set to the work
    one Send adds to a step between the group's first two devices (:func:`measure_send_cost`;
    bandwidths are kept), and the fits by group name. Groups of one device are left alone;
    the devices must be local."""
    latency = cluster.latency.copy()
    fits = {}
    for group, _ in cluster.core_groups:
        members = [i for i, d in enumerate(cluster.devices) if d.core_group == group]
        if len(members) < 2:
            continue
        fit = measure_send_cost(cluster.names[members[0]], cluster.names[members[1]],
                                config=config, seed=seed)
        fits[group] = fit
        for i in members:
            for j in members:
                if i != j:
                    latency[i, j] = fit.send_s
    return dataclasses.replace(cluster, latency=latency), fits
