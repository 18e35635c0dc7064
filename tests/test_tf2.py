"""The TF2 door: tf.function / ConcreteFunction placement, checked on two logical CPU devices.

Logical devices can only be configured before TF initialises its runtime, so the checks run in
one child process (tests/tf2_child.py, started once per module) and these tests read its JSON.
"""

import os

import numpy as np
import pytest

HOST = "/job:localhost/replica:0/task:0/device:"
BOTH = [f"{HOST}CPU:0", f"{HOST}CPU:1"]


@pytest.fixture(scope="module")
def child(run_checks):
    return run_checks(os.path.join("tests", "tf2_child.py"))


def _result(child, name):
    result = child[name]
    assert "exception" not in result, result.get("traceback")
    return result


def test_local_is_the_logical_cpus_the_process_configured(child):
    r = _result(child, "local")
    assert r["local"] == BOTH
    assert r["task"] == ["/job:worker/replica:0/task:0/device:CPU:0"]


def test_keras_training_step_placed_trains_identically(child):
    r = _result(child, "keras")
    np.testing.assert_allclose(r["losses"], r["reference"], rtol=1e-6)
    assert r["losses"][-1] < r["losses"][0]
    assert r["weights_equal"]  # the placed step updated the same variables the same way
    assert r["report_is_attr"]


def test_keras_training_step_runs_on_the_placed_devices(child):
    r = _result(child, "keras")
    assert set(BOTH) <= set(r["graph_devices"])
    assert sorted(r["executed"]) == BOTH  # both devices executed ops of the placed step
    assert min(r["executed"].values()) > 10


def test_captured_variables_are_pinned_to_their_device(child):
    r = _result(child, "keras")
    assert r["variable_devices"] == [f"{HOST}CPU:0"]
    assert r["resource_op_devices"] == r["variable_devices"]
    assert any("captured resources were pinned" in n for n in r["notes"])


def test_autoplace_dispatches_functions_inlines_nested_calls_and_keeps_signature(child):
    r = _result(child, "dispatch")
    assert r["is_placed_function"] and r["report_ops"] > 0
    assert r["equal"] and r["keys"] == ["diff", "sum"]
    assert r["numpy_by_name_equal"]
    assert r["call_ops_left"] == []  # nested tf.function calls were inlined and placed op by op
    assert r["graph_devices"] == BOTH
    assert sorted(r["executed"]) == BOTH


def test_a_placed_function_is_called_and_differentiated_as_the_original(child):
    r = _result(child, "calls")
    assert r["value_equal"]
    assert not r["grad_is_none"] and r["grad_equal"]  # a custom loop's tape sees the variable
    assert r["trainable"] == ["Variable:0"] or len(r["trainable"]) == 1
    assert r["after_tape_equal"]  # placed after a tape grew the traced graph's outputs
    assert r["nested_by_name_equal"]
    assert r["scaled_equal"] == [True] * 4  # NumPy positionally, a traced keyword, a default
    assert r["other_constant"][0] == "ConfigError" and "traced with the Python constant 2.0" \
        in r["other_constant"][1]
    *numbers, by_name, positionally = r["tensor_for_constant"]  # TF's: an untyped TypeError
    for kind, message in numbers:
        assert kind == "ConfigError" and "this call gives a tensor of 3.0" in message
    for kind, message in (by_name, positionally):  # not an AttributeError on bytes
        assert kind == "ConfigError" and "traced with the Python constant 'sum', and this " \
            "call gives a tensor of b'max'" in message
    assert r["tensor_of_the_constant_equal"]
    assert r["tensor_default_equal"]  # a tensor parameter left out: the tf.function's default
    assert r["keyword_default_equal"]  # a keyword-only one left out (was a ConfigError)
    assert r["unused_argument_equal"]  # an argument the function does not read
    assert r["numpy_strings_equal"] == [True] * 4  # NumPy's string arrays are tf.string
    # Another shape than the trace takes: refused (TF ran the traced shapes, without a word).
    loss_rows, nested_b, signature = r["other_shapes"]
    assert loss_rows[0] == "ConfigError" and "argument 'x' was traced as [4, 5] " \
        "float32" in loss_rows[1] and "this call gives [3, 5] float32" in loss_rows[1]
    assert nested_b[0] == "ConfigError" and "argument 'inp' was traced as [2] float32" in \
        nested_b[1]
    assert signature[0] == "ConfigError" and "traced as [None, 5] float32" in signature[1]
    assert r["none_dimension_equal"]  # a None dimension takes any size
    numpy_dtype, in_a_nest, varargs, structure = r["other_arguments"]  # TF would trace again
    assert numpy_dtype[0] == "ConfigError" and "NumPy float64 value" in numpy_dtype[1] \
        and "traced as [4, 5] float32" in numpy_dtype[1]  # a cast: other numbers, silently
    assert in_a_nest[0] == "ConfigError" and "argument 'inp' was traced as [2] float32, and " \
        "this call gives a NumPy float64 value" in in_a_nest[1]  # TF's binding casts it too
    assert varargs[0] == "ConfigError" and "traced with 2 positional arguments, and this " \
        "call gives 3" in varargs[1]
    assert structure[0] == "ConfigError" and "do not bind to the ones it was traced with" \
        in structure[1] and "'c': [4, 5] float32" in structure[1]  # not TF's TypeError
    assert r["total_equal"]  # *args as traced
    here, on_gpus = r["missing_notes"]  # placed for this process's devices, then for GPUs
    assert here == [] and len(on_gpus) == 1 and "GPU:0" in on_gpus[0] and "GPU:1" in on_gpus[0]
    kind, message = r["call_on_gpus"]  # called anyway, with soft placement off
    assert kind == "ConfigError" and "soft device placement is off" in message and \
        "GPU:0" in message


def test_a_loop_over_a_dataset_is_said_not_to_be_placed_op_by_op(child):
    r = _result(child, "dataset_loop")
    assert r["equal"] and len(r["notes"]) == 1 and "Dataset" in r["notes"][0]


def test_functional_control_flow_stays_single_ops_next_to_an_inlined_call(child):
    r = _result(child, "control_flow")
    # A loop that calls another function: a tape around the placed call gets the variable's
    # gradient (an imported loop had no handle data for it), and one inside a placed step too.
    assert r["loop_grad_around_equal"] and r["loop_grad_inside_equal"]
    # Placing a function with a cond must not break the original's gradient (its rewritten
    # branches used to clash with the placed function's by name).
    assert r["cond_grad_placed_then_original_equal"]
    assert r["equal"]
    assert r["flow_ops"] == ["If", "While"] and r["lowering_kept"]
    assert r["v1_ops"] == []
    assert any("placed as single ops" in n for n in r["notes"])


def test_control_flow_over_variables_on_two_devices_is_placed_and_differentiated(child):
    r = _result(child, "two_device_variables")
    assert {k: v["equal"] for k, v in r.items()} == {
        "loop/single": True, "loop/m_etf": True, "branch/single": True, "branch/m_etf": True}
    assert len(r["loop/m_etf"]["notes"]) == 1 and r["branch/m_etf"]["notes"] == []


def test_a_cond_reading_an_iterator_argument_runs_placed(child):
    # metis put the cond on one CPU and the iterator's reads on the other; the branch's
    # reads, colocated with the iterator, then could not be placed ("Cannot colocate nodes").
    r = _result(child, "optional_from_iterator")
    assert r["got"] == r["want"] == [0.0, 1.0, 3.0, 6.0, 10.0, 10.0, 10.0]


def test_a_keras_lstm_training_step_placed_trains_identically(child):
    r = _result(child, "keras_lstm")
    np.testing.assert_allclose(r["losses"], r["reference"], rtol=1e-6)


def test_a_call_grappler_specialized_runs_in_the_placed_function(child):
    r = _result(child, "specialized_call")
    assert len(r["called"]) == 1 and "_specialized_for_" in r["called"][0]
    assert r["equal"]
    assert r["saved_equal"]


@pytest.mark.parametrize("case, error, message", [
    ("xla", "ConfigError", "jit_compile=True"),
    ("xla_restored", "ConfigError", "this function restored from a SavedModel is compiled with "
                                    "XLA"),  # not TF's name for its graph
    ("no_args", "ConfigError", "input_signature"),
    ("variable_off_cluster", "ConfigError", "not a device of the cluster"),
    ("variable_argument", "ConfigError", "argument 0 is a tf.Variable"),
    ("ragged_argument", "ConfigError", "argument 0 is a RaggedTensorSpec"),
    ("untraceable_shape", "ConfigError", "cannot trace 'project' with the arguments given "
                                         "(ValueError"),
    ("strategy_run", "InvalidGraphError", "strategy over several devices, such as MirroredStrategy"),
    ("untraceable_big", "ConfigError", "cannot trace 'project' with the arguments given"),
    ("measured_function", "ConfigError", "measure_steps and verify are for graphs"),
])
def test_unsupported_functions_are_clear_errors(child, case, error, message):
    got = child["errors"]
    assert "exception" not in got, got.get("traceback")
    assert got[case] is not None, f"{case} did not raise"
    assert got[case][0] == error and message in got[case][1]
    assert len(got[case][1]) < 800, got[case][1]  # no tensor's values repeated at length


def test_a_profiled_split_is_told_to_time_the_function_not_to_profile_it_again(child):
    r = _result(child, "profiled_split")
    assert r["devices"] == 2
    (note,) = r["unchecked"]
    assert "time the placed function by calling it" in note and "cost profile" not in note
