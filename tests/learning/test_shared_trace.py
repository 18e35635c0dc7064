"""Policy methods traced once per architecture and process (tf_autoplace.learning.shared_trace):
a second policy of an architecture reuses the first one's trace and computes with its own
weights, exactly as its method run eagerly does, forward, under a gradient tape, and where the
method takes gradients itself."""

import numpy as np
import pytest
import tensorflow as tf

from tf_autoplace.learning import shared_trace
from tf_autoplace.placers.gdp.features import graph_features
from tf_autoplace.placers.gdp.policy import GdpPolicy
from tf_autoplace.placers.gdp.policy import inputs as gdp_inputs
from tf_autoplace.placers.hdp.policy import HDPPolicy
from tf_autoplace.placers.hdp.view import GROUP_NUMERIC, UNIT_NUMERIC
from tf_autoplace.placers.placeto.policy import PlacetoPolicy, pool_masks
from tf_autoplace.testing import problems


def _placeto(seed):
    policy = PlacetoPolicy(2, seed=seed)
    # A non-zero last layer, so that two policies' logits differ beyond the keep term.
    policy.head.weights_[-1][0].assign(np.random.default_rng(seed).normal(size=(16, 2)))
    return policy


def _placeto_args():
    rng = np.random.default_rng(0)
    g, t = 12, 3
    ancestors = np.triu(np.ones((g, g), bool), 1)
    return (rng.random((t, g, 11), dtype=np.float32), np.arange(g - 1, dtype=np.int32),
            np.arange(1, g, dtype=np.int32), pool_masks(ancestors, np.arange(t)),
            np.arange(t, dtype=np.int32))


def _gdp(seed):
    policy = GdpPolicy(hint=True, seed=seed)
    for v in (policy.out.w, policy.node_key.w):  # zero at the start: make the head matter
        v.assign(np.random.default_rng(seed).normal(size=v.shape).astype(np.float32))
    return policy


def _gdp_args():
    return tuple(t.numpy() for t in gdp_inputs(graph_features(
        problems.random_problem(80, 0, num_gpus=2, max_groups=30), hint=True)))


VOCAB = ["Conv2D", "MatMul"]
M, N, K = 10, 4, 3  # units, groups, samples
V = len(VOCAB) + 1


def _hdp(seed):
    policy = HDPPolicy(N, 2, VOCAB, hidden=8, type_embed=4, grouper_hidden=8,
                       device_embed=4, attention=8, seed=seed)
    for v in (policy.device_out.w, policy.grouper_out.w):  # zero at the start
        v.assign(np.random.default_rng(seed).normal(size=v.shape).astype(np.float32))
    return policy


def _hdp_samples():
    rng = np.random.default_rng(1)
    return (rng.random((M, 3 * V + UNIT_NUMERIC), dtype=np.float32),
            rng.integers(0, N, (K, M)).astype(np.int32),
            rng.random((K, N, V + GROUP_NUMERIC + 2 * N), dtype=np.float32),
            rng.integers(0, 2, (K, N)).astype(np.int32))


CASES = {
    "placeto logits (XLA)": (_placeto, "logits", _placeto_args),
    "placeto traced_logits": (_placeto, "traced_logits", _placeto_args),
    "gdp logits": (_gdp, "logits", _gdp_args),
    "hdp group_probabilities": (_hdp, "group_probabilities", lambda: _hdp_samples()[:1]),
    "hdp teacher_forced_logits": (_hdp, "teacher_forced_logits",
                                  lambda: (_hdp_samples()[2], _hdp_samples()[3])),
    # Gradients taken inside the method: with respect to the rebound copy's variables.
    "hdp reinforce_gradients": (_hdp, "reinforce_gradients",
                                lambda: _hdp_samples() + (np.array([1.0, -0.5, 0.2], np.float32),
                                                          np.float32(0.01))),
}


def _eager(policy, name, args):
    """The method's body run eagerly on the policy itself (no tracing at all)."""
    return getattr(type(policy), name).__wrapped__(policy, *(tf.constant(a) for a in args))


def _dense(x):
    return np.asarray(tf.convert_to_tensor(x))  # a gather's gradient comes as IndexedSlices


def _close(a, b, rtol=1e-5, atol=1e-6):
    a, b = tf.nest.flatten(a), tf.nest.flatten(b)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(_dense(x), _dense(y), rtol=rtol, atol=atol)


def _differ(a, b):
    return max(np.abs(_dense(x) - _dense(y)).max()
               for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b))) > 1e-4


@pytest.mark.parametrize("case", CASES)
def test_a_second_policy_reuses_the_trace_and_computes_with_its_own_weights(case):
    make, name, make_args = CASES[case]
    args = make_args()
    first, second = make(3), make(4)
    out_first = getattr(first, name)(*args)
    traced = shared_trace.shared_function(first, name)
    count = traced.experimental_get_tracing_count()
    out_second = getattr(second, name)(*args)
    assert shared_trace.shared_function(second, name) is traced
    assert traced.experimental_get_tracing_count() == count
    _close(out_first, _eager(first, name, args))
    _close(out_second, _eager(second, name, args))
    assert _differ(out_first, out_second)  # a pass that kept the first's weights would not


@pytest.mark.parametrize("case", ["placeto logits (XLA)", "gdp logits",
                                  "hdp teacher_forced_logits"])
def test_a_gradient_tape_around_a_shared_method_sees_the_policys_variables(case):
    make, name, make_args = CASES[case]
    args = make_args()
    make(5)  # another policy of the architecture traced first: the tape must not see its
    getattr(make(5), name)(*args)
    policy = make(6)
    grads = {}
    for mode in ("shared", "eager"):
        with tf.GradientTape() as tape:
            out = getattr(policy, name)(*args) if mode == "shared" else _eager(policy, name,
                                                                                args)
            loss = tf.reduce_sum(tf.square(out))
        grads[mode] = tape.gradient(loss, policy.trainable_variables)
    # The same variables get a gradient (some do not reach this method's output) ...
    assert [g is None for g in grads["shared"]] == [g is None for g in grads["eager"]]
    used = [i for i, g in enumerate(grads["eager"]) if g is not None]
    assert len(used) > len(grads["eager"]) // 2
    # ... and the same one, to float rounding (XLA fuses the arithmetic, and float32 sums of
    # large terms lose digits: relative to the largest gradient).
    scale = max(np.abs(_dense(grads["eager"][i])).max() for i in used)
    _close([grads["shared"][i] for i in used], [grads["eager"][i] for i in used], rtol=1e-4,
           atol=1e-5 * scale)


def test_another_architecture_gets_its_own_trace():
    small, large = PlacetoPolicy(2, seed=0), PlacetoPolicy(2, rounds=2, seed=0)
    args = _placeto_args()
    small.traced_logits(*args)
    large.traced_logits(*args)
    assert (shared_trace.shared_function(small, "traced_logits")
            is not shared_trace.shared_function(large, "traced_logits"))
    assert shared_trace.architecture(small) == shared_trace.architecture(PlacetoPolicy(2, seed=9))


def test_rebind_swaps_every_variable_and_shares_the_rest():
    class Leaf(tf.Module):
        def __init__(self):
            super().__init__()
            self.pair = [(tf.Variable(1.0), tf.Variable(2.0))]
            self.table = {"w": tf.Variable(3.0)}
            self.width = 7

    class Root(tf.Module):
        def __init__(self):
            super().__init__()
            self.leaves = [Leaf(), Leaf()]
            self.same = self.leaves[0]  # reached twice: one copy
            self.keep = tf.Variable(4.0)

    root = Root()
    new = [tf.Variable(float(10 + i)) for i in range(len(root.variables))]
    copy = shared_trace._rebind(root, new)
    assert [v.numpy() for v in copy.variables] == [v.numpy() for v in new]
    assert copy.same is copy.leaves[0] and copy.leaves[1].width == 7
    assert [v.numpy() for v in root.variables] == [4.0, 1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
