"""Point one of the process's file descriptors elsewhere while C code runs, safely from threads.

Some libraries we call write with C's stdio onto the process's descriptors, past Python's
``sys.stdout``/``sys.stderr``: Grappler logs a line per node onto descriptor 2 on a machine
without CUDA, METIS prints its warnings onto descriptor 1. While such a call runs, the
descriptor is pointed at another file (``os.dup2``) and pointed back afterwards.

A descriptor is one per process, while placements may run in several threads at once (README:
"Threads that place at the same time"). Saving and restoring it in each call on its own loses
the user's descriptor for good: a second thread saves the first one's replacement and restores
that last. So the redirection is shared: the first thread to enter saves the descriptor and
points it at the replacement, later ones join it, and the last to leave points it back, under
one lock per process. The saved copy is closed even when an interrupt (Ctrl-C) lands while it
is put back, so none leaks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from typing import Callable, Iterator

_lock = threading.Lock()


@dataclasses.dataclass
class _Redirect:
    saved: int  # a copy of the descriptor as it was before the first entrant
    target: object  # the file it points at meanwhile
    on_restore: Callable[[object, int], None] | None  # the first entrant's
    users: int = 1
    finished: bool = False  # the descriptor was pointed back


_active: dict[int, _Redirect] = {}


@contextlib.contextmanager
def redirected(fd: int, open_target: Callable[[], object],
               on_restore: Callable[[object, int], None] | None = None) -> Iterator[None]:
    """Point descriptor ``fd`` at a file while the block runs (module docstring).

    Args:
      fd: the descriptor (1: standard output, 2: standard error).
      open_target: opens the file ``fd`` points at meanwhile (an object with ``fileno()`` and
        ``close()``), called by the first thread to enter.
      on_restore: called once ``fd`` points back, with that file and ``fd`` (to read what was
        written there and pass some of it on), then the file is closed. Only the first
        entrant's is kept: a block that joins a redirection of ``fd`` made for another purpose
        (standard error and output one descriptor) writes where that one does.

    Raises:
      OSError: ``fd`` cannot be duplicated or redirected (nothing is changed then).
    """
    entry = None
    try:
        with _lock:
            joined = _active.get(fd)
            if joined is None:
                entry = _start(fd, open_target, on_restore)
                _active[fd] = entry
            else:
                entry = joined  # (counted before the count: an interrupt between the two
                entry.users += 1  # then gives the descriptor back early, never too late)
        yield
    finally:
        if entry is not None:
            with _lock:
                entry.users -= 1
                if entry.users <= 0 and not entry.finished:  # (once, registered or not)
                    entry.finished = True
                    if _active.get(fd) is entry:
                        del _active[fd]
                    _finish(entry, fd)


def _start(fd: int, open_target, on_restore) -> _Redirect:
    """Save ``fd``, point it at a new target; on any error (an interrupt too) undo both."""
    saved = os.dup(fd)
    target = None
    try:
        target = open_target()
        os.dup2(target.fileno(), fd)
        return _Redirect(saved, target, on_restore)
    except BaseException:
        try:
            os.dup2(saved, fd)  # (a no-op unless the redirection was done)
        finally:
            os.close(saved)
            if target is not None:
                target.close()
        raise


def _finish(entry: _Redirect, fd: int) -> None:
    """Point ``fd`` back, close the saved copy and the target, whatever interrupts."""
    try:
        os.dup2(entry.saved, fd)
    finally:
        os.close(entry.saved)
        try:
            if entry.on_restore is not None:
                entry.on_restore(entry.target, fd)
        finally:
            entry.target.close()
