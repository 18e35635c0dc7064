"""The one registry of placers: each placer's name, where its class lives, and what it accepts.

Every door (``autoplace(placer="post")``, ``--autoplace=post``, ``tf-autoplace place
--placer=post``, the benchmark) names a placer through this table, and every list of placer
names (help texts, the README's tables, error messages) comes from it or is tested against it,
so adding a placer is one entry here and its folder.

An entry names its class as ``"module:Class"`` and the class is imported when first asked for:
the command line lists placers in its help without importing TensorFlow, and the fast
heuristics, which sit below the learned placers, can look each other up by name. The classes
sit in layers above this module; the strings are the only way down-to-up this module points,
and ``tests/placers/test_registry.py`` checks that every entry loads, that its class's ``name``
is the entry's, and that what an entry says it accepts is what its class's constructor takes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from typing import Iterator, Mapping

from tf_autoplace.errors import ConfigError

# What a placer may accept beyond the problem and the seed, each a constructor argument or a
# config field that every door knows how to pass.
ACCEPTS = {
    "budget_s": "a wall-time cap on its search (constructor argument budget_s)",
    "ray_address": "simulations on a Ray cluster (constructor argument ray_address)",
    "policy": "a saved policy to start from, and it keeps the one it fine-tuned (policy=)",
    "measured_reward": "placements scored by running them here (config field reward)",
    "options": "name=value settings of its config dataclass (--placer_option)",
}
KINDS = ("search", "learned", "heuristic")


@dataclasses.dataclass(frozen=True)
class PlacerEntry:
    """One registered placer.

    Attributes:
      name: the name every door takes (``"m_etf"``); the class's ``name`` attribute.
      target: ``"module:Class"``, the class, imported on first use (or the class itself, for
        an entry made by :func:`temporarily`).
      kind: ``"search"`` (the default placer), ``"learned"`` (a paper's learned placer) or
        ``"heuristic"`` (a fast placer that learns nothing).
      summary: one line for help texts.
      accepts: the keys of :data:`ACCEPTS` this placer takes.
    """

    name: str
    target: str | type
    kind: str
    summary: str
    accepts: frozenset = frozenset()

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"placer {self.name!r}: kind must be one of {KINDS}, got "
                              f"{self.kind!r}")
        unknown = sorted(set(self.accepts) - set(ACCEPTS))
        if unknown:
            raise ConfigError(f"placer {self.name!r} accepts unknown {unknown}; known: "
                              f"{sorted(ACCEPTS)}")
        object.__setattr__(self, "accepts", frozenset(self.accepts))

    def load(self) -> type:
        """The placer class (imported on first use)."""
        if isinstance(self.target, type):
            return self.target
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)


_SEARCH = {"budget_s", "ray_address", "options"}
ENTRIES = (
    PlacerEntry("auto", "tf_autoplace.placers.auto:AutoPlacer", "search",
                "the default: every fast heuristic as a start, then local search in the "
                "simulator", _SEARCH | {"measured_reward"}),
    PlacerEntry("placeto", "tf_autoplace.placers.placeto:PlacetoPlacer", "learned",
                "Placeto: a graph-embedding policy, pretrained and fine-tuned on your graph",
                _SEARCH | {"policy", "measured_reward"}),
    PlacerEntry("post", "tf_autoplace.placers.post:PostPlacer", "learned",
                "Post: softmax tables trained by cross-entropy and PPO on your graph",
                _SEARCH | {"measured_reward"}),
    PlacerEntry("hdp", "tf_autoplace.placers.hdp:HDPPlacer", "learned",
                "the Hierarchical Planner: a grouper and a seq2seq placer trained on your graph",
                _SEARCH | {"policy"}),
    PlacerEntry("gdp", "tf_autoplace.placers.gdp:GdpPlacer", "learned",
                "GDP: a pretrained graph-attention policy, zero-shot or fine-tuned",
                {"budget_s", "policy", "options"}),
    PlacerEntry("best_heuristic", "tf_autoplace.heuristics:BestHeuristicPlacer", "heuristic",
                "the fastest placement of every fast heuristic that fits"),
    PlacerEntry("m_etf", "tf_autoplace.heuristics:MemoryAwareETFPlacer", "heuristic",
                "Baechi's memory-aware earliest-finish-time list scheduling"),
    PlacerEntry("m_sct", "tf_autoplace.heuristics:MemoryAwareSCTPlacer", "heuristic",
                "Baechi's m-SCT: favourite-child LP (HiGHS), then m-ETF's list schedule"),
    PlacerEntry("expert", "tf_autoplace.heuristics:ExpertPlacer", "heuristic",
                "the papers' human expert: one layer per GPU, CNNs on one GPU"),
    PlacerEntry("metis", "tf_autoplace.heuristics:MetisPlacer", "heuristic",
                "a k-way min-cut partition balanced by compute (METIS)"),
    PlacerEntry("m_topo", "tf_autoplace.heuristics:MemoryAwareTopoPlacer", "heuristic",
                "Baechi's m-TOPO: topological order, each GPU filled to its share"),
    PlacerEntry("single", "tf_autoplace.heuristics:SingleDevicePlacer", "heuristic",
                "every op on the first GPU (or device 0)"),
    PlacerEntry("cpu_only", "tf_autoplace.heuristics:CpuOnlyPlacer", "heuristic",
                "every op on the CPU host"),
    PlacerEntry("random", "tf_autoplace.heuristics:RandomPlacer", "heuristic",
                "each group on a random allowed device: the floor"),
    PlacerEntry("replica_device_setter", "tf_autoplace.heuristics:ReplicaDeviceSetterPlacer",
                "heuristic", "TF1's replica_device_setter: variables on the ps tasks by bytes, "
                "the rest on the worker"),
)
_BY_NAME = {e.name: e for e in ENTRIES}
assert len(_BY_NAME) == len(ENTRIES), "placer names must be unique"


@contextlib.contextmanager
def temporarily(new: PlacerEntry):
    """Register ``new`` for the duration of a ``with`` block: a placer of a new name, or one
    that replaces the registered placer of its name (a test's placer with a smaller sample
    budget, say); every door sees it. The registry is restored on leaving the block."""
    global ENTRIES
    saved = ENTRIES
    ENTRIES = tuple(e for e in saved if e.name != new.name) + (new,) if new.name not in _BY_NAME \
        else tuple(new if e.name == new.name else e for e in saved)
    _BY_NAME.clear()
    _BY_NAME.update((e.name, e) for e in ENTRIES)
    try:
        yield new
    finally:
        ENTRIES = saved
        _BY_NAME.clear()
        _BY_NAME.update((e.name, e) for e in ENTRIES)


def entry(name: str) -> PlacerEntry:
    """The entry of placer ``name``.

    Raises:
      ConfigError: no placer has that name (the message lists the names).
    """
    if not isinstance(name, str) or name not in _BY_NAME:
        raise ConfigError(f"unknown placer {name!r}; choose one of {sorted(names())}")
    return _BY_NAME[name]


def names(kind: str | None = None) -> list[str]:
    """The registered names, in the registry's order (the default placer first), of ``kind``
    (None: all)."""
    return [e.name for e in ENTRIES if kind is None or e.kind == kind]


def accepts(name: str, what: str) -> bool:
    """Whether placer ``name`` takes ``what`` (a key of :data:`ACCEPTS`)."""
    if what not in ACCEPTS:
        raise ConfigError(f"unknown capability {what!r}; known: {sorted(ACCEPTS)}")
    return what in entry(name).accepts


def listing(kind: str | None = None) -> str:
    """The names, comma-separated, for help texts and messages."""
    return ", ".join(names(kind))


def able(what: str) -> list[str]:
    """The placers that take ``what`` (a key of :data:`ACCEPTS`), in registry order."""
    return [n for n in names() if accepts(n, what)]


def budget_help() -> str:
    """The help of the commands' ``--budget_s`` flag."""
    return ("Search budget in seconds (>= 0) for placers that search "
            f"({', '.join(able('budget_s'))}; 0: gdp places zero-shot); default: the placer's "
            "own.")


class _Classes(Mapping):
    """name -> placer class for the entries of one kind (or all), each imported on first
    use; iterates in registry order."""

    def __init__(self, kind: str | None = None):
        self._kind = kind

    def __getitem__(self, name):
        if name not in _BY_NAME or (self._kind and _BY_NAME[name].kind != self._kind):
            raise KeyError(name)
        return _BY_NAME[name].load()

    def __iter__(self) -> Iterator[str]:
        return iter(names(self._kind))

    def __len__(self) -> int:
        return len(names(self._kind))

    def __repr__(self) -> str:
        return f"<placers {names(self._kind)}>"


PLACERS: Mapping[str, type] = _Classes()
HEURISTICS: Mapping[str, type] = _Classes("heuristic")
