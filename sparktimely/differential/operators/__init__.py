"""The stateful operators: arrange, join, reduce and iterate (added to ``Collection`` and
``Arranged`` as methods by :mod:`sparktimely.differential`)."""
