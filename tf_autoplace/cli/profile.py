r"""Profile a training graph on this machine: per-op times and the links between its devices.

    tf-autoplace profile --graph=train.pb --out_profile=profile.pbtxt \
        --out_cluster=local.pbtxt
    tf-autoplace profile --model=nmt --knob=layers=2 --knob=batch=16 \
        --out_profile=nmt2.pbtxt --out_cluster=local.pbtxt --num_logical_cpus=2

The graph is a GraphDef or MetaGraphDef file (``--graph``; one step runs ``--fetches``, by
default its train op, after ``--init``, by default its variable initializer; placeholders get
made-up values of their static shape, see ``tf_autoplace.hw.workload``) or a zoo model
(``--model`` and ``--knob=name=value``). It runs ``--warmup_steps`` steps and then
``--trace_steps`` traced steps with all ops on each kind of device this machine has, and writes
per op and device kind the median measured time as a text ``CostProfile``
(``protos/cost_profile.proto``; ``tf_autoplace.hw.profiler``). Place with it through
``tf-autoplace place --cost_profile``, ``autoplace(..., cost_profile=)`` or
``--autoplace_cost_profile``.

With ``--out_cluster`` it also times chains of copies of several sizes between every pair of the
local cluster's devices (``--num_logical_cpus`` logical CPUs, or 0: the GPUs and the CPU host),
fits latency and bandwidth (``tf_autoplace.hw.transfers``) and writes the text ``ClusterSpec``
of this machine with those links (and its core groups: ``Cluster.local``).

A TensorFlow cluster whose servers run (``--cluster``: a text ``ClusterSpec`` with tasks and a
target, as ``tf-autoplace serve-local`` writes it) is profiled the same way through its
target (``tf_autoplace.hw.cluster_profile``): the graph runs on each task in turn, the profile
holds the target task's op times and the written spec every other task's speed against it, and
with ``--out_cluster`` the links between its devices are timed over gRPC (between tasks) and in
memory (within one)::

    tf-autoplace profile --cluster=cluster.pbtxt --model=rnnlm --knob=layers=2 \
        --out_profile=rnnlm.pbtxt --out_cluster=cluster_measured.pbtxt

A TF2 function is profiled from Python: ``profile_ops(Workload.from_function(fn, *args))``.
Timings on a shared machine are noisy: the tool prints the 1-minute load average with them.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags
from google.protobuf import text_format

from tf_autoplace import zoo
from tf_autoplace.core.cluster import Cluster, resolve_cluster
from tf_autoplace.errors import AutoplaceError, ClusterSpecError
from tf_autoplace.hw.cluster_profile import profile_cluster
from tf_autoplace.hw.profiler import profile_ops
from tf_autoplace.hw.runner import RunConfig
from tf_autoplace.hw.transfers import profile_links
from tf_autoplace.hw.workload import Workload

flags.DEFINE_string("graph", None, "GraphDef or MetaGraphDef file (binary or text).")
flags.DEFINE_string("model", None, "A model zoo name instead (tf_autoplace.zoo.MODELS).")
flags.DEFINE_multi_string("knob", [], "Zoo model size knob as name=value (int), repeatable.")
flags.DEFINE_list("fetches", None, "What one step runs (default: the train op).")
flags.DEFINE_list("init", None, "Ops run once first (default: the variable initializer).")
flags.DEFINE_integer("num_logical_cpus", 2, "Logical CPU devices of the local cluster "
                     "(0: this machine's GPUs and its CPU host).")
flags.DEFINE_string("cluster", None, "Profile the servers of this TensorFlow cluster instead (a "
                    "text ClusterSpec with tasks and a target, as serve-local writes).")
flags.DEFINE_integer("warmup_steps", 3, "Untimed steps first.")
flags.DEFINE_integer("trace_steps", 10, "Traced steps whose per-op median is written.")
flags.DEFINE_integer("seed", 0, "Seed of the made-up inputs.")
flags.DEFINE_string("out_profile", None, "Write the CostProfile (text) here.")
flags.DEFINE_string("out_cluster", None, "Also measure the links and write the ClusterSpec "
                    "(text) here.")
flags.mark_flags_as_required(["out_profile"])
FLAGS = flags.FLAGS


def _write(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv):
    del argv
    if bool(FLAGS.graph) == bool(FLAGS.model):
        raise app.UsageError("give exactly one of --graph and --model")


    try:
        if FLAGS.model:
            knobs = zoo.parse_knobs(FLAGS.knob)
            workload = Workload.from_model(zoo.build(FLAGS.model, **knobs), seed=FLAGS.seed)
            what = f"{FLAGS.model} {knobs}"
        else:
            workload = Workload.from_graph(FLAGS.graph, fetches=FLAGS.fetches, init=FLAGS.init,
                                           seed=FLAGS.seed)
            what = FLAGS.graph
        load = os.getloadavg()[0]
        config = RunConfig(steps=1, warmup_steps=FLAGS.warmup_steps,
                           trace_steps=FLAGS.trace_steps)
        description = f"{what}; tf-autoplace profile; load {load:.2f}"
        if FLAGS.cluster:
            _profile_tf_cluster(workload, config, description, load)
            return 0
        profile = profile_ops(workload, config=config, description=description)
        _write(FLAGS.out_profile, text_format.MessageToString(profile))
        print(f"wrote {FLAGS.out_profile}: {profile.description}")
        if FLAGS.out_cluster:
            cluster, fits = profile_links(Cluster.local(FLAGS.num_logical_cpus))
            _print_fits(cluster, fits)
            _write(FLAGS.out_cluster,
                   f"# This machine as tf-autoplace profile measured it (load {load:.2f}).\n"
                   + text_format.MessageToString(cluster.to_proto()))
            print(f"wrote {FLAGS.out_cluster}")
    except AutoplaceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _profile_tf_cluster(workload: Workload, config: RunConfig, description: str,
                        load: float) -> None:
    """``--cluster``: profile the servers of a TensorFlow cluster and write what was asked."""
    cluster = resolve_cluster(FLAGS.cluster)
    if not cluster.tasks or not cluster.target:
        raise ClusterSpecError(f"--cluster={FLAGS.cluster!r} lists no TensorFlow tasks with a "
                               "target; tf-autoplace serve-local writes such a spec")
    found = profile_cluster(cluster, workload, links=bool(FLAGS.out_cluster), op_config=config,
                            description=description)
    _write(FLAGS.out_profile, text_format.MessageToString(found.profile))
    print(f"wrote {FLAGS.out_profile}: {found.profile.description}")
    if FLAGS.out_cluster:
        _print_fits(found.cluster, found.link_fits)
        for name, fit in found.class_fits.items():
            print(f"links of class {name}: {fit.latency_us:.2f} us + bytes / "
                  f"{fit.bandwidth_gbps:.4g} GB/s (median of its pairs)")
        _write(FLAGS.out_cluster,
               f"# The TensorFlow cluster at {cluster.target} as tf-autoplace profile measured "
               f"it (load {load:.2f}).\n" + text_format.MessageToString(found.cluster.to_proto()))
        print(f"wrote {FLAGS.out_cluster}")


def _print_fits(cluster: Cluster, fits: dict) -> None:
    for (i, j), fit in fits.items():
        print(f"link {cluster.names[i]} <-> {cluster.names[j]}: "
              f"{fit.latency_s * 1e6:.2f} us + bytes / {fit.bandwidth_bps / 1e9:.4g} GB/s "
              f"(rms residual {fit.rms_error_s * 1e6:.2f} us)")

