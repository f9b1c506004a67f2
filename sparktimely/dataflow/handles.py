"""Handles that connect a dataflow to the program driving it: inputs, probes and loops."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar

from ..progress.frontier import Antichain, MutableAntichain
from ..progress.timestamp import Timestamp, less_equal, relation
from .builder import connect
from .capability import Capability
from .channels import Pipeline
from .containers import arrow_batches, check_schema
from .ports import BATCH_SIZE, OutputPort, batch_length, own_copy

R = TypeVar("R")

if TYPE_CHECKING:
    import pyarrow as pa

    from .ports import InputPort
    from .stream import StreamCore


class InputHandle:
    """Feeds records into dataflows at a time that only moves forward. ``name`` identifies
    it in messages (such as the hint about an input that was never closed).

    >>> import sparktimely as st
    >>> def job(worker):
    ...     input = st.InputHandle()
    ...     captured = worker.dataflow(lambda scope: scope.input_from(input).capture())
    ...     for round in range(3):
    ...         input.send(round * 10)
    ...         input.advance_to(round + 1)
    ...     input.close()
    ...     worker.run()
    ...     return captured.extract()
    >>> st.execute_directly(job)
    [(0, [0]), (1, [10]), (2, [20])]
    """

    def __init__(self, name: str = "input") -> None:
        self.name = name
        self._time: Timestamp | None = None
        self._buffer: list = []
        self._bound: list[tuple[OutputPort, Capability]] = []
        self._connected = False          # bound once (its dataflows may be dropped since)
        self._closed = False
        self._schema = None                # of the Arrow batches sent, if any were
        self._records_sent = False

    @classmethod
    def retimed(cls, batch: Any, time: Timestamp) -> Any:
        """``batch`` as sent at ``time`` instead of the earlier time it was sent at (what a
        resumed run does with records between its inputs' last epoch and its checkpoint's,
        see ``sparktimely.io``): the same batch; handles whose records carry times of their
        own (a differential ``InputSession``) move those too. A class method: whoever keeps
        it must not keep the handle alive (a dropped handle closes its input).

        >>> import sparktimely as st
        >>> st.InputHandle.retimed([1, 2], 5)
        [1, 2]
        """
        return batch

    def bind(self, port: OutputPort) -> None:
        """Feed the input operator whose output is ``port`` (what ``scope.input_from`` does
        for each dataflow the handle feeds). Records still buffered go to the dataflows
        already fed first, as timely's ``register`` flushes: a new dataflow sees only what is
        sent after it was connected.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     input = st.InputHandle()
        ...     first = worker.dataflow(lambda scope: scope.input_from(input).capture())
        ...     input.send("a")                 # buffered: the next bind flushes it to `first`
        ...     second = worker.dataflow(lambda scope: scope.input_from(input).capture())
        ...     input.send("b")
        ...     input.close()
        ...     return first, second
        >>> [captured.extract() for captured in st.execute_directly(job)]
        [[(0, ['a', 'b'])], [(0, ['b'])]]
        """
        if self._closed:
            raise RuntimeError("cannot connect a closed InputHandle to a dataflow")
        self.flush()
        if self._time is None:
            self._time = port.kind.minimum()
        else:
            told = ("it feeds dataflows of another type of time already" if self._connected
                    else "advanced to it before connected")
            port.kind.check(self._time, where=f"{self.name} ({told})")
        self._bound.append((port, Capability(self._time, port)))
        self._connected = True

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called.

        >>> import sparktimely as st
        >>> input = st.InputHandle()
        >>> input.close()
        >>> input.closed
        True
        """
        return self._closed

    @property
    def connected(self) -> bool:
        """Whether the handle was ever connected to a dataflow (``scope.input_from``).

        >>> import sparktimely as st
        >>> def job(worker):
        ...     input = st.InputHandle()
        ...     before = input.connected
        ...     worker.dataflow(lambda scope: scope.input_from(input))
        ...     input.close()
        ...     return before, input.connected
        >>> st.execute_directly(job)
        (False, True)
        """
        return self._connected

    def time(self) -> Timestamp:
        """The time at which records sent now are stamped.

        >>> import sparktimely as st
        >>> input = st.InputHandle()
        >>> input.advance_to(3)            # not connected: kept for the dataflows it will feed
        >>> input.time()
        3
        """
        return 0 if self._time is None else self._time

    def _check_open(self, action: str) -> None:
        if self._closed:
            raise RuntimeError(f"{self.name}.{action}: the input handle is closed (nothing is "
                               f"sent after close())")
        if not self._connected:
            raise RuntimeError(f"{self.name}.{action}: the input handle is not connected to "
                               f"a dataflow (use scope.input_from(handle) first)")

    def send(self, x: Any) -> None:
        """Send one record at the current time.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     input = st.InputHandle()
        ...     captured = worker.dataflow(lambda scope: scope.input_from(input).capture())
        ...     for x in "ab":
        ...         input.send(x)
        ...     input.close()
        ...     return captured
        >>> st.execute_directly(job).extract()
        [(0, ['a', 'b'])]
        """
        self._check_open("send")
        buffer = self._buffer
        if not buffer:
            self.check_kind(False, f"{self.name}.send")
        buffer.append(x)
        if len(buffer) >= BATCH_SIZE:
            self.flush()

    def send_batch(self, items: Iterable[Any]) -> None:
        """Send a batch of records (a list, any iterable, or a pyarrow.RecordBatch or Table,
        whose schema must be that of the first Arrow batch sent).

        >>> import sparktimely as st
        >>> def job(worker):
        ...     input = st.InputHandle()
        ...     captured = worker.dataflow(lambda scope: scope.input_from(input).capture())
        ...     input.send_batch(range(3))
        ...     input.close()
        ...     return captured
        >>> st.execute_directly(job).extract()
        [(0, [0, 1, 2])]
        """
        self._check_open("send_batch")
        if not hasattr(items, "__iter__") and not hasattr(items, "schema"):
            raise TypeError(f"{self.name}.send_batch: expected a list or iterable of records, "
                            f"or a pyarrow.RecordBatch or Table, got {items!r:.80} "
                            f"({type(items).__name__})")
        arrow = arrow_batches(items, self._schema, "InputHandle.send_batch")
        if arrow is None:
            batches = [list(items)]
            if batches[0]:
                self.check_kind(False, f"{self.name}.send_batch")
        else:
            self.check_kind(True, f"{self.name}.send_batch")
            batches, self._schema = arrow
        self.flush()
        for batch in batches:
            if batch_length(batch):
                self._push(batch)

    def check_kind(self, arrow: bool, where: str) -> None:
        """Raise TypeError, naming ``where``, if sending Arrow batches (``arrow``) or Python
        records (not ``arrow``) would mix the two on this input: a stream carries one kind.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     input = st.InputHandle()
        ...     worker.dataflow(lambda scope: scope.input_from(input))
        ...     input.send(1)
        ...     input.check_kind(False, "more records")        # records after records: fine
        ...     input.close()
        ...     input.check_kind(True, "an Arrow batch")
        >>> st.execute_directly(job)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        TypeError: an Arrow batch: cannot send Arrow batches on an input that has sent records: ...
        """
        if arrow:
            if not (self._buffer or self._records_sent):
                return
            these, those = "Arrow batches", "records"
        else:
            if self._schema is None:
                return
            these, those = "records", "Arrow batches"
        raise TypeError(f"{where}: cannot send {these} on an input that has sent {those}: a "
                        f"stream carries Python records or Arrow batches, not both (use an "
                        f"input of its own for each)")

    def check_schema(self, schema: pa.Schema, where: str) -> None:
        """Raise ValueError, naming ``where`` and both schemas, unless Arrow batches of
        ``schema`` may be sent on this input: that of the first Arrow batch sent (metadata
        aside), or any before one is.

        >>> import pyarrow as pa, sparktimely as st
        >>> def job(worker):
        ...     input = st.InputHandle()
        ...     worker.dataflow(lambda scope: scope.input_from(input))
        ...     input.send_batch(pa.record_batch({"x": [1]}))
        ...     input.close()
        ...     input.check_schema(pa.schema([("x", pa.string())]), "Mine.send")
        >>> st.execute_directly(job)
        Traceback (most recent call last):
        ValueError: Mine.send: the batch's schema (x: string) differs from the stream's schema (x: int64)
        """
        check_schema(self._schema, schema, where)

    def _forget(self, dataflow: Any) -> None:
        """Stop feeding ``dataflow`` (it was dropped)."""
        self._bound = [(port, cap) for port, cap in self._bound if port.dataflow is not dataflow]

    def _push(self, batch: Any) -> None:
        if batch.__class__ is list:
            self._records_sent = True
        last = len(self._bound) - 1
        for i, (port, _) in enumerate(self._bound):
            port.push(self._time, batch if i == last else own_copy(batch))

    def flush(self) -> None:
        """Hand buffered records to the dataflows now.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     input = st.InputHandle()
        ...     captured = worker.dataflow(lambda scope: scope.input_from(input).capture())
        ...     input.send("a")
        ...     worker.step()
        ...     before = captured.extract()         # "a" is still in the handle's buffer
        ...     input.flush()
        ...     worker.step()
        ...     input.close()
        ...     return before, captured.extract()
        >>> st.execute_directly(job)
        ([], [(0, ['a'])])
        """
        if self._buffer:
            batch, self._buffer = self._buffer, []
            self._push(batch)

    def advance_to(self, t: Timestamp) -> None:
        """Move the input's time forward to ``time``; earlier times can then complete. A
        handle not yet connected to a dataflow keeps the time for the dataflows it will
        feed, as timely's does.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     input = st.InputHandle()
        ...     captured = worker.dataflow(lambda scope: scope.input_from(input).capture())
        ...     input.send("a")
        ...     input.advance_to(3)                 # "a" stays at 0; what is sent now is at 3
        ...     input.send("b")
        ...     input.close()
        ...     return captured
        >>> st.execute_directly(job).extract()
        [(0, ['a']), (3, ['b'])]
        """
        if self._closed:
            raise RuntimeError("cannot advance_to: the input handle is closed")
        where = f"{self.name}.advance_to"        # its errors name the handle
        if self._bound:
            self._bound[0][0].kind.check(t, where=where)
        elif t.__class__ is bool or not (isinstance(t, int) or hasattr(t, "less_equal")):
            raise TypeError(f"{where}: {t!r} is no time (an int, a "
                            f"Product, or a type with less_equal)")
        if self._time is not None and not less_equal(self._time, t):
            raise ValueError(f"{where}({t!r}): {t!r} is {relation(t, self._time)} "
                             f"the input's time {self._time!r}; an input advances only to "
                             f"times at or after it")
        self.flush()
        for _, capability in self._bound:
            capability.downgrade(t)
        self._time = t

    def close(self) -> None:
        """Flush and release the input: its dataflows can then complete.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     input = st.InputHandle()
        ...     probe = worker.dataflow(lambda scope: scope.input_from(input).probe())
        ...     input.close()
        ...     worker.run()                        # returns: nothing holds the input's time
        ...     return input.closed, probe.done()
        >>> st.execute_directly(job)
        (True, True)
        """
        if self._closed:
            return
        if self._bound:
            self.flush()
        for _, capability in self._bound:
            capability.drop()
        self._closed = True

    def __del__(self) -> None:
        if getattr(self, "_bound", None) and not self._closed:
            self.close()


class ProbeHandle:
    """Observes the frontier of one or more streams from outside the dataflow.

    >>> import sparktimely as st
    >>> def job(worker):
    ...     input = st.InputHandle()
    ...     probe = worker.dataflow(lambda scope: scope.input_from(input).probe())
    ...     input.advance_to(5)
    ...     worker.step_while(lambda: probe.less_than(5))
    ...     return probe.frontier()
    >>> st.execute_directly(job)
    [5]
    """

    def __init__(self) -> None:
        self._frontiers: list[MutableAntichain] = []
        self._minimum: Timestamp | None = None     # of the streams probe_with gave it

    def watch(self, frontier: MutableAntichain) -> None:
        """Report ``frontier`` too (a probe operator's input frontier; what
        ``stream.probe_with`` adds).

        >>> import sparktimely as st
        >>> frontier = st.MutableAntichain()
        >>> _ = frontier.update_iter([(3, 1)])
        >>> probe = st.ProbeHandle()
        >>> probe.watch(frontier)
        >>> probe.frontier()
        [3]
        """
        self._frontiers.append(frontier)

    def unwatch(self, frontier: MutableAntichain) -> None:
        """Stop reporting ``frontier`` (its probe operator's dataflow was dropped, so it will
        not move again: timely's probe forgets a dropped operator's frontier too).

        >>> import sparktimely as st
        >>> frontier = st.MutableAntichain()
        >>> _ = frontier.update_iter([(3, 1)])
        >>> probe = st.ProbeHandle()
        >>> probe.watch(frontier); probe.unwatch(frontier)
        >>> probe.done()
        True
        """
        self._frontiers = [f for f in self._frontiers if f is not frontier]

    def less_than(self, t: Timestamp) -> bool:
        """True if data at some time earlier than ``time`` may still arrive.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     input = st.InputHandle()
        ...     probe = worker.dataflow(lambda scope: scope.input_from(input).probe())
        ...     input.advance_to(3)
        ...     worker.step_while(lambda: probe.less_than(3))
        ...     print(probe.less_than(3), probe.less_than(4))
        ...     input.close()
        >>> st.execute_directly(job)
        False True
        """
        try:
            for frontier in self._frontiers:
                if frontier.less_than(t):
                    return True
        except (AttributeError, TypeError) as error:
            raise self._mistyped("less_than", t, error) from None
        return False

    def less_equal(self, t: Timestamp) -> bool:
        """True if data at ``time`` or earlier may still arrive.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     input = st.InputHandle()
        ...     probe = worker.dataflow(lambda scope: scope.input_from(input).probe())
        ...     input.advance_to(3)
        ...     worker.step_while(lambda: probe.less_equal(2))
        ...     print(probe.less_equal(2), probe.less_equal(3))
        ...     input.close()
        >>> st.execute_directly(job)
        False True
        """
        try:
            for frontier in self._frontiers:
                if frontier.less_equal(t):
                    return True
        except (AttributeError, TypeError) as error:
            raise self._mistyped("less_equal", t, error) from None
        return False

    def _mistyped(self, call: str, time: Any, error: Exception) -> TypeError:
        """The error of comparing ``time`` with the probed times, which are of another type
        (an int against a loop's Product times, a string).

        >>> ProbeHandle()._mistyped("less_than", "a", TypeError("...")).args[0]
        "probe.less_than('a'): the probe compares times of the probed stream's scope, not strs: ..."
        """
        examples = self._antichain().elements()
        like = f"like {examples[0]!r}" if examples else "of the probed stream's scope"
        return TypeError(f"probe.{call}({time!r}): the probe compares times {like}, not "
                         f"{type(time).__name__}s: {error}")

    def done(self) -> bool:
        """True once no more data can arrive at all.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     input = st.InputHandle()
        ...     probe = worker.dataflow(lambda scope: scope.input_from(input).probe())
        ...     print(probe.done())
        ...     input.close()
        ...     return probe
        >>> st.execute_directly(job).done()
        False
        True
        """
        return all(frontier.is_empty() for frontier in self._frontiers)

    def frontier(self) -> list:
        """The times that may still arrive, as a list of incomparable times.

        >>> import sparktimely as st
        >>> frontier = st.MutableAntichain()
        >>> _ = frontier.update_iter([(st.Product(1, 2), 1), (st.Product(2, 1), 1)])
        >>> probe = st.ProbeHandle()
        >>> probe.watch(frontier)
        >>> sorted(probe.frontier())
        [Product(1, 2), Product(2, 1)]
        """
        return self._antichain().elements()

    def with_frontier(self, f: Callable[[Antichain], R]) -> R:
        """``f(frontier)`` with the frontier as an :class:`~sparktimely.Antichain`; returns
        what ``f`` returns.

        >>> import sparktimely as st
        >>> probe = st.example(lambda scope: scope.to_stream([1]).probe())
        >>> probe.with_frontier(lambda frontier: len(frontier))
        0
        """
        return f(self._antichain())

    def _antichain(self) -> Antichain:
        antichain = Antichain()
        for frontier in self._frontiers:
            antichain.extend(frontier.frontier())
        return antichain


class LoopHandle:
    """The input end of a feedback edge; close the loop with ``stream.connect_loop(handle)``.

    >>> import sparktimely as st
    >>> def build(scope):
    ...     handle, looped = scope.feedback(1)
    ...     stream = scope.to_stream([3]).concat(looped).map(lambda x: x - 1)
    ...     stream.filter(lambda x: x > 0).connect_loop(handle)
    ...     return stream.capture()
    >>> st.example(build).extract()
    [(0, [2]), (1, [1]), (2, [0])]
    """

    def __init__(self, scope, input: "InputPort", summary) -> None:
        self._scope = scope
        self._input = input
        self._connected = False
        # What is never closed, as the error says it (a layer above names its own loops).
        self.unclosed = (f"a feedback loop (summary {summary!r}) was never closed with "
                         f"stream.connect_loop(handle)")

    def connect(self, stream: "StreamCore") -> None:
        """Feed the loop from ``stream`` (what ``stream.connect_loop(handle)`` does).

        >>> import sparktimely as st
        >>> def build(scope):
        ...     handle, looped = scope.feedback(1)
        ...     less = scope.to_stream([2]).concat(looped).map(lambda x: x - 1)
        ...     handle.connect(less.filter(bool))
        ...     return looped.capture()
        >>> st.example(build).extract()
        [(1, [1])]
        """
        if self._connected:
            raise RuntimeError("this loop handle is already connected")
        if stream.scope is not self._scope:
            raise ValueError("connect_loop: the stream must be in the scope that created the loop")
        self._connected = True
        connect(stream.scope.dataflow, stream.port, self._input, Pipeline())

    def _check_connected(self) -> None:
        if not self._connected:
            raise RuntimeError(self.unclosed)
