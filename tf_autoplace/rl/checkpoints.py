"""The files of a shipped policy: ``policy.json`` and ``weights.npz`` (written and read by
:class:`tf_autoplace.rl.policies.checkpoint.Checkpointable`) and ``manifest.json``, which says
how the weights were made (data, configs, seed, the command, the measured results).
:func:`write_manifest` writes it.
"""

from __future__ import annotations

import json
import os

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
