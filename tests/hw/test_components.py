"""The component checks (tf_autoplace.hw.components): the tables' arithmetic on made-up
figures, the transfer chain's placements, a small real transfer check and the process check,
and the isolated op timer (tf_autoplace.hw.isolated) on a small graph. No assertion here is
about how fast this machine is."""

import numpy as np
import pytest
import tensorflow as tf

from tf_autoplace.errors import ConfigError
from tf_autoplace.graph import ingest
from tf_autoplace.hw import components
from tf_autoplace.hw.components import (
    ConcurrencyCheck,
    Config,
    MemoryCheck,
    MemoryRow,
    OpCheck,
    OpTypeRow,
    TransferCheck,
)
from tf_autoplace.hw.isolated import executed_nodes, isolable, time_isolated, time_ops
from tf_autoplace.hw.workload import Workload
from tf_autoplace.pipeline.prepare import build_problem


def test_ratio_stats_slope_and_errors():
    assert components.ratio_stats([2, 9, 4, 1], [1, 3, 0, 2]) == (2.0, 0.5, 3.0, 3)
    assert components.ratio_stats([1], [0])[3] == 0
    with pytest.raises(ConfigError, match="one shape"):
        components.ratio_stats([1, 2], [1])
    assert components.slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2.0)
    with pytest.raises(ConfigError, match="two distinct x"):
        components.slope([1, 1], [2, 3])
    errors = components.relative_errors([110, 50, 7], [100, 100, 0])
    np.testing.assert_allclose(errors[:2], [0.1, -0.5])
    assert np.isnan(errors[2])
    median, worst, share, count = components.error_summary([110, 50, 7, 100], [100, 100, 0, 80])
    assert (median, worst, share, count) == (pytest.approx(0.25), pytest.approx(0.5),
                                             pytest.approx(1 / 3), 3)


def test_per_transfer_and_split_cost_are_read_off_the_crossing_placements():
    # Step = 100 us, + 50 us once split, + 3 us per crossing; CPU the same + 1 us per crossing.
    counts = (0, 1, 4, 8)
    wall = [100e-6] + [150e-6 + 3e-6 * k for k in counts[1:]]
    cpu = [100e-6] + [150e-6 + 4e-6 * k for k in counts[1:]]
    sim = [200e-6 + 5e-6 * k for k in counts]
    check = TransferCheck(counts=counts, measured_s=tuple(wall), measured_cpu_s=tuple(cpu),
                          simulated_s=tuple(sim), simulated_core_s=tuple(sim), nbytes=4,
                          load=(1.0, 1.0))
    per, split = check.per_transfer, check.split_cost
    assert per["measured"] == pytest.approx(3e-6)
    assert per["measured_cpu"] == pytest.approx(4e-6)
    assert per["simulated"] == pytest.approx(5e-6)
    assert split["measured"] == pytest.approx(50e-6)
    assert split["simulated"] == pytest.approx(0, abs=1e-12)
    text = components.markdown(transfers=check)
    assert "| step time added | 3.00 us | 5.00 us | 1.67 |" in text
    assert "| step time of being split at all | 50.00 us | 0.00 us | 0.00 |" in text


def test_config_is_checked():
    with pytest.raises(ConfigError, match="num_logical_cpus must be an int >= 2"):
        Config(num_logical_cpus=1)
    with pytest.raises(ConfigError, match="transfer_counts"):
        Config(transfer_counts=(0, 4))
    with pytest.raises(ConfigError, match="transfer_counts"):
        Config(transfer_hops=4, transfer_counts=(1, 8))
    with pytest.raises(ConfigError, match="unknown components or graphs"):
        components.run(Config(), components=("gpus",))


@pytest.mark.parametrize("crossings", [0, 1, 5, 8])
def test_the_transfer_chain_crosses_devices_exactly_as_often_as_asked(crossings):
    workload = Workload.from_graph(components.transfer_chain(8, 64), fetches=["train"])
    problem, _ = build_problem(ingest.load_meta_graph(components.step_graph_def(workload)),
                               components.local_cluster(2))
    assert "value/Assign" not in problem.graph.names  # a step's ops only
    devices = components.chain_devices(problem.graph.names, 8, crossings)
    assert problem.simulator.run(devices).num_transfers == crossings
    # Colocation holds (a variable with its reader and its assignment).
    for group in np.unique(problem.graph.colocation):
        assert len(set(devices[problem.graph.colocation == group].tolist())) == 1


def test_a_small_transfer_check_runs_and_reports_every_placement():
    config = Config(rounds=3, warmup_steps=1, transfer_hops=4, transfer_counts=(0, 1, 4))
    check = components.check_transfers(config)
    assert check.counts == (0, 1, 4)
    assert all(len(v) == 3 for v in (check.measured_s, check.measured_cpu_s,
                                      check.simulated_s, check.simulated_core_s))
    assert all(t > 0 for t in check.measured_s + check.measured_cpu_s)
    # Simulated: each crossing adds the local cluster's link time on the shared cores.
    cluster = components.local_cluster(2)
    link = cluster.latency[0, 1] + 4096 / cluster.bandwidth[0, 1]
    assert check.per_transfer["simulated"] == pytest.approx(link, rel=1e-6)
    assert check.per_transfer["simulated_core"] == pytest.approx(link, rel=1e-6)


def test_process_contention_times_one_process_and_a_pair():
    alone, paired = components.process_contention(20_000, 1)
    assert alone > 0 and paired > 0
    with pytest.raises(ConfigError, match="not all available"):
        components.process_contention(10, 1, cpus=(0, 4096))


def test_markdown_of_every_component():
    op = OpCheck(graph="g", rows=(OpTypeRow(graph="g", op_type="BiasAdd", kernel="_FusedMatMul",
                                            ran=4, share=0.5, isolated_us=(10.0, 20.0),
                                            analytical_us=(5.0, 40.0),
                                            profiled_us=(20.0, 20.0)),),
                 profiled_step_s=1e-3, untraced_step_s=2e-3, load=(0.5, 0.7))
    conc = ConcurrencyCheck(labels=("a", "b", "c"), measured_s=(1e-3, 2e-3, 2e-3),
                            simulated_s=(1e-3, 1e-3, 1e-3), alone_s=1.0, paired_s=1.4, cores=2,
                            load=(0.1, 0.2))
    row = MemoryRow(graph="g", placement="one device", device="CPU:0", predicted_whole=300,
                    predicted_step=120, variables=50, measured_transient=48.0,
                    measured_range=(40, 60), kernel=2)
    empty = MemoryRow(graph="g", placement="one device", device="CPU:1", predicted_whole=0,
                      predicted_step=0, variables=0, measured_transient=0.0,
                      measured_range=(0, 0), kernel=0)
    text = components.markdown(ops=[op], concurrency=conc,
                               memory=[MemoryCheck(graph="g", rows=(row, empty),
                                                   load=(1.0, 2.0))], header="# H")
    assert text.startswith("# H\n")
    # analytical / isolated: 0.5 and 2 -> median 1.25; profiled: 2 and 1.
    assert "| g | BiasAdd (_FusedMatMul) | 4 | 50.0% | 2 | 15.0 | 1.25 [0.50, 2.00] | " \
           "1.50 [1.00, 2.00] |" in text
    assert "| g | 0.50 -> 0.70 | 2 | 1.50 | 1.33 |" in text
    assert "| two, one per core | 1.400 | 1.40 | 1.43 | 2.00 |" in text
    assert "| b | 2.00 | 1.00 | 2.00 | 1.00 |" in text
    # Memory: measured 50 + 2 + 48 = 100; whole graph 300 (200% off), step 120 (20%);
    # transient: predicted 70 against 48. The empty device measures nothing and is left out.
    assert "| g | 1.00 -> 2.00 | whole graph, total | 1 | 200.0% | 200.0% | 0% |" in text
    assert "| g | 1.00 -> 2.00 | step, total | 1 | 20.0% | 20.0% | 100% |" in text
    assert "| g | 1.00 -> 2.00 | step, transient | 1 | 45.8% | 45.8% | 0% |" in text


@pytest.fixture(scope="module")
def small():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [64, 64], name="x")
        w = tf.Variable(tf.ones([64, 64]), name="w")
        y = tf.matmul(x, w.read_value(), name="y")
        z = tf.reshape(tf.nn.relu(y, name="r"), [4096], name="z")
        out = tf.Variable(tf.zeros([4096]), name="out")
        tf.group(out.assign(z), name="train")
        tf.compat.v1.global_variables_initializer()
    return graph, Workload.from_graph(graph, fetches=["train"])


def test_isolated_ops_are_timed_as_they_ran(small):
    graph, workload = small
    nodes = executed_nodes(workload)
    assert "y" in nodes and "train" in nodes
    assert isolable(nodes["r"], graph)
    assert not isolable(nodes["w"], graph)  # no data inputs
    assert not isolable(nodes["Read/ReadVariableOp"], graph)  # reads a resource
    times = time_ops(workload, [nodes["r"], nodes["z"]], rounds=3, max_copies=4)
    assert set(times) == {"r", "z"} and all(t >= 0 for t in times.values())
    with pytest.raises(ConfigError, match="copies must be an int >= 1"):
        time_isolated(nodes["r"], [np.ones([64, 64], np.float32)], copies=0)
