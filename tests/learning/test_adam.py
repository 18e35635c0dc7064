"""The learned placers' Adam (tf_autoplace.learning.adam) against Keras's, bit for bit."""

import numpy as np
import pytest
import tensorflow as tf

from tf_autoplace.learning.adam import FusedAdam, KerasAdam

SHAPES = [(4, 3), (5,), (2, 3, 2), (1,)]


def _bits(variables):
    return [v.numpy().view(np.int32) for v in variables]


def test_keras_adam_gives_keras_weights_bit_for_bit():
    rng = np.random.default_rng(0)
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    ours, theirs = [tf.Variable(x) for x in init], [tf.Variable(x) for x in init]
    keras = tf.keras.optimizers.Adam(learning_rate=1e-3)
    adam = KerasAdam(learning_rate=1e-3)
    for step in range(40):
        rate = 1e-3 * (1 + 0.05 * step)  # a schedule, as Placeto's
        grads = [tf.constant(rng.standard_normal(s).astype(np.float32)
                             * np.float32(10.0 ** rng.uniform(-6, 1))) for s in SHAPES]
        if step % 7 == 3:  # no gradient for a variable: left alone, the step still counts
            grads[1] = None
        if step % 5 == 2:  # a sparse gradient (a gather's), row 1 gathered twice
            rows = tf.constant([2, 0, 1, 3, 1])
            grads[0] = tf.IndexedSlices(tf.gather(grads[0], rows), rows,
                                        tf.constant(SHAPES[0]))
        keras.learning_rate.assign(rate)
        adam.learning_rate = rate
        if grads[1] is None:  # Keras warns that a variable has no gradient
            with pytest.warns(UserWarning, match="Gradients do not exist"):
                keras.apply_gradients(zip(grads, theirs))
        else:
            keras.apply_gradients(zip(grads, theirs))
        adam.apply_gradients(zip(grads, ours))
        for a, b in zip(_bits(ours), _bits(theirs)):
            np.testing.assert_array_equal(a, b, err_msg=f"step {step}")
    assert adam.iterations == int(keras.iterations.numpy()) == 40
    # Not vacuous: the weights moved.
    assert all(not np.array_equal(v.numpy(), x) for v, x in zip(ours, init))


def test_fused_adam_follows_the_gradient_within_its_clip():
    rng = np.random.default_rng(1)
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    variables = [tf.Variable(x) for x in init]
    adam = FusedAdam(variables)
    grads = [tf.ones(s) * 100.0 for s in SHAPES]
    adam.apply(grads, learning_rate=0.01, max_norm=1.0)
    # Adam's first step moves every weight by about the rate against its gradient's sign,
    # whatever the gradient's size (clipped or not).
    for v, x in zip(variables, init):
        np.testing.assert_allclose(x - v.numpy(), 0.01, rtol=1e-3)
