"""``scope.input_from_source``: a stream read from a partitioned, resumable source.

A source (see :mod:`sparktimely.io` for the protocol and ``FileSource``) names its
partitions; partition ``p`` is read by worker ``stable_hash(p) % peers``. Each worker opens
its partitions, reads batches round-robin (the partition at the lowest epoch first) and sends
each batch at its partition's epoch; the operator's capability follows the least epoch any of
its open partitions may still produce, and is dropped when all are exhausted.

With epoch checkpoints the reader also remembers, per partition, the position after the last
batch of each epoch not yet checkpointed, so that a checkpoint of epoch ``e`` holds the
position after exactly the batches of epochs ``<= e``, however far the reader has run ahead.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Callable, Iterable, Protocol, TypeVar

from ..dataflow import OperatorBuilder
from ..dataflow.capability import Capability
from ..dataflow.scope import ScopeCore
from ..dataflow.stream import StreamCore
from ..hashing import stable_hash
from .recovery import Component, epoch_time

logger = logging.getLogger("sparktimely")

S = TypeVar("S", bound=StreamCore)

class SourcePart(Protocol):
    """One open partition of a :class:`Source` (what its ``open`` returns).

    >>> class Numbers:                  # a SourcePart: epoch e holds [e], for epochs 0 and 1
    ...     def __init__(self, next_epoch):
    ...         self.next_epoch = next_epoch
    ...     def next_batch(self):
    ...         if self.next_epoch == 2:
    ...             raise StopIteration
    ...         self.next_epoch += 1
    ...         return self.next_epoch - 1, [self.next_epoch - 1]
    ...     def snapshot(self):
    ...         return self.next_epoch
    >>> part: SourcePart = Numbers(0)
    >>> part.next_batch(), Numbers(part.snapshot()).next_batch()      # resumed after epoch 0
    ((0, [0]), (1, [1]))
    """

    def next_batch(self) -> tuple[int, Any] | None:
        """The next ``(epoch, batch)`` (epochs non-decreasing; a batch is a list or a
        ``pyarrow.RecordBatch``), None while there is nothing yet (asked again at the next
        step); raises StopIteration once the partition is exhausted.

        >>> import os, tempfile, sparktimely as st
        >>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
        >>> with open(path, "w") as f:
        ...     _ = f.write("x\\ny\\n")
        >>> part = st.io.FileSource(path, format="text", batch_rows=1).open("a.txt", None)
        >>> part.next_batch(), part.next_batch()
        ((0, ['x']), (1, ['y']))
        """
        ...

    def snapshot(self) -> Any:
        """A picklable position from which ``open`` continues after the batches returned
        so far.

        >>> import os, tempfile, sparktimely as st
        >>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
        >>> with open(path, "w") as f:
        ...     _ = f.write("x\\ny\\n")
        >>> source = st.io.FileSource(path, format="text", batch_rows=1)
        >>> part = source.open("a.txt", None); _ = part.next_batch()
        >>> source.open("a.txt", part.snapshot()).next_batch()       # resumed after "x"
        (1, ['y'])
        """
        ...


class Source(Protocol):
    """A partitioned, resumable source, read by ``scope.input_from_source``: worker
    ``stable_hash(p) % peers`` reads partition ``p`` (or worker ``source.worker_for(p,
    peers)``, if the source has that method). :class:`sparktimely.io.FileSource` is one.

    >>> import sparktimely as st
    >>> class Evens:                     # a Source of two partitions
    ...     def partitions(self):
    ...         return ["low", "high"]
    ...     def open(self, partition, resume_state):
    ...         return Batches([[0, 2]] if partition == "low" else [[10, 12]], resume_state or 0)
    >>> class Batches:                   # its parts: every batch at epoch 0
    ...     def __init__(self, batches, read):
    ...         self.batches, self.read = batches, read
    ...     def next_batch(self):
    ...         if self.read == len(self.batches):
    ...             raise StopIteration
    ...         self.read += 1
    ...         return 0, self.batches[self.read - 1]
    ...     def snapshot(self):
    ...         return self.read
    >>> st.example(lambda scope: scope.input_from_source(Evens(), "evens").capture()).extract()
    [(0, [0, 2, 10, 12])]
    """

    def partitions(self) -> Iterable[str]:
        """The names of the source's partitions.

        >>> import os, tempfile, sparktimely as st
        >>> folder = tempfile.mkdtemp()
        >>> for name in ("b.txt", "a.txt"):
        ...     open(os.path.join(folder, name), "w").close()
        >>> list(st.io.FileSource(folder, format="text").partitions())       # one per file
        ['a.txt', 'b.txt']
        """
        ...

    def open(self, partition: str, resume_state: Any) -> SourcePart:
        """Partition ``partition``: from its start if ``resume_state`` is None, else from
        the position a part's ``snapshot()`` returned.

        >>> import os, tempfile, sparktimely as st
        >>> folder = tempfile.mkdtemp()
        >>> with open(os.path.join(folder, "a.txt"), "w") as f:
        ...     _ = f.write("x\\ny\\n")
        >>> st.io.FileSource(folder, format="text").open("a.txt", None).next_batch()
        (0, ['x', 'y'])
        """
        ...


BATCHES_PER_RUN = 4
"""Batches a reader takes from its partitions each time it runs before yielding to the
operators downstream (it runs again at the next step)."""


class _Partition:
    """One open partition: its part, its current epoch and the positions to checkpoint."""

    __slots__ = ("name", "part", "epoch", "position", "marks", "done")

    def __init__(self, name: str, part: SourcePart, epoch: int, position: Any) -> None:
        self.name = name
        self.part = part
        self.epoch = epoch              # the epoch of its latest batch (or the start epoch)
        self.position = position        # part.snapshot() after its latest batch
        self.marks: list[tuple[int, Any]] = []   # (e, position after all batches of epochs <= e)
        self.done = False

    def position_at(self, epoch: int | None) -> Any:
        """The position after exactly the batches of epochs ``<= epoch`` (None: all); marks
        older than the one used are forgotten (later checkpoints are of later epochs)."""
        if epoch is None or self.epoch <= epoch:
            self.marks.clear()
            return self.position
        last = max(i for i, (e, _) in enumerate(self.marks) if e <= epoch)
        del self.marks[:last]
        return self.marks[0][1]


class SourceReader(Component):
    """The component behind ``input_from_source``: opens, reads and checkpoints the
    partitions this worker owns."""

    kind = "source"

    def __init__(self, scope: ScopeCore, name: str, source: Source, operator: int,
                 output: Any, activate: Callable[[], None]) -> None:
        super().__init__(scope, name, operator, gated=False)
        self.source = source
        self.output = output
        self.activate = activate
        self.capability: Capability | None = None
        self.minimum = scope.kind.minimum()
        self.index, self.peers = scope.index, scope.peers
        self.resume: dict[str, Any] = {}
        self.partitions: list[_Partition] | None = None
        self.start_epoch = 0

    def _owned(self, names: Iterable[str]) -> list[str]:
        """The partitions of ``names`` this worker reads."""
        worker_for = getattr(self.source, "worker_for", None)
        if worker_for is None:
            return [name for name in names if stable_hash(name) % self.peers == self.index]
        return [name for name in names if worker_for(name, self.peers) == self.index]

    def _listed(self) -> list[str]:
        """The source's partitions, checked."""
        names = list(self.source.partitions())
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"source {self.name!r}: partitions() must return strings, got "
                                f"{name!r}")
        twice = [name for name, n in Counter(names).items() if n > 1]
        if twice:
            raise ValueError(f"source {self.name!r}: partition {twice[0]!r} is listed twice")
        return names

    def restore(self, state: dict[str, Any]) -> None:
        self.resume = state

    def start(self, epoch: int, limit: int | None) -> None:
        self.start_epoch = epoch
        partitions = []
        listed = self._listed()
        owned = self._owned(listed)
        gone = sorted(self._owned(set(self.resume).difference(listed)))   # told by one worker
        if gone:
            shown = ", ".join(map(repr, gone[:5])) + (f" and {len(gone) - 5} more"
                                                       if len(gone) > 5 else "")
            logger.warning(
                "source %r, worker %d: the checkpoint this run resumed from holds the "
                "positions of partition(s) %s, which the source no longer lists; a partition "
                "listed under another name is read again from its start", self.name,
                self.index, shown)
        for name in owned:
            part = self.source.open(name, self.resume.get(name))
            position = part.snapshot() if self.checkpointed else None
            partitions.append(_Partition(name, part, epoch, position))
        self.partitions = partitions
        self.resume = {}
        capability = self.capability
        if capability is not None and epoch:
            capability.downgrade(epoch_time(self.minimum, epoch))
        self.activate()

    def snapshot(self, epoch: int | None) -> dict[str, Any]:
        return {p.name: p.position_at(epoch) for p in self.partitions or ()}

    def run(self) -> None:
        """Read up to :data:`BATCHES_PER_RUN` batches and send them at their epochs."""
        if self.partitions is None:
            if self.checkpointed:
                return                        # the coordinator starts it once restored
            self.start(0, None)
        partitions = self.partitions
        assert partitions is not None and self.capability is not None
        idle: set[str] = set()
        for _ in range(BATCHES_PER_RUN):
            waiting = [p for p in partitions if not p.done and p.name not in idle]
            if not waiting:
                break
            partition = min(waiting, key=lambda p: p.epoch)
            try:
                got = partition.part.next_batch()
            except StopIteration:
                partition.done = True
                continue
            if got is None:
                idle.add(partition.name)
                continue
            self._send(partition, got)
        open_epochs = [p.epoch for p in partitions if not p.done]
        if open_epochs:
            self.capability.downgrade(epoch_time(self.minimum, min(open_epochs)))
            self.activate()
        else:
            self.capability.drop()

    def _send(self, partition: _Partition, got: Any) -> None:
        try:
            epoch, batch = got
        except (TypeError, ValueError):
            raise TypeError(f"source {self.name!r}, partition {partition.name!r}: next_batch() "
                            f"must return (epoch, batch), None or raise StopIteration; got "
                            f"{type(got).__name__}") from None
        if epoch.__class__ is not int or epoch < 0:
            raise TypeError(f"source {self.name!r}, partition {partition.name!r}: epoch "
                            f"{epoch!r} is not a non-negative int")
        if batch.__class__ is not list and not hasattr(batch, "schema"):
            raise TypeError(f"source {self.name!r}, partition {partition.name!r}: a batch must "
                            f"be a list or a pyarrow.RecordBatch, got {type(batch).__name__}")
        epoch = max(epoch, self.start_epoch)
        if epoch < partition.epoch:
            raise ValueError(f"source {self.name!r}, partition {partition.name!r}: epoch "
                             f"{epoch} after epoch {partition.epoch}; epochs must not decrease")
        if epoch > partition.epoch:
            if self.checkpointed:
                partition.marks.append((partition.epoch, partition.position))
            partition.epoch = epoch
        self.max_epoch = max(self.max_epoch, epoch)
        capability = self.capability
        assert capability is not None
        time = epoch_time(self.minimum, epoch)
        self.output.give_at(capability if time == capability.time else capability.delayed(time),
                            batch)
        if self.checkpointed:
            partition.position = partition.part.snapshot()


class SourceScope(ScopeCore[S]):
    """``input_from_source``."""

    def input_from_source(self, source: Source, name: str) -> S:
        """The stream of what ``source`` produces, each batch at its epoch (as a time).

        ``source.partitions()`` lists partition names; worker ``stable_hash(p) % peers``
        reads partition ``p`` (or worker ``source.worker_for(p, peers)`` if the source has
        that method): ``part = source.open(p, resume_state)``, then
        ``part.next_batch()`` returns ``(epoch, batch)`` (epochs non-decreasing per
        partition; a batch is a list or a ``pyarrow.RecordBatch``), None while it has
        nothing yet (it is asked again at the next step), or raises StopIteration when
        exhausted; ``part.snapshot()`` returns a picklable position from which ``open``
        continues. ``resume_state`` is None unless a run resumes from an epoch checkpoint
        (see :mod:`sparktimely.io`); then batches of epochs up to the checkpoint's are not
        read again, and a partition's earlier epochs are sent at the first epoch after it.

        >>> import sparktimely as st
        >>> class Countdown:                     # one partition, one batch per epoch
        ...     def partitions(self):
        ...         return ["only"]
        ...     def open(self, partition, resume_state):
        ...         return Part(resume_state or 0)
        >>> class Part:
        ...     def __init__(self, done):
        ...         self.done = done
        ...     def next_batch(self):
        ...         if self.done == 3:
        ...             raise StopIteration
        ...         self.done += 1
        ...         return self.done - 1, [f"epoch {self.done - 1}"]
        ...     def snapshot(self):
        ...         return self.done
        >>> st.example(lambda scope: scope.input_from_source(Countdown(), "count")
        ...            .capture()).extract()
        [(0, ['epoch 0']), (1, ['epoch 1']), (2, ['epoch 2'])]
        """
        if self.kind.depth:
            raise ValueError(f"input_from_source({name!r}): sources can only be read in a "
                             f"dataflow's top-level scope")
        for needed in ("partitions", "open"):
            if not callable(getattr(source, needed, None)):
                raise TypeError(f"input_from_source({name!r}): {type(source).__name__} has no "
                                f"{needed}() (see sparktimely.io for the source protocol)")
        builder: OperatorBuilder = OperatorBuilder(name, self)
        output, stream = builder.new_output()
        builder.set_notify(False)
        activator = self.activator_for(builder.address)
        reader = SourceReader(self, name, source, builder.index, output, activator.activate)

        def ctor(capabilities: list[Capability]) -> Callable[[list], None]:
            reader.capability = capabilities[0]
            return lambda frontiers: reader.run()
        builder.build(ctor)
        return stream
