"""The simulator, memory accounting, reward, lower bounds (Placeto appendix A.5, A.7) and the
exact solver of small problems."""

from tf_autoplace.sim.bounds import (critical_path, device_heads_and_tails, heads_and_tails,
                                     lower_bound, transfer_path_bound)
from tf_autoplace.sim.exact import ExactResult, solve_placement
from tf_autoplace.sim.lp_bound import LPBound, lp_lower_bound
from tf_autoplace.sim.simulator import (SimResult, Simulator, memory_penalized_runtime,
                                        memory_penalized_runtimes, overflow_gb)

__all__ = ["ExactResult", "LPBound", "SimResult", "Simulator", "critical_path",
           "device_heads_and_tails", "heads_and_tails",
           "lower_bound", "lp_lower_bound", "memory_penalized_runtime",
           "memory_penalized_runtimes", "overflow_gb", "solve_placement",
           "transfer_path_bound"]
