"""What the Hierarchical Planner's networks read of a placement problem, in numpy.

(Mirhoseini et al., "A Hierarchical Model for Device Placement", ICLR 2018; the policy is
:mod:`tf_autoplace.placers.hdp.policy`, the search :mod:`tf_autoplace.placers.hdp.search`.)

**Units: the grouper assigns TF colocation groups, not ops.** The paper's grouper assigns each
op to one of N groups, and the placer puts whole groups on devices. TensorFlow requires the ops
of a colocation group (``OpGraph.colocation``: a variable with its reads and assigns, ops
pinned with ``colocate_with``) on one device; a grouper that assigned their ops independently
would split them. Here the grouper's inputs are the colocation groups themselves ("units"),
with their member ops' features aggregated, so every op of a unit is in the unit's group and
on the group's device *by construction*: no placement HDP samples can split one, whatever the
weights (a test checks it on random weights and graphs). Most units are single ops (NMT-2's
12,575 ops form 9,185 units).

**Kernel constraints.** The placer chooses among the action devices, the devices of the
cluster's default kind (the GPUs; every device of a CPU-only cluster), as the other learned
placers and the partitioning baselines do. A unit that cannot run on every action device (an
op with no GPU kernel) is not given to the grouper: it is fixed to the first action device
that can run all of it, else to the first device that can (the CPU host for ops without a GPU
kernel), and takes no part in the learned groups. So a learned group holds only units that
run on every action device, and any device the placer picks for it is valid.

**Unit features** (the grouper's input, per learned unit; the paper: "type, ..., size and
number of outputs, as well as connections to other operations"). Where the paper's text is
silent we chose:

- *type*: the fractions of the unit's ops of each op type (``[V]``, over the graph's sorted
  op-type vocabulary plus one "other" column for types a loaded policy has not seen); the
  policy multiplies them by a learned type-embedding table, which is the average of the member
  ops' type embeddings;
- *size*: log ops in the unit, log total output bytes, log number of outputs; and (ours) log
  compute time (mean over the action devices) and log persistent bytes (variables), which our
  cost model gives for free and which the other learned placers read too;
- *connections*: log in- and out-degree in the unit graph, the unit's mean position in a
  topological order of the op graph (its ops' mean rank, scaled to [-1, 1] from first to
  last), and the type fractions of its predecessors and successors (each ``[V]``, weighted by
  edge count): the paper encodes
  "connections to other operations"; an op's neighbours' indices, as a raw list, would make
  the grouper depend on how ops happen to be numbered, so we give it what is around the unit
  instead.

The numeric size and degree features are log-scaled, then standardised over the graph's learned
units (zero mean, unit spread), so graphs of any size read the same scale.

**Group features** (the placer's input per group, for a sampled grouping; the paper: "the
concatenation of three components: the average of the member operation type embeddings, the
average of the member operation sizes and number of outputs, and intra-group and inter-group
connectivity information encoded as an adjacency matrix"):

- the type fractions of the group's ops (``[V]``; the policy's own embedding table turns them
  into the average type embedding);
- the mean over the group's ops of the standardised log output bytes and log number of
  outputs; and (ours) the group's share of the graph's compute, output bytes, persistent bytes
  and ops, each as ``log(1 + N * share)`` so that a group of average size reads log 2;
- its row and its column of the N x N matrix of bytes sent between groups (the diagonal: bytes
  that stay inside the group), as ``log(1 + N * share of all bytes)``: the paper's adjacency
  matrix row, with both directions so the placer can tell producers from consumers.

An empty group (no unit sampled into it) has all-zero features.

**The heuristic's order** (only in a view built with ``hint``, for HDP's heuristic start;
:mod:`tf_autoplace.placers.hdp.search`): each learned unit gets one more feature, its place ``q``
in a hint placement read device by device (the units on action device 0 in topological order,
then those on device 1, ..., scaled so that device d's units fill ``[d / D, (d + 1) / D)``),
and each group the mean ``q`` of its ops; both as ``2 q - 1``. Groups that are runs of ``q``
are then runs of one device's share of the graph in order, which a placer can put back on that
device. A unit the hint puts off the action devices (the CPU host) counts as device 0's. The
paper's grouper reads no placement; the other learned placers here start from the best
heuristic's, and this is how HDP's networks can express it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.errors import ConfigError, InfeasiblePlacementError
from tf_autoplace.grouping import Grouping, group_graph

UNIT_NUMERIC = 8  # numeric unit features: 7 standardised, then the position (module doc)
GROUP_NUMERIC = 6  # numeric group features besides types and adjacency (module doc)


def _standardise(columns: np.ndarray) -> np.ndarray:
    """Zero mean and unit spread per column (a constant column becomes 0)."""
    spread = columns.std(axis=0)
    return (columns - columns.mean(axis=0)) / np.where(spread > 0, spread, 1.0)


def _log_share(total: np.ndarray, num_groups: int) -> np.ndarray:
    """``log(1 + N * x / sum(x))`` along the last axis (0 where everything is 0)."""
    whole = total.sum(axis=-1, keepdims=True)
    return np.log1p(num_groups * total / np.where(whole > 0, whole, 1.0))


@dataclasses.dataclass(frozen=True, eq=False)
class HDPView:
    """One problem as HDP sees it (see the module doc). U units (colocation groups), M of them
    learned, N groups, D action devices, V op types (the "other" column included), P
    (unit, type) pairs, E unit-level edges between learned units.

    Attributes:
      problem: the placement problem.
      units: the colocation groups as a Grouping (``units.labels``: [n] unit of each op).
      learned: [M] int32 the units the grouper assigns (they run on every action device).
      unit_device: [U] int32 cluster device of each fixed unit (-1 for learned ones).
      action_devices: [D] int32 cluster indices of the devices the placer chooses among.
      num_groups: N.
      type_vocab: V - 1 op type names (the last column, "other", is implicit).
      unit_features: [M, 3 V + UNIT_NUMERIC] float32 grouper input: type fractions,
        predecessor and successor type fractions, standardised numeric features.
      pair_unit, pair_type, pair_ops: [P] (learned unit, type column, ops of that type in it).
      unit_ops, unit_compute, unit_output_bytes, unit_persistent, unit_outputs,
        unit_size_z, unit_outputs_z: [M] float64 per learned unit: ops, compute s (mean over
        action devices), output bytes, persistent bytes, outputs, and the sums over its ops of
        the standardised log output bytes and log outputs (for the group means).
      edge_src, edge_dst, edge_bytes: [E] unit-level edges between learned units (indices
        into ``learned``) and the bytes sent along them, self-loops included (bytes kept inside
        a unit, for the diagonal of the group adjacency).
      hint_order: [M] float64 each learned unit's place ``q`` in [0, 1) in the hint placement
        (module doc), or None for a view built without one; with it, ``unit_features`` and the
        group features have one more column.
    """

    problem: PlacementProblem
    units: Grouping
    learned: np.ndarray
    unit_device: np.ndarray
    action_devices: np.ndarray
    num_groups: int
    type_vocab: tuple[str, ...]
    unit_features: np.ndarray
    pair_unit: np.ndarray
    pair_type: np.ndarray
    pair_ops: np.ndarray
    unit_ops: np.ndarray
    unit_compute: np.ndarray
    unit_output_bytes: np.ndarray
    unit_persistent: np.ndarray
    unit_outputs: np.ndarray
    unit_size_z: np.ndarray
    unit_outputs_z: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_bytes: np.ndarray
    hint_order: np.ndarray | None = None

    @property
    def hinted(self) -> bool:
        return self.hint_order is not None

    @property
    def num_learned(self) -> int:
        return len(self.learned)

    @property
    def num_devices(self) -> int:
        return len(self.action_devices)

    @property
    def num_types(self) -> int:
        return len(self.type_vocab) + 1

    @property
    def num_group_features(self) -> int:
        return self.num_types + GROUP_NUMERIC + self.hinted + 2 * self.num_groups

    def op_placement(self, labels: np.ndarray, devices: np.ndarray) -> np.ndarray:
        """[K, n] int32 cluster device per op from K samples: ``labels`` [K, M] group of each
        learned unit, ``devices`` [K, N] action-device index of each group."""
        labels, devices = np.atleast_2d(labels), np.atleast_2d(devices)
        k = len(labels)
        unit = np.broadcast_to(self.unit_device, (k, len(self.unit_device))).copy()
        chosen = np.take_along_axis(devices, labels, axis=1)  # [K, M] action device per unit
        unit[:, self.learned] = self.action_devices[chosen]
        return unit[:, self.units.labels].astype(np.int32)

    def group_features(self, labels: np.ndarray) -> np.ndarray:
        """[K, N, F] float32 group features (module doc) of K groupings ``labels`` [K, M]."""
        labels = np.atleast_2d(labels).astype(np.int64)
        k, g, v = len(labels), self.num_groups, self.num_types
        flat = labels + g * np.arange(k)[:, None]  # [K, M] group id across the batch

        def per_group(weights):  # [M] -> [K, N] sums over each group's units
            return np.bincount(flat.ravel(), weights=np.tile(weights, k),
                               minlength=k * g).reshape(k, g)

        ops = per_group(self.unit_ops)
        types = np.bincount((flat[:, self.pair_unit] * v + self.pair_type).ravel(),
                            weights=np.tile(self.pair_ops, k), minlength=k * g * v)
        types = types.reshape(k, g, v) / np.maximum(ops, 1.0)[..., None]
        numeric = np.stack([
            per_group(self.unit_size_z) / np.maximum(ops, 1.0),
            per_group(self.unit_outputs_z) / np.maximum(ops, 1.0),
            _log_share(per_group(self.unit_compute), g),
            _log_share(per_group(self.unit_output_bytes), g),
            _log_share(per_group(self.unit_persistent), g),
            _log_share(ops, g)], axis=-1)
        if self.hinted:  # the ops' mean place in the hint's order, as 2 q - 1
            order = per_group(self.unit_ops * self.hint_order) / np.maximum(ops, 1.0)
            numeric = np.concatenate([numeric, (2.0 * order - 1.0)[..., None]], axis=-1)
        pair = (flat[:, self.edge_src] * g + labels[:, self.edge_dst]).ravel()
        adjacency = np.bincount(pair, weights=np.tile(self.edge_bytes, k),
                                minlength=k * g * g).reshape(k, g, g)
        whole = adjacency.sum(axis=(1, 2), keepdims=True)
        adjacency = np.log1p(g * adjacency / np.where(whole > 0, whole, 1.0))
        out = np.concatenate([types, numeric, adjacency, adjacency.transpose(0, 2, 1)],
                             axis=-1)
        return out.astype(np.float32)


def build_view(problem: PlacementProblem, num_groups: int,
               type_vocab: tuple[str, ...] | None = None,
               hint: np.ndarray | None = None) -> HDPView:
    """The HDP view of ``problem`` with ``num_groups`` groups; ``type_vocab`` (a loaded
    policy's) fixes the type columns, None takes the graph's own op types, sorted; ``hint``
    ([n] cluster device per op, e.g. the best heuristic's placement) adds the hint-order
    features (module doc)."""
    if not (isinstance(num_groups, int) and num_groups >= 1):
        raise ConfigError(f"num_groups must be an int >= 1, got {num_groups!r}")
    graph, cluster = problem.graph, problem.cluster
    units = Grouping.from_labels(graph, graph.colocation)
    num_units = units.num_groups
    action = cluster.compute_devices().astype(np.int32)
    allowed = np.ones((num_units, cluster.num_devices), dtype=bool)
    np.logical_and.at(allowed, units.labels, problem.allowed)
    if not allowed.any(axis=1).all():
        bad = int(np.flatnonzero(~allowed.any(axis=1))[0])
        raise InfeasiblePlacementError(
            f"no device can run every op of the colocation group of op "
            f"{graph.names[int(units.members(bad)[0])]!r}")
    movable = allowed[:, action].all(axis=1)
    if not movable.any():
        raise InfeasiblePlacementError("no colocation group can run on every action device")
    learned = np.flatnonzero(movable).astype(np.int32)
    # A fixed unit goes to the first action device that can run it, else the first device.
    first_action = action[np.argmax(allowed[:, action], axis=1)]
    unit_device = np.where(allowed[:, action].any(axis=1), first_action,
                           np.argmax(allowed, axis=1)).astype(np.int32)
    unit_device[learned] = -1

    vocab = tuple(sorted(set(graph.op_types))) if type_vocab is None else tuple(type_vocab)
    column = {name: i for i, name in enumerate(vocab)}
    v = len(vocab) + 1
    op_type = np.array([column.get(t, v - 1) for t in graph.op_types], dtype=np.int64)
    position = np.full(num_units, -1, np.int64)
    position[learned] = np.arange(len(learned))
    op_unit = position[units.labels]  # [n] learned-unit index of each op (-1: fixed)
    on = op_unit >= 0
    pairs, pair_ops = np.unique(op_unit[on] * v + op_type[on], return_counts=True)
    pair_unit, pair_type = np.divmod(pairs, v)
    m = len(learned)

    def per_unit(values):  # [n] -> [M] sums over each learned unit's ops
        return np.bincount(op_unit[on], weights=np.asarray(values, np.float64)[on],
                           minlength=m)

    act_time = problem.op_time[:, action].mean(axis=1)
    outputs = np.bincount(graph.tensor_op, minlength=graph.num_ops).astype(np.float64)
    log_bytes, log_outputs = np.log1p(graph.output_bytes.astype(np.float64)), np.log1p(outputs)
    z_bytes = (log_bytes - log_bytes.mean()) / max(log_bytes.std(), 1e-12)
    z_outputs = (log_outputs - log_outputs.mean()) / max(log_outputs.std(), 1e-12)
    topo = np.empty(graph.num_ops, np.float64)
    topo[graph.topological_order()] = np.arange(graph.num_ops) / max(graph.num_ops - 1, 1)
    ops = per_unit(np.ones(graph.num_ops))

    grouped = group_graph(graph, units)
    src = position[grouped.edge_src]
    dst = position[grouped.edge_dst]
    fractions = np.zeros((m, v))
    fractions[pair_unit, pair_type] = pair_ops / ops[pair_unit]
    neighbours = []
    for a, b in ((src, dst), (dst, src)):  # predecessors' types, then successors'
        keep = (a >= 0) & (b >= 0)
        total = np.zeros((m, v))
        np.add.at(total, b[keep], fractions[a[keep]])
        neighbours.append(total / np.maximum(total.sum(axis=1, keepdims=True), 1e-12))
    in_degree = np.bincount(dst[dst >= 0], minlength=m)
    out_degree = np.bincount(src[src >= 0], minlength=m)
    compute, out_bytes = per_unit(act_time), per_unit(graph.output_bytes)
    persistent, num_outputs = per_unit(graph.persistent_bytes), per_unit(outputs)
    numeric = np.stack([np.log1p(ops), np.log1p(out_bytes), np.log1p(num_outputs),
                        np.log(compute + 1e-9), np.log1p(persistent),
                        np.log1p(in_degree), np.log1p(out_degree)], axis=1)
    numeric = np.concatenate([_standardise(numeric),
                              (2.0 * per_unit(topo) / ops - 1.0)[:, None]], axis=1)
    columns = [fractions, *neighbours, numeric]
    hint_order = None
    if hint is not None:
        hint_order = _hint_order(hint, units, learned, action, numeric[:, -1])
        columns.append((2.0 * hint_order - 1.0)[:, None])
    features = np.concatenate(columns, axis=1).astype(np.float32)

    inner = (src >= 0) & (dst >= 0)
    # Bytes that stay inside a unit: every op edge whose two ends share the unit.
    op_src, op_dst = op_unit[graph.edge_src], op_unit[graph.edge_dst]
    same = (op_src >= 0) & (op_src == op_dst)
    self_bytes = np.bincount(op_src[same], weights=graph.tensor_bytes[graph.edge_tensor][same],
                             minlength=m)
    loops = np.flatnonzero(self_bytes > 0)
    return HDPView(
        problem=problem, units=units, learned=learned, unit_device=unit_device,
        action_devices=action, num_groups=num_groups, type_vocab=vocab,
        unit_features=features, pair_unit=pair_unit.astype(np.int64),
        pair_type=pair_type.astype(np.int64), pair_ops=pair_ops.astype(np.float64),
        unit_ops=ops, unit_compute=compute, unit_output_bytes=out_bytes,
        unit_persistent=persistent, unit_outputs=num_outputs,
        unit_size_z=per_unit(z_bytes), unit_outputs_z=per_unit(z_outputs),
        edge_src=np.concatenate([src[inner], loops]).astype(np.int64),
        edge_dst=np.concatenate([dst[inner], loops]).astype(np.int64),
        edge_bytes=np.concatenate([grouped.edge_bytes[inner], self_bytes[loops]]
                                  ).astype(np.float64),
        hint_order=hint_order)


def _hint_order(hint: np.ndarray, units: Grouping, learned: np.ndarray, action: np.ndarray,
                position: np.ndarray) -> np.ndarray:
    """[M] each learned unit's place ``q`` in ``hint`` read device by device (module doc),
    ordered within a device by ``position`` (its mean topological rank); a unit the hint puts
    off the action devices counts as device 0's."""
    hint = np.asarray(hint)
    if hint.shape != units.labels.shape:
        raise ConfigError(f"the hint placement has {hint.size} devices for "
                          f"{units.labels.size} ops")
    unit_device = np.empty(units.num_groups, np.int64)
    unit_device[units.labels] = hint  # a colocation group's ops share one device
    index = np.full(int(max(hint.max(), action.max())) + 1, 0, np.int64)
    index[action] = np.arange(len(action))
    device = index[unit_device[learned]]
    order = np.empty(len(learned))
    for d in range(len(action)):
        mine = np.flatnonzero(device == d)
        rank = np.argsort(np.argsort(position[mine], kind="stable"), kind="stable")
        order[mine] = (d + (rank + 0.5) / max(len(mine), 1)) / len(action)
    return order
