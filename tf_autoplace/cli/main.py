"""``tf-autoplace``: one console command, a subcommand per tool, as TensorFlow's own
``saved_model_cli`` is one command with subcommands.

    tf-autoplace place --input=model.pb --output=placed.pb --cluster=testdata/k80x2.pbtxt
    tf-autoplace place-model --model=inception_v3 --cluster=testdata/k80x2.pbtxt
    tf-autoplace benchmark --quick
    tf-autoplace train-placeto --out_dir=my_policy --families=nmt
    tf-autoplace --help              # the commands;  tf-autoplace COMMAND --help: its flags

``pip install .`` installs it (setup.py ``entry_points``); from a checkout,
``python -m tf_autoplace.cli COMMAND ...`` is the same.

Each subcommand is a module, and its absl flags are defined in a module of their own,
``<command>_flags``, imported by the command's module. Several define the same names
(``--cluster``, ``--seed``), so only the chosen one is imported, by name, after the command
line is read (no cycle is involved). ``tf-autoplace COMMAND --help`` imports only the flags
module and reads the command's docstring from its source: it answers at once, without
TensorFlow, and exits 0. A flags module may also define ``check()``, the settings it can check
without TensorFlow (output paths, JSON values, cluster files): it runs before the command's
module is imported, so a long command given a wrong setting says so in one ``error:`` line at
once.

Ctrl-C and SIGTERM end a command the same way: the interrupt unwinds it through the cleanup that
leaves no partial output (:mod:`tf_autoplace.outputs.files`; SIGTERM is raised as
:class:`tf_autoplace.errors.Terminated`, a KeyboardInterrupt), then one line says what was
interrupted and what it left, and the status is 130 (128 + SIGINT) or 143 (128 + SIGTERM), as
a shell reports a program the signal ended. Once the command is over (its status decided, its
outputs whole or absent) both signals are ignored: Python restores their default action while
it shuts down, and one arriving then (TensorFlow's teardown takes a moment) would end the
process by the signal, without that line, after a command that had succeeded.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import signal
import sys

from absl import app, flags

from tf_autoplace.errors import AutoplaceError, Terminated, interrupt_in
from tf_autoplace.outputs import files  # no TensorFlow: what an interrupt left written

PROG = "tf-autoplace"
HELP = ("-h", "--help", "-help", "help", "--helpshort", "-?")
HELP_FULL = ("--helpfull", "-helpfull")

# command -> (module of tf_autoplace.cli, what it does, what an interrupt leaves)
COMMANDS = {
    "place": ("place", "place a GraphDef, MetaGraphDef or SavedModel file, or a cost graph; "
                       "write the placed copy (a cost graph's placement) and the report",
              "nothing was written"),
    "place-model": ("place_model", "build a model-zoo training graph, place it, print the "
                                   "report", "nothing was written"),
    "benchmark": ("benchmark", "placers x zoo models x clusters: step times, bounds, memory",
                  "--out_md and --out_csv are rewritten as each pair ends: they hold this "
                  "run's finished pairs, or what they held before it if no pair had finished; "
                  "nothing else was written"),
    "train-placeto": ("train_placeto", "pretrain a Placeto policy on graph families, with its "
                                       "manifest", "no policy or manifest was written"),
    "train-gdp": ("train_gdp", "pretrain a GDP policy for 2, 4 and 8 GPUs, with its manifest",
                  "no policy or manifest was written"),
    "profile": ("profile", "profile a training graph's ops and this machine's links (or a "
                           "TensorFlow cluster's servers)",
                "--out_profile is written once the op profile is done and --out_cluster at the "
                "end; nothing else was written"),
    "fidelity": ("fidelity", "how well the simulator ranks placements against measured runs",
                 "--out_md and --out_json are written at the end: nothing was written"),
    "serve-local": ("serve_local", "run a TensorFlow cluster of server processes on this "
                                   "machine until Ctrl-C, and write its ClusterSpec",
                    "every server process has ended and --out_cluster was removed"),
}


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    rows = "\n".join(f"  {name:<{width}}  {what}" for name, (_, what, _) in COMMANDS.items())
    return (f"usage: {PROG} COMMAND [--flag=value ...]\n\n"
            f"Device placement for TensorFlow graphs. Commands:\n{rows}\n\n"
            f"{PROG} COMMAND --help lists a command's flags.")


def _terminate(signum, frame):
    del signum, frame
    raise Terminated()


def _over() -> None:
    """The command is over: Ctrl-C and SIGTERM are ignored from now (module docstring)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


class StdoutError(Exception):
    """A write to standard output failed with an OSError other than a closed reader's (a full
    disk, an I/O error): the command cannot print what it did."""


class _GuardedStdout:
    """Standard output whose failed writes are :class:`StdoutError` (BrokenPipeError goes on
    as it is: :func:`_stdout_closed`), so that :func:`main` can tell them from the OSError of
    a file the command reads or writes."""

    def __init__(self, stream):
        self._stream = stream

    def _guarded(self, method, *args):
        try:
            return method(*args)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise StdoutError(str(e)) from e

    def write(self, text):
        return self._guarded(self._stream.write, text)

    def writelines(self, lines):
        return self._guarded(self._stream.writelines, lines)

    def flush(self):
        return self._guarded(self._stream.flush)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _stdout_failed(error: StdoutError, name: str, committed_before: int) -> int:
    """The status of a command whose standard output could not be written (not a closed
    reader): one line on stderr saying so and what the command had written by then (the
    files it committed are whole and new), and standard output pointed at the null device so
    that the flush at exit cannot fail again."""
    written = files.committed()[committed_before:]
    left = (f"{', '.join(written)} {'was' if len(written) == 1 else 'were'} written whole "
            "before that" if written else
            COMMANDS[name][2] if name in COMMANDS else "nothing was written")
    print(f"{PROG}{f' {name}' if name in COMMANDS else ''}: cannot write to standard output "
          f"({error}); {left}", file=sys.stderr)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return 1


def _stdout_closed() -> int:
    """The status of a command whose reader closed its standard output (``... | head``): what
    the shell reports for a program SIGPIPE ended, without a traceback, as ``git log | head``
    ends. Python ignores SIGPIPE, so the write raised BrokenPipeError instead; standard output
    is pointed at the null device so that the flush at exit cannot raise it again. What the
    command writes to files is whole or absent as for any other error it stops on."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return 128 + signal.SIGPIPE


def _docstring(module: str) -> str:
    """The docstring of ``tf_autoplace.cli.<module>``, read from its source without importing
    it (the command modules import TensorFlow)."""
    spec = importlib.util.find_spec(f"tf_autoplace.cli.{module}")
    with open(spec.origin, encoding="utf-8") as f:
        return ast.get_docstring(ast.parse(f.read())) or ""


def _help(name: str, full: bool) -> int:
    """Print ``name``'s usage, docstring and flags (``full``: absl's own flags too) to stdout,
    from its flags module: nothing that imports TensorFlow."""
    module = COMMANDS[name][0]
    flags_module = importlib.import_module(f"tf_autoplace.cli.{module}_flags")
    listing = (flags.FLAGS.get_help() if full
               else flags.FLAGS.module_help(flags_module.__name__))
    print(f"usage: {PROG} {name} [--flag=value ...]\n\n{_docstring(module)}\n\nflags:\n"
          f"{listing}\n\n{PROG} {name} --helpfull also lists absl's own flags.")
    return 0


def _check_early(flags_module) -> int | None:
    """Parse ``sys.argv``'s flags and run the flags module's ``check()``, if it has one, before
    the command's module (and TensorFlow) is imported: a wrong setting of a long command (a
    trainer, the benchmark) is one line at once, not after seconds of loading. A value absl
    cannot parse (``--steps=abc``) gets absl's own message and status 1 here; an unknown flag
    is left to ``app.run``, since TensorFlow defines flags of its own when it is imported.
    An argument that is not a flag is refused too: no command takes one, and absl would leave
    it unread (``--cache DIR`` sets the boolean ``--cache`` and drops DIR without a word).
    Returns 1 when a value or a check fails, None otherwise.
    The flags are unparsed again either way, since ``app.run`` parses them once more (a
    repeated flag would otherwise count twice)."""
    try:
        rest = flags.FLAGS(sys.argv)[1:]
    except flags.UnrecognizedFlagError:
        return None
    except flags.Error as e:
        flags.FLAGS.unparse_flags()
        print(f"FATAL Flags parsing error: {e}\nPass --helpshort or --helpfull to see help on "
              "flags.", file=sys.stderr)  # absl's words (app.parse_flags_with_usage)
        return 1
    if rest:
        flags.FLAGS.unparse_flags()
        print(f"error: unexpected argument{'s' if len(rest) > 1 else ''} "
              f"{', '.join(map(repr, rest))}: {sys.argv[0]} takes only flags, each with its "
              "value after '=' (--flag=value; a boolean flag is --flag or --noflag)",
              file=sys.stderr)
        return 1
    check = getattr(flags_module, "check", None)
    try:
        if check is not None:
            check()
    except AutoplaceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        flags.FLAGS.unparse_flags()
    return None


def _run(name: str) -> int:
    """Import ``name``'s module and run its ``main`` under absl with ``sys.argv``, once its
    flags module's early checks pass (:func:`_check_early`)."""
    flags_module = f"tf_autoplace.cli.{COMMANDS[name][0]}_flags"
    failed = _check_early(importlib.import_module(flags_module))
    if failed is not None:
        return failed
    command = importlib.import_module(f"tf_autoplace.cli.{COMMANDS[name][0]}")
    sys.modules["__main__"].__doc__ = command.__doc__
    for flag in flags.FLAGS.get_key_flags_for_module(flags_module):
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
    app.run(command.main, argv=sys.argv)  # exits with main's status
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``argv[1]``'s command with the rest of ``argv`` (default ``sys.argv``); returns the
    exit status.

    Standard output takes what it cannot encode escaped (a path in another script to an ASCII
    terminal), as standard error does; a reader that closed it is :func:`_stdout_closed`, one
    that cannot be written (a full disk) :func:`_stdout_failed`, never a traceback."""
    argv = list(sys.argv if argv is None else argv)
    name = argv[1] if len(argv) > 1 else ""
    committed_before = len(files.committed())
    stream, errors = sys.stdout, getattr(sys.stdout, "errors", None)
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None and errors is not None:
        reconfigure(errors="backslashreplace")
    if stream is not None:  # None: started without one, and print() writes nothing
        sys.stdout = _GuardedStdout(stream)
    try:
        try:
            return _main(argv)
        finally:
            if stream is not None:
                sys.stdout.flush()  # what is still buffered fails here, not at exit
    except BrokenPipeError:
        return _stdout_closed()
    except StdoutError as e:
        return _stdout_failed(e, name, committed_before)
    finally:
        sys.stdout = stream
        if reconfigure is not None and errors is not None:
            reconfigure(errors=errors)


def _main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] in HELP or argv[1] in HELP_FULL:
        print(usage(), file=sys.stdout if len(argv) >= 2 else sys.stderr)
        return 0 if len(argv) >= 2 else 2
    name = argv[1]
    if name not in COMMANDS:
        print(f"{PROG}: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    asked = [arg for arg in argv[2:] if arg in HELP or arg in HELP_FULL]
    if asked:
        return _help(name, full=any(arg in HELP_FULL for arg in asked))
    # The command runs as a program of its own: sys.argv[0] names it (absl's usage line, and a
    # manifest that records the command line).
    sys.argv = [f"{PROG} {name}", *argv[2:]]
    signal.signal(signal.SIGTERM, _terminate)
    earlier = files.written_when_interrupted()
    try:
        return _run(name)
    except BaseException as e:  # noqa: B036  (SystemExit, the command's status, goes on)
        _over()
        interrupt = interrupt_in(e)
        if interrupt is None:
            raise
        terminated = isinstance(interrupt, Terminated)
        written = files.written_when_interrupted()
        left = (f"it came as its outputs were renamed into place, which was finished: "
                f"{', '.join(written)} are whole and new" if written != earlier and written
                else COMMANDS[name][2])
        print(f"{PROG} {name}: interrupted by {'SIGTERM' if terminated else 'Ctrl-C (SIGINT)'}"
              f"; {left}", file=sys.stderr)
        return 128 + (signal.SIGTERM if terminated else signal.SIGINT)
