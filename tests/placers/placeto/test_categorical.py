"""Placeto's categorical arithmetic (reinforce.log_prob, reinforce.entropy) against TensorFlow
Probability's Categorical, bit for bit, values and gradients."""

import numpy as np
import pytest
import tensorflow as tf

from tf_autoplace.placers.placeto import reinforce


@pytest.fixture(scope="module")
def tfp():
    # Imported by the test, not at collection: a second of every worker's start otherwise.
    return pytest.importorskip("tensorflow_probability")  # the test extra installs it


def _logits(rng):
    logits = rng.standard_normal((9, 4)).astype(np.float32) * 5
    logits[2, 1] = -np.inf  # a device the group cannot go to: probability 0
    logits[5] = [300.0, -300.0, 0.0, 1.0]  # probabilities that underflow to 0
    return logits


def test_log_prob_and_entropy_are_tfps_with_their_gradients(tfp):
    rng = np.random.default_rng(0)
    values = tf.Variable(_logits(rng))
    actions = rng.integers(0, 4, 9)
    actions[2] = 0  # not the impossible device: a finite log-probability
    weights = tf.constant(rng.standard_normal(9).astype(np.float32))

    def losses(ours):
        with tf.GradientTape() as tape:
            if ours:
                lp, ent = reinforce.log_prob(values, actions), reinforce.entropy(values)
            else:
                dist = tfp.distributions.Categorical(logits=values)
                lp, ent = dist.log_prob(actions), dist.entropy()
            loss = -tf.reduce_sum(weights * lp) - 0.01 * tf.reduce_sum(ent)
        return lp.numpy(), ent.numpy(), tape.gradient(loss, values).numpy()

    for ours, theirs in zip(losses(True), losses(False)):
        np.testing.assert_array_equal(ours.view(np.int32), theirs.view(np.int32))
    assert np.isfinite(losses(True)[1]).all()  # the 0-probability terms count as 0
