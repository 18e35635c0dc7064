"""Seeded random damage to every input a user gives the package, and the check each damaged
input must pass. Four families of cases, each reproducible from ``(seed, index)`` alone
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

``tests/fuzz_child.py`` runs cases in a child process (an abort there is a failure the parent
can name: the case that started and never finished), ``tests/test_fuzz.py`` reads them.

In the ``graphs`` and ``caches`` families a placed graph is imported, and run where the harness
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
from tf_autoplace.core.cluster import Cluster, device_spec
from tf_autoplace.errors import AutoplaceError
from tf_autoplace.graph import costgraph, grappler, ingest
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


def run_graph_def(graph_def: graph_pb2.GraphDef, *, soft_placement: bool) -> str | None:
    """Import ``graph_def`` and run ``init`` (if any), then every sink node, in a v1 Session
    with NUM_LOCAL_CPUS logical CPUs. Returns None on success, else why it failed."""
    graph, failure = _import(graph_def)
    if failure:
        return failure
    try:
        feeds = _feeds(graph)
    except (ValueError, TypeError) as e:
        return f"feed: {e}"
    config = tf.compat.v1.ConfigProto(device_count={"CPU": NUM_LOCAL_CPUS},
                                      allow_soft_placement=soft_placement,
                                      inter_op_parallelism_threads=1,
                                      intra_op_parallelism_threads=1)
    sinks = [graph.get_operation_by_name(n) for n in grappler.sink_nodes(graph_def)]
    try:
        with tf.compat.v1.Session(graph=graph, config=config) as sess:
            names = {op.name for op in graph.get_operations()}
            if "init" in names:
                sess.run("init", feeds)
            sess.run([op for op in sinks if op.name != "init"], feeds)
    except (ValueError, TypeError, tf.errors.OpError) as e:
        return f"run: {type(e).__name__}: {str(e)[:300]}"
    return None


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
        placer = (PlacetoPlacer(max_samples=8, fine_tune=False) if case.placer == "placeto"
                  else get_placer(case.placer))
        report = autoplace(case.graph, cluster=cluster, placer=placer, seed=case.index)
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


# ============================================================================== families
FAMILIES = {
    "graphs": (make_case, lambda case, workdir: run_case(case)),
    "cost_graphs": (make_cost_graph_case, run_cost_graph_case),
    "policies": (lambda seed, index, placers=None: make_policy_case(seed, index),
                 run_policy_case),
    "caches": (lambda seed, index, placers=None: make_cache_case(seed, index), run_cache_case),
}
