"""Output files and directories that appear whole, as one set, or not at all.

The offline tool and :func:`tf_autoplace.tf2.place_saved_model` write their results through
this module, with these rules:

- **Check first.** :func:`check_output_path` rejects, before any placement work, a path that
  cannot be written: empty, holding a NUL, in a directory that does not exist or is not
  writable, an existing directory where a file goes, a non-empty directory where a new one
  goes, or a device, FIFO or socket (``/dev/null``), which the output would replace. Missing parent directories are an error rather than created, so a failed or interrupted
  run never leaves directories of its own behind. A symbolic link at an output's path is
  replaced by the output, never followed (a link to an empty directory where a new directory
  goes, too).
- **One set, all new or all old.** :meth:`Outputs.commit` writes a run's outputs (the graph, the
  report, the trace, the saved policy, ...) only once everything is computed, as one set, with
  a small journal:

  1. a *plan* (``.tmp_autoplace_<run>.plan``, JSON: every output's final path and the name it
     is staged under) is written into every directory that gets an output;
  2. each output is *staged* beside its final path (``.tmp_autoplace_<run>.<i>``, on the same
     file system) and flushed to disk;
  3. the *commit record* (``.tmp_autoplace_<run>.commit``, a copy of the plan) is written into
     the first output's directory: from here on the set is the new one;
  4. each staged output is renamed over its final path; then the commit record and the plans
     are removed.

  A file is written under a ``.part`` name and renamed, so a plan or a commit record is whole
  or absent. An error or an interrupt (``KeyboardInterrupt``, ``SystemExit``) before step 3
  removes everything staged and leaves the previous outputs; one during step 4 finishes the
  renames. A process killed outright (SIGKILL, or an error no handler runs for) can stop
  anywhere: then the next :func:`check_output_path` for a path in one of the set's directories
  (the next run writing there) first *recovers* the interrupted set (:func:`recover`): with a
  commit record it finishes the renames (the complete new set), without one it removes what
  was staged (the complete previous set); either way every temporary of the killed run is
  removed. Between the kill and that recovery, a kill during step 4 leaves some paths new and
  some old.
- **Ordinary permissions.** Outputs get the mode a plain ``open()`` / ``mkdir()`` would give
  under the user's umask (``mkstemp`` and ``mkdtemp`` would make them private).

Recovery trusts only journals the current user owns (a plan someone else planted in a shared
directory renames nothing), and never touches a set that is still being written: a writer holds
an exclusive ``flock`` on each of its directories from its first plan to its last removal, and
recovery runs only where it gets the lock at once (no locking, hence no recovery, on systems
without ``fcntl``). Two runs writing into one directory at once therefore take turns, and a
new directory that another run created since :func:`check_output_path` is a ConfigError
before anything is staged: one run's set is written, the other fails whole, and no journal
is left that a later run would finish over newer outputs. The promise is about processes
being killed; after a power loss the file system's own guarantees apply (outputs are flushed
before the commit record, the directories are not).

:func:`write_atomically` writes one file the same way without a journal (a temporary beside it,
renamed over it), for caches.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
from typing import Callable

from absl import logging

from tf_autoplace.core.cachedir import NotARegularFile, read_regular_file
from tf_autoplace.errors import ConfigError

try:
    import fcntl
except ImportError:  # Windows: no flock, no recovery
    fcntl = None

TEMP_PREFIX = ".tmp_autoplace_"
# <run>.<i> staged output i, <run>.plan, <run>.commit, each possibly still being written (.part)
_JOURNAL_NAME = re.compile(r"^" + re.escape(TEMP_PREFIX) + r"([0-9a-f]{32})\.(\d+|plan|commit)"
                           r"(\.part)?$")
_FORMAT = 1


def umask() -> int:
    """The process's umask, read without changing it where the OS says (Linux ``/proc``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore at once
    os.umask(mask)
    return mask


def check_output_path(path, what: str, *, directory: bool = False) -> str:
    """The absolute form of ``path`` if an output can be written there (module docstring);
    otherwise ConfigError naming ``what`` (e.g. ``--report_json``) and the reason.

    A set of outputs a killed run left half written in ``path``'s directory is recovered
    first (:func:`recover`), so the check sees the complete new or the complete old set.

    ``directory``: the output is a new directory (``path`` must not exist or be an empty
    directory) rather than a file (``path`` may exist as a file, which is replaced)."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ConfigError(f"{what} must be a non-empty path, got {path!r}")
    path = os.fspath(path)
    if "\0" in path:
        raise ConfigError(f"{what} {path!r} holds a NUL character")
    full = os.path.abspath(path)
    parent = os.path.dirname(full)
    if not os.path.isdir(parent):
        if os.path.lexists(parent):
            raise ConfigError(f"{what} {path!r}: {parent!r} is a file, not a directory")
        raise ConfigError(f"{what} {path!r}: the directory {parent!r} does not exist (it is "
                          "not created)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {path!r}: the directory {parent!r} is not writable")
    recover(parent)
    if directory:
        if os.path.lexists(full) and not (os.path.isdir(full) and not os.listdir(full)):
            raise ConfigError(f"{what} {path!r} exists; refusing to overwrite it (give a new "
                              "directory, or an empty one)")
    elif os.path.isdir(full):
        raise ConfigError(f"{what} {path!r} is a directory; expected a file path")
    if os.path.lexists(full) and not os.path.islink(full) and not stat.S_ISREG(
            os.lstat(full).st_mode) and not os.path.isdir(full):
        # /dev/null, a FIFO, a socket: renaming the output over it would destroy it
        raise ConfigError(f"{what} {path!r} is not a regular file (a device, FIFO or "
                          "socket); outputs replace the file at their path, so give a file "
                          "path")
    return full


def is_within(path, directory) -> bool:
    """Whether ``path`` is ``directory`` or lies in it, symbolic links resolved: an output
    there would change an input directory (a SavedModel)."""
    source = os.path.realpath(directory)
    return os.path.commonpath([source, os.path.realpath(path)]) == source


def write_atomically(path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader (or a concurrent writer) sees the old file
    or the whole new one: into a temporary file beside it (mode 0600), then renamed over it.
    Raises OSError if it cannot be written (the temporary is removed)."""
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=TEMP_PREFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def write_output(path, data: bytes) -> None:
    """Write ``data`` to ``path`` as a set of one output (:class:`Outputs`): whole or not at
    all, with the user's ordinary permissions, a link at ``path`` replaced and never followed.
    Raises OSError if it cannot be written (the old file is left)."""
    outputs = Outputs()
    outputs.add_file(path, data)
    outputs.commit()


class Outputs:
    """Outputs written as one set: all new or all old (module docstring).

        outputs = Outputs()
        outputs.add_file("placed.pb", data)
        outputs.add_directory("placed_model", lambda tmp: save_into(tmp))
        outputs.commit()

    Staging happens in :meth:`commit`, after everything is computed, so an error or an
    interrupt before then leaves nothing on disk."""

    def __init__(self):
        self._pending: list[tuple[str, object]] = []  # (final path, bytes or writer)

    def add_file(self, path, data: bytes) -> None:
        self._pending.append((os.path.abspath(os.fspath(path)), bytes(data)))

    def add_directory(self, path, write: Callable[[str], None]) -> None:
        """``write(tmp)`` fills an empty temporary directory that becomes ``path``."""
        self._pending.append((os.path.abspath(os.fspath(path)), write))

    def commit(self) -> None:
        """Write every output as one set (module docstring). An error or interrupt before the
        commit record removes everything staged, and the exception goes on; after it, the
        renames are finished first (or left to :func:`recover` if a rename fails)."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        run = secrets.token_hex(16)
        directories = sorted({os.path.dirname(final) for final, _ in pending})
        plan = {
            "format": _FORMAT,
            "commit": _journal_path(os.path.dirname(pending[0][0]), run, "commit"),
            "plans": [_journal_path(d, run, "plan") for d in directories],
            "outputs": [{"final": final, "directory": not isinstance(content, bytes),
                         "staged": _journal_path(os.path.dirname(final), run, str(i))}
                        for i, (final, content) in enumerate(pending)]}
        mask = umask()
        with _locked(directories, wait=True):  # waits for other writers and recoveries there
            for final, content in pending:  # another run may have made it since the check
                if not isinstance(content, bytes) and os.path.lexists(final) and not (
                        os.path.isdir(final) and not os.listdir(final)):
                    raise ConfigError(f"{final!r} was written by another run while this one "
                                      "worked; refusing to overwrite it")
            writing = None  # the output (or the directory of the journal) being written
            try:
                for path in plan["plans"]:
                    writing = os.path.dirname(path)
                    _write_journal(path, plan)
                for item, (final, content) in zip(plan["outputs"], pending):
                    writing = final
                    _stage(item["staged"], content, mask)
                writing = os.path.dirname(plan["commit"])
                _write_journal(plan["commit"], plan)
            except BaseException as e:
                _roll_back(plan)
                if isinstance(e, OSError) and e.errno is not None and e.filename is None:
                    # A full disk names no file: say where.
                    raise OSError(e.errno, e.strerror, writing) from e
                raise
            try:
                _roll_forward(plan)
            except BaseException as e:  # interrupted after the commit point: finish the renames
                with contextlib.suppress(OSError):
                    _roll_forward(plan)
                if isinstance(e, KeyboardInterrupt):
                    _written_when_interrupted[:] = [p for p, _ in pending]
                raise
            _committed.extend(p for p, _ in pending)


# The outputs of the last set an interrupt reached after its commit point: complete and new
# (the renames were finished before the interrupt went on). What an interrupted command says.
_written_when_interrupted: list[str] = []


# Every output of every set this process committed (renames finished), in order.
_committed: list[str] = []


def committed() -> tuple[str, ...]:
    """The outputs of every set this process committed, in order: each whole and new when
    its set was committed. A command that fails after its commit (its standard output
    unwritable) names them from here."""
    return tuple(_committed)


def written_when_interrupted() -> tuple[str, ...]:
    """The outputs of the last set of this process whose commit an interrupt (Ctrl-C,
    SIGTERM) reached after the commit point: their renames were finished, so they are whole
    and new. Empty where no interrupt came then."""
    return tuple(_written_when_interrupted)


def recover(directory) -> None:
    """Finish or undo the sets of outputs that killed runs left in ``directory`` (module
    docstring), and remove their temporaries. Does nothing where another run is writing into
    ``directory`` right now, or where there is nothing to recover; journals of other users are
    left alone. Recovery that fails (a directory no longer writable) is logged, not raised."""
    directory = os.path.abspath(os.fspath(directory))
    try:
        names = [n for n in os.listdir(directory) if _JOURNAL_NAME.match(n)]
    except OSError:
        return
    if not names or fcntl is None:
        return
    with _locked([directory], wait=False) as locked:
        if not locked:
            return  # a run is writing its outputs here now
        runs: dict[str, list[str]] = {}
        for name in names:
            runs.setdefault(_JOURNAL_NAME.match(name).group(1), []).append(name)
        for run, entries in sorted(runs.items()):
            try:
                _recover_run(directory, run, entries)
            except OSError as e:
                logging.warning("tf_autoplace: cannot recover the outputs an interrupted run "
                                "left in %s (%s)", directory, e.strerror or e)


def _recover_run(directory: str, run: str, entries: list[str]) -> None:
    plan = _read_journal(_journal_path(directory, run, "plan"), directory, run)
    if plan is None:
        plan = _read_journal(_journal_path(directory, run, "commit"), directory, run)
    if plan is None:  # killed before its plan here was whole: only its leftovers are here
        for name in entries:
            _remove_own(os.path.join(directory, name))
        return
    committed = _read_journal(plan["commit"], directory, run) is not None
    finals = [item["final"] for item in plan["outputs"]]
    if committed:
        _roll_forward(plan)
        logging.warning("tf_autoplace: finished writing the outputs of an interrupted run "
                        "(killed while renaming them into place): %s", finals)
    else:
        _roll_back(plan)
        logging.warning("tf_autoplace: removed what an interrupted run had staged for %s "
                        "(killed before its outputs were complete; the previous ones stay)",
                        finals)
    for name in entries:  # anything else of that run here
        _remove_own(os.path.join(directory, name))


def _journal_path(directory: str, run: str, what: str) -> str:
    return os.path.join(directory, f"{TEMP_PREFIX}{run}.{what}")


def _write_journal(path: str, plan: dict) -> None:
    """Write ``plan`` to ``path`` whole or not at all: ``path.part``, flushed, then renamed."""
    part = path + ".part"
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(json.dumps(plan, sort_keys=True).encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, path)


def _read_journal(path: str, directory: str, run: str) -> dict | None:
    """The plan at ``path`` if it is a regular file this user owns, parses and describes run
    ``run`` with every name where the protocol puts it; None otherwise."""
    try:
        if hasattr(os, "geteuid") and os.lstat(path).st_uid != os.geteuid():
            return None
        plan = json.loads(read_regular_file(path))
    except (OSError, NotARegularFile, ValueError):
        return None
    try:
        ok = (plan["format"] == _FORMAT
              and plan["commit"] == _journal_path(os.path.dirname(plan["commit"]), run,
                                                  "commit")
              and _journal_path(directory, run, "plan") in plan["plans"]
              and all(p == _journal_path(os.path.dirname(p), run, "plan")
                      for p in plan["plans"])
              and all(item["staged"] == _journal_path(os.path.dirname(item["final"]), run,
                                                      str(i))
                      and os.path.isabs(item["final"]) and isinstance(item["directory"], bool)
                      for i, item in enumerate(plan["outputs"])))
    except (KeyError, TypeError, AttributeError):
        return None
    return plan if ok else None


def _stage(path: str, content, mask: int) -> None:
    if isinstance(content, bytes):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                     0o666 & ~mask)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~mask)
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
    else:
        os.mkdir(path, 0o700)  # private while it fills
        content(path)
        os.chmod(path, 0o777 & ~mask)


def _roll_forward(plan: dict) -> None:
    """Rename every staged output still there over its final path, then drop the journal.
    Idempotent: a rename done already is not done again."""
    for item in plan["outputs"]:
        staged, final = item["staged"], item["final"]
        if not _own(staged):
            continue
        if item["directory"] and os.path.islink(final):
            os.unlink(final)  # a link (to an empty directory: checked) is replaced, as a
            # file's is; os.replace cannot put a directory over it
        elif item["directory"] and os.path.isdir(final):
            os.rmdir(final)  # empty (checked): os.replace cannot replace a directory
        os.replace(staged, final)
    _drop_journal(plan)


def _roll_back(plan: dict) -> None:
    """Remove every staged output and the journal; the final paths keep what they had."""
    for item in plan["outputs"]:
        _remove_own(item["staged"])
    _drop_journal(plan)


def _drop_journal(plan: dict) -> None:
    for path in [plan["commit"]] + list(plan["plans"]):
        _remove_own(path)
        _remove_own(path + ".part")


def _own(path: str) -> bool:
    """Whether ``path`` exists (not followed) and belongs to this user."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return owned(st)


def owned(st: os.stat_result) -> bool:
    """Whether the file ``st`` describes belongs to this user (always, where the system has
    no user ids): what a cleanup may remove from a directory others could also write to."""
    return not hasattr(os, "geteuid") or st.st_uid == os.geteuid()


def _remove_own(path: str) -> None:
    if not _own(path):
        return
    if stat.S_ISDIR(os.lstat(path).st_mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


@contextlib.contextmanager
def _locked(directories: list[str], *, wait: bool):
    """Hold an exclusive ``flock`` on every directory (in the sorted order the callers give,
    so two writers cannot deadlock), waiting for it or only if it is free at once; yields
    whether the locks are held (always True without ``fcntl``)."""
    if fcntl is None:
        yield True
        return
    fds = []
    try:
        for directory in directories:
            fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) |
                         getattr(os, "O_CLOEXEC", 0))
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
        yield True
    finally:
        for fd in fds:
            os.close(fd)  # releases its lock
