"""Framing of the messages workers exchange: tuples as bytes.

A message is one pickle (protocol 5, out-of-band buffers), unless its last element is a
``pyarrow.RecordBatch``: then the rest is a small pickled header followed by the batch as
Arrow IPC, so columns are never pickled and are read back in place.
"""
from __future__ import annotations

import pickle
import struct
from typing import Any

import pyarrow

from ..shm import decode_arrow, decode_pickle, encode_arrow, encode_pickle

_PREFIX = struct.Struct("<II")      # header length (Arrow messages), body kind
_PICKLED, _ARROW = 0, 1
_PAD = bytes(8)


def encode(message: tuple) -> list:
    """The buffers of ``message``, ready for a transport to write contiguously."""
    if isinstance(message[-1], pyarrow.RecordBatch):
        header = pickle.dumps(message[:-1], protocol=5)
        pad = _PAD[:-len(header) % 8]
        return [_PREFIX.pack(len(header) + len(pad), _ARROW), header, pad,
                *encode_arrow(message[-1])]
    return [_PREFIX.pack(0, _PICKLED), *encode_pickle(message)]


def decode(data: Any) -> tuple:
    """Inverse of :func:`encode`; Arrow columns and pickled buffers are views of ``data``."""
    view = memoryview(data)
    header_length, body = _PREFIX.unpack_from(view)
    start = _PREFIX.size
    if body == _PICKLED:
        return decode_pickle(view[start:])
    header = pickle.loads(view[start:start + header_length])
    return header + (decode_arrow(view[start + header_length:]),)

