"""Checking the numbers a config takes: one rule for every placer's settings.

A setting given as text (``--placer_option=learning_rate=x`` reaches a config as a string only
if parsing let it through), as a bool (``True`` is an int to Python) or as ``inf``/``nan``
passes a bare comparison or breaks it with a raw TypeError, and fails later, far from its cause
(an ``OverflowError`` in a budget, NaN logits after one update). :func:`check_number` refuses
it where the config is made, naming the setting.
"""

from __future__ import annotations

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
