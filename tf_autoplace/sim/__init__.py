"""The simulator, memory accounting, reward and lower bounds (Placeto appendix A.5, A.7)."""

from tf_autoplace.sim.bounds import (critical_path, heads_and_tails, lower_bound,
                                     transfer_path_bound)
from tf_autoplace.sim.lp_bound import LPBound, lp_lower_bound
from tf_autoplace.sim.simulator import SimResult, Simulator, memory_penalized_runtime

__all__ = ["LPBound", "SimResult", "Simulator", "critical_path", "heads_and_tails",
           "lower_bound", "lp_lower_bound", "memory_penalized_runtime", "transfer_path_bound"]
