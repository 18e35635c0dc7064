"""The Keras door: model.fit / evaluate / predict run placed functions (Keras 3 and tf_keras),
checked on two logical CPU devices in a child process (tests/keras_child.py), since logical
devices must be configured before TensorFlow starts its runtime."""

import ast
import os

import numpy as np
import pytest

from tests.conftest import REPO
from tests.test_tf2 import BOTH


# The checks of the default suite: fit, evaluate and predict placed in both Keras flavours, data
# of unknown length, and the models refused. One device, callbacks, changing shapes, input specs
# of weighted fits and the batch sizes Keras traces run with ``-m slow`` (seconds each).
SLOW_CHECKS = ("single", "callbacks", "shapes", "spec_parts", "batch_shapes")
CHECKS = ("keras3", "tf_keras", "unknown_length", "errors")


@pytest.fixture(scope="module")
def child(run_checks):
    return run_checks(os.path.join("tests", "keras_child.py"), *CHECKS, timeout=900)


@pytest.fixture(scope="module")
def slow_child(run_checks):
    return run_checks(os.path.join("tests", "keras_child.py"), *SLOW_CHECKS, timeout=900)


def test_every_check_of_the_child_runs_in_the_default_or_the_slow_suite():
    # Read without importing the child (it configures this process's logical devices).
    tree = ast.parse(open(os.path.join(REPO, "tests", "keras_child.py"), encoding="utf-8").read())
    checks = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                  and node.targets[0].id == "CHECKS")
    assert sorted(key.value for key in checks.keys) == sorted(CHECKS + SLOW_CHECKS)
    assert not set(CHECKS) & set(SLOW_CHECKS)


def _result(child, name):
    result = child[name]
    assert "exception" not in result, result.get("traceback")
    return result


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_fit_runs_placed_steps_with_the_unplaced_losses_on_both_devices(child, flavour):
    r = _result(child, flavour)
    assert len(r["losses"]) == len(r["reference"]) == 6  # 2 epochs of 3 batches (one short)
    np.testing.assert_allclose(r["losses"], r["reference"], rtol=1e-5)
    np.testing.assert_allclose(*r["evaluate"], rtol=1e-5)
    assert r["predict_diff"] < 1e-5
    assert sorted(r["executed"]) == BOTH and min(r["executed"].values()) > 10
    assert min(r["report_devices"]) > 0  # the report's placement uses both devices too
    assert r["kinds"] == ["predict", "test", "train"]
    assert r["reused"]  # the second fit ran the function placed in the first
    assert r["is_placement"]


@pytest.mark.slow
def test_a_model_placed_and_given_back_from_callbacks_in_the_middle_of_fit_trains_on(slow_child):
    r = _result(slow_child, "callbacks")
    assert len(r["losses"]) == 2 and all(np.isfinite(r["losses"]))
    assert r["placed"]  # the batches after the callback ran the placed step


@pytest.mark.parametrize("case", ["keras3_dataset", "keras3_generator", "tf_keras_dataset"])
def test_data_of_unknown_length_keeps_the_counters_of_the_unplaced_fit(child, case):
    # Keras' step runs on the exhausted iterator at each epoch's end and fails after Dropout's
    # seed and Adam's counter advanced: the placed fit must advance them too, or every later
    # Dropout mask and Adam step differs from the unplaced fit's.
    reference, placed = _result(child, "unknown_length")[case]
    assert len(placed["losses"]) == len(reference["losses"]) == 9  # 3 epochs of 3 batches
    assert placed["iterations"] == reference["iterations"]
    np.testing.assert_allclose(placed["losses"], reference["losses"], rtol=1e-5)


@pytest.mark.parametrize("case", ["tf_keras_arrays_then_generator",
                                  "keras3_arrays_then_loose_dataset"])
def test_a_generator_after_arrays_gets_a_step_for_its_looser_spec(child, case):
    # Its batches have the arrays' 16 features; only the iterator's spec leaves them free, as
    # Keras' own trace for it does: not a batch of another shape to refuse.
    reference, placed = _result(child, "unknown_length")[case]
    assert len(placed["losses"]) == len(reference["losses"]) == 6, placed["losses"][-1]
    assert placed["iterations"] == reference["iterations"]
    np.testing.assert_allclose(placed["losses"], reference["losses"], rtol=1e-5)


@pytest.mark.slow
def test_on_one_device_the_losses_are_bitwise_the_unplaced_ones(slow_child):
    r = _result(slow_child, "single")
    # It advised measure_steps and verify, which a Keras model refuses.
    advice = [n for n in r["local_notes"] if "analytical estimates" in n]
    assert len(advice) == 1 and "time the placed model by fitting it" in advice[0], advice
    assert "measure_steps" not in advice[0] and "cost profile" not in advice[0]
    assert len(r["losses"]) == 6 and r["losses"] == r["reference"]


def test_autoplace_takes_a_keras_model_to_the_keras_door(child):
    assert _result(child, "keras3")["is_placement"]  # keras3 goes through autoplace()


@pytest.mark.slow
def test_batches_whose_other_dimensions_change_are_refused_unless_input_spec_frees_them(slow_child):
    r = _result(slow_child, "shapes")
    np.testing.assert_allclose(r["free"], r["free_reference"], rtol=1e-5)
    for name, placed_for in (("replaced", "[8, 5, 4]"), ("refused", "[None, 5, 4]")):
        kind, message = r[name]
        assert kind == "ConfigError"
        assert placed_for in message and "[8, 7, 4]" in message and "input_spec" in message
    assert r["removed"]  # remove() gives the model back Keras' own functions
    assert r["stale_remove_kept"]  # ... but not a placement that a later one replaced


@pytest.mark.slow
@pytest.mark.parametrize("model", ["keras_Flatten8", "keras_StaticBranch",
                                   "tf_keras_Flatten8", "tf_keras_StaticBranch"])
def test_a_call_that_reads_the_static_batch_size_sees_it_as_keras_traces_it(slow_child, model):
    reference, placed = _result(slow_child, "batch_shapes")[model]
    np.testing.assert_allclose(placed, reference, rtol=1e-5)


@pytest.mark.slow
def test_an_iterator_of_free_batch_size_does_not_run_the_step_placed_for_a_fixed_one(slow_child):
    reference, placed = _result(slow_child, "batch_shapes")["fixed_then_free"]
    np.testing.assert_allclose(placed, reference, rtol=1e-5)


@pytest.mark.slow
def test_a_new_sequence_length_is_refused_not_a_placement_per_length(slow_child):
    kind, message = _result(slow_child, "batch_shapes")["new_length"]
    assert kind == "ConfigError"
    assert "placed for batches shaped ([None, 5, 2]" in message and "[4, 6, 2]" in message


@pytest.mark.slow
def test_a_new_batch_size_the_step_cannot_take_free_is_an_error_at_that_batch(slow_child):
    kind, message = _result(slow_child, "batch_shapes")["short_batch_untraceable"]
    assert kind == "ConfigError"
    assert "cannot trace the model's train step for batches" in message
    assert "[None, 2, 4]" in message and "placed for other shapes" in message


@pytest.mark.slow
def test_a_step_keras_cannot_trace_for_its_iterator_fails_before_any_batch_trains(slow_child):
    kind, message, unchanged = _result(slow_child, "batch_shapes")["free_batch_untraceable"]
    assert kind == "ConfigError" and "cannot trace the model's train step" in message
    assert "[None, 2, 4]" in message and unchanged


@pytest.mark.slow
def test_train_and_test_on_batch_take_an_x_y_input_spec(slow_child):
    reference, placed = _result(slow_child, "batch_shapes")["on_batch"]
    np.testing.assert_allclose(placed, reference, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("kind, name", [("ragged", "RaggedTensor"), ("sparse", "SparseTensor")])
def test_ragged_and_sparse_batches_are_refused_as_such(slow_child, kind, name):
    got = _result(slow_child, "batch_shapes")[kind]
    assert got is not None and got[0] == "ConfigError"
    assert f"batches hold a {name}" in got[1] and "dense batches only" in got[1]


@pytest.mark.slow
def test_one_input_spec_serves_weighted_fit_validation_and_predict(slow_child):
    (loss, val_loss, predicted), (p_loss, p_val_loss, p_predicted) = _result(
        slow_child, "spec_parts")["spec_runs"]
    np.testing.assert_allclose([p_loss, p_val_loss], [loss, val_loss], rtol=1e-5)
    np.testing.assert_allclose(p_predicted, predicted, rtol=1e-5)


@pytest.mark.slow
def test_an_evaluate_after_a_weighted_validation_gets_a_step_for_its_structure(slow_child):
    reference, *placed = _result(slow_child, "spec_parts")["structures"]
    for run in placed:  # without and with an input_spec
        np.testing.assert_allclose(run, reference, rtol=1e-5)


@pytest.mark.slow
def test_predict_takes_the_x_y_batches_of_the_dataset_fit_reads(slow_child):
    reference, *placed = _result(slow_child, "spec_parts")["predict_on_fit_dataset"]
    for run in placed:  # without and with an input_spec (x, y)
        np.testing.assert_allclose(run, reference, rtol=1e-5)


@pytest.mark.slow
def test_tf_keras_predict_joins_the_batches_of_an_execution(slow_child):
    reference, placed = _result(slow_child, "spec_parts")["tf_keras_predict"]
    assert len(reference) == len(placed) == 40  # every row, not one batch per execution
    np.testing.assert_allclose(placed, reference, rtol=1e-5)


@pytest.mark.parametrize("case, message", [
    ("uncompiled", "compile(...) before autoplace_model"),
    ("run_eagerly", "it was compiled with run_eagerly=True"),
    ("run_functions_eagerly", "tf.config.run_functions_eagerly(True) is on, and the model "
                              "was compiled without run_eagerly"),
    ("jit_compile", "jit_compile=False"),
    ("recompiled_jit_compile", "jit_compile=False"),  # compile() after autoplace_model
    # ... where the model can also go back to running unplaced
    ("recompiled_jit_compile", "remove() on the placement gives the model back"),
    ("not_a_model", "expected a Keras 3 or tf_keras Model"),
    ("verify", "a Keras model is timed by fitting it"),
    ("verify_model", "a Keras model is timed by fitting it"),
    ("verify_below_range", "a Keras model is timed by fitting it"),  # not "an int >= 15"
    ("measure_feeds", "a Keras model is timed by fitting it"),
    ("measure_feeds_model", "a Keras model is timed by fitting it"),
    ("input_spec", "does not fit the model's first train batch"),
    ("absent_devices", "device:GPU:0, /job:localhost/replica:0/task:0/device:GPU:1) and soft "
                       "device placement is off"),
    ("fit_under_a_strategy", "train ran under a tf.distribute strategy (MirroredStrategy)"),
])
def test_models_that_cannot_run_placed_steps_are_config_errors(child, case, message):
    got = _result(child, "errors")[case]
    assert got is not None, f"{case} did not raise"
    assert got[0] == "ConfigError" and message in got[1], got
