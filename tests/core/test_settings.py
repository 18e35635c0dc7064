"""check_number, the one rule for the numbers a placer's config takes, and the configs that
use it: text, bools and inf/NaN are ConfigErrors naming the setting where the config is made
(they were raw TypeErrors, or an OverflowError or NaN logits in the middle of a search)."""

import math

import pytest

from tf_autoplace.core.settings import check_number
from tf_autoplace.errors import ConfigError


@pytest.mark.parametrize("value", ["x", True, math.inf, -math.inf, math.nan, None, [1]])
def test_what_is_not_a_finite_number_is_refused(value):
    with pytest.raises(ConfigError, match=r"^rate must be a finite number > 0, got "):
        check_number("rate", value, low=0, low_ok=False)


def test_the_range_and_its_ends():
    check_number("p", 0, low=0, high=1)
    check_number("p", 1, low=0, high=1)
    check_number("p", None, low=0, none_ok=True)
    check_number("p", 10**30)  # no range: any finite number
    with pytest.raises(ConfigError, match=r"^p must be a finite number >= 0 and < 1, got 1$"):
        check_number("p", 1, low=0, high=1, high_ok=False)
    with pytest.raises(ConfigError, match=r"^p must be None or a finite number > 0, got 0$"):
        check_number("p", 0, low=0, low_ok=False, none_ok=True)


def _configs():
    from tf_autoplace.placers.auto import AutoConfig
    from tf_autoplace.placers.gdp.train import PPOConfig
    from tf_autoplace.placers.hdp.search import HDPConfig
    from tf_autoplace.placers.placeto.search import PlacetoConfig
    from tf_autoplace.placers.post.search import PostConfig

    return [(AutoConfig, "kick_share"), (AutoConfig, "search_work"),
            (PlacetoConfig, "learning_rate"), (PlacetoConfig, "entropy"),
            (PlacetoConfig, "discount"), (PostConfig, "learning_rate"),
            (PostConfig, "kl_penalty"), (HDPConfig, "entropy"), (HDPConfig, "grad_clip"),
            (PPOConfig, "clip"), (PPOConfig, "learning_rate"), (PPOConfig, "memory_penalty")]


@pytest.mark.parametrize("value", ["x", math.inf, math.nan])
def test_placer_configs_name_a_bad_setting(value):
    for config, name in _configs():
        with pytest.raises(ConfigError, match=rf"^{name} must be "):
            config(**{name: value})
