"""Where the trainers (``train-placeto``, ``train-gdp``) write a policy: whole, as one set.

A trainer runs for minutes to hours, so its ``--out_dir`` is checked before any work
(:func:`check_out_dir`): a new or empty directory whose parent exists, or a directory that
holds a saved policy (its ``policy.json``, ``weights.npz`` and ``manifest.json``, which
read as one), whose files the new ones replace (other files there are kept). That last case is
how a shipped policy is reproduced: its manifest's command names the shipped directory.
Anything else (a directory of other files, even one named ``policy.json``; a missing parent)
is a ConfigError, and nothing is created for a run that fails.

The policy is saved into a private directory beside ``--out_dir`` (:func:`staging_dir`),
made before the training starts, so a place that cannot take it fails at once and not after
hours; then :func:`commit` writes its files and the manifest through
:class:`tf_autoplace.outputs.files.Outputs`: a new directory appears whole, and the files of an
existing one are replaced as one set (an interrupt or an error leaves the old policy, never
new weights beside an old manifest). A staging directory carries its trainer's process id:
one whose process is gone (a trainer killed outright) is removed by the next trainer that
stages beside it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile

from tf_autoplace.errors import ConfigError
from tf_autoplace.learning.checkpoints import (CONFIG_FILE, POLICY_FILES, read_policy_files,
                                               write_manifest)
from tf_autoplace.outputs import files


def check_out_dir(path, flag: str = "--out_dir") -> str:
    """``path`` as an absolute path if a trainer may write its policy there (module
    docstring); ConfigError otherwise."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ConfigError(f"{flag} must be a non-empty path, got {path!r}")
    full = os.path.abspath(os.fspath(path))
    if os.path.isdir(full) and not os.path.islink(full) and os.listdir(full):
        lacking = sorted(POLICY_FILES - set(os.listdir(full)))
        why = f"lacks a saved policy's {', '.join(lacking)}" if lacking else None
        if why is None:
            try:
                read_policy_files(full)
            except ConfigError as e:
                why = f"holds no saved policy ({e})"
        if why is not None:
            raise ConfigError(f"{flag} {path!r} exists and {why}; refusing to write into it "
                              "(its files would be replaced): give a new or empty directory, "
                              "or a saved policy's directory to replace that policy")
        files.check_output_path(os.path.join(full, CONFIG_FILE), flag)  # writable, recovered
        return full
    return files.check_output_path(full, flag, directory=True)


STAGING_PREFIX = ".train_policy_"


@contextlib.contextmanager
def staging_dir(out_dir: str, flag: str = "--out_dir"):
    """A private directory beside ``out_dir`` (same file system) to save the policy into,
    named with this process's id; removed on exit. Staging directories of trainers whose
    process is gone are removed first (module docstring). ConfigError naming ``flag`` when
    the directory cannot be made."""
    parent = os.path.dirname(out_dir)
    _remove_orphans(parent)
    try:
        staged = tempfile.mkdtemp(dir=parent, prefix=f"{STAGING_PREFIX}{os.getpid()}_")
    except OSError as e:
        raise ConfigError(f"{flag}: cannot stage the policy beside {out_dir!r}: "
                          f"{e.strerror or e}") from e
    try:
        yield staged
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _remove_orphans(parent: str) -> None:
    """Remove the staging directories in ``parent`` of this user's trainers that are no longer
    running (their process id, in the name, names no process)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        match = re.fullmatch(re.escape(STAGING_PREFIX) + r"(\d+)_\w+", name)
        if match is None:
            continue
        path = os.path.join(parent, name)
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or not files.owned(st):
                continue
            os.kill(int(match.group(1)), 0)  # raises when no such process
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (OSError, OverflowError, ValueError):  # alive (or not ours to signal): keep
            continue


def commit(out_dir: str, staged: str, manifest: dict, flag: str = "--out_dir") -> None:
    """Write the policy saved in ``staged`` and ``manifest`` (``manifest.json``) to
    ``out_dir`` (checked by :func:`check_out_dir`) as one set; a ConfigError naming ``flag``
    when it cannot be written (a full disk: nothing of it is left)."""
    try:
        _commit(out_dir, staged, manifest)
    except OSError as e:
        raise ConfigError(f"{flag}: cannot write the policy to {out_dir!r}: {e}") from e


def _commit(out_dir: str, staged: str, manifest: dict) -> None:
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
