"""Cost graphs (protos/cost_graph.proto): a hand-made graph read and placed, round trips in the
three forms, a typed error for every malformed file, and a zoo graph exported from the TF path
placed exactly as the TF path places it."""

import dataclasses
import json
import re

import numpy as np
import pytest
from google.protobuf import json_format, text_format
from tensorflow.core.framework import cost_graph_pb2
from tensorflow.core.protobuf import config_pb2

import tf_autoplace
from tf_autoplace import zoo
from tf_autoplace.core.cluster import Cluster, Device, resolve_cluster
from tf_autoplace.errors import ConfigError, InvalidGraphError
from tf_autoplace.graph import costgraph, ingest
from tf_autoplace.graph.opgraph import KERNEL_KINDS, OpGraph
from tf_autoplace.pipeline.prepare import build_problem, cost_graph_problem, export_cost_graph
from tf_autoplace.placers import AutoPlacer, PlacetoPlacer, PostPlacer
from tf_autoplace.placers.placeto.env import EnvConfig
from tf_autoplace.testing import problems

# x (input, CPU only) and w (a 4 MB variable) feed matmul; w/read sits with w; loss reads
# matmul's second output twice and waits for w/read.
HAND = """
format_version: 2
description: "hand-made"
op { name: "x" type: "Placeholder" output_bytes: 4096
     time { device_kind: "CPU" seconds: 1e-5 } }
op { name: "w" type: "VarHandleOp" persistent_bytes: 4000000 output_bytes: 0
     time { device_kind: "GPU" seconds: 2e-6 } time { device_kind: "CPU" seconds: 2e-6 }
     colocation_group: "var" }
op { name: "w/read" type: "ReadVariableOp" output_bytes: 4000000 input { op: "w" }
     time { device_kind: "GPU" seconds: 3e-6 } time { device_kind: "CPU" seconds: 4e-5 }
     colocation_group: "var" }
op { name: "matmul" type: "MatMul" output_bytes: [1024, 2048]
     input { op: "x" } input { op: "w/read" }
     time { device_kind: "GPU" seconds: 2e-4 } time { device_kind: "CPU" seconds: 3e-3 } }
op { name: "loss" type: "Sum" output_bytes: 4 shape_unknown: true
     input { op: "matmul" output: 1 } input { op: "matmul" output: 1 }
     control_input: "w/read"
     time { device_kind: "GPU" seconds: 1e-5 } time { device_kind: "CPU" seconds: 1e-5 } }
"""

GB = 10**9


def _cluster():
    return Cluster.uniform([Device("/device:GPU:0", "GPU", 10 * GB, speed=2.0),
                            Device("/device:GPU:1", "GPU", 10 * GB),
                            Device("/device:CPU:0", "CPU", 100 * GB)],
                           bandwidth_gbps=1.0, latency_us=10.0)


def _same(a: costgraph.CostGraph, b: costgraph.CostGraph):
    for field in ("persistent_bytes", "tensor_op", "tensor_bytes", "edge_tensor", "edge_dst",
                  "ctrl_src", "ctrl_dst", "colocation", "kernels", "shape_known",
                  "tensor_alias"):
        np.testing.assert_array_equal(getattr(a.graph, field), getattr(b.graph, field), field)
    assert (a.graph.names, a.graph.op_types) == (b.graph.names, b.graph.op_types)
    assert a.times.keys() == b.times.keys()
    for kind in a.times:
        np.testing.assert_array_equal(a.times[kind], b.times[kind])
    assert a.description == b.description


def test_a_hand_made_cost_graph_reads_as_written():
    cg = costgraph.decode(HAND.encode(), "text")
    g = cg.graph
    assert g.names == ("x", "w", "w/read", "matmul", "loss")
    assert g.op_types[3] == "MatMul" and cg.description == "hand-made"
    assert g.persistent_bytes.tolist() == [0, 4_000_000, 0, 0, 0]
    # Tensors op by op in output order: x, w, w/read, matmul:0, matmul:1, loss.
    assert g.tensor_op.tolist() == [0, 1, 2, 3, 3, 4]
    assert g.tensor_bytes.tolist() == [4096, 0, 4_000_000, 1024, 2048, 4]
    assert list(zip(g.edge_tensor.tolist(), g.edge_dst.tolist())) == [
        (1, 2), (0, 3), (2, 3), (4, 4), (4, 4)]
    assert list(zip(g.ctrl_src.tolist(), g.ctrl_dst.tolist())) == [(2, 4)]
    assert g.colocation.tolist() == [0, 1, 1, 2, 3]
    assert g.kernel_kinds == KERNEL_KINDS == ("CPU", "GPU")
    assert g.kernels.tolist() == [[True, False]] + [[True, True]] * 4
    assert g.shape_known.tolist() == [True] * 4 + [False]
    np.testing.assert_array_equal(cg.times["GPU"], [np.inf, 2e-6, 3e-6, 2e-4, 1e-5])
    np.testing.assert_array_equal(cg.times["CPU"], [1e-5, 2e-6, 4e-5, 3e-3, 1e-5])


def test_a_hand_made_cost_graph_is_costed_with_its_own_times_and_placed(tmp_path):
    path = tmp_path / "hand.costgraph.pbtxt"
    path.write_text(HAND)
    cg = costgraph.read(path)
    problem = cost_graph_problem(cg, _cluster())
    # A device of kind k takes the kind's time over its speed; no kernel, no time.
    expected = np.stack([cg.times["GPU"] / 2.0, cg.times["GPU"], cg.times["CPU"]], axis=1)
    np.testing.assert_array_equal(problem.op_time, expected)

    report = tf_autoplace.place_cost_graph(str(path), cluster=_cluster(), placer="m_etf")
    devices = report.assignment
    assert list(devices) == ["x", "w", "w/read", "matmul", "loss"]
    assert devices["x"] == "/device:CPU:0"  # its only kernel
    assert devices["w"] == devices["w/read"]  # one colocation group
    assert report.graph_def is None and report.num_ops == 5
    assert report.lower_bound_s <= report.step_time_s
    assert report.ops_with_unknown_shapes == 1
    assert any("marks as estimates" in note for note in report.notes)
    assert list(report.timings_s) == ["read", "cost", "group", "place", "bound"]
    placed = problem.simulator.run(np.array([_cluster().index(devices[n]) for n in devices]))
    assert report.step_time_s == placed.makespan  # the report simulates what it returns
    assert {op.name: op.device for op in report.to_proto().op} == devices


@pytest.mark.parametrize("fmt, name", [("text", "g.costgraph.pbtxt"), ("json", "g.json"),
                                       ("binary", "g.costgraph.pb")])
def test_cost_graphs_round_trip_in_every_form(tmp_path, fmt, name):
    hand = costgraph.decode(HAND.encode(), "text")
    made = problems.random_problem(60, seed=3)
    exported = export_cost_graph(made, description="random")
    grouped = costgraph.CostGraph(  # colocation groups of three and two control edges
        graph=dataclasses.replace(made.graph, colocation=np.arange(60) // 3, ctrl_src=[0, 5],
                                  ctrl_dst=[7, 9]),
        times=exported.times, description="grouped")
    assert costgraph.file_format(name) == fmt and costgraph.is_cost_graph_file(name)
    for cg in (hand, exported, grouped):
        path = tmp_path / name
        costgraph.write(path, cg)
        again = costgraph.read(path)
        _same(cg, again)
        assert costgraph.to_proto(again) == costgraph.to_proto(cg)
    if fmt == "json":  # the proto's JSON mapping with its own field names
        doc = json.loads((tmp_path / name).read_text())
        assert doc["format_version"] == 2 and "output_bytes" in doc["op"][0]


def test_buffer_sharing_is_read_from_output_alias_or_the_op_type():
    # w/read is a ReadVariableOp: a view of w (derived from its type). matmul says its second
    # output shares its input 1 (w/read's value): a view too, through it.
    cg = costgraph.decode(_hand_with("output_bytes: [1024, 2048]",
                                     "output_bytes: [1024, 2048] output_alias: [-1, 1]"), "text")
    g = cg.graph
    first = {g.names[op]: t for t, op in reversed(list(enumerate(g.tensor_op.tolist())))}
    assert g.tensor_alias[first["w/read"]] == -2
    assert g.tensor_alias[first["matmul"]] == -1
    assert g.tensor_alias[first["matmul"] + 1] == first["w/read"]
    # Written where the type would say otherwise, so it reads back the same.
    again = costgraph.decode(costgraph.encode(cg, "text"), "text")
    np.testing.assert_array_equal(again.graph.tensor_alias, g.tensor_alias)
    written = {op.name: list(op.output_alias) for op in costgraph.to_proto(cg).op}
    assert written["matmul"] == [-1, 1] and written["w/read"] == []
    # A hand-built graph whose Identity ops do not share (from_edges) keeps that in a file.
    made = problems.random_problem(12, seed=1)
    assert set(made.graph.op_types) == {"Identity"} and (made.graph.tensor_alias == -1).all()
    back = costgraph.decode(costgraph.encode(export_cost_graph(made), "binary"), "binary")
    assert (back.graph.tensor_alias == -1).all()


def test_a_tensor_numbering_that_is_not_op_by_op_comes_back_equivalent():
    # Tensors numbered [op1, op0, op1]: written op by op, read back as [op0, op1, op1].
    graph = OpGraph(
        names=("a", "b", "c"), op_types=("A", "B", "C"), persistent_bytes=[0, 0, 0],
        tensor_op=[1, 0, 1], tensor_bytes=[10, 20, 30], edge_tensor=[1, 0, 2],
        edge_dst=[1, 2, 2], ctrl_src=[], ctrl_dst=[], colocation=[0, 1, 2],
        kernels=np.ones((3, 2), bool), shape_known=[True] * 3)
    cg = costgraph.CostGraph(graph, {"CPU": [1.0] * 3, "GPU": [2.0] * 3})
    again = costgraph.decode(costgraph.encode(cg, "binary"), "binary").graph
    assert again.tensor_op.tolist() == [0, 1, 1] and again.tensor_bytes.tolist() == [20, 10, 30]
    # Every edge still reads the same bytes from the same op.
    for g in (graph, again):
        assert [(int(g.tensor_op[t]), int(g.tensor_bytes[t]), int(d))
                for t, d in zip(g.edge_tensor, g.edge_dst)] == [(0, 20, 1), (1, 10, 2),
                                                                (1, 30, 2)]


def _hand_with(old: str, new: str) -> bytes:
    assert old in HAND
    return HAND.replace(old, new, 1).encode()


@pytest.mark.parametrize("data, message", [
    (_hand_with("format_version: 2", "format_version: 3"),
     "format_version is 3; this reader knows versions 1 and 2"),
    (_hand_with("format_version: 2", ""), r"format_version is 0 \(unset\).*TensorFlow's own "
                                          r"CostGraphDef"),
    (b"format_version: 2", "has no ops"),
    (_hand_with('name: "w/read"', 'name: "w"'), "two ops are named 'w'"),
    (_hand_with('name: "x" type', 'type'), "op 0 of the cost graph has no name"),
    (_hand_with('device_kind: "CPU" seconds: 1e-5 } }', 'device_kind: "TPU" seconds: 1 } }'),
     "op 'x' has a time for device kind 'TPU'"),
    (_hand_with('time { device_kind: "CPU" seconds: 1e-5 } }', "}"), "'x' has no time"),
    (_hand_with("seconds: 2e-4", "seconds: -1"), "'matmul' takes -1.0 s on GPU"),
    (_hand_with("seconds: 2e-4", "seconds: inf"), "'matmul' takes inf s on GPU"),
    (_hand_with("seconds: 2e-4", "seconds: 1e308"), r"times on GPU add up to 1e\+308 s"),
    (_hand_with("persistent_bytes: 4000000", "persistent_bytes: 5000000000000000000"),
     r"byte sizes add up to 5,000,000,000,00\d,\d{3},\d{3} bytes \(op 'w' alone "
     r"5,000,000,000,000,000,000\), more than the 4,611,686,018,427,387,904 this"),
    (_hand_with("output_bytes: 4096", "output_bytes: 9223372036854775807"),
     r"byte sizes add up to 9,223,372,036,8\d\d,\d{3},\d{3} bytes \(op 'x' alone"),
    # Just over the limit: the two figures differ where the digits show it (was "4.61e+18
    # bytes ... more than the 4.61e+18").
    (_hand_with("persistent_bytes: 4000000", "persistent_bytes: 4611686018427387904"),
     r"add up to 4,611,686,018,43\d,\d{3},\d{3} bytes .* more than the "
     r"4,611,686,018,427,387,904 this package can count"),
    (_hand_with('time { device_kind: "CPU" seconds: 3e-3 }',
                'time { device_kind: "GPU" seconds: 3e-3 }'),
     "'matmul' lists device kind 'GPU' twice"),
    (_hand_with("output_bytes: 4096", "output_bytes: -1"), "'x' has a negative byte size"),
    (_hand_with('input { op: "x" }', 'input { op: "y" }'), "'matmul' reads 'y', which does not"),
    (_hand_with("output: 1 }", "output: 2 }"), r"reads output 2 of 'matmul', which has 2 output"),
    (_hand_with('control_input: "w/read"', 'control_input: "z"'), "'loss' waits for 'z'"),
    (_hand_with('op { name: "x" type: "Placeholder"',
                'op { name: "x" type: "Placeholder" control_input: "loss"'), "cycle"),
    (b'format_version: 1 op { name: "a" bogus: 3 }', "not a text CostGraph"),
    (_hand_with("output_bytes: [1024, 2048]", "output_bytes: [1024, 2048] output_alias: -1"),
     "'matmul' has 1 output_alias entries for 2 outputs"),
    (_hand_with("output_bytes: [1024, 2048]", "output_bytes: [1024, 2048] output_alias: [-1, 2]"),
     r"'matmul' has output_alias 2; expected -1 .* \[0, 2\)"),
])
def test_every_malformed_cost_graph_is_a_typed_error_naming_the_problem(data, message):
    with pytest.raises(InvalidGraphError, match=message):
        costgraph.decode(data, "text", what="'g.pbtxt'")


def test_a_while_loops_back_edge_is_refused_naming_it():
    # RunMetadata.cost_graph keeps a v1 while loop's NextIteration -> Merge input; a cost
    # graph leaves it out (each step runs the loop body once).
    t = 'time { device_kind: "CPU" seconds: 1e-6 }'
    text = f"""format_version: 1
op {{ name: "x" type: "Const" output_bytes: 4 {t} }}
op {{ name: "w/Enter" type: "Enter" output_bytes: 4 input {{ op: "x" }} {t} }}
op {{ name: "w/Merge" type: "Merge" output_bytes: [4, 4] input {{ op: "w/Enter" }}
     input {{ op: "w/NextIteration" }} {t} }}
op {{ name: "w/add" type: "AddV2" output_bytes: 4 input {{ op: "w/Merge" }} {t} }}
op {{ name: "w/NextIteration" type: "NextIteration" output_bytes: 4 input {{ op: "w/add" }}
     {t} }}
"""
    with pytest.raises(InvalidGraphError, match="'w/Merge' reads 'w/NextIteration': a v1 while "
                                                "loop's back edge"):
        costgraph.decode(text.encode(), "text")
    costgraph.decode(text.replace('input { op: "w/NextIteration" }', "").encode(), "text")


def test_file_errors_name_the_file(tmp_path):
    with pytest.raises(InvalidGraphError, match="cannot read cost graph '.*missing.json'"):
        costgraph.read(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format_version": 1, "op": [{"name": "a", "outputBytes": ["x"]}]}')
    with pytest.raises(InvalidGraphError, match="'.*bad.json' is not a json CostGraph"):
        costgraph.read(bad)
    truncated = tmp_path / "t.costgraph.pb"
    truncated.write_bytes(costgraph.encode(costgraph.decode(HAND.encode(), "text"),
                                           "binary")[:-7])
    with pytest.raises(InvalidGraphError, match="t.costgraph.pb"):
        costgraph.read(truncated)
    with pytest.raises(tf_autoplace.ClusterSpecError, match="k80x3"):
        tf_autoplace.place_cost_graph(tmp_path / "missing.json", cluster="k80x3")
    # A file's contents where its path belongs: said so, without the contents in the message.
    with pytest.raises(InvalidGraphError, match="looks like a cost graph's contents") as error:
        costgraph.read(HAND.encode())
    assert len(str(error.value)) < 300
    assert not costgraph.is_cost_graph_file("model.pbtxt")  # a GraphDef stays a GraphDef


def test_a_cost_graph_whose_ops_all_take_no_time_is_placed_and_reported():
    """Every op at 0 s (a step whose ops a profile saw as no kernel of their own): the report's
    ratios divided by the 0 s step and the auto placer's summary by its 0 s start
    (ZeroDivisionError), Post's update made NaN logits (ConfigError). Now it is placed, and
    every ratio of two 0 s steps is 1."""
    zero = costgraph.decode(re.sub(r"seconds: [0-9.e-]+", "seconds: 0", HAND).encode(), "text")
    for placer in (AutoPlacer(max_samples=8), PostPlacer(max_samples=8), "m_etf"):
        report = tf_autoplace.place_cost_graph(zero, cluster="testdata/cpu2_independent.pbtxt", placer=placer,
                                               progress=False)
        assert report.step_time_s == report.baseline_step_time_s == report.lower_bound_s == 0
        assert report.speedup == report.ratio_to_lower_bound == 1.0
        assert "(predicted speedup 1.00x)" in str(report)
        assert json.loads(report.to_json())["ratio_to_lower_bound"] == 1.0
        assert not [n for n in report.notes if "LP lower bound" in n]  # nothing to solve


def test_a_cost_graph_proto_is_placed_and_any_other_object_is_a_config_error():
    """place_cost_graph read anything that is not a CostGraph as a path: its own proto, or
    TensorFlow's RunMetadata.cost_graph (a CostGraphDef, another format), raised TypeError."""
    proto = costgraph.to_proto(costgraph.decode(HAND.encode(), "text"))
    report = tf_autoplace.place_cost_graph(proto, cluster=_cluster(), placer="m_etf")
    assert report.assignment == tf_autoplace.place_cost_graph(
        costgraph.from_proto(proto), cluster=_cluster(), placer="m_etf").assignment
    for other in (cost_graph_pb2.CostGraphDef(), config_pb2.RunMetadata(), 3):
        with pytest.raises(ConfigError, match=f"got a .*{type(other).__name__}"):
            tf_autoplace.place_cost_graph(other, cluster=_cluster(), placer="m_etf")


@pytest.mark.parametrize("fmt", ["binary", "text", "json"])
@pytest.mark.parametrize("kind", ["CostGraphDef", "RunMetadata"])
def test_tensorflows_own_profiling_protos_are_named_as_another_format_in_every_form(fmt, kind):
    # What a user who ran a FULL_TRACE step has at hand; only the binary form said so before.
    tf_graph = cost_graph_pb2.CostGraphDef()
    tf_graph.node.add(name="MatMul", device="/device:CPU:0", compute_cost=12)
    proto = tf_graph if kind == "CostGraphDef" else config_pb2.RunMetadata(cost_graph=tf_graph)
    data = {"binary": proto.SerializeToString(),
            "text": text_format.MessageToString(proto).encode(),
            "json": json_format.MessageToJson(proto).encode()}[fmt]
    # Text and JSON name the format they are (a RunMetadata was called "CostGraphDef"); a
    # binary one parses as an unversioned cost graph.
    said = (r"TensorFlow's own CostGraphDef .* is another format" if fmt == "binary"
            else f"is TensorFlow's own {kind}, not this package's CostGraph")
    with pytest.raises(InvalidGraphError, match=f"{said}: profile the graph with"):
        costgraph.decode(data, fmt)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_tensorflow_graph_def_given_as_a_cost_graph_is_named_as_such(fmt):
    # A model saved as model.json was called "TensorFlow's own CostGraphDef" (both begin with
    # `node`) and its user sent to profile it, not to give it as .pb/.pbtxt.
    data = {"text": b'node {\n  name: "c"\n  op: "Const"\n}\nversions {\n  producer: 2129\n}\n',
            "json": b'{\n "node": [\n  {\n   "name": "c",\n   "op": "Const"\n  }\n ]\n}\n'}[fmt]
    with pytest.raises(InvalidGraphError, match=r"is a TensorFlow GraphDef, not this package's "
                                                r"CostGraph: a file named \*\.json .* give "
                                                r"the GraphDef as \.pb or \.pbtxt"):
        costgraph.decode(data, fmt)


def test_a_cost_profile_or_binary_data_given_as_a_cost_graph_is_named():
    # The profile said only 'no field named "device_kind"'; binary data, "bad UTF-8".
    profile = b'op { name: "a" device_kind: "CPU" compute_time_us: 3 op_type: "MatMul" }\n'
    with pytest.raises(InvalidGraphError, match=r"is a cost profile \(tf-autoplace profile "
                                                r"--out_profile\), not a cost graph: give it "
                                                r"with the graph it times, as --cost_profile"):
        costgraph.decode(profile, "text")
    with pytest.raises(InvalidGraphError, match=r"is not a binary CostGraph \(.*\): "
                                                "TensorFlow's binary RunMetadata, StepStats and "
                                                "CostGraphDef are other formats; profile"):
        costgraph.decode(b"\x0a\x05ab", "binary")  # a field cut short
    with pytest.raises(InvalidGraphError, match=r"is not a json CostGraph \([^\n]*\)$"):
        costgraph.decode(b'{"formatVersion": 1, "bogus": 2}', "json")  # one line


def test_export_needs_one_time_per_device_kind():
    made = problems.random_problem(20, seed=1)
    op_time = made.op_time.copy()
    op_time[:, 1] *= 1.5  # GPU:1 slower than GPU:0 at the same speed: other hardware
    other = type(made)(graph=made.graph, cluster=made.cluster, op_time=op_time,
                       grouping=made.grouping)
    with pytest.raises(ConfigError, match="GPU devices differ in op times"):
        export_cost_graph(other)


@pytest.fixture(scope="module")
def small_nmt():
    model = zoo.build("nmt", layers=2, length=4, batch=4, hidden=32, embedding_dim=32,
                      vocab=100)
    return model.graph.as_graph_def()


@pytest.mark.parametrize("placer", ["m_etf",  # the others: seconds each
                                    pytest.param("metis", marks=pytest.mark.slow),
                                    pytest.param("placeto", marks=pytest.mark.slow)])
def test_a_zoo_graph_exported_to_a_cost_graph_is_placed_as_the_tf_path_places_it(
        small_nmt, tmp_path, placer):
    def make():  # a fresh placer per run; a short sample budget for the learned one
        if placer == "placeto":
            return PlacetoPlacer(max_samples=24, env=EnvConfig(max_groups=16, undo_worse=True))
        return placer

    cluster = resolve_cluster("k80x2")
    tf_report = tf_autoplace.autoplace(small_nmt, cluster="k80x2", placer=make(), seed=4)
    problem, _ = build_problem(ingest.load_meta_graph(small_nmt), cluster)
    path = tmp_path / "nmt.costgraph.pbtxt"
    costgraph.write(path, export_cost_graph(problem, description="small NMT on k80x2"))
    again = cost_graph_problem(costgraph.read(path), cluster)
    np.testing.assert_array_equal(again.op_time, problem.op_time)  # every device, CPU too
    np.testing.assert_array_equal(again.grouping.labels, problem.grouping.labels)
    # Buffer sharing comes back from the op types and inputs as ingestion derived it.
    np.testing.assert_array_equal(again.graph.tensor_alias, problem.graph.tensor_alias)
    assert (problem.graph.tensor_alias != -1).any()
    report = tf_autoplace.place_cost_graph(path, cluster="k80x2", placer=make(), seed=4)

    assert report.assignment == tf_report.assignment
    assert len(set(report.assignment.values())) > 1  # not vacuous: the graph is split
    for field in ("placer", "step_time_s", "lower_bound_s", "lp_lower_bound_s",
                  "baseline_step_time_s", "devices",
                  "baseline_devices", "num_ops", "num_groups", "num_colocation_groups",
                  "ops_with_unknown_shapes", "seed"):
        assert getattr(report, field) == getattr(tf_report, field), field
    if placer == "m_etf":  # the same views as a TF graph's report
        trace = tmp_path / "trace.json"
        report.write_chrome_trace(trace)
        events = json.loads(trace.read_text())["traceEvents"]
        assert {e["name"] for e in events if e.get("cat") == "Op"} == set(report.assignment)
        pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
        report.write_plot(tmp_path / "plot.png")
        assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_host_of_unlimited_memory_is_counted_without_wrapping():
    # INT64_MAX bytes ("unlimited") beside a GPU: the cluster's total must not wrap negative.
    cluster = Cluster.uniform([Device("/device:GPU:0", "GPU", 10 * GB),
                               Device("/device:CPU:0", "CPU", 2**63 - 1)],
                              bandwidth_gbps=1.0, latency_us=10.0)
    cg = costgraph.decode(HAND.encode(), "text")
    report = tf_autoplace.place_cost_graph(cg, cluster=cluster, placer="m_etf", progress=False)
    assert report.num_ops == 5


def _cpu_chain(version: int, ops: int = 30) -> bytes:
    """``ops`` CPU-only ops of 1 ms each in a chain, written in format ``version``."""
    lines = [f"format_version: {version}"]
    for i in range(ops):
        read = f' input {{ op: "op{i - 1}" }}' if i else ""
        lines.append(f'op {{ name: "op{i}" type: "Foo" output_bytes: 64{read} '
                     'time { device_kind: "CPU" seconds: 1e-3 } }')
    return "\n".join(lines).encode()


def test_measured_times_are_not_shrunk_by_a_shipped_specs_speed():
    # k80x2's host has speed 16 (a correction to Grappler's flop count): 30 ms of measured CPU
    # work was predicted as a 1.875 ms step, without a word.
    assert {d.speed for d in resolve_cluster("k80x2").devices if d.kind == "CPU"} == {16.0}
    measured = costgraph.decode(_cpu_chain(2), "text")
    report = tf_autoplace.place_cost_graph(measured, cluster="k80x2", placer="m_etf",
                                           progress=False)
    assert report.step_time_s == pytest.approx(30e-3)
    assert not any("format_version 1" in n for n in report.notes), report.notes
    # A version 1 file keeps its meaning (times at speed 1), and the report says what it did.
    old = costgraph.decode(_cpu_chain(1), "text")
    assert old.format_version == 1
    report = tf_autoplace.place_cost_graph(old, cluster="k80x2", placer="m_etf", progress=False)
    assert report.step_time_s == pytest.approx(30e-3 / 16)
    note = [n for n in report.notes if "format_version 1" in n]
    assert len(note) == 1 and "CPU times by 16" in note[0], report.notes
    # ... and is written back as version 1: the same meaning in the next reader.
    assert costgraph.to_proto(old).format_version == 1
    # On speed-1 devices the two versions are the same, and nothing is said.
    report = tf_autoplace.place_cost_graph(old, cluster="cpu2", placer="m_etf", progress=False)
    assert report.step_time_s == pytest.approx(30e-3)
    assert not any("format_version 1" in n for n in report.notes), report.notes


def test_a_problem_costed_with_what_a_cost_graph_cannot_hold_is_not_exported():
    # A profile's executed graph (folded ops) or partner times: the export simulated other
    # step times than the problem, silently.
    made = problems.random_problem(12, seed=1)
    export_cost_graph(made)  # without them: exported
    with pytest.raises(ConfigError, match="folded or fused away.*cannot hold"):
        export_cost_graph(dataclasses.replace(made, executed=made.graph))
    partner = np.full(made.graph.num_ops, -1, np.int32)
    partner[3] = 4
    with pytest.raises(ConfigError, match="partner op's device.*cannot hold"):
        export_cost_graph(dataclasses.replace(made, partner=partner,
                                              partner_time=made.op_time.copy()))
