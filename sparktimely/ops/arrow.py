"""Columnar operators: streams whose batches are ``pyarrow.RecordBatch``.

Everything is vectorised with pyarrow compute; Python runs once per batch, never per row.
``exchange(key=...)``, ``inspect_batch`` and ``capture`` (whose ``extract`` gives
``(time, pyarrow.Table)``) also work on these streams.

>>> import pyarrow as pa, pyarrow.compute as pc
>>> import sparktimely as st
>>> def build(scope):
...     table = pa.table({"word": ["a", "b", "a", "c"], "x": [1, 2, 3, 4]})
...     return (scope.to_stream(table)
...             .filter_batches(lambda b: pc.greater(b.column("x"), 1))
...             .aggregate_batches(["word"], {"n": ("count", None), "total": ("sum", "x")})
...             .capture())
>>> [(t, table.to_pydict()) for t, table in st.example(build).extract()]
[(0, {'word': ['a', 'b', 'c'], 'n': [1, 1, 1], 'total': [3, 2, 4]})]
"""
from __future__ import annotations

from typing import Any, Callable, Collection, Mapping, Self, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..dataflow import Exchange, Pipeline
from ..dataflow.builder import per_batch
from ..dataflow.containers import check_schema, large_layouts, one_zero, unified
from ..dataflow.stream import StreamCore
from ._stash import PerTime

AGGREGATES = ("sum", "count", "min", "max", "mean")
_COMPACT_EVERY = 64     # partial aggregates kept per time before they are folded into one


def _arrow(batch: Any, operator: str) -> pa.RecordBatch:
    if not isinstance(batch, pa.RecordBatch):
        raise TypeError(f"{operator} needs a stream of pyarrow.RecordBatch, got a batch of "
                        f"{type(batch).__name__} (convert with to_arrow(schema))")
    return batch


def check_aggregate_columns(what: str, aggs: Mapping[str, tuple[str, str | None]],
                            schema: pa.Schema, keys: Sequence[str] = (), *,
                            internal: Collection[str] = (),
                            sums_of_dictionaries: bool = True) -> None:
    """Check ``schema`` against the key columns and the aggregates ``aggs``
    (``{out: (function, column)}``) of ``what``: a KeyError names a column it lacks (the
    listing leaves out ``internal`` columns), a TypeError an aggregate that sums or averages
    a column holding no numbers (Arrow's own errors name neither: "Function 'hash_sum' has
    no kernel ..."); numbers in a dictionary column count unless not
    ``sums_of_dictionaries``.

    >>> check_aggregate_columns("window", {"n": ("sum", "v")}, pa.schema([("v", pa.string())]))
    Traceback (most recent call last):
    TypeError: window: aggregate 'n': sum of column 'v' of type string: it holds no numbers
    >>> check_aggregate_columns("aggregate_batches", {"n": ("sum", "v")},
    ...                         pa.schema([("k", pa.string())]), ["k"])
    Traceback (most recent call last):
    KeyError: "aggregate_batches: aggregate 'n' reads column 'v', which is not in the batch (columns k)"
    """
    names = schema.names
    listing = ", ".join(name for name in names if name not in internal)
    for key in keys:
        if key not in names:
            raise KeyError(f"{what}: key column {key!r} is not in the batch (columns {listing})")
    for out, (function, column) in aggs.items():
        if column is None:
            continue
        if column not in names:
            raise KeyError(f"{what}: aggregate {out!r} reads column {column!r}, which is not "
                           f"in the batch (columns {listing})")
        kind = schema.field(column).type
        if pa.types.is_dictionary(kind) and sums_of_dictionaries:
            kind = kind.value_type
        if function in ("sum", "mean") and not (
                pa.types.is_integer(kind) or pa.types.is_floating(kind)
                or pa.types.is_decimal(kind) or pa.types.is_boolean(kind)):
            raise TypeError(f"{what}: aggregate {out!r}: {function} of column {column!r} of "
                            f"type {kind}: it holds no numbers")


def integer_column(rows: pa.Table | pa.RecordBatch, column: str, what: str,
                   role: str) -> np.ndarray:
    """The values of the integer ``column`` of ``rows`` (the ``role`` column of ``what``,
    such as a window's time column) as numpy, of the column's integer type. A KeyError names
    the column where ``rows`` lack it; a TypeError a column of another type, or the first row
    where it is null.

    >>> integer_column(pa.table({"ts": [3, 1]}), "ts", "window", "time").tolist()
    [3, 1]
    >>> integer_column(pa.table({"ts": [1.5]}), "ts", "window", "time")
    Traceback (most recent call last):
    TypeError: window: time column 'ts' is double, not an integer type (first row: {'ts': 1.5})
    """
    if column not in rows.schema.names:
        raise KeyError(f"{what}: {role} column {column!r} is not in the batch (columns "
                       f"{', '.join(rows.schema.names)})")
    values = rows.column(column)
    if not pa.types.is_integer(values.type):
        first = rows.slice(0, 1).to_pylist()
        raise TypeError(f"{what}: {role} column {column!r} is {values.type}, not an integer "
                        f"type (first row: {first[0] if first else None})")
    if values.null_count:
        row = int(np.flatnonzero(pc.is_null(values).to_numpy(zero_copy_only=False))[0])
        raise TypeError(f"{what}: {role} column {column!r} is null in row "
                        f"{rows.slice(row, 1).to_pylist()[0]}")
    if isinstance(values, pa.ChunkedArray) and values.num_chunks == 1:
        values = values.chunk(0)
    return values.to_numpy()


_UNCONVERTIBLE = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError)
"""What pyarrow raises for a Python value its type cannot hold."""


def _unconvertible(records: list, schema: pa.Schema,
                   value_of: Callable[[Any, int, pa.Field], Any]) -> TypeError:
    """The error for the first value among ``records`` (``value_of(record, index, field)``)
    that its field's type cannot hold, naming the record, the field and the type.

    >>> _unconvertible([("a", 1), ("b", "x")], pa.schema([("k", pa.string()), ("v", pa.int64())]),
    ...                lambda r, i, f: r[i])
    TypeError("to_arrow: field 'v' of the record ('b', 'x') is 'x', which type int64 cannot hold")
    """
    for record in records:
        for index, field in enumerate(schema):
            value = value_of(record, index, field)
            try:
                pa.array([value], field.type)
            except _UNCONVERTIBLE:
                return TypeError(f"to_arrow: field {field.name!r} of the record {record!r} is "
                                 f"{value!r}, which type {field.type} cannot hold")
    return TypeError(f"to_arrow: the records cannot be made into a batch of ({schema})")


def _per_batch(stream: StreamCore, name: str,
               transform: Callable[[pa.RecordBatch], Any]) -> Any:
    """A pipeline operator sending ``transform(batch)`` for each Arrow input batch."""
    return per_batch(stream, Pipeline, name, lambda time, batch: transform(_arrow(batch, name)))


FLOAT_SUM = "float sum"
"""A :func:`group_rows` function: the sum of a column's values as float64 (a mean's sum)."""


def orderable(column: pa.Array | pa.ChunkedArray) -> tuple[Any, pa.DataType | None]:
    """``column`` as Arrow's ``min`` and ``max`` can compare it, and the type its extremes are
    cast back to (None: they need no cast). Arrow has no min or max of a dictionary's values
    (they are compared as values, and their extremes are of the value type) nor of durations
    (their int64 counts of units are compared, and the extremes are durations again).

    >>> values, back = orderable(pa.array([3, 1], pa.duration("s")))
    >>> values.to_pylist(), back
    ([3, 1], DurationType(duration[s]))
    """
    kind = column.type
    if pa.types.is_dictionary(kind):
        return column.cast(kind.value_type), None
    if pa.types.is_duration(kind):
        return column.cast(pa.int64()), kind
    return column, None


def group_rows(rows: list | pa.Table, keys: list[str], specs: list[tuple],
               names: list[str]) -> pa.RecordBatch:
    """The rows (a list of RecordBatches, or a Table) grouped by ``keys`` (-0.0 and 0.0 one
    key) and aggregated by ``specs`` (``group_by`` specs ``(column, function)``, or
    ``(column, FLOAT_SUM)``), as one RecordBatch with the key columns and then one column
    per spec, named ``names``. The min or max of a dictionary-encoded column or a duration is
    taken as :func:`orderable` says.

    >>> group_rows(pa.table({"k": ["a", "b", "a"], "x": [1, 2, 3]}), ["k"], [("x", "sum")],
    ...            ["total"]).to_pydict()
    {'k': ['a', 'b'], 'total': [4, 2]}
    """
    table = unified(rows if isinstance(rows, pa.Table) else pa.Table.from_batches(rows))
    table = one_zero(table, keys)
    specs = list(specs)
    cast_back: dict[int, pa.DataType] = {}      # spec index -> the type its extremes take
    for i, (column, function) in enumerate(specs):
        if function == FLOAT_SUM:           # a mean's sum: in floats (no int64 wrap)
            name = f"__float {column}"
            if name not in table.column_names:
                table = table.append_column(name, table.column(column).cast(pa.float64(),
                                                                               safe=False))
            specs[i] = (name, "sum")
        elif function in ("min", "max"):
            values, back = orderable(table.column(column))
            if values.type == table.schema.field(column).type:
                continue
            name = f"__ordered {column}"
            if name not in table.column_names:
                table = table.append_column(name, values)
            if back is not None:
                cast_back[i] = back
            specs[i] = (name, function)
    out = table.group_by(keys, use_threads=False).aggregate(specs)
    columns = [column.combine_chunks() for column in out.columns]
    if out.column_names[:len(keys)] != keys:       # older pyarrow puts the keys last
        columns = columns[len(specs):] + columns[:len(specs)]
    for i, kind in cast_back.items():
        columns[len(keys) + i] = columns[len(keys) + i].cast(kind)
    return pa.RecordBatch.from_arrays(columns, keys + names)


class ArrowOps(StreamCore):
    """Columnar operators: ``map_batches``, ``filter_batches``, ``aggregate_batches``,
    ``join_batches``, ``to_arrow`` and ``from_arrow``."""

    __slots__ = ()

    def map_batches(self, f: Callable[[pa.RecordBatch], pa.RecordBatch]) -> Self:
        """Each batch becomes ``f(batch)``, a RecordBatch; every output must have the schema of
        the first.

        >>> import pyarrow as pa, pyarrow.compute as pc
        >>> import sparktimely as st
        >>> def double(batch):
        ...     return batch.set_column(0, "x", pc.multiply(batch.column("x"), 2))
        >>> st.example(lambda s: s.to_stream(pa.table({"x": [1, 2]})).map_batches(double)
        ...            .capture()).extract()[0][1].to_pydict()
        {'x': [2, 4]}
        """
        schema = None

        def transform(batch):
            nonlocal schema
            out = f(batch)
            if not isinstance(out, pa.RecordBatch):
                raise TypeError(f"map_batches: f must return a pyarrow.RecordBatch, "
                                f"not {type(out).__name__}")
            schema = check_schema(schema, out.schema, "map_batches output")
            return out
        return _per_batch(self, "MapBatches", transform)

    def filter_batches(self, mask_f: Callable[[pa.RecordBatch], Any]) -> Self:
        """Keeps the rows where ``mask_f(batch)`` (a boolean Array, ChunkedArray or numpy
        array, one entry per row) is true; null counts as false.

        >>> import pyarrow as pa
        >>> import sparktimely as st
        >>> st.example(lambda s: s.to_stream(pa.table({"x": [1, 2, 3]}))
        ...            .filter_batches(lambda b: b.column("x").to_numpy() % 2 == 1)
        ...            .capture()).extract()[0][1].to_pydict()
        {'x': [1, 3]}
        """
        def keep(batch: pa.RecordBatch) -> pa.RecordBatch:
            mask = mask_f(batch)
            try:
                return batch.filter(mask)
            except pa.ArrowNotImplementedError:     # view layouts: filtered as large ones
                return large_layouts(batch).filter(mask).cast(batch.schema)
        return _per_batch(self, "FilterBatches", keep)

    def aggregate_batches(self, keys: str | Sequence[str],
                          aggs: Mapping[str, tuple[str, str | None]], *,
                          combine: bool = True) -> Self:
        """Keyed aggregation per completed time. ``aggs`` maps each output column to
        ``(function, column)``, function one of sum, count, min, max, mean; ``("count", None)``
        counts rows. Rows are exchanged by ``keys``; once a time is complete each worker sends
        one RecordBatch with the key columns and then the ``aggs`` columns, one row per key.

        With ``combine`` (the default) the batches waiting at each scheduling are first
        aggregated on their own worker, so only one partial row per key is exchanged for them;
        ``mean`` then divides a sum by a count, which can differ from a direct mean in the last
        bits. This is the operator to use where a program would exchange rows by key and then
        group them (``exchange(key=k).map_batches(group_by)``): that exchanges and groups
        every row, and more workers make it slower, not faster.

        >>> import pyarrow as pa
        >>> import sparktimely as st
        >>> def build(scope):
        ...     sales = pa.table({"shop": ["x", "y", "x"], "item": [1, 1, 2], "price": [3.0, 4.0, 5.0]})
        ...     return scope.to_stream(sales).aggregate_batches(
        ...         "shop", {"n": ("count", None), "avg": ("mean", "price"), "top": ("max", "item")}
        ...     ).capture()
        >>> st.example(build).extract()[0][1].to_pydict()
        {'shop': ['x', 'y'], 'n': [2, 1], 'avg': [4.0, 4.0], 'top': [2, 1]}
        """
        keys = [keys] if isinstance(keys, str) else list(keys)
        if not keys:
            raise ValueError("aggregate_batches needs at least one key column")
        # stage-one aggregates of the input, stage-two of the partials
        partial: list[tuple[Any, str]] = []
        final: list[str] = []
        for name, (function, column) in aggs.items():
            if function not in AGGREGATES:
                raise ValueError(f"aggregate {name!r}: unknown function {function!r}, "
                                 f"expected one of {', '.join(AGGREGATES)}")
            if (column is None and function != "count") or name in keys:
                raise ValueError(f"aggregate {name!r}: ({function!r}, {column!r}) needs a column "
                                 f"and a name that is not a key")
            if function == "mean" and combine:
                partial += [(column, FLOAT_SUM), (column, "count")]
                final += ["sum", "sum"]
            else:
                partial.append(([], "count_all") if column is None else (column, function))
                final.append("sum" if function == "count" else function)
        names = [f"_{i}" for i in range(len(partial))]     # the partials' columns
        while any(name in keys for name in names):
            names = ["_" + name for name in names]

        def reduce(batches: list) -> pa.RecordBatch:
            """Partial rows folded into one partial row per key."""
            return group_rows(batches, keys, list(zip(names, final)), names)

        def finish(batches: list) -> pa.RecordBatch:
            if not combine:
                return group_rows(batches, keys, partial, list(aggs))
            reduced = reduce(batches)
            columns = iter(reduced.columns[len(keys):])
            outputs = [pc.divide(pc.cast(next(columns), pa.float64()), next(columns))
                       if function == "mean" else next(columns) for function, _ in aggs.values()]
            return pa.RecordBatch.from_arrays(reduced.columns[:len(keys)] + outputs,
                                              keys + list(aggs))

        checked: list = [None]                  # the last schema checked

        def arrow_input(batch: Any) -> pa.RecordBatch:
            batch = _arrow(batch, "aggregate_batches")
            if not batch.schema == checked[0]:
                check_aggregate_columns("aggregate_batches", aggs, batch.schema, keys)
                checked[0] = batch.schema
            return batch

        source = self
        if combine:
            def pre(cap: Any, info: Any) -> Callable:
                cap.drop()

                def logic(input: Any, output: Any) -> None:       # the batches waiting now, per time, as one table
                    waiting: dict = {}
                    for cap, batch in input:
                        waiting.setdefault(cap.time, (cap, []))[1].append(arrow_input(batch))
                    for cap, batches in waiting.values():
                        output.give_at(cap, group_rows(batches, keys, partial, names))
                return logic
            source = self.unary(Pipeline, "AggregatePartial", pre)
        pending: PerTime[list] = PerTime(list)

        def logic(input: Any, output: Any, notificator: Any) -> None:
            for cap, batch in input:
                batches = pending.at(cap, notificator)
                batches.append(_arrow(batch, "aggregate_batches") if combine
                               else arrow_input(batch))
                if combine and len(batches) >= _COMPACT_EVERY:
                    batches[:] = [reduce(batches)]
            for cap, batches in pending.completed(notificator):
                output.give_at(cap, finish(batches))
        return source.unary_notify(Exchange(key=keys), "AggregateBatches", [], logic)

    def join_batches(self, other: Self, on: str | Sequence[str], *,
                     right_on: str | Sequence[str] | None = None,
                     suffixes: tuple[str, str] = ("", "_right")) -> Self:
        """Inner equi-join of two Arrow streams, time by time: both are exchanged by their key
        columns and, once a time is complete, what arrived at that time on each side is joined
        with ``pyarrow.Table.join`` (keys once, then the other columns of each side; clashing
        names get ``suffixes``). Each worker sends one RecordBatch per time with matches. Key
        columns must have the same types on both sides (a ``Table.join`` rule).

        >>> import pyarrow as pa
        >>> import sparktimely as st
        >>> def build(scope):
        ...     people = scope.to_stream(pa.table({"id": [1, 2, 3], "name": ["ann", "bob", "cy"]}))
        ...     pets = scope.to_stream(pa.table({"owner": [1, 1, 3], "pet": ["cat", "dog", "eel"]}))
        ...     return people.join_batches(pets, "id", right_on="owner").capture()
        >>> st.example(build).extract()[0][1].to_pydict()
        {'id': [1, 1, 3], 'name': ['ann', 'ann', 'cy'], 'pet': ['cat', 'dog', 'eel']}
        """
        left_keys = [on] if isinstance(on, str) else list(on)
        right_on = on if right_on is None else right_on
        right_keys = [right_on] if isinstance(right_on, str) else list(right_on)
        pending: PerTime[tuple[list, list]] = PerTime(lambda: ([], []))

        def logic(input1: Any, input2: Any, output: Any, notificator: Any) -> None:
            for side, input in enumerate((input1, input2)):
                for cap, batch in input:
                    pending.at(cap, notificator)[side].append(_arrow(batch, "join_batches"))
            for cap, (left, right) in pending.completed(notificator):
                if left and right:
                    joined = unified(pa.Table.from_batches(left)).join(
                        unified(pa.Table.from_batches(right)), on, right_keys=right_on,
                        join_type="inner", left_suffix=suffixes[0], right_suffix=suffixes[1],
                        use_threads=False)
                    if joined.num_rows:
                        output.give_at(cap, joined.combine_chunks().to_batches()[0])
        return self.binary_notify(other, Exchange(key=left_keys), Exchange(key=right_keys),
                                  "JoinBatches", [], logic)

    def to_arrow(self, schema: pa.Schema | Sequence, *, batch_size: int = 65536) -> Self:
        """Python records to RecordBatches of ``schema`` (a pyarrow.Schema or anything
        ``pyarrow.schema`` takes). Records are dicts (by field name), tuples (by position) or,
        for a one-field schema, plain values. Records are gathered per time into batches of
        ``batch_size`` rows; the rest is sent when the time completes.

        >>> import sparktimely as st
        >>> schema = [("k", "string"), ("v", "int64")]
        >>> st.example(lambda s: s.to_stream([("a", 1), ("b", 2)]).to_arrow(schema)
        ...            .capture()).extract()[0][1].to_pydict()
        {'k': ['a', 'b'], 'v': [1, 2]}
        """
        schema = pa.schema(schema)
        if batch_size.__class__ is not int or batch_size < 1:
            raise ValueError(f"to_arrow: batch_size must be a positive int, not {batch_size!r}")
        names = ", ".join(schema.names)
        # a one-field schema of lists takes lists as its values, not as rows
        list_values = len(schema) == 1 and (pa.types.is_list(schema.field(0).type) or
                                            pa.types.is_large_list(schema.field(0).type) or
                                            pa.types.is_fixed_size_list(schema.field(0).type))

        def is_row(kind: type) -> bool:
            return issubclass(kind, tuple) or (issubclass(kind, list) and not list_values)

        def convert(records: list) -> pa.RecordBatch:
            kinds = set(map(type, records))
            if all(issubclass(kind, dict) for kind in kinds):
                try:
                    return pa.RecordBatch.from_pylist(records, schema=schema)
                except _UNCONVERTIBLE:
                    raise _unconvertible(records, schema, lambda r, i, f: r.get(f.name)) \
                        from None
            if all(is_row(kind) for kind in kinds):
                if set(map(len, records)) != {len(schema)}:
                    wrong = next(r for r in records if len(r) != len(schema))
                    raise ValueError(f"to_arrow: the record {wrong!r} has {len(wrong)} fields, "
                                     f"the schema {len(schema)} ({names})")
                try:
                    return pa.RecordBatch.from_arrays(
                        [pa.array(column, field.type)
                         for column, field in zip(zip(*records), schema)], schema=schema)
                except _UNCONVERTIBLE:
                    raise _unconvertible(records, schema, lambda r, i, f: r[i]) from None
            if any(issubclass(kind, dict) or is_row(kind) for kind in kinds):
                raise TypeError(f"to_arrow: the records of one batch are dicts (by field name) "
                                f"or tuples (by position), not a mix of "
                                f"{', '.join(sorted(k.__name__ for k in kinds))}")
            if len(schema) != 1:
                raise TypeError(f"to_arrow: records of {type(records[0]).__name__} need a "
                                f"one-field schema, not ({names}); use dicts or tuples")
            try:
                return pa.RecordBatch.from_arrays([pa.array(records, schema.field(0).type)],
                                                  schema=schema)
            except _UNCONVERTIBLE:
                raise _unconvertible(records, schema, lambda r, i, f: r) from None
        pending: PerTime[list] = PerTime(list)

        def logic(input: Any, output: Any, notificator: Any) -> None:
            for cap, batch in input:
                if batch.__class__ is not list:
                    raise TypeError("to_arrow needs a stream of Python records; this one "
                                    "carries Arrow batches")
                records = pending.at(cap, notificator)
                records.extend(batch)
                full = len(records) - len(records) % batch_size
                for start in range(0, full, batch_size):
                    output.give_at(cap, convert(records[start:start + batch_size]))
                del records[:full]
            for cap, records in pending.completed(notificator):
                if records:
                    output.give_at(cap, convert(records))
        return self.unary_notify(Pipeline, "ToArrow", [], logic)

    def from_arrow(self, *, tuples: bool = False) -> Self:
        """RecordBatches to Python records: a dict per row (or a tuple, with ``tuples``).

        >>> import pyarrow as pa
        >>> import sparktimely as st
        >>> table = pa.table({"k": ["a", "b"], "v": [1, 2]})
        >>> st.example(lambda s: s.to_stream(table).from_arrow().capture()).extract()
        [(0, [{'k': 'a', 'v': 1}, {'k': 'b', 'v': 2}])]
        >>> st.example(lambda s: s.to_stream(table).from_arrow(tuples=True).capture()).extract()
        [(0, [('a', 1), ('b', 2)])]
        """
        def convert(batch):
            if not batch.num_columns:                 # (zip of no columns has no rows)
                return [() if tuples else {} for _ in range(batch.num_rows)]
            rows = zip(*[column.to_pylist() for column in batch.columns])
            return list(rows) if tuples else [dict(zip(batch.schema.names, row)) for row in rows]
        return _per_batch(self, "FromArrow", convert)
