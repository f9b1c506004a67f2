"""Reachability: which times could still arrive at each operator input.

A dataflow is a graph of nodes (operators) with input ports (*targets*) and output ports
(*sources*). Edges connect a source to targets and do not change times; inside a node, a
path from input ``i`` to output ``o`` changes times by the node's path summaries. Nested
scopes are flattened into one graph: entering a scope is a node whose summary maps ``t`` to
``Product(t, 0)`` and leaving one maps ``Product(t, i)`` back to ``t``.

The :class:`Tracker` is a pure, I/O-free state machine: it is driven by pointstamp count
changes (capabilities held at sources, messages in flight to targets) and maintains, for
every location, the frontier of times those pointstamps imply there. Changes are pushed
through the graph in time order, as timely's ``reachability.rs`` does, so that cyclic
implications cancel rather than sustain themselves.

>>> graph = GraphBuilder()
>>> for name, step in [("a", 0), ("b", 0), ("c", 1)]:
...     _ = graph.add_node(name, inputs=1, outputs=1, summaries=[[[step]]])
>>> graph.add_edge((0, 0), (1, 0)); graph.add_edge((1, 0), (2, 0)); graph.add_edge((2, 0), (0, 0))
>>> tracker = graph.build()
>>> tracker.update(tracker.source(0, 0), 17, 1)
>>> sorted(tracker.node_of(target) for target in tracker.propagate_all())
[0, 1, 2]
>>> [tracker.implications(tracker.target(n, 0)).frontier() for n in range(3)]
[[18], [17], [17]]
"""
from __future__ import annotations

import math
from heapq import heappop, heappush
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

from .frontier import MutableAntichain
from .timestamp import (Product, TimeKind, Timestamp, advance, check_summary, is_identity,
                        less_than, minimum_of)


class _Top:
    """Sorts after every time: pads the coordinates of outer times when ordering them
    together with the times of nested scopes."""

    __slots__ = ()

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return other is not self

    def __eq__(self, other: object) -> bool:
        return other is self

    def __hash__(self) -> int:
        return 0


_TOP = _Top()
_AFTER_ROUNDS = math.inf
"""What pads an outer int time to sort after every round of the loop at that time, where
all times are ints or ``Product``s of ints (compared in C, unlike :data:`_TOP`)."""


class CycleError(ValueError):
    """A cycle in the dataflow graph does not advance time.

    >>> from sparktimely.progress import GraphBuilder
    >>> graph = GraphBuilder()
    >>> node = graph.add_node("Loop", 1, 1, [[[0]]])
    >>> graph.add_edge((node, 0), (node, 0))
    >>> graph.build()
    Traceback (most recent call last):
    ...
    sparktimely.progress.reachability.CycleError: ...
    """


class GraphBuilder:
    """Describes nodes, their internal path summaries and the edges between them; ``build``
    makes the :class:`Tracker`. Timely's example, a cycle of three nodes, one advancing time:

    >>> graph = GraphBuilder()
    >>> for name, step in [("a", 0), ("b", 0), ("c", 1)]:
    ...     node = graph.add_node(name, inputs=1, outputs=1, summaries=[[[step]]])
    >>> graph.add_edge((0, 0), (1, 0)); graph.add_edge((1, 0), (2, 0))
    >>> graph.add_edge((2, 0), (0, 0))
    >>> tracker = graph.build()
    """

    def __init__(self) -> None:
        self._names: list[str] = []
        self._shapes: list[tuple[int, int]] = []
        self._summaries: list[list[list[list[Any]]]] = []
        self._kinds: list[TimeKind] = []
        self._edges: list[tuple[tuple[int, int], tuple[int, int]]] = []
        self._sources: dict[tuple[int, int], int] = {}
        self._targets: dict[tuple[int, int], int] = {}
        self._frontiers: list[MutableAntichain] = []

    def add_node(self, name: str, inputs: int, outputs: int,
                 summaries: Sequence[Sequence[Sequence[Any]]] | None = None,
                 input_kinds: Sequence[TimeKind] | None = None,
                 output_kinds: Sequence[TimeKind] | None = None) -> int:
        """Add a node; ``summaries[i][o]`` lists the path summaries from input i to output o
        (empty: not connected). By default every input reaches every output unchanged."""
        if summaries is None:
            summaries = [[[0] for _ in range(outputs)] for _ in range(inputs)]
        if len(summaries) != inputs or any(len(row) != outputs for row in summaries):
            raise ValueError(f"operator {name!r}: summaries must be {inputs} x {outputs}")
        for row in summaries:
            for paths in row:
                for summary in paths:
                    check_summary(summary)
        node = len(self._names)
        self._names.append(name)
        self._shapes.append((inputs, outputs))
        self._summaries.append([[list(paths) for paths in row] for row in summaries])
        for ports, kinds, ids in ((inputs, input_kinds, self._targets),
                                  (outputs, output_kinds, self._sources)):
            kinds = list(kinds or [TimeKind()] * ports)
            for port in range(ports):
                ids[(node, port)] = len(self._kinds)
                self._kinds.append(kinds[port])
                self._frontiers.append(MutableAntichain())
        return node

    @property
    def sources(self) -> Mapping[tuple[int, int], int]:
        """The location id of every ``(node, output port)`` (a read-only view)."""
        return MappingProxyType(self._sources)

    @property
    def targets(self) -> Mapping[tuple[int, int], int]:
        """The location id of every ``(node, input port)`` (a read-only view)."""
        return MappingProxyType(self._targets)

    def source(self, node: int, port: int) -> int:
        """The location id of output ``port`` of ``node`` (stable from ``add_node`` on)."""
        return self._sources[(node, port)]

    def target(self, node: int, port: int) -> int:
        """The location id of input ``port`` of ``node`` (stable from ``add_node`` on)."""
        return self._targets[(node, port)]

    def implications(self, location: int) -> MutableAntichain:
        """The frontier the built tracker will maintain for ``location`` (a live view)."""
        return self._frontiers[location]

    def add_edge(self, source: tuple[int, int], target: tuple[int, int]) -> None:
        """Connect output ``source = (node, port)`` to input ``target = (node, port)``."""
        self._edges.append((source, target))

    def check_cycles(self) -> None:
        """Raise CycleError if some cycle can carry a time back to where it started.

        A cycle whose shallowest location is in a scope of depth ``d`` must advance one of
        the time coordinates ``0..d`` (the root time, then one iteration counter per nested
        scope): deeper coordinates are reset on leaving and entering scopes, so an advance
        there does not count. Whether a summary advances the root coordinate is decided by
        its own order: applied to the minimum time, it gives a strictly greater time (so a
        ``Product(0, 1)`` summary advances a root scope whose times are ``Product``).
        Checked per depth with Tarjan's strongly connected components over the paths that
        advance none of those coordinates.
        """
        depth_of = [kind.depth for kind in self._kinds]
        for depth in sorted(set(depth_of)):
            succ: dict[int, list[int]] = {}
            for source, target in self._edges:
                s, t = self._sources[source], self._targets[target]
                if depth_of[s] >= depth and depth_of[t] >= depth:
                    succ.setdefault(s, []).append(t)
            for node, rows in enumerate(self._summaries):
                for i, row in enumerate(rows):
                    t = self._targets[(node, i)]
                    for o, paths in enumerate(row):
                        s = self._sources[(node, o)]
                        if (depth_of[t] >= depth and depth_of[s] >= depth
                                and any(not _advances(summary, self._kinds[s], depth)
                                        for summary in paths)):
                            succ.setdefault(t, []).append(s)
            for component in _strongly_connected(succ):
                if any(depth_of[loc] == depth for loc in component):
                    names = sorted({self._names[self._node(loc)] for loc in component})
                    raise CycleError(
                        "dataflow cycle does not advance time through operators "
                        + ", ".join(names)
                        + " (a loop needs a feedback summary greater than zero in the "
                        "scope where it closes)")

    def _node(self, location: int) -> int:
        for ids in (self._sources, self._targets):
            for (node, _), loc in ids.items():
                if loc == location:
                    return node
        raise KeyError(location)

    def build(self) -> "Tracker":
        """Check the graph and compile it into a Tracker. Only a graph with an edge back to
        an earlier node (or the same one) can have a cycle: one whose edges all go forward,
        as every dataflow without a loop variable's, needs no cycle check."""
        backward = False
        for source, target in self._edges:
            for (node, port), side in ((source, 1), (target, 0)):
                if not (0 <= node < len(self._shapes) and 0 <= port < self._shapes[node][side]):
                    raise ValueError(f"edge {source} -> {target} names a missing port")
            backward = backward or source[0] >= target[0]
        if backward:
            self.check_cycles()
        return Tracker(self)


def _advances(summary: Any, kind: TimeKind, depth: int) -> bool:
    """True if ``summary``, on times of ``kind``, advances one of the coordinates
    ``0..depth``: the root time or the inner time of a nested scope, each by its own order
    (applied to the coordinate's minimum, it gives a strictly greater value).

    >>> nested = TimeKind(int).nested()
    >>> _advances(Product(0, 1), nested, 1), _advances(Product(0, 1), nested, 0)
    (True, False)
    >>> _advances(Product(0, 1), TimeKind(Product), 0)
    True
    >>> deeper = nested.nested()                 # Product(0, 1) there means (0, 0, +1)
    >>> _advances(Product(0, 1), deeper, 2), _advances(Product(0, 1), deeper, 1)
    (True, False)
    """
    if is_identity(summary):
        return False
    parts = []
    for _ in range(kind.depth):
        if summary.__class__ is Product:
            parts.append(summary.inner)
            summary = summary.outer
        else:                 # an int 0 in a nested position: this and every outer part 0
            parts.append(0)
    parts.append(summary)
    parts.reverse()                                # root first, then each nested scope's
    types = (kind.base,) + kind.inners
    return any(_advances_coordinate(part, of) for part, of in zip(parts[:depth + 1], types))


def _advances_coordinate(summary: Any, of: type) -> bool:
    if summary.__class__ is int:
        return summary != 0
    minimum = minimum_of(of)
    return less_than(minimum, advance(minimum, summary))


def _strongly_connected(succ: dict[int, list[int]]) -> list[list[int]]:
    """The strongly connected components of ``succ`` that contain a cycle (iterative Tarjan)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    components = []
    for root in list(succ):
        if root in index:
            continue
        work = [(root, iter(succ.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(succ.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in succ.get(node, ()):
                    components.append(component)
    return components


class Tracker:
    """Maintains the frontier of implied times at every location of a graph.

    Locations are small integers (see :meth:`source` and :meth:`target`). Feed it count
    changes with :meth:`update` and call :meth:`propagate_all`, which returns the targets
    whose implied frontier changed.

    >>> graph = GraphBuilder()
    >>> a, b = graph.add_node("a", 1, 1), graph.add_node("b", 1, 1, summaries=[[[1]]])
    >>> graph.add_edge((a, 0), (b, 0)); graph.add_edge((b, 0), (a, 0))
    >>> tracker = graph.build()
    >>> tracker.update(tracker.source(a, 0), 17, +1)   # a's output holds time 17
    >>> changed = tracker.propagate_all()
    >>> tracker.implications(tracker.target(b, 0)).frontier()
    [17]
    >>> tracker.implications(tracker.target(a, 0)).frontier()   # through b, which adds 1
    [18]
    """

    def __init__(self, graph: GraphBuilder) -> None:
        sources, targets = graph._sources, graph._targets
        self._sources = sources
        self._targets = targets
        count = len(graph._kinds)
        self._kinds = graph._kinds
        self._is_target = [False] * count
        self._node_of = [0] * count
        for (node, _), loc in targets.items():
            self._is_target[loc] = True
            self._node_of[loc] = node
        for (node, _), loc in sources.items():
            self._node_of[loc] = node
        self._edges: list[list[int]] = [[] for _ in range(count)]
        for source, target in graph._edges:
            self._edges[sources[source]].append(targets[target])
        # (source, summary) per target; summary None where it leaves times as they are
        self._internal: list[list[tuple[int, Any]]] = [[] for _ in range(count)]
        for node, rows in enumerate(graph._summaries):
            for i, row in enumerate(rows):
                for o, paths in enumerate(row):
                    for summary in paths:
                        self._internal[targets[(node, i)]].append(
                            (sources[(node, o)], None if _unchanging(summary) else summary))
        self._pointstamps = [MutableAntichain() for _ in range(count)]
        self._implications = graph._frontiers
        self._pending: dict[tuple[int, Timestamp], int] = {}
        self._tracked = 0
        depth = max((k.depth for k in self._kinds), default=0)
        bases = {k.base for k in self._kinds}
        # The worklist of propagate_all: a list ordered by (key, location), where the key is
        # the time (None: the time itself) or its coordinates padded for nested scopes.
        # A heap when times are totally ordered; else each pop scans for a least entry.
        self._order_key: Callable[[int, Timestamp], Any] | None = None
        self._push: Callable[[list, tuple], None] = heappush
        self._pop: Callable[[list], tuple] = heappop
        if not (depth == 0 and bases <= {int}):
            ordered = all(getattr(base, "__lt__") is not getattr(object, "__lt__")
                          for base in bases)
            self._order_key = self._nested_order_key(depth, ordered)
            if not ordered:
                self._push, self._pop = list.append, _pop_least

    def _nested_order_key(self, depth: int, ordered: bool):
        """The worklist's key; ``ordered``: the keys are compared with ``<`` (a heap)."""
        kinds = self._kinds
        if depth == 1 and all(k.base is int and k.inners in ((), (int,)) for k in kinds):
            def order_key_1(loc: int, time: Timestamp) -> tuple:   # one loop, int times
                return (time, _AFTER_ROUNDS) if time.__class__ is int else (time.outer, time.inner)
            return order_key_1
        if ordered and any(Product in k.inners for k in kinds):
            # A Product refuses to compare with _TOP (it raises, as for any other type):
            # its nested tuple orders alike (lexicographically) and sorts before _TOP.
            def order_key_products(loc: int, time: Timestamp) -> tuple:
                kind = kinds[loc]
                return tuple(_as_tuple(c) for c in kind.coordinates(time)) + \
                    (_TOP,) * (depth - kind.depth)
            return order_key_products

        def order_key(loc: int, time: Timestamp) -> tuple:
            kind = kinds[loc]
            return kind.coordinates(time) + (_TOP,) * (depth - kind.depth)
        return order_key

    def source(self, node: int, port: int) -> int:
        """The location id of output ``port`` of ``node``."""
        return self._sources[(node, port)]

    def target(self, node: int, port: int) -> int:
        """The location id of input ``port`` of ``node``."""
        return self._targets[(node, port)]

    def node_of(self, location: int) -> int:
        return self._node_of[location]

    def locations(self) -> int:
        """How many locations there are (their ids are ``0 .. locations() - 1``)."""
        return len(self._kinds)

    def update(self, location: int, time: Timestamp, delta: int) -> None:
        """Buffer a change in the count of pointstamp ``(location, time)``."""
        key = (location, time)
        pending = self._pending
        pending[key] = pending.get(key, 0) + delta

    def implications(self, location: int) -> MutableAntichain:
        """The frontier of times that could still reach ``location`` (a live view)."""
        return self._implications[location]

    def pointstamps(self, location: int) -> MutableAntichain:
        """The counts of pointstamps held at ``location`` itself."""
        return self._pointstamps[location]

    def is_global(self, location: int, time: Timestamp) -> bool:
        """True if removing pointstamp ``(location, time)`` could move a frontier: the
        pointstamp is counted (its count is positive: one that others' unshared increments
        have driven negative implies nothing), ``time`` is in the location's implied frontier,
        and nothing else there implies it."""
        if self._pointstamps[location].count_for(time) <= 0:
            return False
        implications = self._implications[location]
        return not implications.less_than(time) and implications.count_for(time) <= 1

    def has_pending(self) -> bool:
        """True if changes are buffered and not yet propagated."""
        return bool(self._pending)

    def tracking_anything(self) -> bool:
        """True while some pointstamp has a positive count (or changes are buffered)."""
        return self._tracked > 0 or any(self._pending.values())

    def propagate_all(self) -> set[int]:
        """Apply buffered changes; return the targets whose implied frontier changed."""
        changed: set[int] = set()
        if not self._pending:
            return changed
        pending, self._pending = self._pending, {}
        worklist: list = []         # (key, location, delta, time): see __init__
        key, push, pop = self._order_key, self._push, self._pop
        pointstamps = self._pointstamps
        for (loc, time), delta in pending.items():
            if delta:
                for t, d in pointstamps[loc].update(time, delta):
                    self._tracked += d
                    push(worklist, (key(loc, t) if key else t, loc, d, t))
        implications = self._implications
        is_target = self._is_target
        internal = self._internal
        edges = self._edges
        while worklist:
            order, loc, delta, time = pop(worklist)
            while worklist and worklist[0][0] == order and worklist[0][1] == loc:
                delta += pop(worklist)[2]            # the same change, pushed more than once
            if not delta:
                continue
            changes = implications[loc].update(time, delta)
            if not changes:
                continue
            if is_target[loc]:
                changed.add(loc)
                for source, summary in internal[loc]:
                    for t, d in changes:
                        if summary is not None:
                            t = advance(t, summary)
                        push(worklist, (key(source, t) if key else t, source, d, t))
            else:
                for target in edges[loc]:
                    for t, d in changes:
                        push(worklist, (key(target, t) if key else t, target, d, t))
        return changed


def _unchanging(summary: Any) -> bool:
    """True if ``summary`` leaves every time as it is (``0``, or a ``Product`` of such; not
    ``ENTER`` and ``LEAVE``, which change a time's type).

    >>> from sparktimely.progress.timestamp import ENTER
    >>> _unchanging(0), _unchanging(Product(0, 0)), _unchanging(Product(0, 1)), _unchanging(ENTER)
    (True, True, False, False)
    """
    if summary.__class__ is int:
        return summary == 0
    return summary.__class__ is Product and _unchanging(summary.outer) and \
        _unchanging(summary.inner)


def _pop_least(items: list) -> tuple:
    """The worklist's pop for times with only a partial order: an entry whose key no other
    entry's precedes, removed together with (and summed into) the entries of the same key
    and location (quadratic, but such time types are rare and their graphs small)."""
    best = 0
    for i in range(1, len(items)):
        if _coordinates_less(items[i][0], items[best][0]):
            best = i
    order, location, _, time = items[best]
    delta = 0
    rest = []
    for item in items:
        if item[1] == location and item[0] == order:
            delta += item[2]
        else:
            rest.append(item)
    items[:] = rest
    return order, location, delta, time


def _as_tuple(time: Any) -> Any:
    """A ``Product`` as nested tuples of its coordinates (ordered as it is); others as they
    are.

    >>> _as_tuple(Product(1, Product(2, 3))), _as_tuple(4)
    ((1, (2, 3)), 4)
    """
    if time.__class__ is Product:
        return (_as_tuple(time.outer), _as_tuple(time.inner))
    return time


def _coordinates_less(a: tuple, b: tuple) -> bool:
    """Lexicographic ``a < b`` where coordinates may be only partially ordered."""
    for x, y in zip(a, b):
        if x == y:
            continue
        if x.__class__ is int or x is _TOP:
            return x < y
        return less_than(x, y) if y is not _TOP else True
    return False
