"""``experiments/bench_anytime.py``: the table read off hand-made curves (the best so far at each
checkpoint, "within 1% of the final at 2 s"), the chart it draws, and one real curve of a
heuristic (a single point, its own step). The tool defines absl flags of its own, so it runs in
a subprocess; the recorder itself is tested in tests/outputs/test_progress.py."""

import json
import subprocess
import sys

import pytest

# A developer tool run in a subprocess: behind -m slow with the other heavy checks.
pytestmark = pytest.mark.slow

TOOL = "experiments/bench_anytime.py"

CHILD = f"""
import importlib.util, json
spec = importlib.util.spec_from_file_location("bench_anytime", {TOOL!r})
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)
from tf_autoplace.testing import problems
slow = [(0.3, 0.200), (1.5, 0.150), (6.0, 0.100)]   # reaches its final after 2 s
quick = [(0.3, 0.105), (1.9, 0.1005), (6.0, 0.100)]  # within 1% at 2 s
rows = [dict(pair="p:c", placer="a", points=slow, final_s=0.100, returned_s=6.0,
             within=tool.within_at(slow, 0.100)),
        dict(pair="p:c", placer="b", points=quick, final_s=0.100, returned_s=6.0,
             within=tool.within_at(quick, 0.100))]
svg = tool.svg_chart("p:c", {{"a": slow, "b": quick}})
problem = problems.random_problem(60, 0)
curve, final, returned = tool.run_curve("best_heuristic", problem, 0)
print(json.dumps(dict(within=[r["within"] for r in rows],
                      table=tool.markdown(rows, {{"p:c": "docs/anytime/p_c.svg"}}), svg=svg,
                      points=curve.points, final=final, returned=returned)))
"""


def test_the_table_the_chart_and_a_heuristics_single_point(repo_root):
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          cwd=repo_root, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["within"] == [False, True]
    table = out["table"].splitlines()
    # best at 0.5, 1, 2, 5, 10 s; final; returned; within
    assert table[2] == "| p:c | a | 200.00 | 200.00 | 150.00 | 150.00 | 100.00 | 100.00 | 6.0 | no |"
    assert table[3] == "| p:c | b | 105.00 | 105.00 | 100.50 | 100.50 | 100.00 | 100.00 | 6.0 | yes |"
    assert "![p:c](docs/anytime/p_c.svg)" in out["table"]
    svg = out["svg"]
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert svg.count("<polyline") == 2 and ">a</text>" in svg and ">b</text>" in svg
    # A heuristic reports nothing while it runs: its curve is the placement it returned.
    assert len(out["points"]) == 1 and out["points"][0][1] == out["final"]
    assert out["points"][0][0] == out["returned"] >= 0
