r"""Large graphs end to end: every stage's seconds and the peak memory of a whole placement.

    python experiments/bench_scale.py                      # NMT-8 unrolled 64 and 192 steps
    python experiments/bench_scale.py --lengths=64 --rounds=3

Each round runs ``tf-autoplace place-model --model=nmt --knob=layers=8 --knob=length=L
--cluster=k80x8`` in a fresh process (the README's first command on a larger model), the
lengths interleaved round by round, and reads back its report (``--report_json``: the stage
seconds, the predicted step) and its peak resident memory (``wait4``'s ``ru_maxrss``: the
whole process, TensorFlow and the model included). The model build is timed apart (it is the
zoo's, not the placer's); "after the build" sums the stages of the placement itself. Prints a
markdown table: per length the median of the rounds and their range.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

flags.DEFINE_list("lengths", ["64", "192"], "NMT unrolled lengths to place")
flags.DEFINE_integer("layers", 8, "NMT layers")
flags.DEFINE_integer("rounds", 3, "rounds (each length once per round, in a fresh process)")
flags.DEFINE_string("cluster", "k80x8", "cluster spec")
FLAGS = flags.FLAGS

STAGES = ("ingest", "cost", "group", "place", "bound", "rewrite")


def _load() -> float:
    return os.getloadavg()[0]


def place_once(length: int, cluster: str, layers: int = 8) -> dict:
    """One placement in a fresh process: its stage seconds, build seconds, ops, step and peak
    RSS (GB)."""
    with tempfile.TemporaryDirectory() as tmp:
        report_path = os.path.join(tmp, "report.json")
        command = [sys.executable, "-m", "tf_autoplace.cli", "place-model", "--model=nmt",
                   f"--knob=layers={layers}", f"--knob=length={length}", f"--cluster={cluster}",
                   f"--report_json={report_path}"]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        with open(os.path.join(tmp, "out.txt"), "w+") as out:
            began = time.perf_counter()
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL, env=env)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - began
            out.seek(0)
            text = out.read()
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{text[-2000:]}")
        with open(report_path) as f:
            report = json.load(f)
    built = re.search(r"model \S+: (\d+) ops, built in ([0-9.]+) s", text)
    return dict(stages=report["timings_s"], step_ms=report["step_time_s"] * 1e3,
                groups=report["num_groups"], ops=int(built[1]), build_s=float(built[2]),
                wall_s=wall, peak_gb=usage.ru_maxrss * 1024 / 1e9,
                search=next((n for n in report["notes"] if n.startswith("auto:")), ""))


def _median_range(values, fmt="{:.1f}") -> str:
    return (fmt.format(statistics.median(values)) + " (" + fmt.format(min(values)) + "-"
            + fmt.format(max(values)) + ")")


def main(argv):
    del argv
    lengths = [int(x) for x in FLAGS.lengths]
    results = {length: [] for length in lengths}
    loads = [_load()]
    for _ in range(FLAGS.rounds):
        for length in lengths:
            results[length].append(place_once(length, FLAGS.cluster, FLAGS.layers))
            loads.append(_load())
    print(f"{FLAGS.rounds} rounds, lengths interleaved; 1-minute load {loads[0]:.2f} at the "
          f"start, {min(loads):.2f}-{max(loads):.2f} over the run. Median (range) of the "
          "rounds; step and placements are the same in every round.\n")
    header = (["graph", "ops", "groups"] + [f"{s} (s)" for s in STAGES]
              + ["after the build (s)", "peak RSS (GB)", "build (s)", "step (ms)"])
    print("| " + " | ".join(header) + " |")
    print("| " + " | ".join(["---"] + ["---:"] * (len(header) - 1)) + " |")
    for length, runs in results.items():
        after = [sum(r["stages"].get(s, 0.0) for s in r["stages"]) for r in runs]
        steps = sorted({round(r["step_ms"], 2) for r in runs})
        row = ([f"nmt{FLAGS.layers} length {length} : {FLAGS.cluster}", f"{runs[0]['ops']:,}",
                f"{runs[0]['groups']:,}"]
               + [_median_range([r["stages"].get(s, 0.0) for r in runs]) for s in STAGES]
               + [_median_range(after), _median_range([r["peak_gb"] for r in runs], "{:.2f}"),
                  _median_range([r["build_s"] for r in runs]),
                  "/".join(f"{s:,.2f}" for s in steps)])
        print("| " + " | ".join(row) + " |")
    print()
    for length, runs in results.items():
        print(f"- length {length}: {runs[0]['search']}")


if __name__ == "__main__":
    app.run(main)
