"""Cost models: Grappler's analytical per-op times on the K80 spec, speed scaling, the
memory-bound fallback, kernel masking, the transfer-time formula, and a placeholder too big to
allocate costed without allocating it."""

import dataclasses

import numpy as np
import pytest

from tf_autoplace.core.cluster import Cluster, Device, resolve_cluster
from tf_autoplace.cost import AnalyticalCostModel, CostModel, PinnedCostModel, TableCostModel
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph import grappler, ingest
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.testing import small_cnn

GPU0, GPU1, CPU = 0, 1, 2  # device order in k80x2.pbtxt
HEAVY_OPS = ("left/Conv2D", "right/Conv2D", "gradients/left/Conv2D_grad/Conv2DBackpropFilter",
             "gradients/right/Conv2D_grad/Conv2DBackpropInput")


@pytest.fixture(scope="module")
def k80x2():
    return resolve_cluster("k80x2")


@pytest.fixture(scope="module")
def cnn():
    """(meta graph, OpGraph, analytical cost model) of the small CNN (batch 8)."""
    meta_graph = ingest.load_meta_graph(small_cnn().graph)
    graph = ingest.to_opgraph(meta_graph)
    return meta_graph, graph, AnalyticalCostModel(meta_graph)


def test_analytical_times_on_k80x2(cnn, k80x2):
    _, graph, model = cnn
    times = model.op_time(graph, k80x2)
    overhead = k80x2.op_overhead_s

    assert times.shape == (graph.num_ops, 3) and times.dtype == np.float64
    allowed = graph.kernels @ k80x2.kind_mask(graph.kernel_kinds)
    np.testing.assert_array_equal(np.isfinite(times), allowed)
    assert (times[allowed] >= overhead).all()
    assert model.num_fallback_ops == 0  # Grappler costs every op of this graph
    np.testing.assert_array_equal(times[:, GPU0], times[:, GPU1])  # same hardware, same times

    for name in HEAVY_OPS:
        i = graph.index(name)
        # A convolution has a real cost on both kinds (not lost to rounding) ...
        assert times[i, GPU0] > overhead and times[i, CPU] > overhead, name
        # ... and the K80 is faster than the host CPU at it.
        assert times[i, GPU0] < times[i, CPU], name
    # The whole forward-backward step is cheaper on a GPU than on the host.
    assert times[:, GPU0].sum() < times[:, CPU].sum()


def test_speed_divides_the_grappler_part_but_not_the_overhead(cnn, k80x2):
    _, graph, model = cnn
    fast = dataclasses.replace(k80x2.devices[GPU1], speed=2.0)
    cluster = Cluster((k80x2.devices[GPU0], fast, k80x2.devices[CPU]), k80x2.bandwidth,
                      k80x2.latency, op_overhead_s=k80x2.op_overhead_s)
    base, faster = model.op_time(graph, k80x2), model.op_time(graph, cluster)
    overhead = k80x2.op_overhead_s
    np.testing.assert_allclose(faster[:, GPU1] - overhead, (base[:, GPU1] - overhead) / 2,
                               rtol=1e-12, atol=1e-18)
    np.testing.assert_array_equal(faster[:, [GPU0, CPU]], base[:, [GPU0, CPU]])
    assert (faster[:, GPU1] < base[:, GPU1]).sum() >= len(HEAVY_OPS)


def test_ops_grappler_does_not_cost_fall_back_to_memory_traffic(cnn):
    meta_graph, _, _ = cnn
    # "ghost" is not in the meta graph: Grappler has no time for it; "images" is.
    graph = from_edges(2, [(1, 0, 6000)], names=("images", "ghost"))
    cpu = Device("/device:CPU:0", "CPU", memory_bytes=10**9, memory_bandwidth_gbps=3.0)
    slow = Device("/device:CPU:1", "CPU", memory_bytes=10**9, memory_bandwidth_gbps=3.0,
                  speed=0.5)
    cluster = Cluster.uniform([cpu, slow], op_overhead_us=1.0)
    model = AnalyticalCostModel(meta_graph)
    times = model.op_time(graph, cluster)
    # 6000 output bytes read and written once at 3 GB/s = 4 us, over speed, plus 1 us.
    np.testing.assert_allclose(times[1], [1e-6 + 4e-6, 1e-6 + 4e-6 / 0.5], rtol=1e-9)
    assert model.num_fallback_ops == 1  # images was costed by Grappler


def test_table_cost_model_is_inf_where_there_is_no_kernel(k80x2):
    # op 0 is CPU-only (like StringJoin), op 1 runs anywhere.
    graph = from_edges(2, [(0, 1, 8)], op_types=("StringJoin", "MatMul"),
                       kernels=np.array([[True, False], [True, True]]))
    model = TableCostModel({"CPU": [3.0, 5.0], "GPU": [1.0, 0.5]})
    host_speed = k80x2.devices[CPU].speed  # 16: see tools/make_cluster_specs.py
    np.testing.assert_array_equal(model.op_time(graph, k80x2),
                                  [[np.inf, np.inf, 3.0 / host_speed],
                                   [0.5, 0.5, 5.0 / host_speed]])

    fast_cpu = dataclasses.replace(k80x2.devices[CPU], speed=4.0)
    cluster = Cluster((k80x2.devices[GPU0], fast_cpu), k80x2.bandwidth[:2, :2],
                      k80x2.latency[:2, :2])
    np.testing.assert_array_equal(model.op_time(graph, cluster), [[np.inf, 0.75], [0.5, 1.25]])

    with pytest.raises(ConfigError, match="no op times for device kind 'GPU'"):
        TableCostModel({"CPU": [1.0, 1.0]}).op_time(graph, k80x2)


def test_a_pinned_op_runs_on_its_device_only_and_the_rest_is_the_base_models(k80x2):
    # A pin leaves one device's time; what the base model measured besides op times (a
    # profile's executed ops, partner times, measured step) must not be lost: the TF2 door
    # pins captured variables and a profile's calibration went with it.
    class Measured(TableCostModel):
        profile_path = "p.pbtxt"

        def executed_ops(self, graph, cluster):
            return np.array([True, False])

        def partner_times(self, graph, cluster, op_time):
            return np.array([-1, -1], np.int32), op_time

        def measured_steps(self):
            return {"GPU": 1e-3}

    graph = from_edges(2, [(0, 1, 8)], names=("a", "b"))
    base = Measured({"CPU": [3.0, 5.0], "GPU": [1.0, 0.5]})
    pinned = PinnedCostModel(base, {"a": k80x2.names[GPU1]})
    times = pinned.op_time(graph, k80x2)
    np.testing.assert_array_equal(times[0], [np.inf, 1.0, np.inf])
    np.testing.assert_array_equal(times[1], base.op_time(graph, k80x2)[1])
    np.testing.assert_array_equal(pinned.executed_ops(graph, k80x2), [True, False])
    assert pinned.partner_times(graph, k80x2, times)[1] is times
    assert pinned.measured_steps() == {"GPU": 1e-3} and pinned.profile_path == "p.pbtxt"
    assert getattr(pinned, "num_fallback_ops", 0) == 0


def test_a_cost_model_returning_the_wrong_shape_is_rejected(k80x2):
    class Broken(CostModel):
        def _op_time(self, graph, cluster):
            return np.zeros((graph.num_ops, cluster.num_devices + 1))

    with pytest.raises(ConfigError, match=r"Broken returned shape \(1, 4\), expected \(1, 3\)"):
        Broken().op_time(from_edges(1, []), k80x2)


def test_transfer_time_is_latency_plus_bytes_over_bandwidth(k80x2):
    # Placeto's link: 25 us + 7.6 GB / 7.6 GB/s.
    assert CostModel.transfer_time(k80x2, 7.6e9, GPU0, CPU) == pytest.approx(25e-6 + 1.0,
                                                                             rel=1e-12)
    assert CostModel.transfer_time(k80x2, 0, GPU1, GPU0) == pytest.approx(25e-6, rel=1e-12)
    assert CostModel.transfer_time(k80x2, 10**9, GPU1, GPU1) == 0.0

    # A directed link: the [src, dst] entry is used, not [dst, src].
    cluster = Cluster.from_text(
        "default_bandwidth_gbps: 10\ndefault_latency_us: 5\n"
        'device { name: "/device:CPU:0" kind: "CPU" memory_bytes: 1 }\n'
        'device { name: "/device:CPU:1" kind: "CPU" memory_bytes: 1 }\n'
        'link { src: "/device:CPU:0" dst: "/device:CPU:1" bandwidth_gbps: 20 latency_us: 1 }\n')
    assert CostModel.transfer_time(cluster, 2e9, 0, 1) == pytest.approx(1e-6 + 0.1, rel=1e-12)
    assert CostModel.transfer_time(cluster, 2e9, 1, 0) == pytest.approx(5e-6 + 0.2, rel=1e-12)
    # A delay in flight comes on top: the consumer waits for the arrival.
    delayed = dataclasses.replace(cluster, delay=[[0, 3e-4], [0, 0]])
    assert CostModel.transfer_time(delayed, 2e9, 0, 1) == pytest.approx(1e-6 + 0.1 + 3e-4,
                                                                        rel=1e-12)
    assert CostModel.transfer_time(delayed, 2e9, 1, 0) == pytest.approx(5e-6 + 0.2, rel=1e-12)


def test_a_placeholder_is_costed_as_before_without_a_made_up_feed():
    """Grappler costs a Placeholder like a Const; the Empty that stands in for it (so nothing
    allocates a made-up feed) keeps that time, not the memory traffic of writing its output."""
    meta_graph = ingest.load_meta_graph(small_cnn().graph)
    props = grappler.device_properties("CPU", num_cores=4, frequency_mhz=2000,
                                       memory_bandwidth_gbps=20.0)
    times = grappler.measure_costs(meta_graph, "CPU", props)
    images = next(n.name for n in meta_graph.graph_def.node if n.op == "Placeholder")
    const = next(n.name for n in meta_graph.graph_def.node if n.op == "Const")
    assert times[images] == times[const] < 1e-8  # not [8, 32, 32, 3] floats at 20 GB/s
    assert set(times) <= {n.name for n in meta_graph.graph_def.node}  # no stand-in's Const


def test_an_unknown_batch_is_costed_with_the_unknown_dim_its_tensors_are_counted_with(k80x2):
    """A TF1 graph's ``None`` batch: tensor bytes count ``unknown_dim`` per unknown dimension,
    and so must op times (they were the batch-1 estimate, so a large batch looked like a
    small step beside large transfers)."""
    import tensorflow as tf

    def matmuls(batch):
        g = tf.Graph()
        with g.as_default():
            x = tf.compat.v1.placeholder(tf.float32, [batch, 512], name="x")
            w = tf.compat.v1.get_variable("w", [512, 512])
            tf.reduce_sum(tf.matmul(tf.matmul(x, w, name="m1"), w, name="m2"), name="y")
        return ingest.load_meta_graph(g)

    def times(meta_graph, unknown_dim):
        graph = ingest.to_opgraph(meta_graph, unknown_dim=unknown_dim)
        model = AnalyticalCostModel(meta_graph, unknown_dim=unknown_dim)
        op_time = model.op_time(graph, k80x2)
        return {name: op_time[graph.index(name)] for name in ("m1", "m2")}, graph

    free = matmuls(None)
    for batch in (1, 256):
        want, static = times(matmuls(batch), 1)
        got, graph = times(free, batch)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-9, err_msg=name)
        assert graph.output_bytes[graph.index("m1")] == static.output_bytes[static.index("m1")]
    assert not graph.shape_known[graph.index("m1")]  # still unknown: the report says so
    big, _ = times(free, 256)
    small, _ = times(free, 1)
    assert big["m1"][GPU0] > 3 * small["m1"][GPU0]  # (the weights' reads are shared)


@pytest.mark.slow
def test_a_placeholder_too_big_to_allocate_is_infeasible_and_the_process_lives(run_scripts):
    """A [10**9, 4096] float placeholder made Grappler allocate a 16 TB made-up feed while
    costing, and the process died (SIGSEGV); it must be an InfeasiblePlacementError."""
    code = (
        "import tensorflow as tf, tf_autoplace\n"
        "g = tf.Graph()\n"
        "with g.as_default():\n"
        "    x = tf.compat.v1.placeholder(tf.float32, [10**9, 4096], name='x')\n"
        "    tf.reduce_sum(x * 2.0, name='y')\n"
        "try:\n"
        "    tf_autoplace.autoplace(g, cluster='testdata/cpu2_independent.pbtxt', placer='m_etf',\n"
        "                           progress=False)\n"
        "except tf_autoplace.InfeasiblePlacementError as e:\n"
        "    print('InfeasiblePlacementError:', e)\n"
        "print('alive')\n")
    returncode, stdout, stderr = run_scripts({"big": ["-c", code]})["big"]
    assert returncode == 0, stderr[-2000:]
    lines = stdout.splitlines()
    assert lines[-1] == "alive"
    assert lines[0].startswith("InfeasiblePlacementError: "), stdout
