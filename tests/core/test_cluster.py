"""Cluster: the shipped specs, per-link overrides, proto round trip, the local machine, and one
typed error with a telling message for every malformed spec."""

import dataclasses
import importlib.resources
import os
import re

import numpy as np
import pytest
from google.protobuf import text_format

import tf_autoplace
from tf_autoplace.core.cluster import (
    Cluster,
    Device,
    resolve_cluster,
    shipped_cluster,
    shipped_clusters,
)
from tf_autoplace.errors import AutoplaceError, ClusterSpecError, ConfigError
from tf_autoplace.testing import small_cnn

from tests.conftest import REPO

HOST = "/job:localhost/replica:0/task:0/device:"
K80_MEMORY = 10_700_000_000  # Placeto's M = 10.7 GB per K80 die
P2_HOST_MEMORY = 524_000_000_000

CPU0 = 'device { name: "/device:CPU:0" kind: "CPU" memory_bytes: 100 }\n'
CPU1 = 'device { name: "/device:CPU:1" kind: "CPU" memory_bytes: 100 }\n'
GPU0 = 'device { name: "/device:GPU:0" kind: "GPU" memory_bytes: 100 }\n'


def _off_diagonal(matrix):
    return matrix[~np.eye(len(matrix), dtype=bool)]


@pytest.mark.parametrize("num_gpus", [2, 4, 8])
def test_shipped_k80_specs(num_gpus):
    cluster = resolve_cluster(f"k80x{num_gpus}")

    assert cluster.num_devices == num_gpus + 1
    assert cluster.names == tuple(f"{HOST}GPU:{i}" for i in range(num_gpus)) + (f"{HOST}CPU:0",)
    assert [d.kind for d in cluster.devices] == ["GPU"] * num_gpus + ["CPU"]
    assert cluster.memory.tolist() == [K80_MEMORY] * num_gpus + [P2_HOST_MEMORY]
    for gpu in cluster.devices[:num_gpus]:
        assert (gpu.num_cores, gpu.frequency_mhz, gpu.memory_bandwidth_gbps,
                gpu.architecture, gpu.speed) == (13, 875, 240.0, "3.7", 1.0)
    # Placeto's published transfer and op constants, on every link.
    np.testing.assert_allclose(_off_diagonal(cluster.bandwidth), 7.6e9, rtol=1e-12)
    np.testing.assert_allclose(_off_diagonal(cluster.latency), 25e-6, rtol=1e-12)
    assert cluster.op_overhead_s == pytest.approx(5.7e-6, rel=1e-12)
    assert cluster.default_device() == 0
    np.testing.assert_array_equal(cluster.kind_mask(("CPU", "GPU")),
                                  [[False] * num_gpus + [True], [True] * num_gpus + [False]])


@pytest.mark.parametrize("gpu, num_gpus, sms, mhz, gbps, arch, speed, nvlink, pcie", [
    (gpu, n, *figures) for n in (2, 4, 8) for gpu, figures in (
        ("a100", (108, 1410, 2039.0, "8.0", 1.0, 300e9, 32e9)),
        ("h100", (132, 1980, 3350.0, "9.0", 2.0, 450e9, 64e9)))])
def test_shipped_a100_and_h100_specs_link_gpus_by_nvlink_and_the_host_by_pcie(
        gpu, num_gpus, sms, mhz, gbps, arch, speed, nvlink, pcie):
    cluster = resolve_cluster(f"{gpu}x{num_gpus}")
    assert cluster.names == tuple(f"{HOST}GPU:{i}" for i in range(num_gpus)) + (f"{HOST}CPU:0",)
    for d in cluster.devices[:num_gpus]:
        assert (d.num_cores, d.frequency_mhz, d.memory_bandwidth_gbps, d.architecture,
                d.speed, d.memory_bytes) == (sms, mhz, gbps, arch, speed, 79_500_000_000)
    host = num_gpus
    gpus = np.arange(num_gpus)
    between = cluster.bandwidth[np.ix_(gpus, gpus)][~np.eye(num_gpus, dtype=bool)]
    np.testing.assert_allclose(between, nvlink, rtol=1e-12)  # NVLink through NVSwitch
    np.testing.assert_allclose(cluster.bandwidth[gpus, host], pcie, rtol=1e-12)  # PCIe
    np.testing.assert_allclose(cluster.bandwidth[host, gpus], pcie, rtol=1e-12)
    np.testing.assert_allclose(_off_diagonal(cluster.latency), 10e-6, rtol=1e-12)


def test_the_script_writes_exactly_the_shipped_specs(tmp_path):
    import subprocess
    import sys

    subprocess.run([sys.executable, os.path.join(REPO, "tools", "make_cluster_specs.py"),
                    f"--out_dir={tmp_path}"], check=True, capture_output=True, cwd=REPO)
    shipped = importlib.resources.files("tf_autoplace").joinpath("clusters")
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(p.name for p in shipped.iterdir() if p.name.endswith(".pbtxt"))
    for name in written:
        assert (tmp_path / name).read_bytes() == shipped.joinpath(name).read_bytes(), name


def test_shipped_cpu2_spec_shares_two_cores_and_says_placement_does_not_pay():
    cluster = resolve_cluster("cpu2")
    assert cluster.names == (f"{HOST}CPU:0", f"{HOST}CPU:1")
    assert [d.kind for d in cluster.devices] == ["CPU", "CPU"]
    assert cluster.memory.tolist() == [8_000_000_000, 8_000_000_000]
    assert cluster.core_groups == (("host", 2),)  # one pool of threads on the host's 2 cores
    np.testing.assert_allclose(_off_diagonal(cluster.bandwidth), 1e15, rtol=1e-12)
    np.testing.assert_allclose(_off_diagonal(cluster.latency), 6e-6, rtol=1e-12)
    assert cluster.op_overhead_s == pytest.approx(5.7e-6, rel=1e-12)
    assert cluster.default_device() == 0  # no GPU: the first device
    assert cluster.index(f"{HOST}CPU:1") == 1
    # On two logical CPUs a split adds transfers and no cores: auto keeps one device and the
    # report says why (a user was told 1.49x for a CNN that ran 0.82x).
    report = tf_autoplace.autoplace(small_cnn().graph, cluster="cpu2", progress=False)
    assert report.speedup == 1.0 and {d.num_ops > 0 for d in report.devices} == {True, False}
    assert any("does not pay" in n for n in report.notes)


def test_per_link_overrides_are_directed_and_leave_other_links_at_the_defaults():
    cluster = Cluster.from_text(
        "default_bandwidth_gbps: 10\ndefault_latency_us: 5\nop_overhead_us: 2\n"
        + CPU0 + CPU1 + GPU0
        + 'link { src: "/device:CPU:0" dst: "/device:GPU:0" bandwidth_gbps: 20 latency_us: 1 }\n'
        + 'link { src: "/device:GPU:0" dst: "/device:CPU:1" latency_us: 40 }\n')
    gbps, us = 1e9, 1e-6
    np.testing.assert_allclose(cluster.bandwidth[~np.eye(3, dtype=bool)].reshape(3, 2), [
        [10 * gbps, 20 * gbps],   # CPU0->CPU1 default, CPU0->GPU0 overridden
        [10 * gbps, 10 * gbps],   # CPU1->*
        [10 * gbps, 10 * gbps],   # GPU0->CPU0 (reverse direction untouched), GPU0->CPU1 default
    ], rtol=1e-12)
    np.testing.assert_allclose(cluster.latency[~np.eye(3, dtype=bool)].reshape(3, 2), [
        [5 * us, 1 * us],
        [5 * us, 5 * us],
        [5 * us, 40 * us],  # latency-only link keeps the default bandwidth
    ], rtol=1e-12)
    assert cluster.op_overhead_s == pytest.approx(2e-6, rel=1e-12)
    assert cluster.default_device() == 2  # the first GPU


def test_to_proto_from_proto_round_trip():
    base = resolve_cluster("k80x2")
    # Make it non-uniform so the round trip has something to keep.
    fast = dataclasses.replace(base.devices[1], speed=2.5)
    bandwidth = base.bandwidth.copy()
    bandwidth[0, 2] = 3e9
    latency = base.latency.copy()
    latency[2, 1] = 7e-6
    delay = np.zeros((3, 3))
    delay[1, 0] = 120e-6
    cluster = Cluster((base.devices[0], fast, base.devices[2]), bandwidth, latency,
                      op_overhead_s=4e-6, prediction_error=0.125, delay=delay)

    for spec in (cluster.to_proto(),
                 text_format.Parse(text_format.MessageToString(cluster.to_proto()),
                                   type(cluster.to_proto())())):
        again = Cluster.from_proto(spec)
        assert again.devices == cluster.devices
        np.testing.assert_allclose(again.bandwidth[~np.eye(3, dtype=bool)],
                                   bandwidth[~np.eye(3, dtype=bool)], rtol=1e-12)
        np.testing.assert_allclose(again.latency, latency, rtol=1e-12)
        assert again.op_overhead_s == pytest.approx(4e-6, rel=1e-12)
        assert again.devices[1].speed == 2.5
        assert again.prediction_error == 0.125
        np.testing.assert_allclose(again.delay, delay, rtol=1e-12)
        np.testing.assert_allclose(again.subset([1, 0]).delay, [[0, 120e-6], [0, 0]], rtol=1e-12)
    assert Cluster.from_proto(base.to_proto()).prediction_error is None  # never measured
    assert not base.to_proto().HasField("prediction_error")
    assert not base.delay.any()  # no delays unless measured, and none written
    assert not any(link.HasField("delay_us") for link in base.to_proto().link)


def test_local_with_logical_cpus():
    cluster = Cluster.local(num_logical_cpus=2)
    assert cluster.names == (f"{HOST}CPU:0", f"{HOST}CPU:1")
    assert [d.kind for d in cluster.devices] == ["CPU", "CPU"]
    assert cluster.memory[0] == cluster.memory[1] > 0  # they share the host's memory
    # ... and its cores: one core group with as many cores as TensorFlow sees.
    cores = cluster.devices[0].num_cores
    assert cores >= 1 and cluster.core_groups == (("host", cores),)
    assert [d.core_group for d in cluster.devices] == ["host", "host"]
    executor, slots = cluster.executors()
    assert executor.tolist() == [0, 0] and slots.tolist() == [cores]
    np.testing.assert_allclose(_off_diagonal(cluster.bandwidth), 10e9, rtol=1e-12)
    np.testing.assert_allclose(_off_diagonal(cluster.latency), 5e-6, rtol=1e-12)
    for bad in (-1, 2.5, "2", True):
        with pytest.raises(ClusterSpecError, match=f"num_logical_cpus must be an int >= 0, "
                                                   f"got {re.escape(repr(bad))}"):
            Cluster.local(num_logical_cpus=bad)


@pytest.mark.parametrize("text, message", [
    ("", "lists no devices"),
    ("default_bandwidth_gbps: 3\n", "lists no devices"),
    ('device { name: "/device:CPU:0" kind: ', "malformed cluster spec"),
    (CPU0 + "no_such_field: 1\n", "malformed cluster spec.*no_such_field"),
    (CPU0 + CPU0, "'/device:CPU:0' and '/device:CPU:0' are one device to TensorFlow"),
    (CPU0.replace("100", "0"), "'/device:CPU:0' has memory_bytes=0; must be > 0"),
    (CPU0.replace("100", "-5"), "'/device:CPU:0' has memory_bytes=-5; must be > 0"),
    (CPU0.replace('kind: "CPU"', 'kind: "TPU"'), "has kind 'TPU'; expected one of"),
    (CPU0.replace('"/device:CPU:0"', '"cpu0"'), "'cpu0' is not a TF device string"),
    # Names TensorFlow cannot address fail here, not at rewrite after the whole search.
    (CPU0.replace('"/device:CPU:0"', '"/bogus"'), "'/bogus' is not a TF device string: "
                                                  "Unknown attribute 'bogus'"),
    (CPU0.replace('"/device:CPU:0"', '"/job:localhost"'), "names no device type and index"),
    (CPU0.replace('"/device:CPU:0"', '"/device:CPU:-1"'), "has a negative device_index"),
    (CPU0.replace('"/device:CPU:0"', '"/job:a b/device:CPU:0"'), "job name 'a b'"),
    (CPU0.replace('"/device:CPU:0"', f'"{HOST}GPU:0"'), f"'{HOST}GPU:0' is a GPU device "
                                                         "but has kind 'CPU'"),
    # One device to TensorFlow under two names.
    (CPU0 + CPU0.replace("/device:CPU:0", f"{HOST}CPU:0"),
     f"'/device:CPU:0' and '{HOST}CPU:0' are one device to TensorFlow"),
    (CPU0 + CPU0.replace("/device:CPU:0", "/cpu:0"),
     "'/device:CPU:0' and '/device:CPU:0' are one device to TensorFlow"),
    # Numbers that are not finite, or do not fit the int64 fields Grappler reads.
    (CPU0.replace("memory_bytes: 100", "memory_bytes: 100 memory_bandwidth_gbps: inf"),
     "memory_bandwidth_gbps=inf; must be > 0, finite and at most 9.223e\\+12"),
    (CPU0.replace("memory_bytes: 100", "memory_bytes: 100 memory_bandwidth_gbps: 1e300"),
     "memory_bandwidth_gbps=1e\\+300; must be > 0, finite and at most"),
    (CPU0.replace("memory_bytes: 100", "memory_bytes: 100 speed: nan"), "speed=nan"),
    (CPU0.replace("memory_bytes: 100", "memory_bytes: 100 speed: inf"), "speed=inf"),
    # Unit slips: a GPU a million times off the cost model made it silently unusable.
    (CPU0.replace("memory_bytes: 100", "memory_bytes: 100 speed: 1e-320"),
     "speed=1e-320; must be between 1e-06 and 1e\\+06"),
    (CPU0.replace("memory_bytes: 100", "memory_bytes: 100 speed: 1e300"), "speed=1e\\+300"),
    (CPU0 + "op_overhead_us: inf\n", "op_overhead_us=inf; must be >= 0, finite"),
    (CPU0 + "op_overhead_us: nan\n", "op_overhead_us=nan"),
    (CPU0 + CPU1 + "default_latency_us: inf\n", "latency_us=inf; must be >= 0, finite"),
    (CPU0 + CPU1 + 'link { src: "/device:CPU:0" dst: "/device:CPU:1" latency_us: inf }',
     "link latencies must be finite and >= 0 and <= 1e\\+06, got inf"),
    (CPU0 + CPU1 + 'link { src: "/device:CPU:0" dst: "/device:CPU:1" bandwidth_gbps: nan }',
     "link bandwidths must be finite and >= 1, got nan bytes/s"),
    (CPU0 + CPU1 + 'link { src: "/device:CPU:0" dst: "/device:GPU:7" bandwidth_gbps: 1 }',
     "no device named '/device:GPU:7'"),
    (CPU0 + CPU1 + "default_bandwidth_gbps: 0\n", "bandwidth_gbps=0.0; must be > 0"),
    (CPU0 + CPU1 + "default_bandwidth_gbps: -2\n", "bandwidth_gbps=-2.0; must be > 0"),
    (CPU0 + CPU1 + 'link { src: "/device:CPU:0" dst: "/device:CPU:1" bandwidth_gbps: -1 }',
     "link bandwidths must be finite and >= 1, got -1000000000.0 bytes/s"),
    (CPU0 + CPU1 + "default_latency_us: -1\n", "latency_us=-1.0; must be >= 0"),
    (CPU0 + "prediction_error: -0.1\n", "prediction_error=-0.1; must be >= 0"),
    (CPU0 + "prediction_error: nan\n", "prediction_error=nan"),
    (CPU0 + CPU1 + 'link { src: "/device:CPU:1" dst: "/device:CPU:0" latency_us: -3 }',
     "link latencies must be finite and >= 0 and <= 1e\\+06, got -3e-06 s"),
    (CPU0 + CPU1 + 'link { src: "/device:CPU:1" dst: "/device:CPU:0" delay_us: -3 }',
     "link delays must be finite, >= 0 and <= 1e\\+06, got -3e-06 s"),
    (CPU0 + CPU1 + 'link { src: "/device:CPU:1" dst: "/device:CPU:0" delay_us: inf }',
     "link delays must be finite, >= 0 and <= 1e\\+06, got inf s"),
    # Finite, but a unit slip whose transfers would take forever (an infinite step time).
    (CPU0 + CPU1 + "default_bandwidth_gbps: 1e-320\n",
     "link bandwidths must be finite and >= 1, got 9.99.*e-312 bytes/s"),
    (CPU0 + CPU1 + 'link { src: "/device:CPU:0" dst: "/device:CPU:1" latency_us: 1e300 }',
     "link latencies must be finite and >= 0 and <= 1e\\+06, got 1e\\+294 s"),
    (CPU0 + CPU1 + 'link { src: "/device:CPU:0" dst: "/device:CPU:0" bandwidth_gbps: -1 }',
     "a link entry goes from '/device:CPU:0' to itself"),
    (CPU0 + CPU1 + 'link { src: "/device:CPU:0" dst: "/device:CPU:1" latency_us: 1 }'
     'link { src: "/device:CPU:0" dst: "/device:CPU:1" latency_us: 2 }',
     "two link entries go from '/device:CPU:0' to '/device:CPU:1'"),
])
def test_malformed_spec_is_a_typed_error_naming_the_problem(text, message):
    with pytest.raises(ClusterSpecError, match=message):
        Cluster.from_text(text)


def test_spec_file_errors_name_the_file(tmp_path):
    missing = tmp_path / "missing.pbtxt"
    with pytest.raises(ClusterSpecError, match="cannot read cluster spec .*missing.pbtxt"):
        Cluster.from_file(missing)
    with pytest.raises(ClusterSpecError, match="cannot read cluster spec"):
        Cluster.from_file(tmp_path)  # a directory
    binary = tmp_path / "binary.pbtxt"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ClusterSpecError, match="cannot read cluster spec .*binary.pbtxt"):
        Cluster.from_file(binary)
    bad = tmp_path / "bad.pbtxt"
    bad.write_text(CPU0 + CPU0)
    with pytest.raises(ClusterSpecError, match=r"bad\.pbtxt: devices .* are one device"):
        Cluster.from_file(bad)


def test_errors_from_python_constructors():
    cpu = Device("/device:CPU:0", "CPU", memory_bytes=1)
    with pytest.raises(ClusterSpecError, match="the cluster has no devices"):
        Cluster((), np.zeros((0, 0)), np.zeros((0, 0)))
    with pytest.raises(ClusterSpecError, match=r"bandwidth has shape \(2, 2\); expected \(1, 1\)"):
        Cluster((cpu,), np.ones((2, 2)), np.zeros((1, 1)))
    with pytest.raises(ClusterSpecError, match="speed=0"):
        Device("/device:CPU:1", "CPU", memory_bytes=1, speed=0)
    with pytest.raises(ClusterSpecError, match="bandwidth_gbps=0; must be > 0"):
        Cluster.uniform([cpu], bandwidth_gbps=0)
    with pytest.raises(ClusterSpecError, match="op_overhead_s=inf; must be >= 0, finite"):
        Cluster((cpu,), np.ones((1, 1)), np.zeros((1, 1)), op_overhead_s=float("inf"))
    with pytest.raises(ClusterSpecError, match="num_cores=2.5; must be > 0, an integer"):
        Device("/device:CPU:1", "CPU", memory_bytes=1, num_cores=2.5)
    with pytest.raises(ClusterSpecError, match="memory_bytes=True; must be > 0, an integer"):
        Device("/device:CPU:1", "CPU", memory_bytes=True)
    with pytest.raises(ClusterSpecError, match="memory_bytes=9223372036854775808; must be"):
        Device("/device:CPU:1", "CPU", memory_bytes=2**63)
    with pytest.raises(ClusterSpecError, match="devices must be Device objects, got \\['str'\\]"):
        Cluster.uniform(["/device:CPU:0"])
    with pytest.raises(ClusterSpecError, match="no device named '/device:GPU:0'"):
        Cluster.uniform([cpu]).index("/device:GPU:0")
    # One type to catch: also a ValueError and an AutoplaceError.
    assert issubclass(ClusterSpecError, ValueError) and issubclass(ClusterSpecError, AutoplaceError)


def test_plausible_mistakes_with_the_constructors_are_typed_errors(tmp_path):
    # Each was a raw TypeError or ValueError, or accepted (a core group of 3), or read and
    # closed the caller's file descriptor 3.
    cpu = Device("/device:CPU:0", "CPU", memory_bytes=1)
    two = [cpu, Device("/device:CPU:1", "CPU", memory_bytes=1)]
    cases = [
        (lambda: Cluster.uniform(cpu), r"list or tuple of Device objects, got Device \(one "
                                       r"device: give \[device\]\)"),
        (lambda: Cluster.uniform(d for d in two), "list or tuple of Device objects, got "
                                                  "generator"),
        (lambda: Cluster.uniform(two, core_groups="host"), "core_groups must be .* got 'host'"),
        (lambda: Cluster.uniform(two, core_groups=[("host",)]), "core_groups must be"),
        (lambda: Cluster(two, "x", "y"), r"bandwidth must be a \[2, 2\] array of numbers"),
        (lambda: Device("/device:CPU:0", "CPU", 1, core_group=3), "core_group 3; must be a "
                                                                  "string"),
        (lambda: Device("/device:CPU:0", "CPU", 1, model=3), "model 3; must be a string"),
        (lambda: Cluster.from_file(3), "path must be a str or os.PathLike, got int 3"),
        (lambda: Cluster.uniform(two, core_groups=5), "core_groups must be .* got 5"),
        (lambda: Cluster.from_text(None), "from_text takes a spec's text, got NoneType"),
        (lambda: Cluster.from_text(123), r"got int \(a file's path: Cluster.from_file\)"),
        (lambda: Cluster.from_proto("k80x2"), "from_proto takes a ClusterSpec message, got str"),
        (lambda: Cluster.from_text(b"device { name: \"\xff\" }"), "must be UTF-8 text: .*0xff"),
    ]
    for make, message in cases:
        with pytest.raises(ClusterSpecError, match=message):
            make()


def test_device_indices_and_kinds_of_the_wrong_form_are_typed_errors():
    # Each was a raw IndexError or ValueError, or (kinds as one string) a mask of nothing.
    cluster = shipped_cluster("k80x2")
    cases = [
        (lambda: cluster.task_of(99), r"a device index is an int in \[0, 3\), got 99"),
        (lambda: cluster.link_class(0, 99), "got 99"),
        (lambda: cluster.task_of(True), "got True"),
        (lambda: cluster.subset(["a"]), r"distinct device indices in \[0, 3\), got \['a'\]"),
        (lambda: cluster.subset([[0, 1]]), "distinct device indices"),
        (lambda: cluster.subset([0.5]), "got \\[0.5\\]"),  # was device 0
        (lambda: cluster.subset([True, False]), "got \\[True, False\\]"),  # was [1, 0]
        (lambda: cluster.kind_mask("GPU"), r"such as \['GPU'\], got the string 'GPU'"),
    ]
    for make, message in cases:
        with pytest.raises(ClusterSpecError, match=message):
            make()
    assert cluster.task_of(np.int64(1)) is None and cluster.link_class(0, 1) == ""
    np.testing.assert_array_equal(cluster.kind_mask(["GPU"]), [[True, True, False]])
    spec_bytes = text_format.MessageToString(cluster.to_proto()).encode()
    assert Cluster.from_text(spec_bytes).names == cluster.names  # a spec's text as bytes


def test_a_huge_number_of_logical_cpus_is_refused_before_any_is_built():
    # Cluster.local(10**7) ran for 192 s, then raised MemoryError (a [D, D] table of 728 TiB).
    from tf_autoplace.core.cluster import MAX_DEVICES

    with pytest.raises(ClusterSpecError, match=f"10000000 devices; at most {MAX_DEVICES}"):
        Cluster.local(10**7)


def test_device_names_are_canonical_and_resolve_as_tensorflow_resolves_them():
    cluster = Cluster.from_text(
        'device { name: "/gpu:0" kind: "GPU" memory_bytes: 100 }\n'
        'device { name: "/job:localhost/replica:0/task:0/device:gpu:1" kind: "GPU" '
        'memory_bytes: 100 }\n'
        'device { name: "/cpu:0" kind: "CPU" memory_bytes: 100 }\n'
        # A link may name a device as TF would resolve it.
        'link { src: "/job:localhost/replica:0/task:0/device:GPU:0" dst: "/device:GPU:1" '
        'bandwidth_gbps: 3 }\n')
    assert cluster.names == ("/device:GPU:0", f"{HOST}GPU:1", "/device:CPU:0")
    assert cluster.bandwidth[0, 1] == 3e9 and cluster.bandwidth[1, 0] != 3e9
    assert cluster.index(f"{HOST}CPU:0") == 2
    assert cluster.index("/device:GPU:1") == 1
    with pytest.raises(ClusterSpecError, match="no device named '/job:worker/device:GPU:1'"):
        cluster.index("/job:worker/device:GPU:1")
    # Two tasks' GPU 0 are two devices.
    two_tasks = Cluster.uniform([Device("/job:w/task:0/device:GPU:0", "GPU", 100),
                                 Device("/job:w/task:1/device:GPU:0", "GPU", 100)])
    assert two_tasks.num_devices == 2


def test_cluster_arrays_are_read_only():
    cluster = resolve_cluster("cpu2")
    with pytest.raises(ValueError):
        cluster.bandwidth[0, 1] = 1.0
    with pytest.raises(ValueError):
        cluster.latency[0, 1] = 1.0


def test_shipped_clusters_are_package_data_named_by_their_stem():
    specs = importlib.resources.files("tf_autoplace").joinpath("clusters")
    files = sorted(p.name for p in specs.iterdir() if p.name.endswith(".pbtxt"))
    assert shipped_clusters() == tuple(f.removesuffix(".pbtxt") for f in files)
    assert {"cpu2", "k80x2", "k80x4", "k80x8", "v100x2", "v100x4", "v100x8"} <= \
        set(shipped_clusters())
    for name in shipped_clusters():  # a name reads the same spec as its file
        by_name = resolve_cluster(name)
        by_path = Cluster.from_file(specs.joinpath(f"{name}.pbtxt"))
        assert by_name.to_proto() == by_path.to_proto()
        assert shipped_cluster(name).to_proto() == by_path.to_proto()
    # setup.py ships them: the pattern in package_data matches every spec file.
    with open(os.path.join(REPO, "setup.py"), encoding="utf-8") as f:
        assert '"clusters/*.pbtxt"' in f.read()
    # A checkout's testdata/<name>.pbtxt paths name the same specs.
    for name in shipped_clusters():
        path = os.path.join(REPO, "testdata", f"{name}.pbtxt")
        assert resolve_cluster(path).to_proto() == shipped_cluster(name).to_proto()


def test_resolve_cluster_takes_names_paths_clusters_and_says_what_it_knows(tmp_path,
                                                                          monkeypatch):
    k80x2 = resolve_cluster("k80x2")
    assert resolve_cluster(k80x2) is k80x2
    own = tmp_path / "mine.pbtxt"
    own.write_text(CPU0 + GPU0)
    for path in (own, str(own)):  # a path stays a path, as a str or a PathLike
        assert resolve_cluster(path).names == ("/device:CPU:0", "/device:GPU:0")
    # A file in the working directory wins over a shipped name of the same spelling.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k80x4").write_text(CPU0)
    assert resolve_cluster("k80x4").names == ("/device:CPU:0",)
    assert resolve_cluster("k80x8").num_devices == 9
    with pytest.raises(ClusterSpecError, match=r"'k80x3': it is neither a file nor a shipped "
                                               r"cluster \(a100x2, .*cpu2, .*k80x2, .*or 'local'\)"):
        resolve_cluster("k80x3")
    with pytest.raises(ClusterSpecError, match="no shipped cluster named 'k80x3'; shipped: a100x2, .*cpu2"):
        shipped_cluster("k80x3")
    with pytest.raises(ClusterSpecError, match=r"cannot read cluster spec 'gone/k80x2.pbtxt'"):
        resolve_cluster("gone/k80x2.pbtxt")
    with pytest.raises(ConfigError, match="shipped cluster name.*got int"):
        resolve_cluster(2)


def test_local_gpus_take_their_properties_from_tensorflow(monkeypatch):
    """With a GPU (faked here: this machine may have none), Cluster.local() reads its name and
    compute capability, memory limit and TensorFlow's own SM count, clock and bandwidth."""
    import tensorflow as tf
    from tensorflow.core.framework import device_attributes_pb2
    from tensorflow.core.protobuf import device_properties_pb2
    from tensorflow.python.client import device_lib

    from tf_autoplace.core import cluster as cluster_module

    props = {"CPU:0": device_properties_pb2.DeviceProperties(type="CPU", num_cores=6,
                                                             frequency=3000),
             "GPU:0": device_properties_pb2.DeviceProperties(
                 type="GPU", num_cores=132, frequency=1980, bandwidth=3_350_000_000)}
    monkeypatch.setattr(cluster_module, "_tf_device_properties", lambda: props)
    gpu = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    real_list = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: [gpu] if kind == "GPU" else real_list(kind))
    monkeypatch.setattr(tf.config.experimental, "get_device_details",
                        lambda d: {"device_name": "NVIDIA H100 80GB HBM3",
                                   "compute_capability": (9, 0)})
    monkeypatch.setattr(device_lib, "list_local_devices", lambda: [
        device_attributes_pb2.DeviceAttributes(name="/device:GPU:0", device_type="GPU",
                                               memory_limit=79_000_000_000)])
    cluster = Cluster.local()
    assert cluster.names == (f"{HOST}CPU:0", f"{HOST}GPU:0")
    cpu, gpu = cluster.devices
    assert (cpu.num_cores, cpu.frequency_mhz, cpu.core_group) == (6, 3000, "host")
    assert cluster.core_groups == (("host", 6),)
    assert (gpu.kind, gpu.model, gpu.architecture) == ("GPU", "NVIDIA H100 80GB HBM3", "9.0")
    assert (gpu.num_cores, gpu.frequency_mhz, gpu.memory_bytes) == (132, 1980, 79_000_000_000)
    assert gpu.memory_bandwidth_gbps == pytest.approx(3350.0)
    assert gpu.core_group == ""  # a GPU has cores of its own
    assert cluster.executors()[1].tolist() == [6, 1]
    # Written as a spec and read back, nothing is lost.
    again = Cluster.from_text(text_format.MessageToString(cluster.to_proto()))
    assert again.devices == cluster.devices and again.core_groups == cluster.core_groups


CORE_GROUP_SPEC = CPU0.replace("memory_bytes: 100", 'memory_bytes: 100 core_group: "host"') + \
    CPU1.replace("memory_bytes: 100", 'memory_bytes: 100 core_group: "host"') + GPU0 + \
    'core_group { name: "host" cores: 4 }\n'


def test_core_groups_from_a_spec_and_back():
    cluster = Cluster.from_text(CORE_GROUP_SPEC)
    assert cluster.core_groups == (("host", 4),)
    executor, cores = cluster.executors()
    assert executor.tolist() == [0, 0, 1] and cores.tolist() == [4, 1]
    again = Cluster.from_proto(cluster.to_proto())
    assert again.core_groups == cluster.core_groups and again.devices == cluster.devices
    alone = cluster.independent()
    assert alone.core_groups == () and alone.executors()[1].tolist() == [1, 1, 1]
    assert cluster.subset([2]).core_groups == ()  # the GPU alone: the group has no device
    assert cluster.subset([1, 2]).core_groups == (("host", 4),)


@pytest.mark.parametrize("text, message", [
    (CORE_GROUP_SPEC.replace("cores: 4", "cores: 0"), "core group 'host' has cores=0"),
    (CORE_GROUP_SPEC + 'core_group { name: "host" cores: 2 }\n', "must be unique"),
    (CORE_GROUP_SPEC + 'core_group { name: "spare" cores: 2 }\n', "'spare' has no device"),
    (CORE_GROUP_SPEC.replace('core_group { name: "host" cores: 4 }\n', ""),
     "names core group 'host', which the cluster does not declare"),
])
def test_bad_core_groups_are_typed_errors(text, message):
    with pytest.raises(ClusterSpecError, match=message):
        Cluster.from_text(text)


def test_a_cluster_of_more_devices_than_can_be_placed_on_is_refused_at_once():
    # A spec of 6,000 GPUs took 144 s and 3.4 GB to read (every pair of names compared);
    # the names are now compared within a type and index, and the count is capped.
    from tf_autoplace.core.cluster import MAX_DEVICES

    gpus = [Device(f"/job:w/task:{i}/device:GPU:0", "GPU", memory_bytes=10**9)
            for i in range(MAX_DEVICES)]
    assert Cluster.uniform(gpus).num_devices == MAX_DEVICES
    with pytest.raises(ClusterSpecError, match=f"at most {MAX_DEVICES} can be placed on"):
        Cluster.uniform(gpus + [Device("/job:w/task:0/device:CPU:0", "CPU", memory_bytes=1)])
    with pytest.raises(ClusterSpecError, match="are one device to TensorFlow"):
        Cluster.uniform(gpus[:-1] + [Device("/device:GPU:0", "GPU", memory_bytes=1)])


@pytest.mark.parametrize("setting, env, expected", [
    (1, None, 1), (0, "1", 1), (0, "-1", 1), (-1, None, 1), (0, "x", None), (0, None, None),
    (64, None, None)])
def test_local_core_group_follows_the_inter_op_pool(monkeypatch, setting, env, expected):
    """A program that limits TensorFlow's inter-op pool (``set_inter_op_parallelism_threads``,
    ``TF_NUM_INTEROP_THREADS``; negative: the caller's thread) runs that many ops at once, not
    one per core: the local cluster's core group says so (None: the host's cores)."""
    import tensorflow as tf

    monkeypatch.setattr(tf.config.threading, "get_inter_op_parallelism_threads",
                        lambda: setting)
    if env is None:
        monkeypatch.delenv("TF_NUM_INTEROP_THREADS", raising=False)
    else:
        monkeypatch.setenv("TF_NUM_INTEROP_THREADS", env)
    cluster = Cluster.local(num_logical_cpus=2)
    host_cores = cluster.devices[0].num_cores
    assert cluster.core_groups == (("host", expected or host_cores),)
    assert cluster.executors()[1].tolist() == [expected or host_cores]
