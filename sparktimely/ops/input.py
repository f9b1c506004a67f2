"""Where streams start: input handles, ``to_stream``, ``empty`` and unordered inputs
(timely's ``input``, ``to_stream``, ``empty`` and ``unordered_input``)."""
from __future__ import annotations

import weakref
from typing import Any, Callable, Iterable, Iterator, TypeVar

from ..dataflow import InputHandle, OperatorBuilder, source
from ..dataflow.capability import Capability, CapabilityError
from ..dataflow.containers import arrow_batches
from ..dataflow.ports import BATCH_SIZE, Ended, OutputHandle, Session
from ..dataflow.scope import ScopeCore
from ..dataflow.stream import StreamCore
from ..errors import require_type

S = TypeVar("S", bound=StreamCore)


class UnorderedHandle(OutputHandle):
    """Sends into an unordered input at any time its capabilities allow, from outside the
    dataflow: ``with handle.session(cap) as s: s.give(x)`` (see
    ``Scope.new_unordered_input``). Records are handed over when the session ends or fills
    up.

    >>> import sparktimely as st
    >>> def job(worker):
    ...     (handle, cap), probe = worker.dataflow(
    ...         lambda scope: (lambda hc_s: (hc_s[0], hc_s[1].probe()))(scope.new_unordered_input()))
    ...     with handle.session(cap.delayed(1)) as session:
    ...         session.give_iterator(iter(range(3)))
    ...     cap.downgrade(2)
    ...     worker.step_while(lambda: probe.less_than(2))
    ...     cap.drop()
    ...     return probe.frontier()
    >>> st.execute_directly(job)
    [2]
    """

    __slots__ = ()

    def session(self, capability: Capability) -> "UnorderedSession":  # type: ignore[override]
        """A session sending at ``capability``'s time (use it with ``with``, or call its
        ``flush()``). It holds that time itself (a capability of its own) from when it is
        opened until its first flush or its end, and again while it buffers records given
        after: records it has accepted are never late, though the capability it was opened
        with is downgraded meanwhile.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     (handle, cap), captured = worker.dataflow(lambda scope: (lambda hc_s: (
        ...         hc_s[0], hc_s[1].capture()))(scope.new_unordered_input()))
        ...     with handle.session(cap.delayed(3)) as session:
        ...         session.give("at 3")
        ...     cap.drop()
        ...     return captured
        >>> st.execute_directly(job).extract()
        [(3, ['at 3'])]
        """
        return UnorderedSession(self, self._time_of(capability), capability)

    def _defer(self, time: Any, records: Iterator[Any]) -> None:
        while batch := [x for _, x in zip(range(BATCH_SIZE), records)]:
            self._port.push(time, batch)


_OVER = Ended("this session of an unordered input has ended (its with block exited): open "
              "another with handle.session(capability)")


class UnorderedSession(Session):
    """A session of an unordered input (:meth:`UnorderedHandle.session`). As timely's owns
    its capability, it holds its time while records it accepted wait to be sent: from when
    it is opened until its first flush, and from a later give until the next flush. A give
    after a flush holds the time again through the capability the session was opened with,
    which must still allow it (else a CapabilityError: nothing is accepted at a time no
    capability holds).

    >>> import sparktimely as st
    >>> def job(worker):
    ...     (handle, cap), probe = worker.dataflow(
    ...         lambda scope: (lambda hc_s: (hc_s[0], hc_s[1].probe()))(scope.new_unordered_input()))
    ...     session = handle.session(cap.delayed(1))
    ...     session.give("a")
    ...     cap.drop()                      # the session still holds time 1 for "a"
    ...     worker.step()
    ...     held = probe.frontier()
    ...     session.flush()                 # "a" is sent: time 1 can complete
    ...     worker.run()
    ...     return held, probe.frontier()
    >>> st.execute_directly(job)
    ([1], [])
    """

    __slots__ = ("_capability", "_opener")

    def __init__(self, handle: UnorderedHandle, time: Any, capability: Capability) -> None:
        super().__init__(handle, time)
        self._capability: Capability | None = capability.delayed(time)
        self._opener = weakref.ref(capability)

    def _hold(self) -> None:
        """Hold the session's time again (a give after a flush), through its opener."""
        if self._buffer.__class__ is Ended:
            self._buffer.refuse()
        opener = self._opener()
        try:
            held = None if opener is None else opener.try_delayed(self._time)
        except CapabilityError:                 # dropped
            held = None
        if held is None:
            raise CapabilityError(
                f"this session of an unordered input was flushed, and the capability it was "
                f"opened with no longer allows its time {self._time!r} (dropped, downgraded or "
                f"collected): give records before the flush, or open a new session")
        self._capability = held

    def give(self, record: Any) -> None:
        if self._capability is None:
            self._hold()
        super().give(record)

    def give_iterator(self, records: Iterable[Any]) -> None:
        if self._capability is None:
            self._hold()
        super().give_iterator(records)

    def give_iterator_later(self, records: Iterable[Any]) -> None:
        if self._capability is None:
            self._hold()
        super().give_iterator_later(records)

    def give_batch(self, batch: Any) -> None:
        if self._capability is None:
            self._hold()
        super().give_batch(batch)

    def flush(self) -> None:
        """Send the buffered records, then let the session's time go."""
        self._send_buffered()
        capability, self._capability = self._capability, None
        if capability is not None:
            capability.drop()

    def __exit__(self, *exc: object) -> None:
        self.flush()
        self._buffer = _OVER

    def __del__(self) -> None:
        if getattr(self, "_capability", None) is not None:
            self.flush()


def _as_batches(items: Any) -> list:
    if not hasattr(items, "schema"):                       # not a pyarrow Table or RecordBatch
        items = list(items)
    arrow = arrow_batches(items, what="to_stream")
    if arrow is not None:
        return arrow[0]
    return [items[i:i + BATCH_SIZE] for i in range(0, len(items), BATCH_SIZE)]


class InputScope(ScopeCore[S]):
    """``new_input``, ``input_from``, ``to_stream``, ``empty`` and ``new_unordered_input``."""

    def to_stream(self, iterable: Iterable[Any]) -> S:
        """A stream of the items of ``iterable`` at the minimum time, produced on every worker. A
        collection (or a pyarrow Table or RecordBatch) is sent at once; an iterator is
        consumed lazily, in batches, as downstream takes them.

        >>> import sparktimely as st
        >>> st.example(lambda scope: scope.to_stream("abc").capture()).extract()
        [(0, ['a', 'b', 'c'])]
        >>> st.example(lambda scope: scope.to_stream(x * x for x in range(3)).capture()).extract()
        [(0, [0, 1, 4])]
        """
        lazy = isinstance(iterable, Iterator)
        if not lazy and not isinstance(iterable, Iterable) and not hasattr(iterable, "schema"):
            raise TypeError(f"to_stream: items must be an iterable of records (or a pyarrow "
                            f"Table or RecordBatch), got {type(iterable).__name__} {iterable!r}")
        batches = [] if lazy else _as_batches(iterable)

        def ctor(capability: Capability, info: Any) -> Callable[[Any], None]:
            def logic(output: OutputHandle) -> None:
                session = output.session(capability)
                if lazy:
                    session.give_iterator_later(iterable)
                for batch in batches:
                    session.give_batch(batch)
                batches.clear()
                capability.drop()
            return logic
        return source(self, "ToStream", ctor)

    def empty(self) -> S:
        """A stream that never carries anything (timely's ``empty``).

        >>> import sparktimely as st
        >>> st.example(lambda scope: scope.empty().capture()).extract()
        []
        """
        def ctor(capability: Capability, info: Any) -> Callable[[Any], None]:
            capability.drop()
            return lambda output: None
        return source(self, "Empty", ctor)

    def new_input(self) -> tuple[InputHandle, S]:
        """A new input handle and the stream of what is sent into it.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     input, captured = worker.dataflow(
        ...         lambda scope: (lambda h_s: (h_s[0], h_s[1].capture()))(scope.new_input()))
        ...     input.send("hi")
        ...     input.close()
        ...     worker.run()
        ...     return captured.extract()
        >>> st.execute_directly(job)
        [(0, ['hi'])]
        """
        handle = InputHandle()
        return handle, self.input_from(handle)

    def input_from(self, handle: InputHandle) -> S:
        """The stream of what is sent into ``handle`` (one handle may feed several dataflows).

        >>> import sparktimely as st
        >>> def job(worker):
        ...     input = st.InputHandle()
        ...     captured = worker.dataflow(lambda scope: scope.input_from(input).capture())
        ...     input.send_batch([1, 2])
        ...     input.close()
        ...     worker.run()
        ...     return captured.extract()
        >>> st.execute_directly(job)
        [(0, [1, 2])]
        """
        require_type("input_from", handle, InputHandle,
                     "an input handle (st.InputHandle, dd.InputSession's, win.EventTimeInput)")
        if self.kind.depth:
            raise ValueError("inputs can only be created in a dataflow's top-level scope")
        builder = OperatorBuilder("Input", self)
        _, stream = builder.new_output()
        builder.set_notify(False)

        def ctor(capabilities: list[Capability]) -> Callable[[list], None]:
            capabilities[0].drop()
            return lambda frontiers: None
        builder.build(ctor)
        handle.bind(stream.port)
        self.dataflow.add_input_handle(handle, builder.index)
        return stream

    def new_unordered_input(self) -> tuple[tuple[UnorderedHandle, Capability], S]:
        """An input that accepts records at several times at once (timely's
        ``new_unordered_input``): returns ``((handle, capability), stream)``. Send with
        ``handle.session(cap)`` for any capability derived from ``capability``
        (``delayed``, ``downgrade``); the stream's frontier follows the capabilities held,
        so drop them when done.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     (handle, cap), captured = worker.dataflow(lambda scope: (lambda hc_s: (
        ...         hc_s[0], hc_s[1].capture()))(scope.new_unordered_input()))
        ...     for time in (5, 2):
        ...         with handle.session(cap.delayed(time)) as session:
        ...             session.give(f"at {time}")
        ...     cap.drop()
        ...     worker.run()
        ...     return captured.extract()
        >>> st.execute_directly(job)
        [(2, ['at 2']), (5, ['at 5'])]
        """
        if self.kind.depth:
            raise ValueError("inputs can only be created in a dataflow's top-level scope")
        builder = OperatorBuilder("UnorderedInput", self)
        output, stream = builder.new_output()
        builder.set_notify(False)
        held: list[Capability] = []

        def ctor(capabilities: list[Capability]) -> Callable[[list], None]:
            held.append(capabilities[0])
            return lambda frontiers: None
        builder.build(ctor)
        self.dataflow.add_unordered_input(builder.index)
        # (popped: the builder keeps ``ctor`` and its list for the operator's life, and the
        # capability must go when the caller lets go of it, as any capability does)
        return (UnorderedHandle(output.port, 0), held.pop()), stream


