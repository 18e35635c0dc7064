"""Every placer behind one interface (:class:`~tf_autoplace.core.problem.Placer`), by name.

The names, classes and what each placer accepts are the registry's
(:mod:`tf_autoplace.core.registry`); :data:`PLACERS` is its name -> class view. The fast
heuristics live in :mod:`tf_autoplace.heuristics`; the default placer and the learned ones have
a folder each here (``auto/``, ``placeto/``, ``post/``, ``hdp/``, ``gdp/``) over the machinery
they share (:mod:`tf_autoplace.learning`). :class:`SavedPlacement` applies a placement saved by
an earlier run; it takes a file, so it has no name in the registry.

:func:`get_placer` builds a placer from its name with what the registry says it accepts:
``budget_s`` (placers that search within a time budget), ``ray_address`` (placers that farm
simulations out), ``policy`` (a saved policy's directory, for the learned placers that start
from one: :func:`policy_placers`) and ``options``, the command line's settings of a placer's
config dataclass (``--placer_option=start=uniform``), typed by :func:`parse_options`.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from tf_autoplace.core import registry
from tf_autoplace.core.problem import (
    Placement,
    PlacementProblem,
    Placer,
    check_memory,
    check_placement,
    validate,
)
from tf_autoplace.core.settings import check_seconds
from tf_autoplace.errors import ConfigError
from tf_autoplace.heuristics import (
    BestHeuristicPlacer,
    CpuOnlyPlacer,
    ExpertPlacer,
    MemoryAwareETFPlacer,
    MemoryAwareSCTPlacer,
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

PLACERS = registry.PLACERS


def get_placer(name_or_placer, *, budget_s: float | None = None,
               ray_address: str | None = None, policy=None,
               options: Sequence[str] = ()) -> Placer:
    """A Placer instance from a registered name (or the instance itself).

    Args:
      name_or_placer: a registered name (:data:`PLACERS`) or a Placer, returned as it is.
      budget_s: the search-time budget, passed to placers that accept one; placers that
        return at once ignore it.
      ray_address: the Ray cluster a placer that farms its simulations out runs them on.
      policy: a saved policy's directory for a learned placer to start from
        (:func:`policy_placers`).
      options: ``name=value`` settings of the placer's config (:func:`parse_options`).

    Returns:
      The placer.

    Raises:
      ConfigError: an unknown name; ``ray_address`` or ``policy`` for a placer that takes
        none (so a Ray cluster or a policy is never silently left unused); any of them with a
        Placer instance (give the instance its settings when you make it); a bad option.
    """
    check_ray_address(ray_address)
    check_seconds("budget_s", budget_s, zero_ok=True, none_ok=True)
    if isinstance(name_or_placer, type) and issubclass(name_or_placer, Placer):
        raise ConfigError(f"placer must be a name or a Placer instance, got the class "
                          f"{name_or_placer.__name__} (make one: {name_or_placer.__name__}())")
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
    entry = registry.entry(name_or_placer)
    kwargs = {}
    if budget_s is not None and "budget_s" in entry.accepts:
        kwargs["budget_s"] = budget_s
    if ray_address is not None:
        if "ray_address" not in entry.accepts:
            raise ConfigError(f"placer {entry.name!r} runs no simulations on workers, so "
                              f"ray_address={ray_address!r} has nothing to do; placers that "
                              f"take it: {sorted(registry.able('ray_address'))}")
        kwargs["ray_address"] = ray_address
    if policy is not None:
        if "policy" not in entry.accepts:
            why = getattr(entry.load(), "no_policy_reason", None)
            raise ConfigError(f"the {entry.name} placer starts from no policy"
                              f"{f' ({why})' if why else ''}; a saved policy is for the "
                              f"learned placers {policy_placers()}")
        kwargs["policy"] = policy
    kwargs.update(parse_options(entry.name, options))
    return entry.load()(**kwargs)


# Settings the doors give through their own arguments (--budget_s, --ray_address, --policy).
_OWN_ARGUMENTS = {"budget_s": "budget_s", "ray_address": "ray_address", "policy_dir": "policy"}


def parse_options(name: str, items: Sequence[str]) -> dict:
    """``["start=uniform", "max_samples=512"]`` -> keyword settings of placer ``name``'s config
    dataclass, each typed like the field (bool: true/false; int; float; text; names separated
    by commas); the config then
    checks the values. ConfigError for a malformed item, a placer without settings, an unknown
    field, a value of the wrong type, or a field that takes a structure (set those from Python)
    or has its own argument."""
    if not items:
        return {}
    if "options" not in registry.entry(name).accepts:
        raise ConfigError(f"the {name} placer has no settings to set; placers with settings: "
                          f"{registry.able('options')}")
    config_class = registry.entry(name).load().config_class
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
    evaluation); a tuple of names is written with commas (``heuristic_starts=m_sct,metis``;
    empty: none)."""
    kinds = str(field.type).replace(" ", "").split("|")
    if kinds == ["tuple[str,...]"]:
        return tuple(name for name in text.split(",") if name)
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


def _entry(placer_or_class) -> registry.PlacerEntry | None:
    """The registry's entry of a placer (instance or class), None for one it does not list (a
    saved placement, a user's own Placer)."""
    cls = placer_or_class if isinstance(placer_or_class, type) else type(placer_or_class)
    name = getattr(cls, "name", None)
    if name not in registry.names():
        return None
    entry = registry.entry(name)
    return entry if issubclass(cls, entry.load()) else None


def _accepts(placer_or_class, what: str) -> bool:
    entry = _entry(placer_or_class)
    return entry is not None and what in entry.accepts


def takes_budget(placer_or_class) -> bool:
    """Whether a placer searches within a time budget (the registry says it takes
    ``budget_s``)."""
    return _accepts(placer_or_class, "budget_s")


def policy_placers() -> list[str]:
    """The names of the placers that start from a saved policy and keep the one they
    fine-tuned."""
    return sorted(registry.able("policy"))


__all__ = ["DEFAULT_PLACER", "PLACERS", "AutoConfig", "AutoPlacer", "BestHeuristicPlacer",
           "CpuOnlyPlacer", "ExpertPlacer", "GdpConfig", "GdpPlacer", "HDPConfig", "HDPPlacer",
           "MemoryAwareETFPlacer", "MemoryAwareSCTPlacer", "MemoryAwareTopoPlacer", "MetisPlacer", "Placement",
           "PlacementProblem", "Placer", "PlacetoConfig", "PlacetoPlacer", "PostConfig",
           "PostPlacer", "RandomPlacer", "ReplicaDeviceSetterPlacer", "SavedPlacement", "SingleDevicePlacer", "check_memory",
           "check_placement", "get_placer", "parse_options", "policy_placers", "takes_budget",
           "validate"]
