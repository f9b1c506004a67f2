"""A tiny child process that removes a job's shared-memory segments if its parent dies.

pyspark kills the Python worker of a task it gives up on (a failed barrier stage, a
cancelled job) with SIGKILL, so no ``finally`` runs there. Each barrier task that uses a
mesh therefore forks a janitor: it holds the read end of a pipe, and when the write end
closes without the word "clean" first (its parent died, or left in a hurry) it sweeps the
mesh's name prefix and exits. On the normal path the parent says "clean", closes the pipe and
reaps the janitor, so nothing outlives the task.
"""
from __future__ import annotations

import os
import select
import signal

from ..shm import sweep

_CLEAN = b"c"


class Janitor:
    """Sweeps ``prefix`` unless :meth:`finish` is called with ``clean=True``."""

    def __init__(self, prefix: str) -> None:
        read, write = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:                                   # the janitor
            try:
                _watch(read, write, parent, prefix)
            finally:
                os._exit(0)
        os.close(read)
        self.pid: int | None = pid
        self._write = write

    def finish(self, clean: bool) -> None:
        """Release the janitor: it sweeps unless ``clean``; wait for it to exit."""
        if self.pid is None:
            return
        try:
            if clean:
                os.write(self._write, _CLEAN)
        finally:
            os.close(self._write)
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = None


def _watch(read: int, write: int, parent: int, prefix: str) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    os.close(write)
    os.closerange(3, read)                 # sockets to the JVM and peers are not ours to hold
    os.closerange(read + 1, 1 << 16)
    verdict = b""
    while True:
        ready, _, _ = select.select([read], [], [], 1.0)
        if ready:
            verdict = os.read(read, 1)
            break
        if os.getppid() != parent:         # orphaned (the pipe is also held elsewhere)
            break
    if verdict != _CLEAN:
        sweep(prefix)
