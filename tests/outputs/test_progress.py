"""Search progress: every search reports through one interface; a bar, log lines or TensorBoard
scalars show it; nothing shows when the user asks for quiet."""

import io
import logging
import math

import pytest

import tf_autoplace
from tf_autoplace.errors import ConfigError
from tf_autoplace.heuristics import BestHeuristicPlacer
from tf_autoplace.outputs.progress import (QUIET, CurveRecorder, Progress, SearchProgress,
                                          StatusLine, _Phase, as_progress, best_by)
from tf_autoplace.placers import AutoPlacer, HDPPlacer, PlacetoPlacer, PostPlacer
from tf_autoplace.testing import problems, small_cnn

CPU2 = "testdata/cpu2_independent.pbtxt"


class Recorder(Progress):
    """Keeps every call."""

    def __init__(self):
        self.calls = []

    def start(self, label, total, *, deadline=None):
        self.calls.append(("start", label, total))

    def update(self, done, best_s):
        self.calls.append(("update", done, best_s))

    def finish(self):
        self.calls.append(("finish",))

    def phase_updates(self, label):
        out, inside = [], False
        for call in self.calls:
            if call[0] == "start":
                inside = call[1] == label
            elif call[0] == "update" and inside:
                out.append(call[1:])
        return out


def _problem():
    return problems.random_problem(300, 0, num_gpus=2, max_groups=100)


@pytest.fixture(scope="module")
def recorded_search():
    """auto's search on ``_problem()`` with a Recorder: (placer, problem, recorder)."""
    recorder, problem = Recorder(), _problem()
    placer = AutoPlacer(max_samples=400)
    placer.place(problem, seed=0, progress=recorder)
    return placer, problem, recorder


def test_the_default_placer_reports_its_whole_search(recorded_search):
    placer, _, recorder = recorded_search
    labels = [c[1] for c in recorder.calls if c[0] == "start"]
    assert labels == ["auto: starting placements", "auto: local search"]
    assert ("start", "auto: local search", 400) in recorder.calls
    assert recorder.calls.count(("finish",)) == 2 and recorder.calls[-1] == ("finish",)
    updates = recorder.phase_updates("auto: local search")
    done = [u[0] for u in updates]
    best = [u[1] for u in updates]
    assert len(updates) > 50 and done == sorted(done) and best == sorted(best, reverse=True)
    assert done[-1] == placer.stats["samples"]
    assert best[-1] * 1e3 == pytest.approx(placer.stats["end_ms"])
    assert placer.progress is QUIET  # not kept after the placement


def test_the_default_placer_reports_the_best_heuristics_step_before_its_learned_starts(
        recorded_search):
    # An anytime curve shows what the placer would return if stopped: the best heuristic's
    # placement is there as soon as the heuristics are done, before Post's search.
    _, problem, recorder = recorded_search
    updates = recorder.phase_updates("auto: starting placements")
    first = BestHeuristicPlacer().ranked(problem)[0]
    assert updates[0] == (0, first.step_s) and len(updates) == 2
    assert updates[1][1] <= first.step_s


def test_a_curve_recorder_keeps_the_best_so_far_against_time():
    clock = iter([10.0, 10.5, 11.0, 12.0, 13.0, 14.0])
    curve = CurveRecorder(clock=lambda: next(clock))  # t0 = 10
    curve.start("first", None)          # 0.5 s
    curve.update(1, 0.9)                # 1 s: 0.9
    curve.update(2, 0.95)               # 2 s: still 0.9 (a worse report keeps the best)
    curve.start("second", None)         # 3 s
    curve.update(5, 0.7)                # 4 s: 0.7
    assert curve.points == [(1.0, 0.9), (2.0, 0.9), (4.0, 0.7)]
    assert curve.phases == [("first", 0.5), ("second", 3.0)]
    assert curve.best_at(0.9) == math.inf and curve.best_at(1.0) == 0.9
    assert curve.best_at(3.9) == 0.9 and curve.best_at(100) == 0.7
    assert best_by([], 1.0) == math.inf


def test_the_default_placers_curve_ends_at_its_step_and_never_rises():
    problem = _problem()
    curve = CurveRecorder()
    devices = AutoPlacer(max_samples=200).place(problem, seed=0, progress=curve).devices
    best = [v for _, v in curve.points]
    times = [t for t, _ in curve.points]
    assert len(curve.points) > 10 and best == sorted(best, reverse=True) and times == sorted(times)
    assert best[-1] == pytest.approx(problem.simulator.makespan(devices))


def test_autos_post_start_reports_into_autos_own_phase():
    # auto's Post start reported nothing: its anytime curve stayed at the best heuristic's
    # step until the local search began (on Inception-V3 k80x2 for 2 s, past Post's 651 ms).
    from tf_autoplace.placers.auto.placer import AutoConfig
    from tf_autoplace.placers.post.search import PostConfig

    problem = problems.random_problem(300, 0, num_gpus=2)
    assert problem.graph.colocation.max() + 1 >= 256  # (auto runs learned starts from 256)
    recorder = Recorder()
    config = AutoConfig(max_samples=400, learned=("post",),
                        post=PostConfig(max_samples=64, batch=16, ce_period=32))
    AutoPlacer(config=config).place(problem, seed=0, progress=recorder)
    assert not [c for c in recorder.calls if c[:2] == ("start", "post: search")]
    starts = recorder.phase_updates("auto: starting placements")
    assert [done for done, _ in starts][:5] == [0, 16, 32, 48, 64], starts


@pytest.mark.slow
def test_placeto_reports_its_fine_tuning():
    recorder = Recorder()
    placer = PlacetoPlacer(max_samples=40)
    placer.place(problems.random_problem(60, 1, max_groups=30), seed=0, progress=recorder)
    updates = recorder.phase_updates("placeto: fine-tuning")
    assert ("start", "placeto: fine-tuning", 40) in recorder.calls
    assert updates and updates[-1][0] >= 40
    assert min(b for _, b in updates) * 1e3 <= placer.stats["zero_shot_ms"]


def test_post_reports_its_search():
    recorder = Recorder()
    placer = PostPlacer(max_samples=64, batch=16, ce_period=32, heuristics=("m_etf",))
    placer.place(problems.random_problem(60, 1, max_groups=30), seed=0, progress=recorder)
    assert ("start", "post: search", 64) in recorder.calls
    updates = recorder.phase_updates("post: search")
    assert [u[0] for u in updates] == [16, 32, 48, 64]
    assert updates[-1][1] * 1e3 == pytest.approx(placer.stats["curve"][-1][1] * 1e3)


@pytest.mark.slow
def test_hdp_reports_its_search():
    recorder = Recorder()
    placer = HDPPlacer(max_samples=32, samples_per_update=8, heuristics=("m_etf",),
                       start_steps=20)
    placer.place(problems.random_problem(60, 1, num_gpus=2, max_groups=30), seed=0,
                 progress=recorder)
    # The heuristic start's fit is a phase of its own (its length is not in placements); each
    # of its steps is an update with no placement and no best yet, so a log says it lives.
    fit = recorder.calls.index(("start", "hdp: fitting the placer to the heuristic", None))
    assert recorder.calls[fit + 1:fit + 21] == [("update", 0, math.inf)] * 20
    assert recorder.calls[fit + 21] == ("finish",)
    assert ("start", "hdp: search", 32) in recorder.calls[fit:]
    assert recorder.calls[-1] == ("finish",)
    updates = recorder.phase_updates("hdp: search")
    assert [u[0] for u in updates] == [8, 16, 24, 32]
    assert [u[1] for u in updates] == [best for _, best in placer.stats["curve"]]


def test_log_lines_say_how_far_and_the_best_so_far(caplog):
    progress = SearchProgress("log", delay_s=0, every_s=0)
    placer = AutoPlacer(max_samples=200)
    with caplog.at_level(logging.INFO, logger="tf_autoplace.progress"):
        placer.place(_problem(), seed=0, progress=progress)
    lines = [r.getMessage() for r in caplog.records if "auto: local search" in r.getMessage()]
    assert len(lines) > 20
    assert "/200 placements (" in lines[0] and " ms" in lines[0] and "elapsed" in lines[0]
    assert "left" in lines[1]
    assert lines[-1].startswith(f"autoplace: auto: local search: done, "
                                f"{placer.stats['samples']}/")
    assert f"best {placer.stats['end_ms']:.2f} ms" in lines[-1]


_SCRIPT = """
import sys
import tf_autoplace
from tf_autoplace.outputs.progress import SearchProgress
from tf_autoplace.placers import AutoPlacer
from tf_autoplace.testing import small_cnn

for progress in (False, SearchProgress(delay_s=0, every_s=0)):
    tf_autoplace.autoplace(small_cnn().graph, cluster="%s", placer=AutoPlacer(max_samples=200),
                           progress=progress)
    print("==== placed ====", file=sys.stderr, flush=True)
print("done")
""" % CPU2


@pytest.mark.slow
def test_a_script_whose_stderr_is_a_file_logs_lines_without_absl_app(tmp_path, repo_root):
    """A plain script (no absl.app, no logging set up) with stderr redirected to a file gets
    the log lines there ("auto": stderr is not a terminal); progress=False writes none. One
    process places quietly first (so nothing is set up before it), then with log lines."""
    import os
    import subprocess
    import sys

    err = tmp_path / "stderr.txt"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join(p for p in (repo_root, os.environ.get("PYTHONPATH"))
                                          if p))
    with open(err, "w", encoding="utf-8") as f:
        proc = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=repo_root, env=env,
                              stdout=subprocess.PIPE, stderr=f, text=True, timeout=300)
    text = err.read_text(encoding="utf-8")
    assert proc.returncode == 0 and proc.stdout.strip() == "done", text[-2000:]
    quiet, logged = text.split("==== placed ====\n")[:2]

    def lines(part):
        return [line for line in part.splitlines() if "autoplace: auto: local search" in line]

    assert lines(quiet) == []
    assert len(lines(logged)) > 5 and "/200 placements (" in lines(logged)[0]
    assert "autoplace: auto: local search: done, " in lines(logged)[-1]


def test_a_bar_on_a_stream():
    stream = io.StringIO()
    progress = SearchProgress("bar", delay_s=0, stream=stream)
    AutoPlacer(max_samples=200).place(_problem(), seed=0, progress=progress)
    text = stream.getvalue()
    assert "auto: local search:" in text and "/200 placements" in text and "best " in text
    assert "100%" in text


def test_nothing_shows_before_the_delay_or_when_quiet(caplog, capsys):
    with caplog.at_level(logging.INFO, logger="tf_autoplace.progress"):
        slow = SearchProgress("log", delay_s=3600)
        AutoPlacer(max_samples=100).place(_problem(), seed=0, progress=slow)
        tf_autoplace.autoplace(small_cnn().graph, cluster=CPU2,
                               placer=AutoPlacer(max_samples=100), progress=False)
    assert not [r for r in caplog.records if r.getMessage().startswith("autoplace: auto")]
    assert "placements" not in capsys.readouterr().err


def test_autoplace_passes_progress_to_the_placer():
    recorder = Recorder()
    tf_autoplace.autoplace(small_cnn().graph, cluster=CPU2, placer=AutoPlacer(max_samples=100),
                           progress=recorder)
    assert recorder.phase_updates("auto: local search")


def test_tensorboard_scalars_of_the_search_curve(tmp_path):
    import tensorflow as tf

    progress = SearchProgress("log", delay_s=0, logdir=str(tmp_path))
    placer = AutoPlacer(max_samples=300)
    placer.place(_problem(), seed=0, progress=progress)
    events = [e for f in tmp_path.iterdir() for e in tf.compat.v1.train.summary_iterator(str(f))]
    points = [(e.step, tf.make_ndarray(v.tensor)) for e in events for v in e.summary.value
              if v.tag == "auto_local_search/best_step_time_ms"]
    steps = [s for s, _ in points]
    assert len(points) >= 3 and steps == sorted(steps) and steps[-1] == placer.stats["samples"]
    assert float(points[-1][1]) == pytest.approx(placer.stats["end_ms"], rel=1e-6)


def test_time_left_is_the_rate_so_far_or_the_deadline():
    phase = _Phase(label="x", total=100, deadline=None, start=0.0, bar=None)
    phase.done = 25
    assert phase.left_s(10.0) == pytest.approx(30.0)  # 25 in 10 s: 75 more in 30 s
    phase.deadline = 20.0
    assert phase.left_s(10.0) == pytest.approx(10.0)
    phase.deadline, phase.total = None, None
    assert phase.left_s(10.0) is None


def test_progress_arguments_are_checked():
    assert as_progress(False) is QUIET and as_progress(None) is QUIET
    assert isinstance(as_progress(True), SearchProgress)
    recorder = Recorder()
    assert as_progress(recorder) is recorder
    for bad in (1, "bar"):
        with pytest.raises(ConfigError, match="progress must be"):
            as_progress(bad)
    with pytest.raises(ConfigError, match="mode must be"):
        SearchProgress("tty")
    with pytest.raises(ConfigError, match="delay_s must be"):
        SearchProgress(delay_s=-1)
    with pytest.raises(ConfigError, match="progress must be"):
        tf_autoplace.autoplace(small_cnn().graph, cluster=CPU2, placer="m_etf", progress="yes")


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


def test_a_status_line_rewrites_itself_on_a_terminal_and_writes_lines_to_a_log():
    tty = _Stream(True)
    line = StatusLine("train", stream=tty)
    line.update("epoch 1")
    line.update("epoch 2")
    line.close()
    assert tty.getvalue() == "\r[train] epoch 1\r[train] epoch 2\n"
    log = _Stream(False)
    line = StatusLine("train", stream=log, every_s=3600)
    line.update("epoch 1")
    line.update("epoch 2")  # within every_s of the first: not written yet
    line.close()  # the last state is written when the loop ends
    assert log.getvalue() == "[train] epoch 1\n[train] epoch 2\n"
    with pytest.raises(ConfigError):
        StatusLine("x", every_s=-1)


def test_no_library_module_prints_but_through_the_progress_channel():
    import ast
    import os

    import tf_autoplace

    root = os.path.dirname(tf_autoplace.__file__)
    allowed = {os.path.join("outputs", "progress.py"),  # the channel itself
               # a TensorFlow server process: its stdout is the pipe its parent reads
               # ("ready <pid>" or the error), not output for a user
               os.path.join("hw", "server.py")}
    offenders = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if (not name.endswith(".py") or rel in allowed or rel.startswith("cli" + os.sep)
                    or rel.startswith("proto" + os.sep)):
                continue  # the command-line tools print their output; that is their job
            tree = ast.parse(open(os.path.join(dirpath, name), encoding="utf-8").read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                    offenders.append(f"{rel}:{node.lineno} print")
                if (isinstance(node, ast.Attribute) and node.attr == "write"
                        and isinstance(node.value, ast.Attribute)
                        and node.value.attr in ("stderr", "stdout")):
                    offenders.append(f"{rel}:{node.lineno} sys.{node.value.attr}.write")
    assert not offenders, offenders
