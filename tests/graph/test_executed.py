"""executed_graph: the dependencies TensorFlow executes, on hand-made graphs, and the transfers
the simulator charges on them."""

import numpy as np
import pytest

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.errors import InvalidGraphError
from tf_autoplace.graph.executed import executed_graph
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.sim import Simulator

KB = 1000


def _cluster():
    return Cluster.local(num_logical_cpus=2)


def _transfers(graph, placement):
    cluster = _cluster()
    op_time = np.full((graph.num_ops, cluster.num_devices), 1e-4)
    return Simulator(graph, cluster, op_time).run(np.asarray(placement)).num_transfers


def _edges(graph):
    return sorted(zip(graph.edge_src.tolist(), graph.edge_dst.tolist()))


# x -> add <- c: "c" a Const Grappler folded into the add (it did not run).
FOLDED = from_edges(3, [(0, 2, KB), (1, 2, KB)], names=["x", "c", "add"],
                    op_types=["MatMul", "Const", "AddV2"])


def test_a_folded_const_feeding_an_op_on_another_device_charges_no_transfer():
    placement = [1, 0, 1]  # the const on CPU:0, its consumer and x on CPU:1
    assert _transfers(FOLDED, placement) == 1  # the graph as written: c is sent
    executed = executed_graph(FOLDED, np.array([True, False, True]))
    assert _edges(executed) == [(0, 2)]
    assert _transfers(executed, placement) == 0
    assert executed.names == FOLDED.names and executed.tensor_op is FOLDED.tensor_op


def test_a_removed_identity_is_bypassed():
    # x -> id -> y, the identity removed by Grappler: y reads x's tensor.
    graph = from_edges(3, [(0, 1, KB), (1, 2, KB)], names=["x", "id", "y"],
                       op_types=["MatMul", "Identity", "Relu"])
    executed = executed_graph(graph, np.array([True, False, True]))
    assert _edges(executed) == [(0, 2)]
    assert executed.edge_tensor.tolist() == [0]  # x's output, not the identity's
    # The identity alone on the other device: two transfers as written, none executed.
    assert _transfers(graph, [0, 1, 0]) == 2
    assert _transfers(executed, [0, 1, 0]) == 0
    # x and y apart: one transfer either way, of x's tensor.
    assert _transfers(executed, [0, 0, 1]) == 1


def test_a_shape_of_an_executed_tensor_is_folded():
    # x -> shape -> reshape <- y: the Shape is a constant once shapes are known, so the
    # reshape does not wait for x.
    graph = from_edges(4, [(0, 1, KB), (1, 3, 16), (2, 3, KB)], names=["x", "shape", "y", "r"],
                       op_types=["MatMul", "Shape", "MatMul", "Reshape"])
    executed = executed_graph(graph, np.array([True, False, True, True]))
    assert _edges(executed) == [(2, 3)]


def test_a_fused_op_passes_its_inputs_to_the_op_it_was_fused_into():
    # a, w -> matmul -> bias_add: the MatMul fused into the BiasAdd's kernel; the ancestors
    # of a fused op that did not run either (a chain of two) are followed through.
    graph = from_edges(5, [(0, 2, KB), (1, 2, KB), (2, 3, KB), (3, 4, KB)],
                       names=["a", "w", "mm", "t", "bias_add"],
                       op_types=["Relu", "ReadVariableOp", "MatMul", "Transpose", "BiasAdd"])
    executed = executed_graph(graph, np.array([True, True, False, False, True]))
    assert _edges(executed) == [(0, 4), (1, 4)]


def test_control_dependencies_pass_through_a_removed_no_op():
    graph = from_edges(4, [], names=["a", "b", "noop", "c"],
                       op_types=["AssignVariableOp", "AssignVariableOp", "NoOp", "Relu"],
                       control=[(0, 2), (1, 2), (2, 3)])
    executed = executed_graph(graph, np.array([True, True, False, True]))
    assert sorted(zip(executed.ctrl_src.tolist(), executed.ctrl_dst.tolist())) == [(0, 3),
                                                                                   (1, 3)]
    assert len(executed.edge_dst) == 0


def test_ops_that_did_not_run_are_left_without_edges():
    executed = executed_graph(FOLDED, np.array([False, False, True]))  # x: an initializer
    assert _edges(executed) == []
    assert _transfers(executed, [0, 1, 1]) == 0


def test_ops_that_did_not_run_hold_no_memory():
    # x, an initializer, did not run in the step: its 1 MB output is never allocated.
    graph = from_edges(3, [(0, 2, 1000 * KB), (1, 2, KB)], names=["init", "c", "add"],
                       op_types=["RandomStandardNormal", "MatMul", "AddV2"])
    ran = np.array([False, True, True])
    executed = executed_graph(graph, ran)
    assert executed.tensor_bytes[executed.tensor_op == 0].sum() == 0
    assert (executed.tensor_bytes[executed.tensor_op != 0]
            == graph.tensor_bytes[graph.tensor_op != 0]).all()
    cluster = _cluster()
    op_time = np.full((3, cluster.num_devices), 1e-4)
    peak = Simulator(executed, cluster, op_time).run(np.zeros(3, np.int32)).peak_memory[0]
    assert peak < Simulator(graph, cluster, op_time).run(np.zeros(3, np.int32)).peak_memory[0]
    assert peak < 1000 * KB


def test_every_op_ran_gives_the_graph_itself():
    assert executed_graph(FOLDED, np.ones(3, bool)) is FOLDED


@pytest.mark.parametrize("ran", [np.ones(2, bool), np.ones(3, np.int64)])
def test_ran_must_be_one_bool_per_op(ran):
    with pytest.raises(InvalidGraphError, match=r"ran must be \[3\] bool"):
        executed_graph(FOLDED, ran)
