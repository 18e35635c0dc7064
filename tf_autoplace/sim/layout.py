"""The simulator with its ops numbered in the order a step runs them: the same results, sooner.

The event loop (:mod:`tf_autoplace.sim.simulator`) reads several arrays per op (its device,
its pending inputs, its queue link, its times, its inputs and outputs) at the op's index, and it
visits ops in the order they run. A graph's own numbering is the order its builder created the
ops in: the forward pass, then the gradients, and on a model of several layers the ops that run
together on different devices lie far apart. On graphs of tens of thousands of ops those
arrays outgrow the core's cache, and each op visited costs several cache misses.
:class:`OrderedSimulator` renumbers the ops so that ops which run close in time have close
indices, and simulates the renumbered graph.

Why the results do not change (the simulator's module docstring lists what it orders by op
index): the simulation starts with the ops without dependencies queued **in op-index order**,
and when a tensor is ready its consumers are visited **in op-index order**; an op's output
tensors are visited in tensor-index order, then its control dummy. Nothing else reads an index
as an order: ties between events go by a sequence number given as events are created, and
frees and counts are sums. :func:`run_order` numbers the ops in the order one device with a
FIFO queue starts them, which puts the ops without dependencies first, in their own order; the
renumbered simulator visits each tensor's consumers by their old index
(``Simulator(consumer_rank=...)``), and :func:`relabel` keeps each op's outputs in their
order and each op's inputs in their order (the order an in-place kernel tries them). What
names an op or a tensor by its index is renumbered with it: partners, the tensor an output
shares its buffer with (``OpGraph.tensor_alias``); the memory model's dependency pairs are
named by their place in the consumer order the simulator uses. So the renumbered simulation
replays the same events in the same order and gives bit for bit the same step time, peak
memory (buffer reuse included), start and end times and transfers, once mapped back to the
caller's numbering (a test checks it against :class:`~tf_autoplace.sim.simulator.Simulator`
on random graphs and placements, with aliases, in-place kernels, core groups and partners,
and that a numbering which breaks one of these orders changes results).
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.graph.opgraph import OpGraph
from tf_autoplace.core.jit import cached_njit
from tf_autoplace.sim.simulator import (
    SimResult,
    Simulator,
    check_op_time,
    check_partners,
    dependency_keys,
)


@cached_njit
def fifo_order(n, producer_ptr, producer_cons, pending):
    """Kahn's order with a FIFO queue, the start order of every op on one device: ops without
    dependencies in index order, then each op as its last dependency ends. ``producer_ptr`` /
    ``producer_cons``: the ops each op releases, CSR, in the order they are visited;
    ``pending``: [n] int64 dependencies per op, counted down in place. An op on a cycle is
    left out. (A loop over every dependency: numba.)"""
    order = np.empty(n, np.int64)
    tail = 0
    for i in range(n):
        if pending[i] == 0:
            order[tail] = i
            tail += 1
    head = 0
    while head < tail:
        i = order[head]
        head += 1
        for q in range(producer_ptr[i], producer_ptr[i + 1]):
            j = producer_cons[q]
            pending[j] -= 1
            if pending[j] == 0:
                order[tail] = j
                tail += 1
    return order[:tail]


def _csr(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ptr [n+1], dst sorted by src, stably)``."""
    by = np.argsort(src, kind="stable")
    return np.searchsorted(src[by], np.arange(n + 1)).astype(np.int64), dst[by].astype(np.int64)


def run_order(graph: OpGraph) -> np.ndarray:
    """[n] int64: the numbering :class:`OrderedSimulator` uses (``order[new] = old``): the
    order in which one device with one FIFO queue starts the ops (the simulator's model with
    every op on one device: no transfers, one op at a time). The ops without dependencies come
    first, in their own order, as the simulator queues them; a step of any placement follows
    this order in broad strokes, so ops that run close in time get close indices."""
    n = graph.num_ops
    keys = dependency_keys(graph)
    consumer = keys % n
    producer = np.concatenate([graph.tensor_op.astype(np.int64), np.arange(n)])[keys // n]
    ptr, cons = _csr(producer, consumer, n)
    order = fifo_order(n, ptr, cons, np.bincount(consumer, minlength=n).astype(np.int64))
    if len(order) != n:  # OpGraph is acyclic, so this is a bug, not bad input
        raise AssertionError(f"run_order reached {len(order)} of {n} ops")
    return order


def relabel(graph: OpGraph, order: np.ndarray) -> tuple[OpGraph, np.ndarray]:
    """``(graph renumbered so that its op ``k`` is ``graph``'s op ``order[k]``, tensor_order)``,
    where ``tensor_order[new] = old`` numbers the tensors by their producer's new index, each
    op's outputs in their old order."""
    order = np.asarray(order, np.int64)
    new_of = np.empty_like(order)
    new_of[order] = np.arange(len(order))
    producer = new_of[graph.tensor_op]
    tensor_order = np.lexsort((np.arange(len(producer)), producer))
    new_tensor = np.empty_like(tensor_order)
    new_tensor[tensor_order] = np.arange(len(tensor_order))
    alias = graph.tensor_alias[tensor_order].astype(np.int64)  # codes < 0 stay as they are
    alias[alias >= 0] = new_tensor[alias[alias >= 0]]
    renumbered = dataclasses.replace(
        graph, names=tuple(graph.names[i] for i in order),
        op_types=tuple(graph.op_types[i] for i in order),
        persistent_bytes=graph.persistent_bytes[order], tensor_op=producer[tensor_order],
        tensor_bytes=graph.tensor_bytes[tensor_order], edge_tensor=new_tensor[graph.edge_tensor],
        edge_dst=new_of[graph.edge_dst], ctrl_src=new_of[graph.ctrl_src],
        ctrl_dst=new_of[graph.ctrl_dst], colocation=graph.colocation[order],
        kernels=graph.kernels[order], shape_known=graph.shape_known[order],
        tensor_alias=alias)
    return renumbered, tensor_order


class OrderedSimulator:
    """A :class:`~tf_autoplace.sim.simulator.Simulator` of ``graph`` that simulates it
    renumbered by :func:`run_order` (module docstring): the same interface and, in the
    caller's numbering, the same results.

    Args:
      graph, cluster, op_time, partner, partner_time: as for ``Simulator``.
      order: the numbering (``order[new] = old``); None: :func:`run_order`. Any numbering that
        keeps the ops without dependencies in their order gives the same results.

    Raises:
      InvalidGraphError: ``op_time``, ``partner`` or ``partner_time`` is malformed (as for
        ``Simulator``).
    """

    def __init__(self, graph: OpGraph, cluster: Cluster, op_time: np.ndarray, *,
                 partner: np.ndarray | None = None, partner_time: np.ndarray | None = None,
                 order: np.ndarray | None = None):
        self.graph, self.cluster = graph, cluster
        self.op_time = check_op_time(graph, cluster, op_time)
        self.partner, self.partner_time = check_partners(graph, self.op_time, partner,
                                                         partner_time)
        self.order = np.asarray(run_order(graph) if order is None else order, np.int64)
        renumbered, self.tensor_order = relabel(graph, self.order)
        self._new_of = np.empty_like(self.order)
        self._new_of[self.order] = np.arange(len(self.order))
        inner_partner = inner_partner_time = None
        if partner is not None:  # partner indices are op indices: renumber them too
            mate = self.partner[self.order]
            inner_partner = np.where(mate >= 0, self._new_of[np.maximum(mate, 0)], -1)
            inner_partner_time = self.partner_time[self.order]
        self._inner = Simulator(renumbered, cluster, self.op_time[self.order],
                                partner=inner_partner, partner_time=inner_partner_time,
                                consumer_rank=self.order)

    def with_links(self, cluster: Cluster) -> "OrderedSimulator":
        """This simulator on ``cluster``, with other link figures only (as
        ``Simulator.with_links``: the renumbered graph is shared, not rebuilt)."""
        out = copy.copy(self)
        out._inner = self._inner.with_links(cluster)
        out.cluster = cluster
        return out

    def restricted(self, devices) -> "OrderedSimulator":
        """This simulator on the devices ``devices`` of its cluster only, as
        ``Simulator.restricted`` (the renumbered graph is shared, not rebuilt)."""
        devices = np.asarray(devices, dtype=np.int64)
        out = copy.copy(self)
        out._inner = self._inner.restricted(devices)
        out.cluster = out._inner.cluster
        out.op_time = check_op_time(self.graph, out.cluster, self.op_time[:, devices])
        out.partner, out.partner_time = check_partners(
            self.graph, out.op_time, self.partner,
            None if self.partner_time is None else self.partner_time[:, devices])
        return out

    def _renumbered(self, placement):
        """The placement in the inner numbering; anything malformed goes to the inner
        simulator as it is, whose checks name what is wrong."""
        p = np.asarray(placement)
        return p[self.order] if p.shape == (self.graph.num_ops,) else p

    def run(self, placement: np.ndarray) -> SimResult:
        """Simulate one step of ``placement`` ([n] int device index per op), as
        ``Simulator.run``."""
        r = self._inner.run(self._renumbered(placement))
        tensor = r.transfer_tensor.astype(np.int64)
        data = tensor >= 0  # -1: a control dummy (a graph may have no tensors at all)
        tensor[data] = self.tensor_order[tensor[data]]
        out = dict(start=r.start[self._new_of], end=r.end[self._new_of],
                   transfer_tensor=tensor.astype(np.int32),
                   transfer_op=self.order[r.transfer_op].astype(np.int32))
        for a in out.values():
            a.setflags(write=False)
        return dataclasses.replace(r, **out)

    def summary(self, placement: np.ndarray) -> SimResult:
        """What :meth:`run` gives, except that the per-op and per-transfer arrays are left in
        the simulator's own numbering: for a caller that reads only the makespan, the peak
        memory, the busy time and the bytes moved, which do not depend on it."""
        return self._inner.run(self._renumbered(placement))

    def summaries(self, placements: np.ndarray, *, below: float | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Makespans and peak memories of the rows of ``placements``, as
        ``Simulator.summaries`` (neither depends on the numbering)."""
        p = np.asarray(placements)
        if p.ndim == 2 and p.shape[1] == self.graph.num_ops:  # (np.take: cheaper than [:, order])
            p = np.take(p, self.order, axis=1)
        return self._inner.summaries(p, below=below)

    def makespan(self, placement: np.ndarray) -> float:
        """Only the predicted step time of ``placement``."""
        return self._inner.makespan(self._renumbered(placement))
