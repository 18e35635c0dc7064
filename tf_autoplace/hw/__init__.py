"""Real hardware in the loop: run placed graphs on this machine's devices, time them, and measure
what the simulator needs (per-op times, transfer latency and bandwidth).

Modules: :mod:`~tf_autoplace.hw.workload` (what one training step runs),
:mod:`~tf_autoplace.hw.runner` (run and time it under a placement),
:mod:`~tf_autoplace.hw.trace` (a traced step as arrays), :mod:`~tf_autoplace.hw.profiler`
(per-op times -> CostProfile), :mod:`~tf_autoplace.hw.transfers` (link latency and bandwidth),
:mod:`~tf_autoplace.hw.memory` (peak memory per device from a traced step),
:mod:`~tf_autoplace.hw.isolated` (one op timed on its own, untraced),
:mod:`~tf_autoplace.hw.fidelity` and :mod:`~tf_autoplace.hw.components` (the simulator against
this machine: whole placements, and each of its parts on its own).
Only ``trace`` is imported here: the others import TensorFlow.
"""

from tf_autoplace.hw.trace import TracedStep

__all__ = ["TracedStep"]
