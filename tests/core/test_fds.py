"""core.fds: a descriptor redirected while C code runs comes back as it was, whatever the threads
and interrupts (the process's standard error stayed on the null device after placements in
several threads, and a Ctrl-C could leak a copy of it)."""

import os
import sys
import threading

import pytest

from tf_autoplace.core import fds


def _points_at(fd):
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.fixture
def own_fd(tmp_path):
    """A descriptor of the test's own (the process's 1 and 2 are pytest's)."""
    with open(tmp_path / "own.log", "w") as f:
        yield f.fileno(), str(tmp_path / "own.log")


def _null():
    return open(os.devnull, "w")


def test_threads_that_overlap_leave_the_descriptor_as_it_was(own_fd):
    # A enters, B enters, A leaves, B leaves: with a save and restore per call, B saved A's
    # replacement and put it back last.
    fd, path = own_fd
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with fds.redirected(fd, _null):
            a_in.set()
            b_in.wait()
        a_out.set()

    def b():
        a_in.wait()
        with fds.redirected(fd, _null):
            b_in.set()
            a_out.wait()
            seen["inside"] = _points_at(fd)  # still redirected while one thread is inside

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert seen["inside"] == os.devnull
    assert _points_at(fd) == path
    assert fds._active == {}


def test_the_last_to_leave_passes_on_what_was_written(own_fd, tmp_path):
    fd, path = own_fd
    got = []

    def on_restore(target, restored):
        target.seek(0)
        got.append((target.read(), restored, _points_at(restored)))

    with fds.redirected(fd, lambda: open(tmp_path / "captured", "w+b"), on_restore):
        os.write(fd, b"one\n")
        with fds.redirected(fd, _null, on_restore):  # joins the first: no second target
            os.write(fd, b"two\n")
        assert got == []
    assert got == [(b"one\ntwo\n", fd, path)]


def test_an_interrupt_while_the_descriptor_goes_back_leaks_no_copy(own_fd, monkeypatch):
    fd, path = own_fd
    before = set(os.listdir("/proc/self/fd"))
    real_dup2 = os.dup2

    def dup2_then_interrupted(src, dst, *args):
        real_dup2(src, dst, *args)
        if dst == fd and _points_at(dst) == path:  # the restore, not the redirect
            raise KeyboardInterrupt

    monkeypatch.setattr(os, "dup2", dup2_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        with fds.redirected(fd, _null):
            pass
    monkeypatch.undo()
    assert _points_at(fd) == path
    assert set(os.listdir("/proc/self/fd")) == before  # the saved copy and the target closed
    assert fds._active == {}


def test_a_descriptor_that_cannot_be_redirected_is_left_alone(own_fd):
    fd, path = own_fd

    def fails():
        raise OSError("no such device")

    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError, match="no such device"):
        with fds.redirected(fd, fails):
            pass
    assert _points_at(fd) == path and set(os.listdir("/proc/self/fd")) == before
    assert fds._active == {}


@pytest.mark.parametrize("fd, quiet", [(2, "grappler"), (1, "metis")])
def test_grappler_and_metis_calls_in_overlapping_threads_give_the_descriptor_back(fd, quiet,
                                                                                 monkeypatch):
    # Placements in several threads left standard error on the null device (Grappler's quiet
    # block) and standard output on a deleted temporary file (METIS's), for the process's life.
    if quiet == "grappler":
        from tf_autoplace.graph.grappler import _quiet_stderr as block

        monkeypatch.setattr(sys, "stderr", sys.__stderr__)  # pytest's has no descriptor
    else:
        from tf_autoplace.heuristics.metis import _c_stdout_logged as block
    before = _points_at(fd)
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def a():
        with block():
            a_in.set()
            b_in.wait()
        a_out.set()

    def b():
        a_in.wait()
        with block():
            b_in.set()
            a_out.wait()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert _points_at(fd) == before


def test_a_block_that_joins_another_purposes_redirection_writes_where_it_does(own_fd, tmp_path):
    # With sys.stderr = sys.stdout, Grappler's quiet block and METIS's capture share a
    # descriptor: METIS's pass-on ran on Grappler's null device (not readable), a raw error.
    fd, path = own_fd
    passed_on = []

    def pass_on(target, restored):
        target.seek(0)
        passed_on.append(target.read())

    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    errors = []

    def quiet():
        with fds.redirected(fd, _null):
            a_in.set()
            b_in.wait()
        a_out.set()

    def capture():
        a_in.wait()
        try:
            with fds.redirected(fd, lambda: open(tmp_path / "c", "w+b"), pass_on):
                b_in.set()
                a_out.wait()
        except Exception as e:  # noqa: BLE001 - the test reports it
            errors.append(e)

    threads = [threading.Thread(target=quiet), threading.Thread(target=capture)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and passed_on == []  # the null device's: nothing to pass on
    assert _points_at(fd) == path and fds._active == {}


@pytest.mark.parametrize("call", [0, 1])
def test_an_interrupt_while_the_descriptor_is_redirected_undoes_it(own_fd, monkeypatch, call):
    # An interrupt right after the redirection (call 0) or after the target opened (call 1)
    # left the descriptor on the target for the process's life, or leaked the saved copy.
    fd, path = own_fd
    before = set(os.listdir("/proc/self/fd"))
    real_dup2 = os.dup2

    def interrupted_after_redirect(src, dst, *args):
        real_dup2(src, dst, *args)
        if dst == fd and _points_at(dst) == os.devnull:
            raise KeyboardInterrupt

    def interrupted_open():
        f = _null()
        if call:
            raise KeyboardInterrupt
        return f

    if call == 0:
        monkeypatch.setattr(os, "dup2", interrupted_after_redirect)
    with pytest.raises(KeyboardInterrupt):
        with fds.redirected(fd, _null if call == 0 else interrupted_open):
            pass
    monkeypatch.undo()
    assert _points_at(fd) == path
    assert fds._active == {}
    if call == 0:
        assert set(os.listdir("/proc/self/fd")) == before
