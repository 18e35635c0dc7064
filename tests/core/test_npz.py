"""tf_autoplace.core.npz: what numpy.savez writes comes back the same; bytes that would make
numpy.load allocate or unpack far more than they hold are an NpzError before any array is read."""

import io
import zipfile

import numpy as np
import pytest

from tf_autoplace.core.npz import NpzError, load_npz


def _savez(compressed=False, **arrays):
    out = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(out, **arrays)
    return out.getvalue()


@pytest.mark.parametrize("compressed", [False, True])
def test_what_savez_writes_comes_back_the_same(compressed):
    rng = np.random.default_rng(0)
    arrays = dict(a=rng.normal(size=(3, 4)).astype(np.float32), scalar=np.float64(2.5),
                  empty=np.zeros((0, 7), np.int64), flags=rng.random(5) > 0.5,
                  fortran=np.asfortranarray(rng.normal(size=(4, 3))),
                  text=np.frombuffer(b'{"format": 3}', np.uint8))
    loaded = load_npz(_savez(compressed, **arrays))
    assert sorted(loaded) == sorted(arrays)
    for name, array in arrays.items():
        assert loaded[name].dtype == np.asarray(array).dtype
        np.testing.assert_array_equal(loaded[name], array)
        assert loaded[name].flags.writeable


def _archive(members):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def _header(shape, descr="<f8"):
    out = io.BytesIO()
    np.lib.format.write_array_header_2_0(out, {"descr": descr, "fortran_order": False,
                                              "shape": shape})
    return out.getvalue()


@pytest.mark.parametrize("members,message", [
    ({"a.npy": _header((10**12,)) + bytes(8)}, "declares an array of 8000000000000 bytes but "
                                               "holds 8"),
    ({"a.npy": _header((2,)) + bytes(24)}, "declares an array of 16 bytes but holds 24"),
    ({"a.npy": _header((2 * 10**6,)) + bytes(16 * 10**6)}, "would unpack to"),  # (no slack)
    ({"readme.txt": b"hi"}, "its member 'readme.txt' is not a .npy array"),
    ({"a.npy": _header((1,), "|O") + bytes(8)}, r"holds Python objects \(a pickle\)"),
    ({"a.npy": b"\x93NUMPY\x09\x00" + bytes(8)}, r"has .npy format \(9, 0\)"),
])
def test_hostile_members_are_refused_before_any_array_is_read(members, message):
    with pytest.raises(NpzError, match=message):
        load_npz(_archive(members), slack=0)  # (a bomb of 16 MB does, without the slack)


@pytest.mark.parametrize("data", [b"", b"PK\x03\x04" + bytes(40), b"not a zip at all"])
def test_what_is_not_a_whole_archive_is_an_npz_error(data):
    with pytest.raises(NpzError, match="not a whole npz archive"):
        load_npz(data)
    whole = _savez(a=np.arange(10))
    with pytest.raises(NpzError, match="not a whole npz archive"):
        load_npz(whole[:len(whole) // 2])
