"""A mesh of single-producer single-consumer byte rings between the workers of one host.

Layout. ``Mesh.create(n)`` makes a control segment ``<prefix>-ctl``: the configuration, one
64-byte block per worker (its doorbell, its mail flag, the bytes of ring it has reserved) and a
*created* word per (source, destination) pair. Rings are made by their writer
(``<prefix>-r<src>-<dst>-g0``, then its *created* word is set): on the first message to a
destination, so a job whose workers talk to few others reserves little, or all at once with
``make_rings`` (a dataflow's workers all talk to each other), so that the first messages find
them made. A ring starts at
``ring_bytes`` (default: ``SENDER_BYTES`` shared among a sender's n - 1 destinations, so what
is reserved grows with the number of workers, not with its square) and grows only for a
message larger than half of it. A ring segment is a 256-byte header (``head``: bytes ever
written, stored by the writer; ``tail``: bytes the reader no longer needs; ``want`` and
``rollreq`` flags) and a data area. A record is one 8-byte word ``length << 8 | kind`` and the
payload padded to 8 bytes. Records never wrap (a WRAP record skips to the start), so each
message is contiguous and 8-byte aligned and can be read in place.

Bound. ``limit`` (default ``$SPARKTIMELY_SHM_LIMIT``, e.g. ``512M``, else half of the space of
the directory the control segment lives in) bounds the bytes of ring all workers of the mesh
reserve together. A message that would need a larger ring than the bound allows travels in
PART records (the first one starts with the message's length) through the ring it has, and
the reader joins the parts in private memory (a copy: only on this path).

Reading. ``recv`` copies messages shorter than ``copy_below`` out as bytes. Longer ones come back
as read-only memoryviews into the ring, over a ``pyarrow.foreign_buffer`` whose base object
releases the record when the last view, slice or zero-copy decoded array dies. ``tail`` stops at
the oldest unreleased record, so the writer never overwrites memory a reader can still see.
A writer sets its destination's *mail* flag after publishing a message, so a ``recv`` with no
mail costs one load, whatever the number of workers.

Writing never blocks. ``send`` writes the parts contiguously, without joining them first. When
the ring is full the message is copied to a per-target overflow queue that later ``send``,
``recv``, ``park`` and ``flush`` calls drain in order, so two workers flooding each other cannot
deadlock; ``pending_bytes`` lets the caller throttle. ``try_send`` instead returns False on a
full ring (no copy); the caller drains its own input, parks, and retries. ``send(...,
notify=False)`` leaves the wake-up of a parked destination to the next ``flush``, so a worker
wakes each peer at most once per step, with everything the step sent it.

Growing and rolling. A message larger than half the ring, or a reader that still holds zero-copy
views at its next ``recv``/``park`` while the writer waits for space, makes the writer *roll*: it
creates generation g+1 of the ring (twice as large if needed), writes a ROLL record and goes on
there. The reader follows at the ROLL record and unlinks the old generation, which stays mapped
until its last view dies. Rolls are rare; the hot path reuses the same pages.

Doorbells. A futex word per worker (``sleeping``) plus a ``rung`` flag. ``park`` polls for
``spin_us``, calling sched_yield between polls, unless more of the mesh's workers are awake than
this process may use cores (then spinning only takes the time slice of the peer it waits for:
it goes to sleep at once); then it sets ``sleeping``, fences, re-checks and FUTEX_WAITs (shared,
not private, so unrelated processes that attached by name work too). A writer fences after
publishing and, only if the receiver sleeps, clears the word and FUTEX_WAKEs it. The ``rung``
flag carries everything else: "space freed" or "please roll" (reader to a writer that set
``want``) and explicit ``wake``.

Memory order: plain aligned 8-byte loads and stores through memoryviews, relying on x86-64 TSO;
other CPUs get full fences around head/tail publication. An endpoint belongs to one thread, and
each (mesh, index) has one endpoint at a time.
"""
from __future__ import annotations

import atexit
import os
import pickle
import re
import time
from collections import deque
from typing import Iterable, Sequence, Union

import pyarrow as pa

from ._codec import byte_view
from ._segment import ENV_DIR, PAGE, SHM_DIR, Segment, job_prefix, sweep, sweep_stale
from ._sync import WEAK_ORDERING, fence, futex_wait, futex_wake

BytesLike = Union[bytes, bytearray, memoryview, pickle.PickleBuffer, pa.Buffer]
Part = Union[bytes, memoryview]     # a piece of a message as rings write it (flat bytes)
Message = Union[bytes, memoryview]

_HDR = 256                      # ring header bytes
_HEAD, _TAIL = 0, 8             # u64 indexes in a ring header
_WANT, _ROLLREQ = 32, 33        # u32 indexes in a ring header
_MSG, _WRAP, _ROLL, _PART = 1, 2, 3, 4      # record kinds
_MAGIC = 0x53504B54494D4532     # control segment: u64 magic, workers, limit, ring bytes
_LIMIT, _RING = 2, 3            # u64 indexes of the bound and the first size of a ring
SENDER_BYTES = 4 << 20
"""Bytes of ring a sender starts with, shared among its destinations."""
MIN_RING = 64 << 10
"""The smallest first size of a ring."""
LIMIT_ENV = "SPARKTIMELY_SHM_LIMIT"


def _bell(index: int) -> int:
    """u32 index of a worker's block in the control segment: ``sleeping``, then ``rung``,
    ``mail`` and, as a u64 at u32 index + 4, the bytes of ring the worker has reserved."""
    return 64 + 16 * index


def _created(num_workers: int, src: int, dst: int) -> int:
    """u32 index of the word that says the ring ``src -> dst`` exists."""
    return _bell(num_workers) + src * num_workers + dst


def _ring_name(prefix: str, src: int, dst: int, gen: int) -> str:
    return f"{prefix}-r{src}-{dst}-g{gen}"


def _align8(n: int) -> int:
    return (n + 7) & -8


def parse_bytes(text: str) -> int:
    """A size such as ``512M``, ``2G``, ``64k`` or ``1048576`` in bytes.

    >>> parse_bytes("512M"), parse_bytes("1.5g"), parse_bytes("4096")
    (536870912, 1610612736, 4096)
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kmgt]?)i?b?\s*", text.lower())
    if match is None:
        raise ValueError(f"${LIMIT_ENV}={text!r}: expected a size such as 512M, 2G or 1048576")
    return int(float(match[1]) * 1024 ** "_kmgt".index(match[2] or "_"))


def ring_limit(directory: str) -> int:
    """The bytes of ring a host's workers may reserve in all: ``$SPARKTIMELY_SHM_LIMIT``,
    else half the size of ``directory``, where their segments live."""
    configured = os.environ.get(LIMIT_ENV, "")
    if configured:
        return parse_bytes(configured)
    room = os.statvfs(directory)
    return room.f_blocks * room.f_frsize // 2


def check_workers_per_host(num_workers: int, capacity: int | None = None) -> None:
    """A ValueError if ``num_workers`` workers on one host cannot have their rings: each
    worker's first ring to each other one takes at least ``MIN_RING``, more in all than
    ``capacity`` bytes (default: the size of the directory segments are made in,
    ``$SPARKTIMELY_SHM_DIR`` or /dev/shm). A mistyped worker count is told before anything
    is made (the control segment alone grows with its square).

    >>> check_workers_per_host(100_000, capacity=1 << 30)
    Traceback (most recent call last):
    ValueError: 100,000 workers on one host need at least 612,729.6 GiB of shared memory for their rings (a 64 KiB ring from each worker to each other one), more than /dev/shm holds (1.0 GiB): at most 128 fit
    """
    if num_workers < 2:
        return
    directory = os.environ.get(ENV_DIR) or SHM_DIR
    if capacity is None:
        room = os.statvfs(directory)
        capacity = room.f_blocks * room.f_frsize
    ring = MIN_RING + _HDR
    if num_workers * (num_workers - 1) * ring <= capacity:
        return
    fitting = int((1 + (1 + 4 * capacity / ring) ** 0.5) / 2)
    raise ValueError(
        f"{num_workers:,} workers on one host need at least "
        f"{num_workers * (num_workers - 1) * ring / 2 ** 30:,.1f} GiB of shared memory for "
        f"their rings (a {MIN_RING >> 10} KiB ring from each worker to each other one), more "
        f"than {directory} holds ({capacity / 2 ** 30:,.1f} GiB): at most {fitting:,} fit")


class RingGone(ConnectionResetError):
    """Worker ``worker``, the writer of a ring, is gone (its process ended); ``reason`` says
    how the reader knows.

    >>> gone = RingGone(2, "its ring to worker 0 was removed")
    >>> gone.worker, str(gone)
    (2, 'worker 2 is gone: its ring to worker 0 was removed')
    """

    def __init__(self, worker: int, reason: str) -> None:
        super().__init__(f"worker {worker} is gone: {reason}")
        self.worker, self.reason = worker, reason


class _Out:
    """Writer side of the ring ``ep.index -> target`` and its overflow queue (entries:
    ``[message, bytes of it already sent in parts]``)."""

    def __init__(self, ep: Endpoint, target: int, cap: int):
        self.ep, self.target, self.gen = ep, target, 0
        self.pending: deque[list] = deque()
        self.pending_bytes = 0
        self._use(Segment.create(_ring_name(ep.prefix, ep.index, target, 0), _HDR + cap,
                                 ep.directory))
        ep.reserved += self.seg.size

    def _use(self, seg: Segment) -> None:
        self.seg, self.cap = seg, seg.size - _HDR
        self.q, self.buf = seg.u64, seg.buf
        self.head, self.tail = seg.u64[_HEAD], seg.u64[_TAIL]

    def write(self, parts: Sequence[Part], n: int) -> bool:
        """Write one message made of ``parts`` (``n`` bytes); False if the ring lacks space,
        or the message needs a larger ring than the mesh's bound allows."""
        size = 8 + _align8(n)
        if 2 * (size + 8) > self.cap and not self._grow(2 * (size + 8)):
            return False
        return self._record(_MSG, parts, n)

    def write_one(self, data: bytes) -> bool:
        """:meth:`write` of a message of one part, the common case of a small control
        message, in fewer steps (one slice store of the bytes behind their record word)."""
        n = len(data)
        cap, head = self.cap, self.head
        size = 8 + ((n + 7) & -8)
        pos = head % cap
        if pos + size > cap or head - self.tail + size + 8 > cap or 2 * (size + 8) > cap:
            return self.write([data], n)       # wrap, full or too large: the general path
        q = self.q
        q[(_HDR + pos) >> 3] = n << 8 | _MSG
        self.buf[_HDR + 8 + pos:_HDR + 8 + pos + n] = data
        self.head = head = head + size
        if WEAK_ORDERING:
            fence()
        q[_HEAD] = head
        return True

    def _record(self, kind: int, parts: Sequence[Part], n: int) -> bool:
        """Append one record of ``kind``; False if the ring lacks space."""
        size = 8 + _align8(n)
        pos = self.head % self.cap
        skip = self.cap - pos if pos + size > self.cap else 0
        need = skip + size + 8  # keep 8 bytes free for a ROLL record
        if self.head - self.tail + need > self.cap:
            self.tail = self.q[_TAIL]
            if self.head - self.tail + need > self.cap:
                if not self.seg.u32[_ROLLREQ]:
                    return False
                self._roll(self.cap)
                return self._record(kind, parts, n)
        q, buf = self.q, self.buf
        if skip:
            q[(_HDR + pos) >> 3] = _WRAP
            pos = 0
        q[(_HDR + pos) >> 3] = n << 8 | kind
        off = _HDR + pos + 8
        for part in parts:
            buf[off:off + len(part)] = part
            off += len(part)
        self.head += skip + size
        if WEAK_ORDERING:
            fence()
        q[_HEAD] = self.head
        return True

    def _grow(self, need: int) -> bool:
        """Roll to a ring of at least ``need`` bytes, if the mesh's bound allows it."""
        cap = max(2 * self.cap, -(-need // PAGE) * PAGE)
        if not self.ep.may_reserve(cap - self.cap):
            return False
        self._roll(cap)
        return True

    def _roll(self, cap: int) -> None:
        ep = self.ep
        seg = Segment.create(_ring_name(ep.prefix, ep.index, self.target, self.gen + 1),
                             _HDR + cap, ep.directory)
        ep.reserved += seg.size - self.seg.size
        self.seg.u64[(_HDR + self.head % self.cap) >> 3] = _ROLL
        if WEAK_ORDERING:
            fence()
        self.seg.u64[_HEAD] = self.head + 8
        self.seg.close()
        self.gen += 1
        self._use(seg)

    def _write_parts(self, entry: list) -> bool:
        """Write what is left of a queued message too large for the ring as PART records
        (the first starting with the message's length); True once all of it is written."""
        data, done = entry
        piece = max(((self.cap // 4) & -8) - 16, 8)
        while done < len(data):
            chunk = memoryview(data)[done:done + piece]
            parts = [chunk] if done else [memoryview(len(data).to_bytes(8, "little")), chunk]
            if not self._record(_PART, parts, len(chunk) + (0 if done else 8)):
                entry[1] = done
                return False
            done += len(chunk)
        return True

    def flush(self) -> bool:
        """Write queued messages in order; True when the queue is empty."""
        while self.pending:
            entry = self.pending[0]
            data, done = entry
            if not done and self.write([memoryview(data)], len(data)):
                pass
            elif done or 2 * (8 + _align8(len(data)) + 8) > self.cap:   # too large: in parts
                if not self._write_parts(entry):
                    return False
            else:
                return False
            self.pending.popleft()
            self.pending_bytes -= len(data)
        return True

    def put(self, parts: Sequence[Part] | None = None, n: int = 0) -> bool:
        """Write the queue, then ``parts`` if given. On failure ask the reader to ring us when it
        frees space (``want``; a Dekker pair with ``_In.publish``), tell it to look, and retry
        once."""
        if self.flush() and (parts is None or self.write(parts, n)):
            return True
        u = self.seg.u32
        u[_ROLLREQ], u[_WANT] = 0, 1
        fence()
        self.ep.post(self.target)                  # so that its next recv sees the request
        return self.flush() and (parts is None or self.write(parts, n))

    def close(self) -> None:
        self.seg.close()


class _Lease:
    """A record handed out zero-copy; ``start`` is its offset in the ring's byte count."""
    __slots__ = ("ring", "seg", "start", "epoch", "released")

    def __init__(self, ring: _In, start: int, epoch: int):
        self.ring, self.seg, self.start, self.epoch, self.released = ring, ring.seg, start, epoch, False


class _Guard:
    """Base object of a zero-copy view: releases its record when the last view of it dies."""
    __slots__ = ("lease",)

    def __init__(self, lease: _Lease):
        self.lease = lease

    def __del__(self) -> None:
        self.lease.ring.release(self.lease)


class _In:
    """Reader side of the ring ``src -> ep.index``."""

    def __init__(self, ep: Endpoint, src: int):
        self.ep, self.src, self.gen, self.closed = ep, src, 0, False
        self.copy_below = ep.copy_below
        self._joining: pa.Buffer | None = None          # a message arriving in parts
        self._joined = 0
        self._use(self._attach(0))

    def _attach(self, gen: int) -> Segment:
        """Map generation ``gen`` of this ring. Its writer made it (and said so), so if it is
        missing the writer's process ended and its segments were removed (a host group's
        janitor removes a dead member's): :class:`RingGone` naming the writer."""
        ep = self.ep
        name = _ring_name(ep.prefix, self.src, ep.index, gen)
        try:
            return Segment.attach(name, ep.directory)
        except FileNotFoundError:
            raise RingGone(self.src, f"its ring to worker {ep.index} ({name}) was removed, "
                                     f"as when its process ends") from None

    def _use(self, seg: Segment) -> None:
        self.seg, self.cap = seg, seg.size - _HDR
        self.q, self.buf = seg.u64, seg.buf
        self.read = self.tail = seg.u64[_TAIL]
        self.leases: deque[_Lease] = deque()

    def poll(self, out: list[tuple[int, Message]], epoch: int) -> None:
        """Append every available message to ``out`` and publish the new ``tail``."""
        q = self.q
        head = q[_HEAD]
        read = self.read
        if head == read:
            return
        if WEAK_ORDERING:
            fence()
        cap, buf, src, copy_below = self.cap, self.buf, self.src, self.copy_below
        while read != head:
            pos = read % cap
            word = q[(_HDR + pos) >> 3]
            kind, n = word & 0xFF, word >> 8
            if kind == _MSG and n < copy_below:                 # the common case first
                start = _HDR + pos + 8
                out.append((src, buf[start:start + n].tobytes()))
                read += 8 + ((n + 7) & -8)
                continue
            self.read = read
            if kind == _WRAP:
                read += cap - pos
                continue
            if kind == _ROLL:
                self._follow_roll()
                q, cap, buf, read = self.q, self.cap, self.buf, self.read
                head = q[_HEAD]
                if WEAK_ORDERING:
                    fence()
                continue
            start = _HDR + pos + 8
            if kind == _PART:
                joined = self._join(buf[start:start + n])
                if joined is not None:
                    out.append((src, joined))
            else:
                lease = _Lease(self, read, epoch)
                self.leases.append(lease)
                self.seg.pin()
                out.append((src, memoryview(
                    pa.foreign_buffer(self.seg.address + start, n, _Guard(lease)))))
            read += 8 + _align8(n)
        self.read = read
        self.publish()

    def _join(self, part: memoryview) -> memoryview | None:
        """Copy one PART record out; the whole message once its last part arrived."""
        if self._joining is None:
            self._joining = pa.allocate_buffer(int.from_bytes(part[:8], "little"))
            self._joined, part = 0, part[8:]
        view = memoryview(self._joining).cast("B")
        view[self._joined:self._joined + len(part)] = part
        self._joined += len(part)
        if self._joined < len(view):
            return None
        self._joining = None
        return view.toreadonly()

    def _follow_roll(self) -> None:
        old = self.seg
        self._use(self._attach(self.gen + 1))
        self.gen += 1
        old.unlink()
        old.close()  # deferred while zero-copy views of it live

    def publish(self) -> None:
        """Store ``tail`` (oldest unreleased record, else ``read``); wake a writer waiting for space."""
        tail = self.leases[0].start if self.leases else self.read
        if tail == self.tail:
            return
        self.tail = tail
        if WEAK_ORDERING:
            fence()
        self.q[_TAIL] = tail
        fence()
        u = self.seg.u32
        if u[_WANT]:
            u[_WANT] = 0
            self.ep.wake(self.src)

    def release(self, lease: _Lease) -> None:
        if lease.seg is self.seg and not self.closed:
            lease.released = True
            while self.leases and self.leases[0].released:
                self.leases.popleft()
            self.publish()
        lease.seg.unpin()

    def check_retained(self, epoch: int) -> None:
        """If the writer waits for space while views older than ``epoch`` are held, ask it to roll."""
        u = self.seg.u32
        if u[_WANT] and self.leases and self.leases[0].epoch < epoch:
            u[_ROLLREQ], u[_WANT] = 1, 0
            self.ep.wake(self.src)

    def close(self) -> None:
        self.closed = True
        self.seg.close()


class Endpoint:
    """One worker's view of a ``Mesh``: send to, receive from and park on the other workers.

    >>> from sparktimely.shm import Mesh
    >>> with Mesh.create(2, ring_bytes=1 << 16) as mesh:
    ...     with mesh.endpoint(0) as a, mesh.endpoint(1) as b:
    ...         a.send(1, [b"hello"])
    ...         b.recv()
    [(0, b'hello')]
    """

    def __init__(self, mesh: Mesh, index: int, spin_us: float, copy_below: int):
        if not 0 <= index < mesh.num_workers:
            raise IndexError(f"worker index {index} outside 0..{mesh.num_workers - 1}")
        self.prefix, self.directory = mesh.name, mesh.directory
        self.index, self.num_workers = index, mesh.num_workers
        self.copy_below, self._spin = copy_below, spin_us * 1e-6
        self._ctl = Segment.attach(mesh.name + "-ctl", mesh.directory)
        self._u32 = self._ctl.u32
        self._bell = _bell(index)
        self._mail = self._bell + 2
        self._reserved_at = (self._bell + 4) >> 1
        self._ring_bytes = self._ctl.u64[_RING]
        self._limit = self._ctl.u64[_LIMIT]
        self._cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
        self._epoch = 0
        self._blocked: set[int] = set()
        self._later: set[int] = set()
        self._in: list[_In | None] = [None] * self.num_workers
        self._out: list[_Out | None] = [None] * self.num_workers
        self._rings: list[_In] = []             # the rings of _in that exist, by source
        self._awaited = [(src, _created(self.num_workers, src, index))   # (self: see _out_to)
                         for src in range(self.num_workers) if src != index]
        self._mails = [_bell(target) + 2 for target in range(self.num_workers)]

    # -- reserved bytes (this worker's rings) -------------------------------------------------

    @property
    def reserved(self) -> int:
        """Bytes of ring this worker's current generations take."""
        return self._ctl.u64[self._reserved_at]

    @reserved.setter
    def reserved(self, value: int) -> None:
        self._ctl.u64[self._reserved_at] = value

    def may_reserve(self, extra: int) -> bool:
        """Whether ``extra`` more bytes of ring keep the mesh within its bound."""
        q = self._ctl.u64
        total = sum(q[(_bell(w) + 4) >> 1] for w in range(self.num_workers))
        return total + extra <= self._limit

    # -- sending ------------------------------------------------------------------------------

    def _out_to(self, target: int) -> _Out:
        out = self._out[target]
        if out is None:
            out = self._out[target] = _Out(self, target, self._ring_bytes)
            created = _created(self.num_workers, self.index, target)
            self._ctl.u32[created] = 1
            if target == self.index:            # messages to itself: its next recv looks
                self._awaited.append((target, created))
        return out

    def make_rings(self) -> None:
        """Create this worker's ring to every other worker now, instead of at its first
        message to each.

        >>> from sparktimely.shm import Mesh, segments
        >>> with Mesh.create(3, ring_bytes=1 << 16) as mesh:
        ...     with mesh.endpoint(1) as b:
        ...         b.make_rings()
        ...         sorted(path.rpartition("-r")[2] for path in segments(mesh.name + "-r"))
        ['1-0-g0', '1-2-g0']
        """
        for target in range(self.num_workers):
            if target != self.index and self._out[target] is None:
                self._out_to(target)

    def send(self, target: int, parts: Iterable[BytesLike], notify: bool = True) -> None:
        """Send the concatenation of ``parts`` as one message to worker ``target``. Never blocks:
        if the ring is full the message is copied to an overflow queue (see ``pending_bytes``).
        ``notify=False`` wakes a sleeping ``target`` only at the next ``flush``."""
        out = self._out[target] or self._out_to(target)
        views = [p if p.__class__ is bytes else byte_view(p) for p in parts]
        n = sum(map(len, views))
        if (out.pending or not out.write(views, n)) and not out.put(views, n):
            out.pending.append([b"".join(views), 0])
            out.pending_bytes += n
            self._blocked.add(target)
        if notify:
            self.post(target)
        else:
            self._u32[self._mails[target]] = 1                  # mail for the target
            self._later.add(target)

    def send_one(self, target: int, data: bytes) -> None:
        """``send(target, [data], notify=False)`` for a message of one ``bytes`` object, in
        fewer steps: the path of a small control message, such as a progress batch.

        >>> from sparktimely.shm import Mesh
        >>> with Mesh.create(2, ring_bytes=1 << 16) as mesh:
        ...     with mesh.endpoint(0) as a, mesh.endpoint(1) as b:
        ...         a.send_one(1, b"progress")
        ...         _ = a.flush()
        ...         b.recv()
        [(0, b'progress')]
        """
        out = self._out[target] or self._out_to(target)
        if out.pending or not out.write_one(data):
            self.send(target, [data], notify=False)
            return
        self._u32[self._mails[target]] = 1                      # mail for the target
        self._later.add(target)

    def try_send(self, target: int, parts: Iterable[BytesLike]) -> bool:
        """Like ``send`` but never queues: False if the ring is full (``park`` returns once the
        receiver frees space). Avoids the overflow copy for large messages."""
        out = self._out[target] or self._out_to(target)
        views = [byte_view(p) for p in parts]
        sent = out.put(views, sum(len(v) for v in views))
        self.post(target)
        return sent

    def post(self, target: int) -> None:
        """Tell ``target`` to look at its rings, and wake it if it sleeps."""
        self._ctl.u32[_bell(target) + 2] = 1
        self._notify(target)

    # -- receiving ----------------------------------------------------------------------------

    def recv(self) -> list[tuple[int, Message]]:
        """All available messages as ``(source, message)``, FIFO per source. Messages of at least
        ``copy_below`` bytes are zero-copy read-only memoryviews; drop them to free ring space."""
        if self._blocked:
            self.flush()
        u = self._u32
        if not u[self._mail]:
            return []
        u[self._mail] = 0
        fence()
        if self._awaited:
            self._attach_created()
        self._epoch = epoch = self._epoch + 1
        out: list[tuple[int, Message]] = []
        for ring in self._rings:
            ring.poll(out, epoch)
            ring.check_retained(epoch)
        return out

    def _attach_created(self) -> None:
        """Attach the rings to this worker that their writers have created since."""
        u = self._u32
        created = [src for src, word in self._awaited if u[word]]
        if created:
            self._awaited = [(src, word) for src, word in self._awaited if src not in created]
            for src in created:
                self._in[src] = _In(self, src)
            self._rings = [ring for ring in self._in if ring is not None]

    def oversubscribed(self) -> bool:
        """Whether the mesh has more workers than this process may use cores (its CPU
        affinity), so that some of them wait on the run queue while others run."""
        return self.num_workers > self._cores

    def crowded(self) -> bool:
        """Whether more of the mesh's workers are awake than this process may use cores, so
        that waiting by spinning takes the time slice of the worker waited for."""
        if not self.oversubscribed():
            return False
        u = self._ctl.u32
        awake = sum(1 for w in range(self.num_workers) if not u[_bell(w)])
        return awake > self._cores

    def park(self, timeout: float | None = None) -> bool:
        """Wait until a message arrives, output space was freed, ``wake`` was called, or
        ``timeout`` seconds pass (None: no limit). Spins ``spin_us`` first (unless the host's
        workers outnumber its cores), then sleeps on the futex. Returns False on timeout."""
        if self._blocked or self._later:
            self.flush()
        if self._ready():
            return True
        now = time.perf_counter()
        end = None if timeout is None else now + timeout
        if self._spin and not self.crowded():
            spin_end = now + self._spin if end is None else min(now + self._spin, end)
            while time.perf_counter() < spin_end:
                if self._ready():
                    return True
                os.sched_yield()
        for ring in self._in:
            if ring is not None:
                ring.check_retained(self._epoch + 1)  # views held while idle are retained
        u, w = self._ctl.u32, self._bell
        while True:
            u[w] = 1
            fence()
            if self._ready():
                u[w] = 0
                return True
            left = None if end is None else end - time.perf_counter()
            if left is not None and left <= 0:
                u[w] = 0
                return False
            futex_wait(self._ctl.address + 4 * w, 1, left)

    def wake(self, target: int) -> None:
        """Make worker ``target``'s current or next ``park`` return (safe from any thread).
        Readers also use it to tell a writer that space was freed or a roll is wanted."""
        self._ctl.u32[_bell(target) + 1] = 1
        self._notify(target)

    def flush(self) -> bool:
        """Move queued output into rings where possible and wake the workers sent to with
        ``notify=False``; True when nothing is queued."""
        for target in list(self._blocked) if self._blocked else ():
            out = self._out[target]
            assert out is not None
            if out.put():
                self._blocked.discard(target)
            self.post(target)
        later = self._later
        if later:
            fence()
            u = self._ctl.u32
            for target in later:
                w = _bell(target)
                if u[w]:
                    u[w] = 0
                    futex_wake(self._ctl.address + 4 * w)
            later.clear()
        return not self._blocked

    @property
    def pending_bytes(self) -> int:
        """Bytes waiting in overflow queues (not yet visible to their receivers)."""
        return sum(out.pending_bytes for out in self._out if out is not None)

    def close(self) -> None:
        """Unmap everything; segments with live zero-copy views stay mapped until those die.
        Queued output is dropped."""
        for ring in self._in:
            if ring is not None:
                ring.close()
        for out in self._out:
            if out is not None:
                out.close()
        self._ctl.close()

    def _ready(self) -> bool:
        u = self._ctl.u32
        if u[self._bell + 1]:
            u[self._bell + 1] = 0
            return True
        return bool(u[self._mail])

    def _notify(self, target: int) -> None:
        fence()
        u, w = self._ctl.u32, _bell(target)
        if u[w]:
            u[w] = 0
            futex_wake(self._ctl.address + 4 * w)

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Mesh:
    """The shared-memory segments for ``num_workers`` workers on one host, named by ``name``.

    The creator unlinks everything (``unlink``, the context manager, or at exit); workers call
    ``endpoint(index)`` after fork, or ``Mesh.attach(name).endpoint(index)`` from any process.
    Rings appear as workers first send to each other, or as each calls ``make_rings``.

    >>> from sparktimely.shm import Mesh, segments
    >>> with Mesh.create(3, ring_bytes=1 << 16) as mesh:
    ...     with mesh.endpoint(0) as a, mesh.endpoint(2) as c:
    ...         a.send(2, [b"hi"])
    ...         made = len(segments(mesh.name)), c.recv()
    ...     made, Mesh.attach(mesh.name).num_workers
    ((2, [(0, b'hi')]), 3)
    """

    def __init__(self, name: str, num_workers: int, directory: str | None):
        self.name, self.num_workers, self.directory = name, num_workers, directory
        self._creator: int | None = None

    @classmethod
    def create(cls, num_workers: int, prefix: str | None = None, ring_bytes: int | None = None,
               directory: str | None = None, limit: int | None = None) -> Mesh:
        """Create the control segment. ``prefix`` is a ``job_prefix()``-style name (a fresh one
        by default); ``directory`` forces where segments live. ``ring_bytes`` is the first size
        of each ring (default: ``SENDER_BYTES`` over the n - 1 destinations of a sender, at
        least ``MIN_RING``); ``limit`` bounds the bytes of ring of the whole mesh (default
        ``$SPARKTIMELY_SHM_LIMIT``, else half the size of the directory the segments live
        in). Segments of dead jobs are swept first."""
        check_workers_per_host(num_workers)
        sweep_stale(directory)
        mesh = cls(prefix or job_prefix(), num_workers, directory)
        if not mesh.name.startswith("sparktimely-"):
            raise ValueError(f"mesh prefix must start with 'sparktimely-': {mesh.name!r}")
        mesh._creator = os.getpid()
        atexit.register(mesh._at_exit)
        try:
            ctl = Segment.create(mesh.name + "-ctl",
                                 4 * _created(num_workers, num_workers, 0), directory)
            if limit is None:
                limit = ring_limit(os.path.dirname(ctl.path))
            if ring_bytes is None:
                share = min(SENDER_BYTES, limit // num_workers) // max(num_workers - 1, 1)
                ring_bytes = max(MIN_RING, share - share % PAGE - _HDR)
            ctl.u64[_LIMIT], ctl.u64[_RING] = limit, ring_bytes
            ctl.u64[1], ctl.u64[0] = num_workers, _MAGIC
            ctl.close()
        except BaseException:
            mesh.unlink()
            raise
        return mesh

    @classmethod
    def attach(cls, name: str, directory: str | None = None) -> Mesh:
        """The mesh created elsewhere under ``name``."""
        with Segment.attach(name + "-ctl", directory) as ctl:
            if ctl.u64[0] != _MAGIC:
                raise ValueError(f"{name}-ctl is not an initialised sparktimely mesh")
            return cls(name, ctl.u64[1], directory)

    def endpoint(self, index: int, spin_us: float = 200.0,
                 copy_below: int = 64 << 10) -> Endpoint:
        """Worker ``index``'s endpoint, mapped into the calling process. ``spin_us``: how long
        ``park`` polls before it sleeps: long enough for a peer's answer in a round of two
        workers, which takes about a round of its Python (``benchmarks/bench_scaling.py``
        compares spins)."""
        return Endpoint(self, index, spin_us, copy_below)

    def unlink(self) -> int:
        """Remove every segment of this mesh (including rolled generations); returns how many."""
        if self._creator == os.getpid():
            atexit.unregister(self._at_exit)
        return sweep(self.name, self.directory)

    def forget(self) -> None:
        """Stop owning the segments: this process no longer removes them at exit (whoever
        takes over, e.g. the last user or a janitor, must call ``sweep(mesh.name)``)."""
        if self._creator == os.getpid():
            atexit.unregister(self._at_exit)
        self._creator = None

    def _at_exit(self) -> None:
        if self._creator == os.getpid():
            sweep(self.name, self.directory)

    def __enter__(self) -> Mesh:
        return self

    def __exit__(self, *exc) -> None:
        self.unlink()
