"""A task's own input and output, checkpointed: how a Spark barrier task (``map_partitions``
and ``map_in_arrow`` with a checkpoint directory) resumes in the middle of its partition.

- :class:`TaskInput`: the worker's iterator of batches as a source with one partition (the
  worker's index, read by that worker); batch ``i`` is at epoch ``i`` and the position is the
  number of batches read, which a resumed run skips (Spark gives a recomputed partition's
  batches again, in the same order, for deterministic inputs).
- :class:`TaskOutput`: a sink that hands each batch on at once and also keeps it, per epoch,
  in an Arrow IPC file the checkpoints commit. Spark keeps a task's output only if the task
  succeeds, so a resumed run first hands on again what the epochs it resumes after produced.

>>> import tempfile, sparktimely as st
>>> out, directory = [], tempfile.mkdtemp()
>>> def job(worker):
...     st.io.enable_checkpoints(worker, directory)
...     worker.dataflow(lambda scope: scope.input_from_source(
...         TaskInput([[1, 2], [3]], worker.index), "input").map(lambda x: 10 * x)
...         .output_to(TaskOutput(directory, out.append, 0, ["output"]), "output"),
...         name="task")
>>> st.execute_directly(job); out
[[10, 20], [30]]
>>> out.clear(); st.execute_directly(job); out        # again: everything from the checkpoint
[[10, 20], [30]]
"""
from __future__ import annotations

import contextlib
import pickle
import re
from typing import Any, Callable, ContextManager, Iterable, Iterator, Sequence

import pyarrow as pa

from ._storage import Location, Storage

__all__ = ["TaskInput", "TaskOutput"]

_SCHEMA = pa.schema([("batch", pa.binary())])
"""A kept output batch: one row, the batch pickled (a RecordBatch pickles as Arrow IPC)."""


class TaskInput:
    """The batches of ``batches`` (this worker's own: ``index`` is its index) as a source;
    ``waiting`` (a context manager factory) wraps each wait for the next batch.

    >>> part = TaskInput(iter([["a"], ["b"], ["c"]]), 0).open("0", 1)    # one batch read
    >>> part.next_batch(), part.snapshot()
    ((1, ['b']), 2)
    """

    def __init__(self, batches: Iterable[Any], index: int,
                 waiting: Callable[[], ContextManager] = contextlib.nullcontext) -> None:
        self.batches = batches
        self.index = index
        self.waiting = waiting

    def partitions(self) -> list[str]:
        """One partition, named by this worker's index."""
        return [str(self.index)]

    def worker_for(self, partition: str, peers: int) -> int:
        """Partition ``p`` is worker ``p``'s own input."""
        return int(partition)

    def open(self, partition: str, resume_state: int | None) -> "_TaskInputPart":
        """Read from the batch after the first ``resume_state`` (skipped)."""
        return _TaskInputPart(iter(self.batches), resume_state or 0, self.waiting)


class _TaskInputPart:
    def __init__(self, batches: Iterator[Any], skip: int,
                 waiting: Callable[[], ContextManager]) -> None:
        self.batches = batches
        self.waiting = waiting
        self.read = 0
        while self.read < skip:
            with waiting():
                if next(batches, None) is None:
                    break
            self.read += 1

    def next_batch(self) -> tuple[int, Any]:
        with self.waiting():
            batch = next(self.batches)
        self.read += 1
        return self.read - 1, batch

    def snapshot(self) -> int:
        return self.read


class TaskOutput:
    """A sink handing every batch to ``deliver`` and keeping it in directory ``location``
    (joined with ``parts``; one Arrow IPC file per epoch and partition, staged until
    committed); worker ``index``'s part, when resumed, first delivers what the committed
    epochs kept.

    >>> import os, tempfile
    >>> delivered, folder = [], tempfile.mkdtemp()
    >>> part = TaskOutput(folder, delivered.append, 0).open("0", None)
    >>> part.write(0, ["x"]); state = part.snapshot(); part.commit(0)
    >>> os.listdir(folder), delivered
    (['part-0000000000-0.arrow'], [['x']])
    >>> TaskOutput(folder, delivered.append, 0).open("0", state).commit(0); delivered
    [['x'], ['x']]
    """

    def __init__(self, location: Location, deliver: Callable[[Any], None], index: int,
                 parts: Sequence[str] = ()) -> None:
        self.storage = Storage(location).join(*parts)
        self.deliver = deliver
        self.index = index

    def open(self, partition: str, resume_state: dict | None) -> "_TaskOutputPart":
        return _TaskOutputPart(self, partition, resume_state)


_STAGED = re.compile(r"^_staged-part-(\d+)-(.+)\.arrow$")
_FINAL = re.compile(r"^part-(\d+)-(.+)\.arrow$")


class _TaskOutputPart:
    def __init__(self, sink: TaskOutput, partition: str, state: dict | None) -> None:
        self.sink = sink
        self.storage = storage = sink.storage
        self.partition = partition
        self.replay = state is not None and partition == str(sink.index)
        self.staged: dict[int, str] = dict(state["staged"]) if state else {}
        self.writing: dict[int, tuple[str, Any, Any]] = {}   # epoch -> (name, file, writer)
        storage.makedirs(storage.root)
        kept = set(self.staged.values())
        for name in storage.names(storage.root):
            match = _STAGED.match(name)
            if match and match.group(2) == partition and name not in kept:
                storage.delete(storage.path(name))

    def write(self, epoch: int, batch: Any) -> None:
        self.sink.deliver(batch)
        if epoch not in self.writing:
            name = f"_staged-part-{epoch:010d}-{self.partition}.arrow"
            stream = self.storage.open_output(self.storage.path(name))
            self.writing[epoch] = (name, stream, pa.ipc.new_stream(stream, _SCHEMA))
        self.writing[epoch][2].write_batch(
            pa.record_batch([pa.array([pickle.dumps(batch, 5)], pa.binary())], schema=_SCHEMA))

    def snapshot(self) -> dict:
        self._close(sorted(self.writing))
        return {"staged": sorted(self.staged.items())}

    def _close(self, epochs: list[int]) -> None:
        for epoch in epochs:
            name, stream, writer = self.writing.pop(epoch)
            writer.close()
            stream.close()
            self.storage.sync(self.storage.path(name))
            self.staged[epoch] = name

    def commit(self, epoch: int) -> None:
        """Make epochs ``<= epoch`` final; the first time after a resume, deliver again what
        they kept."""
        self._close(sorted(e for e in self.writing if e <= epoch))
        storage = self.storage
        for staged_epoch, name in sorted(self.staged.items()):
            if staged_epoch <= epoch:
                if storage.exists(storage.path(name)):
                    storage.fs.move(storage.path(name), storage.path(
                        f"part-{staged_epoch:010d}-{self.partition}.arrow"))
                del self.staged[staged_epoch]
        storage.sync(storage.root)
        if self.replay:
            self.replay = False
            finals = sorted((int(m.group(1)), name) for m, name in
                            ((_FINAL.match(n), n) for n in storage.names(storage.root))
                            if m and m.group(2) == self.partition and int(m.group(1)) <= epoch)
            for _, name in finals:
                table = pa.ipc.open_stream(storage.read(storage.path(name))).read_all()
                for kept in table.column("batch").to_pylist():
                    self.sink.deliver(pickle.loads(kept))
