"""Calibration of measured op times to the step they were measured in (pipeline.prepare)."""

import numpy as np
import pytest

from tf_autoplace.core.cluster import Cluster, Device
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.pipeline.prepare import calibrate
from tf_autoplace.sim import Simulator

GB = 10**9


def _problem(gpu_kernel_for_last=True):
    kernels = np.ones((5, 2), bool)
    kernels[4, 1] = gpu_kernel_for_last
    graph = from_edges(5, [(0, 1, 4096), (0, 2, 4096), (1, 3, 1024), (2, 3, 1024),
                           (3, 4, 64)], kernels=kernels)
    cluster = Cluster.uniform([Device("/device:CPU:0", "CPU", 64 * GB),
                               Device("/device:GPU:0", "GPU", 16 * GB),
                               Device("/device:GPU:1", "GPU", 16 * GB, speed=2.0)])
    op_time = np.array([[1, 2, 1], [3, 5, 2.5], [4, 7, 3.5], [2, 3, 1.5], [1, 1, 0.5]]) * 1e-3
    op_time[:, 1:] = np.where(kernels[:, 1:2], op_time[:, 1:], np.inf)
    return graph, cluster, op_time


def test_each_kind_is_scaled_so_its_single_device_step_is_the_measured_one():
    graph, cluster, op_time = _problem()
    scaled, _, scale = calibrate(graph, cluster, op_time, None, None,
                                 {"CPU": 20e-3, "GPU": 4e-3, "TPU": 1.0})
    assert set(scale) == {"CPU", "GPU"}  # a kind the cluster lacks is ignored
    sim = Simulator(graph, cluster, scaled)
    assert sim.makespan(np.zeros(5, np.int32)) == pytest.approx(20e-3)
    assert sim.makespan(np.ones(5, np.int32)) == pytest.approx(4e-3)
    # every device of a kind gets the same factor: their speeds relative to each other stay
    np.testing.assert_allclose(scaled[:, 2] / scaled[:, 1], op_time[:, 2] / op_time[:, 1])
    np.testing.assert_allclose(scaled[:, 0], op_time[:, 0] * scale["CPU"])
    assert (op_time[:, 0] == [1e-3, 3e-3, 4e-3, 2e-3, 1e-3]).all()  # the input is not changed


def test_a_kind_some_op_cannot_run_on_is_left_alone():
    graph, cluster, op_time = _problem(gpu_kernel_for_last=False)
    scaled, _, scale = calibrate(graph, cluster, op_time, None, None, {"GPU": 4e-3})
    assert scale == {} and scaled is op_time


def test_partner_times_are_scaled_with_their_kind():
    graph, cluster, op_time = _problem()
    partner = np.array([-1, -1, -1, 1, -1], np.int32)
    partner_time = op_time.copy()
    partner_time[3] *= 2
    _, scaled_partner, scale = calibrate(graph, cluster, op_time, partner, partner_time,
                                         {"CPU": 5e-3})
    np.testing.assert_allclose(scaled_partner[:, 0], partner_time[:, 0] * scale["CPU"])
    np.testing.assert_allclose(scaled_partner[:, 1:], partner_time[:, 1:])


def test_the_step_is_matched_on_the_device_the_profile_ran_not_a_slower_one():
    # A TensorFlow cluster's profile holds its reference task's times; another task's device
    # of the same kind (listed first here) has a speed relative to it.
    graph, _, op_time = _problem()
    cluster = Cluster.uniform([Device("/job:ps/task:0/device:CPU:0", "CPU", 64 * GB, speed=0.5),
                               Device("/job:worker/task:0/device:CPU:0", "CPU", 64 * GB)])
    times = np.stack([op_time[:, 0] / 0.5, op_time[:, 0]], axis=1)
    scaled, _, _ = calibrate(graph, cluster, times, None, None, {"CPU": 20e-3})
    sim = Simulator(graph, cluster, scaled)
    assert sim.makespan(np.ones(5, np.int32)) == pytest.approx(20e-3)  # the reference task
    assert sim.makespan(np.zeros(5, np.int32)) == pytest.approx(40e-3)  # half its speed


@pytest.mark.parametrize("us, match", [
    # Op times of 1e13 us against a 120 us step "calibrated" by 2.4e-12: times and step of two
    # runs, or a unit error.
    (1e13, r"CPU op times simulate a single-device step of 5e\+10 ms and its measured CPU step "
           r"is 0\.12 ms: calibration would scale the op times by 2\.4e-12, outside \[1/100, "
           r"100\].*op times and its step disagree \(a step from another run or graph, or a "
           r"unit error"),
    # Tiny times scaled up by 2.4e+295; times all 0 by an infinite factor (was: left alone).
    (1e-294, "scale the op times by 2\\.4e\\+295"),
    (0.0, "step of 0 ms and .* scale the op times by inf"),
])
def test_a_factor_no_overhead_explains_is_refused(us, match):
    graph, cluster, op_time = _problem()
    op_time = op_time.copy()
    op_time[:, 0] = us * 1e-6
    with pytest.raises(ConfigError, match=match):
        calibrate(graph, cluster, op_time, None, None, {"CPU": 120e-6})


def test_the_bound_holds_either_way_and_lets_a_factor_inside_it_pass():
    bound = 100  # prepare.MAX_TIME_SCALE
    graph, cluster, op_time = _problem()
    single = Simulator(graph, cluster, op_time).makespan(np.zeros(5, np.int32))
    for factor in (bound / 2, 2 / bound):
        _, _, scale = calibrate(graph, cluster, op_time, None, None, {"CPU": factor * single})
        assert scale["CPU"] == pytest.approx(factor)
    for factor in (bound * 2, 1 / bound / 2):
        with pytest.raises(ConfigError, match="profile's op times and its step disagree"):
            calibrate(graph, cluster, op_time, None, None, {"CPU": factor * single})


def test_the_notes_say_which_kinds_a_partial_profile_leaves_unscaled():
    # A CPU profile placed on GPUs: its note said "its measured step does not scale the op
    # times" beside the note that the CPU op times were scaled by 1.21.
    import types

    from tf_autoplace.pipeline.engine import profile_notes

    profile = types.SimpleNamespace(num_unprofiled_ops=202, unprofiled_kinds=["GPU"],
                                    unprofiled_counts={"GPU": 202},
                                    profiled_kinds=("CPU",), profiled_steps={"CPU": 1e-3},
                                    num_unused_ran=0, unstepped_kinds=(),
                                    retyped=[])
    note, mixed = profile_notes(profile, "profile.pbtxt")
    assert note.endswith("so the GPU op times are not scaled to a measured step"), note
    assert "order of magnitude" not in note  # estimates of GPU times follow the spec's speed
    # A laptop's CPU profile placed for GPUs printed a 4.99x speedup of measured CPU times
    # against estimated GPU times without a word.
    assert mixed.startswith("the cost profile times no op on GPU (it was measured on CPU): "
                            "comparisons between the CPU and GPU devices, the predicted "
                            "speedup over one of them included, set measured times against "
                            "estimates"), mixed


def test_the_notes_warn_of_cpu_estimates_and_name_ops_of_another_type():
    # A profile of part of the graph (a frozen graph's, a file cut short) left 147 of 209 CPU
    # ops to Grappler's estimates: the report predicted 9x the measured step, and the note
    # the graph door gives estimates ("an order of magnitude from a real step") was gone.
    import types

    from tf_autoplace.pipeline.engine import profile_notes

    profile = types.SimpleNamespace(num_unprofiled_ops=147, unprofiled_kinds=["CPU"],
                                    unprofiled_counts={"CPU": 147},
                                    profiled_kinds=("CPU",), profiled_steps={}, num_unused_ran=0,
                                    unstepped_kinds=("CPU",),
                                    retyped=[("mm", "MatMul", "BatchMatMulV2")])
    estimated, unscaled, retyped = profile_notes(profile, "profile.pbtxt")
    # A profile without a run (written by hand, converted from another tool): said, not silent.
    assert unscaled.startswith("the cost profile has no measured step (run) on CPU: its CPU op "
                               "times are their spans in traced steps, not scaled"), unscaled
    assert "can be an order of magnitude or more from a real step" in estimated, estimated
    assert retyped.startswith("1 ops have another type in the cost profile than in this graph "
                              "('mm' (MatMul in the profile, BatchMatMulV2 here))"), retyped


def test_the_note_counts_the_ops_a_profile_lacks_per_device_kind():
    # Half a CPU profile on k80x2: "257 ops are not in the cost profile" (every op lacks a GPU
    # time), when 129 of them are in it with their CPU times.
    import types

    from tf_autoplace.pipeline.engine import profile_notes

    profile = types.SimpleNamespace(num_unprofiled_ops=257, unprofiled_kinds=("CPU", "GPU"),
                                    unprofiled_counts={"CPU": 128, "GPU": 257},
                                    profiled_kinds=("CPU",), profiled_steps={}, num_unused_ran=0,
                                    unstepped_kinds=("CPU",),
                                    retyped=[])
    note = profile_notes(profile, "half.pbtxt")[0]
    assert note.startswith("ops without a time in the cost profile 'half.pbtxt' on this "
                           "cluster's devices: 128 on CPU, 257 on GPU; their times there are "
                           "Grappler's analytical estimates"), note


def test_the_notes_say_a_larger_graphs_profile_does_not_calibrate():
    # A profile of this graph plus one layer set this graph's predicted step to the larger
    # graph's measured step, "calibrated".
    import types

    from tf_autoplace.pipeline.engine import profile_notes

    profile = types.SimpleNamespace(num_unprofiled_ops=0, unprofiled_kinds=[],
                                    unprofiled_counts={}, profiled_kinds=("CPU",),
                                    profiled_steps={"CPU": 1e-3}, num_unused_ran=13,
                                    unstepped_kinds=(),
                                    unused_ran={"CPU": 13}, retyped=[])
    (note,) = profile_notes(profile, "profile.pbtxt")
    assert note == ("13 ops of the cost profile are not in this graph and were ignored; 13 of "
                    "them ran in the profiled CPU step, so that run's measured step is another "
                    "(larger) graph's, and this graph's CPU op times are not scaled to it")
