"""The same seed gives the same placement when the sample budget ends a search (README): when
the time cap ends it instead, the placer's note says so, for auto and every learned placer.

The searches read ``time.perf_counter()``; the tests replace it by a fake clock, so what ends a
search never depends on this machine's speed or load."""

import itertools
import time

import pytest

from tf_autoplace.placers import get_placer
from tf_autoplace.testing import problems

CAP = "time cap ended the"


@pytest.fixture(scope="module")
def problem():
    return problems.training_problem(12, 0, num_gpus=2)


def _fake_clock(monkeypatch, seconds_per_read: float):
    """Replaces the clock every placer reads: each read is ``seconds_per_read`` after the last
    (0: time stands still)."""
    reads = itertools.count()
    monkeypatch.setattr(time, "perf_counter", lambda: 1000.0 + seconds_per_read * next(reads))


@pytest.mark.parametrize("name", ["auto", "placeto", "hdp", "post", "gdp"])
def test_a_search_the_time_cap_ended_says_so(problem, name, monkeypatch):
    # An hour passes between any two reads of the clock: the 60 s cap has passed at the first
    # check, before any search could end by its sample budget.
    _fake_clock(monkeypatch, 3600.0)
    notes = " ".join(get_placer(name, budget_s=60).place(problem, seed=0).notes)
    assert CAP in notes and "depends on this machine's speed" in notes, notes


@pytest.mark.parametrize("name, options", [("auto", ()),
                                           ("post", ("max_samples=64",))])
def test_a_search_its_sample_budget_ended_says_nothing_of_the_clock(problem, name, options,
                                                                    monkeypatch):
    # Time stands still: a 1 s cap is never reached, however slow this machine is.
    _fake_clock(monkeypatch, 0.0)
    notes = " ".join(get_placer(name, budget_s=1, options=options).place(problem, seed=0)
                     .notes)
    assert CAP not in notes, notes


@pytest.mark.parametrize("seconds_per_read", [0.015, 0.02, 0.03])
def test_autos_note_gives_the_clock_as_what_stopped_it_when_the_cap_cut_any_search(
        problem, seconds_per_read, monkeypatch):
    # At these rates the cap cuts some of the race's searches while the one returned had
    # ended at the bound or its local optimum: the note said "stopped: bound" and that the
    # time cap ended the search.
    _fake_clock(monkeypatch, seconds_per_read)
    notes = " ".join(get_placer("auto", budget_s=1).place(problem, seed=0).notes)
    assert CAP not in notes or "stopped: deadline" in notes, notes


def test_placetos_zero_shot_alone_runs_no_search_the_cap_could_end(problem, monkeypatch):
    _fake_clock(monkeypatch, 3600.0)
    notes = " ".join(get_placer("placeto", budget_s=60, options=("fine_tune=False",))
                     .place(problem, seed=0).notes)
    assert "zero-shot" in notes and CAP not in notes, notes
