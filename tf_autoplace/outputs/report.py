"""PlacementReport: what a placement is predicted to do, read against its limits.

Every predicted figure comes from the simulator with the same cost model: the placed step time,
two lower bounds no valid placement can beat (the simple one and the tighter LP bound of
:mod:`tf_autoplace.sim.lp_bound`), and the all-on-one-device baseline (which may not fit in
memory: ``baseline_fits`` says so).

:func:`tf_autoplace.hw.measure.measure` adds what this machine measures, under the measurement
protocol (:mod:`tf_autoplace.hw.protocol`): the median step times of the placed graph and of the
single-device baseline with their 95% intervals and the machine's load beside the predicted
ones, and the traced step of the placed graph beside the simulated one in the Chrome trace.
Verification (``verify=N``, :mod:`tf_autoplace.hw.verify`) adds every candidate it measured,
which one was applied, and why.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math

import numpy as np

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.units import ms_decimals
from tf_autoplace.errors import ConfigError
from tf_autoplace.outputs import files, timeline
from tf_autoplace.proto import placement_pb2
from tf_autoplace.sim import SimResult


def json_text(value) -> str:
    """``value`` (dicts, lists, numbers, strings) as standard JSON, indented, keys sorted: a
    float that is NaN or infinite becomes ``null``, which every JSON parser reads (Python's
    ``json`` would write ``NaN``, which is not JSON); anything else not JSON is its ``str``."""
    def finite(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [finite(x) for x in v]
        return v

    return json.dumps(finite(value), indent=2, sort_keys=True, allow_nan=False, default=str)


@dataclasses.dataclass(frozen=True)
class DeviceLoad:
    """One device's share of a simulated step."""

    name: str
    kind: str
    num_ops: int
    compute_s: float
    peak_memory_bytes: int
    memory_bytes: int

    @property
    def fits(self) -> bool:
        return self.peak_memory_bytes <= self.memory_bytes


_NOT_IN_DICT = ("assignment", "graph_def", "timeline", "policy", "baseline_assignment",
                "verification")
_NAN2 = (math.nan, math.nan)


def device_loads(cluster: Cluster, devices: np.ndarray, sim: SimResult) -> tuple[DeviceLoad, ...]:
    counts = np.bincount(devices, minlength=cluster.num_devices)
    return tuple(
        DeviceLoad(name=d.name, kind=d.kind, num_ops=int(counts[i]), compute_s=float(sim.busy[i]),
                   peak_memory_bytes=int(sim.peak_memory[i]), memory_bytes=d.memory_bytes)
        for i, d in enumerate(cluster.devices))


def _ratio(num: float, den: float) -> float:
    """``num / den`` for the report's ratios, where a step can take 0 s (a cost graph or profile
    whose ops all take 0 s): two equal zeros are a ratio of 1, a positive time over 0 is inf."""
    if den == 0:
        return 1.0 if num == 0 else math.inf
    return num / den


@dataclasses.dataclass(frozen=True)
class PlacementReport:
    """The result of :func:`tf_autoplace.autoplace`.

    Attributes:
      placer: the placer whose placement was applied.
      step_time_s: simulated step time of the placement.
      lower_bound_s: no placement on this cluster can simulate faster (the simple bound:
        critical path at fastest times, or total work over all devices).
      lp_lower_bound_s: no valid placement can simulate faster (:func:`tf_autoplace.sim.
        lp_lower_bound`: the path with transfers and per-device-class load; NaN if unknown).
      devices: per-device ops, compute seconds and peak memory of the placement.
      baseline_step_time_s / baseline_devices: the same for all ops on one device.
      num_ops, num_groups, num_colocation_groups: graph sizes.
      ops_with_unknown_shapes: ops whose output sizes used the unknown-dimension fallback.
      timings_s: seconds spent in each stage (ingest, cost, group, place, rewrite).
      notes: anything the user should know (fallbacks taken, ...).
      seed: the seed the placer was given (None if unknown).
      graph_fingerprint: the placed graph's fingerprint (:mod:`tf_autoplace.graph.
        fingerprint`), which ``to_proto`` records so the placement can be applied again.
      from_cache: the placement was read from the placement cache, not searched for.
      cache_entry: the cache entry it was read from ("" when searched). The printed report
        says so; the PlacementResult does not, so that a hit gives the bytes the search gave.
      assignment: op name -> device string (not included in ``to_dict``).
      graph_def: the placed GraphDef copy when the input was not a tf.Graph (else None; not
        included in ``to_dict``); for a MetaGraphDef input, its GraphDef placed (the
        MetaGraphDef's other fields are the caller's to keep).
      timeline: the simulated step of the placement (a ``tf_autoplace.outputs.timeline.TimelineData``:
        graph, cluster, placement, simulation, and a measured step once measured) for
        ``write_chrome_trace`` / ``write_plot`` (None when not kept; not included in
        ``to_dict``).
      policy: the policy a learned placer fine-tuned on this graph, which :meth:`save_policy`
        writes (None for other placers and for a placement from the cache; not included in
        ``to_dict``).
      measure_steps: timed steps behind each measured figure (0: not measured).
      measured_step_time_s / measured_baseline_step_time_s: median measured step time of the
        placement and of the single-device baseline on the cluster's devices (this machine's,
        or a TensorFlow cluster's servers; NaN: not measured), by ``measure_steps`` or, without
        it, by verification (its first set of sessions, where every candidate ran).
      measured_step_interval_s / measured_baseline_interval_s: their 95% bootstrap intervals
        (low, high), in seconds (NaN: not measured).
      measure_load: the machine's 1-minute load average before and after measuring.
      verification: what verification measured and decided (a
        :class:`tf_autoplace.hw.verify.Verification`; None without ``verify``); ``to_dict``
        gives its rows.
      baseline_assignment: op name -> device of the single-device baseline (not included in
        ``to_dict``).
    """

    placer: str
    step_time_s: float
    lower_bound_s: float
    devices: tuple[DeviceLoad, ...]
    baseline_step_time_s: float
    baseline_devices: tuple[DeviceLoad, ...]
    num_ops: int
    num_groups: int
    num_colocation_groups: int
    ops_with_unknown_shapes: int
    timings_s: dict
    notes: tuple[str, ...] = ()
    seed: int | None = None
    lp_lower_bound_s: float = math.nan
    graph_fingerprint: str = ""
    from_cache: bool = False
    cache_entry: str = ""
    measure_steps: int = 0
    measured_step_time_s: float = math.nan
    measured_baseline_step_time_s: float = math.nan
    measured_step_interval_s: tuple = _NAN2
    measured_baseline_interval_s: tuple = _NAN2
    measure_load: tuple = _NAN2
    verification: object = dataclasses.field(default=None, repr=False, compare=False)
    assignment: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)
    graph_def: object = dataclasses.field(default=None, repr=False, compare=False)
    timeline: object = dataclasses.field(default=None, repr=False, compare=False)
    policy: object = dataclasses.field(default=None, repr=False, compare=False)
    baseline_assignment: dict = dataclasses.field(default_factory=dict, repr=False,
                                                  compare=False)

    @property
    def measured_speedup(self) -> float:
        """Measured baseline step time over measured placed step time (NaN: not measured)."""
        return _ratio(self.measured_baseline_step_time_s, self.measured_step_time_s)

    @property
    def speedup(self) -> float:
        """Baseline step time over placed step time."""
        return _ratio(self.baseline_step_time_s, self.step_time_s)

    @property
    def ratio_to_lower_bound(self) -> float:
        """Placed step time over ``lower_bound_s`` (the critical-path and load bound): how many
        times slower than that bound the placement may be at most (NaN without one)."""
        return _ratio(self.step_time_s, self.lower_bound_s)

    @property
    def ratio_to_lp_lower_bound(self) -> float:
        """Placed step time over ``lp_lower_bound_s``, the tighter LP bound (NaN without one);
        :attr:`optimality_gap` says the same in percent."""
        return _ratio(self.step_time_s, self.lp_lower_bound_s)

    @property
    def optimality_gap(self) -> float | None:
        """The certificate: the placement is at most this many percent slower than the best
        possible placement under this cost model (the simulator with these op times), i.e.
        ``100 * (step_time_s / lp_lower_bound_s - 1)``, since no valid placement simulates
        faster than ``lp_lower_bound_s``. None without a bound (NaN, or 0 under a positive
        step); 0 when both are 0."""
        bound, step = self.lp_lower_bound_s, self.step_time_s
        if not math.isfinite(bound) or not math.isfinite(step) or (bound <= 0 < step):
            return None
        return 0.0 if step == bound or bound <= 0 else max(0.0, 100.0 * (step / bound - 1.0))

    def certificate(self) -> str | None:
        """The certificate as a sentence (None without a bound)."""
        gap = self.optimality_gap
        if gap is None:
            return None
        return (f"at most {gap:.1f}% slower than the best possible placement under this cost "
                "model")

    @property
    def baseline_fits(self) -> bool:
        """Whether the single-device baseline fits every device's memory (when it does not,
        ``speedup`` compares against a placement that could not run)."""
        return all(d.fits for d in self.baseline_devices)

    def to_dict(self) -> dict:
        """The report as plain JSON-ready values: what ``--report_json`` and
        ``--autoplace_report`` write. Every field but the graph, timeline and policy objects,
        the per-device figures as dicts, and the derived figures (``speedup``,
        ``measured_speedup``, ``ratio_to_lower_bound``, ``ratio_to_lp_lower_bound``,
        ``baseline_fits``, ``optimality_gap``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in _NOT_IN_DICT}
        out["devices"] = [dataclasses.asdict(d) for d in self.devices]
        out["baseline_devices"] = [dataclasses.asdict(d) for d in self.baseline_devices]
        out["notes"] = list(self.notes)
        out.update(speedup=self.speedup, ratio_to_lower_bound=self.ratio_to_lower_bound,
                   ratio_to_lp_lower_bound=self.ratio_to_lp_lower_bound,
                   baseline_fits=self.baseline_fits, measured_speedup=self.measured_speedup,
                   optimality_gap=self.optimality_gap)
        for name in ("measured_step_interval_s", "measured_baseline_interval_s",
                     "measure_load"):
            out[name] = list(out[name])
        if self.verification is not None:
            measured = self.verification.measured
            out["verification"] = dict(candidates=self.verification.rows(),
                                       confirmation=self.verification.rows(confirmation=True),
                                       applied=self.verification.decision.applied,
                                       reason=self.verification.decision.reason,
                                       steps=measured.steps, load_before=measured.load_before,
                                       load_after=measured.load_after)
        return out

    def to_json(self) -> str:
        """:meth:`to_dict` as standard JSON (a figure that is NaN or infinite, such as a
        measured time that was not measured, is ``null``)."""
        return json_text(self.to_dict())

    def to_proto(self):
        """The placement as a ``tf_autoplace.PlacementResult`` (``protos/placement.proto``)."""
        out = placement_pb2.PlacementResult(
            placer=self.placer, step_time_s=self.step_time_s, lower_bound_s=self.lower_bound_s,
            lp_lower_bound_s=self.lp_lower_bound_s,
            baseline_step_time_s=self.baseline_step_time_s, num_groups=self.num_groups,
            note=list(self.notes), graph_fingerprint=self.graph_fingerprint,
            measure_steps=self.measure_steps, measured_step_time_s=self.measured_step_time_s,
            measured_baseline_step_time_s=self.measured_baseline_step_time_s,
            measured_step_low_s=self.measured_step_interval_s[0],
            measured_step_high_s=self.measured_step_interval_s[1],
            measured_baseline_low_s=self.measured_baseline_interval_s[0],
            measured_baseline_high_s=self.measured_baseline_interval_s[1],
            measure_load_before=self.measure_load[0], measure_load_after=self.measure_load[1])
        out.verify_load_before = out.verify_load_after = math.nan
        if self.verification is not None:
            for field, confirmation in ((out.verified, False), (out.verify_confirmed, True)):
                for row in self.verification.rows(confirmation=confirmation):
                    field.add(**{key: value for key, value in row.items() if value is not None})
            out.verify_reason = self.verification.decision.reason
            measured = self.verification.measured
            out.verify_steps = measured.steps
            out.verify_load_before, out.verify_load_after = (measured.load_before,
                                                             measured.load_after)
        if self.seed is not None:
            out.seed = int(self.seed)
        if self.optimality_gap is not None:
            out.optimality_gap = self.optimality_gap
        for loads, field in ((self.devices, out.device),
                             (self.baseline_devices, out.baseline_device)):
            for d in loads:
                field.add(name=d.name, kind=d.kind, num_ops=d.num_ops, compute_s=d.compute_s,
                          peak_memory_bytes=d.peak_memory_bytes, memory_bytes=d.memory_bytes)
        for name, device in self.assignment.items():
            out.op.add(name=name, device=device)
        return out

    def save_policy(self, directory) -> None:
        """Write the policy the learned placer fine-tuned on this graph into ``directory``
        (weights, architecture and ``manifest.json``, as the shipped policies are), for a later
        placer of the same kind to start from (``PlacetoPlacer(policy=directory)``, likewise
        ``HDPPlacer`` and ``GdpPlacer``; ``--autoplace_policy``).

        Args:
          directory: a path whose parent directory exists; written atomically, replacing a
            saved policy there (any other existing file or directory is refused).

        Raises:
          ConfigError: no fine-tuned policy came with this report (a heuristic or ``auto``
            placed it, or it came from the placement cache), or ``directory`` cannot take it.
        """
        self.kept_policy().save(directory)

    def kept_policy(self):
        """The fine-tuned policy (a :class:`~tf_autoplace.learning.trained_policy.TrainedPolicy`);
        ConfigError saying why when there is none."""
        if self.policy is None and self.from_cache:
            raise ConfigError("this placement was read from the placement cache, which keeps "
                              "placements, not policies: place with cache=False to fine-tune "
                              "a policy and keep it")
        if self.policy is None:
            raise ConfigError(f"the {self.placer} placer kept no fine-tuned policy: only a "
                              "learned placer that fine-tuned on the graph (placeto, hdp, "
                              "gdp) has one; none fine-tunes on one device, gdp placing "
                              "zero-shot does not, nor placeto on a graph with few placements "
                              "in all")
        return self.policy

    def _timeline(self):
        if self.timeline is None:
            raise ConfigError("this report keeps no timeline (it was not made by autoplace, or "
                              "was made without one); nothing to draw")
        return self.timeline

    def chrome_trace_json(self) -> bytes:
        """The simulated step as a Chrome trace, JSON bytes (open in chrome://tracing or
        ui.perfetto.dev). See :mod:`tf_autoplace.outputs.timeline`.

        Raises:
          ConfigError: the report keeps no timeline.
        """
        t = self._timeline()
        trace = timeline.chrome_trace(t.graph, t.cluster, t.placement, t.sim, t.measured)
        return json.dumps(trace, separators=(",", ":")).encode()

    def plot_png(self) -> bytes:
        """A PNG of per-device load over the step and peak memory against capacity (needs the
        ``plot`` extra, matplotlib). See :mod:`tf_autoplace.outputs.timeline`.

        Raises:
          ConfigError: the report keeps no timeline, or matplotlib is not installed.
        """
        t = self._timeline()
        buf = io.BytesIO()
        timeline.plot_report(buf, t.graph, t.cluster, t.placement, t.sim)
        return buf.getvalue()

    def write_chrome_trace(self, path) -> None:
        """Write :meth:`chrome_trace_json` to ``path``, whole or not at all, as the command's
        outputs are written (:class:`tf_autoplace.outputs.files.Outputs`: a link at ``path`` is
        replaced, never followed into a file or a FIFO elsewhere).

        Raises:
          ConfigError: ``path`` cannot be written (its directory is missing or not writable,
            or it is a directory or a device), before anything is made; or no timeline.
          OSError: the write itself failed (a full disk); the old file is left.
        """
        files.check_output_path(path, "the Chrome trace's path")
        files.write_output(path, self.chrome_trace_json())

    def write_plot(self, path) -> None:
        """Write :meth:`plot_png` to ``path``, as :meth:`write_chrome_trace` writes.

        Raises:
          ConfigError: as :meth:`write_chrome_trace`, or matplotlib is not installed.
          OSError: the write itself failed; the old file is left.
        """
        files.check_output_path(path, "the plot's path")
        files.write_output(path, self.plot_png())

    def __str__(self) -> str:
        def table(loads):
            rows = [f"    {'device':<44} {'ops':>6} {'compute ms':>11} {'peak GB':>8} {'cap GB':>7}"]
            for d in loads:
                flag = "" if d.fits else "  OUT OF MEMORY"
                rows.append(f"    {d.name:<44} {d.num_ops:>6} {d.compute_s * 1e3:>11.2f} "
                            f"{d.peak_memory_bytes / 1e9:>8.3f} {d.memory_bytes / 1e9:>7.2f}{flag}")
            return "\n".join(rows)

        applied = (self.verification.decision.applied if self.verification is not None
                   else self.placer)
        lines = [
            f"tf_autoplace report ({self.placer}"
            + (f"; verified: {applied} applied" if self.verification is not None else "")
            + ")",  # (the placer's own too: the header says whether a run checked it)
            f"  ops {self.num_ops}, colocation groups {self.num_colocation_groups}, "
            f"placement groups {self.num_groups}",
            f"  predicted step time   {self.step_time_s * 1e3:10.2f} ms",
            f"  lower bound           {self.lower_bound_s * 1e3:10.2f} ms "
            f"(placed / bound = {self.ratio_to_lower_bound:.2f})",
            f"  LP lower bound        {self.lp_lower_bound_s * 1e3:10.2f} ms "
            f"(placed / bound = {self.ratio_to_lp_lower_bound:.2f})",
            f"  certificate           {self.certificate() or 'no bound, no certificate'}",
            f"  predicted one device  {self.baseline_step_time_s * 1e3:10.2f} ms "
            f"(predicted speedup {self.speedup:.2f}x"
            f"{'' if self.baseline_fits else ', baseline does not fit'})",
        ]
        if self.measure_steps:
            low, high = self.measured_step_interval_s
            base_low, base_high = self.measured_baseline_interval_s
            d = ms_decimals(low, high, base_low, base_high)  # (sub-ms intervals printed apart)
            lines += [
                f"  measured step time    {self.measured_step_time_s * 1e3:10.{d}f} ms "
                f"[{low * 1e3:.{d}f}, {high * 1e3:.{d}f}] (median of {self.measure_steps} "
                "steps on the cluster's devices, 95% interval)",
                f"  measured single-device{self.measured_baseline_step_time_s * 1e3:10.{d}f} ms "
                f"[{base_low * 1e3:.{d}f}, {base_high * 1e3:.{d}f}] "
                f"(measured speedup {self.measured_speedup:.2f}x"
                # Distinguishable only where the intervals do not overlap (README).
                + ("; the intervals overlap: a tie, within noise)"
                   if low <= base_high and base_low <= high else ")"),
                f"  measured at load {self.measure_load[0]:.2f} -> {self.measure_load[1]:.2f} "
                "(1-minute load average before and after)",
            ]
        if self.verification is not None:
            scale = self.verification.speed_scale()
            lines.append("  verified by running each candidate (predicted / at this run's "
                         "speed / measured median [95% interval] of "
                         f"{self.verification.measured.steps} timed steps; "
                         f"{self.verification.measured.load_text()}):")
            rows = self.verification.rows()
            again = self.verification.rows(confirmation=True)
            if again:
                rows = rows + [dict(row, name=f"{row['name']} (again)", applied=False)
                               for row in again]
            d = ms_decimals(*(row[k] for row in rows
                              for k in ("measured_s", "measured_low_s", "measured_high_s")))
            for row in rows:
                mark = "applied" if row["applied"] else ""
                at_speed = row["predicted_at_run_speed_s"]
                lines.append(
                    f"    {row['name']:<36} {row['predicted_s'] * 1e3:9.2f} ms / "
                    + (f"{at_speed * 1e3:8.2f} ms / " if at_speed is not None else "       - / ")
                    + f"{row['measured_s'] * 1e3:8.{d}f} ms [{row['measured_low_s'] * 1e3:.{d}f}"
                    f", {row['measured_high_s'] * 1e3:.{d}f}]  {row['devices_used']} "
                    f"device(s), {row['crossing']} tensors cross  {mark}")
            if scale is not None:
                lines.append(f"    this run's speed: the single-device step measured {scale:.2f}x "
                             "its prediction; every prediction scaled alike is the second figure")
            lines.append(f"    why: {self.verification.decision.reason}")
        lines += [
            "  placement:", table(self.devices),
            "  single-device baseline:", table(self.baseline_devices),
            "  time spent: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.timings_s.items()),
        ]
        lines += [f"  note: {n}" for n in self.notes]
        if self.from_cache:
            lines.append(f"  note: read from the placement cache ({self.cache_entry}), where "
                         f"{self.placer} with seed {self.seed} stored it: nothing was searched")
        return "\n".join(lines)
