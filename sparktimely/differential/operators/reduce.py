"""The machinery of reductions of an arrangement key by key (``reduce``, ``count``,
``distinct`` and ``threshold`` of ``Collection`` and ``Arranged`` are built on
:func:`reduce_stream`).

When the input frontier moves from ``lower`` to ``upper``, the operator looks only at the keys
that changed in ``[lower, upper)`` (plus keys with times it set aside earlier), and for each
at only the times where that key's output can change: the times of its new updates and,
with partially ordered times, their joins with the key's other input and output times
(differential's *interesting times*). At each such time ``t``, in an order that extends the
partial order, it applies the reduction to the input accumulated to ``t`` and emits the
difference from the output accumulated to ``t``. Joins beyond ``upper`` are remembered, with
a capability, until the frontier reaches them. The output is kept in the operator's own
trace, so corrections are computed against what was already sent.

>>> import sparktimely as st, sparktimely.differential as dd
>>> def build(scope):
...     words = dd.from_stream(scope.to_stream("abracadabra"))
...     return words.count().inner.capture()
>>> [sorted(d for d, t, r in updates) for t, updates in st.example(build).extract()]
[[('a', 5), ('b', 2), ('c', 1), ('d', 1), ('r', 2)]]
"""
from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ...dataflow import CapabilitySet, Pipeline
from ...ordering import sort_totally
from ...progress.timestamp import less_equal
from ..arrow.reduce import AggregateSpec, ArrowReducer, aggregate_spec
from ..lattice import antichain, antichain_join, beyond, interesting_times
from ..recovery import TraceState, checkpointing
from ..trace.batch import Batch, updates_reader
from ..trace.handle import TraceAgent, TraceBox
from .arrange import reader, trace_phase

if TYPE_CHECKING:
    from ...ops import Stream
    from ..collection import Arranged


class Reduction:
    """What a reduction does with one key: ``desired(key, updates)`` turns the key's input
    updates (``(val, time, diff)``, all at or before the time being evaluated) into the
    output it should have there, ``{val: multiplicity}``; ``data(key, val)`` is the output
    collection's record. ``of_total`` ones (built in: no user code) depend on nothing but
    the key's summed diff, which :class:`TotalsReducer` keeps per key. ``call`` names the
    user's call in errors."""

    of_total = False
    call = "this reduction"

    def desired(self, key: Any, updates: list) -> dict:
        raise NotImplementedError

    def data(self, key: Any, val: Any) -> Any:
        return (key, val)


class UserReduction(Reduction):
    """``logic(key, input, output)``: ``input`` lists ``(val, count)`` with positive counts,
    sorted by val; ``logic`` appends ``(val, diff)`` to ``output``."""

    call = "reduce(logic)"

    def __init__(self, logic: Callable[[Any, list, list], None]) -> None:
        self.logic = logic

    def desired(self, key: Any, updates: list) -> dict:
        input = [(val, count) for val, count in accumulate(updates).items() if count > 0]
        if not input:
            return {}
        sort_totally(input)                 # None among ints, NaN: a total order of our own
        output: list = []
        self.logic(key, input, output)
        wanted: dict = {}
        for entry in output:
            if entry.__class__ is not tuple or len(entry) != 2 or entry[1].__class__ is not int:
                raise TypeError(f"reduce: logic must append (val, diff) pairs with an integer "
                                f"diff to output, got {entry!r} for key {key!r}")
            val, diff = entry
            try:
                wanted[val] = wanted.get(val, 0) + diff
            except TypeError as error:
                raise TypeError(f"reduce: logic appended {entry!r} for key {key!r}, whose val "
                                f"cannot be hashed ({error}): output vals are records of a "
                                f"collection and must be hashable (a tuple, not a list)"
                                ) from None
        return {val: diff for val, diff in wanted.items() if diff}


class CountReduction(Reduction):
    """``(key, count)`` for every key with a non-zero count."""

    of_total = True

    def desired(self, key: Any, updates: list) -> dict:
        count = sum(diff for _, _, diff in updates)
        return {count: 1} if count else {}


class ThresholdReduction(Reduction):
    """``key`` with multiplicity ``f(key, count)`` (``f`` is not called for count 0)."""

    call = "threshold(f)"

    def __init__(self, f: Callable[[Any, int], int]) -> None:
        self.f = f
        self.of_total = f is distinct_count

    def desired(self, key: Any, updates: list) -> dict:
        count = sum(diff for _, _, diff in updates)
        if not count:
            return {}
        multiplicity = self.f(key, count)
        if multiplicity.__class__ is not int:
            raise TypeError(f"threshold: f({key!r}, {count}) returned {multiplicity!r}, "
                            f"not an integer")
        return {(): multiplicity} if multiplicity else {}

    def data(self, key: Any, val: Any) -> Any:
        return key


def user_reduction(logic: Callable[[Any, list, list], None] | None,
                   aggs: dict | None) -> tuple[Reduction | None, AggregateSpec | None]:
    """What ``reduce(logic)`` (Python) or ``reduce(aggs=...)`` (Arrow) asks for: the
    reduction and the aggregation :func:`reduce_stream` takes; a TypeError unless exactly
    one of them is given."""
    if aggs is not None:
        if logic is not None:
            raise TypeError("reduce takes either logic (Python) or aggs (Arrow), not both")
        return None, aggregate_spec(aggs)
    if logic is None:
        raise TypeError("reduce needs logic(key, input, output) (or aggs=... for Arrow)")
    return UserReduction(logic), None


def distinct_count(key: Any, count: int) -> int:
    """``distinct``'s threshold: each record with a positive count, once."""
    return 1 if count > 0 else 0


class Reducer(Protocol):
    """How a reduce operator retires one kind of batch: :class:`PythonReducer` (key by
    key, with a :class:`Reduction`), :class:`TotalsReducer` (its ``of_total`` ones at
    totally ordered times) or ``ArrowReducer`` (grouped aggregations), chosen by the first
    batch."""

    @property
    def reads_history(self) -> bool:
        """Whether later calls of :meth:`retire` read the input's trace. Once it is False,
        the operator lets go of its handle on that trace (which, unless another operator
        shares the arrangement, stops keeping batches) and passes ``history=[]``."""
        ...

    def retire(self, batches: list, history: list, out_history: list, lower: list,
               upper: list) -> tuple[list, list]:
        """The output for ``[lower, upper)`` as ``[(time, updates)]`` and the batches for
        the output trace, oldest first (none, or up to one for ``[lower, upper)`` after one
        that brings it up to ``lower``), from the input's new ``batches``, its trace
        (``history``, while :attr:`reads_history`) and the output trace (``out_history``),
        both through ``lower``."""
        ...

    def pending_times(self) -> list:
        """The times, beyond the last upper, at which output may still change."""
        ...


def reduce_stream(arranged: "Arranged", reduction: Reduction | None, name: str,
                  arrow_spec: AggregateSpec | None = None) -> "Stream":
    """The updates of the reduce operator on ``arranged``: ``reduction`` says what to do
    with Python batches and ``arrow_spec`` (an aggregation of :mod:`..arrow.reduce`) with
    Arrow batches; which one applies is seen from the first batch."""
    scope = arranged.scope
    source = reader(arranged.trace, scope)
    minimum = [scope.kind.minimum()]
    out_box = TraceBox(f"{name} output", minimum, scope.kind, scope.dataflow.worker,
                       trace_phase(scope))
    out_trace = TraceAgent(out_box)
    scope.hold(out_trace)
    total = scope.kind.depth == 0 and scope.kind.base is int
    reducer: Reducer | None = None

    def ctor(capability, info):
        capability.drop()
        caps = CapabilitySet()
        lower, upper = list(minimum), list(minimum)

        def restored(resumed_upper: list | None, later: list) -> None:
            nonlocal lower, upper
            if resumed_upper is not None:   # an output trace holds nothing for later times
                lower, upper = resumed_upper, resumed_upper
        if checkpointing(scope):
            TraceState(scope, info, out_box, restored)

        def logic(input, output):
            nonlocal lower, upper
            batches: list = []
            for cap, received in input:
                time = cap.time
                if not any(less_equal(c.time, time) for c in caps):
                    caps.insert(cap.retain())
                batches.extend(received)
            new_upper = antichain_join(batches[-1].upper if batches else upper,
                                       input.frontier.frontier())
            if new_upper == upper:
                return
            lower, upper = upper, new_upper
            nonlocal reducer
            if reducer is None and batches:
                reducer = _reducer_for(batches[0], name, reduction, arrow_spec, total, scope)
            if reducer is not None and any(not beyond(upper, c.time) for c in caps):
                history = [] if source.closed else source.batches_through(lower)
                produced, out_batches = reducer.retire(
                    batches, history, out_trace.batches_through(lower), lower, upper)
                if not source.closed and not reducer.reads_history and not checkpointing(scope):
                    source.close()      # a checkpoint snapshots the input trace: keep it
                give_reduced(output, caps, produced, out_batches, out_box)
                caps.downgrade(antichain(reducer.pending_times()))
            out_box.seal(upper)
            if not upper:
                source.close()
                out_trace.close()
            else:
                if not source.closed:
                    source._follow(upper, upper)
                out_trace._follow(upper, upper)
        return logic
    return arranged.stream.unary_frontier(Pipeline, name, ctor)


def _reducer_for(batch: Any, name: str, reduction: Reduction | None,
                 arrow_spec: AggregateSpec | None, total: bool, scope: Any) -> Reducer:
    """The reducer of :func:`reduce_stream` for the form of its first ``batch``: Python
    updates take ``reduction``, Arrow batches ``arrow_spec``."""
    if not hasattr(batch, "to_record_batches"):
        if reduction is None:
            raise TypeError(f"{name} works on Arrow arrangements; this one holds "
                            f"Python updates")
        if total and reduction.of_total:
            return TotalsReducer(reduction)
        return PythonReducer(reduction, total)
    if arrow_spec is None:
        call = reduction.call if reduction is not None else name
        raise TypeError(f"{name}: {call} calls a Python function on Python records, and "
                        f"this collection holds Arrow batches; use the Arrow aggregations "
                        f"(reduce(aggs=...), count(), distinct())")
    return ArrowReducer(name, arrow_spec, scope.kind, keep_index=not checkpointing(scope))


def give_reduced(output: Any, caps: CapabilitySet, produced: list, out_batches: list,
                 out_box: TraceBox) -> None:
    """Send each ``(time, updates)`` of a reducer's ``produced`` at its time (through the
    capability of ``caps`` at or before it), and add ``out_batches`` to the output trace."""
    for time, updates in produced:
        cap = next(c for c in caps if less_equal(c.time, time))
        output.give_at(cap if cap.time == time else cap.delayed(time), updates)
    for out_batch in out_batches:
        out_box.insert(out_batch, None)


class PythonReducer:
    """Retires intervals of Python batches key by key (see the module docstring)."""

    reads_history = True

    def __init__(self, reduction: Reduction, total: bool) -> None:
        self.reduction = reduction
        self.total = total
        self.pending: dict = {}        # key -> set of interesting times beyond the upper

    def pending_times(self) -> list:
        return list(set().union(*self.pending.values())) if self.pending else []

    def retire(self, batches: list, history: list, out_history: list, lower: list,
               upper: list) -> tuple[list, list]:
        """Output updates for ``[lower, upper)`` as ``[(time, updates)]`` (each list at one
        capability time: the earliest time of its updates), and the batches for the output
        trace."""
        reduction = self.reduction
        pending = self.pending
        keys = set(pending)
        for batch in batches:
            keys.update(batch.keys())
        out_data: dict = {}
        by_time: dict = {}
        new_of, old_of, old_out_of = (updates_reader(b) for b in (batches, history, out_history))
        for key in keys:
            seeds = pending.pop(key, None)
            if seeds:
                ready = {t for t in seeds if not beyond(upper, t)}
                waiting = seeds - ready
            else:
                ready, waiting = set(), set()
            new = new_of(key)
            if not new and not ready:
                if waiting:
                    pending[key] = waiting
                continue
            old = old_of(key)
            old_out = old_out_of(key)
            corrections, future = self._reduce_key(key, new, old, old_out, ready, upper)
            if waiting or future:
                pending[key] = waiting | future
            if corrections:
                out_data[key] = corrections
                data = reduction.data
                for val, time, diff in corrections:
                    by_time.setdefault(time, []).append((data(key, val), time, diff))
        return list(by_time.items()), [Batch.from_keyed(out_data, lower, upper)] if out_data else []

    def _reduce_key(self, key: Any, new: list, old: list, old_out: list, ready: set,
                    upper: list) -> tuple[list, set]:
        if self.total:
            times = sorted({t for _, t, _ in new} | ready)
            future: set = set()
        else:
            times, future = interesting_times(
                {t for _, t, _ in new} | ready,
                {t for _, t, _ in chain(old, old_out, new)}, upper)
        inputs = old + new
        outputs = list(old_out)
        corrections = []
        desired = self.reduction.desired
        single = self.total and len(times) == 1
        for time in times:
            if single:
                wanted = desired(key, inputs)
                have = accumulate(outputs)
            elif self.total:
                wanted = desired(key, [u for u in inputs if u[1] <= time])
                have = accumulate([u for u in outputs if u[1] <= time])
            else:
                wanted = desired(key, [u for u in inputs if less_equal(u[1], time)])
                have = accumulate([u for u in outputs if less_equal(u[1], time)])
            for val in wanted.keys() | have.keys():
                diff = wanted.get(val, 0) - have.get(val, 0)
                if diff:
                    corrections.append((val, time, diff))
                    outputs.append((val, time, diff))
        return corrections, future


class TotalsReducer:
    """Retires intervals of Python batches for an ``of_total`` reduction (``count``,
    ``distinct``) at totally ordered times, from each key's summed diff, kept in one dict:
    a key's output before ``lower`` is the reduction of its total, so neither trace is read
    and there is no output trace to write and merge. The dict is made from the input trace
    at the first interval (empty, or the history a resumed run restored).

    >>> reducer = TotalsReducer(CountReduction())
    >>> batch = Batch.from_updates([(("a", ()), 0, 2), (("b", ()), 0, 1)], [0], [1])
    >>> reducer.retire([batch], [], [], [0], [1])
    ([(0, [(('a', 2), 0, 1), (('b', 1), 0, 1)])], [])
    >>> later = Batch.from_updates([(("a", ()), 1, -2)], [1], [2])
    >>> reducer.retire([later], [batch], [], [1], [2])
    ([(1, [(('a', 2), 1, -1)])], [])
    """

    def __init__(self, reduction: Reduction) -> None:
        self.reduction = reduction
        self.totals: dict | None = None

    @property
    def reads_history(self) -> bool:
        """Only the first interval reads the input's trace, to make the totals."""
        return self.totals is None

    def pending_times(self) -> list:
        return []

    def retire(self, batches: list, history: list, out_history: list, lower: list,
               upper: list) -> tuple[list, list]:
        """What :meth:`PythonReducer.retire` returns, without an output trace's batch."""
        if self.totals is None:
            self.totals = {}
            for batch in history:
                for key, updates in batch.items():
                    self.totals[key] = self.totals.get(key, 0) + sum(d for _, _, d in updates)
        changes: dict = {}                   # key -> {time: summed diff}
        for batch in batches:
            for key, updates in batch.items():
                at = changes.setdefault(key, {})
                for _, time, diff in updates:
                    at[time] = at.get(time, 0) + diff
        return self._changed(changes), []

    def retire_updates(self, updates: list) -> list:
        """The output (``[(time, updates)]``) of ``((key, val), time, diff)`` updates as they
        arrived, not sealed into batches (``count_total_stream``; the totals start empty)."""
        if self.totals is None:
            self.totals = {}
        changes: dict = {}
        for (key, _), time, diff in updates:
            at = changes.get(key)
            if at is None:
                changes[key] = {time: diff}
            else:
                at[time] = at.get(time, 0) + diff
        return self._changed(changes)

    def _changed(self, changes: dict) -> list:
        """The output for ``{key: {time: summed diff}}`` against the totals, which it
        moves on."""
        totals = self.totals
        assert totals is not None
        desired, data = self.reduction.desired, self.reduction.data
        by_time: dict = {}
        for key, at in changes.items():
            total = totals.get(key, 0)
            have = desired(key, [((), None, total)])
            for time in sorted(at) if len(at) > 1 else at:
                total += at[time]
                wanted = desired(key, [((), time, total)])
                for val in wanted.keys() | have.keys():
                    diff = wanted.get(val, 0) - have.get(val, 0)
                    if diff:
                        by_time.setdefault(time, []).append((data(key, val), time, diff))
                have = wanted
            if total:
                totals[key] = total
            else:
                totals.pop(key, None)
        return list(by_time.items())


def accumulate(updates: list) -> dict:
    """``{val: summed diff}`` of ``(val, time, diff)`` updates, zeros dropped."""
    sums: dict = {}
    get = sums.get
    for val, _, diff in updates:
        sums[val] = get(val, 0) + diff
    return {val: diff for val, diff in sums.items() if diff}
