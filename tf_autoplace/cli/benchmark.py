"""``tf-autoplace benchmark``: placers on the zoo models and the K80 clusters the papers pair
them with.

  tf-autoplace benchmark --quick --out_md=/tmp/bench_quick.md
  tf-autoplace benchmark --out_md=/tmp/bench_full.md \\
      --out_csv=/tmp/bench_full.csv --plot_png=/tmp/bench_full.png

Per pair and placer: simulated step time, lower bound and their ratio, peak memory per device,
an OOM flag, placement search time and the simulations the search ran; per pair, the
simulator's speed on the whole graph. ``--pairs`` takes ``model:cluster`` items (models:
``tf_autoplace.zoo.benchmark.MODELS``; clusters: shipped names such as ``k80x4``, or spec paths);
the default is the papers' pairings, or a few-minute subset with ``--quick``, which also
shrinks the models' tensors. The markdown and CSV files are rewritten after every pair, so a
long run can be watched; progress goes to stderr. See :mod:`tf_autoplace.zoo.benchmark`.
"""

from __future__ import annotations

import sys
import time

from absl import flags

from tf_autoplace.cli import benchmark_flags  # noqa: F401  (this command's flags and checks)
from tf_autoplace.core.cluster import resolve_cluster
from tf_autoplace.errors import AutoplaceError
from tf_autoplace.grouping import GroupingConfig
from tf_autoplace.outputs import files
from tf_autoplace.placers import get_placer
from tf_autoplace.zoo import benchmark as bench

FLAGS = flags.FLAGS  # this command's flags: tf_autoplace.cli.benchmark_flags


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def main(argv):
    del argv
    if FLAGS.from_csv:
        if FLAGS.plot_png or FLAGS.out_csv:  # (they were ignored without a word)
            return _error("--from_csv renders CSV files as one markdown report (stdout and "
                          "--out_md); --plot_png and --out_csv are written by a run")
        try:
            rows = [row for path in FLAGS.from_csv for row in bench.read_csv(path)]
        except OSError as e:
            return _error(f"cannot read --from_csv file {e.filename!r}: {e.strerror or e}")
        except AutoplaceError as e:
            return _error(f"--from_csv: {e}")
        text = bench.markdown(rows, [], title=f"Placer baselines (from {len(FLAGS.from_csv)} "
                                                "CSV files)")
        if FLAGS.out_md:
            files.write_output(FLAGS.out_md, text.encode("utf-8"))
        print(text)
        return 0
    if FLAGS.plot_png:
        try:
            import matplotlib  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
        except ImportError:
            return _error("--plot_png needs matplotlib: pip install 'tf_autoplace[plot]' (or "
                          "drop --plot_png)")
    try:
        placers = bench.PLACER_NAMES if FLAGS.placers is None else FLAGS.placers
        for item in placers:  # with the budget each will run with (auto@0: none to search)
            name, own = bench.parse_placer(item)
            get_placer(name, budget_s=own if own is not None else FLAGS.budget_s)
        pairs = bench.parse_pairs(FLAGS.pairs or (bench.QUICK_PAIRS if FLAGS.quick
                                                  else bench.FULL_PAIRS))
        for _, cluster in pairs:  # a misspelt cluster fails now, not after building a model
            resolve_cluster(cluster)
        grouping = (GroupingConfig() if FLAGS.max_groups is None
                    else GroupingConfig(max_groups=FLAGS.max_groups))
    except AutoplaceError as e:
        return _error(str(e))
    title = (f"Placer baselines, {'quick' if FLAGS.quick else 'paper'} sizes "
             f"(seed {FLAGS.seed})")

    def write(rows, infos):
        if FLAGS.out_md:
            files.write_output(FLAGS.out_md, bench.markdown(rows, infos, title=title)
                               .encode("utf-8"))
        if FLAGS.out_csv:
            bench.write_csv(FLAGS.out_csv, rows)

    start = time.perf_counter()
    rows, infos = bench.benchmark(pairs, placers, quick=FLAGS.quick, seed=FLAGS.seed,
                                  sim_runs=FLAGS.sim_runs, grouping=grouping, on_pair=write,
                                  budget_s=FLAGS.budget_s)
    write(rows, infos)
    if FLAGS.plot_png:
        bench.write_plot(FLAGS.plot_png, rows, placers)
    print(bench.markdown(rows, infos, title=title))
    bench.progress(f"done in {time.perf_counter() - start:.0f} s")
    return 0
