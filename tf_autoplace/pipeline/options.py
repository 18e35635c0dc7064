"""How to place a graph: one value that every door checks once and hands to the engine.

A door (``autoplace()``, :mod:`tf_autoplace.tf2`, the ``--autoplace`` flag, ``tf-autoplace
place``) takes its caller's arguments in the caller's terms: a placer by name with a time
budget, a Ray address, a saved policy and ``--placer_option`` settings, a cache as True or a
directory, progress as True or False. :meth:`PlaceOptions.make` turns them into a
:class:`PlaceOptions`, the objects the engine works with, and raises a ConfigError for any value
out of range or of the wrong type before any work; the engine
(:mod:`tf_autoplace.pipeline.engine`) then reads the value and checks nothing again. A door adds
only what is particular to its input (a function's example arguments, a SavedModel's signature,
a file's outputs).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping, Sequence

from tf_autoplace.core.cluster import Cluster, resolve_cluster
from tf_autoplace.core.problem import Placer
from tf_autoplace.core.settings import check_seconds, is_int
from tf_autoplace.cost import CostModel
from tf_autoplace.errors import ConfigError, shown
from tf_autoplace.grouping import GroupingConfig
from tf_autoplace.hw.protocol import check_steps
from tf_autoplace.outputs.progress import QUIET, Progress, as_progress
from tf_autoplace.pipeline.cache import PlacementCache, as_cache
from tf_autoplace.placers import DEFAULT_PLACER, get_placer

MAX_SEED = 2**63 - 1  # a PlacementResult's seed is an int64


@dataclasses.dataclass(frozen=True, eq=False)
class PlaceOptions:
    """Everything the engine needs besides the graph, checked.

    Attributes:
      placer: the placer.
      cluster: a :class:`Cluster`, or ``"local"`` for this machine's devices, which are read
        when the graph is placed (a training binary may configure its logical devices after
        its flags are parsed).
      seed: the placement seed, an int in [0, 2**63 - 1] (a PlacementResult's is an int64).
      grouping: Merge-and-Colocate settings.
      cost_model: op times; None: Grappler's analytical estimates (or ``cost_profile``).
      cost_profile: the path of a text CostProfile whose measured op times replace the
        analytical estimates (graphs only; not with ``cost_model``).
      unknown_dim: elements assumed for a dimension of unknown size (>= 1).
      cache: the placement cache, or None.
      progress: where a search reports.
      measure_steps: timed steps of the placed graph and the single-device baseline on this
        machine after placing (>= 0; 0: none; graphs only).
      measure_feeds: tensor name -> value for those steps (None: made-up values).
      verify: timed steps per candidate when the placer's placement, the best heuristic's and
        the single-device one are measured on this machine and the measured fastest is
        applied (:mod:`tf_autoplace.hw.verify`; graphs only; 0: off, else at least the
        protocol's minimum).
      trust_advice: how the door that places tells a user to get figures to trust, for the
        note on analytical op times; "" for a graph's (measure with ``verify`` or
        ``measure_steps``, or give a cost profile). A door that takes neither (a tf.function,
        a Keras model) gives its own.
    """

    placer: Placer
    cluster: Cluster | str = "local"
    seed: int = 0
    grouping: GroupingConfig = GroupingConfig()
    cost_model: CostModel | None = None
    cost_profile: str | None = None
    unknown_dim: int = 1
    cache: PlacementCache | None = None
    progress: Progress = QUIET
    measure_steps: int = 0
    measure_feeds: Mapping | None = None
    verify: int = 0
    trust_advice: str = ""

    def __post_init__(self):
        if not isinstance(self.placer, Placer):
            raise ConfigError(f"placer must be a Placer, got {shown(self.placer)}")
        if not (isinstance(self.cluster, Cluster) or self.cluster == "local"):
            raise ConfigError(f"cluster must be a Cluster or 'local', got {shown(self.cluster)}")
        if not (is_int(self.seed) and 0 <= self.seed <= MAX_SEED):
            raise ConfigError(f"seed must be an int in [0, 2**63 - 1], got {self.seed!r}")
        if not isinstance(self.grouping, GroupingConfig):
            raise ConfigError(f"grouping must be a GroupingConfig, got {shown(self.grouping)}")
        if self.cost_model is not None and not isinstance(self.cost_model, CostModel):
            raise ConfigError(f"cost_model must be None (Grappler's analytical costs) or a "
                              f"tf_autoplace.cost.CostModel, got {shown(self.cost_model)}")
        if self.cost_profile is not None and not isinstance(self.cost_profile,
                                                            (str, os.PathLike)):
            raise ConfigError(f"cost_profile must be the path of a CostProfile file, got "
                              f"{shown(self.cost_profile)}")
        if self.cost_profile is not None and self.cost_model is not None:
            raise ConfigError("give cost_model or cost_profile, not both")
        if not (is_int(self.unknown_dim) and self.unknown_dim >= 1):
            raise ConfigError(f"unknown_dim must be an int >= 1, got {self.unknown_dim!r}")
        if self.cache is not None and not isinstance(self.cache, PlacementCache):
            raise ConfigError(f"cache must be a PlacementCache or None, got {shown(self.cache)}")
        if not isinstance(self.progress, Progress):
            raise ConfigError(f"progress must be a Progress, got {self.progress!r}")
        if not (is_int(self.measure_steps) and self.measure_steps >= 0):
            raise ConfigError(f"measure_steps must be an int >= 0, got "
                              f"{self.measure_steps!r}")
        if self.measure_steps:
            check_steps(self.measure_steps, "measure_steps")
        if not (is_int(self.verify) and self.verify >= 0):
            raise ConfigError(f"verify must be an int >= 0 (timed steps per candidate; 0: "
                              f"off), got {self.verify!r}")
        if self.verify:
            check_steps(self.verify, "verify")
        if self.measure_feeds is not None and not isinstance(self.measure_feeds, Mapping):
            raise ConfigError(f"measure_feeds must map tensor names to values, got "
                              f"{self.measure_feeds!r}")

    @classmethod
    def make(cls, *, placer=DEFAULT_PLACER, cluster=None, seed: int = 0,
             budget_s: float | None = None, ray_address: str | None = None, policy=None,
             placer_options: Sequence[str] = (), grouping: GroupingConfig = GroupingConfig(),
             cost_model: CostModel | None = None, cost_profile=None, unknown_dim: int = 1,
             cache=False, progress=False, measure_steps: int = 0,
             measure_feeds: Mapping | None = None, verify: int = 0) -> "PlaceOptions":
        """The options a door's arguments ask for, in the terms ``autoplace()`` takes them.

        Args:
          placer: a registered placer name or a Placer.
          cluster: a Cluster, a shipped spec's name, a text ClusterSpec's path, or
            ``"local"``/None (this machine's devices, read when placing).
          seed: the placement seed.
          budget_s: wall-time cap (>= 0) for placers that search; None: their own.
          ray_address: a Ray cluster for placers that farm simulations out.
          policy: a saved policy's directory for a learned placer to start from.
          placer_options: ``name=value`` settings of the placer's config.
          grouping, cost_model, cost_profile, unknown_dim, measure_steps, measure_feeds,
            verify: as the attributes.
          cache: False/None (none), True (the user's cache directory), a directory, or a
            PlacementCache.
          progress: True (a bar on a terminal, log lines otherwise), False/None (nothing), or a
            Progress.

        Returns:
          The checked options.

        Raises:
          ConfigError: a value out of range or of the wrong type, an unknown placer, a
            setting the placer does not take.
          ClusterSpecError: a cluster spec that does not read.
        """
        check_seconds("budget_s", budget_s, zero_ok=True, none_ok=True)
        budget_s = None if budget_s is None else float(budget_s)
        return cls(
            placer=get_placer(placer, budget_s=budget_s, ray_address=ray_address,
                              policy=policy, options=placer_options),
            cluster="local" if cluster is None or (isinstance(cluster, str)
                                                   and cluster == "local")
            else resolve_cluster(cluster),
            seed=seed, grouping=grouping, cost_model=cost_model,
            cost_profile=None if cost_profile is None else (
                os.fspath(cost_profile) if isinstance(cost_profile, (str, os.PathLike))
                else cost_profile),
            unknown_dim=unknown_dim, cache=as_cache(cache), progress=as_progress(progress),
            measure_steps=measure_steps, measure_feeds=measure_feeds, verify=verify)

    def resolved_cluster(self) -> Cluster:
        """The cluster, with ``"local"`` read from this machine now."""
        return resolve_cluster(self.cluster)

    def replace(self, **changes) -> "PlaceOptions":
        """A copy with ``changes`` (attribute values), checked again."""
        return dataclasses.replace(self, **changes)
