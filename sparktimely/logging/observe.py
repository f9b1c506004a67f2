"""Watching a whole run: a job function wrapped so that each worker logs to a directory
and/or reports its status, and the launching side's progress display around the run.

:func:`observing` is what a launcher (``execute``, the Spark entry point) wraps a run in:

    with observing(func, log_dir="logs", progress=True) as job:
        results = run_the_workers(job)

>>> import sparktimely as st, tempfile
>>> directory = tempfile.mkdtemp()
>>> with observing(lambda w: w.dataflow(lambda s: s.to_stream([1]).probe()) and None,
...                log_dir=directory) as job:
...     _ = st.execute(job, workers=2)
>>> from sparktimely.logging import read_log_directory
>>> sorted(read_log_directory(directory).workers)
[0, 1]
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator

from .display import ProgressDisplay, report_status
from .files import log_to_directory

if TYPE_CHECKING:
    from ..dataflow.worker import Worker


def observed(func: Callable[["Worker"], Any], *, log_dir: str | os.PathLike | None = None,
             status_dir: str | os.PathLike | None = None,
             status_stream: IO[str] | None = None,
             interval: float = 1.0) -> Callable[["Worker"], Any]:
    """``func`` wrapped so that each worker writes its logs to ``log_dir`` and/or publishes
    its status to ``status_dir`` or ``status_stream``; the wrapper steps the worker until its
    dataflows complete and closes its logs before returning ``func``'s result.

    >>> import io, sparktimely as st
    >>> out = io.StringIO()
    >>> job = observed(lambda w: w.dataflow(lambda s: s.to_stream([1]).probe()) and 7,
    ...                status_stream=out, interval=3600)
    >>> st.execute_directly(job), out.getvalue().endswith("1 records done\\n")
    (7, True)
    """
    def observed_job(worker: "Worker") -> Any:
        if log_dir is not None:
            log_to_directory(worker, log_dir)
        if status_dir is not None or status_stream is not None:
            report_status(worker, status_dir, status_stream, interval)
        result = func(worker)
        worker.run()
        worker.log_register().close()
        return result
    return observed_job


@contextlib.contextmanager
def observing(func: Callable[["Worker"], Any], *, log_dir: str | os.PathLike | None = None,
              progress: bool = False, stream: IO[str] | None = None,
              interval: float = 1.0) -> Iterator[Callable[["Worker"], Any]]:
    """Yields the job to run: ``func`` itself when nothing is asked for; otherwise
    :func:`observed` with the logs in ``log_dir`` and, with ``progress``, a status directory
    that a :class:`~sparktimely.logging.display.ProgressDisplay` shows on ``stream``
    (default stderr) until the block ends.

    >>> with observing(len) as job:
    ...     job is len
    True
    """
    if log_dir is None and not progress:
        yield func
        return
    status_dir = tempfile.mkdtemp(prefix="sparktimely-status-") if progress else None
    try:
        job = observed(func, log_dir=log_dir, status_dir=status_dir, interval=interval)
        if status_dir is None:
            yield job
            return
        with ProgressDisplay(status_dir, stream):
            yield job
    finally:
        if status_dir is not None:
            shutil.rmtree(status_dir, ignore_errors=True)


__all__ = ["observed", "observing"]
