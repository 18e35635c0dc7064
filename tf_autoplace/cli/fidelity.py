r"""Simulator fidelity on this machine: simulated vs measured step times of many placements.

    tf-autoplace fidelity --out_md=fidelity.md --out_json=fidelity.json
    tf-autoplace fidelity --graphs=lstm --max_load=1.5   # wait for a quiet machine
    tf-autoplace fidelity --graphs= --graph_file=my_train.pb   # your own training graph

For each graph (``--graphs``: see ``tf_autoplace.hw.fidelity.GRAPHS``; ``--graph_file``: a
GraphDef or MetaGraphDef of your own, whose train op one step runs), at least 20 distinct
placements on the local cluster (``--num_logical_cpus`` logical CPUs, or 0: this machine's GPUs
and its CPU host) are simulated with Grappler's analytical costs and with costs profiled here,
and measured under the measurement protocol (interleaved rounds, at least 15 timed steps each,
median with a 95% interval, the load before and after); the tool prints per graph the Spearman
rank correlation and the median absolute relative error of each cost variant, how many pairs
of placements the measurement told apart, then every placement's figures. The links are
profiled once per run (``tf_autoplace.hw.transfers``). When the 1-minute load is above 1.5 the
tool warns that its figures are not publishable. Progress goes to stderr. See
:mod:`tf_autoplace.hw.fidelity`.
"""

from __future__ import annotations

import dataclasses
import json
import time

from absl import app, flags

from tf_autoplace.errors import AutoplaceError
from tf_autoplace.hw import fidelity
from tf_autoplace.hw.protocol import QUIET_LOAD, load_average
from tf_autoplace.hw.runner import RunConfig
from tf_autoplace.hw.transfers import profile_links
from tf_autoplace.cli import fidelity_flags  # noqa: F401  (defines this command's flags)

FLAGS = flags.FLAGS  # this command's flags: tf_autoplace.cli.fidelity_flags


def main(argv):
    del argv
    graphs = list(fidelity.GRAPHS) if FLAGS.graphs is None else FLAGS.graphs
    try:
        config = fidelity.Config(
            num_logical_cpus=FLAGS.num_logical_cpus, random_placements=FLAGS.random_placements,
            learned_samples=FLAGS.learned_samples,
            run=RunConfig(steps=FLAGS.steps, warmup_steps=FLAGS.warmup_steps),
            profile=RunConfig(steps=1, warmup_steps=FLAGS.warmup_steps,
                              trace_steps=FLAGS.trace_steps),
            interleave=FLAGS.interleave, max_load=FLAGS.max_load, seed=FLAGS.seed)
        unknown = sorted(set(graphs) - set(fidelity.GRAPHS))
        if unknown:
            raise app.UsageError(f"unknown graphs {unknown}; choose among {list(fidelity.GRAPHS)}")
        if not graphs and not FLAGS.graph_file:
            raise app.UsageError("nothing to measure: give --graphs or --graph_file")
    except AutoplaceError as e:
        raise app.UsageError(str(e)) from None
    began = time.perf_counter()
    log = fidelity.progress
    load = load_average()
    if load > QUIET_LOAD:
        log(f"WARNING: the 1-minute load average is {load:.2f}, above {QUIET_LOAD}: this "
            "machine is busy, and figures measured now are noisy and not publishable "
            "(--max_load=1.5 waits for a quiet machine)")
    cluster = fidelity.local_cluster(config.num_logical_cpus)
    fidelity.wait_for_quiet(config.max_load, log)
    profiled_cluster, fits = profile_links(cluster)
    for (i, j), fit in fits.items():
        log(f"link {cluster.names[i]} -> {cluster.names[j]}: {fit.latency_s * 1e6:.1f} us + "
            f"bytes / {fit.bandwidth_bps / 1e9:.3g} GB/s (rms {fit.rms_error_s * 1e6:.1f} us)")
    results = []
    title = (f"Simulated vs measured step times on this machine "
             f"({config.num_logical_cpus or 'GPUs +'} logical CPUs, seed {config.seed})")
    jobs = [(name, lambda name=name: fidelity.evaluate_graph(name, config, profiled_cluster,
                                                             log)) for name in graphs]
    jobs += [(path, lambda path=path: fidelity.evaluate_file(path, config, profiled_cluster,
                                                             log=log))
             for path in FLAGS.graph_file]
    for _, evaluate in jobs:
        try:
            results.append(evaluate())
        except AutoplaceError as e:
            raise app.UsageError(str(e)) from None
        text = fidelity.markdown(results, title=title)
        if FLAGS.out_md:
            with open(FLAGS.out_md, "w", encoding="utf-8") as f:
                f.write(text)
        if FLAGS.out_json:
            with open(FLAGS.out_json, "w", encoding="utf-8") as f:
                json.dump({"config": repr(config), "links": {
                    f"{i}->{j}": dataclasses.asdict(fit) for (i, j), fit in fits.items()},
                    "results": [dataclasses.asdict(r) for r in results]}, f, indent=1)
    print(fidelity.markdown(results, title=title))
    log(f"done in {time.perf_counter() - began:.0f} s")
    return 0

