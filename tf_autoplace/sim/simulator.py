"""Event-based simulator of one training step of a placed graph (Placeto, appendix A.5).

Given an :class:`~tf_autoplace.graph.opgraph.OpGraph`, a :class:`~tf_autoplace.core.cluster.Cluster`,
each op's compute time on each device (``op_time[n, D]``, from the cost model) and a placement
(``placement[n]``, a device index per op), :meth:`Simulator.run` predicts the step time
(makespan), each device's peak memory and an execution timeline. :func:`memory_penalized_runtime`
turns a result into Placeto's reward quantity ``R = r + c * ReLU(m - M)`` (appendix A.7).

The model (Placeto A.5, which was checked against TensorFlow's executor)
------------------------------------------------------------------------
A device's ops run on its *executor*. A device outside any core group (a GPU; every device of
the shipped K80 and V100 specs) is its own executor with one core: it runs one op at a time,
Placeto's model. The devices of a core group (``Cluster.core_groups``: the logical CPU devices
of one host, which TensorFlow runs on one thread pool) share one executor with the group's
``cores`` cores: up to that many of their ops run at once, whichever device they are on
(see "Core groups" below). Each executor ``e`` and each device ``d`` has a FIFO queue:

* ``Q_core[e]``: runnable ops placed on the executor's devices. An op is *runnable* once every
  parent has finished and every input produced on another device has been transferred to its
  device. An idle core takes the head of the queue; op ``i`` on ``d`` takes ``op_time[i, d]``
  seconds (the cost model already added any per-op overhead), or ``partner_time[i, d]`` when
  the op has a partner placed on another device (see "Partners" below).
* ``Q_transfer[d]``: tensors waiting to leave ``d`` for a device of another executor (one
  outgoing bus per device), unless both devices are in core groups (see "Core groups"). Sending ``b`` bytes from ``d`` to ``d'`` takes
  ``latency[d, d'] + b / bandwidth[d, d']`` seconds; transfers overlap compute; one transfer at
  a time per source device, any number may arrive at one destination at once (there is no
  incoming-bus model, as in the paper).

There are two kinds of events, each with a time stamp; the next event is the earliest, ties
broken by a sequence number given when the event is created, so the simulation is deterministic.

* **Op-done** (op ``o`` on ``d``): for every consumer ``o'`` of an output of ``o`` placed on
  ``d' != d``, the tensor joins ``Q_transfer[d]`` (or ``Q_core`` of ``d``'s executor, see
  below); for every consumer on ``d`` itself, one dependency is satisfied and ``o'`` joins
  ``Q_core`` of ``d``'s executor when it becomes runnable. Then the core is free and takes the
  head of that queue.
* **Transfer-done** (tensor from ``d`` to ``d'``; for a link with a delay, that long after
  its bus or core was done, "Delays" below): every consumer on ``d'`` gets that input;
  those that become runnable join ``Q_core`` of ``d'``'s executor. Then the bus (or core) that
  carried it takes its next item.
* **Wakeup**: the paper schedules a Wakeup event when work lands in the queue of an idle
  device or bus. Here the wakeup happens at once, at the same time stamp: after each event the
  executor and the bus it touched start the heads of their queues on their idle cores and bus.

The simulation starts with the ops without dependencies queued in op-index order, and ends
when no event is left; the makespan is the end time of the last op. Ops left unrun at that
point would mean a cycle: that raises rather than returning a wrong time.

Core groups (our extension; the paper's devices are GPUs with their own cores)
------------------------------------------------------------------------------
TensorFlow runs every logical CPU device of a process, and a CPU device's own ops, on one
inter-op thread pool with as many threads as cores: N logical CPUs of one host run no more ops
at once than the host has cores, and one of them alone already runs several at once. A cluster
says so with a core group (``Cluster.local`` puts its CPU devices in one, with the host's
cores); without one, two logical CPUs would be simulated as two independent processors and a
placement that splits work between them as up to twice as fast, which they are not. A tensor
sent between two devices of one group is not copied by a bus: TensorFlow hands it from a Send
to a Recv kernel, work the executor's threads do, so it joins ``Q_core`` (in the order it is
visited, among the runnable ops) and occupies a core for ``latency + bytes / bandwidth``, the
link's figures for that pair (measured by ``tf-autoplace profile``). A tensor sent between
devices of two *different* core groups (the CPU devices of two TensorFlow tasks, each its own
process) is work on cores too: no DMA engine carries it beside the computation, the gRPC
threads of the two processes serialize, copy and parse it on the cores their ops need. It joins
``Q_core`` of the source's executor like a hand-over, occupies one of its cores for the
link's ``latency + bytes / bandwidth`` (fitted on the user's graph:
:mod:`tf_autoplace.hw.link_fit`), and, the processes sharing no memory, is a copy on the
destination (see "Memory"). Between tasks on different hosts the whole transfer is charged
to the source's core too, which is pessimistic where the wire, not the CPU, is the slow part
(only local server processes have been measured). With one-core executors of one device each
(no core groups) the model is exactly the paper's.

Delays (our extension: the part of a transfer that holds nothing)
-----------------------------------------------------------------
A link may have a ``delay`` (``Cluster.delay[s, d]``, 0 unless measured): after its bus or
core is done with it, a tensor sent from ``s`` to ``d`` spends that long in flight before it
arrives, holding neither, so delays of transfers overlap with each other and with compute.
Between the tasks of a TensorFlow cluster a transfer is partly the sender's gRPC work and
partly a wait (the wire, the receiving process's threads), and the measured cost per
transfer falls as a placement has more of them; one latency on the sender's core cannot
price a light split and a heavy one alike (:mod:`tf_autoplace.hw.link_fit` fits both). A
delayed transfer has a third kind of event, **Transfer-sent**, when its bus or core is done
(that bus or core takes its next item), and its Transfer-done comes ``delay`` later. Within
an executor there is no flight (a hand-over by reference) and no delay.

Partners (our extension: kernels that change with the placement)
----------------------------------------------------------------
Some ops run a faster kernel only when another op, their *partner*, is on the same device: a
rewrite that needs both in one partition is lost when they are apart (oneDNN's MaxPoolGrad
reads a workspace that its MaxPool writes only when both are on one device). The simulator
optionally takes ``partner[n]`` (the partner's op index, -1 for none) and
``partner_time[n, D]``: op ``i`` on ``d`` takes ``partner_time[i, d]`` instead of
``op_time[i, d]`` when ``partner[i]`` is placed on another device than ``d``. A profile
measures both times (:mod:`tf_autoplace.hw.profiler`).

Modelling choices the paper leaves open (what this module does)
----------------------------------------------------------------
* **One send per (tensor, destination device).** TF's graph partitioner inserts one
  Send/Recv pair per tensor and destination partition, so a tensor read by several ops on the
  same remote device is transferred once; all of them are released when it arrives. An op that
  reads the same tensor twice depends on it once.
* **Control edges** order ops like data edges. Across devices they cost one 0-byte transfer
  (latency only), because TF sends a dummy tensor; that dummy is also sent at most once per
  (source op, destination device). A control edge between two ops already joined by a data
  edge is dropped: the data edge orders them already (TF's dependency optimizer removes such
  edges too).
* **Queue order.** When an op finishes, its output tensors are visited in tensor-index order,
  then its control dummy; the consumers of one tensor in op-index order. Runnable consumers and
  outgoing transfers join their FIFO queues in that order.
* **Events at the same time** are handled in creation order; an op or transfer that becomes
  ready at time ``t`` on an idle core or bus starts at ``t``; an executor's idle cores are
  filled in slot order.
* **``inf`` op times** ("no kernel on this device") are simulated, not rejected: the op and
  everything after it ends at ``inf``, so the makespan (and the reward) is ``inf``. A caller
  that wants an error checks kernels before simulating.
* **Memory.** A tensor is allocated on its producer's device when the producer *starts* (all
  outputs at once) and freed when the last op holding it has finished; a tensor nobody reads is
  freed when its producer ends. Within one event frees happen before the next op starts, so an
  op's inputs and outputs are live together while it runs, but a finished op's inputs are not
  counted against the op that starts after it at the same instant. ``persistent_bytes`` of the
  ops placed on a device (variables) count for the whole step. Peak memory per device is that
  persistent total plus the peak of the live transient bytes. Four rules follow TensorFlow's
  runtime (``OpGraph.tensor_alias`` and the op types, :mod:`tf_autoplace.graph.buffers`):

  - a *view* of a variable (a variable op's output, ``ReadVariableOp``'s value) allocates
    nothing: its bytes are the variable's, counted as persistent;
  - an output that *shares an input's buffer* (``Identity``, ``Reshape``, ...) allocates
    nothing when that input is on the same device or was handed over by reference: the buffer
    lives until the last holder of either tensor has finished;
  - an in-place kernel (``AddV2``, ``Relu``, ``BiasAdd``, ``AddN``, ``Softmax``, ...:
    :func:`~tf_autoplace.graph.buffers.reuse_inputs`) writes its output into an input's
    buffer when, as it starts, it is the only holder of that buffer (not a constant's, not a
    fed value's, not a copy from another executor) and the buffer has the output's size; the
    inputs are tried in the order the kernel tries them;
  - a transfer between devices of *different executors* copies: the copy is allocated on the
    destination when the transfer starts and freed when the last consumer there finishes, and
    the source is held until the copy is done. Within a *core group* (logical CPU devices of
    one process) TensorFlow hands the tensor over by reference: nothing is allocated on the
    destination, and the buffer stays charged to the device that allocated it until the last
    consumer on any device has finished.

Implementation
--------------
Everything that does not depend on the placement (dependency lists in CSR form, output lists) is
built once in :class:`Simulator`'s constructor. The event loop, :func:`_simulate`, is one
``numba.njit`` function over flat arrays, with the three handlers marked in it: FIFO queues are
linked lists in arrays (``head[q]``, ``tail[q]``, ``next[item]``); since at most one item per
core and one transfer per bus are in flight, pending events live in ``S + D + P`` slots (``S``
cores in all; slot ``k``: the item on core ``k`` is done; slot ``S + d``: the transfer on the
bus of ``d`` is done; slot ``S + D + x``: delayed transfer ``x`` arrives, one slot per possible
transfer). The pending slots are kept sorted by (time, sequence number), latest first, so the
next event is the last: only a handful are pending at once (4-6 on the zoo's 8-GPU pairs), and
inserting into a short sorted list costs fewer mispredicted branches than a binary heap's
sift-down (docs/experiments.md, "What the kernel's time was"). On a graph of thousands of ops the
loop waits on memory more than it computes, so it reads small arrays: int32 indices, and each
op's time on its device gathered once, in order, rather than read from the ``[n, D]`` table when
the op starts; and it returns the result ready-made (peak memory with the persistent bytes, the
transfers' producers and bytes), leaving no numpy pass over the transfers to the caller. A
search that scores many placements calls :meth:`Simulator.summaries`, one kernel call per batch
that returns only the makespans and peak memories, so the Python around each simulation (checks,
a result object) is paid once; with ``below``, rows are first simulated without the memory model
(``track=False``: the same schedule, since nothing in it depends on memory) and stopped once the
clock passes ``below``, and only rows that end sooner are simulated again in full. Every index
the kernels use is non-negative by construction (a ``-1`` meaning "none" is tested before it is
used as one), so they are compiled without numba's wraparound of negative indices
(``cached_njit(negative_indices=False)``, :mod:`tf_autoplace.core.jit`), which sat on every
dependent load of the event loop. Speed: ``experiments/bench_sim.py`` (a synthetic 8,000-op
graph, and random placements of zoo graphs with ``--pairs``; figures in BENCHMARKS.md). The
first call in a fresh environment compiles the kernel (a few seconds; then cached on disk by
numba, in the user's cache directory: :mod:`tf_autoplace.core.jit`; the arrays it reads are
read-only in every process, so that one compiled version serves all of them).
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.errors import (
    ClusterSpecError,
    ConfigError,
    InfeasiblePlacementError,
    InvalidGraphError,
)
from tf_autoplace.graph.buffers import (
    ALIAS_NONE,
    ALIAS_VIEW,
    NOT_REUSABLE,
    REUSE_INPUTS,
    reuse_inputs,
)
from tf_autoplace.graph.opgraph import OpGraph
from tf_autoplace.core.jit import cached_njit

GB = 1e9


# ============================================================================ result type
@dataclasses.dataclass(frozen=True, eq=False)
class SimResult:
    """What one simulation predicts. ``n`` ops, ``D`` devices, ``x`` transfers.

    Attributes:
      makespan: seconds, end time of the last op (``inf`` if some op had no kernel).
      peak_memory: [D] int64 bytes, persistent bytes plus peak live transient bytes per device.
      start: [n] float64 op start times (s).
      end: [n] float64 op end times (s).
      busy: [D] float64 total compute seconds per device.
      transfer_bytes: total bytes moved between devices.
      transfer_tensor: [x] int32 tensor index sent, -1 for a control-edge dummy.
      transfer_op: [x] int32 op that produced what was sent (the control source for a dummy).
      transfer_src: [x] int32 source device.
      transfer_dst: [x] int32 destination device.
      transfer_start: [x] float64 time the transfer took the bus (s).
      transfer_end: [x] float64 time it arrived (s).
    """

    makespan: float
    peak_memory: np.ndarray
    start: np.ndarray
    end: np.ndarray
    busy: np.ndarray
    transfer_bytes: int
    transfer_tensor: np.ndarray
    transfer_op: np.ndarray
    transfer_src: np.ndarray
    transfer_dst: np.ndarray
    transfer_start: np.ndarray
    transfer_end: np.ndarray

    @property
    def num_transfers(self) -> int:
        return len(self.transfer_tensor)


# ======================================================================== numba kernel
@cached_njit(negative_indices=False)
def _simulate(placement, op_time, partner, partner_time, num_devices, bandwidth, latency,
              delay, tensor_bytes, out_tensor_ptr, out_tensors, dep_tensor, dep_op,
              cons_ptr, in_ptr, in_dep, persistent, num_graph_tensors, executor, exec_base,
              alias, reuse_out, reuse_ptr, reuse_pair, takeable, grouped, track, cutoff):
    """The event loop (module docstring). Arrays built by :class:`Simulator`, with T tensors
    (the ``num_graph_tensors`` graph tensors, then one control dummy per op), P dependency
    pairs and E executors:

      partner[n], partner_time[n, D]: op i takes partner_time[i, d] on d when its partner
        (partner[i] >= 0) is on another device (module docstring, "Partners").

      out_tensor_ptr[n+1], out_tensors: tensors produced by op i (CSR), its dummy last.
      dep_tensor[P], dep_op[P]: dependency pair p, "op dep_op[p] reads tensor dep_tensor[p]",
        sorted by tensor, then op.
      cons_ptr[T+1]: pairs cons_ptr[k]..cons_ptr[k+1]-1 are tensor k's consumers (CSR).
      in_ptr[n+1], in_dep: pairs of each op (its inputs) (CSR).
      persistent[n]: bytes op i keeps for the whole step (variables).
      delay[D, D]: seconds a tensor from s to d is in flight after its bus or core is done
        with it (module docstring, "Delays"); 0 within an executor.
      executor[D]: the executor that runs device d's ops (its core group's, or its own).
      grouped[D]: device d is in a core group (a transfer between two such devices is work
        on its source's cores: module docstring, "Core groups").
      exec_base[E+1]: executor e owns the core slots exec_base[e]..exec_base[e+1]-1.
      alias[T]: how tensor k gets its buffer when its producer starts: -1 its own
        (``tensor_bytes[k]`` allocated), -2 none (a view of a variable's persistent buffer),
        q >= 0 the buffer of tensor dep_tensor[q], which its producer reads through pair q,
        when that input is on the producer's device or was handed over by reference (module
        docstring, "Memory").
      reuse_out[n]: the tensor of op i that may take over an input's buffer (-1: none);
        reuse_ptr[n+1], reuse_pair: the dependency pairs whose buffer it may take, in the order
        tried (CSR); takeable[T]: tensor k's own buffer may be taken over.
      track: keep the memory model and the per-op and per-transfer records; without it only
        the makespan is computed (the schedule does not depend on memory, so it is the same),
        without the memory model's work: what a search needs for a candidate it will not keep.
      cutoff: stop at the first event at or after this time (``inf``: never) and return
        ``num_done = -1``, makespan ``inf``: the step takes at least that long (an event at
        time t is an op's end or a transfer some op still waits for).

    Returns what :class:`SimResult` holds (peak memory with the persistent bytes, transfers
    with -1 for a dummy), and the number of ops that ran, so that nothing is left for numpy
    passes after the call.

    Every index is non-negative (``-1`` sentinels are tested before use; the kernel is
    compiled without numba's negative-index wraparound: module docstring).

    Everything is written out in this one function on purpose: numba reference-counts arrays
    passed to helper functions, and those atomic updates cost more than the simulation itself.
    Indices are int32 (the Simulator checks that they fit): the arrays then take half the
    cache, and on a graph of thousands of ops the loop waits on memory more than it computes.
    """
    n = placement.shape[0]
    D = num_devices
    P = dep_tensor.shape[0]
    T = tensor_bytes.shape[0]
    E = exec_base.shape[0] - 1
    S = exec_base[E]  # core slots in all

    # Each op's time on its device, gathered in one sequential pass: reading op_time[i, d]
    # when op i starts would touch a random row of the [n, D] table for every op.
    dur = np.empty(n)
    resident = np.zeros(D, np.int64)  # persistent bytes per device
    nr = n if track else 0  # the records' sizes: nothing recorded untracked
    Pr = P if track else 0
    Tr = T if track else 0
    for i in range(n):
        d = placement[i]
        j = partner[i]
        if j >= 0 and placement[j] != d:  # apart from its partner: the other kernel
            dur[i] = partner_time[i, d]
        else:
            dur[i] = op_time[i, d]
        resident[placement[i]] += persistent[i]

    start = np.full(nr, np.nan)
    end = np.full(nr, np.nan)
    busy = np.zeros(D)
    live = np.zeros(D, np.int64)   # transient bytes live on each device now
    peak = np.zeros(D, np.int64)   # ... and their maximum so far

    # Dependencies still missing per op; an op is runnable at 0.
    pending = np.empty(n, np.int32)
    for i in range(n):
        pending[i] = in_ptr[i + 1] - in_ptr[i]

    # Q_core per executor as linked lists (head, tail, next) of items: op i is item i, the
    # transfer record x that runs on cores (both ends in core groups) is item n + x.
    # slot_item[k]: the item core slot k runs (-1: idle).
    q_head = np.full(E, -1, np.int32)
    q_tail = np.full(E, -1, np.int32)
    q_next = np.full(n + P, -1, np.int32)
    slot_item = np.full(S, -1, np.int32)

    # Transfers: one record per (tensor, destination), so at most one per dependency pair.
    x_tensor = np.empty(P, np.int32)
    x_op = np.empty(Pr, np.int32)
    x_src = np.empty(P, np.int32)
    x_dst = np.empty(P, np.int32)
    x_start = np.empty(Pr)
    x_end = np.empty(Pr)
    x_refs = np.zeros(Pr, np.int32)  # consumers on x_dst yet to finish; the last frees the copy
    num_x = 0
    # Q_transfer per device (linked lists over transfer records) and the transfer on each bus.
    bus_head = np.full(D, -1, np.int32)
    bus_tail = np.full(D, -1, np.int32)
    x_next = np.full(P, -1, np.int32)
    bus_running = np.full(D, -1, np.int32)

    dep_xfer = np.full(Pr, -1, np.int32)     # transfer that delivered pair p; -1: same device
    # Buffers: tensor k's bytes live in the buffer of tensor root[k] (k itself, the tensor it
    # shares, or -1 for a view with no bytes), allocated on buf_dev[root]; refs[r] counts what
    # still holds buffer r: consumers reading it where it is, outgoing transfers (a copy until
    # it arrives, a hand-over by reference until the last consumer at the other end is done).
    root = np.full(Tr, -1, np.int32)
    buf_dev = np.zeros(Tr, np.int32)
    refs = np.zeros(Tr, np.int32)
    sent_tensor = np.full(D, -1, np.int32)  # scratch for dedup: tensor last sent to each device
    sent_x = np.full(D, -1, np.int32)       # ... and that transfer

    # Pending events: at most one per core slot (slot k: the item on it is done), one
    # Transfer-done per bus (slot S + d) and one arrival per delayed transfer in flight (slot
    # S + D + x), with its time and sequence number; the next event is the smallest (time,
    # seq). The pending slots, with their keys beside them, are sorted latest first
    # (``pend_slot[:num_pend]``, the next event last); the slots an event's wakeups filled and
    # the arrival it scheduled (``fresh``) are inserted before the next one is taken.
    ev_time = np.empty(S + D + P)  # (a slot's entries are written before it is inserted)
    ev_seq = np.empty(S + D + P, np.int32)
    next_seq = 0
    pend_slot = np.empty(S + D + P, np.int32)
    pend_time = np.empty(S + D + P)
    pend_seq = np.empty(S + D + P, np.int32)
    num_pend = 0
    fresh = np.empty(S + D + 1, np.int32)
    arrival = -1  # the arrival slot the last event scheduled, if any

    # Initial queues: ops without dependencies, in op-index order; then wake everything.
    for i in range(n):
        if pending[i] == 0:
            e = executor[placement[i]]
            if q_tail[e] == -1:
                q_head[e] = i
            else:
                q_next[q_tail[e]] = i
            q_tail[e] = i
    wake_exec = np.arange(E)  # executors and buses the last event may have given work to
    wake_bus = np.arange(D)
    num_wake_exec = E
    num_wake_bus = D

    num_done = 0
    makespan = 0.0
    now = 0.0
    while True:
        num_fresh = 0
        if arrival != -1:
            fresh[0] = arrival
            num_fresh = 1
            arrival = -1
        # ------------------------------------------------------------------- Wakeup
        # An executor with an idle core starts the head of its Q_core, as long as both last.
        # An op's outputs are allocated at its start; a transfer's copy on its destination.
        for w in range(num_wake_exec):
            e = wake_exec[w]
            for k in range(exec_base[e], exec_base[e + 1]):
                if q_head[e] == -1:
                    break
                if slot_item[k] != -1:
                    continue
                item = q_head[e]
                q_head[e] = q_next[item]
                if q_head[e] == -1:
                    q_tail[e] = -1
                slot_item[k] = item
                if item < n:
                    if track:
                        d = placement[item]
                        start[item] = now
                        busy[d] += dur[item]
                        for p in range(out_tensor_ptr[item], out_tensor_ptr[item + 1]):
                            kt = out_tensors[p]
                            a = alias[kt]
                            if a == -2:  # a view of a variable: no bytes of its own
                                root[kt] = -1
                                continue
                            if a >= 0:  # shares its input's buffer if that is here or by ref
                                xx = dep_xfer[a]
                                if xx == -1 or executor[x_src[xx]] == executor[x_dst[xx]]:
                                    root[kt] = root[dep_tensor[a]]
                                    continue
                            taken = False  # an input's buffer that only this op still holds
                            for c in range(reuse_ptr[item], reuse_ptr[item + 1]):
                                if kt != reuse_out[item]:
                                    break
                                q = reuse_pair[c]
                                r = root[dep_tensor[q]]
                                if r < 0 or not takeable[r] or refs[r] != 1 or \
                                        tensor_bytes[r] != tensor_bytes[kt]:
                                    continue
                                xx = dep_xfer[q]
                                if xx != -1 and (executor[x_src[xx]] != executor[x_dst[xx]]
                                                 or x_refs[xx] != 1):
                                    continue
                                root[kt] = r
                                taken = True
                                break
                            if taken:
                                continue
                            root[kt] = kt
                            buf_dev[kt] = d
                            live[d] += tensor_bytes[kt]
                        if live[d] > peak[d]:
                            peak[d] = live[d]
                    ev_time[k] = now + dur[item]
                else:  # a transfer done by the cores of its source's group
                    x = item - n
                    s = x_src[x]
                    dst = x_dst[x]
                    nbytes = tensor_bytes[x_tensor[x]]
                    if track:
                        x_start[x] = now
                    if track and executor[dst] != e:  # to another group: a copy there
                        live[dst] += nbytes
                        if live[dst] > peak[dst]:
                            peak[dst] = live[dst]
                    # (within the group: handed over by reference, nothing copied)
                    ev_time[k] = now + latency[s, dst] + nbytes / bandwidth[s, dst]
                ev_seq[k] = next_seq
                next_seq += 1
                fresh[num_fresh] = k
                num_fresh += 1
        # An idle bus starts the head of its Q_transfer; the copy is allocated on arrival side.
        for w in range(num_wake_bus):
            s = wake_bus[w]
            if bus_running[s] != -1 or bus_head[s] == -1:
                continue
            x = bus_head[s]
            bus_head[s] = x_next[x]
            if bus_head[s] == -1:
                bus_tail[s] = -1
            bus_running[s] = x
            dst = x_dst[x]
            nbytes = tensor_bytes[x_tensor[x]]
            if track:
                x_start[x] = now
                live[dst] += nbytes
                if live[dst] > peak[dst]:
                    peak[dst] = live[dst]
            ev_time[S + s] = now + latency[s, dst] + nbytes / bandwidth[s, dst]
            ev_seq[S + s] = next_seq
            next_seq += 1
            fresh[num_fresh] = S + s
            num_fresh += 1

        # ------------------------------------------------------------ next event
        for f in range(num_fresh):  # insert: the earlier slots move up one place
            e = fresh[f]
            t, q = ev_time[e], ev_seq[e]
            c = num_pend
            while c > 0:
                u = c - 1
                if pend_time[u] > t or (pend_time[u] == t and pend_seq[u] > q):
                    break
                pend_slot[c], pend_time[c], pend_seq[c] = pend_slot[u], pend_time[u], pend_seq[u]
                c = u
            pend_slot[c], pend_time[c], pend_seq[c] = e, t, q
            num_pend += 1
        if num_pend == 0:
            break
        num_pend -= 1
        slot = pend_slot[num_pend]  # the earliest
        now = ev_time[slot]
        if now >= cutoff and cutoff < np.inf:  # the step takes at least ``cutoff``
            return (-1, np.inf, start, end, busy, peak, 0, x_tensor[:0], x_op[:0],
                    x_src[:0], x_dst[:0], x_start[:0], x_end[:0])
        num_wake_exec = 1
        num_wake_bus = 0

        x = -1  # the transfer this event completes, if any
        item = -1
        if slot < S:
            item = slot_item[slot]
            slot_item[slot] = -1
            if item >= n:
                x = item - n
        elif slot < S + D:
            s = slot - S  # the bus: slot S + s
            x = bus_running[s]
            bus_running[s] = -1
            wake_bus[0] = s
            num_wake_bus = 1
        else:  # a delayed transfer arrives: its bus or core was freed when it left
            x = slot - S - D
        if x != -1 and slot < S + D:
            s = x_src[x]
            dst = x_dst[x]
            if delay[s, dst] > 0.0 and executor[s] != executor[dst]:
                # ------------------ Transfer-sent: the tensor flies on, the sender goes on
                ev_time[S + D + x] = now + delay[s, dst]
                ev_seq[S + D + x] = next_seq
                next_seq += 1
                arrival = S + D + x
                if slot < S:
                    wake_exec[0] = executor[s]
                else:
                    num_wake_exec = 0
                continue

        if x == -1:
            # ------------------------------------------------ Op-done: op i on device d
            i = item
            d = placement[i]
            e = executor[d]
            if track:
                end[i] = now
            num_done += 1
            makespan = now
            for p in range(out_tensor_ptr[i], out_tensor_ptr[i + 1]):
                k = out_tensors[p]
                holds = 0
                for q in range(cons_ptr[k], cons_ptr[k + 1]):
                    j = dep_op[q]
                    dj = placement[j]
                    if dj == d:  # consumer on this device: one dependency satisfied
                        holds += 1  # (holds, refs, ...: the memory model, when tracked)
                        pending[j] -= 1
                        if pending[j] == 0:  # runnable: join Q_core of d's executor
                            if q_tail[e] == -1:
                                q_head[e] = j
                            else:
                                q_next[q_tail[e]] = j
                            q_tail[e] = j
                        continue
                    if sent_tensor[dj] != k:  # consumer elsewhere: send k to dj, once
                        sent_tensor[dj] = k
                        sent_x[dj] = num_x
                        x_tensor[num_x] = k
                        if track:
                            x_op[num_x] = i
                        x_src[num_x] = d
                        x_dst[num_x] = dj
                        if executor[dj] == e or (grouped[d] and grouped[dj]):  # core work
                            if q_tail[e] == -1:
                                q_head[e] = n + num_x
                            else:
                                q_next[q_tail[e]] = n + num_x
                            q_tail[e] = n + num_x
                        else:  # join Q_transfer[d]
                            if bus_tail[d] == -1:
                                bus_head[d] = num_x
                            else:
                                x_next[bus_tail[d]] = num_x
                            bus_tail[d] = num_x
                        num_x += 1
                        holds += 1  # the source copy lives until the transfer is done
                    if track:
                        xx = sent_x[dj]
                        dep_xfer[q] = xx
                        x_refs[xx] += 1
                if not track:
                    continue
                r = root[k]
                if r >= 0:
                    refs[r] += holds
                    if refs[r] == 0:  # nobody reads it: freed when its producer ends
                        live[buf_dev[r]] -= tensor_bytes[r]
            # i no longer needs its inputs: the last holder of each frees its bytes (a
            # copy's on d; a buffer handed over by reference, on the device that owns it).
            if track:
                for c in range(in_ptr[i], in_ptr[i + 1]):
                    q = in_dep[c]
                    k = dep_tensor[q]
                    xx = dep_xfer[q]
                    if xx != -1:
                        x_refs[xx] -= 1
                        if x_refs[xx] != 0:
                            continue
                        if executor[x_src[xx]] != executor[x_dst[xx]]:
                            live[d] -= tensor_bytes[k]
                            continue
                    r = root[k]
                    if r >= 0:
                        refs[r] -= 1
                        if refs[r] == 0:
                            live[buf_dev[r]] -= tensor_bytes[r]
            wake_exec[0] = e
            wake_bus[0] = d
            num_wake_bus = 1
        else:
            # --------------------------------------- Transfer-done: tensor k from s to dst
            s = x_src[x]
            dst = x_dst[x]
            if track:
                x_end[x] = now
            k = x_tensor[x]
            e = executor[dst]
            for q in range(cons_ptr[k], cons_ptr[k + 1]):
                j = dep_op[q]
                if placement[j] == dst:
                    pending[j] -= 1
                    if pending[j] == 0:  # runnable: join Q_core of dst's executor
                        if q_tail[e] == -1:
                            q_head[e] = j
                        else:
                            q_next[q_tail[e]] = j
                        q_tail[e] = j
            r = root[k] if track else -1
            if r >= 0 and executor[s] != e:  # a copy has arrived: the source may go
                refs[r] -= 1
                if refs[r] == 0:
                    live[buf_dev[r]] -= tensor_bytes[r]
            wake_exec[0] = e
            if slot < S and executor[s] != e:  # the source group's core is free too
                wake_exec[1] = executor[s]
                num_wake_exec = 2

    transfer_bytes = 0
    for x in range(num_x if track else 0):
        transfer_bytes += tensor_bytes[x_tensor[x]]
        if x_tensor[x] >= num_graph_tensors:
            x_tensor[x] = -1  # a control dummy
    for d in range(D):
        peak[d] += resident[d]
    nx = num_x if track else 0
    return (num_done, makespan, start, end, busy, peak, transfer_bytes,
            x_tensor[:nx], x_op[:nx], x_src[:nx], x_dst[:nx], x_start[:nx], x_end[:nx])


@cached_njit(negative_indices=False)
def _simulate_batch(placements, op_time, partner, partner_time, num_devices, bandwidth,
                    latency, delay, tensor_bytes, out_tensor_ptr, out_tensors, dep_tensor,
                    dep_op, cons_ptr, in_ptr, in_dep, persistent, num_graph_tensors, executor,
                    exec_base, alias, reuse_out, reuse_ptr, reuse_pair, takeable, grouped,
                    below):
    """:func:`_simulate` of each row of ``placements`` ([B, n]); returns the ops that ran, the
    makespan and the peak memory of each ([B], [B], [B, D]). One call for a batch: a search
    reads only these, and the per-call work of a Python call (checks, a result object) is a
    fifth of a simulation on a graph of thousands of ops.

    With ``below`` finite, each row is first simulated without the memory model and cut off at
    ``below``; only a row that ends sooner is simulated again with it, for its peak memory.
    A row cut off gets makespan ``inf``, peak memory 0 and counts as having run every op."""
    B = placements.shape[0]
    n = placements.shape[1]
    done = np.empty(B, np.int64)
    makespan = np.empty(B)
    peak = np.empty((B, num_devices), np.int64)
    cut = below < np.inf
    for b in range(B):
        # One call site, with ``track`` a bool known only at run time: numba compiles one
        # version of the event loop (numba would compile one per constant at each site).
        track, limit = not cut, below
        while True:
            out = _simulate(placements[b], op_time, partner, partner_time, num_devices,
                            bandwidth, latency, delay, tensor_bytes, out_tensor_ptr,
                            out_tensors, dep_tensor, dep_op, cons_ptr, in_ptr, in_dep,
                            persistent, num_graph_tensors, executor, exec_base, alias,
                            reuse_out, reuse_ptr, reuse_pair, takeable, grouped, track, limit)
            if track or out[0] == -1:
                break
            track, limit = True, np.inf  # faster than ``below``: again, for its memory
        if out[0] == -1:  # cut off
            done[b] = n
            makespan[b] = np.inf
            peak[b] = 0
        else:
            done[b] = out[0]
            makespan[b] = out[1]
            peak[b] = out[5]
    return done, makespan, peak


# ======================================================================== public types
def check_op_time(graph: OpGraph, cluster: Cluster, op_time) -> np.ndarray:
    """Return ``op_time`` as a C-contiguous read-only float64 [n, D] array, or raise
    :class:`~tf_autoplace.errors.InvalidGraphError` naming what is wrong."""
    arr = np.array(op_time, dtype=np.float64, order="C")
    want = (graph.num_ops, cluster.num_devices)
    if arr.shape != want:
        raise InvalidGraphError(f"op_time has shape {arr.shape}; expected (ops, devices) = {want}")
    if np.isnan(arr).any():
        i, d = np.argwhere(np.isnan(arr))[0]
        raise InvalidGraphError(f"op_time[{i}, {d}] (op {graph.names[i]!r}) is NaN")
    if (arr < 0).any():
        i, d = np.argwhere(arr < 0)[0]
        raise InvalidGraphError(
            f"op_time[{i}, {d}] (op {graph.names[i]!r}) is {arr[i, d]}; times must be >= 0")
    arr.setflags(write=False)
    return arr


def check_partners(graph: OpGraph, op_time: np.ndarray, partner, partner_time
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(partner, partner_time)`` as read-only int32 [n] and float64 [n, D] arrays
    (both None: no partners, ``partner_time`` is ``op_time``), or raise
    :class:`~tf_autoplace.errors.InvalidGraphError` naming what is wrong."""
    n = graph.num_ops
    if (partner is None) != (partner_time is None):
        raise InvalidGraphError("partner and partner_time go together: give both or neither")
    if partner is None:
        none = np.full(n, -1, np.int32)
        none.setflags(write=False)
        return none, op_time
    index = np.asarray(partner)
    if index.shape != (n,) or not np.issubdtype(index.dtype, np.integer):
        raise InvalidGraphError(f"partner must be [{n}] integer op indices (-1: none), got "
                                f"{index.dtype} {index.shape}")
    if n and (index.min() < -1 or index.max() >= n or (index == np.arange(n)).any()):
        bad = int(np.flatnonzero((index < -1) | (index >= n) | (index == np.arange(n)))[0])
        raise InvalidGraphError(f"op {graph.names[bad]!r} has partner {int(index[bad])}; a "
                                f"partner is another op's index in [0, {n}) or -1")
    times = np.array(partner_time, dtype=np.float64, order="C")
    if times.shape != op_time.shape:
        raise InvalidGraphError(f"partner_time has shape {times.shape}; expected "
                                f"{op_time.shape}, as op_time")
    if np.isnan(times).any() or (times < 0).any():
        i, d = np.argwhere(np.isnan(times) | (times < 0))[0]
        raise InvalidGraphError(f"partner_time[{i}, {d}] (op {graph.names[i]!r}) is "
                                f"{times[i, d]}; times must be >= 0")
    index = index.astype(np.int32)
    index.setflags(write=False)
    times.setflags(write=False)
    return index, times


def _alias_pairs(graph: OpGraph, pair_key: np.ndarray) -> np.ndarray:
    """The kernel's ``alias`` array (see :func:`_simulate`) for ``graph``'s tensors and one
    control dummy per op: -2 for a view, the dependency pair through which the producer reads
    the tensor it shares (``pair_key`` = tensor * n + op, sorted), -1 otherwise (its own
    buffer, also when the producer does not read that tensor)."""
    n = graph.num_ops
    alias = np.full(len(graph.tensor_op) + n, -1, np.int64)
    shared = graph.tensor_alias
    alias[:len(shared)][shared == ALIAS_VIEW] = -2
    k = np.flatnonzero(shared >= 0)
    want = shared[k].astype(np.int64) * n + graph.tensor_op[k]
    q = np.searchsorted(pair_key, want)
    found = q < len(pair_key)
    found[found] = pair_key[q[found]] == want[found]
    alias[k[found]] = q[found]
    return alias


def _reuse_pairs(graph: OpGraph, pair_key: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernel's ``reuse_out``, ``reuse_ptr`` and ``reuse_pair`` (see :func:`_simulate`):
    for each op whose type writes an output into an input's buffer (:func:`tf_autoplace.graph.
    buffers.reuse_inputs`) and whose such output has no other buffer (``ALIAS_NONE``): that
    output and the dependency pairs of the inputs tried, in order, that have its size and that
    the op reads once (TensorFlow does not take over an input the op holds twice)."""
    n = graph.num_ops
    order = np.argsort(graph.edge_dst, kind="stable")  # each op's inputs in input order
    ptr = np.searchsorted(graph.edge_dst[order], np.arange(n + 1)).tolist()
    inputs = graph.edge_tensor[order].tolist()
    by_op = np.argsort(graph.tensor_op, kind="stable")  # each op's outputs in port order
    out_ptr = np.searchsorted(graph.tensor_op[by_op], np.arange(n + 1)).tolist()
    by_op = by_op.tolist()
    nbytes, alias = graph.tensor_bytes.tolist(), graph.tensor_alias.tolist()
    reuse_out = np.full(n, -1, np.int64)
    counts, wanted = np.zeros(n, np.int64), []  # wanted: pair keys, tensor * n + op
    for i, op_type in enumerate(graph.op_types):
        if op_type not in REUSE_INPUTS and op_type != "AddN":
            continue
        port, positions = reuse_inputs(op_type, ptr[i + 1] - ptr[i])
        if port < 0 or port >= out_ptr[i + 1] - out_ptr[i]:
            continue
        k = by_op[out_ptr[i] + port]
        if alias[k] != ALIAS_NONE:
            continue
        mine = inputs[ptr[i]:ptr[i + 1]]
        for p in positions:
            j = mine[p]
            if mine.count(j) == 1 and nbytes[j] == nbytes[k]:
                wanted.append(j * n + i)
                counts[i] += 1
        if counts[i]:
            reuse_out[i] = k
    pairs = np.searchsorted(pair_key, np.asarray(wanted, np.int64)).astype(np.int64)
    return reuse_out, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), pairs


def _readonly(*arrays):
    for a in arrays:
        a.setflags(write=False)


def dependency_keys(graph: OpGraph) -> np.ndarray:
    """Every (tensor, consumer) dependency the simulator keeps, as ``tensor * n + consumer``,
    sorted (so by tensor, then consumer) and unique. Tensors are numbered as the simulator
    numbers them: graph tensors ``0..t-1``, then op ``s``'s control dummy as ``t + s``; a
    control edge between two ops a data edge already orders is dropped."""
    n, t = graph.num_ops, len(graph.tensor_op)
    data = graph.edge_src.astype(np.int64) * n + graph.edge_dst
    ctrl = graph.ctrl_src.astype(np.int64) * n + graph.ctrl_dst
    keep = ~np.isin(ctrl, data)
    tensor = np.concatenate([graph.edge_tensor.astype(np.int64),
                             t + graph.ctrl_src[keep].astype(np.int64)])
    consumer = np.concatenate([graph.edge_dst.astype(np.int64),
                               graph.ctrl_dst[keep].astype(np.int64)])
    return np.unique(tensor * n + consumer)


class Simulator:
    """Predicts step time and peak memory of placements of one graph on one cluster.

    Build once per (graph, cluster, op_time), then call :meth:`run` (or :meth:`makespan`) for
    each placement. See the module docstring for the model.

    Args:
      graph: the graph (acyclic, as OpGraph guarantees).
      cluster: devices and links (``bandwidth`` in bytes/s, ``latency`` in s).
      op_time: [n, D] float64 seconds, op i's compute time on device d, overhead included;
        ``inf`` where the op has no kernel.
      partner: [n] int, the op whose placement decides op i's kernel (-1: none), or None
        (module docstring, "Partners").
      partner_time: [n, D] float64 seconds, op i's time on d when its partner is on another
        device; given with ``partner``.
      consumer_rank: [n] distinct numbers, or None (the op index): the consumers of a tensor
        are visited in this order (module docstring, "Queue order"). A simulator of the graph
        renumbered (:mod:`tf_autoplace.sim.layout`) passes the old indices, so that the
        renumbering changes no result.
    """

    def __init__(self, graph: OpGraph, cluster: Cluster, op_time: np.ndarray, *,
                 partner: np.ndarray | None = None, partner_time: np.ndarray | None = None,
                 consumer_rank: np.ndarray | None = None):
        self.graph = graph
        self.cluster = cluster
        self.op_time = check_op_time(graph, cluster, op_time)
        self.partner, self.partner_time = check_partners(graph, self.op_time, partner,
                                                         partner_time)
        n = graph.num_ops
        t = len(graph.tensor_op)
        self._set_cluster(cluster)

        # Tensor ids: graph tensors 0..t-1, then the control dummy of op s as t + s (0 bytes).
        key = dependency_keys(graph)
        dep_tensor, dep_op = key // n, key % n
        ctrl_src = dep_tensor[dep_tensor >= t] - t
        pair_at = None  # pair_at[p]: where pair p of ``key`` is in the kernel's pair order
        if consumer_rank is not None:  # each tensor's consumers in that order instead
            by = np.lexsort((np.asarray(consumer_rank)[dep_op], dep_tensor))
            dep_tensor, dep_op = dep_tensor[by], dep_op[by]
            pair_at = np.empty_like(by)
            pair_at[by] = np.arange(len(by))
        num_t = t + n
        self._dep_tensor, self._dep_op = dep_tensor, dep_op
        self._cons_ptr = np.searchsorted(dep_tensor, np.arange(num_t + 1)).astype(np.int64)
        in_order = np.argsort(dep_op, kind="stable")
        self._in_ptr = np.searchsorted(dep_op[in_order], np.arange(n + 1)).astype(np.int64)
        self._in_dep = in_order.astype(np.int64)

        # Outputs of each op: its tensors by index, then its control dummy if anyone waits on it.
        producer = np.concatenate([graph.tensor_op.astype(np.int64), np.arange(n)])
        has_dummy = np.zeros(n, bool)
        has_dummy[ctrl_src] = True
        out = np.flatnonzero(np.concatenate([np.ones(t, bool), has_dummy]))
        out = out[np.argsort(producer[out], kind="stable")]
        self._out_tensors = out.astype(np.int64)
        self._out_tensor_ptr = np.searchsorted(producer[out], np.arange(n + 1)).astype(np.int64)
        self._tensor_bytes = np.concatenate([graph.tensor_bytes, np.zeros(n, np.int64)])
        self._persistent = graph.persistent_bytes.astype(np.int64)
        self._alias = _alias_pairs(graph, key)
        self._reuse_out, self._reuse_ptr, self._reuse_pair = _reuse_pairs(graph, key)
        if pair_at is not None:  # both name pairs by their place in ``key``
            shared = self._alias >= 0
            self._alias[shared] = pair_at[self._alias[shared]]
            self._reuse_pair = pair_at[self._reuse_pair]
        reusable = np.array([op_type not in NOT_REUSABLE for op_type in graph.op_types], bool)
        self._takeable = np.concatenate([reusable[graph.tensor_op], np.zeros(n, bool)])
        if max(num_t, len(dep_tensor)) >= 2**31:
            raise InvalidGraphError(f"the graph has {num_t} tensors and {len(dep_tensor)} "
                                    "dependencies; the simulator indexes them with int32")
        for name in ("_dep_tensor", "_dep_op", "_cons_ptr", "_in_ptr", "_in_dep",
                     "_out_tensors", "_out_tensor_ptr", "_alias", "_reuse_out",
                     "_reuse_ptr", "_reuse_pair"):
            setattr(self, name, getattr(self, name).astype(np.int32))
        self._freeze()

    def _set_cluster(self, cluster: Cluster) -> None:
        """The kernel's arrays that describe the cluster (the rest describe the graph)."""
        self.cluster = cluster
        self._num_devices = cluster.num_devices
        self._bandwidth = np.array(cluster.bandwidth, dtype=np.float64, order="C")
        self._latency = np.array(cluster.latency, dtype=np.float64, order="C")
        self._delay = np.array(cluster.delay, dtype=np.float64, order="C")
        executor, cores = cluster.executors()
        self._executor = executor.astype(np.int32)
        self._exec_base = np.concatenate([[0], np.cumsum(cores)]).astype(np.int32)
        self._grouped = np.array([bool(d.core_group) for d in cluster.devices], np.bool_)

    def _freeze(self) -> None:
        """Make every array the kernel reads read-only. numba compiles (and caches on disk) one
        machine-code version per argument type, and read-only is part of an array's type: an
        unpickled simulator (a worker process) has writable arrays, one read zero-copy from
        Ray's object store read-only ones. Frozen here and after unpickling, every process
        calls the one version the first compiled, instead of compiling another for tens of
        seconds."""
        _readonly(self._bandwidth, self._latency, self._delay, self._tensor_bytes,
                  self._out_tensor_ptr, self._out_tensors, self._dep_tensor, self._dep_op,
                  self._cons_ptr,
                  self._in_ptr, self._in_dep, self._persistent, self._executor,
                  self._exec_base, self.partner, self.partner_time, self._alias,
                  self._reuse_out, self._reuse_ptr, self._reuse_pair, self._takeable,
                  self._grouped)
        self.op_time.setflags(write=False)

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._freeze()

    def with_links(self, cluster: Cluster) -> "Simulator":
        """This simulator on ``cluster``, which has this one's devices and core groups and other
        link figures (bandwidth, latency, delay): the graph's arrays are shared, not rebuilt, so
        a fit that tries hundreds of link figures pays the constructor once.

        Raises:
          ClusterSpecError: ``cluster`` has other devices or core groups.
        """
        if (cluster.devices != self.cluster.devices
                or cluster.core_groups != self.cluster.core_groups):
            raise ClusterSpecError("with_links takes a cluster of the same devices and core "
                                   "groups; build a Simulator for another one")
        out = copy.copy(self)
        out._set_cluster(cluster)
        out._freeze()
        return out

    def restricted(self, devices) -> "Simulator":
        """This simulator on the devices ``devices`` of its cluster only (``Cluster.subset``,
        with those columns of the op and partner times): what a ``Simulator`` built for that
        cluster gives, with the graph's arrays shared rather than rebuilt, for a placer that
        tries prefixes of a cluster's devices on a large graph.

        Raises:
          ClusterSpecError: ``devices`` are not distinct device indices of the cluster.
        """
        devices = np.asarray(devices, dtype=np.int64)
        cluster = self.cluster.subset(devices)
        out = copy.copy(self)
        out.op_time = check_op_time(self.graph, cluster, self.op_time[:, devices])
        out.partner, out.partner_time = check_partners(
            self.graph, out.op_time, self.partner,
            None if self.partner_time is None else self.partner_time[:, devices])
        out._set_cluster(cluster)
        out._freeze()
        return out

    # ------------------------------------------------------------------------- checks
    def _check_placement(self, placement) -> np.ndarray:
        p = np.asarray(placement)
        n, d = self.graph.num_ops, self._num_devices
        if p.shape != (n,):
            raise InfeasiblePlacementError(
                f"placement has shape {p.shape}; expected ({n},), one device index per op")
        if not np.issubdtype(p.dtype, np.integer):
            raise InfeasiblePlacementError(
                f"placement must hold integer device indices, got dtype {p.dtype}")
        if n and (p.min() < 0 or p.max() >= d):
            bad = int(np.flatnonzero((p < 0) | (p >= d))[0])
            raise InfeasiblePlacementError(
                f"placement puts op {self.graph.names[bad]!r} on device {int(p[bad])}; "
                f"the cluster has devices 0..{d - 1}")
        # A read-only view whatever the caller's array is (a worker's chunk read zero-copy
        # from Ray's object store is read-only, the caller's own array writable): one kernel
        # signature, so one compile (see _freeze).
        p = np.ascontiguousarray(p, dtype=np.int32).view()
        p.setflags(write=False)
        return p

    def _check_placements(self, placements) -> np.ndarray:
        """``placements`` ([B, n]) checked as :meth:`_check_placement` checks one, as one
        read-only C-contiguous int32 array (the kernel's one signature)."""
        p = np.asarray(placements)
        n, d = self.graph.num_ops, self._num_devices
        if p.ndim != 2 or p.shape[1] != n:
            raise InfeasiblePlacementError(
                f"placements have shape {p.shape}; expected (B, {n}), one device index per op")
        if p.dtype.kind not in "iu":  # (np.issubdtype costs more than a batch's checks)
            raise InfeasiblePlacementError(
                f"placements must hold integer device indices, got dtype {p.dtype}")
        if p.size and (p.min() < 0 or p.max() >= d):
            bad = int(np.flatnonzero(((p < 0) | (p >= d)).any(axis=1))[0])
            self._check_placement(p[bad])  # raises, naming the first bad op and its device
        p = np.ascontiguousarray(p, dtype=np.int32).view()
        p.setflags(write=False)
        return p

    def summaries(self, placements: np.ndarray, *, below: float | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """The makespan ([B] seconds) and peak memory ([B, D] bytes, as ``SimResult.
        peak_memory``) of each row of ``placements`` ([B, n]), in one kernel call: what
        :meth:`run` gives for these two, for a caller that scores many placements.

        Args:
          placements: [B, n] device index per op.
          below: None, or a step time in seconds: a row whose step takes at least that long
            gets makespan ``inf`` and peak memory 0, found without the memory model and
            without simulating the step to its end; the other rows are exact. For a search
            that keeps a candidate only if it beats ``below``: a placement's memory penalty
            only adds to its step time (:func:`memory_penalized_runtime`), so those rows
            could not be kept, and they cost less than a full simulation.

        Raises:
          InfeasiblePlacementError: a row is not one device index per op of this cluster.
          InvalidGraphError: the graph has a cycle (some op never becomes runnable).
        """
        p = self._check_placements(placements)
        done, makespan, peak = _simulate_batch(
            p, self.op_time, self.partner, self.partner_time, self._num_devices,
            self._bandwidth, self._latency, self._delay, self._tensor_bytes,
            self._out_tensor_ptr, self._out_tensors, self._dep_tensor, self._dep_op,
            self._cons_ptr, self._in_ptr, self._in_dep, self._persistent,
            len(self.graph.tensor_op), self._executor, self._exec_base, self._alias,
            self._reuse_out, self._reuse_ptr, self._reuse_pair, self._takeable, self._grouped,
            np.inf if below is None else float(below))
        if (done != self.graph.num_ops).any():
            left = self.graph.num_ops - int(done.min())
            raise InvalidGraphError(
                f"simulation ended with {left} of {self.graph.num_ops} ops never runnable; "
                "the graph must have a cycle")
        return makespan, peak

    def _simulate(self, placement):
        p = self._check_placement(placement)
        out = _simulate(p, self.op_time, self.partner, self.partner_time, self._num_devices,
                        self._bandwidth, self._latency, self._delay,
                        self._tensor_bytes, self._out_tensor_ptr, self._out_tensors,
                        self._dep_tensor, self._dep_op, self._cons_ptr,
                        self._in_ptr, self._in_dep, self._persistent,
                        len(self.graph.tensor_op), self._executor, self._exec_base,
                        self._alias, self._reuse_out, self._reuse_ptr, self._reuse_pair,
                        self._takeable, self._grouped, True, np.inf)
        num_done = out[0]
        if num_done != self.graph.num_ops:
            raise InvalidGraphError(
                f"simulation ended with {self.graph.num_ops - num_done} of "
                f"{self.graph.num_ops} ops never runnable; the graph must have a cycle")
        return out

    # ------------------------------------------------------------------------- public
    def run(self, placement: np.ndarray) -> SimResult:
        """Simulate one step of ``placement`` ([n] int device index per op)."""
        (_, makespan, start, end, busy, peak_memory, transfer_bytes, x_tensor, x_op, x_src,
         x_dst, x_start, x_end) = self._simulate(placement)
        _readonly(peak_memory, start, end, busy, x_tensor, x_op, x_src, x_dst, x_start, x_end)
        return SimResult(makespan=float(makespan), peak_memory=peak_memory, start=start,
                         end=end, busy=busy, transfer_bytes=int(transfer_bytes),
                         transfer_tensor=x_tensor, transfer_op=x_op, transfer_src=x_src,
                         transfer_dst=x_dst, transfer_start=x_start, transfer_end=x_end)

    def makespan(self, placement: np.ndarray) -> float:
        """Only the predicted step time of ``placement`` (skips building a SimResult)."""
        return float(self._simulate(placement)[1])


def memory_penalized_runtime(result: SimResult, cluster: Cluster, c: float = 2.0) -> float:
    """Placeto's reward quantity (appendix A.7): ``R = r + c * ReLU(m - M)``.

    ``r`` is the makespan in seconds, ``m`` and ``M`` are in GB (1e9 bytes). The paper takes
    ``m`` as the largest peak across devices and ``M`` as the memory of that device; here this
    is generalised to the worst overshoot over devices, ``max_d ReLU(peak_d - capacity_d)``,
    which is the same on identical devices and still penalises a small device that overflows
    next to a big one that does not. Lower is better.
    """
    return float(memory_penalized_runtimes(np.array([result.makespan]),
                                           np.asarray(result.peak_memory)[None, :], cluster, c)[0])


def memory_penalized_runtimes(makespan: np.ndarray, peak_memory: np.ndarray, cluster: Cluster,
                              c: float = 2.0) -> np.ndarray:
    """:func:`memory_penalized_runtime` of a batch: ``makespan`` [B] seconds and
    ``peak_memory`` [B, D] bytes (as ``Simulator.summaries`` returns them) give R [B]."""
    if not c >= 0:
        raise ConfigError(f"c must be >= 0, got {c}")
    return makespan + c * overflow_gb(peak_memory, cluster)


def overflow_gb(peak_memory: np.ndarray, cluster: Cluster) -> np.ndarray:
    """[B] the largest overshoot of a device's memory in GB, 0 where every device fits, of
    each row of ``peak_memory`` ([B, D] bytes): ``ReLU(m - M)`` of
    :func:`memory_penalized_runtimes`."""
    excess = np.asarray(peak_memory, np.float64) - cluster.memory.astype(np.float64)
    return np.maximum(0.0, excess.max(axis=1)) / GB
