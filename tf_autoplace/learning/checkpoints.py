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

**A saved policy is checked when it is loaded**, before any search runs with it: the files
must be regular files (:func:`tf_autoplace.core.cachedir.read_regular_file`: a FIFO is not
waited on), ``policy.json`` a JSON object, ``weights.npz`` a whole npz archive of numeric arrays
(read with ``allow_pickle=False``: an object array is refused, never unpickled), and every
weight a finite floating-point number of magnitude at most :data:`MAX_ABS_WEIGHT`. Anything
else (a truncated or corrupted archive, strings, integers, NaN, 1e38) is a
:class:`~tf_autoplace.errors.ConfigError` naming the file and what is wrong with it.
"""

from __future__ import annotations

import inspect
import json
import os
import shlex
import sys

import numpy as np

from tf_autoplace.core.cachedir import read_regular_file
from tf_autoplace.core.npz import NpzError, load_npz
from tf_autoplace.errors import ConfigError

CONFIG_FILE = "policy.json"
WEIGHTS_FILE = "weights.npz"
MANIFEST_FILE = "manifest.json"
# Every file a saved policy's directory holds.
POLICY_FILES = frozenset({CONFIG_FILE, WEIGHTS_FILE, MANIFEST_FILE})
# The largest number a saved policy's settings may hold (its seed aside): every width, count
# and layer number of a network here is far below it, and a network built with sizes beyond it
# would take gigabytes before its weights could be compared with the file's.
MAX_SIZE_SETTING = 4096
# The largest weight magnitude a saved policy may hold. Trained policies stay far below it (the
# shipped ones below 10; an HDP policy fitted hard to its start placement reaches ~1e6), while
# values near float32's range (1e38) overflow the first matrix product: such a file is damaged
# or hostile, not trained.
MAX_ABS_WEIGHT = 1e10


def _plain(value):
    return value.tolist() if hasattr(value, "tolist") else str(value)


def command_line() -> str:
    """The command this process runs, as a manifest records it for a user to run again: the
    console command's words as typed (``tf-autoplace train-gdp --out_dir=...``; its
    dispatcher sets ``sys.argv[0]`` to ``"tf-autoplace COMMAND"``), else ``python`` and the
    script with its arguments."""
    first = sys.argv[0] if sys.argv else ""
    words = first.split() if first.startswith("tf-autoplace ") else ["python", first]
    return " ".join([*words, *map(shlex.quote, sys.argv[1:])])


def write_manifest(directory: str, manifest: dict) -> None:
    """Write ``manifest.json`` (sorted keys, so the same content gives the same bytes; numpy
    numbers and arrays as plain JSON numbers and lists)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, MANIFEST_FILE), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=True, default=_plain)
        f.write("\n")


def read_policy_files(directory: str, kind: str = "policy") -> tuple[object, list[np.ndarray]]:
    """``(policy.json's content, weights.npz's arrays in name order)`` of the policy saved in
    ``directory``, every weight checked (module doc); no TensorFlow is needed, so a placer
    given a saved policy checks it before any work.

    Raises:
      ConfigError: naming the file and the problem (``kind`` names the policy: "a Placeto
        policy").
    """
    where = f"cannot load {kind} from {directory!r}"
    path = os.path.join(directory, CONFIG_FILE)
    try:
        config = json.loads(read_regular_file(path, follow_symlinks=True).decode("utf-8"))
    except OSError as e:
        raise ConfigError(f"{where}: {path!r} cannot be read ({e.strerror or e})") from e
    except ValueError as e:  # not UTF-8, not JSON
        raise ConfigError(f"{where}: {path!r} is not JSON ({e})") from e
    except RecursionError as e:  # lists or objects nested thousands deep
        raise ConfigError(f"{where}: {path!r} nests its JSON too deeply for a policy's "
                          "settings (a damaged or hostile file)") from e
    path = os.path.join(directory, WEIGHTS_FILE)
    where = f"{where}: {path!r}"
    try:
        data = read_regular_file(path, follow_symlinks=True)
    except OSError as e:
        raise ConfigError(f"{where} cannot be read ({e.strerror or e})") from e
    if not data.startswith(b"PK"):  # every zip starts so; numpy would take it for a pickle
        raise ConfigError(f"{where} is not an npz archive (empty, damaged, or another kind of "
                          "file)")
    try:
        weights = sorted(load_npz(data).items())
    except NpzError as e:
        raise ConfigError(f"{where}: {e}") from e
    if not weights:
        raise ConfigError(f"{where} holds no weights")
    for name, w in weights:
        if w.dtype.kind != "f":
            raise ConfigError(f"{where}: weight {name!r} is {w.dtype}, not floating point")
        if not np.isfinite(w).all():
            raise ConfigError(f"{where}: weight {name!r} holds NaN or infinite values")
        if w.size and float(np.abs(w).max()) > MAX_ABS_WEIGHT:
            raise ConfigError(f"{where}: weight {name!r} holds {float(np.abs(w).max()):.3g}, "
                              f"beyond the +-{MAX_ABS_WEIGHT:g} any trained policy stays within "
                              "(a damaged file?)")
    return config, [w for _, w in weights]


def _largest_int(value) -> int:
    """The largest int anywhere in a JSON value (0 if none). A walk with a stack of its own:
    a value nested as deep as ``json.loads`` takes would exhaust Python's recursion."""
    largest, stack = 0, [value]
    while stack:
        value = stack.pop()
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            largest = max(largest, value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return largest


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
        """The policy saved in ``directory``.

        Raises:
          ConfigError: naming the file and the problem, if a file cannot be read, is damaged
            or holds weights that are not finite floating-point numbers of a sane magnitude
            (module doc); if ``policy.json`` describes another kind of network (another
            placer's policy); or if the weights do not fit the network it describes (a
            policy saved by a version of tf_autoplace whose network had other layers).
        """
        config, weights = read_policy_files(directory, cls.kind)
        cls._check_config(directory, config)
        try:
            policy = cls(**config)
        except (ValueError, KeyError, TypeError, ArithmeticError) as e:
            raise ConfigError(f"cannot load {cls.kind} from {directory!r}: {e}") from e
        try:
            policy.set_weights(weights)
        except ConfigError as e:
            raise ConfigError(f"the weights in {directory!r} do not fit {cls.kind} as its "
                              f"policy.json describes it ({e}): was it saved by another version "
                              "of tf_autoplace? Fine-tune or train it again with this one") from e
        policy.loaded_from = directory  # for messages about what it does
        return policy

    @classmethod
    def _check_config(cls, directory: str, config) -> None:
        """ConfigError naming the settings ``config`` has that the constructor does not take,
        those it lacks that the constructor needs, and a size beyond
        :data:`MAX_SIZE_SETTING`."""
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
        for name, value in config.items():
            if name != "seed" and _largest_int(value) > MAX_SIZE_SETTING:
                raise ConfigError(f"cannot load {cls.kind} from {directory!r}: its policy.json "
                                  f"sets {name}={value!r}, beyond the {MAX_SIZE_SETTING} any "
                                  "network size may be (a damaged file?)")
