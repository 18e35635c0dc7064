"""The measurement protocol's arithmetic (intervals, distinguishability) and the verify
decision rule on injected measurements: a placement measured slower than the single-device one
is never applied, and ties go to the simpler placement."""

import math
import os

import numpy as np
import pytest

from tf_autoplace.errors import ConfigError
from tf_autoplace.hw import protocol
from tf_autoplace.hw.protocol import (MIN_STEPS, ProtocolResult, StepTimes, check_steps,
                                      median_interval)
from tf_autoplace.hw.verify import ANNOTATED, SINGLE, Candidate, confirm, decide, kept


def test_the_interval_holds_the_median_and_narrows_with_more_steps():
    rng = np.random.default_rng(0)
    few = rng.normal(10.0, 1.0, 15)
    many = rng.normal(10.0, 1.0, 400)
    median, low, high = median_interval(few)
    assert low <= median <= high and median == np.median(few)
    _, low_many, high_many = median_interval(many)
    assert high_many - low_many < high - low
    assert median_interval(few, seed=3) == median_interval(few, seed=3)


def test_an_interval_covers_the_true_median_about_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(200):
        _, low, high = median_interval(rng.exponential(1.0, 25), resamples=500)
        hits += low <= math.log(2) <= high
    assert 0.88 <= hits / 200 <= 0.99


def test_constant_steps_have_a_point_interval():
    assert median_interval([0.5] * 15) == (0.5, 0.5, 0.5)


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [[1.0, 2.0]]])
def test_bad_samples_are_config_errors(bad):
    with pytest.raises(ConfigError):
        median_interval(bad)


def _times(name, median, low, high):
    return StepTimes(name=name, times_s=np.array([median]), median_s=median, low_s=low,
                     high_s=high)


def test_distinguishable_only_where_intervals_do_not_overlap():
    a = _times("a", 10.0, 9.0, 11.0)
    assert a.distinguishable(_times("b", 12.5, 11.5, 13.0))
    assert not a.distinguishable(_times("c", 12.5, 10.9, 13.0))  # overlaps by 0.1
    assert not a.distinguishable(_times("d", 10.0, 10.0, 10.0))
    assert a.faster_than(_times("b", 12.5, 11.5, 13.0))
    assert not _times("b", 12.5, 11.5, 13.0).faster_than(a)


def test_fewer_steps_than_the_protocol_are_refused():
    assert check_steps(MIN_STEPS) == MIN_STEPS
    for bad in (MIN_STEPS - 1, 0, True, 15.0):
        with pytest.raises(ConfigError, match="at least 15"):
            check_steps(bad)


def _result(**figures):
    return ProtocolResult(placements=tuple(_times(n, *f) for n, f in figures.items()),
                          steps=15, warmup_steps=3, load_before=0.5, load_after=0.6)


def _candidate(name, devices, crossing):
    return Candidate(name=name, assignment={}, devices_used=devices, crossing=crossing,
                     predicted_s=1.0)


SPLIT = _candidate("auto", 2, 40)
HEURISTIC = _candidate("best heuristic (m_etf)", 2, 10)
ONE = _candidate(SINGLE, 1, 0)


def test_sub_millisecond_intervals_are_printed_apart_where_they_do_not_overlap():
    # At two decimals "faster beyond noise" stood beside "[0.33, 0.33]" and "[0.33, 0.36]".
    measured = _result(**{"auto": (3.305e-4, 3.302e-4, 3.308e-4),
                          SINGLE: (3.5e-4, 3.309e-4, 3.6e-4)})
    decision = decide([SPLIT, ONE], measured)
    assert decision.applied == "auto"
    assert "auto measured 0.331 ms [0.330, 0.331], faster than the single-device 0.350 ms " \
        "[0.331, 0.360] beyond noise" in decision.reason
    assert measured[SINGLE].describe() == "0.350 ms [0.331, 0.360]"
    assert _result(**{SINGLE: (12.3e-3, 12.1e-3, 12.52e-3)})[SINGLE].describe() == \
        "12.30 ms [12.10, 12.52]"


def test_a_placement_faster_beyond_noise_is_applied():
    measured = _result(**{"auto": (8.0, 7.8, 8.2), SINGLE: (10.0, 9.8, 10.2),
                          "best heuristic (m_etf)": (9.0, 8.8, 9.2)})
    decision = decide([SPLIT, HEURISTIC, ONE], measured)
    assert decision.applied == "auto" and decision.leader == "auto"
    assert "faster than the single-device" in decision.reason


def test_a_placement_measured_slower_than_single_device_is_never_applied():
    measured = _result(**{"auto": (12.0, 11.8, 12.2), SINGLE: (10.0, 9.8, 10.2),
                          "best heuristic (m_etf)": (11.0, 10.8, 11.2)})
    assert decide([SPLIT, HEURISTIC, ONE], measured).applied == SINGLE


def test_a_tie_with_the_single_device_goes_to_the_single_device():
    measured = _result(**{"auto": (9.5, 9.0, 10.1), SINGLE: (10.0, 9.9, 10.3),
                          "best heuristic (m_etf)": (11.0, 10.8, 11.2)})
    decision = decide([SPLIT, HEURISTIC, ONE], measured)
    assert decision.applied == SINGLE and decision.leader == "auto"
    assert "not faster beyond noise" in decision.reason


def test_a_tie_between_splits_goes_to_the_one_with_fewer_transfers():
    measured = _result(**{"auto": (8.0, 7.5, 8.5), SINGLE: (10.0, 9.8, 10.2),
                          "best heuristic (m_etf)": (8.3, 8.1, 8.6)})
    decision = decide([SPLIT, HEURISTIC, ONE], measured)
    assert decision.applied == "best heuristic (m_etf)" and decision.leader == "auto"


def test_a_candidate_that_ties_the_leader_but_not_faster_than_one_device_is_not_applied():
    # The heuristic's wide interval overlaps the leader's, but its median is slower than the
    # single device's: it must not be applied for being "as good as the leader".
    measured = _result(**{"auto": (10.0, 9.8, 10.2), SINGLE: (11.5, 11.3, 11.7),
                          "best heuristic (m_etf)": (13.0, 10.1, 16.0)})
    decision = decide([SPLIT, HEURISTIC, ONE], measured)
    assert decision.applied == "auto" and decision.leader == "auto"
    # ... and a split tied with the leader but not beyond noise against one device neither.
    measured = _result(**{"auto": (10.0, 9.8, 10.2), SINGLE: (11.0, 10.5, 11.5),
                          "best heuristic (m_etf)": (10.4, 10.1, 10.7)})
    decision = decide([SPLIT, HEURISTIC, ONE], measured)
    assert decision.applied == "auto"
    # The leader itself not beyond noise against one device, a slower split that is: the split.
    measured = _result(**{"auto": (10.0, 9.0, 10.9), SINGLE: (11.0, 10.8, 11.2),
                          "best heuristic (m_etf)": (10.5, 10.2, 10.7)})
    decision = decide([SPLIT, HEURISTIC, ONE], measured)
    assert decision.applied == "best heuristic (m_etf)" and decision.leader == "auto"
    assert "was not faster than the single device beyond noise" in decision.reason


def test_a_split_is_applied_only_if_new_sessions_confirm_it():
    first = _result(**{"auto": (8.0, 7.8, 8.2), SINGLE: (10.0, 9.8, 10.2),
                       "best heuristic (m_etf)": (9.0, 8.8, 9.2)})
    chosen = decide([SPLIT, HEURISTIC, ONE], first)
    assert chosen.applied == "auto"
    # Faster again, each placement's two sessions agreeing: applied, with both figures.
    kept = confirm(chosen, first, _result(**{"auto": (8.1, 7.9, 8.3), SINGLE: (9.9, 9.7, 10.1)}))
    assert kept.applied == "auto" and kept.leader == "auto"
    assert "confirmed: measured again in new sessions: auto 8100.00 ms" in kept.reason
    # Not faster beyond noise the second time: the single device.
    tie = confirm(chosen, first, _result(**{"auto": (8.2, 8.0, 9.9), SINGLE: (9.9, 9.8, 10.1)}))
    assert tie.applied == SINGLE
    assert "not faster than the single device beyond noise in both" in tie.reason
    # The single device's two sessions disagree (one was a slow session): the gain is within
    # what sessions of one placement differ by, whatever the second comparison says.
    slow = confirm(chosen, first, _result(**{"auto": (7.0, 6.9, 7.1), SINGLE: (8.5, 8.4, 8.6)}))
    assert slow.applied == SINGLE
    assert (f"{SINGLE} measured 10000.00 ms [9800.00, 10200.00] and 8500.00 ms [8400.00, "
            "8600.00]") in slow.reason
    # ... and so do the split's own two sessions.
    lucky = confirm(chosen, first, _result(**{"auto": (9.0, 8.9, 9.1), SINGLE: (10.0, 9.9, 10.1)}))
    assert lucky.applied == SINGLE and "auto measured 8000.00 ms" in lucky.reason
    # Every interval of the split below every one of the single device's, not only pairwise.
    # (Here each pair agrees and the split beats the single device in each set of sessions.)
    cross = confirm(chosen, first, _result(**{"auto": (7.5, 7.4, 7.9), SINGLE: (9.0, 8.1, 9.9)}))
    assert cross.applied == SINGLE
    with pytest.raises(ConfigError, match="only a candidate other than the single device"):
        confirm(decide([ONE], _result(**{SINGLE: (1.0, 1.0, 1.0)})), first, first)


def test_the_decision_needs_the_single_device_candidate_measured():
    with pytest.raises(ConfigError, match="single-device"):
        decide([SPLIT], _result(auto=(1.0, 1.0, 1.0)))
    with pytest.raises(ConfigError, match="was not measured"):
        decide([SPLIT, ONE], _result(**{SINGLE: (1.0, 1.0, 1.0)}))


def test_other_cores_is_the_machines_busy_time_less_this_processs_over_the_wall_time(
        monkeypatch):
    clock = {"busy": 100.0, "own": 10.0, "wall": 0.0}
    monkeypatch.setattr(protocol, "machine_busy_s", lambda: clock["busy"])
    monkeypatch.setattr(protocol.time, "process_time", lambda: clock["own"])
    monkeypatch.setattr(protocol.time, "perf_counter", lambda: clock["wall"])
    others = protocol.OtherCores()
    clock.update(busy=103.0, own=11.0, wall=2.0)
    # 3 busy core-seconds, 1 of them ours, over 2 s: the rest of the machine used 1 core.
    assert others.stop() == pytest.approx(1.0)
    # /proc/stat counts in ticks: this process's own time may come out above the machine's.
    others = protocol.OtherCores()
    clock.update(busy=103.0, own=11.5, wall=3.0)
    assert others.stop() == 0.0
    others = protocol.OtherCores()
    assert math.isnan(others.stop())  # no wall time passed: nothing to say


def test_the_machines_busy_time_is_read_and_grows():
    first = protocol.machine_busy_s()
    sum(i * i for i in range(2_000_000))  # work on this core; /proc/stat counts in ticks
    second = protocol.machine_busy_s()
    if math.isnan(first):
        pytest.skip("this platform has no /proc/stat")
    assert second > first > 0


def test_busy_time_counts_user_nice_system_irq_softirq_and_not_idle(tmp_path):
    stat = tmp_path / "stat"
    ticks = os.sysconf("SC_CLK_TCK")
    #                  user nice system idle iowait irq softirq steal
    stat.write_text(f"cpu  {ticks} {2 * ticks} {3 * ticks} 999999 888 {4 * ticks} "
                    f"{5 * ticks} 777 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    assert protocol.machine_busy_s(str(stat)) == pytest.approx(15.0)
    stat.write_text("intr 1 2 3\n")
    assert math.isnan(protocol.machine_busy_s(str(stat)))
    assert math.isnan(protocol.machine_busy_s(str(tmp_path / "missing")))


def test_the_load_text_names_the_other_processes_cores():
    result = protocol.ProtocolResult(placements=(), steps=15, warmup_steps=80,
                                     load_before=0.5, load_after=1.8, other_cores=0.07)
    text = result.load_text()
    assert "other processes 0.07 cores" in text and "busy" in text
    # The warning is about the load, and follows it (after the cores it read as their own).
    assert text.startswith("load 0.50 -> 1.80 (above 1.5: the machine was busy")
    assert text.endswith(", other processes 0.07 cores")


def test_wait_for_quiet_waits_until_the_load_is_at_most_the_level(monkeypatch):
    loads, slept, told = iter([2.1, 1.7, 1.2, 0.9]), [], []
    monkeypatch.setattr(protocol, "load_average", lambda: next(loads))
    monkeypatch.setattr(protocol.time, "sleep", slept.append)
    protocol.wait_for_quiet(1.0, told.append, poll_s=5.0)
    assert slept == [5.0, 5.0, 5.0]
    assert len(told) == 2 and "2.10 > 1" in told[0] and "0.90" in told[1]
    protocol.wait_for_quiet(None, told.append)  # None: no reading, no wait
    assert slept == [5.0, 5.0, 5.0] and len(told) == 2
    # Already quiet: no pause, so nothing to run in again (the runner's RUN_IN_S).
    monkeypatch.setattr(protocol, "load_average", lambda: 0.3)
    assert protocol.wait_for_quiet(1.0, told.append) == 0.0 and len(told) == 2


def test_the_load_is_read_after_the_warm_up_and_after_the_timed_rounds(monkeypatch):
    """The recorded loads bracket the timed rounds: a warm-up that lifts the load does not
    count as the machine's, and the protocol waits for ``max_load`` before timing."""
    state = {"load": 0.2, "phase": "warm-up"}

    def fake_run_interleaved(workload, assignments, config, *, seed, trace, before_timing):
        state["load"] = 1.9  # the warm-up's own threads lift the load
        before_timing()
        assert state["phase"] == "settled"
        state["load"] = 1.3  # the timed rounds
        return [protocol.Measurement(step_times_s=np.full(config.steps, 0.01), traces=(),
                                     devices=())
                for _ in assignments]

    def fake_sleep(seconds):
        state["load"], state["phase"] = 0.8, "settled"

    monkeypatch.setattr(protocol, "run_interleaved", fake_run_interleaved)
    monkeypatch.setattr(protocol, "load_average", lambda: state["load"])
    monkeypatch.setattr(protocol.time, "sleep", fake_sleep)
    result = protocol.measure_placements(None, {"a": {}, "b": {}}, steps=MIN_STEPS,
                                         max_load=1.0)
    assert (result.load_before, result.load_after) == (0.8, 1.3)
    assert result.quiet


OWN = _candidate(ANNOTATED, 2, 4)


def test_the_users_own_placement_is_kept_unless_a_split_is_confirmed_faster_than_it():
    """What the user had (the graph's own annotations) measured faster than one device: it is
    what a failed confirmation falls back to, not the single device, and a split replaces it
    only when measured faster than it in new sessions too."""
    first = _result(**{ANNOTATED: (5.0, 4.9, 5.1), SINGLE: (6.0, 5.9, 6.1),
                       "auto": (5.5, 5.4, 5.6)})
    assert kept([SPLIT, OWN, ONE], first) == ANNOTATED
    chosen = decide([SPLIT, OWN, ONE], first)
    assert chosen.applied == ANNOTATED  # the fastest: no new sessions needed to keep it
    # A split measured faster than the user's own placement: confirmed against it.
    first = _result(**{ANNOTATED: (5.0, 4.9, 5.1), SINGLE: (6.0, 5.9, 6.1),
                       "auto": (4.0, 3.9, 4.1)})
    chosen = decide([SPLIT, OWN, ONE], first)
    assert chosen.applied == "auto" and kept([SPLIT, OWN, ONE], first) == ANNOTATED
    again = _result(**{ANNOTATED: (5.0, 4.9, 5.1), "auto": (4.0, 3.9, 4.1)})
    assert confirm(chosen, first, again, baseline=ANNOTATED).applied == "auto"
    # Not confirmed (the user's placement's two sessions differ): the user's, not one device.
    drifted = _result(**{ANNOTATED: (4.5, 4.4, 4.6), "auto": (4.0, 3.9, 4.1)})
    fell = confirm(chosen, first, drifted, baseline=ANNOTATED)
    assert fell.applied == ANNOTATED and "the graph's own placement" in fell.reason
    # (kept because one device was not faster than it: a tie too, not "measured faster")
    assert "the single device was not measured faster than it beyond noise) is kept" in \
        fell.reason and "measured faster than one device" not in fell.reason
    tie = confirm(chosen, first, _result(**{ANNOTATED: (5.0, 4.9, 5.1), "auto": (4.1, 3.9, 5.0)}),
                  baseline=ANNOTATED)
    assert tie.applied == ANNOTATED and f"not faster than {ANNOTATED!r}" in tie.reason
    # The single device measured faster than the user's placement beyond noise: it is kept.
    slow_own = _result(**{ANNOTATED: (7.0, 6.8, 7.2), SINGLE: (6.0, 5.9, 6.1),
                          "auto": (4.0, 3.9, 4.1)})
    assert kept([SPLIT, OWN, ONE], slow_own) == SINGLE
    replaced = decide([OWN, ONE], slow_own)
    assert replaced.applied == SINGLE and replaced.reason.endswith(  # said, not left to guess
        f"the graph's own placement ({ANNOTATED!r}) measured 7000.00 ms [6800.00, 7200.00], "
        "slower than the single device beyond noise, so it is replaced")
    with pytest.raises(ConfigError, match=f"only a candidate other than the {ANNOTATED}"):
        confirm(decide([OWN, ONE], _result(**{ANNOTATED: (5.0, 4.9, 5.1), SINGLE: (6.0, 5.9,
                                                                              6.1)})),
                first, again, baseline=ANNOTATED)


def test_verify_falls_back_to_what_the_user_had(monkeypatch):
    """verify() itself, its measurements scripted: the helper that found it fed the user's
    placement measured faster than one device in both sets of sessions, the single device's
    two sessions apart, and got the single device applied."""
    from tf_autoplace.hw import verify as verify_module

    script = []
    monkeypatch.setattr(verify_module, "measure_placements",
                        lambda workload, assignments, **kw: script.pop(0))
    own_fastest = _result(**{ANNOTATED: (5.0, 4.9, 5.1), SINGLE: (6.0, 5.9, 6.1),
                             "auto": (5.5, 5.4, 5.6)})
    script[:] = [own_fastest]
    v = verify_module.verify(None, [SPLIT, OWN, ONE], steps=15)
    assert v.decision.applied == ANNOTATED and v.confirmation is None
    assert "kept without new sessions" in v.decision.reason
    split_fastest = _result(**{ANNOTATED: (5.0, 4.9, 5.1), SINGLE: (6.0, 5.9, 6.1),
                               "auto": (4.0, 3.9, 4.1)})
    script[:] = [split_fastest, _result(**{ANNOTATED: (4.5, 4.4, 4.6), "auto": (4.0, 3.9, 4.1)})]
    v = verify_module.verify(None, [SPLIT, OWN, ONE], steps=15)
    assert v.decision.applied == ANNOTATED and v.confirmation is not None
    assert not script  # measured twice, the second time the split against the user's own
    # Without a placement of the user's, a split is confirmed against one device, as before.
    script[:] = [_result(**{SINGLE: (6.0, 5.9, 6.1), "auto": (4.0, 3.9, 4.1)}),
                 _result(**{SINGLE: (6.0, 5.9, 6.1), "auto": (4.0, 3.9, 4.1)})]
    v = verify_module.verify(None, [SPLIT, ONE], steps=15)
    assert v.decision.applied == "auto" and "confirmed" in v.decision.reason


def test_a_tie_between_what_the_user_had_and_one_device_keeps_what_the_user_had():
    """The user's hand placement measured 3.90 ms [3.73, 4.16] and one device 3.98 ms [3.78,
    4.12]: one device won the tie as the simpler, and what the user had was replaced by a
    placement whose median was slower."""
    tie = _result(**{ANNOTATED: (3.90, 3.73, 4.16), SINGLE: (3.98, 3.78, 4.12),
                     "auto": (3.85, 3.70, 4.00)})
    chosen = decide([SPLIT, OWN, ONE], tie)
    assert chosen.applied == ANNOTATED and kept([SPLIT, OWN, ONE], tie) == ANNOTATED
    assert "what the graph had is kept" in chosen.reason and "auto (" in chosen.reason
    # Its median the slower, still a tie: nothing measured says one device is better.
    assert decide([OWN, ONE], _result(**{ANNOTATED: (4.0, 3.8, 4.2),
                                         SINGLE: (3.9, 3.7, 4.1)})).applied == ANNOTATED
    # A split faster than one device beyond noise but not than the user's own: confirmed
    # against the user's, not against one device.
    split = _result(**{ANNOTATED: (5.2, 4.9, 5.6), SINGLE: (5.6, 5.5, 5.7),
                       "auto": (4.5, 4.4, 4.6)})
    assert decide([SPLIT, OWN, ONE], split).applied == "auto"
    assert kept([SPLIT, OWN, ONE], split) == ANNOTATED
