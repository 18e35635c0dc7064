"""Tests of tf_autoplace.graph.opgraph: OpGraph.with_kernels, the cheap copy with other kernel
constraints that a search makes for every placement it partitions the graph by."""

import dataclasses

import numpy as np
import pytest

from tf_autoplace.errors import InvalidGraphError
from tf_autoplace.graph.opgraph import from_edges


def test_with_kernels_is_the_graph_rebuilt_with_those_kernels():
    graph = from_edges(5, [(0, 1, 8), (1, 2, 8), (0, 3, 4), (3, 2, 4), (2, 4, 1)],
                       control=[(1, 3)])
    pseudo = np.zeros((5, 3), bool)
    pseudo[np.arange(5), [0, 2, 2, 1, 0]] = True
    fast = graph.with_kernels(pseudo, ("a", "b", "c"))
    slow = dataclasses.replace(graph, kernels=pseudo, kernel_kinds=("a", "b", "c"))
    for field in dataclasses.fields(graph):
        a, b = getattr(fast, field.name), getattr(slow, field.name)
        assert (np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b), field.name
    np.testing.assert_array_equal(fast.topological_order(), slow.topological_order())
    assert graph.kernel_kinds == ("CPU", "GPU") and graph.kernels.shape == (5, 2)  # unchanged


def test_with_kernels_checks_what_it_changes():
    graph = from_edges(3, [(0, 1, 8), (1, 2, 8)])
    with pytest.raises(InvalidGraphError, match="shape"):
        graph.with_kernels(np.ones((3, 2), bool), ("a", "b", "c"))
    none = np.ones((3, 2), bool)
    none[1] = False
    with pytest.raises(InvalidGraphError, match="'op1' has a kernel for no device kind"):
        graph.with_kernels(none, ("a", "b"))


def test_a_cycle_is_named_by_its_own_ops_not_those_after_it():
    # 0 -> 1 -> 2 -> 1 is a cycle; 3 and 4 only read it, and 5 feeds it.
    with pytest.raises(InvalidGraphError, match=r"ops on it include \['a', 'b'\]$"):
        from_edges(6, [(0, 1, 8), (1, 2, 8), (2, 1, 8), (2, 3, 8), (3, 4, 8), (5, 1, 8)],
                   names=["src", "a", "b", "after", "sink", "feed"])



def test_a_tensor_read_often_enough_to_wrap_int64_sums_is_refused():
    # 2**60 bytes fit the total, but read by 9 ops they add up to more than int64 holds, and
    # the grouping's edge weights count a tensor once per reading op (they would wrap
    # negative and merge ops into the wrong neighbour).
    edges = [(0, d, 2**60) for d in range(1, 10)]
    with pytest.raises(InvalidGraphError, match=r"read 10,376,293,541,461,622,784 bytes .* op "
                                             r"'op0' alone"):
        from_edges(11, edges)
    from_edges(11, edges[:3])  # three reads: 3.5e18, within what sums can count
