"""Placer settings given as text (the command line's --placer_option, --autoplace_placer_option)."""

import pytest

from tf_autoplace.errors import ConfigError
from tf_autoplace.placers import AutoPlacer, get_placer, parse_options


def test_options_are_typed_like_the_config_fields():
    assert parse_options("hdp", ["start=uniform", "max_samples=64", "entropy=0.02"]) == dict(
        start="uniform", max_samples=64, entropy=0.02)
    assert parse_options("gdp", ["max_steps=0"]) == dict(max_steps=0)
    hdp = get_placer("hdp", options=["start=uniform", "max_samples=64"])
    assert (hdp.config.start, hdp.config.max_samples) == ("uniform", 64)
    assert get_placer("gdp", options=["max_steps=0"]).config.zero_shot
    auto = get_placer("auto", budget_s=30, options=["starts=2"])
    assert isinstance(auto, AutoPlacer) and (auto.config.starts, auto.config.budget_s) == (2, 30)
    assert parse_options("m_etf", []) == {}
    auto = get_placer("auto", options=["heuristic_starts=m_sct,metis", "learned="])
    assert (auto.config.heuristic_starts, auto.config.learned) == (("m_sct", "metis"), ())


@pytest.mark.parametrize("name, options, message", [
    ("m_etf", ["starts=2"], "the m_etf placer has no settings to set"),
    ("hdp", ["start"], "a placer option is name=value, got 'start'"),
    ("hdp", ["=3"], "a placer option is name=value"),
    ("hdp", ["bogus=1"], "the hdp placer has no setting 'bogus'; its settings: .*'start'"),
    ("hdp", ["max_samples=many"], "the hdp placer's max_samples is int \\| None; got 'many'"),
    ("hdp", ["start=sideways"], "start must be one of"),  # the config checks the value
    ("auto", ["search=fast"], "search is LocalSearchConfig, which the command line cannot"),
    ("auto", ["budget_s=3"], "budget_s has its own argument"),
    ("auto", ["heuristic_starts=m_sct,sct"], "heuristic_starts must name heuristics among"),
    ("gdp", ["policy_dir=x"], "policy_dir has its own argument \\(policy\\)"),
])
def test_bad_options_are_config_errors_naming_the_problem(name, options, message):
    with pytest.raises(ConfigError, match=message):
        get_placer(name, options=options)


def test_options_go_with_a_placer_name_not_an_instance():
    with pytest.raises(ConfigError, match="options go with a placer name"):
        get_placer(AutoPlacer(), options=["starts=2"])
