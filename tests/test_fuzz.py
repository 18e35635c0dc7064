"""Fuzzing the public doors (:mod:`tf_autoplace.testing.fuzz`): damaged inputs of every kind a
user gives the package must each end in a valid placement or an AutoplaceError, the input
untouched, the process alive and never waiting forever.

- graphs and cluster specs: a small real training graph and the spec, damaged at random; a
  placement must be one TensorFlow imports and runs;
- cost graphs: the same graph as a cost graph, damaged, in text, JSON or binary form;
- saved policies: the shipped Placeto and GDP policies with their weights or settings damaged
  (a ConfigError naming the file, or a placement);
- placement cache entries: damaged after a first placement wrote them (the second placement
  must place validly and read back only a whole, valid entry).

The cases run in child processes (tests/fuzz_child.py), so an abort in C++ code fails the test
with the case that caused it instead of killing pytest. By default 300 graph cases (about 25 s
of CPU) and 40 + 20 + 20 of the other families (about 15 s); ``pytest -m slow`` runs 3,000 more
graph cases with the learned placer among the placers, and 1,000 + 300 + 300 more of the
others.
"""

import collections
import json
import os
import subprocess
import sys

import pytest

from tf_autoplace.testing import fuzz

SEED = 0
ERRORS = {"InvalidGraphError", "ClusterSpecError", "InfeasiblePlacementError", "ConfigError"}


def _run_child(repo_root, specs, *extra, timeout):
    """Results of ``tests/fuzz_child.py SEED SPECS...`` by family; fails naming the case a
    child died or hung in."""
    pythonpath = os.pathsep.join(p for p in (repo_root, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=pythonpath)
    args = [sys.executable, os.path.join("tests", "fuzz_child.py"), str(SEED), *specs, *extra]
    proc = subprocess.Popen(args, cwd=repo_root, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    results = collections.defaultdict(list)
    for line in lines:
        if "outcome" in line:
            results[line["family"]].append(line)
    started = [line for line in lines if "start" in line]
    expected = sum(int(spec.split(":")[2]) for spec in specs)
    if proc.returncode != 0 or sum(map(len, results.values())) != expected:
        last = started[-1] if started else {"family": specs[0].split(":")[0],
                                           "start": int(specs[0].split(":")[1])}
        make = fuzz.FAMILIES[last["family"]][0]
        case = make(SEED, last["start"], fuzz.ALL_PLACERS if "all" in extra else fuzz.PLACERS)
        pytest.fail(f"the child died or hung (exit status {proc.returncode}) in "
                    f"{last['family']} case {last['start']} ({case.mutations}):\n"
                    f"{stderr[-3000:]}")
    return results


def _check(results, *, placed_share, errors, untouched=True):
    bad = [r for r in results if r["problems"] or (untouched and not r["untouched"])]
    assert not bad, json.dumps(bad[:5], indent=1)
    outcomes = collections.Counter(r["error"] or "placed" for r in results)
    # Both kinds of outcome occur, or the fuzzing has stopped reaching one of them.
    assert outcomes["placed"] >= placed_share * len(results), outcomes
    for error, least in errors.items():
        assert outcomes[error] >= least, outcomes
    assert set(outcomes) <= {"placed"} | ERRORS, outcomes
    return outcomes


def _check_graphs(results):
    n = len(results)
    outcomes = _check(results, placed_share=0.1,
                      errors={"InvalidGraphError": n // 3, "ClusterSpecError": 1})
    print(dict(outcomes), "placed graphs whose input fails to run too:",
          sum(bool(r.get("input_fails_too")) for r in results), "; imported, not run:",
          sum(bool(r.get("not_run")) for r in results))


def _check_others(results):
    _check(results["cost_graphs"], placed_share=0.1,
           errors={"InvalidGraphError": len(results["cost_graphs"]) // 3})
    _check(results["policies"], placed_share=0.0,
           errors={"ConfigError": len(results["policies"]) // 2})
    caches = results["caches"]
    _check(caches, placed_share=1.0, errors={})  # a cache never fails a placement
    assert any(r["from_cache"] for r in caches) and not all(r["from_cache"] for r in caches)


def test_damaged_graphs_and_specs_place_validly_or_raise_autoplace_errors(repo_root):
    _check_graphs(_run_child(repo_root, ["graphs:0:300"], timeout=600)["graphs"])


def test_damaged_cost_graphs_policies_and_cache_entries(repo_root):
    _check_others(_run_child(repo_root, ["cost_graphs:0:40", "policies:0:20", "caches:0:20"],
                             timeout=600))


@pytest.mark.slow
def test_many_more_damaged_inputs_with_every_placer(repo_root):
    _check_graphs(_run_child(repo_root, ["graphs:300:3000"], "all", timeout=7200)["graphs"])


@pytest.mark.slow
def test_many_more_damaged_cost_graphs_policies_and_cache_entries(repo_root):
    _check_others(_run_child(repo_root, ["cost_graphs:40:1000", "policies:20:300",
                                         "caches:20:300"], "all", timeout=7200))
