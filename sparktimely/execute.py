"""Running workers: ``example``, ``execute_directly``, ``execute`` and ``execute_from_args``."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from .dataflow import Worker


class WorkerError(RuntimeError):
    """A worker failed: carries its ``index`` and the ``traceback`` text."""

    def __init__(self, index: int, message: str, traceback: str = "") -> None:
        super().__init__(f"worker {index} failed: {message}")
        self.index = index
        self.message = message
        self.traceback = traceback

    def __reduce__(self):
        return (WorkerError, (self.index, self.message, self.traceback))


def execute_directly(func: Callable[[Worker], Any]) -> Any:
    """Runs ``func(worker)`` on one worker in this process, steps the worker until its
    dataflows complete, and returns ``func``'s result.

    >>> import sparktimely as st
    >>> st.execute_directly(lambda worker: worker.peers)
    1
    """
    worker = Worker(0, 1)
    result = func(worker)
    worker.run()
    return result


def example(build: Callable[[Any], Any]) -> Any:
    """Builds one dataflow with ``build(scope)`` on one worker, runs it to completion and
    returns what ``build`` returned.

    >>> import sparktimely as st
    >>> st.example(lambda scope: scope.to_stream([1, 2, 3]).map(str).capture()).extract()
    [(0, ['1', '2', '3'])]
    """
    return execute_directly(lambda worker: worker.dataflow(build))
