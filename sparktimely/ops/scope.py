"""``sparktimely.Scope``: the scope class, assembled from the mixins of the operators that
start streams (inputs, loops, concatenation) over
:class:`~sparktimely.dataflow.scope.ScopeCore`. Its operators produce
:class:`~sparktimely.ops.stream.Stream`."""
from __future__ import annotations

from ..dataflow.scope import ScopeCore
from .concat import ConcatScope
from .feedback import FeedbackScope
from .input import InputScope
from .recovery import RecoveryScope
from .sources import SourceScope
from .stream import Stream


class Scope(InputScope[Stream], FeedbackScope[Stream], ConcatScope[Stream], SourceScope[Stream],
            RecoveryScope[Stream], ScopeCore[Stream]):
    """A place to build operators; all of a scope's streams share its timestamp type.

    >>> import sparktimely as st
    >>> st.example(lambda scope: scope.to_stream([scope.index, scope.peers]).capture()).extract()
    [(0, [0, 1])]
    """

    stream_class = Stream

