"""A simulated step as something a person can look at: a Chrome trace and a PNG summary.

:func:`chrome_trace` writes the Chrome trace event format, the one TensorFlow's own
``tensorflow.python.client.timeline`` writes, so chrome://tracing or https://ui.perfetto.dev open
it. Layout: one process (``pid`` = device index, named after the device) per device, in cluster
order (on a cluster of TensorFlow tasks, the devices of one task together, each process
labelled with its task, ``worker:1``), with two threads: ``tid`` 0 "ops" holds one complete event (``"ph": "X"``) per op placed there, from its
simulated start to end; ``tid`` 1 "transfers out" holds the tensors the device sends (its one
outgoing bus, Placeto A.5), from the time the transfer takes the bus to its arrival. Times are
microseconds from the start of the step.

A measured step (:class:`tf_autoplace.hw.TracedStep`, from :func:`tf_autoplace.hw.measure.measure`)
adds its lanes beside the predicted ones: one more process per device lane of the run's step
stats, named ``measured <device>`` and sorted after the simulated devices, whose "ops" thread
holds one event per kernel execution from its start to its end (Send/Recv and ops Grappler
added included, as the runtime ran them), on the same time axis from the step's first
execution.

:func:`plot_report` draws a PNG: top, a Gantt chart of each device's ops and outgoing transfers
over the step; bottom, each device's simulated peak memory (variables and transient tensors)
against its capacity. It needs matplotlib, an optional extra (``pip install .[plot]``), and
draws with the Agg backend without touching pyplot's global state.

Both take what one simulation saw (:class:`TimelineData`); ``autoplace`` keeps one in
``PlacementReport.timeline`` for ``report.write_chrome_trace`` / ``report.write_plot``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

import numpy as np

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.units import format_bytes
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.opgraph import OpGraph
from tf_autoplace.hw.trace import TracedStep
from tf_autoplace.outputs import files
from tf_autoplace.sim import SimResult

OPS_TID = 0
TRANSFERS_TID = 1


@dataclasses.dataclass(frozen=True, eq=False)
class TimelineData:
    """One simulated step: the graph (n ops), the cluster (D devices), the placement ([n] device
    index per op) and the simulation of that placement; ``measured``, the traced step of the
    placement run on this machine (None: not measured)."""

    graph: OpGraph
    cluster: Cluster
    placement: np.ndarray
    sim: SimResult
    measured: TracedStep | None = None


def short_device_name(name: str) -> str:
    """A device's label: ``/job:localhost/replica:0/task:0/device:GPU:0`` -> ``GPU:0``; a
    device of a TensorFlow cluster's task keeps the task,
    ``/job:worker/replica:0/task:1/device:CPU:0`` -> ``worker:1/CPU:0``."""
    if "device:" not in name:
        return name
    prefix, _, device = name.rpartition("device:")
    job, task = re.search(r"/job:([^/]+)", prefix), re.search(r"/task:(\d+)", prefix)
    if job is None or job.group(1) == "localhost":
        return device
    return f"{job.group(1)}:{task.group(1) if task else 0}/{device}"


def _check(graph: OpGraph, cluster: Cluster, placement, sim: SimResult) -> np.ndarray:
    placement = np.asarray(placement)
    n, d = graph.num_ops, cluster.num_devices
    if placement.shape != (n,) or len(sim.start) != n:
        raise ConfigError(f"placement has shape {placement.shape} and the simulation "
                          f"{len(sim.start)} ops; the graph has {n}")
    if n and (placement.min() < 0 or placement.max() >= d):
        raise ConfigError(f"placement holds device indices outside [0, {d})")
    if len(sim.peak_memory) != d:
        raise ConfigError(f"the simulation has {len(sim.peak_memory)} devices; the cluster {d}")
    times = np.concatenate([sim.start, sim.end, sim.transfer_start, sim.transfer_end])
    if not np.isfinite(times).all():
        raise ConfigError(f"the simulated step time is {sim.makespan}: some op never ran or has "
                          "no kernel on its device, so there is no timeline to draw")
    return placement.astype(np.int64)


def chrome_trace(graph: OpGraph, cluster: Cluster, placement: np.ndarray,
                 sim: SimResult, measured: TracedStep | None = None) -> dict:
    """The simulated step (and the ``measured`` one, if given) in Chrome trace event format
    (see module doc)."""
    placement = _check(graph, cluster, placement, sim)
    events = []
    for d, device in enumerate(cluster.devices):
        events += [
            {"name": "process_name", "ph": "M", "pid": d, "args": {"name": device.name}},
            {"name": "process_sort_index", "ph": "M", "pid": d, "args": {"sort_index": d}},
            {"name": "thread_name", "ph": "M", "pid": d, "tid": OPS_TID,
             "args": {"name": "ops"}},
            {"name": "thread_name", "ph": "M", "pid": d, "tid": TRANSFERS_TID,
             "args": {"name": "transfers out"}},
        ]
        task = cluster.task_of(d)
        if task is not None:
            events.append({"name": "process_labels", "ph": "M", "pid": d,
                           "args": {"labels": f"task {task.name}"}})
    out_bytes = graph.output_bytes
    start_us, end_us = sim.start * 1e6, sim.end * 1e6
    for i in np.argsort(sim.start, kind="stable").tolist():
        events.append({
            "name": graph.names[i], "cat": "Op", "ph": "X", "pid": int(placement[i]),
            "tid": OPS_TID, "ts": float(start_us[i]), "dur": float(end_us[i] - start_us[i]),
            "args": {"name": graph.names[i], "op": graph.op_types[i],
                     "output_bytes": int(out_bytes[i])}})
    names = [short_device_name(n) for n in cluster.names]
    for x in np.argsort(sim.transfer_start, kind="stable").tolist():
        k, src, dst = int(sim.transfer_tensor[x]), int(sim.transfer_src[x]), \
            int(sim.transfer_dst[x])
        producer = graph.names[int(sim.transfer_op[x])]
        what = producer if k >= 0 else f"^{producer}"  # ^: control-edge dummy, as in TF
        ts, te = sim.transfer_start[x] * 1e6, sim.transfer_end[x] * 1e6
        events.append({
            "name": f"{what} -> {names[dst]}", "cat": "Transfer", "ph": "X", "pid": src,
            "tid": TRANSFERS_TID, "ts": float(ts), "dur": float(te - ts),
            "args": {"producer": producer, "tensor_index": k,
                     "bytes": int(graph.tensor_bytes[k]) if k >= 0 else 0,
                     "src": cluster.names[src], "dst": cluster.names[dst]}})
    if measured is not None:
        events += measured_events(measured, first_pid=cluster.num_devices)
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def measured_events(measured: TracedStep, first_pid: int) -> list[dict]:
    """Chrome trace events of a measured step: process ``first_pid + k`` for its k-th device
    lane (module doc)."""
    events = []
    for k, device in enumerate(measured.devices):
        pid = first_pid + k
        events += [
            {"name": "process_name", "ph": "M", "pid": pid,
             "args": {"name": f"measured {device}"}},
            {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}},
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": OPS_TID,
             "args": {"name": "ops"}},
        ]
    start_us, end_us = measured.start * 1e6, measured.end * 1e6
    for i in np.argsort(measured.start, kind="stable").tolist():
        events.append({
            "name": measured.names[i], "cat": "Measured", "ph": "X",
            "pid": first_pid + int(measured.device[i]), "tid": OPS_TID,
            "ts": float(start_us[i]), "dur": float(end_us[i] - start_us[i]),
            "args": {"name": measured.names[i]}})
    return events


def write_chrome_trace(path: str | os.PathLike, graph: OpGraph, cluster: Cluster,
                       placement: np.ndarray, sim: SimResult,
                       measured: TracedStep | None = None) -> None:
    """Write :func:`chrome_trace` as JSON to ``path``, whole or not at all
    (:func:`tf_autoplace.outputs.files.write_output`; raises OSError if it cannot)."""
    trace = chrome_trace(graph, cluster, placement, sim, measured)
    files.write_output(path, json.dumps(trace, separators=(",", ":")).encode())


def _busy_intervals(start: np.ndarray, end: np.ndarray, gap: float) -> list[tuple[float, float]]:
    """(start, width) bars, joining intervals closer than ``gap`` (below a pixel)."""
    order = np.argsort(start, kind="stable")
    bars: list[list[float]] = []
    for s, e in zip(start[order].tolist(), end[order].tolist()):
        if bars and s - bars[-1][1] <= gap:
            bars[-1][1] = max(bars[-1][1], e)
        else:
            bars.append([s, e])
    return [(s, e - s) for s, e in bars]


def memory_shares(graph: OpGraph, cluster: Cluster, placement: np.ndarray,
                  sim: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """``(variables, peak)``, each [num_devices] float64: a device's variables (persistent
    bytes, at most its capacity) and its simulated peak memory, in percent of that device's
    own memory capacity, as the PNG's memory panel draws them."""
    placement = _check(graph, cluster, placement, sim)
    cap = cluster.memory.astype(np.float64)
    persistent = np.bincount(placement, weights=graph.persistent_bytes.astype(np.float64),
                             minlength=cluster.num_devices)
    return 100 * np.minimum(persistent, cap) / cap, 100 * sim.peak_memory / cap


def plot_report(path: str | os.PathLike, graph: OpGraph, cluster: Cluster,
                placement: np.ndarray, sim: SimResult) -> None:
    """Write a PNG: per-device Gantt chart of the step (top), and each device's peak memory as
    a share of its own capacity, with the bytes (bottom).

    ``path`` is a file path or a binary file object.

    Raises ConfigError if matplotlib (the ``plot`` extra) is not installed, OSError if ``path``
    cannot be written.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ConfigError("plot_report needs matplotlib: pip install 'tf_autoplace[plot]' "
                          f"(or pip install matplotlib) ({e})") from e
    placement = _check(graph, cluster, placement, sim)
    num_dev = cluster.num_devices
    labels = [short_device_name(n) for n in cluster.names]
    span_ms = max(sim.makespan * 1e3, 1e-9)

    fig = Figure(figsize=(11, 2.5 + 0.6 * num_dev + 3.0), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, height_ratios=[0.6 * num_dev + 1.0, 3.0])

    # --- top: Gantt chart, one row per device (first device at the top).
    gap = span_ms / 2000
    for d in range(num_dev):
        y = num_dev - 1 - d
        on = placement == d
        ops = _busy_intervals(sim.start[on] * 1e3, sim.end[on] * 1e3, gap)
        top.broken_barh(ops, (y - 0.4, 0.5), facecolors="tab:blue",
                        label="op running" if d == 0 else None)
        sent = sim.transfer_src == d
        xfers = _busy_intervals(sim.transfer_start[sent] * 1e3, sim.transfer_end[sent] * 1e3, gap)
        top.broken_barh(xfers, (y + 0.15, 0.25), facecolors="tab:orange",
                        label="transfer out" if d == 0 else None)
        busy = sim.busy[d] * 1e3 / span_ms
        top.text(1.005, (y + 0.5) / num_dev, f"{int(on.sum())} ops\n{busy:.0%} busy",
                 transform=top.transAxes, va="center", fontsize=8)
    top.set_yticks(range(num_dev), labels[::-1])
    top.set_ylim(-0.6, num_dev - 0.4)
    top.set_xlim(0, span_ms)
    top.set_xlabel("time in the simulated step (ms)")
    top.set_title(f"Simulated step: {sim.makespan * 1e3:.2f} ms, {graph.num_ops} ops, "
                  f"{sim.num_transfers} transfers ({sim.transfer_bytes / 1e6:.1f} MB)", loc="left")
    top.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, fontsize=8, frameon=False)

    # --- bottom: peak memory (variables + transient) as a share of each device's capacity,
    # so a GPU's peak shows beside a host whose memory is fifty times larger.
    peak = sim.peak_memory.astype(np.float64)
    cap = cluster.memory.astype(np.float64)
    variables, share = memory_shares(graph, cluster, placement, sim)
    x = np.arange(num_dev)
    over = peak > cap
    bottom.bar(x, variables, 0.6, color="tab:green", label="variables (persistent)")
    bottom.bar(x, np.maximum(np.minimum(share, 100) - variables, 0), 0.6, bottom=variables,
               color="tab:olive", label="peak transient tensors")
    if over.any():
        bottom.bar(x, np.where(over, share - 100, 0), 0.6, bottom=100, color="tab:red",
                   label="over capacity")
    bottom.axhline(100, color="black", linewidth=1.5, label="capacity (100%)")
    for i in range(num_dev):
        note = "OUT OF MEMORY" if over[i] else f"{share[i]:.2g}%"
        bottom.annotate(f"{format_bytes(peak[i])} of {format_bytes(cap[i])}\n{note}",
                        (x[i], max(share[i], 0)), xytext=(0, 4), textcoords="offset points",
                        ha="center", fontsize=8)
    bottom.set_xticks(x, labels)
    bottom.set_ylabel("% of the device's memory")
    bottom.set_ylim(0, max(100.0, share.max()) * 1.35)
    bottom.set_title("Peak memory per device, as a share of its own capacity")
    bottom.legend(loc="upper left", fontsize=8, ncol=4, frameon=False)
    fig.savefig(path, dpi=100, format="png")
