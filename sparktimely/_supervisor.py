"""Starting this process's worker processes and watching them until they finish or fail.

Workers are forked (so ``func`` may be a closure or lambda) and each reports its result, or
its error and traceback, over a pipe. The supervisor waits on those pipes and on the
processes' sentinels: the first error or unexpected exit kills every other worker, and the
shared-memory segments are removed whatever happens.
"""
from __future__ import annotations

import ctypes
import os
import signal
import traceback
from typing import Any, Callable

import multiprocess
from multiprocess.connection import wait

from .comm import ShmAllocator
from .dataflow import Worker
from .shm import Mesh

_PR_SET_PDEATHSIG = 1


class WorkerError(RuntimeError):
    """A worker failed: carries its ``index`` and the ``traceback`` text.

    ``str()`` names the original exception type and message.
    """

    def __init__(self, index: int, message: str, traceback: str = "") -> None:
        super().__init__(f"worker {index} failed: {message}")
        self.index = index
        self.message = message
        self.traceback = traceback

    def __reduce__(self):
        return (WorkerError, (self.index, self.message, self.traceback))


def _die_with_parent(parent: int) -> None:
    """Ask the kernel to kill this process when its parent dies (Linux), and check that the
    parent did not die before we asked."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def _worker_main(func: Callable[[Worker], Any], mesh: Mesh | None, local: int, index: int,
                 peers: int, args: list[str], conn, parent: int) -> None:
    _die_with_parent(parent)
    endpoint = mesh.endpoint(local) if peers > 1 else None
    try:
        worker = Worker(index, peers, args,
                        ShmAllocator(endpoint, index, peers) if endpoint else None)
        result = func(worker)
        worker.run()
        try:
            conn.send(("ok", result))
        except Exception as error:
            conn.send(("error", f"the result of worker {index} cannot be sent back: "
                                f"{type(error).__name__}: {error}", traceback.format_exc()))
    except BaseException as error:
        conn.send(("error", f"{type(error).__name__}: {error}", traceback.format_exc()))
    finally:
        conn.close()


def run_workers(func: Callable[[Worker], Any], workers: int, first_index: int, peers: int,
                args: list[str]) -> list[Any]:
    """Run ``func`` on ``workers`` forked worker processes with global indexes starting at
    ``first_index``; return their results in index order or raise WorkerError."""
    context = multiprocess.get_context("fork")
    mesh = Mesh.create(workers) if peers > 1 else None
    processes: list = []
    pipes: list = []
    try:
        for local in range(workers):
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(
                target=_worker_main, daemon=True, name=f"sparktimely-worker-{first_index + local}",
                args=(func, mesh, local, first_index + local, peers, args, writer, os.getpid()))
            process.start()
            writer.close()
            processes.append(process)
            pipes.append(reader)
        return _collect(processes, pipes, first_index)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
        for process in processes:
            process.join(5)
        for pipe in pipes:
            pipe.close()
        if mesh is not None:
            mesh.unlink()


def _collect(processes: list, pipes: list, first_index: int) -> list[Any]:
    results: dict[int, Any] = {}
    waiting = set(range(len(processes)))
    while waiting:
        handles = {}
        for local in waiting:
            handles[pipes[local]] = local
            handles[processes[local].sentinel] = local
        for ready in wait(list(handles)):
            local = handles[ready]
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
                raise WorkerError(index, report[1], report[2])
            results[local] = report[1]
            waiting.discard(local)
    return [results[local] for local in range(len(processes))]
