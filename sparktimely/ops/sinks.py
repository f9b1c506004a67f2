"""``stream.output_to``: writing a stream to a sink that makes each epoch visible once.

Each worker opens the sink's partition named after its index and writes every batch with
its root epoch (``part.write(epoch, batch)``). Without epoch checkpoints, an epoch is
committed (``part.commit(epoch)``: make epochs ``<= epoch`` visible) as soon as the sink's
input frontier has passed it. With checkpoints, the sink sees batches of an epoch only once
the previous checkpoint's snapshot is taken (:class:`~sparktimely.ops.recovery.EpochGate`),
its ``part.snapshot()`` is part of every checkpoint, and ``commit(e)`` follows the
checkpoint of ``e`` once that is durable: the second phase of a two-phase commit, repeated
after a resume (so ``commit`` must be idempotent).
"""
from __future__ import annotations

from typing import Any, Protocol

from ..dataflow import OperatorBuilder, Pipeline
from ..dataflow.scope import ScopeCore
from ..dataflow.stream import StreamCore
from .recovery import Component, frontier_epoch, root_epoch


class SinkPart(Protocol):
    """One worker's partition of a :class:`Sink` (what its ``open`` returns).

    Its ``commit`` must be idempotent: the checkpoint of epoch ``e`` holds the snapshot
    taken before ``commit(e)``, so a run that crashed after that commit and resumes commits
    ``e`` again (a part that printed or appended its records there told them twice).

    >>> import os, tempfile
    >>> class Filed:                    # a SinkPart: a file per epoch, written at its commit
    ...     def __init__(self, folder, staged):
    ...         self.folder, self.staged = folder, staged
    ...     def write(self, epoch, batch):
    ...         self.staged.setdefault(epoch, []).extend(batch)
    ...     def snapshot(self):
    ...         return dict(self.staged)
    ...     def commit(self, epoch):        # replaces a file an earlier run wrote
    ...         for e in sorted(e for e in self.staged if e <= epoch):
    ...             with open(os.path.join(self.folder, f"{e}.txt"), "w") as file:
    ...                 file.write(" ".join(self.staged.pop(e)))
    >>> folder = tempfile.mkdtemp()
    >>> part: SinkPart = Filed(folder, {})
    >>> part.write(0, ["a"]); part.write(1, ["b"]); part.commit(0)
    >>> checkpoint = part.snapshot()                   # of epoch 1, then its commit
    >>> part.commit(1)
    >>> Filed(folder, checkpoint).commit(1)            # a crash, and a run resumed from it
    >>> {name: open(os.path.join(folder, name)).read() for name in sorted(os.listdir(folder))}
    {'0.txt': 'a', '1.txt': 'b'}
    """

    def write(self, epoch: int, batch: Any) -> None:
        """Stage ``batch`` (a list or a RecordBatch) as output of root epoch ``epoch``.

        >>> import os, tempfile, sparktimely as st
        >>> folder = tempfile.mkdtemp()
        >>> part = st.io.DirectorySink(folder, format="jsonl").open("0", None)
        >>> part.write(0, [{"x": 1}])
        >>> os.listdir(folder)                              # staged, not visible yet
        ['_staged-part-0000000000-0.jsonl']
        >>> part.commit(0)
        """

    def snapshot(self) -> Any:
        """A picklable state from which ``open`` resumes what was written (taken at epoch
        checkpoints).

        >>> import tempfile, sparktimely as st
        >>> sink = st.io.DirectorySink(tempfile.mkdtemp(), format="jsonl")
        >>> part = sink.open("0", None)
        >>> part.write(0, [{"x": 1}])
        >>> part.snapshot()
        {'staged': [(0, '_staged-part-0000000000-0.jsonl')]}
        """
        ...

    def commit(self, epoch: int) -> None:
        """Make what was written for epochs ``<= epoch`` visible; idempotent (a resumed run
        commits its checkpoint's epoch again).

        >>> import os, tempfile, sparktimely as st
        >>> folder = tempfile.mkdtemp()
        >>> part = st.io.DirectorySink(folder, format="jsonl").open("0", None)
        >>> part.write(0, [{"x": 1}]); part.write(1, [{"x": 2}]); part.commit(0)
        >>> sorted(os.listdir(folder))
        ['_staged-part-0000000001-0.jsonl', 'part-0000000000-0.jsonl']
        >>> part.commit(1)
        """


class Sink(Protocol):
    """A sink ``stream.output_to`` writes: each worker opens the partition named after its
    index. :class:`sparktimely.io.DirectorySink` is one.

    A sink that stages output where crashed runs leave it may also have
    ``discard_staged(doomed)``: each worker calls it at its start with a predicate over
    partition names, true for the partitions of a crashed run with more workers that fall
    to this worker and that it does not resume (no one opens them again).

    >>> import sparktimely as st
    >>> class Collected:                 # a Sink: a list per epoch, kept once committed
    ...     def __init__(self):
    ...         self.visible = {}
    ...     def open(self, partition, resume_state):
    ...         return Part(self.visible, dict(resume_state or {}))
    >>> class Part:
    ...     def __init__(self, visible, staged):
    ...         self.visible, self.staged = visible, staged
    ...     def write(self, epoch, batch):
    ...         self.staged.setdefault(epoch, []).extend(batch)
    ...     def snapshot(self):
    ...         return dict(self.staged)
    ...     def commit(self, epoch):
    ...         for e in [e for e in self.staged if e <= epoch]:
    ...             self.visible[e] = sorted(self.staged.pop(e))
    >>> sink = Collected()
    >>> st.example(lambda scope: scope.to_stream([3, 1, 2]).output_to(sink, "collected"))
    >>> sink.visible
    {0: [1, 2, 3]}
    """

    def open(self, partition: str, resume_state: Any) -> SinkPart:
        """Partition ``partition`` (a worker's index): new if ``resume_state`` is None,
        else resumed from what a part's ``snapshot()`` returned.

        >>> import os, tempfile, sparktimely as st
        >>> folder = tempfile.mkdtemp()
        >>> sink = st.io.DirectorySink(folder, format="jsonl")
        >>> part = sink.open("0", None); part.write(0, [{"x": 1}])
        >>> sink.open("0", part.snapshot()).commit(0)             # resumed, then committed
        >>> os.listdir(folder)
        ['part-0000000000-0.jsonl']
        """
        ...


def handed_over(partition: int, peers: int, index: int) -> bool:
    """Whether sink partition ``partition`` of an earlier run with more workers falls to worker
    ``index`` of a run of ``peers`` workers: one beyond the run's workers goes to worker
    ``partition % peers`` (which resumes it, or deletes what a crash left of it).

    >>> [p for p in range(7) if handed_over(p, 2, 0)]
    [2, 4, 6]
    """
    return partition >= peers and partition % peers == index


class SinkWriter(Component):
    """The component behind ``output_to``: this worker's part of the sink."""

    kind = "sink"

    def __init__(self, scope: ScopeCore, name: str, sink: Sink, operator: int,
                 input: Any) -> None:
        super().__init__(scope, name, operator, gated=True)
        self.sink = sink
        self.input = input
        self.partition = str(scope.index)
        self.peers = scope.peers
        self.resume: dict[str, Any] | None = None
        self.part: SinkPart | None = None
        self.written: set[int] = set()
        """Epochs written and not yet committed (without checkpoints, which commit them)."""

    def restore(self, state: dict[str, Any]) -> None:
        """``state``: the checkpointed states of the partitions this worker resumes (its own,
        and those of workers the resumed run no longer has)."""
        self.resume = state

    def start(self, epoch: int, limit: int | None) -> None:
        resume = self.resume or {}
        self.part = part = self.sink.open(self.partition, resume.get(self.partition))
        discard = getattr(self.sink, "discard_staged", None)
        if discard is not None:
            discard(lambda partition: self._orphan(partition) and partition not in resume)
        if self.resume is not None:
            part.commit(epoch - 1)
            for partition, state in sorted(resume.items()):
                if partition != self.partition:
                    self.sink.open(partition, state).commit(epoch - 1)
        self.resume = None
        super().start(epoch, limit)

    def _orphan(self, partition: str) -> bool:
        """Whether ``partition`` is one a crashed run with more workers had that falls to
        this worker (:func:`handed_over`): unless this worker resumes it, no one opens it
        again."""
        return partition.isdigit() and handed_over(int(partition), self.peers,
                                                   int(self.partition))

    def opened(self) -> SinkPart:
        """The sink's part, once :meth:`start` has opened it."""
        assert self.part is not None, f"sink {self.name!r}: the part is opened at the start"
        return self.part

    def snapshot(self, epoch: int | None) -> dict[str, Any]:
        return {self.partition: self.opened().snapshot()}

    def commit(self, epoch: int) -> None:
        self.opened().commit(epoch)

    def run(self) -> None:
        if self.part is None:
            if self.checkpointed:
                return                        # the coordinator starts it once restored
            self.start(0, None)
        part = self.opened()
        write = part.write
        for cap, batch in self.input:
            epoch = root_epoch(cap.time)
            write(epoch, batch)
            if epoch > self.max_epoch:
                self.max_epoch = epoch
            if not self.checkpointed:
                self.written.add(epoch)
        if self.written:
            complete = frontier_epoch(self.input.frontier.frontier())
            done = [epoch for epoch in self.written if epoch < complete]
            if done:
                part.commit(max(done))
                self.written.difference_update(done)


class SinkOps(StreamCore):
    """``output_to``."""

    __slots__ = ()

    def output_to(self, sink: Sink, name: str) -> None:
        """Write this stream to ``sink``; each worker writes its own partition (its index).

        ``sink.open(partition, resume_state)`` returns a part with ``write(epoch, batch)``,
        ``snapshot()`` (a picklable state, taken at epoch checkpoints) and ``commit(epoch)``
        (make what was written for epochs ``<= epoch`` visible; idempotent). See
        :mod:`sparktimely.io` for ``DirectorySink`` and the guarantees with checkpoints. The
        part below prints at its commit, which is not idempotent: fine without checkpoints,
        but a resumed run commits the last checkpointed epoch again (:class:`SinkPart`'s
        example writes a file per epoch instead, resumed from its snapshot).

        >>> import sparktimely as st
        >>> class Printed:
        ...     def open(self, partition, resume_state):
        ...         return Part()
        >>> class Part:
        ...     def __init__(self):
        ...         self.staged = {}
        ...     def write(self, epoch, batch):
        ...         self.staged.setdefault(epoch, []).extend(batch)
        ...     def snapshot(self):
        ...         return self.staged
        ...     def commit(self, epoch):
        ...         for e in sorted(e for e in self.staged if e <= epoch):
        ...             print(e, sorted(self.staged.pop(e)))
        >>> def build(scope):
        ...     data = scope.to_stream(range(6)).delay(lambda x, t: x // 3)
        ...     data.output_to(Printed(), "printed")
        >>> st.example(build)
        0 [0, 1, 2]
        1 [3, 4, 5]
        """
        if not callable(getattr(sink, "open", None)):
            raise TypeError(f"output_to({name!r}): {type(sink).__name__} has no open() (see "
                            f"sparktimely.io for the sink protocol)")
        builder: OperatorBuilder = OperatorBuilder(name, self.scope)
        input = builder.new_input(self, Pipeline)
        writer = SinkWriter(self.scope, name, sink, builder.index, input)
        builder.build(lambda capabilities: lambda frontiers: writer.run())
