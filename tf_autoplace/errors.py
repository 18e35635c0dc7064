"""One exception hierarchy for every public door of tf_autoplace.

Everything we raise on purpose derives from :class:`AutoplaceError`, so a caller can catch one
type. Each subclass names the kind of problem; each message names the offending value.
An interrupt stays what it is, a KeyboardInterrupt (:class:`Terminated` for SIGTERM in the
``tf-autoplace`` command), whatever code it arrives in (:func:`interrupt_in`).
"""


# Control characters but newline and tab (C0, DEL, C1): a message may quote bytes of a damaged
# input (a parser's "got ^[" of a file that is not a graph), which a terminal would obey.
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x09), *range(0x0b, 0x20), *range(0x7f, 0xa0))}


class AutoplaceError(Exception):
    """Base class of every error tf_autoplace raises on purpose. Its text has control
    characters escaped (``\\x1b``): a message that quotes a damaged input (a parser's error
    on a file that is not a graph) must not clear or recolour the terminal it is shown on."""

    # Exception's own constructor, named here: AutoGraph re-raises an error that leaves a
    # tf.function's trace as its own type only when that type's __init__ is Exception's (a
    # ConfigError would inherit ValueError's), and as a StagingError otherwise.
    __init__ = Exception.__init__

    def __str__(self) -> str:
        return super().__str__().translate(_CONTROL)


class InvalidGraphError(AutoplaceError, ValueError):
    """The graph cannot be read or is not a graph we can place (corrupt bytes, unknown op type,
    a cycle that is not a while loop, ...)."""


class ClusterSpecError(AutoplaceError, ValueError):
    """The cluster description is malformed: no devices, duplicate names, bad numbers."""


class InfeasiblePlacementError(AutoplaceError):
    """No valid placement exists or the one given breaks a constraint (colocation, kernels,
    memory)."""


class ConfigError(AutoplaceError, ValueError):
    """An option passed to a public function is out of range or unknown."""


class InputValueError(ConfigError):
    """A graph input (a placeholder) whose value measuring needs and cannot make up (no static
    shape, a dtype with no made-up value): give its value or a static shape. A ConfigError,
    told apart so that a door that measures by default can fall back instead (``flags``)."""


class WorkerError(AutoplaceError, RuntimeError):
    """The processes work runs on could not be started: the workers of a search (a Ray
    cluster without room for them, actors that never came up) or the servers of a local
    TensorFlow cluster."""


class MeasurementError(AutoplaceError, RuntimeError):
    """TensorFlow could not run a graph this machine was asked to time (a placement its runtime
    rejects, memory exhausted, ...); the message carries TensorFlow's."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised by the ``tf-autoplace`` command's signal handler so that it unwinds the
    program as Ctrl-C's KeyboardInterrupt does (outputs not yet written are not written)."""


def shown(value, limit: int = 100) -> str:
    """``repr(value)`` for an error message, cut to about ``limit`` characters with the value's
    type named when it is longer: a message names the offending value, and a proto or a
    graph passed where a path goes must not make it tens of thousands of characters long."""
    text = repr(value)
    if len(text) <= limit and "\n" not in text:
        return text
    kind = type(value)
    excerpt = " ".join(text[:limit].split())  # one line: a proto's text spans many
    return f"a {kind.__module__}.{kind.__qualname__} ({excerpt}...)"


def interrupt_in(error: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (or :class:`Terminated`) that ``error`` stands for: ``error``
    itself, or one in the chain of exceptions it was raised from or while handling, else None.

    numba's compiled code reports an interrupt that arrives while it calls back into Python
    (its cached functions unpickle their constants so) as a ``SystemError: <function
    _numba_unpickle ...> returned a result with an exception set`` whose context is the
    KeyboardInterrupt."""
    return caused_by(error, KeyboardInterrupt)


def caused_by(error: BaseException, kind: type) -> BaseException | None:
    """``error`` if it is a ``kind``, else the first ``kind`` in the chain of exceptions it was
    raised from or while handling, else None."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
