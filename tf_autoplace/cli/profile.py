r"""Profile a training graph on this machine: per-op times and the links between its devices.

    tf-autoplace profile --graph=train.pb --out_profile=profile.pbtxt \
        --out_cluster=local.pbtxt
    tf-autoplace profile --model=nmt --knob=layers=2 --knob=batch=16 \
        --out_profile=nmt2.pbtxt --out_cluster=local.pbtxt --num_logical_cpus=2

The graph is a GraphDef or MetaGraphDef file (``--graph``; one step runs ``--fetches``, by
default its train op, after ``--init``, by default its variable initializer; placeholders get
made-up values of their static shape, see ``tf_autoplace.hw.workload``, or of the shape
``--feed_shape=NAME=D0,D1,...`` gives one whose shape is not fully known) or a zoo model
(``--model`` and ``--knob=name=value``). It runs ``--warmup_steps`` steps, ``--steps`` timed
steps and then ``--trace_steps`` traced steps with all ops on each kind of device this machine
has, and writes per op and device kind the median measured time as a text ``CostProfile``
(``protos/cost_profile.proto``; ``tf_autoplace.hw.profiler``), with the ops that did not run
(Grappler folded or fused them), the run's untraced and traced steps, and (``--partners``, on
by default) the time of the ops whose kernel changes when a partner op is on another device,
from a calibration run that places them apart. Place with it through ``tf-autoplace place
--cost_profile``, ``autoplace(..., cost_profile=)`` or ``--autoplace_cost_profile``: the
simulator then runs the graph as TensorFlow executes it.

With ``--out_cluster`` it also measures the local cluster (``--num_logical_cpus`` logical
CPUs, or 0: the GPUs and the CPU host; ``tf_autoplace.hw.transfers``): chains of copies of
several sizes between every pair of devices give each link's latency and bandwidth; between
two devices that share a core group (logical CPUs of one process) a ladder of small ops under
placements with more and more of TensorFlow's Sends gives the CPU work one Send adds to a
step (the median over blocks of rounds), their link latency (work on the shared cores) to
start from; the core group gets as many cores as the profiled run ran ops at once (the sum of
its ops' times over its traced step, rounded, between 1 and the host's cores;
``tf_autoplace.hw.profiler.with_profiled_cores``); and then the latency between the devices of
the core group is fitted on the graph itself (``tf_autoplace.hw.link_fit.fit_latency``: the
graph on one device and four placements moving a share of it to the others, measured under the
protocol, and the latency at which the simulator's median prediction of those equals their
measurement). It writes this machine's text ``ClusterSpec`` with those figures.

A TensorFlow cluster whose servers run (``--cluster``: a text ``ClusterSpec`` with tasks and a
target, as ``tf-autoplace serve-local`` writes it) is profiled the same way through its
target (``tf_autoplace.hw.cluster_profile``): the graph runs on each task in turn, the profile
holds the target task's op times and the written spec every other task's speed against it, and
with ``--out_cluster`` the links between its devices are timed over gRPC (between tasks) and in
memory (within one), and the latency between tasks is then fitted on the graph as above, with
a delay in flight beside it (the sender's gRPC work and the wait that overlaps with other
transfers: ``fit_latency(with_delay=True)``; written as each link's ``delay_us``), the
graph on each other task measured in the same rounds as the target task's: the written speeds
are those rounds' ratios (one task traced after another drifts with the machine)::

    tf-autoplace profile --cluster=cluster.pbtxt --model=rnnlm --knob=layers=2 \
        --out_profile=rnnlm.pbtxt --out_cluster=cluster_measured.pbtxt

A TF2 function is profiled from Python: ``profile_ops(Workload.from_function(fn, *args))``.
Timings on a shared machine are noisy: the tool prints the 1-minute load average with them.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from absl import flags
from google.protobuf import text_format

from tf_autoplace import zoo
from tf_autoplace.cli import profile_flags  # noqa: F401  (defines this command's flags)
from tf_autoplace.core.cluster import Cluster, resolve_cluster
from tf_autoplace.errors import AutoplaceError, ClusterSpecError
from tf_autoplace.graph import ingest
from tf_autoplace.hw import transfers
from tf_autoplace.hw.cluster_profile import profile_cluster
from tf_autoplace.hw.link_fit import fit_core_group, fit_latency, reference_device, task_pairs
from tf_autoplace.hw.profiler import profile_ops, with_profiled_cores
from tf_autoplace.hw.runner import RunConfig
from tf_autoplace.hw.workload import Workload, made_up_feeds, parse_feed_shapes
from tf_autoplace.outputs import files

FLAGS = flags.FLAGS  # this command's flags: tf_autoplace.cli.profile_flags


def _write(path: str, text: str) -> None:
    """Write one output whole or not at all, with the user's umask (checked before the
    measuring: ``profile_flags.check``)."""
    outputs = files.Outputs()
    outputs.add_file(path, text.encode("utf-8"))
    outputs.commit()


def main(argv):
    del argv
    try:
        if FLAGS.model:
            knobs = zoo.parse_knobs(FLAGS.knob)
            workload = Workload.from_model(zoo.build(FLAGS.model, **knobs), seed=FLAGS.seed)
            what = f"{FLAGS.model} {knobs}"
        else:
            feeds = (made_up_feeds(FLAGS.graph, parse_feed_shapes(FLAGS.feed_shape),
                                   seed=FLAGS.seed) if FLAGS.feed_shape else None)
            workload = Workload.from_graph(FLAGS.graph, fetches=FLAGS.fetches, init=FLAGS.init,
                                           feeds=feeds, seed=FLAGS.seed)
            what = FLAGS.graph
        load = os.getloadavg()[0]
        config = RunConfig(steps=FLAGS.steps, warmup_steps=FLAGS.warmup_steps,
                           trace_steps=FLAGS.trace_steps)
        description = f"{what}; tf-autoplace profile; load {load:.2f}"
        if FLAGS.cluster:
            _profile_tf_cluster(workload, config, description, load)
            return 0
        profile = profile_ops(workload, config=config, partners=FLAGS.partners,
                              description=description)
        _write(FLAGS.out_profile, text_format.MessageToString(profile))
        print(f"wrote {FLAGS.out_profile}: {profile.description}")
        if FLAGS.out_cluster:
            link_config, ladder_config = transfers.DEFAULT_CONFIG, transfers.LADDER_CONFIG
            if FLAGS.transfer_steps is not None:
                link_config = dataclasses.replace(link_config, steps=FLAGS.transfer_steps)
                ladder_config = dataclasses.replace(ladder_config, steps=FLAGS.transfer_steps)
            cluster, fits = transfers.profile_links(Cluster.local(FLAGS.num_logical_cpus),
                                                    config=link_config)
            _print_fits(cluster, fits)
            cluster, sends = transfers.profile_send_costs(cluster, config=ladder_config)
            for group, fit in sends.items():
                print(f"core group {group!r}: {fit.summary()}: its links' latency")
            cluster, ran = with_profiled_cores(cluster, profile)
            cores = ", ".join(f"{name!r}: {c}" for name, c in cluster.core_groups)
            if ran is not None:
                print(f"the profiled run ran {ran:.2f} ops at once; core groups: {cores}")
            cluster, fit = fit_core_group(cluster, profile,
                                          ingest.load_meta_graph(workload.graph_def), workload,
                                          config=config, seed=FLAGS.seed)
            fitted = fit.summary() if fit is not None else ""
            if fitted:
                print(fitted)
            after = os.getloadavg()[0]
            _write(FLAGS.out_cluster,
                   f"# This machine as tf-autoplace profile measured it (load {load:.2f} -> "
                   f"{after:.2f}).\n"
                   + (f"# The profiled run ran {ran:.2f} ops at once on average.\n"
                      if ran is not None else "")
                   + (f"# The {fitted}.\n" if fitted else "")
                   + text_format.MessageToString(cluster.to_proto()))
            print(f"wrote {FLAGS.out_cluster}")
    except AutoplaceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # the directory went away or filled up while measuring
        print(f"error: cannot write output: {e}", file=sys.stderr)
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
        measured, note = found.cluster, ""
        if len(cluster.tasks) > 1:
            measured, fit = fit_latency(
                found.cluster, found.profile, ingest.load_meta_graph(workload.graph_def),
                workload, reference=reference_device(found), pairs=task_pairs(found.cluster),
                what="between tasks", config=config, seed=FLAGS.seed, task_speeds=True,
                with_delay=True)
            note = f"# The {fit.summary()}.\n"
            print(fit.summary())
        _write(FLAGS.out_cluster,
               f"# The TensorFlow cluster at {cluster.target} as tf-autoplace profile measured "
               f"it (load {load:.2f}).\n" + note + text_format.MessageToString(measured.to_proto()))
        print(f"wrote {FLAGS.out_cluster}")


def _print_fits(cluster: Cluster, fits: dict) -> None:
    for (i, j), fit in fits.items():
        print(f"link {cluster.names[i]} <-> {cluster.names[j]}: "
              f"{fit.latency_s * 1e6:.2f} us + bytes / {fit.bandwidth_bps / 1e9:.4g} GB/s "
              f"(rms residual {fit.rms_error_s * 1e6:.2f} us)")

