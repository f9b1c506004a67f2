"""One sink partition's files, one per epoch, staged until their epoch is committed: the
two-phase commit that :class:`~sparktimely.io.DirectorySink` and the Spark tasks' output
(:class:`~sparktimely.io.tasks.TaskOutput`) share.

An epoch's file is written as ``_staged-part-<epoch>-<partition><extension>``, closed and
made durable at a snapshot (or commit), and renamed to ``part-<epoch>-<partition><extension>``
when its epoch is committed. Opening a partition deletes what a crashed run staged for it
and the resumed state does not keep.
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

    def write(self, batch: Any) -> None:
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
        self.staged: dict[int, str] = dict(state["staged"]) if state else {}
        self.writing: dict[int, StagedFile] = {}
        storage.makedirs(storage.root)
        kept = set(self.staged.values())             # what a crashed run staged and no one kept
        delete_staged(storage, staged, lambda part, name: part == partition and name not in kept)

    def final_name(self, epoch: int) -> str:
        return f"part-{epoch:010d}-{self.partition}{self.extension}"

    def open_file(self, name: str) -> StagedFile:
        """A new staged file named ``name``."""
        raise NotImplementedError

    def file(self, epoch: int) -> StagedFile:
        """Epoch ``epoch``'s file, opened at its first batch."""
        file = self.writing.get(epoch)
        if file is None:
            file = self.writing[epoch] = self.open_file(f"_staged-{self.final_name(epoch)}")
        return file

    def _close(self, epochs: list[int]) -> None:
        for epoch in epochs:
            file = self.writing.pop(epoch)
            file.close()
            self.staged[epoch] = file.name

    def snapshot(self) -> dict:
        """Every epoch written so far is complete: close its file (staged, durable)."""
        self._close(sorted(self.writing))
        return {"staged": sorted(self.staged.items())}

    def commit(self, epoch: int) -> None:
        """Make epochs ``<= epoch`` visible: rename their staged files (again after a resume;
        a staged file already renamed, or removed, is skipped)."""
        self._close(sorted(e for e in self.writing if e <= epoch))
        storage = self.storage
        for staged_epoch, name in sorted(self.staged.items()):
            if staged_epoch <= epoch:
                if storage.exists(storage.path(name)):
                    storage.fs.move(storage.path(name),
                                    storage.path(self.final_name(staged_epoch)))
                del self.staged[staged_epoch]
        storage.sync(storage.root)
