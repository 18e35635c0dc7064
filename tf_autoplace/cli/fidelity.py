r"""Simulator fidelity on this machine: simulated vs measured step times of many placements.

    tf-autoplace fidelity --out_md=fidelity.md --out_json=fidelity.json
    tf-autoplace fidelity --graphs=lstm --max_load=1.0   # wait for a quiet machine
    tf-autoplace fidelity --graphs= --graph_file=my_train.pb   # your own training graph
    tf-autoplace fidelity --components --out_md=components.md   # each part on its own

For each graph (``--graphs``: see ``tf_autoplace.hw.fidelity.GRAPHS``; ``--graph_file``: a
GraphDef or MetaGraphDef of your own, whose train op one step runs), at least 20 distinct
placements on the local cluster (``--num_logical_cpus`` logical CPUs, or 0: this machine's GPUs
and its CPU host) are simulated with Grappler's analytical costs and with costs profiled here,
and measured under the measurement protocol (interleaved rounds, at least 15 timed steps each,
median with a 95% interval, the load before and after); the tool prints per graph the Spearman
rank correlation and the median absolute relative error of each cost variant, how many pairs
of placements the measurement told apart, then every placement's figures. The links are
profiled once per run (timed copies and, between logical CPUs, the CPU work of a Send;
``tf_autoplace.hw.transfers``). When the 1-minute load is above 1.5 the
tool warns that its figures are not publishable. Progress goes to stderr. See
:mod:`tf_autoplace.hw.fidelity`.

With ``--components`` the tool checks the simulator's parts one at a time instead (op compute
time, cross-device transfers, concurrency on shared cores, peak memory per device; choose with
``--component``), on the same graphs, and prints one table per part with the load, the
command line and the commit it ran at. See :mod:`tf_autoplace.hw.components`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

from absl import flags

from tf_autoplace.cli import fidelity_flags  # noqa: F401  (defines this command's flags)
from tf_autoplace.errors import AutoplaceError, ConfigError
from tf_autoplace.graph import ingest
from tf_autoplace.hw import components as components_lib
from tf_autoplace.hw import fidelity
from tf_autoplace.hw.profiler import DEFAULT_CONFIG as PROFILE_CONFIG
from tf_autoplace.hw.protocol import QUIET_LOAD, load_average
from tf_autoplace.hw.runner import RunConfig
from tf_autoplace.hw.transfers import profile_links, profile_send_costs
from tf_autoplace.outputs import files

FLAGS = flags.FLAGS  # this command's flags: tf_autoplace.cli.fidelity_flags


def _commit() -> str:
    """The source tree's git commit (with ``+changes`` when it has uncommitted ones), or
    ``unknown`` outside a git checkout."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--",
                                "tf_autoplace"], capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def _profile_config() -> RunConfig:
    """How ops are profiled: as ``tf-autoplace profile`` does by default (its untraced steps,
    whose median calibrates the op times, then the traced ones), with this command's warm-up
    and traced steps."""
    return dataclasses.replace(PROFILE_CONFIG, warmup_steps=FLAGS.warmup_steps,
                               trace_steps=FLAGS.trace_steps)


def _write_outputs(text: str, figures: dict) -> None:
    """--out_md and --out_json, whole or not at all, as one set (checked before the run)."""
    outputs = files.Outputs()
    if FLAGS.out_md:
        outputs.add_file(FLAGS.out_md, text.encode("utf-8"))
    if FLAGS.out_json:
        outputs.add_file(FLAGS.out_json, json.dumps(figures, indent=1).encode("utf-8"))
    outputs.commit()


def _components(argv) -> int:
    del argv
    chosen = (list(components_lib.COMPONENTS) if FLAGS.component is None
              else FLAGS.component)
    try:
        config = components_lib.Config(
            num_logical_cpus=FLAGS.num_logical_cpus, rounds=FLAGS.steps,
            warmup_steps=FLAGS.warmup_steps,
            profile=_profile_config(), seed=FLAGS.seed)
        unknown = sorted(set(chosen) - set(components_lib.COMPONENTS))
        if unknown:
            raise ConfigError(f"unknown components {unknown}; choose among "
                              f"{list(components_lib.COMPONENTS)}")
    except AutoplaceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    log = fidelity.progress
    fidelity.wait_for_quiet(FLAGS.max_load, log)
    began = time.perf_counter()
    load = components_lib.load()
    command = " ".join(["tf-autoplace fidelity"] + sys.argv[1:])
    header = (f"## Simulator components against this machine\n\nCommand: `{command}`; commit "
              f"{_commit()}; {os.cpu_count()} cores; 1-minute load at the start {load:.2f}"
              + (" (above 1.5: not publishable)" if load > 1.5 else "") + "\n")
    if load > 1.5:
        log(f"warning: the load is {load:.2f} (> 1.5); these figures are not publishable")
    try:
        results = components_lib.run(
            config, graphs=tuple(components_lib.GRAPHS) if FLAGS.graphs is None
            else FLAGS.graphs, components=chosen, log=log)
    except AutoplaceError as e:  # (an unknown graph ended in a traceback)
        print(f"error: {e}", file=sys.stderr)
        return 1
    text = components_lib.markdown(header=header, **results)
    _write_outputs(text, {"command": command, "commit": _commit(), "config": repr(config),
                          "load_at_start": load, "results": {
                              key: ([dataclasses.asdict(r) for r in value]
                                    if isinstance(value, list) else
                                    (dataclasses.asdict(value) if value is not None else None))
                              for key, value in results.items()}})
    print(text)
    log(f"done in {time.perf_counter() - began:.0f} s")
    return 0


def main(argv):
    if FLAGS.components:
        return _components(argv)
    del argv
    graphs = list(fidelity.GRAPHS) if FLAGS.graphs is None else FLAGS.graphs
    try:
        config = fidelity.Config(
            num_logical_cpus=FLAGS.num_logical_cpus, random_placements=FLAGS.random_placements,
            learned_samples=FLAGS.learned_samples,
            run=RunConfig(steps=FLAGS.steps, warmup_steps=FLAGS.warmup_steps),
            profile=_profile_config(),
            interleave=FLAGS.interleave, max_load=FLAGS.max_load, seed=FLAGS.seed)
        unknown = sorted(set(graphs) - set(fidelity.GRAPHS))
        if unknown:
            raise ConfigError(f"unknown graphs {unknown}; choose among {list(fidelity.GRAPHS)}")
        if not graphs and not FLAGS.graph_file:
            raise ConfigError("nothing to measure: give --graphs or --graph_file")
    except AutoplaceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:  # a graph file that cannot be read ends here, before minutes of link timing
        for path in FLAGS.graph_file:
            ingest.load_meta_graph(path)
    except AutoplaceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    began = time.perf_counter()
    log = fidelity.progress
    load = load_average()
    if load > QUIET_LOAD:
        log(f"WARNING: the 1-minute load average is {load:.2f}, above {QUIET_LOAD}: this "
            "machine is busy, and figures measured now are noisy and not publishable "
            "(--max_load=1.0 waits for a quiet machine)")
    cluster = fidelity.local_cluster(config.num_logical_cpus)
    fidelity.wait_for_quiet(config.max_load, log)
    profiled_cluster, fits = profile_links(cluster)
    for (i, j), fit in fits.items():
        log(f"link {cluster.names[i]} -> {cluster.names[j]}: {fit.latency_s * 1e6:.1f} us + "
            f"bytes / {fit.bandwidth_bps / 1e9:.3g} GB/s (rms {fit.rms_error_s * 1e6:.1f} us)")
    profiled_cluster, sends = profile_send_costs(profiled_cluster)
    for group, fit in sends.items():
        log(f"core group {group!r}: {fit.summary()}: its links' latency")
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
        except AutoplaceError as e:  # the settings were fine; this graph is not
            print(f"error: {e}", file=sys.stderr)
            return 1
        _write_outputs(fidelity.markdown(results, title=title), {
            "config": repr(config), "links": {
                f"{i}->{j}": dataclasses.asdict(fit) for (i, j), fit in fits.items()},
            "results": [dataclasses.asdict(r) for r in results]})
    print(fidelity.markdown(results, title=title))
    log(f"done in {time.perf_counter() - began:.0f} s")
    return 0

