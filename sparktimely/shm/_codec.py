"""Payload encodings for the rings: pickle protocol 5 with out-of-band buffers, and Arrow IPC.

Encoders return a list of buffers that ``Endpoint.send`` writes contiguously, so nothing is
joined in Python: numpy arrays and Arrow column buffers are copied once, straight into shared
memory. Arrow columns are decoded in place: they are views of the message (immutable, as
every Arrow array) and hold its ring space until they die. A pickle's out-of-band buffers
(numpy arrays) are copied out of the message: the receiver owns what it gets, writable as
the sender's array was, as a record that stays on its worker is, and keeping it holds no
ring space.

Layout: an 8-byte header (u32 kind, u32 count). Pickle continues with count+1 u64 lengths
(stream, then each out-of-band buffer) and the stream and the buffers, each padded to 8 bytes.
Arrow continues with the IPC stream of one batch. A caller may put its own header in front;
keep it a multiple of 8 bytes so arrays stay aligned, and slice it off before decoding.
"""
from __future__ import annotations

import pickle
import struct
from typing import Any

import pyarrow as pa

PICKLE, ARROW = 1, 2
_HEADER = struct.Struct("<II")
_PAD = bytes(8)


def byte_view(part: Any) -> memoryview:
    """A flat unsigned-byte memoryview of any C-contiguous buffer.

    >>> import numpy as np
    >>> byte_view(np.arange(2, dtype=np.int16)).tolist()
    [0, 0, 1, 0]
    """
    view = memoryview(part)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def encode_pickle(obj: Any) -> list:
    """Pickle ``obj`` with protocol 5, keeping contiguous buffers (numpy arrays) out of band.

    >>> import numpy as np
    >>> from sparktimely.shm import decode_pickle, encode_pickle
    >>> parts = encode_pickle(("batch", np.arange(4)))
    >>> tag, array = decode_pickle(b"".join(bytes(p) for p in parts))
    >>> tag, array.tolist(), array.flags.writeable
    ('batch', [0, 1, 2, 3], True)
    """
    return frame_pickle(*pickle_out_of_band(obj))


def pickle_out_of_band(obj: Any) -> tuple[bytes, list[memoryview]]:
    """``(stream, buffers)``: ``obj`` pickled with protocol 5, its contiguous buffers (numpy
    arrays) left out of the stream. A caller that sends a message without buffers as the
    bare stream looks at ``buffers`` first, and frames the rest with :func:`frame_pickle`.

    >>> import numpy as np
    >>> from sparktimely.shm import pickle_out_of_band
    >>> [len(b) for b in pickle_out_of_band(("batch", np.arange(4, dtype=np.int64)))[1]]
    [32]
    >>> pickle_out_of_band([1, 2])[1]
    []
    """
    buffers: list[memoryview] = []

    def out_of_band(pb: pickle.PickleBuffer) -> bool:
        try:
            buffers.append(pb.raw())
        except BufferError:  # not contiguous: let pickle copy it in-band
            return True
        return False

    return pickle.dumps(obj, protocol=5, buffer_callback=out_of_band), buffers


def frame_pickle(stream: bytes, buffers: list[memoryview]) -> list:
    """The parts :func:`encode_pickle` sends for a pickle ``stream`` and its out-of-band
    ``buffers`` (from :func:`pickle_out_of_band`).

    >>> import numpy as np
    >>> from sparktimely.shm import decode_pickle, frame_pickle, pickle_out_of_band
    >>> parts = frame_pickle(*pickle_out_of_band({"n": np.arange(3)}))
    >>> decode_pickle(b"".join(bytes(p) for p in parts))["n"].tolist()
    [0, 1, 2]
    """
    lengths = [len(stream)] + [b.nbytes for b in buffers]
    parts: list = [_HEADER.pack(PICKLE, len(buffers)) + struct.pack(f"<{len(lengths)}Q", *lengths)]
    for data, n in zip([stream, *buffers], lengths):
        parts.append(data)
        if n % 8:
            parts.append(_PAD[:8 - n % 8])
    return parts


def decode_pickle(message: Any) -> Any:
    """Inverse of ``encode_pickle``; out-of-band arrays are writable copies, independent of
    ``message``.

    >>> from sparktimely.shm import decode_pickle, encode_pickle
    >>> decode_pickle(b"".join(bytes(p) for p in encode_pickle({"a": [1, 2]})))
    {'a': [1, 2]}
    """
    view = byte_view(message)
    kind, count = _HEADER.unpack_from(view)
    if kind != PICKLE:
        raise ValueError(f"not a pickle message (kind {kind})")
    lengths = struct.unpack_from(f"<{count + 1}Q", view, _HEADER.size)
    off, parts = _HEADER.size + 8 * (count + 1), []
    for n in lengths:
        parts.append(view[off:off + n])
        off += (n + 7) & -8
    return pickle.loads(parts[0], buffers=[bytearray(part) for part in parts[1:]])


class _Chunks:
    """Write-only file object for ``pa.PythonFile``: keeps what is written, without copying the
    Arrow body buffers (they arrive as ``pa.Buffer``); small metadata writes are coalesced."""
    closed = False

    def __init__(self) -> None:
        self.parts: list = [_HEADER.pack(ARROW, 0)]

    def write(self, data: Any) -> int:
        if isinstance(data, bytes) and isinstance(self.parts[-1], bytes):
            self.parts[-1] += data
        else:
            self.parts.append(data)
        return len(data)

    def flush(self) -> None:
        pass


def encode_arrow(batch: pa.RecordBatch) -> list:
    """The batch as an Arrow IPC stream, as a list of buffers referencing the batch's memory.

    >>> import pyarrow as pa
    >>> from sparktimely.shm import decode_arrow, encode_arrow
    >>> batch = pa.record_batch({"x": [1, 2, 3]})
    >>> decode_arrow(b"".join(bytes(p) for p in encode_arrow(batch))).equals(batch)
    True
    """
    sink = _Chunks()
    with pa.ipc.new_stream(pa.PythonFile(sink, mode="w"), batch.schema) as writer:
        writer.write_batch(batch)
    return sink.parts


def decode_arrow(message: Any) -> pa.RecordBatch:
    """Inverse of ``encode_arrow``, zero-copy: the batch's buffers point into ``message``.

    >>> import pyarrow as pa
    >>> from sparktimely.shm import decode_arrow, encode_arrow
    >>> message = b"".join(bytes(p) for p in encode_arrow(pa.record_batch({"x": ["a"]})))
    >>> decode_arrow(message).column("x").to_pylist()
    ['a']
    """
    buf = pa.py_buffer(message)
    kind, _ = _HEADER.unpack_from(buf)
    if kind != ARROW:
        raise ValueError(f"not an Arrow message (kind {kind})")
    with pa.ipc.open_stream(buf.slice(_HEADER.size)) as reader:
        return reader.read_next_batch()


def decode(message: Any) -> Any:
    """Decode a message made by ``encode_pickle`` or ``encode_arrow``.

    >>> import pyarrow as pa
    >>> from sparktimely.shm import decode, encode_arrow, encode_pickle
    >>> decode(b"".join(bytes(p) for p in encode_pickle([1, 2])))
    [1, 2]
    >>> decode(b"".join(bytes(p) for p in encode_arrow(pa.record_batch({"x": [7]})))).num_rows
    1
    """
    return decode_arrow(message) if message_kind(message) == ARROW else decode_pickle(message)


def message_kind(message: Any) -> int:
    """``PICKLE`` or ``ARROW``.

    >>> from sparktimely.shm import ARROW, PICKLE, encode_pickle, message_kind
    >>> message_kind(b"".join(bytes(p) for p in encode_pickle(None))) == PICKLE
    True
    """
    return _HEADER.unpack_from(message)[0]
