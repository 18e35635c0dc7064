"""Seeded random damage to every input a user gives the package, and the check each damaged
input must pass. Eight families of cases, each reproducible from ``(seed, index)`` alone
(:data:`FAMILIES`: a ``make_*`` and a ``run_*`` function per family):

- ``graphs``: a small real training graph and a cluster spec, damaged (:func:`make_case`); the
  placement must be valid and TensorFlow must import and run it, or the error an
  :class:`~tf_autoplace.errors.AutoplaceError`; the input untouched either way.
- ``cost_graphs``: the same graph as a cost graph (``protos/cost_graph.proto``), its ops,
  inputs, times, sizes and colocation damaged, written as text, JSON or binary (some bytes
  corrupted or cut) and placed with :func:`tf_autoplace.api.place_cost_graph`: a valid placement
  (every op on a cluster device of a kind it has a time for, colocation groups whole) or an
  AutoplaceError; the file untouched.
- ``policies``: a shipped saved policy (Placeto's, GDP's) with its ``weights.npz`` or
  ``policy.json`` damaged (cut, bytes flipped, NaN, huge, integer, string or pickled object
  arrays, wrong shapes, settings of wrong types or giant sizes, a FIFO or a directory in place
  of a file) and given to the placer: a ConfigError, or (damage it cannot tell from a policy)
  a valid placement. Nothing is unpickled, nothing waits on a FIFO.
- ``caches``: a placement cache entry written by a first placement, then damaged (cut, flipped,
  another key, graph or op count, devices the cluster lacks, an op named twice, a FIFO, socket,
  directory or symbolic link in its place) before the same placement runs again: that run must
  place validly, never fail nor hang, and read the entry back only when it is whole and valid.
- ``tf_clusters``: the jobs and tasks of a TensorFlow cluster for :meth:`Cluster.from_tf` (a
  dict, a ``TF_CONFIG`` string or dict, a ``tf.train.ClusterSpec``, a cluster resolver) with
  each task's devices (by job and by task) and link class figures, or a text ``ClusterSpec``
  with ``task``, ``link_class``, ``link`` and ``target`` entries; whole or damaged (bad job
  names, indices and addresses, tasks listed twice, TF_CONFIG cut or naming a task its cluster
  lacks, devices for a job the cluster lacks or already on tasks, unknown link classes and bad
  figures, targets that are not ``grpc://``, devices naming no task or a task not listed). A
  valid cluster has every device on one of its tasks (``/job:J/replica:0/task:I``), each link
  of the class the addresses give as :mod:`tf_autoplace.core.tasks` documents it (read here
  independently) with that class's figures (given, else the defaults; a text spec's ``link``
  entries override), its own spec reads back the same, and the base graph places on it onto
  its devices only; a description left whole gives the tasks, target and per-task devices
  expected. Anything else is a ClusterSpecError or ConfigError whose message names the damage.
  No server is started.
- ``keras``: a small random Keras 3 model (Sequential or functional: dense and convolution
  layers, batch normalisation, dropout, branches joined by Concatenate or Add, random sizes)
  compiled and placed with :func:`tf_autoplace.keras.autoplace_model` on
  ``Cluster.local(num_logical_cpus=2)`` (the process must have those logical CPUs), then fit
  for one or two batches: every loss finite and equal (float tolerance) to the losses of an
  unplaced twin of the same seed, the trained weights too; or a misuse of the door (not
  compiled, ``run_eagerly``, ``jit_compile``, an ``input_spec`` of another structure, rank,
  dtype or size, batches whose shape changes, ``verify``, a cluster without the model's
  devices, an unknown placer) that must be an AutoplaceError with a message (an ``input_spec``
  that leaves the features free may instead place, for a model that takes any size, and must
  then match its twin). No other exception.
- ``verify``: the base graph or a smaller random one placed with ``verify=15`` (or a few steps
  more, or a bad count, another cluster, a damaged graph) on ``Cluster.local(num_logical_cpus=
  2)``: the applied placement is one of the measured candidates, never one measured slower than
  the single-device one beyond noise (it is the single-device one unless its interval lies
  wholly below the single device's), the report and its proto list every candidate with its
  measured steps and say which was applied and why, and the placed graph runs; no timing is
  asserted. A MeasurementError only for a graph that does not run unplaced either.
- ``served`` (slow: starts two server processes, :func:`served_jobs`): valid descriptions of
  those servers in every form of ``tf_clusters``, checked the same way; the base graph placed
  on them runs there with soft placement off.

``tests/fuzz_child.py`` runs cases in a child process (an abort there is a failure the parent
can name: the case that started and never finished; it also gives the process the logical CPUs
the ``keras`` family needs), ``tests/test_fuzz.py`` reads them.

In the ``graphs``, ``caches`` and ``verify`` families a placed graph is imported, and run where the harness
can: a graph whose simulated peak memory exceeds ``MAX_RUN_BYTES``, or with a placeholder of a
dtype that cannot be fed (resource, variant, quantized), is imported only; unknown placeholder
dimensions are fed as 1. A placed graph that fails to run counts as a problem unless its input
fails to run too.

The graph mutations are the kinds of damage a hostile but fair user gives a graph or a spec: nodes
deleted, duplicated or renamed; op types swapped; inputs dropped, added, pointed at missing
nodes or out-of-range outputs, or malformed; attrs removed, retyped or given wrong kinds;
shapes negative or huge; constants that hold the wrong bytes; colocation with missing nodes;
devices TensorFlow cannot parse; cycles; corrupt or truncated serialized bytes; and in the
spec, device names TF cannot address or resolves to one device, kinds that contradict names,
numbers that are zero, negative, infinite, NaN or past int64.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import json
import os
import shutil
import socket
from typing import Callable

import numpy as np
import tensorflow as tf
from google.protobuf import json_format, text_format
from tensorflow.core.framework import graph_pb2, types_pb2

from tf_autoplace.api import autoplace, place_cost_graph
from tf_autoplace.core import registry
from tf_autoplace.core.cluster import Cluster, device_spec, resolve_cluster
from tf_autoplace.core.tasks import DEFAULT_LINK_CLASSES, LinkClass
from tf_autoplace.errors import AutoplaceError, MeasurementError
from tf_autoplace.graph import costgraph, grappler, ingest
from tf_autoplace.hw.cluster_profile import served_devices
from tf_autoplace.hw.local_cluster import local_cluster
from tf_autoplace.hw.verify import SINGLE, kept
from tf_autoplace.keras import autoplace_model
from tf_autoplace.learning.checkpoints import CONFIG_FILE, WEIGHTS_FILE
from tf_autoplace.pipeline.prepare import build_problem, export_cost_graph
from tf_autoplace.placers import PlacetoPlacer, get_placer
from tf_autoplace.placers.gdp.placer import SHIPPED_POLICY as GDP_SHIPPED_POLICY
from tf_autoplace.placers.placeto.search import pretrained_policy_dir
from tf_autoplace.proto import cost_graph_pb2, placement_pb2
from tf_autoplace.testing.problems import random_problem

HOST = "/job:localhost/replica:0/task:0/device:"
NUM_LOCAL_CPUS = 3  # the session that runs a placed graph has this many logical CPUs
MAX_RUN_BYTES = 2**28  # placed graphs whose simulated peak memory is larger are imported only

CLUSTER_SPEC = f"""
default_bandwidth_gbps: 10
default_latency_us: 5
op_overhead_us: 5.7
device {{ name: "{HOST}CPU:0" kind: "CPU" memory_bytes: 8000000000 num_cores: 1
          frequency_mhz: 2000 memory_bandwidth_gbps: 20 }}
device {{ name: "{HOST}CPU:1" kind: "CPU" memory_bytes: 8000000000 num_cores: 1
          frequency_mhz: 2000 memory_bandwidth_gbps: 20 }}
"""

# The placers cases use. "placeto" (run zero-shot: max_samples=8, no fine-tuning) compiles its
# policy once per process, seconds; the quick run leaves it out (DESIGN: tests take seconds).
PLACERS = ("auto", *registry.names("heuristic"))
ALL_PLACERS = PLACERS + ("placeto",)
_OP_TYPES = ("Identity", "NoOp", "MatMul", "AddV2", "Const", "Placeholder", "VarHandleOp",
             "ReadVariableOp", "Relu", "Sum", "Shape", "Reshape", "NoSuchOp", "")
_DTYPES = (types_pb2.DT_FLOAT, types_pb2.DT_INT32, types_pb2.DT_STRING, types_pb2.DT_RESOURCE,
           types_pb2.DT_HALF, types_pb2.DT_INVALID, 999)
_DIMS = (-7, -1, 0, 1, 3, 2**31, 2**40)
_DEVICES = ("/bogus", "/device:GPU:0", f"{HOST}CPU:1", "/job:foo/device:CPU:5", "/cpu:0",
            "garbage:::", "")


@functools.lru_cache(maxsize=None)
def _base_graph_bytes() -> bytes:
    return base_graph().as_graph_def().SerializeToString(deterministic=True)


def base_graph() -> tf.Graph:
    """A small training graph: a fed placeholder, a constant, two resource variables, matmul,
    relu, a sum loss, its gradients and a plain SGD update; ``init`` initialises."""
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.set_random_seed(0)
        x = tf.compat.v1.placeholder(tf.float32, [4, 8], name="x")
        b = tf.constant(np.linspace(0, 1, 3, dtype=np.float32), name="b")
        w = tf.compat.v1.get_variable("w", [8, 3], initializer=tf.compat.v1.ones_initializer(),
                                      use_resource=True)
        v = tf.compat.v1.get_variable("v", [3], initializer=tf.compat.v1.zeros_initializer(),
                                      use_resource=True)
        h = tf.nn.relu(tf.matmul(x, w) + b + v, name="h")
        loss = tf.reduce_sum(h * h, name="loss")
        tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, name="train")
        tf.compat.v1.global_variables_initializer()  # "init"
    return g


@dataclasses.dataclass
class Case:
    """One fuzz case. ``graph`` is what autoplace is given (a GraphDef, a tf.Graph imported
    from it, or serialized bytes); ``graph_def`` the GraphDef behind it (None for bytes)."""

    index: int
    graph: object
    graph_def: graph_pb2.GraphDef | None
    cluster_text: str
    placer: str
    mutations: list


# ----------------------------------------------------------------------------- mutations
def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def _node(rng, graph_def):
    return graph_def.node[int(rng.integers(len(graph_def.node)))] if graph_def.node else None


def _mutate_graph(graph_def: graph_pb2.GraphDef, rng: np.random.Generator) -> str:
    """Damage ``graph_def`` in place in one random way; returns what was done."""
    node = _node(rng, graph_def)
    if node is None:
        return "nothing (no nodes)"
    names = [n.name for n in graph_def.node]
    kind = int(rng.integers(16))
    if kind == 0:
        graph_def.node.remove(node)
        return f"deleted {node.name!r}"
    if kind == 1:
        graph_def.node.add().CopyFrom(node)
        return f"duplicated {node.name!r}"
    if kind == 2:
        new = _pick(rng, names + ["", "a:b", "^x", "renamed"])
        old, node.name = node.name, new
        return f"renamed {old!r} to {new!r}"
    if kind == 3:
        old, node.op = node.op, _pick(rng, _OP_TYPES)
        return f"op of {node.name!r}: {old} -> {node.op!r}"
    if kind == 4 and node.input:
        i = int(rng.integers(len(node.input)))
        gone = node.input[i]
        del node.input[i]
        return f"dropped input {gone!r} of {node.name!r}"
    if kind == 5:
        target = _pick(rng, names)
        new = _pick(rng, [target, f"{target}:{int(rng.integers(4))}", f"^{target}",
                          f"{target}:99", "ghost", "a:x", "", "^", ":0", f"^{target}:1"])
        if node.input and rng.random() < 0.5:
            i = int(rng.integers(len(node.input)))
            node.input[i] = new
            return f"input {i} of {node.name!r} -> {new!r}"
        node.input.append(new)
        return f"added input {new!r} to {node.name!r}"
    if kind == 6 and node.attr:
        key = _pick(rng, sorted(node.attr))
        del node.attr[key]
        return f"deleted attr {key!r} of {node.name!r}"
    if kind == 7:
        key = _pick(rng, ["T", "dtype", "DstT", "SrcT"])
        dtype = _pick(rng, _DTYPES)
        node.attr[key].type = dtype
        return f"attr {key!r} of {node.name!r} = type {dtype}"
    if kind == 8 and node.attr:
        key = _pick(rng, sorted(node.attr))
        node.attr[key].s = b"float"
        return f"attr {key!r} of {node.name!r} = string 'float'"
    if kind == 9:
        shape = node.attr["shape"].shape
        dims = [int(_pick(rng, _DIMS)) for _ in range(int(rng.integers(4)))]
        del shape.dim[:]
        for d in dims:
            shape.dim.add(size=d)
        return f"shape of {node.name!r} = {dims}"
    if kind == 10:
        consts = [n for n in graph_def.node if n.op == "Const" and "value" in n.attr]
        if consts:
            const = _pick(rng, consts)
            tensor = const.attr["value"].tensor
            how = int(rng.integers(4))
            if how == 0:
                tensor.tensor_content = tensor.tensor_content[:int(rng.integers(9))]
            elif how == 1:
                tensor.dtype = _pick(rng, _DTYPES)
            elif how == 2:
                tensor.tensor_shape.dim.add(size=int(_pick(rng, _DIMS)))
            else:
                del const.attr["value"]
            return f"value of Const {const.name!r} damaged ({how})"
    if kind == 11:
        target = _pick(rng, names + ["ghost"])
        node.attr["_class"].list.s.append(f"loc:@{target}".encode())
        return f"colocated {node.name!r} with {target!r}"
    if kind == 12:
        node.device = _pick(rng, _DEVICES)
        return f"device of {node.name!r} = {node.device!r}"
    if kind == 13 and len(names) > 1:
        first = graph_def.node[0]
        last = graph_def.node[len(graph_def.node) - 1]
        first.input.append(last.name)
        return f"cycle: {first.name!r} reads {last.name!r}"
    if kind == 14:
        node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(
            np.ones(int(rng.integers(1, 5)), np.float32)))
        return f"gave {node.name!r} a value attr"
    node.attr["N"].i = int(rng.integers(-2, 5))
    return f"attr 'N' of {node.name!r} = {node.attr['N'].i}"


def _mutate_cluster(text: str, rng: np.random.Generator) -> str:
    """One damaged copy of the text spec ``text``."""
    kind = int(rng.integers(10))
    cpu1 = f"{HOST}CPU:1"
    if kind == 0:
        return text.replace(cpu1, _pick(rng, ["/bogus", f"{HOST}CPU:0", "/cpu:0", "/device:CPU:0",
                                              f"{HOST}GPU:0", "/device:CPU:-1", "/job:a b/cpu:0",
                                              "/cpu:2", "/job:localhost/device:CPU:1"]))
    if kind == 1:
        return text.replace('kind: "CPU"', f'kind: "{_pick(rng, ["GPU", "TPU", "cpu", ""])}"', 1)
    field = _pick(rng, ["memory_bytes", "num_cores", "frequency_mhz"])
    if kind == 2:
        value = _pick(rng, ["0", "-1", "1", str(2**62), str(2**63 - 1)])
        return text.replace(f"{field}: ", f"{field}: {value} #", 1)
    number = _pick(rng, ["0", "-1", "nan", "inf", "-inf", "1e-300", "1e300", "0.5"])
    if kind == 3:
        field = _pick(rng, ["memory_bandwidth_gbps: 20", "default_bandwidth_gbps: 10",
                            "default_latency_us: 5", "op_overhead_us: 5.7"])
        return text.replace(field, f"{field.split(':')[0]}: {number}", 1)
    if kind == 4:
        return text.replace("memory_bytes: 8000000000", f"speed: {number} memory_bytes: 1", 1)
    if kind == 5:
        return text + (f'link {{ src: "{HOST}CPU:0" dst: "{_pick(rng, [cpu1, "/ghost:0"])}" '
                       f'bandwidth_gbps: {number} latency_us: {number} }}\n')
    if kind == 6:
        return text + (f'device {{ name: "{HOST}GPU:{int(rng.integers(2))}" kind: "GPU" '
                       f'memory_bytes: {int(rng.integers(1, 10**10))} }}\n')
    if kind == 7:
        return text[:int(rng.integers(len(text)))]
    if kind == 8:
        return text.replace("device {", "device { no_such_field: 1 ", 1)
    return text  # unchanged


def make_case(seed: int, index: int, placers=PLACERS) -> Case:
    """Case ``index`` of the run seeded ``seed``: a few damages to the base graph (most
    cases), to the cluster spec (some), the form the graph is given in, and the placer."""
    rng = np.random.default_rng([seed, index])
    graph_def = graph_pb2.GraphDef.FromString(_base_graph_bytes())
    mutations = [_mutate_graph(graph_def, rng) for _ in range(int(rng.integers(4)))]
    cluster_text = CLUSTER_SPEC
    if rng.random() < 0.3:
        for _ in range(int(rng.integers(1, 3))):
            cluster_text = _mutate_cluster(cluster_text, rng)
        mutations.append("cluster spec damaged")
    placer = _pick(rng, placers)
    form = rng.random()
    graph = graph_def
    if form < 0.1:  # serialized, perhaps corrupt
        data = bytearray(graph_def.SerializeToString())
        for _ in range(int(rng.integers(3))):
            if data:
                data[int(rng.integers(len(data)))] = int(rng.integers(256))
        if data and rng.random() < 0.5:
            data = data[:int(rng.integers(len(data)))]
        graph, graph_def = bytes(data), None
        mutations.append("given as (maybe corrupt) bytes")
    elif form < 0.3:
        try:
            with tf.Graph().as_default() as imported:
                tf.graph_util.import_graph_def(graph_def, name="")
            graph = imported
            mutations.append("given as a tf.Graph")
        except (ValueError, TypeError, KeyError, tf.errors.OpError):
            pass  # TF will not build it: given as the GraphDef
    return Case(index, graph, graph_def, cluster_text, placer, mutations)


# --------------------------------------------------------------------------------- checks
def _snapshot(graph):
    if isinstance(graph, tf.Graph):
        return graph.as_graph_def().SerializeToString(deterministic=True)
    if isinstance(graph, bytes):
        return graph
    return graph.SerializeToString(deterministic=True)


def _feeds(graph: tf.Graph) -> dict:
    """A value for every Placeholder: zeros (empty strings) of its shape, unknown dimensions
    as 1 and an unknown rank as a scalar; ValueError for a dtype that cannot be fed."""
    feeds = {}
    for op in graph.get_operations():
        if op.type == "Placeholder":
            t = op.outputs[0]
            if t.dtype in (tf.resource, tf.variant) or t.dtype.is_quantized:
                raise ValueError(f"cannot feed {op.name} ({t.dtype.name})")
            shape = [] if t.shape.rank is None else [d or 1 for d in t.shape.as_list()]
            feeds[t] = (np.full(shape, b"", dtype=object) if t.dtype == tf.string
                        else np.zeros(shape, t.dtype.as_numpy_dtype))
    return feeds


def _import(graph_def: graph_pb2.GraphDef):
    """``(graph, None)``, or ``(None, why)`` when TensorFlow will not import ``graph_def``."""
    graph = tf.Graph()
    try:
        with graph.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
    except (ValueError, TypeError, KeyError, tf.errors.OpError) as e:
        return None, f"import: {type(e).__name__}: {str(e)[:300]}"
    return graph, None


def run_graph_def(graph_def: graph_pb2.GraphDef, *, soft_placement: bool,
                  target: str = "") -> str | None:
    """Import ``graph_def`` and run ``init`` (if any), then every sink node, in a v1 Session
    with NUM_LOCAL_CPUS logical CPUs (or on the servers of ``target``, with theirs). Returns
    None on success, else why it failed."""
    graph, failure = _import(graph_def)
    if failure:
        return failure
    try:
        feeds = _feeds(graph)
    except (ValueError, TypeError) as e:
        return f"feed: {e}"
    config = tf.compat.v1.ConfigProto(allow_soft_placement=soft_placement,
                                      inter_op_parallelism_threads=1,
                                      intra_op_parallelism_threads=1)
    if not target:
        config.device_count["CPU"] = NUM_LOCAL_CPUS
    sinks = [graph.get_operation_by_name(n) for n in grappler.sink_nodes(graph_def)]
    try:
        with tf.compat.v1.Session(target, graph=graph, config=config) as sess:
            names = {op.name for op in graph.get_operations()}
            if "init" in names:
                sess.run("init", feeds)
            sess.run([op for op in sinks if op.name != "init"], feeds)
    except (ValueError, TypeError, tf.errors.OpError) as e:
        return f"run: {type(e).__name__}: {str(e)[:300]}"
    return None


def _placer(name: str):
    """The placer a case names; "placeto" zero-shot with 8 samples (no fine-tuning)."""
    return (PlacetoPlacer(max_samples=8, fine_tune=False) if name == "placeto"
            else get_placer(name))


def _runs_on_local_cpus(cluster: Cluster) -> bool:
    """Whether every device is a logical CPU a local v1 Session with NUM_LOCAL_CPUS has."""
    for name in cluster.names:
        spec = device_spec(name)
        if (spec.device_type != "CPU" or spec.device_index >= NUM_LOCAL_CPUS
                or spec.job not in (None, "localhost") or spec.replica not in (None, 0)
                or spec.task not in (None, 0)):
            return False
    return True


def run_case(case: Case) -> dict:
    """Place ``case`` and check it (module docstring). Returns a JSON-able dict: ``outcome``
    ("placed" or "error"), the error's type and message, ``untouched``, and for a placement
    ``problems`` (empty when TF imports and runs it, or the input itself does not run)."""
    before = _snapshot(case.graph)
    out = dict(index=case.index, placer=case.placer, mutations=case.mutations)
    try:
        cluster = Cluster.from_text(case.cluster_text)
        report = autoplace(case.graph, cluster=cluster, placer=_placer(case.placer),
                           seed=case.index)
    except AutoplaceError as e:
        out.update(outcome="error", error=type(e).__name__, message=str(e)[:300],
                   untouched=_snapshot(case.graph) == before, problems=[])
        return out
    out.update(outcome="placed", error=None, message="")
    problems = []
    if isinstance(case.graph, tf.Graph):
        placed = case.graph.as_graph_def()
        source = tf.compat.v1.GraphDef.FromString(before)
        out["untouched"] = True  # a tf.Graph is placed in place: checked through `placed`
        if any(not op.device for op in case.graph.get_operations()):
            problems.append("some ops of the tf.Graph were left without a device")
    else:
        placed = report.graph_def
        source = (case.graph_def if case.graph_def is not None  # bytes: what they parse to
                  else ingest.load_meta_graph(case.graph).graph_def)
        out["untouched"] = _snapshot(case.graph) == before
    out["problems"] = problems + _check_placed_graph(placed, source, report, cluster, out)
    return out


def _check_placed_graph(placed: graph_pb2.GraphDef, source: graph_pb2.GraphDef, report,
                        cluster: Cluster, out: dict) -> list[str]:
    """What is wrong with ``placed`` (the placed copy of ``source``): other nodes, devices
    outside the cluster, a graph TensorFlow cannot import or run (module docstring). Notes
    what was not run in ``out``."""
    problems = []
    if [n.name for n in placed.node] != [n.name for n in source.node]:
        problems.append("the placed graph holds other nodes than the input")
    if set(report.assignment.values()) - set(cluster.names):
        problems.append("ops placed on devices outside the cluster")
    soft = not _runs_on_local_cpus(cluster)
    if sum(d.peak_memory_bytes for d in report.devices) > MAX_RUN_BYTES:
        out["not_run"] = "needs more memory than a test should take"
        failure = _import(placed)[1]
    else:
        failure = run_graph_def(placed, soft_placement=soft)
    if failure is not None and failure.startswith("feed:"):
        out["not_run"] = failure  # the harness cannot feed it; TF imported it
    elif failure is not None:
        unplaced = run_graph_def(source, soft_placement=True)
        if unplaced is None or failure.startswith("import"):
            problems.append(f"TensorFlow cannot use the placed graph ({failure}); the input "
                            f"{'runs' if unplaced is None else 'fails too: ' + unplaced}")
        else:
            out["input_fails_too"] = unplaced
    out["soft_placement"] = soft
    return problems


# ============================================================================ cost graphs
@dataclasses.dataclass
class CostGraphCase:
    """A damaged cost graph: ``data`` is the file's bytes in ``form`` ("text", "json" or
    "binary", which its name says)."""

    index: int
    data: bytes
    form: str
    cluster_text: str
    placer: str
    mutations: list


_COST_GRAPH_SUFFIX = {"text": ".costgraph.pbtxt", "json": ".json", "binary": ".costgraph.pb"}


@functools.lru_cache(maxsize=None)
def _base_cost_graph_bytes() -> bytes:
    """The base graph as a binary cost graph, costed for CLUSTER_SPEC's cluster."""
    problem, _ = build_problem(ingest.load_meta_graph(_base_graph_bytes()),
                               Cluster.from_text(CLUSTER_SPEC))
    return costgraph.encode(export_cost_graph(problem), "binary")


def _mutate_cost_graph(proto: cost_graph_pb2.CostGraph, rng: np.random.Generator) -> str:
    """Damage ``proto`` in place in one random way; returns what was done."""
    ops = proto.op
    if not ops:
        return "nothing (no ops)"
    op = ops[int(rng.integers(len(ops)))]
    name, names = op.name, [o.name for o in ops]
    kind = int(rng.integers(14))
    if kind == 0:
        ops.remove(op)
        return f"deleted {name!r}"
    if kind == 1:
        ops.add().CopyFrom(op)
        return f"duplicated {name!r}"
    if kind == 2:
        op.name = _pick(rng, names + ["", "a:b", "^x", "renamed"])
        return f"renamed {name!r} to {op.name!r}"
    if kind == 3:
        ref = (op.input[int(rng.integers(len(op.input)))] if op.input and rng.random() < 0.5
               else op.input.add())
        ref.op = _pick(rng, names + ["ghost", ""])
        ref.output = int(_pick(rng, [-1, 0, 1, 5, 2**30]))
        return f"{name!r} reads {ref.op!r}:{ref.output}"
    if kind == 4:
        target = _pick(rng, names + ["ghost", "", name])
        op.control_input.append(target)
        return f"{name!r} waits for {target!r}"
    if kind == 5:
        how = int(rng.integers(4))
        if how == 0 and op.time:
            entry = op.time[int(rng.integers(len(op.time)))]
            entry.seconds = float(_pick(rng, [np.nan, np.inf, -1.0, 0.0, 1e300, -0.0, 1e-300]))
            return f"{name!r} takes {entry.seconds} s on {entry.device_kind}"
        if how == 1:
            entry = op.time.add(device_kind=_pick(rng, ["GPU", "CPU", "TPU", "", "cpu"]),
                                seconds=float(rng.random()))
            return f"{name!r} gains a time on {entry.device_kind!r}"
        if how == 2:
            del op.time[:]
            return f"{name!r} has no time"
        del op.time[:]
        op.time.add(device_kind="GPU", seconds=1e-5)  # a kind the cluster lacks
        return f"{name!r} runs on GPUs only"
    if kind == 6:
        if op.output_bytes and rng.random() < 0.7:
            i = int(rng.integers(len(op.output_bytes)))
            op.output_bytes[i] = int(_pick(rng, [-1, 0, 2**62, 2**40]))
            return f"output {i} of {name!r} has {op.output_bytes[i]} bytes"
        del op.output_bytes[:]
        return f"{name!r} has no outputs"
    if kind == 7:
        op.persistent_bytes = int(_pick(rng, [-1, 0, 2**40, 2**62, 10**12]))
        return f"{name!r} holds {op.persistent_bytes} bytes"
    if kind == 8:
        op.colocation_group = _pick(rng, names + ["g", ""])
        return f"{name!r} colocated with group {op.colocation_group!r}"
    if kind == 9:
        proto.format_version = int(_pick(rng, [0, 2, -1, 1]))
        return f"format_version {proto.format_version}"
    if kind == 10 and len(ops) > 1:
        last = ops[len(ops) - 1]
        if last.output_bytes:
            ops[0].input.add(op=last.name, output=0)
        else:
            ops[0].control_input.append(last.name)
        return f"cycle: {ops[0].name!r} depends on {last.name!r}"
    if kind == 11:
        op.type = _pick(rng, ["", "NoSuchOp", "MatMul"])
        return f"type of {name!r} = {op.type!r}"
    if kind == 12:
        op.shape_unknown = not op.shape_unknown
        return f"shape of {name!r} known: {not op.shape_unknown}"
    proto.description = _pick(rng, ["", "\u2603" * 1000, "x" * 100000])
    return "description replaced"


def make_cost_graph_case(seed: int, index: int, placers=PLACERS) -> CostGraphCase:
    """Case ``index`` of the ``cost_graphs`` family of the run seeded ``seed``."""
    rng = np.random.default_rng([seed, index, 1])
    proto = cost_graph_pb2.CostGraph.FromString(_base_cost_graph_bytes())
    mutations = [_mutate_cost_graph(proto, rng) for _ in range(int(rng.integers(4)))]
    cluster_text = CLUSTER_SPEC
    if rng.random() < 0.2:
        cluster_text = _mutate_cluster(cluster_text, rng)
        mutations.append("cluster spec damaged")
    form = _pick(rng, sorted(_COST_GRAPH_SUFFIX))
    if form == "text":
        data = text_format.MessageToString(proto).encode("utf-8")
    elif form == "json":
        data = json_format.MessageToJson(proto, preserving_proto_field_name=True).encode()
    else:
        data = proto.SerializeToString()
    if data and rng.random() < 0.15:
        data = _corrupt(bytearray(data), rng)
        mutations.append("file bytes corrupted")
    return CostGraphCase(index, data, form, cluster_text, _pick(rng, placers), mutations)


def _corrupt(data: bytearray, rng: np.random.Generator) -> bytes:
    """Some bytes of ``data`` overwritten, and perhaps its end cut off."""
    for _ in range(int(rng.integers(1, 4))):
        data[int(rng.integers(len(data)))] = int(rng.integers(256))
    if rng.random() < 0.5:
        data = data[:int(rng.integers(len(data)))]
    return bytes(data)


def run_cost_graph_case(case: CostGraphCase, workdir: str) -> dict:
    """Write ``case``'s file into ``workdir``, place it, check it (module docstring)."""
    path = os.path.join(workdir, f"case{case.index}{_COST_GRAPH_SUFFIX[case.form]}")
    with open(path, "wb") as f:
        f.write(case.data)
    out = dict(index=case.index, placer=case.placer, mutations=case.mutations, problems=[])
    try:
        cluster = Cluster.from_text(case.cluster_text)
        report = place_cost_graph(path, cluster=cluster, placer=get_placer(case.placer),
                                  seed=case.index, progress=False)
        graph = costgraph.read(path)
    except AutoplaceError as e:
        out.update(outcome="error", error=type(e).__name__, message=str(e)[:300])
        graph = report = None
    with open(path, "rb") as f:
        out["untouched"] = f.read() == case.data
    os.unlink(path)
    if report is None:
        return out
    out.update(outcome="placed", error=None, message="")
    names, problems = graph.graph.names, out["problems"]
    if list(report.assignment) != list(names):
        problems.append("the placement names other ops than the cost graph")
    kinds = {device.name: device.kind for device in cluster.devices}
    devices = [report.assignment.get(n) for n in names]
    if any(d not in kinds for d in devices):
        problems.append("ops placed on devices outside the cluster")
        return out
    slow = [n for i, (n, d) in enumerate(zip(names, devices))
            if not np.isfinite(graph.times.get(kinds[d], np.full(len(names), np.inf))[i])]
    if slow:
        problems.append(f"ops placed where they have no time (no kernel): {slow[:3]}")
    by_group: dict[int, set] = {}
    for group, device in zip(graph.graph.colocation.tolist(), devices):
        by_group.setdefault(group, set()).add(device)
    if any(len(d) > 1 for d in by_group.values()):
        problems.append("a colocation group is split over devices")
    return out


# ============================================================================ saved policies
@dataclasses.dataclass
class PolicyCase:
    """A shipped policy of ``placer`` ("placeto" or "gdp") with ``damage`` done to a copy of it
    (``damage(directory)``)."""

    index: int
    placer: str
    damage: Callable[[str], None]
    mutations: list


POLICY_PLACERS = ("placeto", "gdp")


def shipped_policy(placer: str) -> str:
    """The shipped policy directory the ``policies`` family damages copies of."""
    return pretrained_policy_dir(2) if placer == "placeto" else GDP_SHIPPED_POLICY


def _damage_weights(rng: np.random.Generator, source: str) -> tuple[Callable, str]:
    with np.load(os.path.join(source, WEIGHTS_FILE)) as npz:
        arrays = {k: npz[k] for k in npz.files}
    with open(os.path.join(source, WEIGHTS_FILE), "rb") as f:
        raw = f.read()
    key = _pick(rng, sorted(arrays))
    kind = int(rng.integers(12))
    if kind < 3:
        data = _corrupt(bytearray(raw), rng) if kind < 2 else raw[:int(rng.integers(len(raw)))]
        return (lambda path: _write(path, data)), "weights.npz bytes damaged"
    w = arrays[key]
    new = {
        3: lambda: np.full_like(w, _pick(rng, [np.nan, np.inf, -np.inf])),
        4: lambda: np.full_like(w, float(_pick(rng, [1e11, 1e38, -3e38, 1e3, 50.0]))),
        5: lambda: w.astype(_pick(rng, [np.int32, np.int64, np.bool_, np.complex64])),
        6: lambda: w.astype(str),
        7: lambda: w.astype(object),
        8: lambda: np.zeros(tuple(int(s) + 1 for s in w.shape) or (2,), w.dtype),
        9: lambda: w.astype(_pick(rng, [np.float64, np.float16])),
    }.get(kind)
    if new is not None:
        arrays[key] = new()
        what = f"weight {key} -> {arrays[key].dtype} {arrays[key].shape}"
    elif kind == 10:
        del arrays[key]
        what = f"weight {key} removed"
    else:
        arrays["w999"] = np.zeros(3, np.float32)
        what = "an extra weight"
    return (lambda path: np.savez(path, **arrays)), what


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _damage_settings(rng: np.random.Generator, source: str) -> tuple[Callable, str]:
    with open(os.path.join(source, CONFIG_FILE), encoding="utf-8") as f:
        text = f.read()
    settings = json.loads(text)
    key = _pick(rng, sorted(settings))
    kind = int(rng.integers(5))
    if kind == 0:
        data = text[:int(rng.integers(len(text)))].encode()
        what = "policy.json cut short"
    elif kind == 1:
        data = _pick(rng, [b"[]", b'"x"', b"7", b"null", b"\xff\xfe{", b""])
        what = f"policy.json = {data!r}"
    elif kind == 2:
        del settings[key]
        data, what = json.dumps(settings).encode(), f"setting {key} removed"
    elif kind == 3:
        settings["no_such_setting"] = 1
        data, what = json.dumps(settings).encode(), "an unknown setting"
    else:
        value = _pick(rng, [-1, 0, 10**9, 2**62, "8", 8.5, None, [], {}, True])
        settings[key] = value
        data, what = json.dumps(settings).encode(), f"{key} = {value!r}"
    return (lambda path: _write(path, data)), what


def make_policy_case(seed: int, index: int) -> PolicyCase:
    """Case ``index`` of the ``policies`` family of the run seeded ``seed``."""
    rng = np.random.default_rng([seed, index, 2])
    placer = _pick(rng, POLICY_PLACERS)
    source = shipped_policy(placer)
    kind = int(rng.integers(10))
    if kind < 6:
        damage, what = _damage_weights(rng, source)
        target = WEIGHTS_FILE
    elif kind < 9:
        damage, what = _damage_settings(rng, source)
        target = CONFIG_FILE
    else:
        target = _pick(rng, [WEIGHTS_FILE, CONFIG_FILE])
        how = _pick(rng, ["fifo", "directory", "missing", "link to /dev/zero"])
        damage = {"fifo": os.mkfifo, "directory": os.mkdir, "missing": lambda path: None,
                  "link to /dev/zero": lambda path: os.symlink("/dev/zero", path)}[how]
        what = f"{target} is a {how}"

    def apply(directory: str) -> None:
        shutil.copytree(source, directory)
        path = os.path.join(directory, target)
        os.unlink(path)
        damage(path)

    return PolicyCase(index, placer, apply, [what])


def run_policy_case(case: PolicyCase, workdir: str) -> dict:
    """Damage a copy of the shipped policy in ``workdir``, give it to the placer and place a
    small random problem with it (module docstring)."""
    directory = os.path.join(workdir, f"policy{case.index}")
    case.damage(directory)
    out = dict(index=case.index, placer=case.placer, mutations=case.mutations, problems=[],
               untouched=True)
    problem = random_problem(40, case.index, num_gpus=2, max_groups=16)
    try:
        placer = (get_placer("placeto", policy=directory, options=["max_samples=8"])
                  if case.placer == "placeto" else get_placer("gdp", policy=directory,
                                                              budget_s=0))
        placer.place(problem, seed=case.index)  # checks the placement it returns
        out.update(outcome="placed", error=None, message="")
    except AutoplaceError as e:
        out.update(outcome="error", error=type(e).__name__, message=str(e)[:300])
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return out


# ========================================================================= cache entries
@dataclasses.dataclass
class CacheCase:
    """A placement of the base graph with ``placer``, its cache entry then damaged by
    ``damage(entry_path, workdir)``. ``read_back``: whether the second placement must read the
    entry back (True: it is whole and true), must not (False), or may (None: whole, and what it
    says passes the checks of any placement, so nothing tells it from a true one)."""

    index: int
    placer: str
    damage: Callable[[str, str], None]
    read_back: bool | None
    mutations: list


CACHE_PLACERS = ("m_etf", "single", "best_heuristic", "metis", "m_topo", "random")


def _edit_entry(edit: Callable[[placement_pb2.PlacementResult], None]):
    def damage(path: str, workdir: str) -> None:
        del workdir
        with open(path, "rb") as f:
            entry = placement_pb2.PlacementResult.FromString(f.read())
        edit(entry)
        _write(path, entry.SerializeToString())
    return damage


def _replace_entry(make: Callable[[str], None], keep_outside: bool = False):
    def damage(path: str, workdir: str) -> None:
        outside = os.path.join(workdir, os.path.basename(path) + ".outside")
        os.replace(path, outside)  # a whole, valid entry, now outside the cache directory
        if keep_outside:
            os.symlink(outside, path)
        else:
            make(path)
    return damage


def _bind_socket(path: str) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(path)
    sock.close()  # the socket file stays


def make_cache_case(seed: int, index: int) -> CacheCase:
    """Case ``index`` of the ``caches`` family of the run seeded ``seed``."""
    rng = np.random.default_rng([seed, index, 3])
    placer = _pick(rng, CACHE_PLACERS)
    kind = int(rng.integers(16))
    read_back = False
    if kind == 0:
        damage, what, read_back = (lambda path, workdir: None), "entry left whole", True
    elif kind < 3:
        def damage(path, workdir, rng=rng):
            with open(path, "rb") as f:
                data = bytearray(f.read())
            _write(path, _corrupt(data, rng) if data else b"")
        what = "entry bytes damaged"
    elif kind == 3:
        damage, what = (lambda path, workdir: _write(path, b"")), "entry empty"
    elif kind == 4:
        damage, what = _edit_entry(lambda e: setattr(e, "cache_key", "0" * 64)), "another key"
    elif kind == 5:
        damage, what = (_edit_entry(lambda e: setattr(e, "graph_fingerprint", "f" * 64)),
                        "another graph's fingerprint")
    elif kind == 6:
        damage, what = _edit_entry(lambda e: e.op.pop()), "one op fewer"
    elif kind == 7:
        damage, what = (_edit_entry(lambda e: setattr(e.op[0], "device", "/device:GPU:7")),
                        "a device the cluster lacks")
    elif kind == 8:
        damage, what = (_edit_entry(lambda e: e.op.add().CopyFrom(e.op[0])),
                        "an op named twice")
    elif kind == 9:
        def move(entry):
            devices = sorted({op.device for op in entry.op})
            entry.op[len(entry.op) // 2].device = f"{HOST}CPU:{1 - int(devices[0][-1])}"
        damage, what, read_back = _edit_entry(move), "one op moved to the other device", None
    elif kind == 10:
        damage, what, read_back = (_edit_entry(lambda e: e.op.reverse()), "ops in reverse order",
                                   None)
    elif kind == 11:
        damage, what = _replace_entry(os.mkfifo), "a FIFO in its place"
    elif kind == 12:
        damage, what = _replace_entry(_bind_socket), "a socket in its place"
    elif kind == 13:
        damage, what = _replace_entry(os.mkdir), "a directory in its place"
    elif kind == 14:
        damage, what = (_replace_entry(None, keep_outside=True),
                        "a symbolic link to a whole entry outside the cache directory")
    else:
        damage, what = (_replace_entry(lambda path: os.symlink("/dev/zero", path)),
                        "a symbolic link to a device")
    return CacheCase(index, placer, damage, read_back, [what])


def run_cache_case(case: CacheCase, workdir: str) -> dict:
    """Place the base graph with a cache in ``workdir``, damage the entry, place again; the
    second placement must be valid and run, whatever the entry holds (module docstring)."""
    directory = os.path.join(workdir, f"cache{case.index}")
    os.mkdir(directory, 0o700)
    source = graph_pb2.GraphDef.FromString(_base_graph_bytes())
    cluster = Cluster.from_text(CLUSTER_SPEC)
    out = dict(index=case.index, placer=case.placer, mutations=case.mutations, untouched=True)
    try:
        autoplace(source, cluster=cluster, placer=case.placer, seed=case.index,
                  cache=directory, progress=False)
        (entry,) = [os.path.join(directory, n) for n in os.listdir(directory)]
        case.damage(entry, workdir)
        report = autoplace(source, cluster=cluster, placer=case.placer, seed=case.index,
                           cache=directory, progress=False)
    except Exception as e:  # noqa: BLE001 - a cache must never fail a placement
        out.update(outcome="error", error=type(e).__name__, message=str(e)[:300],
                   problems=[f"the placement failed: {type(e).__name__}: {str(e)[:200]}"])
        return out
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    out.update(outcome="placed", error=None, message="", from_cache=report.from_cache)
    problems = []
    if case.read_back is True and not report.from_cache:
        problems.append("a whole, valid entry was not read back")
    if case.read_back is False and report.from_cache:
        problems.append("a damaged entry was read back")
    out["problems"] = problems + _check_placed_graph(report.graph_def, source, report, cluster,
                                                     out)
    return out


# ======================================================================= TensorFlow clusters
@dataclasses.dataclass
class TFClusterCase:
    """A description of a TensorFlow cluster's tasks, perhaps damaged, given to
    :meth:`Cluster.from_tf` (``form`` one of :data:`TF_CLUSTER_FORMS` but "text") or, as a text
    ``ClusterSpec`` with tasks, to :meth:`Cluster.from_text` (``form`` "text", ``spec`` the
    text).

    ``expected``: for a description left whole, what the cluster must be (``tasks`` as
    ``[job, index, address]`` in order, ``target``, and ``devices`` (text) or ``templates``,
    the one-machine cluster each task takes); None once damaged.
    ``overridden``: (src, dst) device pairs a text spec's ``link`` entries set.
    ``links``: the link class figures the cluster's links between tasks must have
    (``{class: (bandwidth_gbps, latency_us)}``, "task" absent for the task's own links), or
    None when the figures given were damaged. ``names``: words of which an error's message
    must hold one (the damaged thing's name; empty: not checked)."""

    index: int
    form: str
    spec: object
    devices: object
    links_arg: object
    target: object
    expected: dict | None
    links: dict | None
    overridden: list
    names: list
    placer: str
    mutations: list


TF_CLUSTER_FORMS = ("dict", "tf_config", "tf_config_dict", "cluster_spec", "resolver", "text")
_JOBS = ("worker", "ps", "chief", "evaluator", "master", "w2")
_HOSTS = ("localhost", "127.0.0.1", "[::1]", "127.0.0.2", "LocalHost", "10.0.0.1", "10.0.0.2",
          "node1.example", "node2.example")
# The one-machine clusters a task's devices are taken from (Cluster.from_tf's ``devices``),
# by name: "local" is Cluster.local(configured=False) (a server process's default devices,
# whatever logical CPUs this process configured), "two CPUs" _ONE_MACHINE, the others shipped
# specs.
TASK_TEMPLATES = ("local", "cpu2", "k80x2", "two CPUs")
_ONE_MACHINE = """
default_bandwidth_gbps: 20
default_latency_us: 3
device { name: "/device:CPU:0" kind: "CPU" memory_bytes: 4000000000 }
device { name: "/device:CPU:1" kind: "CPU" memory_bytes: 4000000000 }
"""


@functools.lru_cache(maxsize=None)
def _template(name: str) -> Cluster:
    """The one-machine cluster of :data:`TASK_TEMPLATES` ``name``."""
    if name == "two CPUs":
        return Cluster.from_text(_ONE_MACHINE)
    return Cluster.local(configured=False) if name == "local" else resolve_cluster(name)


def _as_loopback(host: str) -> str:
    """The machine an address's host names, as the module docstring of
    :mod:`tf_autoplace.core.tasks` documents it (the fuzz's own reading, to check the
    package's against): every loopback name is one machine."""
    host = host.strip("[]").lower()
    if host in ("localhost", "::1") or host.startswith("127."):
        return "loopback"
    return host


def _documented_class(a, b) -> str:
    """The class of the links between tasks ``a`` and ``b`` (``Task`` s), as documented."""
    if (a.job, a.index) == (b.job, b.index):
        return "task"
    ha = _as_loopback(a.address.rsplit(":", 1)[0]) if a.address else ""
    hb = _as_loopback(b.address.rsplit(":", 1)[0]) if b.address else ""
    return "host" if ha and ha == hb else "network"


def _task_devices(rng: np.random.Generator, jobs: dict):
    """A ``devices`` argument for ``jobs`` (None, one template for all, or a dict by job and
    by task, a task's entry before its job's) and the :data:`TASK_TEMPLATES` name each task
    gets (by "job:index")."""
    def value(name):  # as a user gives it: None, a shipped name or a Cluster
        return {"local": None, "two CPUs": _template(name)}.get(name, name)

    kind = int(rng.integers(4))
    names = [f"{job}:{i}" for job, tasks in jobs.items() for i in _indices(tasks)]
    if kind == 0:
        return None, {n: "local" for n in names}
    if kind == 1:
        name = _pick(rng, TASK_TEMPLATES)
        return value(name), {n: name for n in names}
    per, devices = {}, {}
    for job in jobs:
        if rng.random() < 0.5:
            name = _pick(rng, TASK_TEMPLATES)
            devices[job] = value(name)
            per.update({n: name for n in names if n.split(":")[0] == job})
    for n in names:
        if rng.random() < 0.3:
            name = _pick(rng, TASK_TEMPLATES)
            job, i = n.split(":")
            devices[(job, int(i)) if rng.random() < 0.5 else n] = value(name)
            per[n] = name
    return devices, {n: per.get(n, "local") for n in names}


def _indices(tasks) -> list:
    return sorted(int(i) for i in tasks) if isinstance(tasks, dict) else list(range(len(tasks)))


def _tf_jobs(rng: np.random.Generator) -> dict:
    """1-3 jobs of 1-3 tasks on random hosts; some as sparse dicts ``{index: address}``."""
    jobs = {}
    for job in rng.choice(_JOBS, size=int(rng.integers(1, 4)), replace=False).tolist():
        addresses = [f"{_pick(rng, _HOSTS)}:{int(rng.integers(2000, 3000))}"
                     for _ in range(int(rng.integers(1, 4)))]
        if rng.random() < 0.3:
            indices = sorted(rng.choice(6, size=len(addresses), replace=False).tolist())
            jobs[job] = {i: a for i, a in zip(indices, addresses)}
        else:
            jobs[job] = addresses
    return jobs


def _expected_target(jobs: dict, chosen) -> str:
    """The documented default target: TF_CONFIG's task, else the first task of chief, master,
    worker, else of the first job (sorted by name)."""
    if chosen is not None:
        return "grpc://" + jobs[chosen[0]][chosen[1]]
    for job in ("chief", "master", "worker") + tuple(sorted(jobs)):
        if job in jobs and _indices(jobs[job]):
            return "grpc://" + jobs[job][_indices(jobs[job])[0]]
    return ""


def _damage_jobs(rng: np.random.Generator, jobs: dict) -> tuple[str, list]:
    """Damage ``jobs`` in place in one way an error must name; returns (what, names)."""
    job = _pick(rng, sorted(jobs))
    kind = int(rng.integers(6))
    if kind == 0:
        bad = _pick(rng, ["1worker", "a b", "job/x", "w\u00f6rker", "-"])
        jobs[bad] = jobs.pop(job)
        return f"job {job!r} renamed {bad!r}", [bad]
    if kind == 1:
        bad = _pick(rng, ["-1", "x", "1.5", "-3"])
        jobs[job] = {bad: "localhost:2000"}
        return f"job {job!r} has task index {bad!r}", [bad]
    if kind == 2:
        bad = _pick(rng, ["", None, 5, ["localhost:1"]])
        tasks = jobs[job]
        first = _indices(tasks)[0]
        if isinstance(tasks, dict):
            tasks[first] = bad
        else:
            tasks[0] = bad
        return f"task {job}:{first} has address {bad!r}", [f"{job}:{first}"]
    if kind == 3:
        bad = _pick(rng, ["localhost:2000", 5, None])
        jobs[job] = bad
        return f"job {job!r} = {bad!r}", [job]
    if kind == 4:
        tasks = jobs[job]
        first = _indices(tasks)[0]
        jobs[job] = {first: "localhost:1", str(first): "localhost:2"}
        return f"task {job}:{first} listed twice", [f"{job}:{first}"]
    jobs.clear()
    return "no jobs", []


def _damage_tf_config(rng: np.random.Generator, config: dict) -> tuple[object, str, list]:
    """A damaged TF_CONFIG (a dict, or the JSON text when cut): (config, what, names)."""
    kind = int(rng.integers(5))
    if kind == 0:
        text = json.dumps(config)
        return text[:int(rng.integers(len(text)))], "TF_CONFIG cut short", []
    if kind == 1:
        config["cluster"] = _pick(rng, [None, [], "worker"])
        return config, f"TF_CONFIG cluster = {config['cluster']!r}", ["cluster"]
    if kind == 2:
        config["task"] = {"type": "ghost", "index": 0}
        return config, "TF_CONFIG names a task of no job", ["ghost"]
    if kind == 3:
        job = _pick(rng, sorted(config["cluster"]))
        config["task"] = {"type": job, "index": 9}
        return config, f"TF_CONFIG names task {job}:9", [f"{job}:9"]
    config["task"] = _pick(rng, [{"index": 0}, "worker", 3])
    return config, f"TF_CONFIG task = {config['task']!r}", ["task"]


def _damage_devices(rng: np.random.Generator, devices, jobs: dict):
    """A damaged ``devices`` argument: (devices, what, names)."""
    kind = int(rng.integers(4))
    out = dict(devices) if isinstance(devices, dict) else {}
    if kind == 0:
        key = _pick(rng, ["ghost", f"{sorted(jobs)[0]}:9", ("ghost", 0)])
        out[key] = "cpu2"
        name = key if isinstance(key, str) else f"{key[0]}:{key[1]}"
        return out, f"devices for {key!r}", [name]
    if kind == 1:
        bad = _pick(rng, ["no_such_spec", "/nonexistent/spec.pbtxt", 3])
        out[sorted(jobs)[0]] = bad
        return out, f"devices {bad!r}", ([str(bad)] if isinstance(bad, str) else [])
    if kind == 2:
        tasks_cluster = Cluster.from_tf({"other": ["localhost:1"]}, "cpu2")
        out[sorted(jobs)[0]] = tasks_cluster
        return out, "a task's devices already on tasks", ["tasks"]
    named = Cluster.from_text('device { name: "/job:foo/replica:0/task:0/device:CPU:0" '
                              'kind: "CPU" memory_bytes: 1000000 }')
    out[sorted(jobs)[0]] = named
    return out, "a task's devices on another job", ["/job:foo"]


def _damage_links(rng: np.random.Generator) -> tuple[object, str, list]:
    kind = int(rng.integers(3))
    if kind == 0:
        return {"wan": (1.0, 10.0)}, "an unknown link class", ["wan"]
    if kind == 1:
        value = _pick(rng, [(0.0, 1.0), (-1.0, 5.0), (float("nan"), 1.0), (1.0, float("inf")),
                            (1.0, -2.0), (1.0,), "fast", (True, 1.0), (1.0, "5")])
        name = _pick(rng, ["task", "host", "network"])
        return {name: value}, f"link class {name} = {value!r}", []
    return [("host", (1.0, 2.0))], "links as a list", ["dict"]


def _links_arg(rng: np.random.Generator):
    """A valid ``links`` argument and the figures it gives each class."""
    figures = {}
    arg = {} if rng.random() < 0.7 else None
    for name in ("task", "host", "network"):
        if arg is not None and rng.random() < 0.4:
            bw = float(_pick(rng, [0.5, 1.0, 12.5, 100.0]))
            lat = float(_pick(rng, [0.0, 2.0, 250.0]))
            arg[name] = LinkClass(bw, lat) if rng.random() < 0.5 else (bw, lat)
            figures[name] = (bw, lat)
    for name, value in DEFAULT_LINK_CLASSES.items():
        figures.setdefault(name, (value.bandwidth_gbps, value.latency_us))
    return arg, figures


def _cluster_text(rng: np.random.Generator, jobs: dict):
    """A text ClusterSpec of ``jobs``' tasks (one or two CPU devices each), with link classes,
    explicit links, a target, perhaps damaged: (text, expected, link figures, overridden
    pairs, names, mutations)."""
    tasks = [(job, i, jobs[job][i]) for job in sorted(jobs) for i in _indices(jobs[job])]
    if rng.random() < 0.3:
        tasks = [tasks[k] for k in rng.permutation(len(tasks)).tolist()]  # any order
    devices = [(f"/job:{job}/replica:0/task:{i}/device:CPU:{k}", (job, i))
               for job, i, _ in tasks for k in range(int(rng.integers(1, 3)))]
    classes = []
    figures = {"task": (20.0, 3.0)}  # the spec's defaults
    figures.update({n: (v.bandwidth_gbps, v.latency_us) for n, v in DEFAULT_LINK_CLASSES.items()})
    for name in ("task", "host", "network"):
        if rng.random() < 0.5:
            bw = float(_pick(rng, [0.5, 2.0, 40.0])) if rng.random() < 0.8 else None
            lat = float(_pick(rng, [0.0, 7.0, 300.0])) if rng.random() < 0.8 else None
            classes.append((name, bw, lat))
            default = figures[name]
            figures[name] = (default[0] if bw is None else bw, default[1] if lat is None else lat)
    links = []
    if len(devices) > 1 and rng.random() < 0.4:
        a, b = rng.choice(len(devices), size=2, replace=False).tolist()
        links.append((devices[a][0], devices[b][0], 3.0, 11.0))
    target = _pick(rng, ["", f"grpc://{tasks[0][2]}"])
    mutations, names = [], []
    if rng.random() < 0.6:
        kind = int(rng.integers(10))
        if kind == 0:
            job, i, _ = tasks[0]
            name = f"/job:{job}/replica:0/task:{i + 7}/device:CPU:0"
            devices.append((name, None))
            what, names = "a device on a task not listed", [name]
        elif kind == 1:
            devices.append(("/device:CPU:5", None))
            what, names = "a device naming no task", ["/device:CPU:5"]
        elif kind == 2:
            tasks = []
            classes = classes or [("host", 1.0, 1.0)]
            devices = [(f"/device:CPU:{k}", None) for k in range(len(devices))]
            links = []
            what, names = "link classes without tasks", ["link_class"]
        elif kind == 3:
            classes.append(("wan", 1.0, 1.0))
            what, names = "an unknown link class", ["wan"]
        elif kind == 4:
            classes += [("host", 1.0, 1.0), ("host", 2.0, 2.0)]
            what, names = "a link class given twice", ["host"]
        elif kind == 5:
            bad = _pick(rng, ["0", "-1", "nan", "inf"])
            classes = [c for c in classes if c[0] != "network"] + [("network", bad, None)]
            what, names = f"network bandwidth {bad}", ["bandwidth"]
        elif kind == 6:
            target = _pick(rng, ["http://localhost:1", "localhost:1"])
            what, names = f"target {target!r}", [target]
        elif kind == 7:
            tasks.append(tasks[0])
            what, names = "a task listed twice", ["twice"]
        elif kind == 8:
            bad = _pick(rng, ["1job", "a b", ""])
            tasks.append((bad, 0, "localhost:1"))
            what, names = f"task job {bad!r}", [repr(bad)]
        else:
            links.append((devices[0][0], "/job:ghost/replica:0/task:0/device:CPU:0", 1.0, 1.0))
            what, names = "a link to a device the cluster lacks", ["/job:ghost"]
        mutations.append(what)
    lines = ["default_bandwidth_gbps: 20", "default_latency_us: 3"]
    lines += [f'task {{ job: "{job}" index: {i} address: "{address}" }}'
              for job, i, address in tasks]
    lines += [f'device {{ name: "{name}" kind: "CPU" memory_bytes: 4000000000 }}'
              for name, _ in devices]
    for name, bw, lat in classes:
        fields = "".join(f" {k}: {v}" for k, v in (("bandwidth_gbps", bw), ("latency_us", lat))
                         if v is not None)
        lines.append(f'link_class {{ name: "{name}"{fields} }}')
    lines += [f'link {{ src: "{s}" dst: "{d}" bandwidth_gbps: {bw} latency_us: {lat} }}'
              for s, d, bw, lat in links]
    if target:
        lines.append(f'target: "{target}"')
    text = "\n".join(lines) + "\n"
    if not mutations and rng.random() < 0.1:
        text = text[:int(rng.integers(len(text)))]
        mutations.append("text cut short")
        names, figures = [], None  # what the rest says is not known
    expected = None if mutations else dict(
        tasks=[[job, i, address] for job, i, address in tasks], target=target,
        devices=[name for name, _ in devices])
    overridden = [(s, d) for s, d, _, _ in links]
    return text, expected, figures, overridden, names, mutations


def make_tf_cluster_case(seed: int, index: int, placers=PLACERS) -> TFClusterCase:
    """Case ``index`` of the ``tf_clusters`` family of the run seeded ``seed``."""
    rng = np.random.default_rng([seed, index, 4])
    jobs = _tf_jobs(rng)
    form = _pick(rng, TF_CLUSTER_FORMS)
    placer = _pick(rng, placers)
    if form == "text":
        text, expected, figures, overridden, names, mutations = _cluster_text(rng, jobs)
        return TFClusterCase(index, form, text, None, None, None, expected, figures, overridden,
                             names, placer, mutations)
    devices, templates = _task_devices(rng, jobs)
    links_arg, figures = _links_arg(rng)
    target = None if rng.random() < 0.8 else "grpc://localhost:4444"
    mutations, names = [], []
    chosen = None
    damage = rng.random()
    if damage < 0.2:
        what, names = _damage_jobs(rng, jobs)
        mutations.append(what)
    elif damage < 0.3:
        devices, what, names = _damage_devices(rng, devices, jobs)
        mutations.append(what)
    elif damage < 0.4:
        links_arg, what, names = _damage_links(rng)
        figures = None
        mutations.append(what)
    elif damage < 0.45:
        target = _pick(rng, ["http://localhost:1", 5])
        mutations.append(f"target {target!r}")
        names = [str(target)]
    spec = jobs
    if form in ("tf_config", "tf_config_dict"):
        config = {"cluster": jobs}
        if jobs and rng.random() < 0.5 and not mutations:
            job = _pick(rng, sorted(jobs))
            chosen = (job, _pick(rng, _indices(jobs[job])))
            config["task"] = {"type": chosen[0], "index": chosen[1]}
        if not mutations and rng.random() < 0.3:
            config, what, names = _damage_tf_config(rng, config)
            mutations.append(what)
        spec = json.dumps(config) if form == "tf_config" and isinstance(config, dict) else config
    elif form in ("cluster_spec", "resolver"):
        try:
            spec = tf.train.ClusterSpec(jobs)
        except (ValueError, TypeError, KeyError):
            form = "dict"  # TensorFlow will not build it: given as the dict
        else:
            if form == "resolver":
                spec = tf.distribute.cluster_resolver.SimpleClusterResolver(spec)
    expected = None
    if not mutations:
        order = [(job, i) for job in sorted(jobs) for i in _indices(jobs[job])]
        expected = dict(tasks=[[job, i, jobs[job][i]] for job, i in order],
                        target=_expected_target(jobs, chosen) if target is None else target,
                        templates=[templates[f"{job}:{i}"] for job, i in order])
    return TFClusterCase(index, form, spec, devices, links_arg, target, expected, figures, [],
                         names, placer, mutations)


def _check_tf_cluster(case: TFClusterCase, cluster: Cluster) -> list[str]:
    """What is wrong with the valid ``cluster`` made of ``case`` (module docstring)."""
    problems = []
    tasks = {(t.job, t.index): t for t in cluster.tasks}
    if not tasks:
        problems.append("a cluster of TensorFlow tasks has no tasks")
    for name in cluster.names:
        spec = device_spec(name)
        if not (name.startswith(f"/job:{spec.job}/replica:0/task:{spec.task}/device:")
                and (spec.job, spec.task) in tasks):
            problems.append(f"device {name!r} does not name one of the cluster's tasks")
    if cluster.target and not cluster.target.startswith("grpc://"):
        problems.append(f"target {cluster.target!r} is not grpc://")
    for i in range(cluster.num_devices):
        for j in range(cluster.num_devices):
            if i == j or problems:
                continue
            a, b = cluster.task_of(i), cluster.task_of(j)
            documented = _documented_class(a, b)
            if cluster.link_class(i, j) != documented:
                problems.append(f"link {cluster.names[i]} -> {cluster.names[j]} is of class "
                                f"{cluster.link_class(i, j)!r}, documented {documented!r}")
                continue
            pair = (cluster.names[i], cluster.names[j])
            figures = (None if case.links is None or pair in case.overridden
                       else case.links.get(documented))
            if figures is not None and not np.allclose(
                    [cluster.bandwidth[i, j], cluster.latency[i, j]],
                    [figures[0] * 1e9, figures[1] * 1e-6], rtol=1e-9, atol=0):
                problems.append(f"link {pair} of class {documented!r} has "
                                f"{cluster.bandwidth[i, j]:.4g} B/s, {cluster.latency[i, j]:.4g} "
                                f"s; its class says {figures}")
    expected = case.expected
    if expected is not None:
        got = [[t.job, t.index, t.address] for t in cluster.tasks]
        if got != expected["tasks"]:
            problems.append(f"tasks {got}, expected {expected['tasks']}")
        if cluster.target != expected["target"]:
            problems.append(f"target {cluster.target!r}, expected {expected['target']!r}")
        if "devices" in expected and list(cluster.names) != expected["devices"]:
            problems.append(f"devices {cluster.names}, expected {expected['devices']}")
        if "templates" in expected and not problems:
            start = 0
            for task, name in zip(cluster.tasks, expected["templates"]):
                template = _template(name)
                block = slice(start, start + template.num_devices)
                start += template.num_devices
                got = [device_spec(n) for n in cluster.names[block]]
                want = [device_spec(n) for n in template.names]
                if ([(d.device_type, d.device_index) for d in got]
                        != [(d.device_type, d.device_index) for d in want]
                        or any((d.job, d.task) != (task.job, task.index) for d in got)):
                    problems.append(f"task {task.name} has devices {cluster.names[block]}, "
                                    f"expected those of {name!r} ({template.names})")
                elif case.links is not None and "task" not in case.links and not np.allclose(
                        cluster.bandwidth[block, block], template.bandwidth):
                    problems.append(f"the links inside task {task.name} are not those of "
                                    f"{name!r}")
            if start != cluster.num_devices:
                problems.append(f"{cluster.num_devices} devices, expected {start}")
    again = Cluster.from_proto(cluster.to_proto())  # the spec it writes reads back the same
    links = ~np.eye(cluster.num_devices, dtype=bool)  # the diagonal is unused
    if (again.names != cluster.names or again.tasks != cluster.tasks
            or again.target != cluster.target
            or not np.allclose(again.bandwidth[links], cluster.bandwidth[links])
            or not np.allclose(again.latency[links], cluster.latency[links])
            or not np.allclose(again.delay, cluster.delay)):
        problems.append("the cluster's own spec (to_proto) reads back as another cluster")
    return problems


def run_tf_cluster_case(case: TFClusterCase, workdir: str) -> dict:
    """Make ``case``'s cluster; a valid one is checked and the base graph placed on it
    (module docstring)."""
    del workdir
    out = dict(index=case.index, placer=case.placer, mutations=case.mutations, problems=[],
               untouched=True, form=case.form)
    try:
        if case.form == "text":
            cluster = Cluster.from_text(case.spec)
        else:
            cluster = Cluster.from_tf(case.spec, case.devices, links=case.links_arg,
                                      target=case.target)
    except AutoplaceError as e:
        out.update(outcome="error", error=type(e).__name__, message=str(e)[:300])
        if case.expected is not None:
            out["problems"].append(f"a whole description was refused: {e}")
        elif case.names and not any(name in str(e) for name in case.names):
            out["problems"].append(f"the error does not name the damage ({case.names})")
        return out
    out.update(outcome="placed", error=None, message="")
    problems = _check_tf_cluster(case, cluster)
    if not problems:
        source = graph_pb2.GraphDef.FromString(_base_graph_bytes())
        try:
            report = autoplace(source, cluster=cluster, placer=_placer(case.placer),
                               seed=case.index, progress=False)
        except AutoplaceError as e:
            problems.append(f"the base graph could not be placed: {type(e).__name__}: {e}")
        else:
            placed = {n.device for n in report.graph_def.node}
            if placed - set(cluster.names) or set(report.assignment.values()) - set(
                    cluster.names):
                problems.append(f"ops placed on devices outside the cluster: "
                                f"{sorted(placed - set(cluster.names))[:3]}")
    out["problems"] = problems
    return out


# ============================================================================== Keras models
@dataclasses.dataclass
class KerasCase:
    """A small random Keras 3 model (``model``: a JSON-able description, :func:`_keras_model`)
    trained ``steps`` batches of ``batch`` with its fit placed by
    :func:`tf_autoplace.keras.autoplace_model` on ``Cluster.local(num_logical_cpus=2)``, and
    an unplaced twin of the same seed; ``misuse`` names the damage a case does instead (each
    must end in an AutoplaceError), "" for none."""

    index: int
    model: dict
    batch: int
    steps: int
    placer: str
    misuse: str
    mutations: list


LOGICAL_CPUS = 2  # the keras family runs on Cluster.local(num_logical_cpus=LOGICAL_CPUS)
# Placers the keras family uses: the heuristics (auto's local search takes seconds on a train
# step's graph; the placement check is the same).
KERAS_PLACERS = registry.names("heuristic")
KERAS_MISUSES = ("not compiled", "run_eagerly", "jit_compile", "input_spec not TensorSpecs",
                 "input_spec of another rank", "input_spec of another dtype",
                 "input_spec of another structure", "input_spec of another size",
                 "input_spec with the features free", "batches whose shape changes",
                 "verify", "a cluster without the model's devices", "an unknown placer")
# Misuses that are one only for some models: a model of convolutions and global pooling takes
# inputs of any spatial size, so their placement must then match the unplaced twin.
KERAS_MAY_PLACE = ("input_spec with the features free",)


def _keras_layers(rng: np.random.Generator, input_kind: str, shape: list) -> list:
    """The trunk of a model on ``input_kind`` inputs of ``shape``: convolutions (with batch
    normalisation, dropout, pooling) down to a vector, then dense layers."""
    layers = []
    if input_kind in ("image", "sequence"):
        size = min(shape[:-1])  # the smallest spatial dimension
        for _ in range(int(rng.integers(1, 3))):
            kernel = int(rng.integers(1, 4))
            padding = "valid" if kernel <= size and rng.random() < 0.5 else "same"
            size -= kernel - 1 if padding == "valid" else 0
            layers.append(["conv", int(rng.integers(2, 7)), kernel, padding,
                           _pick(rng, ["relu", "tanh", None])])
            if rng.random() < 0.4:
                layers.append(["batch_norm"])
            if rng.random() < 0.3:
                layers.append(["dropout", float(_pick(rng, [0.1, 0.5]))])
        layers.append([_pick(rng, ["flatten", "global_pool"])])
    for _ in range(int(rng.integers(0, 3))):
        layers.append(["dense", int(rng.integers(2, 17)), _pick(rng, ["relu", "tanh", None])])
        if rng.random() < 0.3:
            layers.append([_pick(rng, ["batch_norm", "dropout"]), 0.25])
    return layers


def _keras_description(rng: np.random.Generator) -> dict:
    """A random model for :func:`_keras_model`: its input, trunk, branches (functional models)
    and how they join, output classes and optimizer."""
    input_kind = _pick(rng, ["vector", "image", "sequence"])
    shape = {"vector": [int(rng.integers(2, 17))],
             "image": [int(rng.integers(3, 9)), int(rng.integers(3, 9)), int(rng.integers(1, 4))],
             "sequence": [int(rng.integers(3, 9)), int(rng.integers(1, 6))]}[input_kind]
    functional = rng.random() < 0.6
    branches = []
    if functional:
        join = _pick(rng, ["concatenate", "add"])
        units = int(rng.integers(2, 13))
        for _ in range(int(rng.integers(1, 4))):
            branch = [["dense", units if join == "add" else int(rng.integers(2, 13)),
                       _pick(rng, ["relu", "tanh", None])]]
            if rng.random() < 0.4:
                branch.append([_pick(rng, ["batch_norm", "dropout"]), 0.3])
            branches.append(branch)
    else:
        join = ""
    classes = int(_pick(rng, [1, 1, 3]))
    return dict(input_kind=input_kind, shape=shape, functional=functional,
                trunk=_keras_layers(rng, input_kind, shape), branches=branches, join=join,
                classes=classes, optimizer=_pick(rng, ["sgd", "adam", "rmsprop"]),
                learning_rate=float(_pick(rng, [1e-3, 1e-2])))


def make_keras_case(seed: int, index: int, placers=PLACERS) -> KerasCase:
    """Case ``index`` of the ``keras`` family of the run seeded ``seed``: a model, its batches
    and a placer; about a third of the cases misuse the door instead."""
    del placers  # the keras family has its own (KERAS_PLACERS)
    rng = np.random.default_rng([seed, index, 5])
    model = _keras_description(rng)
    misuse = _pick(rng, KERAS_MISUSES) if rng.random() < 0.35 else ""
    steps, batch = int(rng.integers(1, 3)), int(rng.integers(2, 7))
    if misuse == "batches whose shape changes":
        steps = 1
    placer = "random" if rng.random() < 0.4 else _pick(rng, KERAS_PLACERS)  # random splits
    return KerasCase(index, model, batch, steps, placer, misuse,
                     [f"{'functional' if model['functional'] else 'sequential'} "
                      f"{model['input_kind']} model {model['shape']}"] + ([misuse] if misuse
                                                                          else []))


def _keras_model(description: dict, seed: int, compile_options: dict | None = None):
    """The Keras 3 model of ``description``, its weights and dropout seeded by ``seed``,
    compiled (with ``compile_options`` added) unless ``compile_options`` is None."""
    import keras

    keras.utils.set_random_seed(seed)
    d = description
    conv = {"image": keras.layers.Conv2D, "sequence": keras.layers.Conv1D}.get(d["input_kind"])
    pool = {"image": keras.layers.GlobalAveragePooling2D,
            "sequence": keras.layers.GlobalAveragePooling1D}.get(d["input_kind"])

    def layer(spec):
        kind = spec[0]
        if kind == "conv":
            return conv(spec[1], spec[2], padding=spec[3], activation=spec[4])
        if kind == "dense":
            return keras.layers.Dense(spec[1], activation=spec[2])
        if kind == "batch_norm":
            return keras.layers.BatchNormalization()
        if kind == "dropout":
            return keras.layers.Dropout(spec[1])
        return keras.layers.Flatten() if kind == "flatten" else pool()

    head = keras.layers.Dense(d["classes"])
    if d["functional"]:
        inputs = keras.Input(tuple(d["shape"]))
        h = inputs
        for spec in d["trunk"]:
            h = layer(spec)(h)
        ends = []
        for branch in d["branches"]:
            b = h
            for spec in branch:
                b = layer(spec)(b)
            ends.append(b)
        if len(ends) > 1:
            join = keras.layers.Add() if d["join"] == "add" else keras.layers.Concatenate()
            h = join(ends)
        elif ends:
            h = ends[0]
        model = keras.Model(inputs, head(h))
    else:
        model = keras.Sequential([keras.Input(tuple(d["shape"]))]
                                 + [layer(spec) for spec in d["trunk"]] + [head])
    if compile_options is not None:
        optimizer = {"sgd": keras.optimizers.SGD, "adam": keras.optimizers.Adam,
                     "rmsprop": keras.optimizers.RMSprop}[d["optimizer"]](d["learning_rate"])
        loss = ("mse" if d["classes"] == 1 else
                keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.compile(optimizer=optimizer, loss=loss,
                      **dict(dict(jit_compile=False), **compile_options))
    return model


def _keras_data(case: KerasCase, shape=None):
    """``case``'s samples: ``steps`` batches, the last one perhaps short."""
    rng = np.random.default_rng([case.index, 6])
    n = case.batch * case.steps - int(rng.integers(case.batch)) if case.steps > 1 else case.batch
    shape = case.model["shape"] if shape is None else shape
    x = rng.normal(size=(n, *shape)).astype(np.float32)
    y = (rng.normal(size=(n, 1)).astype(np.float32) if case.model["classes"] == 1
         else rng.integers(case.model["classes"], size=(n,)).astype(np.int32))
    return x, y


def _fit(model, x, y, batch: int) -> list[float]:
    """The loss after each batch of one epoch of ``model.fit``."""
    import keras

    losses = []
    recorder = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: losses.append(float(logs["loss"])))
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=[recorder])
    return losses


def _misused_input_spec(case: KerasCase, x, y):
    """The bad ``input_spec`` of ``case.misuse``."""
    shape, dtype = list(x.shape[1:]), tf.float32
    yspec = tf.TensorSpec([None, *y.shape[1:]], tf.as_dtype(y.dtype))
    if case.misuse == "input_spec not TensorSpecs":
        return _pick(np.random.default_rng(case.index), ["x", 3, (x, y), [np.zeros(3)]])
    if case.misuse == "input_spec of another rank":
        shape = shape + [1]
    elif case.misuse == "input_spec of another dtype":
        dtype = _pick(np.random.default_rng(case.index), [tf.int32, tf.string, tf.float64])
    elif case.misuse == "input_spec of another structure":
        return (tf.TensorSpec([None, *shape], dtype),)
    elif case.misuse == "input_spec of another size":
        shape[-1] += 1
    else:  # the features free: the model's layers need them known
        shape = [None] * len(shape)
    return (tf.TensorSpec([None, *shape], dtype), yspec)


def run_keras_case(case: KerasCase, workdir: str) -> dict:
    """Fit ``case``'s model placed and its unplaced twin, or misuse the door (module
    docstring). Needs the process to have LOGICAL_CPUS logical CPU devices."""
    del workdir
    out = dict(index=case.index, placer=case.placer, mutations=case.mutations, untouched=True,
               problems=[])
    if len(tf.config.list_logical_devices("CPU")) < LOGICAL_CPUS:
        out.update(outcome="error", error="harness", message="", problems=[
            f"the process has fewer than {LOGICAL_CPUS} logical CPUs (tests/fuzz_child.py "
            "configures them before TensorFlow starts)"])
        return out
    x, y = _keras_data(case)
    options = dict(cluster=Cluster.local(num_logical_cpus=LOGICAL_CPUS), placer=case.placer,
                   seed=case.index, progress=False)
    compile_options = {"run_eagerly": dict(run_eagerly=True),
                       "jit_compile": dict(jit_compile=True),
                       "not compiled": None}.get(case.misuse, {})
    try:
        model = _keras_model(case.model, case.index, compile_options)
        if case.misuse == "verify":
            placement = autoplace(model, verify=15, **options)
        elif case.misuse == "a cluster without the model's devices":
            placement = autoplace_model(model, **dict(options, cluster="k80x2"))
        elif case.misuse == "an unknown placer":
            placement = autoplace_model(model, **dict(options, placer="no_such"))
        elif case.misuse.startswith("input_spec"):
            placement = autoplace_model(
                model, input_spec=_misused_input_spec(case, x, y), **options)
        else:
            placement = autoplace_model(model, **options)
        losses = _fit(model, x, y, case.batch)
        if case.misuse == "batches whose shape changes":
            shape = list(case.model["shape"])
            shape[int(np.random.default_rng(case.index).integers(len(shape)))] += 1
            _fit(model, *_keras_data(case, shape), case.batch)
    except AutoplaceError as e:
        out.update(outcome="error", error=type(e).__name__, message=str(e)[:300])
        if not str(e).strip():
            out["problems"].append("the error has no message")
        if not case.misuse:
            out["problems"].append(f"a model the door takes was refused: {e}")
        return out
    except Exception as e:  # noqa: BLE001 - any other exception is what the fuzz looks for
        out.update(outcome="error", error=type(e).__name__, message=str(e)[:300],
                   problems=[f"not an AutoplaceError: {type(e).__name__}: {str(e)[:200]}"])
        return out
    out.update(outcome="placed", error=None, message="", losses=losses)
    if case.misuse and case.misuse not in KERAS_MAY_PLACE:
        out["problems"].append(f"{case.misuse}: no AutoplaceError")
        return out
    report = placement.reports.get("train")
    if report is None:
        out["problems"].append("fit ran, and the train function has no placement report")
        return out
    cluster = options["cluster"]
    out["devices_used"] = len(set(report.assignment.values()))
    if set(report.assignment.values()) - set(cluster.names):
        out["problems"].append("ops placed on devices outside the cluster")
    twin = _keras_model(case.model, case.index, {})
    expected = _fit(twin, x, y, case.batch)
    out["reference"] = expected
    if len(losses) != case.steps or not np.isfinite(losses).all():
        out["problems"].append(f"{len(losses)} losses of {case.steps} steps, finite: "
                               f"{np.isfinite(losses).all()}")
    elif not np.allclose(losses, expected, rtol=1e-4, atol=1e-6):
        out["problems"].append(f"placed losses {losses} differ from the unplaced {expected}")
    # Adam and RMSprop move a weight whose gradient is rounding noise (a bias before batch
    # normalisation) by up to the learning rate a step, whatever the noise's size.
    atol = 1e-6 if case.model["optimizer"] == "sgd" else 2 * case.model["learning_rate"]
    weights, twin_weights = model.get_weights(), twin.get_weights()
    if len(weights) != len(twin_weights) or not all(
            np.allclose(a, b, rtol=1e-4, atol=atol) for a, b in zip(weights, twin_weights)):
        out["problems"].append("the placed model's trained weights differ from the unplaced")
    return out


# ========================================================================= verified placement
@dataclasses.dataclass
class VerifyCase:
    """A tiny training graph (``graph_def``: the base graph or a smaller random one, perhaps
    damaged; given as ``form`` "graph_def" or "tf.Graph") placed with ``verify=steps`` on
    ``cluster`` (a shipped name, "local2" for ``Cluster.local(num_logical_cpus=2)``, "local1"
    for one logical CPU)."""

    index: int
    graph_def: graph_pb2.GraphDef
    form: str
    cluster: str
    steps: object
    placer: str
    mutations: list


VERIFY_STEPS = 15  # the protocol's minimum (tf_autoplace.hw.protocol.MIN_STEPS)
VERIFY_PLACERS = ("random", "m_topo", "metis")


def _tiny_graph(rng: np.random.Generator) -> graph_pb2.GraphDef:
    """A training graph smaller than the base graph: one to three branches of one or two
    small dense layers on a fed input, a sum loss and an SGD update; ``init`` initialises."""
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.set_random_seed(0)
        batch, width = int(rng.integers(1, 9)), int(rng.integers(2, 33))
        x = tf.compat.v1.placeholder(tf.float32, [batch, width], name="x")
        ends = []
        for b in range(int(rng.integers(1, 4))):
            h = x
            for layer in range(int(rng.integers(1, 3))):
                units = int(rng.integers(2, 33))
                w = tf.compat.v1.get_variable(
                    f"w{b}_{layer}", [h.shape[1], units], use_resource=True,
                    initializer=tf.compat.v1.random_normal_initializer(seed=b * 10 + layer))
                h = tf.nn.relu(tf.matmul(h, w))
            ends.append(tf.reduce_sum(h * h))
        loss = tf.add_n(ends, name="loss") if len(ends) > 1 else tf.identity(ends[0], "loss")
        tf.compat.v1.train.GradientDescentOptimizer(1e-3).minimize(loss, name="train")
        tf.compat.v1.global_variables_initializer()  # "init"
    return g.as_graph_def()


def make_verify_case(seed: int, index: int, placers=PLACERS) -> VerifyCase:
    """Case ``index`` of the ``verify`` family of the run seeded ``seed``."""
    rng = np.random.default_rng([seed, index, 7])
    graph_def = (graph_pb2.GraphDef.FromString(_base_graph_bytes()) if rng.random() < 0.5
                 else _tiny_graph(rng))
    mutations = [f"{len(graph_def.node)} nodes"]
    cluster, steps = "local2", VERIFY_STEPS
    kind = rng.random()
    if kind < 0.15:
        steps = _pick(rng, [14, 1, -1, 15.5, True, "15", None])
        mutations.append(f"verify={steps!r}")
    elif kind < 0.25:
        cluster = _pick(rng, ["k80x2", "cpu2", "local1"])  # cpu2: this machine's two CPUs too
        mutations.append(f"cluster {cluster}")
    elif kind < 0.35:
        mutations.append(_mutate_graph(graph_def, rng))
    elif kind < 0.45:
        steps = VERIFY_STEPS + int(rng.integers(1, 4))
        mutations.append(f"verify={steps}")
    form = "tf.Graph" if rng.random() < 0.3 else "graph_def"
    # Mostly placers that split a tiny graph: the others and the best heuristic often agree
    # on the single device, which leaves verify nothing to measure.
    placer = _pick(rng, VERIFY_PLACERS if rng.random() < 0.7 else placers)
    return VerifyCase(index, graph_def, form, cluster, steps, placer, mutations)


def _check_verification(report, cluster: Cluster, steps: int) -> list[str]:
    """What is wrong with a verified ``report`` (README "Verified placement")."""
    verification = report.verification
    single_device = len(set(report.assignment.values())) == 1
    if verification is None:
        if cluster.num_devices > 1 and not (
                single_device and any("nothing to measure" in n for n in report.notes)):
            return ["no verification, and no note of why"]
        return []
    problems = []
    candidates = {c.name: c for c in verification.candidates}
    decision = verification.decision
    if SINGLE not in candidates or len(candidates) < 2:
        problems.append(f"candidates {sorted(candidates)}: the single-device one and another "
                        "must be among them")
    applied = candidates.get(decision.applied)
    if applied is None:
        return problems + [f"applied {decision.applied!r} is not a candidate"]
    if dict(applied.assignment) != dict(report.assignment):
        problems.append(f"the placement applied is not candidate {applied.name!r}'s")
    if not decision.reason or not any(n.startswith("verified on ") and ": applied " in n
                                      for n in report.notes):
        problems.append("the report does not say what was applied and why")
    measured = verification.measured
    times = {}
    for name in candidates:
        try:
            m = measured[name]
        except (KeyError, AutoplaceError):
            problems.append(f"candidate {name!r} was not measured")
            continue
        times[name] = m
        if (len(m.times_s) != steps or not np.isfinite(m.times_s).all() or (m.times_s <= 0).any()
                or not m.low_s <= m.median_s <= m.high_s):
            problems.append(f"{name!r} measured {len(m.times_s)} steps of {steps}, median "
                            f"{m.median_s} in [{m.low_s}, {m.high_s}]")
    if problems:
        return problems
    single = times[SINGLE]
    chosen = times[applied.name]
    if applied.name != SINGLE and not chosen.high_s < single.low_s:
        problems.append(f"{applied.name!r} was applied, measured {chosen.describe()}: not "
                        f"faster than the single device's {single.describe()} beyond noise")
    again = verification.confirmation
    baseline = kept(verification.candidates, measured)  # what the user keeps without a split
    if applied.name not in (SINGLE, baseline) and (again is None or not max(
            chosen.high_s, again[applied.name].high_s) < min(times[baseline].low_s,
                                                             again[baseline].low_s)):
        problems.append(f"{applied.name!r} was applied without new sessions confirming it "
                        f"faster than {baseline!r} beyond noise")
    if applied.name == SINGLE and baseline != SINGLE:
        problems.append(f"the single device was applied, though {baseline!r}, the graph's own "
                        "placement, measured faster than it beyond noise")
    leader = min(times.values(), key=lambda t: t.median_s)
    if decision.leader not in times or times[decision.leader].median_s != leader.median_s:
        problems.append(f"leader {decision.leader!r} does not have the smallest median")
    if not np.isclose(report.step_time_s, applied.predicted_s, rtol=1e-9):
        problems.append(f"the report's step time {report.step_time_s} is not the applied "
                        f"candidate's predicted {applied.predicted_s}")
    proto = report.to_proto()
    rows = list(proto.verified)
    if (len(rows) != len(candidates) or sum(r.applied for r in rows) != 1
            or proto.verify_reason != decision.reason):
        problems.append("the report's proto does not list the candidates, the applied one and "
                        "why")
    return problems


def run_verify_case(case: VerifyCase, workdir: str) -> dict:
    """Place ``case``'s graph with verify; a placement is checked as verified (README
    "Verified placement") and as a graph TensorFlow runs, an error must be an AutoplaceError
    (a MeasurementError only for a graph that does not run unplaced either)."""
    del workdir
    out = dict(index=case.index, placer=case.placer, mutations=case.mutations, problems=[])
    cluster = {"local2": lambda: Cluster.local(num_logical_cpus=LOGICAL_CPUS),
               "local1": lambda: Cluster.local(num_logical_cpus=1)}.get(
                   case.cluster, lambda: case.cluster)()
    graph = case.graph_def
    if case.form == "tf.Graph":
        graph, failure = _import(case.graph_def)
        if failure:  # TF will not build it: given as the GraphDef
            graph = case.graph_def
    before = _snapshot(graph)
    try:
        report = autoplace(graph, cluster=cluster, placer=_placer(case.placer),
                           seed=case.index, verify=case.steps, progress=False)
    except AutoplaceError as e:
        out.update(outcome="error", error=type(e).__name__, message=str(e)[:300],
                   untouched=_snapshot(graph) == before)
        if isinstance(e, MeasurementError) and run_graph_def(
                case.graph_def, soft_placement=True) is None:
            out["problems"].append("a MeasurementError for a graph that runs unplaced")
        return out
    out.update(outcome="placed", error=None, message="", untouched=True)
    resolved = resolve_cluster(cluster)
    verification = report.verification
    out["applied"] = verification.decision.applied if verification is not None else None
    problems = _check_verification(report, resolved, case.steps)
    placed = (graph.as_graph_def() if isinstance(graph, tf.Graph) else report.graph_def)
    if not isinstance(graph, tf.Graph):
        out["untouched"] = _snapshot(graph) == before
    out["problems"] = problems + _check_placed_graph(placed, case.graph_def, report, resolved,
                                                     out)
    return out


# ====================================================================== served TF clusters
@dataclasses.dataclass
class ServedCase:
    """A valid description of this process's two local server processes (``ps:0`` and
    ``worker:0``, :func:`served_jobs`) in ``form`` (:data:`TF_CLUSTER_FORMS`; "text": the
    cluster's own spec written and read back), each task's devices asked of the servers
    (``ask_servers``) or taken for this machine's, link classes ``links`` (Cluster.from_tf's
    argument) whose figures between tasks must be ``figures``."""

    index: int
    form: str
    ask_servers: bool
    links: dict | None
    figures: dict
    placer: str
    mutations: list


_SERVERS = contextlib.ExitStack()


@functools.lru_cache(maxsize=None)
def served_jobs() -> dict:
    """``{job: [address]}`` of two server processes (:func:`tf_autoplace.hw.local_cluster`)
    started on first use and stopped when this process exits."""
    atexit.register(_SERVERS.close)
    cluster = _SERVERS.enter_context(local_cluster(2, ps_tasks=1))
    return {job: [t.address for t in cluster.tasks if t.job == job] for job in cluster.jobs}


def make_served_case(seed: int, index: int, placers=PLACERS) -> ServedCase:
    """Case ``index`` of the ``served`` family of the run seeded ``seed`` (no server is
    asked to make it)."""
    rng = np.random.default_rng([seed, index, 8])
    links, figures = _links_arg(rng)
    form = _pick(rng, TF_CLUSTER_FORMS)
    ask = bool(rng.random() < 0.5)
    devices = "asked of the servers" if ask else "this machine's"
    return ServedCase(index, form, ask, links, figures, _pick(rng, placers),
                      [f"{form}, devices {devices}, links {figures}"])


def run_served_case(case: ServedCase, workdir: str) -> dict:
    """Describe the servers as ``case`` says, check the cluster (as the ``tf_clusters``
    family does), place the base graph on it and run the placed graph on the servers with
    soft placement off."""
    del workdir
    jobs = served_jobs()
    out = dict(index=case.index, placer=case.placer, mutations=case.mutations, untouched=True)
    spec = {"tf_config": json.dumps({"cluster": jobs, "task": {"type": "worker", "index": 0}}),
            "tf_config_dict": {"cluster": jobs},
            "cluster_spec": tf.train.ClusterSpec(jobs),
            "resolver": tf.distribute.cluster_resolver.SimpleClusterResolver(
                tf.train.ClusterSpec(jobs))}.get(case.form, jobs)
    try:
        devices = served_devices(jobs) if case.ask_servers else None
        cluster = Cluster.from_tf(spec, devices, links=case.links)
        if case.form == "text":
            cluster = Cluster.from_text(text_format.MessageToString(cluster.to_proto()))
        check = TFClusterCase(case.index, case.form, spec, devices, case.links, None, None,
                              case.figures, [], [], case.placer, case.mutations)
        problems = _check_tf_cluster(check, cluster)
        if cluster.target != "grpc://" + jobs["worker"][0]:
            problems.append(f"target {cluster.target!r}: not the worker's")
        source = graph_pb2.GraphDef.FromString(_base_graph_bytes())
        report = autoplace(source, cluster=cluster, placer=_placer(case.placer),
                           seed=case.index, progress=False)
    except AutoplaceError as e:
        out.update(outcome="error", error=type(e).__name__, message=str(e)[:300],
                   problems=[f"a valid description of the servers failed: {e}"])
        return out
    out.update(outcome="placed", error=None, message="")
    if set(report.assignment.values()) - set(cluster.names):
        problems.append("ops placed on devices outside the cluster")
    failure = run_graph_def(report.graph_def, soft_placement=False, target=cluster.target)
    if failure is not None:
        problems.append(f"the placed graph does not run on the servers: {failure}")
    out["problems"] = problems
    out["tasks_used"] = sorted({device_spec(d).job for d in report.assignment.values()})
    return out


# ============================================================================== families
FAMILIES = {
    "graphs": (make_case, lambda case, workdir: run_case(case)),
    "cost_graphs": (make_cost_graph_case, run_cost_graph_case),
    "policies": (lambda seed, index, placers=None: make_policy_case(seed, index),
                 run_policy_case),
    "caches": (lambda seed, index, placers=None: make_cache_case(seed, index), run_cache_case),
    "tf_clusters": (make_tf_cluster_case, run_tf_cluster_case),
    "keras": (make_keras_case, run_keras_case),
    "verify": (make_verify_case, run_verify_case),
    "served": (make_served_case, run_served_case),
}
