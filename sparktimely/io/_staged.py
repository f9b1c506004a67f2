"""One sink partition's files, one per epoch (or more, see :meth:`StagedEpochs.write`),
staged until their epoch is committed: the two-phase commit that
:class:`~sparktimely.io.DirectorySink` and the Spark tasks' output
(:class:`~sparktimely.io.tasks.TaskOutput`) share.

An epoch's file is written as ``_staged-part-<epoch>-<partition><extension>``, closed and
made durable at a snapshot (or commit), and renamed to ``part-<epoch>-<partition><extension>``
when its epoch is committed (an epoch's further files: ``...-<partition>-c001<extension>``
and on). Opening a partition deletes what a crashed run staged for it and the resumed state
does not keep.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from ._storage import Storage


def delete_staged(storage: Storage, staged: re.Pattern,
                  doomed: Callable[[str, str], bool]) -> None:
    """Delete the files in ``storage`` whose names ``staged`` matches (group 2: their
    partition) and for which ``doomed(partition, name)`` is true."""
    if not storage.exists(storage.root):
        return
    for name in storage.names(storage.root):
        match = staged.match(name)
        if match and doomed(match.group(2), name):
            storage.delete(storage.path(name))


class StagedFile:
    """One epoch's file while it is written, under its staged name; subclasses write the
    batches (:meth:`write`) and close their format's writer (:meth:`finish`)."""

    def __init__(self, storage: Storage, name: str) -> None:
        self.storage = storage
        self.name = name
        self.stream = storage.open_output(storage.path(name))

    def write(self, batch: Any) -> bool:
        """Write ``batch``; False (nothing written) if this file cannot hold it, as a Parquet
        file a batch of another schema. A new file holds any batch."""
        raise NotImplementedError

    def finish(self) -> None:
        """Close the format's writer (the stream is closed afterwards)."""

    def close(self) -> None:
        self.finish()
        self.stream.close()
        self.storage.sync(self.storage.path(self.name))


class StagedEpochs:
    """Partition ``partition``'s epoch files in ``storage``, resumed from ``state`` (a
    :meth:`snapshot`, or None). ``staged`` matches the staged names a crashed run may have
    left (group 2: their partition); subclasses open an epoch's file (:meth:`open_file`)."""

    def __init__(self, storage: Storage, partition: str, extension: str, staged: re.Pattern,
                 state: dict | None) -> None:
        self.storage = storage
        self.partition = partition
        self.extension = extension
        self.staged: dict[int, list[str]] = {}
        for epoch, name in state["staged"] if state else ():
            self.staged.setdefault(epoch, []).append(name)
        self.writing: dict[int, list[StagedFile]] = {}
        storage.makedirs(storage.root)
        kept = {name for names in self.staged.values() for name in names}
        delete_staged(storage, staged,          # what a crashed run staged and no one kept
                      lambda part, name: part == partition and name not in kept)

    def final_name(self, epoch: int, index: int = 0) -> str:
        """The visible name of epoch ``epoch``'s file ``index`` (0: its first)."""
        counter = f"-c{index:03d}" if index else ""
        return f"part-{epoch:010d}-{self.partition}{counter}{self.extension}"

    def open_file(self, name: str) -> StagedFile:
        """A new staged file named ``name``."""
        raise NotImplementedError

    def write(self, epoch: int, batch: Any) -> None:
        """Write ``batch`` into the first of epoch ``epoch``'s files that holds it, or into a
        new file of the epoch (its first opened at its first batch)."""
        files = self.writing.setdefault(epoch, [])
        if not any(file.write(batch) for file in files):
            files.append(self.open_file(f"_staged-{self.final_name(epoch, len(files))}"))
            files[-1].write(batch)

    def _close(self, epochs: list[int]) -> None:
        for epoch in epochs:
            for file in self.writing.pop(epoch):
                file.close()
                self.staged.setdefault(epoch, []).append(file.name)

    def snapshot(self) -> dict:
        """Every epoch written so far is complete: close its files (staged, durable)."""
        self._close(sorted(self.writing))
        return {"staged": sorted((epoch, name) for epoch, names in self.staged.items()
                                 for name in names)}

    def commit(self, epoch: int) -> None:
        """Make epochs ``<= epoch`` visible: rename their staged files (again after a resume;
        a staged file already renamed, or removed, is skipped)."""
        self._close(sorted(e for e in self.writing if e <= epoch))
        storage = self.storage
        for staged_epoch, names in sorted(self.staged.items()):
            if staged_epoch <= epoch:
                for name in names:
                    if storage.exists(storage.path(name)):
                        storage.fs.move(storage.path(name),
                                        storage.path(name.removeprefix("_staged-")))
                del self.staged[staged_epoch]
        storage.sync(storage.root)
