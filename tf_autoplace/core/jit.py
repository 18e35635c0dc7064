"""numba's ``njit`` with its on-disk cache in the user's cache directory.

The simulator's kernels are compiled by numba the first time they run (seconds) and cached on
disk, so a later process loads them instead. numba's ``cache=True`` writes that cache next to
the source file; in an installed package that is ``site-packages``, which ``pip uninstall``
does not clean, and the ``__pycache__`` left behind then makes ``tf_autoplace`` a namespace
package that breaks the next install. :func:`cached_njit` compiles with the cache in
:func:`cache_dir` instead:

- ``NUMBA_CACHE_DIR`` when the user set it (numba's own setting, respected as numba would);
- else ``tf_autoplace/numba`` in the user's cache directory
  (:func:`tf_autoplace.core.cachedir.user_cache_dir`: ``$XDG_CACHE_HOME`` or ``~/.cache`` on
  Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows).

Inside that directory numba keeps each source file's kernels under a path derived from where
the file is, so two installs (or a checkout and an install) never load each other's kernels.

numba reads ``NUMBA_CACHE_DIR`` into ``numba.config.CACHE_DIR`` and picks a function's cache
location when the function is decorated. :func:`cached_njit` sets ``CACHE_DIR`` for the
duration of that one decoration only, so neither the process environment nor the cache of
anyone else's numba functions changes, and it works whether or not numba was imported first.
Worker processes decorate the kernels again on import and so use the same directory.

**Without a usable cache directory the kernels are compiled, not cached.** numba's index files
are pickles, so the directory must be private (:func:`tf_autoplace.core.cachedir.private_directory`:
created 0700; one owned by another user, or writable by others, is not used). When there is no
such directory (no home directory, a cache directory that cannot be created or written, as for
a service account or a container's arbitrary user), or numba finds no place to cache,
:func:`cached_njit` compiles without an on-disk cache and logs one warning per process saying
why; the simulator then compiles its kernels in each process (seconds) and works the same.
When numba cannot use the kernel's own subdirectory there, it would fall back to caching next
to the source (the problem above): :func:`cached_njit` checks first and compiles uncached instead.

**A damaged cache entry is compiled again, not an error.** numba reads a kernel's cache entry
(an index and a data file, both pickles) when the kernel first runs; a truncated, emptied or
overwritten file would come out of that first call as a raw unpickling error. The kernels'
caches treat any failure to read an entry as a miss (one warning per process): the kernel is
compiled, and the damaged index is removed so that numba writes a good entry in its place; a
failure to write an entry only costs the next process a compile.

**Kernels whose indices are never negative are compiled without numba's wraparound.** numba
compiles every ``a[i]`` with a signed ``i`` as ``a[i + len(a)]`` when ``i < 0`` (Python's
negative indices; numba has no option to turn it off): an extra compare and select on every
array access, on the path of every dependent load. In the simulator's event loop, where each
event is a chain of such loads, that was about a quarter of the time (docs/experiments.md,
"What the kernel's time was"). ``cached_njit(negative_indices=False)`` compiles
the kernel's own code with indices taken as they are, so a negative index there reads outside
the array instead of from its end: only for kernels whose every index is non-negative by
construction (their docstrings say so). It replaces numba's ``fix_integer_index`` while the
kernel compiles, under numba's compiler lock, and only for the LLVM functions of the kernel
itself: the NumPy functions numba compiles for it (``np.full``, ...) keep their wraparound.
Where this numba lacks that function or its naming, the kernel is compiled as numba does
(slower, the same results); ``tests/core/test_jit.py`` checks that the installed numba takes
the fast path.

An interrupt (Ctrl-C) that arrives while a compiled kernel calls back into Python (a cached
kernel unpickles its constants through ``_numba_unpickle``) comes out of numba as a
``SystemError`` chained to the KeyboardInterrupt. :func:`interruptible` wraps the functions
that run kernels for a caller (the engine's doors) so that the caller gets a plain
KeyboardInterrupt instead.
"""

from __future__ import annotations

import functools
import inspect
import os

import numba
import numba.core.caching
import numba.core.config
import numba.np.arrayobj
from absl import logging
from numba.core import itanium_mangler, types
from numba.core.compiler_lock import global_compiler_lock

from tf_autoplace.core.cachedir import private_directory, user_cache_dir
from tf_autoplace.errors import ConfigError, caused_by, interrupt_in

CACHE_ENV = "NUMBA_CACHE_DIR"

_warned = False  # the no-cache warning is logged once per process
_warned_damaged = False  # ... and the damaged-entry one


def default_cache_dir() -> str | None:
    """``<user cache directory>/tf_autoplace/numba`` (see module doc); None when the user has
    no cache directory."""
    return user_cache_dir("numba")


def cache_dir() -> str | None:
    """Where :func:`cached_njit` caches compiled kernels: ``NUMBA_CACHE_DIR`` when set (and
    not empty, which numba also reads as unset), else :func:`default_cache_dir`."""
    return os.environ.get(CACHE_ENV) or default_cache_dir()


def cached_njit(fn=None, *, negative_indices: bool = True):
    """``numba.njit(cache=True, nogil=True)(fn)`` with the on-disk cache in :func:`cache_dir`;
    compiled without an on-disk cache (one warning per process) when that directory cannot be
    used (module doc). The kernels touch no Python object, so they release the GIL: threads of
    one process (:class:`~tf_autoplace.learning.rollouts.Evaluator`) run them on several cores
    at once. Used as ``@cached_njit`` or ``@cached_njit(negative_indices=False)``.

    Args:
      fn: the Python function to compile.
      negative_indices: False compiles ``fn``'s own array accesses without numba's wraparound
        of negative indices (module doc), for a kernel whose indices are never negative.
    """
    if fn is None:
        return functools.partial(cached_njit, negative_indices=negative_indices)
    kernel = _njit_cached(fn)
    if not negative_indices:
        kernel = without_wraparound(kernel)
    return kernel


def _njit_cached(fn):
    directory, why = _usable_cache_dir()
    if directory is None:
        _warn_uncached(why)
        return numba.njit(nogil=True)(fn)
    config = numba.core.config
    config.reload_config()  # picks up a NUMBA_CACHE_DIR set after numba was imported
    previous = config.CACHE_DIR
    config.CACHE_DIR = directory
    try:
        if not _cacheable_in(directory, fn):
            _warn_uncached(f"numba cannot write {fn.__qualname__}'s cache in {directory!r}")
            return numba.njit(nogil=True)(fn)
        kernel = numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError as e:  # "cannot cache function ...: no locator available"
        _warn_uncached(f"numba cannot cache there ({e})")
        return numba.njit(nogil=True)(fn)
    finally:
        config.CACHE_DIR = previous
    cache = getattr(kernel, "_cache", None)
    if cache is None:  # NUMBA_DISABLE_JIT: the Python function itself, nothing to cache
        return kernel
    path = getattr(cache, "cache_path", None)
    home = os.path.realpath(directory)
    if path is None or os.path.commonpath([os.path.realpath(path), home]) != home:
        # numba chose another place after all (beside the source): no disk cache then.
        _warn_uncached(f"numba would cache {fn.__qualname__} in {path!r}, outside {directory!r}")
        kernel._cache = numba.core.caching.NullCache()
    else:
        _read_damaged_entries_as_misses(cache)
    return kernel


def without_wraparound(kernel):
    """``kernel`` (a numba dispatcher) compiling its own code without numba's wraparound of
    negative indices (module doc); ``kernel`` unchanged where this numba offers no way to
    (``NUMBA_DISABLE_JIT``, another numba's internals). Returns the same dispatcher."""
    compile_ = getattr(kernel, "compile", None)
    py_func = getattr(kernel, "py_func", None)
    if (not hasattr(numba.np.arrayobj, "fix_integer_index") or compile_ is None
            or py_func is None):
        return kernel
    try:  # how numba names the kernel's LLVM functions: "_ZN" + module and name, length-coded
        prefix = "_Z" + itanium_mangler.mangle_identifier(
            f"{py_func.__module__}.{py_func.__qualname__}")[:-1]
    except Exception:  # noqa: BLE001 (another numba's mangler: compile as numba does)
        return kernel

    def compile_without_wraparound(sig):
        with global_compiler_lock:  # no other compile sees the replacement
            outer = numba.np.arrayobj.fix_integer_index  # (another kernel's, when nested)

            def as_given(context, builder, idxty, idx, size):
                if builder.function.name.startswith(prefix):
                    return context.cast(builder, idx, idxty,
                                        types.intp if idxty.signed else types.uintp)
                return outer(context, builder, idxty, idx, size)

            numba.np.arrayobj.fix_integer_index = as_given
            try:
                return compile_(sig)
            finally:
                numba.np.arrayobj.fix_integer_index = outer

    kernel.compile = compile_without_wraparound
    kernel.without_wraparound = prefix  # for tests: the fast path is on
    return kernel


def _cacheable_in(directory: str, fn) -> bool:
    """Whether numba's locator for a cache directory the user chose can cache ``fn`` there
    (its subdirectory can be created and written); numba tries the source's own directory
    next, which :func:`cached_njit` must not let it use (module doc). True where this numba
    names that locator otherwise (its choice is checked after the decoration)."""
    caching = numba.core.caching
    locator = (getattr(caching, "UserProvidedCacheLocator", None)
               or getattr(caching, "_UserProvidedCacheLocator", None))
    if locator is None:
        return True
    try:
        return locator.from_function(fn, inspect.getfile(fn)) is not None
    except OSError:
        return False


def _read_damaged_entries_as_misses(cache) -> None:
    """Make ``cache`` (a numba function cache) read an entry it cannot load as a miss, after
    removing its index so that the compile that follows writes a good entry, and give up
    writing an entry it cannot write (module doc); each logs one warning per process."""
    load, save = cache.load_overload, cache.save_overload

    def load_overload(sig, target_context):
        try:
            return load(sig, target_context)
        except Exception as e:  # noqa: BLE001 (any damage: pickle, EOF, OS errors)
            if interrupt_in(e) is not None:  # Ctrl-C while unpickling (module doc)
                raise
            if caused_by(e, MemoryError) is not None:  # the process's memory, not the entry
                raise
            index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
            if index is not None:
                try:
                    os.remove(index)
                except OSError:
                    pass
            _warn_damaged(cache.cache_path, e)
            return None

    def save_overload(sig, data):
        try:
            save(sig, data)
        except Exception as e:  # noqa: BLE001
            if interrupt_in(e) is not None:
                raise
            _warn_damaged(cache.cache_path, e)

    cache.load_overload, cache.save_overload = load_overload, save_overload


def _usable_cache_dir() -> tuple[str | None, str]:
    """``(directory, "")``, or ``(None, why not)``."""
    directory = cache_dir()
    if directory is None:
        return None, "the user has no cache directory (no home directory)"
    try:
        directory = private_directory(directory, "the compiled-kernel cache")
    except OSError as e:
        return None, f"{directory!r} cannot be created ({e.strerror or e})"
    except ConfigError as e:
        return None, str(e)
    if not os.access(directory, os.W_OK | os.X_OK):
        return None, f"{directory!r} is not writable"
    return directory, ""


def _warn_uncached(why: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        logging.warning("tf_autoplace: the simulator's kernels are compiled without an on-disk "
                        "cache (each process compiles them again, seconds): %s. Set %s to a "
                        "private writable directory to cache them.", why, CACHE_ENV)


def _warn_damaged(path: str, error: Exception) -> None:
    global _warned_damaged
    if not _warned_damaged:
        _warned_damaged = True
        logging.warning("tf_autoplace: a compiled kernel's cache entry in %r cannot be used "
                        "(%s: %s); the kernel is compiled again (seconds) and its entry "
                        "rewritten.", path, type(error).__name__, error)


def interruptible(fn):
    """``fn``, raising a fresh KeyboardInterrupt of the same type (no chained SystemError)
    where an interrupt reached it wrapped in another exception (see the module doc)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: B036  (only to find an interrupt in its chain)
            interrupt = interrupt_in(e)
            if interrupt is None:
                raise
        raise type(interrupt)(*interrupt.args)  # outside the handler: nothing chained

    return wrapper
