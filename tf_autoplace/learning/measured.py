"""Rewards from the hardware: score placements by running them, not by simulating them.

HDP (Mirhoseini et al. 2018) and Post (Gao et al. 2018) trained their placers on step times
measured on the real devices; GDP fine-tuned on them too. :class:`MeasuredEvaluator` gives the
searches here the same option (``reward="measured"`` on the ``auto``, ``placeto`` and ``post``
placers):
it has :class:`~tf_autoplace.learning.rollouts.Evaluator`'s interface, so a search that scores batches
through it does not change, but each placement's step time is the median of ``steps`` timed
steps of the placed graph on this machine, or on the servers of a cluster of TensorFlow tasks
(its ``target``) (:func:`tf_autoplace.hw.runner.run`, a fresh Session per placement after
``warmup_steps``).

What stays simulated, and why:

* **Memory.** Peak memory is read from the simulator, as for simulated rewards: a placement
  that overflows a device would fail (or swap) rather than give a step time, so it is not run;
  its step time is the simulated one and R carries Placeto's penalty ``c * ReLU(m - M)`` as
  usual.
* **A placement TensorFlow rejects** (its runtime raises while running it) scores ``inf``.

Everything is measured in this process, one placement after the other: two measured runs at
once would share the cores and time each other. A placement measured before is not run again
(its first median is reused), so a search that revisits it sees one reward, as with the
simulator. Runs cost about a second each on small graphs (graph import, Session, warm-up and
timed steps): budgets are tens to hundreds of placements, not thousands.
"""

from __future__ import annotations

import numpy as np

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.errors import ConfigError, MeasurementError
from tf_autoplace.hw.runner import RunConfig, on_cluster, run
from tf_autoplace.learning.rollouts import Evaluation
from tf_autoplace.sim import overflow_gb

REWARDS = ("simulated", "measured")
WARMUP_STEPS = 2  # untimed steps per measured placement (graph optimisation, allocation)


def check_reward(reward, measure_steps, workers=1, ray_address=None) -> None:
    """ConfigError unless ``reward`` is one of :data:`REWARDS` and ``measure_steps`` (timed
    steps per measured placement) an int >= 1: a placer config's two measured-reward fields.
    A measured reward also wants the config's ``workers`` at 1 (or None) and no
    ``ray_address``: its placements run here, one at a time, and a pool of workers elsewhere
    would score them with the simulator instead (or leave them waiting)."""
    if reward not in REWARDS:
        raise ConfigError(f"reward must be one of {list(REWARDS)}, got {reward!r}")
    if isinstance(measure_steps, bool) or not isinstance(measure_steps, int) or measure_steps < 1:
        raise ConfigError(f"measure_steps must be an int >= 1, got {measure_steps!r}")
    if reward == "measured" and (workers not in (None, 1) or ray_address is not None):
        raise ConfigError(f"reward='measured' runs every placement on this machine, one at a "
                          f"time; it takes workers=1 and no ray_address, got workers={workers!r},"
                          f" ray_address={ray_address!r}")


class MeasuredEvaluator:
    """Scores batches of placements of one problem by running them (module docstring).

    Args:
      problem: the problem; its ``workload`` says what one step runs.
      memory_penalty: c in R = r + c * ReLU(m - M), seconds per GB over capacity.
      steps: timed steps per placement; its step time is their median (after
        :data:`WARMUP_STEPS` untimed ones).

    ``samples`` counts the placements scored, ``runs`` those actually run.
    """

    def __init__(self, problem: PlacementProblem, *, memory_penalty: float = 2.0,
                 steps: int = 5):
        if problem.workload is None:
            raise ConfigError("reward='measured' runs placements, so the problem needs the "
                              "graph's workload: place through autoplace(), which attaches it")
        if not (isinstance(memory_penalty, (int, float)) and memory_penalty >= 0):
            raise ConfigError(f"memory_penalty must be a number >= 0, got {memory_penalty!r}")
        self.problem = problem
        self.memory_penalty = float(memory_penalty)
        check_reward("measured", steps)
        # On a cluster of TensorFlow tasks, placements run on its servers (its target).
        self.config = on_cluster(problem.cluster,
                                 RunConfig(steps=steps, warmup_steps=WARMUP_STEPS))
        self.workers = 1
        self.samples = 0
        self.runs = 0
        self._seen: dict[bytes, float] = {}
        self.first_failure: str | None = None  # TensorFlow's reason for the first failed run

    def step_time(self, devices: np.ndarray) -> float:
        """Measured median step time (s) of the op placement ``devices`` ([n] device index)."""
        devices = np.ascontiguousarray(devices, dtype=np.int32)
        key = devices.tobytes()
        if key not in self._seen:
            names = self.problem.cluster.names
            assignment = dict(zip(self.problem.graph.names, (names[d] for d in devices)))
            try:
                self._seen[key] = run(self.problem.workload, assignment, self.config).step_time_s
            except MeasurementError as e:
                self._seen[key] = float("inf")
                self.first_failure = self.first_failure or str(e)
            self.runs += 1
        return self._seen[key]

    def evaluate(self, placements: np.ndarray, *, below: float | None = None) -> Evaluation:
        """Run each row of ``placements`` ([B, n] int device index per op). ``below`` is
        :meth:`Evaluator.evaluate`'s; a measured time has no cut-off, so every row is run."""
        placements = np.asarray(placements)
        n = self.problem.graph.num_ops
        if placements.ndim != 2 or placements.shape[1] != n:
            raise ConfigError(f"placements must have shape [B, {n}], got {placements.shape}")
        rows = np.empty((len(placements), 3))
        for b, devices in enumerate(placements):
            sim = self.problem.simulator.run(devices)
            over = float(overflow_gb(sim.peak_memory[None, :], self.problem.cluster)[0])
            step = sim.makespan if over > 0 else self.step_time(devices)
            rows[b] = (step + self.memory_penalty * over, step, over)
        self.samples += len(placements)
        return Evaluation(scores=rows[:, 0], makespan=rows[:, 1], overflow_gb=rows[:, 2])

    def close(self) -> None:
        pass

    def __enter__(self) -> "MeasuredEvaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
