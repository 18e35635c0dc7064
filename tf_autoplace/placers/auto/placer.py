"""The default placer: the best start we have, improved by local search in the simulator.

``autoplace(graph)`` runs this placer unless told otherwise. Within a budget of simulated placements
that grows as the graph shrinks (``AutoConfig.max_samples``), and at most ``budget_s`` seconds,
it

1. **collects starts**: every fast heuristic on the whole cluster and on prefixes of its GPUs,
   with over-memory placements repaired by moving work to the CPU host and failing heuristics
   skipped (:class:`~tf_autoplace.heuristics.BestHeuristicPlacer`), and on a cluster of
   TensorFlow tasks the placement ``replica_device_setter`` makes; then, from the best
   heuristic's placement, the zero-shot placement of each learned policy shipped for this many
   action devices (``learned``; a pretrained Placeto policy improves it in one greedy episode
   of a few dozen simulations) and, where the sample budget is large enough to pay for it,
   the best placement of a short Post search (cross-entropy over softmax tables explores
   other basins than moving one block at a time does; its placements count against the
   budget);
2. **searches** from the fastest start that fits: local search over blocks of colocation groups
   (:func:`tf_autoplace.placers.auto.local_search.local_search`), which keeps a move only when the
   simulator says it is faster, may move work to the CPU host, and stops early at a local
   optimum or at the lower bound; on small problems, where every search ends at a local
   optimum with most of the budget left, it goes on from kicks of the best placement
   (``AutoConfig.patience``);
3. returns the best placement found; the report's notes say where it started and what the
   search gained.

Why search rather than fine-tune a policy: on the zoo, this search improves the best start by
more per simulation than REINFORCE fine-tuning of a pretrained Placeto policy does
(BENCHMARKS.md), and it needs no policy for the cluster's device count, so it serves 1, 2, 4
or 8 devices alike. The learned policies still contribute their zero-shot placements, which are
free starts.

Guarantees, by construction: the result is never slower than any start (so never slower than
the best fast heuristic), except that a split predicted less than ``min_gain`` faster than the
single-device placement gives way to it (on any cluster; within 1% by default, and said in
the notes), and on a cluster whose devices all share one core group (logical CPUs of one
process), or whose op times are analytical estimates of this machine's CPUs
(``PlacementProblem.estimated_here``: a run here could measure what they can only guess),
the single-device placement is returned without a search where it fits; colocation
groups stay whole and every op stays on a device with its
kernel (moves are whole colocation groups to devices that can run them); with one device, or
nothing movable, it returns at once. The same seed gives the same placement when the sample
budget, not the time cap, ends the search.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time

import numpy as np

from tf_autoplace.core.problem import PlacementProblem, Placer, check_memory
from tf_autoplace.core.registry import HEURISTICS
from tf_autoplace.core.settings import (check_int, check_names, check_number,
                                        check_seconds, make_config, plain_numbers)
from tf_autoplace.errors import ConfigError, InfeasiblePlacementError, MeasurementError
from tf_autoplace.heuristics import (BestHeuristicPlacer, ReplicaDeviceSetterPlacer,
                                    SingleDevicePlacer)
from tf_autoplace.learning.eager import policy_context
from tf_autoplace.learning.learned import time_cap_note
from tf_autoplace.learning.measured import MeasuredEvaluator, check_reward
from tf_autoplace.learning.rollouts import Evaluator, available_cpus
from tf_autoplace.learning.workers import check_ray_address, cluster_cpus
from tf_autoplace.outputs.progress import Progress
from tf_autoplace.placers.auto.local_search import (LocalSearch, LocalSearchConfig,
                                                    iterate_until_stale, kick, race, rank)
from tf_autoplace.placers.placeto.env import PlacementEnv
from tf_autoplace.placers.placeto.policy import PlacetoPolicy
from tf_autoplace.placers.placeto.search import PlacetoConfig, pretrained_policy_dir, search
from tf_autoplace.placers.post import search as post_search
from tf_autoplace.placers.post.search import PostConfig
from tf_autoplace.sim import lower_bound

LEARNED = ("placeto", "post")
# Below this many colocation groups the search sweeps every move anyway, and loading a policy
# (TensorFlow) would cost more than the whole search.
MIN_LEARNED_UNITS = 256
# Post runs as a start only when the local search keeps at least this many times Post's own
# placements: on large graphs (small budgets) the local search gains more per placement.
POST_BUDGET_SHARE = 4
MIN_SAMPLES, MAX_SAMPLES = 1_000, 100_000


@dataclasses.dataclass(frozen=True)
class AutoConfig:
    """Attributes:
      max_samples: placements the local search scores (> 0; a candidate it scored already from
        the same placement is not simulated again), or None: as many as make
        ``search_work`` op simulations (``search_work / num_ops`` placements, within
        [``MIN_SAMPLES``, ``MAX_SAMPLES``]). A simulation costs time in proportion to the
        graph's size, so this keeps the search's wall time about the same on every graph while
        the result still depends only on the graph and the seed, not on the machine's speed.
      search_work: op simulations the search may spend when ``max_samples`` is None (> 0):
        4,000 placements of a 43k-op graph (8-layer NMT), about a minute on one core.
      budget_s: wall-time cap in seconds for the whole placer (> 0). If it ends the search
        before ``max_samples``, the result depends on the machine's speed (the notes say so).
      workers: workers that simulate candidates: local processes (1: this process), or Ray
        actors when ``ray_address`` is set (``tf_autoplace.learning.workers``); None: 1 without Ray,
        else one per CPU of the Ray cluster up to ``search.batch`` (a step simulates that many
        candidates, one chunk per worker). The placement does not depend on it.
      ray_address: simulate on a Ray cluster: ``"auto"``, ``"HOST:PORT"``, ``"local"``; None:
        local processes. The placement does not depend on it.
      threads: with one worker (this process), threads that simulate (>= 1): the race runs
        up to this many searches at once, one per thread, and a search running alone has its
        candidates cut over them; or None: as many as the CPUs this process may use, at most
        ``search.batch``. The placement does not depend on it.
      starts: how many of the fastest distinct starts the search races (>= 1).
      seeds_per_start: searches from each start, each with its own random draws (>= 1):
        which local optimum a search ends in depends on its first moves as much as on its
        start, and the race drops the unlucky ones early.
      patience: when the race's winner ends at a local optimum with placements of the budget
        left (small problems, which are swept), iterated local search goes on from the best
        placement so far, each search from a kick of ``kick`` of its colocation groups, until
        this many in a row find nothing faster (>= 0; 0: none;
        ``local_search.iterate_until_stale``).
      kick: the fraction of colocation groups a kick moves (in (0, 1]; at least two).
      kick_share: the searches from kicks score at most this many times the placements the
        race scored (> 0): on small problems the sample budget is far larger than a search
        needs, and this bounds the kicks' time to a multiple of the race's.
      learned: learned placers whose placements are starts (``"placeto"``: the shipped
        Placeto policy's zero-shot placement, when there is one for the cluster's
        action-device count; ``"post"``: a Post search of ``post.max_samples`` placements, when
        the sample budget is at least ``POST_BUDGET_SHARE`` times that).
      post: the settings of that Post search (its ``budget_s`` is replaced by what is left).
      heuristic_starts: more heuristics (names in
        :data:`~tf_autoplace.core.registry.HEURISTICS`) whose placements join best_heuristic's
        as starts, for example ``("m_sct",)``: Baechi's LP placer, whose linear program costs
        milliseconds on tens of groups and seconds to a minute on the zoo's graphs (so it is
        none of best_heuristic's candidates). Off by default: on the optimality benchmark's
        random training graphs it changed the race's shares more than its basin
        (docs/experiments.md, "m-SCT as a start of auto").
      search: the local search's settings.
      reward: "simulated" (default) or "measured": the search's candidates are run on this
        machine and scored by their measured step time
        (:class:`~tf_autoplace.learning.measured.MeasuredEvaluator`; the starts are still ranked by
        the simulator, the lower-bound stop is off, and one run costs about a second on a small
        graph, so set ``max_samples`` to tens or hundreds).
      measure_steps: timed steps per measured placement (>= 1; with ``reward="measured"``).
      min_gain: the predicted gain over the single-device placement (a fraction in [0, 1))
        below which the single-device placement is returned instead of the search's best:
        a smaller predicted gain is within the simulator's error on hosts whose devices
        share cores (two logical CPUs), and a split that only ties one device still pays its
        transfers in a real run. Where the cluster records the error its predictions had
        when measured (``Cluster.prediction_error``, written by ``tf-autoplace profile``),
        the gain must exceed that error too. A split over devices of one core group (their
        ops share one pool of cores) is never returned, whatever its predicted gain. The
        notes say so when it happens.
    """

    max_samples: int | None = None
    search_work: float = 1.7e8
    budget_s: float = 120.0
    workers: int | None = None
    ray_address: str | None = None
    threads: int | None = None
    starts: int = 4
    seeds_per_start: int = 2
    patience: int = 64
    kick: float = 0.1
    kick_share: float = 5.0
    learned: tuple[str, ...] = LEARNED
    post: PostConfig = PostConfig()
    heuristic_starts: tuple[str, ...] = ()
    search: LocalSearchConfig = LocalSearchConfig()
    reward: str = "simulated"
    measure_steps: int = 5
    min_gain: float = 0.01

    def __post_init__(self):
        plain_numbers(self)
        check_int("max_samples", self.max_samples, low=1, none_ok=True)
        check_number("search_work", self.search_work, low=0, low_ok=False)
        check_seconds("budget_s", self.budget_s)
        check_int("workers", self.workers, low=1, none_ok=True)
        check_ray_address(self.ray_address)
        check_int("threads", self.threads, low=1, none_ok=True)
        check_reward(self.reward, self.measure_steps, self.workers, self.ray_address)
        check_int("starts", self.starts, low=1)
        check_int("patience", self.patience, low=0)
        check_number("kick", self.kick, low=0, low_ok=False, high=1)
        check_number("kick_share", self.kick_share, low=0, low_ok=False)
        check_int("seeds_per_start", self.seeds_per_start, low=1)
        if not isinstance(self.post, PostConfig):
            raise ConfigError(f"post must be a PostConfig, got {self.post!r}")
        if not isinstance(self.search, LocalSearchConfig):
            raise ConfigError(f"search must be a LocalSearchConfig, got {self.search!r}")
        check_number("min_gain", self.min_gain, low=0, high=1, high_ok=False)
        check_names("learned", self.learned, LEARNED, "policies")
        check_names("heuristic_starts", self.heuristic_starts, sorted(HEURISTICS), "heuristics")


class AutoPlacer(Placer):
    """The default placer (module docstring). ``stats`` holds the last run's figures."""

    name = "auto"
    config_class = AutoConfig

    def __init__(self, config: AutoConfig | None = None, *, budget_s: float | None = None,
                 ray_address: str | None = None, **overrides):
        if budget_s is not None:
            overrides["budget_s"] = budget_s
        if ray_address is not None:
            overrides["ray_address"] = ray_address
        self.config = make_config(AutoConfig, config, overrides, self.name)
        self.stats: dict = {}

    @property
    def needs_workload(self) -> bool:
        return self.config.reward == "measured"

    def _evaluator(self, problem: PlacementProblem):
        """What scores the search's candidates: runs on this machine for measured rewards,
        else simulations on the configured workers (this process, local ones or Ray's)."""
        cfg = self.config
        if cfg.reward == "measured":
            return MeasuredEvaluator(problem, memory_penalty=cfg.search.memory_penalty,
                                     steps=cfg.measure_steps)
        workers = cfg.workers
        if workers is None:
            workers = 1 if cfg.ray_address is None else max(1, min(
                cfg.search.batch, cluster_cpus(cfg.ray_address)))
        threads = cfg.threads or max(1, min(cfg.search.batch, available_cpus()))
        return Evaluator(problem, workers=workers, memory_penalty=cfg.search.memory_penalty,
                         ray_address=cfg.ray_address, threads=threads)

    def samples_for(self, problem: PlacementProblem) -> int:
        """The search's placement budget on ``problem`` (see ``AutoConfig.max_samples``)."""
        if self.config.max_samples is not None:
            return self.config.max_samples
        return int(np.clip(round(self.config.search_work / problem.graph.num_ops),
                           MIN_SAMPLES, MAX_SAMPLES))

    def starts(self, problem: PlacementProblem, seed: int, *, max_samples: int,
               deadline: float, evaluator: Evaluator | None = None
               ) -> tuple[list[tuple[str, np.ndarray, float]], int]:
        """Distinct start placements that fit, fastest first, as ``(label, devices, step s)``:
        every fast heuristic's (best_heuristic's candidates) and ``heuristic_starts``',
        ``replica_device_setter``'s on a cluster of several TensorFlow tasks, and each learned
        placer's
        placement from the best of them; and how many placements the learned starts simulated
        (Post's count against ``max_samples``). ``evaluator`` simulates Post's batches (the
        search's own, on its threads or workers) when it scores with Post's memory penalty;
        None: Post makes its own."""
        heuristic = BestHeuristicPlacer()
        ranked = heuristic.ranked(problem)
        self.notes.extend(heuristic.notes)
        if not ranked or not ranked[0].fits:  # best_heuristic says why, with the total need
            heuristic.place(problem)
        out = [(c.label, c.devices, c.step_s) for c in ranked if c.fits]
        for name in self.config.heuristic_starts:
            placer = HEURISTICS[name]()
            try:
                devices = placer.propose(problem, seed=seed)
            except InfeasiblePlacementError as e:  # as best_heuristic skips a failing one
                self.notes.append(f"auto: no start from {name}: {e}")
                continue
            self.notes.extend(placer.notes)
            sim = problem.simulator.run(devices)
            if not check_memory(problem, sim):
                out.append((name, devices, sim.makespan))
        out.sort(key=lambda start: start[2])  # the learned starts begin from the fastest
        if out:  # the placement auto would return if stopped now (anytime curves show it)
            self.progress.update(0, out[0][2])
        if len(problem.cluster.tasks) > 1:  # a TF cluster: the placement TF1 users write
            devices = ReplicaDeviceSetterPlacer().propose(problem)
            sim = problem.simulator.run(devices)
            if not check_memory(problem, sim):
                out.append(("replica_device_setter", devices, sim.makespan))
        action = problem.cluster.compute_devices()
        units = int(problem.graph.colocation.max()) + 1
        path = None
        if "placeto" in self.config.learned and len(action) > 1 and units >= MIN_LEARNED_UNITS:
            path = pretrained_policy_dir(len(action))
        spent = 0
        post = self.config.post
        if self.config.ray_address is not None:  # Post simulates where the search does
            post = dataclasses.replace(post, ray_address=self.config.ray_address)
        # Placeto's episode (TensorFlow) and Post's search (the simulator's threads) both start
        # from the best heuristic's placement and do not depend on each other: they overlap.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            placeto = (pool.submit(self._placeto_zero_shot, problem, out[0][1], path, seed)
                       if path is not None else None)
            found = None
            if ("post" in self.config.learned and len(action) > 1
                    and units >= MIN_LEARNED_UNITS and post.max_samples is not None
                    and max_samples >= POST_BUDGET_SHARE * post.max_samples):
                shared = (evaluator if evaluator is not None
                          and evaluator.memory_penalty == post.memory_penalty else None)
                found = post_search.search(problem, post, seed, heuristic=out[0][1],
                                           deadline=deadline, evaluator=shared,
                                           progress=_Within(self.progress))
                spent = found.samples
            if placeto is not None:
                devices = placeto.result()
                sim = problem.simulator.run(devices)
                if not check_memory(problem, sim):
                    out.append(("placeto zero-shot", devices, sim.makespan))
        if found is not None and found.fits:
            out.append(("post", found.devices, problem.simulator.run(found.devices).makespan))
        out.sort(key=lambda start: start[2])
        distinct = []
        for start in out:
            if not any(np.array_equal(start[1], kept[1]) for kept in distinct):
                distinct.append(start)
        return distinct, spent

    @staticmethod
    def _placeto_zero_shot(problem, start, path, seed) -> np.ndarray:
        config = PlacetoConfig(fine_tune=False)
        env = PlacementEnv(problem, config.env, start_devices=start)
        with policy_context():
            policy = PlacetoPolicy.load(path)
            policy.jit_compile = False  # one episode: XLA would compile longer than it runs
            found = search(policy, env, config, seed, pretrained=True)
        return env.op_placement(found.best_actions)

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        cfg = self.config
        began = time.perf_counter()
        seed = int(rng.integers(2**31 - 1))
        if problem.cluster.num_devices == 1:
            self.notes.append("auto: the cluster has one device; every op goes to it")
            return np.zeros(problem.graph.num_ops, dtype=np.int32)
        measured = cfg.reward == "measured"
        groups = {d.core_group for d in problem.cluster.devices}
        if len(groups) == 1 and "" not in groups:
            # No split of these devices is ever returned (_single_if_no_gain): the answer is
            # known before any search, if one device holds the graph. Measured rewards too:
            # a split adds no cores, and a gain a few timed steps show is their noise.
            single = SingleDevicePlacer().propose(problem)
            if not check_memory(problem, problem.simulator.run(single)):
                self.notes.append(
                    f"auto: placement does not pay on these devices: they share one core "
                    f"group ({groups.pop()!r}: one pool of cores), so a split adds transfers "
                    "and no cores; the single-device placement is returned without a search")
                return single
        if problem.estimated_here and not measured:
            # Estimates that can be an order of magnitude or more from a real step on these
            # CPUs cannot back a split, and a run here could measure one: no search.
            single = SingleDevicePlacer().propose(problem)
            if not check_memory(problem, problem.simulator.run(single)):
                self.notes.append(
                    "auto: these devices are this machine's CPUs, and their op times are "
                    "Grappler's analytical estimates, which here can be an order of magnitude "
                    "or more from a real step: a split predicted from them could run slower than "
                    "one device, so the single-device placement is returned without a search "
                    "(on measured costs a split may be applied: verify=N, or a cost profile "
                    "from tf-autoplace profile)")
                return single
        max_samples = self.samples_for(problem)
        deadline = began + cfg.budget_s
        with self._evaluator(problem) as evaluator:
            with self.progress.phase("auto: starting placements", None):
                starts, spent = self.starts(problem, seed, max_samples=max_samples,
                                            deadline=deadline,
                                            evaluator=None if measured else evaluator)
                starts = starts[:cfg.starts]
                self.progress.update(len(starts), starts[0][2])
            # A simulated bound says nothing about measured times: no early stop on it then.
            bound = 0.0 if measured else lower_bound(problem.graph, problem.cluster,
                                                     problem.op_time)
            searches, labels = [], []
            for k, (label, devices, start_s) in enumerate(starts):
                first = LocalSearch(problem, devices, cfg.search, seed=_seed(seed, k, 0),
                                    evaluator=evaluator)
                for j in range(cfg.seeds_per_start):
                    searches.append(first if j == 0 else first.fork(_seed(seed, k, j)))
                    labels.append((label, start_s, devices))

            kicks = np.random.default_rng(_seed(seed, len(starts), 0))
            origin = {}  # a search from a kick -> the race's search its line began with

            def fresh(best: LocalSearch) -> LocalSearch:
                search = LocalSearch(problem, kick(problem, best.current, cfg.kick, kicks),
                                     cfg.search, seed=int(kicks.integers(2**31 - 1)),
                                     evaluator=evaluator)
                origin[search] = origin.get(best, best)
                return search

            with self.progress.phase("auto: local search", max_samples - spent,
                                     deadline=deadline):
                winner = race(searches, max_samples - spent, deadline=deadline,
                              lower_bound=bound, progress=self.progress,
                              evaluator=None if measured else evaluator)
                raced = sum(s.samples for s in searches)
                total = min(max_samples - spent, int(raced * (1 + cfg.kick_share)))
                winner, iterated = iterate_until_stale(
                    winner, fresh, total, raced, patience=cfg.patience, deadline=deadline,
                    lower_bound=bound, progress=self.progress)
                searched_until = time.perf_counter()
            label, start_s, start = labels[searches.index(origin.get(winner, winner))]
            if measured:  # both ends as measured here, not simulated
                start_s = evaluator.step_time(start)
                end_s = evaluator.step_time(winner.current)
            else:
                end_s = problem.simulator.run(winner.current).makespan
        samples = spent + sum(s.samples for s in searches + iterated)
        simulations = spent + sum(s.simulations for s in searches + iterated)
        gains, best_r = 0, min(rank(s) for s in searches)  # kicks that beat the best so far
        misses = 0  # ... and those after the last gain
        for s in iterated:
            if rank(s) < best_r:
                gains, best_r, misses = gains + 1, rank(s), 0
            else:
                misses += 1
        # The clock ended the search if it cut a search short, or if it ended the kicks while
        # they had patience, placements and a bound left (the race may return a search that
        # ended at its local optimum although the clock cut the others).
        kicks_done = (winner.stopped != "local optimum" or misses >= cfg.patience
                      or raced + sum(s.samples for s in iterated) >= total
                      or winner.best <= bound * (1 + 1e-9))
        clock = (any(s.stopped == "deadline" for s in searches + iterated)
                 or (searched_until >= deadline and not kicks_done))
        self.stats = dict(start=label, start_ms=start_s * 1e3, end_ms=end_s * 1e3,
                          samples=samples, simulations=simulations,
                          stopped="deadline" if clock else winner.stopped,
                          curve=winner.curve,
                          searches=[(lab, s.curve[0][1] * 1e3, s.best * 1e3, s.samples)
                                    for (lab, _, _), s in zip(labels, searches)],
                          kicks=len(iterated), kick_gains=gains,
                          seconds=time.perf_counter() - began)
        if measured and not np.isfinite(winner.best):
            # Every run failed, the starts' too: nothing measured says which placement to
            # apply (and the cause is the graph's, not a placement's).
            raise MeasurementError(
                f"auto: TensorFlow ran none of the {samples} placements measured, the starts "
                f"included, so none can be chosen by measurement; the first failure: "
                f"{getattr(evaluator, 'first_failure', None) or 'unknown'}")
        tried = ", ".join(f"{lab} {s.curve[0][1] * 1e3:.1f} -> {s.best * 1e3:.1f} ms"
                          for (lab, _, _), s in zip(labels, searches))
        summary = (f"auto: {len(searches) + len(iterated)} local searches from {len(starts)} "
                   f"start(s) in {samples} {'measured' if measured else 'scored'} placements "
                   f"({'' if measured else f'{simulations} simulated; '}{tried}"
                   + (f"; then {len(iterated)} from kicks of the best, {gains} of them "
                      "faster" if iterated else "") + "); "
                   f"the best started from {label} "
                   f"({start_s * 1e3:.2f} "
                   f"ms) and reached {end_s * 1e3:.2f} ms "
                   + (f"(each timed once, {cfg.measure_steps} steps, without an interval: a "
                      "search's score, within the noise of one run; measure_steps= or verify= "
                      "measure under the protocol"
                      if measured else
                      f"({(1 - end_s / start_s) * 100 if start_s else 0.0:.1f}% faster")  # 0 s
                   + f"; stopped: {self.stats['stopped']})")  # the clock's, if it cut any
        if clock:
            summary += time_cap_note("auto", cfg.budget_s, samples, max_samples)
        self.notes.append(summary)
        if not measured:
            single = self._single_if_no_gain(problem, winner.current, end_s)
            if single is not None:
                return single
        return winner.current

    def _single_if_no_gain(self, problem: PlacementProblem, devices: np.ndarray,
                           step_s: float) -> np.ndarray | None:
        """The single-device placement when ``devices`` (simulated at ``step_s``) is predicted
        less than ``min_gain`` faster, or less than the cluster's measured
        ``prediction_error``, or uses only devices of the single device's core group (their
        ops share one pool of cores: a split there can only reorder ops, a gain a real run
        was measured not to keep), and the single device fits; else None."""
        single = SingleDevicePlacer().propose(problem)
        if np.array_equal(single, devices):
            return None
        sim = problem.simulator.run(single)
        groups = {problem.cluster.devices[d].core_group for d in np.unique(np.append(devices,
                                                                                 single))}
        if len(groups) == 1 and "" not in groups and not check_memory(problem, sim):
            gain = 1 - step_s / sim.makespan if sim.makespan > 0 else 0.0
            self.notes.append(
                f"auto: placement does not pay on these devices: they share one core group "
                f"({groups.pop()!r}: one pool of cores), so a split adds transfers and no cores; "
                f"the best placement found ({step_s * 1e3:.2f} ms, predicted {gain:.1%} "
                f"faster than one device at {sim.makespan * 1e3:.2f} ms) owes that to the "
                "order the simulator runs ops in, which a real run does not keep, so the "
                "single-device placement is returned")
            return single
        measured_error = problem.cluster.prediction_error or 0.0
        min_gain = max(self.config.min_gain, measured_error)
        if check_memory(problem, sim) or step_s < sim.makespan * (1 - min_gain):
            return None
        why = (f"the {measured_error:.1%} its predictions may be off by, as measured when "
               "this cluster was profiled" if measured_error > self.config.min_gain
               else f"{min_gain:.0%}")
        gain = 1 - step_s / sim.makespan if sim.makespan > 0 else 0.0  # 0 s ops: no gain
        self.notes.append(
            f"auto: placement does not pay on these devices: the best placement found "
            f"({step_s * 1e3:.2f} ms) is predicted {gain:.1%} faster than "
            f"one device ({sim.makespan * 1e3:.2f} ms), less than {why}, so the "
            "single-device placement is returned")
        return single


class _Within(Progress):
    """A search run inside ``auto`` (Post's, as a start) reports its best placements into
    ``auto``'s current phase, not a phase of its own: ``auto`` has them (stopped then, it
    would return the best of them), so its anytime curve shows them."""

    def __init__(self, outer: Progress):
        self.outer = outer

    def update(self, done: int, best_s: float) -> None:
        self.outer.update(done, best_s)


def _seed(seed: int, start: int, draw: int) -> int:
    """The seed of search ``draw`` from start ``start`` of a placement seeded ``seed``."""
    return int(np.random.SeedSequence([seed, start, draw]).generate_state(1)[0])
