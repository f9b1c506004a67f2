"""``count`` at totally ordered times without arranging its input (differential's
``count_total``).

``Collection.count()`` at int times needs no trace of its input: a key's count is the sum
of its diffs, and the operator keeps what it sent (the totals of Python keys; for Arrow
rows, its output trace or the :class:`~..arrow.reduce.CountIndex` alone). So one operator
takes the updates in, keyed and exchanged as an arrangement's would be, and once their time
is complete counts them as they arrived, where an arrangement would first seal them into a
batch (consolidated, and for Arrow rows hashed and sorted) and a second operator would
count that. Larger Arrow updates, and keys the index cannot hold (floats, hash collisions),
are sealed and counted as the arrangement's count does. With a checkpoint directory the
arrangement path is taken: its state is what a checkpoint holds.

>>> import sparktimely as st, sparktimely.differential as dd, pyarrow as pa
>>> def build(scope):
...     words = pa.table({"w": ["a", "b", "a"], "diff": [1, 1, 1]})
...     return dd.as_collection(scope.to_stream(words)).count(key="w").inner.capture()
>>> sorted(st.example(build).extract()[0][1].to_pylist(), key=lambda row: row["w"])
[{'w': 'a', 'count': 2, 'diff': 1}, {'w': 'b', 'count': 1, 'diff': 1}]
>>> st.example(lambda s: dd.from_stream(s.to_stream("abca")).count().inner.capture()).extract()
[(0, [(('a', 2), 0, 1), (('b', 1), 0, 1), (('c', 1), 0, 1)])]
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ...dataflow import CapabilitySet
from ..arrow.arrange import ArrowArranger
from ..arrow.reduce import ArrowReducer, count_spec
from ..lattice import antichain, beyond
from ..trace.handle import TraceAgent, TraceBox
from .arrange import (KeyColumns, PythonArranger, choose_arranger, key_exchange, take_in,
                      trace_phase)
from .reduce import CountReduction, TotalsReducer, give_reduced

if TYPE_CHECKING:
    from ...ops import Stream


def count_total_stream(updates: "Stream", key: KeyColumns, name: str = "Count") -> "Stream":
    """The count updates of the collection ``updates`` (Arrow rows by their ``key`` columns,
    default every data column; Python updates by their data), at int times of a root scope
    (see the module docstring)."""
    scope = updates.scope
    pairs = key is not None
    minimum = [scope.kind.minimum()]
    out_box = TraceBox(f"{name} output", minimum, scope.kind, scope.dataflow.worker,
                       trace_phase(scope))
    out_trace = TraceAgent(out_box)
    scope.hold(out_trace)

    def ctor(capability, info):
        capability.drop()
        caps = CapabilitySet()
        lower = list(minimum)
        arranger: Any = None                # an ArrowArranger or a PythonArranger
        reducer: Any = None                 # and its ArrowReducer or TotalsReducer
        choose = functools.partial(choose_arranger, name, pairs, key, scope.kind)

        def logic(input, output):
            nonlocal lower, arranger, reducer
            arranger = take_in(input, caps, arranger, choose)
            if reducer is None and arranger is not None:
                reducer = ArrowReducer(name, count_spec(), scope.kind, keep_index=True) \
                    if isinstance(arranger, ArrowArranger) else TotalsReducer(CountReduction())
            upper = input.frontier.frontier()
            if upper == lower:
                return
            if arranger is not None:
                produced, out_batches = _counted(arranger, reducer, lower, upper,
                                                 out_trace, sorted(c.time for c in caps))
                give_reduced(output, caps, produced, out_batches, out_box)
                caps.downgrade(antichain(arranger.pending_times()))
            out_box.seal(upper)
            lower = upper
            if not upper:
                out_trace.close()
            else:
                out_trace._follow(upper, upper)
        return logic
    return updates.unary_frontier(key_exchange(name, pairs, key), name, ctor)


def _counted(arranger: ArrowArranger | PythonArranger, reducer: Any, lower: list,
             upper: list, out_trace: TraceAgent, held: list) -> tuple[list, list]:
    """The count's output for the updates ``arranger`` holds at times in ``[lower,
    upper)``: ``[(time, updates)]`` and the batches for the output trace (Arrow only)."""
    ready = arranger.take_ready(upper)
    if not ready:
        return [], []
    if isinstance(reducer, TotalsReducer):
        assert isinstance(arranger, PythonArranger)
        try:
            return reducer.retire_updates(ready), []
        except TypeError:
            arranger.name_unhashable([ready])
            raise
    assert isinstance(arranger, ArrowArranger) and arranger.key is not None
    out_history = out_trace.batches_through(lower)
    counted = reducer.retire_rows(ready, arranger.key, out_history, lower, upper)
    if counted is not None:
        return counted
    sealed = arranger.seal_ready(ready, lower, upper,
                                 [t for t in held if not beyond(upper, t)])
    return reducer.retire([batch for _, batch in sealed], [], out_history, lower, upper)
