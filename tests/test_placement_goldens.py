"""Refactoring moves no placement: every placer's placement on the golden problems, for seed 0,
hashes to what ``testdata/placement_goldens.json`` recorded (``tools/make_placement_goldens.py``
writes it; ``tf_autoplace/testing/goldens.py`` says which problems and settings).

The learned placers on the zoo graph and on the larger random DAGs, and Placeto, HDP and GDP
everywhere (each builds and traces its policy: seconds; their seeds are checked in
tests/placers/), take most of the time and run with ``-m slow``; the default suite checks Post
on the smaller random DAG and the fast placers everywhere.
"""

import functools
import json
import os

import pytest

from tf_autoplace.testing import goldens

from tests.conftest import REPO

GOLDENS = json.load(open(os.path.join(REPO, "testdata", "placement_goldens.json"),
                         encoding="utf-8"))
PROBLEMS = dict(goldens.problems())
LEARNED = {"placeto", "post", "hdp", "gdp"}
POLICIES = {"placeto", "hdp", "gdp"}  # placers whose search builds and traces a TF policy


@functools.lru_cache(maxsize=None)
def _problem(name):
    return PROBLEMS[name]()


def _cases():
    for key in sorted(GOLDENS):
        problem_name, placer_name = key.rsplit("/", 1)
        slow = placer_name in LEARNED and not problem_name.startswith("random_n80") or (
            placer_name in POLICIES)
        yield pytest.param(problem_name, placer_name, id=key,
                           marks=[pytest.mark.slow] if slow else [])


def test_the_goldens_cover_every_placer_and_problem():
    assert {k.rsplit("/", 1)[1] for k in GOLDENS} == set(goldens.placer_names())
    assert {k.rsplit("/", 1)[0] for k in GOLDENS} == set(PROBLEMS)


@pytest.mark.parametrize("problem_name,placer_name", _cases())
def test_placement_is_the_recorded_one(problem_name, placer_name):
    devices = goldens.make_placer(placer_name).propose(_problem(problem_name), seed=0)
    assert goldens.placement_digest(devices) == GOLDENS[f"{problem_name}/{placer_name}"]


@pytest.mark.parametrize("placer_name", [  # a policy's two searches take seconds
    pytest.param(p, marks=pytest.mark.slow) if p in POLICIES else p for p in sorted(LEARNED)])
def test_a_learned_placers_notes_are_the_same_for_the_same_seed(placer_name):
    # The notes go into the PlacementResult, which the same input and seed give byte for byte:
    # no wall time in them.
    problem_name = next(k.rsplit("/", 1)[0] for k in sorted(GOLDENS)
                        if k.startswith("random") and k.endswith(f"/{placer_name}"))
    notes = []
    for _ in range(2):
        placer = goldens.make_placer(placer_name)
        placer.propose(_problem(problem_name), seed=0)
        notes.append(list(placer.notes))
    assert notes[0] == notes[1] and notes[0]
