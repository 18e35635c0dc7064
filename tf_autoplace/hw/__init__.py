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
:mod:`~tf_autoplace.hw.local_cluster` (a TensorFlow cluster of server processes on this machine,
:func:`local_cluster`; each server is :mod:`~tf_autoplace.hw.server`) and
:mod:`~tf_autoplace.hw.cluster_profile` (op costs per task and links over gRPC of such a
cluster). Only ``trace`` and ``local_cluster`` are imported here: the others import TensorFlow.
"""

from tf_autoplace.hw.local_cluster import local_cluster
from tf_autoplace.hw.trace import TracedStep

__all__ = ["TracedStep", "local_cluster"]
