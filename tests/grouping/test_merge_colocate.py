"""Tests for tf_autoplace.grouping.merge_colocate (Merge-and-Colocate, Placeto A.6)."""

import numpy as np
import pytest

from tf_autoplace.errors import ConfigError, InfeasiblePlacementError
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.grouping import (
    Grouping,
    GroupingConfig,
    group_graph,
    merge_and_colocate,
    merge_and_colocate_levels,
)

CPU = (True, False)
GPU = (False, True)
BOTH = (True, True)

# 0 -100-> 1 -10-> 2 -20-> 3 -100-> 4 ; costs (output bytes) 100, 10, 20, 100, 0.
CHAIN = [(0, 1, 100), (1, 2, 10), (2, 3, 20), (3, 4, 100)]


def _random_graph(rng: np.random.Generator, n: int, *, colocate: bool = False,
                  mixed_kernels: bool = False, extra_edges: float = 1.0,
                  max_bytes: int = 1 << 20):
    """A random weakly connected DAG: op i > 0 reads from one earlier op (mostly a recent one)
    plus on average ``extra_edges`` more. Optionally random colocation groups (of 1-3 ops that
    share a kernel row) and random kernel rows. Edge bytes are drawn from [0, max_bytes)."""
    edges = []
    for i in range(1, n):
        preds = {int(max(0, i - 1 - rng.geometric(0.2)))}
        for _ in range(rng.poisson(extra_edges)):
            preds.add(int(rng.integers(0, i)))
        edges += [(p, i, int(rng.integers(0, max_bytes))) for p in sorted(preds)]
    colocation = np.arange(n)
    if colocate:
        for i in range(n):
            if rng.random() < 0.3:
                colocation[i] = colocation[int(rng.integers(0, n))]
    kernels = np.ones((n, 2), bool)
    if mixed_kernels:
        rows = np.array([CPU, GPU, BOTH])[rng.choice(3, size=n, p=[0.2, 0.2, 0.6])]
        kernels = rows[colocation]  # colocated ops share their group's row ...
        extra = rng.random(n) < 0.2
        kernels[extra] = True       # ... or allow more
    return from_edges(n, edges, colocation=colocation, kernels=kernels)


def _labels_valid(graph, grouping):
    labels = grouping.labels
    # Every colocation group lies in one group.
    for c in np.unique(graph.colocation):
        assert len(np.unique(labels[graph.colocation == c])) == 1
    # kernels row = AND over members, and non-empty.
    for g in range(grouping.num_groups):
        members = grouping.members(g)
        np.testing.assert_array_equal(grouping.kernels[g], graph.kernels[members].all(axis=0))
        assert grouping.kernels[g].any()


# ------------------------------------------------------------------------------------ config
@pytest.mark.parametrize("kwargs, text", [
    ({"max_groups": 0}, "0"), ({"max_groups": -3}, "-3"), ({"max_groups": 2.5}, "2.5"),
    ({"max_groups": True}, "True"), ({"cost_threshold_bytes": -1}, "-1"),
    ({"cost_threshold_bytes": 1.5}, "1.5"),
])
def test_config_rejects_bad_values_and_repeats_them(kwargs, text):
    with pytest.raises(ConfigError, match=f"got {text}"):
        GroupingConfig(**kwargs)


def test_config_defaults():
    config = GroupingConfig()
    assert config.max_groups == 2000 and config.cost_threshold_bytes is None
    GroupingConfig(max_groups=np.int64(5), cost_threshold_bytes=0)


# ------------------------------------------------------------------------ hand-checked order
def test_chain_lowest_cost_merges_first_into_its_predecessor():
    graph = from_edges(5, CHAIN)
    np.testing.assert_array_equal(graph.output_bytes, [100, 10, 20, 100, 0])
    # First merge: op4 (cost 0) into its producer op3.
    g4 = merge_and_colocate(graph, GroupingConfig(max_groups=4))
    np.testing.assert_array_equal(g4.labels, [0, 1, 2, 3, 3])
    # Second: op1 (cost 10) into its producer op0, not into its consumer op2.
    g3 = merge_and_colocate(graph, GroupingConfig(max_groups=3))
    np.testing.assert_array_equal(g3.labels, [0, 0, 1, 2, 2])
    # Third: op2 (cost 20) into op0+op1.
    g2 = merge_and_colocate(graph, GroupingConfig(max_groups=2))
    np.testing.assert_array_equal(g2.labels, [0, 0, 0, 1, 1])
    g1 = merge_and_colocate(graph, GroupingConfig(max_groups=1))
    np.testing.assert_array_equal(g1.labels, [0, 0, 0, 0, 0])


def test_prefers_the_producer_of_the_largest_input():
    # 0 -50-> 2, 1 -80-> 2, 2 -5-> 3. op3 (0) joins op2; {2,3} (5) then joins op1 (80 > 50).
    graph = from_edges(4, [(0, 2, 50), (1, 2, 80), (2, 3, 5)])
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=2))
    np.testing.assert_array_equal(grouping.labels, [0, 1, 1, 1])


def test_equal_inputs_break_ties_by_lowest_index():
    # As above with 50 bytes from each producer: {2,3} joins op0.
    graph = from_edges(4, [(0, 2, 50), (1, 2, 50), (2, 3, 5)])
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=2))
    np.testing.assert_array_equal(grouping.labels, [0, 1, 0, 0])


def test_equal_costs_break_ties_by_lowest_index():
    # Two sinks of cost 0 (ops 1 and 2): op1 goes first.
    graph = from_edges(3, [(0, 1, 7), (0, 2, 7)])
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=2))
    np.testing.assert_array_equal(grouping.labels, [0, 0, 1])


def test_incompatible_predecessor_falls_back_to_successor():
    kernels = np.array([GPU, CPU, BOTH, CPU, GPU])
    graph = from_edges(5, CHAIN, kernels=kernels)
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=1))
    # op4 (GPU) cannot join op3 (CPU): left alone. op1 (CPU) cannot join op0 (GPU): joins op2,
    # then {1,2} (30) joins op3 (CPU); op0 and op4 have no compatible neighbour left.
    np.testing.assert_array_equal(grouping.labels, [0, 1, 1, 1, 2])
    np.testing.assert_array_equal(grouping.kernels, [GPU, CPU, GPU])
    assert grouping.num_groups == 3


# ------------------------------------------------------------------------------- group count
@pytest.mark.parametrize("max_groups", [1, 7, 50, 199, 200, 500])
def test_reaches_max_groups_when_nothing_blocks(max_groups):
    graph = _random_graph(np.random.default_rng(0), 200)
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=max_groups))
    assert grouping.num_groups == min(max_groups, 200)
    _labels_valid(graph, grouping)


@pytest.mark.parametrize("seed, mixed", [(0, False), (1, True), (2, True)])
def test_levels_in_one_pass_equal_one_call_per_level_and_nest(seed, mixed):
    graph = _random_graph(np.random.default_rng(seed), 300, colocate=True, mixed_kernels=mixed)
    levels = [400, 5, 64, 200, 1, 64]
    together = merge_and_colocate_levels(graph, levels)
    for level, grouping in zip(levels, together):
        alone = merge_and_colocate(graph, GroupingConfig(max_groups=level))
        np.testing.assert_array_equal(grouping.labels, alone.labels)
        np.testing.assert_array_equal(grouping.kernels, alone.kernels)
    fine, coarse = together[2], together[1]  # 64 nests in 5: each fine group in one coarse
    assert all(len(set(coarse.labels[fine.labels == g])) == 1 for g in range(fine.num_groups))


def test_spare_levels_count_groups_beyond_those_that_never_merge():
    graph = _random_graph(np.random.default_rng(3), 300, mixed_kernels=True)
    final = merge_and_colocate(graph, GroupingConfig(max_groups=1)).num_groups
    assert final > 1  # mixed kernel kinds leave groups that never merge
    levels = [1, 7, 40, 10_000]
    for level, grouping in zip(levels, merge_and_colocate_levels(graph, levels, spare=True)):
        assert grouping.num_groups == min(final + level, 300)
        alone = merge_and_colocate(graph, GroupingConfig(max_groups=grouping.num_groups))
        np.testing.assert_array_equal(grouping.labels, alone.labels)


def test_no_levels_give_no_groupings():
    graph = _random_graph(np.random.default_rng(4), 20)
    assert merge_and_colocate_levels(graph, []) == []
    assert merge_and_colocate_levels(graph, [], spare=True) == []


def test_kernel_constraints_block_merges():
    graph = from_edges(2, [(0, 1, 10)], kernels=np.array([CPU, GPU]))
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=1))
    assert grouping.num_groups == 2
    # A random graph with mixed kernel kinds cannot collapse to one group.
    graph = _random_graph(np.random.default_rng(1), 300, mixed_kernels=True)
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=1))
    assert grouping.num_groups > 1
    _labels_valid(graph, grouping)


def test_isolated_op_is_left_alone():
    graph = from_edges(4, [(0, 1, 10), (1, 2, 10)])  # op3 has no edge
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=1))
    np.testing.assert_array_equal(grouping.labels, [0, 0, 0, 1])


def test_control_edges_make_neighbours():
    # Without the control edge op2 would be isolated and stay alone.
    graph = from_edges(3, [(0, 1, 10)], control=[(2, 0)])
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=1))
    np.testing.assert_array_equal(grouping.labels, [0, 0, 0])


def test_no_merge_when_colocation_groups_already_fit():
    graph = from_edges(4, CHAIN[:3], colocation=[5, 5, 9, 2])
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=3))
    np.testing.assert_array_equal(grouping.labels, [0, 0, 1, 2])


# ---------------------------------------------------------------------------- constraints
@pytest.mark.parametrize("seed", range(6))
def test_random_graphs_keep_colocation_and_kernels(seed):
    rng = np.random.default_rng(seed)
    graph = _random_graph(rng, 400, colocate=True, mixed_kernels=True)
    num_coloc = len(np.unique(graph.colocation))
    for max_groups in (1, 20, 150):
        grouping = merge_and_colocate(graph, GroupingConfig(max_groups=max_groups))
        _labels_valid(graph, grouping)
        assert grouping.num_groups <= num_coloc
        assert grouping.num_groups >= min(max_groups, num_coloc)
        # Labels are dense and numbered by first op.
        firsts = [grouping.members(g)[0] for g in range(grouping.num_groups)]
        assert firsts == sorted(firsts) and firsts[0] == 0


def test_colocation_group_without_common_kernel_is_infeasible():
    graph = from_edges(3, [(0, 1, 1), (1, 2, 1)], colocation=[0, 1, 0],
                       kernels=np.array([CPU, BOTH, GPU]))
    with pytest.raises(InfeasiblePlacementError, match="op0.*op2"):
        merge_and_colocate(graph)


# ------------------------------------------------------------------------------ threshold C
def test_cost_threshold_stops_merging():
    graph = from_edges(5, CHAIN)  # costs 100, 10, 20, 100, 0
    # C = 15: op4 (0) joins op3, op1 (10) joins op0; op2 (20) is not below C.
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=1, cost_threshold_bytes=15))
    np.testing.assert_array_equal(grouping.labels, [0, 0, 1, 2, 2])
    # C = 0: nothing costs below 0.
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=1, cost_threshold_bytes=0))
    assert grouping.num_groups == 5
    # N still applies when C is set.
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=4, cost_threshold_bytes=10**9))
    assert grouping.num_groups == 4
    # A bound beyond int64 (the compiled loop's integers) is no bound, not an OverflowError.
    assert merge_and_colocate(graph, GroupingConfig(4, cost_threshold_bytes=10**30)).num_groups == 4
    assert merge_and_colocate(graph, GroupingConfig(10**30)).num_groups == 5


def test_cost_threshold_on_random_graph():
    graph = _random_graph(np.random.default_rng(3), 300)
    threshold = 1 << 21
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=1,
                                                        cost_threshold_bytes=threshold))
    grouped = group_graph(graph, grouping)
    assert 1 < grouping.num_groups < 300
    # Everything connected and compatible: every group left ended at or above C.
    assert (grouped.output_bytes >= threshold).all()


# --------------------------------------------------------------------------- determinism
def test_deterministic():
    graphs = [_random_graph(np.random.default_rng(7), 500, colocate=True, mixed_kernels=True)
              for _ in range(2)]
    config = GroupingConfig(max_groups=40)
    first = merge_and_colocate(graphs[0], config)
    for graph in graphs:
        again = merge_and_colocate(graph, config)
        np.testing.assert_array_equal(first.labels, again.labels)
        np.testing.assert_array_equal(first.kernels, again.kernels)


# ---------------------------------------------------------------------- Grouping and expand
def test_expand_and_members():
    graph = _random_graph(np.random.default_rng(4), 100, colocate=True)
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=10))
    placement = np.random.default_rng(5).integers(0, 4, size=grouping.num_groups)
    per_op = grouping.expand(placement)
    assert per_op.shape == (100,)
    for g in range(grouping.num_groups):
        assert (per_op[grouping.members(g)] == placement[g]).all()
    np.testing.assert_array_equal(per_op, placement[grouping.labels])
    all_members = np.sort(np.concatenate([grouping.members(g)
                                          for g in range(grouping.num_groups)]))
    np.testing.assert_array_equal(all_members, np.arange(100))
    np.testing.assert_array_equal(grouping.sizes(),
                                  np.bincount(grouping.labels, minlength=grouping.num_groups))
    with pytest.raises(ConfigError, match=r"\(3,\)"):
        grouping.expand(np.zeros(3, int))
    with pytest.raises(ConfigError):
        grouping.members(grouping.num_groups)


def test_grouping_from_labels_and_validation():
    graph = from_edges(4, CHAIN[:3], kernels=np.array([CPU, BOTH, GPU, BOTH]))
    grouping = Grouping.from_labels(graph, [7, 3, 7, 3])
    np.testing.assert_array_equal(grouping.labels, [0, 1, 0, 1])
    np.testing.assert_array_equal(grouping.kernels, [(False, False), BOTH])
    assert not grouping.labels.flags.writeable
    with pytest.raises(ConfigError, match="every id"):
        Grouping(labels=[0, 2], num_groups=2, kernels=np.ones((2, 2), bool))
    with pytest.raises(ConfigError, match="rows"):
        Grouping(labels=[0, 1], num_groups=2, kernels=np.ones((3, 2), bool))


# ---------------------------------------------------------------------------- group_graph
def test_group_graph_by_hand():
    # Tensor of op0 (size 8) read by ops 1 and 2 (same group): one transfer of 8 bytes.
    # op1 -> op3 (4 bytes) plus a control edge op2 -> op3 add up to one edge of 4 bytes; the
    # control edge op3 -> op4 lies inside a group and disappears.
    graph = from_edges(5, [(0, 1, 8), (0, 2, 8), (1, 3, 4)], control=[(2, 3), (3, 4)],
                       persistent_bytes=[1, 2, 3, 4, 5])
    grouping = Grouping.from_labels(graph, [0, 1, 1, 2, 2])
    grouped = group_graph(graph, grouping)
    assert grouped.num_groups == 3
    np.testing.assert_array_equal(grouped.num_ops, [1, 2, 2])
    np.testing.assert_array_equal(grouped.output_bytes, [8, 4, 0])
    np.testing.assert_array_equal(grouped.persistent_bytes, [1, 5, 9])
    np.testing.assert_array_equal(grouped.edge_src, [0, 1])
    np.testing.assert_array_equal(grouped.edge_dst, [1, 2])
    np.testing.assert_array_equal(grouped.edge_bytes, [8, 4])


def test_group_graph_control_only_edge_has_zero_bytes():
    graph = from_edges(2, [], control=[(0, 1)])
    grouped = group_graph(graph, Grouping.from_labels(graph, [0, 1]))
    np.testing.assert_array_equal(grouped.edge_src, [0])
    np.testing.assert_array_equal(grouped.edge_dst, [1])
    np.testing.assert_array_equal(grouped.edge_bytes, [0])


def test_group_graph_on_random_graph():
    graph = _random_graph(np.random.default_rng(6), 300, colocate=True)
    grouping = merge_and_colocate(graph, GroupingConfig(max_groups=30))
    grouped = group_graph(graph, grouping)
    assert grouped.output_bytes.sum() == graph.output_bytes.sum()
    assert (grouped.edge_src != grouped.edge_dst).all()
    pairs = grouped.edge_src.astype(np.int64) * 30 + grouped.edge_dst
    assert (np.diff(pairs) > 0).all()  # sorted, unique
    # from_edges gives one tensor per op: bytes between groups = that tensor once per group.
    labels = grouping.labels
    expected = {}
    seen = set()
    for t, d in zip(graph.edge_tensor.tolist(), graph.edge_dst.tolist()):
        s, dg = labels[graph.tensor_op[t]], labels[d]
        if s != dg and (t, dg) not in seen:
            seen.add((t, dg))
            expected[(s, dg)] = expected.get((s, dg), 0) + int(graph.tensor_bytes[t])
    got = dict(zip(zip(grouped.edge_src.tolist(), grouped.edge_dst.tolist()),
                   grouped.edge_bytes.tolist()))
    assert got == expected
    with pytest.raises(ConfigError, match="covers"):
        group_graph(from_edges(3, []), grouping)


# ------------------------------------------------------------------- naive reference check
def _naive_merge_and_colocate(graph, max_groups, threshold):
    """The module doc's rules, recomputed from scratch at every step (slow, obviously right)."""
    _, first, atom = np.unique(graph.colocation, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))
    node = rank[atom]  # op -> current node, named by its lowest atomic index
    src = np.concatenate([graph.edge_src, graph.ctrl_src])
    dst = np.concatenate([graph.edge_dst, graph.ctrl_dst])
    nbytes = np.concatenate([graph.tensor_bytes[graph.edge_tensor],
                             np.zeros(len(graph.ctrl_src), np.int64)])
    while len(np.unique(node)) > max_groups:
        best = None
        for x in np.unique(node):
            members = node == x
            kern = graph.kernels[members].all(axis=0)
            choice = None
            for side_from, side_to in ((src, dst), (dst, src)):  # predecessors, then successors
                weights = {}
                for f, t, b in zip(node[side_from], node[side_to], nbytes):
                    if t == x and f != x:
                        weights[f] = weights.get(f, 0) + int(b)
                ok = [(-w, nb) for nb, w in weights.items()
                      if (kern & graph.kernels[node == nb].all(axis=0)).any()]
                if ok:
                    choice = min(ok)[1]
                    break
            cost = int(graph.output_bytes[members].sum())
            if choice is not None and (best is None or (cost, x) < best[:2]):
                best = (cost, x, choice)
        if best is None or (threshold is not None and best[0] >= threshold):
            break
        _, x, target = best
        node[node == x] = node[node == target] = min(x, target)
    return node


@pytest.mark.parametrize("seed", range(8))
def test_matches_naive_reference(seed):
    rng = np.random.default_rng(100 + seed)
    graph = _random_graph(rng, 40, colocate=seed % 2 == 0, mixed_kernels=seed % 4 < 2,
                          extra_edges=1.5, max_bytes=4 if seed % 3 == 0 else 1 << 20)
    cases = ((1, None), (10, None), (25, None), (1, 1 << 19), (5, 1 << 21), (1, 3))
    for max_groups, threshold in cases:
        fast = merge_and_colocate(graph, GroupingConfig(max_groups, threshold))
        slow = Grouping.from_labels(graph, _naive_merge_and_colocate(graph, max_groups,
                                                                     threshold))
        np.testing.assert_array_equal(fast.labels, slow.labels)


@pytest.mark.parametrize("seed", range(3))
def test_many_kernel_kinds_match_the_naive_reference(seed):
    # A graph partitioned by a placement on a large cluster has one kind per device: kinds
    # beyond the first 64 (a word of bits) must keep apart what they keep apart.
    rng = np.random.default_rng(200 + seed)
    base = _random_graph(rng, 40, extra_edges=1.5)
    kinds = np.zeros((40, 130), bool)
    kinds[np.arange(40), rng.choice([5, 64, 70, 129], size=40)] = True
    kinds[rng.random(40) < 0.2, 129] = True  # some ops could go to two of them
    graph = base.with_kernels(kinds, [f"k{j}" for j in range(130)])
    for max_groups in (1, 8):
        fast = merge_and_colocate(graph, GroupingConfig(max_groups))
        slow = Grouping.from_labels(graph, _naive_merge_and_colocate(graph, max_groups, None))
        np.testing.assert_array_equal(fast.labels, slow.labels)
        assert fast.kernels.any(axis=1).all()
