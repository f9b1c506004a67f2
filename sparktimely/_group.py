"""The workers of one host group: the shared memory they use and how they meet without a
common parent.

A job's plan (``comm.cluster``) puts workers with equal ``group`` on one host; they share one
``shm.Mesh``, named by the ``mesh`` field of the group's first worker. The processes holding
them may have no common parent (several ``-n`` processes on one host, Spark tasks), so they
meet through a one-page *group record* next to the mesh:

- the process holding the group's lowest index creates the record and the mesh and sets
  *ready*; the others wait for *ready* (up to a deadline) and attach;
- a failing worker writes the *first failure* (index, message, traceback, and whether it is
  only a lost remote peer) into the record, and every member's worker stops at its next park
  with that failure (:class:`GroupFailed`);
- each process counts its workers out when done (*leaving*); the last removes the segments.

A :class:`Janitor` child process per member removes the segments if its parent dies without
leaving (a SIGKILL skips every ``finally``), so nothing outlives a killed job.
"""
from __future__ import annotations

import fcntl
import os
import signal
import time
from typing import Callable

from .shm import Mesh, Segment, segment_dirs, sweep

_READY, _LEFT, _FAILED, _LENGTH, _LOST_PEER = 0, 1, 2, 3, 4   # u64 slots of the group record
_TEXT = 64                                        # byte offset of the failure text
_RECORD_BYTES = 1 << 16
_CLEAN = b"clean\n"


class GroupFailed(RuntimeError):
    """A worker of this host group failed (``index``, ``message``, ``traceback`` are its):
    raised in the other members' workers, which stop at once. ``lost_peer``: that worker only
    lost a remote peer, whose own process may still give the real cause."""

    def __init__(self, index: int, message: str, traceback: str, lost_peer: bool = False) -> None:
        super().__init__(f"worker {index} failed: {message}")
        self.index, self.message, self.traceback = index, message, traceback
        self.lost_peer = lost_peer

    def __reduce__(self):
        return (GroupFailed, (self.index, self.message, self.traceback, self.lost_peer))


class GroupRecord:
    """One page shared by the processes of a host group: ready, how many workers left, the
    first failure. Counters change under ``flock`` on the segment's file, so no atomics are
    needed."""

    def __init__(self, segment: Segment, size: int) -> None:
        self.segment, self.size = segment, size
        self._words = segment.u64

    @classmethod
    def create(cls, prefix: str, size: int) -> GroupRecord:
        return cls(Segment.create(prefix + "-group", _RECORD_BYTES), size)

    @classmethod
    def attach(cls, prefix: str, size: int, deadline: float, creator: str,
               interrupt: Callable[[], None] | None = None) -> GroupRecord:
        """Wait until the creator (``creator`` names it in the error) has made the mesh, then
        the record; ``interrupt`` is called while waiting and may raise to give up early."""
        pause = 0.0005
        while True:
            try:
                segment = Segment.attach(prefix + "-group")
            except (OSError, ValueError):       # not there yet, or not sized yet
                segment = None
            if segment is not None:
                if segment.u64[_READY]:
                    return cls(segment, size)
                segment.close()
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{creator}, the first of this host's workers, did not "
                                   f"create the shared memory {prefix!r} in time")
            if interrupt is not None:
                interrupt()
            time.sleep(pause)
            pause = min(2 * pause, 0.05)

    def set_ready(self) -> None:
        self._words[_READY] = 1

    def _locked(self) -> int:
        fd = os.open(self.segment.path, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def leave(self, count: int = 1) -> bool:
        """Count ``count`` workers out; True for the last (who removes the segments)."""
        try:
            fd = self._locked()
        except FileNotFoundError:               # already removed after a failure
            return False
        try:
            self._words[_LEFT] += count
            return self._words[_LEFT] >= self.size
        finally:
            os.close(fd)

    def fail(self, index: int, message: str, traceback: str,
             lost_peer: bool = False) -> tuple[int, str, str]:
        """Record a failure unless one is recorded already; returns the recorded one.
        ``lost_peer``: the failure is a lost remote peer (see :meth:`lost_peer`)."""
        try:
            fd = self._locked()
        except FileNotFoundError:
            return self.failure() or (index, message, traceback)
        try:
            if not self._words[_FAILED]:
                text = _fitted(message, traceback, _RECORD_BYTES - _TEXT)
                self.segment.buf[_TEXT:_TEXT + len(text)] = text
                self._words[_LENGTH] = len(text)
                self._words[_LOST_PEER] = int(lost_peer)
                self._words[_FAILED] = index + 1
        finally:
            os.close(fd)
        return self.failure() or (index, message, traceback)

    def failure(self) -> tuple[int, str, str] | None:
        """``(index, message, traceback)`` of the first failure in the group, or None."""
        failed = self._words[_FAILED]
        if not failed:
            return None
        text = bytes(self.segment.buf[_TEXT:_TEXT + self._words[_LENGTH]]).decode(errors="replace")
        message, _, traceback = text.partition("\0")
        return failed - 1, message, traceback

    def lost_peer(self) -> bool:
        """Whether the recorded failure is a worker losing a remote peer rather than its own."""
        return bool(self._words[_LOST_PEER])

    def close(self) -> None:
        self.segment.close()


def _fitted(message: str, traceback: str, room: int) -> bytes:
    r"""``message`` and ``traceback`` as the record holds them (NUL between), in ``room``
    bytes: when too long, first each line longer than :data:`_LONGEST_LINE` keeps its head
    and tail (a huge value in an error, such as a batch, leaves every frame of the
    traceback in place), then each text its head and tail, the message a quarter of the room
    at most.

    >>> text = _fitted("bad " + "x" * 100_000, "Traceback:\n  line 1\nValueError: bad", 4096)
    >>> message, _, traceback = text.decode().partition("\0")
    >>> len(text) <= 4096, traceback
    (True, 'Traceback:\n  line 1\nValueError: bad')
    """
    text = f"{message}\0{traceback}".encode(errors="replace")
    if len(text) <= room:
        return text
    message, traceback = _short_lines(message), _short_lines(traceback)
    text = f"{message}\0{traceback}".encode(errors="replace")
    if len(text) <= room:
        return text
    head = _cut(message.encode(errors="replace"), room // 4)
    return head + b"\0" + _cut(traceback.encode(errors="replace"), room - len(head) - 1)


_LONGEST_LINE = 2048


def _short_lines(text: str) -> str:
    """``text`` with each line longer than :data:`_LONGEST_LINE` cut in the middle."""
    return "\n".join(line if len(line) <= _LONGEST_LINE else
                     f"{line[:_LONGEST_LINE // 2]} [... {len(line) - _LONGEST_LINE} characters "
                     f"...] {line[-_LONGEST_LINE // 2:]}" for line in text.split("\n"))


def _cut(data: bytes, limit: int) -> bytes:
    """``data`` in at most ``limit`` bytes: its head and tail around a mark."""
    if len(data) <= limit:
        return data
    keep = max(limit - len(_CUT), 0)
    return data[:keep // 2] + _CUT + data[len(data) - (keep - keep // 2):]


_CUT = b"\n[...]\n"


class HostGroup:
    """This process's membership of a host group: the mesh, the record and the janitor.

    ``join`` creates them (``creator``) or attaches them; ``leave`` counts this process's
    workers out when they are done (the last member removes the segments); ``abandon``,
    after a failure, removes the segments at once (the job is over; mappings stay valid).
    """

    def __init__(self, prefix: str, mesh: Mesh, record: GroupRecord, janitor: Janitor) -> None:
        self.prefix, self.mesh, self.record, self.janitor = prefix, mesh, record, janitor

    @classmethod
    def join(cls, prefix: str, size: int, creator: bool, deadline: float, creator_name: str,
             interrupt: Callable[[], None] | None = None) -> HostGroup:
        janitor = Janitor(prefix)
        record = None
        try:
            if creator:
                record = GroupRecord.create(prefix, size)
                mesh = Mesh.create(size, prefix=prefix)
                mesh.forget()                     # the record, not an exit hook, owns it
                record.set_ready()
            else:
                record = GroupRecord.attach(prefix, size, deadline, creator_name, interrupt)
                mesh = Mesh.attach(prefix)
        except BaseException:
            if record is not None:
                record.close()
            if creator:
                sweep(prefix)
            janitor.finish(clean=True)
            raise
        return cls(prefix, mesh, record, janitor)

    def leave(self, count: int) -> None:
        last = self.record.leave(count)
        self._release(sweep_now=last)

    def abandon(self) -> None:
        self._release(sweep_now=True)

    def _release(self, sweep_now: bool) -> None:
        self.record.close()
        if sweep_now:
            sweep(self.prefix)
        self.janitor.finish(clean=True)


class Janitor:
    """A tiny ``sh`` child process that sweeps ``prefix`` if its parent dies without calling
    :meth:`finish` with ``clean=True`` (pyspark SIGKILLs the Python worker of a task it gives
    up on, and a SIGKILLed supervisor runs no ``finally`` either).

    It reads a pipe whose write end this process holds (and the workers it forks, which die
    with it): the word "clean" lets it exit; the end of the pipe without it, once every holder
    is gone, makes it remove the segments (:func:`~sparktimely.shm.segment_dirs`). It ignores
    the signals a terminal or a job's stop sends to the process group, as its parent handles
    those. A shell rather than a fork of this process: forking a large interpreter and waiting
    for its exit took ~4 ms of every job, a shell ~0.5. Without ``/bin/sh`` there is no janitor
    (:attr:`pid` None): the next job's ``sweep_stale`` removes what a killed one left.
    """

    def __init__(self, prefix: str) -> None:
        if not prefix.startswith("sparktimely-"):
            raise ValueError(f"refusing to watch prefix {prefix!r}: expected a job prefix")
        self.pid: int | None = None
        self._write: int | None = None
        if not os.path.exists(_SHELL):
            return
        read, write = os.pipe()           # neither end is inherited across exec, but the
        if read == 0:                     # read end made the shell's stdin (a dup2 onto itself
            os.set_inheritable(read, True)              # keeps the close-on-exec flag)
        try:
            self.pid = os.posix_spawn(_SHELL, [_SHELL, "-c", _SWEEP_SCRIPT, "janitor", prefix,
                                               *segment_dirs()], os.environ,
                                      file_actions=[(os.POSIX_SPAWN_DUP2, read, 0)],
                                      setsigmask=_GROUP_SIGNALS)   # held until it ignores them
        except OSError:
            os.close(write)
            return
        finally:
            os.close(read)
        self._write = write

    def finish(self, clean: bool) -> None:
        """Release the janitor: it sweeps unless ``clean``; wait for it to exit. A janitor
        killed from outside has nothing left to be told: the job it watched goes on."""
        if self.pid is None or self._write is None:
            return
        try:
            if clean:
                os.write(self._write, _CLEAN)
        except BrokenPipeError:                        # it is gone (SIGKILLed, say)
            pass
        finally:
            os.close(self._write)
            self._write = None
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = None


_SHELL = "/bin/sh"
_GROUP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals a terminal or a job's stop sends the process group: the janitor starts with them
blocked, so that one sent before its ``trap`` runs waits and is then discarded."""
_SWEEP_SCRIPT = """trap '' INT TERM HUP PIPE
read verdict
[ "$verdict" = clean ] && exit 0
prefix=$1
shift
for dir in "$@"; do rm -f -- "$dir/$prefix"*; done
"""
"""The janitor's program: ``$1`` the job's prefix, then the directories segments live in."""
