"""TracedStep: one step of a graph as TensorFlow's runtime traced it (its step stats), as plain
arrays. Read by the profiler (per-op times) and drawn beside the simulated step in the Chrome
trace; it imports no TensorFlow, so the trace writer does not either."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True, eq=False)
class TracedStep:
    """One traced step: every kernel execution the runtime recorded. ``k`` executions.

    Attributes:
      devices: the runtime's device names (e.g. ``/job:localhost/replica:0/task:0/device:CPU:0``;
        a GPU also has stream lanes such as ``.../device:GPU:0/stream:all``).
      device: [k] int32 index into ``devices``.
      names: [k] node names (Send/Recv and Grappler's new nodes included).
      start: [k] float64 seconds from the first execution's start.
      end: [k] float64 seconds; ``end - start`` spans the whole execution (the executor's work
        around the kernel included), as the simulator's op time does.
      kernels: [k] the op type of the kernel that ran, as the runtime's timeline label names
        it (e.g. ``_MklNativeMaxPoolGrad`` for a MaxPoolGrad that oneDNN rewrote; "" where
        the label names none), or () when not recorded.
    """

    devices: tuple[str, ...]
    device: np.ndarray
    names: tuple[str, ...]
    start: np.ndarray
    end: np.ndarray
    kernels: tuple[str, ...] = ()

    @classmethod
    def from_step_stats(cls, step_stats) -> "TracedStep":
        devices, device, names, start, end, kernels = [], [], [], [], [], []
        for d, dev_stats in enumerate(step_stats.dev_stats):
            devices.append(dev_stats.device)
            for ns in dev_stats.node_stats:
                device.append(d)
                names.append(ns.node_name)
                start.append(ns.all_start_nanos)
                end.append(ns.all_start_nanos + max(ns.all_end_rel_nanos, ns.op_end_rel_nanos))
                kernels.append(kernel_type(ns.timeline_label))
        t0 = min(start) if start else 0
        return cls(devices=tuple(devices), device=np.asarray(device, np.int32),
                   names=tuple(names), start=(np.asarray(start, np.float64) - t0) * 1e-9,
                   end=(np.asarray(end, np.float64) - t0) * 1e-9, kernels=tuple(kernels))

    @property
    def span_s(self) -> float:
        """First start to last end (s)."""
        return float(self.end.max() - self.start.min()) if len(self.end) else 0.0


def kernel_type(timeline_label: str) -> str:
    """The kernel's op type in a step-stats timeline label, ``"name = Type(inputs)"`` ->
    ``"Type"``; "" when the label has none."""
    _, sep, rest = timeline_label.partition(" = ")
    return rest.split("(", 1)[0].strip() if sep else ""
