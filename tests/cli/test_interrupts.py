"""Ctrl-C and SIGTERM during a search: the command prints one line and exits 130 / 143 with
nothing written; the Python API raises a plain KeyboardInterrupt with the graph untouched.

Each case runs a search in a child process and sends the signal once the child has logged a
progress line of the search (its stderr is a pipe, so progress comes as log lines), not after
a fixed time. Ctrl-C's two cases run at once; SIGTERM's runs with ``-m slow``. The search
races 64 seeds per start (``seeds_per_start=64``): on the small graph the default search ends
at a local optimum within a few seconds, sometimes before its first progress line or before
the signal lands under load; with 256 searches it runs for tens of seconds, far longer than a
signal takes.
"""

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from tf_autoplace.testing import small_cnn

TRIGGER = "autoplace: auto"  # a progress line: the search is under way

API_CHILD = """
import json
import tf_autoplace
from tf_autoplace.placers import AutoPlacer
from tf_autoplace.testing import small_cnn

graph = small_cnn().graph
before = [op.device for op in graph.get_operations()]
out = {"raised": None}
try:
    tf_autoplace.autoplace(graph, cluster="k80x2", placer=AutoPlacer(seeds_per_start=64))
except BaseException as e:
    out = {"raised": type(e).__name__,
           "chained": [type(x).__name__ for x in (e.__cause__, e.__context__) if x is not None]}
out["untouched"] = [op.device for op in graph.get_operations()] == before
print(json.dumps(out))
"""


def _interrupt(argv, sig, *, group, cwd, env):
    """Run ``argv``, send ``sig`` (to its process group when ``group``, as Ctrl-C in a terminal
    does) after its first progress line; returns (status, stdout, stderr lines after the
    signal, whether the signal was sent)."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    sent = False
    for line in proc.stderr:
        if TRIGGER in line:
            if group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
            sent = True
            break
    after = proc.stderr.read().splitlines()
    stdout = proc.stdout.read()
    return proc.wait(timeout=300), stdout, after, sent


def _interrupted(tmp_path_factory, repo_root, names):
    """Run the cases ``names`` (of ``ctrl_c``, ``sigterm``, ``api``) at once; returns the work
    directory and {name: what :func:`_interrupt` returned}."""
    work = tmp_path_factory.mktemp("interrupts")
    graph = work / "model.pb"
    graph.write_bytes(small_cnn().graph.as_graph_def().SerializeToString())
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join(p for p in (repo_root, os.environ.get("PYTHONPATH"))
                                          if p))

    def place(out):
        os.mkdir(work / out)
        return [sys.executable, "-m", "tf_autoplace.cli", "place", f"--input={graph}",
                f"--output={work / out / 'placed.pb'}", "--cluster=k80x2",
                f"--report_json={work / out / 'report.json'}",
                "--placer_option=seeds_per_start=64"]

    cases = {"ctrl_c": (place("ctrl_c"), signal.SIGINT, True),
             "sigterm": (place("sigterm"), signal.SIGTERM, False),
             "api": ([sys.executable, "-c", API_CHILD], signal.SIGINT, False)}
    cases = {name: cases[name] for name in names}
    results = {}

    def run(name, argv, sig, group):
        results[name] = _interrupt(argv, sig, group=group, cwd=repo_root, env=env)

    # A child inherits an ignored SIGINT (pytest started in the background by a shell without
    # job control, under nohup, ...), and Python then installs no KeyboardInterrupt handler in
    # it. Ctrl-C in a terminal reaches a program whose SIGINT is at its default: a handler here
    # (caught, not ignored) is reset to the default in every child that starts meanwhile.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threads = [threading.Thread(target=run, args=(name, *case))
                   for name, case in cases.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    return work, results


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory, repo_root):
    """Ctrl-C on the command and on the API, two child processes at once."""
    return _interrupted(tmp_path_factory, repo_root, ("ctrl_c", "api"))


@pytest.fixture(scope="module")
def interrupted_by_sigterm(tmp_path_factory, repo_root):
    return _interrupted(tmp_path_factory, repo_root, ("sigterm",))


@pytest.mark.parametrize("case, status, signal_name", [
    ("ctrl_c", 130, "Ctrl-C (SIGINT)"),
    # The same unwinding as Ctrl-C's (one handler), in one more process: seconds.
    pytest.param("sigterm", 143, "SIGTERM", marks=pytest.mark.slow)])
def test_a_command_interrupted_prints_one_line_and_writes_nothing(request, case, status,
                                                                 signal_name):
    work, results = request.getfixturevalue(
        "interrupted_by_sigterm" if case == "sigterm" else "interrupted")
    code, stdout, after, sent = results[case]
    assert sent, "the search logged no progress line before it ended"
    assert [line for line in after if line.strip()] == [
        f"tf-autoplace place: interrupted by {signal_name}; nothing was written"], after
    assert code == status
    assert os.listdir(work / case) == []  # no output, no temporary


def test_the_api_raises_a_plain_keyboard_interrupt_and_leaves_the_graph(interrupted):
    _, results = interrupted
    code, stdout, after, sent = results["api"]
    assert sent, "the search logged no progress line before it ended"
    assert code == 0, after[-20:]
    got = json.loads(stdout.strip().splitlines()[-1])
    assert got == {"raised": "KeyboardInterrupt", "chained": [], "untouched": True}
    assert not any("SystemError" in line for line in after)


def test_an_interrupt_numba_wrapped_in_a_system_error_comes_out_plain():
    """What numba's compiled code raises when Ctrl-C lands while it unpickles a cached
    kernel's constants: a SystemError whose cause and context are the KeyboardInterrupt."""
    from tf_autoplace.errors import Terminated, interrupt_in
    from tf_autoplace.core.jit import interruptible

    def numba_like(interrupt):
        try:
            raise interrupt
        except KeyboardInterrupt as e:
            raise SystemError("<function _numba_unpickle> returned a result with an exception "
                              "set") from e

    for kind in (KeyboardInterrupt, Terminated):
        with pytest.raises(kind) as caught:
            interruptible(numba_like)(kind())
        assert caught.type is kind
        assert caught.value.__cause__ is None and caught.value.__context__ is None
    error = ValueError("not an interrupt")
    with pytest.raises(ValueError) as caught:
        interruptible(lambda: (_ for _ in ()).throw(error))()
    assert caught.value is error and interrupt_in(error) is None


def test_a_placer_run_directly_turns_numbas_chained_interrupt_into_a_plain_one():
    # Ctrl-C while a kernel runs in the search (Post's batches, the race's legs) came out of
    # AutoPlacer.place as numba's SystemError for a caller that runs placers itself.
    from tf_autoplace.heuristics.single import SingleDevicePlacer
    from tf_autoplace.testing.problems import random_problem

    class Interrupted(SingleDevicePlacer):
        def _place(self, problem, rng):
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as e:
                raise SystemError("<function _numba_unpickle> returned a result with an "
                                  "exception set") from e

    with pytest.raises(KeyboardInterrupt) as caught:
        Interrupted().place(random_problem(10, seed=0, num_gpus=2))
    assert caught.value.__cause__ is None and caught.value.__context__ is None


FIRST_CALL_CHILD = """
import importlib.abc, os, signal, sys
import tensorflow as tf

SIG = getattr(signal, sys.argv[1])
if SIG != signal.SIGINT:  # a training script's own handler, which exits
    signal.signal(SIG, lambda signum, frame: sys.exit(3))
else:  # Python's own, as in a terminal (a parent that ignores SIGINT passes SIG_IGN on)
    signal.signal(SIG, signal.default_int_handler)


class Interrupt(importlib.abc.MetaPathFinder):
    # A signal in the middle of loading numba, as in a user's first, slow autoplace call.
    def find_spec(self, fullname, path, target=None):
        if fullname == "numba.core.config" and not getattr(self, "done", False):
            self.done = True
            os.kill(os.getpid(), SIG)
        return None


import tf_autoplace
sys.meta_path.insert(0, Interrupt())
try:
    tf_autoplace.autoplace
    print("first: no interrupt")
except (KeyboardInterrupt, SystemExit) as e:
    print("first:", type(e).__name__)
graph = tf.Graph()
with graph.as_default():
    tf.add(tf.constant(1.0), tf.constant(2.0), name="out")
report = tf_autoplace.autoplace(graph, cluster="k80x2", placer="m_etf", progress=False)
print("retry: placed", report.num_ops)
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig, raised", [("SIGINT", "KeyboardInterrupt"),
                                         ("SIGTERM", "SystemExit"), ("SIGALRM", "SystemExit")])
def test_a_signal_while_the_first_call_loads_its_modules_leaves_later_calls_working(
        sig, raised, repo_root):
    # An interrupt during the import of numba would leave half-initialised packages in
    # sys.modules; it is held back until the import is whole, then raised.
    # A SIGTERM handler that exits (SIGALRM's too) broke every later call: only Ctrl-C was
    # held back while the modules loaded.
    done = subprocess.run([sys.executable, "-c", FIRST_CALL_CHILD, sig], cwd=repo_root,
                          text=True, capture_output=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == [f"first: {raised}", "retry: placed 3"]



def test_once_a_command_is_over_its_signals_are_ignored(monkeypatch):
    # Python restores the signals' default action while it shuts down: a Ctrl-C or SIGTERM in
    # TensorFlow's teardown, after a command that succeeded, ended the process by the signal
    # (status -15, no message). Ignored once the command's status is decided (the command is
    # replaced by one that exits at once; this process's handlers are restored afterwards).
    from tf_autoplace.cli import main as cli_main

    def run(name):
        raise SystemExit(1)

    monkeypatch.setattr(cli_main, "_run", run)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # main() sets the command's own argv
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(SystemExit) as exited:
            cli_main.main(["tf-autoplace", "place", "--input=x.pb"])
        got = [signal.getsignal(s) for s in before]
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert exited.value.code == 1 and got == [signal.SIG_IGN, signal.SIG_IGN]


def test_an_interrupt_as_outputs_are_renamed_says_they_were_written(monkeypatch, tmp_path,
                                                                    capsys):
    """Ctrl-C after the commit record, while the outputs are renamed into place: the renames
    are finished (the new set is whole) and the line says so; it said 'nothing was written'
    whatever the writing had reached."""
    from tf_autoplace.cli import main as cli_main
    from tf_autoplace.outputs import files

    out = [str(tmp_path / "g.pb"), str(tmp_path / "r.json")]
    for path in out:
        with open(path, "w") as f:
            f.write("old")
    real_roll_forward, calls = files._roll_forward, []

    def roll_forward(plan):  # the Ctrl-C lands on the first rename, then the renames finish
        calls.append(plan)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real_roll_forward(plan)

    def run(name):
        outputs = files.Outputs()
        for path in out:
            outputs.add_file(path, b"new")
        outputs.commit()
        return 0

    monkeypatch.setattr(files, "_roll_forward", roll_forward)
    monkeypatch.setattr(cli_main, "_run", run)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        status = cli_main.main(["tf-autoplace", "place", "--input=x.pb"])
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert status == 130 and len(calls) == 2
    assert [open(p).read() for p in out] == ["new", "new"]
    line = capsys.readouterr().err.strip()
    assert line == (f"tf-autoplace place: interrupted by Ctrl-C (SIGINT); it came as its outputs "
                    f"were renamed into place, which was finished: {out[0]}, {out[1]} are "
                    "whole and new")


def test_a_signal_whose_handler_raises_waits_for_the_lazy_import_to_finish(tmp_path,
                                                                            monkeypatch):
    # A module that takes a SIGTERM halfway through its import (as numba's did, with a
    # training script's handler that exits): the import finishes, then the handler runs.
    import tf_autoplace

    (tmp_path / "slow_module.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\nWHOLE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_module", raising=False)
    ran = []

    def handler(signum, frame):
        ran.append(signum)
        raise SystemExit(3)

    before = signal.signal(signal.SIGTERM, handler)
    try:
        with pytest.raises(SystemExit):
            tf_autoplace._import_whole("slow_module")
        after = signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert sys.modules["slow_module"].WHOLE and ran == [signal.SIGTERM]
    assert after is handler  # the user's handler is back
