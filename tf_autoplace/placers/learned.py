"""What the learned placers share at their door: a frozen config with a time budget.

Each learned placer (``placeto``, ``post``) is configured by a frozen dataclass with a
``budget_s`` field. The constructor takes the whole config, or its fields as keywords over the
defaults, and ``budget_s`` on its own so that :func:`tf_autoplace.placers.get_placer` (and the
flags and the benchmark through it) can pass a time budget to any placer that takes one.
"""

from __future__ import annotations

import dataclasses

from tf_autoplace.problem import Placer


class LearnedPlacer(Placer):
    """A placer with a config (``config_class``, a frozen dataclass with ``budget_s``) and
    ``stats``, the figures of its last run."""

    config_class: type

    def __init__(self, config=None, *, budget_s: float | None = None, **overrides):
        if budget_s is not None:
            overrides["budget_s"] = budget_s
        self.config = dataclasses.replace(config or self.config_class(), **overrides)
        self.stats: dict = {}
