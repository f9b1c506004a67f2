"""The machinery of joins of two arrangements: each new batch of one side meets the other
side's trace (``Collection.join``, ``join_map``, ``semijoin``, ``Arranged.join_core`` are
built on :func:`join_core_stream`).

Every batch arriving on input 1 is joined with the batches of trace 2 that input 2 has
already delivered (its *acknowledged* frontier), and then every batch of input 2 with the
batches of trace 1 acknowledged so far, so each pair of updates meets exactly once. A pair
``(v1, t1, d1)``, ``(v2, t2, d2)`` of one key gives ``f(key, v1, v2)`` at ``t1.join(t2)``
with diff ``d1 * d2``. Trace 2 may be compacted to input 1's frontier (every later input-1
time is beyond it) and merged up to what was acknowledged; once an input ends, the other
side's trace is released. An imported arrangement holds its trace's contents as of the
import's frontier (``since``): the matches with its history are advanced by it, as its
replayed batches are. Examples are on the methods (``Collection.join`` and the others).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from ...dataflow import Pipeline
from ..arrow.join import ArrowJoiner
from ..lattice import advance_by, frontier_le, join
from .arrange import TraceReader, reader

if TYPE_CHECKING:
    from ...ops import Stream
    from ..collection import Arranged

JOIN_PAIR, JOIN_MAP, JOIN_MANY, JOIN_SEMI = 0, 1, 2, 3
"""How a matched pair becomes output: ``(key, (v1, v2))``, ``f(key, v1, v2)``, each item of
the iterable ``f(key, v1, v2)``, or (Arrow semijoin) the first side's row."""


class Joiner(Protocol):
    """How a join matches one kind of batch: :class:`PythonJoiner` (key by key) or
    ``ArrowJoiner`` (hash lookups), chosen by the first non-empty batch."""

    def join(self, batch: Any, others: list, swapped: bool, cap_time: Any) -> list:
        """``[(time, updates)]``: every match of ``batch`` (from input 2 if ``swapped``)
        with the batches ``others`` of the other input's trace; a time of None means the
        batch's capability time ``cap_time``."""
        ...


def join_core_stream(arranged1: "Arranged", arranged2: "Arranged", f: Callable | None,
                     mode: int, name: str) -> "Stream":
    """The updates of the join of two arrangements of one scope by key (see the module
    docstring), each match made into output as ``mode`` says."""
    scope = arranged1.scope
    if arranged2.scope is not scope:
        advice = ("an arrangement is shared with another dataflow through its trace: "
                  "arranged.trace.import_(scope) in the dataflow that uses it"
                  if arranged2.scope.dataflow is not scope.dataflow else
                  "bring the outer one in with .enter(scope)")
        raise ValueError(f"{name}: the arrangements belong to different scopes "
                         f"({arranged1.scope.name!r}, {arranged2.scope.name!r}); {advice}")
    trace1 = reader(arranged1.trace, scope)
    trace2 = reader(arranged2.trace, scope)
    minimum = [scope.kind.minimum()]
    since = tuple(None if a.since is None or frontier_le(a.since, minimum) else a.since
                  for a in (arranged1, arranged2))
    total = scope.kind.depth == 0 and scope.kind.base is int

    def ctor(capability, info):
        capability.drop()
        sides = _JoinSides(name, mode, f, total, scope.kind, (trace1, trace2), since, minimum)

        def logic(input1, input2, output):
            sides.drain(0, input1, output)
            sides.drain(1, input2, output)
            maintain(trace1, sides.acknowledged[0], input2.frontier.frontier())
            maintain(trace2, sides.acknowledged[1], input1.frontier.frontier())
        return logic
    return arranged1.stream.binary_frontier(arranged2.stream, Pipeline, Pipeline, name, ctor)


class _JoinSides:
    """What one join operator keeps between its activations: each input's acknowledged
    upper (the batches received so far), the joiner its first batch chose, whether the two
    sides' forms were checked. (An object rather than closures that call each other:
    compiled, those would hold themselves in a reference cycle, and a dropped dataflow's
    join would wait for the cycle collector to be freed.)"""

    __slots__ = ("name", "mode", "f", "total", "kind", "traces", "since", "acknowledged",
                 "joiner", "forms_checked")

    def __init__(self, name: str, mode: int, f: Callable | None, total: bool, kind: Any,
                 traces: tuple[TraceReader, TraceReader], since: tuple, minimum: list) -> None:
        self.name, self.mode, self.f, self.total, self.kind = name, mode, f, total, kind
        self.traces = traces
        self.since = since
        self.acknowledged = [list(minimum), list(minimum)]   # the uppers of the batches received
        self.joiner: Joiner | None = None
        self.forms_checked = False

    def _choose(self, batch: Any) -> Joiner:
        if hasattr(batch, "to_record_batches"):
            if self.mode not in (JOIN_PAIR, JOIN_SEMI):
                raise TypeError(f"{self.name}: Arrow arrangements join on their key columns, "
                                f"with no per-pair function: arranged.join(other), "
                                f"collection.join(other, on=...) or semijoin")
            return ArrowJoiner(self.name, self.mode == JOIN_SEMI, self.kind)
        return PythonJoiner(self.f, self.mode, self.total)

    def drain(self, side: int, input: Any, output: Any) -> None:
        """Join each batch of input ``side`` with the other trace as acknowledged so far."""
        acknowledged = self.acknowledged
        others: list | None = None          # the other trace's batches: the same for all
        for cap, batches in input:
            for batch in batches:
                if len(batch):
                    joiner = self.joiner
                    if joiner is None:
                        joiner = self.joiner = self._choose(batch)
                    if others is None:
                        others = self.traces[1 - side].batches_through(acknowledged[1 - side])
                    if others:
                        if not self.forms_checked:
                            self.forms_checked = _one_form(self.name, side, batch, others)
                        as_of = self.since[1 - side]
                        for time, out in joiner.join(batch, others, side == 1, cap.time):
                            if as_of is not None:
                                time, out = _advanced(time, out, as_of, cap.time)
                            output.give_at(cap if time is None else cap.delayed(time), out)
                acknowledged[side] = batch.upper


def _one_form(name: str, side: int, batch: Any, others: list) -> bool:
    """Whether ``batch`` (of input ``side``) could be checked against the other input's
    non-empty ``others``: a TypeError if one side holds Arrow rows and the other Python
    updates (an Arrow batch has ``to_record_batches``)."""
    arrow = hasattr(batch, "to_record_batches")
    for other in others:
        if len(other):
            if hasattr(other, "to_record_batches") != arrow:
                first_arrow = arrow == (side == 0)
                kinds = ("Arrow rows", "Python updates")[::1 if first_arrow else -1]
                raise TypeError(f"{name}: input 1 holds {kinds[0]} and input 2 {kinds[1]}: "
                                f"both sides of a join hold one kind")
            return True
    return False


def _advanced(time: Any, out: Any, since: list, cap_time: Any) -> tuple[Any, Any]:
    """A join's output group ``(time, out)`` (Python updates, each at its own time; or an
    Arrow batch at ``time``, None meaning ``cap_time``) with its times advanced by
    ``since``. The join of ``t1`` with ``t2`` advanced by ``since`` is ``t1.join(t2)``
    advanced by it (times form a distributive lattice)."""
    if out.__class__ is list:
        return time, [(data, advance_by(t, since), diff) for data, t, diff in out]
    return advance_by(cap_time if time is None else time, since), out


def maintain(trace: TraceReader, acknowledged: list, other_frontier: list) -> None:
    """Let ``trace`` compact to what the other input may still bring (``other_frontier``)
    and merge up to ``acknowledged``; release it once the other input has ended."""
    if trace.closed:
        return
    if not other_frontier:
        trace.close()
        return
    trace._follow(other_frontier, acknowledged)


class PythonJoiner:
    """Joins a batch of Python updates with trace batches, key by key."""

    def __init__(self, f: Callable | None, mode: int, total: bool) -> None:
        self.f = f
        self.mode = mode
        self.total = total

    def join(self, batch: Any, others: list, swapped: bool, cap_time: Any) -> list:
        """``[(None, updates)]``: every match of ``batch`` (from input 2 if ``swapped``)
        with ``others`` (the other input's trace), sent at the batch's capability."""
        out: list = []
        append = out.append
        extend = out.extend
        f: Any = self.f
        mode, total = self.mode, self.total
        mine = batch.keys()
        for other in others:
            get_mine, get_other = batch.get, other.get
            for key in mine & other.keys():
                ups_mine = get_mine(key)
                ups_other = get_other(key)
                if not ups_mine or not ups_other:
                    continue
                if swapped:
                    ups1, ups2 = ups_other, ups_mine
                else:
                    ups1, ups2 = ups_mine, ups_other
                for v1, t1, d1 in ups1:
                    for v2, t2, d2 in ups2:
                        if total:
                            time = t1 if t1 >= t2 else t2
                        else:
                            time = join(t1, t2)
                        if mode == JOIN_PAIR:
                            append(((key, (v1, v2)), time, d1 * d2))
                        elif mode == JOIN_SEMI:
                            append(((key, v1), time, d1 * d2))
                        elif mode == JOIN_MAP:
                            append((f(key, v1, v2), time, d1 * d2))
                        else:
                            diff = d1 * d2
                            extend([(x, time, diff) for x in f(key, v1, v2)])
        return [(None, out)] if out else []
