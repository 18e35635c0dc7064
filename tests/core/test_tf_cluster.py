"""A cluster of TensorFlow tasks: Cluster.from_tf from every form TF gives a cluster in, devices per
task, link classes and their overrides, the proto round trip, and a ClusterSpecError naming the
job or task for a device the cluster lacks, wherever the device comes from."""

import dataclasses
import json
import socket

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format

from tf_autoplace.core.cluster import HOST_CORE_GROUP as HOST
from tf_autoplace.core.cluster import Cluster, Device, resolve_cluster
from tf_autoplace.core.tasks import (
    DEFAULT_LINK_CLASSES,
    LinkClass,
    Task,
    host_of,
    link_class,
    parse_tasks,
)
from tf_autoplace.errors import ClusterSpecError

TF_CONFIG = json.dumps({
    "cluster": {"worker": ["localhost:2222", "127.0.0.1:2223", "10.0.0.7:2222"],
                "ps": ["localhost:2224"]},
    "task": {"type": "worker", "index": 1}})
PS0, W0, W1, W2 = (f"/job:{job}/replica:0/task:{i}/device:CPU:" for job, i in
                   (("ps", 0), ("worker", 0), ("worker", 1), ("worker", 2)))
GB, US = 1e9, 1e-6


def test_tf_config_gives_the_tasks_devices_target_and_link_classes():
    cluster = Cluster.from_tf(TF_CONFIG, devices="cpu2")

    assert [t.name for t in cluster.tasks] == ["ps:0", "worker:0", "worker:1", "worker:2"]
    assert cluster.names == tuple(p + str(i) for p in (PS0, W0, W1, W2) for i in (0, 1))
    assert cluster.target == "grpc://127.0.0.1:2223"  # TF_CONFIG's own task
    assert cluster.jobs == ("ps", "worker")
    assert cluster.device_tasks.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    # ps:0, worker:0 and worker:1 are on loopback (one machine); worker:2 is on another host.
    assert [cluster.link_class(2, j) for j in range(8)] == [
        "host", "host", "task", "task", "host", "host", "network", "network"]
    # Inside a task: cpu2's own link; between tasks: the classes' defaults.
    host, network = DEFAULT_LINK_CLASSES["host"], DEFAULT_LINK_CLASSES["network"]
    cpu2 = resolve_cluster("cpu2")
    assert cluster.bandwidth[2, 3] == pytest.approx(cpu2.bandwidth[0, 1])
    assert cluster.latency[2, 3] == pytest.approx(cpu2.latency[0, 1])
    assert cluster.bandwidth[0, 2] == pytest.approx(host.bandwidth_gbps * GB)
    assert cluster.latency[0, 2] == pytest.approx(host.latency_us * US)
    assert cluster.bandwidth[2, 6] == pytest.approx(network.bandwidth_gbps * GB)
    assert cluster.latency[6, 2] == pytest.approx(network.latency_us * US)
    # Each task's logical CPUs keep sharing their task's cores, not another task's.
    assert cluster.default_device() == 4  # the target's task first


def test_every_form_of_a_tf_cluster_gives_the_same_tasks():
    jobs = {"ps": ["h1:1"], "worker": ["h2:1", "h3:1"]}
    want = (Task("ps", 0, "h1:1"), Task("worker", 0, "h2:1"), Task("worker", 1, "h3:1"))
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(jobs), master="grpc://h3:1")
    for spec, target in ((jobs, "grpc://h2:1"), (tf.train.ClusterSpec(jobs), "grpc://h2:1"),
                         ({"cluster": jobs}, "grpc://h2:1"), (json.dumps({"cluster": jobs}),
                                                               "grpc://h2:1"),
                         (resolver, "grpc://h3:1"),
                         ({"ps": ["h1:1"], "worker": {1: "h3:1", 0: "h2:1"}}, "grpc://h2:1")):
        assert parse_tasks(spec) == (want, target)
    assert parse_tasks({"chief": ["c:1"], "worker": ["w:1"]})[1] == "grpc://c:1"


@pytest.mark.parametrize("spec,message", [
    ("not json", "must be JSON"),
    ({"cluster": ["a:1"]}, "needs a 'cluster' dict"),
    ({"cluster": {"worker": ["a:1"]}, "task": {"type": "ps", "index": 0}}, "task ps:0 is not"),
    ({"worker": "a:1"}, "must list its tasks"),
    ({"worker": [""]}, "task worker:0 has the address ''"),
    ({"worker": ["localhost"]}, "task worker:0 has the address 'localhost', which TensorFlow"),
    ({"ps": ["a:1"], "worker": ["a:x"]}, "task worker:0 has the address 'a:x'"),
    ({"worker": ["grpc://a:1"]}, "address 'grpc://a:1', which TensorFlow cannot"),
    ({"1worker": ["a:1"]}, "job name '1worker'"),
    ({"worker": {-1: "a:1"}}, "task index -1"),
    ({"worker": {2**70: "a:1"}}, "task index 1180591620717411303424; must be an int in"),
    ({"worker": {0: "a:1", "0": "a:2"}}, "task worker:0 is listed twice"),
    ({}, "has no tasks"),
    (42, "got int"),
])
def test_a_malformed_tf_cluster_is_a_cluster_spec_error_naming_what(spec, message):
    with pytest.raises(ClusterSpecError, match=message):
        Cluster.from_tf(spec, devices="cpu2")


def test_devices_per_job_and_per_task_and_link_classes_given():
    jobs = {"ps": ["localhost:1"], "worker": ["localhost:2", "localhost:3"]}
    cluster = Cluster.from_tf(jobs, devices={"ps": "cpu2", "worker": "k80x2",
                                             ("worker", 1): "cpu2"},
                              links={"host": (2.0, 50.0), "task": LinkClass(20.0, 1.0)})
    assert cluster.names == (PS0 + "0", PS0 + "1", "/job:worker/replica:0/task:0/device:GPU:0",
                             "/job:worker/replica:0/task:0/device:GPU:1", W0 + "0",
                             W1 + "0", W1 + "1")
    off = ~np.eye(7, dtype=bool)
    same_task = cluster.device_tasks[:, None] == cluster.device_tasks[None, :]
    np.testing.assert_allclose(cluster.bandwidth[off & same_task], 20 * GB)
    np.testing.assert_allclose(cluster.bandwidth[off & ~same_task], 2 * GB)
    np.testing.assert_allclose(cluster.latency[off & ~same_task], 50 * US)
    assert cluster.default_device() == 2  # a GPU of the target's task (worker:0)
    with pytest.raises(ClusterSpecError, match="'chief', which is neither a job nor a task"):
        Cluster.from_tf(jobs, devices={"chief": "cpu2"})
    with pytest.raises(ClusterSpecError, match="'worker:7'"):
        Cluster.from_tf(jobs, devices={"worker:7": "cpu2"})
    with pytest.raises(ClusterSpecError, match="unknown link class 'wan'"):
        Cluster.from_tf(jobs, devices="cpu2", links={"wan": (1.0, 1.0)})
    with pytest.raises(ClusterSpecError, match="bandwidth_gbps=0"):
        Cluster.from_tf(jobs, devices="cpu2", links={"host": (0, 1.0)})


def test_a_tasks_own_link_delays_come_with_its_devices():
    k80 = resolve_cluster("k80x2")
    delayed = dataclasses.replace(k80, delay=np.where(np.eye(3, dtype=bool), 0.0, 4e-5))
    cluster = Cluster.from_tf({"worker": ["localhost:2", "localhost:3"]},
                              devices={"worker:0": delayed, "worker:1": k80})
    np.testing.assert_array_equal(cluster.delay[:3, :3], delayed.delay)
    assert not cluster.delay[3:].any() and not cluster.delay[:, 3:].any()


def test_proto_round_trip_keeps_tasks_target_and_links():
    cluster = Cluster.from_tf(TF_CONFIG, devices="cpu2")
    again = Cluster.from_text(text_format.MessageToString(cluster.to_proto()))
    assert again.names == cluster.names and again.tasks == cluster.tasks
    assert again.target == cluster.target
    off = ~np.eye(cluster.num_devices, dtype=bool)  # the diagonal is unused
    np.testing.assert_allclose(again.bandwidth[off], cluster.bandwidth[off], rtol=1e-12)
    np.testing.assert_allclose(again.latency[off], cluster.latency[off], rtol=1e-12)


def test_spec_link_classes_then_per_pair_links_override():
    text = """
    default_bandwidth_gbps: 10  default_latency_us: 5
    device { name: "/job:ps/replica:0/task:0/device:CPU:0" kind: "CPU" memory_bytes: 100 }
    device { name: "/job:worker/replica:0/task:0/device:CPU:0" kind: "CPU" memory_bytes: 100 }
    device { name: "/job:worker/replica:0/task:0/device:CPU:1" kind: "CPU" memory_bytes: 100 }
    device { name: "/job:worker/replica:0/task:1/device:CPU:0" kind: "CPU" memory_bytes: 100 }
    task { job: "ps" index: 0 address: "a:1" }
    task { job: "worker" index: 0 address: "a:2" }
    task { job: "worker" index: 1 address: "b:1" }
    link_class { name: "host" bandwidth_gbps: 3 latency_us: 30 }
    link_class { name: "network" latency_us: 70 }
    link { src: "/job:worker/replica:0/task:1/device:CPU:0"
           dst: "/job:ps/replica:0/task:0/device:CPU:0" bandwidth_gbps: 0.5 }
    target: "grpc://a:2"
    """
    cluster = Cluster.from_text(text)
    assert cluster.bandwidth[0, 1] == pytest.approx(3 * GB)      # host class
    assert cluster.latency[1, 0] == pytest.approx(30 * US)
    assert cluster.bandwidth[1, 2] == pytest.approx(10 * GB)     # within a task: the default
    assert cluster.latency[1, 2] == pytest.approx(5 * US)
    assert cluster.bandwidth[0, 3] == pytest.approx(DEFAULT_LINK_CLASSES["network"]
                                                    .bandwidth_gbps * GB)
    assert cluster.latency[0, 3] == pytest.approx(70 * US)       # network class, latency given
    assert cluster.bandwidth[3, 0] == pytest.approx(0.5 * GB)    # the pair's own link
    assert cluster.latency[3, 0] == pytest.approx(70 * US)       # ... keeps its class latency
    assert cluster.target == "grpc://a:2" and cluster.default_device() == 1


@pytest.mark.parametrize("name,message", [
    ("/job:chief/replica:0/task:0/device:CPU:0", "names the job 'chief', which the cluster "
                                                 "lacks"),
    ("/job:worker/replica:0/task:5/device:CPU:0", "names task 5 of job 'worker', which the "
                                                  "cluster lacks"),
    ("/job:ps/task:3", "names task 3 of job 'ps'"),
])
def test_a_device_of_an_unknown_job_or_task_is_a_cluster_spec_error_naming_it(name, message):
    cluster = Cluster.from_tf(TF_CONFIG, devices="cpu2")
    with pytest.raises(ClusterSpecError, match=message):
        cluster.check_task(name)
    if "device:" in name:
        with pytest.raises(ClusterSpecError, match=message):
            cluster.index(name)
    with pytest.raises(ClusterSpecError, match=message):  # a spec naming such a device
        Cluster(devices=(Device(name if "device:" in name else name + "/device:CPU:0", "CPU",
                                100),),
                bandwidth=np.ones((1, 1)), latency=np.zeros((1, 1)), tasks=cluster.tasks)


def test_a_device_without_its_task_is_refused_or_ambiguous():
    cluster = Cluster.from_tf(TF_CONFIG, devices="cpu2")
    with pytest.raises(ClusterSpecError, match="could be any of"):
        cluster.index("/device:CPU:0")
    assert cluster.index("/job:ps/device:CPU:1") == 1
    with pytest.raises(ClusterSpecError, match="names no job and task"):
        Cluster(devices=(Device("/device:CPU:0", "CPU", 100),), bandwidth=np.ones((1, 1)),
                latency=np.zeros((1, 1)), tasks=cluster.tasks)
    with pytest.raises(ClusterSpecError, match="'grpc://host:port'"):
        Cluster.from_tf(TF_CONFIG, devices="cpu2", target="localhost:2222")
    with pytest.raises(ClusterSpecError, match="target 'grpc://localhost' is not"):
        Cluster.from_tf(TF_CONFIG, devices="cpu2", target="grpc://localhost")
    with pytest.raises(ClusterSpecError, match="must be one machine's"):
        Cluster.from_tf(TF_CONFIG, devices=cluster)


def test_a_cluster_without_tasks_takes_any_device_name_as_before():
    cluster = Cluster.from_text(
        'device { name: "/device:CPU:0" kind: "CPU" memory_bytes: 100 }')
    cluster.check_task("/job:anything/task:9")
    assert cluster.tasks == () and cluster.target == "" and cluster.link_class(0, 0) == ""
    assert cluster.to_proto().target == "" and not cluster.to_proto().task


def test_hosts_and_link_classes():
    assert host_of("localhost:1") == host_of("127.0.0.2:5") == host_of("[::1]:3") == "loopback"
    assert host_of("Node-1:22") == "node-1" and host_of("") == ""
    # This machine by its own name or the unspecified address: loopback too (a serve-local
    # cluster written with the host's name was taken for servers elsewhere).
    here = socket.gethostname().upper()
    assert host_of(f"{here}:1") == host_of("0.0.0.0:2") == host_of("[::]:3") == "loopback"
    assert host_of("ip6-localhost:4") == "loopback" and host_of("10.0.0.1:1") == "10.0.0.1"
    spec = json.dumps({"cluster": {"worker": ["localhost:2222", "localhost:2223"]}})
    cluster = Cluster.from_tf(spec, devices="cpu2", target=f"grpc://{here}:2223")
    assert cluster.target_task() == 1
    a, b, c = Task("w", 0, "localhost:1"), Task("w", 1, "127.0.0.1:2"), Task("w", 2, "n:1")
    assert (link_class(a, a), link_class(a, b), link_class(a, c)) == ("task", "host", "network")
    assert link_class(Task("w", 0), Task("w", 1)) == "network"  # machines not known


def test_an_earlier_placement_for_this_machine_is_named_as_such_for_a_cluster():
    # A graph placed for this machine (job 'localhost'), then for a TensorFlow cluster: the
    # message said its annotations were "for another TensorFlow cluster".
    from tensorflow.core.framework import graph_pb2

    from tf_autoplace.rewrite.apply import check_annotations

    cluster = Cluster.from_tf(TF_CONFIG, devices="cpu2")
    graph_def = graph_pb2.GraphDef()
    graph_def.node.add(name="w", op="NoOp",
                       device="/job:localhost/replica:0/task:0/device:CPU:1")
    with pytest.raises(ClusterSpecError, match="a device of one machine .job 'localhost', as a "
                                               "placement for this machine writes it"):
        check_annotations(graph_def, cluster)
    graph_def.node[0].device = "/job:chief/task:0/device:CPU:0"
    with pytest.raises(ClusterSpecError, match="for another TensorFlow cluster"):
        check_annotations(graph_def, cluster)


@pytest.mark.parametrize("target", ["grpc://localhost:2", "grpc://127.0.0.1:2",
                                    "grpc://[::1]:2", "grpc://LOCALHOST:2"])
def test_the_target_task_is_found_whichever_loopback_name_the_target_uses(target):
    # The target is the worker, named by another name of this machine than its task's: work a
    # placement keeps on one task goes to the target's (not to ps:0, the first task).
    cluster = Cluster.from_tf({"ps": ["localhost:1"], "worker": ["127.0.0.1:2"]}, target=target)
    assert cluster.target_task() == 1
    other = Cluster.from_tf({"ps": ["localhost:1"], "worker": ["otherhost:2"]}, target=target)
    assert other.target_task() is None


def test_the_clients_cpu_is_the_target_tasks_on_a_cluster_of_tasks_only():
    # Ops that call the program's Python run only in the client's process: the target task's.
    spec = {"ps": ["localhost:1"], "worker": ["localhost:2"]}
    cluster = Cluster.from_tf(spec, devices="cpu2", target="grpc://localhost:2")
    assert cluster.client_cpu() == "/job:worker/replica:0/task:0/device:CPU:0"
    assert Cluster.from_tf(spec, devices="cpu2", target="grpc://otherhost:2"
                           ).client_cpu() is None  # the target is none of the tasks
    assert Cluster.from_tf({"worker": ["localhost:2"]}, target="grpc://localhost:2"
                           ).client_cpu() is None  # one process: nowhere else to go
    assert Cluster.local(num_logical_cpus=2).client_cpu() is None


@pytest.mark.parametrize("address, takes", [
    ("localhost:2", True), (":1", True), ("[::1]:5", True), ("host.domain:65536", True),
    ("/bns/cell/job/0", True), ("localhost", False), ("localhost:x", False), ("a/b:1", False),
    ("grpc://a:1", False), ("a:", False), ("a:-1", False), ("a:\u0662", False)])
def test_a_task_address_is_taken_exactly_when_tensorflows_runtime_takes_it(address, takes):
    # The rule of TensorFlow's gRPC channel cache, asked of TensorFlow itself: a server whose
    # cluster lists the address as its other task's starts a Session on it, or refuses it.
    # TensorFlow before 2.21 aborts the process on an address it refuses (a failed assertion
    # in its completion queue) instead of raising: there only the addresses it takes are
    # asked, and the others are TensorFlow 2.21's verdicts.
    import tensorflow as tf

    raises = tuple(int(part) for part in tf.__version__.split(".")[:2]) >= (2, 21)
    if takes or raises:
        try:
            server = tf.distribute.Server({"ps": ["localhost:0"], "worker": [address]},
                                          job_name="ps", task_index=0, start=False)
            with tf.compat.v1.Session(server.target):
                pass
            tensorflow_takes = True
        except (tf.errors.InvalidArgumentError, UnicodeError):
            tensorflow_takes = False
        assert tensorflow_takes == takes
    if takes:
        assert Cluster.from_tf({"worker": [address]}, devices="cpu2").tasks[0].address == address
    else:
        with pytest.raises(ClusterSpecError, match="TensorFlow cannot connect to"):
            Cluster.from_tf({"worker": [address]}, devices="cpu2")


def test_tasks_of_one_host_with_this_machines_devices_share_its_cores():
    # Two servers started on this machine by hand were each given all its cores: a split
    # over them was predicted to run twice as wide as the machine can.
    local = Cluster.local(configured=False)
    ((_, cores),) = local.core_groups
    spec = {"ps": ["localhost:2224"], "worker": ["127.0.0.1:2222", "10.0.0.7:2222"]}
    cluster = Cluster.from_tf(spec)
    assert dict(cluster.core_groups) == {f"tasks on loopback/{HOST}": cores,
                                         f"worker:1/{HOST}": cores}
    groups = [cluster.devices[i].core_group for i in range(cluster.num_devices)]
    assert groups == [f"tasks on loopback/{HOST}"] * 2 + [f"worker:1/{HOST}"]
    # So do tasks given a description of a host's CPU (its core group "host"), e.g. cpu2...
    given = Cluster.from_tf(spec, devices="cpu2")
    assert dict(given.core_groups) == {f"tasks on loopback/{HOST}": 2, f"worker:1/{HOST}": 2}
    # ... but not tasks whose cores are their own (pinned, as local_cluster's are).
    pinned = Cluster.uniform([Device("/device:CPU:0", "CPU", 10**9, num_cores=1,
                                     core_group="cores 0")], core_groups=[("cores 0", 1)])
    assert [name for name, _ in Cluster.from_tf(spec, devices=pinned).core_groups] == [
        "ps:0/cores 0", "worker:0/cores 0", "worker:1/cores 0"]
    assert Cluster.from_proto(cluster.to_proto()).core_groups == cluster.core_groups


def test_a_tf_config_nested_thousands_deep_is_a_cluster_spec_error():
    with pytest.raises(ClusterSpecError, match="a TF_CONFIG string must be JSON"):
        Cluster.from_tf("[" * 100_000 + "]" * 100_000)  # (was a RecursionError)
