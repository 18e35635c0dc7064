"""The cost of a transfer, fitted on the user's graph.

:mod:`tf_autoplace.hw.transfers` times transfers on graphs of their own: chains of copies
between two devices (one tensor at a time, the devices otherwise idle) and, for devices that
share cores, a ladder of small ops whose Sends are the only difference between placements. In a
training step the tensors cross while both sides compute: between TensorFlow server processes
the gRPC work of each transfer takes cores from the ops, and whole graphs split over two local
servers paid several times the chains' latency per transfer; between logical CPUs of one
process, a step that has settled (:func:`tf_autoplace.hw.runner.warm_up`) hides most of a
Send's work behind the ops, and the ladder's figure charged the splits of small graphs too much.

So :func:`fit_latency` fits one latency for a set of device pairs on the graph itself (and,
between the tasks of a TensorFlow cluster, a delay beside it: see below):

1. the placement with every op on the reference device and placements that move a growing
   share of the graph's colocation groups off it (:func:`moved_share`, to the devices the
   pairs link it to) are measured together under the protocol
   (:func:`tf_autoplace.hw.protocol.measure_placements`);
2. the simulator, with op times calibrated to the single-device step measured in those rounds
   (so that the fit is about the transfers, not about the machine's speed at profiling time),
   predicts the moved placements for each latency of a log-spaced grid, set on every pair
   fitted (bandwidths are kept);
3. the latency whose median predicted/measured ratio over the moved placements is closest to 1
   is kept (the smallest among equals): the one at which the model prices this graph's
   transfers as the devices ran them. A light split (:data:`LIGHT_SHARE` of the groups
   moved), measured in the same rounds but not fitted, checks the model where a search's
   placements lie; the larger of its error (at the far end of its measured step's 95%
   interval: one placement's median is itself that uncertain) and the fitted placements'
   median error becomes the cluster's ``prediction_error``
   (:attr:`LatencyFit.prediction_error`): one latency cannot price every placement's
   transfers alike, and a split predicted to gain less than that error may run slower, so
   ``auto`` does not apply it
   (:class:`~tf_autoplace.placers.auto.placer.AutoConfig`, ``min_gain``).

With ``task_speeds`` (the pairs between tasks of a TensorFlow cluster), the graph on each other
task is measured in the same rounds too, and that task's devices get the speed the two steps'
ratio says. :func:`~tf_autoplace.hw.cluster_profile.profile_cluster` derives each task's speed
from op times traced on one task after the other, minutes apart, so the machine's drift in
between shows as a difference of speed (even between identical pinned cores), and a search
then moves work to whichever task looks faster. In one set of interleaved rounds the drift
falls on every task alike.

Between tasks a transfer is partly the sending process's gRPC work (on a core its ops need)
and partly a wait that holds no core (the receiving process, the socket), which overlaps with
the other transfers in flight: on a CNN split over two local servers, the step grows by less
per transfer the more transfers a placement has, so one latency on the sender's core that
matches the light placements overpredicts the heavy ones (docs/experiments.md, "Simulator
against this machine: what moved the figures" has the measurements). With
``with_delay`` the fit chooses a pair (latency, :attr:`Cluster.delay
<tf_autoplace.core.cluster.Cluster>`) from a grid of both, the one whose predictions of the
moved placements match the measured steps best: for each delay the latency whose median
predicted/measured ratio is closest to 1 (the rule of one latency), and of those the delay
whose predictions spread least about the measurements (mean squared log ratio). A delay of 0
gives one latency's fit, kept unless a delay prices the light and the heavy placements
better.

:func:`task_pairs` are the pairs of a TensorFlow cluster in different tasks; a latency there
delays the consumer and, between two tasks' CPU devices, occupies a core of the sending task
(a GPU's transfer holds its outgoing bus instead), so a large one makes a step grow with the
number of transfers, as steps split over servers do. :func:`core_group_pairs` are the pairs of
devices sharing cores, where a transfer is executor work that occupies a core for its latency
(:mod:`tf_autoplace.sim.simulator`, "Core groups").
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.cost import AnalyticalCostModel
from tf_autoplace.cost.profile import ProfileCostModel
from tf_autoplace.errors import ConfigError
from tf_autoplace.hw.cluster_profile import ClusterProfile
from tf_autoplace.hw.profiler import with_step
from tf_autoplace.hw.protocol import MIN_STEPS, ProtocolResult, measure_placements
from tf_autoplace.hw.runner import RunConfig, on_cluster
from tf_autoplace.hw.workload import Workload
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.proto import cost_profile_pb2
from tf_autoplace.sim import Simulator

SHARES = (0.05, 0.1, 0.2, 0.35)  # of the colocation groups moved off the reference device
# A light split, measured in the same rounds but not fitted: the error the cluster records.
LIGHT_SHARE = 0.02
LATENCIES_S = tuple(np.geomspace(1e-6, 1e-2, 41).tolist())  # the grid searched
DELAYS_S = (0.0,) + tuple(np.geomspace(1e-6, 1e-2, 21).tolist())  # ... with ``with_delay``
SINGLE = "single"


def _at_home(problem: PlacementProblem, home: int) -> np.ndarray:
    """[C] each colocation group on ``home``, or where it can run (a group with no kernel
    there, or pinned elsewhere: :mod:`tf_autoplace.graph.pins`) on the first device that can
    run it."""
    allowed = problem.colocation_allowed
    return np.where(allowed[:, home], home, np.argmax(allowed, axis=1))


def moved_share(problem: PlacementProblem, share: float, rng: np.random.Generator,
                home: int = 0, targets: np.ndarray | None = None) -> np.ndarray:
    """All on ``home`` (a group that cannot run there: on the first device that can) except TF
    colocation groups moved, each with probability ``share``, to another device that can run
    them (uniformly; only among ``targets``, a [D] bool mask, when given)."""
    allowed = problem.colocation_allowed  # [C, D]
    num = len(allowed)
    device = _at_home(problem, home)
    movable = allowed if targets is None else allowed & np.asarray(targets, bool)
    move = rng.random(num) < share
    for c in np.flatnonzero(move).tolist():
        others = [d for d in np.flatnonzero(movable[c]).tolist() if d != device[c]]
        if others:
            device[c] = others[int(rng.integers(len(others)))]
    return device[problem.graph.colocation].astype(np.int32)


def task_pairs(cluster: Cluster) -> np.ndarray:
    """[D, D] bool: the pairs of devices in different tasks of a TensorFlow cluster."""
    tasks = np.asarray(cluster.device_tasks)
    return tasks[:, None] != tasks[None, :]


def core_group_pairs(cluster: Cluster) -> np.ndarray:
    """[D, D] bool: the pairs of different devices of one core group."""
    groups = np.array([d.core_group for d in cluster.devices])
    same = (groups[:, None] == groups[None, :]) & (groups[:, None] != "")
    return same & ~np.eye(len(groups), dtype=bool)


@dataclasses.dataclass(frozen=True, eq=False)
class LatencyFit:
    """What :func:`fit_latency` measured and chose.

    Attributes:
      what: the pairs fitted, in words ("between tasks", "within a core group").
      latency_s: the fitted latency of every pair fitted (s).
      before_s: the median latency those pairs had before (s).
      labels: the moved placements, in order.
      transfers: [P] their transfers over the fitted pairs and others (simulated).
      measured: the protocol's result (the single-device placement under :data:`SINGLE`, the
        graph on another task under ``"on <task>"``).
      predicted_s: [P] their simulated steps at the fitted latency (s).
      before_predicted_s: [P] the same at the pairs' latency before (s).
      task_speeds: ``(task, speed before, speed measured)`` of each other task whose speed
        was measured (``task_speeds=True``), else empty.
      light: the label of the light split measured beside the fitted ones (``LIGHT_SHARE``
        of the groups moved) and its simulated step at the fitted latency (s); None when that
        share moved no group.
      delay_s: the fitted delay of every pair fitted (s; 0 without ``with_delay``).
      before_delay_s: the median delay those pairs had before (s).
    """

    what: str
    latency_s: float
    before_s: float
    labels: tuple[str, ...]
    transfers: tuple[int, ...]
    measured: ProtocolResult
    predicted_s: tuple[float, ...]
    before_predicted_s: tuple[float, ...]
    task_speeds: tuple[tuple[str, float, float], ...] = ()
    light: tuple[str, float] | None = None
    delay_s: float = 0.0
    before_delay_s: float = 0.0

    def median_error(self, predicted) -> float:
        """Median |predicted/measured - 1| over the moved placements."""
        measured = np.array([self.measured[label].median_s for label in self.labels])
        return float(np.median(np.abs(np.asarray(predicted) / measured - 1.0)))

    @property
    def light_error(self) -> float | None:
        """|predicted/measured - 1| of the light split at the fitted latency (None without)."""
        if self.light is None:
            return None
        label, predicted_s = self.light
        return abs(predicted_s / self.measured[label].median_s - 1.0)

    @property
    def light_error_bound(self) -> float | None:
        """The light split's error at the far end of its measured step's 95% interval: the
        most it may be off that the measurement cannot rule out (None without)."""
        if self.light is None:
            return None
        label, predicted_s = self.light
        step = self.measured[label]
        return max(abs(predicted_s / m - 1.0) for m in (step.low_s, step.median_s, step.high_s))

    @property
    def prediction_error(self) -> float:
        """What the fitted model may be off by where it was measured: the larger of the median
        error over the fitted placements and the light split's :attr:`light_error_bound`. The
        fitted placements move 5-35% of the groups and are what the link figures were chosen
        to match; the placements a search keeps are light splits, which one latency for every
        transfer can price far worse than the heavy splits it matches, and one light split's
        median is itself uncertain by its interval, wide over two local servers
        (docs/experiments.md, "Simulator against this machine: what moved the figures"): a
        split ``auto`` applies must be predicted to gain more than all of that."""
        return max(self.median_error(self.predicted_s), self.light_error_bound or 0.0)

    def summary(self) -> str:
        speeds = "".join(f"; task {task} speed {after:.3f} in the rounds (profile: {before:.3f})"
                         for task, before, after in self.task_speeds)
        light = (f"; a light split ({self.light[0]}) {self.light_error:.1%} off (up to "
                 f"{self.light_error_bound:.1%} within its interval)"
                 if self.light is not None else "")
        delay = (f" + {self.delay_s * 1e6:.1f} us in flight (before: "
                 f"{self.before_delay_s * 1e6:.1f} us)" if self.delay_s or self.before_delay_s
                 else "")
        return (f"links {self.what} fitted on the graph: {self.latency_s * 1e6:.1f} us a "
                f"transfer (before: {self.before_s * 1e6:.1f} us){delay}; median error over "
                f"{len(self.labels)} moved placements {self.median_error(self.predicted_s):.1%} "
                f"(before: {self.median_error(self.before_predicted_s):.1%}){light}{speeds}")


def reference_device(found: ClusterProfile) -> int:
    """The device a profiled TensorFlow cluster's op times were measured on: the reference
    task's first device of a kind the profile has."""
    cluster = found.cluster
    task = [t.name for t in cluster.tasks].index(found.reference)
    kinds = {run.device_kind for run in found.profile.run}
    return next(d for d in np.flatnonzero(cluster.device_tasks == task).tolist()
                if cluster.devices[d].kind in kinds)


def with_latency(cluster: Cluster, pairs: np.ndarray, latency_s: float,
                 delay_s: float | None = None) -> Cluster:
    """``cluster`` with ``latency_s`` (and ``delay_s``, unless None) on every pair of devices
    ``pairs`` ([D, D] bool) marks (the delay not within a core group, whose transfers are
    hand-overs with no flight: tasks sharing cores are one group)."""
    latency = cluster.latency.copy()
    latency[pairs] = latency_s
    if delay_s is None:
        return dataclasses.replace(cluster, latency=latency)
    delay = cluster.delay.copy()
    delay[pairs & ~core_group_pairs(cluster)] = delay_s
    return dataclasses.replace(cluster, latency=latency, delay=delay)


def fit_latency(cluster: Cluster, profile: cost_profile_pb2.CostProfile, meta_graph,
                workload: Workload, *, reference: int, pairs: np.ndarray, what: str,
                shares=SHARES, steps: int = MIN_STEPS, config: RunConfig | None = None,
                seed: int = 0, task_speeds: bool = False,
                with_delay: bool = False) -> tuple[Cluster, LatencyFit]:
    """Fit one latency (and delay) for the device pairs ``pairs`` on ``workload`` (module
    docstring).

    Args:
      cluster: the devices as profiled (links, speeds, core groups); with a ``target``, the
        placements run on its TensorFlow servers, else in this process.
      profile: the op times (measured on ``reference``).
      meta_graph: the graph ``workload`` runs (what the simulator places).
      workload: one training step of it.
      reference: the device every op runs on in the single-device placement.
      pairs: [D, D] bool, the pairs given the fitted latency (:func:`task_pairs`,
        :func:`core_group_pairs`); groups move off ``reference`` to the devices it pairs.
      what: the pairs in words, for the summary.
      shares: the shares of colocation groups moved off ``reference``, one placement each.
      steps: timed rounds of the protocol.
      config: the Sessions' settings (its target is the cluster's).
      seed: draws the moved groups and orders the rounds.
      task_speeds: also measure the graph on each other task ``pairs`` links ``reference`` to
        (its first such device of ``reference``'s kind) and set that task's devices of that
        kind to the speed measured (module docstring).
      with_delay: fit a delay beside the latency (module docstring), set on the pairs not
        within a core group (between tasks that share no cores).

    Returns:
      ``(cluster with the fitted latency on the pairs (and the measured speeds), the fit)``;
      the cluster's ``prediction_error`` is the fit's ``prediction_error`` (what a split's
      predicted gain must exceed for ``auto`` to apply it).

    Raises:
      ConfigError: ``pairs`` links ``reference`` to no device, or no share moved a group.
      MeasurementError: TensorFlow could not run a placement.
    """
    pairs = np.asarray(pairs, dtype=bool)
    if pairs.shape != cluster.latency.shape or not pairs[reference].any():
        raise ConfigError(f"no device pair to fit links on from {cluster.names[reference]}: "
                          f"{what} it has no partner device")
    analytical = AnalyticalCostModel(meta_graph)
    problem, _ = build_problem(meta_graph, cluster, cost_model=ProfileCostModel.from_proto(
        profile, fallback=analytical))
    rng = np.random.default_rng(seed)
    coloc = problem.graph.colocation
    placements = {SINGLE: _at_home(problem, reference)[coloc].astype(np.int32)}
    for share in shares:  # groups move only to the devices the pairs link the reference to
        devices = moved_share(problem, share, rng, home=reference, targets=pairs[reference])
        if (devices != reference).any():
            placements[f"moved {share:g}"] = devices
    if len(placements) < 2:
        raise ConfigError(f"no share of {list(shares)} moved a colocation group off device "
                          f"{cluster.names[reference]}: nothing to fit the links on")
    labels = tuple(placements)[1:]
    # Drawn after the fitted shares, so that those are the same draws with or without it.
    light = moved_share(problem, LIGHT_SHARE, rng, home=reference, targets=pairs[reference])
    light_label = f"moved {LIGHT_SHARE:g}" if (light != reference).any() else None
    if light_label is not None:
        placements[light_label] = light
    kind = cluster.devices[reference].kind
    others = {}  # task index -> its device the whole graph runs on
    if task_speeds:
        for d in np.flatnonzero(pairs[reference]).tolist():
            k = int(cluster.device_tasks[d])
            if cluster.devices[d].kind == kind and k not in others:
                others[k] = d
                placements[f"on {cluster.tasks[k].name}"] = _at_home(problem, d)[coloc].astype(
                    np.int32)
    names, ops = cluster.names, problem.graph.names
    config = on_cluster(cluster, config)
    measured = measure_placements(
        workload, {label: dict(zip(ops, (names[d] for d in devices.tolist())))
                   for label, devices in placements.items()},
        steps=steps, warmup_steps=config.warmup_steps, config=config, seed=seed)
    speeds = []
    if others:
        devices = list(cluster.devices)
        for k, d in others.items():
            name = cluster.tasks[k].name
            speed = (cluster.devices[reference].speed * measured[SINGLE].median_s
                     / measured[f"on {name}"].median_s)
            speeds.append((name, float(cluster.devices[d].speed), float(speed)))
            for e in np.flatnonzero(cluster.device_tasks == k).tolist():
                if devices[e].kind == kind:
                    devices[e] = dataclasses.replace(devices[e], speed=speed)
        cluster = dataclasses.replace(cluster, devices=tuple(devices))
    # Op times calibrated to the single-device step of these rounds: the fit prices transfers.
    calibrated, _ = build_problem(meta_graph, cluster, cost_model=ProfileCostModel.from_proto(
        with_step(profile, kind, measured[SINGLE].median_s), fallback=analytical))
    base = calibrated.simulator
    observed = np.array([measured[label].median_s for label in labels])

    def simulator(latency_s: float, delay_s: float | None = None) -> Simulator:
        return base.with_links(with_latency(base.cluster, pairs, latency_s, delay_s))

    def predict(latency_s: float, delay_s: float | None = None) -> np.ndarray:
        sim = simulator(latency_s, delay_s)
        return np.array([sim.makespan(placements[label]) for label in labels])

    def median_matched(delay_s: float | None) -> tuple[float, np.ndarray]:
        """The latency whose median predicted/measured ratio is closest to 1 with this delay
        (the least among equals), and its predictions."""
        runs = [predict(latency_s, delay_s) for latency_s in LATENCIES_S]
        k = int(np.argmin([abs(np.log(np.median(p / observed))) for p in runs]))
        return LATENCIES_S[k], runs[k]

    if with_delay and (pairs & ~core_group_pairs(cluster)).any():  # else nothing flies
        # For each delay its median-matched latency; the delay whose predictions then spread
        # least about the measurements (mean squared log ratio), 0 where nothing does better.
        candidates = [(d, *median_matched(d)) for d in DELAYS_S]
        spread = [float(np.mean(np.log(p / observed) ** 2)) for _, _, p in candidates]
        best_delay, best, predicted = candidates[int(np.argmin(spread))]
    else:
        (best, predicted), best_delay = median_matched(None), None
    fit = LatencyFit(what=what, latency_s=best, before_s=float(np.median(cluster.latency[pairs])),
                     labels=labels,
                     transfers=tuple(int(base.run(placements[label]).num_transfers)
                                     for label in labels),
                     measured=measured, predicted_s=tuple(predicted.tolist()),
                     before_predicted_s=tuple(base.makespan(placements[label])
                                              for label in labels),
                     task_speeds=tuple(speeds),
                     light=(None if light_label is None else
                            (light_label, float(simulator(best, best_delay).makespan(light)))),
                     delay_s=float(best_delay or 0.0),
                     before_delay_s=float(np.median(cluster.delay[pairs])))
    return dataclasses.replace(with_latency(cluster, pairs, best, best_delay),
                               prediction_error=fit.prediction_error), fit


def fit_core_group(cluster: Cluster, profile: cost_profile_pb2.CostProfile, meta_graph,
                   workload: Workload, *, config: RunConfig | None = None, seed: int = 0
                   ) -> tuple[Cluster, LatencyFit | None]:
    """:func:`fit_latency` of the pairs of devices that share cores with the device the profile
    ran on (its first device of a profiled kind), where ``cluster`` runs: what ``tf-autoplace
    profile --out_cluster`` and ``verify`` without a cost profile do on logical CPUs. The
    cluster unchanged and None where that device shares its cores with no other.

    Raises:
      ConfigError, MeasurementError: as :func:`fit_latency`'s.
    """
    kinds = {run.device_kind for run in profile.run}
    reference = next((d for d, device in enumerate(cluster.devices) if device.kind in kinds),
                     None)
    pairs = core_group_pairs(cluster)
    if reference is None or not pairs[reference].any():
        return cluster, None
    return fit_latency(cluster, profile, meta_graph, workload, reference=reference,
                       pairs=pairs, what="within a core group", config=config, seed=seed)
