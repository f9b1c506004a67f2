"""A picture of a dataflow: Graphviz DOT of its operators (named boxes), its channels (edges
labelled with their pacts; loops dashed) and its nested scopes (clusters), optionally
annotated with the time and records the logs measured.

:func:`to_dot` takes a worker (every dataflow it built), a scope (its dataflow, also while it
is being built), a :class:`~sparktimely.logging.files.LogDirectory` or a list of
``"timely"`` events; :func:`render` turns the text into SVG, PNG or PDF with Graphviz's
``dot`` program when it is installed (``apt-get install graphviz``; ``to_dot`` needs
nothing).

>>> import sparktimely as st
>>> from sparktimely.logging import to_dot
>>> def job(worker):
...     worker.dataflow(lambda scope: scope.to_stream([1]).map(str).probe())
...     return to_dot(worker)
>>> print(st.execute_directly(job))
digraph dataflow {
  graph [fontname="Helvetica", fontsize=11];
  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica", fontsize=11];
  edge [fontname="Helvetica", fontsize=9];
  subgraph "cluster_0" {
    label="dataflow-0";
    "op0" [label="ToStream"];
    "op1" [label="Map"];
    "op2" [label="Probe"];
  }
  "op0" -> "op1" [label="Pipeline"];
  "op1" -> "op2" [label="Pipeline"];
}
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from typing import Any

from ..dataflow.scope import ScopeCore
from ..dataflow.worker import WorkerCore as Worker
from ._hooks import structure
from .events import ChannelsEvent, OperatesEvent
from .files import LogDirectory, of_lowest_worker
from .summary import OperatorSummary, Summary, summarize


class GraphvizMissing(RuntimeError):
    """Graphviz's ``dot`` program, needed to draw SVG/PNG/PDF, is not installed.

    >>> str(GraphvizMissing()).startswith("Graphviz's 'dot' program is not installed")
    True
    """

    def __init__(self) -> None:
        super().__init__("Graphviz's 'dot' program is not installed (Debian/Ubuntu: apt-get "
                         "install graphviz; macOS: brew install graphviz; conda: conda install "
                         "graphviz); to_dot() gives the DOT text without it")


@dataclass
class Graph:
    """Operators and channels (as their events), and the names of the scopes by address.

    >>> Graph().operators
    []
    """

    operators: list[OperatesEvent] = field(default_factory=list)
    channels: list[ChannelsEvent] = field(default_factory=list)
    scopes: dict[tuple, str] = field(default_factory=dict)

    @classmethod
    def from_events(cls, events: list) -> "Graph":
        """The graph the ``OperatesEvent``s and ``ChannelsEvent``s among ``events`` describe
        (those of the lowest-numbered worker, as every worker builds the same dataflows).

        >>> Graph.from_events([OperatesEvent(0, 0, 0, (0, 0), "A", "d")]).scopes
        {(0,): 'd'}
        """
        structural = of_lowest_worker([e for e in events
                                       if type(e) in (OperatesEvent, ChannelsEvent)])
        operators = sorted({e.id: e for e in structural if type(e) is OperatesEvent}.values(),
                           key=lambda e: e.id)
        channels = sorted({e.id: e for e in structural if type(e) is ChannelsEvent}.values(),
                          key=lambda e: e.id)
        scopes: dict[tuple, str] = {}
        for operator in operators:
            address, name = operator.addr[:-1], operator.scope
            while address and address not in scopes:     # enclosing scopes, by name
                scopes[address] = name
                address, name = address[:-1], name.rpartition("/")[0] or name
        return cls(operators, channels, scopes)


def graph_of(source: Any) -> Graph:
    """The graph of a worker, a scope's dataflow, a LogDirectory or a list of events.

    >>> import sparktimely as st
    >>> graph = st.example(lambda scope: graph_of(scope.to_stream([1]).map(str).scope))
    >>> [operator.name for operator in graph.operators]
    ['ToStream', 'Map']
    """
    if isinstance(source, Graph):
        return source
    if isinstance(source, LogDirectory):
        return Graph.from_events(source.events)
    if isinstance(source, (Worker, ScopeCore)):
        worker = source if isinstance(source, Worker) else source.dataflow.worker
        dataflows = dict(worker.dataflows())
        if isinstance(source, ScopeCore):
            dataflows[source.dataflow.index] = source.dataflow
        events: list = []
        operator, channel = 0, 0
        for index in sorted(dataflows):
            dataflow = dataflows[index]
            operates, channels = structure(dataflow, operator, channel, worker.index, 0)
            operator += len(operates)
            channel += len(channels)
            if not isinstance(source, ScopeCore) or dataflow is source.dataflow:
                events += operates + channels
        return Graph.from_events(events)
    return Graph.from_events(list(source))


ALIKE_SHOWN = 3
"""Dataflows of one shape drawn one by one; more are drawn once, for all of them."""


def collapse_alike(graph: Graph, summary: Summary | None = None
                   ) -> tuple[Graph, Summary | None]:
    """``graph`` (and ``summary``) with the dataflows that have one shape (the same operators,
    scopes and channels, as a program that builds a query dataflow per request makes) drawn
    once when there are more than :data:`ALIKE_SHOWN` of them: the first stands for all,
    its label says how many, and its operators and channels count what all of theirs did.

    >>> from sparktimely.logging import OperatesEvent
    >>> events = [OperatesEvent(0, 0, d, (d, 0), "Query", f"query-{d}") for d in range(5)]
    >>> graph, _ = collapse_alike(Graph.from_events(events))
    >>> [op.id for op in graph.operators], graph.scopes[(0,)]
    ([0], 'query-0 and 4 more alike, to query-4')
    """
    members: dict[int, list[OperatesEvent]] = {}
    for operator in graph.operators:
        members.setdefault(operator.addr[0], []).append(operator)
    channels: dict[int, list[ChannelsEvent]] = {}
    owner = {operator.id: operator.addr[0] for operator in graph.operators}
    for channel in graph.channels:
        channels.setdefault(owner.get(channel.source[0], -1), []).append(channel)
    shapes: dict[tuple, list[int]] = {}
    for dataflow, operators in members.items():
        place = {operator.id: i for i, operator in enumerate(operators)}
        shape = (tuple((op.addr[1:], op.name) for op in operators),
                 tuple((place.get(c.source[0]), c.source[1], place.get(c.target[0]),
                        c.target[1], c.pact) for c in channels.get(dataflow, [])),
                 tuple(sorted((a[1:], n.partition("/")[2]) for a, n in graph.scopes.items()
                              if a[0] == dataflow and len(a) > 1)))
        shapes.setdefault(shape, []).append(dataflow)
    groups = [alike for alike in shapes.values() if len(alike) > ALIKE_SHOWN]
    if not groups:
        return graph, summary
    hidden = {dataflow for alike in groups for dataflow in alike[1:]}
    scopes = {a: n for a, n in graph.scopes.items() if a[0] not in hidden}
    totals = dict(summary.operators) if summary is not None else {}
    carried = dict(summary.channels) if summary is not None else {}
    for first, *rest in groups:
        scopes[(first,)] = (f"{graph.scopes.get((first,), 'dataflow')} and {len(rest)} more "
                            f"alike, to {graph.scopes.get((rest[-1],), 'dataflow')}")
        if summary is None:
            continue
        for i, operator in enumerate(members[first]):
            total = OperatorSummary(operator.id, operator.name)
            for dataflow in (first, *rest):
                part = summary.operators.get(members[dataflow][i].id)
                if part is not None:
                    total.runs += part.runs
                    total.busy_ns += part.busy_ns
                    total.records_in += part.records_in
                    total.records_out += part.records_out
            totals[operator.id] = total
        for i, channel in enumerate(channels.get(first, [])):
            carried[channel.id] = sum(summary.channels.get(channels[d][i].id, 0)
                                      for d in (first, *rest))
    collapsed = Graph([op for op in graph.operators if op.addr[0] not in hidden],
                      [c for c in graph.channels if owner.get(c.source[0]) not in hidden],
                      scopes)
    if summary is None:
        return collapsed, None
    return collapsed, replace(summary, operators=totals, channels=carried)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _heat(share: float) -> str:
    """White for no time, through orange, to red for the busiest operator's."""
    share = min(max(share, 0.0), 1.0)
    return "#ff%02x%02x" % (int(255 - 120 * share), int(255 - 255 * share))


def to_dot(source: Any, summary: Summary | None = None) -> str:
    """Graphviz DOT text for the dataflows of ``source`` (see :func:`graph_of`). With a
    :class:`~sparktimely.logging.summary.Summary` (or when ``source`` is a LogDirectory or a
    list of events, which are summarized), operators show their time and runs, shaded from
    white to red by their time against the busiest operator's, and edges the records they
    carried.

    >>> from sparktimely.logging import ChannelsEvent, MessagesEvent, OperatesEvent
    >>> events = [OperatesEvent(0, 0, 0, (0, 0), "Source", "dataflow-0"),
    ...           OperatesEvent(0, 0, 1, (0, -1, 1), "Step", "dataflow-0/iterative-1"),
    ...           ChannelsEvent(0, 0, 0, (0, -1), (0, 0), (1, 0), "Exchange"),
    ...           MessagesEvent(9, 0, True, 0, 0, 0, 0, 1500)]
    >>> print(to_dot(events))                       # doctest: +ELLIPSIS
    digraph dataflow {
    ...
      subgraph "cluster_0" {
        label="dataflow-0";
        "op0" [label="Source\\n0 ms, 0 runs, 1,500 out", fillcolor="#ffffff"];
        subgraph "cluster_0_-1" {
          label="iterative-1";
          "op1" [label="Step\\n0 ms, 0 runs, 1,500 in", fillcolor="#ffffff"];
        }
      }
      "op0" -> "op1" [label="Exchange\\n1,500 records"];
    }
    """
    graph = graph_of(source)
    if summary is None and isinstance(source, (LogDirectory, list)):
        summary = summarize(source.events if isinstance(source, LogDirectory) else source)
    graph, summary = collapse_alike(graph, summary)
    hottest = (max((op.busy_ns for op in summary.operators.values()), default=0)
               if summary is not None else 0)
    lines = ["digraph dataflow {",
             '  graph [fontname="Helvetica", fontsize=11];',
             '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", '
             'fontname="Helvetica", fontsize=11];',
             '  edge [fontname="Helvetica", fontsize=9];']
    members: dict[tuple, list[OperatesEvent]] = {}
    for operator in graph.operators:
        members.setdefault(operator.addr[:-1], []).append(operator)

    def node(operator: OperatesEvent, indent: str) -> str:
        stats = summary.operators.get(operator.id) if summary is not None else None
        if stats is None:
            return f"{indent}{_quote(f'op{operator.id}')} [label={_quote(operator.name)}];"
        flows = [f"{stats.records_in:,} in" if stats.records_in else "",
                 f"{stats.records_out:,} out" if stats.records_out else ""]
        label = (f"{operator.name}\n{stats.busy_ns / 1e6:.3g} ms, {stats.runs:,} "
                 f"run{'' if stats.runs == 1 else 's'}"
                 + "".join(f", {flow}" for flow in flows if flow))
        return (f"{indent}{_quote(f'op{operator.id}')} [label={_quote(label)}, "
                f"fillcolor={_quote(_heat(stats.busy_ns / hottest if hottest else 0.0))}];")

    def cluster(address: tuple, indent: str) -> None:
        name = graph.scopes.get(address, "scope")
        lines.append(f"{indent}subgraph {_quote('cluster_' + '_'.join(map(str, address)))} {{")
        lines.append(f"{indent}  label={_quote(name.rpartition('/')[2])};")
        for operator in members.get(address, []):
            lines.append(node(operator, indent + "  "))
        children = sorted((a for a in graph.scopes if len(a) == len(address) + 1
                           and a[:-1] == address), key=lambda a: abs(a[-1]))
        for child in children:
            cluster(child, indent + "  ")
        lines.append(f"{indent}}}")

    for address in sorted(a for a in graph.scopes if len(a) == 1):
        cluster(address, "  ")
    names = {operator.id: operator.name for operator in graph.operators}
    for channel in graph.channels:
        label = channel.pact
        if summary is not None:
            label += f"\n{summary.channels.get(channel.id, 0):,} records"
        style = (", style=dashed" if names.get(channel.source[0], "").startswith("Feedback")
                 else "")
        lines.append(f"  {_quote(f'op{channel.source[0]}')} -> "
                     f"{_quote(f'op{channel.target[0]}')} [label={_quote(label)}{style}];")
    lines.append("}")
    return "\n".join(lines)


def has_graphviz() -> bool:
    """Whether Graphviz's ``dot`` program is installed.

    >>> has_graphviz() in (True, False)
    True
    """
    return shutil.which("dot") is not None


DOT_SECONDS = 60
"""How long Graphviz may take to lay out a picture."""


def dot_to(dot: str, format: str = "svg") -> bytes:
    """DOT text drawn by Graphviz as ``format`` (``svg``, ``png``, ``pdf``, ...); raises
    :class:`GraphvizMissing` without Graphviz, RuntimeError if it fails or takes longer than
    :data:`DOT_SECONDS`.

    >>> if has_graphviz():
    ...     assert dot_to("digraph { a -> b }").startswith(b"<?xml")
    """
    program = shutil.which("dot")
    if program is None:
        raise GraphvizMissing()
    try:
        result = subprocess.run([program, f"-T{format}"], input=dot.encode(),
                                capture_output=True, timeout=DOT_SECONDS)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"Graphviz's dot did not lay out the picture within {DOT_SECONDS} "
                           f"s") from None
    if result.returncode != 0:
        raise RuntimeError(f"Graphviz's dot failed on the picture: "
                           f"{result.stderr.decode(errors='replace').strip()}")
    return result.stdout


def render(source: Any, path: str | os.PathLike, summary: Summary | None = None) -> str:
    """Draw :func:`to_dot`'s picture of ``source`` into ``path``, in the format its suffix
    names (``.svg``, ``.png``, ``.pdf``; ``.dot`` writes the text and needs no Graphviz).
    Returns the path.

    >>> import os, tempfile, sparktimely as st
    >>> path = os.path.join(tempfile.mkdtemp(), "flow.dot")
    >>> _ = st.example(lambda scope: render(scope.to_stream([1]).scope, path))
    >>> open(path).read().startswith("digraph dataflow {")
    True
    """
    dot = to_dot(source, summary)
    format = os.path.splitext(os.fspath(path))[1].lstrip(".").lower() or "svg"
    data = dot.encode() if format in ("dot", "gv") else dot_to(dot, format)
    with open(path, "wb") as file:
        file.write(data)
    return os.fspath(path)


__all__ = ["Graph", "GraphvizMissing", "collapse_alike", "dot_to", "graph_of", "has_graphviz",
           "render", "to_dot"]
