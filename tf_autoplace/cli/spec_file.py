"""The cluster spec ``tf-autoplace serve-local`` writes while it serves: its first line names
the serving process, so that a later run can tell a spec left by a killed serve-local (which
it may replace) from a file of the user's or a live serve-local's (which it must not). Apart
from the command, which defines flags and imports TensorFlow, so that it can be used and
tested on its own."""

from __future__ import annotations

import os
import re

from tf_autoplace.errors import ConfigError

# The spec's first line, which names the process serving it.
_HEADER_FORMAT = ("# A TensorFlow cluster of {tasks} server processes on this machine, "
                  "served by tf-autoplace serve-local (pid {pid}).\n")
_HEADER = re.compile(r"# A TensorFlow cluster of \d+ server processes on this machine, served by "
                     r"tf-autoplace serve-local \(pid (\d+)\)\.$")


def header(tasks: int) -> str:
    """The spec's first line for ``tasks`` server processes served by this process."""
    return _HEADER_FORMAT.format(tasks=tasks, pid=os.getpid())


def check_free(path: str) -> None:
    """Refuse ``path`` (ConfigError) if a file is there, unless it is the spec of a serve-local
    whose process has ended: the command replaces the file and removes it when it ends."""
    if not os.path.lexists(path):
        return
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            match = _HEADER.match(f.readline().rstrip("\n"))
    except OSError:
        match = None
    if match is None:
        raise ConfigError(f"--out_cluster {path!r} exists and is not a spec serve-local wrote; "
                          "serve-local removes its spec when it ends, so it does not take an "
                          "existing file: give a new path")
    pid = int(match.group(1))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return  # its serve-local was killed before it could remove it
    except PermissionError:
        pass  # a process of another user has that pid
    raise ConfigError(f"--out_cluster {path!r} is the spec of a serve-local that still runs "
                      f"(pid {pid}); give another path (or remove the file if process {pid} is "
                      "not a serve-local)")


def remove_if_ours(path: str, spec: bytes) -> None:
    """Remove ``path`` if it still holds ``spec``: a file put there since is not this run's."""
    try:
        with open(path, "rb") as f:
            if f.read(len(spec) + 1) != spec:
                return
        os.unlink(path)
    except FileNotFoundError:
        pass
