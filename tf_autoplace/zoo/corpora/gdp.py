"""The graphs GDP's policy is pretrained on: Placeto's graph families and zoo models at sizes the
benchmark does not use, each on 2, 4 and 8 GPUs, built once and cached.

GDP pretrains one policy on a batch of graphs and places held-out graphs with it (Zhou et al.,
section 4.3: "we treat GDP-batch as a pre-training strategy and remove the target graph from the
batch training dataset"). The held-out graphs here are the benchmark's 16 (model, cluster) pairs
(``tf_autoplace.zoo.benchmark.FULL_PAIRS`` at paper size); the corpus is:

- the families of :mod:`tf_autoplace.zoo.corpora.families` (ENAS CIFAR-10 cells, ENAS PTB cells, 2-layer
  NMT): the first ``family.num_train`` graphs of each train, the rest are the **validation**
  graphs, on which pretraining chooses its checkpoint without looking at a held-out pair;
- :data:`ZOO_GRAPHS`, the zoo's sequence models at layer counts the papers do not pair (RNNLM
  and NMT with 3 and 6 layers, Transformer-XL with 3 and 6, WaveNet with 1 and 3 stacks) and
  shorter sequences. No zoo CNN is in it: the benchmark's Inception-V3, ResNet-50 and NASNet
  differ from another size of themselves only in tensor shapes, so they are left wholly
  unseen, and the CIFAR-10 family stands for convolutional graphs;
- every graph on every cluster of ``clusters`` (2, 4 and 8 K80s by default), so one policy
  learns all three device counts.

A graph is built once and costed on each cluster with the same cost model. With ``cache_dir``
each problem is kept in a problem cache (:mod:`tf_autoplace.pipeline.problem_cache`: npz files,
no pickle; family problems under the names
:func:`tf_autoplace.zoo.corpora.families.family_problems` uses, so both share a cache), and a
second run builds nothing.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import os
import time
from typing import Any, Callable, Sequence

from tf_autoplace import zoo
from tf_autoplace.core.cluster import Cluster
from tf_autoplace.core.problem import PlacementProblem
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph import ingest
from tf_autoplace.outputs.progress import note
from tf_autoplace.pipeline.prepare import build_problem
from tf_autoplace.pipeline.problem_cache import ProblemCache, as_problem_cache
from tf_autoplace.zoo.corpora.families import FAMILIES, FamilyConfig, family_graph, problem_name

ZOO_GRAPHS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("rnnlm", {"layers": 3, "length": 20}),
    ("rnnlm", {"layers": 6, "length": 20}),
    ("nmt", {"layers": 3, "length": 16}),
    ("nmt", {"layers": 6, "length": 12}),
    ("transformer", {"layers": 3}),
    ("transformer", {"layers": 6}),
    ("wavenet", {"stacks": 1}),
    ("wavenet", {"stacks": 3}),
)

# Bump when what a zoo entry builds changes: cached zoo problems are then rebuilt.
ZOO_VERSION = 1


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
    """Attributes:
      families: which of :data:`tf_autoplace.zoo.corpora.families.FAMILIES` to use.
      family: the families' graphs (count, train share, knobs). NMT sequences are 6-12 steps
        long by default (2,800-5,000 ops) so that an update on them costs what the others do.
      zoo: ``(model, knobs)`` pairs of :mod:`tf_autoplace.zoo` models (training graphs).
    """

    families: tuple[str, ...] = FAMILIES
    family: FamilyConfig = FamilyConfig(
        num_graphs=12, train_fraction=2 / 3, nmt={"length": (6, 12)})
    zoo: tuple[tuple[str, dict], ...] = ZOO_GRAPHS

    def __post_init__(self):
        for name in self.families:
            if name not in FAMILIES:
                raise ConfigError(f"unknown family {name!r}; known: {FAMILIES}")
        for name, knobs in self.zoo:
            if name not in zoo.MODELS or not isinstance(knobs, dict):
                raise ConfigError(f"a zoo entry is (model in {zoo.MODELS}, knobs dict), got "
                                  f"{(name, knobs)!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class Entry:
    """One problem of the corpus: ``name`` says the graph (``nmt_3``, ``rnnlm(layers=3,...)``),
    ``cluster`` the cluster's name, ``split`` "train" or "validation"."""

    name: str
    cluster: str
    split: str
    problem: PlacementProblem


def zoo_name(model: str, knobs: dict) -> str:
    return f"{model}({','.join(f'{k}={v}' for k, v in sorted(knobs.items()))})"


def build_corpus(config: CorpusConfig, clusters: Sequence[tuple[str, Cluster]], *,
                 cache_dir: bool | str | os.PathLike | ProblemCache | None = None,
                 progress: bool = False) -> list[Entry]:
    """Every graph of the corpus on every ``(name, cluster)`` (module doc), training graphs of
    each family first, then its validation graphs, then the zoo graphs (training).

    ``cache_dir``: keep the problems in a problem cache and read them back: True (the user's),
    a private directory of the user's, or None (module doc;
    :func:`tf_autoplace.pipeline.problem_cache.as_problem_cache`). ``progress`` prints one line
    per graph to stderr."""
    cache = as_problem_cache(cache_dir)
    entries = []
    for family in config.families:
        for i in range(config.family.num_graphs):
            split = "train" if i < config.family.num_train else "validation"
            names = [problem_name(family, config.family, c, i) for _, c in clusters]
            problems = _problems(lambda f=family, i=i: family_graph(f, config.family, i),
                                 clusters, cache, names, f"{family}_{i}", progress)
            entries += [Entry(f"{family}_{i}", n, split, p)
                        for (n, _), p in zip(clusters, problems)]
    for model, knobs in config.zoo:
        name = zoo_name(model, knobs)
        names = [f"zoo_{_zoo_key(model, knobs, c)}" for _, c in clusters]
        problems = _problems(lambda m=model, k=knobs: zoo.build(m, **k), clusters, cache, names,
                             name, progress)
        entries += [Entry(name, n, "train", p) for (n, _), p in zip(clusters, problems)]
    return entries


def _zoo_key(model: str, knobs: dict, cluster: Cluster) -> str:
    payload = json.dumps({"model": model, "knobs": knobs, "version": ZOO_VERSION},
                         sort_keys=True).encode()
    digest = hashlib.sha256(payload)
    digest.update(cluster.to_proto().SerializeToString(deterministic=True))
    return digest.hexdigest()[:16]


def _problems(build_model: Callable, clusters, cache: ProblemCache | None, names: list[str],
              name: str, progress: bool) -> list[PlacementProblem]:
    """One graph's problems on every cluster: read from the cache (entries ``names``), or
    built from one graph and one cost model (and cached)."""
    t = time.perf_counter()
    problems = [cache.load(n, c) if cache is not None else None
                for n, (_, c) in zip(names, clusters)]
    missing = [j for j, p in enumerate(problems) if p is None]
    if missing:
        model = build_model()
        meta_graph = ingest.load_meta_graph(model.graph)
        del model  # free the tf.Graph before costing
        gc.collect()
        cost_model = None
        for j in missing:
            built, cost_model = build_problem(meta_graph, clusters[j][1], cost_model=cost_model)
            problems[j] = PlacementProblem(graph=built.graph, cluster=built.cluster,
                                           op_time=built.op_time, grouping=built.grouping)
            if cache is not None:
                cache.store(names[j], problems[j])
    if progress:
        note("corpus", f"{name}: {problems[0].graph.num_ops} ops, "
             f"{'built' if missing else 'read from cache'} in {time.perf_counter() - t:.1f} s")
    return problems
