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
``L_path`` lets every op start the moment its last parent ends, at its fastest time. In the
simulator that happens only for a parent on the op's own device, parents on one device run
one after the other, and an op runs at the time of the device it is on, which is its
neighbours' device only if they share it. :func:`device_heads_and_tails` computes, for every
op ``k`` and device ``d``, a *head* ``h[k, d] <= start_k`` and a *tail* ``q[k, d] <= makespan -
end_k`` that hold in every valid placement putting ``k`` on ``d``, and ``transfer_path_bound =
max_k min_d h[k, d] + t[k, d] + q[k, d]``, where ``t[k, d]`` is k's time on d (``inf``, and so
are h and q, where k's colocation group may not go: some op of the group has no kernel there).
Notation: ``m_jk(e, d)`` is ``latency[e, d] + bytes / bandwidth[e, d] + delay[e, d]`` for the
largest tensor ``j`` sends ``k`` (0 bytes for a control edge, which the simulator sends as a
dummy), and ``c_d`` the most ops d's executor runs at once (1, or a core group's cores). Heads
are computed in topological order; for op ``k`` on ``d`` with parents ``P``:

    h[k, d] = min over subsets A of P of max( max_{j not in A} min_{e != d} h[j, e] + t[j, e]
                                                                            + m_jk(e, d),
                                              max_{j in A} h[j, d] + t[j, d],
                                              max_{A' in A} min_{j in A'} h[j, d]
                                                            + sum_{j in A'} t[j, d] / c_d )

where parents in k's colocation group are always in ``A`` and parents that may not go to ``d``
never are. Proof that ``h[k, d] <= start_k`` in a valid placement with k on d, by induction over
the topological order (assume it for the parents on every device): let ``A`` be the parents
that the placement puts on ``d`` (so the subsets the minimum ranges over include it).

* A parent ``j`` not in ``A`` is on some ``e != d``, ends at ``end_j >= h[j, e] + t[j, e]``,
  and only then does its tensor (or control dummy) join the send queue; the copy that releases
  ``k`` arrives no earlier than ``end_j + m_jk(e, d)``, because sending ``b`` bytes from ``e``
  to ``d`` takes ``latency[e, d] + b / bandwidth[e, d]`` and then its ``delay`` in flight
  (waiting in the queue only adds; a link inside a core group has no delay). So ``start_k >=
  min_{e != d} h[j, e] + t[j, e] + m_jk(e, d)``.
* A parent ``j`` in ``A`` ends before ``k`` starts: ``start_k >= h[j, d] + t[j, d]``.
* The parents in any ``A' subset of A`` run on ``d``, at most ``c_d`` at once, none starts
  before ``min_{A'} h[j, d]`` and each runs ``t[j, d]``, all before ``start_k``; so ``start_k >=
  min_{A'} h[j, d] + sum_{A'} t[j, d] / c_d``. Transfers that run on a group's cores only take
  cores from the ops, so leaving them out keeps every term a bound.

The right-hand side is monotone in every head, so replacing the true start times by the heads
keeps it a lower bound, and the minimum over ``A`` is at most its value at the true ``A``.
Tails are the same recursion run backwards over children (children on ``d`` run at most
``c_d`` at once after ``end_k``; a child on ``e != d`` starts no earlier than ``end_k +
m_kc(d, e)``), so ``q[k, d] <= makespan - end_k``; then ``makespan >= start_k + t[k, d] +
(makespan - end_k) >= h[k, d] + t[k, d] + q[k, d]`` for the device ``d`` k is on, which is at
least the minimum over devices. :func:`heads_and_tails` gives each op's least head and tail
over its devices, which the LP (:mod:`tf_autoplace.sim.lp_bound`) and the exact solver use.

The minimum over the ``2^|P|`` subsets needs only ``|P| + 1`` candidates: the "on" terms only grow
with ``A``, so for a given largest "elsewhere" cost the best ``A`` holds exactly the parents whose
elsewhere-cost exceeds it; and the best ``A'`` is a set of the members with the largest heads.
One pass costs ``O(D^2 sum |P| + D sum |P|^2)``.

It matters where layers branch (Inception modules, LSTM gates, attention heads): a branch
either runs after its siblings on their device or pays a transfer, and ``L_path`` charges
neither. And it matters where neighbouring ops are fastest on different devices (on a K80
cluster most small ops run faster on the CPU host, the large ones on a GPU): a path cannot
take each op at its fastest time without a transfer wherever the fastest device changes, and
``L_path`` charges none.

Windows (``device_heads_and_tails(..., windows=True)``, :mod:`tf_autoplace.sim.windows`)
lift the heads further where a head sees too little: a join's head counts the last op of each
branch, not the branches' earlier ops, which must also run between the fork and the join. A
window bounds the time between two ops of a longest path given the devices of both, from all
the ops between them; after ``k``'s own recursion its head on ``d`` becomes at least ``min_e
h[o, e] + t[o, e] + L_ok(e, d)`` for each window from ``o`` to ``k`` (and tails the same way
backwards). That holds for whichever device ``o`` is on, and since the recursion is monotone in
every head, the lift carries to every op downstream.

Both bounds are used to report how far a placement is from optimal and to normalise rewards.
Neither counts memory beyond what decides validity.
"""

from __future__ import annotations

import numpy as np

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.graph.opgraph import OpGraph
from tf_autoplace.core.jit import cached_njit
from tf_autoplace.sim.simulator import check_op_time
from tf_autoplace.sim.windows import Windows, window_lengths


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
def _device_heads(order, ptr, nbr, nbytes, coloc, time, latency, bandwidth, delay, cores,
                  win_ptr, win_nbr, win_row, win_length, win_case):
    """The recursion of :func:`device_heads_and_tails` in one direction: ``head[k, d]`` for
    every op ``k`` (in ``order``) and device ``d``. ``nbr[ptr[k]:ptr[k+1]]`` are k's parents
    (for heads) or children (for tails), ``nbytes`` the largest tensor on each of those edges
    (0 for a control edge), ``coloc`` the colocation groups, ``time[i, d]`` op i's time on d
    (``inf`` where its colocation group may not go), the link figures oriented from the
    neighbour's device to k's (the transposes for tails), ``cores[d]`` how many ops d's
    executor runs at once. ``head[k, d]`` is ``inf`` where k may not run on d. Windows
    (:mod:`tf_autoplace.sim.windows`) ending at k are ``win_nbr[win_ptr[k]:win_ptr[k+1]]``
    (their other end) with rows ``win_row`` of ``win_length``, ``win_case[e, d]`` the column
    for the other end on e and k on d."""
    n, num_dev = time.shape
    head = np.zeros((n, num_dev))
    width = 0
    for k in range(n):
        width = max(width, ptr[k + 1] - ptr[k])
    on = np.empty(width)      # neighbour on k's device: its head there plus its time there
    key = np.empty(width)     # ... elsewhere: the least head + time + transfer to k's device
    member = np.empty(width)  # its head on k's device
    share = np.empty(width)   # its time there over the cores: what it adds to the serial term
    serial = np.empty(width)
    member_head = np.empty(width)
    member_share = np.empty(width)
    for k in order:
        p0, p1 = ptr[k], ptr[k + 1]
        for d in range(num_dev):
            if not np.isfinite(time[k, d]):
                head[k, d] = np.inf
                continue
            # Neighbours that cannot share d only ever count as "elsewhere"; those that can be
            # nowhere else (k's own colocation group, or no other device) always count as
            # "on": an infinite elsewhere-cost sorts them first.
            fixed_off = 0.0
            num_free = 0
            for a in range(p0, p1):
                j = nbr[a]
                away = np.inf
                for e in range(num_dev):
                    if e != d and coloc[j] != coloc[k] and np.isfinite(time[j, e]):
                        arrive = (head[j, e] + time[j, e] + latency[e, d]
                                  + nbytes[a] / bandwidth[e, d] + delay[e, d])
                        away = min(away, arrive)
                if not np.isfinite(time[j, d]):
                    fixed_off = max(fixed_off, away)
                    continue
                on[num_free] = head[j, d] + time[j, d]
                key[num_free] = away
                member[num_free] = head[j, d]
                share[num_free] = time[j, d] / cores[d]
                num_free += 1
            rank = np.argsort(-key[:num_free])
            # serial[m]: head of member m plus the share of every member whose head is >= it.
            on_end = 0.0    # max over members of head + time
            on_serial = 0.0  # max over members of serial
            best = np.inf
            for r in range(num_free + 1):  # the r neighbours with the largest key are "on"
                if r > 0:
                    c = rank[r - 1]
                    hn, sn = member[c], share[c]
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
                    on_end = max(on_end, on[c])
                off = fixed_off
                if r < num_free:
                    off = max(off, key[rank[r]])
                best = min(best, max(off, on_end, on_serial))
            head[k, d] = best
        for w in range(win_ptr[k], win_ptr[k + 1]):  # at least a window after its other end
            o, row = win_nbr[w], win_row[w]
            for d in range(num_dev):
                lifted = np.inf
                for e in range(num_dev):
                    lifted = min(lifted, head[o, e] + time[o, e]
                                 + win_length[row, win_case[e, d]])
                head[k, d] = max(head[k, d], lifted)
    return head


def _group_times(graph: OpGraph, op_time: np.ndarray):
    """``(time, stranded)``: [n, D] seconds, op i's time on d where its colocation group may go
    (every op of the group has a kernel on d), ``inf`` elsewhere; and [n] bool, the ops of
    groups with no such device (no valid placement exists), which keep their own kernels'
    times so that the bounds stay finite."""
    coloc = graph.colocation.astype(np.int64)
    allowed = np.ones((int(coloc.max()) + 1, op_time.shape[1]), bool)
    np.logical_and.at(allowed, coloc, np.isfinite(op_time))
    allowed = allowed[coloc]
    stranded = ~allowed.any(axis=1)
    allowed[stranded] = np.isfinite(op_time[stranded])
    return np.where(allowed, op_time, np.inf), stranded


def _edge_pairs(graph: OpGraph):
    """Unique dependency pairs ``(src, dst, nbytes)`` (data and control edges), each with the
    largest tensor ``src`` sends ``dst`` (0 bytes for a control edge: the simulator's dummy)."""
    n = graph.num_ops
    src = np.concatenate([graph.edge_src, graph.ctrl_src]).astype(np.int64)
    dst = np.concatenate([graph.edge_dst, graph.ctrl_dst]).astype(np.int64)
    nbytes = np.concatenate([graph.tensor_bytes[graph.edge_tensor],
                             np.zeros(len(graph.ctrl_src), np.int64)]).astype(np.float64)
    pairs, inv = np.unique(src * n + dst, return_inverse=True)
    biggest = np.zeros(len(pairs))
    np.maximum.at(biggest, inv.ravel(), nbytes)
    return pairs // n, pairs % n, biggest


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
    num_dev = cluster.num_devices
    coloc = graph.colocation.astype(np.int64)
    time, _ = _group_times(graph, op_time)
    src, dst, biggest = _edge_pairs(graph)
    a_src, a_dst = np.isfinite(time[src]), np.isfinite(time[dst])
    delay = np.asarray(cluster.delay, np.float64)
    gap = np.full(len(src), np.inf)
    for d in range(num_dev):
        for e in range(num_dev):
            if d != e:
                cost = cluster.latency[d, e] + biggest / cluster.bandwidth[d, e] + delay[d, e]
                gap = np.where(a_src[:, d] & a_dst[:, e], np.minimum(gap, cost), gap)
    forced = np.where(coloc[src] == coloc[dst], 1,
                      np.where((a_src & a_dst).any(axis=1), 0, -1)).astype(np.int64)
    return src, dst, gap, forced, time.min(axis=1)


def device_heads_and_tails(graph: OpGraph, cluster: Cluster, op_time: np.ndarray, *,
                           windows: bool = False):
    """``(head, tail, time)``, [n, D] seconds each: in every valid placement that puts op i
    on device d, i starts no earlier than ``head[i, d]`` and ends no later than ``makespan -
    tail[i, d]``, and runs ``time[i, d]`` (``op_time``, or ``inf`` where i's colocation group
    may not go; head and tail are ``inf`` there too). Module docstring, "The path with
    transfers"; with ``windows``, also lifted by the windows along a longest path
    (:mod:`tf_autoplace.sim.windows`), which costs about a second on a graph of tens of
    thousands of ops."""
    op_time = check_op_time(graph, cluster, op_time)
    n = graph.num_ops
    time, stranded = _group_times(graph, op_time)
    time = np.ascontiguousarray(time)
    coloc = graph.colocation.astype(np.int64)
    coloc[stranded] = -1 - np.flatnonzero(stranded)  # a stranded op is bound to no other
    src, dst, nbytes = _edge_pairs(graph)
    executor, cores = cluster.executors()
    per_device = cores[executor].astype(np.float64)
    latency, bandwidth, delay = (np.asarray(a, np.float64)
                                 for a in (cluster.latency, cluster.bandwidth, cluster.delay))
    found = (window_lengths(graph, cluster, time, coloc, src, dst, nbytes) if windows
             else Windows.none(cluster.num_devices))
    order = graph.topological_order().astype(np.int64)
    out = []
    for node, other, walk, flip in ((dst, src, order, False), (src, dst, order[::-1], True)):
        by = np.argsort(node, kind="stable")
        ptr = np.searchsorted(node[by], np.arange(n + 1)).astype(np.int64)
        # Heads: a parent's tensor goes from its device to k's; tails: k's to the child's.
        # Fresh C-ordered copies either way: one compiled signature (not read-only ones too).
        links = [np.array(a.T if flip else a, order="C") for a in (latency, bandwidth, delay)]
        # A window lifts its end's head (from its start) and its start's tail (from its end).
        at, far = (found.u, found.v) if flip else (found.v, found.u)
        rows = np.argsort(at, kind="stable")
        win_ptr = np.searchsorted(at[rows], np.arange(n + 1)).astype(np.int64)
        case = np.array(found.case.T if flip else found.case, np.int64, order="C")
        out.append(_device_heads(np.ascontiguousarray(walk), ptr, other[by], nbytes[by], coloc,
                                 time, *links, per_device, win_ptr, far[rows].astype(np.int64),
                                 rows.astype(np.int64), np.ascontiguousarray(found.length),
                                 case))
    return out[0], out[1], time


def heads_and_tails(graph: OpGraph, cluster: Cluster, op_time: np.ndarray):
    """``(head, tail, fastest)``, [n] seconds each: in every valid placement op i starts no
    earlier than ``head[i]``, ends no later than ``makespan - tail[i]``, and runs for at least
    ``fastest[i]`` (the least over devices of :func:`device_heads_and_tails`)."""
    head, tail, time = device_heads_and_tails(graph, cluster, op_time)
    return head.min(axis=1), tail.min(axis=1), time.min(axis=1)


def transfer_path_bound(graph: OpGraph, cluster: Cluster, op_time: np.ndarray) -> float:
    """``max_i min_d head[i, d] + time[i, d] + tail[i, d]``
    (:func:`device_heads_and_tails`): a makespan no valid placement can beat, the critical
    path made aware of transfers, of the device each op runs on and of one device running
    one op at a time."""
    head, tail, time = device_heads_and_tails(graph, cluster, op_time)
    return float((head + time + tail).min(axis=1).max())
