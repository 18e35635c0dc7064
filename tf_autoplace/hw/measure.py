"""Measure a placement on this machine and put the measured step times in its report.

:func:`measure` runs the placed graph and the single-device baseline of a
:class:`~tf_autoplace.outputs.report.PlacementReport` under the measurement protocol
(:mod:`tf_autoplace.hw.protocol`: each in its own Session with the cluster's devices, soft
placement off, warm-up steps, then interleaved timed rounds), and puts their medians with 95%
intervals and the machine's load beside the predicted figures (the text, the JSON and the proto
of the report show them); a traced step of the placed graph goes to the Chrome trace beside the
simulated step. ``autoplace(..., measure_steps=N)``, ``tf-autoplace place --measure_steps=N`` and
``tf-autoplace place-model --measure_steps=N`` call it after placing.

The cluster's devices must be this machine's (:func:`runs_here`): a placement for GPUs this
machine lacks cannot be timed here.
"""

from __future__ import annotations

import dataclasses
import re

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.errors import ConfigError
from tf_autoplace.hw.protocol import check_steps, measure_placements
from tf_autoplace.hw.runner import RunConfig
from tf_autoplace.hw.workload import Workload
from tf_autoplace.outputs.report import PlacementReport

_LOCAL = re.compile(r"^(/job:localhost(/replica:0)?(/task:0)?)?/device:(CPU|GPU):(\d+)$",
                    re.IGNORECASE)


def runs_here(cluster: Cluster, local_gpus: int) -> bool:
    """Whether every device of ``cluster`` can be made in a Session on this machine: logical
    CPUs (``/device:CPU:i``, any number) and GPUs ``/device:GPU:j`` with ``j < local_gpus``,
    on the local job."""
    for device in cluster.devices:
        match = _LOCAL.match(device.name)
        if match is None:
            return False
        if match.group(4).upper() == "GPU" and int(match.group(5)) >= local_gpus:
            return False
    return True


def measure(report: PlacementReport, workload: Workload, *, steps: int = 15,
            config: RunConfig | None = None, seed: int = 0) -> PlacementReport:
    """``report`` with measured step times of its placement and its single-device baseline
    (one timing for both where the placement is the single-device one).

    Args:
      report: a report made by the engine (it keeps both assignments).
      workload: what one step runs.
      steps: timed steps of each (the protocol's minimum or more).
      config: the Sessions' settings (:class:`~tf_autoplace.hw.runner.RunConfig`); its
        ``target`` runs them on the servers of a TensorFlow cluster instead of in-process.
      seed: orders the rounds and seeds the intervals.

    Returns:
      The report with ``measure_steps``, the measured medians, their intervals and the load.

    Raises:
      ConfigError: the report keeps no placement, too few steps, or devices this machine
        does not have.
      MeasurementError: TensorFlow cannot run a graph.
    """
    if not report.assignment or not report.baseline_assignment:
        raise ConfigError("this report keeps no placement to run (it was not made by autoplace)")
    steps = check_steps(steps, "measure_steps")
    # The single-device placement itself is timed once and is both figures: two timings of
    # one graph would print a speedup that is only their noise.
    same = dict(report.assignment) == dict(report.baseline_assignment)
    placements = {"placed": report.assignment}
    if not same:
        placements["baseline"] = report.baseline_assignment
    result = measure_placements(workload, placements, steps=steps, trace="placed",
                                config=config, seed=seed)
    placed = result["placed"]
    baseline = placed if same else result["baseline"]
    timeline_data = report.timeline
    if timeline_data is not None:
        timeline_data = dataclasses.replace(timeline_data,
                                            measured=placed.measurement.traces[0])
    notes = []
    # After verification applied this split (measured faster in two sets of sessions), its
    # advice would be stale: say what the two measurements together mean instead.
    verified = ("verification measured it faster in two sets of sessions of its own: the "
                "difference is what separate sessions of one placement can differ by")
    if same:
        notes.append("measured: the placement is the single-device one, timed once for both "
                     "figures")
    elif baseline.faster_than(placed):
        notes.append(f"measured: the placement ran slower than the single-device one beyond "
                     f"noise ({placed.describe()} against {baseline.describe()}); "
                     + ("with verify=N the placement applied is one measured faster than a "
                        "single device, or the single device" if report.verification is None
                        else verified))
    elif not placed.faster_than(baseline):
        notes.append(f"measured: the placement ran no faster than the single-device one "
                     f"beyond noise ({placed.describe()} against {baseline.describe()}), so "
                     "its predicted speedup did not show here; "
                     + ("with verify=N a placement is applied instead of one device only when "
                        "measured faster than it" if report.verification is None
                        else verified))
    if not result.quiet:
        notes.append(f"measured at {result.load_text()}")
    return dataclasses.replace(
        report, notes=report.notes + tuple(notes), measure_steps=steps,
        measured_step_time_s=placed.median_s,
        measured_baseline_step_time_s=baseline.median_s,
        measured_step_interval_s=(placed.low_s, placed.high_s),
        measured_baseline_interval_s=(baseline.low_s, baseline.high_s),
        measure_load=(result.load_before, result.load_after), timeline=timeline_data)
