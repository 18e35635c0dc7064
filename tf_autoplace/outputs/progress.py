"""Progress of a placement search: a bar on a terminal, log lines elsewhere, nothing when quiet.

The default placer searches for up to a couple of minutes on a large graph, and a training
binary with ``--autoplace`` waits for it before its first step. Every search reports through
one small interface, :class:`Progress`, which a placer finds in ``self.progress`` (set by
``Placer.place``)::

    with self.progress.phase("auto: local search", total=4000, deadline=deadline):
        ...
        self.progress.update(samples_done, best_step_time_s)

The base class is silent (:data:`QUIET`, what ``progress=False`` gives). :class:`SearchProgress`
shows a phase that lasts longer than ``delay_s`` (2 s: a quick search stays silent):

- ``"bar"``: a tqdm bar on stderr with the placements simulated of the budget, the best step
  time so far, the elapsed time and the time left;
- ``"log"``: an INFO line every ``every_s`` seconds with the same figures, and one when the
  phase ends (for output that is not a terminal: scripts whose stderr goes to a file, ``nohup``,
  CI, notebooks, training binaries), through the Python logger ``tf_autoplace.progress``
  (:data:`LOGGER`). It shows without any logging set up: the logger's level is INFO unless the
  program set one, and when no handler would take its records (a script that configured no
  logging) a line goes to stderr as ``HH:MM:SS autoplace: ...``. Where handlers exist (absl's
  under ``absl.app``, ``logging.basicConfig``, a notebook's), the lines go to them. A program
  hides them with ``logging.getLogger("tf_autoplace.progress").setLevel(logging.WARNING)``, a
  caller with ``progress=False``;
- ``"auto"`` (the default): the bar when stderr is a terminal, log lines otherwise.

The time left is what the remaining placements take at the rate so far, or the time to the
search's deadline when that comes first. With ``logdir``, each phase's best step time against
placements simulated is also written as TensorBoard scalars (``<phase>/best_step_time_ms``)
when the phase ends (needs the ``tensorboard`` package, the ``train`` extra).

An update costs a clock read and a comparison (tqdm redraws at most ten times a second), so a
search can report after every batch of simulations.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import sys
import time

import tqdm

from tf_autoplace.errors import ConfigError

MODES = ("auto", "bar", "log")
_POSTFIX_EVERY_S = 0.1  # how often the bar's text (best, time left) is recomputed
LOGGER = logging.getLogger("tf_autoplace.progress")
if LOGGER.level == logging.NOTSET:  # shown by default; a program may set another level
    LOGGER.setLevel(logging.INFO)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes (as logging's last resort
    does, which shows warnings only)."""

    def __init__(self):
        logging.Handler.__init__(self)
        self.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))

    @property
    def stream(self):
        return sys.stderr


_STDERR = _StderrHandler()


def log_line(message: str) -> None:
    """Log ``message`` at INFO on :data:`LOGGER`; when no handler would take it (nothing
    configured logging), write it to stderr instead of dropping it."""
    if not LOGGER.isEnabledFor(logging.INFO):
        return
    if LOGGER.hasHandlers():
        LOGGER.info(message)
    else:
        _STDERR.handle(LOGGER.makeRecord(LOGGER.name, logging.INFO, __file__, 0, message,
                                         None, None))


class Progress:
    """The interface every search reports through, and the quiet reporter (module docstring).

    A phase is ``start``, any number of ``update``, then ``finish`` (or ``abort`` when it stops
    early); :meth:`phase` wraps them."""

    def start(self, label: str, total: int | None, *, deadline: float | None = None) -> None:
        """A phase ``label`` begins that will simulate ``total`` placements (None: unknown)
        and ends at the latest at ``deadline`` (a ``time.perf_counter()`` value, or None)."""

    def update(self, done: int, best_s: float) -> None:
        """``done`` placements simulated so far in this phase; the best has step time (or
        memory-penalised runtime) ``best_s`` seconds."""

    def finish(self) -> None:
        """The phase ended."""

    def abort(self) -> None:
        """The phase stopped early (an error, an interrupt): nothing more is said of it.
        By default the same as :meth:`finish`."""
        self.finish()

    @contextlib.contextmanager
    def phase(self, label: str, total: int | None, *, deadline: float | None = None):
        self.start(label, total, deadline=deadline)
        try:
            yield self
        except BaseException:
            self.abort()
            raise
        self.finish()


QUIET = Progress()


def as_progress(value) -> Progress:
    """A Progress from what ``autoplace(progress=...)`` takes: True (a :class:`SearchProgress`
    in ``"auto"`` mode), False or None (:data:`QUIET`), or a Progress."""
    if isinstance(value, Progress):
        return value
    if value is True:
        return SearchProgress()
    if value is False or value is None:
        return QUIET
    raise ConfigError(f"progress must be True, False or a tf_autoplace.outputs.progress.Progress, got "
                      f"{value!r}")


class SearchProgress(Progress):
    """Shows search phases (module docstring).

    Args:
      mode: "auto", "bar" or "log".
      logdir: also write each phase's curve as TensorBoard scalars here (None: no).
      delay_s: a phase shows nothing before this many seconds (>= 0).
      every_s: seconds between log lines (>= 0).
      stream: where the bar goes, and what "auto" asks whether it is a terminal (default
        ``sys.stderr`` at the time of each phase).
    """

    def __init__(self, mode: str = "auto", *, logdir: str | None = None, delay_s: float = 2.0,
                 every_s: float = 10.0, stream=None):
        if mode not in MODES:
            raise ConfigError(f"mode must be one of {MODES}, got {mode!r}")
        for name, value in (("delay_s", delay_s), ("every_s", every_s)):
            if not (isinstance(value, (int, float)) and value >= 0):
                raise ConfigError(f"{name} must be a number >= 0, got {value!r}")
        if logdir is not None:
            _check_logdir(logdir)
            try:
                import tensorboard  # noqa: F401  (tf.summary needs it; TF no longer installs it)
            except ImportError:
                raise ConfigError("TensorBoard scalars of the search need the tensorboard "
                                  "package: pip install 'tf_autoplace[train]'") from None
        self.mode, self.logdir = mode, logdir
        self.delay_s, self.every_s, self.stream = delay_s, every_s, stream
        self._phase = None

    def start(self, label: str, total: int | None, *, deadline: float | None = None) -> None:
        stream = self.stream or sys.stderr
        mode = self.mode
        if mode == "auto":
            mode = "bar" if getattr(stream, "isatty", lambda: False)() else "log"
        now = time.perf_counter()
        bar = None
        if mode == "bar":
            form = ("{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} placements "
                    "[{elapsed}{postfix}]") if total else "{desc}: {n_fmt} placements " \
                "[{elapsed}{postfix}]"
            bar = tqdm.tqdm(total=total, desc=label, file=stream, delay=self.delay_s,
                            bar_format=form, dynamic_ncols=True, leave=True)
        self._phase = _Phase(label=label, total=total, deadline=deadline, start=now, bar=bar)

    def update(self, done: int, best_s: float) -> None:
        p = self._phase
        if p is None:
            return
        if best_s < p.best:
            p.best = best_s
            p.curve.append((int(done), float(best_s)))
        p.done = int(done)
        if p.total and p.done > p.total:  # a search may end its last step past its budget
            p.total = p.done
            if p.bar is not None:
                p.bar.total = p.done
        now = time.perf_counter()
        if p.bar is not None:
            p.bar.update(p.done - p.bar.n)
            if now - p.postfix_at >= _POSTFIX_EVERY_S:
                p.postfix_at = now
                p.bar.set_postfix_str(p.figures(now), refresh=False)
        elif now - p.start >= self.delay_s and (p.logged_at is None
                                                 or now - p.logged_at >= self.every_s):
            p.logged_at = now
            log_line(f"autoplace: {p.label}: {p.line(now)}")

    def finish(self) -> None:
        p, self._phase = self._phase, None
        if p is None:
            return
        now = time.perf_counter()
        if p.bar is not None:
            p.bar.set_postfix_str(p.figures(now, final=True), refresh=False)
            p.bar.close()
        elif p.logged_at is not None or now - p.start >= self.delay_s:
            log_line(f"autoplace: {p.label}: done, {p.line(now, final=True)}")
        if self.logdir and p.curve:
            _write_scalars(self.logdir, p.label, p.curve + [(p.done, p.best)])

    def abort(self) -> None:
        p, self._phase = self._phase, None
        if p is not None and p.bar is not None:
            p.bar.close()  # the bar stays as it was drawn; no "done" line


class CurveRecorder(Progress):
    """Records a search's best step time so far against wall time, over all its phases: the
    anytime curve of a placer (how good a placement it would return if stopped at each moment).

    Time counts from construction (or :meth:`restart`); each :meth:`update` adds a point whose
    value is the best reported so far in any phase (a phase may report a worse best than the
    one before it, e.g. a search that starts over). The values are what the search reports, its
    step time or memory-penalised runtime; a caller adds the returned placement's own figure
    with :meth:`record` when the placer returns.

    Attributes:
      points: ``[(seconds, best_s)]`` in time order, ``best_s`` non-increasing.
      phases: ``[(label, seconds)]`` when each phase started.
    """

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self.restart()

    def restart(self) -> None:
        """Forget every point; time counts from now."""
        self._t0 = self._clock()
        self.points: list[tuple[float, float]] = []
        self.phases: list[tuple[str, float]] = []

    def start(self, label: str, total: int | None, *, deadline: float | None = None) -> None:
        self.phases.append((label, self._clock() - self._t0))

    def update(self, done: int, best_s: float) -> None:
        self.record(best_s)

    def record(self, best_s: float) -> None:
        """A point now: the better of ``best_s`` and the best so far."""
        best = float(best_s)
        if self.points:
            best = min(best, self.points[-1][1])
        self.points.append((self._clock() - self._t0, best))

    def best_at(self, seconds: float) -> float:
        """The best step time reported by ``seconds`` after the start (``inf``: none yet)."""
        return best_by(self.points, seconds)


def best_by(points, seconds: float) -> float:
    """The value of the last of ``points`` (``[(seconds, best)]`` in time order, as
    :attr:`CurveRecorder.points`) at or before ``seconds``; ``inf`` when there is none."""
    best = math.inf
    for at, value in points:
        if at > seconds:
            break
        best = value
    return best


class _Phase:
    """What :class:`SearchProgress` knows of the phase under way."""

    def __init__(self, *, label, total, deadline, start, bar):
        self.label, self.total, self.deadline, self.start, self.bar = (label, total, deadline,
                                                                       start, bar)
        self.done, self.best, self.curve = 0, math.inf, []
        self.logged_at, self.postfix_at = None, -math.inf

    def left_s(self, now: float) -> float | None:
        """Seconds left: at the rate so far, or to the deadline if that is sooner."""
        left = []
        if self.total and self.done > 0:
            left.append((now - self.start) * max(self.total - self.done, 0) / self.done)
        if self.deadline is not None:
            left.append(max(self.deadline - now, 0.0))
        return min(left) if left else None

    def figures(self, now: float, final: bool = False) -> str:
        parts = [f"best {self.best * 1e3:.2f} ms" if math.isfinite(self.best) else "no best yet"]
        left = None if final else self.left_s(now)
        if left is not None:
            parts.append(f"~{_clock(left)} left")
        return ", ".join(parts)

    def line(self, now: float, final: bool = False) -> str:
        done = (f"{self.done}/{self.total} placements ({100 * self.done / self.total:.0f}%)"
                if self.total else f"{self.done} placements")
        return f"{done}, {self.figures(now, final)}, {_clock(now - self.start)} elapsed"


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def _check_logdir(logdir) -> None:
    """ConfigError unless TensorBoard scalars can go to ``logdir``: a directory that exists
    and can be written, or one that can be made there (TensorFlow makes it, and its parents,
    when it writes; a file in the way ended the search with TensorFlow's traceback)."""
    if not isinstance(logdir, (str, os.PathLike)) or not os.fspath(logdir):
        raise ConfigError(f"--progress_logdir must be a non-empty path, got {logdir!r}")
    given = os.fspath(logdir)
    path = full = os.path.abspath(given)
    while not os.path.isdir(path):
        if os.path.lexists(path):
            raise ConfigError(f"--progress_logdir {given!r} is a file, not a directory"
                              if path == full else f"--progress_logdir {given!r}: {path!r} is "
                              "a file, not a directory")
        path = os.path.dirname(path)
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"--progress_logdir {given!r}: the directory {path!r} is not "
                          "writable")


def _write_scalars(logdir: str, label: str, curve) -> None:
    """``curve`` [(placements, best s)] as TensorBoard scalars ``<label>/best_step_time_ms``,
    written eagerly in a graph of its own whatever mode the caller's TensorFlow is in."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    tag = re.sub(r"[^A-Za-z0-9_./-]+", "_", label).strip("_") + "/best_step_time_ms"
    with tf.Graph().as_default(), context.eager_mode():
        writer = tf.summary.create_file_writer(logdir)
        with writer.as_default():
            for step, best in curve:
                tf.summary.scalar(tag, best * 1e3, step=step)
        writer.close()


class StatusLine:
    """The progress of a training loop (an epoch, its loss, seconds so far): one line that the
    loop rewrites in place on a terminal, and that is written as a line of its own every
    ``every_s`` seconds, and when the loop ends, to a stream that is not a terminal (a log
    file). Pretraining tools and the research scripts report through it, so that nothing in
    the library prints progress of its own::

        line = StatusLine("imitation")
        for epoch in range(epochs):
            ...
            line.update(f"epoch {epoch + 1}/{epochs} loss {loss:.4f}")
        line.close()

    Args:
      label: what runs, shown in brackets before each line.
      stream: where the line goes (default ``sys.stderr`` at each update).
      every_s: seconds between written lines when the stream is not a terminal (>= 0).
    """

    def __init__(self, label: str, *, stream=None, every_s: float = 10.0):
        if not (isinstance(every_s, (int, float)) and every_s >= 0):
            raise ConfigError(f"every_s must be a number >= 0, got {every_s!r}")
        self.label, self.stream, self.every_s = label, stream, every_s
        self._last_text, self._written_at, self._open = "", None, False

    def _target(self):
        return self.stream or sys.stderr

    def update(self, text: str) -> None:
        """The loop's state is now ``text``."""
        stream, self._last_text = self._target(), text
        if getattr(stream, "isatty", lambda: False)():
            stream.write(f"\r[{self.label}] {text}")
            stream.flush()
            self._open = True
            return
        now = time.perf_counter()
        if self._written_at is None or now - self._written_at >= self.every_s:
            self._written_at = now
            stream.write(f"[{self.label}] {text}\n")
            stream.flush()

    def close(self) -> None:
        """The loop ended: end the line in place, or write the last state if not yet written."""
        stream = self._target()
        if self._open:
            stream.write("\n")
        elif self._last_text:
            stream.write(f"[{self.label}] {self._last_text}\n")
        stream.flush()
        self._open, self._last_text = False, ""


def note(label: str, message: str, *, stream=None) -> None:
    """One line of a tool's progress (``[label] message``) to ``stream`` (default stderr): a
    model built, a graph of a corpus cached, a stage started."""
    stream = stream or sys.stderr
    stream.write(f"[{label}] {message}\n")
    stream.flush()
