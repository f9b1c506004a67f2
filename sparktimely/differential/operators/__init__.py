"""The stateful operators: arrange, join, reduce, iterate and active_between (added to
``Collection`` and ``Arranged`` as methods by :mod:`sparktimely.differential`)."""
