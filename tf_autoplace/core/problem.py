"""The placement problem, what counts as a solution, and the interface of every placer.

A :class:`PlacementProblem` bundles what is fixed while searching: the OpGraph, the Cluster, the
op-time matrix from a cost model, the grouping (Merge-and-Colocate groups, which never split a TF
colocation group and never mix incompatible kernels) and a simulator. When the costs were
measured (a profile), the problem also says what the measured runs showed of how TensorFlow
executes the graph, and its simulator uses it: the dependencies that are left once Grappler
folded and fused ops (``executed``, :mod:`tf_autoplace.graph.executed`), and the ops whose
kernel changes when a partner op is on another device (``partner``, ``partner_time``; see
:mod:`tf_autoplace.sim.simulator`). Placers read the graph as written.

``Placer.place()`` is the public door: it draws a seeded generator, calls the subclass's
``_place()``, and validates the answer (shape, colocation, kernels, and memory through one
simulation) before returning it. During a search an infeasible placement is data (a penalised
reward); here it is an :class:`InfeasiblePlacementError` that says what broke.

Besides the placement, a placer offers what lets a result last and a search be watched:
``settings()`` (what its result depends on, which the placement cache keys on), ``progress``
(where a search reports, :mod:`tf_autoplace.outputs.progress`) and, for learned placers,
``trained_policy`` / ``save_policy()`` (the policy fine-tuned in the last placement, which a
later placer can start from).
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import threading
import weakref

import numpy as np

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.units import format_bytes
from tf_autoplace.errors import ConfigError, InfeasiblePlacementError, InvalidGraphError
from tf_autoplace.graph.opgraph import OpGraph
from tf_autoplace.grouping import Grouping
from tf_autoplace.outputs.progress import QUIET, Progress
from tf_autoplace.sim import SimResult
from tf_autoplace.core.jit import interruptible
from tf_autoplace.sim.layout import OrderedSimulator

# Attributes a placer sets while placing, which its result does not depend on.
_RUN_STATE = frozenset({"notes", "stats", "progress", "trained_policy"})
# Placer -> the lock its runs hold (Placer.place), kept outside the object: a lock is neither
# settings (Placer.settings) nor picklable.
_RUN_LOCKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_RUN_LOCKS_GUARD = threading.Lock()


def _run_lock(placer) -> threading.RLock:
    with _RUN_LOCKS_GUARD:
        lock = _RUN_LOCKS.get(placer)
        if lock is None:
            lock = _RUN_LOCKS[placer] = threading.RLock()
        return lock


@dataclasses.dataclass(frozen=True, eq=False)
class PlacementProblem:
    """Everything a placer may read.

    Attributes:
      graph: the op graph (n ops).
      cluster: the devices (D of them).
      op_time: [n, D] seconds per op per device, ``inf`` where there is no kernel.
      grouping: op -> group labels; a placer assigns whole groups.
      workload: how to run one step of the graph on this machine (a
        :class:`tf_autoplace.hw.workload.Workload`), for placers that take their reward from
        measured runs (``reward="measured"``); None when the problem is only simulated. The
        engine attaches it when a placer's ``needs_workload`` is true.
      executed: the graph's ops with the dependencies TensorFlow executes
        (:func:`tf_autoplace.graph.executed.executed_graph`), which the simulator runs; None:
        the graph as written.
      partner: [n] int, the op whose device decides op i's kernel (-1: none), or None.
      partner_time: [n, D] seconds op i takes on d when its partner is on another device;
        given with ``partner``.
      time_scale: ``{device kind: factor}`` by which the measured op times of that kind were
        scaled to the run they were measured in (:func:`tf_autoplace.pipeline.prepare.
        build_problem`); empty when nothing was scaled.
      estimated_here: the op times are analytical estimates and the devices are this
        machine's CPUs (logical CPUs of this process, or TensorFlow servers on this host),
        where such estimates can be an order of magnitude or more from a real step and a run
        could measure them instead; set by the engine. A placer that promises a faster run
        than one device (``auto``) does not apply a split predicted from them.
    """

    graph: OpGraph
    cluster: Cluster
    op_time: np.ndarray
    grouping: Grouping
    workload: object = dataclasses.field(default=None, repr=False)
    executed: OpGraph | None = dataclasses.field(default=None, repr=False)
    partner: np.ndarray | None = dataclasses.field(default=None, repr=False)
    partner_time: np.ndarray | None = dataclasses.field(default=None, repr=False)
    time_scale: dict = dataclasses.field(default_factory=dict, repr=False)
    estimated_here: bool = False

    def __post_init__(self):
        n, d = self.graph.num_ops, self.cluster.num_devices
        if self.op_time.shape != (n, d):
            raise InvalidGraphError(f"op_time has shape {self.op_time.shape}, expected {(n, d)}")
        if len(self.grouping.labels) != n:
            raise InvalidGraphError(f"grouping covers {len(self.grouping.labels)} ops, graph has "
                                    f"{n}")
        if self.executed is not None and self.executed.names != self.graph.names:
            raise InvalidGraphError("the executed graph must have the graph's ops, in its order")
        if (self.partner is None) != (self.partner_time is None):
            raise ConfigError("partner and partner_time go together: give both or neither")
        if self.partner_time is not None and self.partner_time.shape != (n, d):
            raise InvalidGraphError(f"partner_time has shape {self.partner_time.shape}, expected "
                                    f"{(n, d)}")

    @property
    def sim_graph(self) -> OpGraph:
        """The graph the simulator runs: ``executed`` when known, else ``graph``."""
        return self.graph if self.executed is None else self.executed

    @functools.cached_property
    def simulator(self) -> OrderedSimulator:
        """The problem's simulator of ``sim_graph`` (with the partner times when known): its
        ops numbered in run order, which gives the same results as ``Simulator`` sooner on
        large graphs (:mod:`tf_autoplace.sim.layout`)."""
        return OrderedSimulator(self.sim_graph, self.cluster, self.op_time,
                                partner=self.partner, partner_time=self.partner_time)

    @property
    def fastest_op_time(self) -> np.ndarray:
        """[n, D] seconds no placement makes op i on d beat (``op_time``, or the smaller of
        it and ``partner_time``): what lower bounds may count on."""
        if self.partner_time is None:
            return self.op_time
        return np.minimum(self.op_time, self.partner_time)

    @functools.cached_property
    def allowed(self) -> np.ndarray:
        """[n, D] bool: op i can run on device d."""
        return np.isfinite(self.op_time)

    @functools.cached_property
    def group_allowed(self) -> np.ndarray:
        """[G, D] bool: every op of group g can run on device d."""
        out = np.ones((self.grouping.num_groups, self.cluster.num_devices), dtype=bool)
        np.logical_and.at(out, self.grouping.labels, self.allowed)
        return out

    def restricted(self, devices) -> "PlacementProblem":
        """The same graph and grouping on the devices ``devices`` (cluster indices, ascending)
        only: a placement of it, mapped back with ``np.asarray(devices)[placement]``, is a
        placement of this problem that leaves the other devices idle."""
        devices = np.asarray(devices, dtype=np.int64)
        sub = PlacementProblem(graph=self.graph, cluster=self.cluster.subset(devices),
                               op_time=self.op_time[:, devices], grouping=self.grouping,
                               workload=self.workload, executed=self.executed,
                               partner=self.partner,
                               partner_time=(None if self.partner_time is None
                                             else self.partner_time[:, devices]))
        if "simulator" in self.__dict__:  # built already: share its graph's arrays
            sub.__dict__["simulator"] = self.simulator.restricted(devices)
        return sub

    @functools.cached_property
    def colocation_allowed(self) -> np.ndarray:
        """[C, D] bool: every op of TF colocation group c can run on device d."""
        num = int(self.graph.colocation.max()) + 1
        out = np.ones((num, self.cluster.num_devices), dtype=bool)
        np.logical_and.at(out, self.graph.colocation, self.allowed)
        return out


@dataclasses.dataclass(frozen=True, eq=False)
class Placement:
    """A validated placement: ``devices[i]`` is the cluster index of op i's device, ``sim`` the
    simulation that checked its memory, ``notes`` what the placer wants the user to know,
    ``trained_policy`` the policy a learned placer fine-tuned while making it (else None)."""

    devices: np.ndarray
    sim: SimResult
    notes: tuple[str, ...] = ()
    trained_policy: object = None

    def device_names(self, cluster: Cluster) -> list[str]:
        """The name of each op's device in ``cluster`` (the cluster the placement was made
        for), in op order."""
        names = cluster.names
        return [names[d] for d in self.devices.tolist()]


def check_placement(problem: PlacementProblem, devices: np.ndarray) -> list[str]:
    """Constraint violations other than memory (an empty list means valid)."""
    n, num_dev = problem.graph.num_ops, problem.cluster.num_devices
    devices = np.asarray(devices)
    if devices.shape != (n,):
        return [f"placement has shape {devices.shape}, expected ({n},)"]
    if not np.issubdtype(devices.dtype, np.integer) or devices.min() < 0 or \
            devices.max() >= num_dev:
        return [f"placement holds device indices outside [0, {num_dev})"]
    problems = []
    names = problem.graph.names
    bad = np.flatnonzero(~problem.allowed[np.arange(n), devices])
    for i in bad[:3]:
        problems.append(f"op {names[i]!r} ({problem.graph.op_types[i]}) has no kernel on "
                        f"{problem.cluster.names[devices[i]]}")
    coloc = problem.graph.colocation
    first = np.full(int(coloc.max()) + 1, -1)
    first[coloc[::-1]] = devices[::-1]  # device of the first op of each colocation group
    split = np.flatnonzero(first[coloc] != devices)
    for i in split[:3]:
        problems.append(f"op {names[i]!r} is not on the device of its colocation group")
    return problems


def check_memory(problem: PlacementProblem, sim: SimResult) -> list[str]:
    cap = problem.cluster.memory
    return [f"{problem.cluster.names[d]} needs {format_bytes(sim.peak_memory[d])} at peak but "
            f"has {format_bytes(cap[d])}" for d in np.flatnonzero(sim.peak_memory > cap)]


def validate(problem: PlacementProblem, devices: np.ndarray, *,
             placer_name: str = "placement", notes: tuple[str, ...] = ()) -> Placement:
    """Check constraints and memory (by simulation); raise InfeasiblePlacementError if broken."""
    problems = check_placement(problem, devices)
    if problems:
        raise InfeasiblePlacementError(f"{placer_name} is invalid: " + "; ".join(problems))
    devices = np.asarray(devices, dtype=np.int32)
    sim = problem.simulator.run(devices)
    problems = check_memory(problem, sim)
    if problems:
        raise InfeasiblePlacementError(
            f"{placer_name} does not fit in memory: " + "; ".join(problems))
    return Placement(devices=devices, sim=sim, notes=tuple(notes))


def rank_placements(problem: PlacementProblem, contenders, step_time=None) -> list[tuple]:
    """Simulate each ``(name, devices)`` of ``contenders`` once and sort them: the placements
    that fit memory first, then by step time; ties keep the given order. Returns
    ``(over_memory, makespan, name, devices)`` tuples, best first. The learned placers use it
    to return nothing worse than the fast heuristics, and ``best_heuristic`` to choose one.
    ``step_time`` (devices -> seconds), when given, replaces the simulated step time (a
    measured one, for ``reward="measured"``); memory is still the simulator's."""
    scored = []
    for name, devices in contenders:
        sim = problem.simulator.run(devices)
        step = sim.makespan if step_time is None else step_time(devices)
        scored.append((bool(check_memory(problem, sim)), step, name, devices))
    scored.sort(key=lambda item: item[:2])  # stable: ties keep the given order
    return scored


class Placer(abc.ABC):
    """Chooses a device per op. Subclasses implement ``_place`` and may append to ``self.notes``
    (reset for every placement) what the report should tell the user.

    Attributes:
      progress: where a search reports while placing (:class:`~tf_autoplace.outputs.progress.Progress`;
        the quiet one unless ``place`` was given another).
      trained_policy: learned placers set it to the policy they fine-tuned in their last
        placement (an object with ``save(directory)``); None for every other placer.
    """

    name: str = "placer"
    notes: tuple | list = ()  # replaced by a fresh list in every propose()
    progress: Progress = QUIET
    trained_policy = None

    @property
    def needs_workload(self) -> bool:
        """Whether this placer runs placements on the hardware, so the problem it is given
        must carry a ``workload`` (placers with ``reward="measured"``)."""
        return False

    def place(self, problem: PlacementProblem, *, seed: int = 0,
              progress: Progress | None = None) -> Placement:
        """Return a validated placement, with this run's notes and fine-tuned policy; the same
        seed gives the same placement. A search reports to ``progress`` (None: nowhere).

        One placer object places one problem at a time: its run state (``notes``, ``stats``,
        ``trained_policy``, ``progress``) is its last run's, so a call from another thread
        waits for the running one to end (two threads that shared one placer got each other's
        notes); give each thread its own placer to place at the same time."""
        with _run_lock(self):
            devices = self.propose(problem, seed=seed, progress=progress)
            placement = validate(problem, devices, placer_name=f"the {self.name} placement",
                                 notes=tuple(self.notes))
            return dataclasses.replace(placement, trained_policy=self.trained_policy)

    @interruptible
    def propose(self, problem: PlacementProblem, *, seed: int = 0,
                progress: Progress | None = None) -> np.ndarray:
        """The placer's raw answer, [n] int32, not yet checked against memory (baselines that
        may not fit, like a single GPU, are reported with their peak memory rather than
        rejected). A Ctrl-C during the search is a plain KeyboardInterrupt, as at the engine's
        doors (:func:`tf_autoplace.core.jit.interruptible`), for callers that run placers
        themselves."""
        with _run_lock(self):  # (see place)
            self.notes = []
            self.trained_policy = None
            self.progress = QUIET if progress is None else progress
            try:
                devices = np.asarray(self._place(problem, np.random.default_rng(seed)))
            finally:
                self.progress = QUIET
        problems = check_placement(problem, devices)
        if problems:
            raise InfeasiblePlacementError(f"the {self.name} placement is invalid: "
                                           + "; ".join(problems))
        return devices.astype(np.int32)

    def settings(self) -> str | None:
        """What this placer's placement depends on besides the problem and the seed, as text:
        the placement cache (:mod:`tf_autoplace.pipeline.cache`) keys on it. The default is the class
        and the instance's attributes but the run state (notes, stats, progress, trained
        policy), e.g. a config dataclass's repr. A placer whose result depends on the contents
        of files (a policy directory) adds them; None means never cache (nothing is
        searched)."""
        state = {k: v for k, v in sorted(vars(self).items()) if k not in _RUN_STATE}
        return f"{type(self).__module__}.{type(self).__qualname__}{state!r}"

    def save_policy(self, directory) -> None:
        """Write the policy fine-tuned in the last placement (weights, architecture and a
        manifest of how it was made) into ``directory``, which a learned placer's
        ``policy=directory`` starts from. ConfigError if there is none."""
        if self.trained_policy is None:
            raise ConfigError(f"the {self.name} placer has no fine-tuned policy to save: only "
                              "a learned placer has one, after it placed a graph")
        self.trained_policy.save(directory)

    @abc.abstractmethod
    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        """[n] int device index per op."""
