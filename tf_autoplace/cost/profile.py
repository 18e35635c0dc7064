"""ProfileCostModel: per-op times read from a measured cost profile (``protos/cost_profile.proto``).

A profile lists, for ops of one graph by node name, the time each took on a kind of device
("CPU", "GPU"), the way a profiler records it:

    description: "small_cnn, batch 8, K80"
    op { name: "left/Conv2D" device_kind: "GPU" compute_time_us: 41.5 output_bytes: 12544 }
    op { name: "left/Conv2D" device_kind: "CPU" compute_time_us: 380 }

A device of kind ``k`` gets ``time[op, k]`` divided by its speed relative to the kind's
reference device (:meth:`~tf_autoplace.core.cluster.Cluster.relative_speeds`): a measured time
holds for the device it was measured on as it is, and a spec's absolute ``speed`` (a shipped
host CPU's 16, which corrects Grappler's flop count) must not shrink it; only the speeds of a
kind's devices against each other (a TensorFlow cluster's tasks, measured against its
reference task) scale it. The measured time is taken as the whole op time, so the cluster's
``op_overhead_s`` is not added. Tensor sizes come from the graph; ``output_bytes`` (the op's
outputs in all, as the profiled graph's shapes gave them) only tells a profile of this graph at
another batch size or input shape: when a tenth of the ops whose sizes both know differ, that is
a ConfigError. ``op_type`` likewise tells another graph's profile whose op names match (a
frozen graph's for a training graph): a tenth of the ops both type with other types here is a
ConfigError, fewer are named in the report (``retyped``).

Ops the profile does not cover. An (op, kind) pair is *needed* when the op has a kernel for that
kind and the cluster has a device of that kind (an op without a kernel there costs ``inf``
anyway). A needed pair missing from the profile is

* an error (:class:`~tf_autoplace.errors.ConfigError` naming the ops) when no fallback is given:
  a profile that silently covers half the graph would give a placement tuned to a fiction;
* filled from ``fallback`` (any :class:`CostModel`, e.g. the analytical one) when one is given;
  ``num_unprofiled_ops`` then counts the ops that used it.

Op names in the profile that are not in the graph are ignored (a profile of a larger graph, or
of a run with extra ops, is fine); ``num_unused`` counts them. When they are most of the
profile's ops it is another graph's profile, a ConfigError. Those that ran in the profiled
step (a time above 0 on a kind: ``unused_ran`` counts them per kind) make that kind's
measured step a larger graph's, which does not calibrate this one (``measured_steps``). A
pair listed twice is an error: merge repeated measurements (e.g. take their median) before
writing the profile. A profile whose times for the graph's ops on the cluster's kinds are all
0 (or did_not_run) measured nothing, a broken profile (a converter that lost the times): a
ConfigError too, since every placement of it would simulate a step of 0.

What the profiled runs showed of how TensorFlow executes the graph, the simulator uses too:

* ``did_not_run`` marks an (op, kind) whose op Grappler folded or fused away in the run on that
  kind (its time is 0). :meth:`ProfileCostModel.executed_ops` takes an op as not running when
  it did not run on every kind of the cluster it has a kernel for, and the problem's simulator
  then runs the graph TensorFlow executes (:mod:`tf_autoplace.graph.executed`);
* ``partner`` and ``partner_apart_time_us`` give an (op, kind) the time it takes when its
  partner op is on another device (:meth:`ProfileCostModel.partner_times`; the simulator's
  "Partners"). An op has at most one partner, the same on every kind;
* a ``run`` of a kind gives the untraced step of the profiled run, every op on one device of
  that kind (:meth:`ProfileCostModel.measured_steps`). Op times come from traced steps, which
  run slower than untraced ones, and the simulator's cores are whole while a process runs a
  fractional number of ops at once; the problem's op times of that kind are therefore scaled
  so that the simulated single-device step equals this measured one (the calibration of
  :func:`tf_autoplace.pipeline.prepare.build_problem`, which refuses a factor no overhead
  explains: op times and a step that do not belong together).
"""

from __future__ import annotations

import os
import re

import numpy as np
from google.protobuf import message as _pb_message
from google.protobuf import text_format

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.units import format_bytes
from tf_autoplace.cost.model import CostModel
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.costgraph import MAX_TOTAL_SECONDS, tensorflow_format

# A measured step shorter than a nanosecond is a unit slip (op times are scaled by the steps).
MIN_STEP_SECONDS = 1e-9
from tf_autoplace.graph.opgraph import KERNEL_KINDS, OpGraph
from tf_autoplace.proto import cost_profile_pb2

_SHOW = 5  # missing op names quoted in an error message
# What to do with a file in another format, said by the errors that find one.
_TEXT_ONLY = ("it must be the text CostProfile that `tf-autoplace profile --out_profile` "
              "writes (protos/cost_profile.proto): profile the graph with tf-autoplace profile "
              "--graph=...")
# Control characters no text format has: a binary file's bytes, even where they decode.
_BINARY = re.compile(r"[\x00-\x08\x0e-\x1f]")
_BINARY_ERROR = ("the cost profile is a binary file (TensorFlow's RunMetadata, StepStats or "
                 "CostGraphDef, a compressed trace, or a binary CostProfile?), not text; "
                 + _TEXT_ONLY)
SIZE_TOLERANCE = 0.01  # output sizes closer than this (relative) are the same workload's
# A profile is another workload's when this share of the ops whose output sizes it and the
# graph both know differ: a batch size changes only the activations (a fifth of a small conv
# net's ops; variables, their updates and initializers keep their sizes).
SIZE_SHARE = 0.1


def _check_time(what: str, t, unit: str = "s") -> None:
    """ConfigError unless ``t`` is finite and >= 0; the message gives it in ``unit``, as the
    caller has it (a profile file's microseconds, as written)."""
    t = float(t)
    if not (np.isfinite(t) and t >= 0):
        raise ConfigError(f"{what} is {t:g} {unit}; must be finite and >= 0")


# Op types that run functions; besides these, every type ending in "While" or "If".
_CALLS = ("PartitionedCall", "StatefulPartitionedCall", "Case", "StatelessCase")


def _inside_calls(graph: OpGraph, names) -> set:
    """Of ``names``, those under an op of ``graph`` that runs functions (a functional while
    loop, cond or call): step stats name the lowered body's nodes (``loop/body/_1/MatMul``)
    where the graph has the calling op (``loop``)."""
    callers = {name for name, op in zip(graph.names, graph.op_types)
               if op in _CALLS or op.endswith(("While", "If"))}

    def scopes(name):  # "a/b/c" -> {"a", "a/b"}
        parts = name.split("/")
        return {"/".join(parts[:k]) for k in range(1, len(parts))}

    return {name for name in names if scopes(name) & callers}


def _check_kind(what: str, kind) -> None:
    if kind not in KERNEL_KINDS:
        raise ConfigError(f"{what} has device_kind {kind!r} in the profile; kinds are "
                          f"{KERNEL_KINDS} (a kind of device, not a device's name)")


class ProfileCostModel(CostModel):
    """Op times from a cost profile (see module doc).

    Args:
      times: {op name: {device kind: seconds}}.
      fallback: cost model for needed (op, kind) pairs the profile lacks; None makes them an
        error.
      not_run: (op name, device kind) pairs whose op did not run as a kernel of its own in
        the profiled run on that kind; their time must be 0.
      partners: {(op name, device kind): (partner op name, seconds)}: the op's time on that
        kind when the partner is on another device.
      steps: {device kind: seconds}: the untraced step of the profiled run on that kind
        (:meth:`measured_steps`).

    Raises:
      ConfigError: a device kind other than "CPU" and "GPU", a time that is negative or not
        finite, times of one kind that add up to more than ``MAX_TOTAL_SECONDS``, a pair of
        ``not_run`` or ``partners`` without a time, an op marked not run with a time, or an
        op with two partners (or itself as its partner), a step that is not positive and
        finite.
    """

    def __init__(self, times: dict[str, dict[str, float]], *, fallback: CostModel | None = None,
                 not_run=(), partners: dict | None = None, steps: dict | None = None,
                 output_bytes: dict | None = None, op_types: dict | None = None):
        self._bytes = {str(name): int(b) for name, b in (output_bytes or {}).items() if b > 0}
        self._types = {str(name): str(t) for name, t in (op_types or {}).items() if t}
        self._times = {}
        for name, per_kind in times.items():
            for kind, t in per_kind.items():
                _check_kind(f"op {name!r}", kind)
                _check_time(f"profile time of op {name!r} on {kind}", t)
            self._times[name] = {k: float(t) for k, t in per_kind.items()}
        for kind in KERNEL_KINDS:
            total = sum(per_kind.get(kind, 0.0) for per_kind in self._times.values())
            if not total <= MAX_TOTAL_SECONDS:
                raise ConfigError(
                    f"the profile's times on {kind} add up to {total:.3g} s, more than "
                    f"{MAX_TOTAL_SECONDS:.0e} s (30 years) for one step: check their unit "
                    "(compute_time_us is in microseconds)")
        self._not_run = frozenset((str(name), str(kind)) for name, kind in not_run)
        for name, kind in sorted(self._not_run):
            t = self._times.get(name, {}).get(kind)
            if t is None:
                raise ConfigError(f"op {name!r} on {kind} is marked did_not_run but has no "
                                  "time in the profile")
            if t != 0:
                raise ConfigError(f"op {name!r} on {kind} is marked did_not_run but has a time "
                                  f"of {t * 1e6:g} us; an op that did not run takes 0")
        self._partners = {}
        partner_of = {}
        for (name, kind), (partner, t) in sorted((partners or {}).items()):
            _check_time(f"partner time of op {name!r} on {kind}", t)
            if kind not in self._times.get(name, {}):
                raise ConfigError(f"op {name!r} on {kind} has a partner time but no time")
            if partner == name:
                raise ConfigError(f"op {name!r} names itself as its partner")
            if partner_of.setdefault(name, partner) != partner:
                raise ConfigError(f"op {name!r} has partners {partner_of[name]!r} and "
                                  f"{partner!r}; an op has one partner")
            self._partners[(name, kind)] = (str(partner), float(t))
        self._steps = {}
        for kind, t in sorted((steps or {}).items()):
            _check_kind("a run", kind)
            _check_time(f"measured step on {kind}", t)
            if not MIN_STEP_SECONDS <= t <= MAX_TOTAL_SECONDS:  # (op times scale by it)
                raise ConfigError(f"the measured step on {kind} must be between "
                                  f"{MIN_STEP_SECONDS:g} and {MAX_TOTAL_SECONDS:.0e} seconds, "
                                  f"got {t!r}: check its unit (step_time_us is in "
                                  "microseconds)")
            self._steps[str(kind)] = float(t)
        self.fallback = fallback
        self.num_unprofiled_ops = 0
        self.unprofiled_kinds: tuple[str, ...] = ()  # the kinds those ops lacked a time on
        self.unprofiled_counts: dict[str, int] = {}  # ... and how many lacked one on each
        self.num_unused = 0
        self.unused_ran: dict[str, int] = {}  # kind -> ops not in the graph timed on it
        self.num_unused_ran = 0  # ops not in the graph timed above 0 on some kind
        self.unstepped_kinds: tuple[str, ...] = ()  # the cluster's kinds timed, with no run
        self.retyped: list[tuple[str, str, str]] = []  # (op, type in the profile, type here)

    # ------------------------------------------------------------------------- constructors
    @classmethod
    def from_proto(cls, profile: cost_profile_pb2.CostProfile, *,
                   fallback: CostModel | None = None) -> "ProfileCostModel":
        times: dict[str, dict[str, float]] = {}
        not_run, partners, sizes, types = [], {}, {}, {}
        for entry in profile.op:
            if entry.output_bytes > 0:
                sizes.setdefault(entry.name, entry.output_bytes)
            if entry.op_type:
                types.setdefault(entry.name, entry.op_type)
            if not entry.name or not entry.device_kind:
                raise ConfigError(f"profile entry without name or device_kind: "
                                  f"{text_format.MessageToString(entry, as_one_line=True)!r}")
            per_kind = times.setdefault(entry.name, {})
            if entry.device_kind in per_kind:
                raise ConfigError(f"op {entry.name!r} on {entry.device_kind} appears twice in the "
                                  "profile; merge repeated measurements before writing it")
            _check_time(f"compute_time_us of op {entry.name!r} on {entry.device_kind}",
                        entry.compute_time_us, "us")
            per_kind[entry.device_kind] = entry.compute_time_us * 1e-6
            if entry.did_not_run:
                not_run.append((entry.name, entry.device_kind))
            if entry.partner:
                _check_time(f"partner_apart_time_us of op {entry.name!r} on "
                            f"{entry.device_kind}", entry.partner_apart_time_us, "us")
                partners[(entry.name, entry.device_kind)] = (
                    entry.partner, entry.partner_apart_time_us * 1e-6)
        steps = {}
        for run in profile.run:
            if run.device_kind and run.step_time_us != 0:  # 0: not given; NaN or < 0: refused
                if run.device_kind in steps:
                    raise ConfigError(f"the profile has two runs on {run.device_kind}")
                _check_time(f"step_time_us of the run on {run.device_kind}", run.step_time_us,
                            "us")
                steps[run.device_kind] = run.step_time_us * 1e-6
        return cls(times, fallback=fallback, not_run=not_run, partners=partners, steps=steps,
                   output_bytes=sizes, op_types=types)

    @classmethod
    def from_text(cls, text: str, *, fallback: CostModel | None = None) -> "ProfileCostModel":
        """Parse a text-format ``CostProfile``; one that times no op (an empty file) is a
        ConfigError, and so are binary data and TensorFlow's own profiling formats
        (:func:`~tf_autoplace.graph.costgraph.tensorflow_format`: what a FULL_TRACE step
        gives), which the error names."""
        if _BINARY.search(text[:200]):
            raise ConfigError(_BINARY_ERROR)
        try:
            profile = text_format.Parse(text, cost_profile_pb2.CostProfile())
        except (text_format.ParseError, _pb_message.DecodeError) as e:
            other = tensorflow_format(text[:2000].encode("utf-8", "replace"))
            if other == "GraphDef":
                raise ConfigError("the cost profile is a TensorFlow GraphDef, the graph "
                                  f"itself, not its op times; {_TEXT_ONLY}") from e
            if other:
                raise ConfigError(f"the cost profile is TensorFlow's own {other}, another "
                                  f"format; {_TEXT_ONLY}") from e
            raise ConfigError(f"malformed cost profile: {e}") from e
        if not profile.op:  # an empty file: a mistake, not a profile of nothing
            raise ConfigError("the cost profile times no op: it has no `op { name: ... "
                              "device_kind: ... compute_time_us: ... }` entries")
        return cls.from_proto(profile, fallback=fallback)

    @classmethod
    def from_file(cls, path: str | os.PathLike, *,
                  fallback: CostModel | None = None) -> "ProfileCostModel":
        """Read a text-format ``CostProfile`` file (see :meth:`from_text`)."""
        try:
            with open(path, "r", encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError as e:
            raise ConfigError(f"{path}: {_BINARY_ERROR}") from e
        except OSError as e:
            raise ConfigError(f"cannot read cost profile {str(path)!r}: {e}") from e
        try:
            return cls.from_text(text, fallback=fallback)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from e

    def to_proto(self, description: str = "") -> cost_profile_pb2.CostProfile:
        out = cost_profile_pb2.CostProfile(description=description)
        for name, per_kind in self._times.items():
            for kind, t in sorted(per_kind.items()):
                partner, apart = self._partners.get((name, kind), ("", 0.0))
                out.op.add(name=name, device_kind=kind, compute_time_us=t * 1e6,
                           output_bytes=self._bytes.get(name, 0),
                           op_type=self._types.get(name, ""),
                           did_not_run=(name, kind) in self._not_run, partner=partner,
                           partner_apart_time_us=apart * 1e6)
        for kind, t in self._steps.items():
            out.run.add(device_kind=kind, step_time_us=t * 1e6)
        return out

    def _check_sizes(self, graph: OpGraph) -> None:
        """ConfigError when :data:`SIZE_SHARE` or more of the ops whose output sizes both the
        profile and the graph know produce other sizes here: a profile of this model at
        another batch size or input shape, whose times would be another workload's."""
        if not self._bytes:
            return
        index = {name: i for i, name in enumerate(graph.names)}
        compared, differ = 0, []
        for name, recorded in self._bytes.items():
            i = index.get(name)
            if i is None:
                continue
            here = int(graph.output_bytes[i])
            if not graph.shape_known[i] or here <= 0:
                continue
            compared += 1
            if abs(here - recorded) > SIZE_TOLERANCE * max(here, recorded):
                differ.append((name, recorded, here))
        if differ and len(differ) >= SIZE_SHARE * compared:
            name, recorded, here = differ[0]
            raise ConfigError(
                f"the cost profile was taken with other tensor sizes: {len(differ)} of the "
                f"{compared} ops whose outputs both know differ (e.g. {name!r}: "
                f"{format_bytes(recorded)} in the profile, {format_bytes(here)} here), so it "
                "times this model at another batch size or input shape; profile the graph as "
                "it runs (tf-autoplace profile --graph=...)")

    def _check_types(self, graph: OpGraph) -> None:
        """Compare the op types the profile records with the graph's: a ConfigError when
        :data:`SIZE_SHARE` or more of the ops both name differ (a profile of another graph
        whose op names match, such as the frozen inference graph of a training graph:
        ``kernel`` a Const there, a VarHandleOp here, and the gradients not timed at all);
        otherwise ``retyped`` lists the ops that differ, which the report names."""
        index = {name: i for i, name in enumerate(graph.names)}
        compared, self.retyped = 0, []
        for name, recorded in self._types.items():
            i = index.get(name)
            if i is None:
                continue
            compared += 1
            if graph.op_types[i] != recorded:
                self.retyped.append((name, recorded, graph.op_types[i]))
        if self.retyped and len(self.retyped) >= SIZE_SHARE * compared:
            name, recorded, here = self.retyped[0]
            raise ConfigError(
                f"the cost profile is another graph's: {len(self.retyped)} of the {compared} "
                f"ops it names have another type here (e.g. {name!r}: {recorded} in the "
                f"profile, {here} here; a frozen or rewritten graph's profile?), so its times "
                "are not this graph's ops'; profile this graph (tf-autoplace profile "
                "--graph=...)")

    def measured_steps(self) -> dict[str, float]:
        """The profiled runs' untraced single-device steps by device kind, for the kinds on
        which the last op times made timed every op from the profile and the profile timed no
        op this graph lacks: where some ops of a kind have estimated times, those are not the
        run's, so its step does not calibrate them (a CPU profile still calibrates the CPUs of
        a cluster whose GPUs it did not time); where the run also ran other ops (a larger
        graph's profile), its step is not this graph's."""
        return {kind: step for kind, step in self.profiled_steps.items()
                if kind not in self.unprofiled_kinds and kind not in self.unused_ran}

    @property
    def profiled_kinds(self) -> tuple[str, ...]:
        """The device kinds the profile times ops on, whatever the graph."""
        return tuple(sorted({kind for per_kind in self._times.values() for kind in per_kind}))

    @property
    def profiled_steps(self) -> dict[str, float]:
        """The untraced single-device steps the profile holds, by device kind, whatever the
        graph."""
        return dict(self._steps)

    # ----------------------------------------------------------------- how the graph runs
    def executed_ops(self, graph: OpGraph, cluster: Cluster) -> np.ndarray | None:
        """[n] bool: False for an op marked ``did_not_run`` on every device kind of the
        cluster it has a kernel for; None when the profile marks none."""
        if not self._not_run:
            return None
        kinds = sorted({d.kind for d in cluster.devices})
        ran = np.ones(graph.num_ops, bool)
        for i, name in enumerate(graph.names):
            runnable = [k for k in kinds if k in graph.kernel_kinds
                        and graph.kernels[i, graph.kernel_kinds.index(k)]]
            if runnable and all((name, k) in self._not_run for k in runnable):
                ran[i] = False
        return None if ran.all() else ran

    def partner_times(self, graph: OpGraph, cluster: Cluster, op_time: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray] | None:
        """``(partner, partner_time)`` from the profile's partner entries whose op and
        partner are both in ``graph`` (a device of kind k gets the kind's time divided by its
        relative speed, as op times are; ``op_time`` elsewhere); None when there is none."""
        partner = np.full(graph.num_ops, -1, np.int32)
        apart = np.array(op_time, np.float64)
        relative = cluster.relative_speeds()
        names = set(graph.names)
        for (name, kind), (other, t) in self._partners.items():
            if name not in names or other not in names:
                continue
            i = graph.index(name)
            for d, device in enumerate(cluster.devices):
                if device.kind == kind and np.isfinite(op_time[i, d]):
                    partner[i] = graph.index(other)
                    apart[i, d] = t / relative[d]
        if (partner < 0).all():
            return None
        return partner, apart

    # --------------------------------------------------------------------------- CostModel
    def _op_time(self, graph: OpGraph, cluster: Cluster) -> np.ndarray:
        n, kinds = graph.num_ops, sorted({d.kind for d in cluster.devices})
        table = {k: np.full(n, np.nan) for k in kinds}
        for i, name in enumerate(graph.names):
            for k, t in self._times.get(name, {}).items():
                if k in table:
                    table[k][i] = t
        unused = set(self._times) - set(graph.names)
        self.num_unused = len(unused)
        ran = [k for name in unused for k, t in self._times[name].items() if t > 0]
        self.unused_ran = {k: ran.count(k) for k in sorted(set(ran))}
        self.num_unused_ran = sum(any(t > 0 for t in self._times[name].values())
                                  for name in unused)
        covered = len(self._times) - self.num_unused
        if self.num_unused > covered:  # most of what it timed is not here
            inside = _inside_calls(graph, unused)
            raise ConfigError(
                f"the cost profile times {self.num_unused} ops this graph does not have and "
                f"{covered} of its {n} ops: "
                + (f"{len(inside)} of them are ops TensorFlow ran inside this graph's while "
                   f"loops, conds or function calls (e.g. {sorted(inside)[:2]}), which a "
                   "profile times as the op that calls them (the sum of their times)"
                   if inside else "it is another graph's profile")
                + "; profile this graph with tf-autoplace profile --graph=..., which does so")
        self._check_sizes(graph)
        self._check_types(graph)
        if covered and all(np.isnan(table[k]).all() for k in kinds):
            timed = sorted({k for name in graph.names for k in self._times.get(name, {})})
            raise ConfigError(
                f"the cost profile times this graph's ops on {'/'.join(timed)} devices only, "
                f"and the cluster's devices are {'/'.join(kinds)}: it is another machine's "
                "profile; profile on this cluster's kind of device (tf-autoplace profile), or "
                "place without it")
        given = np.concatenate([table[k][~np.isnan(table[k])] for k in kinds])
        if len(given) and not given.any():
            raise ConfigError(
                f"the cost profile times all {len(given)} (op, device kind) pairs it has for "
                f"this graph's ops on {'/'.join(kinds)} at 0 us (or marks them did_not_run): "
                "nothing was measured, it is a broken profile (e.g. a converter that lost the "
                "times); profile the graph again with tf-autoplace profile --graph=...")

        self.unstepped_kinds = tuple(k for k in kinds if k not in self._steps
                                     and (table[k][np.isfinite(table[k])] > 0).any())
        needed = {}
        for k in kinds:
            has_kernel = (graph.kernels[:, graph.kernel_kinds.index(k)]
                          if k in graph.kernel_kinds else np.zeros(n, bool))
            needed[k] = np.isnan(table[k]) & has_kernel
            table[k][np.isnan(table[k]) & ~has_kernel] = np.inf  # masked by op_time() anyway
        missing = np.zeros(n, bool)
        for k in kinds:
            missing |= needed[k]
        self.num_unprofiled_ops = 0
        self.unprofiled_kinds = tuple(k for k in kinds if needed[k].any())
        self.unprofiled_counts = {k: int(needed[k].sum()) for k in self.unprofiled_kinds}
        if missing.any() and self.fallback is None:
            ops = np.flatnonzero(missing)
            shown = ", ".join(
                f"{graph.names[i]!r} ({'/'.join(k for k in kinds if needed[k][i])})"
                for i in ops[:_SHOW])
            more = f" and {len(ops) - _SHOW} more" if len(ops) > _SHOW else ""
            raise ConfigError(f"the cost profile has no time for {len(ops)} of {n} ops on a "
                              f"device kind they can run on: {shown}{more}; profile them or "
                              "pass a fallback cost model")

        out = np.empty((n, cluster.num_devices))
        relative = cluster.relative_speeds()
        for d, device in enumerate(cluster.devices):
            out[:, d] = table[device.kind] / relative[d]
        if missing.any():
            base = self.fallback.op_time(graph, cluster)
            fill = np.stack([needed[dev.kind] for dev in cluster.devices], axis=1)
            out[fill] = base[fill]
            self.num_unprofiled_ops = int(missing.sum())
        return out
