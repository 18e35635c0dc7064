"""Every placer behind one interface (:class:`~tf_autoplace.core.problem.Placer`), by name.

The fast heuristics live in :mod:`tf_autoplace.heuristics`; the learned placers here are thin
doors over their own folders (``placers/<name>/``) and the shared machinery of :mod:`tf_autoplace.learning` (config, budget, start, fallback to the best heuristic).
:class:`SavedPlacement` applies a placement saved by an earlier run; it takes a file, so it has
no name in :data:`PLACERS`.

What :func:`get_placer` passes to a placer's constructor when the constructor takes it:
``budget_s`` (the placers that search within a time budget) and ``policy`` (a directory of a
saved policy, which the learned placers that keep one start from instead of the shipped or a
fresh one: :func:`policy_placers`). ``options`` are the command line's settings of a placer
that has a config dataclass (``--placer_option=start=uniform``), typed by :func:`parse_options`.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Sequence

from tf_autoplace.core.problem import (
    Placement,
    PlacementProblem,
    Placer,
    check_memory,
    check_placement,
    validate,
)
from tf_autoplace.errors import ConfigError
from tf_autoplace.heuristics import (
    HEURISTICS,
    BestHeuristicPlacer,
    CpuOnlyPlacer,
    ExpertPlacer,
    MemoryAwareETFPlacer,
    MemoryAwareTopoPlacer,
    MetisPlacer,
    RandomPlacer,
    ReplicaDeviceSetterPlacer,
    SingleDevicePlacer,
)
from tf_autoplace.learning.workers import check_ray_address
from tf_autoplace.placers.auto.placer import AutoConfig, AutoPlacer
from tf_autoplace.placers.gdp.placer import GdpConfig, GdpPlacer
from tf_autoplace.placers.hdp.placer import HDPPlacer
from tf_autoplace.placers.hdp.search import HDPConfig
from tf_autoplace.placers.placeto.placer import PlacetoConfig, PlacetoPlacer
from tf_autoplace.placers.post.placer import PostPlacer
from tf_autoplace.placers.post.search import PostConfig
from tf_autoplace.placers.saved import SavedPlacement

DEFAULT_PLACER = "auto"

PLACERS = {
    "auto": AutoPlacer,
    "single": SingleDevicePlacer,
    "cpu_only": CpuOnlyPlacer,
    "random": RandomPlacer,
    "expert": ExpertPlacer,
    "metis": MetisPlacer,
    "m_topo": MemoryAwareTopoPlacer,
    "m_etf": MemoryAwareETFPlacer,
    "best_heuristic": BestHeuristicPlacer,
    "replica_device_setter": ReplicaDeviceSetterPlacer,
    "placeto": PlacetoPlacer,
    "post": PostPlacer,
    "hdp": HDPPlacer,
    "gdp": GdpPlacer,
}
assert set(HEURISTICS) <= set(PLACERS)


def get_placer(name_or_placer, *, budget_s: float | None = None,
               ray_address: str | None = None, policy=None,
               options: Sequence[str] = ()) -> Placer:
    """A Placer instance from a registered name (or the instance itself).

    ``budget_s`` is the search-time budget of placers that search (``auto``, ``placeto``,
    ``post``, ``hdp``, ``gdp``); placers that return at once ignore it. ``ray_address`` sends the
    simulations of placers that farm them out (``auto``, ``placeto``, ``post``, ``hdp``: their
    constructor takes ``ray_address``) to that Ray cluster; asking it of a placer that
    simulates nothing in parallel is a ConfigError, so a Ray cluster is never silently left
    unused. ``policy`` is a saved policy's directory for a learned placer to start from
    (``placeto``, ``hdp``, ``gdp``: :func:`policy_placers`); ConfigError for a placer that
    takes none. ``options``: ``name=value`` settings of the placer's config
    (:func:`parse_options`)."""
    check_ray_address(ray_address)
    if isinstance(name_or_placer, Placer):
        if options:
            raise ConfigError("options go with a placer name; give the placer instance its "
                              "settings when you make it")
        if ray_address is not None:
            raise ConfigError("ray_address goes to the placer's constructor when the placer "
                              f"is given as an instance ({type(name_or_placer).__name__})")
        if policy is not None:
            raise ConfigError("policy= goes with a placer name; give the placer instance its "
                              "policy when you make it (e.g. PlacetoPlacer(policy=...))")
        return name_or_placer
    if not isinstance(name_or_placer, str) or name_or_placer not in PLACERS:
        raise ConfigError(
            f"unknown placer {name_or_placer!r}; choose one of {sorted(PLACERS)}")
    cls = PLACERS[name_or_placer]
    kwargs = {}
    if budget_s is not None and takes_budget(cls):
        kwargs["budget_s"] = budget_s
    if ray_address is not None:
        if not takes_ray_address(cls):
            able = sorted(n for n, c in PLACERS.items() if takes_ray_address(c))
            raise ConfigError(f"placer {name_or_placer!r} runs no simulations on workers, so "
                              f"ray_address={ray_address!r} has nothing to do; placers that "
                              f"take it: {able}")
        kwargs["ray_address"] = ray_address
    if policy is not None:
        if not takes_policy(cls):
            why = getattr(cls, "no_policy_reason", None)
            raise ConfigError(f"the {name_or_placer} placer starts from no policy"
                              f"{f' ({why})' if why else ''}; a saved policy is for the "
                              f"learned placers {policy_placers()}")
        kwargs["policy"] = policy
    kwargs.update(parse_options(name_or_placer, options))
    return cls(**kwargs)


# Settings the doors give through their own arguments (--budget_s, --ray_address, --policy).
_OWN_ARGUMENTS = {"budget_s": "budget_s", "ray_address": "ray_address", "policy_dir": "policy"}


def parse_options(name: str, items: Sequence[str]) -> dict:
    """``["start=uniform", "max_samples=512"]`` -> keyword settings of placer ``name``'s config
    dataclass, each typed like the field (bool: true/false; int; float; text); the config then
    checks the values. ConfigError for a malformed item, a placer without settings, an unknown
    field, a value of the wrong type, or a field that takes a structure (set those from Python)
    or has its own argument."""
    if not items:
        return {}
    cls = PLACERS[name]
    config_class = getattr(cls, "config_class", None)
    if config_class is None:
        raise ConfigError(f"the {name} placer has no settings to set; placers with settings: "
                          f"{sorted(n for n, c in PLACERS.items() if hasattr(c, 'config_class'))}")
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    out = {}
    for item in items:
        field, sep, text = str(item).partition("=")
        if not sep or not field:
            raise ConfigError(f"a placer option is name=value, got {item!r}")
        if field in _OWN_ARGUMENTS:
            raise ConfigError(f"{field} has its own argument ({_OWN_ARGUMENTS[field]}); not a "
                              "placer option")
        if field not in fields:
            raise ConfigError(f"the {name} placer has no setting {field!r}; its settings: "
                              f"{sorted(set(fields) - set(_OWN_ARGUMENTS))}")
        out[field] = _typed(name, fields[field], text)
    return out


def _typed(placer: str, field: dataclasses.Field, text: str):
    """``text`` as the type of ``field`` (its annotation, as a string under postponed
    evaluation)."""
    kinds = str(field.type).replace(" ", "").split("|")
    try:
        if "bool" in kinds:
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
        if "int" in kinds and text.lstrip("-").isdigit():
            return int(text)
        if "float" in kinds:
            return float(text)
        if "int" in kinds:
            raise ValueError
        if "str" in kinds:
            return text
    except ValueError:
        raise ConfigError(f"the {placer} placer's {field.name} is {field.type}; got "
                          f"{text!r}") from None
    raise ConfigError(f"the {placer} placer's {field.name} is {field.type}, which the command "
                      "line cannot give; set it from Python (the placer's config)")


def takes_budget(placer_or_class) -> bool:
    """Whether a placer searches within a time budget (its constructor takes ``budget_s``)."""
    return "budget_s" in _parameters(placer_or_class)


def takes_ray_address(placer_or_class) -> bool:
    """Whether a placer can simulate on a Ray cluster (its constructor takes ``ray_address``)."""
    return "ray_address" in _parameters(placer_or_class)


def takes_policy(placer_or_class) -> bool:
    """Whether a placer starts from a saved policy (``policy=``) and keeps the one it
    fine-tuned (:attr:`LearnedPlacer.keeps_policy`)."""
    cls = placer_or_class if isinstance(placer_or_class, type) else type(placer_or_class)
    return bool(getattr(cls, "keeps_policy", False))


def policy_placers() -> list[str]:
    """The names of the placers that start from a saved policy and keep the one they
    fine-tuned."""
    return sorted(n for n, c in PLACERS.items() if takes_policy(c))


def _parameters(placer_or_class):
    cls = placer_or_class if isinstance(placer_or_class, type) else type(placer_or_class)
    return inspect.signature(cls).parameters


__all__ = ["DEFAULT_PLACER", "PLACERS", "AutoConfig", "AutoPlacer", "BestHeuristicPlacer",
           "CpuOnlyPlacer", "ExpertPlacer", "GdpConfig", "GdpPlacer", "HDPConfig", "HDPPlacer",
           "MemoryAwareETFPlacer", "MemoryAwareTopoPlacer", "MetisPlacer", "Placement",
           "PlacementProblem", "Placer", "PlacetoConfig", "PlacetoPlacer", "PostConfig",
           "PostPlacer", "RandomPlacer", "ReplicaDeviceSetterPlacer", "SavedPlacement", "SingleDevicePlacer", "check_memory",
           "check_placement", "get_placer", "parse_options", "policy_placers", "takes_budget", "takes_policy",
           "takes_ray_address", "validate"]
