"""The errors a run of workers reports (raised by ``execute``, ``barrier.run`` and friends).
"""
from __future__ import annotations

__all__ = ["WorkerError"]


class WorkerError(RuntimeError):
    """A worker failed: carries its ``index`` and the ``traceback`` text.

    ``str()`` names the original exception type and message.

    >>> import sparktimely as st
    >>> try:
    ...     st.execute(lambda worker: 1 // worker.index, workers=2)
    ... except st.WorkerError as error:
    ...     print(error.index, error)
    0 worker 0 failed: ZeroDivisionError: integer division or modulo by zero
    """

    def __init__(self, index: int, message: str, traceback: str = "") -> None:
        super().__init__(f"worker {index} failed: {message}")
        self.index = index
        self.message = message
        self.traceback = traceback

    def __reduce__(self):
        return (type(self), (self.index, self.message, self.traceback))
