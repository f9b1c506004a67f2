"""Helpers for the two kinds of batches the runtime moves: Python lists and
``pyarrow.RecordBatch``.

Arrow batches are partitioned without a Python loop over rows: the key columns are hashed
with :func:`sparktimely.hashing.hash_rows` (values only, never the process: the same key goes to
the same worker on every host, whatever its integer width or string encoding) and each
worker's rows are gathered with one ``take`` (for many workers: one stable radix sort by
worker, one ``take``, and a zero-copy slice per worker).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..hashing import hash_rows


def partition_batch(batch: Any, key: str | Sequence[str] | None,
                    route: Callable[[Any], Any] | None, peers: int) -> list:
    """The batch split into ``peers`` parts, part ``w`` for worker ``w``.

    A list goes record by record to ``route(record) % peers``. A RecordBatch goes row by row
    by the hash of its ``key`` column(s), or by ``route(batch)``, which returns one integer
    per row; each part is one ``take`` of the batch (the batch itself when every row goes to
    one worker).

    >>> import pyarrow as pa
    >>> partition_batch([1, 2, 3], None, lambda x: x, 2)
    [[2], [1, 3]]
    >>> parts = partition_batch(pa.record_batch({"k": [5, 6, 5, 7]}), "k", None, 2)
    >>> sorted(sum((p.column("k").to_pylist() for p in parts), []))
    [5, 5, 6, 7]
    >>> [p.num_rows for p in partition_batch(pa.record_batch({"k": [4, 1]}), None,
    ...                                      lambda b: b.column("k"), 2)]
    [1, 1]
    """
    if batch.__class__ is list:
        if route is None:
            raise TypeError("Exchange(key=...) partitions Arrow batches; this stream carries "
                            "Python objects: use Exchange(route)")
        parts: list[list] = [[] for _ in range(peers)]
        appends = [part.append for part in parts]
        for record in batch:
            appends[route(record) % peers](record)
        return parts
    if key is not None:
        dest = _route_hashes(hash_rows(batch, key), peers)
    else:
        assert route is not None, "Exchange needs a route or key"
        dest = np.asarray(route(batch))
        if dest.shape != (batch.num_rows,) or dest.dtype.kind not in "iu":
            raise ValueError(f"an Exchange route for Arrow batches must return one integer "
                             f"per row ({batch.num_rows}), got {dest.dtype} of shape "
                             f"{dest.shape}")
        low, high = (int(dest.min()), int(dest.max())) if dest.size else (0, 0)
        if low == high:                                      # one destination: no work
            return _all_to(batch, low % peers, peers)
        if low < 0 or high >= peers:
            dest = dest % peers
        dest = dest.astype(_worker_dtype(peers))
    if peers <= _TAKE_EACH:                     # a pass per destination beats a sort
        parts = []
        for worker in range(peers):
            rows = np.flatnonzero(dest == worker)
            if len(rows) == batch.num_rows:                  # one destination: no copy
                return _all_to(batch, worker, peers)
            parts.append(_take(batch, rows) if len(rows) else batch.slice(0, 0))
        return parts
    counts = np.bincount(dest, minlength=peers)
    if counts.max(initial=0) == batch.num_rows:              # one destination: no copy
        return _all_to(batch, int(counts.argmax()), peers)
    ordered = _take(batch, np.argsort(dest, kind="stable"))  # radix sort by worker
    starts = np.cumsum(counts) - counts
    return [ordered.slice(start, n) for start, n in zip(starts.tolist(), counts.tolist())]


_TAKE_EACH = 8
"""Up to this many workers, a batch is split with one comparison and one ``take`` per
worker; beyond, with one stable sort by worker and one ``take``."""


def _take(batch: pa.RecordBatch, rows: np.ndarray) -> pa.RecordBatch:
    """The rows ``rows`` (numpy row numbers) of ``batch``, in that order. Arrow has no ``take``
    for the view layouts (``string_view``, ``binary_view``, which Polars and DuckDB hand
    out): such columns are taken as ``large_string``/``large_binary`` and cast back, so an
    exchange keeps the schema it was given at every worker count. A column of another type
    without a ``take`` is a TypeError naming it.

    >>> batch = pa.record_batch({"s": pa.array(["a", "b", "c"], pa.string_view())})
    >>> part = _take(batch, np.array([2, 0]))
    >>> part.column("s").to_pylist(), part.schema.field("s").type
    (['c', 'a'], DataType(string_view))
    """
    indices = _indices(rows)
    try:
        return batch.take(indices)
    except pa.ArrowNotImplementedError:
        pass
    columns = []
    for field, column in zip(batch.schema, batch.columns):
        wide = _TAKEN_AS.get(field.type)
        try:
            if wide is None:
                columns.append(column.take(indices))
            else:
                columns.append(column.cast(wide).take(indices).cast(field.type))
        except pa.ArrowNotImplementedError:
            raise TypeError(f"column {field.name!r} of type {field.type} cannot be split "
                            f"between workers: Arrow has no take for it (cast it to a type "
                            f"that has one, e.g. list for list_view)") from None
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


_TAKEN_AS = {pa.string_view(): pa.large_string(), pa.binary_view(): pa.large_binary()}
"""The view layouts, and the layouts they are taken in (Arrow has no ``take`` for views)."""


_without_views: list[Any] = [None]
"""The last schema :func:`large_layouts` found no view column in: the batches of one input
share a schema, which compares in 40 ns where a walk over its fields takes a microsecond."""


def large_layouts(batch: Any) -> Any:
    """``batch`` with its view-layout columns (``string_view``, ``binary_view``) cast to
    ``large_string``/``large_binary``, for operators that sort and take rows, which Arrow
    cannot do on views; ``batch`` itself when it has none.

    >>> batch = pa.record_batch({"s": pa.array(["a"], pa.string_view()), "n": [1]})
    >>> large_layouts(batch).schema.types
    [DataType(large_string), DataType(int64)]
    """
    schema = batch.schema
    last = _without_views[0]
    if last is not None and schema == last:
        return batch
    if not any(field.type in _TAKEN_AS for field in schema):
        _without_views[0] = schema
        return batch
    return batch.cast(pa.schema([field.with_type(_TAKEN_AS.get(field.type, field.type))
                                 for field in schema]))


def _indices(rows: np.ndarray) -> pa.Array:
    """Row numbers (a numpy int64 array) as an Arrow array, without a copy. ``take`` would
    convert a numpy array itself with ``pa.array``, which imports ``numpy.ma`` on first use:
    14 ms in each freshly forked worker, inside its first exchange.

    >>> _indices(np.array([2, 0])).to_pylist()
    [2, 0]
    """
    rows = rows.astype(np.int64, copy=False)
    return pa.Array.from_buffers(pa.int64(), len(rows), [None, pa.py_buffer(rows)])


def _route_hashes(h: np.ndarray, peers: int) -> np.ndarray:
    """Each row's worker, ``h % peers``, as the smallest unsigned integers that hold it."""
    if peers & (peers - 1) == 0 and peers <= 256:
        low = h.astype(np.uint8)                                # the low byte of each hash
        low &= np.uint8(peers - 1)
        return low
    return (h % np.uint64(peers)).astype(_worker_dtype(peers))


def _worker_dtype(peers: int) -> type:
    """The smallest integer type that holds every worker index (a stable ``argsort`` of 8-
    or 16-bit integers is a radix sort)."""
    return np.uint8 if peers <= 256 else np.uint16 if peers <= 65536 else np.int64


def _all_to(batch: pa.RecordBatch, target: int, peers: int) -> list:
    return [batch if worker == target else batch.slice(0, 0) for worker in range(peers)]


def kept(batch: Any, peers: int) -> Any:
    """``batch`` as an operator that holds it past the step it arrived in should keep it.
    With several workers an Arrow batch may have arrived through a shared-memory ring, as
    views of the ring's bytes: held for long (a window waiting for its time to complete), it
    keeps the writer from reusing that space, and the writer rolls to new ring segments
    instead (fresh pages, and a round trip between the workers each time). Its columns are
    copied then (about 40 us per MB); a list, any batch at one worker, or a batch without
    columns (no bytes to hold, and a copy of its columns would have no rows) is kept as it is.

    >>> import pyarrow as pa
    >>> batch = pa.record_batch({"k": [1, 2]})
    >>> kept(batch, 1) is batch
    True
    >>> copy = kept(batch, 2)
    >>> address = lambda b: b.column(0).buffers()[1].address
    >>> copy.equals(batch), address(copy) == address(batch)
    (True, False)
    """
    if peers == 1 or batch.__class__ is not pa.RecordBatch or not batch.num_columns:
        return batch
    return pa.RecordBatch.from_arrays([pa.concat_arrays([column]) for column in batch.columns],
                                      schema=batch.schema)


def unified(table: pa.Table) -> pa.Table:
    """``table`` with each dictionary column's chunks on one dictionary (batches encoded
    apart have different ones, which ``group_by`` and ``join`` refuse to mix), a dictionary
    that holds a null or a value twice (Arrow allows both) encoded again: its rows of one
    value would group apart, and Arrow unifies no dictionary with nulls.

    >>> import pyarrow as pa
    >>> a = pa.array(["x"]).dictionary_encode(); b = pa.array(["y", "x"]).dictionary_encode()
    >>> t = unified(pa.Table.from_batches([pa.record_batch({"k": a}), pa.record_batch({"k": b})]))
    >>> t.column("k").chunk(0).dictionary == t.column("k").chunk(1).dictionary
    True
    >>> twice = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2]), pa.array(["a", "a", None]))
    >>> column = unified(pa.table({"k": twice})).column("k")
    >>> column.chunk(0).dictionary.to_pylist(), column.to_pylist()
    (['a'], ['a', 'a', None])
    """
    if not any(pa.types.is_dictionary(field.type) for field in table.schema):
        return table
    for index, field in enumerate(table.schema):
        column = table.column(index)
        if pa.types.is_dictionary(field.type) and column.null_count:
            column = pa.chunked_array([_nulls_at_zero(chunk) for chunk in column.chunks],
                                      field.type)
            table = table.set_column(index, field, column)
        if pa.types.is_dictionary(field.type) and any(
                _irregular(chunk.dictionary) for chunk in column.chunks):
            encoded = pc.dictionary_encode(column.cast(field.type.value_type).combine_chunks())
            table = table.set_column(index, field.name, encoded.cast(field.type))
    try:
        return table.unify_dictionaries()
    except pa.ArrowInvalid:         # the values of all of them overflow the index type
        return table.cast(pa.schema([
            field.with_type(pa.dictionary(pa.int32(), field.type.value_type))
            if pa.types.is_dictionary(field.type) and field.type.index_type.bit_width < 32
            else field for field in table.schema])).unify_dictionaries()


def _nulls_at_zero(chunk: pa.DictionaryArray) -> pa.DictionaryArray:
    """``chunk`` with index 0 under its null rows. pyarrow's ``group_by`` leaves any value
    there, and ``unify_dictionaries`` reads it as an index into the dictionary (the process
    dies of a segmentation fault when it points outside).

    >>> chunk = pa.array(["z", None]).dictionary_encode()
    >>> _nulls_at_zero(chunk).to_pylist()
    ['z', None]
    """
    if not chunk.null_count:
        return chunk
    indices = chunk.indices
    valid = pa.concat_arrays([pc.is_valid(indices)])        # (concat: fresh, at offset 0)
    filled = pa.concat_arrays([pc.fill_null(indices, 0)])
    indices = pa.Array.from_buffers(indices.type, len(indices),
                                    [valid.buffers()[1], filled.buffers()[1]],
                                    null_count=indices.null_count)
    return pa.DictionaryArray.from_arrays(indices, chunk.dictionary)


def one_zero(table: pa.Table, columns: list[str]) -> pa.Table:
    """``table`` with -0.0 read as 0.0 in its floating columns among ``columns``: one key, as
    Python's ``==`` and the hash take them, where Arrow's grouping keeps the two apart.

    >>> one_zero(pa.table({"k": [-0.0, 1.5]}), ["k"]).column("k").to_pylist()
    [0.0, 1.5]
    """
    for name in columns:
        index = table.schema.get_field_index(name)
        kind = table.schema.field(index).type
        if pa.types.is_floating(kind):
            table = table.set_column(index, name, pc.add(table.column(index),
                                                         pa.scalar(0.0, kind)))
    return table


def _irregular(dictionary: pa.Array) -> bool:
    """Whether ``dictionary`` holds a null or a value twice."""
    return dictionary.null_count > 0 or len(pc.unique(dictionary)) < len(dictionary)


HASH_COLUMN = "__hash"
"""The column of row hashes that differential's and the windows' Arrow operators add to
the batches they route (not the user's: errors leave it out of the schemas they show)."""


def format_schema(schema: pa.Schema, leave_out: Sequence[str] = ()) -> str:
    """A schema on one line, without the columns named in ``leave_out``.

    >>> import pyarrow as pa
    >>> format_schema(pa.schema([("w", pa.string()), pa.field("n", pa.int64(), False)]))
    'w: string, n: int64 not null'
    """
    return ", ".join(f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in schema
                     if f.name not in leave_out)


def format_schemas(first: pa.Schema, second: pa.Schema) -> tuple[str, str]:
    """Two schemas that differ, each on one line, for an error: without the operators'
    :data:`HASH_COLUMN` unless that is where they differ.

    >>> import pyarrow as pa
    >>> format_schemas(pa.schema([("k", pa.int64()), (HASH_COLUMN, pa.uint64())]),
    ...                pa.schema([("k", pa.string()), (HASH_COLUMN, pa.uint64())]))
    ('k: int64', 'k: string')
    """
    shown = format_schema(first, [HASH_COLUMN]), format_schema(second, [HASH_COLUMN])
    if shown[0] == shown[1]:
        return format_schema(first), format_schema(second)
    return shown


def check_schema(expected: pa.Schema | None, schema: pa.Schema, what: str) -> pa.Schema:
    """``schema``, if it equals ``expected`` (ignoring metadata) or nothing is expected yet;
    else a ValueError naming both.

    >>> import pyarrow as pa
    >>> check_schema(pa.schema([("x", pa.int64())]), pa.schema([("x", pa.string())]), "send")
    Traceback (most recent call last):
    ...
    ValueError: send: the batch's schema (x: string) differs from the stream's schema (x: int64)
    """
    if expected is not None and not schema.equals(expected):
        raise ValueError(f"{what}: the batch's schema ({format_schema(schema)}) differs from "
                         f"the stream's schema ({format_schema(expected)})")
    return schema


def arrow_batches(items: Any, schema: pa.Schema | None = None,
                  what: str = "stream") -> tuple[list[pa.RecordBatch], pa.Schema] | None:
    """For a Table, a RecordBatch or a non-empty list of them: their non-empty batches and
    their schema, checked to be one (and ``schema``, if given). None for anything else.

    >>> import pyarrow as pa
    >>> t = pa.table({"x": [1, 2]})
    >>> batches, schema = arrow_batches([t, t.slice(0, 0), t.to_batches()[0]])
    >>> [b.num_rows for b in batches], schema.names
    ([2, 2], ['x'])
    >>> arrow_batches([1, 2]) is None
    True
    """
    if isinstance(items, (pa.Table, pa.RecordBatch)):
        items = [items]
    if not (isinstance(items, (list, tuple)) and items
            and all(isinstance(x, (pa.Table, pa.RecordBatch)) for x in items)):
        return None
    for x in items:
        schema = check_schema(schema, x.schema, what)
    batches = [b for x in items for b in (x.to_batches() if isinstance(x, pa.Table) else [x])]
    return [b for b in batches if b.num_rows], schema
