"""The committed tf_autoplace/proto/*_pb2.py modules are what protoc makes of protos/*.proto, and
PlacementReport.to_proto() fills the placement proto."""

import glob
import importlib.util
import os
import subprocess
import sys

import pytest

from tf_autoplace.outputs.report import DeviceLoad, PlacementReport

from tests.conftest import REPO

PROTO_DIR = os.path.join(REPO, "protos")
PB2_DIR = os.path.join(REPO, "tf_autoplace", "proto")
PINNED_GRPCIO_TOOLS = "1.85.1"  # as in setup.py's test extra and tools/gen_protos.py

needs_protoc = pytest.mark.skipif(
    importlib.util.find_spec("grpc_tools") is None,
    reason="grpcio-tools is not installed (pip install '.[test]' installs the pinned version)")


def _protos():
    return sorted(glob.glob(os.path.join(PROTO_DIR, "*.proto")))


def _committed(name):
    with open(os.path.join(PB2_DIR, name), "rb") as f:
        return f.read()


def _check_version():
    from importlib import metadata

    version = metadata.version("grpcio-tools")
    assert version == PINNED_GRPCIO_TOOLS, (
        f"grpcio-tools {version} is installed, the committed modules come from "
        f"{PINNED_GRPCIO_TOOLS}: pip install grpcio-tools=={PINNED_GRPCIO_TOOLS}")


def _gen_protos():
    """tools/gen_protos.py as a module (tools/ is scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(
        "gen_protos", os.path.join(REPO, "tools", "gen_protos.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _assert_same(out_dir):
    made = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out_dir, "*_pb2.py")))
    committed = sorted(os.path.basename(p) for p in glob.glob(os.path.join(PB2_DIR, "*_pb2.py")))
    assert made == committed, "a .proto without its module, or a module without its .proto"
    for name in made:
        with open(os.path.join(out_dir, name), "rb") as f:
            assert f.read() == _committed(name), (
                f"tf_autoplace/proto/{name} is out of date: run python tools/gen_protos.py")


@needs_protoc
def test_committed_modules_match_protoc_output(tmp_path):
    _check_version()
    assert len(_protos()) >= 3
    cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_DIR}",
           f"--python_out={tmp_path}", *_protos()]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    strip = _gen_protos().without_version_check
    for path in glob.glob(os.path.join(tmp_path, "*_pb2.py")):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        assert "ValidateProtobufRuntimeVersion" in text  # protoc's own output has the check
        with open(path, "w", encoding="utf-8") as f:
            f.write(strip(text))
    _assert_same(tmp_path)


def test_committed_modules_do_not_refuse_older_protobuf_runtimes():
    # protoc 35.1's check refused every protobuf before 7.35.1, while TensorFlow 2.16-2.19
    # require protobuf below 5 or 6: the package could not be installed beside them.
    gen_protos = _gen_protos()
    for path in glob.glob(os.path.join(PB2_DIR, "*_pb2.py")):
        text = _committed(os.path.basename(path)).decode()
        assert "runtime_version" not in text, path
        assert gen_protos.CHECK_REMOVED in text
    with pytest.raises(ValueError, match="no runtime-version check to take out"):
        gen_protos.without_version_check("# some other protoc's output\n")
    from tf_autoplace.proto import cluster_pb2

    assert cluster_pb2.ClusterSpec(op_overhead_us=2.0).op_overhead_us == 2.0


@needs_protoc
def test_gen_protos_tool_makes_the_committed_modules(tmp_path):
    _check_version()
    done = subprocess.run([sys.executable, os.path.join(REPO, "tools", "gen_protos.py"),
                           f"--out_dir={tmp_path}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("wrote ") == len(_protos())
    _assert_same(tmp_path)


def _report(**kwargs):
    gpu = DeviceLoad(name="/device:GPU:0", kind="GPU", num_ops=2, compute_s=0.25,
                     peak_memory_bytes=3 * 10**9, memory_bytes=10 * 10**9)
    cpu = DeviceLoad(name="/device:CPU:0", kind="CPU", num_ops=1, compute_s=0.5,
                     peak_memory_bytes=10**6, memory_bytes=64 * 10**9)
    base = DeviceLoad(name="/device:GPU:0", kind="GPU", num_ops=3, compute_s=0.75,
                      peak_memory_bytes=4 * 10**9, memory_bytes=10 * 10**9)
    fields = dict(placer="m_etf", step_time_s=0.6, lower_bound_s=0.4, lp_lower_bound_s=0.45,
                  devices=(gpu, cpu),
                  baseline_step_time_s=0.9,
                  baseline_devices=(base, DeviceLoad("/device:CPU:0", "CPU", 0, 0.0, 0, 64 * 10**9)),
                  num_ops=3, num_groups=2, num_colocation_groups=3, ops_with_unknown_shapes=0,
                  timings_s={"place": 0.1}, notes=("a note",), seed=7,
                  assignment={"a": "/device:GPU:0", "b": "/device:CPU:0", "c": "/device:GPU:0"})
    fields.update(kwargs)
    return PlacementReport(**fields)


def test_report_to_proto_holds_the_placement_and_its_figures():
    from tf_autoplace.proto import placement_pb2

    proto = placement_pb2.PlacementResult.FromString(_report().to_proto().SerializeToString())
    assert proto.placer == "m_etf" and proto.HasField("seed") and proto.seed == 7
    assert (proto.step_time_s, proto.lower_bound_s, proto.baseline_step_time_s) == (0.6, 0.4, 0.9)
    assert proto.lp_lower_bound_s == 0.45
    assert [(o.name, o.device) for o in proto.op] == [
        ("a", "/device:GPU:0"), ("b", "/device:CPU:0"), ("c", "/device:GPU:0")]
    assert [(d.name, d.kind, d.num_ops, d.compute_s, d.peak_memory_bytes, d.memory_bytes)
            for d in proto.device] == [("/device:GPU:0", "GPU", 2, 0.25, 3 * 10**9, 10 * 10**9),
                                       ("/device:CPU:0", "CPU", 1, 0.5, 10**6, 64 * 10**9)]
    assert [d.num_ops for d in proto.baseline_device] == [3, 0]
    assert proto.num_groups == 2 and list(proto.note) == ["a note"]


def test_report_to_proto_leaves_an_unknown_seed_unset():
    assert not _report(seed=None).to_proto().HasField("seed")


def test_report_to_proto_carries_the_certificate_only_with_a_bound():
    proto = _report().to_proto()
    assert proto.HasField("optimality_gap")
    assert proto.optimality_gap == pytest.approx(100 * (0.6 / 0.45 - 1))
    assert not _report(lp_lower_bound_s=float("nan")).to_proto().HasField("optimality_gap")
