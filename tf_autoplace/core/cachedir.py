"""The directories tf_autoplace keeps files in between runs, and reading a file back without
trusting what is at its path.

Caches (placements, built problems, the simulator's compiled kernels) live in the user's own
cache directory (:func:`user_cache_dir`: ``platformdirs.user_cache_dir``, that is
``$XDG_CACHE_HOME`` or ``~/.cache`` on Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%``
on Windows, then ``tf_autoplace/<name>``), never in a place several users share such as
``/tmp``: what one user leaves there another would read.

:func:`private_directory` makes a cache directory and checks it before anything is read from
it or written to it:

- every directory it creates gets mode 0700 (readable and writable by the user alone);
- a directory that exists must be owned by the user running the process and writable by no one
  else (neither group nor others); otherwise it is a :class:`~tf_autoplace.errors.ConfigError`
  naming the directory, its owner and mode, and what to do. Whoever else can write there could
  plant a file the next run reads (numba's kernel cache holds pickles: code).

:func:`read_regular_file` reads an entry only if it is a regular file: a FIFO, socket, device,
directory or (for cache entries) symbolic link at the path is :class:`NotARegularFile`, found
by ``lstat`` before the path is opened and checked again by ``fstat`` on the descriptor, which
is opened with ``O_NONBLOCK`` (and ``O_NOFOLLOW``), so reading never blocks on a FIFO nor
follows a link planted in place of an entry.

On systems without POSIX owners (Windows) the ownership and mode checks are skipped.
"""

from __future__ import annotations

import errno
import os
import stat

import platformdirs

from tf_autoplace.errors import ConfigError

APP = "tf_autoplace"


class NotARegularFile(OSError):
    """What is at a path is not a regular file (``kind`` says what it is instead)."""

    def __init__(self, path: str, kind: str):
        super().__init__(errno.EINVAL, f"it is {kind}, not a regular file", path)
        self.kind = kind


def user_cache_dir(name: str) -> str | None:
    """``<the user's cache directory>/tf_autoplace/<name>`` (module docstring), or None when
    the platform gives no absolute cache directory (no home directory: ``HOME`` unset and no
    password-database entry for the user)."""
    try:
        base = platformdirs.user_cache_dir(APP, appauthor=False)
    except RuntimeError:  # newer platformdirs raise where older ones returned "~/.cache/..."
        return None
    return os.path.join(base, name) if os.path.isabs(base) else None


def private_directory(path, what: str) -> str:
    """Create ``path`` (each missing directory with mode 0700) and check that it is private.

    Args:
      path: the directory.
      what: what it holds, for messages ("the placement cache").

    Returns:
      The absolute path.

    Raises:
      ConfigError: it exists but is not a directory, is owned by another user, or others can
        write to it (:func:`check_private_directory`).
      OSError: it cannot be created (no writable parent, a read-only file system, ...).
    """
    full = os.path.abspath(os.fspath(path))
    missing = []
    head = full
    while not os.path.lexists(head):
        missing.append(head)
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:  # made by a concurrent process meanwhile: checked below
            pass
    check_private_directory(full, what)
    return full


def check_private_directory(path, what: str) -> None:
    """ConfigError unless ``path`` (which need not exist, or be able to: then nothing is
    checked) is a directory owned by the current user that neither its group nor others can write to."""
    full = os.path.abspath(os.fspath(path))
    try:
        st = os.stat(full)
    except OSError:  # missing, or cannot exist (a file on the way): creating it will fail
        return
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{what} directory {full!r} is not a directory")
    if not hasattr(os, "geteuid"):
        return
    user = os.geteuid()
    if st.st_uid != user:
        raise ConfigError(
            f"{what} directory {full!r} is owned by another user (uid {st.st_uid}; this process "
            f"runs as uid {user}): refusing to use it, since its owner could plant files that "
            "this process would read. Use a directory of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            f"{what} directory {full!r} can be written by other users (mode "
            f"{stat.S_IMODE(st.st_mode):o}): refusing to use it, since they could plant files "
            "that this process would read. "
            + ("Use a directory of your own" if st.st_mode & stat.S_ISVTX  # /tmp: shared
               else f"Make it private (chmod go-w {full!r}) or use another directory"))


def read_regular_file(path, *, follow_symlinks: bool = False) -> bytes:
    """The bytes of the regular file at ``path``, read without blocking and without trusting
    what is there (module docstring).

    Args:
      path: the file.
      follow_symlinks: read the file a symbolic link at ``path`` points to (a user's own
        files, such as a saved policy); False (cache entries): a link is NotARegularFile.

    Raises:
      FileNotFoundError: nothing is at ``path``.
      NotARegularFile: a FIFO, socket, device, directory or (unless followed) symbolic link.
      OSError: it cannot be read.
    """
    path = os.fspath(path)
    st = os.stat(path) if follow_symlinks else os.lstat(path)
    _require_regular(path, st.st_mode)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | \
        getattr(os, "O_BINARY", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO):  # replaced by a link or a socket meanwhile
            raise NotARegularFile(path, "a symbolic link" if e.errno == errno.ELOOP
                                  else "a socket") from e
        raise
    with os.fdopen(fd, "rb") as f:
        _require_regular(path, os.fstat(f.fileno()).st_mode)  # what was opened, not the name
        return f.read()


def read_entry(path) -> tuple[bytes | None, str]:
    """A cache entry's bytes: ``(data, "")``; ``(None, "")`` when there is none; ``(None, why
    it is not read)`` when something is at ``path`` that is not a readable regular file (read
    as :func:`read_regular_file` reads, links not followed)."""
    try:
        return read_regular_file(path), ""
    except (FileNotFoundError, NotADirectoryError):  # none there, or none can be (a file on
        return None, ""  # the way: a cache directory that cannot be created)
    except NotARegularFile as e:
        return None, f"it is {e.kind}, not a regular file"
    except OSError as e:
        return None, f"it cannot be read ({e.strerror or e})"


def _require_regular(path: str, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"))
    raise NotARegularFile(path, next((k for test, k in kinds if test(mode)), "an unknown kind of file"))


__all__ = ["NotARegularFile", "check_private_directory", "private_directory", "read_entry",
           "read_regular_file", "user_cache_dir"]
