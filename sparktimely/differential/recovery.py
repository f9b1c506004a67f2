"""Differential state in epoch checkpoints (``st.execute(..., checkpoint_dir=...)``).

Every trace an operator writes and keeps across epochs (an arrangement's, which ``join``,
``reduce`` and ``iterate`` read; ``reduce``'s, ``count``'s, ``distinct``'s and
``threshold``'s output trace; the traces inside an ``iterate``) is a :class:`TraceState`, a
keyed component of the checkpoints of :mod:`sparktimely.io`. Its snapshot is the trace's
updates as one Arrow table: one row per key (Python updates, pickled) or per update (Arrow
updates: the data columns, ``diff``, the time coordinates), with the route the
arrangement's exchange uses (``stable_hash(key)``; for Arrow rows the key columns'
``hash_rows`` shifted right by one), so a resumed run with another number of workers gets
each key where its exchange sends it. A resumed trace starts as one batch holding those
updates, complete up to the first epoch after the checkpoint; the operators that read it
see it as already acknowledged (it stands for the batches they had read before), so no
update is joined, counted or output twice. Updates an arrangement held back for later times
when the checkpoint was taken (given ahead of their batch's time, as ``update_at`` does) are
in its snapshot too, and go back to the arrangement, which seals them when their time
completes.

``trace.import_(scope)`` into another dataflow is not supported yet in a worker that
checkpoints (it raises NotImplementedError naming the trace and the dataflow): the two
dataflows checkpoint separately, and an import would need a position consistent with both.

>>> import tempfile, sparktimely as st, sparktimely.differential as dd
>>> directory = tempfile.mkdtemp()
>>> def job(worker, epoch, words):          # this run's words, at epoch ``epoch``
...     st.io.enable_checkpoints(worker, directory)
...     session = dd.InputSession()
...     counts = worker.dataflow(lambda scope: session.to_collection(scope).count()
...                              .inner.capture(), name="counts")
...     session.advance_to(epoch)
...     for word in words:
...         session.insert(word)
...     session.close()
...     worker.run()
...     return counts.extract()
>>> st.execute_directly(lambda worker: job(worker, 0, ["a", "b", "a"]))
[(0, [(('a', 2), 0, 1), (('b', 1), 0, 1)])]
>>> st.execute_directly(lambda worker: job(worker, 1, ["a"]))    # resumed: counts go on
[(1, [(('a', 2), 1, -1), (('a', 3), 1, 1)])]
"""
from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np
import pyarrow as pa

from ..hashing import hash_rows, stable_hash
from ..ops.recovery import KeyedState, epoch_time, recovery_of, root_epoch
from ..progress.timestamp import TimeKind
from .arrow.batch import DIFF, ArrowBatch, TIME_PREFIX, column_numpy, coordinate_kind
from .trace.batch import Batch, consolidate_updates
from .trace.handle import TraceAgent, TraceBox

if TYPE_CHECKING:
    from ..dataflow.scope import ScopeCore

__all__ = ["TraceState", "checkpointing", "latest_epoch", "restore_table", "trace_table"]

ROUTE = "__route"
"""The route column of a trace's snapshot (the arrangement's exchange route of each row)."""
ENTRY = "__entry"
"""The column of a Python trace's snapshot: one pickled ``(key, [(val, time, diff)])`` per row."""
KEY_PREFIX = "__key."
"""Prefix of the key columns of an Arrow trace's snapshot (the rest are values and ``diff``)."""
HELD = "__held"
"""The column of a Python trace's snapshot that marks the rows of updates its arrangement
held back for later times (present only when there are some)."""


def trace_table(batches: list, operator: str, held: Batch | None = None) -> pa.Table:
    """The updates of a trace's ``batches`` as one table with a :data:`ROUTE` column, and
    those of ``held`` (updates its arrangement holds back for later times) in rows marked
    :data:`HELD`.

    >>> b = Batch.from_updates([(("k", "v"), 0, 1)], [0], [1])
    >>> table = trace_table([b], "Example")
    >>> table.column_names, table.column(ROUTE).to_pylist() == [stable_hash("k")]
    (['__route', '__entry'], True)
    >>> trace_table([b], "Example", held=b).column(HELD).to_pylist()
    [False, True]
    """
    batches = [batch for batch in batches if len(batch)]
    if held is not None and len(held):
        rows = _python_rows(batches, operator)
        later = _python_rows([held], operator)
        return pa.concat_tables([
            rows.append_column(HELD, pa.array([False] * len(rows), pa.bool_())),
            later.append_column(HELD, pa.array([True] * len(later), pa.bool_()))])
    if not batches:
        return pa.table({ROUTE: pa.array([], pa.uint64())})
    if isinstance(batches[0], ArrowBatch):
        return pa.concat_tables([_arrow_rows(batch) for batch in batches],
                                promote_options="default")
    return _python_rows(batches, operator)


def _python_rows(batches: list, operator: str) -> pa.Table:
    per_key = _updates_by_key(item for batch in batches for item in batch.items())
    try:
        routes = [stable_hash(key) for key in per_key]
    except TypeError as error:
        raise TypeError(f"{operator}: a checkpoint routes each key by stable_hash: "
                        f"{error}") from None
    entries = [pickle.dumps(item, 5) for item in per_key.items()]
    return pa.table({ROUTE: pa.array(routes, pa.uint64()), ENTRY: pa.array(entries, pa.binary())})


def _updates_by_key(entries: Iterable[tuple[Any, list]]) -> dict:
    """``(key, updates)`` pairs (from several batches or workers) as one list of updates
    per key, concatenated in the order they come."""
    per_key: dict = {}
    for key, updates in entries:
        present = per_key.get(key)
        per_key[key] = updates if present is None else present + updates
    return per_key


def _arrow_rows(batch: ArrowBatch) -> pa.Table:
    data = batch.data
    keys = set(batch.key)
    table = data.rename_columns([KEY_PREFIX + n if n in keys else n for n in data.column_names])
    for i, coords in enumerate(batch.times):
        table = table.append_column(f"{TIME_PREFIX}{i}", pa.array(coords))
    return table.append_column(ROUTE, pa.array(batch.hashes >> np.uint64(1)))


def restore_table(table: pa.Table, kind: TimeKind, upper: list) -> tuple[Any, list]:
    """What a trace resumes from: the batch of the rows of ``table`` (made by
    :func:`trace_table`, possibly by several workers), consolidated, complete up to
    ``upper`` (None if empty); and the ``((key, val), time, diff)`` updates of its rows marked
    :data:`HELD`, which its arrangement held back for later times when the checkpoint was
    taken (Python updates: an Arrow arrangement seals every row it admitted before a
    checkpoint).

    >>> b = Batch.from_updates([(("k", "v"), 0, 1), (("k", "w"), 1, 1)], [0], [2])
    >>> held = Batch.from_updates([(("k", "u"), 5, 1)], [0], [2])
    >>> batch, later = restore_table(trace_table([b, b], "Example", held), TimeKind(int), [2])
    >>> batch.get("k"), later
    ([('v', 0, 2), ('w', 1, 2)], [(('k', 'u'), 5, 1)])
    >>> a = ArrowBatch.build(pa.table({"k": ["x", "y"], "diff": [1, 1]}),
    ...                      np.zeros((1, 2), np.int64), ["k"], [0], [1])
    >>> restore_table(trace_table([a, a], "Example"), TimeKind(int), [1])[0].data.to_pydict()
    {'k': ['x', 'y'], 'diff': [2, 2]}
    """
    if not table.num_rows:
        return None, []
    minimum = [kind.minimum()]
    if ENTRY in table.column_names:
        blobs = table.column(ENTRY).to_pylist()
        marks = table.column(HELD).fill_null(False).to_pylist() if HELD in table.column_names \
            else [False] * len(blobs)
        sealed, later = [], []
        for blob, held in zip(blobs, marks):
            key, updates = pickle.loads(blob)
            if held:
                later += [((key, v), t, d) for v, t, d in updates]
            else:
                sealed.append((key, updates))
        entries = _updates_by_key(sealed)
        data = {key: merged for key, updates in entries.items()
                if (merged := consolidate_updates(updates))}
        # ``since`` differs from ``lower``: merges consolidate keys it shares with new batches
        return (Batch.from_keyed(data, minimum, upper, since=upper) if data else None), later
    names = [n for n in table.column_names if n != ROUTE]
    time_names = [n for n in names if n.startswith(TIME_PREFIX)]
    columns = [n for n in names if n not in time_names]
    data_table = table.select(columns).rename_columns(
        [n[len(KEY_PREFIX):] if n.startswith(KEY_PREFIX) else n for n in columns])
    key = [n[len(KEY_PREFIX):] for n in columns if n.startswith(KEY_PREFIX)]
    times = np.vstack([column_numpy(table, n) for n in time_names])
    return ArrowBatch.build(data_table, times, key, minimum, upper, coordinate_kind(kind),
                            since=upper, consolidated=_distinct_rows(
                                table, [n for n in names if n != DIFF])), []


def _distinct_rows(table: pa.Table, columns: list) -> bool:
    """True if no two rows of ``table`` are equal in ``columns`` (their hashes all differ):
    then the rows, each from a consolidated batch, need no consolidating (a hash of every
    row and a sort cost a third of pyarrow's group_by); False when unsure."""
    hashes = np.sort(hash_rows(table, columns))
    return not np.any(hashes[1:] == hashes[:-1])


class TraceState(KeyedState):
    """The checkpointed state of one trace that an operator writes (see the module doc).

    ``on_start(upper, later)`` tells the operator, before any input, that the trace resumed
    complete up to ``upper`` (its next batch starts there; None when not resuming) and gives
    it back the updates it held for later times when the checkpoint was taken
    (``held_back()`` gives them as a batch to each snapshot). While the dataflow runs, the
    state keeps a handle on the trace, so that the checkpoint taken when the dataflow
    completes (after its readers let go) still holds the trace. That handle never holds
    compaction back: it listens to the trace and moves its logical compaction frontier to
    each upper the trace seals (a checkpoint resumes every trace at one frontier anyway).

    >>> import glob, os, tempfile, pyarrow as pa, sparktimely as st, sparktimely.differential as dd
    >>> directory = tempfile.mkdtemp()
    >>> def job(worker):
    ...     worker.dataflow(lambda s: dd.from_stream(s.to_stream([("a", 1), ("b", 2)])).count()
    ...                     .inner.capture(), name="counts")
    >>> _ = st.execute(job, workers=2, checkpoint_dir=directory)
    >>> files = glob.glob(os.path.join(directory, "counts", "checkpoints", "*", "*.arrow"))
    >>> sorted({os.path.basename(f).split(".")[0] for f in files})   # count's two traces
    ['ArrangeBySelf%232', 'Count%233']
    >>> [sum(pa.ipc.open_file(f).read_all().num_rows for f in files if name in f)
    ...  for name in ("ArrangeBySelf", "Count")]     # count keeps totals, not its output
    [2, 0]
    """

    def __init__(self, scope: "ScopeCore", info: Any, box: TraceBox,
                 on_start: Callable[[list | None, list], None],
                 held_back: Callable[[], Any] | None = None) -> None:
        self.box = box
        self.time_kind = scope.kind
        self.on_start = on_start
        self.held_back = held_back
        self._scope = scope
        self._restored: pa.Table | None = None
        self._keeper: TraceAgent | None = None
        super().__init__(scope, f"{info.name}#{info.index}", info.index, self._table,
                         self._keep, ROUTE)

    def _table(self) -> pa.Table:
        held = self.held_back() if self.held_back is not None else None
        return trace_table([] if self.box.freed else self.box.spine.batches(), self.name, held)

    def _keep(self, table: pa.Table) -> None:
        self._restored = table

    def start(self, epoch: int, limit: int | None) -> None:
        box = self.box
        if not box.freed:                      # no trace to keep if no reader wanted it
            self._keeper = TraceAgent(box)
            self._keeper.set_physical_compaction([])
            self._scope.hold(self._keeper)
            box.add_listener(self)
        upper: list | None = None
        later: list = []
        restored = self._restored
        if restored is not None and restored.num_rows and epoch:
            upper = [epoch_time(self.time_kind.minimum(), epoch)]
            batch, later = restore_table(restored, self.time_kind, upper)
            if not box.freed:
                box.restore(batch, upper)
        self._restored = None
        self.on_start(upper, later)
        super().start(epoch, limit)

    def snapshot(self, epoch: int | None) -> Any:
        table = super().snapshot(epoch)
        if epoch is None and not self.box.freed:   # the last checkpoint: its epoch covers ours
            self.max_epoch = max(self.max_epoch, latest_epoch(self.box.spine.batches()))
        return table

    # -- the trace's listener protocol (see TraceBox) -------------------------------------------

    def push_batch(self, batch: Any, time: Any) -> None:
        pass

    def push_upper(self, upper: list) -> None:
        keeper = self._keeper
        if upper and keeper is not None and not keeper.closed:
            keeper.set_logical_compaction(upper)

    def close(self) -> None:
        pass


def latest_epoch(batches: list) -> int:
    """The latest root epoch of an update in ``batches`` (-1 if none).

    >>> latest_epoch([Batch.from_updates([(("k", "v"), 4, 1), (("k", "v"), 2, 1)], [0], [5])])
    4
    """
    latest = -1
    for batch in batches:
        if not len(batch):
            continue
        if isinstance(batch, ArrowBatch):
            latest = max(latest, int(batch.times[0].max()))
        else:
            latest = max(latest, max(root_epoch(t) for updates in batch.data.values()
                                     for _, t, _ in updates))
    return latest


def checkpointing(scope: "ScopeCore") -> bool:
    """True if the worker of ``scope`` takes epoch checkpoints.

    >>> import sparktimely as st
    >>> st.example(checkpointing)
    False
    """
    return recovery_of(scope.dataflow.worker) is not None
