"""Sources, sinks and epoch checkpoints: recovery after any failure.

- ``scope.input_from_source(source, name)`` and ``stream.output_to(sink, name)`` (operators
  of :mod:`sparktimely.ops`) read partitioned sources and write sinks, as the protocols
  :class:`Source` (with its :class:`SourcePart`) and :class:`Sink` (with its
  :class:`SinkPart`) describe them; :class:`FileSource` and :class:`DirectorySink` are the
  built-in ones.
- ``st.execute(..., checkpoint_dir=..., checkpoint_every=N)`` (or :func:`enable_checkpoints`
  in each worker) checkpoints every dataflow at each complete root epoch that is a multiple
  of ``N``, and resumes it from there: sources from their positions, stateful operators from
  their state, sinks without losing or repeating output. See
  :mod:`sparktimely.io.checkpoints`.

>>> import sparktimely as st
>>> st.io.FileSource is FileSource, st.RecoveryError is RecoveryError
(True, True)
>>> callable(st.io.committed_epochs)
True
"""
from ..ops.sinks import Sink, SinkPart
from ..ops.sources import Source, SourcePart
from .checkpoints import Checkpoints, RecoveryError, committed_epochs, enable_checkpoints
from .files import DirectorySink, FileSource

__all__ = ["Checkpoints", "DirectorySink", "FileSource", "RecoveryError", "Sink", "SinkPart",
           "Source", "SourcePart", "committed_epochs", "enable_checkpoints"]
