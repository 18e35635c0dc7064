"""The directory format of every policy, shipped or fine-tuned: ``policy.json`` (the network's
architecture), ``weights.npz`` (its weights) and ``manifest.json`` (how the weights were made:
data, configs, seed, the command, the measured results).

Every learned placer's policy is a ``tf.Module`` whose constructor rebuilds it from a JSON-able
``config`` dict (the seed included) and whose trainable variables, in ``tf.Module``'s fixed
order, are its weights. :class:`Checkpointable` gives such a module the weights I/O once:
``save(directory)`` writes ``policy.json`` and ``weights.npz``, ``load(directory)`` builds the
module from the JSON and sets its weights, with no network access and no TF checkpoint format
(a loaded policy gives the saved one's outputs bit for bit). :func:`write_manifest` writes the
manifest.
"""

from __future__ import annotations

import inspect
import json
import os

import numpy as np

from tf_autoplace.errors import ConfigError

CONFIG_FILE = "policy.json"
WEIGHTS_FILE = "weights.npz"
MANIFEST_FILE = "manifest.json"


def _plain(value):
    return value.tolist() if hasattr(value, "tolist") else str(value)


def write_manifest(directory: str, manifest: dict) -> None:
    """Write ``manifest.json`` (sorted keys, so the same content gives the same bytes; numpy
    numbers and arrays as plain JSON numbers and lists)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, MANIFEST_FILE), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=True, default=_plain)
        f.write("\n")


class Checkpointable:
    """Weights I/O for a ``tf.Module`` with a ``config`` dict (see the module doc). ``kind``
    names the policy in error messages."""

    kind = "policy"

    def get_weights(self) -> list[np.ndarray]:
        return [v.numpy() for v in self.trainable_variables]

    def set_weights(self, weights: list[np.ndarray]) -> None:
        variables = self.trainable_variables
        if len(weights) != len(variables):
            raise ConfigError(f"expected {len(variables)} weight arrays, got {len(weights)}")
        for v, w in zip(variables, weights):
            if tuple(v.shape) != tuple(np.shape(w)):
                raise ConfigError(f"weight {v.name} has shape {tuple(v.shape)}, got "
                                  f"{tuple(np.shape(w))}")
            v.assign(w)

    def save(self, directory: str) -> None:
        """Write ``policy.json`` (architecture) and ``weights.npz`` into ``directory``."""
        os.makedirs(directory, exist_ok=True)
        np.savez(os.path.join(directory, WEIGHTS_FILE),
                 **{f"w{i:03d}": w for i, w in enumerate(self.get_weights())})
        with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as f:
            json.dump(self.config, f, indent=2, sort_keys=True)

    @classmethod
    def load(cls, directory: str):
        """The policy saved in ``directory``; ConfigError if it cannot be read or built, if
        ``policy.json`` describes another kind of network (another placer's policy), or if the
        weights do not fit the network it describes (a policy saved by a version of
        tf_autoplace whose network had other layers)."""
        try:
            with open(os.path.join(directory, CONFIG_FILE), encoding="utf-8") as f:
                config = json.load(f)
            with np.load(os.path.join(directory, WEIGHTS_FILE)) as data:
                weights = [data[k] for k in sorted(data.files)]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"cannot load {cls.kind} from {directory!r}: {e}") from e
        cls._check_config(directory, config)
        try:
            policy = cls(**config)
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"cannot load {cls.kind} from {directory!r}: {e}") from e
        try:
            policy.set_weights(weights)
        except ConfigError as e:
            raise ConfigError(f"the weights in {directory!r} do not fit {cls.kind} as its "
                              f"policy.json describes it ({e}): was it saved by another version "
                              "of tf_autoplace? Fine-tune or train it again with this one") from e
        return policy

    @classmethod
    def _check_config(cls, directory: str, config) -> None:
        """ConfigError naming the settings ``config`` has that the constructor does not take,
        and those it lacks that the constructor needs."""
        if not isinstance(config, dict):
            raise ConfigError(f"cannot load {cls.kind} from {directory!r}: policy.json holds "
                              f"{type(config).__name__}, not the network's settings")
        params = inspect.signature(cls).parameters
        unknown = sorted(set(config) - set(params))
        missing = sorted(n for n, p in params.items() if p.default is p.empty and n not in config
                         and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
        if unknown or missing:
            what = [f"settings {cls.__name__} does not take: {unknown}"] if unknown else []
            what += [f"no {missing}, which it needs"] if missing else []
            raise ConfigError(f"the policy in {directory!r} is not {cls.kind} (another "
                              f"placer's?): its policy.json has {'; '.join(what)}")
