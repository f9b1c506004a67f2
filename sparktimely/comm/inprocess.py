"""Several workers in one process, for deterministic tests of distributed behaviour.

:class:`InProcessHub` connects ``n`` workers that run as threads of one process. Only one of
them runs at a time: a worker hands the baton on whenever it takes in messages (at every
step) or parks, and the hub picks who runs next with a seeded random generator. Messages are
encoded as they would be for another process (so nothing is shared by reference), stay FIFO
per sender, and each ``receive`` takes a random prefix of what every sender has queued, so a
test explores interleavings and delays; the same seed replays the same run.

This is timely's idea of a thread allocator beside the process and network ones, built for
testing rather than speed: see :func:`sparktimely.testing.execute_in_process`.
"""
from __future__ import annotations

import random
import threading
import time
from collections import deque

from .allocator import EncodingAllocator
from .codec import decode_all

__all__ = ["InProcessAllocator", "InProcessHub", "Stalled"]


class Aborted(BaseException):
    """Unwinds a worker thread after another worker failed (not an error of its own)."""


class Stalled(RuntimeError):
    """No worker of an in-process run did anything for ``stall_seconds``.

    >>> issubclass(Stalled, RuntimeError)
    True
    """


class InProcessHub:
    """Queues between ``workers`` in-process workers and the baton they share.

    >>> from sparktimely.testing import execute_in_process
    >>> execute_in_process(lambda worker: (worker.index, worker.peers), 2, seed=7)
    [(0, 2), (1, 2)]
    """

    def __init__(self, workers: int, seed: int, stall_seconds: float = 10.0) -> None:
        self.workers = workers
        self.seed = seed
        self.stall_seconds = stall_seconds
        self._random = random.Random(seed)
        self._queues: list[list[deque]] = [[deque() for _ in range(workers)]
                                           for _ in range(workers)]
        self._baton = threading.Condition()
        self._current = 0
        self._alive = set(range(workers))
        self._failed = False
        self._idle: set[int] = set()
        self._idle_since: float | None = None

    def allocator(self, index: int) -> "InProcessAllocator":
        return InProcessAllocator(self, index)

    # -- the baton ---------------------------------------------------------------------------

    def wait_turn(self, index: int) -> None:
        """Block until it is worker ``index``'s turn (raises Aborted once a worker failed)."""
        with self._baton:
            while self._current != index and not self._failed:
                self._baton.wait()
            if self._failed:
                raise Aborted()

    def pass_baton(self, index: int, idle: bool) -> None:
        """Worker ``index`` lets the hub choose who runs next (perhaps itself) and waits for
        its own next turn. ``idle``: its last step had nothing to do (else it did work)."""
        with self._baton:
            if self._failed:
                raise Aborted()
            if idle:
                self._idle.add(index)
                if self._idle >= self._alive:
                    self._check_stall()
            elif index in self._idle:
                self._idle.discard(index)
                self._idle_since = None
            self._current = self._random.choice(sorted(self._alive))
            self._baton.notify_all()
        self.wait_turn(index)

    def _check_stall(self) -> None:
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        elif now - self._idle_since > self.stall_seconds:
            raise Stalled(f"no in-process worker did anything for {self.stall_seconds:g} s "
                          f"(seed {self.seed}): a dataflow cannot complete (an input handle "
                          f"never closed? a capability never dropped?)")
        else:
            time.sleep(0.0005)           # everyone is waiting: do not burn the CPU

    def finish(self, index: int) -> None:
        """Worker ``index`` is done; someone else runs."""
        with self._baton:
            self._alive.discard(index)
            self._idle.discard(index)
            if self._alive:
                self._current = self._random.choice(sorted(self._alive))
            self._baton.notify_all()

    def fail(self) -> None:
        """A worker failed: every other worker unwinds at its next turn."""
        with self._baton:
            self._failed = True
            self._baton.notify_all()

    # -- queues ------------------------------------------------------------------------------

    def push(self, source: int, target: int, data: bytes) -> None:
        self._queues[source][target].append(data)
        self._idle.clear()
        self._idle_since = None

    def take(self, target: int) -> list[tuple[int, bytes]]:
        """A random prefix of every sender's queue for ``target`` (all of it, half the time)."""
        taken: list[tuple[int, bytes]] = []
        for source in range(self.workers):
            queue = self._queues[source][target]
            if queue:
                count = len(queue) if self._random.random() < 0.5 else \
                    self._random.randint(0, len(queue))
                taken.extend((source, queue.popleft()) for _ in range(count))
        return taken

    def queued_for(self, target: int) -> bool:
        return any(self._queues[source][target] for source in range(self.workers))


class InProcessAllocator(EncodingAllocator):
    """Worker ``index``'s side of an :class:`InProcessHub` (the ``Allocator`` protocol).

    >>> allocator = InProcessHub(3, seed=0).allocator(1)
    >>> allocator.index, allocator.peers
    (1, 3)
    """

    def __init__(self, hub: InProcessHub, index: int) -> None:
        self.hub = hub
        self.index = index
        self.peers = hub.workers
        self._parked = False         # the last step found nothing to do

    def send_parts(self, target: int, parts: list) -> None:
        self.hub.push(self.index, target, b"".join(memoryview(part).cast("B") for part in parts))

    def receive(self) -> list[tuple[int, tuple]]:
        hub = self.hub
        hub.pass_baton(self.index, idle=self._parked)   # a step without a park was busy
        self._parked = False
        return decode_all(hub.take(self.index))

    def park(self, timeout: float | None) -> None:
        self._parked = True
        self.hub.pass_baton(self.index, idle=not self.hub.queued_for(self.index))

    def wake(self) -> None:
        pass                # the hub hands the baton round; a parked worker runs again soon

    def flush(self) -> bool:
        return True

    def oversubscribed(self) -> bool:
        return False

    def close(self) -> None:
        pass

    abort = close
