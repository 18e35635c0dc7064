"""SavedPlacement and the neighbour completion on hand-made problems (no TF graph): matching by
position and by name, the share that makes "another graph", devices, and where unnamed ops go."""

import numpy as np
import pytest

from tf_autoplace.errors import (ClusterSpecError, ConfigError, InfeasiblePlacementError,
                                 InvalidGraphError)
from tf_autoplace.graph.fingerprint import fingerprint
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.heuristics.neighbours import place_next_to_neighbours
from tf_autoplace.outputs.saved_placement import read_placement, serialize
from tf_autoplace.placers import SavedPlacement
from tf_autoplace.proto import placement_pb2
from tf_autoplace.testing import problems


def _saved(problem, devices, *, names=None, with_fingerprint=True):
    out = placement_pb2.PlacementResult(placer="auto", seed=3)
    if with_fingerprint:
        out.graph_fingerprint = fingerprint(problem.graph)
    names = problem.graph.names if names is None else names
    for name, d in zip(names, devices):
        out.op.add(name=name, device=problem.cluster.names[d])
    return out


def _problem(n=60, seed=0, names=None):
    problem = problems.random_problem(n, seed, num_gpus=2, max_groups=20)
    if names is None:
        return problem
    graph = problem.graph
    renamed = from_edges(n, list(zip(graph.edge_src.tolist(), graph.edge_dst.tolist(),
                                     graph.tensor_bytes[graph.edge_tensor].tolist())),
                         names=names)
    return problems.problem(renamed, problem.cluster, problem.op_time[:, 0],
                            problem.op_time[:, -1], max_groups=20)


def test_a_saved_placement_of_this_graph_is_applied_as_it_was():
    problem = _problem()
    devices = np.random.default_rng(0).integers(0, 3, problem.graph.num_ops)
    placer = SavedPlacement(_saved(problem, devices))
    assert placer.place(problem).devices.tolist() == devices.tolist()
    assert placer.stats == dict(named=60, filled=0, unknown=0, by="name")  # names exact
    assert "(seed 3) for this graph (same fingerprint)" in placer.notes[0]


def test_exact_names_decide_over_positions_on_the_same_fingerprint():
    # Two towers built in the other order: the same fingerprint (TF's counters aside), each
    # op's exact name in the file, and by position every op got the other tower's device.
    names = [f"tower_{i % 2}/op{i // 2}" for i in range(60)]
    swapped = [f"tower_{1 - i % 2}/op{i // 2}" for i in range(60)]
    problem, rebuilt = _problem(names=names), _problem(names=swapped)
    assert fingerprint(problem.graph) == fingerprint(rebuilt.graph)
    devices = np.random.default_rng(2).integers(0, 3, 60)
    placed = SavedPlacement(_saved(problem, devices)).place(rebuilt).devices
    by_name = {name: int(d) for name, d in zip(names, devices)}
    assert placed.tolist() == [by_name[name] for name in swapped]


def test_the_same_graph_with_other_counters_is_matched_by_position():
    problem = _problem()
    devices = np.random.default_rng(1).integers(0, 3, problem.graph.num_ops)
    counted = _problem(names=[f"op_{i}_7" for i in range(60)])  # TF's counters: op3 -> op_3_7
    plain = _problem(names=[f"op_{i}" for i in range(60)])
    assert fingerprint(counted.graph) == fingerprint(plain.graph)
    placer = SavedPlacement(_saved(plain, devices))
    assert placer.place(counted).devices.tolist() == devices.tolist()
    assert placer.stats["by"] == "position"
    # Without the fingerprint the names decide, and none of them match.
    with pytest.raises(InvalidGraphError, match="another graph: it places 60 ops, 0 of which"):
        SavedPlacement(_saved(plain, devices, with_fingerprint=False)).place(counted)


def test_unnamed_ops_are_placed_next_to_their_neighbours_and_counted():
    problem = _problem()
    devices = np.random.default_rng(2).integers(0, 2, problem.graph.num_ops)
    keep = np.ones(60, bool)
    keep[[10, 30, 31]] = False
    saved = _saved(problem, devices[keep], names=np.asarray(problem.graph.names)[keep])
    saved.op.add(name="not_in_this_graph", device=problem.cluster.names[0])
    placer = SavedPlacement(saved)
    placed = placer.place(problem).devices
    assert placed[keep].tolist() == devices[keep].tolist()
    assert placer.stats == dict(named=57, filled=3, unknown=1, by="name")
    assert "3 ops it does not place were placed next to their neighbours" in placer.notes[0]
    assert "1 ops it places are not in this graph" in placer.notes[0]


@pytest.mark.parametrize("named", [29, 40])
def test_a_placement_for_another_graph_is_an_invalid_graph_error(named):
    problem = _problem()
    devices = np.zeros(problem.graph.num_ops, int)
    names = list(problem.graph.names[:named]) + [f"elsewhere{i}" for i in range(60 - named)]
    placer = SavedPlacement(_saved(problem, devices, names=names, with_fingerprint=False),
                            min_match=0.5 if named == 29 else 0.7)
    with pytest.raises(InvalidGraphError, match=rf"places 60 ops, {named} of which are in this "
                                                r"graph of 60 ops .*elsewhere0"):
        placer.place(problem)


def test_a_device_the_cluster_lacks_is_named():
    problem = _problem()
    saved = _saved(problem, np.zeros(60, int))
    saved.op[5].device = "/device:GPU:7"
    with pytest.raises(InfeasiblePlacementError, match=r"'/device:GPU:7', which the cluster"):
        SavedPlacement(saved).place(problem)


def test_a_device_of_a_tf_clusters_job_on_a_cluster_without_tasks_is_a_cluster_spec_error():
    # A placement made for ps/worker servers applied on one machine: the job is what is
    # missing, as it is on a cluster of other tasks.
    problem = _problem()
    saved = _saved(problem, np.zeros(60, int))
    saved.op[5].device = "/job:ps/replica:0/task:1/device:GPU:3"
    with pytest.raises(ClusterSpecError, match="a device of a TensorFlow cluster's job 'ps'"):
        SavedPlacement(saved).place(problem)


def test_devices_match_in_canonical_form():
    problem = _problem()
    saved = _saved(problem, np.ones(60, int))
    for op in saved.op:
        op.device = "/job:localhost/replica:0/task:0" + op.device if op.name != "op0" \
            else "/device:gpu:1"
    saved.ClearField("graph_fingerprint")
    # The problem's cluster names are /device:GPU:i; the full and lower-case forms are the same.
    assert SavedPlacement(saved).place(problem).devices.tolist() == [1] * 60


def test_a_saved_placement_that_breaks_colocation_is_refused():
    graph = from_edges(4, [(0, 1, 10), (1, 2, 10), (2, 3, 10)], colocation=[0, 0, 1, 2])
    problem = problems.problem(graph, problems.cluster(2), 1e-3)
    saved = _saved(problem, [0, 1, 0, 0])
    with pytest.raises(InfeasiblePlacementError, match="colocation group"):
        SavedPlacement(saved).place(problem)


def test_files_in_text_and_binary_read_back(tmp_path):
    problem = _problem()
    saved = _saved(problem, np.ones(60, int))
    for name in ("p.pb", "p.pbtxt"):
        (tmp_path / name).write_bytes(serialize(saved, name))
        assert read_placement(str(tmp_path / name)) == saved
    (tmp_path / "bad.pb").write_bytes(serialize(saved, "x.pb")[:-7])
    with pytest.raises(ConfigError, match="not a PlacementResult"):
        read_placement(str(tmp_path / "bad.pb"))
    with pytest.raises(ConfigError, match="cannot read"):
        read_placement(str(tmp_path / "missing.pb"))
    with pytest.raises(ConfigError, match="places no op"):
        read_placement(placement_pb2.PlacementResult(placer="auto"))
    # An entry without a device: the message names it.
    holed = placement_pb2.PlacementResult()
    holed.CopyFrom(saved)
    holed.op[3].device = ""
    (tmp_path / "holed.pbtxt").write_bytes(serialize(holed, "holed.pbtxt"))
    with pytest.raises(ConfigError, match=f"parses as text, but op {holed.op[3].name!r} has "
                                          "no device"):
        read_placement(str(tmp_path / "holed.pbtxt"))
    # A field this version does not know (a typo, a newer file): the parser's line and field.
    text = serialize(saved, "p.pbtxt").decode().replace("placer:", "placr:", 1)
    for name in ("typo.pbtxt", "typo.pb"):  # (a binary name holding text: read as text)
        (tmp_path / name).write_text(text)
        with pytest.raises(ConfigError, match=r"\(read as text: \d+:1 : .*has no field named "
                                              r"\"placr\"\.\)"):
            read_placement(str(tmp_path / name))
    (tmp_path / "typo.json").write_text('{"op": [{"name": "a", "device": "b"}], "placr": 1}')
    with pytest.raises(ConfigError, match=r"\(read as JSON: .*placr"):
        read_placement(str(tmp_path / "typo.json"))
    # Lists nested thousands deep: the check for a report's JSON met a RecursionError.
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="not a PlacementResult"):
        read_placement(str(tmp_path / "deep.json"))


# ------------------------------------------------------------------------- neighbour completion
def test_new_ops_follow_the_heaviest_placed_neighbours():
    # 0 -> 1 -> 2 -> 3 and 4 -> 2; ops 1 and 2 are new. 0 is on GPU 1, 3 and 4 on GPU 0.
    graph = from_edges(5, [(0, 1, 1000), (1, 2, 1000), (2, 3, 10), (4, 2, 10)])
    problem = problems.problem(graph, problems.cluster(2), 1e-3)
    out = place_next_to_neighbours(problem, [1, -1, -1, 0, 0])
    assert out.tolist() == [1, 1, 1, 0, 0]  # 1 follows 0 (1000 B), 2 follows 1 (1000 B > 20 B)


def test_a_new_input_follows_its_consumers_and_a_lone_op_goes_to_a_gpu():
    graph = from_edges(4, [(0, 1, 10), (1, 2, 10)])  # op 3 has no edge at all
    problem = problems.problem(graph, problems.cluster(2), 1e-3)
    assert place_next_to_neighbours(problem, [-1, 1, 1, -1]).tolist() == [1, 1, 1, 0]


def test_colocation_and_kernels_are_kept():
    kernels = np.array([[True, True], [True, True], [True, False], [True, True]])  # 2: CPU only
    graph = from_edges(4, [(0, 1, 10), (1, 2, 10), (2, 3, 10)], colocation=[0, 1, 2, 1],
                       kernels=kernels)
    problem = problems.problem(graph, problems.cluster(2), 1e-3)  # devices: GPU 0, 1, CPU 2
    out = place_next_to_neighbours(problem, [1, -1, -1, 0])
    assert out[1] == out[3] == 0  # op 1 shares op 3's colocation group
    assert out[2] == 2  # only the CPU host can run op 2


def test_an_op_named_twice_is_a_note_with_one_device_and_an_error_with_two():
    problem = _problem()
    devices = np.random.default_rng(4).integers(0, 3, problem.graph.num_ops)
    saved = _saved(problem, devices, with_fingerprint=False)
    saved.op.add(name=saved.op[7].name, device=saved.op[7].device)
    placer = SavedPlacement(saved)
    assert placer.place(problem).devices.tolist() == devices.tolist()
    assert f"names 1 op(s) twice or more, each time with the same device (e.g. " \
           f"['{saved.op[7].name}'])" in placer.notes[0]
    saved.op[-1].device = problem.cluster.names[(devices[7] + 1) % 3]
    with pytest.raises(InvalidGraphError, match=rf"names op '{saved.op[7].name}' twice, on "):
        SavedPlacement(saved).place(problem)


def test_messages_name_the_saved_placement_once(tmp_path):
    problem = _problem()
    saved = _saved(problem, np.zeros(60, int), names=[f"elsewhere{i}" for i in range(60)],
                   with_fingerprint=False)
    with pytest.raises(InvalidGraphError, match=r"^the saved placement given in memory was "
                                                r"made for another graph: it places 60 ops"):
        SavedPlacement(saved).place(problem)
    path = tmp_path / "p.pb"
    path.write_bytes(saved.SerializeToString())
    with pytest.raises(InvalidGraphError, match=rf"^the saved placement '{path}' was made for"):
        SavedPlacement(str(path)).place(problem)
