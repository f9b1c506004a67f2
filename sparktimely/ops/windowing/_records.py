"""The window engines for Python records: panes for tumbling and sliding windows, open
sessions per key for session windows.

An engine holds one worker's windows. The operator hands it each complete timely time's
records in time order (:meth:`apply`, which returns the late records, as a list of batches),
holds one capability at the engine's earliest close time (``end - 1 + lateness``,
:meth:`next_close`) and closes the windows whose close time is complete (:meth:`close`,
through the latest complete time: each result batch with its time). Its state for
checkpoints is a dict by key (:meth:`snapshot`, :meth:`restore`).
"""
from __future__ import annotations

import bisect
import heapq
from typing import Any, Callable, Iterable, Protocol

from ...dataflow.channels import route_name
from ...errors import reworded, short_repr
from ...ordering import one_nan
from ._runs import NOTHING_TAKEN, PaneRuns
from .aggregations import Aggregation
from .kinds import Session, Sliding, Window


class Engine(Protocol):
    """What the window operator asks of an engine (see the module doc)."""

    def apply(self, time: int, batches: list) -> list:
        """Apply the records of complete time ``time``; returns the late ones (a list of
        batches)."""

    def next_close(self) -> int | None:
        """The earliest close time of the windows held (None: none held)."""

    def close(self, through: int | None) -> list[tuple[int, Any]]:
        """Close the windows whose close times are at or before the complete time
        ``through`` (None: every window, the input has ended): ``(time, batch of
        results)`` pairs in time order."""

    def snapshot(self) -> Any:
        """The open windows as keyed state (a dict by key, or a Table with a route)."""

    def restore(self, state: Any) -> None:
        """Take the open windows of a checkpoint (this worker's keys)."""


def each_time(close: Callable[[int], Any], times: list[int]) -> list[tuple[int, Any]]:
    """``(time, close(time))`` for each of ``times`` (in order) whose batch is not empty."""
    closed = [(time, close(time)) for time in times]
    return [(time, batch) for time, batch in closed if batch is not None and len(batch)]


def event_time(time_of: Callable[[Any], Any], record: Any) -> int:
    """``time_of(record)``, which must be an int (the error names the record)."""
    try:
        value = time_of(record)
    except Exception as error:
        raise time_of_raised(time_of, record, error)
    if value.__class__ is not int:
        raise TypeError(f"window: time_of({record!r}) returned {value!r} "
                        f"({type(value).__name__}), not an int event time")
    return value


def time_of_raised(time_of: Callable[[Any], Any], record: Any, error: Exception) -> Exception:
    """What to raise for ``error``, which ``time_of(record)`` raised: the same error naming
    the window, ``time_of`` and the record (if its type takes one message, else itself).

    >>> time_of_raised(len, 7, TypeError("object of type 'int' has no len()"))
    TypeError("window: time_of=len raised on the record 7: object of type 'int' has no len()")
    """
    return reworded(error, f"window: time_of={route_name(time_of)} raised on the record "
                           f"{short_repr(record)}") or error


class PaneWindows:
    """What tumbling and sliding windows keep whatever the records: which windows hold data
    and close when (``closing``: close time -> window number, its times also in a heap, so
    that finding the due ones costs no look at every open window), the windows containing a
    pane, and the latest time completed (which a checkpoint records, see
    :meth:`reschedule`)."""

    def __init__(self, kind: Sliding, lateness: int) -> None:
        self.kind = kind
        self.lateness = lateness
        self.closing: dict[int, int] = {}
        self._due: list[int] = []              # the close times of ``closing``, in a heap
        self._held: list[int] = []             # the panes held, in order
        self.done: int | None = None
        self.last_close = kind.offset + kind.size - 1 + lateness
        """The close time of window 0 (window ``i`` closes ``i * slide`` later)."""

    def _schedule(self, pane: int, after: int) -> None:
        """Note ``pane``, just held, and the close times ``>= after`` of the windows
        containing it. The windows it shares with the held panes next to it were noted with
        theirs (the windows of a pane are a range whose ends grow with the pane), so only
        the ones between are looked at: one or two per pane as records come, not ``size /
        slide``."""
        held = self._held
        at = bisect.bisect_left(held, pane)
        held.insert(at, pane)
        first, last = self._windows_of(pane)
        if at:
            first = max(first, self._windows_of(held[at - 1])[1] + 1)
        if at + 1 < len(held):
            last = min(last, self._windows_of(held[at + 1])[0] - 1)
        closing, slide = self.closing, self.kind.slide
        for i in range(first, last + 1):
            close = self.last_close + i * slide
            if close >= after and close not in closing:
                closing[close] = i
                heapq.heappush(self._due, close)

    def _windows_of(self, pane: int) -> tuple[int, int]:
        """The first and the last number of the windows containing ``pane``."""
        kind = self.kind
        start = pane * kind.pane
        return (start - kind.size) // kind.slide + 1, start // kind.slide

    def next_close(self) -> int | None:
        return self._due[0] if self._due else None

    def close(self, through: int | None) -> list[tuple[int, Any]]:
        due, times = self._due, []
        while due and (through is None or due[0] <= through):
            times.append(heapq.heappop(due))
        closed = each_time(self._close, times)
        if through is not None and (self.done is None or through > self.done):
            self.done = through
        return closed

    def _close(self, time: int) -> Any:
        """The results of the window closing at ``time`` (None or empty: none)."""
        raise NotImplementedError

    def _closing(self, time: int) -> tuple[int, range, int] | None:
        """The window closing at ``time`` (if any): its number, its panes and the first pane
        of the next window (panes before it belong to closed windows only); ``time`` is
        complete (see :meth:`close`)."""
        self.done = time
        i = self.closing.pop(time, None)
        if i is None:
            return None
        kind = self.kind
        first = i * kind.slide // kind.pane
        return i, range(first, first + kind.size // kind.pane), (i + 1) * kind.slide // kind.pane

    def _drop_panes(self, panes: dict, following: int) -> None:
        """Drop the panes before ``following`` (in closed windows only) from ``panes``."""
        held = self._held
        gone = bisect.bisect_left(held, following)
        for j in held[:gone]:
            del panes[j]
        del held[:gone]

    def reschedule(self, panes: Iterable[int], done: int | None) -> None:
        """After a restore: every window of a restored pane closing after ``done`` (the
        latest time any worker of the checkpointed run had completed) is still open; those
        closing by then were closed where they were."""
        if done is not None:
            for j in panes:
                self._schedule(j, done + 1)
            self.done = done


class Panes(PaneWindows):
    """Tumbling and sliding windows of Python records: per pane (``kind.pane`` of event
    time) and key, one partial aggregate; a window's value merges its panes' partials when
    it closes. A pane is dropped when the last window containing it closes."""

    def __init__(self, kind: Sliding, time_of: Callable[[Any], Any],
                 key: Callable[[Any], Any] | None, aggregation: Aggregation,
                 lateness: int) -> None:
        super().__init__(kind, lateness)
        self.time_of = time_of
        self.key = key
        self.aggregation = aggregation
        self.panes: dict[int, dict[Any, Any]] = {}
        self.runs = (PaneRuns(self._merged) if aggregation.compact and kind.size > kind.pane
                     else None)
        """The windows' merges of panes, when an aggregation's partials are compact."""

    def apply(self, time: int, batches: Iterable[list]) -> list:
        kind, panes, key, add, time_of = (self.kind, self.panes, self.key,
                                          self.aggregation.add, self.time_of)
        offset, slide, width, last_close = kind.offset, kind.slide, kind.pane, self.last_close
        runs = self.runs
        taken = NOTHING_TAKEN if runs is None else runs.taken
        late: list = []
        for batch in batches:
            for record in batch:
                try:
                    e = time_of(record)
                except Exception as error:
                    raise time_of_raised(time_of, record, error)
                if e.__class__ is not int:
                    e = event_time(time_of, record)
                relative = e - offset
                if time > last_close + relative // slide * slide:
                    late.append(record)
                    continue
                j = relative // width
                if j < taken:                   # a pane that closed windows merged changes
                    assert runs is not None
                    runs.reset()
                    taken = NOTHING_TAKEN
                pane = panes.get(j)
                if pane is None:
                    pane = panes[j] = {}
                    self._schedule(j, time)
                k = None if key is None else key(record)
                if k != k or isinstance(k, tuple):
                    k = one_nan(k)
                pane[k] = add(pane.get(k), record, e, time)
        return [late] if late else []

    def _close(self, time: int) -> list:
        closing = self._closing(time)
        if closing is None:
            return []
        i, window_panes, following = closing
        panes = self.panes
        if self.runs is not None:
            merged = self.runs.merged(panes, window_panes.start, window_panes.stop) or {}
        else:
            merged = {}
            for j in window_panes:
                merged = self._merged(merged, panes.get(j, {}), in_place=True)
        self._drop_panes(panes, following)
        window, result = self.kind.window(i), self.aggregation.result
        return [(k, window, result(acc)) for k, acc in merged.items()]

    def _merged(self, into: dict, partials: dict, in_place: bool = False) -> dict:
        """The partials by key of ``into`` merged with those of ``partials`` (a new dict,
        or ``into`` itself ``in_place``)."""
        merge = self.aggregation.merge
        merged = into if in_place else dict(into)
        for k, acc in partials.items():
            merged[k] = acc if k not in merged else merge(merged[k], acc)
        return merged

    def snapshot(self) -> dict:
        """``{key: (latest time applied, {pane: partial})}``."""
        state: dict = {}
        for j, pane in self.panes.items():
            for k, acc in pane.items():
                state.setdefault(k, (self.done, {}))[1][j] = acc
        return state

    def restore(self, state: dict) -> None:
        for k, (_, accs) in state.items():
            k = one_nan(k)      # the checkpoint's NaNs are objects of their own
            for j, acc in accs.items():
                self.panes.setdefault(j, {})[k] = acc
        self.reschedule(self.panes, max((d for d, _ in state.values() if d is not None),
                                        default=None))


class Sessions:
    """Session windows: per key, the open sessions ``[start, end, partial]`` sorted by
    start. At each time a key's open sessions and its records merge as a set."""

    def __init__(self, kind: Session, time_of: Callable[[Any], Any],
                 key: Callable[[Any], Any] | None, aggregation: Aggregation,
                 lateness: int) -> None:
        self.gap = kind.gap
        self.time_of = time_of
        self.key = key
        self.aggregation = aggregation
        self.lateness = lateness
        self.sessions: dict[Any, list[list]] = {}
        self.closing: dict[int, set] = {}      # close time -> keys with a session closing then
        self._due: list[int] = []              # the close times of ``closing``, in a heap

    def _schedule(self, close: int, k: Any) -> None:
        keys = self.closing.get(close)
        if keys is None:
            keys = self.closing[close] = set()
            heapq.heappush(self._due, close)
        keys.add(k)

    def next_close(self) -> int | None:
        return self._due[0] if self._due else None

    def close(self, through: int | None) -> list[tuple[int, list]]:
        due, closed = self._due, []
        while due and (through is None or due[0] <= through):
            time = heapq.heappop(due)
            results = self._close(time)
            if results:
                closed.append((time, results))
        return closed

    def apply(self, time: int, batches: Iterable[list]) -> list:
        key, time_of, gap = self.key, self.time_of, self.gap
        by_key: dict[Any, list] = {}
        for batch in batches:
            for record in batch:
                try:
                    e = time_of(record)
                except Exception as error:
                    raise time_of_raised(time_of, record, error)
                if e.__class__ is not int:
                    e = event_time(time_of, record)
                k = None if key is None else key(record)
                if k != k or isinstance(k, tuple):
                    k = one_nan(k)
                items = by_key.get(k)
                if items is None:
                    by_key[k] = [(e, e + gap, None, record)]
                else:
                    items.append((e, e + gap, None, record))
        late: list = []
        add, merge, lateness = self.aggregation.add, self.aggregation.merge, self.lateness
        for k, items in by_key.items():
            items += [(s[0], s[1], s, None) for s in self.sessions.get(k, ())]
            items.sort(key=_start)
            kept: list[list] = []
            components: list[list] = []
            for start, end, session, record in items:
                if components and start < components[-1][1]:
                    component = components[-1]
                    component[1] = max(component[1], end)
                else:
                    component = [start, end, [], []]
                    components.append(component)
                if session is None:
                    component[3].append((start, record))
                else:
                    component[2].append(session)
            for start, end, sessions, records in components:
                close = end - 1 + lateness
                if close < time:       # records alone (an open session closes at time or later)
                    late += [record for _, record in records]
                    continue
                acc = sessions[0][2] if sessions else None
                for session in sessions[1:]:
                    acc = merge(acc, session[2])
                for e, record in records:
                    acc = add(acc, record, e, time)
                kept.append([start, end, acc])
                self._schedule(close, k)
            if kept:
                self.sessions[k] = kept
        return [late] if late else []

    def _close(self, time: int) -> list:
        keys = self.closing.pop(time, None)
        if not keys:
            return []
        result, last_end, out = self.aggregation.result, time + 1 - self.lateness, []
        for k in keys:
            sessions = self.sessions.get(k, ())
            out += [(k, Window(s, e), result(acc)) for s, e, acc in sessions if e <= last_end]
            kept = [s for s in sessions if s[1] > last_end]
            if kept:
                self.sessions[k] = kept
            else:
                self.sessions.pop(k, None)
        return out

    def snapshot(self) -> dict:
        """``{key: [(start, end, partial), ...]}``: the open sessions."""
        return {k: [tuple(s) for s in sessions] for k, sessions in self.sessions.items()}

    def restore(self, state: dict) -> None:
        for k, sessions in state.items():
            k = one_nan(k)      # the checkpoint's NaNs are objects of their own
            self.sessions[k] = [list(s) for s in sessions]
            for _, end, _ in sessions:
                self._schedule(end - 1 + self.lateness, k)


def _start(item: tuple) -> int:
    return item[0]
