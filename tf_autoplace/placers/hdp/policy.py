"""The Hierarchical Planner's policy: a feed-forward Grouper and a seq2seq Placer.

(Mirhoseini et al., "A Hierarchical Model for Device Placement", ICLR 2018, section 2; the
features are :mod:`tf_autoplace.placers.hdp.view`'s, the training loop
:mod:`tf_autoplace.placers.hdp.search`.)

With M learned units (TF colocation groups), N groups, D action devices and V op types:

1. **Grouper** (feed-forward): each unit's type fractions and its predecessors' and
   successors' type fractions are multiplied by one learned type-embedding table ([V, E_t]:
   the average of the member ops' type embeddings), concatenated with the unit's numeric
   features, and passed through a ReLU layer of ``grouper_hidden`` and a linear layer to N
   logits. A grouping is one independent sample per unit from ``softmax`` of its logits.
2. **Placer** (sequence to sequence, with LSTM cells and content-based attention): each
   group's features (its type fractions through the placer's own type table, numeric features
   and adjacency rows) are projected to ``hidden`` (tanh) and read in group order by a
   bidirectional LSTM (``hidden`` per direction), giving N encoder states of width 2 H. The
   decoder LSTM (width 2 H, its state started from the two final encoder states) emits one
   device per step, for the groups in the same order; its input at step t is the trainable
   embedding of the device it chose at step t - 1 (a learned start embedding at t = 0), as the
   paper says, and the encoder state of group t (the paper leaves the decoder's inputs
   otherwise open; without it the decoder would know which group it places only through its
   attention). After the cell, attention over the N encoder states (see "How it runs") gives a
   context vector; ``tanh(W [h_t; context])`` then a linear layer give the D logits.

**Initial state.** Both heads start uniform (their last layers at zero): every unit equally
likely in every group, every group on every device; the paper does not say how its networks
start. A uniform grouper makes every group a random sample of the whole graph, so the first
placements that use two devices scatter ops at random, and what the search learns first is to
put nearly everything on one GPU. Starting the grouper from runs of the topological order
instead (a term linear in the unit's position) did no better (``docs/experiments.md``). The
uniform start is the search's ``start="uniform"``; its default starts from a heuristic (below).

**Heuristic start** (``hinted=True``, a view built with a hint; the search's default,
``start="heuristic"``). The grouper and the placer read one more feature each, the hint order
``q`` (:mod:`tf_autoplace.placers.hdp.view`), and :meth:`HDPPolicy.start_grouper_from_hint` sets the
grouper so that a unit prefers the group whose centre ``c_g = (g + 1/2) / N`` is nearest its
``q``: logits ``-s (q - c_g)^2`` up to a constant per unit, which one ReLU unit (``A q``, as
``q >= 0``) and the output layer (``2 s c_g / A`` from it, bias ``-s c_g^2``) express exactly.
The scale is split evenly between the two layers (``A = sqrt(2 s)``) so that an Adam step on
either moves a logit by at most about ``sqrt(2 s)`` times the rate: with the whole scale in
the output layer, one Adam step on the hidden weight would move every logit by the whole scale
and regroup the whole graph. ``s = sharpness N^2``: neighbouring groups' logits differ by
``sharpness`` at a group's centre. The search then fits the placer to the heuristic's devices
(:mod:`tf_autoplace.placers.hdp.search`).

**Sizes.** The paper trains its controller on a GPU and does not give its widths in this
text. On 2 CPU cores a step of the sampling decoder is a handful of small matrix products whose
cost is mostly per-op overhead, so width buys little and costs time: we default to ``hidden =
32`` per encoder direction (decoder 64), type embeddings of 16, a grouper layer of 64, device
embeddings of 16 and attention of 32 (the costs per policy update: ``docs/experiments.md``).

**Randomness.** The policy draws nothing itself: the search passes uniform noise from its seeded
numpy generator (inverse-CDF sampling for the grouper, Gumbel noise for the decoder, whose
sampled device feeds the next step and must therefore be drawn inside the TF loop), so the same
seed gives the same samples.

**How it runs.** Every LSTM whose inputs are known in advance runs as one fused ``BlockLSTM``
op (TF's CPU kernel, gradient included): the encoder, and the decoder when it scores placements
already sampled (teacher forcing: its inputs are the devices those placements chose), with the
attention of all N steps as one batched product. Only sampling runs step by step (a
``tf.scan``), because the device drawn at step t is the decoder's input at step t + 1; it needs
no gradient. The gradient of a ``tf.scan`` over 256 steps costs many times its forward pass and
dominated an update (docs/experiments.md, "HDP"). The attention is placed after the decoder
cell (its output, not its input, reads the context), which is what lets the teacher-forced
decoder run fused; its score is multiplicative,
``score_j = (W_d h_t + b_d) . (W_e e_j + b_e)``, a content-based score like the paper's [2]
(Bahdanau's additive one), computed for all steps at once. The functions are ``tf.function``
graphs traced once per architecture and process (:mod:`tf_autoplace.learning.shared_trace`),
not XLA-compiled: XLA did not run these loops faster on CPU and took far longer to compile
(docs/experiments.md, "HDP").
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tf_autoplace.errors import ConfigError
from tf_autoplace.learning.checkpoints import Checkpointable
from tf_autoplace.learning.shared_trace import shared_method
from tf_autoplace.placers.hdp.view import GROUP_NUMERIC, UNIT_NUMERIC


def _glorot(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(np.float32)


class _Dense(tf.Module):
    """``x @ w + b``; ``zero=True`` starts w at 0 (a uniform softmax head)."""

    def __init__(self, fan_in: int, fan_out: int, rng: np.random.Generator, name: str,
                 zero: bool = False):
        super().__init__(name=name)
        w = np.zeros((fan_in, fan_out), np.float32) if zero else _glorot(rng, fan_in, fan_out)
        self.w = tf.Variable(w, name="w")
        self.b = tf.Variable(np.zeros(fan_out, np.float32), name="b")

    def __call__(self, x):
        return tf.tensordot(x, self.w, axes=1) + self.b


class _LSTMCell(tf.Module):
    """A standard LSTM cell without peepholes: gates in TF's fused-kernel order (input, cell
    input, forget, output) from one product, the forget gate's bias starting at 1.

    ``__call__`` is one step; :meth:`sequence` runs a whole sequence of known inputs in TF's
    fused ``BlockLSTM`` kernel, the same arithmetic (a test checks it) in one op whose gradient
    is one op too: a ``tf.scan`` of the cell spent most of an update in its gradient's loop."""

    def __init__(self, fan_in: int, units: int, rng: np.random.Generator, name: str):
        super().__init__(name=name)
        self.units = units
        self.w = tf.Variable(_glorot(rng, fan_in + units, 4 * units), name="w")
        bias = np.zeros(4 * units, np.float32)
        bias[2 * units:3 * units] = 1.0
        self.b = tf.Variable(bias, name="b")

    def __call__(self, x, h, c):
        """One step: ``x`` [K, I], state ``h``, ``c`` [K, U] -> the new (h, c)."""
        z = tf.matmul(tf.concat([x, h], axis=-1), self.w) + self.b
        i, g, f, o = tf.split(z, 4, axis=-1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        return tf.sigmoid(o) * tf.tanh(c), c

    def sequence(self, x, h, c):
        """All steps: ``x`` [T, K, I] (time-major), initial ``h``, ``c`` [K, U] -> (h, c) of
        every step, [T, K, U] each."""
        zeros = tf.zeros([self.units])
        out = tf.raw_ops.BlockLSTM(
            seq_len_max=tf.cast(tf.shape(x)[0], tf.int64), x=x, cs_prev=c, h_prev=h,
            w=self.w, wci=zeros, wcf=zeros, wco=zeros, b=self.b, forget_bias=0.0,
            cell_clip=-1.0)  # no extra forget bias (it is in b), no clipping of c
        return out[6], out[1]


# Inputs that describe K sampled placements: unit features [M, 3 V + S], groupings [K, M],
# their group features [K, N, F] and the device of each group [K, N].
_SAMPLES = [tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None, None], tf.int32),
            tf.TensorSpec([None, None, None], tf.float32), tf.TensorSpec([None, None], tf.int32)]


class HDPPolicy(Checkpointable, tf.Module):
    """Grouper and Placer (see the module doc). ``config`` is what :meth:`save` writes.

    Args:
      num_groups: N, the groups the grouper assigns units to (paper: a hyperparameter).
      num_devices: D, the action devices.
      type_vocab: the op-type names of the type columns (the view's; "other" is implicit).
      type_embed, grouper_hidden, hidden, device_embed, attention: widths (module doc).
      hinted: read the hint-order feature of a view built with a hint (module doc).
      seed: initial weights are drawn from numpy's generator with this seed.
    """

    kind = "an HDP policy"

    def __init__(self, num_groups: int, num_devices: int, type_vocab, *, type_embed: int = 16,
                 grouper_hidden: int = 64, hidden: int = 32, device_embed: int = 16,
                 attention: int = 32, hinted: bool = False, seed: int = 0):
        super().__init__(name="hdp_policy")
        if not (isinstance(num_groups, int) and num_groups >= 1):
            raise ConfigError(f"num_groups must be an int >= 1, got {num_groups!r}")
        if not (isinstance(num_devices, int) and num_devices >= 2):
            raise ConfigError(f"a policy needs an int >= 2 devices to choose from, got "
                              f"{num_devices!r}")
        widths = dict(type_embed=type_embed, grouper_hidden=grouper_hidden, hidden=hidden,
                      device_embed=device_embed, attention=attention)
        for name, width in widths.items():
            if not (isinstance(width, int) and width >= 1):
                raise ConfigError(f"{name} must be an int >= 1, got {width!r}")
        if not isinstance(hinted, bool):
            raise ConfigError(f"hinted must be a bool, got {hinted!r}")
        self.config = dict(num_groups=num_groups, num_devices=num_devices,
                           type_vocab=list(type_vocab), seed=seed, hinted=hinted, **widths)
        rng = np.random.default_rng(seed)
        v, n, d, h = len(type_vocab) + 1, num_groups, num_devices, hidden
        self.num_types = v
        # Grouper.
        self.grouper_types = tf.Variable(_glorot(rng, v, type_embed), name="grouper_types")
        self.grouper_hidden = _Dense(3 * type_embed + UNIT_NUMERIC + hinted, grouper_hidden,
                                     rng, "grouper_hidden")
        self.grouper_out = _Dense(grouper_hidden, n, rng, "grouper_out", zero=True)
        # Placer: encoder.
        self.placer_types = tf.Variable(_glorot(rng, v, type_embed), name="placer_types")
        self.group_embed = _Dense(type_embed + GROUP_NUMERIC + hinted + 2 * n, h, rng,
                                  "group_embed")
        self.encoder_fw = _LSTMCell(h, h, rng, "encoder_fw")
        self.encoder_bw = _LSTMCell(h, h, rng, "encoder_bw")
        # Placer: decoder.
        self.devices = tf.Variable(_glorot(rng, d + 1, device_embed), name="devices")  # + start
        self.decoder = _LSTMCell(device_embed + 2 * h, 2 * h, rng, "decoder")
        self.attend_encoder = _Dense(2 * h, attention, rng, "attend_encoder")
        self.attend_decoder = _Dense(2 * h, attention, rng, "attend_decoder")
        self.combine = _Dense(4 * h, h, rng, "combine")
        self.device_out = _Dense(h, d, rng, "device_out", zero=True)

    @property
    def num_groups(self) -> int:
        return self.config["num_groups"]

    @property
    def num_devices(self) -> int:
        return self.config["num_devices"]

    @property
    def type_vocab(self) -> tuple[str, ...]:
        return tuple(self.config["type_vocab"])

    @property
    def hinted(self) -> bool:
        return self.config["hinted"]

    def start_grouper_from_hint(self, sharpness: float) -> None:
        """Set the grouper to prefer, for each unit, the group whose centre is nearest its
        hint order ``q`` (module doc; the hint order is the last unit feature, ``2 q - 1``):
        the first hidden unit becomes ``A q`` and the output layer reads only it."""
        if not self.hinted:
            raise ConfigError("only a policy made with hinted=True reads the hint order")
        n = self.num_groups
        scale = sharpness * n * n
        a = np.sqrt(2.0 * scale)
        centre = (np.arange(n) + 0.5) / n
        w, b = self.grouper_hidden.w.numpy(), self.grouper_hidden.b.numpy()
        w[:, 0], w[-1, 0], b[0] = 0.0, a / 2, a / 2  # (A / 2)(2 q - 1) + A / 2 = A q
        self.grouper_hidden.w.assign(w)
        self.grouper_hidden.b.assign(b)
        out = np.zeros(self.grouper_out.w.shape, np.float32)
        out[0] = 2.0 * scale * centre / a
        self.grouper_out.w.assign(out)
        self.grouper_out.b.assign((-scale * centre ** 2).astype(np.float32))

    # ------------------------------------------------------------------------------ grouper
    def _group_logits(self, unit_features):
        v = self.num_types
        types = tf.concat([tf.matmul(unit_features[:, i * v:(i + 1) * v], self.grouper_types)
                           for i in range(3)], axis=-1)
        x = tf.concat([types, unit_features[:, 3 * v:]], axis=-1)
        return self.grouper_out(tf.nn.relu(self.grouper_hidden(x)))

    @shared_method([tf.TensorSpec([None, None], tf.float32)])
    def group_probabilities(self, unit_features):
        """[M, N] the grouper's distribution over groups for each unit ([M, 3 V + S] input)."""
        return tf.nn.softmax(self._group_logits(unit_features))

    # ------------------------------------------------------------------------------- placer
    def _encode(self, group_features):
        """Encoder states [N, K, 2 H] (time-major) and the decoder's initial (h, c)."""
        v = self.num_types
        types = tf.tensordot(group_features[..., :v], self.placer_types, axes=1)
        x = tf.tanh(self.group_embed(tf.concat([types, group_features[..., v:]], axis=-1)))
        x = tf.transpose(x, [1, 0, 2])  # [N, K, H]
        zeros = tf.zeros([tf.shape(x)[1], self.config["hidden"]])
        fw_h, fw_c = self.encoder_fw.sequence(x, zeros, zeros)
        bw_h, bw_c = self.encoder_bw.sequence(tf.reverse(x, [0]), zeros, zeros)
        states = tf.concat([fw_h, tf.reverse(bw_h, [0])], axis=-1)
        return (states, tf.concat([fw_h[-1], bw_h[-1]], axis=-1),
                tf.concat([fw_c[-1], bw_c[-1]], axis=-1))

    def _readout(self, h, memory, keys):
        """Device logits [K, T, D] from decoder outputs ``h`` [K, T, 2 H], attending over the
        encoder states ``memory`` [K, N, 2 H] through their ``keys`` [K, N, A]."""
        scores = tf.matmul(self.attend_decoder(h), keys, transpose_b=True)  # [K, T, N]
        context = tf.matmul(tf.nn.softmax(scores), memory)  # [K, T, 2 H]
        return self.device_out(tf.tanh(self.combine(tf.concat([h, context], axis=-1))))

    def _decoder_inputs(self, states, previous):
        """Decoder inputs [N, K, E + 2 H]: the previous device's embedding and the group's
        encoder state (``previous`` [N, K] device chosen one step before, D = start)."""
        return tf.concat([tf.gather(self.devices, previous), states], axis=-1)

    def _teacher_forced_logits(self, group_features, actions):
        """[K, N, D] the decoder's logits at every step when it chose ``actions`` [K, N]
        before (its input at step t is ``actions[:, t - 1]``): the LSTM's inputs are then all
        known, so it runs as one fused sequence and the attention of every step as one batched
        product."""
        states, h0, c0 = self._encode(group_features)
        memory = tf.transpose(states, [1, 0, 2])  # [K, N, 2 H]
        start = tf.fill([tf.shape(actions)[0], 1], self.num_devices)
        previous = tf.transpose(tf.concat([start, actions[:, :-1]], axis=1))  # [N, K]
        h, _ = self.decoder.sequence(self._decoder_inputs(states, previous), h0, c0)
        return self._readout(tf.transpose(h, [1, 0, 2]), memory,
                             self.attend_encoder(memory))

    @shared_method([
        tf.TensorSpec([None, None, None], tf.float32),  # group features [K, N, F]
        tf.TensorSpec([None, None], tf.int32),  # devices chosen [K, N]
    ])
    def teacher_forced_logits(self, group_features, actions):
        """[K, N, D] the decoder's logits at each step given the earlier ``actions``."""
        return self._teacher_forced_logits(group_features, actions)

    @shared_method([
        tf.TensorSpec([None, None, None], tf.float32),  # group features [K, N, F]
        tf.TensorSpec([None, None, None], tf.float32),  # Gumbel noise [K, N, D]
    ])
    def sample_devices(self, group_features, noise):
        """[K, N] int32 device per group, sampled with the given Gumbel noise (the argmax of
        logits + noise; zero noise gives the decoder's greedy choice). Step by step: the device
        sampled at step t is the decoder's input at step t + 1."""
        states, h0, c0 = self._encode(group_features)
        memory = tf.transpose(states, [1, 0, 2])  # [K, N, 2 H]
        keys = self.attend_encoder(memory)

        def step(carry, inputs):
            h, c, previous = carry
            state_t, noise_t = inputs
            x = self._decoder_inputs(state_t, previous)
            h, c = self.decoder(x, h, c)
            logits = self._readout(h[:, None, :], memory, keys)[:, 0, :]
            return h, c, tf.argmax(logits + noise_t, axis=-1, output_type=tf.int32)

        start = tf.fill([tf.shape(states)[1]], self.num_devices)
        _, _, actions = tf.scan(step, (states, tf.transpose(noise, [1, 0, 2])),
                                initializer=(h0, c0, start))
        return tf.transpose(actions)

    def _placer_log_probs(self, group_features, actions, fed=None):
        """``(log_q [K, N, D], log p(actions) [K])``: the decoder's log-softmax at every step
        given the earlier ``actions`` (or, when given, the earlier ``fed`` [K, N]: what the
        decoder read may differ from what is scored), and each sample's summed
        log-probability of ``actions``."""
        log_q = tf.nn.log_softmax(self._teacher_forced_logits(
            group_features, actions if fed is None else fed))
        return log_q, tf.reduce_sum(tf.one_hot(actions, self.num_devices) * log_q, axis=[1, 2])

    def _log_probs(self, unit_features, labels, group_features, actions):
        log_p = tf.nn.log_softmax(self._group_logits(unit_features))  # [M, N]
        num_units, n = tf.shape(log_p)[0], tf.shape(log_p)[1]
        flat = tf.range(num_units)[None, :] * n + labels
        grouper = tf.reduce_sum(tf.gather(tf.reshape(log_p, [-1]), flat), axis=1)
        grouper_entropy = -tf.reduce_sum(tf.exp(log_p) * log_p)
        log_q, placer = self._placer_log_probs(group_features, actions)
        placer_entropy = -tf.reduce_mean(tf.reduce_sum(tf.exp(log_q) * log_q, axis=[1, 2]))
        return grouper, placer, grouper_entropy, placer_entropy

    @shared_method(_SAMPLES)
    def log_probs(self, unit_features, labels, group_features, actions):
        """``(grouper [K], placer [K], grouper entropy, placer entropy)``: the log-probability
        of each of K samples under the grouper and under the placer; the entropy of the
        grouping (the sum over units) and the placer's summed per-step entropy along the
        samples (their mean), on the scale of the log-probabilities they regularise."""
        return self._log_probs(unit_features, labels, group_features, actions)

    @shared_method([
        tf.TensorSpec([None, None, None], tf.float32),  # group features [K, N, F]
        tf.TensorSpec([None, None], tf.int32),  # target devices [K, N]
        tf.TensorSpec([None, None], tf.int32),  # devices the decoder reads [K, N]
    ])
    def placer_imitation_gradients(self, group_features, targets, fed):
        """The placer's cross-entropy towards ``targets`` (summed over the groups, averaged
        over the K groupings) when the decoder reads ``fed`` as the devices chosen before each
        step, and its gradients with respect to the placer's variables
        (:meth:`placer_variables` order): the heuristic start's fit (module doc). ``fed``
        equal to ``targets`` is plain teacher forcing; ``fed`` with some devices redrawn
        teaches the decoder to return to the targets after a device it did not expect (what
        sampling produces)."""
        with tf.GradientTape() as tape:
            loss = -tf.reduce_mean(self._placer_log_probs(group_features, targets, fed)[1])
        return loss, tape.gradient(loss, self.placer_variables())

    def placer_variables(self) -> list[tf.Variable]:
        """The placer's trainable variables (every one outside the grouper)."""
        grouper = {id(v) for v in (self.grouper_types, *self.grouper_hidden.trainable_variables,
                                   *self.grouper_out.trainable_variables)}
        return [v for v in self.trainable_variables if id(v) not in grouper]

    @shared_method(_SAMPLES + [
        tf.TensorSpec([None], tf.float32),  # advantages [K]
        tf.TensorSpec([], tf.float32),  # entropy weight
    ])
    def reinforce_gradients(self, unit_features, labels, group_features, actions, advantages,
                            entropy_weight):
        """The REINFORCE loss of K samples and its gradients (one per trainable variable):

            loss = - mean_k A_k (log p(g_k) + log p(d_k | g_k))  -  beta (H_grouper + H_placer)

        the paper's joint gradient of both networks (the grouping's and the devices'
        log-probabilities weighted by the same advantage), plus an optional entropy bonus."""
        with tf.GradientTape() as tape:
            grouper, placer, grouper_entropy, placer_entropy = self._log_probs(
                unit_features, labels, group_features, actions)
            loss = -tf.reduce_mean(advantages * (grouper + placer)) - entropy_weight * (
                grouper_entropy + placer_entropy)
        return loss, tape.gradient(loss, self.trainable_variables)
