"""Checking what a config takes: one rule for every placer's settings (numbers, counts,
seconds, names, directories) and for making a placer's config from its constructor's
arguments (:func:`make_config`).

A setting given as text (``--placer_option=learning_rate=x`` reaches a config as a string only
if parsing let it through), as a bool (``True`` is an int to Python) or as ``inf``/``nan``
passes a bare comparison or breaks it with a raw TypeError, and fails later, far from its cause
(an ``OverflowError`` in a budget, NaN logits after one update). :func:`check_number` refuses
it where the config is made, naming the setting.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

from tf_autoplace.errors import ConfigError


def check_number(name: str, value, *, low: float = -math.inf, high: float = math.inf,
                 low_ok: bool = True, high_ok: bool = True, none_ok: bool = False) -> None:
    """Raise ConfigError unless ``value`` is a finite real number (not a bool) in the range
    from ``low`` to ``high`` (each end included where ``low_ok``/``high_ok``), or None where
    ``none_ok``.

    Args:
      name: the setting, as the message names it.
      value: what was given.
      low, high: the range's ends (infinite: no end).
      low_ok, high_ok: whether each end is allowed.
      none_ok: None is allowed (the setting's "off" or "default").

    Raises:
      ConfigError: ``value`` is not such a number; the message gives the range and the value.
    """
    if value is None and none_ok:
        return
    inside = (isinstance(value, numbers.Real) and not isinstance(value, bool)
              and math.isfinite(value)
              and (value >= low if low_ok else value > low)
              and (value <= high if high_ok else value < high))
    if not inside:
        ends = [f"{'>=' if low_ok else '>'} {low:g}" if math.isfinite(low) else "",
                f"{'<=' if high_ok else '<'} {high:g}" if math.isfinite(high) else ""]
        bounds = " and ".join(e for e in ends if e)
        raise ConfigError(f"{name} must be {'None or ' if none_ok else ''}a finite number"
                          f"{' ' + bounds if bounds else ''}, got {value!r}")


def is_int(value) -> bool:
    """Whether ``value`` is an integer: a Python or numpy one, not a bool (which Python counts
    as one) or a numpy bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(name: str, value, *, low: int = 0, none_ok: bool = False) -> None:
    """Raise ConfigError unless ``value`` is an integer (a Python or numpy one; not a bool,
    which Python counts as one) >= ``low``, or None where ``none_ok``.

    Raises:
      ConfigError: naming the setting, what it takes and the value given.
    """
    if value is None and none_ok:
        return
    if not is_int(value) or value < low:
        raise ConfigError(f"{name} must be {'None or ' if none_ok else ''}an int >= {low}, "
                          f"got {value!r}")


def plain_numbers(config) -> None:
    """Replace the numpy numbers among a frozen dataclass ``config``'s fields with Python's
    (``np.int64(5)`` -> ``5``; numpy bools are left, for the checks to refuse where a number
    goes): a value computed with numpy is as good as a literal, and the config's repr (part
    of a placement cache key) and JSON stay the same for both."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if type(value).__module__ != "numpy":
            continue
        if isinstance(value, numbers.Integral):  # (a numpy bool is not one)
            object.__setattr__(config, field.name, int(value))
        elif isinstance(value, numbers.Real):
            object.__setattr__(config, field.name, float(value))


def check_seconds(name: str, value, *, zero_ok: bool = False, none_ok: bool = False) -> None:
    """Raise ConfigError unless ``value`` is a number of seconds (a Python or numpy real, not
    a bool, not NaN) > 0, or >= 0 where ``zero_ok``; ``inf`` (no limit) is one. None where
    ``none_ok``.

    Raises:
      ConfigError: naming the setting, what it takes and the value given.
    """
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value) \
            or not (value >= 0 if zero_ok else value > 0):
        raise ConfigError(f"{name} must be {'None or ' if none_ok else ''}a number "
                          f"{'>=' if zero_ok else '>'} 0, got {value!r}")


def check_names(field: str, names, known, what: str) -> None:
    """Raise ConfigError unless ``names`` is a tuple (or list) of names among ``known``
    (a string is refused whole, not read as its letters)."""
    if isinstance(names, (str, bytes)) or not isinstance(names, (tuple, list)) \
            or not all(isinstance(name, str) for name in names):
        raise ConfigError(f"{field} must be a tuple of names, got {names!r}")
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ConfigError(f"{field} must name {what} among {list(known)}, got {unknown}")


def check_directory(name: str, value) -> None:
    """Raise ConfigError unless ``value`` is None or a non-empty path string."""
    if value is not None and not (isinstance(value, str) and value):
        raise ConfigError(f"{name} must be None or a directory, got {value!r}")


def make_config(config_class, config, overrides: dict, owner: str):
    """``config`` (an instance of ``config_class``; None: its defaults) with ``overrides``
    replacing fields, for a placer's constructor: a config of another class (or the class
    itself), or a setting the class does not have, is a ConfigError naming what is taken,
    not a TypeError from ``dataclasses`` or an AttributeError when the placer runs.

    Raises:
      ConfigError: as above, or a field's own check failing.
    """
    name = config_class.__name__
    if config is not None and not isinstance(config, config_class):
        given = (f"the class {config.__name__} (pass an instance: {config.__name__}())"
                 if isinstance(config, type) else repr(config))
        raise ConfigError(f"the {owner} placer's config must be an instance of {name}, got "
                          f"{given}")
    fields = sorted(f.name for f in dataclasses.fields(config_class))
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ConfigError(f"the {owner} placer has no setting {', '.join(unknown)}; its "
                          f"settings ({name}): {', '.join(fields)}")
    return dataclasses.replace(config if config is not None else config_class(), **overrides)
