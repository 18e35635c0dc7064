"""The report's certificate: how much slower than the best possible placement it may be."""

import json
import math

import pytest

from tf_autoplace.outputs.report import DeviceLoad, PlacementReport

GPU = DeviceLoad(name="/device:GPU:0", kind="GPU", num_ops=1, compute_s=0.1,
                 peak_memory_bytes=1, memory_bytes=10)


def _report(step, bound):
    return PlacementReport(placer="m_etf", step_time_s=step, lower_bound_s=0.0,
                           lp_lower_bound_s=bound, devices=(GPU,), baseline_step_time_s=1.0,
                           baseline_devices=(GPU,), num_ops=1, num_groups=1,
                           num_colocation_groups=1, ops_with_unknown_shapes=0, timings_s={})


@pytest.mark.parametrize("step,bound,gap", [
    (0.6, 0.4, 50.0),       # 0.6 s against a bound of 0.4 s: at most 50% slower
    (0.5, 0.5, 0.0),        # at the bound: optimal
    (0.101, 0.1, 1.0),
    (0.0, 0.0, 0.0),        # every op takes 0 s
    (0.2, math.nan, None),  # no bound
    (0.2, 0.0, None),       # a bound of 0 under a positive step proves nothing
])
def test_the_gap_is_the_step_over_the_bound(step, bound, gap):
    report = _report(step, bound)
    if gap is None:
        assert report.optimality_gap is None and report.certificate() is None
        assert "no bound, no certificate" in str(report)
    else:
        assert report.optimality_gap == pytest.approx(gap)
        assert f"at most {gap:.1f}% slower than the best possible placement under this cost " \
               "model" in str(report)
    assert json.loads(report.to_json())["optimality_gap"] == (
        None if gap is None else pytest.approx(gap))


def test_the_json_is_standard_json_with_null_for_figures_that_are_not_numbers():
    def refuse(constant):  # what a strict parser (JavaScript's, jq's) does with NaN/Infinity
        raise ValueError(f"not JSON: {constant}")

    report = _report(math.inf, math.nan)  # not measured, no bound, an infinite step
    out = json.loads(report.to_json(), parse_constant=refuse)
    assert out["measured_step_time_s"] is None and out["lp_lower_bound_s"] is None
    assert out["step_time_s"] is None and out["placer"] == "m_etf"
    assert out["measured_step_interval_s"] == [None, None]


@pytest.mark.parametrize("placed,single,tie", [
    ((0.050, 0.040, 0.060), (0.056, 0.044, 0.064), True),   # 1.12x, overlapping intervals
    ((0.050, 0.048, 0.052), (0.060, 0.058, 0.062), False),  # 1.20x, apart
])
def test_a_measured_speedup_within_the_noise_is_called_a_tie(placed, single, tie):
    # The headline printed "measured speedup 1.12x" where the intervals overlapped; only the
    # verification's reason said it was not a difference beyond noise.
    import dataclasses

    report = dataclasses.replace(
        _report(0.5, 0.4), measure_steps=15, measured_step_time_s=placed[0],
        measured_step_interval_s=placed[1:], measured_baseline_step_time_s=single[0],
        measured_baseline_interval_s=single[1:], measure_load=(0.5, 0.6))
    line = next(x for x in str(report).splitlines() if "measured speedup" in x)
    assert f"{single[0] / placed[0]:.2f}x" in line
    assert ("a tie, within noise" in line) == tie, line
