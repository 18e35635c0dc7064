"""Measure a placement on this machine and put the measured step times in its report.

:func:`measure` runs the placed graph and the single-device baseline of a
:class:`~tf_autoplace.outputs.report.PlacementReport` (:func:`tf_autoplace.hw.runner.run`: a fresh
Session with the cluster's devices, soft placement off, warm-up steps, then timed steps), puts
their median step times beside the predicted ones (``measured_step_time_s``,
``measured_baseline_step_time_s``; the text, the JSON and the proto of the report show them), and
keeps a traced step of the placed graph, which the Chrome trace draws beside the simulated step.
``autoplace(..., measure_steps=N)``, ``tf-autoplace place --measure_steps=N`` and
``tf-autoplace place-model --measure_steps=N`` call it after placing.

The cluster's devices must be this machine's (``Cluster.local()``, ``testdata/cpu2.pbtxt`` with
two logical CPUs): a placement for GPUs this machine lacks cannot be timed here. Timings on a
shared machine are noisy; the baseline and the placement each have their own Session and run
their timed steps in alternation (:func:`tf_autoplace.hw.runner.run_interleaved`), so a load
that comes and goes falls on both alike.
"""

from __future__ import annotations

import dataclasses

from tf_autoplace.errors import ConfigError
from tf_autoplace.hw.runner import RunConfig, run_interleaved
from tf_autoplace.hw.workload import Workload
from tf_autoplace.outputs.report import PlacementReport


def measure(report: PlacementReport, workload: Workload, *, steps: int = 10,
            config: RunConfig | None = None) -> PlacementReport:
    """``report`` with measured step times: the placed graph (``report.assignment``) and the
    single-device baseline (``report.baseline_assignment``) each run ``steps`` timed steps of
    ``workload`` on this machine, or on the TensorFlow cluster of ``config.target`` (after
    ``config.warmup_steps``; the rest of ``config`` as
    :class:`~tf_autoplace.hw.runner.RunConfig`), their steps alternating, and one more traced
    step of the placed graph becomes the measured lanes of the Chrome trace.

    Raises ConfigError when the report has no assignment to run or the cluster's devices are not
    on this machine, MeasurementError when TensorFlow cannot run a graph."""
    if not report.assignment or not report.baseline_assignment:
        raise ConfigError("this report keeps no placement to run (it was not made by autoplace)")
    config = dataclasses.replace(config or RunConfig(), steps=steps, trace_steps=1)
    baseline, placed = run_interleaved(workload, [report.baseline_assignment,
                                                  report.assignment], config)
    timeline_data = report.timeline
    if timeline_data is not None:
        timeline_data = dataclasses.replace(timeline_data, measured=placed.traces[0])
    return dataclasses.replace(report, measure_steps=steps,
                               measured_step_time_s=placed.step_time_s,
                               measured_baseline_step_time_s=baseline.step_time_s,
                               timeline=timeline_data)
