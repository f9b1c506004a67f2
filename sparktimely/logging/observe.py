"""Watching a whole run: a job function wrapped so that each worker logs to a directory
and/or reports its status, and the launching side's progress display around the run.

:func:`observing` is what the launchers (``execute``, ``sparktimely.barrier.run``, the
spark-submit entry point) wrap a run in:

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
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator, TypeVar

from .display import ProgressDisplay
from .reporter import report_status
from .files import log_to_directory
from .registry import registry_of

if TYPE_CHECKING:
    from ..dataflow.worker import WorkerCore as Worker

W = TypeVar("W", bound="Worker")


def observed(func: Callable[[W], Any], *, log_dir: str | os.PathLike | None = None,
             status_address: tuple[str, int] | None = None,
             status_dir: str | os.PathLike | None = None,
             status_stream: IO[str] | None = None,
             interval: float = 1.0) -> Callable[[W], Any]:
    """``func`` wrapped so that each worker writes its logs to ``log_dir`` and/or publishes
    its status to a display at ``status_address``, to ``status_dir`` or to
    ``status_stream``; the wrapper steps the worker until its dataflows complete and closes
    its logs before returning ``func``'s result. (The wrapper is picklable when ``func`` is,
    so it can travel to Spark's executors.)

    >>> import io, sparktimely as st
    >>> out = io.StringIO()
    >>> job = observed(lambda w: w.dataflow(lambda s: s.to_stream([1]).probe()) and 7,
    ...                status_stream=out, interval=3600)
    >>> st.execute_directly(job), out.getvalue().endswith("1 records done\\n")
    (7, True)
    """
    reports = status_address is not None or status_dir is not None or status_stream is not None

    def observed_job(worker: W) -> Any:
        if log_dir is not None:
            log_to_directory(worker, log_dir)
        reporter = None
        if reports:
            reporter = report_status(worker, status_dir, status_stream, interval,
                                     status_address)
        try:
            result = func(worker)
            worker.run()
        except BaseException:
            if reporter is not None:        # the display's last line: where the worker got
                reporter.publish()
            raise
        registry_of(worker).close()
        return result
    return observed_job


@contextlib.contextmanager
def observing(func: Callable[[W], Any], *, log_dir: str | os.PathLike | None = None,
              progress: bool = False, stream: IO[str] | None = None,
              interval: float = 1.0, host: str = "localhost") -> Iterator[Callable[[W], Any]]:
    """Yields the job to run: ``func`` itself when nothing is asked for; otherwise
    :func:`observed` with the logs in ``log_dir`` and, with ``progress``, statuses sent
    every ``interval`` seconds to a :class:`~sparktimely.logging.display.ProgressDisplay`
    that listens on ``host`` (where the workers can reach this process) and shows them on
    ``stream`` (default stderr) until the block ends.

    >>> with observing(len) as job:
    ...     job is len
    True
    """
    if log_dir is None and not progress:
        yield func
        return
    if not progress:
        yield observed(func, log_dir=log_dir)
        return
    with ProgressDisplay(stream=stream, host=host) as display:
        yield observed(func, log_dir=log_dir, status_address=display.address,
                       interval=interval)


__all__ = ["observed", "observing"]
