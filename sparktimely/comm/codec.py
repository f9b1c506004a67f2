"""Framing of the messages workers exchange: tuples as bytes.

A message is one pickle (protocol 5). Most messages (progress, control, batches of plain
Python objects) pickle without out-of-band buffers: they travel as the bare pickle, one
buffer with nothing to frame, pad or join (its first byte is pickle's PROTO opcode, which no
other framing starts with). Messages holding contiguous buffers (numpy arrays) keep them out
of band (``shm.frame_pickle``, behind an 8-byte prefix), so they are copied once, straight
into the transport. If the last element is a ``pyarrow.RecordBatch``, the rest is a small
pickled header followed by the batch as Arrow IPC, so columns are never pickled and are read
back in place.

>>> decode(b"".join(encode((1, 0, [((3, 5), 1)]))))
(1, 0, [((3, 5), 1)])
>>> import numpy as np
>>> kind, array = decode(b"".join(bytes(part) for part in encode(("batch", np.arange(3)))))
>>> kind, array.tolist()
('batch', [0, 1, 2])
"""
from __future__ import annotations

import pickle
import pickletools
import struct
from typing import Any, Iterable

import pyarrow

from ..shm import decode_arrow, decode_pickle, encode_arrow, frame_pickle, pickle_out_of_band

_PREFIX = struct.Struct("<II")      # body kind, header length (Arrow messages)
_PICKLED, _ARROW = 0, 1             # a first byte no pickle starts with
_PROTO = pickle.PROTO[0]            # the first byte of every pickle of protocol 2 and up
_PAD = bytes(8)


def encode(message: tuple) -> list:
    """The buffers of ``message``, ready for a transport to write contiguously."""
    if isinstance(message[-1], pyarrow.RecordBatch):
        header = pickle.dumps(message[:-1], protocol=5)
        pad = _PAD[:-len(header) % 8]
        return [_PREFIX.pack(_ARROW, len(header) + len(pad)), header, pad,
                *encode_arrow(message[-1])]
    stream, buffers = pickle_out_of_band(message)
    if not buffers:
        return [stream]
    return [_PREFIX.pack(_PICKLED, 0), *frame_pickle(stream, buffers)]


def encode_control(message: tuple) -> bytes:
    """A control message (progress, a dataflow's description, a worker's last word: plain
    Python values, no arrays to keep out of band) as one bare pickle, made without
    :func:`encode`'s look for buffers, which costs more than the pickle of a small message.

    >>> decode(encode_control((1, 0, [((3, 5), 1)])))
    (1, 0, [((3, 5), 1)])
    """
    return pickle.dumps(message, protocol=5)


def decode(data: Any) -> tuple:
    """Inverse of :func:`encode`; Arrow columns and pickled buffers are views of ``data``."""
    if data.__class__ is not bytes:
        data = memoryview(data).cast("B")       # views of a ring may hold signed bytes
    if data[0] == _PROTO:
        return pickle.loads(data)
    view = memoryview(data)
    body, header_length = _PREFIX.unpack_from(view)
    start = _PREFIX.size
    if body == _PICKLED:
        return decode_pickle(view[start:])
    header = pickle.loads(view[start:start + header_length])
    return header + (decode_arrow(view[start + header_length:]),)


class UndecodableMessage(Exception):
    """A message that arrived from worker ``source`` and cannot be decoded: ``error`` is
    why (a record's class that does not unpickle in this process, say), ``header`` the
    leading int values of a bare pickle, read without running any of it (a data message's
    tag, dataflow, input location and int time), as many as could be read."""

    def __init__(self, source: int, error: Exception, header: list[int]) -> None:
        super().__init__(source, error, header)
        self.source, self.error, self.header = source, error, header


def decode_all(arrived: Iterable[tuple[int, Any]]) -> list[tuple[int, tuple]]:
    """``(source, message)`` for each ``(source, data)`` that arrived; an
    :class:`UndecodableMessage` for the first that cannot be decoded.

    >>> try:
    ...     decode_all([(1, encode_control((0, 2, 5))), (2, b"\\x80\\x05junk")])
    ... except UndecodableMessage as bad:
    ...     print(bad.source, type(bad.error).__name__)
    2 UnpicklingError
    """
    received = []
    for source, data in arrived:
        try:
            received.append((source, decode(data)))
        except Exception as error:
            raise UndecodableMessage(source, error, _leading_ints(data)) from error
    return received


_INTS = {"BININT1", "BININT2", "BININT", "LONG1"}
_FRAMING = {"PROTO", "FRAME", "MARK", "MEMOIZE"}


def _leading_ints(data: Any) -> list[int]:
    """The int values a bare pickle starts with, before anything else (at most four)."""
    values: list[int] = []
    try:
        for opcode, argument, _ in pickletools.genops(bytes(data)):
            if opcode.name in _INTS and isinstance(argument, int) and len(values) < 4:
                values.append(argument)
            elif opcode.name not in _FRAMING:
                break
    except Exception:                 # not a bare pickle, or damaged: what was read so far
        pass
    return values
