"""Child process for the kill tests: writes a set of outputs and SIGKILLs itself at a chosen
file-system step of :meth:`tf_autoplace.outputs.files.Outputs.commit`.

    python tests/outputs/kill_child.py KILL outputs DIR VERSION
    python tests/outputs/kill_child.py KILL cli ARGS...

KILL is ``none`` (run to the end and print how many steps the commit took, as JSON), ``N``
(kill before the N-th step, counting from 0) or ``CALL:N`` (before the N-th call of that
function, e.g. ``replace:3``). The steps are the calls that change the file system or flush it:
``os.open`` creating a file, ``os.mkdir``, ``os.replace``, ``os.unlink``, ``os.rmdir``,
``os.fsync``, counted only inside ``commit``, so the count does not depend on what the process
did before.

``outputs`` writes, through :class:`~tf_autoplace.outputs.files.Outputs`, ``DIR/a/graph.pb``,
``DIR/b/report.json``, ``DIR/b/placement.pbtxt`` (each holding VERSION) and the new directory
``DIR/b/policy`` (``weights`` holding VERSION). ``cli`` runs ``tf-autoplace`` with ARGS.
"""

import json
import os
import signal
import sys

from tf_autoplace.outputs import files

CALLS = ("open", "mkdir", "replace", "unlink", "rmdir", "fsync")


class Killer:
    def __init__(self, spec: str):
        self.name, self.at = None, None
        if spec != "none":
            name, _, at = spec.rpartition(":")
            self.name, self.at = name or None, int(at)
        self.armed = False
        self.counts = {"all": 0}

    def step(self, name: str) -> None:
        if not self.armed:
            return
        key = self.name or "all"
        count = self.counts.get(key, 0) if key != "all" else self.counts["all"]
        if (self.name in (None, name)) and self.at is not None and count == self.at:
            os.kill(os.getpid(), signal.SIGKILL)
        self.counts["all"] += 1
        self.counts[name] = self.counts.get(name, 0) + 1


def install(killer: Killer) -> None:
    for name in CALLS:
        original = getattr(os, name)

        def wrapped(*args, _original=original, _name=name, **kwargs):
            if _name != "open" or (len(args) > 1 and args[1] & os.O_CREAT):
                killer.step(_name)
            return _original(*args, **kwargs)

        setattr(os, name, wrapped)
    commit = files.Outputs.commit

    def armed(self):
        killer.armed = True
        try:
            return commit(self)
        finally:
            killer.armed = False

    files.Outputs.commit = armed


def write_outputs(directory: str, version: str) -> None:
    data = version.encode()
    outputs = files.Outputs()
    outputs.add_file(os.path.join(directory, "a", "graph.pb"), data)
    outputs.add_file(os.path.join(directory, "b", "report.json"), data)
    outputs.add_file(os.path.join(directory, "b", "placement.pbtxt"), data)

    def policy(tmp):
        with open(os.path.join(tmp, "weights"), "wb") as f:
            f.write(data)

    outputs.add_directory(os.path.join(directory, "b", "policy"), policy)
    outputs.commit()


def main(argv) -> int:
    killer = Killer(argv[0])
    install(killer)
    if argv[1] == "outputs":
        write_outputs(argv[2], argv[3])
        status = 0
    else:
        from tf_autoplace.cli import main as cli_main

        try:
            status = cli_main.main(["tf-autoplace", *argv[2:]])
        except SystemExit as e:
            status = e.code or 0
    print(json.dumps(killer.counts), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
