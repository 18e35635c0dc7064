"""The engine's shared step (place_problem): what it spends on the report's lower bound."""

from tf_autoplace.pipeline import engine
from tf_autoplace.pipeline.options import PlaceOptions
from tf_autoplace.placers import get_placer
from tf_autoplace.sim.lp_bound import DEFAULT_TIME_LIMIT_S
from tf_autoplace.testing.problems import random_problem


def test_the_lp_bound_gets_at_most_as_long_as_the_placement_or_the_floor(monkeypatch):
    # A 30k-op chain on 8 GPUs: m_etf placed it in 0.2 s, then the report's LP bound took
    # HiGHS's whole 30 s limit, which budget_s did not cap.
    problem = random_problem(40, seed=1)
    limits, real = [], engine.lp_lower_bound
    monkeypatch.setattr(engine, "lp_lower_bound",
                        lambda *a, **k: limits.append(k["time_limit_s"]) or real(*a, **k))
    for place_s in (0.0, 12.0, 1000.0):  # the placement's seconds by the engine's clock
        ticks = iter([0.0, place_s] + [place_s + 1.0] * 1000)
        monkeypatch.setattr(engine.time, "perf_counter", lambda: next(ticks))
        options = PlaceOptions(placer=get_placer("m_etf"), cluster=problem.cluster)
        engine.place_problem(problem, options)
    assert limits == [engine.BOUND_FLOOR_S, 12.0, DEFAULT_TIME_LIMIT_S]
