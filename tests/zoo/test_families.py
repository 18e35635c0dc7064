"""Placeto's graph families (tf_autoplace.zoo.corpora.families) with tiny knobs: deterministic per
seed, knobs in their ranges, every graph trains, problems are built once and then cached."""

import dataclasses
import functools
import logging
import os
import pickle

import numpy as np
import pytest
import tensorflow as tf

from tf_autoplace.core.cluster import Cluster, resolve_cluster
from tf_autoplace.errors import ConfigError
from tf_autoplace.pipeline.problem_cache import ProblemCache
from tf_autoplace.zoo.corpora import families
from tf_autoplace.zoo.corpora.families import FAMILIES, FamilyConfig

TINY = FamilyConfig(
    num_graphs=4,
    cifar10=dict(batch=(2, 4), image_size=8, channels=4, stacks=2, cells_per_stack=(1, 2),
                 blocks=(2, 3)),
    ptb=dict(batch=(2, 4), length=(3, 6), nodes=(3, 5), hidden=8, vocab=20),
    nmt=dict(batch=(2, 4), length=(2, 5), hidden=8, embedding_dim=8, vocab=20),
)
SEQUENCE_FEED = {"ptb": "tokens:0", "nmt": "source:0"}


@functools.lru_cache(maxsize=None)
def tiny_graphs(family):
    return tuple(families.family_graphs(family, TINY))


def _graph_def_bytes(model):
    return model.graph.as_graph_def().SerializeToString(deterministic=True)


def _session(graph):
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return tf.compat.v1.Session(graph=graph, config=config)


def test_config_validation():
    assert FAMILIES == ("cifar10", "ptb", "nmt")
    assert FamilyConfig().num_train == 16 and FamilyConfig(num_graphs=5).num_train == 2
    assert FamilyConfig(train_fraction=0.75, num_graphs=4).num_train == 3
    assert FamilyConfig().knobs("ptb")["length"] == (25, 40)
    assert FamilyConfig(nmt=dict(length=20)).knobs("nmt")["length"] == (20, 20)
    for bad in (dict(num_graphs=0), dict(train_fraction=1.5), dict(ptb=dict(width=3)),
                dict(nmt=dict(length=(10, 5))), dict(cifar10=dict(channels=0)),
                dict(cifar10=dict(image_size=30))):
        with pytest.raises(ConfigError):
            FamilyConfig(**bad)
    with pytest.raises(ConfigError):
        families.family_graphs("mnist", TINY)


@pytest.mark.slow  # the families' builds take seconds each
@pytest.mark.parametrize("family", FAMILIES)
def test_deterministic_and_varied(family):
    graphs = tiny_graphs(family)
    assert [g.name for g in graphs] == [f"{family}_{i}" for i in range(4)]
    again = families.family_graph(family, TINY, 1)
    assert _graph_def_bytes(again) == _graph_def_bytes(graphs[1])
    assert len(again.graph.get_operations()) == len(graphs[1].graph.get_operations())
    # Graph i depends on (seed, family, i) only: not on num_graphs.
    assert _graph_def_bytes(families.family_graph(
        family, FamilyConfig(num_graphs=2, **{family: getattr(TINY, family)}), 1)) == \
        _graph_def_bytes(graphs[1])
    # Different draws give different graphs, and the draws do differ.
    drawn = [repr(sorted(g.knobs.items())) for g in graphs]
    defs = [_graph_def_bytes(g) for g in graphs]
    assert len(set(drawn)) > 1
    assert len(set(defs)) == len(set(drawn))
    other_seed = FamilyConfig(num_graphs=4, seed=1, **{family: getattr(TINY, family)})
    assert [repr(sorted(families.sample_knobs(family, other_seed, i).items()))
            for i in range(4)] != drawn


@pytest.mark.parametrize("family", FAMILIES)
def test_knobs_in_range_and_trains(family):
    ranges = TINY.knobs(family)
    for model in tiny_graphs(family):
        batch = model.knobs["batch"]
        assert ranges["batch"][0] <= batch <= ranges["batch"][1]
        if family == "cifar10":
            assert model.feeds["images:0"][0] == (batch, 8, 8, 3)
            assert len(model.knobs["normal_cell"]) == model.knobs["blocks"]
        else:
            length = model.knobs["length"]
            assert ranges["length"][0] <= length <= ranges["length"][1]
            assert model.feeds[SEQUENCE_FEED[family]][0] == (batch, length)
        if family == "ptb":
            assert len(model.knobs["cell"]) == model.knobs["nodes"]
        with _session(model.graph) as session:
            session.run(model.init_op)
            loss, _ = session.run([model.loss, model.train_op], model.sample_feed(0))
        assert np.isfinite(loss) and loss > 0


@pytest.mark.slow
def test_problems_split_and_cache(tmp_path, monkeypatch, capsys):
    cluster = resolve_cluster("k80x2")
    gpus = cluster.kind_mask(["GPU"])[0]
    two = dataclasses.replace(TINY, num_graphs=2)  # graphs 0 and 1 of TINY's
    first = {}
    for family in FAMILIES:
        train, test = families.family_problems(family, two, cluster, cache_dir=tmp_path)
        assert len(train) == 1 and len(test) == 1
        for problem, model in zip(train + test, tiny_graphs(family)):
            assert problem.graph.num_ops == len(model.graph.get_operations())
            assert np.isfinite(problem.op_time[:, gpus]).all()
            assert problem.simulator.run(np.zeros(problem.graph.num_ops, np.int32)).makespan > 0
        first[family] = train + test
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 6 and all(f.endswith(".npz") for f in files)
    assert files[0].startswith("cifar10_0_0_")
    mtimes = {f: os.stat(tmp_path / f).st_mtime_ns for f in files}

    def no_rebuild(*args, **kwargs):
        raise AssertionError("rebuilt a cached graph")

    monkeypatch.setattr(families, "family_graph", no_rebuild)
    for family in FAMILIES:
        train, test = families.family_problems(family, two, cluster, cache_dir=tmp_path,
                                               progress=True)
        for cached, built in zip(train + test, first[family]):
            assert cached.graph.names == built.graph.names
            np.testing.assert_array_equal(cached.op_time, built.op_time)
    assert {f: os.stat(tmp_path / f).st_mtime_ns for f in os.listdir(tmp_path)} == mtimes
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 6 and all("read from cache" in line for line in lines)
    assert lines[0].startswith("[cifar10 1/2] cifar10_0: ")
    # Other knobs or another cluster: another key, so no stale reuse.
    wider = FamilyConfig(num_graphs=4, nmt=dict(TINY.nmt, hidden=16))
    assert families.cache_key("nmt", wider, cluster) != families.cache_key("nmt", TINY, cluster)
    assert families.cache_key("nmt", TINY, Cluster.local(2)) != \
        families.cache_key("nmt", TINY, cluster)


def test_a_planted_pickle_where_the_cache_is_read_is_never_run(tmp_path, caplog):
    """Another user's file at the names a family's problem cache reads (the old pickle name,
    the npz name, an npz holding a pickled object array) is never unpickled; the problem is
    built and the entry replaced."""

    class Planted:
        def __reduce__(self):
            return (open, (str(tmp_path / "executed"), "w"))

    cluster = resolve_cluster("k80x2")
    one = dataclasses.replace(TINY, num_graphs=1, train_fraction=1.0)
    name = families.problem_name("ptb", one, cluster, 0)
    cache = ProblemCache(tmp_path / "cache")
    os.makedirs(cache.directory)
    with open(os.path.join(cache.directory, name + ".pkl"), "wb") as f:
        pickle.dump(Planted(), f)
    np.savez(cache.path(name), header=np.array([Planted()], dtype=object))
    with caplog.at_level(logging.WARNING):
        (problem,), _ = families.family_problems("ptb", one, cluster, cache_dir=cache)
    assert not (tmp_path / "executed").exists()
    assert "holds Python objects (a pickle)" in caplog.text
    assert cache.load(name, cluster).graph.names == problem.graph.names  # replaced
