"""Peak memory per device as TensorFlow's runtime measures it: the check of the simulator's
memory model.

A v1 Session run with ``RunOptions.FULL_TRACE`` returns step stats in which every node that
allocated memory during the step lists its allocator's records
(``NodeExecStats.memory[].allocation_records``: a time in microseconds and a byte count,
positive for an allocation, negative for its release). TensorFlow's tracking allocator keeps the
records of a node's allocations until they are all released, whoever releases them: a tensor
allocated on one device and released when a consumer on another device is done appears, with
both times, under the node that allocated it. A node also reports the memory its kernel holds
across steps (``memory_stats.persistent_memory_size``: a constant's value).
``tf.config.experimental.get_memory_info`` answers for GPUs only, and the allocator-wide
figures in the records (``allocator_bytes_in_use``) are the process's, shared by every logical
CPU device; the records are what can be told apart per device.

:func:`device_memory` reads one traced step into a :class:`DeviceMemory` per device:

* **transient peak**: the allocations made by the device's ops during the step, each live from
  its allocation to its release, summed over time; the peak of that sum. Records within the
  same microsecond are taken releases first (the resolution of the records; the simulator also
  frees before it allocates at one instant).
* **outliving bytes**: allocations not released by the end of the step (a variable's new buffer
  after a copy-on-write update, a value the step returns). They replace persistent storage or
  leave the step, so they are not part of the transient peak; a release is matched to an
  earlier allocation of the same size of the same node.
* **kernel bytes**: the persistent memory of the device's kernels.

Variables are not in a step's records (their buffers were allocated when the initializer ran,
and Grappler may have folded the initial values into constants shared by several variables
until their first update), so a measured peak per device is ``variables + kernel bytes +
transient peak`` with the variables' bytes counted from their shapes, as the simulator counts
them: the check that can fail is the transient part.

:func:`measure_memory` runs a workload under an assignment (:class:`~tf_autoplace.hw.runner.
PlacedSession`: warm-up steps first, so the step measured allocates as every later step does)
and reads several traced steps.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Mapping

from tf_autoplace.errors import ConfigError
from tf_autoplace.hw.runner import PlacedSession, RunConfig, canonical_device
from tf_autoplace.hw.workload import Workload


@dataclasses.dataclass(frozen=True)
class DeviceMemory:
    """One device's memory in one traced step (module docstring).

    Attributes:
      device: canonical device name (``CPU:0``).
      transient_peak_bytes: peak of the bytes allocated by the device's ops during the step
        and live at once.
      kernel_bytes: memory the device's kernels hold across steps.
      outliving_bytes: bytes its ops allocated during the step and did not release by its end.
      num_allocations: allocation records read (releases not counted).
    """

    device: str
    transient_peak_bytes: int
    kernel_bytes: int
    outliving_bytes: int
    num_allocations: int


def _matched(records) -> tuple[list[tuple[int, int]], int]:
    """Split one node's (micros, bytes) records, in the order they were recorded, into those
    of allocations released within them and the bytes of allocations that are not (a release
    is matched to the earliest open allocation of its size; the latest ones stay open)."""
    open_at = collections.defaultdict(list)  # size -> positions of open allocations
    matched = set()
    for position, (_, nbytes) in enumerate(records):
        if nbytes > 0:
            open_at[nbytes].append(position)
        elif nbytes < 0 and open_at[-nbytes]:
            matched.add(open_at[-nbytes].pop(0))
            matched.add(position)
    kept = [r for position, r in enumerate(records) if position in matched]
    return kept, sum(size * len(left) for size, left in open_at.items())


def _peak(records) -> int:
    """Peak running sum of (micros, bytes) records, releases first within a microsecond."""
    live = peak = 0
    for _, nbytes in sorted(records, key=lambda r: (r[0], r[1] > 0)):
        live += nbytes
        peak = max(peak, live)
    return peak


def device_memory(step_stats) -> dict[str, DeviceMemory]:
    """Each device's memory in one traced step (a ``StepStats``, from
    ``RunMetadata.step_stats``), by canonical device name; lanes that are not a device (a
    GPU's streams) are skipped.

    Args:
      step_stats: the step stats of a step run with ``RunOptions.FULL_TRACE``.

    Returns:
      ``{device: DeviceMemory}`` for every device that ran a node.
    """
    records = collections.defaultdict(list)
    kernel = collections.Counter()
    outliving = collections.Counter()
    allocations = collections.Counter()
    devices = set()
    for dev_stats in step_stats.dev_stats:
        try:
            device = canonical_device(dev_stats.device)
        except ConfigError:
            continue  # a stream or memcpy lane
        devices.add(device)
        for node in dev_stats.node_stats:
            kernel[device] += node.memory_stats.persistent_memory_size
            for used in node.memory:
                pairs = [(r.alloc_micros, r.alloc_bytes) for r in used.allocation_records]
                allocations[device] += sum(1 for _, b in pairs if b > 0)
                kept, left = _matched(pairs)
                records[device] += kept
                outliving[device] += left
    return {d: DeviceMemory(device=d, transient_peak_bytes=_peak(records[d]),
                            kernel_bytes=int(kernel[d]), outliving_bytes=int(outliving[d]),
                            num_allocations=int(allocations[d]))
            for d in sorted(devices)}


def measure_memory(workload: Workload, assignment: Mapping[str, str] | None = None, *,
                   steps: int = 3, config: RunConfig = RunConfig(steps=1, warmup_steps=3)
                   ) -> list[dict[str, DeviceMemory]]:
    """Run ``workload`` with the devices of ``assignment`` (op name -> device string; None:
    the graph's own devices) and read the memory of ``steps`` traced steps.

    Args:
      workload: what one step runs.
      assignment: the placement to run.
      steps: traced steps to read (>= 1); allocation order can differ between steps when
        several threads run ops, so a caller may take a median.
      config: the Session's settings; its ``warmup_steps`` untraced steps run first.

    Returns:
      One :func:`device_memory` result per traced step.

    Raises:
      ConfigError: ``steps`` < 1, or the placement names a device this machine lacks.
      MeasurementError: TensorFlow cannot run the placed graph.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"steps must be an int >= 1, got {steps!r}")
    with PlacedSession(workload, assignment, config) as placed:
        for _ in range(config.warmup_steps):
            placed.step()
        return [device_memory(placed.traced_metadata().step_stats) for _ in range(steps)]
