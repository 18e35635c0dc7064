"""The process's address-space limit (``ulimit -v``), checked before a placement starts.

A placement maps memory in places no Python code can catch a failure in: numba's compiler
(LLVM's ``std::bad_alloc`` aborts the process), the threads the search starts (each thread's
stack and malloc arena are mapped), the modules loaded on first use. Under a limit that leaves
little room, a placement ended with the process aborted, ``can't start new thread`` or a
failed import, instead of an error saying why. :func:`check_address_space` says so before any
of it starts, with the graph untouched. Without a limit (the common case), or where the
process's mapped size cannot be read (not Linux), it checks nothing.
"""

from __future__ import annotations

from tf_autoplace.core.units import format_bytes
from tf_autoplace.errors import ConfigError

# Below this much room to map, a placement of even a small graph fails somewhere (a small
# network's placement by `auto` needed about 100 MB beyond an imported TensorFlow).
MIN_FREE_BYTES = 256 * 2**20


def address_space_left() -> int | None:
    """Bytes the process may still map under its address-space limit, or None: no limit, or
    no way to read how much it maps (``/proc/self/status``)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            mapped = next((int(line.split()[1]) * 1024 for line in f
                           if line.startswith("VmSize:")), None)
    except (OSError, ValueError, IndexError):
        return None
    return None if mapped is None else soft - mapped


def check_address_space() -> None:
    """ConfigError when the address-space limit leaves less than :data:`MIN_FREE_BYTES` to
    map (module docstring)."""
    left = address_space_left()
    if left is not None and left < MIN_FREE_BYTES:
        raise ConfigError(
            f"this process may map only {format_bytes(max(left, 0))} more memory under its "
            f"address-space limit (ulimit -v), and a placement needs at least "
            f"{format_bytes(MIN_FREE_BYTES)} (numba's compiler, the search's threads); raise "
            "the limit or lift it (ulimit -v unlimited)")
