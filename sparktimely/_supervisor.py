"""Starting this process's worker processes and watching them until they finish or fail.

Workers are forked (so ``func`` may be a closure or lambda); each runs in a
``session.WorkerSession`` and reports its result, or its error and traceback, over a pipe.
The supervisor joins the workers' host group first (the shared memory, ``_group``), then
waits on the pipes, on the processes' sentinels and, in a hostfile job, on the control
connections to the other processes' supervisors (``comm.rendezvous``): the first error,
unexpected exit (naming the signal that killed a worker), failure reported by another
process or dropped connection kills every local worker, is told to the other processes, and
is raised as WorkerError. Shared-memory segments are removed whatever happens.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Mapping, Sequence

import dill
import multiprocess
from multiprocess.connection import wait

from . import _warm
from ._group import GroupFailed, HostGroup
from .errors import PeerLostError, WorkerError, describe, unsendable_result
from .session import WorkerSession, join_group, stall_dump_path, stall_report
from .comm import PeerLost, WorkerAddress, connect_timeout
from .comm.rendezvous import PeerFailed, ProcessCluster
from .worker import Worker

_PR_SET_PDEATHSIG = 1


class _Stopped(BaseException):
    """Raised in the supervisor's main thread when SIGINT, SIGTERM or SIGHUP arrives during a
    run, so that the run's cleanup happens before the signal takes its usual effect."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")


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
            if self._wake is not None:
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
            try:
                signal.raise_signal(received)         # the caller's own handling
            except BaseException as raised:           # its error, not our _Stopped's context
                raise raised from None
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


def _report(conn: Any, message: tuple) -> None:
    """Send ``message`` to the supervisor, pickled by reference: it forked this process, so
    a class of the program's ``__main__`` is the very class there (dill would rebuild it by
    value, a class of its own that no instance of the program's equals). What pickle cannot
    take (a lambda, a class made inside a function) goes with dill, classes it can name
    still by reference; and a class that cannot be named (the program's own, in a Spark
    task whose ``__main__`` is Spark's) by value."""
    try:
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    except Exception:
        try:
            data = dill.dumps(message, pickle.HIGHEST_PROTOCOL, byref=True)
        except Exception:
            data = _by_value(message)
    conn.send_bytes(data)


def _by_value(message: tuple) -> bytes:
    """``message`` pickled with its classes by value: with Spark's cloudpickle where pyspark
    is installed (a class Spark shipped to this task then goes back to the driver as the
    driver's very class, as Spark's own results do), else with dill."""
    try:
        from pyspark import cloudpickle
    except ImportError:
        return dill.dumps(message, pickle.HIGHEST_PROTOCOL)
    return cloudpickle.dumps(message, pickle.HIGHEST_PROTOCOL)


def _worker_main(func: Callable[[Worker], Any], index: int, plan: list[WorkerAddress],
                 group: HostGroup | None, listener: socket.socket | None, inherited: list,
                 options: dict, conn, parent: int) -> None:
    _die_with_parent(parent)
    modules = set(sys.modules)
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C is the supervisor's to handle
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signals.close_wakeup()
    for sock in inherited:      # the supervisor's sockets and the other workers' listeners
        sock.close()
    try:
        # named, so that a failed session's held connections live until the process ends
        session = WorkerSession(index, plan, listener, group=group, supervised=True,
                                stall_dump=stall_dump_path(parent, index), **options)
        with session as worker:
            result = func(worker)
            worker.run()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            _report(conn, ("ok", result, _lingering_threads(), _warm.loaded_since(modules),
                           worker.exchanged_arrow))
        except Exception as error:
            _report(conn, ("error", index, unsendable_result(index, error),
                           traceback.format_exc(), False))
    except WorkerError as error:
        cause = error.__cause__           # a lost remote peer, seen here or by a group member
        lost_peer = isinstance(cause, PeerLost) or (isinstance(cause, GroupFailed) and
                                                    cause.lost_peer)
        _report(conn, ("error", error.index, error.message, error.traceback, lost_peer))
        _wait_to_be_killed(parent)
    except BaseException as error:
        _report(conn, ("error", index, describe(error), traceback.format_exc(), False))
        _wait_to_be_killed(parent)
    finally:
        conn.close()
    if _lingering_threads():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)              # exiting normally would wait for those threads first


def _wait_to_be_killed(parent: int) -> None:
    """A failed worker's last act: keep its connections (``WorkerSession.held``) until its
    supervisor, having told the failure to the other processes, kills it. Exiting at once
    would drop them first, and a remote worker might then tell a lost connection instead of
    the failure."""
    while os.getppid() == parent:         # the supervisor's death also ends the wait
        time.sleep(1.0)


def _lingering_threads() -> list[str]:
    """Non-daemon threads other than the main one (user code started them and did not end
    them): a process waits for such threads before it exits."""
    return [repr(thread) for thread in threading.enumerate()
            if not thread.daemon and thread is not threading.main_thread() and thread.is_alive()]


def run_workers(func: Callable[[Worker], Any], plan: Sequence[WorkerAddress],
                listeners: Mapping[int, socket.socket | None], *, args: Sequence[str] = (),
                timeout: float | None = None, stall_limit: float | None = None,
                peer_lost_grace: float = 0.0, cluster: ProcessCluster | None = None) -> list[Any]:
    """Run ``func`` on this process's workers (the indexes of ``listeners``, each with its
    listening socket, or None when it has no remote peers) of the job laid out by ``plan``,
    one forked process each; return their results in index order or raise WorkerError.
    ``cluster`` holds the control connections of a hostfile job."""
    if multiprocess.current_process().daemon:
        raise RuntimeError("execute was called inside a worker (or another daemonic process), "
                           "which may not start processes: build the inner job's dataflows "
                           "on this worker (worker.dataflow), or run it in this process "
                           "with st.execute_directly")
    context = multiprocess.get_context("fork")
    local = sorted(listeners)
    timeout = connect_timeout(timeout)
    options = {"args": list(args), "timeout": timeout, "stall_limit": stall_limit,
               "peer_lost_grace": peer_lost_grace}
    inherited = [s for s in listeners.values() if s is not None]
    if cluster is not None:
        inherited += cluster.sockets()
    group: HostGroup | None = None
    processes: list = []
    pipes: list = []
    try:
        _warm.prepare()
        group = join_group(plan, local[0], time.monotonic() + timeout,
                           cluster.poll if cluster is not None else None)
        with _warm.forking():
            for index in local:
                reader, writer = context.Pipe(duplex=False)
                process = context.Process(
                    target=_worker_main, daemon=True, name=f"sparktimely-worker-{index}",
                    args=(func, index, list(plan), group, listeners[index],
                          [s for s in inherited if s is not listeners[index]], options,
                          writer, os.getpid()))
                with signals.held():          # a raise inside fork's hooks would be lost
                    process.start()
                    writer.close()
                    processes.append(process)
                    pipes.append(reader)
        results = _collect(processes, pipes, local, cluster, stall_limit)
        for process in processes:
            process.join(5)                  # they only exit after reporting
        if cluster is not None:
            cluster.finish()
        with signals.held():
            if group is not None:
                group.leave(len(local))
                group = None
        return results
    except PeerFailed as failure:            # only raised with a cluster
        assert cluster is not None
        cluster.abort(failure.index, failure.message, failure.traceback, failure.origin,
                      failure.lost)
        told = PeerLostError if failure.lost else WorkerError
        raise told(failure.index, cluster.explain(failure), failure.traceback) from None
    except BaseException as error:
        with signals.held():
            if group is not None and isinstance(error, WorkerError):
                group.record.fail(error.index, error.message, error.traceback)
            if cluster is not None:
                if isinstance(error, WorkerError):
                    cluster.abort(error.index, error.message, error.traceback,
                                  lost=isinstance(error, PeerLostError))
                elif isinstance(error, _Stopped):
                    cluster.abort(local[0], f"process {cluster.process} (workers {local[0]}.."
                                            f"{local[-1]}) was {error}", "")
                else:
                    cluster.abort(local[0], f"{describe(error)} (in the "
                                            f"supervisor)", traceback.format_exc())
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
            if group is not None:
                group.abandon()
            if stall_limit is not None:       # dumps of workers killed with the job
                for index in local:
                    with contextlib.suppress(OSError):
                        os.remove(stall_dump_path(os.getpid(), index))


class _StopWatch:
    """With a stall limit, the supervisor's watch for a worker process stopped (SIGSTOP, a
    debugger): its own stall watch is stopped with it, and the job would wait for it
    forever. A worker seen stopped at every look for longer than the limit fails the job
    (the supervisor's own stop, Ctrl-Z stopping them all, restarts the count)."""

    def __init__(self, limit: float | None) -> None:
        self.limit = limit
        self.interval = None if limit is None else min(limit / 4, 1.0)
        self.since: dict[int, float] = {}       # worker index -> first seen stopped
        self.last = time.monotonic()

    def check(self, pids: Mapping[int, int]) -> None:
        """Raise WorkerError for a worker of ``pids`` (index -> pid) stopped too long."""
        if self.limit is None or self.interval is None:
            return
        now = time.monotonic()
        if now - self.last > 2 * self.interval + 1.0:
            self.since.clear()                  # this process was stopped too: look again
        self.last = now
        for index, pid in pids.items():
            if not _is_stopped(pid):
                self.since.pop(index, None)
                continue
            since = self.since.setdefault(index, now)
            if now - since > self.limit:
                raise WorkerError(index, f"worker process {pid} has been stopped (by SIGSTOP "
                                         f"or a debugger) for {now - since:.1f} s (stall limit "
                                         f"{self.limit:g} s)")


def _is_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped by a signal or traced (Linux's /proc; else False)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] in (b"T", b"t")


def _collect(processes: list, pipes: list, indexes: list[int],
             cluster: ProcessCluster | None, stall_limit: float | None) -> list[Any]:
    results: dict[int, Any] = {}
    waiting = set(range(len(processes)))
    lost: tuple | None = None          # a worker's report that it lost a remote peer
    lost_until = 0.0
    stopped = _StopWatch(stall_limit)
    while waiting:
        handles: dict = dict.fromkeys(cluster.watched if cluster else ())
        if signals.wakeup is not None:
            handles[signals.wakeup] = -1
        for local in waiting:
            handles[pipes[local]] = local
            handles[processes[local].sentinel] = local
        timeout = stopped.interval
        if lost is not None:
            timeout = lost_until - time.monotonic()
            if timeout <= 0:
                assert cluster is not None
                cluster.poll()        # an account that arrived meanwhile is told instead
                raise PeerLostError(*lost[1:4])
        stopped.check({indexes[local]: processes[local].pid for local in waiting})
        for ready in wait(list(handles), timeout):
            local = handles[ready]
            if local == -1:
                signals.check()
                continue
            if local is None:
                assert cluster is not None
                cluster.check(ready)
                continue
            if local not in waiting:
                continue
            pipe = pipes[local]
            index = indexes[local]
            report = None
            if pipe.poll():
                try:
                    data = pipe.recv_bytes()
                except (EOFError, OSError):
                    report = None
                else:
                    try:
                        report = dill.loads(data)      # a pickle, or a dill pickle
                    except Exception as error:
                        raise WorkerError(index, f"the result of worker {index} cannot be read "
                                                 f"back: {describe(error)}") from None
            if report is None:
                processes[local].join(2)     # its pipe may close just before it is reaped
                stalled = stall_report(stall_dump_path(os.getpid(), index), stall_limit)
                if stalled is not None:
                    raise WorkerError(index, *stalled)
                code = processes[local].exitcode
                cause = (f"killed by signal {signal.Signals(-code).name}" if code and code < 0
                         else f"exit code {code}")
                raise WorkerError(index, f"worker process {processes[local].pid} died ({cause})")
            if report[0] == "error":
                if report[4] and cluster is not None:
                    # a lost peer: for a second, prefer an account of the failure itself, from
                    # the peer's process or from a worker here (both processes may have
                    # workers that lost each other's, and each waits for the other's account)
                    if lost is None:
                        lost, lost_until = report, time.monotonic() + 1.0
                    waiting.discard(local)
                    continue
                if cluster is not None and report[1] not in indexes:
                    # another process's worker failed, and word reached a worker here first
                    index, message, trace = report[1:4]
                    raise PeerFailed(index, message, trace, cluster.owner(index))
                raise WorkerError(*report[1:4])
            results[local] = report[1]
            _warm.learn(report[3], exchanged_arrow=report[4])
            if report[2]:
                warnings.warn(f"worker {index} finished with non-daemon thread(s) still running: "
                              f"{', '.join(report[2])}; they were stopped when the worker "
                              f"exited (end them in the job, or make them daemon threads)",
                              RuntimeWarning, stacklevel=4)
            waiting.discard(local)
    if lost is not None:
        assert cluster is not None
        cluster.wait(max(lost_until - time.monotonic(), 0.0))
        raise PeerLostError(*lost[1:4])
    return [results[local] for local in range(len(processes))]
