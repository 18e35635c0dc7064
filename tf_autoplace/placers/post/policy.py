"""Post's policy: one softmax distribution over the action devices per placement unit.

(Gao et al., "Post: Device Placement with Cross-Entropy Minimization and Proximal Policy
Optimization", NeurIPS 2018, section 3.2, Eq. 2-3.)

A unit m (an op, or a group of ops placed together) goes to action device j with probability
``softmax(u_m)_j``, independently of every other unit, so a whole placement ``d`` has
probability ``prod_m f(d_m | u_m)``. With U units and D action devices the policy is a [U, D]
table of logits; :class:`SoftmaxTables` holds one and samples from it. It is numpy only: the
updates of :mod:`tf_autoplace.placers.post.updates` are closed forms, so no TensorFlow is needed and
the policy behaves the same whatever mode the calling program runs TensorFlow in.

**Devices without a kernel.** A unit whose ops cannot all run on device j has ``u_mj = -inf``:
its probability there is exactly 0 under every update (the updates leave ``-inf`` alone). Every
unit must be allowed somewhere; a unit the search cannot move at all is left out of the table
by its caller.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tf_autoplace.errors import ConfigError

# The logit given to a device a unit may use but whose probability an update set to 0 (a
# cross-entropy step without mixing): far below any other logit, yet finite, so the device stays
# allowed and every later update is arithmetic on finite numbers.
MIN_LOGIT = float(np.log(1e-30))


@dataclasses.dataclass(frozen=True, eq=False)
class SoftmaxTables:
    """Independent softmax distributions of U units over D devices.

    Attributes:
      logits: [U, D] float64 (read-only); ``-inf`` exactly where the unit may not go. Every row
        has a finite entry; no entry is NaN or ``+inf``.
    """

    logits: np.ndarray

    def __post_init__(self):
        logits = np.array(self.logits, dtype=np.float64)  # a private copy
        if logits.ndim != 2 or 0 in logits.shape:
            raise ConfigError(f"logits must be a non-empty [U, D] array, got shape "
                              f"{logits.shape}")
        if np.isnan(logits).any() or np.isposinf(logits).any():
            raise ConfigError("logits must not hold NaN or +inf")
        empty = np.flatnonzero(~np.isfinite(logits).any(axis=1))
        if len(empty):
            raise ConfigError(f"unit {int(empty[0])} may go to no device (every logit -inf)")
        logits.setflags(write=False)
        object.__setattr__(self, "logits", logits)

    @classmethod
    def uniform(cls, allowed: np.ndarray) -> "SoftmaxTables":
        """Each unit uniform over its allowed devices (``allowed`` [U, D] bool): Algorithm 1's
        all-zero start."""
        return cls(np.where(np.asarray(allowed, bool), 0.0, -np.inf))

    @classmethod
    def from_probabilities(cls, probs: np.ndarray, allowed: np.ndarray) -> "SoftmaxTables":
        """The tables whose distributions are ``probs`` [U, D] (rows summing to 1 over the
        allowed devices; a 0 on an allowed device becomes :data:`MIN_LOGIT`)."""
        probs, allowed = np.asarray(probs, np.float64), np.asarray(allowed, bool)
        if probs.shape != allowed.shape:
            raise ConfigError(f"probs has shape {probs.shape}, allowed {allowed.shape}")
        if (probs[~allowed] != 0).any():
            raise ConfigError("probs puts mass on a device the unit may not use")
        with np.errstate(divide="ignore"):
            logits = np.maximum(np.log(probs), MIN_LOGIT)
        return cls(np.where(allowed, logits, -np.inf))

    @property
    def num_units(self) -> int:
        return self.logits.shape[0]

    @property
    def num_devices(self) -> int:
        return self.logits.shape[1]

    @property
    def allowed(self) -> np.ndarray:
        """[U, D] bool: the devices each unit may use."""
        return np.isfinite(self.logits)

    def probabilities(self) -> np.ndarray:
        """[U, D] ``f(d_m = j | u_m)`` (Eq. 2); 0 where not allowed."""
        return softmax(self.logits)

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """[count, U] int: ``count`` placements drawn independently, each unit by inverse CDF
        from one uniform number (so the draw is the same on every machine for a seed)."""
        cdf = np.cumsum(self.probabilities(), axis=1)
        # Rounding must not let a draw fall past a unit's last allowed device: from there on
        # the CDF is made infinite.
        allowed = self.allowed
        last = allowed.shape[1] - 1 - np.argmax(allowed[:, ::-1], axis=1)
        cdf[np.arange(allowed.shape[1])[None, :] >= last[:, None]] = np.inf
        draws = rng.random((count, self.num_units, 1))
        # The device is the number of CDF steps the draw is at or above. A step of a device
        # without mass (p = 0) is flat, so a draw passes it together with the one before and
        # never stops there.
        return (draws >= cdf[None]).sum(axis=2).astype(np.int64)

    def mode(self) -> np.ndarray:
        """[U] int: each unit's most likely device (the lowest index on ties)."""
        return np.argmax(self.logits, axis=1)

    def log_prob(self, placements: np.ndarray) -> np.ndarray:
        """[B] ``log f(d | u)`` of each row of ``placements`` [B, U] (Eq. 3)."""
        placements = np.asarray(placements)
        logp = log_softmax(self.logits)
        return logp[np.arange(self.num_units)[None, :], placements].sum(axis=1)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of [U, D] logits that may hold ``-inf`` (0 there)."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=1, keepdims=True)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax of [U, D] logits that may hold ``-inf`` (``-inf`` there)."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
