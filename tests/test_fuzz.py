"""Fuzzing the public door: a small real training graph and the cluster spec, damaged at random
(seeded; :mod:`tf_autoplace.testing.fuzz`), must each give a valid placement that TensorFlow
imports and runs, or an AutoplaceError; the input untouched, the process alive.

The cases run in a child process (tests/fuzz_child.py), so an abort in C++ code fails the test
with the case that caused it instead of killing pytest. 300 cases by default (about 25 s of CPU
time); ``pytest -m slow`` runs 3,000 more, the learned placer among the placers.
"""

import collections
import json
import os
import subprocess
import sys

import pytest

from tf_autoplace.testing import fuzz

SEED = 0


def _run_child(repo_root, first, count, *extra, timeout):
    pythonpath = os.pathsep.join(p for p in (repo_root, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=pythonpath)
    proc = subprocess.run(
        [sys.executable, os.path.join("tests", "fuzz_child.py"), str(SEED), str(first),
         str(count), *extra], cwd=repo_root, env=env, text=True, capture_output=True,
        timeout=timeout)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    results = [line for line in lines if "outcome" in line]
    started = [line["start"] for line in lines if "start" in line]
    if proc.returncode != 0 or len(results) != count:
        died = started[-1] if started else first
        case = fuzz.make_case(SEED, died, fuzz.ALL_PLACERS if "all" in extra else fuzz.PLACERS)
        pytest.fail(f"the child died (exit status {proc.returncode}) in case {died} "
                    f"(placer {case.placer}; {case.mutations}):\n{proc.stderr[-3000:]}")
    return results


def _check(results):
    bad = [r for r in results if r["problems"] or not r["untouched"]]
    assert not bad, json.dumps(bad[:5], indent=1)
    outcomes = collections.Counter(r["error"] or "placed" for r in results)
    # Both kinds of outcome occur, or the fuzzing has stopped reaching one of them.
    assert outcomes["placed"] >= len(results) // 10, outcomes
    assert outcomes["InvalidGraphError"] >= len(results) // 3, outcomes
    assert outcomes["ClusterSpecError"] >= 1, outcomes
    assert set(outcomes) <= {"placed", "InvalidGraphError", "ClusterSpecError",
                             "InfeasiblePlacementError", "ConfigError"}, outcomes
    print(dict(outcomes), "placed graphs whose input fails to run too:",
          sum(bool(r.get("input_fails_too")) for r in results), "; imported, not run:",
          sum(bool(r.get("not_run")) for r in results))


def test_damaged_graphs_and_specs_place_validly_or_raise_autoplace_errors(repo_root):
    _check(_run_child(repo_root, 0, 300, timeout=600))


@pytest.mark.slow
def test_many_more_damaged_inputs_with_every_placer(repo_root):
    _check(_run_child(repo_root, 300, 3000, "all", timeout=7200))
