r"""Placement across the tasks of a TensorFlow cluster, measured on local server processes:
predicted against measured step times of many placements per graph, and auto's placement
against one task alone and against replica_device_setter.

    PYTHONPATH=. python experiments/bench_tf_cluster.py --tasks=2 --ps_tasks=1 \
        --out_md=tf_cluster2.md --out_json=tf_cluster2.json
    PYTHONPATH=. python experiments/bench_tf_cluster.py --tasks=4 --ps_tasks=1 \
        --out_md=tf_cluster4.md        # 4 tasks on a 2-core machine: they share cores

For each graph of ``--graphs`` (:data:`GRAPHS`: a Wide & Deep recommender with sharded
embedding tables, an LSTM language model, a Transformer and a small Inception-V3), in a fresh
cluster of ``--tasks`` server processes on this machine (``tf_autoplace.hw.local_cluster``:
``--ps_tasks`` of them the job ``ps``, the others ``worker``; each pinned to a core of its own
where there are enough, else sharing, as the cluster's core groups say):

1. **profile** the servers (``tf_autoplace.hw.cluster_profile.profile_cluster``): every link
   over gRPC, and the graph's ops on each task; the profiled cluster and costs are what the
   simulator predicts with and what ``auto`` places with, after the latency of the links
   between tasks (with a delay in flight beside it, ``with_delay``) is fitted on the graph
   itself (``tf_autoplace.hw.link_fit.fit_latency``:
   the single-task placement, the graph on each other task and four placements with a share
   of the colocation groups moved off the first, measured under the protocol, other draws
   than step 2's; the other tasks' speeds are those these rounds measured);
2. **placements**: the whole graph on each task, ``replica_device_setter``, every fast
   heuristic, ``auto`` (``--auto_samples`` simulated placements, seed ``--seed``), colocation
   groups moved off the first task with several probabilities and uniformly random ones
   (``tf_autoplace.hw.fidelity.moved_share``, ``random``), identical placements counted once,
   until at least ``--min_placements``; and ``auto+verify``, the placement a user of
   ``verify`` gets (``--autoplace_verify``'s default on a cluster with a target): auto's, the
   best heuristic's and one task's placements measured on the servers in rounds of their own
   (``tf_autoplace.hw.verify``, 15 steps), the measured fastest applied unless one task is
   as fast within noise;
3. **predict** each placement's step time with the simulator;
4. **measure** each one on the servers with the fidelity tool's protocol
   (``tf_autoplace.hw.protocol.measure_placements`` on the cluster's target: every
   placement's Session open, ``--warmup_steps`` steps each, then ``--steps`` rounds of one step
   per placement in shuffled order; the median per placement with its 95% bootstrap interval);
5. report the Spearman rank correlation of predicted and measured step times, the median of
   ``|predicted / measured - 1|`` (also with the op times calibrated instead to a Session of
   the reference task measured in the rounds beside the placements, as the fidelity tool's
   last variant: the profile is minutes older than the rounds), how many pairs of placements
   the measurement told apart, and the measured steps of ``auto``'s and ``auto+verify``'s
   placements against the fastest single task and against ``replica_device_setter``
   (``slower`` when the placement's interval lies above the other's).

The 1-minute load average is recorded before and after each graph's timed rounds: this is a
shared machine (``--max_load`` waits for a quieter one before each graph, and again before the
timed rounds, as the fidelity tool does).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

import numpy as np
from absl import app, flags

from tf_autoplace import zoo
from tf_autoplace.cost import AnalyticalCostModel
from tf_autoplace.cost.profile import ProfileCostModel
from tf_autoplace.errors import AutoplaceError
from tf_autoplace.graph import ingest
from tf_autoplace.heuristics import FAST_HEURISTICS, SingleDevicePlacer
from tf_autoplace.hw import local_cluster
from tf_autoplace.hw.cluster_profile import profile_cluster
from tf_autoplace.hw.link_fit import fit_latency, reference_device, task_pairs
from tf_autoplace.hw.fidelity import distinct, median_relative_error, moved_share, spearman
from tf_autoplace.hw.profiler import with_step
from tf_autoplace.hw.protocol import measure_placements, wait_for_quiet
from tf_autoplace.hw.runner import RunConfig, on_cluster
from tf_autoplace.hw.verify import verify
from tf_autoplace.hw.workload import Workload
from tf_autoplace.pipeline.engine import verification_candidates
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.placers import AutoPlacer, get_placer

# name -> (zoo model, knobs): steps of tens of milliseconds on one core.
GRAPHS = {
    "wide_deep": ("wide_deep", dict(tables=8, vocab=10000, dim=32, ids_per_table=4,
                                    dense_features=16, layers=3, width=256, batch=256)),
    "lstm": ("rnnlm", dict(layers=2, length=8, batch=16, hidden=256, embedding_dim=256,
                           vocab=2000)),
    "transformer": ("transformer", dict(layers=2, length=32, batch=8, d_model=128, heads=4,
                                        d_ff=256, vocab=1000)),
    "cnn": ("inception_v3", dict(image_size=75, batch=2, num_classes=10)),
}
MOVE_SHARES = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5)
VERIFIED = "auto+verify"
VERIFY_STEPS = 15  # what --autoplace_verify is on a cluster with a target unless told
CALIBRATION = "calibration (reference task, in the rounds)"

flags.DEFINE_list("graphs", list(GRAPHS), f"graphs among {list(GRAPHS)}")
flags.DEFINE_integer("tasks", 2, "server processes")
flags.DEFINE_integer("ps_tasks", 1, "how many of them form the job 'ps'")
flags.DEFINE_integer("min_placements", 20, "distinct placements per graph, at least")
flags.DEFINE_integer("auto_samples", 4000, "simulated placements of auto's search")
flags.DEFINE_integer("steps", 15, "timed rounds per placement")
flags.DEFINE_integer("warmup_steps", 80, "untimed steps per placement first, fewer where they take over "
                     "2 s (TensorFlow's executor settles in about 70: hw.runner.WARMUP_STEPS)")
flags.DEFINE_integer("trace_steps", 10, "traced steps of the op profile on each task")
flags.DEFINE_integer("seed", 0, "placer and feed seed")
flags.DEFINE_float("max_load", None, "wait until the 1-minute load average is at most this "
                   "before each graph")
flags.DEFINE_string("out_md", None, "write the markdown tables here")
flags.DEFINE_string("out_json", None, "write every figure as JSON here")
FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class GraphFigures:
    graph: str
    knobs: dict
    num_ops: int
    tasks: tuple[str, ...]
    core_groups: tuple
    labels: tuple[str, ...]
    predicted_s: tuple[float, ...]
    predicted_in_rounds_s: tuple[float, ...]
    measured_s: tuple[float, ...]
    low_s: tuple[float, ...]
    high_s: tuple[float, ...]
    distinguishable: tuple[int, int]
    transfers: tuple[int, ...]
    load: tuple[float, float]
    class_fits: dict
    link_fit: str
    verify_decision: str
    seconds: float
    profile_step_s: float
    rounds_step_s: float

    def index(self, label: str) -> int:
        """The measured-fastest placement that ``label`` names (labels join names with " = ")."""
        return min((k for k, lab in enumerate(self.labels) if label in lab.split(" = ")),
                   key=lambda k: self.measured_s[k])

    def measured(self, label: str) -> float:
        return self.measured_s[self.index(label)]

    def slower(self, label: str, other: str) -> bool:
        """Whether ``label``'s interval lies above ``other``'s (slower beyond noise)."""
        return self.low_s[self.index(label)] > self.high_s[self.index(other)]

    @property
    def spearman(self) -> float:
        return spearman(self.predicted_s, self.measured_s)

    @property
    def median_error(self) -> float:
        return median_relative_error(self.predicted_s, self.measured_s)

    @property
    def median_error_in_rounds(self) -> float:
        return median_relative_error(self.predicted_in_rounds_s, self.measured_s)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def collect(problem, seed: int, minimum: int, auto_samples: int) -> list[tuple[str, np.ndarray]]:
    """Distinct placements and where each came from (module docstring)."""
    cluster, n = problem.cluster, problem.graph.num_ops
    candidates = []
    for k, task in enumerate(cluster.tasks):
        first = int(np.flatnonzero(cluster.device_tasks == k)[0])
        candidates.append((f"task {task.name}", SingleDevicePlacer(first).propose(problem)))
    candidates.append(("replica_device_setter",
                       get_placer("replica_device_setter").propose(problem)))
    for name in FAST_HEURISTICS:
        try:
            candidates.append((name, get_placer(name).propose(problem, seed=seed)))
        except AutoplaceError as e:
            log(f"  {name}: {e}")
    began = time.perf_counter()
    auto = AutoPlacer(max_samples=auto_samples)
    candidates.append(("auto", auto.place(problem, seed=seed).devices))
    log(f"  auto: {time.perf_counter() - began:.0f} s; {auto.notes[-1][:240]}")
    rng = np.random.default_rng(seed)
    candidates += [(f"moved {share:g}", moved_share(problem, share, rng)) for share in MOVE_SHARES]
    out = distinct(candidates)
    for k in range(10 * minimum + n):  # random placements until there are enough
        if len(out) >= minimum:
            break
        distinct([(f"random {k}", get_placer("random").propose(problem, seed=k))], out)
    return out


def run_graph(name: str) -> GraphFigures:
    model_name, knobs = GRAPHS[name]
    began = time.perf_counter()
    model = zoo.build(model_name, **knobs)
    workload = Workload.from_model(model, seed=FLAGS.seed)
    meta_graph = ingest.load_meta_graph(model.graph)
    wait_for_quiet(FLAGS.max_load, log)
    with local_cluster(FLAGS.tasks, ps_tasks=FLAGS.ps_tasks) as cluster:
        load_before = os.getloadavg()[0]
        log(f"{name}: {model_name} {knobs} on {[t.name for t in cluster.tasks]} "
            f"(core groups {cluster.core_groups}); load {load_before:.2f}")
        found = profile_cluster(
            cluster, workload, op_config=RunConfig(steps=10, warmup_steps=FLAGS.warmup_steps,
                                                   trace_steps=FLAGS.trace_steps),
            description=f"{name} {knobs}")
        log(f"  links: {found.class_fits}; op seconds per task: {found.task_seconds}")
        reference = reference_device(found)
        fitted, link_fit = fit_latency(
            found.cluster, found.profile, meta_graph, workload, reference=reference,
            pairs=task_pairs(found.cluster), what="between tasks", steps=FLAGS.steps,
            task_speeds=True, with_delay=True,
            config=RunConfig(warmup_steps=FLAGS.warmup_steps), seed=FLAGS.seed + 1)
        log(f"  {link_fit.summary()}")
        costs = ProfileCostModel.from_proto(found.profile,
                                            fallback=AnalyticalCostModel(meta_graph))
        problem, _ = build_problem(meta_graph, fitted, cost_model=costs)
        placements = collect(problem, FLAGS.seed, FLAGS.min_placements, FLAGS.auto_samples)
        names, ops = problem.cluster.names, problem.graph.names
        # What a user of verify gets (the training-binary flag's default on a cluster with a
        # target): auto's placement, the best heuristic's and one task measured on the
        # servers, the measured fastest applied unless one task is as fast within noise.
        # Its own rounds, before and apart from the benchmark's: the benchmark's rounds then
        # measure the applied placement again with every other one.
        auto = next(d for label, d in placements if "auto" in label.split(" = "))
        candidates = verification_candidates(problem, "auto", auto)
        verified = auto
        decision = "nothing to verify: auto and the best heuristic chose one task"
        if len(candidates) > 1:
            checked = verify(workload, candidates, steps=VERIFY_STEPS, seed=FLAGS.seed,
                             config=on_cluster(cluster))
            applied = next(c for c in candidates if c.name == checked.decision.applied)
            verified = np.array([names.index(applied.assignment[o]) for o in ops], np.int32)
            decision = f"applied {applied.name}: {checked.decision.reason}"
        log(f"  {VERIFIED}: {decision}")
        distinct([(VERIFIED, verified)], placements)
        log(f"  {len(placements)} distinct placements of {problem.graph.num_ops} ops; measuring")
        # One more Session with every op on the reference task, as its profile ran: the
        # calibration in the rounds (module docstring), not one of the placements compared.
        assignments = {label: dict(zip(ops, (names[d] for d in devices.tolist())))
                       for label, devices in placements}
        assignments[CALIBRATION] = {op: names[reference] for op in ops}
        measured = measure_placements(workload, assignments, steps=FLAGS.steps,
                                      warmup_steps=FLAGS.warmup_steps,
                                      config=on_cluster(cluster), seed=FLAGS.seed,
                                      max_load=FLAGS.max_load, log=log)
    in_rounds = ProfileCostModel.from_proto(
        with_step(found.profile, "CPU", measured[CALIBRATION].median_s),
        fallback=AnalyticalCostModel(meta_graph))
    recalibrated = build_problem(meta_graph, fitted, cost_model=in_rounds)[0].simulator
    sims = [problem.simulator.run(devices) for _, devices in placements]
    compared = measured.placements[:-1]  # without the calibration Session
    return GraphFigures(
        graph=name, knobs=knobs, num_ops=problem.graph.num_ops,
        tasks=tuple(t.name for t in problem.cluster.tasks),
        core_groups=tuple(problem.cluster.core_groups),
        labels=tuple(label for label, _ in placements),
        predicted_s=tuple(float(s.makespan) for s in sims),
        predicted_in_rounds_s=tuple(float(recalibrated.makespan(d)) for _, d in placements),
        measured_s=tuple(m.median_s for m in compared),
        low_s=tuple(m.low_s for m in compared),
        high_s=tuple(m.high_s for m in compared),
        distinguishable=dataclasses.replace(measured, placements=compared
                                            ).distinguishable_pairs(),
        profile_step_s=costs.measured_steps()["CPU"],
        rounds_step_s=measured[CALIBRATION].median_s,
        transfers=tuple(int(s.num_transfers) for s in sims),
        load=(measured.load_before, measured.load_after),
        class_fits={k: dataclasses.asdict(v) for k, v in found.class_fits.items()},
        link_fit=link_fit.summary(), verify_decision=decision,
        seconds=time.perf_counter() - began)


def _slower(result: GraphFigures, label: str, other: str) -> str:
    return " (slower)" if result.slower(label, other) else ""


def markdown(results: list[GraphFigures], title: str) -> str:
    lines = [f"## {title}", "",
             "| graph | ops | placements | distinguishable pairs | load (1 min) | Spearman | "
             "median abs rel error | calibrated in the rounds | one task, best (ms) | "
             "replica_device_setter (ms) | auto (ms) | auto / one task | "
             f"auto / replica_device_setter | {VERIFIED} (ms) | {VERIFIED} / one task | "
             f"{VERIFIED} / replica_device_setter |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: | ---: | ---: | ---: |"]
    for r in results:
        task = min((f"task {t}" for t in r.tasks), key=r.measured)
        single = r.measured(task)
        rds, auto = r.measured("replica_device_setter"), r.measured("auto")
        verified = r.measured(VERIFIED)
        lines.append(f"| {r.graph} | {r.num_ops} | {len(r.labels)} | "
                     f"{r.distinguishable[0]} / {r.distinguishable[1]} | {r.load[0]:.2f} -> "
                     f"{r.load[1]:.2f} | {r.spearman:.3f} | {r.median_error:.3f} | "
                     f"{r.median_error_in_rounds:.3f} | "
                     f"{single * 1e3:.2f} | {rds * 1e3:.2f} | {auto * 1e3:.2f} | "
                     f"{auto / single:.3f}{_slower(r, 'auto', task)} | "
                     f"{auto / rds:.3f}{_slower(r, 'auto', 'replica_device_setter')} | "
                     f"{verified * 1e3:.2f} | {verified / single:.3f}"
                     f"{_slower(r, VERIFIED, task)} | {verified / rds:.3f}"
                     f"{_slower(r, VERIFIED, 'replica_device_setter')} |")
    for r in results:
        lines += ["", f"### {r.graph} ({r.num_ops} ops, {r.knobs})", "",
                  f"Tasks {', '.join(r.tasks)}; core groups {list(r.core_groups)}; measured "
                  f"link classes {r.class_fits}; {r.link_fit}. {VERIFIED}: "
                  f"{r.verify_decision}. The reference task's "
                  "profiled step was "
                  f"{r.profile_step_s * 1e3:.2f} ms; a Session of it in the rounds measured "
                  f"{r.rounds_step_s * 1e3:.2f} ms.", "",
                  "| placement | transfers | predicted ms | predicted, calibrated in the rounds "
                  "ms | measured ms [95% interval] |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for k in np.argsort(r.measured_s).tolist():
            lines.append(f"| {r.labels[k]} | {r.transfers[k]} | {r.predicted_s[k] * 1e3:.2f} | "
                         f"{r.predicted_in_rounds_s[k] * 1e3:.2f} | "
                         f"{r.measured_s[k] * 1e3:.2f} [{r.low_s[k] * 1e3:.2f}, "
                         f"{r.high_s[k] * 1e3:.2f}] |")
    return "\n".join(lines) + "\n"


def main(argv):
    del argv
    unknown = sorted(set(FLAGS.graphs) - set(GRAPHS))
    if unknown:
        raise app.UsageError(f"unknown graphs {unknown}; choose among {list(GRAPHS)}")
    results = []
    for name in FLAGS.graphs:
        results.append(run_graph(name))
        r = results[-1]
        log(f"  {name}: Spearman {r.spearman:.3f}, median error {r.median_error:.3f}, "
            f"{r.seconds:.0f} s")
    shared = any(len(r.core_groups) < len(r.tasks) for r in results)  # a group of tasks
    title = (f"{FLAGS.tasks} local TensorFlow server processes ({FLAGS.ps_tasks} ps)"
             + (", sharing cores" if shared else ", each on a core of its own"))
    text = markdown(results, title)
    print(text)
    if FLAGS.out_md:
        with open(FLAGS.out_md, "w", encoding="utf-8") as f:
            f.write(text)
    if FLAGS.out_json:
        with open(FLAGS.out_json, "w", encoding="utf-8") as f:
            json.dump([dataclasses.asdict(r) for r in results], f, indent=1)
    return 0


if __name__ == "__main__":
    app.run(main)
