"""What the learned placers share at their door: a frozen config with a time budget and a
Ray address.

Each learned placer (``placeto``, ``post``) is configured by a frozen dataclass with a
``budget_s`` and a ``ray_address`` field. The constructor takes the whole config, or its fields
as keywords over the defaults, and ``budget_s`` and ``ray_address`` on their own so that
:func:`tf_autoplace.placers.get_placer` (and the flags and the benchmark through it) can pass a
time budget or a Ray cluster to any placer that takes one.
"""

from __future__ import annotations

import dataclasses

from tf_autoplace.problem import Placer


class LearnedPlacer(Placer):
    """A placer with a config (``config_class``, a frozen dataclass with ``budget_s`` and
    ``ray_address``) and ``stats``, the figures of its last run."""

    config_class: type

    def __init__(self, config=None, *, budget_s: float | None = None,
                 ray_address: str | None = None, **overrides):
        if budget_s is not None:
            overrides["budget_s"] = budget_s
        if ray_address is not None:
            overrides["ray_address"] = ray_address
        self.config = dataclasses.replace(config or self.config_class(), **overrides)
        self.stats: dict = {}

    @property
    def needs_workload(self) -> bool:
        """A config with ``reward="measured"`` runs placements here (rl.measured)."""
        return getattr(self.config, "reward", "simulated") == "measured"
