"""The errors a run of workers reports (raised by ``execute``, ``barrier.run`` and friends),
and the checks that refuse a bad argument before anything starts.
"""
from __future__ import annotations

import os
import re
import reprlib

__all__ = ["WorkerError", "PeerLostError", "ExchangeSchemaError"]


class WorkerError(RuntimeError):
    """A worker failed: carries its ``index`` and the ``traceback`` text.

    ``str()`` names the original exception type and message; the worker's traceback (its
    frames inside sparktimely cut short: :func:`user_traceback`) is a note, which Python
    prints after the message, so an uncaught failure shows the line of the program's own code
    that raised it.

    >>> import sparktimely as st
    >>> try:
    ...     st.execute(lambda worker: 1 // worker.index, workers=2)
    ... except st.WorkerError as error:
    ...     print(error.index, error)
    0 worker 0 failed: ZeroDivisionError: integer division or modulo by zero
    """

    def __init__(self, index: int, message: str, traceback: str = "") -> None:
        super().__init__(f"worker {index} failed: {message}")
        self.index = index
        self.message = message
        self.traceback = traceback
        if traceback:
            self.add_note(f"worker {index}'s traceback:\n{user_traceback(traceback)}")

    def __reduce__(self):
        return (type(self), (self.index, self.message, self.traceback))


class PeerLostError(WorkerError):
    """A worker or a process of the job was lost (it died, or its connection dropped): a
    :class:`WorkerError` told as what happened, not as ``worker N failed``. The message
    names what was lost and where, who noticed, and how (``index``: the lost worker, or
    the first of a lost process's).

    >>> error = PeerLostError(2, "lost process 1 at 10.0.0.2:2101 (workers 2..3), noticed by "
    ...                          "process 0: it died")
    >>> print(error)
    lost process 1 at 10.0.0.2:2101 (workers 2..3), noticed by process 0: it died
    >>> isinstance(error, WorkerError), error.index
    (True, 2)
    """

    def __init__(self, index: int, message: str, traceback: str = "") -> None:
        super().__init__(index, message, traceback)
        self.args = (message,)


class ExchangeSchemaError(ValueError):
    """An exchange received Arrow batches of two schemas (from two workers, or one worker at
    two times). Raised by the exchange where it notices, and told as itself: not as the
    failure of whichever operator was running when the batch arrived.

    >>> import pyarrow as pa, sparktimely as st
    >>> def job(worker):                  # worker 1's column n holds strings, worker 0's ints
    ...     n = pa.array(["x"]) if worker.index else pa.array([1])
    ...     batch = pa.record_batch({"key": [7], "n": n})
    ...     worker.dataflow(lambda scope: scope.to_stream([batch]).exchange(key="key").probe())
    >>> try:
    ...     st.execute(job, workers=2)
    ... except st.WorkerError as error:
    ...     print(str(error).split(": ")[1])
    ExchangeSchemaError
    """


_shortening = reprlib.Repr()
_shortening.maxstring = _shortening.maxother = 80


def short_repr(value: object) -> str:
    """The repr of a record, value or element in an error message, cut short if long.

    >>> len(short_repr("x" * 100)), short_repr("x" * 100)[36:45]
    (80, 'xx...xxxx')
    >>> short_repr(list(range(100)))
    '[0, 1, 2, 3, 4, 5, ...]'
    """
    return _shortening.repr(value)


def message_of(error: BaseException) -> object:
    """What ``error`` says (a KeyError's key without the quotes its ``str`` adds).

    >>> message_of(KeyError("k")), message_of(IndexError("out of range"))
    ('k', IndexError('out of range'))
    """
    return error.args[0] if isinstance(error, KeyError) and error.args else error


_REWORDABLE = (Exception, TypeError, ValueError, KeyError, IndexError, LookupError,
               AttributeError, NameError, ZeroDivisionError, OverflowError, ArithmeticError,
               AssertionError, RuntimeError, NotImplementedError)
"""The exception types whose instances take one message (a subclass may not)."""


def reworded(error: Exception, place: str) -> Exception | None:
    """``error`` (what a user's function raised) again, of its own type, saying ``place``
    first (the operator, the function and the record); None unless its type is exactly one
    of :data:`_REWORDABLE`.

    >>> reworded(IndexError("tuple index out of range"), "exchange: route(('a',)) raised")
    IndexError("exchange: route(('a',)) raised: tuple index out of range")
    >>> reworded(UnicodeDecodeError("utf-8", b"", 0, 1, "bad"), "here") is None
    True
    """
    if type(error) not in _REWORDABLE:
        return None
    return type(error)(f"{place}: {message_of(error)}")


def require_function(place: str, value: object, what: str = "expected a function") -> None:
    """A TypeError naming ``place`` (an operator, a call) unless ``value`` can be called:
    told where the dataflow is built or the run starts, not by the first record that
    reaches it.

    >>> require_function("map", 5)
    Traceback (most recent call last):
    ...
    TypeError: map: expected a function, got 5 (int)
    """
    if not callable(value):
        raise TypeError(f"{place}: {what}, got {short_repr(value)} ({type(value).__name__})")


def require_type(place: str, value: object, kind: type | tuple[type, ...], what: str) -> None:
    """A TypeError naming ``place`` and ``what`` it expected unless ``value`` is a ``kind``.

    >>> require_type("probe_with", 5, dict, "a st.ProbeHandle")
    Traceback (most recent call last):
    ...
    TypeError: probe_with: expected a st.ProbeHandle, got 5 (int)
    """
    if not isinstance(value, kind):
        raise TypeError(f"{place}: expected {what}, got {short_repr(value)} "
                        f"({type(value).__name__})")


def require_positive_int(value: object, name: str) -> None:
    """A ValueError naming ``name`` unless ``value`` is an int of at least 1 (a bool is not a
    count).

    >>> require_positive_int(True, "workers")
    Traceback (most recent call last):
    ...
    ValueError: workers must be a positive integer, got True
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def empty_path_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` names no directory if it is empty, else None: the one check of a directory
    argument that needs no file system (the directory may be on other hosts).

    >>> empty_path_problem(""), empty_path_problem("logs")
    ('an empty path names no directory', None)
    """
    return None if os.fspath(path) else "an empty path names no directory"


def describe(error: BaseException) -> str:
    """``Type: message`` of ``error``, as failures are told, also when its ``str()`` fails.

    >>> describe(KeyError("x")), describe(SystemExit("no config")), describe(KeyboardInterrupt())
    ("KeyError: 'x'", 'SystemExit: no config', 'KeyboardInterrupt')
    >>> class Odd(Exception):
    ...     def __str__(self):
    ...         raise RuntimeError
    >>> describe(Odd())
    'Odd: <exception str() failed>'
    """
    try:
        text = str(error)
    except Exception:
        text = "<exception str() failed>"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def unsendable_result(index: int, error: BaseException) -> str:
    """Why worker ``index``'s result did not reach the caller (``error``: what pickling it
    raised).

    >>> print(unsendable_result(1, TypeError("cannot pickle 'generator' object")).split(" (")[0])
    the result of worker 1 cannot be sent back: TypeError: cannot pickle 'generator' object
    """
    return (f"the result of worker {index} cannot be sent back: {describe(error)} (results "
            f"leave the worker's process pickled: return plain values, not the Worker, its "
            f"dataflows or streams, nor functions that use them)")


_FRAME = re.compile(r'  File "([^"]*)", line \d+,? in ')
"""A frame of a traceback, or of a stack faulthandler dumps (a stalled worker's: no comma)."""


def user_traceback(text: str) -> str:
    """A worker's traceback with the frames inside sparktimely (its package, the zip it
    travels to executors in, or its compiled modules, which name their sources from the
    build's root) cut to one line per run of them, and without the events a worker's log adds
    as a note (they are in ``--log-dir``'s files). A stalled worker's stack, as faulthandler
    dumps it, is cut the same way, and so are the frames of ``multiprocess`` it shows (the
    parent's, that forked the worker).

    >>> print(user_traceback('''Traceback (most recent call last):
    ...   File "/tmp/userFiles/sparktimely-0e9.zip/sparktimely/dataflow/worker.py", line 9, in step
    ...     op.schedule()
    ...   File "sparktimely/dataflow/builder.py", line 164, in sparktimely.dataflow.builder.run
    ...   File "/home/me/job.py", line 3, in <lambda>
    ...     1 / 0
    ... ZeroDivisionError: division by zero
    ... sparktimely.logging: the last 2 of the 2 events worker 0 logged:
    ...      1.0 ms  w0  start Map'''))
    Traceback (most recent call last):
      ... (2 frames inside sparktimely)
      File "/home/me/job.py", line 3, in <lambda>
        1 / 0
    ZeroDivisionError: division by zero
    """
    package = os.path.dirname(os.path.abspath(__file__))
    lines = text.splitlines()
    cut = next((i for i, line in enumerate(lines)
                if line.startswith("sparktimely.logging: the last ")), len(lines))
    kept: list[str] = []
    hidden = 0
    index = 0
    while index < cut:
        line = lines[index]
        frame = _FRAME.match(line)
        if frame is None:
            if hidden:
                kept.append(f"  ... ({hidden} frame{'s' if hidden > 1 else ''} inside "
                            f"sparktimely)")
                hidden = 0
            kept.append(line)
            index += 1
            continue
        end = index + 1                          # the frame's source lines follow it
        while end < cut and lines[end].startswith("    "):
            end += 1
        path = frame[1]
        if (path.startswith((package + os.sep, "sparktimely" + os.sep))
                or re.search(r"sparktimely[^/]*\.zip/|/multiprocess/", path)):
            hidden += 1
        else:
            if hidden:
                kept.append(f"  ... ({hidden} frame{'s' if hidden > 1 else ''} inside "
                            f"sparktimely)")
                hidden = 0
            kept.extend(lines[index:end])
        index = end
    return "\n".join(kept)
