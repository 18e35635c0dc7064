"""Output files and directories that appear whole, together, or not at all.

The offline tool and :func:`tf_autoplace.tf2.place_saved_model` write their results through
this module, with three rules:

- **Check first.** :func:`check_output_path` rejects, before any placement work, a path that
  cannot be written: empty, holding a NUL, in a directory that does not exist or is not
  writable, an existing directory where a file goes, or a non-empty directory where a new one
  goes. Missing parent directories are an error rather than created, so a failed or interrupted
  run never leaves directories of its own behind.
- **Stage, then rename.** :class:`Outputs` writes each output to a temporary beside its final
  path (``.tmp_autoplace_*``, on the same file system) only once everything is computed, then
  renames them all into place. An error or an interrupt (``KeyboardInterrupt``, ``SystemExit``)
  before the renames removes every temporary; an output is never seen half written. A process
  killed outright (SIGKILL) while the temporaries are being written, the last fraction of a
  second of a run, can leave a ``.tmp_autoplace_*`` entry; nothing else.
- **Ordinary permissions.** Outputs get the mode a plain ``open()`` / ``mkdir()`` would give
  under the user's umask (``mkstemp`` and ``mkdtemp`` would make them private).

Renames are atomic one by one, not as a set: if a rename itself fails after the temporaries
are written (the disk vanished), the outputs renamed before it stay.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable

from tf_autoplace.errors import ConfigError

TEMP_PREFIX = ".tmp_autoplace_"


def umask() -> int:
    """The process's umask, read without changing it where the OS says (Linux ``/proc``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore at once
    os.umask(mask)
    return mask


def check_output_path(path, what: str, *, directory: bool = False) -> str:
    """The absolute form of ``path`` if an output can be written there (module docstring);
    otherwise ConfigError naming ``what`` (e.g. ``--report_json``) and the reason.

    ``directory``: the output is a new directory (``path`` must not exist or be an empty
    directory) rather than a file (``path`` may exist as a file, which is replaced)."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ConfigError(f"{what} must be a non-empty path, got {path!r}")
    path = os.fspath(path)
    if "\0" in path:
        raise ConfigError(f"{what} {path!r} holds a NUL character")
    full = os.path.abspath(path)
    parent = os.path.dirname(full)
    if not os.path.isdir(parent):
        raise ConfigError(f"{what} {path!r}: the directory {parent!r} does not exist (it is "
                          "not created)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {path!r}: the directory {parent!r} is not writable")
    if directory:
        if os.path.lexists(full) and not (os.path.isdir(full) and not os.listdir(full)):
            raise ConfigError(f"{what} {path!r} exists; refusing to overwrite it (give a new "
                              "directory, or an empty one)")
    elif os.path.isdir(full):
        raise ConfigError(f"{what} {path!r} is a directory; expected a file path")
    return full


class Outputs:
    """Outputs staged beside their final paths and renamed into place together.

        outputs = Outputs()
        outputs.add_file("placed.pb", data)
        outputs.add_directory("placed_model", lambda tmp: save_into(tmp))
        outputs.commit()

    Staging happens in :meth:`commit`, after everything is computed, so an error or an
    interrupt before then leaves nothing on disk."""

    def __init__(self):
        self._pending: list[tuple[str, object]] = []  # (final path, bytes or writer)

    def add_file(self, path, data: bytes) -> None:
        self._pending.append((os.path.abspath(os.fspath(path)), bytes(data)))

    def add_directory(self, path, write: Callable[[str], None]) -> None:
        """``write(tmp)`` fills an empty temporary directory that becomes ``path``."""
        self._pending.append((os.path.abspath(os.fspath(path)), write))

    def commit(self) -> None:
        """Write every output to its temporary, then rename each into place. On any error or
        interrupt before the renames, every temporary is removed and the exception goes on."""
        mask = umask()
        staged = []
        try:
            for final, content in self._pending:
                parent = os.path.dirname(final)
                if isinstance(content, bytes):
                    fd, tmp = tempfile.mkstemp(dir=parent, prefix=TEMP_PREFIX)
                    staged.append((tmp, final))
                    with os.fdopen(fd, "wb") as f:
                        os.fchmod(f.fileno(), 0o666 & ~mask)
                        f.write(content)
                else:
                    tmp = tempfile.mkdtemp(dir=parent, prefix=TEMP_PREFIX)
                    staged.append((tmp, final))
                    os.chmod(tmp, 0o777 & ~mask)
                    content(tmp)
            for tmp, final in staged:
                if os.path.isdir(tmp) and os.path.isdir(final):
                    os.rmdir(final)  # empty (checked): os.replace cannot replace a directory
                os.replace(tmp, final)
        except BaseException:
            for tmp, _ in staged:
                if os.path.isdir(tmp):
                    shutil.rmtree(tmp, ignore_errors=True)
                elif os.path.lexists(tmp):
                    os.unlink(tmp)
            raise
        finally:
            self._pending = []
