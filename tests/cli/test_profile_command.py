"""``tf-autoplace profile --out_cluster`` end to end on a small CNN, as a user runs it: the profile
holds what the runs showed (ops that did not run, the run's steps, a MaxPoolGrad's time apart
from its MaxPool) and the cluster the Send cost and the cores the profile measured. Few steps:
the figures are checked for where they go, never for their values."""

import math
import re

import pytest
from google.protobuf import text_format
from tensorflow.python.util import _pywrap_util_port

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.hw.link_fit import LATENCIES_S
from tf_autoplace.hw.profiler import parallelism
from tf_autoplace.proto import cost_profile_pb2
from tf_autoplace.testing import free_batch_graph, small_cnn

# Whether this process's TensorFlow rewrites ops to oneDNN kernels: off with
# TF_ENABLE_ONEDNN_OPTS=0, and off by default on CPUs without the features TensorFlow asks of
# them (an AMD EPYC without AVX-512 here), where MaxPoolGrad has one kernel wherever it runs.
ONEDNN = _pywrap_util_port.IsMklEnabled()


@pytest.fixture(scope="module")
def profiled(tmp_path_factory, run_scripts, write_proto):
    workdir = tmp_path_factory.mktemp("profile")
    tg = small_cnn()
    write_proto(workdir / "cnn.pb", tg.graph.as_graph_def())
    results = run_scripts({"profile": [
        "-m", "tf_autoplace.cli", "profile", f"--graph={workdir / 'cnn.pb'}", "--fetches=train",
        f"--out_profile={workdir / 'profile.pbtxt'}", f"--out_cluster={workdir / 'local.pbtxt'}",
        "--steps=2", "--warmup_steps=1", "--trace_steps=2", "--transfer_steps=3"]})
    code, stdout, stderr = results["profile"]
    assert code == 0, stderr
    profile = text_format.Parse((workdir / "profile.pbtxt").read_text(),
                                cost_profile_pb2.CostProfile())
    return profile, Cluster.from_file(workdir / "local.pbtxt"), stdout


@pytest.mark.slow
def test_the_profile_says_which_ops_ran_and_the_steps_of_the_run(profiled):
    profile, _, _ = profiled
    by_name = {op.name: op for op in profile.op}
    assert by_name["left/Conv2D"].did_not_run  # fused into the Relu's kernel
    assert not by_name["left/Relu"].did_not_run and by_name["left/Relu"].compute_time_us > 0
    assert [run.device_kind for run in profile.run] == ["CPU"]
    assert profile.run[0].step_time_us > 0 and profile.run[0].traced_step_time_us > 0


@pytest.mark.skipif(not ONEDNN, reason="oneDNN is off: MaxPoolGrad has one kernel")
def test_the_profile_times_the_max_pool_grad_apart_from_its_max_pool(profiled):
    profile, _, _ = profiled
    partnered = {op.name: op for op in profile.op if op.partner}
    grad = partnered["gradients/right_pool/MaxPool_grad/MaxPoolGrad"]
    assert grad.partner == "right_pool/MaxPool"
    assert grad.partner_apart_time_us > 0
    assert set(partnered) == {grad.name}  # the only op of another type with "Grad" in it


def test_the_cluster_gets_the_send_cost_and_the_cores_the_profile_measured(profiled):
    profile, cluster, stdout = profiled
    send_us = float(re.search(r"one Send adds ([0-9.]+) us of CPU work", stdout).group(1))
    # The ladder's Send cost is where the fit on the graph starts; the fit is what is written.
    fitted_us, before_us = map(float, re.search(
        r"links within a core group fitted on the graph: ([0-9.]+) us a transfer "
        r"\(before: ([0-9.]+) us\)", stdout).groups())
    assert before_us == pytest.approx(send_us, abs=0.06)
    assert cluster.latency[0, 1] * 1e6 == pytest.approx(fitted_us, abs=0.06)
    assert min(abs(cluster.latency[0, 1] - grid) for grid in LATENCIES_S) < 1e-15
    assert cluster.latency[1, 0] == cluster.latency[0, 1]
    ran = parallelism(profile)
    assert f"ran {ran:.2f} ops at once" in stdout
    host = Cluster.local(num_logical_cpus=2)
    assert cluster.core_groups == ((host.core_groups[0][0],
                                    int(min(max(math.floor(ran + 0.5), 1), host.core_groups[0][1]))),)
    assert [d.name for d in cluster.devices] == [d.name for d in host.devices]


@pytest.mark.slow  # seconds: profiles a graph in a process of its own
def test_a_graph_of_unknown_batch_size_is_profiled_with_the_feed_shape_given(
        tmp_path, run_scripts, write_proto):
    write_proto(tmp_path / "free.pb", free_batch_graph().as_graph_def())
    command = ["-m", "tf_autoplace.cli", "profile", f"--graph={tmp_path / 'free.pb'}",
               "--steps=2", "--warmup_steps=1", "--trace_steps=2", "--nopartners"]
    results = run_scripts({
        "fed": command + ["--feed_shape=x=8,16", f"--out_profile={tmp_path / 'p.pbtxt'}"],
        "unfed": command + [f"--out_profile={tmp_path / 'q.pbtxt'}"]})
    code, _, stderr = results["fed"]
    assert code == 0, stderr
    profile = text_format.Parse((tmp_path / "p.pbtxt").read_text(),
                                cost_profile_pb2.CostProfile())
    assert any(op.name == "MatMul" for op in profile.op)
    code, _, stderr = results["unfed"]
    assert code != 0 and "--feed_shape=NAME=D0,D1" in stderr
    assert not (tmp_path / "q.pbtxt").exists()
