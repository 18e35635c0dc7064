"""Post's updates of softmax placement tables, all in closed form (numpy, no TensorFlow).

(Gao et al., "Post: Device Placement with Cross-Entropy Minimization and Proximal Policy
Optimization", NeurIPS 2018, section 3; the tables are
:class:`tf_autoplace.placers.post.policy.SoftmaxTables`.)

**Cross-entropy minimisation** (Eq. 9-10, Theorem 1). Over the last N sampled placements, the
elite are the ``P = rho * N`` with the lowest score (the paper's ``T(d) <= gamma_t``, with
``gamma_t`` the P-th lowest time). The maximum-likelihood softmax tables for them are the
elite's device frequencies per unit:

    f(d_m = j | u_m^{t+1}) = (1 / P) * sum_p I{d_m^(p) = j}.

:func:`cross_entropy_update` returns exactly these frequencies (ties in the score go to the
earlier sample, so the elite are well defined).

**Uniform mixing** (Algorithm 1, line 11): after each cross-entropy step
``f <- (1 - eps) f + eps / D`` so that no device's probability stays at 0. The paper's ``D`` is
the number of devices; here it is the number of devices the unit may use (``D_m <= D``), so a
device without a kernel for the unit keeps probability 0 and every allowed one gets at least
``eps / D_m >= eps / D`` (:func:`mix_uniform`).

**Proximal policy optimisation with a KL penalty** (Eq. 11). For K placements ``d^(n)``
sampled from the old tables ``q`` (logits ``u^(t)``) with advantages ``A_n``, the new logits
``u`` maximise

    J(u) = (1/K) sum_n sum_m r_nm(u) A_n  -  beta * sum_m KL(q_m || p_m(u)),
    r_nm(u) = p_m(d_m^(n) | u_m) / q_m(d_m^(n)).

The extracted text places the KL term inside the sum over n with the per-sample notation
``f(d_m^(n) | ...)``; as a divergence it can only be between unit m's old and new
distributions, which do not depend on n, so the average over the K samples leaves one
``KL(q_m || p_m)`` per unit, as written above. For softmax tables the gradient is a closed
form (the paper derives it in its supplement, which we do not have; this is the derivative of
the objective above):

    dJ/du_mj = (1/K) sum_n A_n r_nm (I{d_m^(n) = j} - p_mj)  -  beta * (p_mj - q_mj).

:func:`ppo_update` takes ``steps`` steps of gradient ascent with it (the paper: about 10, at a
learning rate of 1, beta = 1). ``-inf`` logits (devices without a kernel) have a zero gradient
and stay ``-inf``.
"""

from __future__ import annotations

import numpy as np

from tf_autoplace.errors import ConfigError
from tf_autoplace.placers.post.policy import SoftmaxTables, softmax


def elite(scores: np.ndarray, rho: float) -> np.ndarray:
    """Indices of the ``max(1, round(rho * N))`` lowest of ``scores`` [N] (ties: the earlier
    sample first), in increasing order of score."""
    scores = np.asarray(scores, np.float64)
    if not 0 < rho <= 1:
        raise ConfigError(f"rho must be in (0, 1], got {rho!r}")
    count = max(1, int(round(rho * len(scores))))
    return np.argsort(scores, kind="stable")[:count]


def cross_entropy_update(placements: np.ndarray, scores: np.ndarray, rho: float,
                         allowed: np.ndarray) -> np.ndarray:
    """Eq. 10: [U, D] device frequencies of each unit over the elite of the N sampled
    ``placements`` [N, U] (device index per unit) by ``scores`` [N] (lower is better).
    ``allowed`` [U, D] only fixes the shape and is checked against the elite's choices."""
    placements = np.asarray(placements)
    allowed = np.asarray(allowed, bool)
    best = placements[elite(scores, rho)]  # [P, U]
    units = allowed.shape[0]
    counts = np.zeros(allowed.shape)
    np.add.at(counts, (np.broadcast_to(np.arange(units), best.shape), best), 1.0)
    if (counts[~allowed] != 0).any():
        raise ConfigError("an elite placement puts a unit on a device it may not use")
    return counts / len(best)


def mix_uniform(probs: np.ndarray, allowed: np.ndarray, eps: float) -> np.ndarray:
    """Algorithm 1, line 11: ``(1 - eps) * probs + eps * uniform`` per unit, the uniform being
    over the unit's allowed devices (0 elsewhere)."""
    if not 0 <= eps <= 1:
        raise ConfigError(f"eps must be in [0, 1], got {eps!r}")
    allowed = np.asarray(allowed, bool)
    uniform = allowed / allowed.sum(axis=1, keepdims=True)
    return (1.0 - eps) * np.asarray(probs, np.float64) + eps * uniform


def _ratios(probs: np.ndarray, old: np.ndarray, placements: np.ndarray) -> np.ndarray:
    """[K, U] ``r_nm = p_m(d_m^(n)) / q_m(d_m^(n))``."""
    units = np.arange(probs.shape[0])[None, :]
    return probs[units, placements] / old[units, placements]


def kl_divergence(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """[U] ``KL(old_m || new_m)`` of two [U, D] tables (0 * log 0 = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(old > 0, old * (np.log(old) - np.log(new)), 0.0)
    return terms.sum(axis=1)


def ppo_objective(logits: np.ndarray, old: SoftmaxTables, placements: np.ndarray,
                  advantages: np.ndarray, beta: float) -> float:
    """Eq. 11 (module doc) at new logits ``logits`` [U, D], for K ``placements`` [K, U]
    sampled from ``old`` with ``advantages`` [K]."""
    probs, q = softmax(np.asarray(logits, np.float64)), old.probabilities()
    surrogate = (_ratios(probs, q, placements).sum(axis=1) * advantages).mean()
    return float(surrogate - beta * kl_divergence(q, probs).sum())


def ppo_gradient(logits: np.ndarray, old: SoftmaxTables, placements: np.ndarray,
                 advantages: np.ndarray, beta: float) -> np.ndarray:
    """[U, D] gradient of :func:`ppo_objective` with respect to ``logits`` (module doc); 0 on
    devices a unit may not use."""
    return _PPOSamples(old, placements, advantages).gradient(logits, beta)


class _PPOSamples:
    """What the gradient of Eq. 11 needs that does not depend on the new logits: the old
    tables' probabilities and the ones of the sampled devices, and where each sample's
    devices fall in a [U, D] table. :func:`ppo_update` takes several steps from one set of
    samples, and recomputing these at every step was most of its time."""

    def __init__(self, old: SoftmaxTables, placements: np.ndarray, advantages: np.ndarray):
        placements = np.asarray(placements)
        self.shape = old.logits.shape
        self.k, units = placements.shape
        self.placements = placements
        self.q, self.allowed = old.probabilities(), old.allowed
        self.q_chosen = self.q[np.arange(units)[None, :], placements]  # as _ratios reads it
        self.advantages = np.asarray(advantages, np.float64)[:, None]
        # Cell of each (sample, unit) in a flattened [U, D] table, row by row: bincount adds
        # the weights into each cell in this order, as np.add.at over the [K, U] rows did.
        self.cells = (np.arange(units)[None, :] * self.shape[1] + placements).ravel()

    def gradient(self, logits: np.ndarray, beta: float) -> np.ndarray:
        probs = softmax(np.asarray(logits, np.float64))
        units = np.arange(self.shape[0])[None, :]
        weights = probs[units, self.placements] / self.q_chosen * self.advantages
        # sum_n w_nm I{d_m^(n) = j}
        chosen = np.bincount(self.cells, weights=weights.ravel(),
                             minlength=self.shape[0] * self.shape[1]).reshape(self.shape)
        grad = (chosen - weights.sum(axis=0)[:, None] * probs) / self.k - beta * (probs
                                                                                 - self.q)
        return np.where(self.allowed, grad, 0.0)


def ppo_update(old: SoftmaxTables, placements: np.ndarray, advantages: np.ndarray, *,
               beta: float = 1.0, learning_rate: float = 1.0, steps: int = 10) -> SoftmaxTables:
    """``steps`` steps of gradient ascent on Eq. 11 from ``old``'s logits (module doc)."""
    logits = old.logits.copy()
    samples = _PPOSamples(old, placements, advantages)
    for _ in range(steps):
        logits = logits + learning_rate * samples.gradient(logits, beta)
    return SoftmaxTables(logits)
