"""``replica_device_setter``: the placement TF1 users write by hand for a cluster of parameter
servers and workers.

A TF1 training script on a TensorFlow cluster builds its graph under::

    with tf.device(tf.compat.v1.train.replica_device_setter(
            cluster=cluster_spec,
            ps_strategy=GreedyLoadBalancingStrategy(num_ps, byte_size_load_fn))):

(``GreedyLoadBalancingStrategy`` and ``byte_size_load_fn`` were ``tf.contrib.training``'s). Its
device function puts every variable op (TensorFlow's ``STANDARD_PS_OPS``: variables, resource
handles, mutable hash tables) on a task of the ``ps`` job, each on the one with the fewest
bytes of variables so far (the first such task on a tie), and every other op on the worker
device; ops created inside ``colocate_with`` a variable (its initial value, its reads and
assignments, the optimizer's slot variables and updates) run no device function and go where
the variable is. This placer does the same on a placement problem:

- **variables**: every TF colocation group that holds a ps op goes to a ps task, groups taken
  in the order of their first ps op in the graph, each to the ps task with the least load,
  whose load then grows by the bytes of that first ps op (a slot variable is made inside
  ``colocate_with`` its variable and adds no load);
- **everything else** goes to the worker device: the task the cluster's target names (the
  client's, as a between-graph script's ``worker_device="/job:worker/task:%d" % task_index``
  says) unless that is a parameter server; else the first task of the job ``worker`` (else
  ``chief``, ``master``, else the first task that is not a parameter server);
- within a task, the device is the one TensorFlow picks for a device string without a type:
  the task's first GPU, else its first device. An op group without a kernel there goes to the
  first device of the same task that can run it, else to the first device that can.

On a cluster without a ``ps`` job, ``replica_device_setter`` returns no device function, so
every op goes to the worker device; a cluster without tasks (one machine) is one task, so every
op goes to its default device, as :class:`~tf_autoplace.heuristics.single.SingleDevicePlacer`
puts them.
"""

from __future__ import annotations

import numpy as np

from tf_autoplace.core.problem import PlacementProblem, Placer
from tf_autoplace.errors import InfeasiblePlacementError
from tf_autoplace.graph.pins import PS_JOB, PS_OPS as STANDARD_PS_OPS

WORKER_JOBS = ("worker", "chief", "master")


class ReplicaDeviceSetterPlacer(Placer):
    """Args:
      ps_job: the job of the parameter servers.
    """

    name = "replica_device_setter"

    def __init__(self, ps_job: str = PS_JOB):
        self.ps_job = ps_job

    def _place(self, problem: PlacementProblem, rng: np.random.Generator) -> np.ndarray:
        cluster, graph = problem.cluster, problem.graph
        allowed = problem.colocation_allowed  # [C, D]
        if not allowed.any(axis=1).all():
            c = int(np.flatnonzero(~allowed.any(axis=1))[0])
            op = graph.names[int(np.flatnonzero(graph.colocation == c)[0])]
            raise InfeasiblePlacementError(
                f"no device in the cluster can run the colocation group of op {op!r}")
        task_devices = _devices_by_task(problem)
        worker = _worker_task(cluster.tasks, self.ps_job, cluster.target_task())
        ps_tasks = [k for k, t in enumerate(cluster.tasks) if t.job == self.ps_job]
        group_task = np.full(len(allowed), worker, np.int64)
        load = np.zeros(len(ps_tasks))
        seen = set()
        for i, op_type in enumerate(graph.op_types):
            c = int(graph.colocation[i])
            if op_type in STANDARD_PS_OPS and ps_tasks and c not in seen:
                seen.add(c)
                k = int(np.argmin(load))  # the first least-loaded ps task
                group_task[c] = ps_tasks[k]
                load[k] += float(graph.persistent_bytes[i])
        choice = np.empty(len(allowed), np.int64)
        for c in range(len(allowed)):
            own = [d for d in task_devices.get(int(group_task[c]), []) if allowed[c, d]]
            choice[c] = own[0] if own else int(np.argmax(allowed[c]))
        return choice[graph.colocation].astype(np.int32)


def _devices_by_task(problem: PlacementProblem) -> dict[int, list[int]]:
    """Task index -> its devices, the one TensorFlow picks for a typeless device string first
    (the first GPU, else the first device); one task (-1 -> all) without tasks."""
    cluster = problem.cluster
    out: dict[int, list[int]] = {}
    for d in range(cluster.num_devices):
        out.setdefault(int(cluster.device_tasks[d]), []).append(d)
    for task, devices in out.items():
        gpus = [d for d in devices if cluster.devices[d].kind == "GPU"]
        if gpus:
            out[task] = [gpus[0]] + [d for d in devices if d != gpus[0]]
    return out


def _worker_task(tasks, ps_job: str, target: int | None = None) -> int:
    """The index of the worker device's task (module docstring), ``target`` the target's task
    index (None: no target); -1 without tasks."""
    if target is not None and tasks[target].job != ps_job:
        return target
    for job in WORKER_JOBS:
        for k, task in enumerate(tasks):
            if task.job == job:
                return k
    for k, task in enumerate(tasks):
        if task.job != ps_job:
            return k
    return 0 if tasks else -1
