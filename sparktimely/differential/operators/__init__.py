"""The machinery of the stateful operators on streams and traces: arrange, join, reduce,
iterate and active_between (the methods of ``Collection`` and ``Arranged`` in
:mod:`..collection` call it)."""
