"""Seeded random mutations of a small real training graph and of a cluster spec, and the check
every mutated input must pass: a valid placement that TensorFlow imports and runs, or an
:class:`~tf_autoplace.errors.AutoplaceError`; the input untouched either way.

``tests/fuzz_child.py`` runs the cases in a child process (an abort there is a failure the
parent can name: the case that started and never finished), ``tests/test_fuzz.py`` reads them.
A case is reproducible from ``(seed, index)`` alone: :func:`make_case`.

A placed graph is imported, and run where the harness can: a graph whose simulated peak memory
exceeds ``MAX_RUN_BYTES``, or with a placeholder of a dtype that cannot be fed (resource,
variant, quantized), is imported only; unknown placeholder dimensions are fed as 1. A placed
graph that fails to run counts as a problem unless its input fails to run too.

The mutations are the kinds of damage a hostile but fair user gives a graph or a spec: nodes
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

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2, types_pb2

from tf_autoplace.api import autoplace
from tf_autoplace.core import registry
from tf_autoplace.core.cluster import Cluster, device_spec
from tf_autoplace.errors import AutoplaceError
from tf_autoplace.graph import grappler, ingest
from tf_autoplace.placers import PlacetoPlacer, get_placer

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
    out["problems"] = problems
    return out
