"""The one registry of placers (tf_autoplace/core/registry.py): every entry loads, its class
is the placer of that name, and what an entry says the placer accepts is what its class takes;
the lists of placers that users read (README's table, help texts) are the registry's."""

import dataclasses
import inspect
import os
import re

import pytest

from tf_autoplace.core import registry
from tf_autoplace.core.problem import Placer
from tf_autoplace.errors import ConfigError
from tf_autoplace.placers import PLACERS, get_placer, policy_placers, takes_budget

from tests.conftest import REPO


@pytest.mark.parametrize("entry", registry.ENTRIES, ids=lambda e: e.name)
def test_every_entry_loads_the_placer_of_its_name(entry):
    cls = entry.load()
    assert issubclass(cls, Placer) and cls.name == entry.name
    assert PLACERS[entry.name] is cls


@pytest.mark.parametrize("entry", registry.ENTRIES, ids=lambda e: e.name)
def test_what_an_entry_accepts_is_what_its_class_takes(entry):
    cls = entry.load()
    params = inspect.signature(cls).parameters
    config = getattr(cls, "config_class", None)
    fields = {f.name for f in dataclasses.fields(config)} if config else set()
    assert ("budget_s" in entry.accepts) == ("budget_s" in params)
    assert ("ray_address" in entry.accepts) == ("ray_address" in params)
    assert ("options" in entry.accepts) == (config is not None)
    assert ("measured_reward" in entry.accepts) == ("reward" in fields)
    assert ("policy" in entry.accepts) == ("policy_dir" in fields)
    assert (entry.kind == "heuristic") == (entry.accepts == frozenset())


def test_get_placer_passes_only_what_the_registry_says():
    assert takes_budget(get_placer("auto")) and not takes_budget(get_placer("m_etf"))
    assert get_placer("auto", budget_s=7).config.budget_s == 7
    get_placer("m_etf", budget_s=7)  # a budget is ignored by placers that take none
    with pytest.raises(ConfigError, match="runs no simulations on workers"):
        get_placer("gdp", ray_address="local")
    with pytest.raises(ConfigError, match="starts from no policy"):
        get_placer("post", policy="/nonexistent")
    with pytest.raises(ConfigError, match="unknown placer 'nope'"):
        get_placer("nope")
    assert policy_placers() == ["gdp", "hdp", "placeto"]


def test_the_readme_placer_table_lists_the_registry_in_its_order():
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    table = text[text.index("## Placers"):]
    table = table[:table.index("\n\n", table.index("| name |"))]
    rows = re.findall(r"^\| `([a-z_]+)`", table, flags=re.M)
    assert rows == registry.names()


def test_the_command_lines_help_lists_every_placer():
    from tf_autoplace.cli import place_flags

    helps = {f.name: f.help
             for f in place_flags.flags.FLAGS.get_flags_for_module(place_flags.__name__)}
    assert all(name in helps["placer"] for name in registry.names())


def test_a_bad_entry_is_refused():
    with pytest.raises(ConfigError, match="kind"):
        registry.PlacerEntry("x", "m:X", "nonsense", "")
    with pytest.raises(ConfigError, match="accepts unknown"):
        registry.PlacerEntry("x", "m:X", "heuristic", "", frozenset({"wings"}))
