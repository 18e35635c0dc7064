"""Simulator fidelity: does the simulator rank placements as this machine's hardware does?

The library behind ``tf-autoplace fidelity``. For each graph (:data:`GRAPHS`: an Inception-V3
CNN, an LSTM seq2seq and a Transformer of the papers' zoo, and three of the kinds users train,
a Keras CNN with parallel branches, a two-tower model and a wide-and-deep model with large
embedding tables, at sizes whose steps take milliseconds to tens of milliseconds on two cores;
or a user's own GraphDef/MetaGraphDef file, :func:`evaluate_file`), :func:`evaluate_graph`

1. builds the training graph and its problem on the local cluster (``Cluster.local`` with
   ``num_logical_cpus`` logical CPUs, or this machine's GPUs and CPU host), with Grappler's
   analytical costs;
2. collects placements (:func:`collect_placements`): every device alone, colocation groups
   moved off the first device with several probabilities (few to many cross-device edges),
   uniformly random ones, every fast heuristic and the learned placers; identical placements
   count once;
3. profiles the graph's ops on this machine (:func:`tf_autoplace.hw.profiler.profile_ops`)
   and, once per run, the links between its devices
   (:func:`tf_autoplace.hw.transfers.profile_links`, and within a core group the CPU work of
   one Send, :func:`~tf_autoplace.hw.transfers.profile_send_costs`);
4. simulates every placement under each cost variant (:data:`VARIANTS`): the analytical costs
   on the local cluster as ``Cluster.local`` describes it, the profiled costs on the profiled
   cluster, the profiled costs on that cluster with its shared-core groups removed (the
   devices taken as independent, the simulator's model before core groups existed), and the
   problem a profile gives, which is what ``autoplace(..., cost_profile=...)`` places with
   (variant "as placed with a profile": :func:`~tf_autoplace.pipeline.prepare.build_problem`
   with the profile's cost model: the graph TensorFlow executes, the partner times, the op
   times calibrated to the profiled run's measured step) on the profiled cluster whose core
   group has the cores the profiled run used at once
   (:func:`~tf_autoplace.hw.profiler.with_profiled_cores`) and whose latency between the
   logical CPUs is fitted on the graph's own split placements
   (:func:`tf_autoplace.hw.link_fit.fit_latency`, other draws than step 2's), as
   ``tf-autoplace profile`` writes it; and the same problem with the op times calibrated instead to a single-device
   Session measured in the rounds beside the placements (variant "as placed with a profile,
   calibrated in the rounds"). The profile's untraced step is measured minutes before the
   rounds, and this machine's speed moves by a fifth on that scale: the second variant takes
   that drift out of the absolute figures and shows what the cost model itself gets wrong
   (its ranking is the first's). The calibration Session is not one of the placements
   compared;
5. measures every placement under the measurement protocol
   (:func:`tf_autoplace.hw.protocol.measure_placements`: Sessions open together, warm-up, at
   least 15 timed rounds in shuffled order, median with a 95% bootstrap interval, the load
   before and after);
6. reports per variant the Spearman rank correlation between simulated and measured step
   times and the median absolute relative error ``median |sim / measured - 1|``, and how many
   pairs of placements the measurement could tell apart (intervals that do not overlap): a
   ranking is only as meaningful as the pairs it can distinguish.

The machine's 1-minute load average is recorded with each graph's figures, and the tables say
when it was above :data:`~tf_autoplace.hw.protocol.QUIET_LOAD`: such figures are not publishable
(on a 2-core machine another busy process halves the cores a step gets). ``max_load`` makes the
tool wait until the machine is at most that busy before it profiles a graph, and again after
the warm-up before the timed rounds (the load recorded is the rounds': protocol, step 4).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

import numpy as np

from tf_autoplace import zoo
from tf_autoplace.core import registry
from tf_autoplace.core.cluster import Cluster
from tf_autoplace.cost import AnalyticalCostModel
from tf_autoplace.cost.profile import ProfileCostModel
from tf_autoplace.errors import AutoplaceError, ConfigError
from tf_autoplace.graph import ingest
from tf_autoplace.heuristics import HEURISTICS
from tf_autoplace.hw.profiler import profile_ops, with_profiled_cores, with_step
from tf_autoplace.hw.link_fit import fit_core_group, moved_share
from tf_autoplace.hw.protocol import (QUIET_LOAD, StepTimes, check_steps, load_average,
                                      wait_for_quiet)
from tf_autoplace.hw.protocol import measure_placements as protocol_measure
from tf_autoplace.hw.runner import RunConfig
from tf_autoplace.hw.workload import Workload
from tf_autoplace.outputs.progress import note
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.placers import PlacementProblem, get_placer
from tf_autoplace.sim import Simulator

# name -> (zoo model, knobs): small enough that a step takes tens of ms on two cores.
GRAPHS = {
    "cnn": ("inception_v3", {"image_size": 75, "batch": 2, "num_classes": 10}),
    "lstm": ("nmt", {"layers": 2, "length": 8, "batch": 16, "hidden": 128,
                     "embedding_dim": 128, "vocab": 1000}),
    "transformer": ("transformer", {"layers": 2, "length": 32, "batch": 8, "d_model": 128,
                                    "heads": 4, "d_ff": 256, "vocab": 1000}),
    "cnn_branches": ("branches", {}),
    "two_tower": ("two_tower", {}),
    "wide_deep": ("wide_deep", {}),
}
PRODUCT_VARIANT = "as placed with a profile"  # what autoplace(..., cost_profile=) predicts
IN_ROUNDS_VARIANT = "as placed with a profile, calibrated in the rounds"
VARIANTS = ("analytical", "profiled", "profiled, independent devices", PRODUCT_VARIANT,
            IN_ROUNDS_VARIANT)
LEARNED = (*registry.names("search"), *registry.names("learned"))
MOVE_SHARES = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5)


def spearman(x, y) -> float:
    """Spearman's rank correlation of two equal-length samples (ties get their mean rank);
    NaN when either is constant or shorter than 2."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ConfigError(f"spearman needs two 1-D samples of one length, got {x.shape} and "
                          f"{y.shape}")
    if len(x) < 2:
        return float("nan")
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = np.sqrt((rx @ rx) * (ry @ ry))
    return float(rx @ ry / denominator) if denominator > 0 else float("nan")


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing the mean of the ranks they span."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    sorted_values = values[order]
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and sorted_values[j + 1] == sorted_values[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def median_relative_error(simulated, measured) -> float:
    """``median |simulated / measured - 1|``."""
    simulated, measured = np.asarray(simulated, np.float64), np.asarray(measured, np.float64)
    return float(np.median(np.abs(simulated / measured - 1.0)))


@dataclasses.dataclass(frozen=True)
class Config:
    """Attributes:
      num_logical_cpus: logical CPU devices of the local cluster (0: this machine's GPUs and
        its CPU host, as ``Cluster.local()``).
      random_placements: uniformly random placements per graph (seeds 0..k-1); 8, so that a
        graph whose heuristics all agree with one device still has 20 distinct placements.
      learned_samples: simulated placements each learned placer may search.
      run: how each placement is timed (``steps`` rounds after ``warmup_steps``). 30 rounds,
        twice the protocol's least: many placements of one graph differ by less than this
        machine's step-to-step noise, and a ranking of medians is only as good as they are
        (30 steps narrow a median's interval by about 1.4x against 15).
      profile: how the ops are profiled (``trace_steps`` traced steps).
      interleave: placements whose Sessions are open together (the rest run in later
        batches). All of them by default: on a shared machine the load differs from one batch
        to the next, and placements of different batches would be compared across it.
      max_load: wait until the 1-minute load average is at most this before profiling a
        graph and before its timed rounds (None: do not wait).
      seed: placer seed.
      learned: the searching and learned placers whose placements are measured too.
    """

    num_logical_cpus: int = 2
    random_placements: int = 8
    learned_samples: int = 2000
    run: RunConfig = RunConfig(steps=30)
    profile: RunConfig = RunConfig(steps=10, trace_steps=10)
    interleave: int = 64
    max_load: float | None = None
    seed: int = 0
    learned: tuple[str, ...] = LEARNED

    def __post_init__(self):
        if not (isinstance(self.num_logical_cpus, int) and self.num_logical_cpus >= 0):
            raise ConfigError(f"num_logical_cpus must be an int >= 0, got "
                              f"{self.num_logical_cpus!r}")
        for field in ("random_placements", "learned_samples", "interleave"):
            value = getattr(self, field)
            if not (isinstance(value, int) and value >= 1):
                raise ConfigError(f"{field} must be an int >= 1, got {value!r}")
        unknown = sorted(set(self.learned) - set(LEARNED))
        if unknown:
            raise ConfigError(f"learned must name placers among {list(LEARNED)}, got "
                              f"{unknown}")
        check_steps(self.run.steps, "the fidelity run's steps")
        if self.max_load is not None and not self.max_load > 0:
            raise ConfigError(f"max_load must be None or > 0, got {self.max_load!r}")


@dataclasses.dataclass(frozen=True)
class GraphResult:
    """One graph's figures. ``P`` placements.

    Attributes:
      graph: the name in :data:`GRAPHS`; num_ops: its size.
      labels: [P] where each placement came from.
      transfers: [P] cross-device transfers in its analytical simulation.
      measured_s: [P] median measured step time.
      simulated_s: variant -> [P] simulated step time.
      load: 1-minute load average before and after the measurements.
      profile_note: the profile's description.
      measured_low_s / measured_high_s: [P] the medians' 95% bootstrap intervals.
      distinguishable: (pairs of placements whose intervals do not overlap, all pairs).
      steps: timed rounds per placement.
      profile_step_s: the profile's untraced single-device step (what the op times were
        calibrated to; 0 when unknown).
      rounds_step_s: the single-device step of the calibration Session measured in the
        rounds (0 when unknown).
      link_fit: the fit of the latency between the logical CPUs on the graph (its summary).
      other_cores: cores other processes kept busy during the rounds
        (:class:`~tf_autoplace.hw.protocol.OtherCores`; NaN when unknown). The load average
        counts the measurement's own threads as well.
    """

    graph: str
    num_ops: int
    labels: tuple[str, ...]
    transfers: tuple[int, ...]
    measured_s: tuple[float, ...]
    simulated_s: dict
    load: tuple[float, float]
    profile_note: str = ""
    measured_low_s: tuple[float, ...] = ()
    measured_high_s: tuple[float, ...] = ()
    distinguishable: tuple[int, int] = (0, 0)
    steps: int = 0
    profile_step_s: float = 0.0
    rounds_step_s: float = 0.0
    other_cores: float = math.nan
    link_fit: str = ""

    @property
    def quiet(self) -> bool:
        """Whether the load stayed at or below the protocol's quiet load."""
        return max(self.load) <= QUIET_LOAD

    def spearman(self, variant: str) -> float:
        return spearman(self.simulated_s[variant], self.measured_s)

    def relative_error(self, variant: str) -> float:
        return median_relative_error(self.simulated_s[variant], self.measured_s)

    def drift(self) -> float | None:
        """The single-device step measured in the rounds over the profile's (the placement
        the profile ran): how far this machine moved between the profile and the
        measurements, which shifts every prediction calibrated to the profile alike and which
        no cost model can remove. None when either is unknown."""
        if not (self.profile_step_s > 0 and self.rounds_step_s > 0):
            return None
        return self.rounds_step_s / self.profile_step_s


def local_cluster(num_logical_cpus: int) -> Cluster:
    return Cluster.local(num_logical_cpus=num_logical_cpus)


def collect_placements(problem: PlacementProblem, config: Config,
                       log=None) -> list[tuple[str, np.ndarray]]:
    """Distinct placements of ``problem`` and where each came from (module docstring)."""
    log = log or (lambda message: None)
    rng = np.random.default_rng(config.seed)
    candidates = [(f"single {d}", np.full(problem.graph.num_ops, d, np.int32))
                  for d in range(problem.cluster.num_devices)
                  if problem.allowed[:, d].all()]
    candidates += [(f"moved {share:g}", moved_share(problem, share, rng))
                   for share in MOVE_SHARES]
    candidates += [(f"random {k}", get_placer("random").propose(problem, seed=k))
                   for k in range(config.random_placements)]
    for name in sorted(HEURISTICS):
        if name == "random":
            continue
        try:
            candidates.append((name, get_placer(name).propose(problem, seed=config.seed)))
        except AutoplaceError as e:
            log(f"  {name}: {e}")
    for name in config.learned:
        began = time.perf_counter()
        try:
            placer = get_placer(name)
            if hasattr(placer, "config") and hasattr(placer.config, "max_samples"):
                placer = type(placer)(max_samples=config.learned_samples)
            candidates.append((name, placer.propose(problem, seed=config.seed)))
        except AutoplaceError as e:
            log(f"  {name}: {e}")
        log(f"  {name} placed in {time.perf_counter() - began:.0f} s")
    return distinct(candidates)


def distinct(candidates, out=None) -> list[tuple[str, np.ndarray]]:
    """``(label, devices)`` pairs with identical placements counted once, under their labels
    joined by " = " (``"single 0 = m_etf"``), in first-seen order; appended to ``out`` when
    given (a list of such pairs already distinct)."""
    out = [] if out is None else out
    for label, devices in candidates:
        same = next((k for k, (_, kept) in enumerate(out) if np.array_equal(kept, devices)),
                    None)
        if same is None:
            out.append((label, devices))
        else:
            out[same] = (f"{out[same][0]} = {label}", out[same][1])
    return out


def measure_placements(workload: Workload, problem: PlacementProblem, placements,
                       config: Config, log=None
                       ) -> tuple[list[StepTimes], float, tuple[float, float]]:
    """Each placement of ``problem`` measured under the protocol (batches of
    ``config.interleave`` Sessions, each batch in its own interleaved rounds, its timed rounds
    started once the load is at most ``config.max_load``), the most cores other processes
    kept busy during a batch's timed rounds, and the highest load before and after them."""
    names, ops = problem.cluster.names, problem.graph.names
    out, other_cores, before, after = [], 0.0, 0.0, 0.0
    for start in range(0, len(placements), config.interleave):
        batch = placements[start:start + config.interleave]
        assignments = {str(start + k): dict(zip(ops, (names[d] for d in devices.tolist())))
                       for k, devices in enumerate(batch)}
        result = protocol_measure(workload, assignments, steps=config.run.steps,
                                  warmup_steps=config.run.warmup_steps, config=config.run,
                                  seed=config.seed + start, max_load=config.max_load, log=log)
        out += list(result.placements)
        other_cores = max(other_cores, result.other_cores)
        before, after = max(before, result.load_before), max(after, result.load_after)
    return out, other_cores, (before, after)


def evaluate_graph(name: str, config: Config, profiled_cluster: Cluster,
                   log=None) -> GraphResult:
    """The figures of graph ``name`` of :data:`GRAPHS` (module docstring);
    ``profiled_cluster`` is the local cluster with measured links
    (:func:`tf_autoplace.hw.transfers.profile_links` and
    :func:`~tf_autoplace.hw.transfers.profile_send_costs`)."""
    if name not in GRAPHS:
        raise ConfigError(f"unknown graph {name!r}; known: {sorted(GRAPHS)}")
    model_name, knobs = GRAPHS[name]
    model = zoo.build(model_name, **knobs)
    return evaluate(name, ingest.load_meta_graph(model.graph),
                    Workload.from_model(model, seed=config.seed), config, profiled_cluster,
                    log=log, description=f"{model_name} {knobs}")


def evaluate_file(path: str, config: Config, profiled_cluster: Cluster, *, feeds=None,
                  log=None) -> GraphResult:
    """The figures of a user's training graph, a GraphDef or MetaGraphDef file (binary or
    text): one step runs its train op (:class:`~tf_autoplace.hw.workload.Workload` finds it,
    and makes up a value for every placeholder it needs unless ``feeds`` gives one)."""
    source, _ = ingest.read_graph_file(path)
    meta_graph = ingest.load_meta_graph(source)
    return evaluate(os.path.basename(os.fspath(path)), meta_graph,
                    Workload.from_graph(meta_graph, feeds=feeds, seed=config.seed), config,
                    profiled_cluster, log=log, description=os.fspath(path))


def evaluate(name: str, meta_graph, workload: Workload, config: Config,
             profiled_cluster: Cluster, *, log=None, description: str = "") -> GraphResult:
    """The figures of one training graph (module docstring)."""
    log = log or (lambda message: None)
    cluster = local_cluster(config.num_logical_cpus)
    analytical = AnalyticalCostModel(meta_graph)
    problem, _ = build_problem(meta_graph, cluster, cost_model=analytical)
    log(f"{name}: {description}, {problem.graph.num_ops} ops; collecting placements")
    placements = collect_placements(problem, config, log)
    labels = [label for label, _ in placements]
    devices = [d for _, d in placements]
    log(f"  {len(placements)} distinct placements")

    wait_for_quiet(config.max_load, log)
    log(f"  profiling at load {load_average():.2f}")
    profile = profile_ops(workload, config=config.profile, description=f"{name} {description}")
    profiled = ProfileCostModel.from_proto(profile, fallback=analytical)
    log(f"  profiled: {profile.description}")
    # As tf-autoplace profile --out_cluster writes the cluster: cores as the profile ran, and
    # the latency between the logical CPUs fitted on this graph (module docstring).
    executed_cluster, _ = with_profiled_cores(profiled_cluster, profile)
    executed_cluster, link_fit = fit_core_group(executed_cluster, profile, meta_graph, workload,
                                                config=config.run, seed=config.seed + 1)
    if link_fit is not None:
        log(f"  {link_fit.summary()}")
    # One more single-device Session, as the profile ran the graph: the calibration in the
    # rounds (module docstring), not one of the placements compared.
    calibration = np.zeros(problem.graph.num_ops, np.int32)
    (*measured, in_rounds), other_cores, (load_before, load_after) = measure_placements(
        workload, problem, devices + [calibration], config, log)
    if max(load_before, load_after) > QUIET_LOAD:
        log(f"  WARNING: load {load_before:.2f} -> {load_after:.2f} is above {QUIET_LOAD} "
            f"(other processes kept {other_cores:.2f} cores busy during the rounds): "
            "these figures are not publishable as taken on a quiet machine")
    pairs = sum(measured[i].distinguishable(measured[j]) for i in range(len(measured))
                for j in range(i + 1, len(measured)))

    independent = profiled_cluster.independent()
    simulators = {
        "analytical": problem.simulator,
        "profiled": Simulator(problem.graph, profiled_cluster,
                              profiled.op_time(problem.graph, profiled_cluster)),
        "profiled, independent devices": Simulator(
            problem.graph, independent, profiled.op_time(problem.graph, independent)),
    }
    simulators[PRODUCT_VARIANT] = build_problem(
        meta_graph, executed_cluster, cost_model=profiled)[0].simulator
    simulators[IN_ROUNDS_VARIANT] = build_problem(
        meta_graph, executed_cluster, cost_model=ProfileCostModel.from_proto(
            with_step(profile, "CPU", in_rounds.median_s), fallback=analytical))[0].simulator
    simulated = {variant: tuple(float(sim.makespan(d)) for d in devices)
                 for variant, sim in simulators.items()}
    transfers = tuple(problem.simulator.run(d).num_transfers for d in devices)
    return GraphResult(graph=name, num_ops=problem.graph.num_ops, labels=tuple(labels),
                       transfers=transfers, measured_s=tuple(m.median_s for m in measured),
                       simulated_s=simulated, load=(load_before, load_after),
                       profile_note=profile.description,
                       measured_low_s=tuple(m.low_s for m in measured),
                       measured_high_s=tuple(m.high_s for m in measured),
                       distinguishable=(pairs, len(measured) * (len(measured) - 1) // 2),
                       steps=config.run.steps,
                       profile_step_s=profiled.measured_steps().get("CPU", 0.0),
                       rounds_step_s=in_rounds.median_s, other_cores=other_cores,
                       link_fit=link_fit.summary() if link_fit is not None else "")



def markdown(results: list[GraphResult], *, title: str) -> str:
    """A summary table (per graph and variant) and one table of placements per graph."""
    lines = [f"## {title}", "",
             "| graph | ops | placements | distinguishable pairs | load (1 min) | "
             "other processes (cores) | variant | Spearman | median abs rel error |",
             "| --- | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: |"]
    for r in results:
        for variant in VARIANTS:
            lines.append(f"| {r.graph} | {r.num_ops} | {len(r.labels)} | "
                         f"{r.distinguishable[0]} / {r.distinguishable[1]} | "
                         f"{r.load[0]:.2f} -> {r.load[1]:.2f}{'' if r.quiet else ' (busy)'} | "
                         f"{r.other_cores:.2f} | {variant} | {r.spearman(variant):.3f} | "
                         f"{r.relative_error(variant):.3f} |")
    busy = [r.graph for r in results if not r.quiet]
    if busy:
        lines += ["", f"**Not publishable as quiet**: the 1-minute load was above {QUIET_LOAD} "
                  f"while {', '.join(busy)} {'was' if len(busy) == 1 else 'were'} measured. "
                  "The load average counts the measurement's own threads; the column \"other "
                  "processes\" is the cores the rest of the machine kept busy meanwhile."]
    for r in results:
        lines += ["", f"### {r.graph} ({r.num_ops} ops)", "", f"Profile: {r.profile_note}", "",
                  *([f"The {r.link_fit}.", ""] if r.link_fit else []),
                  "Spearman of cross-device transfers (analytical simulation) and measured "
                  f"step time: {spearman(r.transfers, r.measured_s):.3f}", "",
                  *_drift_lines(r),
                  f"| placement | transfers | measured ms (median of {r.steps} [95% interval]) | "
                  + " | ".join(f"{v} ms" for v in VARIANTS) + " |",
                  "| --- | ---: | ---: | " + " | ".join("---:" for _ in VARIANTS) + " |"]
        for k in np.argsort(r.measured_s).tolist():
            interval = (f" [{r.measured_low_s[k] * 1e3:.2f}, {r.measured_high_s[k] * 1e3:.2f}]"
                        if r.measured_low_s else "")
            lines.append(f"| {r.labels[k]} | {r.transfers[k]} | "
                         f"{r.measured_s[k] * 1e3:.2f}{interval} | "
                         + " | ".join(f"{r.simulated_s[v][k] * 1e3:.2f}" for v in VARIANTS)
                         + " |")
    return "\n".join(lines) + "\n"


def _drift_lines(result: GraphResult) -> list[str]:
    drift = result.drift()
    if drift is None:
        return []
    return [f"The profile's single-device step (the calibration point) was "
            f"{result.profile_step_s * 1e3:.2f} ms; a single-device Session in the rounds "
            f"measured {result.rounds_step_s * 1e3:.2f} ms ({drift:.2f}x): the machine's speed "
            "moved between the two, and every prediction calibrated to the profile moves "
            f"with it (the variant \"{IN_ROUNDS_VARIANT}\" is calibrated to the second).", ""]


def progress(message: str) -> None:
    """A line of the fidelity tool's progress."""
    note("fidelity", message)
