"""Observing streams from outside: probe, capture, and event logs that replay a stream
into another dataflow (timely's ``capture``/``replay`` with ``EventWriter``/``EventReader``).

A captured stream is a sequence of events: ``("progress", [(time, delta), ...])``, the
changes of the stream's frontier (which starts as the minimum time with count 1), and
``("messages", time, batch)``, a batch the stream carried on the capturing worker. Every
worker's log describes the same (global) frontier, so the logs of N capturing workers can be
replayed by any number of workers: each replays some of the logs, and together the replay
operators hold exactly the times the original stream could still carry.
"""
from __future__ import annotations

import io
import os
import pickle
import select
import socket
import struct
from collections import deque
from typing import IO, Any, Callable, Iterable, Protocol, Self, TypeVar

from ..dataflow import OperatorBuilder, Pipeline, ProbeHandle
from ..dataflow.builder import sink_operator
from ..dataflow.capability import Capability
from ..dataflow.containers import check_schema
from ..dataflow.scope import ScopeCore
from ..dataflow.stream import StreamCore
from ..errors import describe, require_type
from ..ordering import sort_totally
from ..progress.frontier import MutableAntichain
from ..progress.timestamp import less_equal, sort_times

S = TypeVar("S", bound=StreamCore)
_LENGTH = struct.Struct("<Q")


class EventPusher(Protocol):
    """Where ``capture_into`` sends events; ``flush()`` and ``close()`` are called if
    present (after each scheduling, and once the stream is complete)."""

    def push(self, event: tuple) -> None: ...


class EventSource(Protocol):
    """What ``replay_into`` reads: ``next()`` returns the next event, or None when none is
    available yet."""

    def next(self) -> tuple | None: ...


class Capture:
    """What a stream carried on this worker: ``extract()`` gives ``(time, records)`` pairs.

    >>> import sparktimely as st
    >>> st.example(lambda scope: scope.to_stream([3, 1]).capture()).extract()
    [(0, [1, 3])]
    """

    def __init__(self) -> None:
        self._batches: list[tuple[Any, Any]] = []

    def __getstate__(self) -> dict:
        return {"_batches": [(time, _whole(batch)) for time, batch in self._batches]}

    def _record(self, time: Any, batch: Any) -> None:
        self._batches.append((time, batch))

    def extract(self) -> list[tuple[Any, Any]]:
        """``(time, sorted records)`` per distinct time, sorted by time; Arrow streams give
        ``(time, pyarrow.Table)`` with rows sorted by its columns, left to right.

        >>> import sparktimely as st
        >>> st.example(lambda scope: scope.to_stream([3, 2, 1]).delay(lambda x, t: x % 2)
        ...            .capture()).extract()
        [(0, [2]), (1, [1, 3])]
        """
        return merge_by_time(self._batches)


class _Columnless:
    """Pickled in place of an Arrow batch or table without columns, whose pyarrow pickle
    has 0 rows: unpickles as one of its rows.

    >>> import pickle, pyarrow as pa
    >>> batch = pa.record_batch({"a": [1, 2]}).select([])
    >>> pickle.loads(pickle.dumps(_whole(batch))).num_rows
    2
    """

    __slots__ = ("rows", "table")

    def __init__(self, rows: int, table: bool) -> None:
        self.rows, self.table = rows, table

    def __reduce__(self) -> tuple:
        return _columnless, (self.rows, self.table)


def _columnless(rows: int, table: bool) -> Any:
    """A RecordBatch (a Table if ``table``) of ``rows`` rows and no columns."""
    import pyarrow
    batch = pyarrow.record_batch([pyarrow.nulls(rows)], names=[""]).select([])
    return pyarrow.Table.from_batches([batch]) if table else batch


def _whole(container: Any) -> Any:
    """``container`` as it should be pickled: an Arrow one without columns as a
    :class:`_Columnless` of its rows."""
    if container.__class__ is list or getattr(container, "num_columns", None) != 0:
        return container
    import pyarrow
    return _Columnless(container.num_rows, isinstance(container, pyarrow.Table))


def merge_by_time(pairs: Iterable[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``(time, container)`` pairs merged per time, as :meth:`Capture.extract` gives them:
    records sorted (``ordering.total_order`` where Python cannot compare them), Arrow
    batches or tables joined into one table sorted by its columns, times in order (their
    partial order's, for a user type without ``<``).

    >>> merge_by_time([(1, ["b"]), (0, [3, 1]), (1, ["a"])])
    [(0, [1, 3]), (1, ['a', 'b'])]
    """
    by_time: dict = {}
    for time, container in pairs:
        by_time.setdefault(time, []).append(container)
    result: list[tuple[Any, Any]] = []
    for time, parts in by_time.items():
        arrow = [not isinstance(part, list) for part in parts]
        if any(arrow) and not all(arrow):
            raise TypeError(f"the captured stream gave both Python records and Arrow batches "
                            f"at time {time!r}: a stream carries one kind of container")
        if not arrow[0]:
            records = [x for part in parts for x in part]
            sort_totally(records)           # None beside ints, a NaN, numpy scalars beside tuples
            result.append((time, records))
        else:
            result.append((time, _sorted_rows(_one_table(time, parts))))
    order = {time: i for i, time in enumerate(sort_times(list(by_time)))}
    result.sort(key=lambda pair: order[pair[0]])
    return result


def _one_table(time: Any, parts: list) -> Any:
    """The Arrow batches and tables ``parts`` (captured at ``time``) as one table; a
    ValueError naming the time and the schemas if they differ.

    >>> import pyarrow as pa
    >>> _one_table(0, [pa.record_batch({"k": [1]}), pa.record_batch({"j": ["x"]})])
    Traceback (most recent call last):
    ValueError: Capture.extract at time 0: the batch's schema (j: string) differs from the stream's schema (k: int64)
    """
    import pyarrow
    tables = [pyarrow.Table.from_batches([part]) if isinstance(part, pyarrow.RecordBatch)
              else part for part in parts]
    schema = None
    for table in tables:
        schema = check_schema(schema, table.schema, f"Capture.extract at time {time!r}")
    if schema is not None and not schema.names:    # (concat_tables loses a row count alone)
        rows = sum(table.num_rows for table in tables)
        return pyarrow.table({"": pyarrow.nulls(rows)}).select([])
    return pyarrow.concat_tables(tables)


def _sorted_rows(table: Any) -> Any:
    """``table``'s rows sorted by all its columns, a dictionary-encoded one by its values;
    as they are if a column cannot be sorted (lists, structs).

    >>> import pyarrow as pa
    >>> words = pa.array(["z", "b", "a"]).dictionary_encode()
    >>> _sorted_rows(pa.table({"w": words, "n": [1, 2, 3]})).column("n").to_pylist()
    [3, 2, 1]
    """
    import pyarrow
    import pyarrow.compute as pc
    if not table.column_names:                # rows with nothing to sort by (nor to lose)
        return table
    keys = [(name, "ascending") for name in table.column_names]
    columns = [column.cast(column.type.value_type) if pyarrow.types.is_dictionary(column.type)
               else column for column in table.columns]
    try:
        order = pc.sort_indices(pyarrow.table(columns, names=table.column_names), keys)
    except pyarrow.ArrowException:
        return table
    return table.take(order)


class EventLink:
    """An event log in this process: capture into it in one dataflow, replay it into
    another of the same worker.

    >>> import sparktimely as st
    >>> def job(worker):
    ...     link = st.EventLink()
    ...     worker.dataflow(lambda scope: scope.to_stream([1, 2]).capture_into(link))
    ...     return worker.dataflow(lambda scope: link.replay_into(scope).capture())
    >>> st.execute_directly(job).extract()
    [(0, [1, 2])]
    """

    def __init__(self) -> None:
        self._events: deque[tuple] = deque()    # those not read yet: a read one is let go

    def push(self, event: tuple) -> None:
        """Append an event.

        >>> import sparktimely as st
        >>> link = st.EventLink()
        >>> link.push(("messages", 0, ["a"]))
        >>> link.next()
        ('messages', 0, ['a'])
        """
        self._events.append(event)

    def next(self) -> tuple | None:
        """The next event not read yet, or None.

        >>> import sparktimely as st
        >>> link = st.EventLink()
        >>> link.push(("progress", [(0, -1)]))
        >>> link.next(), link.next()
        (('progress', [(0, -1)]), None)
        """
        return self._events.popleft() if self._events else None

    def replay_into(self, scope: ScopeCore[S]) -> S:
        """The logged stream, replayed into ``scope``.

        >>> import sparktimely as st
        >>> link = st.EventLink()
        >>> link.push(("messages", 0, ["a"])); link.push(("progress", [(0, -1)]))
        >>> st.example(lambda scope: link.replay_into(scope).capture()).extract()
        [(0, ['a'])]
        """
        return replay_into([self], scope)


class EventWriter:
    """Writes events to a file (a path, a binary file object or a connected socket) as
    length-prefixed pickles; the file is flushed after each scheduling and closed once the
    stream is complete. A path under ``/dev/shm`` keeps the log in shared memory.

    >>> import os, tempfile, sparktimely as st
    >>> path = os.path.join(tempfile.mkdtemp(), "log")
    >>> _ = st.example(lambda scope: scope.to_stream(["x"]).capture_into(st.EventWriter(path)))
    >>> st.example(lambda scope: st.EventReader(path).replay_into(scope).capture()).extract()
    [(0, ['x'])]
    """

    def __init__(self, target: str | os.PathLike | IO[bytes] | socket.socket) -> None:
        if isinstance(target, socket.socket):
            target = target.makefile("wb")
        self._file: IO[bytes] = (open(target, "wb") if isinstance(target, (str, os.PathLike))
                                 else target)

    def push(self, event: tuple) -> None:
        """Append an event.

        >>> import io, sparktimely as st
        >>> buffer = io.BytesIO()
        >>> st.EventWriter(buffer).push(("messages", 0, ["a"]))
        >>> st.EventReader(io.BytesIO(buffer.getvalue())).next()
        ('messages', 0, ['a'])
        """
        if event[0] == "messages" and len(event) == 3:
            event = (event[0], event[1], _whole(event[2]))
        data = pickle.dumps(event, protocol=5)
        self._file.write(_LENGTH.pack(len(data)))
        self._file.write(data)

    def flush(self) -> None:
        """Make what was written visible to readers.

        >>> import os, tempfile, sparktimely as st
        >>> path = os.path.join(tempfile.mkdtemp(), "log")
        >>> writer = st.EventWriter(path); writer.push(("progress", [(0, -1)]))
        >>> reader = st.EventReader(path)
        >>> reader.next()                              # still in the writer's buffer
        >>> writer.flush(); reader.next()
        ('progress', [(0, -1)])
        >>> writer.close(); reader.close()
        """
        self._file.flush()

    def close(self) -> None:
        """Close the file.

        >>> import io, sparktimely as st
        >>> buffer = io.BytesIO()
        >>> st.EventWriter(buffer).close()
        >>> buffer.closed
        True
        """
        self._file.close()


class EventReader:
    """Reads the events an :class:`EventWriter` writes, from a path, a binary file object or
    a connected socket (timely's ``capture_send``/``capture_recv`` over TCP), also while
    they are being written: ``next()`` returns None until a whole event is there, and never
    waits for more (a pipe or socket with nothing new is not read).

    >>> import io, sparktimely as st
    >>> buffer = io.BytesIO()
    >>> writer = st.EventWriter(buffer)
    >>> writer.push(("messages", 0, [1]))
    >>> _ = buffer.seek(0)
    >>> reader = st.EventReader(buffer)
    >>> reader.next(), reader.next()
    (('messages', 0, [1]), None)
    """

    def __init__(self, source: str | os.PathLike | IO[bytes] | socket.socket) -> None:
        if isinstance(source, socket.socket):
            source = source.makefile("rb")
        self._file: IO[bytes] = (open(source, "rb") if isinstance(source, (str, os.PathLike))
                                 else source)
        self._buffer = bytearray()
        try:
            self._ready: select.poll | None = select.poll()
            self._ready.register(self._file.fileno(), select.POLLIN)
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            self._ready = None                   # in memory (BytesIO): always readable

    def next(self) -> tuple | None:
        """The next whole event, or None if none has been written yet.

        >>> import io, sparktimely as st
        >>> buffer = io.BytesIO()
        >>> st.EventWriter(buffer).push(("progress", [(0, -1)]))
        >>> data = buffer.getvalue()
        >>> reader = st.EventReader(io.BytesIO(data + data[:5]))
        >>> reader.next(), reader.next()               # a whole event, then a part of one
        (('progress', [(0, -1)]), None)
        """
        end = self._whole_event()
        while end == 0:                 # an event may be longer than one read
            more = self._available()
            if not more:
                return None
            self._buffer += more
            end = self._whole_event()
        try:
            event: tuple = pickle.loads(self._buffer[_LENGTH.size:end])
        except (pickle.UnpicklingError, EOFError, IndexError, MemoryError) as error:
            raise _not_events(f": {describe(error)}") from None
        del self._buffer[:end]
        return event

    def _available(self) -> bytes:
        """What can be read now without waiting (a file: up to its end)."""
        if self._ready is not None and not self._ready.poll(0):
            return b""
        read = getattr(self._file, "read1", self._file.read)
        return read(1 << 20) or b""             # None: a non-blocking file had nothing

    def _whole_event(self) -> int:
        """Where the first buffered event ends, or 0 if it is not all buffered yet; a
        ValueError if what is buffered cannot be the start of an event (a pickle starts
        with its protocol's byte)."""
        buffer = self._buffer
        if len(buffer) <= _LENGTH.size:
            return 0
        if buffer[_LENGTH.size] != pickle.PROTO[0]:
            raise _not_events()
        end = _LENGTH.size + _LENGTH.unpack_from(buffer)[0]
        return end if len(buffer) >= end else 0

    def replay_into(self, scope: ScopeCore[S]) -> S:
        """The logged stream, replayed into ``scope``.

        >>> import io, sparktimely as st
        >>> buffer = io.BytesIO()
        >>> writer = st.EventWriter(buffer)
        >>> writer.push(("messages", 0, ["a"])); writer.push(("progress", [(0, -1)]))
        >>> reader = st.EventReader(io.BytesIO(buffer.getvalue()))
        >>> st.example(lambda scope: reader.replay_into(scope).capture()).extract()
        [(0, ['a'])]
        """
        return replay_into([self], scope)

    def close(self) -> None:
        """Close the file.

        >>> import io, sparktimely as st
        >>> buffer = io.BytesIO()
        >>> st.EventReader(buffer).close()
        >>> buffer.closed
        True
        """
        self._file.close()


def replay_into(sources: Iterable[EventSource], scope: ScopeCore[S]) -> S:
    """One stream that replays the event logs ``sources`` (each with ``next()``) into
    ``scope``: their batches at their times, and a frontier that follows theirs. Each worker
    may replay any share of the logs of a capture, including none: with N logs and M
    workers, worker ``i`` typically replays logs ``i, i + M, ...``.

    >>> import sparktimely as st
    >>> links = [st.EventLink(), st.EventLink()]
    >>> def job(worker):
    ...     for link, items in zip(links, ([1, 2], [3])):
    ...         worker.dataflow(lambda scope: scope.to_stream(items).delay(lambda x, t: x)
    ...                         .capture_into(link))
    ...     return worker.dataflow(lambda scope: st.replay_into(links, scope).capture())
    >>> st.execute_directly(job).extract()
    [(1, [1]), (2, [2]), (3, [3])]
    """
    sources = list(sources)
    builder = OperatorBuilder("Replay", scope)
    output, stream = builder.new_output()
    builder.set_notify(False)
    minimum = scope.kind.minimum()

    def ctor(capabilities: list[Capability]) -> Callable[[list], bool]:
        counts = MutableAntichain()
        counts.update_iter([(minimum, len(sources))])
        held: dict[Any, Capability] = {minimum: capabilities[0]} if sources else {}
        if not sources:
            capabilities[0].drop()

        def send(time: Any, batch: Any) -> None:
            capability = held.get(time)
            if capability is not None:
                output.give_at(capability, batch)
                return
            for capability in held.values():
                if less_equal(capability.time, time):
                    output.give_at(capability.delayed(time), batch)
                    return
            raise ValueError(f"replay: a logged batch at time {time!r} is not in the "
                             f"future of the logged frontier {sorted(held)!r}")

        def logic(frontiers: list) -> bool:
            for number, source in enumerate(sources):
                while (event := _next_event(source, number)) is not None:
                    if not _is_event(event):
                        raise ValueError(f"replay: log {number} gave {_shown(event)}, which "
                                         f"is no event: ('messages', time, batch) or "
                                         f"('progress', [(time, delta), ...])")
                    if event[0] == "messages":
                        send(event[1], event[2])
                        continue
                    changes = counts.update_iter(_progress(number, event[1]))
                    for time, delta in changes:           # new frontier times first
                        if delta > 0:
                            parent = next(c for t, c in held.items() if less_equal(t, time))
                            held[time] = parent.delayed(time)
                    for time, delta in changes:
                        if delta < 0:
                            held.pop(time).drop()
            return bool(held)                 # poll the logs until the replay is complete
        return logic
    builder.build_reschedule(ctor)
    return stream


def _not_events(why: str = "") -> ValueError:
    return ValueError(f"not events written by an EventWriter (each is a length and a pickle; "
                      f"this is not){why}")


def _next_event(source: Any, number: int) -> tuple | None:
    """``source.next()``, its ValueError naming the log by its ``number``."""
    try:
        return source.next()
    except ValueError as error:
        raise ValueError(f"replay: log {number} cannot be read: {error}") from error


def _is_event(event: Any) -> bool:
    """Whether ``event`` has the shape of a ``messages`` or a ``progress`` event."""
    return (event.__class__ is tuple and len(event) in (2, 3) and event[0].__class__ is str
            and len(event) == {"messages": 3, "progress": 2}.get(event[0]))


def _shown(event: Any) -> str:
    """``repr(event)``, cut to 80 characters."""
    text = repr(event)
    return text if len(text) <= 80 else text[:77] + "..."


def _progress(number: int, changes: Any) -> list:
    """The ``(time, delta)`` pairs of log ``number``'s progress event, as a list; a
    ValueError naming the log and the event if they are not pairs with int deltas.

    >>> _progress(0, [(1, 1), (0, -1)])
    [(1, 1), (0, -1)]
    >>> _progress(2, [(1, "x")])
    Traceback (most recent call last):
    ValueError: replay: log 2 gave progress [(1, 'x')], which is not a list of (time, delta) pairs with int deltas
    """
    try:
        pairs = list(changes)
        if all(pair.__class__ is tuple and len(pair) == 2 and isinstance(pair[1], int)
               for pair in pairs):
            return pairs
    except TypeError:
        pass
    raise ValueError(f"replay: log {number} gave progress {_shown(changes)}, which is not a "
                     f"list of (time, delta) pairs with int deltas")


class CaptureOps(StreamCore):
    """``probe``, ``probe_with``, ``capture`` and ``capture_into``."""

    __slots__ = ()

    def probe_with(self, handle: ProbeHandle) -> Self:
        """Adds this stream's frontier to ``handle``; returns the stream for chaining.

        >>> import sparktimely as st
        >>> probe = st.ProbeHandle()
        >>> _ = st.example(lambda scope: scope.to_stream([1]).probe_with(probe).capture())
        >>> probe.done()
        True
        """
        require_type("probe_with", handle, ProbeHandle, "a st.ProbeHandle")
        minimum = self.scope.kind.minimum()
        if handle._minimum is None:
            handle._minimum = minimum
        elif type(handle._minimum) is not type(minimum) or \
                repr(handle._minimum) != repr(minimum):
            raise TypeError(f"probe_with: the probe watches streams of times like "
                            f"{handle._minimum!r}, and this stream's times are like "
                            f"{minimum!r}: one probe answers for one type of time (use a "
                            f"probe per type)")

        def logic(input: Any) -> None:
            for _ in input:
                pass
        frontier = sink_operator(self, Pipeline, "Probe", logic).frontier
        handle.watch(frontier)
        self.scope.on_drop(lambda: handle.unwatch(frontier))   # a dropped dataflow holds none
        return self

    def probe(self) -> ProbeHandle:
        """A handle reporting which times may still appear on this stream.

        >>> import sparktimely as st
        >>> probe = st.example(lambda scope: scope.to_stream([1]).probe())
        >>> probe.done()
        True
        """
        handle = ProbeHandle()
        self.probe_with(handle)
        return handle

    def capture(self) -> Capture:
        """Records everything the stream carries on this worker.

        >>> import sparktimely as st
        >>> st.example(lambda scope: scope.to_stream([2, 1]).capture()).extract()
        [(0, [1, 2])]
        """
        captured = Capture()

        def logic(input: Any) -> None:
            for cap, batch in input:
                captured._record(cap.time, batch)
        self.sink(Pipeline, "Capture", logic)
        return captured

    def capture_into(self, pusher: EventPusher) -> None:
        """Sends the stream's events on this worker to ``pusher.push(event)``: frontier
        changes and batches (see the module's description), for ``replay_into``.

        >>> import sparktimely as st
        >>> link = st.EventLink()
        >>> st.example(lambda scope: scope.to_stream([7]).capture_into(link))
        >>> [link.next() for _ in range(3)]
        [('messages', 0, [7]), ('progress', [(0, -1)]), None]
        """
        seen = [self.scope.kind.minimum()]
        flush: Callable[[], Any] = getattr(pusher, "flush", lambda: None)
        close: Callable[[], Any] = getattr(pusher, "close", lambda: None)

        def logic(input: Any) -> None:
            frontier = input.frontier.frontier()
            changed = frontier != seen
            if changed:
                pusher.push(("progress", [(t, -1) for t in seen if t not in frontier] +
                             [(t, 1) for t in frontier if t not in seen]))
                seen[:] = frontier
            for cap, batch in input:
                pusher.push(("messages", cap.time, batch))
            flush()
            if changed and not frontier:
                close()
        self.sink(Pipeline, "CaptureInto", logic)
