"""``sparktimely.Stream``: the stream class, assembled from one mixin per operator family.

Each family lives in its own module (as timely's ``operators/core/*``) as a mixin class
over :class:`~sparktimely.dataflow.stream.StreamCore`; this module only lists them. To add
an operator, add a method to its family's mixin (or a new mixin module, listed below).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..dataflow.stream import StreamCore
from .aggregation import AggregationOps
from .arrow import ArrowOps
from .basic import BasicOps
from .capture import CaptureOps
from .concat import ConcatOps
from .enterleave import EnterLeaveOps
from .exchange import ExchangeOps
from .feedback import FeedbackOps
from .sinks import SinkOps
from .timing import TimingOps
from .windowing.operator import WindowOps

if TYPE_CHECKING:
    from .scope import Scope


class Stream(BasicOps, ConcatOps, ExchangeOps, TimingOps, AggregationOps, CaptureOps,
             FeedbackOps, EnterLeaveOps, ArrowOps, SinkOps, WindowOps, StreamCore):
    """A stream of timestamped batches produced by one operator output, in one scope.

    >>> import sparktimely as st
    >>> st.example(lambda scope: scope.to_stream(range(5)).filter(lambda x: x % 2)
    ...            .map(lambda x: x * 10).capture()).extract()
    [(0, [10, 30])]
    """

    __slots__ = ()

    scope: "Scope"
