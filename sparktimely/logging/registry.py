"""Where a worker's logs go: ``worker.log_register()`` and the loggers behind its names.

A :class:`Registry` binds log names to callbacks, as timely's ``logging_core::Registry``.
``insert(name, callback)`` makes the worker call ``callback(time, events)`` with the events
logged under ``name`` since the last call, once per step (and at once when it fails), where
``time`` (nanoseconds, like the events' own ``time``) bounds the times of events still to
come. Two names are built in: ``"timely"`` (:mod:`sparktimely.logging.events`: operators,
channels, scheduling, messages, shutdown, parking) and ``"timely/progress"``; other names
are the program's own logs (:meth:`Registry.get`). A new ``"timely"`` callback first gets
the operators and channels of the dataflows built so far.

A :class:`BatchLogger` callback turns a log into the events of a captured stream
(``("messages", time, batch)``, ``("progress", changes)``), so that ``replay_into`` makes
it a sparktimely stream that a dataflow can process (:func:`log_stream`).
"""
from __future__ import annotations

import time as _time
import weakref
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from ..errors import describe
from ..ops.capture import EventLink
from ._hooks import WorkerHooks

if TYPE_CHECKING:
    from ..dataflow.scope import ScopeCore
    from ..dataflow.stream import StreamCore
    from ..dataflow.worker import WorkerCore

S = TypeVar("S", bound="StreamCore")
Callback = Callable[[int, list], Any]


class Logger:
    """One named log: what is logged waits in ``buffer`` until the registry's next flush
    hands it to each of ``callbacks`` as ``callback(time, batch)``.

    >>> import sparktimely as st
    >>> def job(worker):
    ...     seen = []
    ...     registry = worker.log_register()
    ...     registry.insert("app", lambda time, batch: seen.extend(batch))
    ...     registry.get("app").log("loaded")
    ...     registry.flush()
    ...     return [(w, event) for _, w, event in seen]
    >>> st.execute_directly(job)
    [(0, 'loaded')]
    """

    __slots__ = ("name", "callbacks", "kept", "buffer", "_registry")

    def __init__(self, name: str, callback: Callback, registry: "Registry") -> None:
        self.name = name
        self.callbacks = [callback]
        self.kept: list[Callback] = []          # those insert and remove leave in place
        self.buffer: list = []
        self._registry = registry

    def is_kept(self, callback: Callback) -> bool:
        """Whether ``callback`` was added with ``kept=True``.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     registry = worker.log_register()
        ...     kept, other = lambda time, batch: None, lambda time, batch: None
        ...     registry.add("app", kept, kept=True); registry.add("app", other)
        ...     return registry.get("app").is_kept(kept), registry.get("app").is_kept(other)
        >>> st.execute_directly(job)
        (True, False)
        """
        return any(callback is kept for kept in self.kept)

    def log(self, event: Any) -> None:
        """Log ``event`` as ``(time, worker, event)`` (for a program's own logs).

        >>> import sparktimely as st
        >>> def job(worker):
        ...     registry = worker.log_register()
        ...     registry.insert("app", lambda time, batch: None)
        ...     logger = registry.get("app"); logger.log("started")
        ...     return [(w, event) for _, w, event in logger.buffer]
        >>> st.execute_directly(job)
        [(0, 'started')]
        """
        self.buffer.append((self._registry.now(), self._registry.worker, event))

    def flush(self, now: int) -> list:
        """Hand the buffered events to the callbacks (if any); returns them.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     registry, seen = worker.log_register(), []
        ...     registry.insert("app", lambda time, batch: seen.append((time, batch)))
        ...     registry.get("app").log("x")
        ...     return len(registry.get("app").flush(123)), [(t, len(b)) for t, b in seen]
        >>> st.execute_directly(job)
        (1, [(123, 1)])
        """
        buffer = self.buffer
        if not buffer:
            return buffer
        batch = buffer[:]
        buffer.clear()          # the same list: the worker's hooks hold on to it
        for callback in self.callbacks:
            try:
                callback(now, batch)
            except Exception as error:
                raise RuntimeError(
                    f"worker {self._registry.worker}: the callback {callback!r} of log "
                    f"{self.name!r} raised {describe(error)}") from error
        return batch


def _close(callbacks: list[Callback]) -> None:
    """Call each callback's ``close()``, if it has one."""
    for callback in callbacks:
        close = getattr(callback, "close", None)
        if close is not None:
            close()


class Registry:
    """A worker's log names and their callbacks (``worker.log_register()``).

    >>> import sparktimely as st
    >>> from sparktimely.logging import ScheduleEvent
    >>> def job(worker):
    ...     starts = []
    ...     def count(time, batch):
    ...         starts.extend(e.id for e in batch if type(e) is ScheduleEvent and e.is_start)
    ...     worker.log_register().insert("timely", count)
    ...     worker.dataflow(lambda scope: scope.to_stream([1]).map(str).probe())
    ...     worker.run()
    ...     return sorted(set(starts))            # ToStream, Map, Probe
    >>> st.execute_directly(job)
    [0, 1, 2]
    """

    def __init__(self, worker: "WorkerCore") -> None:
        self._worker = worker
        self.worker = worker.index
        """The index of the worker whose logs these are."""
        self.origin_ns = _time.perf_counter_ns()
        self.epoch_ns = _time.time_ns()
        """The wall clock (``time.time_ns()``) at the events' time 0."""
        self._loggers: dict[str, Logger] = {}
        self._hooks: WorkerHooks | None = None

    def now(self) -> int:
        """Nanoseconds since this registry was created (the events' clock).

        >>> import sparktimely as st
        >>> st.execute_directly(lambda worker: 0 <= worker.log_register().now())
        True
        """
        return _time.perf_counter_ns() - self.origin_ns

    def insert(self, name: str, callback: Callback) -> Callback | None:
        """Send the events logged under ``name`` to ``callback(time, batch)``, instead of
        the callbacks registered for it before (but those added with ``kept=True``); returns
        the last of those it replaces, after handing them what was buffered and calling
        their ``close()`` if they have one (a :class:`BatchLogger`'s stream completes), or
        None.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     registry, first, second = worker.log_register(), [], []
        ...     registry.add("app", lambda time, batch: first.extend(batch), kept=True)
        ...     registry.insert("app", lambda time, batch: second.extend(batch))
        ...     registry.get("app").log("seen by both")
        ...     registry.flush()
        ...     return len(first), len(second)
        >>> st.execute_directly(job)
        (1, 1)
        """
        previous = self._loggers.get(name)
        replaced: list[Callback] = []
        if previous is not None:
            previous.flush(self.now())
            replaced = [c for c in previous.callbacks if not previous.is_kept(c)]
        logger = self._loggers[name] = Logger(name, callback, self)
        if previous is not None:
            logger.callbacks += previous.kept
            logger.kept = list(previous.kept)
        self._attach()
        built = self._built(name)
        if built:
            callback(self.now(), built)                      # the kept ones have them
        _close(replaced)
        return replaced[-1] if replaced else None

    def _built(self, name: str) -> list:
        """What a new callback of log ``name`` gets first: for ``"timely"``, the operators
        and channels of the dataflows built and not dropped (a new list, made once)."""
        if name != "timely" or self._hooks is None:
            return []
        return self._hooks.built

    def add(self, name: str, callback: Callback, *, kept: bool = False) -> None:
        """Send the events logged under ``name`` to ``callback`` too, beside the callbacks
        registered already (so that, say, a file and the progress display share the
        ``"timely"`` log). A ``"timely"`` callback first gets the operators and channels
        built so far. With ``kept``, :meth:`insert` and :meth:`remove` leave it in place
        (log files and the progress display: a program's own logging does not end them);
        :meth:`close` ends it.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     first, second = [], []
        ...     registry = worker.log_register()
        ...     registry.insert("timely", lambda time, batch: first.extend(batch))
        ...     worker.dataflow(lambda scope: scope.to_stream([1]).probe())
        ...     registry.add("timely", lambda time, batch: second.extend(batch))
        ...     worker.run()
        ...     return len(first) == len(second), registry.names()
        >>> st.execute_directly(job)
        (True, ['timely'])
        """
        logger = self._loggers.get(name)
        if logger is None:
            self.insert(name, callback)
            logger = self._loggers[name]
        else:
            built = self._built(name)
            if built:
                logger.flush(self.now())
                callback(self.now(), built)
            logger.callbacks.append(callback)
        if kept:
            logger.kept.append(callback)

    def remove(self, name: str) -> Callback | None:
        """Stop logging ``name`` to the callbacks registered for it (but those added with
        ``kept=True``): hand them what is buffered, call each one's ``close()`` if it has
        one (a :class:`BatchLogger` then completes its stream), and return the last (None
        if there is none).

        >>> import sparktimely as st
        >>> def job(worker):
        ...     registry, seen = worker.log_register(), []
        ...     registry.insert("app", lambda time, batch: seen.extend(batch))
        ...     registry.get("app").log("handed over at the removal")
        ...     registry.remove("app")
        ...     return len(seen), registry.names()
        >>> st.execute_directly(job)
        (1, [])
        """
        return self._remove(name, keep=True)

    def _remove(self, name: str, keep: bool) -> Callback | None:
        logger = self._loggers.get(name)
        if logger is None:
            return None
        if name == "timely" and self._hooks is not None:
            self._hooks.log_steps()
        logger.flush(self.now())
        gone = [c for c in logger.callbacks if not (keep and logger.is_kept(c))]
        if len(gone) < len(logger.callbacks):
            logger.callbacks = list(logger.kept)      # not the same list: add() appends
        else:
            del self._loggers[name]
            self._attach()
        _close(gone)
        return gone[-1] if gone else None

    def _discard(self, name: str, callback: Callback) -> None:
        """Stop logging ``name`` to ``callback`` alone, without handing it anything more
        (the feed of a :func:`log_stream` whose dataflow was dropped: nothing reads it)."""
        logger = self._loggers.get(name)
        if logger is None or not any(c is callback for c in logger.callbacks):
            return
        logger.callbacks = [c for c in logger.callbacks if c is not callback]
        if not logger.callbacks:
            del self._loggers[name]
            self._attach()

    def get(self, name: str) -> Logger | None:
        """The logger of ``name`` (to log a program's own events with ``log(event)``).

        >>> import sparktimely as st
        >>> def job(worker):
        ...     registry = worker.log_register()
        ...     registry.insert("app", lambda time, batch: None)
        ...     return registry.get("app").name, registry.get("other")
        >>> st.execute_directly(job)
        ('app', None)
        """
        return self._loggers.get(name)

    def names(self) -> list[str]:
        """The names registered now.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     registry = worker.log_register()
        ...     for name in ("b", "a"):
        ...         registry.insert(name, lambda time, batch: None)
        ...     return registry.names()
        >>> st.execute_directly(job)
        ['a', 'b']
        """
        return sorted(self._loggers)

    def flush(self) -> None:
        """Hand every logger's buffered events to its callback (the worker does this at
        the end of every step).

        >>> import sparktimely as st
        >>> def job(worker):
        ...     registry, seen = worker.log_register(), []
        ...     registry.insert("app", lambda time, batch: seen.extend(batch))
        ...     registry.get("app").log("x"); before = len(seen); registry.flush()
        ...     return before, len(seen)
        >>> st.execute_directly(job)
        (0, 1)
        """
        now = self.now()
        hooks = self._hooks
        for logger in list(self._loggers.values()):
            batch = logger.flush(now)
            if hooks is not None and logger.name == "timely" and batch:
                hooks.remember(batch)

    def close(self) -> None:
        """Remove every name and every callback (closing those that can be closed).

        >>> import sparktimely as st
        >>> def job(worker):
        ...     registry, link = worker.log_register(), st.EventLink()
        ...     registry.add("app", BatchLogger(link), kept=True)
        ...     registry.close()
        ...     return registry.names(), link.next()           # the stream completed
        >>> st.execute_directly(job)
        ([], ('progress', [(0, -1)]))
        """
        for name in list(self._loggers):
            self._remove(name, keep=False)

    def _attach(self) -> None:
        """Point the worker's hooks at the loggers registered now (or remove them)."""
        loggers = self._loggers
        if not loggers:
            if self._hooks is not None:
                self._hooks.detach()
                self._worker.remove_observer(self._hooks)
                self._hooks = None
            return
        hooks = self._hooks
        if hooks is None:
            hooks = self._hooks = WorkerHooks(self.worker, self.origin_ns)
            hooks.flush = self.flush
            dataflows = self._worker.dataflows()
            for index in sorted(dataflows):
                hooks.dataflow_built(dataflows[index])
            self._worker.add_observer(hooks)
        timely, progress = loggers.get("timely"), loggers.get("timely/progress")
        hooks.timely = None if timely is None else timely.buffer
        hooks.progress = None if progress is None else progress.buffer


class BatchLogger:
    """A callback that turns a log into a captured stream's events, pushed into ``pusher``
    (an ``EventLink``, an ``EventWriter``, ...): each batch at the time its callback was
    last called, and a frontier that follows ``time``; :meth:`close` completes the stream.

    >>> import sparktimely as st
    >>> link = st.EventLink()
    >>> logger = BatchLogger(link)
    >>> logger(1000, ["a"]); logger(2500, ["b"]); logger.close()
    >>> [link.next() for _ in range(5)]      # doctest: +NORMALIZE_WHITESPACE
    [('messages', 0, ['a']), ('progress', [(1000, 1), (0, -1)]),
     ('messages', 1000, ['b']), ('progress', [(2500, 1), (1000, -1)]), ('progress', [(2500, -1)])]
    """

    def __init__(self, pusher: Any) -> None:
        self._pusher = pusher
        self._time = 0
        self._flush: Callable[[], Any] = getattr(pusher, "flush", lambda: None)

    def __call__(self, time: int, batch: list) -> None:
        push = self._pusher.push
        if batch:
            push(("messages", self._time, batch))
        if time > self._time:
            push(("progress", [(time, 1), (self._time, -1)]))
            self._time = time
        self._flush()

    def close(self) -> None:
        """Release the stream's last time (the stream completes) and close the pusher.

        >>> import sparktimely as st
        >>> link = st.EventLink()
        >>> logger = BatchLogger(link)
        >>> logger(10, []); logger.close()
        >>> link.next(), link.next()
        (('progress', [(10, 1), (0, -1)]), ('progress', [(10, -1)]))
        """
        self._pusher.push(("progress", [(self._time, -1)]))
        self._flush()
        close = getattr(self._pusher, "close", None)
        if close is not None:
            close()


def log_stream(scope: "ScopeCore[S]", name: str = "timely") -> S:
    """The events this worker logs under ``name``, as a stream in ``scope`` (a dataflow of
    the same worker), at times in nanoseconds. The stream completes once the log is
    removed (``worker.log_register().remove(name)``); until then the dataflow runs.

    >>> import sparktimely as st
    >>> from sparktimely.logging import OperatesEvent, log_stream
    >>> def job(worker):
    ...     names = worker.dataflow(lambda scope: log_stream(scope)
    ...         .filter(lambda e: type(e) is OperatesEvent).map(lambda e: e.name).capture())
    ...     worker.dataflow(lambda scope: scope.to_stream([1]).map(str).probe())
    ...     for _ in range(3):
    ...         worker.step()
    ...     worker.log_register().remove("timely")
    ...     worker.run()
    ...     return sorted(name for _, batch in names.extract() for name in batch)
    >>> st.execute_directly(job)
    ['Capture', 'Filter', 'Map', 'Map', 'Probe', 'Replay', 'ToStream']
    """
    link, registry = EventLink(), registry_of(scope.dataflow.worker)
    logger = BatchLogger(link)
    registry.add(name, logger)
    scope.on_drop(lambda: registry._discard(name, logger))    # else it fills a link nobody reads
    return link.replay_into(scope)


_registries: "weakref.WeakKeyDictionary[WorkerCore, Registry]" = weakref.WeakKeyDictionary()


def registry_of(worker: "WorkerCore") -> Registry:
    """``worker``'s log registry (what ``worker.log_register()`` returns), made on first use.

    >>> import sparktimely as st
    >>> st.execute_directly(lambda worker: registry_of(worker) is worker.log_register())
    True
    """
    registry = _registries.get(worker)
    if registry is None:
        registry = _registries[worker] = Registry(worker)
    return registry


__all__ = ["BatchLogger", "Logger", "Registry", "log_stream", "registry_of"]
