"""Timeline views of a simulated step: Chrome trace JSON, PNG report, and their front doors
(``PlacementReport.write_*`` and ``tf-autoplace place --trace_json/--plot_png``)."""

import json
import os
import sys

import numpy as np
import pytest

from tf_autoplace.core.cluster import Cluster, Device
from tf_autoplace.cost import TableCostModel
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.outputs import timeline
from tf_autoplace.outputs.report import PlacementReport
from tf_autoplace.sim import Simulator


GB = 10**9
CPU2 = "testdata/cpu2_independent.pbtxt"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# A fork-join with a control edge 1 -> 4: ops 0, 1, 2, 5 on GPU:0, ops 3, 4 on GPU:1, so
# op0's tensor and op4's tensor cross devices, and the control edge sends a 0-byte dummy.
EDGES = [(0, 1, 4000), (1, 2, 4000), (0, 3, 8000), (3, 4, 8000), (2, 5, 4000), (4, 5, 2000)]
PLACEMENT = np.array([0, 0, 0, 1, 1, 0])


def _step(placement=PLACEMENT, gpu_memory=10 * GB, persistent=None):
    graph = from_edges(6, EDGES, control=[(1, 4)], persistent_bytes=persistent,
                       op_types=["Const", "MatMul", "Relu", "Conv2D", "Relu", "AddN"],
                       names=["in", "a/mm", "a/relu", "b/conv", "b/relu", "sum"])
    devices = [Device(f"/job:localhost/replica:0/task:0/device:GPU:{i}", "GPU",
                      memory_bytes=gpu_memory) for i in range(2)]
    cluster = Cluster.uniform(devices, bandwidth_gbps=1.0, latency_us=10.0)
    op_time = TableCostModel({"GPU": np.array([1, 2, 3, 4, 5, 6]) * 1e-3}).op_time(graph, cluster)
    sim = Simulator(graph, cluster, op_time).run(placement)
    return graph, cluster, placement, sim


def _x_events(trace, cat):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == cat]


def test_chrome_trace_has_one_event_per_op_on_its_device_lane_with_sim_times():
    graph, cluster, placement, sim = _step()
    trace = json.loads(json.dumps(timeline.chrome_trace(graph, cluster, placement, sim)))
    ops = _x_events(trace, "Op")
    assert sorted(e["name"] for e in ops) == sorted(graph.names)  # exactly one per op
    for e in ops:
        i = graph.index(e["name"])
        assert e["pid"] == placement[i] and e["tid"] == timeline.OPS_TID
        assert e["ts"] == pytest.approx(sim.start[i] * 1e6, abs=1e-6)
        assert e["dur"] == pytest.approx((sim.end[i] - sim.start[i]) * 1e6, abs=1e-6)
        assert e["args"]["op"] == graph.op_types[i]
    # hand check: "sum" (6 ms) starts when b/relu's 2000 B reach GPU:0: "in" (1 ms), its 8000 B
    # to GPU:1 (10 + 8 us), b/conv (4 ms), b/relu (5 ms), then 10 + 2 us: 10.030 ms.
    (last,) = [e for e in ops if e["name"] == "sum"]
    assert last["ts"] == pytest.approx(10_030.0) and last["dur"] == pytest.approx(6_000.0)


def test_chrome_trace_lanes_are_named_after_devices():
    graph, cluster, placement, sim = _step()
    trace = timeline.chrome_trace(graph, cluster, placement, sim)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == dict(enumerate(cluster.names))
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {(d, t): n for d in range(2)
                       for t, n in ((timeline.OPS_TID, "ops"),
                                    (timeline.TRANSFERS_TID, "transfers out"))}


def test_chrome_trace_transfers_sit_on_the_sender_lane():
    graph, cluster, placement, sim = _step()
    xfers = _x_events(timeline.chrome_trace(graph, cluster, placement, sim), "Transfer")
    # in -> GPU:1 (8000 B), ^a/mm -> GPU:1 (control dummy), b/relu -> GPU:0 (2000 B).
    assert sim.num_transfers == len(xfers) == 3
    got = {e["name"]: e for e in xfers}
    assert set(got) == {"in -> GPU:1", "^a/mm -> GPU:1", "b/relu -> GPU:0"}
    assert [got[k]["args"]["bytes"] for k in sorted(got)] == [0, 2000, 8000]
    for x in range(sim.num_transfers):
        (e,) = [e for e in xfers if e["ts"] == pytest.approx(sim.transfer_start[x] * 1e6)
                and e["pid"] == sim.transfer_src[x]]
        assert e["tid"] == timeline.TRANSFERS_TID
        assert e["dur"] == pytest.approx((sim.transfer_end[x] - sim.transfer_start[x]) * 1e6)
        assert e["args"]["dst"] == cluster.names[sim.transfer_dst[x]]


def test_write_chrome_trace_writes_parsable_json(tmp_path):
    graph, cluster, placement, sim = _step()
    path = tmp_path / "trace.json"
    timeline.write_chrome_trace(path, graph, cluster, placement, sim)
    with open(path, encoding="utf-8") as f:
        assert json.load(f) == timeline.chrome_trace(graph, cluster, placement, sim)


def test_chrome_trace_rejects_a_step_that_never_ends():
    graph, cluster, placement, sim = _step()
    kernels = np.ones((6, 2), bool)
    kernels[5] = [True, False]  # "sum" runs only on a CPU, the cluster has none
    graph = from_edges(6, EDGES, kernels=kernels)
    op_time = TableCostModel({"GPU": np.full(6, 1e-3)}).op_time(graph, cluster)
    sim = Simulator(graph, cluster, op_time).run(placement)
    assert sim.makespan == np.inf
    with pytest.raises(ConfigError, match="no timeline"):
        timeline.chrome_trace(graph, cluster, placement, sim)


def test_plot_report_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    # 3 GB of variables on GPU:0 with 2 GB capacity: the memory panel shows an overflow.
    graph, cluster, placement, sim = _step(gpu_memory=2 * GB,
                                           persistent=[3 * GB, 0, 0, GB, 0, 0])
    path = tmp_path / "report.png"
    timeline.plot_report(path, graph, cluster, placement, sim)
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 20_000  # two panels with text, not an empty canvas


def test_memory_panel_shows_each_device_against_its_own_capacity(tmp_path):
    """A 10.7 GB GPU beside a 524 GB device: 3.2 GB on the GPU is 30% of its bar's scale, not
    a sliver of the host's (the panel draws memory_shares)."""
    graph = from_edges(6, EDGES, control=[(1, 4)],
                       persistent_bytes=[3.2e9, 0, 0, 1e9, 0, 0])
    devices = [Device("/job:localhost/replica:0/task:0/device:GPU:0", "GPU",
                      memory_bytes=10_700_000_000),
               Device("/job:localhost/replica:0/task:0/device:GPU:1", "GPU",
                      memory_bytes=524_000_000_000)]
    cluster = Cluster.uniform(devices, bandwidth_gbps=1.0, latency_us=10.0)
    op_time = TableCostModel({"GPU": np.full(6, 1e-3)}).op_time(graph, cluster)
    sim = Simulator(graph, cluster, op_time).run(PLACEMENT)
    variables, peak = timeline.memory_shares(graph, cluster, PLACEMENT, sim)
    np.testing.assert_allclose(variables, [100 * 3.2e9 / 10.7e9, 100 * 1e9 / 524e9])
    np.testing.assert_allclose(peak, 100 * sim.peak_memory / cluster.memory)
    assert peak[0] > 29.9 and peak[0] >= variables[0]
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    timeline.plot_report(tmp_path / "shares.png", graph, cluster, PLACEMENT, sim)
    assert (tmp_path / "shares.png").read_bytes()[:8] == PNG_MAGIC


def test_plot_report_without_matplotlib_asks_for_the_plot_extra(tmp_path, monkeypatch):
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(ConfigError, match=r"tf_autoplace\[plot\]"):
        timeline.plot_report(tmp_path / "x.png", *_step())
    assert not (tmp_path / "x.png").exists()


def test_report_without_timeline_says_so(tmp_path):
    report = PlacementReport(placer="m_etf", step_time_s=1.0, lower_bound_s=0.5, devices=(),
                             baseline_step_time_s=1.0, baseline_devices=(), num_ops=0,
                             num_groups=0, num_colocation_groups=0, ops_with_unknown_shapes=0,
                             timings_s={})
    with pytest.raises(ConfigError, match="no timeline"):
        report.write_chrome_trace(tmp_path / "t.json")
    with pytest.raises(ConfigError, match="no timeline"):
        report.write_plot(tmp_path / "t.png")
    # A path that cannot be written: a ConfigError naming it, before anything (it was the raw
    # FileNotFoundError / IsADirectoryError of the write).
    for write in (report.write_chrome_trace, report.write_plot):
        with pytest.raises(ConfigError, match="does not exist"):
            write(tmp_path / "missing" / "t.json")
        with pytest.raises(ConfigError, match="is a directory"):
            write(tmp_path)


@pytest.fixture(scope="module")
def cnn_graph_def():
    from tf_autoplace.testing import small_cnn

    return small_cnn().graph.as_graph_def()


def test_autoplace_report_writes_trace_and_plot(tmp_path, cnn_graph_def):
    import tf_autoplace

    report = tf_autoplace.autoplace(cnn_graph_def, cluster=CPU2, placer="m_etf")
    assert "timeline" not in report.to_dict()
    report.write_chrome_trace(tmp_path / "t.json")
    with open(tmp_path / "t.json", encoding="utf-8") as f:
        ops = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X" and e["cat"] == "Op"]
    placed = {e["name"]: report.devices[e["pid"]].name for e in ops}
    assert placed == report.assignment  # every op once, on the lane of the device it got
    assert len(set(placed.values())) == 2
    assert max(e["ts"] + e["dur"] for e in ops) == pytest.approx(report.step_time_s * 1e6)
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    report.write_plot(tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:8] == PNG_MAGIC


def test_the_reports_writers_replace_a_link_and_keep_the_old_file_when_a_write_fails(
        tmp_path, cnn_graph_def, monkeypatch):
    # report.write_chrome_trace hung on a link to a FIFO, wrote through a link into its
    # target, and a failed write (a full disk) left the old trace cut short: the command's
    # --trace_json did none of these.
    import errno

    import tf_autoplace
    from tf_autoplace.outputs import files

    report = tf_autoplace.autoplace(cnn_graph_def, cluster=CPU2, placer="m_etf")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "theirs.json").write_text("the user's")
    os.symlink(tmp_path / "fifo", tmp_path / "to_fifo.json")
    os.symlink(tmp_path / "theirs.json", tmp_path / "to_theirs.json")
    for name in ("to_fifo.json", "to_theirs.json"):
        report.write_chrome_trace(tmp_path / name)  # (returns: the link is replaced)
        assert not os.path.islink(tmp_path / name)
        assert json.loads((tmp_path / name).read_text())["traceEvents"]
    assert (tmp_path / "theirs.json").read_text() == "the user's"
    old = (tmp_path / "to_theirs.json").read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", full)
    with pytest.raises(OSError, match="No space left on device"):
        report.write_chrome_trace(tmp_path / "to_theirs.json")
    assert (tmp_path / "to_theirs.json").read_bytes() == old


def _run_tool(tmp_path, graph_def, *flags):
    """Run ``tf-autoplace place``'s main in this process (TF is already loaded; a subprocess
    would spend seconds importing it again). Returns (exit status, stderr)."""
    import contextlib
    import io

    from absl import flags as absl_flags

    from tf_autoplace.cli import place  # defines its flags once per process

    graph_pb = tmp_path / "in.pb"
    graph_pb.write_bytes(graph_def.SerializeToString())
    argv = ["tf-autoplace place", f"--input={graph_pb}", f"--output={tmp_path / 'out.pb'}",
            f"--cluster={CPU2}", *flags]
    stderr = io.StringIO()
    try:
        absl_flags.FLAGS(argv)
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            status = place.main(argv)
    finally:
        absl_flags.FLAGS.unparse_flags()
    return status, stderr.getvalue()


def test_tool_writes_trace_plot_and_placement_proto(tmp_path, cnn_graph_def):
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    from google.protobuf import text_format

    from tf_autoplace.proto import placement_pb2

    status, err = _run_tool(tmp_path, cnn_graph_def, "--placer=m_etf",
                            f"--trace_json={tmp_path / 't.json'}",
                            f"--plot_png={tmp_path / 'p.png'}",
                            f"--placement_pb={tmp_path / 'r.pbtxt'}")
    assert status == 0, err
    with open(tmp_path / "t.json", encoding="utf-8") as f:
        trace = json.load(f)
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG_MAGIC
    result = text_format.Parse((tmp_path / "r.pbtxt").read_text(), placement_pb2.PlacementResult())
    assert result.placer == "m_etf" and result.HasField("seed") and result.seed == 0
    assert len(result.op) == len(cnn_graph_def.node)
    ops = {e["name"]: e["pid"] for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "Op"}
    assert ops == {o.name: [d.name for d in result.device].index(o.device) for o in result.op}


def test_tool_fails_clearly_on_unwritable_trace_path(tmp_path, cnn_graph_def):
    status, err = _run_tool(tmp_path, cnn_graph_def, "--placer=m_etf",
                            f"--trace_json={tmp_path / 'missing_dir' / 't.json'}")
    assert status != 0
    assert "error: --trace_json" in err and "missing_dir' does not exist" in err
    assert not (tmp_path / "missing_dir").exists()
    assert not (tmp_path / "out.pb").exists()  # checked before the work: nothing written
