"""Starting this process's worker processes and watching them until they finish or fail.

Workers are forked (so ``func`` may be a closure or lambda) and each reports its result, or
its error and traceback, over a pipe. The supervisor waits on those pipes, on the processes'
sentinels and, in a multi-process job, on the control connections to the other processes'
supervisors (``comm.rendezvous``): the first error, unexpected exit, failure reported by
another process or dropped connection kills every local worker, is told to the other
processes, and is raised as WorkerError. Shared-memory segments are removed whatever happens.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import traceback
import warnings
from contextlib import contextmanager
from typing import Any, Callable

import multiprocess
from multiprocess.connection import wait

from .comm import PeerLost, WorkerAddress, build_allocator
from .comm.rendezvous import PeerFailed, ProcessCluster
from .dataflow import Worker
from .shm import Mesh

_PR_SET_PDEATHSIG = 1


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
        return (WorkerError, (self.index, self.message, self.traceback))


class _Stopped(BaseException):
    """Raised in the supervisor's main thread when SIGINT, SIGTERM or SIGHUP arrives during a
    run, so that the run's cleanup happens before the signal takes its usual effect."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class _SignalGuard:
    """Signal handling around a run (one per process: ``SIGNALS``).

    ``around_run`` installs a handler for SIGINT, SIGTERM and SIGHUP (those not ignored) that
    raises :class:`_Stopped`, so the run unwinds: workers are killed, other processes told,
    segments removed. Then the previous handlers are restored and the signal is delivered to
    them again: SIGINT raises KeyboardInterrupt in the caller, SIGTERM with its default
    disposition ends the process (now that nothing is left behind). ``held`` defers a signal
    that arrives during cleanup until the cleanup is done.

    Python swallows exceptions raised where it cannot propagate them (an at-fork hook, a
    ``__del__``), so the handler also writes to ``wakeup``, a pipe the supervisor waits on, and
    ``check`` raises :class:`_Stopped` for a signal whose first raise was lost.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.active = False
        self.received: int | None = None
        self.wakeup: int | None = None
        self._wake: int | None = None
        self._holding = 0

    def _handle(self, signum: int, frame) -> None:
        if self.received is None:
            self.received = signum
            os.write(self._wake, b"!")
            if not self._holding:
                raise _Stopped(signum)

    def check(self) -> None:
        """Raise :class:`_Stopped` if a signal arrived (and cleanup is not under way)."""
        if self.active and not self._holding and self.received is not None:
            raise _Stopped(self.received)

    @contextmanager
    def around_run(self):
        if self.active or threading.current_thread() is not threading.main_thread():
            yield                      # nested, or not allowed to handle signals here
            return
        self.wakeup, self._wake = os.pipe()
        self.active, self.received = True, None
        previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS
                    if signal.getsignal(sig) not in (signal.SIG_IGN, None)}
        try:
            yield
        except _Stopped:
            pass
        finally:
            self.active = False
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.close_wakeup()
        if self.received is not None:
            received, self.received = self.received, None
            signal.raise_signal(received)             # the caller's own handling
            raise RuntimeError(f"the run was stopped by {signal.Signals(received).name}: "
                               f"its workers were stopped and nothing is left behind")

    @contextmanager
    def held(self):
        """Defer signals while cleaning up; a deferred one is raised afterwards."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
        self.check()

    def close_wakeup(self) -> None:
        """Close the wake-up pipe (also what a forked worker does with its inherited copy)."""
        for fd in (self.wakeup, self._wake):
            if fd is not None:
                os.close(fd)
        self.wakeup = self._wake = None


signals = _SignalGuard()


def _die_with_parent(parent: int) -> None:
    """Ask the kernel to kill this process when its parent dies (Linux), and check that the
    parent did not die before we asked."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def _worker_main(func: Callable[[Worker], Any], index: int, plan: list[WorkerAddress],
                 mesh: Mesh | None, listener, inherited: list, timeout: float | None,
                 args: list[str], conn, parent: int) -> None:
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C is the supervisor's to handle
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signals.close_wakeup()
    for sock in inherited:      # the supervisor's sockets and the other workers' listeners
        sock.close()
    try:
        allocator = build_allocator(index, plan, listener, mesh, timeout)
        worker = Worker(index, len(plan), args, allocator)
        result = func(worker)
        worker.run()
        if allocator is not None:
            allocator.close()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            conn.send(("ok", result, _lingering_threads()))
        except Exception as error:
            conn.send(("error", f"the result of worker {index} cannot be sent back: "
                                f"{type(error).__name__}: {error}", traceback.format_exc(), False))
    except BaseException as error:
        conn.send(("error", f"{type(error).__name__}: {error}", traceback.format_exc(),
                   isinstance(error, PeerLost)))
    finally:
        conn.close()
    if _lingering_threads():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)              # exiting normally would wait for those threads first


def _lingering_threads() -> list[str]:
    """Non-daemon threads other than the main one (user code started them and did not end
    them): a process waits for such threads before it exits."""
    return [repr(thread) for thread in threading.enumerate()
            if not thread.daemon and thread is not threading.main_thread() and thread.is_alive()]


def run_workers(func: Callable[[Worker], Any], workers: int, args: list[str],
                cluster: ProcessCluster | None = None) -> list[Any]:
    """Run ``func`` on this process's ``workers`` forked worker processes; return their
    results in index order or raise WorkerError. ``cluster`` places them in a multi-process
    job (global index ``cluster.process * workers + local``); without it they are the whole job.
    """
    context = multiprocess.get_context("fork")
    mesh: Mesh | None = None
    if cluster is None:
        first, plan, timeout = 0, [WorkerAddress("localhost", 0, "local")] * workers, None
        listeners, inherited = [None] * workers, []
    else:
        first, plan, timeout = cluster.process * workers, cluster.plan, cluster.timeout
        mesh, listeners, inherited = cluster.mesh, cluster.listeners, cluster.sockets()
    processes: list = []
    pipes: list = []
    try:
        if cluster is None and workers > 1:
            mesh = Mesh.create(workers)
        for local in range(workers):
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(
                target=_worker_main, daemon=True, name=f"sparktimely-worker-{first + local}",
                args=(func, first + local, plan, mesh, listeners[local],
                      [s for s in inherited if s is not listeners[local]], timeout, args,
                      writer, os.getpid()))
            with signals.held():          # a raise inside fork's hooks would be lost
                process.start()
                writer.close()
                processes.append(process)
                pipes.append(reader)
        results = _collect(processes, pipes, first, cluster)
        for process in processes:
            process.join(5)                  # they only exit after reporting
        if cluster is not None:
            cluster.finish()
        return results
    except PeerFailed as failure:            # only raised with a cluster
        cluster.abort(failure.index, failure.message, failure.traceback, failure.origin)
        raise WorkerError(failure.index, cluster.explain(failure), failure.traceback) from None
    except BaseException as error:
        if cluster is not None:
            with signals.held():
                if isinstance(error, WorkerError):
                    cluster.abort(error.index, error.message, error.traceback)
                elif isinstance(error, _Stopped):
                    cluster.abort(first, f"process {cluster.process} (workers {first}.."
                                         f"{first + workers - 1}) was {error}", "")
                else:
                    cluster.abort(first, f"{type(error).__name__}: {error} (in the supervisor)",
                                  traceback.format_exc())
        raise
    finally:
        with signals.held():
            for process in processes:
                if process.is_alive():
                    process.kill()
            for process in processes:
                process.join(5)
            for pipe in pipes:
                pipe.close()
            if cluster is None and mesh is not None:
                mesh.unlink()


def _collect(processes: list, pipes: list, first_index: int,
             cluster: ProcessCluster | None) -> list[Any]:
    results: dict[int, Any] = {}
    waiting = set(range(len(processes)))
    while waiting:
        handles: dict = dict.fromkeys(cluster.watched if cluster else ())
        if signals.wakeup is not None:
            handles[signals.wakeup] = -1
        for local in waiting:
            handles[pipes[local]] = local
            handles[processes[local].sentinel] = local
        for ready in wait(list(handles)):
            local = handles[ready]
            if local == -1:
                signals.check()
                continue
            if local is None:
                cluster.check(ready)
                continue
            if local not in waiting:
                continue
            pipe = pipes[local]
            index = first_index + local
            report = None
            if pipe.poll():
                try:
                    report = pipe.recv()
                except (EOFError, OSError):
                    report = None
            if report is None:
                processes[local].join(2)     # its pipe may close just before it is reaped
                code = processes[local].exitcode
                cause = (f"killed by signal {signal.Signals(-code).name}" if code and code < 0
                         else f"exit code {code}")
                raise WorkerError(index, f"worker process {processes[local].pid} died ({cause})")
            if report[0] == "error":
                if report[3] and cluster is not None:
                    cluster.wait(1.0)        # a lost peer: prefer its process's own account
                raise WorkerError(index, report[1], report[2])
            results[local] = report[1]
            if report[2]:
                warnings.warn(f"worker {index} finished with non-daemon thread(s) still running: "
                              f"{', '.join(report[2])}; they were stopped when the worker "
                              f"exited (end them in the job, or make them daemon threads)",
                              RuntimeWarning, stacklevel=4)
            waiting.discard(local)
    return [results[local] for local in range(len(processes))]
