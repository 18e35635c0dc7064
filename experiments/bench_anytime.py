r"""Anytime curves: the best step time a placer has found against the wall time it has searched.

    PYTHONPATH=. python experiments/bench_anytime.py \
        [--pairs=inception_v3:k80x2,nmt4:k80x4,nmt8:k80x8,transformer8:k80x8] \
        [--placers=auto,post,best_heuristic] [--svg_dir=docs/anytime] [--out_json=anytime.json]

For each zoo pair (the problem is built first, as ``tf-autoplace benchmark`` builds it, and not
timed) and each placer (seed 0, default settings), the placer runs once with a
:class:`tf_autoplace.outputs.progress.CurveRecorder` as its progress: every report of its search
(the best step time so far, or the memory-penalised runtime where a placement overflows) is a
point at the wall time since the placer was called, and the placement it returns is the last
point, at the moment it returned, with its simulated step time. A placer that reports nothing
(a heuristic) has that one point.

Prints a markdown table (the best step at 0.5, 1, 2, 5 and 10 s, the final step and when the
placer returned, and whether ``auto`` was within 1% of its final step at 2 s) and writes one
SVG chart per pair into ``--svg_dir`` (step time against seconds on a log axis, one line per
placer), linked from the table. Wall times depend on the machine and its load: the header says
the load before and after.
"""

from __future__ import annotations

import json
import math
import os
import time

from absl import app, flags

from tf_autoplace.outputs.files import write_atomically
from tf_autoplace.outputs.progress import CurveRecorder, best_by
from tf_autoplace.placers import get_placer
from tf_autoplace.zoo.benchmark import pair_problem, parse_pairs

flags.DEFINE_list("pairs", ["inception_v3:k80x2", "nmt4:k80x4", "nmt8:k80x8",
                            "transformer8:k80x8"], "zoo model:cluster pairs")
flags.DEFINE_list("placers", ["auto", "post", "best_heuristic"], "placers to run")
flags.DEFINE_integer("seed", 0, "placer seed")
flags.DEFINE_string("svg_dir", "docs/anytime", "write one chart per pair here")
flags.DEFINE_string("out_json", None, "also write every point here")
flags.DEFINE_string("cache_dir", None, "keep the pairs' built problems here")
FLAGS = flags.FLAGS

CHECKPOINTS_S = (0.5, 1.0, 2.0, 5.0, 10.0)
WITHIN = 0.01  # auto within 1% of its final step ...
AT_S = 2.0     # ... at 2 s
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")


def run_curve(placer_name: str, problem, seed: int) -> tuple[CurveRecorder, float, float]:
    """``(curve, final step (s), seconds until the placer returned)`` of one run."""
    placer = get_placer(placer_name)
    curve = CurveRecorder()
    devices = placer.place(problem, seed=seed, progress=curve).devices
    final = float(problem.simulator.makespan(devices))
    curve.record(final)
    return curve, final, curve.points[-1][0]


def within_at(curve_points, final_s: float, seconds: float = AT_S,
              within: float = WITHIN) -> bool:
    """Whether the best found by ``seconds`` was at most ``(1 + within)`` times ``final_s``."""
    return best_by(curve_points, seconds) <= (1.0 + within) * final_s


def _ms(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value * 1e3:.2f}"


def svg_chart(title: str, curves: dict[str, list[tuple[float, float]]]) -> str:
    """An SVG line chart of ``curves`` (name -> [(seconds, step s)]): step time in ms against
    seconds on a log axis, each curve a step line from its first point to its last."""
    width, height, left, right, top, bottom = 640, 360, 70, 150, 30, 45
    points = [p for pts in curves.values() for p in pts if math.isfinite(p[1])]
    t_lo = min(max(min(t for t, _ in points), 1e-3), 0.1)
    t_hi = max(max(t for t, _ in points), 1.0)
    y_lo, y_hi = min(v for _, v in points), max(v for _, v in points)
    pad = (y_hi - y_lo) * 0.08 or y_hi * 0.02
    y_lo, y_hi = y_lo - pad, y_hi + pad
    span_x = math.log10(t_hi) - math.log10(t_lo)

    def x(t):
        return left + (math.log10(max(t, t_lo)) - math.log10(t_lo)) / span_x * (
            width - left - right)

    def y(v):
        return top + (y_hi - v) / (y_hi - y_lo) * (height - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="18" font-size="13">{title}</text>',
           f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" '
           f'y2="{height - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>']
    decade = math.floor(math.log10(t_lo))
    while 10 ** decade <= t_hi * 1.0001:
        for m in (1, 2, 5):
            t = m * 10 ** decade
            if t_lo <= t <= t_hi:
                out.append(f'<line x1="{x(t):.1f}" y1="{height - bottom}" x2="{x(t):.1f}" '
                           f'y2="{height - bottom + 4}" stroke="black"/>')
                out.append(f'<text x="{x(t):.1f}" y="{height - bottom + 16}" '
                           f'text-anchor="middle">{t:g}</text>')
        decade += 1
    out.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 8}" '
               'text-anchor="middle">seconds searched (log)</text>')
    for k in range(5):
        v = y_lo + (y_hi - y_lo) * k / 4
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">'
                   f'{v * 1e3:.1f}</text>')
    out.append(f'<text x="14" y="{(top + height - bottom) / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {(top + height - bottom) / 2:.0f})">best step (ms)'
               '</text>')
    for k, (name, pts) in enumerate(curves.items()):
        colour = COLOURS[k % len(COLOURS)]
        path = []
        for i, (t, v) in enumerate(pts):
            if i:
                path.append(f"{x(t):.1f},{y(pts[i - 1][1]):.1f}")
            path.append(f"{x(t):.1f},{y(v):.1f}")
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                   f'points="{" ".join(path)}"/>')
        t, v = pts[-1]
        out.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}"/>')
        out.append(f'<text x="{width - right + 10}" y="{top + 14 * (k + 1)}" fill="{colour}">'
                   f'{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def markdown(rows: list[dict], svgs: dict[str, str]) -> str:
    """The table of ``rows`` (one per pair and placer) and the charts' links."""
    head = ("| pair | placer | " + " | ".join(f"best at {t:g} s (ms)" for t in CHECKPOINTS_S)
            + " | final (ms) | returned at (s) | within 1% of final at 2 s |")
    lines = [head, "| --- | --- |" + " ---: |" * (len(CHECKPOINTS_S) + 2) + " --- |"]
    for row in rows:
        cells = [_ms(best_by(row["points"], t)) for t in CHECKPOINTS_S]
        lines.append(f"| {row['pair']} | {row['placer']} | " + " | ".join(cells)
                     + f" | {_ms(row['final_s'])} | {row['returned_s']:.1f} | "
                     + ("yes" if row["within"] else "no") + " |")
    lines.append("")
    lines += [f"![{pair}]({path})" for pair, path in svgs.items()]
    return "\n".join(lines) + "\n"


def main(argv):
    del argv
    load_before = os.getloadavg()[0]
    began = time.perf_counter()
    rows, svgs = [], {}
    os.makedirs(FLAGS.svg_dir, exist_ok=True)
    for model, cluster in parse_pairs(FLAGS.pairs):
        pair = f"{model}:{cluster}"
        problem = pair_problem(model, cluster, cache_dir=FLAGS.cache_dir)
        curves = {}
        for name in FLAGS.placers:
            curve, final, returned = run_curve(name, problem, FLAGS.seed)
            curves[name] = curve.points
            rows.append(dict(pair=pair, placer=name, points=curve.points, final_s=final,
                             returned_s=returned,
                             within=within_at(curve.points, final)))
        path = os.path.join(FLAGS.svg_dir, pair.replace(":", "_") + ".svg")
        write_atomically(path, svg_chart(f"{pair}: best step found against time searched",
                                         curves).encode())
        svgs[pair] = path
    load_after = os.getloadavg()[0]
    print(f"Load {load_before:.2f} -> {load_after:.2f}; {time.perf_counter() - began:.0f} s "
          f"in all (problem builds included).\n")
    print(markdown(rows, svgs))
    if FLAGS.out_json:
        write_atomically(FLAGS.out_json, json.dumps(
            {"load": [load_before, load_after], "rows": rows}, indent=1).encode())


if __name__ == "__main__":
    app.run(main)
