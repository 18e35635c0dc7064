"""Private cache directories and reading entries without trusting them: directories are made
0700, another user's or a shared one is refused, and a FIFO, socket, device, directory or
symbolic link is never read (nor waited on)."""

import os
import socket
import stat

import pytest

from tf_autoplace.core import cachedir
from tf_autoplace.errors import ConfigError


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_missing_directories_are_made_private(tmp_path):
    made = cachedir.private_directory(tmp_path / "a" / "b" / "c", "the test cache")
    assert made == str(tmp_path / "a" / "b" / "c")
    for path in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        assert _mode(path) == 0o700
    assert cachedir.private_directory(made, "the test cache") == made  # exists: checked only


def test_a_shared_or_foreign_directory_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp
    with pytest.raises(ConfigError, match=r"the test cache directory '.*shared' can be written "
                                          r"by other users \(mode 1777\)") as shared_error:
        cachedir.private_directory(shared, "the test cache")
    # A sticky shared directory (/tmp) is not the user's to chmod: the error says to use one
    # of their own, never to make it private.
    assert "chmod" not in str(shared_error.value)
    assert str(shared_error.value).endswith("Use a directory of your own")
    os.chmod(shared, 0o775)
    with pytest.raises(ConfigError, match="can be written by other users.*chmod go-w"):
        cachedir.check_private_directory(shared, "the test cache")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ConfigError, match="is not a directory"):
        cachedir.private_directory(a_file, "the test cache")


def test_a_directory_another_user_owns_is_refused(tmp_path):
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
    else:
        theirs = "/"  # root's
    with pytest.raises(ConfigError, match=r"is owned by another user \(uid \d+; this process "
                                          r"runs as uid \d+\)"):
        cachedir.private_directory(theirs, "the test cache")


def test_no_home_no_user_cache_directory(monkeypatch):
    monkeypatch.setattr(cachedir.platformdirs, "user_cache_dir", lambda *a, **k: "~/.cache/x")
    assert cachedir.user_cache_dir("problems") is None

    def raises(*args, **kwargs):  # platformdirs 4.14: no home is an error, not a "~" path
        raise RuntimeError("could not determine the home directory for '~/.cache', set an "
                           "absolute HOME or XDG variable")

    monkeypatch.setattr(cachedir.platformdirs, "user_cache_dir", raises)
    assert cachedir.user_cache_dir("problems") is None


def test_only_regular_files_are_read(tmp_path):
    (tmp_path / "entry").write_bytes(b"data")
    assert cachedir.read_regular_file(tmp_path / "entry") == b"data"
    os.mkfifo(tmp_path / "fifo")  # no writer: a plain open() would wait for one forever
    os.symlink(tmp_path / "entry", tmp_path / "link")
    (tmp_path / "dir").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    try:
        for name, kind in (("fifo", "a FIFO"), ("link", "a symbolic link"),
                           ("dir", "a directory"), ("sock", "a socket")):
            with pytest.raises(cachedir.NotARegularFile, match=f"it is {kind}") as e:
                cachedir.read_regular_file(tmp_path / name)
            assert e.value.kind == kind
        with pytest.raises(cachedir.NotARegularFile, match="a character device"):
            cachedir.read_regular_file("/dev/zero")
    finally:
        sock.close()
    # A user's own link (a saved policy's files) may be followed; what it reaches must still
    # be a regular file.
    assert cachedir.read_regular_file(tmp_path / "link", follow_symlinks=True) == b"data"
    os.symlink(tmp_path / "fifo", tmp_path / "link_to_fifo")
    with pytest.raises(cachedir.NotARegularFile, match="a FIFO"):
        cachedir.read_regular_file(tmp_path / "link_to_fifo", follow_symlinks=True)
    with pytest.raises(FileNotFoundError):
        cachedir.read_regular_file(tmp_path / "missing")
