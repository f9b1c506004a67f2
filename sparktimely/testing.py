"""Testing dataflows at several worker counts, cheaply and reproducibly.

:func:`execute_in_process` runs a job like :func:`sparktimely.execute` but with every worker
in this process, one at a time, in an order drawn from a seeded random generator: frontier
bugs that show only at some worker count, or only in some interleaving, show up in ordinary
unit tests, and a failing seed replays exactly. :func:`consolidate` merges what the workers
captured, so results can be compared across worker counts.

>>> import sparktimely as st
>>> from sparktimely.testing import consolidate, execute_in_process
>>> def job(worker):
...     data = range(10) if worker.index == 0 else []
...     captured = worker.dataflow(
...         lambda scope: scope.to_stream(data).exchange(lambda x: x).map(lambda x: x % 3)
...         .capture())
...     worker.run()
...     return captured.extract()
>>> all(consolidate(execute_in_process(job, workers, seed=7)) == [(0, [0] * 4 + [1] * 3 + [2] * 3)]
...     for workers in (1, 2, 3))
True
"""
from __future__ import annotations

import random
import socket
import threading
import traceback
from typing import Any, Callable, Sequence, TypeVar

from .comm.inprocess import Aborted, InProcessHub
from .worker import Worker
from .errors import WorkerError, describe, require_positive_int
from .ops.capture import merge_by_time

__all__ = ["consolidate", "execute_in_process", "free_ports"]

R = TypeVar("R")


def execute_in_process(func: Callable[[Worker], R], workers: int = 1, seed: int = 0, *,
                       args: Sequence[str] = (), stall_seconds: float = 10.0) -> list[R]:
    """Run ``func(worker)`` on ``workers`` workers in this process and return their results
    in index order, as :func:`sparktimely.execute` does with worker processes.

    Each worker keeps stepping after ``func`` returns until its dataflows complete. Workers
    run one at a time, as threads, handing on at every step in an order drawn from ``seed``;
    messages between them are pickled (Arrow batches serialised) as between processes and
    delayed at random, FIFO per sender. A failure raises :class:`sparktimely.WorkerError`;
    if no worker can do anything for ``stall_seconds``, the run fails instead of hanging.

    >>> execute_in_process(lambda worker: (worker.index, worker.peers), workers=3, seed=1)
    [(0, 3), (1, 3), (2, 3)]
    """
    require_positive_int(workers, "workers")
    hub = InProcessHub(workers, seed, stall_seconds)
    results: list[Any] = [None] * workers
    failures: list[tuple[int, BaseException, str]] = []

    def main(index: int) -> None:
        try:
            hub.wait_turn(index)
            worker = Worker(index, workers, list(args), hub.allocator(index))
            results[index] = func(worker)
            worker.run()
            worker.finish()
        except Aborted:
            pass
        except BaseException as error:
            failures.append((index, error, traceback.format_exc()))
            hub.fail()
        finally:
            hub.finish(index)

    threads = [threading.Thread(target=main, args=(index,), daemon=True,
                                name=f"sparktimely-in-process-{index}")
               for index in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        index, error, text = failures[0]
        raise WorkerError(index, f"{describe(error)} (in-process seed {seed})",
                          text) from error
    return results


def consolidate(extracts: Sequence[Sequence[tuple[Any, Any]]]) -> list[tuple[Any, Any]]:
    """One ``Capture.extract()``-style list from several workers' extracts: per time, the
    records of every worker, sorted (Arrow tables are concatenated and sorted by their
    columns); times in order.

    >>> consolidate([[(0, [3, 1]), (2, ["x"])], [(0, [2])], []])
    [(0, [1, 2, 3]), (2, ['x'])]
    """
    return merge_by_time(pair for extract in extracts for pair in extract)


_EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host`` now, for a hostfile that processes started
    next will listen on. They are drawn below the kernel's ephemeral range, which the
    processes' own sockets bound to port 0 (each worker's listener) and outgoing connections
    take their ports from: a port that was merely free a moment ago (bound to 0, released)
    can be handed to one of them before the process named for it listens there.

    >>> ports = free_ports(3)
    >>> len(set(ports)), all(1024 <= port < _ephemeral_start() for port in ports)
    (3, True)
    """
    high = _ephemeral_start()
    candidates = range(max(1024, high - 12_000), high)
    chosen: list[int] = []
    draw = random.SystemRandom()             # not the program's seeded generator
    for port in draw.sample(candidates, min(len(candidates), count * 50 + 50)):
        try:
            with socket.create_server((host, port)):
                chosen.append(port)
        except OSError:                        # in use: another port
            continue
        if len(chosen) == count:
            return chosen
    raise RuntimeError(f"free_ports: found {len(chosen)} of {count} free ports on {host} "
                       f"below {high}")


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        with open(_EPHEMERAL_RANGE) as text:
            return int(text.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
