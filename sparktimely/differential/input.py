"""Input sessions: insertions and removals at a time that only moves forward.

>>> import sparktimely as st, sparktimely.differential as dd
>>> def job(worker):
...     words = dd.InputSession()
...     counts = worker.dataflow(lambda scope: words.to_collection(scope).count().inner.capture())
...     words.insert("a"); words.insert("a"); words.advance_to(1)
...     words.remove("a"); words.close()
...     worker.run()
...     return counts.extract()
>>> st.execute_directly(job)
[(0, [(('a', 2), 0, 1)]), (1, [(('a', 1), 1, 1), (('a', 2), 1, -1)])]
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..dataflow import InputHandle
from ..dataflow.containers import large_layouts
from ..progress.timestamp import TimeKind, Timestamp, join, less_equal, relation
from .collection import Collection
from .updates import DIFF, diff_last

if TYPE_CHECKING:
    from ..ops import Scope

FLUSH_EVERY = 4096
"""Updates buffered by a session before they are handed to the dataflow."""


class _UpdatesHandle(InputHandle):
    """The handle of an :class:`InputSession`: its batches of ``(data, time, diff)`` move
    their times with them."""

    @classmethod
    def retimed(cls, batch: Any, time: Timestamp) -> Any:
        if batch.__class__ is not list:
            return batch                    # Arrow updates are at their message's time
        return [(data, join(at, time), diff) for data, at, diff in batch]


class InputSession:
    """Feeds updates into a collection. ``insert(x)``/``remove(x)``/``update(x, diff)`` happen
    at the session's time; ``advance_to(t)`` moves it forward (sending what is buffered and
    letting earlier times complete); ``close()`` ends the input.

    One session may feed several dataflows; a dataflow connected later sees the updates sent
    after it was connected (as timely's input handles do). With several workers each worker
    has its own session: the collection is the sum of what all of them send. ``name`` is how
    its errors name it (``InputSession`` unless given):

    >>> import sparktimely.differential as dd
    >>> dd.InputSession("edges").update(("a", "b"), 0.5)
    Traceback (most recent call last):
    ...
    TypeError: edges.update: the diff of ('a', 'b') must be an integer, not 0.5

    >>> import sparktimely as st, sparktimely.differential as dd
    >>> def job(worker):
    ...     session = dd.InputSession()
    ...     out = worker.dataflow(lambda scope: session.to_collection(scope).inner.capture())
    ...     session.update("x", 3)
    ...     session.advance_to(2)
    ...     session.update_at("y", 5, -1)
    ...     session.close()
    ...     worker.run()
    ...     return [u for _, updates in out.extract() for u in updates]
    >>> st.execute_directly(job)
    [('x', 0, 3), ('y', 5, -1)]
    """

    def __init__(self, name: str = "InputSession") -> None:
        self.name = name
        self._handle = _UpdatesHandle(name)
        self._time: Timestamp | None = None
        self._kind: TimeKind | None = None
        self._buffer: list = []
        self._diff_schema: tuple[pa.Schema, bool] | None = None   # see _diff_cast

    def to_collection(self, scope: "Scope") -> Collection:
        """The collection of this session's updates, in ``scope`` (a top-level scope).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     session = dd.InputSession()
        ...     out = worker.dataflow(lambda scope: session.to_collection(scope).inner.capture())
        ...     session.insert("a")
        ...     session.close()
        ...     worker.run()
        ...     return [update for _, updates in out.extract() for update in updates]
        >>> st.execute_directly(job)
        [('a', 0, 1)]
        """
        self._send()            # buffered updates go to the dataflows already fed, not to this one
        collection = Collection(scope.input_from(self._handle))
        if self._time is None:
            self._time = scope.kind.minimum()
        self._kind = scope.kind
        return collection

    def time(self) -> Timestamp:
        """The time of updates made now.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     session = dd.InputSession()
        ...     worker.dataflow(lambda scope: session.to_collection(scope).probe())
        ...     before = session.time()
        ...     session.advance_to(5)
        ...     session.close()
        ...     return before, session.time()
        >>> st.execute_directly(job)
        (0, 5)
        """
        return self._handle.time() if self._time is None else self._time

    def insert(self, x: Any) -> None:
        """Add one record ``x``.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     session = dd.InputSession()
        ...     out = worker.dataflow(lambda scope: session.to_collection(scope).inner.capture())
        ...     session.insert("a"); session.insert("a")
        ...     session.close()
        ...     worker.run()
        ...     return [update for _, updates in out.extract() for update in updates]
        >>> st.execute_directly(job)
        [('a', 0, 1), ('a', 0, 1)]
        """
        self._update(x, 1, "insert")

    def remove(self, x: Any) -> None:
        """Remove one record ``x``.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     session = dd.InputSession()
        ...     out = worker.dataflow(lambda scope: session.to_collection(scope).inner.capture())
        ...     session.insert("a"); session.advance_to(1); session.remove("a")
        ...     session.close()
        ...     worker.run()
        ...     return [update for _, updates in out.extract() for update in updates]
        >>> st.execute_directly(job)
        [('a', 0, 1), ('a', 1, -1)]
        """
        self._update(x, -1, "remove")

    def update(self, x: Any, diff: int) -> None:
        """Change the multiplicity of ``x`` by the integer ``diff``.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     session = dd.InputSession()
        ...     out = worker.dataflow(lambda scope: session.to_collection(scope).inner.capture())
        ...     session.update("a", 3); session.update("b", -1)
        ...     session.close()
        ...     worker.run()
        ...     return [update for _, updates in out.extract() for update in updates]
        >>> st.execute_directly(job)
        [('a', 0, 3), ('b', 0, -1)]
        """
        self._update(x, diff, "update")

    def _update(self, data: Any, diff: int, action: str) -> None:
        """:meth:`update`, its errors naming the call ``action``."""
        self._check_open(action)
        if diff.__class__ is not int:
            raise TypeError(f"{self.name}.update: the diff of {data!r} must be an integer, "
                            f"not {diff!r}")
        if not self._buffer:
            self._check_connected(action)
            self._handle.check_kind(False, f"{self.name}.{action}")
        self._buffer.append((data, self.time(), diff))
        if len(self._buffer) >= FLUSH_EVERY:
            self._send()

    def update_at(self, x: Any, time: Timestamp, diff: int) -> None:
        """Change the multiplicity of ``x`` by ``diff`` at ``time``, which must not be
        before the session's time.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     session = dd.InputSession()
        ...     out = worker.dataflow(lambda scope: session.to_collection(scope).inner.capture())
        ...     session.update_at("later", 7, 1)
        ...     session.close()
        ...     worker.run()
        ...     return [update for _, updates in out.extract() for update in updates]
        >>> st.execute_directly(job)
        [('later', 7, 1)]
        """
        self._check_open("update_at")
        if diff.__class__ is not int:
            raise TypeError(f"{self.name}.update_at: the diff of {x!r} must be an "
                            f"integer, not {diff!r}")
        self._check_time("update_at", time)
        if not self._buffer:
            self._check_connected("update_at")
            self._handle.check_kind(False, f"{self.name}.update_at")
        now = self.time()
        if not less_equal(now, time):
            raise ValueError(f"{self.name}.update_at({x!r}, {time!r}, {diff}): the time "
                             f"is before the session's time {now!r} (times go forward only)")
        self._buffer.append((x, time, diff))
        if len(self._buffer) >= FLUSH_EVERY:
            self._send()

    def _check_time(self, action: str, time: Any) -> None:
        """Raise TypeError, naming ``action``, if ``time`` is not of the session's scope's
        type (a numpy integer, a float)."""
        if self._kind is not None:
            self._kind.check(time, where=f"{self.name}.{action}")

    def _check_open(self, action: str) -> None:
        if self._handle.closed:
            raise RuntimeError(f"{self.name}.{action}: the session is closed (no updates "
                               f"after close())")

    def _check_connected(self, action: str) -> None:
        if not self._handle.connected:
            raise RuntimeError(f"{self.name}.{action}: the session feeds no dataflow yet: "
                               f"build one with session.to_collection(scope) first (a "
                               f"dataflow sees only the updates made after it was connected)")

    def update_batch(self, batch: Any) -> None:
        """Arrow collections: send a ``pyarrow.RecordBatch`` (or Table) whose int64
        ``diff`` column holds each row's diff, at the session's time.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> import pyarrow as pa
        >>> def job(worker):
        ...     session = dd.InputSession()
        ...     out = worker.dataflow(lambda scope: session.to_collection(scope).inner.capture())
        ...     session.update_batch(pa.table({"word": ["a", "b"], "diff": [2, -1]}))
        ...     session.close()
        ...     worker.run()
        ...     return [table.to_pydict() for _, table in out.extract()]
        >>> st.execute_directly(job)
        [{'word': ['a', 'b'], 'diff': [2, -1]}]
        """
        self._check_open("update_batch")
        self._check_connected("update_batch")
        self._send()                         # what was accepted goes, whatever follows
        if not isinstance(batch, (pa.RecordBatch, pa.Table)):
            raise TypeError(f"{self.name}.update_batch: expected a pyarrow.RecordBatch or "
                            f"Table with a '{DIFF}' column, got {batch!r:.80} "
                            f"({type(batch).__name__}); Python records go by insert, remove "
                            f"and update")
        self._handle.check_kind(True, f"{self.name}.update_batch")
        cast = self._diff_cast(batch.schema)      # raises for a missing or non-integer diff
        nulls = batch.column(DIFF).null_count
        if nulls:
            row = batch.column(DIFF).to_pylist().index(None)
            raise ValueError(f"{self.name}.update_batch: the '{DIFF}' column has {nulls} "
                             f"null{'s' if nulls > 1 else ''} (the first in row {row}); every "
                             f"row needs its diff")
        if cast:
            index = batch.schema.names.index(DIFF)
            batch = batch.set_column(index, DIFF, batch.column(index).cast(pa.int64()))
        batch = diff_last(large_layouts(batch))
        self._handle.check_schema(batch.schema, f"{self.name}.update_batch")
        self._handle.send_batch(batch)

    def _diff_cast(self, schema: pa.Schema) -> bool:
        """Whether the ``diff`` column of batches of ``schema`` must be cast to int64; raise
        unless it is an integer column. Looked at once per schema (an update of a few rows
        would spend more on this look than the dataflow spends on its rows)."""
        known = self._diff_schema
        if known is not None and schema.equals(known[0]):
            return known[1]
        names = schema.names
        if DIFF not in names:
            raise ValueError(f"{self.name}.update_batch: the batch has no '{DIFF}' column "
                             f"(columns: {', '.join(names)})")
        kind = schema.field(DIFF).type
        if not pa.types.is_integer(kind):
            raise TypeError(f"{self.name}.update_batch: the '{DIFF}' column must be int64, "
                            f"not {kind}")
        self._diff_schema = (schema, kind != pa.int64())
        return self._diff_schema[1]

    def _send(self) -> None:
        if self._buffer:
            buffer, self._buffer = self._buffer, []
            self._handle.send_batch(buffer)

    def flush(self) -> None:
        """Hand buffered updates to the dataflows and tell them the session's time.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     session = dd.InputSession()
        ...     seen = []
        ...     worker.dataflow(lambda scope: session.to_collection(scope).inspect(seen.append).probe())
        ...     session.insert("a")
        ...     worker.step(); before = list(seen)         # still buffered in the session
        ...     session.flush(); worker.step()
        ...     session.close()
        ...     return before, seen
        >>> st.execute_directly(job)
        ([], [('a', 0, 1)])
        """
        self._send()
        self._handle.flush()

    def advance_to(self, t: Timestamp) -> None:
        """Move the session's time forward to ``time`` (sending what is buffered): every
        earlier time can then complete.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     session = dd.InputSession()
        ...     probe = worker.dataflow(lambda scope: session.to_collection(scope).probe())
        ...     session.advance_to(2)
        ...     worker.step_while(lambda: probe.less_than(2))    # times 0 and 1 are complete
        ...     session.close()
        ...     return probe.frontier()
        >>> st.execute_directly(job)
        [2]
        """
        self._check_time("advance_to", t)
        now = self._time                    # None: never connected nor advanced
        if now is not None and not less_equal(now, t):
            raise ValueError(f"{self.name}.advance_to({t!r}): {t!r} is "
                             f"{relation(t, now)} the session's time {now!r}; a session "
                             f"advances only to times at or after it")
        self._send()
        self._handle.advance_to(t)
        self._time = t

    def close(self) -> None:
        """Send what is buffered and end the input: its collections can complete.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     session = dd.InputSession()
        ...     probe = worker.dataflow(lambda scope: session.to_collection(scope).probe())
        ...     session.close()
        ...     worker.run()                                    # completes: the input has ended
        ...     return probe.done()
        >>> st.execute_directly(job)
        True
        """
        self._send()
        self._handle.close()

    def __del__(self) -> None:
        if getattr(self, "_buffer", None) is not None:
            try:
                self.close()
            except RuntimeError:
                pass
