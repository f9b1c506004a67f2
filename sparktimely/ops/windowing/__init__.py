"""Event-time windows, the operator family behind ``stream.window`` (users import
:mod:`sparktimely.windows`): window kinds (:mod:`.kinds`), aggregations of Python records
(:mod:`.aggregations`), the engines for Python records (``_records``) and Arrow batches
(``_columns``), and the :class:`~.operator.WindowOps` mixin of ``Stream``.

>>> import sparktimely as st
>>> from sparktimely.ops.windowing.kinds import Session
>>> from sparktimely.ops.windowing.aggregations import collect
>>> def build(scope):
...     taps = scope.to_stream([1, 2, 9])
...     return taps.window(Session(3), time_of=lambda t: t, aggregate=collect()).results.capture()
>>> st.example(build).extract()
[(4, [(None, Window(start=1, end=5), [1, 2])]), (11, [(None, Window(start=9, end=12), [9])])]
"""
