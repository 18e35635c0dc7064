"""Placements pinned by seed: every registered placer on random DAGs and on a small zoo graph.

A refactoring that moves code must not move placements. :func:`cases` lists (problem, placer)
pairs small enough for the default test suite, with sample budgets that end every search (the
time caps are lifted, so the machine's load cannot change a result); :func:`placement_digest`
reduces a placement to a short hash. ``tools/make_placement_goldens.py`` writes the digests
to ``testdata/placement_goldens.json`` and ``tests/test_placement_goldens.py`` checks them;
regenerate the file only for a change that is meant to move placements, and say so in the
commit.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Iterator

import numpy as np

from tf_autoplace.placers import PLACERS, get_placer
from tf_autoplace.testing.problems import random_problem
from tf_autoplace.zoo import benchmark

# Settings that make every search end on its sample budget, small enough for the default suite.
PLACER_OPTIONS = {
    "auto": ("max_samples=200", "budget_s=3600"),
    "placeto": ("max_samples=16", "budget_s=3600"),
    "post": ("max_samples=48", "budget_s=3600"),
    "hdp": ("max_samples=32", "start_steps=20", "num_groups=32", "budget_s=3600"),
    "gdp": ("max_steps=2", "samples=8", "budget_s=3600"),
}
# Random DAGs: (ops, seed, GPUs).
RANDOM_PROBLEMS = ((80, 0, 2), (120, 1, 4))
# A zoo pair at the benchmark's quick size: a real training graph, ingested through Grappler.
ZOO_PAIRS = ("rnnlm2:k80x2",)


def placement_digest(devices) -> str:
    """The first 16 hex digits of the SHA-256 of a placement's int32 device indices."""
    data = np.ascontiguousarray(np.asarray(devices, dtype=np.int32)).tobytes()
    return hashlib.sha256(data).hexdigest()[:16]


def problems() -> Iterator[tuple[str, Callable]]:
    """(name, a function building the problem) for every golden problem."""
    for n, seed, gpus in RANDOM_PROBLEMS:
        yield (f"random_n{n}_s{seed}_g{gpus}",
               lambda n=n, seed=seed, gpus=gpus: random_problem(n, seed, num_gpus=gpus,
                                                                max_groups=32))
    for pair in ZOO_PAIRS:
        model, cluster = pair.split(":")
        yield (f"{pair}:quick",
               lambda model=model, cluster=cluster: benchmark.pair_problem(model, cluster,
                                                                           quick=True))


def placer_names() -> list[str]:
    """Every registered placer, by name."""
    return sorted(PLACERS)


def make_placer(name: str):
    """The registered placer ``name`` with the golden settings (:data:`PLACER_OPTIONS`)."""
    options = [o for o in PLACER_OPTIONS.get(name, ()) if not o.startswith("budget_s=")]
    budget = [float(o.partition("=")[2]) for o in PLACER_OPTIONS.get(name, ())
              if o.startswith("budget_s=")]
    return get_placer(name, budget_s=budget[0] if budget else None, options=options)
