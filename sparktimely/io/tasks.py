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

from ._staged import StagedEpochs, StagedFile, delete_staged
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

    def discard_staged(self, doomed: Callable[[str], bool]) -> None:
        """As :meth:`~sparktimely.io.DirectorySink.discard_staged`."""
        delete_staged(self.storage, _STAGED, lambda part, _: doomed(part))


_STAGED = re.compile(r"^_staged-part-(\d+)-(.+)\.arrow$")
_FINAL = re.compile(r"^part-(\d+)-(.+)\.arrow$")


class _KeptBatches(StagedFile):
    """One epoch's kept batches: an Arrow IPC stream of pickled batches."""

    def __init__(self, storage: Storage, name: str) -> None:
        super().__init__(storage, name)
        self.writer = pa.ipc.new_stream(self.stream, _SCHEMA)

    def write(self, batch: Any) -> bool:
        self.writer.write_batch(
            pa.record_batch([pa.array([pickle.dumps(batch, 5)], pa.binary())], schema=_SCHEMA))
        return True

    def finish(self) -> None:
        self.writer.close()


class _TaskOutputPart(StagedEpochs):
    def __init__(self, sink: TaskOutput, partition: str, state: dict | None) -> None:
        self.sink = sink
        self.replay = state is not None and partition == str(sink.index)
        super().__init__(sink.storage, partition, ".arrow", _STAGED, state)

    def open_file(self, name: str) -> StagedFile:
        return _KeptBatches(self.storage, name)

    def write(self, epoch: int, batch: Any) -> None:
        self.sink.deliver(batch)
        super().write(epoch, batch)

    def commit(self, epoch: int) -> None:
        """Make epochs ``<= epoch`` final; the first time after a resume, deliver again what
        they kept."""
        super().commit(epoch)
        storage = self.storage
        if self.replay:
            self.replay = False
            finals = sorted((int(m.group(1)), name) for m, name in
                            ((_FINAL.match(n), n) for n in storage.names(storage.root))
                            if m and m.group(2) == self.partition and int(m.group(1)) <= epoch)
            for _, name in finals:
                table = pa.ipc.open_stream(storage.read(storage.path(name))).read_all()
                for kept in table.column("batch").to_pylist():
                    self.sink.deliver(pickle.loads(kept))
