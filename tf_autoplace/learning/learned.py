"""What the learned placers share at their door: a frozen config with a time budget, a Ray
address, and for those that keep one, the policy they start from and the policy they
fine-tuned.

Each learned placer (``placeto``, ``post``, ``hdp``, ``gdp``) is configured by a frozen
dataclass with a ``budget_s`` field (and ``ray_address`` where it farms simulations out). The
constructor takes the whole config, or its fields as keywords over the defaults, and
``budget_s`` and ``ray_address`` on their own so that :func:`tf_autoplace.placers.get_placer`
(and the flags and the benchmark through it) can pass a time budget or a Ray cluster to any
placer that takes one.

**Keeping a policy** (the placers the registry says accept ``policy``: ``placeto``, ``hdp``,
``gdp``; :mod:`tf_autoplace.core.registry`). Such a placer's config
has a ``policy_dir`` field, a saved policy's directory to start from, which the constructor
also takes as ``policy=``; after a placement that fine-tuned a policy it sets
``trained_policy`` (:meth:`_keep_policy`: the weights, and a manifest of what they were tuned
on, from what, with which settings and how that went), which ``save_policy(dir)`` writes.
Post keeps none: its policy is one softmax table per placement unit of this graph's grouping,
which does not carry over to another graph (``no_policy_reason``).

**Never worse than the heuristics.** Every learned placer's config names the fast heuristics
its result must not be worse than (``heuristics``: ``best_heuristic``, which runs them all, by
default). :meth:`LearnedPlacer._heuristics` runs them and :meth:`LearnedPlacer._choose`
simulates the learned placement beside them and returns the fastest that fits memory, with the
sentence the placer's note ends with when a heuristic won.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import time

import numpy as np

from tf_autoplace.core import registry
from tf_autoplace.core.problem import PlacementProblem, Placer, rank_placements
from tf_autoplace.core.settings import make_config
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.fingerprint import fingerprint
from tf_autoplace.heuristics import HEURISTICS
from tf_autoplace.learning.checkpoints import command_line, read_policy_files
from tf_autoplace.learning.trained_policy import TrainedPolicy, weights_digest
from tf_autoplace.sim import lower_bound


@dataclasses.dataclass(frozen=True, eq=False)
class Choice:
    """The placement a learned placer returns, chosen by :meth:`LearnedPlacer._choose`:
    ``devices`` [n] from ``winner`` (``learner``, the placer's name, or a heuristic's) with
    step time ``step_s``; the learned placement's own step time ``learned_s`` and whether it
    overflows memory (``learned_oom``)."""

    learner: str
    devices: np.ndarray
    winner: str
    step_s: float
    learned_s: float
    learned_oom: bool

    @property
    def note(self) -> str:
        """What the placer's note ends with: which heuristic won instead, if one did."""
        if self.winner == self.learner:
            return ""
        return (f"; the {self.winner} heuristic is faster ({self.step_s * 1e3:.2f} ms) and is "
                "used instead")


def time_cap_note(name: str, budget_s: float, done: int, cap: int | None,
                  what: str = "placements") -> str:
    """What a placer's note adds when its ``budget_s`` time cap, not its cap of ``cap``
    ``what`` (None: none), ended its search after ``done``: the same seed then gives the
    same placement only on a machine as fast (README's promise, which the notes must keep)."""
    return (f"; the {budget_s:g} s time cap ended the {name} search after {done} {what}"
            + (f" of {cap}" if cap else "") + ", so the result depends on this machine's "
            "speed")


def ended_by_clock(deadline: float, done: int, cap: int | None) -> bool:
    """Whether a search that has just returned was ended by its deadline (a
    ``time.perf_counter()`` value) before its cap of ``cap`` (None: none) was reached."""
    return time.perf_counter() >= deadline and (cap is None or done < cap)


class LearnedPlacer(Placer):
    """A placer with a config (``config_class``, a frozen dataclass with ``budget_s``) and
    ``stats``, the figures of its last run.

    Args:
      config: the settings (a ``config_class``), or its fields as keywords.
      budget_s, ray_address: the config's fields of those names.
      policy: a saved policy's directory to start from (the config's ``policy_dir``); only for
        placers that keep a policy (the registry's ``policy``), a ConfigError for the others. Its files
        are checked here, before any work (:func:`tf_autoplace.learning.checkpoints.
        read_policy_files`): a damaged or hostile one is a ConfigError naming the file.
    """

    config_class: type
    no_policy_reason = "it has no policy that carries over from one graph to another"

    def __init__(self, config=None, *, budget_s: float | None = None,
                 ray_address: str | None = None, policy=None, **overrides):
        if budget_s is not None:
            overrides["budget_s"] = budget_s
        if ray_address is not None:
            overrides["ray_address"] = ray_address
        if policy is not None:
            if not registry.accepts(self.name, "policy"):
                raise ConfigError(f"the {self.name} placer starts from no saved policy: "
                                  f"{self.no_policy_reason}")
            if not (isinstance(policy, (str, os.PathLike)) and os.fspath(policy)):
                raise ConfigError(f"policy must be a saved policy's directory, got {policy!r}")
            overrides["policy_dir"] = os.fspath(policy)
            read_policy_files(overrides["policy_dir"], f"a {self.name} policy")
        self.config = make_config(self.config_class, config, overrides, self.name)
        self.stats: dict = {}

    @property
    def needs_workload(self) -> bool:
        """A config with ``reward="measured"`` runs placements here (learning.measured)."""
        return getattr(self.config, "reward", "simulated") == "measured"

    def settings(self) -> str:
        """The config, and the contents of the policy it starts from when that is a directory
        of the user's (the shipped ones change only with the package's version)."""
        out = f"{type(self).__module__}.{type(self).__qualname__}({self.config!r})"
        if getattr(self.config, "policy_dir", None):
            out += f" policy sha256 {weights_digest(self.config.policy_dir)}"
        return out

    def _heuristics(self, problem: PlacementProblem) -> list[tuple[str, np.ndarray]]:
        """``(name, devices)`` of each heuristic the config compares the result with."""
        return [(name, HEURISTICS[name]().propose(problem)) for name in self.config.heuristics]

    def _nothing_to_learn(self, problem: PlacementProblem, heuristics,
                          start: float) -> np.ndarray | None:
        """The fastest of ``heuristics`` when a search cannot beat it, and None otherwise: when
        the cluster has one action device (a policy choosing among one device has nothing to
        learn), or when that placement fits and simulates at the lower bound no placement can
        beat (:func:`tf_autoplace.sim.lower_bound`; a graph of a few ops on a fast device,
        where a search would spend a minute of policy updates to find it again). No search is
        run, and the notes and ``stats`` say so. With measured rewards only the first holds
        (the bound is the simulator's). ``start``: when ``place`` began
        (``time.perf_counter()``)."""
        one_device = len(problem.cluster.compute_devices()) < 2
        if not one_device and getattr(self.config, "reward", "simulated") != "simulated":
            return None
        ranked = rank_placements(problem, heuristics)
        if not ranked:  # (no heuristics to compare with: the search decides)
            return None
        over, step, winner, devices = ranked[0]
        if one_device:
            why, stopped = "one action device, nothing to learn", "one device"
        elif not over and step <= lower_bound(problem.graph, problem.cluster,
                                              problem.op_time) * (1 + 1e-9):
            why = (f"the {winner} placement simulates at the lower bound, {step * 1e3:.2f} ms, "
                   "which no placement can beat (no search)")
            stopped = "lower bound"
        else:
            return None
        self.notes.append(f"{self.name}: {why}; the heuristic placement is used"
                          f"{self._policy_unused()}")
        self.stats = dict(samples=0, updates=0, winner=winner, curve=[], curve_s=[],
                          stopped=stopped, seconds=time.perf_counter() - start)
        return devices

    def _policy_unused(self) -> str:
        """What a note on a placement made without the policy says of a policy the user
        gave (``policy=``): that it was not used; "" without one."""
        given = getattr(self.config, "policy_dir", None)
        return f" (the policy in {given} was not used)" if given else ""

    def _choose(self, problem: PlacementProblem, learned: np.ndarray, heuristics,
                step_time=None) -> Choice:
        """The fastest of the learned placement ``learned`` and ``heuristics`` (from
        :meth:`_heuristics`) that fits memory (:func:`rank_placements`; ties go to the learned
        one); ``step_time`` replaces the simulated step time (a measured one)."""
        ranked = rank_placements(problem, [(self.name, learned)] + list(heuristics), step_time)
        _, step_s, winner, devices = ranked[0]
        learned_oom, learned_s = next((oom, s) for oom, s, n, _ in ranked if n == self.name)
        return Choice(learner=self.name, devices=devices, winner=winner, step_s=step_s,
                      learned_s=learned_s, learned_oom=learned_oom)

    def _keep_policy(self, problem: PlacementProblem, policy_class: type, config: dict,
                     weights, *, source: str | None, seed: int, groups: int,
                     action_devices: int, curve, results: tuple[str, ...]) -> None:
        """Set ``trained_policy`` to the network ``policy_class(**config)`` with ``weights``,
        fine-tuned on ``problem`` from the policy in ``source`` (None: a fresh one) with the
        search seed ``seed``; the manifest records the graph (``groups``: the units the
        policy placed), the cluster (``action_devices``: those it chose among), this placer's
        settings, the machine, and the results: the ``results`` named in ``stats`` and the
        search's ``curve`` ((placements, best R in s) pairs, R in ms)."""
        manifest = dict(
            what=f"{policy_class.__module__}.{policy_class.__qualname__} fine-tuned on one "
                 f"graph by the {self.name} placer",
            placer=self.name,
            fine_tuned_from=source or "fresh",
            fine_tuned_from_sha256=None if source is None else weights_digest(source),
            command=command_line(),
            graph=dict(fingerprint=fingerprint(problem.graph), ops=problem.graph.num_ops,
                       groups=int(groups)),
            cluster=list(problem.cluster.names), action_devices=int(action_devices),
            placer_config=repr(self.config), policy_config=dict(config), seed=seed,
            machine=f"{platform.machine()}, {os.cpu_count()} cores, Python "
                    f"{platform.python_version()}",
            results=dict({k: self.stats[k] for k in results},
                         curve=[(int(n), float(r) * 1e3) for n, r in curve]))
        self.trained_policy = TrainedPolicy(policy_class=policy_class, config=dict(config),
                                            weights=tuple(weights), manifest=manifest)
