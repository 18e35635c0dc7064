"""Tests of tf_autoplace.sim: hand-computed timelines and memory, the reward, the lower bound,
and a randomized cross-check against a small pure-Python reference simulator.

Unless a test says otherwise the links are 1 GB/s with 10 us latency, so moving b bytes takes
10e-6 + b * 1e-9 seconds (1 MB: 1.01 ms), and op times are given directly in ms.
"""

import collections
import dataclasses
import heapq

import numpy as np
import pytest

from tf_autoplace.core.cluster import Cluster, Device
from tf_autoplace.errors import ClusterSpecError, InfeasiblePlacementError, InvalidGraphError
from tf_autoplace.graph.buffers import NOT_REUSABLE, reuse_inputs
from tf_autoplace.graph.opgraph import OpGraph, from_edges
from tf_autoplace.sim import (
    SimResult,
    Simulator,
    critical_path,
    lower_bound,
    memory_penalized_runtime,
)

MS = 1e-3
MB = 10**6


def make_cluster(num_devices, memory=10**10, bandwidth_gbps=1.0, latency_us=10.0):
    devices = [Device(f"/device:GPU:{i}", "GPU", memory if np.isscalar(memory) else memory[i])
               for i in range(num_devices)]
    return Cluster.uniform(devices, bandwidth_gbps=bandwidth_gbps, latency_us=latency_us)


def times_ms(values, num_devices):
    """[n, D] op times: op i takes values[i] ms on every device."""
    return np.repeat(np.asarray(values, np.float64)[:, None] * MS, num_devices, axis=1)


def simulate(graph, cluster, op_ms, placement) -> SimResult:
    return Simulator(graph, cluster, times_ms(op_ms, cluster.num_devices)).run(
        np.asarray(placement))


def make_graph(num_ops, tensors, edges, control=(), persistent=None) -> OpGraph:
    """An OpGraph with several outputs per op: tensors = [(producer, bytes)],
    edges = [(tensor, consumer)]."""
    return OpGraph(
        names=tuple(f"op{i}" for i in range(num_ops)), op_types=("Identity",) * num_ops,
        persistent_bytes=np.zeros(num_ops, np.int64) if persistent is None else persistent,
        tensor_op=[p for p, _ in tensors], tensor_bytes=[b for _, b in tensors],
        edge_tensor=[t for t, _ in edges], edge_dst=[d for _, d in edges],
        ctrl_src=[s for s, _ in control], ctrl_dst=[d for _, d in control],
        colocation=np.arange(num_ops), kernels=np.ones((num_ops, 2), bool),
        shape_known=np.ones(num_ops, bool))


# ================================================================= hand-computed timelines
CHAIN3 = from_edges(3, [(0, 1, MB), (1, 2, MB)])  # op2's output: 0 bytes


def test_chain_on_one_device():
    r = simulate(CHAIN3, make_cluster(2), [1, 2, 3], [0, 0, 0])
    # 0: [0, 1], 1: [1, 3], 2: [3, 6]; nothing moves.
    np.testing.assert_allclose(r.start, np.array([0, 1, 3]) * MS)
    np.testing.assert_allclose(r.end, np.array([1, 3, 6]) * MS)
    assert r.makespan == pytest.approx(6 * MS)
    assert r.transfer_bytes == 0 and r.num_transfers == 0
    np.testing.assert_allclose(r.busy, [6 * MS, 0])
    # Memory on device 0: op1 runs with t0 and t1 live (2 MB); t0 goes when op1 ends.
    np.testing.assert_array_equal(r.peak_memory, [2 * MB, 0])


def test_chain_split_over_two_devices():
    r = simulate(CHAIN3, make_cluster(2), [1, 1, 1], [0, 1, 1])
    # op0 [0, 1]; t0 (1 MB) 0 -> 1 takes 10 us + 1 ms = 1.01 ms: [1, 2.01];
    # op1 [2.01, 3.01]; op2 [3.01, 4.01].
    np.testing.assert_allclose(r.start, np.array([0, 2.01, 3.01]) * MS)
    assert r.makespan == pytest.approx(4.01 * MS)
    assert r.transfer_bytes == MB
    np.testing.assert_array_equal(r.transfer_tensor, [0])
    np.testing.assert_array_equal(r.transfer_op, [0])
    np.testing.assert_array_equal(r.transfer_src, [0])
    np.testing.assert_array_equal(r.transfer_dst, [1])
    np.testing.assert_allclose(r.transfer_start, [1 * MS])
    np.testing.assert_allclose(r.transfer_end, [2.01 * MS])
    # Device 0 holds t0 until the transfer is done (1 MB). Device 1 holds the copy of t0 from
    # 1 ms; op1 adds t1 at 2.01 ms (2 MB); the copy goes when op1 ends.
    np.testing.assert_array_equal(r.peak_memory, [MB, 2 * MB])


DIAMOND = from_edges(4, [(0, 1, MB), (0, 2, MB), (1, 3, MB), (2, 3, MB)])


def test_diamond_parallel_vs_serial():
    op_ms = [1, 4, 4, 1]
    serial = simulate(DIAMOND, make_cluster(2), op_ms, [0, 0, 0, 0])
    assert serial.makespan == pytest.approx(10 * MS)  # 1 + 4 + 4 + 1
    parallel = simulate(DIAMOND, make_cluster(2), op_ms, [0, 0, 1, 0])
    # op0 [0, 1]; op1 on dev 0 [1, 5]; t0 -> dev 1 [1, 2.01]; op2 [2.01, 6.01];
    # t2 -> dev 0 [6.01, 7.02]; op3 [7.02, 8.02].
    np.testing.assert_allclose(parallel.start, np.array([0, 1, 2.01, 7.02]) * MS)
    assert parallel.makespan == pytest.approx(8.02 * MS)
    np.testing.assert_allclose(parallel.busy, np.array([6, 4]) * MS)
    assert parallel.transfer_bytes == 2 * MB


def test_fifo_order_and_one_op_at_a_time():
    # Roots 0 and 1, op0's children 2 and 3, all on device 0; 1, 2, 3, 4 ms.
    g = from_edges(4, [(0, 2, 10), (0, 3, 10)])
    r = simulate(g, make_cluster(1), [1, 2, 3, 4], [0, 0, 0, 0])
    # Q_op starts as [0, 1]. op0 [0, 1]; then Q_op = [1, 2, 3]: op1 was queued first, so
    # op1 [1, 3], op2 [3, 6], op3 [6, 10]. Never two at once.
    np.testing.assert_allclose(r.start, np.array([0, 1, 3, 6]) * MS)
    np.testing.assert_allclose(r.end, np.array([1, 3, 6, 10]) * MS)
    assert r.makespan == pytest.approx(10 * MS)


def test_transfer_queue_serializes_transfers_from_one_device():
    # op0 on dev 0 makes t0 (1 MB) and t1 (2 MB); op1 reads t0 and op2 reads t1 on dev 1.
    g = make_graph(3, tensors=[(0, MB), (0, 2 * MB), (1, 0), (2, 0)], edges=[(0, 1), (1, 2)])
    r = simulate(g, make_cluster(2), [1, 1, 1], [0, 1, 1])
    # One bus on dev 0: t0 [1, 2.01], then t1 waits: [2.01, 2.01 + 2.01 = 4.02].
    np.testing.assert_allclose(r.transfer_start, np.array([1, 2.01]) * MS)
    np.testing.assert_allclose(r.transfer_end, np.array([2.01, 4.02]) * MS)
    # op1 [2.01, 3.01]; op2 [4.02, 5.02].
    np.testing.assert_allclose(r.start, np.array([0, 2.01, 4.02]) * MS)
    assert r.makespan == pytest.approx(5.02 * MS)
    assert r.transfer_bytes == 3 * MB


def test_same_tensor_to_two_devices_shares_the_bus():
    g = from_edges(3, [(0, 1, MB), (0, 2, MB)])
    r = simulate(g, make_cluster(3), [1, 1, 1], [0, 1, 2])
    # To dev 1 [1, 2.01], then to dev 2 [2.01, 3.02]; op1 [2.01, 3.01], op2 [3.02, 4.02].
    np.testing.assert_array_equal(r.transfer_dst, [1, 2])
    np.testing.assert_allclose(r.start, np.array([0, 2.01, 3.02]) * MS)
    assert r.makespan == pytest.approx(4.02 * MS)
    assert r.transfer_bytes == 2 * MB


def test_tensor_sent_once_to_two_consumers_on_the_same_device():
    g = from_edges(3, [(0, 1, MB), (0, 2, MB)])
    r = simulate(g, make_cluster(2), [1, 1, 1], [0, 1, 1])
    # One transfer [1, 2.01] releases both: op1 [2.01, 3.01], op2 [3.01, 4.01].
    assert r.num_transfers == 1 and r.transfer_bytes == MB
    np.testing.assert_allclose(r.start, np.array([0, 2.01, 3.01]) * MS)
    assert r.makespan == pytest.approx(4.01 * MS)
    # The copy on dev 1 (1 MB) stays until op2, its last reader there, ends.
    np.testing.assert_array_equal(r.peak_memory, [MB, MB])


def test_control_edge_across_devices_costs_latency_only():
    g = from_edges(2, [], control=[(0, 1)])
    r = simulate(g, make_cluster(2), [1, 1], [0, 1])
    # op0 [0, 1]; a 0-byte dummy takes 10 us: op1 [1.01, 2.01].
    assert r.makespan == pytest.approx(2.01 * MS)
    assert r.num_transfers == 1 and r.transfer_bytes == 0
    np.testing.assert_array_equal(r.transfer_tensor, [-1])  # a dummy, not a graph tensor
    np.testing.assert_array_equal(r.transfer_op, [0])
    # On one device a control edge only orders: op1 [1, 2].
    same = simulate(g, make_cluster(2), [1, 1], [1, 1])
    assert same.makespan == pytest.approx(2 * MS) and same.num_transfers == 0


def test_control_edge_that_duplicates_a_data_edge_is_ignored():
    g = from_edges(2, [(0, 1, MB)], control=[(0, 1)])
    r = simulate(g, make_cluster(2), [1, 1], [0, 1])
    # Only the data transfer: op1 starts at 1 + 1.01 = 2.01.
    assert r.num_transfers == 1
    assert r.makespan == pytest.approx(3.01 * MS)


def test_control_only_ordering_on_remote_device_waits_for_both_inputs():
    # op2 on dev 1 reads t0 (1 MB, from dev 0) and waits on op1 (dev 0) by a control edge.
    g = from_edges(3, [(0, 2, MB)], control=[(1, 2)])
    r = simulate(g, make_cluster(2), [1, 5, 1], [0, 0, 1])
    # op0 [0, 1], t0 [1, 2.01]; op1 [1, 6], dummy [6, 6.01]; op2 [6.01, 7.01].
    assert r.start[2] == pytest.approx(6.01 * MS)
    assert r.makespan == pytest.approx(7.01 * MS)


# ============================================================================ core groups
def shared_cluster(num_devices, cores, **links):
    """``num_devices`` devices sharing ``cores`` cores (one core group), links as make_cluster."""
    base = make_cluster(num_devices, **links)
    devices = tuple(dataclasses.replace(d, core_group="host") for d in base.devices)
    return dataclasses.replace(base, devices=devices, core_groups=(("host", cores),))


def test_a_core_group_runs_as_many_ops_at_once_as_it_has_cores():
    # DIAMOND on one device of a 2-core group: op1 and op2 run together.
    r = simulate(DIAMOND, shared_cluster(1, 2), [1, 4, 4, 1], [0, 0, 0, 0])
    np.testing.assert_allclose(r.start, np.array([0, 1, 1, 5]) * MS)
    assert r.makespan == pytest.approx(6 * MS)
    np.testing.assert_allclose(r.busy, [10 * MS])  # compute, not wall time


def test_devices_of_a_one_core_group_do_not_run_at_once():
    # Split over two devices that share one core: no parallelism, and the transfers
    # (10 us + 1 ms for 1 MB) are work on that core. op0 [0, 1]; the core takes op1 (queued
    # first) [1, 5], then t0 -> dev 1 [5, 6.01], op2 [6.01, 10.01], t2 -> dev 0
    # [10.01, 11.02], op3 [11.02, 12.02].
    r = simulate(DIAMOND, shared_cluster(2, 1), [1, 4, 4, 1], [0, 0, 1, 0])
    np.testing.assert_allclose(r.start, np.array([0, 1, 6.01, 11.02]) * MS)
    assert r.makespan == pytest.approx(12.02 * MS)
    np.testing.assert_allclose(r.transfer_start, np.array([5, 10.01]) * MS)
    # With their own cores (the paper's model) the same placement overlaps op1 and op2.
    assert simulate(DIAMOND, make_cluster(2), [1, 4, 4, 1], [0, 0, 1, 0]).makespan == \
        pytest.approx(8.02 * MS)


def test_two_cores_shared_by_two_devices_are_no_faster_than_one_device_with_two_cores():
    op_ms = [1, 4, 4, 1]
    one = simulate(DIAMOND, shared_cluster(1, 2), op_ms, [0, 0, 0, 0]).makespan
    split = simulate(DIAMOND, shared_cluster(2, 2), op_ms, [0, 0, 1, 0])
    # op1 and op2 still overlap, but op2 waits for t0 [1, 2.01] and op3 for t2 [6.01, 7.02].
    assert split.makespan == pytest.approx(8.02 * MS) and split.makespan > one


def test_transfers_to_a_device_outside_the_group_use_the_bus():
    # Devices 0 and 1 share a core, device 2 has its own: t0 0 -> 2 goes over dev 0's bus
    # while the core runs op1.
    base = make_cluster(3)
    devices = tuple(dataclasses.replace(d, core_group="host" if i < 2 else "")
                    for i, d in enumerate(base.devices))
    cluster = dataclasses.replace(base, devices=devices, core_groups=(("host", 1),))
    r = simulate(DIAMOND, cluster, [1, 4, 4, 1], [0, 0, 2, 0])
    # op0 [0, 1]; op1 [1, 5] and t0 on the bus [1, 2.01] at once; op2 on dev 2 [2.01, 6.01];
    # t2 -> dev 0 over dev 2's bus [6.01, 7.02]; op3 [7.02, 8.02].
    np.testing.assert_allclose(r.start, np.array([0, 1, 2.01, 7.02]) * MS)



def test_a_transfer_between_two_core_groups_is_work_on_the_source_groups_core():
    # Two tasks, one core each. op0 on task a sends t0 (1 MB) to op1 on task b and t1 to op2
    # beside it: the transfer takes a's core for 1.01 ms before op2 runs there (on a bus it
    # would overlap op2), and it is a copy on b, allocated when it starts.
    g = make_graph(3, [(0, MB), (0, MB)], [(0, 1), (1, 2)])
    base = make_cluster(2)
    devices = tuple(dataclasses.replace(d, core_group=group)
                    for d, group in zip(base.devices, ("a", "b")))
    cluster = dataclasses.replace(base, devices=devices, core_groups=(("a", 1), ("b", 1)))
    r = simulate(g, cluster, [1, 1, 1], [0, 1, 0])
    np.testing.assert_allclose(r.start, np.array([0, 2.01, 2.01]) * MS)
    np.testing.assert_allclose([r.transfer_start[0], r.transfer_end[0]],
                               np.array([1, 2.01]) * MS)
    assert r.peak_memory[1] == MB  # the copy on b
    # A device outside any core group still sends over its bus, beside the computation.
    alone = dataclasses.replace(cluster, devices=(devices[0], dataclasses.replace(
        devices[1], core_group="")), core_groups=(("a", 1),))
    np.testing.assert_allclose(simulate(g, alone, [1, 1, 1], [0, 1, 0]).start,
                               np.array([0, 2.01, 1]) * MS)


def test_a_delay_holds_the_consumer_but_no_core_or_bus():
    # As above, with a 3 ms delay from a to b: t0 holds a's core for 1.01 ms, then flies on
    # while op2 runs on that core; op1 starts when t0 arrives, 3 ms after it left.
    g = make_graph(3, [(0, MB), (0, MB)], [(0, 1), (1, 2)])
    base = make_cluster(2)
    devices = tuple(dataclasses.replace(d, core_group=group)
                    for d, group in zip(base.devices, ("a", "b")))
    delay = np.array([[0.0, 3 * MS], [0.0, 0.0]])
    cluster = dataclasses.replace(base, devices=devices, core_groups=(("a", 1), ("b", 1)),
                                  delay=delay)
    r = simulate(g, cluster, [1, 1, 1], [0, 1, 0])
    np.testing.assert_allclose(r.start, np.array([0, 5.01, 2.01]) * MS)
    np.testing.assert_allclose([r.transfer_start[0], r.transfer_end[0]],
                               np.array([1, 5.01]) * MS)
    # Two tensors to b: their core work queues on a, their delays overlap.
    two = make_graph(3, [(0, MB), (0, MB)], [(0, 1), (1, 2)])
    r = simulate(two, cluster, [1, 1, 1], [0, 1, 1])
    np.testing.assert_allclose(r.transfer_end, np.array([5.01, 6.02]) * MS)
    # Over a bus (b outside any group) the bus is free after 1.01 ms too.
    alone = dataclasses.replace(cluster, devices=(devices[0], dataclasses.replace(
        devices[1], core_group="")), core_groups=(("a", 1),))
    np.testing.assert_allclose(simulate(g, alone, [1, 1, 1], [0, 1, 0]).start,
                               np.array([0, 5.01, 1]) * MS)
    # No delay within a core group: a hand-over has no flight.
    one = dataclasses.replace(cluster, delay=None, devices=tuple(
        dataclasses.replace(d, core_group="a") for d in devices), core_groups=(("a", 1),))
    with pytest.raises(ClusterSpecError, match="hand-over"):
        dataclasses.replace(one, delay=delay)


# ==================================================================================== memory
def test_persistent_memory_counts_for_the_whole_step():
    g = from_edges(3, [(0, 1, 100), (1, 2, 100)], persistent_bytes=[5 * MB, 3 * MB, 7 * MB])
    r = simulate(g, make_cluster(2), [1, 1, 1], [0, 0, 1])
    # dev 0: 5 + 3 MB persistent, + t0 and t1 live while op1 runs (200 bytes).
    # dev 1: 7 MB persistent, + the copy of t1 (100 bytes).
    np.testing.assert_array_equal(r.peak_memory, [8 * MB + 200, 7 * MB + 100])


def test_peak_memory_of_a_chain_frees_a_tensor_after_its_consumer():
    g = from_edges(4, [(0, 1, 100), (1, 2, 200), (2, 3, 400)])
    r = simulate(g, make_cluster(1), [1, 1, 1, 1], [0, 0, 0, 0])
    # op0 runs: t0 = 100. op1 runs: t0 + t1 = 300; t0 freed at its end -> 200.
    # op2 runs: t1 + t2 = 600; t1 freed -> 400. op3 runs: 400 (its output is 0 bytes).
    # Had t0 not been freed, op2 would see 700.
    np.testing.assert_array_equal(r.peak_memory, [600])


def test_unread_tensor_is_freed_when_its_producer_ends():
    # op0 makes t0 (100, read by op1) and t1 (1000, read by nobody); op1 makes t2 (50, unread)
    g = make_graph(3, tensors=[(0, 100), (0, 1000), (1, 50)], edges=[(0, 1)])
    r = simulate(g, make_cluster(1), [1, 1, 1], [0, 0, 0])
    # Q_op = [op0, op2] (op2 is a root). op0 [0, 1] holds t0 + t1 = 1100; at its end t1
    # goes (100 left). op2 [1, 2]: 100. op1 [2, 3]: 100 + 50. Peak 1100.
    np.testing.assert_array_equal(r.peak_memory, [1100])
    # With a big output on op1, the unread t1 must be gone by then: 100 + 2000, not 3100.
    g2 = make_graph(2, tensors=[(0, 100), (0, 1000), (1, 2000)], edges=[(0, 1)])
    r2 = simulate(g2, make_cluster(1), [1, 1], [0, 0])
    assert r2.peak_memory[0] == 100 + 2000


def test_copy_on_destination_allocated_at_transfer_start():
    # op0 (dev 0) -> op1 (dev 1), t0 = 5 MB; dev 1 also runs root op2 (2 ms, output 3 MB
    # read by op1), so at 1 ms op2 still runs: the copy of t0 arrives on top of t2.
    g = make_graph(3, tensors=[(0, 5 * MB), (1, 0), (2, 3 * MB)], edges=[(0, 1), (2, 1)])
    r = simulate(g, make_cluster(2), [1, 1, 2], [0, 1, 1])
    # dev 1: op2 [0, 2] holds t2 (3 MB); t0's copy from 1 ms (5 MB) -> 8 MB.
    np.testing.assert_array_equal(r.peak_memory, [5 * MB, 8 * MB])


def with_aliases(graph, alias):
    return dataclasses.replace(graph, tensor_alias=np.asarray(alias, np.int32))


def test_a_view_of_a_variable_allocates_nothing():
    # op0 a variable (4 MB persistent), op1 reads it (a view, 4 MB: no bytes of its own),
    # op2 reads that and makes 100 bytes.
    g = with_aliases(from_edges(3, [(0, 1, 0), (1, 2, 4 * MB)],
                                persistent_bytes=[4 * MB, 0, 0]), [-2, -2, -1])
    r = simulate(g, make_cluster(1), [1, 1, 1], [0, 0, 0])
    np.testing.assert_array_equal(r.peak_memory, [4 * MB])
    # Sent to a device of another executor, the view is copied there (4 MB on dev 1).
    r = simulate(g, make_cluster(2), [1, 1, 1], [0, 0, 1])
    np.testing.assert_array_equal(r.peak_memory, [4 * MB, 4 * MB])


def test_an_output_that_shares_its_input_keeps_that_buffer_alive():
    # op0 -> op1 -> op2 -> op3 on one device, 1 ms each; t0 = t1 = 3 MB, t2 = 1 MB.
    chain = from_edges(4, [(0, 1, 3 * MB), (1, 2, 3 * MB), (2, 3, MB)])
    run = lambda alias: simulate(with_aliases(chain, alias), make_cluster(1), [1] * 4,
                                 [0] * 4).peak_memory[0]
    # Own buffers: op1 runs with t0 and t1 (6 MB).
    assert run([-1, -1, -1, -1]) == 6 * MB
    # op1 shares t0: one 3 MB buffer, which op2 still reads when it adds t2 (4 MB). Had the
    # buffer gone when op1 (its reader) ended, op2 would run with 1 MB and the peak be 3 MB.
    assert run([-1, 0, -1, -1]) == 4 * MB


def test_an_output_cannot_share_an_input_that_was_copied_from_another_executor():
    g = with_aliases(from_edges(3, [(0, 1, 3 * MB), (1, 2, 3 * MB)]), [-1, 0, -1])
    r = simulate(g, make_cluster(2), [1, 1, 1], [0, 1, 1])
    # dev 1: the copy of t0 (3 MB) and op1's own output (3 MB) while op1 runs.
    np.testing.assert_array_equal(r.peak_memory, [3 * MB, 6 * MB])


def test_within_a_core_group_a_tensor_is_handed_over_by_reference():
    # CHAIN3 split over two devices of one core group: t0 (1 MB) is not copied to dev 1; it
    # stays charged to dev 0 until op1 (on dev 1) has finished. op1's output t1 (1 MB) is dev
    # 1's. Across executors (make_cluster) the same split copies t0 (test above: 1 and 2 MB).
    r = simulate(CHAIN3, shared_cluster(2, 2), [1, 1, 1], [0, 1, 1])
    np.testing.assert_array_equal(r.peak_memory, [MB, MB])
    # A sharing output on dev 1 keeps dev 0's buffer: op1 shares t0, so dev 1 holds nothing.
    g = with_aliases(CHAIN3, [-1, 0, -1])
    r = simulate(g, shared_cluster(2, 2), [1, 1, 1], [0, 1, 1])
    np.testing.assert_array_equal(r.peak_memory, [MB, 0])


def test_an_elementwise_op_takes_over_an_input_only_it_still_holds():
    # op0 -> op1 -> op2, t0 = t1 = 3 MB (op2's output: 0 bytes), 1 ms each.
    def run(types, placement=(0, 0, 0), cluster=None, extra=()):
        g = from_edges(len(types), [(0, 1, 3 * MB), (1, 2, 3 * MB), *extra])
        g = dataclasses.replace(g, op_types=types)
        cluster = cluster or make_cluster(1)
        return Simulator(g, cluster, times_ms([1] * len(types), cluster.num_devices)).run(
            np.asarray(placement)).peak_memory
    # A MatMul allocates: op1 runs with t0 and t1 (6 MB). A Relu writes into t0, which only
    # it still holds: one 3 MB buffer throughout.
    assert run(("MatMul", "MatMul", "MatMul"))[0] == 6 * MB
    assert run(("MatMul", "Relu", "MatMul"))[0] == 3 * MB
    # A constant's value is never taken over.
    assert run(("Const", "Relu", "MatMul"))[0] == 6 * MB
    # Another reader of t0 (op3, queued after op1) keeps the Relu from taking it.
    assert run(("MatMul", "Relu", "MatMul", "MatMul"), (0, 0, 0, 0),
               extra=[(0, 3, 3 * MB)])[0] == 6 * MB
    # Handed over by reference within a core group, dev 0's buffer is taken on dev 1: dev 1
    # allocates nothing for the Relu, and the buffer stays dev 0's until op2 has finished.
    np.testing.assert_array_equal(run(("MatMul", "Relu", "MatMul"), (0, 1, 1),
                                      shared_cluster(2, 2)), [3 * MB, 0])
    np.testing.assert_array_equal(run(("MatMul", "MatMul", "MatMul"), (0, 1, 1),
                                      shared_cluster(2, 2)), [3 * MB, 3 * MB])
    # A copy from a device of another executor is not taken over (the model keeps the copy
    # apart): dev 1 holds the copy and the Relu's output.
    np.testing.assert_array_equal(run(("MatMul", "Relu", "MatMul"), (0, 1, 1),
                                      make_cluster(2)), [3 * MB, 6 * MB])


def test_graph_tensor_alias_is_checked():
    with pytest.raises(InvalidGraphError, match="tensor_alias"):
        with_aliases(CHAIN3, [-1, 1, -1])  # a tensor sharing itself
    with pytest.raises(InvalidGraphError, match="tensor_alias"):
        with_aliases(CHAIN3, [-1, -3, -1])
    with pytest.raises(InvalidGraphError, match="entries"):
        with_aliases(CHAIN3, [-1, -1])


def test_memory_penalized_runtime():
    g = from_edges(2, [], persistent_bytes=[3 * 10**9, 0])
    cluster = make_cluster(2, memory=10**9)
    r = simulate(g, cluster, [1, 1], [0, 1])
    # dev 0 peaks at 3 GB with 1 GB: R = r + 2 * (3 - 1) = r + 4 s.
    assert memory_penalized_runtime(r, cluster) == pytest.approx(r.makespan + 4.0)
    assert memory_penalized_runtime(r, cluster, c=0.5) == pytest.approx(r.makespan + 1.0)
    roomy = make_cluster(2, memory=4 * 10**9)
    assert memory_penalized_runtime(r, roomy) == pytest.approx(r.makespan)
    # Different capacities: the worst overshoot counts, not the device with the largest peak
    # (dev 1 peaks higher but fits; dev 0 overflows by 0.5 GB).
    g2 = from_edges(2, [], persistent_bytes=[15 * 10**8, 3 * 10**9])
    mixed = make_cluster(2, memory=[10**9, 4 * 10**9])
    r2 = simulate(g2, mixed, [1, 1], [0, 1])
    assert memory_penalized_runtime(r2, mixed) == pytest.approx(r2.makespan + 2 * 0.5)


# ============================================================================ lower bound
def test_lower_bound_equals_makespan_of_a_chain_on_one_device():
    cluster = make_cluster(2)
    op_time = times_ms([1, 2, 3], 2)
    r = Simulator(CHAIN3, cluster, op_time).run(np.zeros(3, int))
    assert lower_bound(CHAIN3, cluster, op_time) == pytest.approx(r.makespan)


def test_lower_bound_uses_the_fastest_device_and_the_load():
    # Three independent 3 ms ops (2 ms on dev 1): path bound 2 ms; load bound 6 / 2 = 3 ms.
    g = from_edges(3, [])
    op_time = np.array([[3, 2]] * 3, float) * MS
    assert lower_bound(g, make_cluster(2), op_time) == pytest.approx(3 * MS)
    assert critical_path(DIAMOND, np.array([1, 4, 2, 1.0])) == pytest.approx(6)


def random_graph(rng, num_ops, max_outputs=2, max_bytes=4 * MB) -> OpGraph:
    """A random DAG (edges go from lower to higher op index) with several outputs per op,
    control edges (some duplicating data edges), zero-byte tensors and persistent bytes."""
    tensors = []
    for i in range(num_ops):
        for _ in range(rng.integers(1, max_outputs + 1)):
            tensors.append((i, int(rng.integers(0, max_bytes)) if rng.random() < 0.8 else 0))
    edges = set()
    for t, (p, _) in enumerate(tensors):
        if p + 1 < num_ops:
            for c in rng.choice(np.arange(p + 1, num_ops), size=min(int(rng.integers(0, 4)),
                                                                  num_ops - p - 1), replace=False):
                edges.add((t, int(c)))
    edges = sorted(edges)
    if edges and rng.random() < 0.5:
        edges.append(edges[0])  # an op reading the same tensor twice
    control = set()
    for _ in range(int(rng.integers(0, num_ops // 2 + 1))):
        a, b = sorted(rng.choice(num_ops, 2, replace=False)) if num_ops > 1 else (0, 0)
        if a != b:
            control.add((int(a), int(b)))
    persistent = np.where(rng.random(num_ops) < 0.2, rng.integers(0, MB, num_ops), 0)
    return make_graph(num_ops, tensors, edges, sorted(control), persistent)


def random_times(rng, num_ops, num_devices, ties: bool):
    if ties:  # whole ms, with zeros: many events at the same time
        return rng.integers(0, 4, (num_ops, num_devices)).astype(float) * MS
    return rng.exponential(1 * MS, (num_ops, num_devices))


def test_lower_bound_never_exceeds_makespan():
    rng = np.random.default_rng(1234)
    for trial in range(50):
        n, d = int(rng.integers(1, 40)), int(rng.integers(1, 5))
        g = random_graph(rng, n)
        if trial % 3:
            g = random_aliases(rng, g)
        cluster = make_cluster(d, bandwidth_gbps=float(rng.uniform(0.5, 10)),
                               latency_us=float(rng.uniform(0, 50)))
        op_time = random_times(rng, n, d, ties=trial % 2 == 0)
        sim = Simulator(g, cluster, op_time)
        lb = lower_bound(g, cluster, op_time)
        for _ in range(4):
            placement = rng.integers(0, d, n)
            assert lb <= sim.makespan(placement) * (1 + 1e-12), (trial, placement)


# ======================================================================= input checking
def test_placement_is_checked():
    sim = Simulator(CHAIN3, make_cluster(2), times_ms([1, 1, 1], 2))
    with pytest.raises(InfeasiblePlacementError, match="shape"):
        sim.run(np.zeros(2, int))
    with pytest.raises(InfeasiblePlacementError, match="op2.*device 2"):
        sim.run(np.array([0, 1, 2]))
    with pytest.raises(InfeasiblePlacementError, match="device -1"):
        sim.run(np.array([-1, 0, 0]))
    with pytest.raises(InfeasiblePlacementError, match="integer"):
        sim.run(np.zeros(3))
    assert sim.run([0, 1, 1]).makespan == pytest.approx(4.01 * MS)  # lists are fine


def test_op_time_is_checked():
    with pytest.raises(InvalidGraphError, match="shape"):
        Simulator(CHAIN3, make_cluster(2), np.ones((3, 3)))
    bad = times_ms([1, 1, 1], 2)
    bad[1, 0] = np.nan
    with pytest.raises(InvalidGraphError, match="op1.*NaN"):
        Simulator(CHAIN3, make_cluster(2), bad)
    bad[1, 0] = -1
    with pytest.raises(InvalidGraphError, match=">= 0"):
        lower_bound(CHAIN3, make_cluster(2), bad)


def test_op_without_kernel_gives_infinite_makespan():
    op_time = times_ms([1, 1, 1], 2)
    op_time[1, 1] = np.inf
    sim = Simulator(CHAIN3, make_cluster(2), op_time)
    r = sim.run([0, 1, 0])
    assert r.makespan == np.inf and r.end[2] == np.inf
    assert np.isfinite(sim.makespan([0, 0, 0]))
    # A search's cut-off: unbounded by default; a finite one cuts the infinite step off.
    assert sim.summaries(np.array([[0, 1, 0]]), below=np.inf)[0][0] == np.inf
    makespan, peak = sim.summaries(np.array([[0, 1, 0], [0, 0, 0]]), below=1.0)
    assert np.isinf(makespan[0]) and makespan[1] == sim.makespan([0, 0, 0])
    assert np.isfinite(lower_bound(CHAIN3, make_cluster(2), op_time))


def test_result_is_deterministic_and_read_only():
    rng = np.random.default_rng(7)
    g = random_graph(rng, 30)
    sim = Simulator(g, make_cluster(3), random_times(rng, 30, 3, ties=True))
    p = rng.integers(0, 3, 30)
    a, b = sim.run(p), sim.run(p)
    np.testing.assert_array_equal(a.start, b.start)
    np.testing.assert_array_equal(a.transfer_end, b.transfer_end)
    with pytest.raises(ValueError):
        a.start[0] = 1.0


# =========================================== cross-check against a plain-Python reference
def reference_simulate(graph, cluster, op_time, placement, partner=None, partner_time=None):
    """The module docstring's model written as plainly as possible (sets, deques, heapq).
    Returns (start, end, peak_memory, transfer_bytes, transfers as (key, src, dst, t0, t1))."""
    n, D, T = graph.num_ops, cluster.num_devices, len(graph.tensor_op)
    placement = [int(x) for x in placement]

    def duration(i):
        d = placement[i]
        if partner is not None and partner[i] >= 0 and placement[partner[i]] != d:
            return partner_time[i, d]
        return op_time[i, d]
    executor, cores = cluster.executors()
    executor = executor.tolist()
    src_of = graph.tensor_op.tolist()
    data_pairs = {(src_of[t], d) for t, d in zip(graph.edge_tensor.tolist(),
                                                  graph.edge_dst.tolist())}
    deps = {(t, d) for t, d in zip(graph.edge_tensor.tolist(), graph.edge_dst.tolist())}
    for s, d in zip(graph.ctrl_src.tolist(), graph.ctrl_dst.tolist()):
        if (s, d) not in data_pairs:
            deps.add((T + s, d))  # the control dummy of op s
    producer = lambda key: src_of[key] if key < T else key - T
    size = lambda key: int(graph.tensor_bytes[key]) if key < T else 0
    shares = lambda key: int(graph.tensor_alias[key]) if key < T else -1
    inputs_of = collections.defaultdict(list)  # data inputs in input order
    for t, d in zip(graph.edge_tensor.tolist(), graph.edge_dst.tolist()):
        inputs_of[d].append(t)
    by_ref = lambda a, b: executor[a] == executor[b]  # one core group (or one device)
    grouped = [bool(d.core_group) for d in cluster.devices]
    consumers = collections.defaultdict(list)
    missing = collections.defaultdict(set)
    for key, op in sorted(deps):
        consumers[key].append(op)
        missing[op].add(key)
    outputs = collections.defaultdict(list)
    for key in sorted(set(range(T)) | {k for k, _ in deps}):
        outputs[producer(key)].append(key)

    start, end = [None] * n, [None] * n
    core_q = [collections.deque() for _ in cores]  # ("op", i) or ("x", key, src, dst)
    bus_q = [collections.deque() for _ in range(D)]
    on_core = [[None] * int(c) for c in cores]
    on_bus = [None] * D
    live, peak = [0] * D, [0] * D
    buffer_of = {}  # tensor -> the tensor whose buffer holds its bytes (None: a view)
    holders = {}    # buffer -> what still needs it; (key, device) -> what needs that copy
    sent, transfers, events, seq = set(), [], [], [0]

    def alloc(dev, nbytes):
        live[dev] += nbytes
        peak[dev] = max(peak[dev], live[dev])

    def release_buffer(key, holder):
        b = buffer_of[key]
        if b is not None:
            holders[b].discard(holder)
            if not holders[b]:
                live[placement[producer(b)]] -= size(b)

    def start_transfer(now, key, src, dst, where):
        if not by_ref(src, dst):
            alloc(dst, size(key))  # a copy
        transfers.append([key, src, dst, now, None])
        t = now + cluster.latency[src, dst] + size(key) / cluster.bandwidth[src, dst]
        heapq.heappush(events, (t, seq[0], where))
        seq[0] += 1

    def only_reader(t, i, d):
        """Op i (on d) is all that holds input t's buffer: it may write its output there."""
        b = buffer_of[t]
        if b is None or graph.op_types[producer(b)] in NOT_REUSABLE:
            return False
        dt = placement[producer(t)]
        if dt == d:
            return holders[b] == {(t, i)}
        return by_ref(dt, d) and holders[b] == {("to", t, d)} and holders[(t, d)] == {i}

    def start_op(now, i, e, k):
        d = placement[i]
        start[i] = now
        for key in outputs[i]:
            j = shares(key)
            if j == -2:
                buffer_of[key] = None
                continue
            if j >= 0 and (j, i) in deps and by_ref(placement[producer(j)], d):
                buffer_of[key] = buffer_of[j]
                continue
            ins = inputs_of[i]
            taken = None
            port, positions = reuse_inputs(graph.op_types[i], len(ins))
            mine = [t for t in range(T) if src_of[t] == i]  # outputs in port order
            if key < T and j == -1 and 0 <= port < len(mine) and mine[port] == key:
                for p in positions:
                    t = ins[p]
                    if ins.count(t) == 1 and size(t) == size(key) and only_reader(t, i, d) \
                            and size(buffer_of[t]) == size(key):
                        taken = buffer_of[t]
                        break
            if taken is not None:
                buffer_of[key] = taken
            else:
                buffer_of[key] = key
                holders[key] = set()
                live[d] += size(key)
        peak[d] = max(peak[d], live[d])
        heapq.heappush(events, (now + duration(i), seq[0], ("core", e, k)))
        seq[0] += 1

    def wakeup(now, execs, buses):
        for e in execs:
            for k in range(len(on_core[e])):
                if on_core[e][k] is None and core_q[e]:
                    item = on_core[e][k] = core_q[e].popleft()
                    if item[0] == "op":
                        start_op(now, item[1], e, k)
                    else:
                        start_transfer(now, item[1], item[2], item[3], ("core", e, k))
        for s in buses:
            if on_bus[s] is None and bus_q[s]:
                key, dst = on_bus[s] = bus_q[s].popleft()
                start_transfer(now, key, s, dst, ("bus", s))

    def transfer_done(now, key, s, dst):
        next(x for x in transfers if x[0] == key and x[2] == dst)[4] = now
        for j in consumers[key]:
            if placement[j] == dst:
                missing[j].discard(key)
                if not missing[j]:
                    core_q[executor[dst]].append(("op", j))
        if not by_ref(s, dst):
            release_buffer(key, ("to", key, dst))  # the copy is made

    for i in range(n):
        if not missing[i]:
            core_q[executor[placement[i]]].append(("op", i))
    wakeup(0.0, range(len(cores)), range(D))
    def in_flight(now, key, s, dst):
        """A transfer whose link has a delay arrives that much later (Transfer-sent)."""
        if cluster.delay[s, dst] > 0 and not by_ref(s, dst):
            heapq.heappush(events, (now + cluster.delay[s, dst], seq[0], ("arrive", key, s,
                                                                           dst)))
            seq[0] += 1
            return True
        return False

    while events:
        now, _, where = heapq.heappop(events)
        if where[0] == "arrive":
            _, key, s, dst = where
            transfer_done(now, key, s, dst)
            wakeup(now, [executor[dst]], [])
            continue
        if where[0] == "bus":
            s = where[1]
            (key, dst), on_bus[s] = on_bus[s], None
            if in_flight(now, key, s, dst):
                wakeup(now, [], [s])
                continue
            transfer_done(now, key, s, dst)
            wakeup(now, [executor[dst]], [s])
            continue
        _, e, k = where
        item, on_core[e][k] = on_core[e][k], None
        if item[0] == "x":
            _, key, s, dst = item
            if in_flight(now, key, s, dst):
                wakeup(now, [e], [])
                continue
            transfer_done(now, key, s, dst)
            wakeup(now, [executor[dst]] + [e] * (e != executor[dst]), [])
            continue
        i = item[1]
        d = placement[i]
        end[i] = now
        for key in outputs[i]:
            held = set()
            for j in consumers[key]:
                dj = placement[j]
                if dj == d:
                    held.add((key, j))
                    missing[j].discard(key)
                    if not missing[j]:
                        core_q[e].append(("op", j))
                else:
                    held.add(("to", key, dj))
                    if (key, dj) not in sent:
                        sent.add((key, dj))
                        if executor[dj] == e or (grouped[d] and grouped[dj]):
                            core_q[e].append(("x", key, d, dj))
                        else:
                            bus_q[d].append((key, dj))
                        holders[(key, dj)] = set()
                    holders[(key, dj)].add(j)
            b = buffer_of[key]
            if b is not None:
                holders[b] |= held
                if not holders[b]:
                    live[placement[producer(b)]] -= size(b)
        for key in {k for k, op in deps if op == i}:
            if placement[producer(key)] == d:
                release_buffer(key, (key, i))
                continue
            holders[(key, d)].discard(i)
            if not holders[(key, d)]:
                if by_ref(placement[producer(key)], d):  # the last reader of a hand-over
                    release_buffer(key, ("to", key, d))
                else:
                    live[d] -= size(key)  # the last reader of a copy
        wakeup(now, [e], [d])
    assert None not in end
    persistent = np.bincount(placement, weights=graph.persistent_bytes, minlength=D)
    return (np.array(start), np.array(end), np.array(peak) + persistent.astype(np.int64),
            sum(size(x[0]) for x in transfers), transfers)


REUSE_TEST_TYPES = ("Identity", "MatMul", "AddV2", "Relu", "AddN", "BiasAdd", "Const",
                    "Placeholder", "SparseSoftmaxCrossEntropyWithLogits")


def random_aliases(rng, graph):
    """``graph`` with some tensors views (-2) or sharing a tensor their producer reads, a few
    sharing a tensor it does not read (their own buffer, then), and op types among
    :data:`REUSE_TEST_TYPES` (some take over an input's buffer; a constant's or a fed value's
    is never taken)."""
    n = len(graph.tensor_op)
    alias = np.full(n, -1, np.int32)
    reads = collections.defaultdict(list)
    for t, d in zip(graph.edge_tensor.tolist(), graph.edge_dst.tolist()):
        reads[d].append(t)
    for k, op in enumerate(graph.tensor_op.tolist()):
        u = rng.random()
        if u < 0.15:
            alias[k] = -2
        elif u < 0.5 and reads[op]:
            alias[k] = reads[op][int(rng.integers(len(reads[op])))]
        elif u < 0.55 and n > 1:
            alias[k] = (k + 1 + int(rng.integers(n - 1))) % n
    types = tuple(REUSE_TEST_TYPES[int(t)] for t in rng.integers(0, len(REUSE_TEST_TYPES),
                                                                   graph.num_ops))
    # Equal sizes make taking over an input possible: 0 or 1 MB (tiny graphs stay tiny).
    sizes = np.asarray(graph.tensor_bytes) // (2 * MB) * MB
    return dataclasses.replace(graph, tensor_alias=alias, op_types=types, tensor_bytes=sizes)


def _assert_matches_reference(sim, graph, cluster, op_time, placement, partner=None,
                              partner_time=None):
    r = sim.run(placement)
    start, end, peak, nbytes, transfers = reference_simulate(graph, cluster, op_time,
                                                             placement, partner, partner_time)
    np.testing.assert_array_equal(r.start, start)
    np.testing.assert_array_equal(r.end, end)
    np.testing.assert_array_equal(r.peak_memory, peak)
    assert r.transfer_bytes == nbytes
    assert r.makespan == end.max() == sim.makespan(placement)
    # Same transfers (records are in queueing order here, start order there).
    T = len(graph.tensor_op)
    keys = np.where(r.transfer_tensor >= 0, r.transfer_tensor, T + r.transfer_op)
    ours = sorted(zip(keys.tolist(), r.transfer_src.tolist(), r.transfer_dst.tolist(),
                      r.transfer_start.tolist(), r.transfer_end.tolist()))
    assert ours == sorted(tuple(x) for x in transfers)
    n, d = graph.num_ops, cluster.num_devices
    took = op_time[np.arange(n), placement]
    if partner is not None:
        apart = (partner >= 0) & (placement[np.maximum(partner, 0)] != placement)
        took = np.where(apart, partner_time[np.arange(n), placement], took)
    busy = np.bincount(placement, weights=took, minlength=d)
    np.testing.assert_allclose(r.busy, busy)


def random_core_groups(rng, cluster):
    """``cluster`` with its devices split at random into core groups of 1 to 3 cores (some
    devices left on their own)."""
    label = rng.integers(-1, 2, cluster.num_devices)  # -1: no group
    groups = [(f"g{g}", int(rng.integers(1, 4))) for g in sorted(set(label.tolist()) - {-1})]
    devices = tuple(dataclasses.replace(d, core_group=f"g{g}" if g >= 0 else "")
                    for d, g in zip(cluster.devices, label.tolist()))
    return dataclasses.replace(cluster, devices=devices, core_groups=tuple(groups))


def random_delays(rng, cluster, choices=(0.0, 25e-6, 400e-6)):
    """``cluster`` with a delay drawn from ``choices`` on about half of its links (none
    within a core group, where a transfer is a hand-over)."""
    d = cluster.num_devices
    delay = np.where(rng.random((d, d)) < 0.5, rng.choice(choices, (d, d)), 0.0)
    group = np.array([dev.core_group for dev in cluster.devices])
    delay[(group[:, None] == group[None, :]) & (group[:, None] != "")] = 0.0
    return dataclasses.replace(cluster, delay=delay)


@pytest.mark.parametrize("partners", [False, True], ids=["", "partners"])
@pytest.mark.parametrize("shared", [False, True], ids=["own_cores", "core_groups"])
@pytest.mark.parametrize("seed", range(8))
def test_matches_reference_on_random_graphs(seed, shared, partners):
    rng = np.random.default_rng(seed + 500 * partners)
    for trial in range(10):
        n, d = int(rng.integers(1, 30)), int(rng.integers(1, 5))
        g = random_graph(rng, n)
        if trial % 3:
            g = random_aliases(rng, g)
        cluster = make_cluster(d, bandwidth_gbps=float(rng.uniform(0.5, 10)),
                               latency_us=float(rng.choice([0.0, 25.0])))
        if shared:
            cluster = random_core_groups(rng, cluster)
        if trial % 2:
            cluster = random_delays(rng, cluster)
        op_time = random_times(rng, n, d, ties=trial % 2 == 0)
        partner, partner_time = random_partners(rng, op_time) if partners else (None, None)
        sim = Simulator(g, cluster, op_time, partner=partner, partner_time=partner_time)
        for _ in range(3):
            _assert_matches_reference(sim, g, cluster, op_time, rng.integers(0, d, n),
                                      partner, partner_time)


def random_partners(rng, op_time):
    """About a third of the ops get a random other op as partner, and a time apart from it
    of 0.5 to 20 times their own (a lost rewrite is usually slower, a measurement may not be)."""
    n = len(op_time)
    partner = np.where(rng.random(n) < 0.35, rng.integers(0, n, n), -1)
    partner[partner == np.arange(n)] = -1
    return partner, op_time * rng.uniform(0.5, 20.0, op_time.shape)


@pytest.mark.parametrize("shared", [False, True], ids=["own_cores", "core_groups"])
@pytest.mark.parametrize("seed", range(4))
def test_matches_reference_with_many_devices_and_simultaneous_events(seed, shared):
    # Eight devices (16 event slots or more, most of them pending at once) and many events at
    # the same instant: ops of whole ms, tensors of 0 bytes (a transfer takes the latency, 0
    # or 1 ms). The order of equal-time events (by creation) decides the timeline here; with
    # core groups, also the order in which an executor's idle cores are filled.
    rng = np.random.default_rng(100 + seed)
    g = random_aliases(rng, random_graph(rng, 80, max_bytes=1))
    cluster = make_cluster(8, latency_us=float([0.0, 1000.0][seed % 2]))
    if shared:
        cluster = random_core_groups(rng, cluster)
    if seed >= 2:  # delays of whole ms: arrivals at the same instant as other events
        cluster = random_delays(rng, cluster, choices=(0.0, 1e-3, 2e-3))
    op_time = random_times(rng, 80, 8, ties=True)
    sim = Simulator(g, cluster, op_time)
    for _ in range(5):
        _assert_matches_reference(sim, g, cluster, op_time, rng.integers(0, 8, 80))



def test_an_op_apart_from_its_partner_takes_its_partner_time():
    # 0 -> 1 -> 2 on one device, op 2 partnered with op 0: 1 + 1 + 1 ms together; with op 0
    # on device 1 op 2 takes its 9 ms apart time (plus the transfer of op 0's output).
    g = make_graph(3, [(0, 1000), (1, 1000), (2, 1000)], [(0, 1), (1, 2)])
    cluster = make_cluster(2, latency_us=0.0)
    op_time = times_ms([1, 1, 1], 2)
    apart = op_time.copy()
    apart[2] = 9e-3
    sim = Simulator(g, cluster, op_time, partner=np.array([-1, -1, 0]), partner_time=apart)
    assert sim.makespan(np.array([0, 0, 0])) == pytest.approx(3e-3)
    together = sim.makespan(np.array([1, 1, 1]))
    assert together == pytest.approx(3e-3)
    split = sim.run(np.array([1, 0, 0]))
    assert split.end[2] - split.start[2] == pytest.approx(9e-3)
    assert split.busy[0] == pytest.approx(10e-3)
    # Without partners the same placement takes the op's own time.
    plain = Simulator(g, cluster, op_time).run(np.array([1, 0, 0]))
    assert plain.end[2] - plain.start[2] == pytest.approx(1e-3)


@pytest.mark.parametrize("partner, partner_time, match", [
    (np.array([-1, -1, 0]), None, "give both or neither"),
    (np.array([-1, 1]), "times", r"\[3\] integer"),
    (np.array([-1, -1, 2]), "times", "op 'op2' has partner 2"),
    (np.array([-1, -1, 5]), "times", "has partner 5"),
    (np.array([-1, -1, 0]), np.ones((3, 1)), "partner_time has shape"),
    (np.array([-1, -1, 0]), -np.ones((3, 2)), "times must be >= 0"),
])
def test_partners_are_checked(partner, partner_time, match):
    g = make_graph(3, [(0, 1000), (1, 1000), (2, 1000)], [(0, 1), (1, 2)])
    op_time = times_ms([1, 1, 1], 2)
    if isinstance(partner_time, str):
        partner_time = op_time
    with pytest.raises(InvalidGraphError, match=match):
        Simulator(g, make_cluster(2), op_time, partner=partner, partner_time=partner_time)
