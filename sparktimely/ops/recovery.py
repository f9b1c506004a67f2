"""What operators show of themselves to epoch checkpoints (``sparktimely.io``).

A checkpoint of root epoch ``e`` holds, for every *component* of a dataflow (a source, a sink,
an operator with keyed state), its state after exactly the inputs at epochs ``<= e``. This
module is the operator library's side of that contract; the coordinator that decides when to
checkpoint, writes the files and restores them lives in :mod:`sparktimely.io`, watches the
worker as one of its observers, and is found by :func:`recovery_of` (None when the worker
does not checkpoint).

- :class:`Component`: registered with the coordinator while the dataflow is built; restored,
  started, snapshot at a checkpoint epoch and committed by it.
- :class:`EpochGate`: keeps an operator from seeing input batches of epochs after the next
  checkpoint epoch until that checkpoint's snapshot is taken (the alignment of Flink's
  checkpoint barriers, applied per operator), so its state at the snapshot reflects exactly
  the inputs of epochs ``<= e``: those are complete everywhere, later ones unseen.
- :class:`RecoveryScope.recoverable`: the opt-in for operators that keep keyed state across
  times (``state_machine`` uses it; the differential arrangements and user operators may).

>>> from sparktimely import Product
>>> root_epoch(7), root_epoch(Product(3, 9)), root_epoch(Product(Product(2, 1), 5))
(7, 3, 2)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, Protocol, TypeVar, runtime_checkable

from ..dataflow.scope import ScopeCore
from ..dataflow.stream import StreamCore
from ..hashing import Route, stable_hash
from ..progress.timestamp import Product, Timestamp

if TYPE_CHECKING:
    from ..dataflow.subgraph import Dataflow
    from ..dataflow.worker import WorkerCore

S = TypeVar("S", bound=StreamCore)

HOLD_ALL = -1
"""A gate limit that holds every epoch back (until the coordinator restored the state)."""


def root_epoch(time: Timestamp) -> int:
    """The root epoch of a time: the time itself at the top level, or the outermost coordinate
    of a ``Product`` (of a nested scope, or of a dataflow whose times are Products).

    >>> import sparktimely as st
    >>> root_epoch(st.Product(4, 1))
    4
    """
    while time.__class__ is Product:
        time = time.outer
    return time


def epoch_time(minimum: Timestamp, epoch: int) -> Timestamp:
    """The earliest time of root epoch ``epoch`` in a scope whose least time is ``minimum``
    (of any time: that time moved to root epoch ``epoch``, its inner coordinates kept).

    >>> import sparktimely as st
    >>> epoch_time(0, 5), epoch_time(st.Product(0, 0), 5)
    (5, Product(5, 0))
    """
    if minimum.__class__ is Product:
        return Product(epoch_time(minimum.outer, epoch), minimum.inner)
    return epoch


def frontier_epoch(frontier: list) -> float:
    """The least root epoch a frontier still allows (infinity for an empty frontier): every
    epoch below it is complete."""
    return min((root_epoch(t) for t in frontier), default=float("inf"))


@runtime_checkable
class Recovery(Protocol):
    """The checkpoint coordinator as operators see it: one of the worker's observers."""

    def register(self, component: "Component") -> None:
        """Take ``component`` into this worker's checkpoints of its dataflow."""


def recovery_of(worker: "WorkerCore") -> Recovery | None:
    """The checkpoint coordinator watching ``worker``, or None if it does not checkpoint.

    >>> import sparktimely as st
    >>> st.execute_directly(recovery_of) is None
    True
    """
    return next((observer for observer in worker.observers if isinstance(observer, Recovery)),
                None)


class InputEpochs:
    """The root epochs a checkpointed dataflow's inputs send at: every operator of the
    dataflow that has no inputs (input handles, ``to_stream``, a program's own sources),
    except the ``exempt`` ones (sources that resume from positions of their own).

    ``sent`` holds, per input (its operator index), the latest epoch it sent records at
    over every run (absent: none). A run resumed from the checkpoint of root epoch ``e``
    continues after it (:meth:`resume_after`): each input sends nothing at epochs up to its
    own ``sent`` of that checkpoint, whose records the restored state already holds, so a
    program that sends its input again from the start has it counted once; what it sends at
    the epochs between that and ``e`` (a completed dataflow's last checkpoint is of the
    latest epoch anything in it reached: another input's, or a ``delay``'s output past its
    inputs) is sent at ``e + 1``, as a ``FileSource`` sends a new file's early epochs.
    ``told(input, epoch, moved, last)`` is told of each input's first dropped (``moved``
    False) and first moved batch; ``input`` is its handle's name (else its operator's),
    ``last`` the latest epoch whose batches it drops.
    """

    def __init__(self, dataflow: "Dataflow", exempt: set[int],
                 told: Callable[[str, int, bool, int], None]) -> None:
        self.keep_from: dict[int, int] = {}     # per input: its epochs below are dropped
        self.resume_at = 0           # epochs from keep_from below this are sent at it
        self.sent: dict[int, int] = {}
        self._told_of = told
        self._told: set[tuple[int, bool]] = set()
        self.inputs: list[int] = []
        handles = dataflow.input_handles()
        for operator in dataflow.operators:
            if operator is None or operator.inputs or operator.index in exempt:
                continue
            self.inputs.append(operator.index)
            handle = handles.get(operator.index)
            retimed = None if handle is None else type(handle).retimed   # not the handle
            name = operator.name if handle is None else handle.name
            for port in operator.outputs:
                port.pushers = [_Watched(pusher, self, name, operator.index, retimed)
                                for pusher in port.pushers]

    def latest(self) -> int:
        """The latest epoch any input sent records at, over every run (-1: none)."""
        return max(self.sent.values(), default=-1)

    def resume_after(self, epoch: int, sent: dict[int, int], otherwise: int) -> None:
        """Resume from the checkpoint of root epoch ``epoch`` whose inputs had sent up to
        epoch ``sent[input]`` (``otherwise`` for an input it does not name): drop what each
        sends up to that, send the rest up to ``epoch`` at ``epoch + 1``."""
        self.resume_at = epoch + 1
        for input in self.inputs:
            had = sent.get(input, otherwise)
            self.keep_from[input] = had + 1
            if had > self.sent.get(input, -1):
                self.sent[input] = had

    def tell(self, input: str, index: int, epoch: int, moved: bool) -> None:
        """A batch of ``input`` (operator ``index``) at ``epoch`` was dropped (or
        ``moved``): tell the first of each kind."""
        if (index, moved) not in self._told:
            self._told.add((index, moved))
            self._told_of(input, epoch, moved, self.keep_from.get(index, 0) - 1)


class _Watched:
    """One output's pusher of an input operator, as :class:`InputEpochs` watches it."""

    __slots__ = ("pusher", "epochs", "name", "index", "retimed")

    def __init__(self, pusher: Any, epochs: InputEpochs, name: str, index: int,
                 retimed: Callable[[Any, Timestamp], Any] | None) -> None:
        self.pusher = pusher
        self.epochs = epochs
        self.name = name                # the input's, for warnings
        self.index = index              # the operator's
        self.retimed = retimed          # the handle's, for records with times of their own

    def push(self, time: Timestamp, batch: Any) -> None:
        epoch = root_epoch(time)
        epochs = self.epochs
        if epoch < epochs.resume_at:
            if epoch < epochs.keep_from.get(self.index, 0):
                epochs.tell(self.name, self.index, epoch, False)
                return
            epochs.tell(self.name, self.index, epoch, True)
            epoch = epochs.resume_at
            time = epoch_time(time, epoch)
            if self.retimed is not None:
                batch = self.retimed(batch, time)
        if epoch > epochs.sent.get(self.index, -1):
            epochs.sent[self.index] = epoch
        self.pusher.push(time, batch)


class EpochGate:
    """Holds back from one operator the input batches of root epochs after ``limit``, through
    its input ports' gates (``InputPort.gate``).

    Held batches stay counted at the operator's inputs (they are not consumed), so the
    operator's input frontiers, and every frontier downstream, stay at their times: a held
    epoch is never complete. ``limit`` None lets everything through; :data:`HOLD_ALL` holds
    everything. Installed once the dataflow is built.
    """

    __slots__ = ("limit", "_dataflow", "_operator")

    def __init__(self, dataflow: "Dataflow", operator: int, limit: int | None) -> None:
        self.limit = limit
        self._dataflow = dataflow
        self._operator = operator

    def install(self) -> None:
        """Gate the (built) operator's inputs so that it only sees batches up to ``limit``."""
        for port in self._dataflow.operators[self._operator].inputs:
            port.gate(self._admits)

    def _admits(self, time: Timestamp) -> bool:
        limit = self.limit
        return limit is None or root_epoch(time) <= limit

    def release(self, limit: int | None) -> None:
        """Let batches up to ``limit`` (all with None) through, and schedule the operator."""
        self.limit = limit
        if self._dataflow.dropped:      # (dropped once finished: its last checkpoint still
            return                      # comes, and nothing runs any more)
        for port in self._dataflow.operators[self._operator].inputs:
            port.reopen()


class Component:
    """A part of a dataflow whose state epoch checkpoints hold, as the coordinator drives it.

    ``kind`` is ``"source"``, ``"sink"`` or ``"keyed"``; ``name`` is unique within the
    dataflow. The coordinator calls, in this order: :meth:`restore` (only when resuming),
    :meth:`start`, then per checkpoint :meth:`snapshot` followed by :meth:`release`, and
    :meth:`commit` once the checkpoint is durable. Without a coordinator a component starts
    itself when its operator first runs.
    """

    kind: ClassVar[str]

    def __init__(self, scope: ScopeCore, name: str, operator: int, gated: bool) -> None:
        self.name = name
        self.dataflow = scope.dataflow
        self.operator = operator
        coordinator = recovery_of(scope.dataflow.worker)
        self.checkpointed = coordinator is not None
        self.gate = EpochGate(scope.dataflow, operator, HOLD_ALL) if gated and coordinator else None
        self.max_epoch = -1
        """The latest root epoch this component has seen on this worker (-1: none)."""
        if coordinator is not None:
            coordinator.register(self)

    def install(self) -> None:
        """The dataflow is built: gate the operator's inputs (if it is gated)."""
        if self.gate is not None:
            self.gate.install()

    def restore(self, state: Any) -> None:
        """Take the state decoded from the checkpoint being resumed (kind-specific)."""

    def start(self, epoch: int, limit: int | None) -> None:
        """Begin at root epoch ``epoch`` (after the resumed checkpoint's epoch, or 0), seeing
        inputs up to ``limit`` (see :class:`EpochGate`)."""
        if self.gate is not None:
            self.gate.release(limit)

    def snapshot(self, epoch: int | None) -> Any:
        """This component's state after exactly the inputs of epochs ``<= epoch`` (None: the
        dataflow is complete), as kind-specific Python values."""
        raise NotImplementedError

    def release(self, limit: int | None) -> None:
        """The snapshot is taken: let inputs up to ``limit`` through."""
        if self.gate is not None:
            self.gate.release(limit)

    def commit(self, epoch: int) -> None:
        """The checkpoint of ``epoch`` is durable (the second phase of a two-phase commit)."""


class KeyedState(Component):
    """Keyed state of an operator: ``snapshot()`` returns a dict ``{key: value}`` routed by
    ``route(key)``, or a ``pyarrow.Table`` routed by its integer column named ``route``;
    ``restore(state)`` gets, on each worker, the entries (or rows) whose route modulo the
    number of workers is the worker's index, so a resumed job may have another worker count.
    """

    kind = "keyed"

    def __init__(self, scope: ScopeCore, name: str, operator: int,
                 snapshot: Callable[[], Any], restore: Callable[[Any], None],
                 route: Route | str) -> None:
        super().__init__(scope, name, operator, gated=True)
        self._snapshot = snapshot
        self._restore = restore
        self.route = route

    def restore(self, state: Any) -> None:
        self._restore(state)

    def snapshot(self, epoch: int | None) -> Any:
        state = self._snapshot()
        if isinstance(self.route, str):
            if not hasattr(state, "schema") or self.route not in state.schema.names:
                raise TypeError(f"operator {self.name!r}: snapshot() must return a pyarrow "
                                f"Table with a column {self.route!r} (its route), got "
                                f"{type(state).__name__}")
        elif not isinstance(state, dict):
            raise TypeError(f"operator {self.name!r}: snapshot() must return a dict "
                            f"{{key: value}}, got {type(state).__name__}")
        return state


class RecoveryScope(ScopeCore[S]):
    """``recoverable``: the opt-in of operators with keyed state to epoch checkpoints."""

    def recoverable(self, info: Any, snapshot: Callable[[], Any],
                    restore: Callable[[Any], None],
                    route: Route | str = stable_hash) -> None:
        """Let checkpoints hold the keyed state of the operator ``info`` describes (call it in
        the operator's constructor, with the ``info`` it gets or ``builder.operator_info()``).

        ``snapshot()`` returns the state as a dict ``{key: value}`` (keys live on worker
        ``route(key) % peers``, :func:`~sparktimely.stable_hash` by default) or as a
        ``pyarrow.Table`` with an integer column named by ``route`` (a string). It is called
        once per checkpoint, when the inputs of epochs up to the checkpoint's epoch are
        processed everywhere and none of later epochs has been shown to the operator: the
        runtime holds those back until the snapshot is taken. ``restore(state)`` is called
        once, before any input, when a run resumes; it gets the dict entries (or Table rows)
        this worker owns, whatever the number of workers that wrote them. Without checkpoints
        neither is ever called, and nothing is held back.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     def ctor(cap, info):
        ...         cap.drop()
        ...         totals = {}
        ...         scope.recoverable(info, lambda: totals, totals.update)
        ...         def logic(input, output):
        ...             for t, batch in input:
        ...                 for key, n in batch:
        ...                     totals[key] = totals.get(key, 0) + n
        ...                 output.session(t).give_batch(sorted(totals.items()))
        ...         return logic
        ...     pairs = scope.to_stream([("a", 1), ("b", 2), ("a", 3)])
        ...     return pairs.unary(st.Exchange(lambda kv: st.stable_hash(kv[0])), "Totals",
        ...                        ctor).capture()
        >>> st.example(build).extract()
        [(0, [('a', 4), ('b', 2)])]
        """
        KeyedState(self, f"{info.name}#{info.index}", info.index, snapshot, restore, route)
