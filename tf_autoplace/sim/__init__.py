"""The simulator, memory accounting, reward and lower bound (Placeto appendix A.5, A.7)."""

from tf_autoplace.sim.bounds import critical_path, lower_bound
from tf_autoplace.sim.simulator import SimResult, Simulator, memory_penalized_runtime

__all__ = ["SimResult", "Simulator", "critical_path", "lower_bound", "memory_penalized_runtime"]
