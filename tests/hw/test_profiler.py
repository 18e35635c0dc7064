"""The profiler: a small training graph run and traced on a logical CPU gives a CostProfile that
survives the proto's text format and drives ProfileCostModel."""

import numpy as np
import pytest
from google.protobuf import text_format

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.cost import AnalyticalCostModel
from tf_autoplace.cost.profile import ProfileCostModel
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph import ingest
from tf_autoplace.hw.profiler import op_times, profile_ops
from tf_autoplace.hw.runner import RunConfig
from tf_autoplace.hw.trace import TracedStep
from tf_autoplace.hw.workload import Workload
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.proto import cost_profile_pb2
from tf_autoplace.testing.graphs import small_cnn

CONFIG = RunConfig(steps=1, warmup_steps=1, trace_steps=2)


@pytest.fixture(scope="module")
def cnn():
    tg = small_cnn()
    workload = Workload.from_graph(tg.graph, fetches=[tg.train_op], feeds=tg.feed)
    return tg, workload, profile_ops(workload, kinds=("CPU",), config=CONFIG,
                                     description="small_cnn")


def test_profile_round_trips_through_the_proto_and_drives_the_cost_model(cnn):
    tg, workload, profile = cnn
    text = text_format.MessageToString(profile)
    back = text_format.Parse(text, cost_profile_pb2.CostProfile())
    assert back == profile
    assert back.description.startswith("small_cnn; median of 2 traced steps")
    by_name = {op.name: op for op in back.op}
    names = [n.name for n in workload.graph_def.node]
    assert set(by_name) == set(names)  # every graph op, on the one kind profiled
    assert {op.device_kind for op in back.op} == {"CPU"}
    # Grappler fuses Conv2D, BiasAdd and Relu into one kernel named after the Relu: the Relu
    # carries the time, the Conv2D did not run as a kernel of its own.
    assert by_name["left/Relu"].compute_time_us > 0
    assert by_name["left/Conv2D"].compute_time_us == 0
    assert by_name["left/Conv2D"].op_type == "Conv2D"
    # An initializer is outside a step: it costs nothing in one.
    assert by_name["left/kernel/Assign"].compute_time_us == 0

    meta_graph = ingest.load_meta_graph(tg.graph)
    cluster = Cluster.from_file("testdata/cpu2_independent.pbtxt")
    model = ProfileCostModel.from_text(text, fallback=AnalyticalCostModel(meta_graph))
    problem, _ = build_problem(meta_graph, cluster, cost_model=model)
    i = problem.graph.names.index("left/Relu")
    expected = by_name["left/Relu"].compute_time_us * 1e-6
    np.testing.assert_allclose(problem.op_time[i], expected / np.array(
        [d.speed for d in cluster.devices]))


def test_op_times_take_each_ops_span_and_sum_repeats():
    trace = TracedStep(devices=("/job:localhost/replica:0/task:0/device:CPU:0",
                                "/job:localhost/replica:0/task:0/device:GPU:0/stream:all"),
                       device=np.array([0, 0, 0, 1], np.int32),
                       names=("a", "loop/body", "loop/body", "b"),
                       start=np.array([0.0, 1.0, 3.0, 0.0]), end=np.array([0.5, 2.0, 3.5, 9.0]))
    cpu = op_times(trace, "CPU", ["a", "loop/body", "b"])
    assert cpu == pytest.approx({"a": 0.5, "loop/body": 1.5})  # two executions in one step
    assert op_times(trace, "GPU", ["a", "loop/body", "b"]) == pytest.approx({"b": 9.0})


def test_profiling_needs_a_traced_step(cnn):
    _, workload, _ = cnn
    with pytest.raises(ConfigError, match="trace_steps >= 1, got 0"):
        profile_ops(workload, config=RunConfig(steps=1, trace_steps=0))
