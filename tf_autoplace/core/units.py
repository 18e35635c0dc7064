"""Byte amounts and times written for people: in the unit (or to the decimals) that fits.

Messages that state memory (a graph's variables against a cluster's capacity, a device's peak)
use :func:`format_bytes`, so 12,000 bytes read "12.0 KB" rather than "0.00 GB". Units are
decimal (1 KB = 1,000 bytes, 1 GB = 10^9 bytes), as the package's GB figures and cluster specs
are.
"""

from __future__ import annotations

import math

_UNITS = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3))


def format_bytes(n: float) -> str:
    """``n`` bytes with three significant figures in the largest unit that keeps the number at
    least 1: ``"512 B"``, ``"12.0 KB"``, ``"1.50 MB"``, ``"200 GB"``.

    Args:
      n: a byte count (int or float; negative counts keep their sign, non-finite ones are
        written as Python writes them).

    Returns:
      The amount and its unit, e.g. ``"12.0 KB"``.
    """
    n = float(n)
    if not math.isfinite(n):
        return f"{n} B"
    size = abs(n)
    for unit, scale in _UNITS:
        # 999.96 KB would round to "1000 KB": such amounts go up a unit.
        if size >= scale * 0.9995:
            return f"{_three_figures(n / scale)} {unit}"
    return f"{n:.0f} B"


def _three_figures(x: float) -> str:
    size = abs(x)
    if size >= 99.95:
        return f"{x:.0f}"
    if size >= 9.995:
        return f"{x:.1f}"
    return f"{x:.2f}"


def ms_decimals(*seconds: float) -> int:
    """Decimals for writing times in milliseconds: 2, or 3 where one of ``seconds`` is below
    a millisecond, so that measured intervals of sub-millisecond steps that do not overlap are
    not printed as if they touched ("[0.33, 0.33]" beside "[0.33, 0.36]")."""
    return 3 if any(math.isfinite(s) and abs(s) < 1e-3 for s in seconds) else 2


__all__ = ["format_bytes", "ms_decimals"]
