"""Seeing what a dataflow does: logs as streams, a picture of the dataflow, a profile.

- :mod:`~sparktimely.logging.events`: the events a worker logs (timely's kinds), small typed
  records with the worker index and a nanosecond time.
- :mod:`~sparktimely.logging.registry`: ``worker.log_register().insert(name, callback)``;
  :func:`log_stream` makes a log a stream that a dataflow processes.
- :mod:`~sparktimely.logging.files`: a log file per worker (:func:`log_to_directory`), read
  back with :func:`read_log_directory`.
- :mod:`~sparktimely.logging.summary`: time and records per operator, channel and worker.
- :mod:`~sparktimely.logging.picture`: the dataflow as Graphviz DOT (:func:`to_dot`), drawn
  as SVG/PNG with Graphviz's ``dot`` when installed (:func:`render`).
- :mod:`~sparktimely.logging.display`: a live progress display (:class:`ProgressDisplay`)
  fed by each worker's :func:`report_status` (:mod:`~sparktimely.logging.reporter`), over
  TCP (:class:`StatusListener`) or files.
- :mod:`~sparktimely.logging.observe`: a job wrapped to log to a directory and report its
  status, and the display around a run (what ``execute`` and the Spark entry point use).
- :mod:`~sparktimely.logging.report`: the HTML profile page
  (``python -m sparktimely.profile LOGDIR``).

>>> import sparktimely as st
>>> def job(worker):
...     events = []
...     worker.log_register().insert("timely", lambda time, batch: events.extend(batch))
...     worker.dataflow(lambda scope: scope.to_stream(range(10)).map(str).probe())
...     worker.run()
...     return sum(e.length for e in events if type(e) is st.logging.MessagesEvent)
>>> st.execute_directly(job)            # 10 records from ToStream to Map, 10 from Map to Probe
20
"""
from .display import ProgressDisplay, StatusListener
from .reporter import StatusReporter, report_status
from .events import (ChannelsEvent, MessagesEvent, OperatesEvent, ParkEvent, ProgressEvent,
                     ScheduleEvent, ShutdownEvent, StepsEvent, describe)
from .files import LogDirectory, log_to_directory, read_events, read_log_directory
from .observe import observed, observing
from .picture import Graph, GraphvizMissing, graph_of, has_graphviz, render, to_dot
from .registry import BatchLogger, Logger, Registry, log_stream, registry_of
from .report import render_report, write_report
from .summary import OperatorSummary, Summary, WorkerSummary, summarize

__all__ = ["BatchLogger", "ChannelsEvent", "Graph", "GraphvizMissing", "LogDirectory", "Logger",
           "MessagesEvent", "OperatesEvent", "OperatorSummary", "ParkEvent", "ProgressDisplay",
           "ProgressEvent", "Registry", "ScheduleEvent", "ShutdownEvent", "StatusListener",
           "StatusReporter", "StepsEvent",
           "Summary", "WorkerSummary", "describe", "graph_of", "has_graphviz", "log_stream",
           "log_to_directory", "observed", "observing", "read_events", "read_log_directory",
           "registry_of", "render", "render_report", "report_status", "summarize", "to_dot", "write_report"]
