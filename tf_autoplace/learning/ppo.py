"""Proximal Policy Optimization's clipped objective for factorised placements (Schulman et al.
2017, eq. 7), and the advantages it weighs.

A placement is one categorical decision per group, drawn independently given the policy's
output, and one reward scores the whole placement. Two ways to apply PPO's clip exist: to the
ratio of the joint probabilities (the product over groups), or to each decision's ratio with
the placement's advantage. With hundreds of groups the joint ratio is the product of hundreds
of per-group ratios: after one update it is far outside ``[1 - eps, 1 + eps]`` for almost
every sample, and the clip then zeroes almost every gradient. We clip per decision: each
group's choice is an action that earned its placement's advantage; the loss is the mean over
samples and placed groups of ``min(rho A, clip(rho, 1 - eps, 1 + eps) A)``, minus an entropy
bonus (mean per-group entropy) weighted ``beta``. The gradient at ratio 1 is REINFORCE's on the
sum of the groups' log-probabilities, divided by the number of groups (Adam is insensitive to
that scale).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def clipped_loss(logits, actions, old_log_probs, advantages, mask, *, clip: float,
                 entropy_weight: float):
    """The loss to minimise, a scalar tensor.

    Args:
      logits: [G, D] the current policy's logits.
      actions: [B, G] int32 sampled device per group.
      old_log_probs: [B, G] log-probabilities of ``actions`` under the policy that sampled.
      advantages: [B] one advantage per placement.
      mask: [G] float32, 1 for the groups the policy places (the others are fixed).
      clip: eps; entropy_weight: beta.
    """
    log_p = tf.nn.log_softmax(logits)  # [G, D]
    depth = tf.shape(logits)[1]
    taken = tf.reduce_sum(tf.one_hot(actions, depth) * log_p[None], axis=-1)  # [B, G]
    ratio = tf.exp(taken - old_log_probs)
    adv = tf.cast(advantages, tf.float32)[:, None]
    surrogate = tf.minimum(ratio * adv, tf.clip_by_value(ratio, 1.0 - clip, 1.0 + clip) * adv)
    placed = tf.maximum(tf.reduce_sum(mask), 1.0)
    batch = tf.cast(tf.shape(actions)[0], tf.float32)
    objective = tf.reduce_sum(surrogate * mask[None]) / (placed * batch)
    entropy = -tf.reduce_sum(tf.exp(log_p) * log_p, axis=-1)  # [G]
    return -objective - entropy_weight * tf.reduce_sum(entropy * mask) / placed


def advantages(rewards: np.ndarray, history: np.ndarray | None, floor: float) -> np.ndarray:
    """[B] normalised advantages of a batch of one graph's rewards.

    The baseline is the mean reward of the graph's previous trials (``history``; GDP section
    4.1: "the average reward of all the previous trials"), or of this batch when there are none
    yet. The spread they are divided by is the standard deviation over the history and the
    batch together, at least ``floor``: every graph of a batch then moves the policy by steps of
    the same size, whatever its step time, and a batch of identical placements (nothing to
    learn) gives advantages near 0 rather than noise blown up; exactly 0 when the spread and the
    floor are both 0 (every placement scored 0 s: a graph whose ops take no time)."""
    rewards = np.asarray(rewards, np.float64)
    baseline = rewards.mean() if history is None or not len(history) else history.mean()
    seen = rewards if history is None else np.concatenate([history, rewards])
    spread = max(float(seen.std()), floor)
    return (rewards - baseline) / spread if spread > 0 else np.zeros_like(rewards)
