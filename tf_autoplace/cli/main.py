"""``tf-autoplace``: one console command, a subcommand per tool, as TensorFlow's own
``saved_model_cli`` is one command with subcommands.

    tf-autoplace place --input=model.pb --output=placed.pb --cluster=testdata/k80x2.pbtxt
    tf-autoplace place-model --model=inception_v3 --cluster=testdata/k80x2.pbtxt
    tf-autoplace benchmark --quick
    tf-autoplace train-placeto --out_dir=my_policy --families=nmt
    tf-autoplace --help              # the commands;  tf-autoplace COMMAND --help: its flags

``pip install .`` installs it (setup.py ``entry_points``); from a checkout,
``python -m tf_autoplace.cli COMMAND ...`` is the same.

Each subcommand is a module of absl flags defined when it is imported, and several define the
same names (``--cluster``, ``--seed``), so only the chosen one is imported, by name, after the
command line is read (no cycle is involved). SIGTERM ends a command as Ctrl-C does, through
the cleanup that leaves no partial output (:mod:`tf_autoplace.outputs.files`).
"""

from __future__ import annotations

import importlib
import signal
import sys

from absl import app, flags

PROG = "tf-autoplace"

# command -> (module of tf_autoplace.cli, what it does)
COMMANDS = {
    "place": ("place", "place a GraphDef, MetaGraphDef or SavedModel file; write the placed "
                       "copy and the report"),
    "place-model": ("place_model", "build a model-zoo training graph, place it, print the "
                                   "report"),
    "benchmark": ("benchmark", "placers x zoo models x clusters: step times, bounds, memory"),
    "train-placeto": ("train_placeto", "pretrain a Placeto policy on graph families, with its "
                                       "manifest"),
    "train-gdp": ("train_gdp", "pretrain a GDP policy for 2, 4 and 8 GPUs, with its manifest"),
    "profile": ("profile", "profile a training graph's ops and this machine's links (or a "
                           "TensorFlow cluster's servers)"),
    "fidelity": ("fidelity", "how well the simulator ranks placements against measured runs"),
    "serve-local": ("serve_local", "run a TensorFlow cluster of server processes on this "
                                   "machine until Ctrl-C, and write its ClusterSpec"),
}


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    rows = "\n".join(f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items())
    return (f"usage: {PROG} COMMAND [--flag=value ...]\n\n"
            f"Device placement for TensorFlow graphs. Commands:\n{rows}\n\n"
            f"{PROG} COMMAND --help lists a command's flags.")


def _terminate(signum, frame):
    del frame
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Run ``argv[1]``'s command with the rest of ``argv`` (default ``sys.argv``)."""
    argv = list(sys.argv if argv is None else argv)
    if len(argv) < 2 or argv[1] in ("-h", "--help", "-help", "help"):
        print(usage(), file=sys.stdout if len(argv) >= 2 else sys.stderr)
        return 0 if len(argv) >= 2 else 2
    name = argv[1]
    if name not in COMMANDS:
        print(f"{PROG}: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    command = importlib.import_module(f"tf_autoplace.cli.{COMMANDS[name][0]}")
    # The command runs as a program of its own: sys.argv[0] names it (absl's usage line, and a
    # manifest that records the command line), and --help shows its docstring and key flags.
    sys.argv = [f"{PROG} {name}", *argv[2:]]
    sys.modules["__main__"].__doc__ = command.__doc__
    for flag in flags.FLAGS.get_key_flags_for_module(command.__name__):
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
    signal.signal(signal.SIGTERM, _terminate)
    app.run(command.main, argv=sys.argv)  # exits with main's status
    return 0
