"""Each part of the simulator checked against this host on its own.

A whole-graph comparison (:mod:`tf_autoplace.hw.fidelity`) says how far the simulated step is
from the measured one, not which part of the model is wrong. The library behind
``tf-autoplace fidelity --components`` checks the four parts one at a time, each on a
workload where the others matter little:

* **op compute time** (:func:`check_op_times`): for each graph of
  :data:`~tf_autoplace.hw.fidelity.GRAPHS`, the ops of the op types that take most of the
  profiled step (``op_types`` types, up to ``ops_per_type`` ops each, the longest) are timed on
  their own, untraced (:mod:`tf_autoplace.hw.isolated`: the kernel as it ran, fused kernels
  included); per op type, Grappler's analytical estimate and the profiled (traced) time are set
  against that reference: the median ratio and its range over the type's ops.
* **cross-device transfers** (:func:`check_transfers`): a chain of ``transfer_hops`` identities
  on a small tensor, placed so that ``k`` of its edges cross between two logical CPUs (``k``
  in ``transfer_counts``), every placement timed in interleaved rounds (Grappler off, so no
  edge disappears); the slope of the median step time over ``k`` is what one transfer adds to
  a step, the slope of the process's CPU time per step what it costs the shared cores. The
  simulator's figures are the same slopes of its simulated step and of its core work, on the
  cluster that ``Cluster.local`` describes.
* **concurrency** (:func:`check_concurrency`): two independent chains of matrix products,
  measured and simulated (the op times profiled with one chain alone, for both chains; the
  local cluster) as one chain alone, two chains on one logical CPU and one chain on each of
  two; and two CPU-bound processes pinned to two
  different cores against one alone (:func:`process_contention`), where the simulator's core
  group assumes ``cores`` times the work of one core.
* **peak memory per device** (:func:`check_memory`): for several placements of each graph on
  two logical CPUs, the simulator's peak per device against TensorFlow's (:mod:`tf_autoplace.
  hw.memory`: variables from their shapes plus the kernels' constants plus the measured
  transient peak, median over traced steps); once for the graph as ingested (initializers
  included, as the product simulates it) and once for the ops a training step runs (the
  graph pruned to the fan-in of its train op).

Everything measured depends on how busy the machine is: every check records the 1-minute load
average before and after, and the figures are publishable only from a quiet machine.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

from tf_autoplace import zoo
from tf_autoplace.cost import AnalyticalCostModel
from tf_autoplace.cost.profile import ProfileCostModel
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph import ingest
from tf_autoplace.hw.fidelity import GRAPHS, local_cluster, moved_share
from tf_autoplace.hw.isolated import executed_nodes, isolable, time_ops
from tf_autoplace.hw.memory import measure_memory
from tf_autoplace.hw.profiler import profile_ops
from tf_autoplace.hw.runner import WARMUP_STEPS, PlacedSession, RunConfig, time_rounds
from tf_autoplace.hw.workload import Workload
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.placers import get_placer

COMPONENTS = ("ops", "transfers", "concurrency", "memory")


@dataclasses.dataclass(frozen=True)
class Config:
    """How the components are checked (module docstring).

    Attributes:
      num_logical_cpus: logical CPU devices of the local cluster (>= 2: transfers,
        concurrency and memory are checked between two of them).
      rounds: timed rounds of every interleaved measurement (steps per placement, pairs of
        steps per isolated op, rounds of the process check).
      warmup_steps: untimed steps of every Session first.
      profile: how op times are profiled (``trace_steps`` traced steps).
      op_types, ops_per_type: which ops are timed on their own.
      transfer_hops, transfer_counts, transfer_bytes: the chain of the transfer check.
      chain_ops, matrix_size: the matrix-product chains of the concurrency check.
      contention_work: loop iterations of one process in the process check.
      memory_random: random placements per graph in the memory check (besides one device
        alone and colocation groups moved with probability 0.2 and 0.5).
      memory_steps: traced steps per placement in the memory check.
      seed: placements and round order.
    """

    num_logical_cpus: int = 2
    rounds: int = 15
    warmup_steps: int = WARMUP_STEPS
    profile: RunConfig = RunConfig(steps=10, trace_steps=10)
    op_types: int = 12
    ops_per_type: int = 3
    transfer_hops: int = 32
    transfer_counts: tuple[int, ...] = (0, 1, 4, 8, 16, 32)
    transfer_bytes: int = 4096
    chain_ops: int = 8
    matrix_size: int = 256
    contention_work: int = 20_000_000
    memory_random: int = 2
    memory_steps: int = 5
    seed: int = 0

    def __post_init__(self):
        for field, low in (("num_logical_cpus", 2), ("rounds", 3), ("warmup_steps", 0),
                           ("op_types", 1), ("ops_per_type", 1), ("transfer_hops", 1),
                           ("transfer_bytes", 4), ("chain_ops", 1), ("matrix_size", 1),
                           ("contention_work", 1), ("memory_random", 0),
                           ("memory_steps", 1)):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{field} must be an int >= {low}, got {value!r}")
        counts = self.transfer_counts
        if (len({k for k in counts if k > 0}) < 2
                or any(not isinstance(k, int) or not 0 <= k <= self.transfer_hops
                       for k in counts)):
            raise ConfigError(f"transfer_counts must hold ints in [0, transfer_hops="
                              f"{self.transfer_hops}], at least two distinct ones > 0, got "
                              f"{counts!r}")


def load() -> float:
    """The 1-minute load average."""
    return float(os.getloadavg()[0])


# ================================================================== arithmetic of the tables
def ratio_stats(values, reference) -> tuple[float, float, float, int]:
    """``(median, min, max, count)`` of ``values / reference`` over the pairs whose reference
    is positive (NaN and 0 when there is none)."""
    v, r = np.asarray(values, np.float64), np.asarray(reference, np.float64)
    if v.shape != r.shape:
        raise ConfigError(f"ratio_stats needs samples of one shape, got {v.shape} and {r.shape}")
    keep = r > 0
    if not keep.any():
        return float("nan"), float("nan"), float("nan"), 0
    ratio = v[keep] / r[keep]
    return float(np.median(ratio)), float(ratio.min()), float(ratio.max()), int(keep.sum())


def slope(x, y) -> float:
    """The least-squares slope of ``y`` over ``x`` (at least two distinct ``x``)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.shape != y.shape or len(np.unique(x)) < 2:
        raise ConfigError(f"a slope needs at least two distinct x of as many y, got {x.tolist()}")
    return float(np.polyfit(x, y, 1)[0])


def relative_errors(predicted, measured) -> np.ndarray:
    """``predicted / measured - 1`` where ``measured > 0`` (NaN elsewhere)."""
    p, m = np.asarray(predicted, np.float64), np.asarray(measured, np.float64)
    out = np.full(p.shape, np.nan)
    np.divide(p, m, out=out, where=m > 0)
    return out - 1.0


def error_summary(predicted, measured, within: float = 0.2) -> tuple[float, float, float, int]:
    """``(median |error|, max |error|, share of |error| <= within, count)`` of
    :func:`relative_errors` over the pairs with a measured value."""
    errors = np.abs(relative_errors(predicted, measured))
    errors = errors[np.isfinite(errors)]
    if not len(errors):
        return float("nan"), float("nan"), float("nan"), 0
    return (float(np.median(errors)), float(errors.max()), float(np.mean(errors <= within)),
            len(errors))


# ======================================================================= interleaved timing
def _measure(workloads_and_assignments, config: Config, *, grappler: bool = True):
    """(wall, cpu) medians per entry of ``[(workload, assignment), ...]``, interleaved."""
    run_config = RunConfig(steps=1, warmup_steps=config.warmup_steps, grappler=grappler)
    sessions = []
    try:
        for workload, assignment in workloads_and_assignments:
            sessions.append(PlacedSession(workload, assignment, run_config))
        wall, cpu = time_rounds(sessions, dataclasses.replace(run_config, steps=config.rounds),
                                np.random.default_rng(config.seed))
    finally:
        for placed in sessions:
            placed.close()
    return np.median(wall, axis=1), np.median(cpu, axis=1)


def _names(cluster, devices) -> list[str]:
    return [cluster.names[d] for d in np.asarray(devices).tolist()]


# =============================================================================== op times
@dataclasses.dataclass(frozen=True)
class OpTypeRow:
    """One op type of one graph in the op-time check.

    Attributes:
      graph, op_type: where; kernel: the executed kernel's type (after Grappler) of its
        longest sampled op.
      ran: ops of the type that ran as kernels of their own; share: their share of the
        profiled step (sum of op times).
      isolated_us: [k] isolated time of each sampled op (us); analytical_us, profiled_us: [k]
        their analytical and profiled times.
    """

    graph: str
    op_type: str
    kernel: str
    ran: int
    share: float
    isolated_us: tuple[float, ...]
    analytical_us: tuple[float, ...]
    profiled_us: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class OpCheck:
    graph: str
    rows: tuple[OpTypeRow, ...]
    profiled_step_s: float
    untraced_step_s: float
    load: tuple[float, float]


def check_op_times(name: str, config: Config, log=None) -> OpCheck:
    """The op-time check of graph ``name`` (module docstring)."""
    log = log or (lambda message: None)
    model_name, knobs = GRAPHS[name]
    model = zoo.build(model_name, **knobs)
    workload = Workload.from_model(model, seed=config.seed)
    meta_graph = ingest.load_meta_graph(model.graph)
    before = load()
    problem, _ = build_problem(meta_graph, local_cluster(config.num_logical_cpus),
                               cost_model=AnalyticalCostModel(meta_graph))
    analytical = dict(zip(problem.graph.names, problem.op_time[:, 0].tolist()))
    profile = profile_ops(workload, kinds=("CPU",), config=config.profile)
    profiled = {op.name: op.compute_time_us * 1e-6 for op in profile.op}
    op_type = {n.name: n.op for n in workload.graph_def.node}
    executed = executed_nodes(workload)
    totals: dict[str, float] = {}
    ran: dict[str, int] = {}
    for op, seconds in profiled.items():
        if seconds > 0:
            totals[op_type[op]] = totals.get(op_type[op], 0.0) + seconds
            ran[op_type[op]] = ran.get(op_type[op], 0) + 1
    step = sum(totals.values())
    chosen: dict[str, list[str]] = {}
    for typ in sorted(totals, key=lambda t: -totals[t]):
        ops = sorted((op for op, s in profiled.items() if s > 0 and op_type[op] == typ
                      and op in executed and isolable(executed[op], model.graph)),
                     key=lambda op: -profiled[op])[:config.ops_per_type]
        if ops:
            chosen[typ] = ops
        if len(chosen) == config.op_types:
            break
    log(f"  {name}: timing {sum(map(len, chosen.values()))} ops of {len(chosen)} types on "
        "their own")
    isolated = time_ops(workload, [executed[op] for ops in chosen.values() for op in ops],
                        rounds=config.rounds, expected_s=profiled, log=log)
    rows = []
    for typ, ops in chosen.items():
        ops = [op for op in ops if op in isolated]
        if not ops:
            continue
        rows.append(OpTypeRow(
            graph=name, op_type=typ, kernel=executed[ops[0]].op, ran=ran[typ],
            share=totals[typ] / step if step > 0 else float("nan"),
            isolated_us=tuple(isolated[op] * 1e6 for op in ops),
            analytical_us=tuple(analytical[op] * 1e6 for op in ops),
            profiled_us=tuple(profiled[op] * 1e6 for op in ops)))
    untraced, _ = _measure([(workload, None)], config)
    return OpCheck(graph=name, rows=tuple(rows), profiled_step_s=step,
                   untraced_step_s=float(untraced[0]), load=(before, load()))


# ============================================================================== transfers
@dataclasses.dataclass(frozen=True)
class TransferCheck:
    """Attributes:
      counts: [K] cross-device edges of each placement of the chain.
      measured_s, measured_cpu_s: [K] median step time and process CPU time per step.
      simulated_s, simulated_core_s: [K] simulated step time and simulated core work (ops
        and transfers).
      nbytes: bytes of the tensor sent.
      load: before and after.
    """

    counts: tuple[int, ...]
    measured_s: tuple[float, ...]
    measured_cpu_s: tuple[float, ...]
    simulated_s: tuple[float, ...]
    simulated_core_s: tuple[float, ...]
    nbytes: int
    load: tuple[float, float]

    def _series(self):
        return (("measured", self.measured_s), ("measured_cpu", self.measured_cpu_s),
                ("simulated", self.simulated_s), ("simulated_core", self.simulated_core_s))

    @property
    def per_transfer(self) -> dict[str, float]:
        """Seconds each transfer adds (the slope over the placements that cross at least
        once): measured step and CPU, simulated step and core work."""
        counts = np.asarray(self.counts)
        some = counts > 0
        return {key: slope(counts[some], np.asarray(values)[some])
                for key, values in self._series()}

    @property
    def split_cost(self) -> dict[str, float]:
        """Seconds a step pays for being split at all: the line through the placements that
        cross, at no crossing, minus the placement that does not cross (0 when every
        placement crosses), per series as :attr:`per_transfer`."""
        counts = np.asarray(self.counts)
        some = counts > 0
        if some.all():
            return {key: 0.0 for key, _ in self._series()}
        out = {}
        for key, values in self._series():
            values = np.asarray(values)
            line = np.polyfit(counts[some], values[some], 1)
            out[key] = float(line[1] - np.median(values[~some]))
        return out


def transfer_chain(hops: int, nbytes: int) -> tf.Graph:
    """A variable of ``nbytes`` read and passed through ``hops`` identities ``hop0`` ...,
    the last one assigned to another variable (``result``, so that the chain is work the step
    must do); the step is ``train``."""
    graph = tf.Graph()
    with graph.as_default():
        shape = [max(nbytes // 4, 1)]
        x = tf.Variable(tf.zeros(shape), name="value").read_value()
        for k in range(hops):
            x = tf.identity(x, name=f"hop{k}")
        result = tf.Variable(tf.zeros(shape), name="result")
        tf.group(result.assign(x, name="result/assign"), name="train")
        tf.compat.v1.global_variables_initializer()
    return graph


def chain_devices(names, hops: int, crossings: int) -> np.ndarray:
    """[n] device per op of :func:`transfer_chain`'s ``names``: the variable and the first
    ``hops - crossings`` identities on device 0, the rest alternately on 1 and 0 from there, so
    that exactly ``crossings`` edges cross; ``result``, its assignment and ``train`` with the
    last identity (the step's ops; initializers are not part of a step)."""
    def device(k: int) -> int:
        return 0 if k < hops - crossings else (k - (hops - crossings) + 1) % 2
    last = device(hops - 1)
    out = []
    for name in names:
        if name.startswith("hop") and name[3:].isdigit():
            out.append(device(int(name[3:])))
        else:
            out.append(last if name == "train" or name.startswith("result") else 0)
    return np.asarray(out, np.int32)


def check_transfers(config: Config, log=None) -> TransferCheck:
    """The transfer check (module docstring)."""
    log = log or (lambda message: None)
    graph = transfer_chain(config.transfer_hops, config.transfer_bytes)
    workload = Workload.from_graph(graph, fetches=["train"])
    cluster = local_cluster(config.num_logical_cpus)
    problem, _ = build_problem(ingest.load_meta_graph(step_graph_def(workload)), cluster)
    placements = [chain_devices(problem.graph.names, config.transfer_hops, k)
                  for k in config.transfer_counts]
    before = load()
    log(f"  transfers: a chain of {config.transfer_hops} hops, "
        f"{list(config.transfer_counts)} crossing")
    wall, cpu = _measure([(workload, dict(zip(problem.graph.names, _names(cluster, p))))
                          for p in placements], config, grappler=False)
    simulated, core = [], []
    for p in placements:
        result = problem.simulator.run(p)
        simulated.append(result.makespan)
        core.append(float(result.busy.sum() + np.sum(result.transfer_end - result.transfer_start)))
    return TransferCheck(counts=tuple(config.transfer_counts), measured_s=tuple(wall.tolist()),
                         measured_cpu_s=tuple(cpu.tolist()), simulated_s=tuple(simulated),
                         simulated_core_s=tuple(core), nbytes=config.transfer_bytes,
                         load=(before, load()))


# ============================================================================ concurrency
@dataclasses.dataclass(frozen=True)
class ConcurrencyCheck:
    """Attributes:
      labels: [3] the cases (one chain, two chains on one device, one chain per device).
      measured_s, simulated_s: [3] median measured and simulated step times.
      alone_s, paired_s: median seconds of the CPU-bound process alone and of each of two
        pinned to different cores at once.
      cores: the cores of the local cluster's core group (what the simulator assumes).
      load: before and after.
    """

    labels: tuple[str, ...]
    measured_s: tuple[float, ...]
    simulated_s: tuple[float, ...]
    alone_s: float
    paired_s: float
    cores: int
    load: tuple[float, float]


def matmul_chains(chains: int, length: int, size: int) -> tf.Graph:
    """``chains`` independent chains of ``length`` products of a ``size``x``size`` matrix
    (``chain{c}/step{k}``), each reading its own variables and assigning its end to another
    (so that the chain is work the step must do); ``train`` groups the assignments."""
    graph = tf.Graph()
    with graph.as_default():
        ends = []
        for c in range(chains):
            with tf.name_scope(f"chain{c}"):
                w = tf.Variable(tf.eye(size) * 0.5, name="w").read_value()
                x = tf.Variable(tf.ones([size, size]), name="x").read_value()
                for k in range(length):
                    x = tf.matmul(x, w, name=f"step{k}")
                ends.append(tf.Variable(tf.zeros([size, size]), name="end").assign(x))
        tf.group(*ends, name="train")
        tf.compat.v1.global_variables_initializer()
    return graph


_LOOP = ("import os, sys, time\n"
         "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
         "began = time.perf_counter()\n"
         "total = 0\n"
         "for i in range(int(sys.argv[2])):\n"
         "    total += i\n"
         "print(time.perf_counter() - began)\n")


def process_contention(work: int, rounds: int, cpus: tuple[int, int] = (0, 1)
                       ) -> tuple[float, float]:
    """``(alone, paired)``: median seconds of a CPU-bound Python loop of ``work`` iterations
    pinned to ``cpus[0]`` alone, and of each of two such processes pinned to ``cpus[0]`` and
    ``cpus[1]`` at once, in alternating rounds."""
    if not hasattr(os, "sched_setaffinity"):
        raise ConfigError("pinning a process to a core needs os.sched_setaffinity (Linux)")
    available = os.sched_getaffinity(0)
    if not set(cpus) <= available:
        raise ConfigError(f"cores {cpus} are not all available to this process "
                          f"({sorted(available)})")

    def start(cpu: int):
        return subprocess.Popen([sys.executable, "-c", _LOOP, str(cpu), str(work)],
                                stdout=subprocess.PIPE, text=True)

    def seconds(process) -> float:
        out, _ = process.communicate()
        if process.returncode != 0:
            raise ConfigError(f"the contention process failed with code {process.returncode}")
        return float(out.strip())

    alone, paired = [], []
    for _ in range(rounds):
        alone.append(seconds(start(cpus[0])))
        pair = [start(cpus[0]), start(cpus[1])]
        paired += [seconds(p) for p in pair]
    return float(np.median(alone)), float(np.median(paired))


def check_concurrency(config: Config, log=None) -> ConcurrencyCheck:
    """The concurrency check (module docstring)."""
    log = log or (lambda message: None)
    cluster = local_cluster(config.num_logical_cpus)
    # One chain alone is profiled; the second chain's ops are the same ops and get the same
    # times, so that the check sees the simulator's concurrency, not a profile taken while
    # two chains contended.
    one = Workload.from_graph(matmul_chains(1, config.chain_ops, config.matrix_size),
                              fetches=["train"])
    profile = profile_ops(one, kinds=("CPU",), config=config.profile)
    for op in [op for op in profile.op if op.name.startswith("chain0/")]:
        twin = profile.op.add()
        twin.CopyFrom(op)
        twin.name = "chain1/" + op.name[len("chain0/"):]
    built = {}  # chains -> (workload, problem)
    for chains in (1, 2):
        workload = one if chains == 1 else Workload.from_graph(
            matmul_chains(2, config.chain_ops, config.matrix_size), fetches=["train"])
        meta_graph = ingest.load_meta_graph(step_graph_def(workload))
        problem, _ = build_problem(meta_graph, cluster, cost_model=ProfileCostModel.from_proto(
            profile, fallback=AnalyticalCostModel(meta_graph)))
        built[chains] = (workload, problem)
    cases = []
    for label, chains, split in (("one chain, one device", 1, False),
                                 ("two chains, one device", 2, False),
                                 ("two chains, one per device", 2, True)):
        workload, problem = built[chains]
        devices = np.array([1 if split and name.startswith("chain1") else 0
                            for name in problem.graph.names], np.int32)
        cases.append((label, workload, problem, devices))
    before = load()
    log(f"  concurrency: chains of {config.chain_ops} products of {config.matrix_size}^2")
    measured, _ = _measure([(w, dict(zip(p.graph.names, _names(cluster, d))))
                            for _, w, p, d in cases], config)
    simulated = [p.simulator.makespan(d) for _, _, p, d in cases]
    log("  concurrency: one CPU-bound process alone against two on two cores")
    alone, paired = process_contention(config.contention_work, max(3, config.rounds // 3))
    _, cores = cluster.executors()
    return ConcurrencyCheck(labels=tuple(label for label, *_ in cases),
                            measured_s=tuple(measured.tolist()), simulated_s=tuple(simulated),
                            alone_s=alone, paired_s=paired, cores=int(cores[0]),
                            load=(before, load()))


# ================================================================================= memory
@dataclasses.dataclass(frozen=True)
class MemoryRow:
    """One device of one placement in the memory check (bytes).

    Attributes:
      graph, placement, device: where.
      predicted_whole, predicted_step: the simulator's peak for the graph as ingested and for
        the step's ops.
      predicted_profiled: the simulator's peak for the graph as ingested and placed with a
        profile of it (the executed graph: ops that did not run in a step hold no memory).
      variables: the variables placed on the device (counted from their shapes).
      predicted_step_transient: ``predicted_step - variables``.
      measured_transient: median over traced steps of TF's transient peak; measured_range its
        min and max; kernel: the kernels' persistent bytes.
    """

    graph: str
    placement: str
    device: str
    predicted_whole: int
    predicted_step: int
    variables: int
    measured_transient: float
    measured_range: tuple[int, int]
    kernel: int
    predicted_profiled: int = 0

    @property
    def measured(self) -> float:
        return self.variables + self.kernel + self.measured_transient

    @property
    def predicted_step_transient(self) -> int:
        return self.predicted_step - self.variables


@dataclasses.dataclass(frozen=True)
class MemoryCheck:
    graph: str
    rows: tuple[MemoryRow, ...]
    load: tuple[float, float]


def step_graph_def(workload: Workload):
    """The workload's GraphDef pruned to what its fetches run."""
    return tf.compat.v1.graph_util.extract_sub_graph(
        workload.graph_def, sorted({f.lstrip("^").split(":")[0] for f in workload.fetches}))


def check_memory(name: str, config: Config, log=None) -> MemoryCheck:
    """The memory check of graph ``name`` (module docstring)."""
    log = log or (lambda message: None)
    model_name, knobs = GRAPHS[name]
    model = zoo.build(model_name, **knobs)
    workload = Workload.from_model(model, seed=config.seed)
    cluster = local_cluster(config.num_logical_cpus)
    whole, _ = build_problem(ingest.load_meta_graph(model.graph), cluster)
    step, _ = build_problem(ingest.load_meta_graph(step_graph_def(workload)), cluster)
    meta_graph = ingest.load_meta_graph(model.graph)
    profiled, _ = build_problem(meta_graph, cluster, cost_model=ProfileCostModel.from_proto(
        profile_ops(workload, config=config.profile, partners=False),
        fallback=AnalyticalCostModel(meta_graph)))
    in_step = np.array([whole.graph.index(op) for op in step.graph.names])
    rng = np.random.default_rng(config.seed)
    placements = [("one device", np.zeros(whole.graph.num_ops, np.int32)),
                  ("moved 0.2", moved_share(whole, 0.2, rng)),
                  ("moved 0.5", moved_share(whole, 0.5, rng))]
    placements += [(f"random {k}", get_placer("random").propose(whole, seed=config.seed + k))
                   for k in range(config.memory_random)]
    before = load()
    rows = []
    for label, devices in placements:
        log(f"  memory: {name}, {label}")
        steps = measure_memory(workload, dict(zip(whole.graph.names, _names(cluster, devices))),
                               steps=config.memory_steps,
                               config=RunConfig(steps=1, warmup_steps=config.warmup_steps))
        predicted_whole = whole.simulator.run(devices).peak_memory
        predicted_profiled = profiled.simulator.run(devices).peak_memory
        step_devices = devices[in_step]
        predicted_step = step.simulator.run(step_devices).peak_memory
        variables = np.bincount(step_devices, weights=step.graph.persistent_bytes,
                                minlength=cluster.num_devices)
        for d, device in enumerate(cluster.names):
            short = device.split("device:")[-1]
            transient = [s[short].transient_peak_bytes if short in s else 0 for s in steps]
            rows.append(MemoryRow(
                graph=name, placement=label, device=short,
                predicted_whole=int(predicted_whole[d]), predicted_step=int(predicted_step[d]),
                variables=int(variables[d]), measured_transient=float(np.median(transient)),
                measured_range=(int(min(transient)), int(max(transient))),
                kernel=int(steps[0][short].kernel_bytes if short in steps[0] else 0),
                predicted_profiled=int(predicted_profiled[d])))
    return MemoryCheck(graph=name, rows=tuple(rows), load=(before, load()))


# =============================================================================== markdown
def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:.2f}"


def _ratio(stats) -> str:
    median, low, high, count = stats
    return "n/a" if not count else f"{median:.2f} [{low:.2f}, {high:.2f}]"


def _two_places(x: float) -> str:
    """``x`` to two decimals, never ``-0.00``: a fitted line's intercept that is 0 up to float
    rounding (-1e-20) prints as 0."""
    return f"{round(x, 2) + 0.0:.2f}"


def markdown(*, ops=(), transfers=None, concurrency=None, memory=(), header="") -> str:
    """The component tables (module docstring) of the checks given."""
    lines = [header] if header else []
    if ops:
        lines += ["### Op compute time", "",
                  "Per op type: ops timed on their own, untraced (isolated, the reference); "
                  "ratio to it of the analytical (Grappler) estimate and of the profiled "
                  "(traced) time: median [min, max] over the type's timed ops.", "",
                  "| graph | op type (kernel) | ran | share of step | timed | isolated us "
                  "(median) | analytical / isolated | profiled / isolated |",
                  "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |"]
        for check in ops:
            for row in check.rows:
                kernel = "" if row.kernel == row.op_type else f" ({row.kernel})"
                lines.append(
                    f"| {row.graph} | {row.op_type}{kernel} | {row.ran} | {row.share:.1%} | "
                    f"{len(row.isolated_us)} | {np.median(row.isolated_us):.1f} | "
                    f"{_ratio(ratio_stats(row.analytical_us, row.isolated_us))} | "
                    f"{_ratio(ratio_stats(row.profiled_us, row.isolated_us))} |")
        lines += ["", "| graph | load | timed ops | sum analytical / sum isolated | sum profiled "
                  "/ sum isolated | per-op analytical / isolated | per-op profiled / isolated |"
                  " profiled step (sum) | untraced step |",
                  "| --- | --- | ---: | ---: | ---: | --- | --- | ---: | ---: |"]
        for check in ops:
            iso = np.concatenate([r.isolated_us for r in check.rows]) if check.rows else []
            ana = np.concatenate([r.analytical_us for r in check.rows]) if check.rows else []
            pro = np.concatenate([r.profiled_us for r in check.rows]) if check.rows else []
            total = np.sum(iso)
            lines.append(
                f"| {check.graph} | {check.load[0]:.2f} -> {check.load[1]:.2f} | {len(iso)} | "
                f"{np.sum(ana) / total:.2f} | {np.sum(pro) / total:.2f} | "
                f"{_ratio(ratio_stats(ana, iso))} | {_ratio(ratio_stats(pro, iso))} | "
                f"{check.profiled_step_s * 1e3:.2f} ms | {check.untraced_step_s * 1e3:.2f} ms |")
        lines.append("")
    if transfers is not None:
        per = transfers.per_transfer
        lines += ["### Cross-device transfers (two logical CPUs)", "",
                  f"A chain of identities on a {transfers.nbytes}-byte tensor, k of its edges "
                  "crossing devices (Grappler off); per transfer: the slope over the "
                  "placements that cross; of being split: that line at 0 crossings minus the "
                  "placement that does not cross; load "
                  f"{transfers.load[0]:.2f} -> {transfers.load[1]:.2f}.", "",
                  "| crossing edges | measured step ms | measured CPU ms | simulated step ms | "
                  "simulated core ms |", "| ---: | ---: | ---: | ---: | ---: |"]
        for k, m, c, s, sc in zip(transfers.counts, transfers.measured_s,
                                  transfers.measured_cpu_s, transfers.simulated_s,
                                  transfers.simulated_core_s):
            lines.append(f"| {k} | {m * 1e3:.3f} | {c * 1e3:.3f} | {s * 1e3:.3f} | "
                         f"{sc * 1e3:.3f} |")
        lines += ["", "| per transfer | measured | simulated | simulated / measured |",
                  "| --- | ---: | ---: | ---: |"]
        split = transfers.split_cost
        for what, measured, simulated in (
                ("step time added", per["measured"], per["simulated"]),
                ("CPU work on the shared cores", per["measured_cpu"], per["simulated_core"]),
                ("step time of being split at all", split["measured"], split["simulated"]),
                ("CPU work of being split at all", split["measured_cpu"],
                 split["simulated_core"])):
            over = _two_places(simulated / measured) if measured > 0 else "n/a"
            lines.append(f"| {what} | {_two_places(measured * 1e6)} us | "
                         f"{_two_places(simulated * 1e6)} us | {over} |")
        lines.append("")
    if concurrency is not None:
        c = concurrency
        base_m, base_s = c.measured_s[0], c.simulated_s[0]
        lines += ["### Concurrency (cores shared by devices)", "",
                  f"Load {c.load[0]:.2f} -> {c.load[1]:.2f}.", "",
                  "| case | measured ms | simulated ms | measured / first | simulated / first |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for label, m, s in zip(c.labels, c.measured_s, c.simulated_s):
            lines.append(f"| {label} | {m * 1e3:.2f} | {s * 1e3:.2f} | {m / base_m:.2f} | "
                         f"{s / base_s:.2f} |")
        lines += ["", "| CPU-bound processes | seconds each | slowdown | work of the cores "
                  "| simulator assumes |", "| --- | ---: | ---: | ---: | ---: |",
                  f"| one alone | {c.alone_s:.3f} | 1.00 | 1.00 | 1.00 |",
                  f"| two, one per core | {c.paired_s:.3f} | {c.paired_s / c.alone_s:.2f} | "
                  f"{2 * c.alone_s / c.paired_s:.2f} | {float(c.cores):.2f} |", ""]
    if memory:
        lines += ["### Peak memory per device (two logical CPUs)", "",
                  "Measured = variables (from their shapes) + kernels' constants + TF's "
                  "transient peak (median over traced steps, [min, max]); predicted for the "
                  "graph as ingested (initializers included), for it placed with a profile (the "
                  "ops a step does not run hold no memory), and for the ops of one step.", "",
                  "| graph | load | scope | device-placements | median abs error | max abs "
                  "error | within 20% |", "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
        for check in memory:
            rows = check.rows
            measured = [r.measured for r in rows]
            for scope, predicted in (
                    ("whole graph, total", [r.predicted_whole for r in rows]),
                    ("whole graph with a profile, total", [r.predicted_profiled for r in rows]),
                    ("step, total", [r.predicted_step for r in rows])):
                median, worst, share, count = error_summary(predicted, measured)
                lines.append(f"| {check.graph} | {check.load[0]:.2f} -> {check.load[1]:.2f} | "
                             f"{scope} | {count} | {median:.1%} | {worst:.1%} | {share:.0%} |")
            median, worst, share, count = error_summary(
                [r.predicted_step_transient for r in rows], [r.measured_transient for r in rows])
            lines.append(f"| {check.graph} | {check.load[0]:.2f} -> {check.load[1]:.2f} | "
                         f"step, transient | {count} | {median:.1%} | {worst:.1%} | "
                         f"{share:.0%} |")
        lines += ["", "| graph | placement | device | predicted MB (whole) | predicted MB "
                  "(with a profile) | predicted MB (step) | measured MB | variables MB | "
                  "predicted transient MB | measured transient MB [min, max] |",
                  "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for check in memory:
            for r in check.rows:
                lines.append(
                    f"| {r.graph} | {r.placement} | {r.device} | {_mb(r.predicted_whole)} | "
                    f"{_mb(r.predicted_profiled)} | {_mb(r.predicted_step)} | {_mb(r.measured)} | {_mb(r.variables)} | "
                    f"{_mb(r.predicted_step_transient)} | {_mb(r.measured_transient)} "
                    f"[{_mb(r.measured_range[0])}, {_mb(r.measured_range[1])}] |")
        lines.append("")
    return "\n".join(lines) + "\n"


def run(config: Config, graphs=tuple(GRAPHS), components=COMPONENTS, log=None) -> dict:
    """Run the checks ``components`` (of :data:`COMPONENTS`) on ``graphs``; returns
    ``{"ops": [OpCheck], "transfers": TransferCheck | None, "concurrency": ...,
    "memory": [MemoryCheck]}``."""
    log = log or (lambda message: None)
    unknown = sorted(set(components) - set(COMPONENTS)) + sorted(set(graphs) - set(GRAPHS))
    if unknown:
        raise ConfigError(f"unknown components or graphs {unknown}; components: "
                          f"{list(COMPONENTS)}, graphs: {list(GRAPHS)}")
    out = {"ops": [], "transfers": None, "concurrency": None, "memory": []}
    if "ops" in components:
        out["ops"] = [check_op_times(name, config, log) for name in graphs]
    if "transfers" in components:
        out["transfers"] = check_transfers(config, log)
    if "concurrency" in components:
        out["concurrency"] = check_concurrency(config, log)
    if "memory" in components:
        out["memory"] = [check_memory(name, config, log) for name in graphs]
    return out
