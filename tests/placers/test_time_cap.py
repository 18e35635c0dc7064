"""The same seed gives the same placement when the sample budget ends a search (README): when
the time cap ends it instead, the placer's note says so, for auto and every learned placer."""

import pytest

from tf_autoplace.placers import get_placer
from tf_autoplace.testing import problems

CAP = "time cap ended the"


@pytest.fixture(scope="module")
def problem():
    return problems.training_problem(12, 0, num_gpus=2)


@pytest.mark.parametrize("name", ["auto", "placeto", "hdp", "post", "gdp"])
def test_a_search_the_time_cap_ended_says_so(problem, name):
    # A cap of a microsecond has passed before any search begins, on any machine.
    notes = " ".join(get_placer(name, budget_s=1e-6).place(problem, seed=0).notes)
    assert CAP in notes and "depends on this machine's speed" in notes, notes


@pytest.mark.parametrize("name, options", [("auto", ()),
                                           ("post", ("max_samples=64",))])
def test_a_search_its_sample_budget_ended_says_nothing_of_the_clock(problem, name, options):
    notes = " ".join(get_placer(name, budget_s=3600, options=options).place(problem, seed=0)
                     .notes)
    assert CAP not in notes, notes
