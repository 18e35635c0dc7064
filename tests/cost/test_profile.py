"""ProfileCostModel: op times from a text-format cost profile (protos/cost_profile.proto)."""

import dataclasses

import numpy as np
import pytest

from tf_autoplace.core.cluster import Cluster, Device
from tf_autoplace.cost import TableCostModel
from tf_autoplace.cost.profile import ProfileCostModel
from tf_autoplace.errors import ConfigError
from tf_autoplace.graph.opgraph import from_edges
from tf_autoplace.grouping import Grouping
from tf_autoplace.placers import PlacementProblem, get_placer

GB = 10**9
NAMES = ["in", "mm", "relu", "save"]
TYPES = ["Const", "MatMul", "Relu", "SaveV2"]  # the types PROFILE records, where it does
# "save" has only a CPU kernel, so the profile need not (and does not) time it on a GPU.
KERNELS = np.array([[1, 1], [1, 1], [1, 1], [1, 0]], bool)
PROFILE = """
description: "hand-made: 4 ops, K80 and host"
op { name: "in"   device_kind: "GPU" compute_time_us: 10 output_bytes: 4096 op_type: "Const" }
op { name: "in"   device_kind: "CPU" compute_time_us: 20 }
op { name: "mm"   device_kind: "GPU" compute_time_us: 100 op_type: "MatMul" }
op { name: "mm"   device_kind: "CPU" compute_time_us: 900 }
op { name: "relu" device_kind: "GPU" compute_time_us: 5 }
op { name: "relu" device_kind: "CPU" compute_time_us: 30 }
op { name: "save" device_kind: "CPU" compute_time_us: 50 }
op { name: "not_in_this_graph" device_kind: "GPU" compute_time_us: 1 }
"""


def _graph():
    return from_edges(4, [(0, 1, 4096), (1, 2, 1024), (2, 3, 1024)], names=NAMES,
                      kernels=KERNELS, op_types=TYPES)


def _cluster():
    return Cluster.uniform([Device("/device:GPU:0", "GPU", 10 * GB),
                            Device("/device:GPU:1", "GPU", 10 * GB, speed=2.0),
                            Device("/device:CPU:0", "CPU", 64 * GB)])


def test_profile_times_per_device_divided_by_speed(tmp_path):
    path = tmp_path / "profile.pbtxt"
    path.write_text(PROFILE)
    model = ProfileCostModel.from_file(path)
    got = model.op_time(_graph(), _cluster())
    us = 1e-6
    np.testing.assert_allclose(got[:3], [[10 * us, 5 * us, 20 * us],
                                         [100 * us, 50 * us, 900 * us],
                                         [5 * us, 2.5 * us, 30 * us]])
    assert got[3, 2] == pytest.approx(50 * us) and np.isinf(got[3, :2]).all()  # no GPU kernel
    assert model.num_unused == 1 and model.num_unprofiled_ops == 0


def test_missing_op_is_an_error_naming_it():
    text = PROFILE.replace('op { name: "mm"   device_kind: "CPU" compute_time_us: 900 }', "")
    with pytest.raises(ConfigError, match=r"1 of 4 ops.*'mm' \(CPU\).*fallback"):
        ProfileCostModel.from_text(text).op_time(_graph(), _cluster())


def test_missing_ops_come_from_the_fallback_model_when_given():
    text = PROFILE.replace('op { name: "mm"   device_kind: "CPU" compute_time_us: 900 }', "")
    fallback = TableCostModel({"GPU": np.full(4, 7.0), "CPU": np.full(4, 3.0)})
    model = ProfileCostModel.from_text(text, fallback=fallback)
    got = model.op_time(_graph(), _cluster())
    assert got[1, 2] == 3.0  # from the fallback
    assert got[1, 0] == pytest.approx(100e-6) and got[1, 1] == pytest.approx(50e-6)  # profile
    rest = np.ones(got.shape, bool)
    rest[1, 2] = False
    assert (got[rest & np.isfinite(got)] < 1.0).all()  # nothing else taken from the fallback
    assert np.isinf(got[3, :2]).all()  # no GPU kernel: not "missing", so no fallback either
    assert model.num_unprofiled_ops == 1 and model.unprofiled_kinds == ("CPU",)
    assert model.unprofiled_counts == {"CPU": 1}


def test_a_profile_with_no_time_on_the_clusters_kind_of_device_is_another_machines():
    # Every op timed, on GPUs only, and a cluster of CPUs: with a fallback, every time would
    # silently be the fallback's. A cluster with one of the kinds takes it (the GPU pairs).
    gpu_only = "\n".join(line for line in PROFILE.splitlines() if '"CPU"' not in line)
    cpus = Cluster.uniform([Device("/device:CPU:0", "CPU", 64 * GB),
                            Device("/device:CPU:1", "CPU", 64 * GB)])
    fallback = TableCostModel({"GPU": np.full(4, 7.0), "CPU": np.full(4, 3.0)})
    model = ProfileCostModel.from_text(gpu_only, fallback=fallback)
    with pytest.raises(ConfigError, match="times this graph's ops on GPU devices only, and the "
                                          "cluster's devices are CPU: it is another machine's"):
        model.op_time(_graph(), cpus)
    got = model.op_time(_graph(), _cluster())
    assert got[1, 0] == pytest.approx(100e-6) and got[1, 2] == 3.0
    assert model.unprofiled_kinds == ("CPU",)



@pytest.mark.parametrize("how", ["compute_time_us: 0", "compute_time_us: 0 did_not_run: true"])
def test_a_profile_that_times_every_op_at_zero_measured_nothing(how):
    # A converter that lost the times: every placement would simulate a step of 0, silently.
    zero = "".join(f'op {{ name: "{name}" device_kind: "{kind}" {how} }}\n'
                   for name in NAMES for kind in ("GPU", "CPU") if (name, kind) != ("save", "GPU"))
    model = ProfileCostModel.from_text(zero + 'run { device_kind: "CPU" step_time_us: 120 }')
    with pytest.raises(ConfigError, match=r"times all 7 \(op, device kind\) pairs it has for this "
                                          r"graph's ops on CPU/GPU at 0 us.*broken profile"):
        model.op_time(_graph(), _cluster())
    # One time measured on a kind the cluster has is a profile (its other ops did not run).
    one = zero.replace(f'"mm" device_kind: "GPU" {how}',
                       '"mm" device_kind: "GPU" compute_time_us: 3')
    assert ProfileCostModel.from_text(one).op_time(_graph(), _cluster())[1, 0] == \
        pytest.approx(3e-6)

def test_profile_drives_a_placer():
    graph, cluster = _graph(), _cluster()
    op_time = ProfileCostModel.from_text(PROFILE).op_time(graph, cluster)
    problem = PlacementProblem(graph=graph, cluster=cluster, op_time=op_time,
                               grouping=Grouping.from_labels(graph, graph.colocation))
    placement = get_placer("m_etf").place(problem)
    assert placement.devices[3] == 2  # the CPU-only op on the CPU
    assert np.isfinite(placement.sim.makespan)


def test_round_trip_through_proto():
    model = ProfileCostModel.from_text(PROFILE)
    again = ProfileCostModel.from_proto(model.to_proto("copy"))
    np.testing.assert_allclose(again.op_time(_graph(), _cluster()),
                               model.op_time(_graph(), _cluster()), rtol=1e-12)


@pytest.mark.parametrize("text, match", [
    ('op { name: "mm" device_kind: "GPU" compute_time_us: 1 }\n'
     'op { name: "mm" device_kind: "GPU" compute_time_us: 2 }', "appears twice"),
    # Quoted as written, in the file's unit (was "-1e-06", converted, with no unit).
    ('op { name: "mm" device_kind: "GPU" compute_time_us: -5 }',
     r"compute_time_us of op 'mm' on GPU is -5 us; must be finite and >= 0"),
    ('op { name: "mm" device_kind: "GPU" compute_time_us: 2 partner: "x" '
     'partner_apart_time_us: -3 }', "partner_apart_time_us of op 'mm' on GPU is -3 us"),
    ('op { device_kind: "GPU" compute_time_us: 1 }', "without name"),
    ('op { name: "mm" speed: 3 }', "malformed cost profile"),
    ("", "times no op"),
    ('description: "an empty run"', "times no op"),
    # A device's name, or a kind in lower case, where a kind goes.
    ('op { name: "mm" device_kind: "/job:worker/task:3/device:CPU:0" compute_time_us: 1 }',
     r"op 'mm' has device_kind '/job:worker/task:3/device:CPU:0'.*kinds are \('CPU', 'GPU'\)"),
    ('op { name: "mm" device_kind: "cpu" compute_time_us: 1 }', "device_kind 'cpu'"),
    ('op { name: "mm" device_kind: "GPU" compute_time_us: 1 }\n'
     'run { device_kind: "gpu" step_time_us: 5 }', "a run has device_kind 'gpu'"),
    # A unit slip: seconds written as microseconds, or worse.
    ('op { name: "mm" device_kind: "GPU" compute_time_us: 1e300 }',
     r"times on GPU add up to 1e\+294 s, more than 1e\+09 s"),
    # The measured step scales every op time: 1e300 us made them 1e297 times longer; NaN and
    # negative steps were skipped without a word.
    ('op { name: "mm" device_kind: "GPU" compute_time_us: 1 }\n'
     'run { device_kind: "GPU" step_time_us: 1e300 }',
     r"measured step on GPU must be between 1e-09 and 1e\+09 seconds, got 1e\+294"),
    ('op { name: "mm" device_kind: "GPU" compute_time_us: 1 }\n'
     'run { device_kind: "GPU" step_time_us: 1e-300 }', "measured step on GPU must be between"),
    ('op { name: "mm" device_kind: "GPU" compute_time_us: 1 }\n'
     'run { device_kind: "GPU" step_time_us: nan }', "step_time_us of the run on GPU is nan us"),
    ('op { name: "mm" device_kind: "GPU" compute_time_us: 1 }\n'
     'run { device_kind: "GPU" step_time_us: -3 }', "step_time_us of the run on GPU is -3 us"),
])
def test_bad_profiles_are_config_errors(text, match):
    with pytest.raises(ConfigError, match=match):
        ProfileCostModel.from_text(text)


def test_unreadable_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read cost profile"):
        ProfileCostModel.from_file(tmp_path / "nope.pbtxt")



# What a user who ran a FULL_TRACE step (or wrote a timeline) has at hand, where the profile
# goes: each said `no field named "step_stats"` or `'utf-8' codec can't decode byte`.
STATS = ('dev_stats { device: "/device:CPU:0" node_stats { node_name: "mm" '
         'all_start_micros: 1796528443017591 all_end_rel_micros: 5 } }')
RUN_METADATA_BINARY = (b'\n"\n \n\r/device:CPU:0\x12\x0f\n\x02mm\x10\xf7\x92\xb3\xfd\xed\xbd'
                       b'\x98\x03(\x05\x12\n\n\x08\n\x02mm\x18\x01H\x05')
TEXT_ONLY = ("another format; it must be the text CostProfile that `tf-autoplace profile "
             "--out_profile` writes")


@pytest.mark.parametrize("data, match", [
    (f"step_stats {{ {STATS} }}\ncost_graph {{ node {{ name: \"mm\" id: 1 }} }}",
     f"TensorFlow's own RunMetadata, {TEXT_ONLY}"),
    ('{\n "stepStats": {\n  "devStats": [{"device": "/device:CPU:0"}]}}',
     f"TensorFlow's own RunMetadata, {TEXT_ONLY}"),
    (STATS, f"TensorFlow's own StepStats, {TEXT_ONLY}"),
    ('node {\n  name: "mm"\n  id: 1\n  compute_cost: 5\n}\n',
     f"TensorFlow's own CostGraphDef, {TEXT_ONLY}"),
    ('{"traceEvents": [{"name": "mm", "ph": "X", "ts": 0, "dur": 5, "pid": 0, "tid": 0}]}',
     rf"TensorFlow's own Chrome trace \(timeline\), {TEXT_ONLY}"),
    ('node {\n  name: "mm"\n  op: "MatMul"\n  input: "a"\n  input: "b"\n}\n',
     "is a TensorFlow GraphDef, the graph itself, not its op times; it must be the text "
     "CostProfile"),
    (RUN_METADATA_BINARY, r"is a binary file \(TensorFlow's RunMetadata, .*\), not text; it "
                          r"must be the text CostProfile that `tf-autoplace profile"),
    (b'\n\x11\n\x0f\n\r/device:CPU:0', "is a binary file"),  # binary that decodes as UTF-8
    (ProfileCostModel.from_text(PROFILE).to_proto().SerializeToString(),
     "a binary file .*binary CostProfile"),
], ids=["run_metadata", "run_metadata_json", "step_stats", "cost_graph_def", "chrome_trace",
        "graph_def", "run_metadata_binary", "binary_that_decodes", "binary_cost_profile"])
def test_tensorflows_own_formats_and_binary_files_are_named(tmp_path, data, match):
    path = tmp_path / "profile"
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    with pytest.raises(ConfigError, match=match):
        ProfileCostModel.from_file(path)

# "in" did not run on either kind (folded); "mm" did not run on the GPU only (fused there);
# "relu" runs another kernel, 3x slower, when "mm" is on another device.
EXECUTION = PROFILE.replace(
    'op { name: "in"   device_kind: "GPU" compute_time_us: 10 output_bytes: 4096 op_type: "Const" }\n'
    'op { name: "in"   device_kind: "CPU" compute_time_us: 20 }',
    'op { name: "in"   device_kind: "GPU" compute_time_us: 0 did_not_run: true }\n'
    'op { name: "in"   device_kind: "CPU" compute_time_us: 0 did_not_run: true }').replace(
    'op { name: "mm"   device_kind: "GPU" compute_time_us: 100 op_type: "MatMul" }',
    'op { name: "mm"   device_kind: "GPU" compute_time_us: 0 did_not_run: true }').replace(
    'op { name: "relu" device_kind: "GPU" compute_time_us: 5 }',
    'op { name: "relu" device_kind: "GPU" compute_time_us: 5 partner: "mm" '
    'partner_apart_time_us: 15 }')


def test_ops_that_did_not_run_on_every_kind_they_can_run_on_are_not_executed():
    model = ProfileCostModel.from_text(EXECUTION)
    graph = _graph()
    assert model.executed_ops(graph, _cluster()).tolist() == [False, True, True, True]
    gpus = Cluster.uniform([Device("/device:GPU:0", "GPU", 10 * GB)])
    # On GPUs alone "mm" did not run either; "save" has no GPU kernel and is left running.
    assert model.executed_ops(graph, gpus).tolist() == [False, False, True, True]
    assert ProfileCostModel.from_text(PROFILE).executed_ops(graph, _cluster()) is None


def test_partner_times_per_device_divided_by_speed():
    model = ProfileCostModel.from_text(EXECUTION)
    graph, cluster = _graph(), _cluster()
    op_time = model.op_time(graph, cluster)
    partner, apart = model.partner_times(graph, cluster, op_time)
    assert partner.tolist() == [-1, -1, 1, -1]
    np.testing.assert_allclose(apart[2], [15e-6, 7.5e-6, 30e-6])  # CPU: no partner time
    keep = np.ones(apart.shape, bool)
    keep[2, :2] = False
    np.testing.assert_array_equal(apart[keep], op_time[keep])
    assert ProfileCostModel.from_text(PROFILE).partner_times(graph, cluster, op_time) is None


def test_execution_survives_the_proto():
    model = ProfileCostModel.from_text(EXECUTION)
    again = ProfileCostModel.from_proto(model.to_proto("copy"))
    graph, cluster = _graph(), _cluster()
    op_time = model.op_time(graph, cluster)
    np.testing.assert_array_equal(again.executed_ops(graph, cluster),
                                  model.executed_ops(graph, cluster))
    for a, b in zip(again.partner_times(graph, cluster, op_time),
                    model.partner_times(graph, cluster, op_time)):
        np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("text, match", [
    ('op { name: "mm" device_kind: "GPU" compute_time_us: 3 did_not_run: true }',
     "marked did_not_run but has a time of 3 us"),
    ('op { name: "mm" device_kind: "GPU" compute_time_us: 3 partner: "mm" '
     'partner_apart_time_us: 4 }', "names itself as its partner"),
    ('op { name: "mm" device_kind: "GPU" compute_time_us: 3 partner: "a" '
     'partner_apart_time_us: 4 }\n'
     'op { name: "mm" device_kind: "CPU" compute_time_us: 3 partner: "b" '
     'partner_apart_time_us: 4 }', "has partners 'b' and 'a'"),
    ('op { name: "mm" device_kind: "GPU" compute_time_us: 3 partner: "a" '
     'partner_apart_time_us: -4 }', "partner_apart_time_us of op 'mm' on GPU is -4 us"),
])
def test_bad_execution_records_are_config_errors(text, match):
    with pytest.raises(ConfigError, match=match):
        ProfileCostModel.from_text(text)


def test_measured_steps_are_read_checked_and_kept_by_the_proto():
    model = ProfileCostModel.from_text(PROFILE + 'run { device_kind: "GPU" step_time_us: 250 '
                                       'traced_step_time_us: 400 }')
    assert model.measured_steps() == {"GPU": pytest.approx(250e-6)}
    assert ProfileCostModel.from_proto(model.to_proto()).measured_steps() == \
        model.measured_steps()
    assert ProfileCostModel.from_text(PROFILE).measured_steps() == {}
    # The kinds whose times stay unscaled for want of a run: the cluster's, that it timed.
    model.op_time(_graph(), _cluster())
    assert model.unstepped_kinds == ("CPU",)
    no_run = ProfileCostModel.from_text(PROFILE)
    no_run.op_time(_graph(), Cluster.uniform([Device("/device:CPU:0", "CPU", 64 * GB)]))
    assert no_run.unstepped_kinds == ("CPU",)  # not the GPU times, which nothing here uses
    with pytest.raises(ConfigError, match="two runs on GPU"):
        ProfileCostModel.from_text(PROFILE + 'run { device_kind: "GPU" step_time_us: 1 }\n'
                                   'run { device_kind: "GPU" step_time_us: 2 }')


def test_a_profile_of_a_while_loops_body_ops_says_so():
    # Step stats name the nodes TF ran for a functional while loop ("mm" here is a While op):
    # its body's, not the loop op's. That is this graph's profile, timed op by lowered op.
    body = "".join(f'op {{ name: "mm/body/_{i}/MatMul" device_kind: "GPU" compute_time_us: 1 }}\n'
                   for i in range(6))
    graph = dataclasses.replace(_graph(), op_types=("Const", "While", "Relu", "SaveV2"))
    fallback = TableCostModel({"GPU": np.full(4, 7.0), "CPU": np.full(4, 3.0)})
    model = ProfileCostModel.from_text(PROFILE + body, fallback=fallback)
    with pytest.raises(ConfigError, match=r"7 ops this graph does not have and 4 of its 4 ops: "
                                          r"6 of them are ops TensorFlow ran inside this graph's "
                                          r"while loops.*'mm/body/_0/MatMul'"):
        model.op_time(graph, _cluster())


def test_another_graphs_profile_is_refused_and_a_partial_one_does_not_calibrate():
    # Most of what it timed is not in this graph: another graph's profile.
    others = "".join(f'op {{ name: "other{i}" device_kind: "GPU" compute_time_us: 1 }}\n'
                     for i in range(5))
    fallback = TableCostModel({"GPU": np.full(4, 7.0), "CPU": np.full(4, 3.0)})
    foreign = ProfileCostModel.from_text(PROFILE + others, fallback=fallback)
    with pytest.raises(ConfigError, match=r"times 6 ops this graph does not have and 4 of its 4 "
                                          r"ops: it is another graph's profile"):
        foreign.op_time(_graph(), _cluster())
    # A measured step is of a run whose op times it has; with one CPU op estimated instead,
    # the CPU step is not used to scale the CPU times, and the GPU step, every GPU time
    # measured, still scales the GPU times.
    runs = ('run { device_kind: "GPU" step_time_us: 250 }\n'
            'run { device_kind: "CPU" step_time_us: 1500 }')
    own = PROFILE.replace('op { name: "not_in_this_graph" device_kind: "GPU" compute_time_us: 1 }',
                          "")  # this graph's ops only
    text = own.replace('op { name: "mm"   device_kind: "CPU" compute_time_us: 900 }', "")
    partial = ProfileCostModel.from_text(text + runs, fallback=fallback)
    partial.op_time(_graph(), _cluster())
    assert partial.num_unprofiled_ops == 1
    assert partial.measured_steps() == {"GPU": pytest.approx(250e-6)}
    whole = ProfileCostModel.from_text(own + runs)
    whole.op_time(_graph(), _cluster())
    assert whole.measured_steps() == {"GPU": pytest.approx(250e-6), "CPU": pytest.approx(1.5e-3)}
    # A larger graph's profile: its GPU run also ran an op this graph lacks, so its measured
    # step is that graph's and scales nothing here (it set a smaller graph's step to the
    # larger one's); an extra op that did not run in the step takes nothing from it.
    larger = ProfileCostModel.from_text(PROFILE + runs)
    larger.op_time(_graph(), _cluster())
    assert larger.unused_ran == {"GPU": 1} and larger.num_unused_ran == 1
    assert larger.measured_steps() == {"CPU": pytest.approx(1.5e-3)}
    idle = ProfileCostModel.from_text(
        own + runs + 'op { name: "init" device_kind: "GPU" did_not_run: true }')
    idle.op_time(_graph(), _cluster())
    assert idle.num_unused == 1 and idle.num_unused_ran == 0
    assert idle.measured_steps() == whole.measured_steps()


def test_a_measured_time_is_not_divided_by_a_specs_absolute_speed():
    # A shipped spec's host CPU has speed 16 and an H100 speed 2: factors that correct
    # Grappler's analytical flop counts. A measured time is the device's own; only the speeds of
    # a kind's devices relative to its reference device (the first of speed 1, else the first)
    # scale it.
    cluster = Cluster.uniform([Device("/device:GPU:0", "GPU", 10 * GB, speed=2.0),
                               Device("/device:GPU:1", "GPU", 10 * GB, speed=4.0),
                               Device("/device:CPU:0", "CPU", 64 * GB, speed=16.0)])
    assert [cluster.reference_device(k) for k in ("GPU", "CPU")] == [0, 2]
    np.testing.assert_allclose(cluster.relative_speeds(), [1.0, 2.0, 1.0])
    got = ProfileCostModel.from_text(PROFILE).op_time(_graph(), cluster)
    us = 1e-6
    np.testing.assert_allclose(got[:3], [[10 * us, 5 * us, 20 * us],
                                         [100 * us, 50 * us, 900 * us],
                                         [5 * us, 2.5 * us, 30 * us]])
    partner, apart = ProfileCostModel.from_text(EXECUTION).partner_times(
        _graph(), cluster, ProfileCostModel.from_text(EXECUTION).op_time(_graph(), cluster))
    np.testing.assert_allclose(apart[2], [15e-6, 7.5e-6, 30e-6])


def test_a_profile_of_the_model_at_another_batch_size_is_refused():
    # "in" wrote 4096 bytes when profiled; here it writes 8192 (twice the batch).
    doubled = from_edges(4, [(0, 1, 8192), (1, 2, 2048), (2, 3, 2048)], names=NAMES,
                         kernels=KERNELS, op_types=TYPES)
    model = ProfileCostModel.from_text(PROFILE)
    with pytest.raises(ConfigError, match=r"other tensor sizes: 1 of the 1 ops .*'in': "
                                          r"4\.10 KB in the profile, 8\.19 KB here"):
        model.op_time(doubled, _cluster())
    assert np.isfinite(model.op_time(_graph(), _cluster())[0]).any()  # the profiled sizes: fine
    again = ProfileCostModel.from_proto(model.to_proto())  # the sizes survive a round trip
    with pytest.raises(ConfigError, match="other tensor sizes"):
        again.op_time(doubled, _cluster())


def test_a_profile_whose_ops_have_other_types_is_another_graphs():
    # A frozen inference graph's profile names the training graph's ops ("kernel" a Const
    # there, a VarHandleOp here) and was taken as this graph's: the report predicted 9x the
    # measured step from the estimates it filled in, and nothing said why.
    frozen = from_edges(4, [(0, 1, 4096), (1, 2, 1024), (2, 3, 1024)], names=NAMES,
                        kernels=KERNELS, op_types=["VarHandleOp", "MatMul", "Relu", "SaveV2"])
    model = ProfileCostModel.from_text(PROFILE)
    with pytest.raises(ConfigError, match=r"another graph's: 1 of the 2 ops it names have "
                                          r"another type here \(e\.g\. 'in': Const in the "
                                          r"profile, VarHandleOp here"):
        model.op_time(frozen, _cluster())
    again = ProfileCostModel.from_proto(model.to_proto())  # the types survive a round trip
    with pytest.raises(ConfigError, match="another graph's"):
        again.op_time(frozen, _cluster())
    assert model.op_time(_graph(), _cluster()).shape == (4, 3) and model.retyped == []


def test_a_few_ops_of_another_type_are_named_not_refused():
    typed = PROFILE + "".join(
        f'op {{ name: "x{i}" device_kind: "CPU" compute_time_us: 1 op_type: "Add" }}\n'
        for i in range(10))
    names = NAMES + [f"x{i}" for i in range(10)]
    graph = from_edges(14, [(0, 1, 4096), (1, 2, 1024), (2, 3, 1024)], names=names,
                       kernels=np.vstack([KERNELS, np.ones((10, 2), bool)]),
                       op_types=TYPES[:1] + ["BatchMatMulV2"] + TYPES[2:] + ["Add"] * 10)
    model = ProfileCostModel.from_text(
        typed, fallback=TableCostModel({"GPU": np.full(14, 7.0), "CPU": np.full(14, 3.0)}))
    model.op_time(graph, _cluster())  # 1 of 12 differs: under a tenth
    assert model.retyped == [("mm", "MatMul", "BatchMatMulV2")]
