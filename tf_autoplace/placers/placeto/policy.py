"""Placeto's policy network (Addanki et al., section 2 "Graph embedding"; appendix A.7).

For a state with G groups and features ``x`` [G, F] (see :mod:`tf_autoplace.placers.placeto.env`) and the
group ``v`` being placed, the network computes a distribution over the D action devices:

1. **Embed** each group's raw features: ``x_v <- relu(W x_v + b)`` (width E = 8).
2. **Two-way message passing**, k rounds (paper: 4..8), separate parameters per direction,
   shared across nodes and rounds. Top-down from the roots, then bottom-up from the leaves:

       x_v <- x_v + g_down( mean_{u in parents(v)}  f_down(x_u) )
       x_v <- x_v + g_up  ( mean_{u in children(v)} f_up(x_u) )

   The paper writes ``x_v <- g(sum f(x_u))``; we keep ``x_v`` as a residual so a node does not
   lose its own features on the way (roots and leaves have no messages in one direction), and
   we take means where the paper sums: with sums over hundreds of groups, one Adam step of
   1e-3 moved the logits so far that the policy collapsed onto one device.
3. **Pooling** for v: over the groups that can reach v, the groups v can reach, and the groups
   parallel to it (neither), each ``h_i(mean_{u in S_i(v)} l_i(x_u))``.
4. **Head**: ``[x_v, pool_parents, pool_children, pool_parallel]`` -> two ReLU layers of 16 ->
   D logits, plus ``keep * onehot(current device of v)`` with one learned scalar ``keep``. The
   MDP revisits a placement, and without this shortcut our policies collapsed to "always
   device d" instead of learning to leave most groups where they are (our addition).

f, g, l, h are two-layer ReLU MLPs of width 8 (A.7). Nothing reads node labels or their order:
messages are means over edges and pools are means over sets, so relabelling the groups of a graph
does not change the action distribution of any group (a test checks it). Any graph size works.

**Device count.** Following the paper, the current-placement feature is a one-hot over the D
action devices and the head outputs D logits, so one policy serves graphs placed on D devices; a
policy is built for a D and refuses another (the Placeto placer trains a fresh one then).

All T steps of an episode can be evaluated in one call (features [T, G, F]): a rollout calls it
once per step for all the episodes it runs in lockstep; the REINFORCE update re-evaluates a whole
episode at once. The forward pass is compiled with XLA (``jit_compile``), once per input shape:
at our sizes a call costs its per-op overhead, which XLA's fused kernels cut to a fraction, for
about a second of compilation per new shape. A policy that runs a single episode on a graph
(the default placer's zero-shot start) sets ``jit_compile = False`` and traces the pass without
XLA instead (``traced_logits``): a few dozen steps do not repay the compilation. Both are
traced once per architecture and process, not per policy
(:mod:`tf_autoplace.learning.shared_trace`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tf_autoplace.errors import ConfigError
from tf_autoplace.learning.checkpoints import Checkpointable
from tf_autoplace.learning.shared_trace import shared_method

# Where the environment's features put the current-placement one-hot (after its 3 static
# features; tf_autoplace.placers.placeto.env.STATIC_FEATURES).
PLACEMENT_OFFSET = 3
# Initial weight on the current device: an untrained policy leaves a group where it is with
# probability e^2 / (e^2 + D - 1) (0.88 on 2 devices), so its episodes explore small changes of
# the start placement instead of scrambling it.
KEEP_INIT = 2.0


class _MLP(tf.Module):
    """Dense layers with ReLU between them (and none after the last unless ``final_relu``)."""

    def __init__(self, sizes: list[int], rng: np.random.Generator, name: str,
                 final_relu: bool = False):
        super().__init__(name=name)
        self.final_relu = final_relu
        self.weights_ = []
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            limit = np.sqrt(6.0 / (fan_in + fan_out))  # Glorot uniform
            w = rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(np.float32)
            self.weights_.append((tf.Variable(w, name=f"w{i}"),
                                  tf.Variable(np.zeros(fan_out, np.float32), name=f"b{i}")))

    def __call__(self, x):
        for i, (w, b) in enumerate(self.weights_):
            x = tf.tensordot(x, w, axes=1) + b
            if i < len(self.weights_) - 1 or self.final_relu:
                x = tf.nn.relu(x)
        return x


# The forward pass's inputs.
_SIGNATURE = [
    tf.TensorSpec([None, None, None], tf.float32),  # features [T, G, F]
    tf.TensorSpec([None], tf.int32),  # edge_src [E]
    tf.TensorSpec([None], tf.int32),  # edge_dst [E]
    tf.TensorSpec([None, 3, None], tf.float32),  # pool masks [T, 3, G]
    tf.TensorSpec([None], tf.int32),  # current group per step [T]
]


class PlacetoPolicy(Checkpointable, tf.Module):
    """The policy network. ``logits(...)`` is the whole forward pass.

    ``jit_compile`` (an attribute, True unless set): an episode's steps
    (:meth:`step_logits`) run the pass compiled by XLA; False: traced only, for a policy that
    runs one episode on a graph.

    Args:
      num_devices: D, the number of action devices.
      num_features: F, raw features per group (5 + 3 D with the environment's features).
      embed: E, embedding width (paper: 8). hidden: MLP width in message passing (8).
      head: width of the two head layers (16). rounds: message-passing rounds k (4..8).
      seed: initial weights are drawn from numpy's generator with this seed.
    """

    kind = "a Placeto policy"

    def __init__(self, num_devices: int, num_features: int | None = None, *, embed: int = 8,
                 hidden: int = 8, head: int = 16, rounds: int = 4, seed: int = 0):
        super().__init__(name="placeto_policy")
        if num_devices < 2:
            raise ConfigError(f"a policy needs >= 2 devices to choose from, got {num_devices}")
        if not 1 <= rounds <= 16:
            raise ConfigError(f"rounds must be in [1, 16], got {rounds}")
        for name, width in (("embed", embed), ("hidden", hidden), ("head", head)):
            if not (isinstance(width, int) and width >= 1):
                raise ConfigError(f"{name} must be an int >= 1, got {width!r}")
        num_features = num_features or 5 + 3 * num_devices
        self.config = dict(num_devices=num_devices, num_features=num_features, embed=embed,
                           hidden=hidden, head=head, rounds=rounds, seed=seed)
        rng = np.random.default_rng(seed)
        e, h = embed, hidden
        self.embed = _MLP([num_features, e], rng, "embed", final_relu=True)
        self.f_down = _MLP([e, h, e], rng, "f_down")
        self.g_down = _MLP([e, h, e], rng, "g_down")
        self.f_up = _MLP([e, h, e], rng, "f_up")
        self.g_up = _MLP([e, h, e], rng, "g_up")
        self.pool_l = [_MLP([e, h, e], rng, f"l_{s}") for s in ("parents", "children", "parallel")]
        self.pool_h = [_MLP([e, h, e], rng, f"h_{s}") for s in ("parents", "children", "parallel")]
        self.head = _MLP([4 * e, head, head, num_devices], rng, "head")
        # Start from the uniform distribution: an untrained policy should not prefer a device.
        self.head.weights_[-1][0].assign(tf.zeros_like(self.head.weights_[-1][0]))
        # A learned weight on "this group's current device" added to its logit: an episode
        # revisits a placement, and keeping most groups where they are must be easy to learn.
        self.keep = tf.Variable(KEEP_INIT, name="keep")
        self.jit_compile = True

    @property
    def num_devices(self) -> int:
        return self.config["num_devices"]

    @shared_method(_SIGNATURE, jit_compile=True)
    def logits(self, features, edge_src, edge_dst, pool_masks, current):
        """[T, D] action logits for the group ``current[t]`` in state ``features[t]``."""
        return self._forward(features, edge_src, edge_dst, pool_masks, current)

    @shared_method(_SIGNATURE)
    def traced_logits(self, features, edge_src, edge_dst, pool_masks, current):
        """:meth:`logits` traced into a graph but not compiled by XLA: for one episode on a
        graph (a zero-shot placement), whose few dozen steps take less time than XLA takes
        to compile the pass for the graph's shape."""
        return self._forward(features, edge_src, edge_dst, pool_masks, current)

    def step_logits(self, features, edge_src, edge_dst, pool_masks, current):
        """The logits of an episode's steps: :meth:`logits`, or :meth:`traced_logits` when
        ``jit_compile`` is False."""
        forward = self.logits if self.jit_compile else self.traced_logits
        return forward(features, edge_src, edge_dst, pool_masks, current)

    def _forward(self, features, edge_src, edge_dst, pool_masks, current):
        num_groups = tf.shape(features)[1]
        x = tf.transpose(self.embed(features), [1, 0, 2])  # [G, T, E]: gather/segment on axis 0
        for _ in range(self.config["rounds"]):
            down = tf.math.unsorted_segment_mean(tf.gather(self.f_down(x), edge_src), edge_dst,
                                                 num_groups)
            x = x + self.g_down(down)
            up = tf.math.unsorted_segment_mean(tf.gather(self.f_up(x), edge_dst), edge_src,
                                               num_groups)
            x = x + self.g_up(up)
        x = tf.transpose(x, [1, 0, 2])  # [T, G, E]
        own = tf.gather(x, current, axis=1, batch_dims=1)  # [T, E]
        sizes = tf.maximum(tf.reduce_sum(pool_masks, axis=2, keepdims=True), 1.0)  # [T, 3, 1]
        means = pool_masks / sizes
        pooled = [h(tf.einsum("tg,tge->te", means[:, i], l(x)))
                  for i, (l, h) in enumerate(zip(self.pool_l, self.pool_h))]
        own_features = tf.gather(features, current, axis=1, batch_dims=1)  # [T, F]
        placed_on = own_features[:, PLACEMENT_OFFSET:PLACEMENT_OFFSET + self.num_devices]
        return self.head(tf.concat([own] + pooled, axis=-1)) + self.keep * placed_on

    def reinitialize(self, seed: int) -> None:
        """Draw every weight again as a fresh policy seeded ``seed`` has them, in place (the
        variables stay the same objects, so whatever holds them, an optimizer, still does)."""
        fresh = PlacetoPolicy(**dict(self.config, seed=seed))
        self.set_weights(fresh.get_weights())
        self.config["seed"] = seed

    def temper(self, temperature: float) -> None:
        """Divide every logit by ``temperature``, in place. The head's last layer is linear and
        ``keep`` is added to its output, so scaling both scales the logits exactly: the argmax
        (a greedy episode) stays the same, and sampling gets more random for a temperature > 1.
        """
        if not temperature > 0:
            raise ConfigError(f"temperature must be > 0, got {temperature!r}")
        w, b = self.head.weights_[-1]
        for v in (w, b, self.keep):
            v.assign(v / temperature)


def pool_masks(ancestors: np.ndarray, current: np.ndarray) -> np.ndarray:
    """[T, 3, G] float32 masks of the parents / children / parallel sets of ``current[t]``."""
    parents = ancestors[:, current].T  # u reaches v
    children = ancestors[current, :]  # v reaches u
    parallel = ~(parents | children)
    parallel[np.arange(len(current)), current] = False
    return np.stack([parents, children, parallel], axis=1).astype(np.float32)
