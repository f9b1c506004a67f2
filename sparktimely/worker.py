"""``sparktimely.Worker``: the dataflow layer's worker, whose dataflows are built in the
operator library's :class:`~sparktimely.ops.scope.Scope` and whose logs go to a
:class:`~sparktimely.logging.Registry` (as ``Stream`` and ``Scope`` are assembled in
:mod:`sparktimely.ops`, the worker is assembled here, above every layer it joins).

>>> import sparktimely as st
>>> issubclass(st.Worker, st.dataflow.WorkerCore)
True
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, TypeVar

from .dataflow.worker import WorkerCore
from .logging.registry import Registry, registry_of
from .ops.scope import Scope

__all__ = ["Worker"]

R = TypeVar("R")


class Worker(WorkerCore):
    """A timely worker: builds dataflows and runs them step by step.

    ``worker.dataflow(build)`` calls ``build(scope)`` with a :class:`~sparktimely.Scope`,
    so a type checker sees the operators a dataflow uses.

    >>> import sparktimely as st
    >>> def job(worker):
    ...     probe = worker.dataflow(lambda scope: scope.to_stream(range(5)).count().probe())
    ...     worker.step_while(lambda: not probe.done())
    ...     return worker.index, worker.peers
    >>> st.execute_directly(job)
    (0, 1)
    """

    scope_class = Scope

    if TYPE_CHECKING:       # what ``dataflow`` builds in, for a type checker: a Scope
        def dataflow(self, build: Callable[[Scope], R], *, name: str | None = None,
                     timestamp: type = int) -> R: ...

    def log_register(self) -> Registry:
        """This worker's log registry (a :class:`sparktimely.logging.Registry`):
        ``insert(name, callback)`` has ``callback(time, events)`` receive the ``"timely"``
        events (operators, channels, scheduling, messages, shutdown, parking, steps) or the
        ``"timely/progress"`` ones in batches, once per step. Nothing is logged, at no cost,
        while no callback is registered.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     events = []
        ...     worker.log_register().insert("timely", lambda time, batch: events.extend(batch))
        ...     worker.dataflow(lambda scope: scope.to_stream([1, 2]).map(str).probe())
        ...     worker.run()
        ...     worker.log_register().remove("timely")
        ...     return sorted({type(event).__name__ for event in events})
        >>> st.execute_directly(job)                    # doctest: +NORMALIZE_WHITESPACE
        ['ChannelsEvent', 'MessagesEvent', 'OperatesEvent', 'ScheduleEvent', 'ShutdownEvent',
         'StepsEvent']
        """
        return registry_of(self)
