"""Differential dataflow on sparktimely: collections that change over time, and operators
(join, reduce, iterate, ...) whose outputs are updated incrementally as inputs change.

``import sparktimely.differential as dd``. A collection is a stream of updates
``(data, time, diff)``; its value at time ``t`` is the sum of the diffs of the updates at
times ``<= t``, and it is final at ``t`` once the collection's frontier has passed ``t``.
Every operator's output, accumulated to a completed time, equals the operator applied to
its inputs accumulated to that time, for any number of workers. Stateful operators work on
*arrangements*: per-worker indexes of immutable, sorted batches that several operators, and
other dataflows of the same worker, share instead of copying (see ``Arranged.trace``).

>>> import sparktimely as st
>>> import sparktimely.differential as dd
>>> def job(worker):
...     edges = dd.InputSession()
...     def build(scope):
...         degrees = edges.to_collection(scope).map(lambda e: e[0]).count()
...         return degrees.inner.capture()
...     out = worker.dataflow(build)
...     edges.insert((1, 2)); edges.insert((1, 3)); edges.advance_to(1)
...     edges.remove((1, 3)); edges.close()
...     worker.run()
...     return out.extract()
>>> st.execute_directly(job)
[(0, [((1, 2), 0, 1)]), (1, [((1, 1), 1, 1), ((1, 2), 1, -1)])]
"""
from .collection import (Arranged, Collection, Reducible, TraceHandle, Variable, as_collection,
                         concatenate, from_stream)
from .input import InputSession

__all__ = ["Arranged", "Collection", "InputSession", "Reducible", "TraceHandle", "Variable",
           "as_collection", "concatenate", "from_stream"]
