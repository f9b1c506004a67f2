"""One TCP connection between two workers on different hosts: framed messages out, through
the worker's own thread or a writer thread, and in, read without blocking by the worker's own
thread (see :mod:`.cluster` for how a worker's links are made and used).

Small output is written by the worker's own thread at ``flush`` (one non-blocking
``sendmsg`` per connection and step); bulk output, and whatever the kernel did not take at
once, goes through a writer thread per connection, so partitioning the next batch overlaps
sending this one. Input is read by the worker's own thread, without blocking, at every
``receive``: no reader thread waits for the interpreter lock while the worker steps (with
Python's switch interval a waiting reader could delay a round by milliseconds).

>>> import socket
>>> from collections import deque
>>> from sparktimely.comm.net import MESSAGE
>>> a, b = socket.socketpair()
>>> ends = [Link(s, me, 1 - me, f"worker {1 - me}", lambda: None, lambda: None)
...         for me, s in ((0, a), (1, b))]
>>> ends[0].send([b"hello"]); ends[0].flush()
True
>>> inbox: deque = deque()
>>> while not inbox:
...     ends[1].read(inbox)
>>> [(source, bytes(data)) for source, data in inbox]
[(0, b'hello')]
>>> for end in ends:
...     end.abort()
"""
from __future__ import annotations

import socket
import threading
from collections import deque
from typing import Callable

import pyarrow as pa

from ..shm import byte_view
from .net import FRAME, GOODBYE, MAX_FRAME, MESSAGE, PeerLost

_STAGE = 1 << 20          # reader staging buffer; smaller frames are copied out of it
_DIRECT = 64 << 10        # bodies at least this large are received straight into their buffer
_HAND_OFF = 256 << 10     # output beyond this goes through the writer thread at once
_IN_FLIGHT = 64 << 20     # send() waits while this much output is still unwritten
_IOV_MAX = 512            # buffers per sendmsg call


class Link:
    """The TCP connection from this worker to one remote worker.

    Writing: ``send`` frames a message into a local list. ``flush`` writes a small amount at
    once, without blocking, from the worker's thread if nothing is in flight; more than
    ``_HAND_OFF`` bytes, or what the kernel did not take, go to the writer thread, so the
    worker prepares its next batch while the kernel copies this one, and ``send`` waits while
    more than ``_IN_FLIGHT`` bytes are still unwritten (reading meanwhile, so that two workers
    sending to each other cannot wait for each other). Either way bytes leave in ``send``
    order. Reading: ``read`` takes what has arrived, without blocking, from the worker's
    thread; a large frame is received straight into a buffer of its own, over as many calls
    as it takes.
    """

    def __init__(self, sock: socket.socket, me: int, peer: int, name: str,
                 wake: Callable[[], None], drain: Callable[[], None]) -> None:
        self.sock, self.me, self.peer, self.name = sock, me, peer, name
        self.fd = sock.fileno()
        self.failure: PeerLost | None = None
        self.ended = False                      # the peer said goodbye and closed
        self._wake, self._drain = wake, drain
        self._frames: list[memoryview] = []     # worker thread only
        self._framed = 0
        self._cond = threading.Condition()
        self._handed: list[memoryview] = []     # for the writer thread, under _cond
        self._in_flight = 0                     # bytes handed and not yet written
        self._closing = False
        self._goodbye = False
        self._stage = memoryview(bytearray(_STAGE))
        self._start = self._end = 0
        self._large: tuple[pa.Buffer, memoryview, int] | None = None   # body, view, received
        self._writer = threading.Thread(target=self._write, daemon=True,
                                        name=f"sparktimely-writer-{me}-{peer}")
        self._writer.start()

    # -- writing (worker thread) ------------------------------------------------------------

    def send(self, parts: list, channel: int = MESSAGE) -> None:
        views = [byte_view(part) for part in parts]
        length = sum(view.nbytes for view in views)
        if length > MAX_FRAME:
            raise ValueError(f"a message of {length} bytes for {self.name} is larger than a "
                             f"frame may be ({MAX_FRAME} bytes): send it in smaller batches")
        self._frames.append(memoryview(FRAME.pack(channel, self.me, self.peer, length)))
        self._frames += views
        self._framed += FRAME.size + length
        if self._framed >= _HAND_OFF:
            self._hand_off()

    def flush(self) -> bool:
        """Write or hand off everything sent; True when nothing is left unwritten."""
        if self._frames:
            if self._in_flight == 0 and self._framed < _HAND_OFF:
                try:
                    self._write_now(self._frames)
                except OSError as error:
                    raise self._lost(error) from None
                self._framed = sum(view.nbytes for view in self._frames)
            if self._frames:
                self._hand_off()
        return self._in_flight == 0

    def _write_now(self, views: list[memoryview]) -> None:
        """Write what the kernel takes at once (consuming ``views``)."""
        while views:
            try:
                sent = self.sock.sendmsg(views[:_IOV_MAX], [], socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            _consume(views, sent)

    def _hand_off(self, closing: bool = False) -> None:
        with self._cond:
            self._handed += self._frames
            self._in_flight += self._framed
            self._closing = closing
            self._cond.notify_all()
        self._frames, self._framed = [], 0
        while self._in_flight > _IN_FLIGHT and self.failure is None:
            self._drain()                       # the peer may be waiting for us to read
            with self._cond:
                self._cond.wait(0.001)
        if self.failure is not None:
            raise self.failure

    def finish(self) -> None:
        """Send everything and a goodbye, then stop writing (reading goes on)."""
        self.send([], GOODBYE)
        self._hand_off(closing=True)

    def abort(self) -> None:
        """Drop the connection: the writer thread ends at once."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def join(self) -> None:
        """Wait for the writer thread, then close the socket."""
        while self._writer.is_alive():
            self._writer.join(1.0)
        self.sock.close()

    # -- writing (writer thread) ------------------------------------------------------------

    def _write(self) -> None:
        cond = self._cond
        try:
            while True:
                with cond:
                    while not self._handed and not self._closing:
                        cond.wait()
                    views, self._handed = self._handed, []
                if not views:
                    break
                written = sum(view.nbytes for view in views)
                while views:
                    _consume(views, self.sock.sendmsg(views[:_IOV_MAX]))
                with cond:
                    self._in_flight -= written
                    cond.notify_all()
            self.sock.shutdown(socket.SHUT_WR)
        except OSError as error:
            self._lost(error)
            with cond:
                cond.notify_all()
            self._wake()

    def _lost(self, error: OSError) -> PeerLost:
        if self.failure is None:
            self.failure = PeerLost(self.peer, self.name, error.strerror or str(error))
        return self.failure

    # -- reading (worker thread) ------------------------------------------------------------

    def read(self, inbox: deque) -> None:
        """Append every complete frame that has arrived to ``inbox``, without blocking; at the
        end of the stream, mark the link ended (after a goodbye) or failed."""
        if self.ended or self.failure is not None:
            return
        try:
            self._read(inbox)
        except OSError as error:
            self._lost(error)
        except Exception as error:
            self.failure = self.failure or PeerLost(self.peer, self.name,
                                                    f"what it sent cannot be received "
                                                    f"({type(error).__name__}: {error})")

    def _read(self, inbox: deque) -> None:
        sock, stage, peer = self.sock, self._stage, self.peer
        while True:
            if self._large is not None:                 # a large body, straight into place
                body, view, got = self._large
                count = _receive(sock, view[got:])
                if count is None:
                    return
                if count == 0:
                    raise ConnectionError("connection closed in the middle of a frame")
                got += count
                if got < view.nbytes:
                    self._large = (body, view, got)
                    continue
                self._large = None
                inbox.append((peer, body))
            while self._end - self._start >= FRAME.size:
                start = self._start
                channel, source, target, length = FRAME.unpack_from(stage, start)
                if (source, target) != (peer, self.me) or length > MAX_FRAME:
                    header = bytes(stage[start:start + FRAME.size])
                    raise ConnectionError(f"a corrupt frame header {header!r} (channel "
                                          f"{channel}, {source} -> {target}, {length} bytes) "
                                          f"on the link {peer} -> {self.me}")
                body_start = start + FRAME.size
                staged = min(self._end - body_start, length)
                if length >= _DIRECT and staged < length:
                    body = pa.allocate_buffer(length)
                    view = memoryview(body).cast("B")
                    view[:staged] = stage[body_start:body_start + staged]
                    self._start = self._end = 0
                    self._large = (body, view, staged)
                    break
                if staged < length:
                    break
                self._start = body_start + length
                if channel == GOODBYE:
                    self._goodbye = True
                else:
                    inbox.append((peer, stage[body_start:self._start].tobytes()))
            if self._large is not None:
                continue
            if self._start == self._end:
                self._start = self._end = 0
            elif self._start + FRAME.size + _DIRECT > _STAGE:
                stage[:self._end - self._start] = stage[self._start:self._end]
                self._start, self._end = 0, self._end - self._start
            count = _receive(sock, stage[self._end:])
            if count is None:
                return
            if count == 0:
                if self._start != self._end:
                    raise ConnectionError("connection closed in the middle of a frame")
                if not self._goodbye:
                    raise ConnectionError("the peer closed the connection without a goodbye "
                                          "(its process died?)")
                self.ended = True
                return
            self._end += count


def _receive(sock: socket.socket, into: memoryview) -> int | None:
    """Bytes received into ``into`` without blocking (0 at the end of the stream), or None
    when nothing is there."""
    try:
        return sock.recv_into(into, into.nbytes, socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return None


def _consume(views: list[memoryview], sent: int) -> None:
    """Drop the first ``sent`` bytes of ``views`` (in place)."""
    done = 0
    while sent and sent >= views[done].nbytes:
        sent -= views[done].nbytes
        done += 1
    if sent:
        views[done] = views[done][sent:]
    del views[:done]

