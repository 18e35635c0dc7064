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


def test_placer_configs_take_numpy_numbers_and_refuse_bools_as_counts():
    # AutoConfig(max_samples=True) ran a search of 6 placements without a word, while numpy
    # integers (a count computed with numpy) were refused everywhere but the seed.
    import numpy as np

    from tf_autoplace.errors import ConfigError
    from tf_autoplace.placers import (AutoConfig, GdpPlacer, HDPPlacer, PlacetoPlacer,
                                      PostConfig)
    from tf_autoplace.placers.placeto.env import EnvConfig
    from tf_autoplace.placers.auto.local_search import LocalSearchConfig

    config = AutoConfig(max_samples=np.int64(100), starts=np.int64(2), budget_s=np.float32(5),
                        search=LocalSearchConfig(batch=np.int32(4), levels=(np.int64(1), 2)))
    assert (config.max_samples, config.starts, config.budget_s) == (100, 2, 5.0)
    assert type(config.max_samples) is int and type(config.budget_s) is float
    assert config.search.levels == (1, 2) and type(config.search.batch) is int
    assert PostConfig(batch=np.int64(8), ce_period=np.int64(16)).batch == 8
    assert EnvConfig(max_groups=np.int64(64)).max_groups == 64
    for make in (lambda: AutoConfig(max_samples=True), lambda: AutoConfig(budget_s=True),
                 lambda: AutoConfig(workers=True), lambda: AutoConfig(starts=True),
                 lambda: AutoConfig(seeds_per_start=True), lambda: AutoConfig(budget_s=np.nan),
                 lambda: PlacetoPlacer(max_samples=True), lambda: PlacetoPlacer(workers=True),
                 lambda: HDPPlacer(budget_s=True), lambda: GdpPlacer(workers=True)):
        with pytest.raises(ConfigError, match="must be"):
            make()


def test_placer_constructors_name_a_wrong_config_or_setting():
    # Raw TypeErrors from dataclasses, or another placer's config accepted and an
    # AttributeError (KeyError, TypeError) from deep inside the first placement.
    from tf_autoplace.errors import ConfigError
    from tf_autoplace.placers import (AutoConfig, AutoPlacer, GdpPlacer, PlacetoPlacer,
                                      PostConfig, PostPlacer)

    cases = [
        (lambda: AutoPlacer("x"), "config must be an instance of AutoConfig, got 'x'"),
        (lambda: AutoPlacer(AutoConfig), r"got the class AutoConfig \(pass an instance"),
        (lambda: AutoPlacer(PostConfig()), "must be an instance of AutoConfig, got PostConfig"),
        (lambda: PlacetoPlacer(AutoConfig()), "must be an instance of PlacetoConfig"),
        (lambda: AutoPlacer(bogus=1), "the auto placer has no setting bogus; its settings "
                                      r"\(AutoConfig\): budget_s, "),
        (lambda: PostPlacer(heuristics=("xx",)), r"heuristics must name heuristics among"),
        (lambda: PostPlacer(heuristics="m_etf"), "heuristics must be a tuple of names, got "
                                                 "'m_etf'"),
        (lambda: GdpPlacer(heuristics="m_etf"), "must be a tuple of names, got 'm_etf'"),
        (lambda: PlacetoPlacer(heuristics=("xx",)), "heuristics must name"),
        (lambda: PlacetoPlacer(policy_dir=3), "policy_dir must be None or a directory, got 3"),
        (lambda: AutoPlacer(search="x"), "search must be a LocalSearchConfig, got 'x'"),
        (lambda: AutoPlacer(post="x"), "post must be a PostConfig, got 'x'"),
    ]
    for make, message in cases:
        with pytest.raises(ConfigError, match=message):
            make()


def test_the_doors_budget_takes_numpy_seconds():
    # autoplace(g, budget_s=np.int64(5)): "budget_s must be a number >= 0, got np.int64(5)".
    import numpy as np

    from tf_autoplace.errors import ConfigError
    from tf_autoplace.pipeline.options import PlaceOptions

    for budget in (np.int64(5), np.float32(5)):
        options = PlaceOptions.make(placer="auto", budget_s=budget)
        assert options.placer.config.budget_s == 5.0
    for bad in (True, np.nan, "5", -1):
        with pytest.raises(ConfigError, match="budget_s must be None or a number >= 0"):
            PlaceOptions.make(placer="auto", budget_s=bad)


def test_a_placer_class_and_a_bad_budget_to_get_placer_are_named():
    # placer=AutoPlacer was "unknown placer <class ...>"; get_placer("m_etf", budget_s="x")
    # was accepted.
    from tf_autoplace.errors import ConfigError
    from tf_autoplace.placers import AutoPlacer, get_placer

    with pytest.raises(ConfigError, match=r"got the class AutoPlacer \(make one: AutoPlacer\(\)\)"):
        get_placer(AutoPlacer)
    for bad in ("x", -5, True):
        with pytest.raises(ConfigError, match="budget_s must be None or a number >= 0"):
            get_placer("m_etf", budget_s=bad)


def test_the_flag_doors_settings_check_the_budget_as_every_door_does():
    # AutoplaceSettings took budget_s=True (a bool is an int to Python) as one second.
    from tf_autoplace import flags as ap_flags
    from tf_autoplace.errors import ConfigError

    with pytest.raises(ConfigError, match="budget_s must be >= 0 seconds, got True"):
        ap_flags.AutoplaceSettings(placer="m_etf", cluster="k80x2", budget_s=True)
