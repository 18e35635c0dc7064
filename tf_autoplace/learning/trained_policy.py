"""A policy a learned placer fine-tuned on one graph, kept so that a later placement can start
from it.

Fine-tuning teaches a policy what moves pay on the user's graph; thrown away when ``autoplace``
returns, it would be learned again on the next run, and on the next version of the model. A
learned placer therefore leaves a :class:`TrainedPolicy` in ``placer.trained_policy`` (the
report carries it as ``report.policy``), and ``save(directory)`` writes it as the shipped
policies are written: ``policy.json`` (architecture) and ``weights.npz`` by the policy class's
own ``save``, which its ``load`` reads back bit for bit, plus ``manifest.json`` saying what it
was fine-tuned on and from what, and how that went. A later placer starts from it with
``policy=directory`` (``PlacetoPlacer``, ``HDPPlacer`` or ``GdpPlacer(policy=...)``,
``--autoplace_policy``); the placers build the manifest in one place,
:meth:`tf_autoplace.learning.learned.LearnedPlacer._keep_policy`.

A TrainedPolicy is a snapshot: numpy weights and the config that rebuilds the network, no
TensorFlow state, so it can be saved at any time after the search, in whatever TF mode the
program is (the network is rebuilt inside :func:`tf_autoplace.learning.eager.policy_context`).

Saving is atomic: the directory is written beside its final path and renamed into place. A
directory that holds a saved policy already (only ``policy.json``, ``weights.npz`` and
``manifest.json``) is replaced; any other existing, non-empty path is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile

import numpy as np

from tf_autoplace.core.cachedir import read_regular_file
from tf_autoplace.errors import ConfigError
from tf_autoplace.learning.checkpoints import POLICY_FILES
from tf_autoplace.learning.eager import policy_context



def weights_digest(directory: str) -> str:
    """SHA-256 of a saved policy's ``policy.json`` and ``weights.npz`` (what a placer that
    starts from it depends on), or of nothing readable if they are missing or not regular
    files (a FIFO is not waited on: loading the policy then says what is wrong)."""
    h = hashlib.sha256()
    for name in ("policy.json", "weights.npz"):
        try:
            h.update(read_regular_file(os.path.join(directory, name), follow_symlinks=True))
        except OSError:
            h.update(b"missing " + name.encode())
    return h.hexdigest()


@dataclasses.dataclass(frozen=True, eq=False)
class TrainedPolicy:
    """A fine-tuned policy (module docstring).

    Attributes:
      policy_class: the ``tf.Module`` class of the network; ``policy_class(**config)`` builds
        it, its ``set_weights``/``save``/``load`` do the I/O.
      config: the network's architecture (JSON-able, its seed included).
      weights: the network's trainable weights, in ``get_weights()`` order.
      manifest: what ``manifest.json`` records (JSON-able).
    """

    policy_class: type
    config: dict
    weights: tuple
    manifest: dict

    def build(self):
        """A network with these weights (call it inside ``policy_context()``)."""
        module = self.policy_class(**self.config)
        module.set_weights([np.asarray(w) for w in self.weights])
        return module

    def write(self, directory: str) -> None:
        """Write ``policy.json``, ``weights.npz`` and ``manifest.json`` into the existing empty
        ``directory`` (what :meth:`save` renames into place; the offline tool stages it with
        its other outputs)."""
        with policy_context():
            self.build().save(directory)
        with open(os.path.join(directory, "manifest.json"), "w", encoding="utf-8") as f:
            json.dump(self.manifest, f, indent=2, sort_keys=True, default=float)

    def save(self, directory) -> None:
        """Write ``policy.json``, ``weights.npz`` and ``manifest.json`` into ``directory``
        atomically (module docstring).

        Raises:
          ConfigError: ``directory`` is not a path, exists and is not a saved policy, has no
            parent directory, or cannot be written (naming it and why); nothing is left.
        """
        if not (isinstance(directory, (str, os.PathLike)) and os.fspath(directory)):
            raise ConfigError(f"directory must be a non-empty path, got {directory!r}")
        try:
            self._save(os.fspath(directory))
        except ConfigError:
            raise
        except (OSError, ValueError) as e:  # (a NUL in the path is a ValueError)
            raise ConfigError(f"cannot save the policy to {os.fspath(directory)!r}: "
                              f"{getattr(e, 'strerror', None) or e}") from e

    def _save(self, directory: str) -> None:
        final = os.path.abspath(directory)
        if os.path.lexists(final) and not (os.path.isdir(final) and
                                           set(os.listdir(final)) <= POLICY_FILES):
            raise ConfigError(f"{directory!r} exists and is not a saved policy; refusing to "
                              "overwrite it")
        parent = os.path.dirname(final)
        if not os.path.isdir(parent):  # made by nobody here: nothing is left if saving fails
            raise ConfigError(f"cannot save the policy to {directory!r}: its parent "
                              f"directory {parent!r} does not exist")
        tmp = tempfile.mkdtemp(dir=parent, prefix=".tmp_autoplace_")
        old = None
        try:
            self.write(tmp)
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(tmp, 0o777 & ~mask)  # mkdtemp makes it private; a policy is ordinary data
            if os.path.isdir(final):
                old = tempfile.mkdtemp(dir=parent, prefix=".tmp_autoplace_old_")
                os.replace(final, os.path.join(old, "policy"))
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            if old is not None and not os.path.exists(final):
                os.replace(os.path.join(old, "policy"), final)
            raise
        finally:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
