"""Component snapshots as Arrow tables, and back; Arrow IPC files in memory.

- Positions of source partitions and states of sink partitions: one row per partition,
  ``partition`` (string) and ``state`` (the pickled value).
- Keyed state given as a dict: one row per key, ``route`` (the key's route, uint64 or
  int64), ``key`` and ``value``. A column of values that are all ``str``, all ``bytes``, all
  ``bool``, all ``float`` or all ``int`` (within int64) is stored as that Arrow type and
  read back as the same Python values; any other column is pickled per row. The schema's
  metadata says which.
- Keyed state given as a Table is stored as it is; its metadata names its route column.

A worker of a resumed run keeps the rows whose route modulo its number of workers is its
index (Flink's key groups, with every key its own group).

>>> table = encode_keyed({"a": 1, ("b", 2): [3]}, lambda key: len(str(key)))
>>> table.schema.names, select_keyed([table], 2, 1)
(['route', 'key', 'value'], {'a': 1})
>>> select_keyed([encode_keyed({}, len), encode_keyed({"a": 1}, len)], 1, 0)
{'a': 1}
"""
from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pyarrow as pa

from ..hashing import Route

ROUTE = "route"
_META_ROUTE = b"sparktimely.route"
_META_PICKLED = b"sparktimely.pickled"
_NATIVE = {str: pa.string(), bytes: pa.binary(), bool: pa.bool_(), float: pa.float64(),
           int: pa.int64()}


def unpicklable_entry(state: Any, label: str = "key") -> str:
    """Where a state that failed to encode cannot be pickled: `` (at key ...)`` naming the
    first entry of a dict that does not pickle (``label`` says what its keys are), or
    nothing.

    >>> import threading
    >>> unpicklable_entry({"a": 1, "b": threading.Lock()}), unpicklable_entry([1])
    (" (at key 'b')", '')
    """
    if isinstance(state, dict):
        for key, value in state.items():
            try:
                pickle.dumps(value, 5)
            except Exception:
                return f" (at {label} {key!r})"
    return ""


def encode_partitions(states: dict[str, Any]) -> pa.Table:
    """One row per partition: its name and its pickled state."""
    names = sorted(states)
    return pa.table({"partition": pa.array(names, pa.string()),
                     "state": pa.array([pickle.dumps(states[n], 5) for n in names], pa.binary())})


def decode_partitions(tables: list[pa.Table]) -> dict[str, Any]:
    """The states of every partition in ``tables``."""
    states: dict[str, Any] = {}
    for table in tables:
        for name, state in zip(table.column("partition").to_pylist(),
                               table.column("state").to_pylist()):
            states[name] = pickle.loads(state)
    return states


def _column(values: list) -> tuple[pa.Array, bool]:
    """``values`` as an Arrow array, natively if they are of one plain type; else pickled."""
    kinds = set(map(type, values))
    if len(kinds) == 1:
        arrow_type = _NATIVE.get(kinds.pop())
        if arrow_type is not None:
            try:
                return pa.array(values, arrow_type), False
            except (OverflowError, pa.ArrowInvalid):
                pass
    return pa.array([pickle.dumps(v, 5) for v in values], pa.binary()), True


def _routes(keys: list, route: Route) -> pa.Array:
    routes = [route(key) for key in keys]
    for arrow_type in (pa.uint64(), pa.int64()):
        try:
            return pa.array(routes, arrow_type)
        except (OverflowError, pa.ArrowInvalid):
            pass
    raise ValueError("a route returned a value that does not fit in 64 bits")


def encode_keyed(state: Any, route: Route | str) -> pa.Table:
    """Keyed state (a dict routed by ``route(key)``, or a Table routed by its column
    ``route``) as one table."""
    if isinstance(route, str):
        table = state if isinstance(state, pa.Table) else pa.Table.from_batches([state])
        return table.replace_schema_metadata({**(table.schema.metadata or {}),
                                              _META_ROUTE: route.encode()})
    keys = list(state)
    key_column, keys_pickled = _column(keys)
    value_column, values_pickled = _column(list(state.values()))
    pickled = ",".join(name for name, p in (("key", keys_pickled), ("value", values_pickled)) if p)
    table = pa.table({ROUTE: _routes(keys, route), "key": key_column, "value": value_column})
    return table.replace_schema_metadata({_META_ROUTE: ROUTE.encode(),
                                          _META_PICKLED: pickled.encode()})


def select_keyed(tables: list[pa.Table], peers: int, index: int,
                 everything: bool = False) -> Any:
    """The rows of ``tables`` (written by :func:`encode_keyed`) that worker ``index`` of
    ``peers`` owns (all of them if ``everything``: read from the same worker of as many), as a
    dict, or a Table (without the metadata) if a Table was encoded."""
    if not tables:
        return None
    metadata = tables[0].schema.metadata or {}
    route = metadata.get(_META_ROUTE, ROUTE.encode()).decode()
    selected = []
    for table in tables:
        if peers > 1 and not everything:
            routes = np.concatenate([chunk.to_numpy() for chunk in table.column(route).chunks]
                                    or [np.empty(0, np.uint64)])
            table = table.filter(pa.array(routes % peers == index))
        selected.append(table)
    if _META_PICKLED not in metadata:
        # workers whose state differs in columns (one empty, say) write different schemas
        return pa.concat_tables(selected, promote_options="default").replace_schema_metadata(None)
    state: dict = {}
    for original, table in zip(tables, selected):
        state.update(_decoded(table, original.schema.metadata or {}))
    return state


def _decoded(table: pa.Table, metadata: dict) -> dict:
    """The dict of a table :func:`encode_keyed` wrote, whose ``metadata`` says which of its
    columns were pickled: each worker's table says it for itself (an empty dict's columns
    are pickled, a dict of strings' keys are not)."""
    pickled = set(metadata.get(_META_PICKLED, b"").decode().split(","))
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    if "key" in pickled:
        keys = [pickle.loads(k) for k in keys]
    if "value" in pickled:
        values = [pickle.loads(v) for v in values]
    return dict(zip(keys, values))


def to_ipc(table: pa.Table) -> pa.Buffer:
    """``table`` as the bytes of an Arrow IPC file."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def from_ipc(buffer: pa.Buffer) -> pa.Table:
    """The table in the Arrow IPC file ``buffer`` (zero-copy)."""
    return pa.ipc.open_file(buffer).read_all()

