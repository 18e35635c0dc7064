"""numba's ``njit`` with its on-disk cache in the user's cache directory.

The simulator's kernels are compiled by numba the first time they run (seconds) and cached on
disk, so a later process loads them instead. numba's ``cache=True`` writes that cache next to
the source file; in an installed package that is ``site-packages``, which ``pip uninstall``
does not clean, and the ``__pycache__`` left behind then makes ``tf_autoplace`` a namespace
package that breaks the next install. :func:`cached_njit` compiles with the cache in
:func:`cache_dir` instead:

- ``NUMBA_CACHE_DIR`` when the user set it (numba's own setting, respected as numba would);
- else ``tf_autoplace/numba`` in the user's cache directory (``platformdirs.user_cache_dir``:
  ``$XDG_CACHE_HOME`` or ``~/.cache`` on Linux, ``~/Library/Caches`` on macOS,
  ``%LOCALAPPDATA%`` on Windows).

Inside that directory numba keeps each source file's kernels under a path derived from where
the file is, so two installs (or a checkout and an install) never load each other's kernels.

numba reads ``NUMBA_CACHE_DIR`` into ``numba.config.CACHE_DIR`` and picks a function's cache
location when the function is decorated. :func:`cached_njit` sets ``CACHE_DIR`` for the
duration of that one decoration only, so neither the process environment nor the cache of
anyone else's numba functions changes, and it works whether or not numba was imported first.
Worker processes decorate the kernels again on import and so use the same directory.
"""

from __future__ import annotations

import os

import numba
import numba.core.config
import platformdirs

CACHE_ENV = "NUMBA_CACHE_DIR"


def default_cache_dir() -> str:
    """``<user cache directory>/tf_autoplace/numba`` (see module doc)."""
    return os.path.join(platformdirs.user_cache_dir("tf_autoplace", appauthor=False), "numba")


def cache_dir() -> str:
    """Where :func:`cached_njit` caches compiled kernels: ``NUMBA_CACHE_DIR`` when set (and
    not empty, which numba also reads as unset), else :func:`default_cache_dir`."""
    return os.environ.get(CACHE_ENV) or default_cache_dir()


def cached_njit(fn):
    """``numba.njit(cache=True, nogil=True)(fn)`` with the on-disk cache in :func:`cache_dir`.
    The kernels touch no Python object, so they release the GIL: threads of one process
    (:class:`~tf_autoplace.learning.rollouts.Evaluator`) run them on several cores at once."""
    config = numba.core.config
    config.reload_config()  # picks up a NUMBA_CACHE_DIR set after numba was imported
    previous = config.CACHE_DIR
    config.CACHE_DIR = cache_dir()
    try:
        return numba.njit(cache=True, nogil=True)(fn)
    finally:
        config.CACHE_DIR = previous
