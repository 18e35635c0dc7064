"""Which open v1 Sessions have run a graph: TensorFlow fixes a graph's devices there.

A v1 ``Session`` hands its graph to the runtime in ``BaseSession._extend_graph``, which every
``run``, ``make_callable`` and ``partial_run_setup`` calls first; the runtime copies each op,
device included, the first time it sees it. A device set on that op later never reaches that
session: TensorFlow's C API notes the change and, at the session's next run, logs a warning
that it has no effect (hidden at the usual log levels), and the op keeps running where it ran.
Placing such a graph would report devices the session does not use.

TensorFlow has no public way to ask whether a session has run a graph (the record is inside the
C session). So this module, imported with ``tf_autoplace``, wraps ``BaseSession.__init__`` and
``_extend_graph`` and keeps, per graph, the sessions that ran it (weakly: a session that is
deleted drops out, and one that is closed no longer counts, since it cannot run again).
:func:`check_not_run` raises a ConfigError for a graph that an open session has run, and
:func:`apply_unless_run` writes a placement only if none has, checked and written under one
lock (a run in another thread during the search is seen).

What it cannot see: a session created before this module was imported may have run the graph
before; :func:`unseen_sessions` lists the open sessions on a graph whose creation was not
seen, and the placement's report says so. A user can check a session directly: run one step
with ``options=tf.compat.v1.RunOptions(output_partition_graphs=True)`` and a ``RunMetadata``,
and read the devices of the nodes in ``run_metadata.partition_graphs``.
"""

from __future__ import annotations

import functools
import gc
import threading
import weakref
from typing import Callable

from tensorflow.python.client import session as tf_session  # private: the v1 Session class

from tf_autoplace.errors import ConfigError

_MARK = "_tf_autoplace_records_runs"
_lock = threading.Lock()
_ran: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # tf.Graph -> WeakSet
_created: "weakref.WeakSet" = weakref.WeakSet()  # sessions created since install()
_before: "weakref.WeakSet | None" = None  # sessions created before it (found on first need)


def _open(session) -> bool:
    return not getattr(session, "_closed", False)


def install() -> None:
    """Start recording session runs (done once, when the module is imported; again is a
    no-op). The flags' placement hook, which also wraps ``_extend_graph``, imports this module
    before it wraps, so a run is recorded after the hook placed the graph."""
    cls = tf_session.BaseSession
    with _lock:
        if getattr(cls._extend_graph, _MARK, False):
            return
        extend, init = cls._extend_graph, cls.__init__

        @functools.wraps(extend)
        def extend_graph(self, *args, **kwargs):
            # Recorded before the runtime copies the graph, under the lock that
            # :func:`apply_unless_run` holds: a run in another thread either is seen by the
            # check there or copies the graph after the placement was written.
            with _lock:
                runs = _ran.setdefault(self.graph, weakref.WeakSet())
                seen = self in runs
                runs.add(self)
            try:
                return extend(self, *args, **kwargs)
            except BaseException:
                if not seen:  # the runtime took nothing
                    with _lock:
                        runs.discard(self)
                raise

        @functools.wraps(init)
        def session_init(self, *args, **kwargs):
            init(self, *args, **kwargs)
            with _lock:
                _created.add(self)

        setattr(extend_graph, _MARK, True)
        cls._extend_graph, cls.__init__ = extend_graph, session_init


def sessions_that_ran(graph) -> list:
    """The open sessions that have run ``graph`` since this module was imported."""
    with _lock:
        return [s for s in _ran.get(graph, ()) if _open(s)]


def unseen_sessions(graph) -> list:
    """The open sessions on ``graph`` that were created before this module was imported:
    whether they ran it cannot be known."""
    return [s for s in _sessions_before_install() if s.graph is graph and _open(s)]


def _sessions_before_install() -> list:
    """The sessions alive that were created before :func:`install`, found once per process.

    Every session created since is in ``_created``, so the ones before can only be those
    alive at the first call that are not: one search of the heap, kept weakly, instead of one
    per placement (a search costs tens of ms in a process that has imported TensorFlow and
    Keras). The search asks the garbage collector which objects refer to a session class: an
    instance refers to its class."""
    global _before
    with _lock:
        if _before is None:
            classes, stack = set(), [tf_session.BaseSession]
            while stack:
                cls = stack.pop()
                if cls not in classes:
                    classes.add(cls)
                    stack.extend(cls.__subclasses__())
            _before = weakref.WeakSet(
                s for s in gc.get_referrers(*classes)
                if isinstance(s, tf_session.BaseSession) and s not in _created)
        return list(_before)


def check_not_run(graph) -> None:
    """Raise ConfigError if an open session has run ``graph``: its devices are fixed there."""
    _refuse_if_run(sessions_that_ran(graph))


def apply_unless_run(graph, apply: Callable[[], None]) -> None:
    """Call ``apply()`` (which writes a placement into ``graph``) unless an open session has
    run ``graph``, in which case raise ConfigError and call nothing.

    A placement is checked again here, just before it is written, because a session in
    another thread may have run the graph while the search ran; the check and the write hold
    the lock the runs are recorded under, so no run can slip between them."""
    with _lock:
        _refuse_if_run([s for s in _ran.get(graph, ()) if _open(s)])
        apply()


def _refuse_if_run(ran: list) -> None:
    if ran:
        raise ConfigError(
            f"this tf.Graph has already been run by {len(ran)} open tf.compat.v1.Session"
            f"{'s' if len(ran) > 1 else ''}: TensorFlow fixed its ops' devices at that "
            "session's first run and would not take this placement (the ops would keep "
            "running where they run now). Place the graph before the first session.run (a "
            "training binary can use --autoplace, which places it at that moment), or close "
            "the session (sess.close()) and create a new one after placing")


install()
