"""``stream.window``: event-time windows over a stream whose timely times are watermarks.

The operator exchanges records by key, stashes each timely time's records until the time is
complete and applies them in time order (so results never depend on arrival order,
batching or the number of workers). It holds one capability, at the earliest close time
``end - 1 + lateness`` of the windows that hold data; when a close time is complete the
window's result is sent at it. Records that count in no open window go to
``.late`` at their own time. Window state is keyed operator state for epoch checkpoints.

>>> import sparktimely as st
>>> from sparktimely.ops.windowing.kinds import Tumbling
>>> from sparktimely.ops.windowing.aggregations import count
>>> def build(scope):
...     clicks = scope.to_stream([("ann", 3), ("bob", 5), ("ann", 12)])
...     out = clicks.window(Tumbling(10), time_of=lambda r: r[1], aggregate=count(),
...                         key=lambda r: r[0])
...     return out.results.capture()
>>> for time, results in st.example(build).extract():
...     print(time, results)
9 [('ann', Window(start=0, end=10), 1), ('bob', Window(start=0, end=10), 1)]
19 [('ann', Window(start=10, end=20), 1)]
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Generic, NamedTuple, Self, Sequence, TypeVar

import numpy as np

from ...dataflow import Exchange, Notificator, OperatorBuilder
from ...dataflow.capability import Capability
from ...dataflow.channels import route_name
from ...dataflow.containers import kept
from ...dataflow.stream import StreamCore
from ...hashing import Route, stable_hash
from ...progress.frontier import MutableAntichain
from .._stash import PerTime
from ..recovery import KeyedState
from ._columns import NONE_ROUTE, Aggregates, ArrowPanes, ArrowSessions
from ._records import Engine, Panes, Sessions
from .aggregations import Aggregation
from .kinds import Session, Sliding

S = TypeVar("S", bound=StreamCore)


class WindowOut(NamedTuple, Generic[S]):
    """What ``stream.window`` returns: ``results``, the stream of each closed window's
    result, and ``late``, the records that counted in no window (unchanged, at their own
    timely times).

    >>> import sparktimely as st
    >>> from sparktimely.ops.windowing.kinds import Tumbling
    >>> from sparktimely.ops.windowing.aggregations import sum
    >>> def build(scope):
    ...     readings = scope.to_stream([(1, 5), (2, 7)]).delay(lambda r, t: 10 * (r[0] - 1))
    ...     out = readings.window(Tumbling(10), time_of=lambda r: r[0],
    ...                           aggregate=sum(lambda r: r[1]))
    ...     return out.results.capture(), out.late.capture()
    >>> [captured.extract() for captured in st.example(build)]
    [[(9, [(None, Window(start=0, end=10), 5)])], [(10, [(2, 7)])]]
    """

    results: S
    late: S


class _Stashed:
    """The records of one timely time, waiting for it to complete, and a capability of the
    late output at that time."""

    __slots__ = ("batches", "late")

    def __init__(self) -> None:
        self.batches: list = []
        self.late: Capability | None = None


class WindowOps(StreamCore):
    """``window``: event-time windows with results at the watermark."""

    __slots__ = ()

    def window(self, kind: Sliding | Session, *, time_of: Callable[[Any], Any] | str,
               aggregate: Aggregation | dict,
               key: Callable[[Any], Any] | str | Sequence[str] | None = None,
               lateness: int = 0) -> WindowOut[Self]:
        """Event-time windows (``sparktimely.windows``: ``Tumbling``, ``Sliding`` or
        ``Session``) per key, aggregated, with results at the watermark.

        The stream's timely times are watermarks (ints). ``time_of(record)`` is a record's
        event time (an int); ``key(record)`` its key (default: every record has the key
        None), which routes it by :func:`~sparktimely.stable_hash`. A window is closed once
        the input frontier has passed ``end - 1 + lateness``; its result
        ``(key, Window(start, end), value)`` is then sent once, at timely time
        ``end - 1 + lateness``. Records are applied in timely-time order; a record at time
        ``t`` counts in each of its windows still open at ``t``. Session windows merge per
        key and never reopen once closed. A record that counts in no window goes to
        ``.late`` unchanged, at its own time. ``aggregate`` is a ``win.count()``,
        ``win.sum(f)``, ... (see :mod:`sparktimely.ops.windowing.aggregations`).

        On Arrow batches, ``time_of`` and ``key`` name columns (``key`` may be a list) and
        ``aggregate`` is a dict ``{out_column: (op, in_column)}`` with ops ``"count"``
        (``in_column`` may be None), ``"sum"``, ``"min"``, ``"max"``, ``"mean"``; results
        are RecordBatches with the key columns, ``window_start``, ``window_end`` and the
        output columns, and ``.late`` carries the late rows.

        >>> import pyarrow as pa, sparktimely as st
        >>> import sparktimely.windows as win
        >>> def build(scope):
        ...     rows = pa.table({"sensor": ["a", "a", "b"], "ts": [1, 4, 7], "v": [1.0, 3.0, 5.0]})
        ...     out = scope.to_stream(rows).window(win.Sliding(10, 5), time_of="ts", key="sensor",
        ...                                        aggregate={"avg": ("mean", "v")})
        ...     return out.results.capture()
        >>> for time, table in st.example(build).extract():
        ...     print(time, table.sort_by("sensor").to_pydict())
        4 {'sensor': ['a'], 'window_start': [-5], 'window_end': [5], 'avg': [2.0]}
        9 {'sensor': ['a', 'b'], 'window_start': [0, 0], 'window_end': [10, 10], 'avg': [2.0, 5.0]}
        14 {'sensor': ['b'], 'window_start': [5], 'window_end': [15], 'avg': [5.0]}
        """
        if not isinstance(kind, (Sliding, Session)):
            raise TypeError(f"window: kind must be win.Tumbling, win.Sliding or win.Session, "
                            f"got {kind!r}")
        if lateness.__class__ is not int:
            raise TypeError(f"window: lateness must be a non-negative int, got {lateness!r}")
        if lateness < 0:
            raise ValueError(f"window: lateness must be a non-negative int, got {lateness!r}")
        times = self.scope.kind
        if times.depth or times.base is not int:
            raise TypeError(f"window: the stream's timely times must be ints (watermarks), "
                            f"not those of scope {self.scope.name!r}")
        definition = f"{kind!r}, lateness {lateness}"
        if isinstance(aggregate, dict):
            digest = hashlib.sha256(repr(aggregate).encode()).hexdigest()[:8]
            return self._window(*_arrow_engine(kind, time_of, key, aggregate, lateness),
                                definition=f"{definition}, Arrow aggregate {digest}")
        if isinstance(aggregate, Aggregation):
            return self._window(*_records_engine(kind, time_of, key, aggregate, lateness),
                                definition=f"{definition}, records {aggregate.name}",
                                records=True)
        raise TypeError(f"window: aggregate must be a win.count(), win.sum(), ... or an "
                        f"Arrow dict {{out: (op, column)}}, got {aggregate!r}")

    def _window(self, pact: Exchange, engine: Engine, route: Route | str, *,
                definition: str, records: bool = False) -> Any:
        """The window operator over ``engine``; ``records``: a Python aggregation, which
        refuses Arrow batches (it would iterate their columns). Its checkpointed state is
        named with ``definition`` (the kind, the lateness, the aggregation: a Python one by
        its name, an Arrow aggregate dict by a digest, which keeps the name of its files
        short), so that a resumed run whose
        window differs is refused instead of reading windows it does not make."""
        builder = OperatorBuilder("Window", self.scope)
        input = builder.new_input(self, pact)
        results_output, results = builder.new_output()
        late_output, late = builder.new_output()
        activate = self.scope.activator_for(builder.address).activate
        stash: PerTime[_Stashed] = PerTime(_Stashed)
        minimum = self.scope.kind.minimum()
        peers = self.scope.peers
        state = KeyedState(self.scope, f"Window#{builder.index} ({definition})", builder.index,
                           engine.snapshot, engine.restore, route)
        # With checkpoints, times after the epoch the checkpoint gate lets through wait (as
        # input batches do), so that a snapshot holds the windows as they were then.
        gate, gated = state.gate, MutableAntichain()
        gated_at: list[int] = []

        def follow_gate() -> None:
            assert gate is not None
            wanted = [] if gate.limit is None else [gate.limit + 1]
            if wanted != gated_at:
                gated.update_iter([(t, -1) for t in gated_at] + [(t, 1) for t in wanted])
                gated_at[:] = wanted

        def ctor(capabilities: list[Capability]) -> Callable[[list], None]:
            frontiers = [input.frontier] if gate is None else [input.frontier, gated]
            notificator = Notificator(frontiers, activate)
            earliest = _EarliestClose()
            # Held while the input frontier is at the minimum (which holds the outputs there
            # anyway): a resumed run restores the windows meanwhile, before its sources start,
            # and their close times are held from these capabilities.
            starting = capabilities

            def logic(_frontiers: list) -> None:
                if gate is not None:
                    follow_gate()
                if starting and not input.frontier.less_equal(minimum):
                    earliest.hold(engine.next_close(), starting[0])
                    for capability in starting:
                        capability.drop()
                    starting.clear()
                for cap, batch in input:
                    if records and batch.__class__ is not list:
                        raise _records_only(batch)
                    stashed = stash.at(cap, notificator)
                    if stashed.late is None:
                        stashed.late = cap.retain_for_output(1)
                    stashed.batches.append(kept(batch, peers))
                # Complete times since the last records, in time order: the windows closing
                # before each time with records, then its records, then those closing at it.
                for done, _ in notificator:
                    now = done.time
                    send(engine.close(now - 1))
                    complete = stash.pop(now)
                    assert complete is not None and complete.late is not None
                    for batch in engine.apply(now, complete.batches):
                        late_output.give_at(complete.late, batch)
                    complete.late.drop()
                    earliest.hold(engine.next_close(), done)
                    send(engine.close(now))
                    done.drop()
                bound = _bound(frontiers)
                send(engine.close(None if bound == float("inf") else int(bound) - 1))
                earliest.settle(engine.next_close())

            def send(closed: list[tuple[int, Any]]) -> None:
                """Give each closed window's results at its close time."""
                for time, batch in closed:
                    results_output.give_at(earliest.at(time), batch)
            return logic
        builder.build(ctor)
        return WindowOut(results, late)


class _EarliestClose:
    """One capability of the results output, at the engine's earliest close time: one
    whatever the number of windows (a capability and a notification per close time would
    cost the progress tracker and the notificator work per held time at every step, and
    sessions have a close time of their own each)."""

    __slots__ = ("capability",)

    def __init__(self) -> None:
        self.capability: Capability | None = None

    def hold(self, time: int | None, source: Capability) -> None:
        """Hold ``time`` too (None: nothing; not earlier than ``source``'s time)."""
        if time is not None and (self.capability is None or time < self.capability.time):
            earliest = source.delayed(time)
            if self.capability is not None:
                self.capability.drop()
            self.capability = earliest

    def at(self, time: int) -> Capability:
        """The capability, moved to ``time`` (a complete close time, no later than any
        window still held; results go out in time order)."""
        assert self.capability is not None
        self.capability.downgrade(time)
        return self.capability

    def settle(self, time: int | None) -> None:
        """Move the capability to ``time``, the engine's earliest close time now, or drop it
        when there is none."""
        if self.capability is not None:
            if time is not None:
                self.capability.downgrade(time)
            else:
                self.capability.drop()
                self.capability = None


def _bound(frontiers: list[MutableAntichain]) -> float:
    """The earliest time of these frontiers of int times (infinity when all are empty):
    every earlier time is complete."""
    bound: float = float("inf")
    for frontier in frontiers:
        for time in frontier.frontier():
            if time < bound:
                bound = time
    return bound


def _arrow_engine(kind: Sliding | Session, time_of: Any, key: Any, aggregate: dict,
                  lateness: int) -> tuple[Exchange, Engine, str]:
    """The exchange, engine and checkpoint route of a window over Arrow batches."""
    if not isinstance(time_of, str):
        raise TypeError("window: with an Arrow aggregate dict, time_of names the time column")
    names = [] if key is None else [key] if isinstance(key, str) else \
        list(key) if isinstance(key, (list, tuple)) else [key]
    keys = [k for k in names if isinstance(k, str)]
    if len(keys) != len(names):
        raise TypeError(f"window: with an Arrow aggregate dict, key names columns, got {key!r}")
    aggregates = Aggregates(aggregate, keys)
    engine: Engine = (ArrowSessions(kind, time_of, keys, aggregates, lateness)
              if isinstance(kind, Session) else
              ArrowPanes(kind, time_of, keys, aggregates, lateness))
    return ((_BatchesExchange(key=keys) if keys else _BatchesExchange(_unkeyed_rows)), engine,
            aggregates.internal("hash"))


def _records_engine(kind: Sliding | Session, time_of: Any, key: Any, aggregate: Aggregation,
                    lateness: int) -> tuple[Exchange, Engine, Route]:
    """The exchange, engine and checkpoint route of a window over Python records."""
    if not callable(time_of) or not (key is None or callable(key)):
        raise TypeError("window: on Python records time_of and key are functions of the "
                        "record (column names go with an Arrow aggregate dict)")
    engine: Engine = (Sessions(kind, time_of, key, aggregate, lateness) if isinstance(kind, Session)
              else Panes(kind, time_of, key, aggregate, lateness))
    pact = _RecordsExchange(lambda record: NONE_ROUTE) if key is None else _RecordsExchange(
        _by_key(key))
    return pact, engine, stable_hash


def _by_key(key: Callable[[Any], Any]) -> Route:
    """The route of a window's records, ``stable_hash(key(record))``, named with ``key`` (as
    an exchange's error shows it).

    >>> _by_key(len).__qualname__, _by_key(len)("ab") == stable_hash(2)
    ('stable_hash(len(record))', True)
    """
    def by_key(record: Any) -> int:
        return stable_hash(key(record))
    by_key.__qualname__ = f"stable_hash({route_name(key)}(record))"
    return by_key


def _records_only(batch: Any) -> TypeError:
    """The error of a window with a Python aggregation given an Arrow batch."""
    return TypeError(f"window: a Python aggregation (win.count(), win.sum(), ...) takes "
                     f"records, but this stream carries {type(batch).__name__}es: aggregate "
                     f"Arrow batches with a dict {{out: (function, column)}} and column names "
                     f"for time_of and key")


class _RecordsExchange(Exchange):
    """The exchange into a window over Python records: an Arrow batch it cannot route (its
    route is a function of one record) is refused with the window's own error, told as the
    exchange into the window (where the batch is sent)."""

    def refusal(self, batch: Any) -> Exception | None:
        return None if batch.__class__ is list else _records_only(batch)


class _BatchesExchange(Exchange):
    """The exchange into a window over Arrow batches: Python records it cannot route (its
    route reads columns) are refused with the window's own error, told as the exchange into
    the window (where the records are sent)."""

    def refusal(self, batch: Any) -> Exception | None:
        if batch.__class__ is not list:
            return None
        return TypeError("window: an Arrow aggregate dict {out: (function, column)} takes "
                         "RecordBatches, but this stream carries Python records: aggregate "
                         "them with a Python aggregation (win.count(), win.sum(), ...) and "
                         "functions of the record for time_of and key")


def _unkeyed_rows(batch: Any) -> Any:
    """The route of each row of an Arrow batch when the window has no key."""
    return np.full(batch.num_rows, NONE_ROUTE, np.uint64)
