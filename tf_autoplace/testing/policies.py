"""Learned policies with every weight live, for golden tests of a network's wiring.

A policy as initialised (or as trained for few steps) has layers that start at zero: GDP's
output layer, its superposition layers, every bias. While they are zero, the logits do not
depend on the layers before them, so a golden test of such a policy cannot see a change of the
features, the reading order or the network. :func:`live_weights` fills each all-zero array with
small seeded values, so every input and every layer reaches the logits.
"""

from __future__ import annotations

import numpy as np


def live_weights(weights: list[np.ndarray], *, seed: int = 0,
                 scale: float = 0.1) -> list[np.ndarray]:
    """``weights`` with each all-zero array replaced by N(0, ``scale``) draws (float32, from
    ``seed``, in list order); the other arrays are kept as they are."""
    rng = np.random.default_rng(seed)
    out = []
    for w in weights:
        w = np.asarray(w)
        if w.size and not np.any(w):
            w = rng.normal(0.0, scale, size=w.shape).astype(w.dtype)
        out.append(w)
    return out


__all__ = ["live_weights"]
