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

from heapq import heappop, heappush
from typing import Any, Sequence

from .frontier import MutableAntichain
from .timestamp import TimeKind, Timestamp, advance, check_summary, is_identity


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


class CycleError(ValueError):
    """A cycle in the dataflow graph does not advance time."""


class GraphBuilder:
    """Describes nodes, their internal path summaries and the edges between them."""

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
        """Raise CycleError if some cycle can carry a time back to where it started."""
        sources, targets = self._sources, self._targets
        succ: dict[int, list[int]] = {}
        for source, target in self._edges:
            succ.setdefault(sources[source], []).append(targets[target])
        for node, rows in enumerate(self._summaries):
            for i, row in enumerate(rows):
                for o, paths in enumerate(row):
                    if any(is_identity(summary) for summary in paths):
                        succ.setdefault(targets[(node, i)], []).append(sources[(node, o)])
        owner = {loc: node for (node, _), loc in list(sources.items()) + list(targets.items())}
        state: dict[int, int] = {}   # 1: on the DFS stack, 2: finished
        for start in list(succ):
            if state.get(start):
                continue
            stack = [(start, iter(succ.get(start, ())))]
            path = [start]
            state[start] = 1
            while stack:
                loc, children = stack[-1]
                child = next(children, None)
                if child is None:
                    state[loc] = 2
                    stack.pop()
                    path.pop()
                elif state.get(child) == 1:
                    cycle = path[path.index(child):]
                    names = []
                    for l in cycle:
                        name = self._names[owner[l]]
                        if not names or names[-1] != name:
                            names.append(name)
                    raise CycleError(
                        "dataflow cycle does not advance time: "
                        + " -> ".join(names + [names[0]])
                        + " (a loop needs a feedback summary greater than zero)")
                elif not state.get(child):
                    state[child] = 1
                    stack.append((child, iter(succ.get(child, ()))))
                    path.append(child)

    def build(self) -> "Tracker":
        """Check the graph and compile it into a Tracker."""
        for source, target in self._edges:
            for (node, port), side in ((source, 1), (target, 0)):
                if not (0 <= node < len(self._shapes) and 0 <= port < self._shapes[node][side]):
                    raise ValueError(f"edge {source} -> {target} names a missing port")
        self.check_cycles()
        return Tracker(self)


class Tracker:
    """Maintains the frontier of implied times at every location of a graph.

    Locations are small integers (see :meth:`source` and :meth:`target`). Feed it count
    changes with :meth:`update` and call :meth:`propagate_all`, which returns the targets
    whose implied frontier changed.
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
        self._internal: list[list[tuple[int, Any]]] = [[] for _ in range(count)]
        for node, rows in enumerate(graph._summaries):
            for i, row in enumerate(rows):
                for o, paths in enumerate(row):
                    for summary in paths:
                        self._internal[targets[(node, i)]].append((sources[(node, o)], summary))
        self._pointstamps = [MutableAntichain() for _ in range(count)]
        self._implications = graph._frontiers
        self._pending: dict[tuple[int, Timestamp], int] = {}
        self._tracked = 0
        depth = max((k.depth for k in self._kinds), default=0)
        if depth == 0 and all(k.base is int for k in self._kinds):
            self._order_key = None
        else:
            self._order_key = self._nested_order_key(depth)

    def _nested_order_key(self, depth: int):
        kinds = self._kinds

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

    def kind_of(self, location: int) -> TimeKind:
        return self._kinds[location]

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

    def tracking_anything(self) -> bool:
        """True while some pointstamp has a positive count (or changes are buffered)."""
        return self._tracked > 0 or any(self._pending.values())

    def propagate_all(self) -> set[int]:
        """Apply buffered changes; return the targets whose implied frontier changed."""
        changed: set[int] = set()
        if not self._pending:
            return changed
        pending, self._pending = self._pending, {}
        order_key = self._order_key
        pointstamps = self._pointstamps
        heap: list = []
        for (loc, time), delta in pending.items():
            if delta:
                for t, d in pointstamps[loc].update_iter(((time, delta),)):
                    self._tracked += d
                    heappush(heap, (t if order_key is None else order_key(loc, t), loc, t, d))
        implications = self._implications
        is_target = self._is_target
        internal = self._internal
        edges = self._edges
        while heap:
            key, loc, time, delta = heappop(heap)
            while heap and heap[0][0] == key and heap[0][1] == loc:
                delta += heappop(heap)[3]
            if not delta:
                continue
            changes = implications[loc].update_iter(((time, delta),))
            if not changes:
                continue
            if is_target[loc]:
                changed.add(loc)
                for source, summary in internal[loc]:
                    for t, d in changes:
                        t = advance(t, summary)
                        heappush(heap, (t if order_key is None else order_key(source, t),
                                        source, t, d))
            else:
                for target in edges[loc]:
                    for t, d in changes:
                        heappush(heap, (t if order_key is None else order_key(target, t),
                                        target, t, d))
        return changed
