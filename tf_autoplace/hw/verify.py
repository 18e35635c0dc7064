"""Verified placement: measure the search's best candidates here and apply the measured fastest.

A placement search ranks placements by the simulator's predictions, and a prediction can be
wrong. When the cluster is this machine's devices, :func:`verify` runs the candidates the engine
hands it (at least the placer's choice, the best fast heuristic's and the single-device one)
under the measurement protocol (:mod:`tf_autoplace.hw.protocol`: interleaved rounds, medians
with bootstrap intervals, the load recorded), and :func:`decide` picks the one to apply:

1. the candidate with the smallest measured median leads (the report names it);
2. only the single-device placement and the candidates measured faster than it beyond noise
   (a smaller median, intervals that do not overlap) may be applied: a placement is applied
   instead of one device only when it is measured faster, and never one measured slower;
3. of those, every one the measurement cannot tell from the fastest of them is as good, and the
   *simplest* is applied: fewest devices used, then fewest tensors crossing devices, then the
   smaller median. The single-device placement uses one device and sends nothing, so it wins
   every tie it is in, but one: where the graph's own device annotations give a placement of
   their own (:data:`ANNOTATED`, what the user had) and the single device is not measured
   faster than it beyond noise, what the user had is applied instead (nothing measured says
   a change is better, and its median may be the faster);
4. a placement other than what the user keeps without it (:func:`kept`: the placement the
   graph's own device annotations give, :data:`ANNOTATED`, unless the single device measured
   faster than it beyond noise; else the single device) is applied only if it is **confirmed in new
   sessions** (:func:`confirm`): it and the kept placement are measured again, each in a
   Session of its own, and the candidate must again be faster beyond noise, every interval of
   it below every interval of the kept one, and each placement's two sessions must agree with
   each other (intervals that overlap). Otherwise the kept placement is applied. So a user's
   own placement is replaced only by one measured faster than it beyond noise (the single
   device once, any other placement in two sets of sessions); it is itself applied without
   new sessions, since keeping it changes nothing the user ran.

Why the second set of sessions: an interval covers the noise of steps within one Session, not
the difference between Sessions. Two Sessions of the *same* placement, interleaved in one
process, can run persistently apart (the executor's inline-kernel choices, where buffers land),
so an A/A test of short steps under other work often tells them apart, and a verification with
one set of sessions now and then applies a split that later sessions time slower. A gain seen in two
independent pairs of Sessions that each agree is not one Session's luck: in a model where the
Session effect is any multiple of the step noise, an A/A candidate passes both sets far less
often than it passes one (docs/experiments.md, "Simulator against this machine: what moved the
figures" has the measurements and the model's figures). The cost is paid only when a split is
about to be applied.

The decision reads only measured figures; the predictions ride along for the report.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from tf_autoplace.errors import ConfigError
from tf_autoplace.hw.protocol import ProtocolResult, measure_placements
from tf_autoplace.hw.runner import RunConfig
from tf_autoplace.hw.workload import Workload

SINGLE = "single device"
ANNOTATED = "as the graph was annotated"  # the candidate that is the user's own placement


@dataclasses.dataclass(frozen=True, eq=False)
class Candidate:
    """A placement that verification may apply.

    Attributes:
      name: what it is (``"auto"``, ``"best heuristic (m_etf)"``, :data:`SINGLE`).
      assignment: op name -> device string.
      devices_used: how many devices it puts ops on.
      crossing: tensors it sends between devices (op outputs with a consumer on another
        device).
      predicted_s: its simulated step time (s).
    """

    name: str
    assignment: Mapping[str, str]
    devices_used: int
    crossing: int
    predicted_s: float


@dataclasses.dataclass(frozen=True)
class Decision:
    """Which candidate to apply and why.

    Attributes:
      applied: the applied candidate's name.
      leader: the candidate with the smallest measured median.
      reason: one sentence for the report.
    """

    applied: str
    leader: str
    reason: str


@dataclasses.dataclass(frozen=True, eq=False)
class Verification:
    """What verification measured and decided.

    Attributes:
      candidates: the candidates, in the order measured.
      measured: their step times under the protocol.
      decision: the applied candidate and why.
      confirmation: the second measurement of the candidate the first one chose and of the
        kept placement (:func:`kept`), in new Sessions (:func:`confirm`); None when the first
        chose the kept placement or the single device.
    """

    candidates: tuple[Candidate, ...]
    measured: ProtocolResult
    decision: Decision
    confirmation: ProtocolResult | None = None

    def speed_scale(self) -> float | None:
        """The single-device placement's measured step over its predicted one: how much slower
        (above 1) or faster this machine ran than the prediction assumed, the same for every
        candidate (the calibration point of a profile is minutes old, and a shared machine's
        speed moves). None without a positive prediction."""
        single = next(c for c in self.candidates if c.name == SINGLE)
        if not single.predicted_s > 0:
            return None
        return self.measured[SINGLE].median_s / single.predicted_s

    def rows(self, *, confirmation: bool = False) -> list[dict]:
        """One dict per candidate: name, predicted step time, the prediction at this run's
        speed (times :meth:`speed_scale`; None without one), measured step time (median,
        interval), devices used, tensors crossing devices, and whether it was applied. With
        ``confirmation``, the same for the two placements measured again (none without)."""
        scale = self.speed_scale()
        measured = self.confirmation if confirmation else self.measured
        if measured is None:
            return []
        names = {m.name for m in measured.placements}
        out = []
        for c in self.candidates:
            if c.name not in names:
                continue
            m = measured[c.name]
            out.append(dict(name=c.name, predicted_s=c.predicted_s,
                            predicted_at_run_speed_s=(None if scale is None
                                                      else c.predicted_s * scale),
                            measured_s=m.median_s, measured_low_s=m.low_s,
                            measured_high_s=m.high_s, devices_used=c.devices_used,
                            crossing=c.crossing, applied=c.name == self.decision.applied))
        return out


def decide(candidates, measured: ProtocolResult) -> Decision:
    """The decision rule of the module docstring.

    Args:
      candidates: the :class:`Candidate` s, one of them named :data:`SINGLE`.
      measured: their measurements, by name.

    Returns:
      The :class:`Decision`.

    Raises:
      ConfigError: no single-device candidate, or a candidate that was not measured.
    """
    candidates = list(candidates)
    names = [c.name for c in candidates]
    if SINGLE not in names:
        raise ConfigError(f"verification needs the single-device placement among the "
                          f"candidates, got {names}")
    try:
        times = {c.name: measured[c.name] for c in candidates}
    except KeyError as e:
        raise ConfigError(f"candidate {e.args[0]!r} was not measured") from None
    leader = min(candidates, key=lambda c: (times[c.name].median_s, c.devices_used, c.crossing))
    single = times[SINGLE]
    # Only what is measured faster than one device beyond noise may replace it; ties are then
    # taken among those (and the single device) against the fastest of them.
    eligible = [c for c in candidates if c.name == SINGLE or (
        times[c.name].median_s < single.median_s and times[c.name].distinguishable(single))]
    best = min(eligible, key=lambda c: (times[c.name].median_s, c.devices_used, c.crossing))
    ties = [c for c in eligible
            if c is best or not times[c.name].distinguishable(times[best.name])]
    applied = min(ties, key=lambda c: (c.devices_used, c.crossing, times[c.name].median_s))
    own = next((c for c in candidates if c.name == ANNOTATED), None)
    if applied.name == SINGLE and own is not None and not single.faster_than(times[own.name]):
        return Decision(applied=ANNOTATED, leader=leader.name, reason=(
            f"the graph's own placement ({ANNOTATED!r}) measured {times[own.name].describe()} "
            f"and the single-device {single.describe()}: the single device is not faster "
            "beyond noise, so what the graph had is kept"
            + (f"; {leader.name} ({times[leader.name].describe()}) was not faster than the "
               "single device beyond noise" if leader.name not in (SINGLE, ANNOTATED) else "")))
    if applied.name == SINGLE:
        if leader.name == SINGLE:
            reason = "the single-device placement measured fastest"
        else:
            reason = (f"{leader.name} measured {times[leader.name].describe()} against the "
                      f"single-device {single.describe()}: not faster beyond noise, so the "
                      "simpler single-device placement is applied")
        if own is not None:  # (kept above unless the single device measured faster)
            reason += (f"; the graph's own placement ({ANNOTATED!r}) measured "
                       f"{times[own.name].describe()}, slower than the single device beyond "
                       "noise, so it is replaced")
    else:
        reason = (f"{applied.name} measured {times[applied.name].describe()}, faster than the "
                  f"single-device {single.describe()} beyond noise")
        if applied is not leader:
            reason += (f"; {leader.name} ({times[leader.name].describe()}) was not faster "
                       + ("beyond noise and uses more devices or transfers"
                          if leader in eligible else "than the single device beyond noise"))
    return Decision(applied=applied.name, leader=leader.name, reason=reason)


def kept(candidates, measured: ProtocolResult) -> str:
    """The candidate applied when no other is confirmed (rule 4 of the module docstring): the
    user's own placement (:data:`ANNOTATED`) where it is a candidate and the single device was
    not measured faster than it beyond noise, else :data:`SINGLE`.

    Raises:
      ConfigError: as :func:`decide`.
    """
    own = [c for c in candidates if c.name in (SINGLE, ANNOTATED)]
    return decide(own, measured).applied


def confirm(decision: Decision, first: ProtocolResult, second: ProtocolResult, *,
            baseline: str = SINGLE) -> Decision:
    """Rule 4 of the module docstring: ``decision`` (a candidate other than ``baseline``,
    chosen from ``first``) if ``second``, its and ``baseline``'s measurement in new Sessions,
    confirms it; else ``baseline``, with the reason.

    Args:
      decision: what :func:`decide` chose from ``first``.
      first, second: the two measurements, each with the candidate and ``baseline``.
      baseline: what is applied unless the candidate is confirmed (:func:`kept`).

    Raises:
      ConfigError: ``decision`` applies ``baseline``, or a measurement lacks the candidate or
        ``baseline``.
    """
    name = decision.applied
    if name == baseline:
        raise ConfigError(f"only a candidate other than the {baseline} placement is confirmed")
    try:
        c1, s1, c2, s2 = first[name], first[baseline], second[name], second[baseline]
    except KeyError as e:
        raise ConfigError(f"{e.args[0]!r} was not measured") from None
    other = "the single device" if baseline == SINGLE else f"{baseline!r}"
    fallback = ("the simpler single-device placement is applied" if baseline == SINGLE else
                f"the graph's own placement ({baseline!r}; the single device was not "
                "measured faster than it beyond noise) is kept")
    again = f"measured again in new sessions: {name} {c2.describe()}, {other} {s2.describe()}"
    if s1.distinguishable(s2) or c1.distinguishable(c2):
        same = baseline if s1.distinguishable(s2) else name
        return Decision(applied=baseline, leader=decision.leader, reason=(
            f"{decision.reason}; but {again}: {same} measured {first[same].describe()} and "
            f"{second[same].describe()} in two sessions, so sessions of one placement differ "
            f"here by more than the intervals say, and {fallback}"))
    if not (max(c1.high_s, c2.high_s) < min(s1.low_s, s2.low_s)):
        return Decision(applied=baseline, leader=decision.leader, reason=(
            f"{decision.reason}; but {again}: not faster than {other} beyond noise in both, "
            f"so {fallback}"))
    return Decision(applied=name, leader=decision.leader,
                    reason=f"{decision.reason}; confirmed: {again}")


def verify(workload: Workload, candidates, *, steps: int, seed: int = 0,
           config: RunConfig | None = None) -> Verification:
    """Measure ``candidates`` under the protocol and decide which to apply.

    Args:
      workload: what one step runs.
      candidates: :class:`Candidate` s with distinct names, :data:`SINGLE` among them.
      steps: timed steps per candidate (the protocol's minimum or more).
      seed: orders the rounds and seeds the intervals.
      config: the Sessions' settings (:class:`~tf_autoplace.hw.runner.RunConfig`).

    Returns:
      The :class:`Verification`; one traced step of the applied candidate is not taken (the
      caller measures what it applies if it wants a trace). A candidate other than the kept
      one (:func:`kept`) is measured twice (rule 4 of the module docstring).

    Raises:
      ConfigError: repeated names, no single-device candidate, too few steps.
      MeasurementError: TensorFlow cannot run a candidate.
    """
    candidates = tuple(candidates)
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise ConfigError(f"candidate names must differ, got {names}")
    assignments = {c.name: c.assignment for c in candidates}
    measured = measure_placements(workload, assignments, steps=steps, seed=seed, config=config)
    decision, confirmation = decide(candidates, measured), None
    baseline = kept(candidates, measured)
    if decision.applied not in (SINGLE, baseline):
        confirmation = measure_placements(
            workload, {n: assignments[n] for n in (decision.applied, baseline)}, steps=steps,
            seed=seed + 1, config=config)
        decision = confirm(decision, measured, confirmation, baseline=baseline)
    elif decision.applied == ANNOTATED:
        decision = dataclasses.replace(decision, reason=(
            f"{decision.reason}; it is the graph's own placement, kept without new sessions"))
    return Verification(candidates=candidates, measured=measured, decision=decision,
                        confirmation=confirmation)
