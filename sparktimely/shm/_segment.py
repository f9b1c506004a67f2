"""Named shared-memory segments: files in /dev/shm (or a local fallback directory) mapped with mmap.

``multiprocessing.shared_memory`` is not used: its resource tracker unlinks segments that other
processes still use. We own the lifetime instead. Every name starts with a job prefix
``sparktimely-[<tag>-]<pid>-<pid namespace>-<random>``, so ``sweep(prefix)`` removes one job's
segments and ``sweep_stale()`` removes those of jobs whose creating process no longer exists
(only for the caller's own pid namespace, where pids are meaningful; a pid reused by a process
that started after the segment was made counts as dead). The optional tag comes from
``$SPARKTIMELY_SHM_TAG`` and is inherited by child processes, so a test run or a deployment can
tell its own segments from everyone else's (``segments(run_prefix())``).

Space is reserved with ``posix_fallocate`` at creation, so a small /dev/shm (64 MiB by default in
Docker and Kubernetes) shows up here, as a fallback to a file-backed mapping under
``$SPARKTIMELY_SHM_DIR`` or ``<tmp>/sparktimely-shm`` with one warning, and never as a SIGBUS
later. Views handed out by address (``pin``) keep the mapping alive: ``close`` defers the unmap
until the last ``unpin``, so no pointer is ever left dangling and ``BufferError`` cannot occur.
"""
from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import re
import secrets
import tempfile

SHM_DIR = "/dev/shm"
ENV_DIR = "SPARKTIMELY_SHM_DIR"
TAG_ENV = "SPARKTIMELY_SHM_TAG"
PAGE = mmap.PAGESIZE
_MARGIN = 4 << 20  # keep this much of /dev/shm free for others
_NAME = re.compile(r"sparktimely-(?:[a-z][a-z0-9]*-)?(\d+)-([0-9a-f]+)-[0-9a-f]+-")
_TAG = re.compile(r"[a-z][a-z0-9]{0,15}")
_log = logging.getLogger("sparktimely.shm")
_warned = False


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def run_prefix() -> str:
    """What every segment name made by this process starts with: ``sparktimely-<tag>-`` when
    ``$SPARKTIMELY_SHM_TAG`` is set (lower-case letters and digits, a letter first), else
    ``sparktimely-``.

    >>> import os
    >>> saved = os.environ.pop("SPARKTIMELY_SHM_TAG", None)
    >>> run_prefix()
    'sparktimely-'
    >>> os.environ["SPARKTIMELY_SHM_TAG"] = "t1"; run_prefix()
    'sparktimely-t1-'
    >>> del os.environ["SPARKTIMELY_SHM_TAG"]
    >>> if saved is not None: os.environ["SPARKTIMELY_SHM_TAG"] = saved
    """
    tag = os.environ.get(TAG_ENV, "")
    if not tag:
        return "sparktimely-"
    if not _TAG.fullmatch(tag):
        raise ValueError(f"${TAG_ENV}={tag!r}: a segment tag is 1 to 16 lower-case letters or "
                         f"digits, starting with a letter")
    return f"sparktimely-{tag}-"


def job_prefix() -> str:
    """A fresh job-unique name prefix ``sparktimely-[<tag>-]<pid>-<pidns>-<random>``.

    >>> from sparktimely.shm import job_prefix, run_prefix
    >>> job_prefix().startswith(run_prefix()), job_prefix() != job_prefix()
    (True, True)
    """
    return f"{run_prefix()}{os.getpid()}-{_pid_namespace():x}-{secrets.token_hex(4)}"


def fallback_dir() -> str:
    """Directory for file-backed segments when /dev/shm is too small.

    >>> import tempfile
    >>> from sparktimely.shm import fallback_dir
    >>> fallback_dir().startswith(tempfile.gettempdir())
    True
    """
    return os.path.join(tempfile.gettempdir(), "sparktimely-shm")


def segment_dirs(directory: str | None = None) -> list[str]:
    """Where segments are looked for, in order: ``directory``, ``$SPARKTIMELY_SHM_DIR``,
    /dev/shm and the fallback directory (each once).

    >>> from sparktimely.shm import fallback_dir, segment_dirs
    >>> segment_dirs("/dev/shm")[-1] == fallback_dir()
    True
    """
    dirs = [directory, os.environ.get(ENV_DIR), SHM_DIR, fallback_dir()]
    return [d for i, d in enumerate(dirs) if d and d not in dirs[:i]]


def _free_bytes(path: str) -> int:
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


_MAP_FLAGS = mmap.MAP_SHARED
"""Segments are mapped without their pages (no MAP_POPULATE): a page is mapped at its first
touch. Populating a 4 MiB ring at once (its writer's and its reader's mapping) cost every job
~3 ms per worker whatever it sent, more than the faults of the pages a job touches: a job of
ten records at 3 workers took 42 against 33 ms from execute() to its result, a job sending
400k words through each ring four times 109 against 98 ms (taking turns, on this VM)."""


class Segment:
    """A shared-memory file mapped into this process.

    ``buf`` (bytes), ``u64`` and ``u32`` are memoryviews of the whole mapping; ``address`` is its
    base address for views handed out by address (bracket those with ``pin``/``unpin``).

    >>> from sparktimely.shm import Segment, job_prefix
    >>> name = job_prefix() + "-example"
    >>> with Segment.create(name, 100) as segment:           # rounded up to a page
    ...     segment.buf[:2] = b"hi"
    ...     with Segment.attach(name) as other:
    ...         segment.size, bytes(other.buf[:2])
    (4096, b'hi')
    """

    def __init__(self, path: str, mm: mmap.mmap, owner: bool):
        self.path, self.name, self.owner = path, os.path.basename(path), owner
        self.size = len(mm)
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(mm))  # temporary export
        self.buf = memoryview(mm)
        self.u64, self.u32 = self.buf.cast("Q"), self.buf.cast("I")
        self._mm: mmap.mmap | None = mm
        self._pins, self._closing = 0, False

    @classmethod
    def create(cls, name: str, size: int, directory: str | None = None) -> Segment:
        """Create a zero-filled segment of at least ``size`` bytes (rounded up to pages).

        ``directory`` (or ``$SPARKTIMELY_SHM_DIR``) forces the location; otherwise /dev/shm,
        falling back to a file-backed mapping when /dev/shm has too little free space.
        """
        size = -(-size // PAGE) * PAGE
        directory = directory or os.environ.get(ENV_DIR)
        tried = ""
        if directory is None:
            free = _free_bytes(SHM_DIR)
            if free >= size + _MARGIN:
                try:
                    return cls._create_in(SHM_DIR, name, size)
                except NoSpaceError:
                    free = _free_bytes(SHM_DIR)
            directory = fallback_dir()
            _warn_fallback(free, size, directory)
            tried = f" (after /dev/shm, which had {_mib(free)} free)"
        try:
            return cls._create_in(directory, name, size)
        except NoSpaceError as error:
            raise NoSpaceError(f"{error}{tried}") from None

    @classmethod
    def _create_in(cls, directory: str, name: str, size: int) -> Segment:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as error:
            raise _no_space(error, directory, size) from None
        try:
            os.posix_fallocate(fd, 0, size)
            return cls(path, mmap.mmap(fd, size, flags=_MAP_FLAGS), owner=True)
        except BaseException as error:
            os.unlink(path)
            if isinstance(error, OSError):
                raise _no_space(error, directory, size) from None
            raise
        finally:
            os.close(fd)

    @classmethod
    def attach(cls, name: str, directory: str | None = None) -> Segment:
        """Map an existing segment by name (searched in ``directory``, $SPARKTIMELY_SHM_DIR,
        /dev/shm and the fallback directory, in that order)."""
        dirs = segment_dirs(directory)
        for d in dirs:
            try:
                fd = os.open(os.path.join(d, name), os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                mapped = mmap.mmap(fd, os.fstat(fd).st_size, flags=_MAP_FLAGS)
                return cls(os.path.join(d, name), mapped, owner=False)
            finally:
                os.close(fd)
        raise FileNotFoundError(f"shared-memory segment {name!r} not found in {dirs}")

    def pin(self) -> None:
        """Record a live view by address: the mapping outlives ``close`` until ``unpin``."""
        self._pins += 1

    def unpin(self) -> None:
        self._pins -= 1
        if self._pins == 0 and self._closing:
            self._unmap()

    @property
    def closed(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Unmap now, or when the last pinned view dies. Idempotent."""
        self._closing = True
        if self._pins == 0:
            self._unmap()

    def _unmap(self) -> None:
        mm, self._mm = self._mm, None
        if mm is None:
            return
        try:
            for view in (self.u64, self.u32, self.buf):
                view.release()
            mm.close()
        except BufferError:
            pass  # a caller still holds a slice of ``buf``; the mapping goes when that slice dies

    def unlink(self) -> None:
        """Remove the name; mappings stay valid until closed."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> Segment:
        return self

    def __exit__(self, *exc) -> None:
        if self.owner:
            self.unlink()
        self.close()


class NoSpaceError(OSError):
    """A shared-memory segment did not fit: the message names the directory, the size asked
    for, the space left, and how to point sparktimely elsewhere (an ``OSError`` with errno
    ENOSPC).

    >>> import errno
    >>> error = NoSpaceError("no room for a 4.0 MiB shared-memory segment in /dev/shm")
    >>> error.errno == errno.ENOSPC, str(error)
    (True, 'no room for a 4.0 MiB shared-memory segment in /dev/shm')
    """

    def __init__(self, message: str) -> None:
        super().__init__(errno.ENOSPC, message)

    def __str__(self) -> str:
        return self.strerror or ""


def _no_space(error: OSError, directory: str, size: int) -> OSError:
    """``error`` as a :class:`NoSpaceError` if it means the directory is full, else itself."""
    if error.errno not in (errno.ENOSPC, errno.EDQUOT):
        return error
    try:
        st = os.statvfs(directory)
        room = f"{_mib(st.f_bavail * st.f_frsize)} free of {_mib(st.f_blocks * st.f_frsize)}"
    except OSError:
        room = "free space unknown"
    return NoSpaceError(
        f"no room for a {_mib(size)} shared-memory segment in {directory} ({room}): set "
        f"{ENV_DIR} to a directory with more space (a local disk or a larger tmpfs), give the "
        f"container a larger /dev/shm, lower the bound on what a host's workers reserve "
        f"(SPARKTIMELY_SHM_LIMIT, e.g. 256M), or run fewer workers per host")


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _warn_fallback(free: int, size: int, directory: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        _log.warning("/dev/shm has %.1f MiB free but a %.1f MiB segment is needed: using "
                     "file-backed shared memory in %s (set %s to choose the directory)",
                     free / 2**20, size / 2**20, directory, ENV_DIR)


def segments(prefix: str = "sparktimely-", directory: str | None = None) -> list[str]:
    """Paths of the segments whose names start with ``prefix``, wherever segments live
    (``directory``, ``$SPARKTIMELY_SHM_DIR``, /dev/shm, the fallback directory).

    >>> from sparktimely.shm import Segment, job_prefix
    >>> prefix = job_prefix()
    >>> with Segment.create(prefix + "-x", 4096) as segment:
    ...     segments(prefix) == [segment.path]
    True
    >>> segments(prefix)
    []
    """
    found = []
    for d in segment_dirs(directory):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        found += [os.path.join(d, name) for name in names if name.startswith(prefix)]
    return sorted(found)


def _remove_matching(directory: str | None, match) -> int:
    removed = 0
    for path in segments("sparktimely-", directory):
        if match(path):
            try:
                os.unlink(path)
                removed += 1
            except FileNotFoundError:
                pass
    return removed


def sweep(prefix: str, directory: str | None = None) -> int:
    """Unlink every segment whose name starts with ``prefix``; returns how many.

    >>> from sparktimely.shm import Segment, job_prefix, sweep
    >>> prefix = job_prefix()
    >>> for part in ("a", "b"):
    ...     Segment.create(f"{prefix}-{part}", 4096).close()
    >>> sweep(prefix)
    2
    """
    if not prefix.startswith("sparktimely-") or len(prefix) <= len("sparktimely-"):
        raise ValueError(f"refusing to sweep prefix {prefix!r}: expected a job prefix")
    return _remove_matching(directory, lambda path: os.path.basename(path).startswith(prefix))


def sweep_stale(directory: str | None = None) -> int:
    """Unlink segments of jobs whose creating process (same pid namespace) no longer exists,
    whatever their tag: a crashed run's leftovers. A live process that holds a dead creator's
    pid but started after the segment was made (its mtime) is not its creator.

    >>> from sparktimely.shm import Segment, job_prefix, segments, sweep, sweep_stale
    >>> mine = job_prefix()                       # this process is alive: not stale
    >>> Segment.create(mine + "-x", 4096).close()
    >>> _ = sweep_stale(); len(segments(mine))
    1
    >>> sweep(mine)
    1
    """
    ns = _pid_namespace()

    def stale(path: str) -> bool:
        m = _NAME.match(os.path.basename(path))
        if m is None or int(m[2], 16) != ns:
            return False
        started = _start_time(int(m[1]))
        if started is None:
            return True
        try:
            made = os.stat(path).st_mtime
        except FileNotFoundError:
            return False
        return started > made + 1.0        # /proc/stat's boot time has whole seconds
    return _remove_matching(directory, stale)


def _start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), or None if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:
        return 0.0                       # exists, unreadable: treat as the creator
    if fields[0] == b"Z":                # a zombie is dead, whoever reaps it
        return None
    return _boot_time() + int(fields[19]) / _TICKS


def _boot_time() -> float:
    with open("/proc/stat", "rb") as stat:
        for line in stat:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    return 0.0


_TICKS = os.sysconf("SC_CLK_TCK")
