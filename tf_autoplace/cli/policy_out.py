"""Where the trainers (``train-placeto``, ``train-gdp``) write a policy: whole, as one set.

A trainer runs for minutes to hours, so its ``--out_dir`` is checked before any work
(:func:`check_out_dir`): a new or empty directory whose parent exists, or a directory that
already holds a policy (its ``policy.json``), whose files the new ones replace. That last case
is how a shipped policy is reproduced: its manifest's command names the shipped directory.
Anything else (a directory of other files, a missing parent) is a ConfigError, and nothing is
created for a run that fails.

The policy is saved into a private directory beside ``--out_dir`` first
(:func:`staging_dir`), then :func:`commit` writes its files and the manifest through
:class:`tf_autoplace.outputs.files.Outputs`: a new directory appears whole, and the files of an
existing one are replaced as one set (an interrupt or an error leaves the old policy, never
new weights beside an old manifest).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from tf_autoplace.errors import ConfigError
from tf_autoplace.learning.checkpoints import CONFIG_FILE, write_manifest
from tf_autoplace.outputs import files


def check_out_dir(path, flag: str = "--out_dir") -> str:
    """``path`` as an absolute path if a trainer may write its policy there (module
    docstring); ConfigError otherwise."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ConfigError(f"{flag} must be a non-empty path, got {path!r}")
    full = os.path.abspath(os.fspath(path))
    if os.path.isdir(full) and not os.path.islink(full) and os.listdir(full):
        if not os.path.isfile(os.path.join(full, CONFIG_FILE)):
            raise ConfigError(f"{flag} {path!r} exists and holds no policy ({CONFIG_FILE}); "
                              "refusing to write into it: give a new or empty directory, or a "
                              "policy's directory to replace that policy")
        files.check_output_path(os.path.join(full, CONFIG_FILE), flag)  # writable, recovered
        return full
    return files.check_output_path(full, flag, directory=True)


@contextlib.contextmanager
def staging_dir(out_dir: str):
    """A private directory beside ``out_dir`` (same file system) to save the policy into;
    removed on exit."""
    staged = tempfile.mkdtemp(dir=os.path.dirname(out_dir), prefix=".train_policy_")
    try:
        yield staged
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def commit(out_dir: str, staged: str, manifest: dict) -> None:
    """Write the policy saved in ``staged`` and ``manifest`` (``manifest.json``) to
    ``out_dir`` (checked by :func:`check_out_dir`) as one set."""
    write_manifest(staged, manifest)
    names = sorted(os.listdir(staged))
    outputs = files.Outputs()
    if os.path.isdir(out_dir) and os.listdir(out_dir):
        for name in names:
            with open(os.path.join(staged, name), "rb") as f:
                outputs.add_file(os.path.join(out_dir, name), f.read())
    else:
        outputs.add_directory(out_dir, lambda directory: [
            shutil.copyfile(os.path.join(staged, name), os.path.join(directory, name))
            for name in names])
    outputs.commit()
