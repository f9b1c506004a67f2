"""Total-order broadcast among workers (timely's ``synchronization::Sequencer``)."""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..dataflow import OperatorBuilder, source
from ..dataflow.capability import Capability
from ..dataflow.channels import Broadcast
from ..dataflow.ports import OutputHandle
from ..errors import short_repr
from ..shm import pickle_out_of_band

if TYPE_CHECKING:
    from ..dataflow import WorkerCore as Worker
    from ..dataflow.scope import ScopeCore

class Sequencer:
    """Every worker sees every element pushed on any worker, all in the same order.

    Each worker builds its sequencer (a small dataflow of its own) at the same point of
    its program, like any dataflow. ``push(x)`` offers an element; ``next()`` returns the
    next element of the common sequence, or None while none is ready (step the worker to
    make progress); ``close()`` ends this worker's contributions (the sequencer's dataflow
    completes once every worker closed). Elements are ordered by the round in which they
    were pushed, then by worker index, then by the order of pushes. Every worker gets each
    element, so elements must be picklable at any worker count: ``push`` refuses one that
    is not (TypeError), also at one worker, where nothing would travel.

    >>> import sparktimely as st
    >>> def job(worker):
    ...     sequencer = st.Sequencer(worker)
    ...     sequencer.push(f"hello from {worker.index}")
    ...     sequencer.close()
    ...     worker.run()
    ...     return list(sequencer)
    >>> st.execute(job, workers=2)
    [['hello from 0', 'hello from 1'], ['hello from 0', 'hello from 1']]
    """

    def __init__(self, worker: "Worker", name: str = "Sequencer") -> None:
        self._outbox: list = []
        self._ready: deque = deque()
        self._pushed = 0
        self._closed = False
        self._name = name
        self._index = worker.index
        self._seen = [0]                  # the latest round received from any worker
        self._activate: Callable[[], None] = lambda: None
        worker.dataflow(self._build, name=name)

    def _build(self, scope: "ScopeCore") -> None:
        def ctor(capability: Capability, info: Any) -> Callable[[OutputHandle], None]:
            activator = scope.activator_for(info.address)
            self._activate = activator.activate

            def logic(output: OutputHandle) -> None:
                if self._outbox:
                    output.give_at(capability, self._outbox)
                    self._outbox = []
                if self._closed:
                    capability.drop()
                else:                                 # no later round waits for this one
                    capability.downgrade(max(capability.time + 1, self._seen[0] + 1))
            return logic
        pushed = source(scope, "SequencerSource", ctor)

        builder = OperatorBuilder("SequencerSink", scope)
        input = builder.new_input(pushed, Broadcast())
        arrived: dict[int, list] = {}

        def sink(capabilities: list[Capability]) -> Callable[[list], None]:
            def logic(frontiers: list) -> None:
                for cap, batch in input:
                    arrived.setdefault(cap.time, []).extend(batch)
                    if cap.time >= self._seen[0]:
                        self._seen[0] = cap.time
                        self._activate()      # let this worker's source move past it
                for time in sorted(t for t in arrived if not input.frontier.less_equal(t)):
                    self._ready.extend(x for _, _, x in sorted(arrived.pop(time),
                                                               key=lambda e: e[:2]))
            return logic
        builder.build(sink)

    def push(self, element: Any) -> None:
        """Offer ``element`` to the common sequence.

        ``element`` is pickled here, as the transport between workers pickles it, and
        refused with a TypeError if it cannot be (at every worker count, so a program that
        runs at one worker runs at many); a refused element is not counted and the
        sequencer stays usable.

        >>> import sparktimely as st, threading
        >>> def job(worker):
        ...     sequencer = st.Sequencer(worker)
        ...     try:
        ...         sequencer.push(threading.Lock())
        ...     except TypeError as error:
        ...         print(error)
        ...     sequencer.push("fine")
        ...     sequencer.close()
        ...     worker.run()
        ...     return list(sequencer)
        >>> st.execute_directly(job)  # doctest: +ELLIPSIS, +NORMALIZE_WHITESPACE
        Sequencer 'Sequencer' on worker 0 cannot take element <unlocked _thread.lock object
        at 0x...>: it cannot be pickled (cannot pickle '_thread.lock' object); elements must
        be picklable because every worker gets each one
        ['fine']
        """
        if self._closed:
            raise RuntimeError(f"Sequencer {self._name!r} on worker {self._index} cannot "
                               f"take element {short_repr(element)}: it was closed")
        try:        # what the transport does with it (its out-of-band buffers are not copied)
            pickle_out_of_band(element)
        except Exception as error:
            raise TypeError(f"Sequencer {self._name!r} on worker {self._index} cannot take "
                            f"element {short_repr(element)}: it cannot be pickled ({error}); "
                            f"elements must be picklable because every worker gets each "
                            f"one") from error
        self._outbox.append((self._index, self._pushed, element))
        self._pushed += 1
        self._activate()

    def next(self) -> Any:
        """The next element of the sequence, or None if none is ready yet.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     sequencer = st.Sequencer(worker)
        ...     sequencer.push("a")
        ...     first = sequencer.next()            # None: the worker has not run yet
        ...     sequencer.close()
        ...     worker.run()
        ...     return first, sequencer.next(), sequencer.next()
        >>> st.execute_directly(job)
        (None, 'a', None)
        """
        return self._ready.popleft() if self._ready else None

    def __iter__(self) -> Iterator[Any]:
        """The elements ready now, in order."""
        while self._ready:
            yield self._ready.popleft()

    def close(self) -> None:
        """Push nothing more from this worker; the sequencer completes once all closed.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     sequencer = st.Sequencer(worker)
        ...     sequencer.push("only")
        ...     sequencer.close()
        ...     worker.run()                        # returns: every worker closed its sequencer
        ...     return list(sequencer)
        >>> st.execute_directly(job)
        ['only']
        """
        self._closed = True
        self._activate()
