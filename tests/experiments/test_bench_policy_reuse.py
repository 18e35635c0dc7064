"""``experiments/bench_policy_reuse.py``: the placements to a common step time read off two hand-made
curves, the budget each placer is built with, and a tiny end-to-end run for HDP (fresh policy
against the one it saved on the base model). The tool defines absl flags of its own, so it runs
in subprocesses."""

import json

import pytest

# A developer tool run in subprocesses (about 15 s): behind -m slow with the other heavy checks.
pytestmark = pytest.mark.slow

TOOL = "experiments/bench_policy_reuse.py"

# Imports the tool as a module and prints what its functions make of fixed inputs.
CHILD = f"""
import importlib.util, json
spec = importlib.util.spec_from_file_location("bench_policy_reuse", {TOOL!r})
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)
default = [(1, 0.9), (10, 0.8), (20, 0.7)]
worse = [(1, 0.85), (10, 0.72), (20, 0.72)]
better = [(1, 0.85), (5, 0.7), (20, 0.6)]
import os, tempfile
from tf_autoplace.placers.gdp.policy import GdpPolicy
from tf_autoplace.placers.hdp.policy import HDPPolicy
from tf_autoplace.placers.placeto.policy import PlacetoPolicy
# A saved policy of each kind (a placer reads the files it is given before any work).
saved = {{name: os.path.join(tempfile.mkdtemp(), name) for name in ("placeto", "hdp", "gdp")}}
PlacetoPolicy(2).save(saved["placeto"])
HDPPolicy(4, 2, ["MatMul"]).save(saved["hdp"])
GdpPolicy().save(saved["gdp"])
budgets = {{}}
for name in ("placeto", "hdp", "gdp"):
    c = tool.make_placer(name, 40, 16, policy=saved[name]).config
    budgets[name] = dict(budget_s=c.budget_s, policy_dir=c.policy_dir, saved=saved[name],
                         max_samples=getattr(c, "max_samples", None),
                         max_steps=getattr(c, "max_steps", None),
                         samples=getattr(c, "samples", None))
rows = [dict(variant=dict(layers=3, batch=8), ops=7, seed=0, default_first_ms=900.0,
             default_final_ms=700.0, saved_first_ms=850.0, saved_final_ms=720.0,
             **tool.compare(default, worse))]
print(json.dumps(dict(worse=tool.compare(default, worse), better=tool.compare(default, better),
                      budgets=budgets, table=tool.markdown(rows, dict(layers=2, batch=8),
                                                           "fresh"))))
"""

SMALL_NMT = ["--model=nmt", "--base=layers=1", "--base=length=4", "--base=batch=4",
             "--base=hidden=16", "--base=embedding_dim=16", "--base=vocab=50"]


@pytest.fixture(scope="module")
def results(run_scripts, tmp_path_factory):
    """The child's output, and the rows and table of a 16-placement HDP run on a small NMT."""
    out = tmp_path_factory.mktemp("reuse") / "rows.json"
    runs = run_scripts({
        "child": ["-c", CHILD],
        "hdp": [TOOL, "--placer=hdp", *SMALL_NMT, "--variant=layers=2", "--samples=16",
                f"--out_json={out}"]},
        # A hang guard, not a speed target: HDP fits its placer to the heuristic three times
        # here, which took more than the default 300 s on 2 cores shared with other suites.
        timeout=1200)
    for code, _, stderr in runs.values():
        assert code == 0, stderr
    with open(out, encoding="utf-8") as f:
        rows = json.load(f)
    return json.loads(runs["child"][1].splitlines()[-1]), rows, runs["hdp"][1]


def test_placements_to_the_worse_final_step_time(results):
    child, _, _ = results
    # The saved run ended worse (0.72 s): both reach it, the default at 20, the saved at 10;
    # the saved run never reaches the default's 0.7 s.
    assert child["worse"] == dict(target_ms=pytest.approx(720.0), default_n=20, saved_n=10,
                                  saved_to_default=None)
    # The saved run ended better: the target is the default's final, reached at 20 and 5.
    assert child["better"] == dict(target_ms=pytest.approx(700.0), default_n=20, saved_n=5,
                                   saved_to_default=5)
    header, _, row = child["table"]
    assert "fresh: first -> final" in header and "(fresh / saved)" in header
    assert row == ("| layers=3 | 7 | 0 | 900.00 -> 700.00 | 850.00 -> 720.00 | 720.00 | "
                   "20 / 10 | never |")


def test_each_placer_gets_the_sample_budget_and_no_time_limit(results):
    budgets = results[0]["budgets"]
    assert all(b["budget_s"] == 1e9 and b["policy_dir"] == b["saved"] for b in budgets.values())
    assert budgets["placeto"]["max_samples"] == budgets["hdp"]["max_samples"] == 40
    assert (budgets["gdp"]["max_steps"], budgets["gdp"]["samples"]) == (2, 16)


def test_hdp_end_to_end_compares_a_fresh_policy_with_the_saved_one(results):
    _, rows, table = results
    assert len(rows) == 1
    row = rows[0]
    assert row["placer"] == "hdp" and row["variant"]["layers"] == 2
    assert row["default_started_from"] == "fresh"
    assert row["saved_started_from"].endswith("seed0")
    for name in ("default", "saved"):
        curve = row[f"{name}_curve"]
        assert curve[-1][0] == row[f"{name}_samples"] == 16  # one update of 16
        assert row[f"{name}_final_ms"] == pytest.approx(curve[-1][1] * 1e3)
    assert row["target_ms"] == pytest.approx(max(row["default_final_ms"],
                                                 row["saved_final_ms"]))
    assert row["default_n"] == row["saved_n"] == 16
    assert "| fresh: first -> final (ms) |" in table and "| layers=2 |" in table
