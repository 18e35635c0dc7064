"""The papers' baselines (cpu_only, random, expert, metis, m_topo, m_sct) on hand-made graphs with
hand-set costs, and on a small zoo NMT on the K80 x2 cluster."""

import platform
import sys

import numpy as np
import pytest

from tf_autoplace.core.cluster import Cluster, Device, resolve_cluster
from tf_autoplace.errors import ConfigError, InfeasiblePlacementError
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.grouping import group_graph
from tf_autoplace.heuristics._common import group_compute_time
from tf_autoplace.heuristics.metf import list_schedule
from tf_autoplace.heuristics.metis import pymetis_available
from tf_autoplace.heuristics.msct import favourite_children
from tf_autoplace.heuristics.multilevel import csr_from_edges, edge_cut, partition
from tf_autoplace.placers import (
    PLACERS,
    CpuOnlyPlacer,
    ExpertPlacer,
    MemoryAwareTopoPlacer,
    MetisPlacer,
    RandomPlacer,
    check_placement,
    get_placer,
)
from tf_autoplace.testing import problems

GB = problems.GB
BASELINES = ("cpu_only", "random", "expert", "metis", "m_topo", "m_sct")


def _cluster(num_gpus=2, gpu_memory=10 * GB, cpu=True):
    return problems.cluster(num_gpus, gpu_memory=gpu_memory, host=cpu)


def _random_dag(n, seed, fan_in=3):
    rng = np.random.default_rng(seed)
    edges = [(int(i), j, int(rng.integers(1, 10**6))) for j in range(1, n)
             for i in rng.choice(j, size=min(j, fan_in), replace=False)]
    return from_edges(n, edges), rng.lognormal(np.log(1e-3), 1.0, n)


_problem = problems.problem


def _cut_bytes(problem, devices):
    """Bytes sent between groups on different devices."""
    gg = group_graph(problem.graph, problem.grouping)
    group_device = devices[np.argsort(problem.grouping.labels, kind="stable")][
        np.concatenate([[0], np.cumsum(problem.grouping.sizes())[:-1]])]
    return int(gg.edge_bytes[group_device[gg.edge_src] != group_device[gg.edge_dst]].sum())


def _part_loads(problem, devices, gpus):
    times = problem.op_time[np.arange(problem.graph.num_ops), devices]
    return np.bincount(devices, weights=times, minlength=problem.cluster.num_devices)[gpus]


# --------------------------------------------------------------------------- all baselines
def test_registry_names_every_baseline():
    for name in BASELINES + ("single", "m_etf"):
        assert get_placer(name).name == name
    assert set(BASELINES) <= set(PLACERS)


@pytest.mark.parametrize("name", BASELINES)
def test_baseline_is_valid_with_cpu_only_ops_and_colocation(name):
    graph, _ = _random_dag(40, seed=3)
    kernels = np.ones((40, 2), bool)
    kernels[[5, 17, 30]] = [True, False]  # CPU-only ops
    colocation = np.arange(40)
    colocation[[8, 9, 10, 25]] = 8
    graph = from_edges(40, [(int(s), int(d), int(b)) for s, d, b in zip(
        graph.edge_src, graph.edge_dst, graph.tensor_bytes[graph.edge_tensor])],
        kernels=kernels, colocation=colocation)
    problem = _problem(graph, _cluster(), gpu_s=1e-3, max_groups=15)
    devices = get_placer(name).place(problem, seed=1).devices
    assert check_placement(problem, devices) == []
    assert (devices[[5, 17, 30]] == 2).all()
    assert len(set(devices[[8, 9, 10, 25]].tolist())) == 1
    if name != "expert":  # the expert works on colocation groups, the others on groups
        labels = problem.grouping.labels
        for g in range(problem.grouping.num_groups):
            assert len(set(devices[labels == g].tolist())) == 1


@pytest.mark.parametrize("name", ["m_etf", "m_sct"])
def test_a_schedule_that_does_not_fit_gives_way_to_the_single_device_that_does(name):
    # op 0 makes 100 MB that 8 ops of 10 ms read; GPU 1 holds 50 MB. The schedule spreads the
    # readers and sends GPU 1 a copy it cannot hold; all on GPU 0 fits (slower, but it fits).
    k = 8
    edges = [(0, i, 100 * 10**6) for i in range(1, k + 1)] + [(i, k + 1, 1000)
                                                                for i in range(1, k + 1)]
    graph = from_edges(k + 2, edges)
    cluster = Cluster.uniform([Device("/device:GPU:0", "GPU", memory_bytes=10**10),
                               Device("/device:GPU:1", "GPU", memory_bytes=50 * 10**6),
                               Device("/device:CPU:0", "CPU", memory_bytes=10**11)],
                              bandwidth_gbps=1000, latency_us=1)
    problem = _problem(graph, cluster, gpu_s=[1e-3] + [10e-3] * k + [1e-3])
    placer = get_placer(name)
    devices = placer.place(problem).devices
    assert (devices == 0).all()
    assert any("does not fit the devices' memory" in note for note in placer.notes)


def test_cpu_only_puts_everything_on_the_host_except_gpu_only_ops():
    kernels = np.ones((4, 2), bool)
    kernels[2] = [False, True]  # GPU-only
    graph = from_edges(4, [(0, 1, 8), (1, 2, 8), (2, 3, 8)], kernels=kernels)
    devices = CpuOnlyPlacer().place(_problem(graph, _cluster(), gpu_s=1e-3)).devices
    assert devices.tolist() == [2, 2, 0, 2]
    with pytest.raises(InfeasiblePlacementError, match="needs a CPU"):
        CpuOnlyPlacer().place(_problem(graph, _cluster(cpu=False), gpu_s=1e-3))


# ---------------------------------------------------------------------------------- random
def test_random_is_deterministic_per_seed_and_spreads_over_allowed_devices():
    graph, _ = _random_dag(300, seed=0)
    kernels = np.ones((300, 2), bool)
    kernels[::10] = [True, False]
    graph = from_edges(300, [(int(s), int(d), 8) for s, d in zip(graph.edge_src,
                                                                 graph.edge_dst)],
                       kernels=kernels)
    problem = _problem(graph, _cluster(num_gpus=2), gpu_s=1e-3)
    a = RandomPlacer().place(problem, seed=7).devices
    b = RandomPlacer().place(problem, seed=7).devices
    c = RandomPlacer().place(problem, seed=8).devices
    assert a.tolist() == b.tolist()
    assert a.tolist() != c.tolist()
    assert (a[::10] == 2).all()
    free = np.ones(300, bool)
    free[::10] = False
    counts = np.bincount(a[free], minlength=3)
    assert counts.min() > 0.25 * free.sum()  # about a third each


# ------------------------------------------------------------------------------------ metis
def test_multilevel_partitioner_finds_a_planted_cut():
    # Four cliques of 30 vertices joined in a ring by single light edges.
    rng = np.random.default_rng(0)
    src, dst, w = [], [], []
    for c in range(4):
        members = np.arange(30) + 30 * c
        for i in members:
            for j in members:
                if i < j:
                    src.append(i), dst.append(j), w.append(rng.uniform(50, 100))
        src.append(30 * c), dst.append((30 * c + 45) % 120), w.append(1.0)
    graph = csr_from_edges(120, src, dst, w, np.ones(120))
    part = partition(graph, 4, seed=3)
    assert edge_cut(graph, part) == pytest.approx(4.0)
    assert sorted(np.bincount(part).tolist()) == [30, 30, 30, 30]
    assert partition(graph, 4, seed=3).tolist() == part.tolist()


BACKENDS = ["multilevel"] + (["pymetis"] if pymetis_available() else [])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("num_gpus", [2, 4])
def test_metis_balances_compute_and_cuts_fewer_bytes_than_random(backend, num_gpus):
    graph, times = _random_dag(600, seed=num_gpus)
    problem = _problem(graph, _cluster(num_gpus=num_gpus), gpu_s=times, max_groups=200)
    gpus = np.arange(num_gpus)
    devices = MetisPlacer(backend=backend).place(problem, seed=0).devices
    assert set(devices.tolist()) == set(gpus.tolist())
    loads = _part_loads(problem, devices, gpus)
    assert loads.max() <= 1.3 * loads.mean()
    random_cut = np.mean([_cut_bytes(problem, RandomPlacer().place(problem, seed=s).devices)
                          for s in range(3)])
    # A uniform random DAG is an expander: even METIS cuts about 2/3 of what random cuts at 4.
    assert _cut_bytes(problem, devices) < 0.75 * random_cut


@pytest.mark.skipif(not pymetis_available(), reason="pymetis is not installed")
def test_multilevel_cut_is_close_to_metis():
    graph, times = _random_dag(600, seed=4)
    problem = _problem(graph, _cluster(num_gpus=4), gpu_s=times, max_groups=200)
    ours = _cut_bytes(problem, MetisPlacer(backend="multilevel").place(problem).devices)
    metis = _cut_bytes(problem, MetisPlacer(backend="pymetis").place(problem).devices)
    assert ours <= 1.2 * metis


@pytest.mark.skipif(not pymetis_available(), reason="pymetis is not installed")
def test_metis_warnings_do_not_reach_the_users_standard_output(capfd, caplog):
    # A group that outweighs a part (an add_n of 3000 terms on 8 GPUs): METIS printed
    # "***Cannot bisect a graph with 0 vertices!" onto the process's stdout, C's printf,
    # into a report piped from tf-autoplace or a program's own output.
    import logging

    from tf_autoplace.heuristics.metis import _pymetis_partition
    from tf_autoplace.heuristics.multilevel import CSRGraph

    n = 20
    xadj, adjncy = [0], []
    for i in range(n):
        adjncy += [j for j in (i - 1, i + 1) if 0 <= j < n]
        xadj.append(len(adjncy))
    weights = np.ones(n)
    weights[0] = 1e6
    graph = CSRGraph(np.array(xadj), np.array(adjncy), np.ones(len(adjncy)), weights)
    print("before", flush=True)
    with caplog.at_level(logging.DEBUG, logger="tf_autoplace.heuristics.metis"):
        parts = _pymetis_partition(graph, 8, 0.03, seed=0)
    print("after", flush=True)
    assert len(parts) == n
    assert capfd.readouterr().out == "before\nafter\n"
    assert any("Cannot bisect" in r.getMessage() for r in caplog.records)


# setup.py requires pymetis where it has wheels; elsewhere the multilevel partitioner serves.
PYMETIS_REQUIRED = sys.platform == "darwin" or (sys.platform == "linux"
                                                and platform.machine() == "x86_64")


@pytest.mark.skipif(not PYMETIS_REQUIRED, reason="pymetis is not a dependency on this platform")
def test_metis_is_metis_itself_where_pymetis_is_a_dependency():
    assert pymetis_available()
    assert MetisPlacer().resolved_backend() == "pymetis"


def test_metis_falls_back_to_multilevel_and_says_so(monkeypatch):
    from tf_autoplace.heuristics import metis

    monkeypatch.setattr(metis, "pymetis_available", lambda: False)
    graph, times = _random_dag(100, seed=1)
    problem = _problem(graph, _cluster(num_gpus=2), gpu_s=times)
    placer = MetisPlacer()
    assert placer.resolved_backend() == "multilevel"
    placement = placer.place(problem)
    assert any("multilevel partitioner" in note for note in placement.notes)
    assert MetisPlacer(backend="multilevel").place(problem).notes == ()
    with pytest.raises(ConfigError, match="pymetis is not installed .*C compiler"):
        MetisPlacer(backend="pymetis")


def test_metis_rejects_unknown_backend():
    with pytest.raises(ConfigError, match="backend"):
        MetisPlacer(backend="scotch")


# ----------------------------------------------------------------------------------- m_topo
def test_m_topo_cuts_a_chain_into_balanced_contiguous_stages():
    graph = from_edges(12, [(i, i + 1, 100) for i in range(11)])
    problem = _problem(graph, _cluster(num_gpus=3), gpu_s=1e-3)
    devices = MemoryAwareTopoPlacer().place(problem).devices
    assert devices.tolist() == [0] * 4 + [1] * 4 + [2] * 4


def test_m_topo_walks_a_fifo_topological_order_and_can_balance_memory():
    from tf_autoplace.heuristics.topo import fifo_topological_order

    fork = from_edges(5, [(0, 1, 8), (0, 2, 8), (1, 3, 8), (2, 4, 8)])
    assert fifo_topological_order(fork).tolist() == [0, 1, 2, 3, 4]
    rng = np.random.default_rng(0)
    for _ in range(20):  # the compiled walk is Kahn's with a FIFO queue, roots in index order
        edges = {(int(i), j) for j in range(1, 60)
                 for i in rng.integers(0, j, int(rng.integers(0, 4)))}  # repeats, several roots
        graph = from_edges(60, [(i, j, 8) for i, j in sorted(edges, key=lambda e: -e[1])])
        waiting = [0] * 60
        children = [[] for _ in range(60)]
        for src, dst in edges:
            waiting[dst] += 1
            children[src].append(dst)
        order = [i for i in range(60) if waiting[i] == 0]
        for i in order:
            for c in sorted(children[i]):
                waiting[c] -= 1
                if waiting[c] == 0:
                    order.append(c)
        assert fifo_topological_order(graph).tolist() == order
    # A chain with variables of 3, 1, 1, 3 GB and equal op times on two GPUs: compute balance
    # cuts it in the middle; memory balance (share 8 / 2 + 3 GB) after the third op.
    chain = from_edges(4, [(0, 1, 8), (1, 2, 8), (2, 3, 8)],
                       persistent_bytes=[3 * GB, GB, GB, 3 * GB])
    problem = _problem(chain, _cluster(num_gpus=2), gpu_s=1e-3)
    assert MemoryAwareTopoPlacer().place(problem).devices.tolist() == [0, 0, 1, 1]
    assert MemoryAwareTopoPlacer(balance="memory").place(problem).devices.tolist() == [
        0, 0, 0, 1]
    with pytest.raises(ConfigError, match="balance"):
        MemoryAwareTopoPlacer(balance="ops")


def test_m_topo_moves_on_when_memory_is_full():
    # Six 3 GB variables feeding a sum: two GPUs of 10 GB hold three each, not four.
    graph = from_edges(7, [(i, 6, 8) for i in range(6)],
                       persistent_bytes=[3 * GB] * 6 + [0])
    problem = _problem(graph, _cluster(num_gpus=2), gpu_s=[1e-3] * 6 + [1.0])
    # op 6 is the heaviest by far, so the compute share alone would put ops 0..5 on GPU 0.
    placement = MemoryAwareTopoPlacer().place(problem)
    assert np.bincount(placement.devices[:6], minlength=3).tolist() == [3, 3, 0]
    assert (placement.sim.peak_memory <= problem.cluster.memory).all()


# ----------------------------------------------------------------------------------- expert
def test_expert_follows_scopes_gradients_updates_and_neighbours():
    names = ["input", "emb/lookup", "layer_0/w", "layer_0/mm", "layer_1/w", "layer_1/mm",
             "layer_2/mm", "layer_3/mm", "head/logits", "loss", "gradients/layer_3/mm_grad/x",
             "gradients/AddN", "Adam/update_layer_0/w/Apply", "tokenize"]
    n = len(names)
    edges = [(0, 1, 10), (1, 3, 10), (2, 3, 10), (3, 5, 10), (4, 5, 10), (5, 6, 10),
             (6, 7, 10), (7, 8, 10), (8, 9, 10), (9, 10, 10), (10, 11, 10), (11, 12, 10),
             (0, 13, 10)]
    kernels = np.ones((n, 2), bool)
    kernels[13] = [True, False]
    persistent = np.zeros(n, np.int64)
    persistent[[2, 4]] = 1000
    colocation = np.arange(n)
    colocation[12] = 2  # the update of layer_0/w sits with its variable
    graph = from_edges(n, edges, names=names, kernels=kernels, persistent_bytes=persistent,
                       colocation=colocation)
    problem = _problem(graph, _cluster(num_gpus=2), gpu_s=1e-3)
    expert = ExpertPlacer(layer_scopes=["layer_0/", "layer_1/", "layer_2/", "layer_3/"],
                          head_scopes=["emb/"], tail_scopes=["head/"])
    devices = dict(zip(names, expert.place(problem).devices.tolist()))
    # Four stages on two GPUs: contiguous pairs.
    assert [devices[f"layer_{i}/mm"] for i in range(4)] == [0, 0, 1, 1]
    assert devices["emb/lookup"] == 0 and devices["head/logits"] == 1
    assert devices["gradients/layer_3/mm_grad/x"] == 1
    assert devices["Adam/update_layer_0/w/Apply"] == devices["layer_0/w"] == 0
    assert devices["input"] == 0  # nearest placed neighbour: emb/lookup
    assert devices["loss"] == 1  # next to head/logits
    assert devices["tokenize"] == 2  # CPU-only
    # Without scopes the expert derives the stages from names; heads and tails by neighbours.
    derived = dict(zip(names, ExpertPlacer().place(problem).devices.tolist()))
    assert [derived[f"layer_{i}/mm"] for i in range(4)] == [0, 0, 1, 1]
    assert derived["emb/lookup"] == 0 and derived["head/logits"] == 1


def test_expert_derives_heads_and_tails_from_the_forward_pass():
    # Three stages on three GPUs. "attn" reads the last stage and, with more bytes, the first,
    # as NMT's attention reads the top encoder and the bottom decoder layer: a tail (with its
    # weight's read and its constant, whose only consumer it is) where the nearest neighbour
    # would pick the first stage. "emb" feeds the first stage and no stage feeds it (a head);
    # "glue" sits between stages 0 and 1 (neither: nearest neighbour). Backward ops (TF1
    # "gradients/", TF2 "gradient_tape/") and control edges do not make tails.
    names = ["ids", "emb", "layer_0/mm", "glue", "layer_1/mm", "layer_2/mm", "attn/w",
             "attn/read", "attn/scale", "attn", "softmax", "loss",
             "gradient_tape/attn/grad", "gradients/softmax_grad/x", "init"]
    index = {name: i for i, name in enumerate(names)}
    data = [("ids", "emb"), ("emb", "layer_0/mm"), ("layer_0/mm", "glue"),
            ("glue", "layer_1/mm"), ("layer_1/mm", "layer_2/mm"), ("layer_2/mm", "attn"),
            ("layer_0/mm", "attn"),
            ("attn/w", "attn/read"), ("attn/read", "attn"), ("attn/scale", "attn"),
            ("attn", "softmax"), ("softmax", "loss"), ("loss", "gradient_tape/attn/grad"),
            ("gradient_tape/attn/grad", "gradients/softmax_grad/x")]
    size = {"layer_0/mm": 10**7}
    graph = from_edges(len(names), [(index[a], index[b], size.get(a, 10**6)) for a, b in data],
                       names=names, control=[(index["layer_2/mm"], index["init"])])
    problem = _problem(graph, _cluster(num_gpus=3), gpu_s=1e-3)
    derived = dict(zip(names, ExpertPlacer().place(problem).devices.tolist()))
    assert [derived[f"layer_{i}/mm"] for i in range(3)] == [0, 1, 2]
    for name in ("attn/w", "attn/read", "attn/scale", "attn", "softmax", "loss"):
        assert derived[name] == 2, name
    assert derived["ids"] == derived["emb"] == 0
    assert derived["glue"] in (0, 1)
    # A head scope given: nothing is derived, and the unscoped attention goes by neighbours.
    given = dict(zip(names, ExpertPlacer(head_scopes=["emb"]).place(problem).devices.tolist()))
    assert given["emb"] == 0 and given["attn"] == 0


def test_expert_reads_a_graph_once_for_every_cluster_and_setting():
    # What the expert reads off the names is kept per graph (best_heuristic runs it on every
    # prefix of the devices): each setting and cluster, run one after the other on one graph,
    # places as on a fresh copy of the graph, which has nothing kept.
    import dataclasses

    # "late" is a tail when layer_2 is in the last stage, else it follows emb's many bytes.
    names = ["emb", "layer_0/a", "layer_1/a", "layer_2/a", "layer_3/a", "attn", "loss", "late"]
    edges = [(i, i + 1, 10**6) for i in range(6)] + [(0, 7, 10**8), (3, 7, 10**6)]
    graph = from_edges(len(names), edges, names=names)
    settings = [dict(), dict(layer_scopes=[("layer_0/", "layer_1/"), ("layer_2/", "layer_3/")]),
                dict(layer_scopes=["layer_0/", "layer_1/", "layer_2/", "layer_3/"]),
                dict(layer_scopes=["layer_0/", "layer_1/", "layer_2/", "layer_3/"],
                     tail_scopes=["emb"]), dict()]
    for num_gpus in (4, 2, 3):
        for kwargs in settings:
            devices = ExpertPlacer(**kwargs).propose(
                _problem(graph, _cluster(num_gpus=num_gpus), gpu_s=1e-3))
            fresh = ExpertPlacer(**kwargs).propose(
                _problem(dataclasses.replace(graph), _cluster(num_gpus=num_gpus), gpu_s=1e-3))
            np.testing.assert_array_equal(devices, fresh)


def test_expert_without_layers_is_the_single_gpu_placement():
    graph, _ = _random_dag(30, seed=1)
    problem = _problem(graph, _cluster(num_gpus=2), gpu_s=1e-3)
    assert (ExpertPlacer().place(problem).devices == 0).all()
    assert (ExpertPlacer(layer_scopes=()).place(problem).devices == 0).all()


def test_expert_pipeline_splits_heads_and_tails():
    expert = ExpertPlacer.from_pipeline(
        ("encoder/embedding/", "encoder/layer_0/", "encoder/layer_1/", "decoder/embedding/",
         "decoder/layer_0/", "attention/", "decoder/layer_1/", "softmax/"))
    assert expert.layer_scopes == (("encoder/layer_0/", "decoder/layer_0/"),
                                   ("encoder/layer_1/", "decoder/layer_1/"))
    assert expert.head_scopes == ("encoder/embedding/", "decoder/embedding/")
    assert expert.tail_scopes == ("attention/", "softmax/")
    wavenet = ExpertPlacer.from_pipeline(("input/", "stack_0/layer_0/", "stack_0/layer_1/",
                                          "stack_1/layer_0/", "softmax/"))
    assert len(wavenet.layer_scopes) == 3
    assert wavenet.head_scopes == ("input/",) and wavenet.tail_scopes == ("softmax/",)
    with pytest.raises(ConfigError):
        ExpertPlacer(head_scopes="emb/")


# ------------------------------------------------------------------------- small zoo model
@pytest.fixture(scope="module")
def small_nmt():
    from tf_autoplace import zoo
    from tf_autoplace.graph import ingest
    from tf_autoplace.pipeline.prepare import build_problem

    model = zoo.build("nmt", layers=2, length=4, batch=4, hidden=32, embedding_dim=32,
                      vocab=100)
    cluster = resolve_cluster("k80x2")
    problem, _ = build_problem(ingest.load_meta_graph(model.graph), cluster)
    return model, problem


@pytest.mark.parametrize("name", BASELINES)
def test_baselines_place_a_small_nmt(small_nmt, name):
    _, problem = small_nmt
    placement = get_placer(name).place(problem, seed=0)
    assert check_placement(problem, placement.devices) == []
    assert np.isfinite(placement.sim.makespan)


def test_expert_places_layer_i_on_gpu_i_for_a_small_nmt(small_nmt):
    model, problem = small_nmt
    names = problem.graph.names
    for expert in (ExpertPlacer.from_pipeline(model.layer_scopes), ExpertPlacer()):
        devices = expert.place(problem).devices
        by_prefix = {}
        for prefix in ("encoder/layer_0/", "decoder/layer_0/", "encoder/layer_1/",
                       "decoder/layer_1/", "gradients/encoder/layer_1/",
                       "gradients/decoder/layer_0/"):
            ops = [i for i, name in enumerate(names) if name.startswith(prefix)]
            assert ops, prefix
            by_prefix[prefix] = set(devices[ops].tolist())
        assert by_prefix["encoder/layer_0/"] == by_prefix["decoder/layer_0/"] == {0}
        assert by_prefix["encoder/layer_1/"] == by_prefix["decoder/layer_1/"] == {1}
        assert by_prefix["gradients/encoder/layer_1/"] == {1}
        assert by_prefix["gradients/decoder/layer_0/"] == {0}
    # Heads and tails: from the model's scopes, and derived from the graph without them (the
    # attention and the softmax read the top layers; the embeddings feed the bottom ones). Ops
    # with no edge at all (dead constants) go to the first GPU either way.
    graph = problem.graph
    connected = np.zeros(graph.num_ops, bool)
    connected[np.concatenate([graph.edge_src, graph.edge_dst])] = True
    for expert in (ExpertPlacer.from_pipeline(model.layer_scopes), ExpertPlacer()):
        devices = expert.place(problem).devices
        for prefix, gpu in (("encoder/embedding/", 0), ("decoder/embedding/", 0),
                            ("attention/", 1), ("softmax/", 1), ("gradients/attention/", 1),
                            ("gradients/softmax/", 1)):
            ops = [i for i, name in enumerate(names) if name.startswith(prefix) and connected[i]]
            assert ops and set(devices[ops].tolist()) == {gpu}, prefix


# --------------------------------------------------------------------------------- m-SCT
@pytest.mark.parametrize("seed", range(4))
def test_m_sct_favourite_children_are_a_matching_of_edges_between_groups(seed):
    problem = problems.training_problem(30, seed, num_gpus=2 + 2 * (seed % 2))
    favourite, status = favourite_children(problem)
    assert status == "optimal"
    chosen = np.flatnonzero(favourite >= 0)
    assert len(chosen) > 0
    children = favourite[chosen]
    assert len(set(children.tolist())) == len(children)  # at most one favourite parent
    labels = problem.grouping.labels
    assert (labels[chosen] != labels[children]).all()
    g = problem.graph
    edges = set(zip(np.concatenate([g.edge_src, g.ctrl_src]).tolist(),
                    np.concatenate([g.edge_dst, g.ctrl_dst]).tolist()))
    assert all((int(i), int(j)) in edges for i, j in zip(chosen, children))


def test_m_sct_keeps_a_favourite_child_on_its_parents_device():
    # A fork: op 0 sends 1 GB to op 1 and a control dummy to op 2 (1 ms each, 2 GPUs at
    # 1 GB/s). The LP can zero only one of the two transfers, the larger: op 1 is 0's
    # favourite child, placed with it.
    graph = from_edges(3, [(0, 1, 10**9)], control=[(0, 2)])
    problem = _problem(graph, _cluster(cpu=False), gpu_s=1e-3)
    favourite, status = favourite_children(problem)
    assert status == "optimal" and favourite.tolist() == [1, -1, -1]
    devices = list_schedule(problem, favourite)
    assert devices[1] == devices[0]


def test_m_sct_without_edges_between_groups_is_m_etf():
    graph = from_edges(4, [(0, 1, 10**6), (2, 3, 10**6)], colocation=[0, 0, 2, 2])
    problem = _problem(graph, _cluster(), gpu_s=1e-3)
    favourite, status = favourite_children(problem)
    assert status == "no edge between groups" and (favourite == -1).all()
    assert np.array_equal(get_placer("m_sct").propose(problem), get_placer("m_etf").propose(problem))


def _upward_rank_reference(problem):
    """The b-level as NumPy computes it op by op (what the compiled loop replaced)."""
    from tf_autoplace.heuristics.metf import _in_edges

    graph, cluster = problem.graph, problem.cluster
    mean_time = np.nanmean(np.where(problem.allowed, problem.op_time, np.nan), axis=1)
    off = ~np.eye(cluster.num_devices, dtype=bool)
    comm = cluster.latency[off].mean() + _in_edges(graph)[6] / cluster.bandwidth[off].mean()
    *_, dst, src, _ = _in_edges(graph)
    order = np.argsort(src, kind="stable")
    starts = np.searchsorted(src[order], np.arange(graph.num_ops + 1))
    rank = mean_time.copy()
    for i in graph.topological_order()[::-1].tolist():
        lo, hi = starts[i], starts[i + 1]
        if hi > lo:
            rank[i] += float(np.max(comm[order][lo:hi] + rank[dst[order][lo:hi]]))
    return rank


@pytest.mark.parametrize("seed", range(5))
def test_upward_rank_equals_numpys_op_by_op(seed):
    from tf_autoplace.heuristics.metf import upward_rank

    problem = problems.random_problem(300, seed, num_gpus=1 + seed % 3)
    np.testing.assert_array_equal(upward_rank(problem), _upward_rank_reference(problem))


def test_upward_rank_of_an_op_no_device_may_run_is_nan_without_a_warning():
    # best_heuristic's prefixes of a cluster can leave an op (pinned, or a kernel only on a
    # device outside the prefix) no device: numpy's "Mean of empty slice" warning became an
    # exception under -W error.
    import dataclasses
    import warnings

    from tf_autoplace.heuristics.metf import upward_rank

    problem = problems.random_problem(30, 0, num_gpus=2)
    op_time = problem.op_time.copy()
    op_time[5, :] = np.inf
    op_time[5, 1] = 1e-3  # only on GPU 1
    sub = dataclasses.replace(problem, op_time=op_time).restricted([0, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rank = upward_rank(sub)
        # The same for a group's mean time (the expert and METIS use it): 0/0 warned.
        mean = group_compute_time(sub, np.array([0]))
        placed = get_placer("best_heuristic").place(dataclasses.replace(
            problem, op_time=op_time), seed=0)
    assert np.isnan(rank[5]) and np.isfinite(rank[29])
    assert np.isnan(mean[sub.grouping.labels[5]]) and np.isfinite(mean).sum() >= 1
    assert placed.devices[5] == 1  # (placed, METIS included, without a warning)


def test_best_heuristic_falls_back_to_all_on_the_host_when_nothing_else_fits():
    # A 1 MB GPU and a host with 1.1x the all-on-host peak: every heuristic's placement
    # overflows, and the repair moves no group whose outputs and variables exceed the host's
    # room at once; all on the host fits. best_heuristic (and auto, which starts from it)
    # used to raise InfeasiblePlacementError.
    graph = problems.random_dag(120, 308)
    gpu_s = np.random.default_rng(0).lognormal(np.log(1e-3), 1.0, 120)

    def problem_with(host_bytes):
        cluster = Cluster.uniform([Device("/device:GPU:0", "GPU", memory_bytes=10**6),
                                   Device("/device:CPU:0", "CPU", memory_bytes=host_bytes)],
                                  bandwidth_gbps=1.0, latency_us=10.0)
        return _problem(graph, cluster, gpu_s=gpu_s)

    roomy = problem_with(10**11)
    peak = int(roomy.simulator.run(CpuOnlyPlacer().propose(roomy)).peak_memory[1])
    problem = problem_with(int(1.1 * peak))
    for name in ("best_heuristic", "auto"):
        placer = get_placer(name)
        devices = placer.place(problem, seed=0).devices
        assert check_placement(problem, devices) == []
        assert (problem.simulator.run(devices).peak_memory <= problem.cluster.memory).all()
        if name == "best_heuristic":
            assert any("all on the CPU host does" in note for note in placer.notes)


# A GPU behind a slow link (0.5 GB/s) and a 400 MB tensor every GPU placement sends: all on the
# host (7.4 ms) beats every heuristic's placement (841 ms), and auto, which searched from those
# and stopped on its five groups' local optimum, returned 841 ms too.
SLOW_LINK_SPEC = """default_latency_us: 25 default_bandwidth_gbps: 0.5
device { name: "/device:GPU:0" kind: "GPU" memory_bytes: 10700000000 speed: 0.25 }
device { name: "/device:CPU:0" kind: "CPU" memory_bytes: 100000000000 }"""
SLOW_LINK_GRAPH = """format_version: 1
op { name: "o0" type: "Op" output_bytes: 419430400 time { device_kind: "GPU" seconds: 1e-05 }
     time { device_kind: "CPU" seconds: 0 } }
op { name: "o1" type: "Op" output_bytes: 8 time { device_kind: "GPU" seconds: 0.0001 } }
op { name: "o2" type: "Op" output_bytes: 1048576 time { device_kind: "GPU" seconds: 0.001 }
     time { device_kind: "CPU" seconds: 0.001 } input { op: "o0" } input { op: "o1" }
     colocation_group: "g2" }
op { name: "o3" type: "Op" output_bytes: 8 time { device_kind: "GPU" seconds: 1e-05 }
     time { device_kind: "CPU" seconds: 0.005 } input { op: "o0" } input { op: "o2" } }
op { name: "o4" type: "Op" output_bytes: 0 time { device_kind: "CPU" seconds: 0 }
     input { op: "o0" } input { op: "o1" } input { op: "o2" } input { op: "o3" }
     colocation_group: "g1" }
op { name: "o5" type: "Op" output_bytes: 8 time { device_kind: "GPU" seconds: 0 }
     time { device_kind: "CPU" seconds: 0.001 } input { op: "o2" } input { op: "o4" }
     colocation_group: "g2" }"""


def test_all_on_the_host_competes_where_it_is_the_fastest(tmp_path):
    import tf_autoplace

    spec, graph = tmp_path / "slow.pbtxt", tmp_path / "g.costgraph.pbtxt"
    spec.write_text(SLOW_LINK_SPEC)
    graph.write_text(SLOW_LINK_GRAPH)
    steps = {name: tf_autoplace.place_cost_graph(str(graph), cluster=str(spec), placer=name,
                                                 progress=False).step_time_s
             for name in ("cpu_only", "best_heuristic", "auto", "m_etf")}
    assert steps["m_etf"] > 0.8 and steps["cpu_only"] < 0.008
    assert steps["best_heuristic"] == steps["auto"] == steps["cpu_only"]
    # Where it is slower, it is no candidate: it never takes a start of auto's race.
    problem = problems.random_problem(120, 3)
    ranked = get_placer("best_heuristic").ranked(problem)
    host = problem.simulator.run(CpuOnlyPlacer().propose(problem)).makespan
    assert host > ranked[0].step_s and not any(c.label == "cpu_only" for c in ranked)


def test_all_on_the_host_repaired_when_the_host_alone_overflows(tmp_path):
    """A 1 GB variable with a 400 MB output fits no 1.2 GB GPU, and all on the 2 GB host is
    just over (2.02 GB): every placer said nothing fits, though a 400 MB op on a GPU leaves
    the host 1.6 GB. All on the host, with groups moved to GPUs with room, is that."""
    import tf_autoplace

    spec, graph = tmp_path / "tight.pbtxt", tmp_path / "g.costgraph.pbtxt"
    spec.write_text("default_latency_us: 1000 default_bandwidth_gbps: 100\n" + "".join(
        f'device {{ name: "/device:GPU:{i}" kind: "GPU" memory_bytes: 1200000000 }}\n'
        for i in range(3)) + 'device { name: "/device:CPU:0" kind: "CPU" '
                             'memory_bytes: 2000000000 }')
    graph.write_text("""format_version: 1
op { name: "o0" type: "Op" output_bytes: 419430400 time { device_kind: "GPU" seconds: 0.0001 }
     time { device_kind: "CPU" seconds: 0.0001 } }
op { name: "o1" type: "Op" output_bytes: 419430400 persistent_bytes: 1073741824
     time { device_kind: "GPU" seconds: 0.005 } time { device_kind: "CPU" seconds: 0 } }
op { name: "o2" type: "Op" output_bytes: 0 persistent_bytes: 104857600
     time { device_kind: "CPU" seconds: 0.0001 } input { op: "o0" } }""")
    for name in ("best_heuristic", "auto"):
        report = tf_autoplace.place_cost_graph(str(graph), cluster=str(spec), placer=name,
                                               progress=False)
        assert report.assignment["o1"].endswith("CPU:0") and "GPU" in report.assignment["o0"]
    assert any("with groups moved to GPUs with room, does" in n for n in report.notes)
