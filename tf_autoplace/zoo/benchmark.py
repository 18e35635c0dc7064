"""Benchmark placers on the zoo models and K80 clusters the papers pair them with (the library
behind ``tf-autoplace benchmark``).

For every (model, cluster) pair, :func:`benchmark` builds the training graph, ingests, costs
and groups it (:func:`tf_autoplace.pipeline.prepare.build_problem`), then runs each placer
(:func:`run_placer`): ``propose()`` (timed: the placement search time; the simulations it
asks for are counted by :class:`CountingSimulator`), an explicit constraint check, and one
simulation that gives the step time and the peak memory per device. A placement that does not
fit in memory is reported with ``oom=True``, not dropped; a placer that raises an
:class:`AutoplaceError` gets a row with its message.

Models are the named configs in :data:`MODELS` at paper size (``nmt4`` is the 4-layer NMT);
``quick=True`` keeps their layer counts but shrinks widths, lengths, batches and images
(:data:`QUICK_KNOBS`). Clusters are shipped spec names (``k80x4``) or spec file paths
(:func:`tf_autoplace.core.cluster.resolve_cluster`).
:data:`FULL_PAIRS` are the papers' pairings, :data:`QUICK_PAIRS` a few-minute subset.

Each pair gets two lower bounds on the step time, and every row its ratio to both: the simple
bound (:func:`tf_autoplace.sim.lower_bound`) and the LP bound
(:func:`tf_autoplace.sim.lp_lower_bound`: the path with transfers and per-device-class load),
whose time and HiGHS status go in the pair table. Both hold for every placement that fits in
memory; an OOM row's ratio is not covered.

Each pair also gets the simulator's speed on its whole graph (:func:`simulations_per_second`):
simulations per second of one fixed placement (each group on a uniformly random allowed
device, seed 0, the kind of placement an RL search samples) after a warm-up.

Nothing is cached on disk: every run builds the graphs again (NMT-8 takes about half a
minute).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import io
import json
import math
import os
import threading
import time

from tf_autoplace import zoo
from tf_autoplace.core import registry
from tf_autoplace.core.cluster import resolve_cluster
from tf_autoplace.errors import AutoplaceError, ConfigError
from tf_autoplace.graph import ingest
from tf_autoplace.grouping import GroupingConfig
from tf_autoplace.outputs.files import write_output
from tf_autoplace.outputs.progress import note
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.pipeline.problem_cache import ProblemCache, as_problem_cache, cluster_digest
from tf_autoplace.placers import (
    DEFAULT_PLACER,
    ExpertPlacer,
    PlacementProblem,
    RandomPlacer,
    check_memory,
    check_placement,
    get_placer,
)
from tf_autoplace.placers.placeto.pretrain import samples_to_reach
from tf_autoplace.sim import lp_lower_bound
from tf_autoplace.sim.layout import OrderedSimulator

# name -> (zoo model, knobs at paper size). Layer counts follow the papers' variants.
MODELS = {
    "inception_v3": ("inception_v3", {}),
    "resnet50": ("resnet50", {}),
    "nasnet": ("nasnet", {}),
    "rnnlm2": ("rnnlm", {"layers": 2}),
    "rnnlm4": ("rnnlm", {"layers": 4}),
    "nmt2": ("nmt", {"layers": 2}),
    "nmt4": ("nmt", {"layers": 4}),
    "nmt8": ("nmt", {"layers": 8}),
    # Not a paper pairing: the scale test. GNMT-8 unrolled 64 steps (85,179 ops), the size HDP and
    # GDP report for their largest graphs (50k-80k ops and more).
    "nmt8_long": ("nmt", {"layers": 8, "length": 64}),
    "transformer2": ("transformer", {"layers": 2}),
    "transformer4": ("transformer", {"layers": 4}),
    "transformer8": ("transformer", {"layers": 8}),
    "wavenet2": ("wavenet", {"stacks": 2}),
    "wavenet4": ("wavenet", {"stacks": 4}),
}

# --quick: same structure (layers, stacks), small tensors.
QUICK_KNOBS = {
    "inception_v3": {"batch": 8, "image_size": 75, "num_classes": 100},
    "resnet50": {"batch": 8, "image_size": 32, "num_classes": 100},
    "nasnet": {"batch": 8, "image_size": 32, "num_classes": 100},
    "nmt": {"length": 6, "batch": 32, "hidden": 256, "embedding_dim": 256, "vocab": 2000},
    "rnnlm": {"length": 8, "batch": 32, "hidden": 256, "embedding_dim": 256, "vocab": 2000},
    "transformer": {"length": 64, "batch": 8, "d_model": 128, "heads": 4, "d_ff": 512,
                    "vocab": 2000},
    "wavenet": {"length": 512, "batch": 4, "channels": 32, "skip_channels": 64},
}

# The papers' pairings: HDP (Inception-V3, RNNLM, NMT-2/4/8), Post (ResNet-50 on 2 and 4,
# Inception-V3 on 2/4/8), Placeto (NASNet on 2), GDP (RNNLM-2/4, Transformer-XL-2/4/8,
# WaveNet 2 and 4 stacks), each on as many GPUs as the paper used.
FULL_PAIRS = ("inception_v3:k80x2", "inception_v3:k80x4", "inception_v3:k80x8",
              "resnet50:k80x2", "resnet50:k80x4", "nasnet:k80x2", "rnnlm2:k80x2",
              "rnnlm4:k80x4", "nmt2:k80x2", "nmt4:k80x4", "nmt8:k80x8", "transformer2:k80x2",
              "transformer4:k80x4", "transformer8:k80x8", "wavenet2:k80x2", "wavenet4:k80x4")
QUICK_PAIRS = ("inception_v3:k80x2", "rnnlm2:k80x2", "nmt2:k80x2", "nmt4:k80x4",
               "transformer2:k80x2", "wavenet2:k80x2")
# The default placers of a benchmark: every fast heuristic but the one that runs them all.
PLACER_NAMES = tuple(n for n in registry.names("heuristic") if n != "best_heuristic")


# --------------------------------------------------------------------------- counting hook
class CountingSimulator(OrderedSimulator):
    """The problem's simulator, counting its simulations (``run``, ``summary`` and
    ``makespan`` calls, from any thread)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = 0
        self._lock = threading.Lock()

    def _count(self, placements: int = 1) -> None:
        with self._lock:
            self.calls += placements

    def run(self, placement):
        self._count()
        return super().run(placement)

    def summary(self, placement):
        self._count()
        return super().summary(placement)

    def summaries(self, placements, *, below=None):
        self._count(len(placements))
        return super().summaries(placements, below=below)

    def makespan(self, placement):
        self._count()
        return super().makespan(placement)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_lock")  # a lock does not pickle: a worker process counts for itself
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


@dataclasses.dataclass(frozen=True, eq=False)
class CountedProblem(PlacementProblem):
    """A PlacementProblem whose simulator counts the simulations placers ask for."""

    @functools.cached_property
    def simulator(self) -> CountingSimulator:
        return CountingSimulator(self.sim_graph, self.cluster, self.op_time,
                                 partner=self.partner, partner_time=self.partner_time)


# -------------------------------------------------------------------------------- records
@dataclasses.dataclass
class Row:
    """One placer on one (model, cluster) pair: ``step_s`` and ``peak_gb`` (per device, in
    cluster order) from one simulation of the proposed placement, ``search_s`` the time
    ``propose()`` took and ``sims`` the simulations it ran; ``error`` is set (and the numbers
    are NaN) when the placer raised."""

    model: str
    cluster: str
    ops: int
    groups: int
    placer: str
    step_s: float = math.nan
    lower_bound_s: float = math.nan
    lp_bound_s: float = math.nan
    peak_gb: tuple = ()
    oom: bool = False
    search_s: float = math.nan
    sims: int = 0
    error: str = ""
    curve: tuple = ()  # a learned placer's search: (placements, seconds, best R) per point
    curve_timed: bool = True  # False: the seconds are estimated (see search_curve)
    stopped: str = ""  # what ended a search that says ("samples", "deadline", "optimum", ...)

    @property
    def ratio(self) -> float:
        return self.step_s / self.lower_bound_s

    @property
    def lp_ratio(self) -> float:
        return self.step_s / self.lp_bound_s


@dataclasses.dataclass
class PairInfo:
    """What was measured once per (model, cluster) pair."""

    model: str
    cluster: str
    ops: int
    groups: int
    build_s: float
    problem_s: float
    lower_bound_s: float
    sims_per_s: float
    lp_bound_s: float = math.nan
    lp_solve_s: float = math.nan
    lp_status: str = ""


def parse_pairs(items) -> list[tuple[str, str]]:
    """``["nmt4:k80x4", ...]`` -> ``[("nmt4", "k80x4"), ...]``; ConfigError on a bad item."""
    pairs = []
    for item in items:
        model, sep, cluster = item.partition(":")
        if not sep or model not in MODELS or not cluster:
            raise ConfigError(f"a pair is model:cluster with a model in {sorted(MODELS)}, "
                              f"got {item!r}")
        pairs.append((model, cluster))
    return pairs


def model_knobs(name: str, quick: bool) -> tuple[str, dict]:
    zoo_name, knobs = MODELS[name]
    return zoo_name, {**(QUICK_KNOBS[zoo_name] if quick else {}), **knobs}


def load_model(name: str, *, quick: bool):
    """``(zoo.ModelGraph, MetaGraphDef)`` of a :data:`MODELS` name, built afresh."""
    zoo_name, knobs = model_knobs(name, quick)
    progress(f"building {name} ({zoo_name} {knobs})")
    model = zoo.build(zoo_name, **knobs)
    return model, ingest.load_meta_graph(model.graph)


# Bump when what a MODELS entry builds changes: cached pair problems are then rebuilt.
PAIR_VERSION = 1


def pair_problem(model: str, cluster: str, *, quick: bool = False,
                 cache_dir: bool | str | os.PathLike | ProblemCache | None = None
                 ) -> PlacementProblem:
    """The problem of one (model, cluster) pair, built as :func:`benchmark` builds it.

    Args:
      model: a :data:`MODELS` name.
      cluster: a shipped cluster name or a cluster spec file.
      quick: the quick knobs (:data:`QUICK_KNOBS`).
      cache_dir: keep the problem in a problem cache and read it back on the next call (tools
        that time one stage on a zoo graph need not build it every run): True (the user's),
        a private directory of the user's, or None (no cache); see
        :mod:`tf_autoplace.pipeline.problem_cache` (npz, no pickle).

    Raises:
      ConfigError: an unknown model or cluster, or a cache directory another user owns or
        others can write to.
    """
    if model not in MODELS:
        raise ConfigError(f"unknown model {model!r}; choose one of {sorted(MODELS)}")
    spec = resolve_cluster(cluster)
    cache = as_problem_cache(cache_dir)
    zoo_name, knobs = model_knobs(model, quick)
    payload = json.dumps({"model": zoo_name, "knobs": knobs, "version": PAIR_VERSION,
                          "cluster": cluster_digest(spec)}, sort_keys=True).encode()
    name = (f"pair_{model}{'_quick' if quick else ''}_"
            f"{hashlib.sha256(payload).hexdigest()[:16]}")
    problem = cache.load(name, spec) if cache is not None else None
    if problem is None:
        _, meta_graph = load_model(model, quick=quick)
        problem, _ = build_problem(meta_graph, spec, live_graph=True)
        if cache is not None:
            cache.store(name, problem)
    return problem


def parse_placer(spec: str) -> tuple[str, float | None]:
    """A placer item: ``name`` (a registered placer) or ``name@SECONDS`` (one that searches,
    with that ``budget_s``: ``gdp@0`` is GDP zero-shot, ``gdp@60`` fine-tuned for at most a
    minute). Returns ``(name, budget_s or None)``; ConfigError on a bad item."""
    name, sep, budget = spec.partition("@")
    if name not in registry.names():
        raise ConfigError(f"unknown placer {name!r} in {spec!r}; choose one of "
                          f"{registry.names()}")
    if not sep:
        return name, None
    try:
        budget_s = float(budget)
    except ValueError:
        budget_s = -1.0
    if not budget_s >= 0 or not registry.accepts(name, "budget_s"):
        raise ConfigError(f"{spec!r}: name@SECONDS needs a placer that takes a budget "
                          f"({registry.able('budget_s')}) and seconds >= 0")
    return name, budget_s


def make_placer(spec: str, model: zoo.ModelGraph, budget_s: float | None = None):
    """The placer of a :func:`parse_placer` item. The expert gets the model's scopes; every
    other placer comes from the registry, with the item's budget, else ``budget_s`` (None: its
    own default), if it searches."""
    name, own_budget = parse_placer(spec)
    budget_s = own_budget if own_budget is not None else budget_s
    if name == "expert":
        return ExpertPlacer.from_pipeline(model.layer_scopes)
    return get_placer(name, budget_s=budget_s)


def run_placer(problem: CountedProblem, placer, *, seed: int, model: str,
               cluster: str) -> Row:
    """Propose (timed, simulations counted), check constraints, simulate once."""
    row = Row(model=model, cluster=cluster, ops=problem.graph.num_ops,
              groups=problem.grouping.num_groups, placer=placer.name)
    sim = problem.simulator
    sim.calls = 0
    start = time.perf_counter()
    try:
        devices = placer.propose(problem, seed=seed)
    except AutoplaceError as e:
        row.error = str(e)
        return row
    row.search_s = time.perf_counter() - start
    row.sims = sim.calls
    stats = getattr(placer, "stats", {})
    row.curve, row.curve_timed = search_curve(stats, row.search_s)
    row.stopped = str(stats.get("stopped", ""))
    problems = check_placement(problem, devices)
    if problems:  # propose() checks this too; a placer bug must not pass silently
        row.error = "; ".join(problems)
        return row
    result = sim.run(devices)
    row.step_s = result.makespan
    row.peak_gb = tuple(float(x) / 1e9 for x in result.peak_memory)
    row.oom = bool(check_memory(problem, result))
    return row


def search_curve(stats: dict, search_s: float) -> tuple[tuple, bool]:
    """``((placements, seconds, best R), ...), timed`` of a learned placer's last search, from
    its ``stats``: ``curve`` holds (placements, best R) points and, where the placer times
    them, ``curve_s`` the seconds of each (Post). Without ``curve_s`` (Placeto) the seconds
    are estimated as the search's time in proportion to the placements, and ``timed`` is
    False. Placers without a curve give ``((), True)``."""
    curve = stats.get("curve") or ()
    if not curve:
        return (), True
    seconds = stats.get("curve_s")
    timed = seconds is not None
    if not timed:
        last = max(curve[-1][0], 1)
        seconds = [search_s * samples / last for samples, _ in curve]
    return tuple((int(n), float(t), float(best))
                 for (n, best), t in zip(curve, seconds)), timed


def reach(curve, target: float):
    """``(placements, seconds)`` at which a :func:`search_curve` first had a best R at or
    under ``target`` (None: never)."""
    samples = samples_to_reach([(n, best) for n, _, best in curve], target)
    return None if samples is None else next((n, t) for n, t, _ in curve if n == samples)


def simulations_per_second(problem: PlacementProblem, runs: int) -> float:
    """Simulator speed on this graph: one random-group placement, ``runs`` timed runs."""
    simulator = OrderedSimulator(problem.graph, problem.cluster, problem.op_time)
    devices = RandomPlacer().propose(problem, seed=0)
    simulator.run(devices)  # warm-up (and the JIT compile in a fresh environment)
    start = time.perf_counter()
    for _ in range(runs):
        simulator.run(devices)
    return runs / (time.perf_counter() - start)


def progress(message: str) -> None:
    """A line of the benchmark's progress, with the time of day."""
    note(f"benchmark {time.strftime('%H:%M:%S')}", message)


def benchmark(pairs, placer_names, *, quick: bool, seed: int = 0, sim_runs: int = 20,
              grouping: GroupingConfig = GroupingConfig(), on_pair=None,
              budget_s: float | None = None):
    """Run every placer on every pair; returns (rows, pair infos). ``on_pair(rows, infos)`` is
    called after each pair (to write partial results). ``budget_s`` replaces the time budget
    of the placers that search (None: each keeps its default); with a generous one their
    sample budgets end the searches, so the step times do not depend on the machine's load."""
    rows: list[Row] = []
    infos: list[PairInfo] = []
    by_model: dict[str, list[str]] = {}
    for model, cluster in pairs:
        by_model.setdefault(model, []).append(cluster)
    done, total = 0, len(pairs) * len(placer_names)
    for model_name, clusters in by_model.items():
        start = time.perf_counter()
        model, meta_graph = load_model(model_name, quick=quick)
        build_s = time.perf_counter() - start
        cost_model = None
        for cluster_name in clusters:
            cluster = resolve_cluster(cluster_name)
            start = time.perf_counter()
            try:
                problem, cost_model = build_problem(meta_graph, cluster, grouping=grouping,
                                                    cost_model=cost_model, live_graph=True)
            except AutoplaceError as e:
                progress(f"{model_name} on {cluster_name}: cannot build the problem: {e}")
                done += len(placer_names)
                continue
            problem = CountedProblem(graph=problem.graph, cluster=problem.cluster,
                                     op_time=problem.op_time, grouping=problem.grouping)
            problem_s = time.perf_counter() - start
            start = time.perf_counter()
            lp = lp_lower_bound(problem.graph, cluster, problem.op_time)
            infos.append(PairInfo(model_name, cluster_name, problem.graph.num_ops,
                                  problem.grouping.num_groups, build_s, problem_s, lp.simple_s,
                                  simulations_per_second(problem, sim_runs),
                                  lp_bound_s=lp.value_s, lp_solve_s=time.perf_counter() - start,
                                  lp_status=lp.status))
            for name in placer_names:
                done += 1
                progress(f"[{done}/{total}] {model_name} on {cluster_name}: {name}")
                row = run_placer(problem, make_placer(name, model, budget_s), seed=seed,
                                 model=model_name, cluster=cluster_name)
                row.lower_bound_s, row.lp_bound_s = lp.simple_s, lp.value_s
                row.placer = name  # the item as given: gdp@0 and gdp are two rows
                rows.append(row)
                stopped = f", stopped: {row.stopped}" if row.stopped else ""
                progress(f"  {name}: {row.step_s * 1e3:.1f} ms in {row.search_s:.0f} s, "
                         f"{row.sims} simulations{stopped} {row.error}")
            if on_pair:
                on_pair(rows, infos)
    return rows, infos


# -------------------------------------------------------------------------------- output
def _num(x: float, digits: int = 4) -> str:
    return "" if x is None or not math.isfinite(x) else f"{x:.{digits}g}"


def _peaks(row: Row) -> str:
    return "/".join(f"{x:.1f}" for x in row.peak_gb)


def summary_markdown(rows: list[Row]) -> list[str]:
    """One line per pair: each placer's simulated step time in ms (bold: the fastest that fits;
    "OOM": over memory; "err": it raised), the LP bound, and the default placer's ratio to the
    expert and to the best other placer, with its search time."""
    placers = list(dict.fromkeys(r.placer for r in rows))
    pairs = list(dict.fromkeys((r.model, r.cluster) for r in rows))
    by = {(r.model, r.cluster, r.placer): r for r in rows}
    default = DEFAULT_PLACER if DEFAULT_PLACER in placers else None
    head = ["pair", *placers, "LP bound"]
    if default:
        head += [f"{default} / expert", f"{default} / best other", f"{default} search (s)"]
    lines = ["", "Simulated step time (ms) per placer:", "", "| " + " | ".join(head) + " |",
             "| --- |" + " ---: |" * (len(head) - 1)]
    for model, cluster in pairs:
        got = {p: by.get((model, cluster, p)) for p in placers}
        fits = {p: r.step_s for p, r in got.items()
                if r is not None and not r.error and not r.oom and math.isfinite(r.step_s)}
        best = min(fits.values(), default=math.nan)

        def cell(p):
            r = got[p]
            if r is None:
                return ""
            if r.error:
                return "err"
            text = f"{r.step_s * 1e3:.1f}" + (" OOM" if r.oom else "")
            return f"**{text}**" if p in fits and fits[p] == best else text
        any_row = next(r for r in got.values() if r is not None)
        line = [f"{model}:{cluster}", *(cell(p) for p in placers),
                f"{any_row.lp_bound_s * 1e3:.1f}" if math.isfinite(any_row.lp_bound_s) else ""]
        if default:
            mine = fits.get(default, math.nan)
            others = [v for p, v in fits.items() if p != default]
            line += [_num(mine / fits["expert"], 3) if "expert" in fits else "",
                     _num(mine / min(others), 3) if others else "",
                     _num(got[default].search_s, 3) if got[default] else ""]
        lines.append("| " + " | ".join(line) + " |")
    return lines


def markdown(rows: list[Row], infos: list[PairInfo], *, title: str) -> str:
    lines = [f"## {title}", *summary_markdown(rows), "",
             "| model | cluster | ops | groups | placer | step (s) | lower bound (s) | "
             "step / bound | LP bound (s) | step / LP bound | peak GB per device | OOM | "
             "search (s) | sims |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | "
             "---: | ---: |"]
    for r in rows:
        if r.error:
            lines.append(f"| {r.model} | {r.cluster} | {r.ops} | {r.groups} | {r.placer} | "
                         f"error: {r.error[:120].replace('|', '/')} | {_num(r.lower_bound_s)} "
                         f"| | {_num(r.lp_bound_s)} | | | | | |")
            continue
        lines.append(f"| {r.model} | {r.cluster} | {r.ops} | {r.groups} | {r.placer} | "
                     f"{_num(r.step_s)} | {_num(r.lower_bound_s)} | {_num(r.ratio, 3)} | "
                     f"{_num(r.lp_bound_s)} | {_num(r.lp_ratio, 3)} | {_peaks(r)} | "
                     f"{'yes' if r.oom else ''} | {_num(r.search_s, 2)} | "
                     f"{r.sims} |")
    lines += curve_markdown(rows)
    lines += ["", "Simulator speed (one random-group placement of the whole graph):", "",
              "| model | cluster | ops | groups | build (s) | ingest+cost+group (s) | "
              "lower bound (s) | LP bound (s) | LP bound time (s) | LP status | "
              "simulations / s |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for i in infos:
        lines.append(f"| {i.model} | {i.cluster} | {i.ops} | {i.groups} | {i.build_s:.1f} | "
                     f"{i.problem_s:.1f} | {_num(i.lower_bound_s)} | {_num(i.lp_bound_s)} | "
                     f"{_num(i.lp_solve_s, 2)} | {i.lp_status} | {i.sims_per_s:.0f} |")
    return "\n".join(lines) + "\n"


def curve_markdown(rows: list[Row]) -> list[str]:
    """The learned placers' searches: placements and seconds until their best sampled
    placement first reached the expert's step time of the same pair, and until it came within
    1% of the best it ended with ("~": seconds estimated, see :func:`search_curve`)."""
    learned = [r for r in rows if r.curve and not r.error]
    if not learned:
        return []
    expert = {(r.model, r.cluster): r.step_s for r in rows
              if r.placer == "expert" and not r.error and not r.oom}
    lines = ["", "Learned placers' searches (best sampled placement, before the comparison with "
             "the heuristics; placements / seconds until it reached the target):", "",
             "| model | cluster | placer | placements | best sampled (s) | expert (s) | "
             "to the expert | to within 1% of its best |",
             "| --- | --- | --- | ---: | ---: | ---: | --- | --- |"]

    def cell(point, timed):
        return "never" if point is None else f"{point[0]} / {'' if timed else '~'}{point[1]:.1f} s"

    for r in learned:
        final = min(best for _, _, best in r.curve)
        target = expert.get((r.model, r.cluster), math.nan)
        to_expert = reach(r.curve, target) if math.isfinite(target) else None
        lines.append(f"| {r.model} | {r.cluster} | {r.placer} | {r.curve[-1][0]} | "
                     f"{_num(final)} | {_num(target)} | "
                     f"{cell(to_expert, r.curve_timed) if math.isfinite(target) else ''} | "
                     f"{cell(reach(r.curve, final * 1.01), r.curve_timed)} |")
    return lines


CSV_FIELDS = ("model", "cluster", "ops", "groups", "placer", "step_s", "lower_bound_s",
              "ratio", "lp_bound_s", "lp_ratio", "peak_gb", "oom", "search_s", "sims", "stopped",
              "error")


def read_csv(path: str) -> list[Row]:
    """The rows :func:`write_csv` wrote (without the learned placers' curves), so that runs of
    different placers on the same pairs can be rendered as one report: a row depends only on
    its pair, placer and seed.

    Raises:
      OSError: ``path`` cannot be read.
      ConfigError: it is not such a CSV (a column missing, a value that is not a number),
        naming the line.
    """
    rows = []
    line = 1
    try:
        with open(path, newline="", encoding="utf-8") as f:
            for line, item in enumerate(csv.DictReader(f), start=2):
                rows.append(_row(item))
    except (KeyError, ValueError, TypeError, AttributeError, csv.Error) as e:  # (None: short)
        raise ConfigError(
            f"{path!r} line {line} is not a row of a benchmark CSV (tf-autoplace benchmark "
            f"--out_csv): {type(e).__name__} {e}; its columns are {', '.join(CSV_FIELDS)}"
            ) from e
    return rows


def _row(item: dict) -> Row:
    """A row of :func:`write_csv` read back (a missing column: KeyError; a bad number:
    ValueError)."""
    return Row(model=item["model"], cluster=item["cluster"], ops=int(item["ops"]),
               groups=int(item["groups"]), placer=item["placer"],
               step_s=float(item["step_s"] or "nan"),
               lower_bound_s=float(item["lower_bound_s"] or "nan"),
               lp_bound_s=float(item["lp_bound_s"] or "nan"),
               peak_gb=tuple(float(x) for x in item["peak_gb"].split("/") if x),
               oom=item["oom"] == "1", search_s=float(item["search_s"] or "nan"),
               sims=int(item["sims"] or 0), stopped=item.get("stopped", ""),
               error=item["error"])


def write_csv(path: str, rows: list[Row]) -> None:
    """The rows as CSV (:data:`CSV_FIELDS`), written whole or not at all."""
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(CSV_FIELDS)
    for r in rows:
        writer.writerow([r.model, r.cluster, r.ops, r.groups, r.placer, r.step_s,
                         r.lower_bound_s, r.ratio, r.lp_bound_s, r.lp_ratio, _peaks(r),
                         int(r.oom), r.search_s, r.sims, r.stopped, r.error])
    write_output(path, text.getvalue().encode("utf-8"))


def write_plot(path: str, rows: list[Row], placer_names) -> None:
    """Grouped bars: step time per placer (bars) per model and cluster (groups), log scale;
    OOM bars hatched."""
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    pairs = list(dict.fromkeys((r.model, r.cluster) for r in rows))
    width = 0.8 / len(placer_names)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(pairs) + 2), 4.5))
    for j, name in enumerate(placer_names):
        for i, pair in enumerate(pairs):
            row = next((r for r in rows if (r.model, r.cluster) == pair and r.placer == name),
                       None)
            if row is None or not math.isfinite(row.step_s):
                continue
            ax.bar(i + (j - (len(placer_names) - 1) / 2) * width, row.step_s, width,
                   color=f"C{j}", hatch="//" if row.oom else None, edgecolor="black",
                   linewidth=0.3, label=name if i == 0 else None)
    ax.set_xticks(range(len(pairs)))
    ax.set_xticklabels([f"{m}\n{c}" for m, c in pairs], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("simulated step time (s)")
    ax.set_title("Simulated step time per placer (hatched: does not fit in memory)")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
