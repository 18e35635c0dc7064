"""Lower bounds on the makespan any valid placement can reach in the simulator.

A *valid* placement keeps every TF colocation group on one device and puts every op on a device
with a kernel for it (finite ``op_time``); see :mod:`tf_autoplace.sim.simulator` for the model.
Two bounds live here; :mod:`tf_autoplace.sim.lp_bound` combines them with per-device load in a
linear program.

The simple bound
----------------
``lower_bound(graph, cluster, op_time) = max(L_path, L_load)`` where, with
``t_i = min_d op_time[i, d]`` (op i on its fastest device):

* ``L_path`` is the longest path through the graph (data and control edges) weighted by
  ``t_i``, with every transfer free;
* ``L_load = sum_i t_i / C``, with ``C`` the cores of the cluster: ``D`` when every device
  runs one op at a time, more or fewer with core groups (``Cluster.executors``).

Why it is valid for every placement ``p`` (valid or not):

* Along any path ``o_1 -> o_2 -> ... -> o_m`` an op cannot start before its parent has ended
  (a transfer, if any, only adds time), and op ``o`` runs for ``op_time[o, p[o]] >= t_o``. So
  the last op of the path ends no earlier than ``sum t_{o_k}``, hence makespan >= ``L_path``.
* A core runs one op at a time, and every op runs inside ``[0, makespan]``, so the ``C`` cores
  are busy for at most ``C * makespan`` seconds together: ``sum_i op_time[i, p[i]] <= C *
  makespan``. The left side is at least ``sum_i t_i``, hence makespan >= ``L_load``.

The path with transfers
-----------------------
``L_path`` lets every op start the moment its last parent ends. In the simulator that happens
only for a parent on the op's own device, and parents on one device run one after the other.
:func:`heads_and_tails` computes, for every op ``k``, a *head* ``h_k <= start_k`` and a *tail*
``q_k <= makespan - end_k`` that hold in every valid placement, and
``transfer_path_bound = max_k h_k + f_k + q_k`` where ``f_k`` is k's least time over the devices
its colocation group may use. Notation: ``m_jk`` is the least ``latency + bytes / bandwidth``
over ordered pairs of distinct devices allowed to the colocation groups of ``j`` and ``k``, for
the largest tensor ``j`` sends ``k`` (0 bytes for a control edge, which the simulator sends as a
dummy). Heads are computed in topological order; for op ``k`` with parents ``P``:

    h_k = min over subsets A of P of max( max_{j not in A} h_j + f_j + m_jk,
                                         max_{j in A} h_j + f_j,
                                         max_{A' in A} min_{j in A'} h_j + sum_{j in A'} f_j )

where parents in k's colocation group are always in ``A`` and parents with no allowed device
in common with k never are. Proof that ``h_k <= start_k`` in a valid placement, by induction
over the topological order (assume it for the parents): let ``A`` be the parents that the
placement puts on k's device (so the subsets the minimum ranges over include it).

* A parent ``j`` not in ``A`` ends at ``end_j >= h_j + f_j``, and only then does its tensor (or
  control dummy) join the send queue; the copy that releases ``k`` arrives no earlier than
  ``end_j + m_jk``, because sending ``b`` bytes from ``d`` to ``d' != d`` takes
  ``latency[d, d'] + b / bandwidth[d, d']`` (waiting in the queue only adds). So
  ``start_k >= h_j + f_j + m_jk``.
* A parent ``j`` in ``A`` ends before ``k`` starts: ``start_k >= h_j + f_j``.
* The parents in any ``A' subset of A`` run on k's device one at a time, none starts before
  ``min_{A'} h_j``, each runs at least ``f_j`` and all end before ``start_k``; so ``start_k >=
  min_{A'} h_j + sum_{A'} f_j``. With core groups a device may run up to ``c`` ops at once
  (``c`` the most cores of any executor), and the sum is divided by ``c``: those parents still
  need ``sum_{A'} f_j / c`` of wall time. Transfers that run on a group's cores only take
  cores from the ops, so leaving them out keeps every term a bound.

The right-hand side is monotone in every ``h_j``, so replacing the true start times by the
heads keeps it a lower bound, and the minimum over ``A`` is at most its value at the true
``A``. Tails are the same recursion run backwards over children (children on j's device run
one at a time after ``end_j``; a child elsewhere starts no earlier than ``end_j + m_jk``), so
``q_j <= makespan - end_j``; then ``makespan = end_k + (makespan - end_k) >= start_k + f_k +
q_k >= h_k + f_k + q_k``.

The minimum over the ``2^|P|`` subsets needs only ``|P| + 1`` candidates: the "on" terms only grow
with ``A``, so for a given largest "elsewhere" cost the best ``A`` holds exactly the parents whose
``h_j + f_j + m_jk`` exceeds it; and the best ``A'`` is a set of the members with the largest
heads. One pass costs ``O(sum |P|^2)``.

It matters where layers branch (Inception modules, LSTM gates, attention heads): a branch
either runs after its siblings on their device or pays a transfer, and ``L_path`` charges
neither.

Both bounds are used to report how far a placement is from optimal and to normalise rewards.
Neither counts memory beyond what decides validity.
"""

from __future__ import annotations

import numpy as np

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.graph.opgraph import OpGraph
from tf_autoplace.core.jit import cached_njit
from tf_autoplace.sim.simulator import check_op_time


@cached_njit
def _longest_path(order, child_ptr, children, weight):
    """Longest path in a DAG: ``order`` topological, children in CSR, node weights."""
    ready = np.zeros(weight.shape[0])  # earliest start of each op
    best = 0.0
    for i in order:
        finish = ready[i] + weight[i]
        if finish > best:
            best = finish
        for c in range(child_ptr[i], child_ptr[i + 1]):
            j = children[c]
            if finish > ready[j]:
                ready[j] = finish
    return best


def critical_path(graph: OpGraph, weight: np.ndarray) -> float:
    """Length of the longest path through ``graph`` (data and control edges) where op i
    weighs ``weight[i]`` seconds and edges are free."""
    n = graph.num_ops
    src = np.concatenate([graph.edge_src, graph.ctrl_src]).astype(np.int64)
    dst = np.concatenate([graph.edge_dst, graph.ctrl_dst]).astype(np.int64)
    order = np.argsort(src, kind="stable")
    child_ptr = np.searchsorted(src[order], np.arange(n + 1)).astype(np.int64)
    return float(_longest_path(graph.topological_order().astype(np.int64), child_ptr,
                               dst[order], np.ascontiguousarray(weight, dtype=np.float64)))


def lower_bound(graph: OpGraph, cluster: Cluster, op_time: np.ndarray) -> float:
    """A makespan no placement of ``graph`` on ``cluster`` can beat (module docstring).

    Args:
      op_time: [n, D] float64 seconds per op and device, as given to the Simulator.
    """
    op_time = check_op_time(graph, cluster, op_time)
    fastest = op_time.min(axis=1)
    cores = int(cluster.executors()[1].sum())
    return max(critical_path(graph, fastest), float(fastest.sum()) / cores)


# ====================================================== heads and tails with transfers
@cached_njit
def _heads(order, ptr, nbr, gap, forced, weight, shared_weight):
    """The recursion of :func:`heads_and_tails` in one direction. For op ``k`` (in ``order``)
    its neighbours ``nbr[ptr[k]:ptr[k+1]]`` (parents for heads, children for tails), the
    shortest transfer ``gap`` on each of those edges and ``forced``: 1 if the neighbour shares
    ``k``'s device in every valid placement, -1 if it never can, 0 otherwise.
    ``shared_weight``: ``weight`` divided by the most ops a device runs at once, what an op
    adds to the serial term of its siblings on one device."""
    n = weight.shape[0]
    head = np.zeros(n)
    for k in order:
        p0, p1 = ptr[k], ptr[k + 1]
        if p1 == p0:
            continue
        # Neighbours forced off k's device only ever count as "elsewhere".
        fixed_off = 0.0
        num_free = 0
        for a in range(p0, p1):
            if forced[a] == -1:
                fixed_off = max(fixed_off, head[nbr[a]] + weight[nbr[a]] + gap[a])
            else:
                num_free += 1
        # Candidates for "on k's device", by their elsewhere-cost, largest first (forced-on
        # neighbours have an infinite elsewhere-cost, so they always come first).
        cand = np.empty(num_free, np.int64)
        key = np.empty(num_free)
        c = 0
        for a in range(p0, p1):
            if forced[a] != -1:
                cand[c] = a
                key[c] = np.inf if forced[a] == 1 else head[nbr[a]] + weight[nbr[a]] + gap[a]
                c += 1
        rank = np.argsort(-key)
        # serial[m]: head of member m plus the weight of every member whose head is >= it.
        serial = np.empty(num_free)
        member_head = np.empty(num_free)
        member_share = np.empty(num_free)
        on_end = 0.0    # max over members of head + weight
        on_serial = 0.0  # max over members of serial
        best = np.inf
        for r in range(num_free + 1):  # the r candidates with the largest key are "on"
            if r > 0:
                j = nbr[cand[rank[r - 1]]]
                hn, wn, sn = head[j], weight[j], shared_weight[j]
                s = hn + sn
                for m in range(r - 1):
                    if member_head[m] >= hn:
                        s += member_share[m]
                    if member_head[m] <= hn:
                        serial[m] += sn
                        on_serial = max(on_serial, serial[m])
                serial[r - 1] = s
                member_head[r - 1] = hn
                member_share[r - 1] = sn
                on_serial = max(on_serial, s)
                on_end = max(on_end, hn + wn)
            off = fixed_off
            if r < num_free:
                off = max(off, key[rank[r]])
            best = min(best, max(off, on_end, on_serial))
        head[k] = best
    return head


def _edge_gaps(graph: OpGraph, cluster: Cluster, op_time: np.ndarray):
    """Unique dependency pairs ``src -> dst`` (data and control) with the shortest transfer
    each needs when its ends sit on different devices, and whether they may share one.

    Returns ``(src, dst, gap, forced, fastest)``: ``gap`` is the least ``latency + bytes /
    bandwidth + delay`` (the time from the producer's end to the arrival) over ordered pairs
    of distinct devices allowed to the two ends' colocation
    groups, for the largest tensor ``src`` sends ``dst`` (0 bytes for a control edge: the
    simulator's dummy); ``forced`` is 1 for ends in one colocation group, -1 for ends that
    have no allowed device in common, else 0; ``fastest`` is each op's least time over the
    devices its colocation group may use.
    """
    n, num_dev = graph.num_ops, cluster.num_devices
    coloc = graph.colocation.astype(np.int64)
    allowed = np.ones((int(coloc.max()) + 1, num_dev), bool)
    np.logical_and.at(allowed, coloc, np.isfinite(op_time))
    fastest = np.where(allowed[coloc], op_time, np.inf).min(axis=1)
    fastest = np.where(np.isfinite(fastest), fastest, op_time.min(axis=1))

    src = np.concatenate([graph.edge_src, graph.ctrl_src]).astype(np.int64)
    dst = np.concatenate([graph.edge_dst, graph.ctrl_dst]).astype(np.int64)
    nbytes = np.concatenate([graph.tensor_bytes[graph.edge_tensor],
                             np.zeros(len(graph.ctrl_src), np.int64)]).astype(np.float64)
    pairs, inv = np.unique(src * n + dst, return_inverse=True)
    biggest = np.zeros(len(pairs))
    np.maximum.at(biggest, inv.ravel(), nbytes)
    src, dst = pairs // n, pairs % n

    a_src, a_dst = allowed[coloc[src]], allowed[coloc[dst]]
    gap = np.full(len(pairs), np.inf)
    for d in range(num_dev):
        for e in range(num_dev):
            if d != e:
                cost = (cluster.latency[d, e] + biggest / cluster.bandwidth[d, e]
                        + cluster.delay[d, e])
                gap = np.where(a_src[:, d] & a_dst[:, e], np.minimum(gap, cost), gap)
    forced = np.where(coloc[src] == coloc[dst], 1,
                      np.where((a_src & a_dst).any(axis=1), 0, -1)).astype(np.int64)
    return src, dst, gap, forced, fastest


def heads_and_tails(graph: OpGraph, cluster: Cluster, op_time: np.ndarray):
    """``(head, tail, fastest)``, [n] seconds each: in every valid placement op i starts no
    earlier than ``head[i]``, ends no later than ``makespan - tail[i]``, and runs for at least
    ``fastest[i]`` (module docstring, "The path with transfers")."""
    op_time = check_op_time(graph, cluster, op_time)
    src, dst, gap, forced, fastest = _edge_gaps(graph, cluster, op_time)
    order = graph.topological_order().astype(np.int64)
    shared = fastest / float(cluster.executors()[1].max())
    out = []
    for node, other, walk in ((dst, src, order), (src, dst, order[::-1].copy())):
        by = np.argsort(node, kind="stable")
        ptr = np.searchsorted(node[by], np.arange(graph.num_ops + 1)).astype(np.int64)
        out.append(_heads(walk, ptr, other[by], gap[by], forced[by], fastest, shared))
    return out[0], out[1], fastest


def transfer_path_bound(graph: OpGraph, cluster: Cluster, op_time: np.ndarray) -> float:
    """``max_i head[i] + fastest[i] + tail[i]`` (:func:`heads_and_tails`): a makespan no valid
    placement can beat, the critical path made aware of transfers and of one device running
    one op at a time."""
    head, tail, fastest = heads_and_tails(graph, cluster, op_time)
    return float((head + fastest + tail).max())
