"""Shared-memory transport between the worker processes of one host.

Moves byte messages between worker indexes and knows nothing about dataflow:

- ``Segment``: a named shared-memory file (/dev/shm, or a file-backed fallback) with
  job-prefixed names (``job_prefix``; ``run_prefix`` with ``$SPARKTIMELY_SHM_TAG``),
  ``segments``/``sweep``/``sweep_stale`` listing and cleanup (in ``segment_dirs``), and
  pinning for zero-copy views.
- ``Mesh``/``Endpoint``: n*n single-producer single-consumer rings plus a futex doorbell per
  worker; non-blocking ``send``, ``recv`` (zero-copy for large messages), ``park``.
- ``encode_pickle``/``encode_arrow`` and their decoders: payloads as buffer lists written into
  the ring without joining, decoded in place (``encode_pickle`` is ``pickle_out_of_band``
  then ``frame_pickle``, for callers that look at the buffers in between).

Typical use: ``mesh = Mesh.create(n)`` in the parent (a context manager that unlinks every
segment), ``ep = mesh.endpoint(i)`` in worker i, then ``ep.send(j, encode_arrow(batch))``,
``for src, msg in ep.recv(): decode(msg)``, and ``ep.park(timeout)`` when idle.
"""
from ._codec import (ARROW, PICKLE, byte_view, decode, decode_arrow, decode_pickle,
                     encode_arrow, encode_pickle, frame_pickle, message_kind,
                     pickle_out_of_band)
from ._mesh import Endpoint, Mesh, RingGone, check_workers_per_host
from ._segment import (NoSpaceError, Segment, fallback_dir, job_prefix, run_prefix, segment_dirs,
                       segments, sweep, sweep_stale)

for _public in (byte_view, decode, decode_arrow, decode_pickle, encode_arrow, encode_pickle,
                frame_pickle, message_kind, pickle_out_of_band, Endpoint, Mesh, NoSpaceError,
                RingGone, Segment, check_workers_per_host, fallback_dir, job_prefix, run_prefix,
                segment_dirs, segments, sweep, sweep_stale):
    _public.__module__ = __name__       # public here; defined in the private modules

__all__ = ["ARROW", "PICKLE", "Endpoint", "Mesh", "NoSpaceError", "RingGone", "Segment",
           "byte_view", "check_workers_per_host", "decode", "decode_arrow", "decode_pickle",
           "encode_arrow", "encode_pickle", "fallback_dir", "frame_pickle", "job_prefix",
           "message_kind", "pickle_out_of_band", "run_prefix", "segment_dirs", "segments",
           "sweep", "sweep_stale"]
