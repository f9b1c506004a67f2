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
from .collection import Collection, as_collection, concatenate, from_stream
from .input import InputSession
from .operators import arrange as _arrange
from .operators import iterate as _iterate
from .operators import join as _join
from .operators import reduce as _reduce
from .operators.arrange import Arranged, TraceHandle
from .operators.iterate import Variable

_COLLECTION_METHODS = {
    "arrange_by_key": _arrange.arrange_by_key,
    "arrange_by_self": _arrange.arrange_by_self,
    "consolidate": _arrange.consolidate,
    "join": _join.join_collections,
    "join_map": _join.join_map,
    "semijoin": _join.semijoin,
    "antijoin": _join.antijoin,
    "reduce": _reduce.reduce,
    "count": _reduce.count,
    "distinct": _reduce.distinct,
    "threshold": _reduce.threshold,
    "iterate": _iterate.iterate,
}
_ARRANGED_METHODS = {
    "join_core": _join.join_core,
    "semijoin": _join.semijoin_arranged,
    "reduce": _reduce.reduce,
    "count": _reduce.count,
    "distinct": _reduce.distinct,
    "threshold": _reduce.threshold,
}
for _name, _method in _COLLECTION_METHODS.items():
    setattr(Collection, _name, _method)
for _name, _method in _ARRANGED_METHODS.items():
    setattr(Arranged, _name, _method)

__all__ = ["Arranged", "Collection", "InputSession", "TraceHandle", "Variable",
           "as_collection", "concatenate", "from_stream"]
