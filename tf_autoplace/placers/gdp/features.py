"""What GDP's policy reads of a placement problem: op features, adjacency, device features.

(Zhou et al., "GDP: Generalized Device Placement for Dataflow Graphs", section 3.1: "nodes and
edges in the dataflow graph are represented as the concatenation of their meta features (e.g.,
operation type, output shape, adjacent node ids)".)

:func:`graph_features` turns a :class:`~tf_autoplace.core.problem.PlacementProblem` into a
:class:`GdpGraph`, numpy only. Choices the paper leaves open, and why:

- **Groups, not ops.** The policy places Merge-and-Colocate groups (at most
  ``max_groups``, 512 by default): on 2 cores a 45,000-op graph then costs the network what a
  512-node one does, and a group never splits a TF colocation group nor mixes kernel kinds, so
  every sampled placement keeps TF's constraints by construction. A group's features summarise
  its ops'. A group that cannot run on every action device (CPU-only ops) is not the policy's
  to place: it goes to the first device that can run it, as in Placeto's environment.
- **Action devices** are the cluster's compute devices (``Cluster.compute_devices()``: the GPUs,
  or every device when there are none).
- **Features per group** (:data:`NUM_NODE_FEATURES`): compute time (mean over the action
  devices), output bytes, persistent bytes and op count, each both relative to the graph
  (``log(1 + G * share)``: an average group reads log 2 whatever the graph's size) and absolute
  (log-scaled: whether a split pays depends on bytes per second of compute, not on shares);
  the group's bytes against one device's memory; the time its outputs take on a link against
  its compute time; in- and out-degree; the op types (a histogram over
  :data:`TYPE_BUCKETS` buckets of a CRC-32 of the type name, so unseen types still land
  somewhere and the layout never changes); and its position in the graph: the longest path
  from a source and to a sink of its ops, as fractions of the graph's depth, and the share of
  the graph's compute that lies at smaller depth (mean and span over the group). The paper
  uses "adjacent node ids"; ids would tie the policy to one labelling, so adjacency enters
  through message passing instead (:mod:`tf_autoplace.placers.gdp.policy`). Our OpGraph keeps
  each tensor's bytes but not its dimensions, so bytes stand for the output shape.
  Every feature is a function of the graph's structure and costs, never of op names or their
  order, so relabelling or reordering the ops of a graph gives the same features (in the new
  order).
- **Device features** (:data:`NUM_DEVICE_FEATURES`, one row per action device): its position
  ``d / (D - 1)``, ``1 / D``, ``log2(D) / 3`` and its memory against the action devices' mean.
  One policy then serves any device count: the head scores every (group, device) pair from the
  group's embedding and the device's features, where one output layer per count would share
  nothing between 2, 4 and 8 devices, and could not serve a count it was not built for. The
  position is what breaks the symmetry between identical GPUs: a policy can learn "early in the
  graph -> low position", a pipeline split that holds for every D.
- **Graph features** (:data:`NUM_GRAPH_FEATURES`): sizes, total compute, variables and
  outputs against one device's and all devices' memory, and the link time of all outputs
  against the compute; the superposition layers condition on them with the pooled embedding.
- **The heuristic's placement as a hint** (``hint=True``; our addition, off in the paper's
  model). The paper's policy places from nothing ("GDP does not rely on any initial feasible
  placement"). On our simulator that costs more than the budget here can pay: a placement
  drawn group by group from a fresh policy is several times slower than the best fast
  heuristic's, and PPO from there first learns to put everything on one device
  (docs/experiments.md, "GDP" has the measurements). With the hint, each group also
  reads which action device the best fast heuristic (:class:`BestHeuristicPlacer`) puts it on,
  and groups never straddle two of its devices (:func:`tf_autoplace.grouping.heuristic.heuristic_grouping`),
  so a policy can copy the heuristic exactly and learn where to depart from it. The hint comes
  from the heuristics, which may read op names (the expert's layer scopes): with it, the
  policy's input is as independent of op labels as the heuristic is, no more.
- **Sequence order.** The placement network reads the groups as a sequence; without positional
  embedding only segment boundaries depend on it. Groups are sorted by their features (compute
  position first, then depth, then the rest), so the order too depends on structure only.
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.errors import ConfigError, InfeasiblePlacementError
from tf_autoplace.graph.opgraph import OpGraph
from tf_autoplace.grouping import Grouping, GroupingConfig, group_graph, merge_and_colocate
from tf_autoplace.grouping.heuristic import heuristic_grouping
from tf_autoplace.heuristics import BestHeuristicPlacer

TYPE_BUCKETS = 32
_SCALAR_FEATURES = ("compute_share", "output_share", "persistent_share", "ops_share",
                    "compute_abs", "output_abs", "persistent_abs", "memory_fraction",
                    "link_vs_compute", "in_degree", "out_degree", "depth", "height",
                    "compute_position", "compute_position_span", "movable")
NUM_NODE_FEATURES = len(_SCALAR_FEATURES) + TYPE_BUCKETS
NUM_DEVICE_FEATURES = 4
NUM_GRAPH_FEATURES = 8
GB = 1e9


@dataclasses.dataclass(frozen=True)
class FeatureConfig:
    """Attributes:
      max_groups: Merge-and-Colocate target N for the groups the policy places (>= 1). A graph
        with fewer TF colocation groups than N is placed colocation group by colocation group.
    """

    max_groups: int = 512

    def __post_init__(self):
        if not (isinstance(self.max_groups, int) and self.max_groups >= 1):
            raise ConfigError(f"max_groups must be an int >= 1, got {self.max_groups!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class GdpGraph:
    """A problem as the GDP policy reads it. G groups, E group edges, D action devices.

    Attributes:
      grouping: which ops each group holds ([n] labels).
      node: [G, NUM_NODE_FEATURES] float32 group features (module doc).
      edge_src, edge_dst: [E] int32 group-level edges ``src -> dst`` (no self loops; the
        group graph may have cycles).
      order: [G] int32, the groups in the order the placement network reads them.
      device: [D, NUM_DEVICE_FEATURES] float32 action-device features.
      graph: [NUM_GRAPH_FEATURES] float32 whole-graph features.
      hint: [G, D] float32, 1 where the best fast heuristic puts the group (``hint=True``;
        all 0 otherwise, and for groups it puts on no action device).
      movable: [G] bool, the policy places the group (it can run on every action device).
      fixed_device: [G] int32 cluster device of each group that is not movable.
      action_devices: [D] int32 cluster index of each action device.
    """

    grouping: Grouping
    node: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    order: np.ndarray
    device: np.ndarray
    graph: np.ndarray
    hint: np.ndarray
    movable: np.ndarray
    fixed_device: np.ndarray
    action_devices: np.ndarray

    @property
    def num_groups(self) -> int:
        return len(self.node)

    @property
    def num_devices(self) -> int:
        return len(self.device)

    def op_placement(self, actions: np.ndarray) -> np.ndarray:
        """[..., G] action-device index per group -> [..., n] int32 cluster device per op."""
        actions = np.asarray(actions)
        if actions.shape[-1] != self.num_groups:
            raise ConfigError(f"actions must end in {self.num_groups} groups, got shape "
                              f"{actions.shape}")
        devices = np.where(self.movable, self.action_devices[actions], self.fixed_device)
        return devices[..., self.grouping.labels].astype(np.int32)


def graph_features(problem: PlacementProblem, config: FeatureConfig = FeatureConfig(), *,
                   hint: bool = False) -> GdpGraph:
    """Group ``problem``'s graph and compute everything the policy reads (module doc); with
    ``hint``, the best fast heuristic's placement too (and groups that never straddle two of
    its devices)."""
    graph, cluster = problem.graph, problem.cluster
    grouping_config = GroupingConfig(max_groups=config.max_groups)
    heuristic = BestHeuristicPlacer().propose(problem) if hint else None
    grouping = (heuristic_grouping(problem.graph, problem.cluster.names, heuristic,
                                   config.max_groups) if hint
                else merge_and_colocate(graph, grouping_config))
    grouped = group_graph(graph, grouping)
    labels, g = grouping.labels, grouping.num_groups
    action = cluster.compute_devices().astype(np.int32)
    num_dev = len(action)
    hint_rows = np.zeros((g, num_dev), np.float32)
    if hint:
        column = np.full(cluster.num_devices, -1)
        column[action] = np.arange(num_dev)
        group_device = np.zeros(g, np.int64)
        group_device[labels] = column[heuristic]  # every op of a group: the same device
        on_action = group_device >= 0
        hint_rows[np.flatnonzero(on_action), group_device[on_action]] = 1.0

    allowed = np.ones((g, cluster.num_devices), dtype=bool)
    np.logical_and.at(allowed, labels, problem.allowed)
    if not allowed.any(axis=1).all():
        raise InfeasiblePlacementError("some op group can run on no device of the cluster")
    movable = allowed[:, action].all(axis=1)
    fixed_device = np.argmax(allowed, axis=1).astype(np.int32)

    op_time = _op_compute_time(problem, action)
    memory = float(cluster.memory[action].mean())
    bandwidth = _mean_bandwidth(cluster.bandwidth, action)
    depth, height, position = _op_positions(graph, op_time)

    time = np.bincount(labels, weights=op_time, minlength=g)
    out_bytes = grouped.output_bytes.astype(np.float64)
    persistent = grouped.persistent_bytes.astype(np.float64)
    num_ops = grouped.num_ops.astype(np.float64)
    sizes = np.stack([time, out_bytes, persistent, num_ops], axis=1)
    shares = np.log1p(g * sizes / np.maximum(sizes.sum(axis=0, keepdims=True), 1e-30))
    in_degree = np.bincount(grouped.edge_dst, minlength=g)
    out_degree = np.bincount(grouped.edge_src, minlength=g)
    pos_min = np.full(g, np.inf)
    pos_max = np.full(g, -np.inf)
    np.minimum.at(pos_min, labels, position)
    np.maximum.at(pos_max, labels, position)
    scalars = np.column_stack([
        shares,
        np.log1p(time * 1e6) / 10.0,
        np.log1p(out_bytes) / 20.0,
        np.log1p(persistent) / 20.0,
        np.minimum((out_bytes + persistent) / memory, 4.0),
        np.log1p(out_bytes / bandwidth / np.maximum(time, 1e-7)) / 5.0,
        np.log1p(in_degree) / 5.0,
        np.log1p(out_degree) / 5.0,
        _group_mean(labels, depth, num_ops),
        _group_mean(labels, height, num_ops),
        _group_mean(labels, position, num_ops),
        pos_max - pos_min,
        movable.astype(np.float64),
    ])
    node = np.concatenate([scalars, _type_histogram(graph, labels, g)], axis=1)

    positions = np.arange(num_dev) / max(num_dev - 1, 1)
    dev_memory = cluster.memory[action].astype(np.float64)
    device = np.column_stack([positions, np.full(num_dev, 1.0 / num_dev),
                              np.full(num_dev, np.log2(num_dev) / 3.0),
                              dev_memory / dev_memory.mean()])

    total_time = float(time.sum())
    whole = np.array([
        np.log1p(graph.num_ops) / 10.0,
        np.log1p(g) / 7.0,
        np.log1p(total_time * 1e3) / 8.0,
        min(persistent.sum() / memory, 8.0),
        min(persistent.sum() / (memory * num_dev), 8.0),
        min(out_bytes.sum() / memory, 8.0) / 4.0,
        np.log1p(len(grouped.edge_src) / g),
        np.log1p(out_bytes.sum() / bandwidth / max(total_time, 1e-9)),
    ])
    # Sequence order: by compute position, then depth, then every other feature (np.lexsort
    # sorts by its last key first).
    keys = [node[:, j] for j in range(node.shape[1] - 1, -1, -1)]
    keys += [node[:, _SCALAR_FEATURES.index(name)] for name in
             ("height", "depth", "compute_position")]
    order = np.lexsort(keys).astype(np.int32)
    return GdpGraph(grouping=grouping, node=node.astype(np.float32),
                    edge_src=grouped.edge_src.astype(np.int32),
                    edge_dst=grouped.edge_dst.astype(np.int32), order=order,
                    device=device.astype(np.float32), graph=whole.astype(np.float32),
                    hint=hint_rows * movable[:, None], movable=movable,
                    fixed_device=fixed_device, action_devices=action)


def _op_compute_time(problem: PlacementProblem, action: np.ndarray) -> np.ndarray:
    """[n] seconds: mean over the action devices, or over every device that can run the op
    when an action device cannot (CPU-only ops)."""
    times = problem.op_time
    on_action = times[:, action]
    finite = np.isfinite(times)
    anywhere = np.where(finite, times, 0.0).sum(axis=1) / np.maximum(finite.sum(axis=1), 1)
    return np.where(np.isfinite(on_action).all(axis=1), on_action.mean(axis=1), anywhere)


def _mean_bandwidth(bandwidth: np.ndarray, action: np.ndarray) -> float:
    if len(action) < 2:
        off = bandwidth[~np.eye(len(bandwidth), dtype=bool)]
        return float(off.mean()) if off.size else 1e10
    sub = bandwidth[np.ix_(action, action)]
    return float(sub[~np.eye(len(action), dtype=bool)].mean())


def _op_positions(graph: OpGraph, op_time: np.ndarray):
    """[n] each: longest path from a source (depth) and to a sink (height), as fractions of the
    longest path, and the share of all compute at smaller depth plus half of its own level's
    (so a level's ops sit at the middle of its compute)."""
    n = graph.num_ops
    src = np.concatenate([graph.edge_src, graph.ctrl_src]).tolist()
    dst = np.concatenate([graph.edge_dst, graph.ctrl_dst]).tolist()
    children = [[] for _ in range(n)]
    for s, d in zip(src, dst):
        children[s].append(d)
    order = graph.topological_order().tolist()
    depth = [0] * n
    for u in order:
        du = depth[u] + 1
        for c in children[u]:
            if depth[c] < du:
                depth[c] = du
    height = [0] * n
    for u in reversed(order):
        best = height[u]
        for c in children[u]:
            if height[c] + 1 > best:
                best = height[c] + 1
        height[u] = best
    depth_arr = np.asarray(depth, dtype=np.int64)
    longest = max(int(depth_arr.max()), 1)
    level_time = np.bincount(depth_arr, weights=op_time, minlength=longest + 1)
    before = np.concatenate([[0.0], np.cumsum(level_time)[:-1]])
    total = max(float(level_time.sum()), 1e-30)
    position = (before[depth_arr] + 0.5 * level_time[depth_arr]) / total
    return depth_arr / longest, np.asarray(height, np.float64) / longest, position


def _group_mean(labels: np.ndarray, values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    return np.bincount(labels, weights=values, minlength=len(counts)) / counts


def type_bucket(op_type: str) -> int:
    """The histogram bucket of an op type: CRC-32 of its name (stable across runs and
    machines, unlike Python's ``hash``)."""
    return zlib.crc32(op_type.encode("utf-8")) % TYPE_BUCKETS


def _type_histogram(graph: OpGraph, labels: np.ndarray, g: int) -> np.ndarray:
    """[G, TYPE_BUCKETS] share of each group's ops per op-type bucket."""
    buckets = {t: type_bucket(t) for t in set(graph.op_types)}
    op_bucket = np.fromiter((buckets[t] for t in graph.op_types), np.int64, graph.num_ops)
    hist = np.zeros((g, TYPE_BUCKETS))
    np.add.at(hist, (labels, op_bucket), 1.0)
    return hist / hist.sum(axis=1, keepdims=True)
