"""What a worker tells those who watch it: the one seam for logging and epoch checkpoints.

A :class:`WorkerObserver` attached with ``worker.add_observer(observer)`` hears of the
worker's dataflows (built, started, finished), of every scheduling, message and park, and
of the end of every step; ``sparktimely.logging`` turns these into event records and
``sparktimely.io`` drives its checkpoints from them. A subclass overrides the hooks it
needs; the others do nothing. While no observer is attached the worker pays one ``is None``
check per hook site.

>>> import sparktimely as st
>>> class Scheduled(WorkerObserver):
...     def __init__(self):
...         self.starts = 0
...     def scheduled(self, dataflow, operator, start):
...         self.starts += start
>>> def job(worker):
...     watch = Scheduled()
...     worker.add_observer(watch)
...     worker.dataflow(lambda scope: scope.to_stream([1]).map(str).probe())
...     worker.run()
...     return watch.starts > 0
>>> st.execute_directly(job)
True
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .subgraph import Dataflow


class WorkerObserver:
    """Hooks a worker calls on its observers (see the module doc); each does nothing here.

    >>> import sparktimely as st
    >>> class Built(WorkerObserver):
    ...     names = []
    ...     def dataflow_built(self, dataflow):
    ...         self.names.append(dataflow.name)
    >>> def job(worker):
    ...     worker.add_observer(Built())
    ...     worker.dataflow(lambda scope: scope.to_stream([1]).probe(), name="first")
    >>> st.execute_directly(job); Built.names
    ['first']
    """

    def dataflow_built(self, dataflow: "Dataflow") -> None:
        """``dataflow``'s operators and channels are final; it has not run yet."""

    def dataflow_started(self, dataflow: "Dataflow") -> None:
        """``dataflow`` runs and the worker knows it: the observer may step the worker."""

    def dataflow_finished(self, dataflow: "Dataflow") -> None:
        """``dataflow`` completed or was dropped on this worker."""

    def dataflow_dropped(self, dataflow: "Dataflow") -> None:
        """``dataflow`` was dropped on this worker (after :meth:`dataflow_finished`): it
        sends and receives nothing more, and what was kept about it may go."""

    def scheduled(self, dataflow: int, operator: int, start: bool) -> None:
        """Operator ``operator`` of dataflow ``dataflow`` starts (or ends) running."""

    def sent(self, target: int, dataflow: int, location: int, batch: Any) -> None:
        """A data batch leaves for worker ``target``."""

    def received(self, source: int, message: tuple) -> None:
        """A message from worker ``source`` arrived for a dataflow of this worker."""

    def broadcast(self, message: tuple) -> None:
        """A message goes to every other worker."""

    def parked(self, timeout: float | None) -> None:
        """The worker waits for up to ``timeout`` seconds (None: until woken)."""

    def unparked(self) -> None:
        """The worker stopped waiting."""

    def step_began(self) -> None:
        """A step begins."""

    def step_received(self) -> None:
        """The step took in what other workers sent."""

    def step_computed(self) -> None:
        """The step ran its dataflows' rounds."""

    def after_step(self, busy: bool) -> bool:
        """The step's dataflows are done (they had work if ``busy``); its messages are not
        sent yet. True if the observer did something that needs the worker to look again
        before it parks (epoch checkpoints advance their protocol here)."""
        return False

    def step_sending(self) -> None:
        """The step hands its messages to the transport."""

    def step_ended(self) -> None:
        """The step is over (logs deliver its events here)."""

    def failed(self, error: BaseException) -> None:
        """A step is failing with ``error``."""


class ObserverFanOut(WorkerObserver):
    """Several observers as one, called in the order they were attached."""

    __slots__ = ("observers",)

    def __init__(self, observers: tuple[WorkerObserver, ...]) -> None:
        self.observers = observers

    def dataflow_built(self, dataflow: "Dataflow") -> None:
        for observer in self.observers:
            observer.dataflow_built(dataflow)

    def dataflow_started(self, dataflow: "Dataflow") -> None:
        for observer in self.observers:
            observer.dataflow_started(dataflow)

    def dataflow_finished(self, dataflow: "Dataflow") -> None:
        for observer in self.observers:
            observer.dataflow_finished(dataflow)

    def dataflow_dropped(self, dataflow: "Dataflow") -> None:
        for observer in self.observers:
            observer.dataflow_dropped(dataflow)

    def scheduled(self, dataflow: int, operator: int, start: bool) -> None:
        for observer in self.observers:
            observer.scheduled(dataflow, operator, start)

    def sent(self, target: int, dataflow: int, location: int, batch: Any) -> None:
        for observer in self.observers:
            observer.sent(target, dataflow, location, batch)

    def received(self, source: int, message: tuple) -> None:
        for observer in self.observers:
            observer.received(source, message)

    def broadcast(self, message: tuple) -> None:
        for observer in self.observers:
            observer.broadcast(message)

    def parked(self, timeout: float | None) -> None:
        for observer in self.observers:
            observer.parked(timeout)

    def unparked(self) -> None:
        for observer in self.observers:
            observer.unparked()

    def step_began(self) -> None:
        for observer in self.observers:
            observer.step_began()

    def step_received(self) -> None:
        for observer in self.observers:
            observer.step_received()

    def step_computed(self) -> None:
        for observer in self.observers:
            observer.step_computed()

    def after_step(self, busy: bool) -> bool:
        return any([observer.after_step(busy) for observer in self.observers])

    def step_sending(self) -> None:
        for observer in self.observers:
            observer.step_sending()

    def step_ended(self) -> None:
        for observer in self.observers:
            observer.step_ended()

    def failed(self, error: BaseException) -> None:
        for observer in self.observers:
            observer.failed(error)
