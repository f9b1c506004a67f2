"""A directory on a pyarrow filesystem (local, HDFS, S3, ...) with durable, atomic writes.

Local files are made durable with ``fsync`` (of the file, then of its directory after a
rename); pyarrow's filesystems offer no ``fsync``, and HDFS and object stores make a file
durable when it is closed. An atomic write goes to a temporary name in the same directory
and is renamed into place (an object store's upload is atomic by itself).
"""
from __future__ import annotations

import fcntl
import json
import os
import posixpath
import socket
import time
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import require_type

TEMPORARY_PREFIX = "_tmp-"

Location = str | os.PathLike[str] | tuple[pafs.FileSystem, str]
"""A directory: a path (``str`` or ``os.PathLike``), a URI such as ``s3://bucket/dir`` or
``hdfs://host/dir``, or a ``(pyarrow.fs.FileSystem, path)`` pair."""


def check_location(place: str, location: object) -> None:
    """A TypeError naming ``place`` (an option, a sink) unless ``location`` can be a
    :data:`Location`.

    >>> check_location("checkpoint_dir", 123)
    Traceback (most recent call last):
    ...
    TypeError: checkpoint_dir: expected a directory (a path, a URI such as s3://bucket/dir, or a (pyarrow.fs.FileSystem, path) pair), got 123 (int)
    >>> check_location("checkpoint_dir", "")
    Traceback (most recent call last):
    ...
    ValueError: checkpoint_dir: the path is empty (give '.' for the current directory)
    """
    if not (isinstance(location, tuple) and len(location) == 2
            and isinstance(location[0], pafs.FileSystem) and isinstance(location[1], str)):
        require_type(place, location, (str, os.PathLike), "a directory (a path, a URI such as "
                     "s3://bucket/dir, or a (pyarrow.fs.FileSystem, path) pair)")
        if isinstance(location, (str, os.PathLike)) and not os.fspath(location):
            raise ValueError(f"{place}: the path is empty (give '.' for the current directory)")


class Storage:
    """A directory, ``root``, on filesystem ``fs``.

    >>> import tempfile
    >>> storage = Storage(tempfile.mkdtemp())
    >>> storage.write_atomic(storage.path("a", "b.json"), b"{}")
    >>> storage.names(storage.path("a")), bytes(storage.read(storage.path("a", "b.json")))
    (['b.json'], b'{}')
    """

    def __init__(self, location: Location) -> None:
        if isinstance(location, tuple):
            fs, root = location
            self.where = f"{type(fs).__name__}:{root}"
        else:
            text = os.fspath(location)
            if "://" in text:
                fs, root = pafs.FileSystem.from_uri(text)
            else:
                fs, root = pafs.LocalFileSystem(), os.path.abspath(text)
            self.where = text
        self.fs: pafs.FileSystem = fs
        self.root: str = root.rstrip("/") or "/"
        self.local = isinstance(fs, pafs.LocalFileSystem)
        self.object_store = fs.type_name in ("s3", "gcs", "abfs")

    def join(self, *parts: str) -> "Storage":
        """The directory ``root/part/...`` on the same filesystem."""
        child = Storage((self.fs, self.path(*parts)))
        child.where = posixpath.join(self.where, *parts)
        return child

    def path(self, *parts: str) -> str:
        """``root/part/...``."""
        return posixpath.join(self.root, *parts)

    def makedirs(self, path: str) -> None:
        self.fs.create_dir(path, recursive=True)

    def info(self, path: str) -> pafs.FileInfo:
        return self.fs.get_file_info(path)

    def exists(self, path: str) -> bool:
        return self.info(path).type != pafs.FileType.NotFound

    def is_file(self, path: str) -> bool:
        return self.info(path).type == pafs.FileType.File

    def names(self, path: str) -> list[str]:
        """The names directly in directory ``path`` (none if it does not exist or is a file),
        sorted."""
        if self.info(path).type != pafs.FileType.Directory:
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        return sorted(posixpath.basename(info.path) for info in infos)

    def read(self, path: str) -> pa.Buffer:
        """The bytes of file ``path`` (memory-mapped when local: no copy)."""
        if self.info(path).type == pafs.FileType.Directory:
            raise IsADirectoryError(f"{path} is a directory, not a file")
        if self.local:
            with pa.memory_map(path, "r") as mapped:
                return mapped.read_buffer()
        with self.fs.open_input_file(path) as file:
            return file.read_buffer()

    def open_output(self, path: str) -> pa.NativeFile:
        """A stream writing ``path``; call :meth:`sync` after closing it."""
        return self.fs.open_output_stream(path)

    def write(self, path: str, data: Any) -> None:
        """Write ``data`` (bytes or a pyarrow Buffer) to ``path``, durably."""
        with self.open_output(path) as out:
            out.write(data)
        self.sync(path)

    def write_atomic(self, path: str, data: Any) -> None:
        """Make ``path`` hold ``data``, all or nothing: write, sync, rename, sync directory."""
        directory = posixpath.dirname(path)
        self.makedirs(directory)
        if self.object_store:
            self.write(path, data)
            return
        temporary = posixpath.join(directory, f"{TEMPORARY_PREFIX}{uuid.uuid4().hex}-"
                                              f"{posixpath.basename(path)}")
        self.write(temporary, data)
        self.rename(temporary, path)

    def rename(self, source: str, target: str) -> None:
        """Move ``source`` to ``target`` (replacing it) and make the move durable."""
        self.fs.move(source, target)
        self.sync(posixpath.dirname(target))

    def delete(self, path: str) -> None:
        """Delete file ``path`` if it exists."""
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            pass

    def delete_dir(self, path: str) -> None:
        """Delete directory ``path`` and everything in it, if it exists."""
        try:
            self.fs.delete_dir(path)
        except FileNotFoundError:
            pass

    def sync(self, path: str) -> None:
        """Flush a local file or directory to disk (elsewhere closing did)."""
        if self.local:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


LEASE_SECONDS = 60.0
"""How long the lock of a directory on a filesystem without file locks (HDFS, object
stores) lasts unless its holder renews it; a run killed there blocks the directory that long."""


class DirectoryLock:
    """At most one run writes a directory at a time.

    On a local filesystem this is an exclusive ``flock`` of ``root/_lock``, released by the
    kernel when the holder exits, however it dies. Elsewhere it is a lease file
    (``root/_lock``: holder and expiry, renewed by :meth:`renew`), best effort: a filesystem
    without atomic create-if-absent cannot exclude two runs that start at the same instant.

    >>> import tempfile
    >>> root = Storage(tempfile.mkdtemp())
    >>> first, second = DirectoryLock(root), DirectoryLock(root)
    >>> first.acquire(), second.acquire() is not None
    (None, True)
    >>> first.release(); second.acquire()
    """

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.path = storage.path("_lock")
        self.owner = uuid.uuid4().hex
        self._fd: int | None = None
        self._renewed = 0.0

    def acquire(self) -> str | None:
        """Take the lock; None if taken, else why not (a sentence naming the holder)."""
        self.storage.makedirs(self.storage.root)
        if self.storage.local:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return f"its lock {self.path} is held by another process"
            self._fd = fd
            return None
        holder = self._read_lease()
        if holder is not None and holder.get("owner") != self.owner and \
                holder.get("expires", 0) > time.time():
            return (f"its lease {self.path} is held by pid {holder.get('pid')} on "
                    f"{holder.get('host')} for {holder['expires'] - time.time():.0f} s more")
        self._write_lease()
        return None

    def renew(self) -> None:
        """Extend a lease (every third of :data:`LEASE_SECONDS`; nothing for a local lock)."""
        if self._fd is None and time.monotonic() - self._renewed > LEASE_SECONDS / 3:
            self._write_lease()

    def release(self) -> None:
        """Give the lock up (a dead process's is given up by the kernel)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        elif self._renewed:
            self.storage.delete(self.path)
            self._renewed = 0.0

    def __del__(self) -> None:
        # A worker of a reused process (Spark's Python workers) that failed: nothing else
        # would give the lock up before the process ends.
        if self._fd is not None:
            os.close(self._fd)

    def _read_lease(self) -> dict | None:
        try:
            return json.loads(bytes(self.storage.read(self.path)))
        except (FileNotFoundError, ValueError):
            return None

    def _write_lease(self) -> None:
        lease = {"owner": self.owner, "host": socket.gethostname(), "pid": os.getpid(),
                 "expires": time.time() + LEASE_SECONDS}
        self.storage.write_atomic(self.path, json.dumps(lease).encode())
        self._renewed = time.monotonic()
