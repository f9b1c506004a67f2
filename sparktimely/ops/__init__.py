"""The operator library: one module per family of operators, each a mixin of methods that
:mod:`sparktimely.ops.stream` assembles into ``Stream`` (and :mod:`sparktimely.ops.scope`
into ``Scope``), as timely's extension traits add methods to its streams and scopes.

>>> import sparktimely as st
>>> st.example(lambda scope: scope.to_stream([1, 2]).map(lambda x: -x).capture()).extract()
[(0, [-2, -1])]
"""
from .basic import Err, Ok
from .capture import Capture, EventLink, EventReader, EventWriter, replay_into
from .input import UnorderedHandle
from .scope import Scope
from .sequence import Sequencer
from .stream import Stream

__all__ = ["Capture", "Err", "EventLink", "EventReader", "EventWriter", "Ok", "Scope",
           "Sequencer", "Stream", "UnorderedHandle", "replay_into"]
