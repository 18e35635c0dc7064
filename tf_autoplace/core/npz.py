"""Arrays from npz bytes that nobody vouches for: a policy's ``weights.npz``, a problem cache's
entries.

``numpy.load`` trusts what an archive says of itself. Given ``allow_pickle=False`` it runs no
code, but a member's header that declares an array of a terabyte makes it try to allocate one
(``MemoryError``), a compressed member of zeros (a "zip bomb" of a few megabytes) unpacks to
gigabytes before any check can look at it, and a member that is not a ``.npy`` array comes back
as raw bytes. :func:`load_npz` checks each of these from the archive's directory and each
member's header before reading any array, so that damaged or hostile bytes are an
:class:`NpzError` saying what is wrong, at the cost of the bytes the archive actually holds.

Our own writers use ``numpy.savez`` (members stored, not compressed), so a member's unpacked
size is its stored size; a compressed archive is read too, up to ``max_ratio`` times its size.
"""

from __future__ import annotations

import io
import zipfile
import zlib

import numpy as np

# An archive unpacks to at most this many times its own size, plus SLACK bytes.
MAX_RATIO = 64
SLACK = 64 << 20


class NpzError(ValueError):
    """The bytes are not an npz archive of numeric arrays that can be read safely."""


def load_npz(data: bytes, *, max_ratio: float = MAX_RATIO, slack: int = SLACK
             ) -> dict[str, np.ndarray]:
    """The arrays of the npz archive ``data`` by name (``numpy.savez``'s keys).

    Args:
      data: the archive's bytes.
      max_ratio, slack: the members may unpack to at most ``max_ratio * len(data) + slack``
        bytes in all (module docstring).

    Raises:
      NpzError: not a whole zip archive (truncated, damaged, encrypted); a member that is not
        a ``.npy`` array, or holds Python objects (a pickle), or declares more or fewer bytes
        than it holds; or members that would unpack to more than the limit.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
            total = sum(m.file_size for m in members)
            if total > max_ratio * len(data) + slack:
                raise NpzError(f"its members would unpack to {total} bytes from {len(data)} "
                               "(a damaged or hostile archive)")
            out = {}
            for member in members:
                name = _name(member)
                out[name] = _read(archive, member)
            return out
    except NpzError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError,
            zlib.error, NotImplementedError, RuntimeError) as e:
        raise NpzError(f"it is not a whole npz archive (truncated or damaged: {e})") from e


def _name(member: zipfile.ZipInfo) -> str:
    if not member.filename.endswith(".npy") or member.is_dir():
        raise NpzError(f"its member {member.filename!r} is not a .npy array")
    return member.filename[:-len(".npy")]


def _read(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> np.ndarray:
    """One member's array, after its header is checked against the bytes it holds."""
    with archive.open(member) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise NpzError(f"its member {member.filename!r} has .npy format {version}")
        if dtype.hasobject:
            raise NpzError(f"its member {member.filename!r} holds Python objects (a pickle), "
                           "not numbers")
        declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
        held = member.file_size - f.tell()
        if declared != held:
            raise NpzError(f"its member {member.filename!r} declares an array of {declared} "
                           f"bytes but holds {held}")
        array = np.frombuffer(f.read(held), dtype=dtype)
    return array.reshape(shape, order="F" if fortran else "C").copy()
