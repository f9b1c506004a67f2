"""Capabilities: the right to produce output at a time (timely's central rule).

An operator may send data at time ``t`` on an output only while it holds a capability for
a time ``<= t`` on that output, or while it is processing an input batch at ``t``. Every live
capability holds back the frontier of everything downstream; dropping it (explicitly, or by
letting it go out of scope) lets the frontier advance.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Iterator

from ..errors import short_repr
from ..progress.timestamp import TimeKind, Timestamp, advance, less_equal, relation

if TYPE_CHECKING:
    from .builder import Operator
    from .ports import OutputPort


def not_earlier(kind: "TimeKind", time: Timestamp, later: Timestamp, where: str = "") -> bool:
    """Whether ``later`` is at or after ``time`` (a time of the scope's ``kind``); a
    ``later`` of another type is a TypeError naming its type and ``where`` (comparing the two
    would fail inside the times' own methods).

    >>> from sparktimely.progress.timestamp import Product, TimeKind
    >>> not_earlier(TimeKind(int), 3, 5), not_earlier(TimeKind(int), 3, 2)
    (True, False)
    >>> not_earlier(TimeKind(int), 3, Product(5, 0))
    Traceback (most recent call last):
    TypeError: time Product(5, 0) is not of this scope's type (like 0)
    """
    try:
        return less_equal(time, later)
    except (AttributeError, TypeError):
        kind.check(later, where)
        raise


def require_output_index(place: str, output: object) -> None:
    """A TypeError naming ``place`` unless ``output`` is an output's index: an int (or
    anything with ``__index__``, as numpy's ints), not a bool. Comparing it with the number of
    outputs would fail inside Python's own comparison, naming neither.

    >>> require_output_index("delayed_for_output", "1")
    Traceback (most recent call last):
    ...
    TypeError: delayed_for_output: output must be an int (an output index), got '1' (str)
    """
    if isinstance(output, bool) or not hasattr(type(output), "__index__"):
        raise TypeError(f"{place}: output must be an int (an output index), got "
                        f"{short_repr(output)} ({type(output).__name__})")


class CapabilityError(RuntimeError):
    """A capability was used against timely's rules (after drop, or to go back in time).

    >>> import sparktimely as st
    >>> def ctor(cap, info):
    ...     def logic(output):
    ...         later = cap.delayed(5)
    ...         cap.drop()
    ...         try:
    ...             later.delayed(3)
    ...         except st.CapabilityError as error:
    ...             print(error)
    ...         later.drop()
    ...     return logic
    >>> _ = st.example(lambda scope: st.source(scope, "Back", ctor).probe())
    cannot delay capability at time 5 to 3: 3 is earlier than 5; a capability moves only to times at or after its own
    """


class Capability:
    """Permission to send at ``time`` or later on one output of an operator.

    ``delayed(t)`` returns a new capability for a later time, ``downgrade(t)`` moves this one
    forward, ``drop()`` releases it (so does losing the last reference to it; note that a
    stored exception's traceback keeps the variables of its frames, capabilities included,
    alive). ``try_delayed`` and ``try_downgrade`` report a time they cannot reach instead of
    raising.

    >>> import sparktimely as st
    >>> def ctor(cap, info):
    ...     def logic(output):
    ...         output.session(cap.delayed(2)).give("at 2")
    ...         cap.downgrade(3)
    ...         print(cap.try_delayed(1), cap.try_downgrade(1), cap.try_downgrade(4), cap)
    ...         output.session(cap).give("at 4")
    ...         cap.drop()
    ...     return logic
    >>> st.example(lambda scope: st.source(scope, "Caps", ctor).capture()).extract()
    None False True Capability(4)
    [(2, ['at 2']), (4, ['at 4'])]
    """

    __slots__ = ("_time", "_port", "_live", "__weakref__")

    def __init__(self, time: Timestamp, port: "OutputPort", initial: bool = False) -> None:
        port.kind.check(time)
        self._time = time
        self._port = port
        self._live = True
        port.held += 1
        if initial:             # the one an operator's constructor gets: alike at every worker
            port.dataflow.acquire_initial(port.location, time)
        else:
            port.dataflow.update(port.location, time, 1)

    @property
    def time(self) -> Timestamp:
        """The time this capability allows sending at.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     print(cap.time, cap.delayed(3).time)
        ...     cap.drop()
        ...     return lambda output: None
        >>> _ = st.example(lambda scope: st.source(scope, "Time", ctor).probe())
        0 3
        """
        self._check_live("read the time of")
        return self._time

    def _check_live(self, action: str) -> None:
        if not self._live:
            raise CapabilityError(
                f"cannot {action} the capability for time {self._time!r}: it was dropped")

    def _check_not_before(self, time: Timestamp, action: str) -> None:
        if not not_earlier(self._port.kind, self._time, time):
            raise CapabilityError(
                f"cannot {action} capability at time {self._time!r} to {time!r}: {time!r} is "
                f"{relation(time, self._time)} {self._time!r}; a capability moves only to "
                f"times at or after its own")

    def delayed(self, t: Timestamp) -> "Capability":
        """A new capability for ``time``, which must not be earlier than this one's.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     later = cap.delayed(2)
        ...     cap.drop()
        ...     def logic(output):
        ...         output.session(later).give("at 2")
        ...         later.drop()
        ...     return logic
        >>> st.example(lambda scope: st.source(scope, "Later", ctor).capture()).extract()
        [(2, ['at 2'])]
        """
        self._check_live("delay")
        self._check_not_before(t, "delay")
        return Capability(t, self._port)

    def try_delayed(self, time: Timestamp) -> "Capability | None":
        """A new capability for ``time``, or None if ``time`` is not at or after this one's.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     cap.downgrade(2)
        ...     print(cap.try_delayed(1), cap.try_delayed(5))
        ...     cap.drop()
        ...     return lambda output: None
        >>> _ = st.example(lambda scope: st.source(scope, "TryDelayed", ctor).probe())
        None Capability(5)
        """
        self._check_live("delay")
        if not not_earlier(self._port.kind, self._time, time):
            return None
        return Capability(time, self._port)

    def try_downgrade(self, time: Timestamp) -> bool:
        """Move this capability forward to ``time`` if it is not earlier; True if it did.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     print(cap.try_downgrade(3), cap.try_downgrade(1), cap)
        ...     cap.drop()
        ...     return lambda output: None
        >>> _ = st.example(lambda scope: st.source(scope, "TryDowngrade", ctor).probe())
        True False Capability(3)
        """
        self._check_live("downgrade")
        if not not_earlier(self._port.kind, self._time, time):
            return False
        self.downgrade(time)
        return True

    def downgrade(self, t: Timestamp) -> None:
        """Move this capability forward to ``time``.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     def logic(output):
        ...         cap.downgrade(4)
        ...         output.session(cap).give("at 4")
        ...         cap.drop()
        ...     return logic
        >>> st.example(lambda scope: st.source(scope, "Downgrade", ctor).capture()).extract()
        [(4, ['at 4'])]
        """
        old = self._time
        # a live capability moved from an int to a later int needs no check: ``old`` passed
        # its kind's, so a later int does too
        if not (t.__class__ is int and old.__class__ is int and t >= old and self._live):
            self._check_live("downgrade")
            self._check_not_before(t, "downgrade")
            if t != old:
                self._port.kind.check(t)
        if t != old:
            port = self._port
            update = port.dataflow.update
            update(port.location, t, 1)
            update(port.location, old, -1)
            self._time = t

    def drop(self) -> None:
        """Release the capability; using it afterwards raises CapabilityError.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     cap.drop()                          # nothing to send: the source can complete
        ...     print(cap)
        ...     return lambda output: None
        >>> st.example(lambda scope: st.source(scope, "Drop", ctor).probe()).done()
        Capability(0, dropped)
        True
        """
        if self._live:
            self._live = False
            port = self._port
            port.held -= 1
            port.dataflow.update(port.location, self._time, -1)

    def __del__(self) -> None:
        if getattr(self, "_live", False):
            self.drop()

    def __copy__(self) -> "Capability":
        """A new capability for the same time (timely's ``Capability::clone``), counted
        as one more: ``copy.copy`` and ``copy.deepcopy`` give one; dropping either leaves
        the other.

        >>> import copy, sparktimely as st
        >>> def ctor(cap, info):
        ...     kept = copy.copy(cap.delayed(5))        # the delayed one is dropped at once
        ...     cap.drop()
        ...     def logic(output):
        ...         output.session(kept).give("at 5")
        ...         kept.drop()
        ...     return logic
        >>> st.example(lambda scope: st.source(scope, "Copy", ctor).capture()).extract()
        [(5, ['at 5'])]
        """
        self._check_live("copy")
        return Capability(self._time, self._port)

    def __deepcopy__(self, memo: dict) -> "Capability":
        return self.__copy__()

    def __reduce__(self) -> tuple:
        raise TypeError(f"a capability cannot be pickled: it holds time {self._time!r} on "
                        f"an output of this worker's dataflow, which another process has "
                        f"not got; send the time instead")

    def __repr__(self) -> str:
        state = "" if self._live else ", dropped"
        return f"Capability({self._time!r}{state})"


class InputCapability:
    """The time of an input batch being processed, usable to send output at that time
    while the operator's logic that received the batch runs (afterwards the time may be
    complete: using it then raises CapabilityError). ``retain()`` turns it into a
    :class:`Capability` that outlives the batch.

    >>> import sparktimely as st
    >>> def ctor(cap, info):
    ...     cap.drop()
    ...     def logic(input, output):
    ...         for cap, batch in input:
    ...             output.session(cap).give_batch(batch)            # at the batch's time
    ...             output.session(cap.delayed(cap.time + 1)).give(len(batch))
    ...     return logic
    >>> st.example(lambda s: s.to_stream("ab").unary(st.Pipeline, "Next", ctor)
    ...            .capture()).extract()
    [(0, ['a', 'b']), (1, [2])]
    """

    __slots__ = ("time", "_outputs", "_summaries", "_operator", "_activation")

    def __init__(self, time: Timestamp, outputs: list, summaries: list[list],
                 operator: "Operator") -> None:
        self.time = time
        self._outputs = outputs
        self._summaries = summaries     # per output: path summaries from this input
        self._operator = operator       # the Operator whose logic received the batch
        self._activation = operator.activations

    def _check_current(self, action: str) -> None:
        """Raise CapabilityError once the logic that received this batch has returned."""
        if self._operator.activations != self._activation:
            raise CapabilityError(
                f"cannot {action} the input capability for time {self.time!r}: its batch "
                f"was received in an earlier run of the operator's logic, and the time may "
                f"be complete since; retain() it while the batch is processed to keep it")

    def _earliest_allowed(self, output: int) -> list[Timestamp]:
        """The times this input's data may produce on ``output`` (empty: not connected)."""
        if not 0 <= output < len(self._outputs):
            raise CapabilityError(f"operator has no output {output}")
        return [advance(self.time, summary) for summary in self._summaries[output]]

    def _check_allows(self, time: Timestamp, output: int) -> None:
        """Raise CapabilityError unless this input's data may produce ``time`` (not earlier
        than this capability's) on ``output``. The identity summary (0, the default
        connection) allows every such time: no summary is advanced then."""
        summaries = self._summaries
        if 0 <= output < len(summaries) and 0 in summaries[output]:
            return
        allowed = self._earliest_allowed(output)
        if not allowed:
            raise CapabilityError(f"this input is not connected to output {output}")
        if not any(less_equal(t, time) for t in allowed):
            raise CapabilityError(
                f"input capability at time {self.time!r} cannot send at {time!r} on output "
                f"{output}: its path summary allows {allowed[0]!r} at the earliest")

    def retain(self) -> Capability:
        """A capability at this time for output 0.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     cap.drop()
        ...     def logic(input, output):
        ...         for cap, batch in input:
        ...             print(cap.retain())         # a Capability: it may outlive the batch
        ...     return logic
        >>> _ = st.example(lambda s: s.to_stream("ab").unary(st.Pipeline, "Retain", ctor).probe())
        Capability(0)
        """
        return self.retain_for_output(0)

    def retain_for_output(self, output: int) -> Capability:
        """A capability at this time for output ``output``.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     cap.drop()
        ...     def logic(input, output):
        ...         for cap, batch in input:
        ...             print(cap.retain_for_output(0))
        ...     return logic
        >>> _ = st.example(lambda s: s.to_stream("ab").unary(st.Pipeline, "Retain", ctor).probe())
        Capability(0)
        """
        require_output_index("retain_for_output", output)
        return self._delayed_for_output(self.time, output, "retain")

    def delayed(self, t: Timestamp) -> Capability:
        """A capability for ``time`` (not earlier than this batch's time) for output 0.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     cap.drop()
        ...     def logic(input, output):
        ...         for cap, batch in input:
        ...             output.session(cap.delayed(3)).give_batch(batch)
        ...     return logic
        >>> st.example(lambda s: s.to_stream("ab").unary(st.Pipeline, "Later", ctor)
        ...            .capture()).extract()
        [(3, ['a', 'b'])]
        """
        return self.delayed_for_output(t, 0)

    def delayed_for_output(self, time: Timestamp, output: int) -> Capability:
        """A capability for ``time`` on output ``output``.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     cap.drop()
        ...     def logic(input, output):
        ...         for cap, batch in input:
        ...             print(cap.delayed_for_output(2, 0))
        ...             try:
        ...                 cap.delayed_for_output(2, 1)
        ...             except st.CapabilityError as error:
        ...                 print(error)
        ...     return logic
        >>> _ = st.example(lambda s: s.to_stream("ab").unary(st.Pipeline, "Later", ctor).probe())
        Capability(2)
        operator has no output 1
        """
        require_output_index("delayed_for_output", output)
        return self._delayed_for_output(time, output, "delay")

    def _delayed_for_output(self, time: Timestamp, output: int, call: str) -> Capability:
        """:meth:`delayed_for_output`, its errors naming ``call`` (``delay``, ``retain``)."""
        self._check_current(call)
        if not 0 <= output < len(self._outputs):
            raise CapabilityError(f"operator has no output {output}")
        if not not_earlier(self._outputs[output].kind, self.time, time):
            raise CapabilityError(
                f"cannot delay input capability at time {self.time!r} to {time!r}: {time!r} "
                f"is {relation(time, self.time)} {self.time!r}; a capability moves only to "
                f"times at or after its own")
        self._check_allows(time, output)
        return Capability(time, self._outputs[output])

    def __repr__(self) -> str:
        return f"InputCapability({self.time!r})"


class CapabilitySet:
    """A set of capabilities (for one output) that can be downgraded to a frontier.

    >>> import sparktimely as st
    >>> def ctor(capability, info):
    ...     held = st.CapabilitySet([capability])
    ...     def logic(output):
    ...         for time in (2, 4):
    ...             output.session(held.delayed(time)).give(time * 10)
    ...         held.downgrade([5])        # keep only the right to send at 5 or later
    ...         held.drop()
    ...     return logic
    >>> st.example(lambda scope: st.source(scope, "Held", ctor).capture()).extract()
    [(2, [20]), (4, [40])]
    """

    def __init__(self, capabilities: list[Capability] | None = None) -> None:
        self._caps: list[Capability] = list(capabilities or [])
        for capability in self._caps[1:]:
            self._check_output(capability)

    def insert(self, capability: Capability) -> None:
        """Add a capability unless one at a time less or equal is already held. A set holds
        capabilities of one output: one of another output is a CapabilityError (timely's
        set tells them apart; here a session would refuse it later, far from the cause).

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     held = st.CapabilitySet()
        ...     for time in (3, 1, 2):              # 1 replaces 3; 2 is already allowed by 1
        ...         held.insert(cap.delayed(time))
        ...     print(list(held))
        ...     held.drop()
        ...     cap.drop()
        ...     return lambda output: None
        >>> _ = st.example(lambda scope: st.source(scope, "Insert", ctor).probe())
        [Capability(1)]
        """
        self._check_output(capability)
        if not any(less_equal(c.time, capability.time) for c in self._caps):
            self._caps = [c for c in self._caps if not less_equal(capability.time, c.time)]
            self._caps.append(capability)

    def _check_output(self, capability: Capability) -> None:
        if self._caps and capability._port is not self._caps[0]._port:
            raise CapabilityError(
                f"a CapabilitySet holds capabilities of one output: the capability for time "
                f"{capability.time!r} is for another output than those it holds (keep a set "
                f"per output)")

    def delayed(self, time: Timestamp) -> Capability:
        """A capability for ``time`` derived from a held one at a time ``<= time``.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     held = st.CapabilitySet([cap.delayed(2)])
        ...     cap.drop()
        ...     print(held.delayed(5), list(held))
        ...     held.drop()
        ...     return lambda output: None
        >>> _ = st.example(lambda scope: st.source(scope, "Delayed", ctor).probe())
        Capability(5) [Capability(2)]
        """
        return self._derived(time, f"CapabilitySet.delayed({time!r})")

    def _derived(self, time: Timestamp, call: str) -> Capability:
        for cap in self._caps:
            if not_earlier(cap._port.kind, cap.time, time, call):
                return cap.delayed(time)
        raise CapabilityError(f"{call}: no capability in the set allows time {time!r}: it "
                              f"holds {[cap.time for cap in self._caps] or 'none'}")

    def downgrade(self, frontier: Iterable[Timestamp]) -> None:
        """Replace the held capabilities by ones for the times of ``frontier``.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     held = st.CapabilitySet([cap])
        ...     held.downgrade([3])
        ...     print(list(held), cap)
        ...     held.drop()
        ...     return lambda output: None
        >>> _ = st.example(lambda scope: st.source(scope, "Downgrade", ctor).probe())
        [Capability(3)] Capability(0, dropped)
        """
        times = list(frontier)
        new = [self._derived(time, f"CapabilitySet.downgrade({times!r})") for time in times]
        for cap in self._caps:
            cap.drop()
        self._caps = new

    def first(self) -> Capability | None:
        """A held capability, or None.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     held = st.CapabilitySet([cap])
        ...     print(held.first(), st.CapabilitySet().first())
        ...     held.drop()
        ...     return lambda output: None
        >>> _ = st.example(lambda scope: st.source(scope, "First", ctor).probe())
        Capability(0) None
        """
        return self._caps[0] if self._caps else None

    def is_empty(self) -> bool:
        """True if no capability is held.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     held = st.CapabilitySet([cap])
        ...     print(held.is_empty(), st.CapabilitySet().is_empty())
        ...     held.drop()
        ...     return lambda output: None
        >>> _ = st.example(lambda scope: st.source(scope, "Empty", ctor).probe())
        False True
        """
        return not self._caps

    def drop(self) -> None:
        """Release every held capability.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     held = st.CapabilitySet([cap.delayed(1), cap.delayed(2)])
        ...     cap.drop()
        ...     held.drop()                         # nothing is held: the source can complete
        ...     print(len(held))
        ...     return lambda output: None
        >>> st.example(lambda scope: st.source(scope, "Drop", ctor).probe()).done()
        0
        True
        """
        for cap in self._caps:
            cap.drop()
        self._caps = []

    def __iter__(self) -> Iterator[Capability]:
        return iter(list(self._caps))

    def __len__(self) -> int:
        return len(self._caps)
