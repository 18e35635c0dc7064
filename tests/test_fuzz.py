"""Fuzzing the public doors (:mod:`tf_autoplace.testing.fuzz`): damaged inputs of every kind a
user gives the package must each end in a valid placement or an AutoplaceError, the input
untouched, the process alive and never waiting forever.

- graphs and cluster specs: a small real training graph and the spec, damaged at random; a
  placement must be one TensorFlow imports and runs;
- cost graphs: the same graph as a cost graph, damaged, in text, JSON or binary form;
- saved policies: the shipped Placeto and GDP policies with their weights or settings damaged
  (a ConfigError naming the file, or a placement);
- placement cache entries: damaged after a first placement wrote them (the second placement
  must place validly and read back only a whole, valid entry);
- TensorFlow clusters: descriptions of jobs and tasks (dicts, TF_CONFIG, ClusterSpecs,
  resolvers, text specs with tasks, devices and link classes), damaged or not: a valid cluster
  (its devices on its tasks, its links of the documented class and figures) on which the base
  graph places, or a ClusterSpecError/ConfigError naming the damage;
- Keras models: small random Keras 3 models fit placed on two logical CPUs, with the losses
  and weights of an unplaced twin, or misuses of the Keras door that must be AutoplaceErrors;
- verified placements: tiny graphs placed with verify on this machine's two logical CPUs: the
  applied placement one of the measured candidates and never measured slower than the single
  device beyond noise, the report saying so, the graph left runnable (no timing is asserted).

The cases run in child processes (tests/fuzz_child.py; the default ones of every family in one
child, which imports TensorFlow once), so an abort in C++ code fails the test with the case that
caused it instead of killing pytest. By default the first cases of each family (``DEFAULT``;
no server process is started); ``pytest -m slow`` runs the rest of ``TOTAL`` (over 3,000 graph
cases, with the learned placer among the placers; up to about a thousand of each other
family), so the default and slow cases together are the same whichever share the default
runs, and places the base graph on 30 descriptions of two local server processes and runs it
there.
"""

import collections
import json
import os
import subprocess
import sys

import pytest

from tf_autoplace.testing import fuzz

SEED = 0
# Cases of each family the default suite runs (case 0 on), and the default and slow runs' cases
# together (the slow tests run the rest): the same cases are checked whichever share is default.
DEFAULT = {"graphs": 50, "cost_graphs": 20, "policies": 4, "caches": 10, "tf_clusters": 20,
           "keras": 4, "verify": 2}
TOTAL = {"graphs": 3300, "cost_graphs": 1040, "policies": 320, "caches": 320,
         "tf_clusters": 1040, "keras": 66, "verify": 68}
ERRORS = {"InvalidGraphError", "ClusterSpecError", "InfeasiblePlacementError", "ConfigError"}
# verify measures: a graph TensorFlow cannot run unplaced either ends in a MeasurementError.
VERIFY_ERRORS = ERRORS | {"MeasurementError"}


def _more(*families) -> list[str]:
    """Specs of the cases of ``families`` the default suite does not run."""
    return [f"{f}:{DEFAULT[f]}:{TOTAL[f] - DEFAULT[f]}" for f in families]


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


def _check(results, *, placed_share, errors, untouched=True, allowed=ERRORS):
    bad = [r for r in results if r["problems"] or (untouched and not r["untouched"])]
    assert not bad, json.dumps(bad[:5], indent=1)
    outcomes = collections.Counter(r["error"] or "placed" for r in results)
    # Both kinds of outcome occur, or the fuzzing has stopped reaching one of them.
    assert outcomes["placed"] >= placed_share * len(results), outcomes
    for error, least in errors.items():
        assert outcomes[error] >= least, outcomes
    assert set(outcomes) <= {"placed"} | allowed, outcomes
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


def _check_doors(results):
    clusters = results["tf_clusters"]
    _check(clusters, placed_share=0.2, errors={"ClusterSpecError": len(clusters) // 5},
           allowed={"ClusterSpecError", "ConfigError"})
    keras = results["keras"]
    _check(keras, placed_share=0.3, errors={"ConfigError": 1})
    # Some placements the losses were compared on use both devices.
    assert any(r.get("devices_used", 0) > 1 for r in keras), keras
    verified = results["verify"]
    _check(verified, placed_share=0.5, errors={}, allowed=VERIFY_ERRORS)
    # Some cases measured candidates and decided (the others: nothing to measure, or an error).
    assert any(r.get("applied") for r in verified), verified


@pytest.fixture(scope="module")
def default_cases(repo_root):
    """The default cases of every family, in one child process (one TensorFlow start)."""
    return _run_child(repo_root, [f"{family}:0:{count}" for family, count in DEFAULT.items()],
                      timeout=900)


def test_damaged_graphs_and_specs_place_validly_or_raise_autoplace_errors(default_cases):
    _check_graphs(default_cases["graphs"])


def test_damaged_cost_graphs_policies_and_cache_entries(default_cases):
    _check_others(default_cases)


def test_tf_clusters_keras_models_and_verified_placements(default_cases):
    _check_doors(default_cases)


@pytest.mark.slow
def test_many_more_damaged_inputs_with_every_placer(repo_root):
    _check_graphs(_run_child(repo_root, _more("graphs"), "all", timeout=7200)["graphs"])


@pytest.mark.slow
def test_many_more_damaged_cost_graphs_policies_and_cache_entries(repo_root):
    _check_others(_run_child(repo_root, _more("cost_graphs", "policies", "caches"), "all", timeout=7200))


@pytest.mark.slow
def test_many_more_tf_clusters_keras_models_and_verified_placements(repo_root):
    _check_doors(_run_child(repo_root, _more("tf_clusters", "keras", "verify"), timeout=7200))


@pytest.mark.slow
def test_descriptions_of_running_servers_place_graphs_that_run_on_them(repo_root):
    """Slow: starts two TensorFlow server processes (tf_autoplace.hw.local_cluster)."""
    served = _run_child(repo_root, ["served:0:30"], timeout=1800)["served"]
    _check(served, placed_share=1.0, errors={})
    assert any(r["tasks_used"] == ["ps", "worker"] for r in served), served
