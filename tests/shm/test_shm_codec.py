"""Payload encodings: pickle-5 with out-of-band numpy buffers and Arrow IPC read zero-copy
from the ring, in one process and across processes."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sparktimely.shm import (ARROW, PICKLE, Mesh, decode, decode_arrow, decode_pickle,
                             encode_arrow, encode_pickle, message_kind)


def joined(parts) -> bytes:
    return b"".join(memoryview(p).cast("B") for p in parts)


def test_pickle_keeps_arrays_out_of_band():
    obj = {"a": np.arange(100_000, dtype=np.int64), "f": np.ones((300, 7), order="F"),
           "strided": np.arange(1000)[::3], "words": ["x", 1, None]}
    parts = encode_pickle(obj)
    header, stream = parts[0], parts[1]
    assert int.from_bytes(header[4:8], "little") == 2  # "a" and "f" travel out of band
    assert len(stream) < 4000  # only the small strided array was copied into the stream
    message = np.frombuffer(joined(parts), np.uint8).copy()  # an 8-aligned buffer
    back = decode_pickle(message)
    assert back["a"].ctypes.data % 8 == 0 and back["f"].ctypes.data % 8 == 0
    assert back["words"] == ["x", 1, None]
    for key in ("a", "f", "strided"):
        np.testing.assert_array_equal(back[key], obj[key])
    assert back["f"].flags.f_contiguous
    assert message_kind(joined(parts)) == PICKLE and decode(joined(parts))["words"] == ["x", 1, None]


def test_pickle_numpy_through_the_ring_is_the_receivers_own_writable_copy():
    """As a record that stays on its worker, an array from another worker is writable, and
    keeping it holds none of the ring's space (the message is read in place, the array
    copied out of it once)."""
    arr = np.random.default_rng(0).random(50_000)
    with Mesh.create(2) as mesh, mesh.endpoint(0) as a, mesh.endpoint(1) as b:
        a.send(1, encode_pickle([arr, "tag"]))
        [(_, msg)] = b.recv()
        got, tag = decode_pickle(msg)
        seg = b._in[0].seg
        assert tag == "tag" and np.array_equal(got, arr)
        assert not seg.address <= got.ctypes.data < seg.address + seg.size
        assert got.flags.writeable and got.ctypes.data % 8 == 0
        got += 1
        assert np.array_equal(got, arr + 1)
        del msg


def batch_of(rows: int, seed: int = 0) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    return pa.record_batch({"k": rng.integers(0, 1000, rows), "v": rng.random(rows),
                            "s": pa.array([f"w{i % 97}" for i in range(rows)])})


def test_arrow_round_trip_zero_copy_and_slot_reuse_after_release():
    batch = batch_of(20_000)
    with Mesh.create(2, ring_bytes=1 << 20) as mesh, mesh.endpoint(0) as a, mesh.endpoint(1) as b:
        a.send(1, encode_arrow(batch))
        [(_, msg)] = b.recv()
        seg = b._in[0].seg                    # the ring appears with the first message
        got = decode_arrow(msg)
        assert got.equals(batch) and message_kind(msg) == ARROW
        addresses = [buf.address for col in got.columns for buf in col.buffers() if buf is not None]
        assert all(seg.address <= x < seg.address + seg.size for x in addresses)
        first = min(addresses)
        del msg  # the batch alone keeps the record
        sent = 0
        while a.try_send(1, encode_arrow(batch_of(20_000, seed=sent + 1))):
            sent += 1
            for _, m in b.recv():
                other = decode_arrow(m)
                assert other.column(0).buffers()[1].address != got.column(0).buffers()[1].address
                del m, other
        assert 1 <= sent < 10 and got.equals(batch)
        del got  # released: the writer wraps onto the same slot
        assert a.try_send(1, encode_arrow(batch))
        [(_, m)] = b.recv()
        again = decode_arrow(m)
        assert again.equals(batch)
        assert min(buf.address for col in again.columns for buf in col.buffers() if buf) == first
        del m, again


def test_batch_outlives_endpoint_and_mesh():
    batch = batch_of(50_000)
    with Mesh.create(2) as mesh, mesh.endpoint(0) as a, mesh.endpoint(1) as b:
        a.send(1, encode_arrow(batch))
        [(_, msg)] = b.recv()
        got = decode_arrow(msg)
        seg = b._in[0].seg
        del msg
    assert seg.closed and seg._mm is not None  # closed and unlinked, but still mapped
    assert got.equals(batch)
    del got
    assert seg._mm is None


def _arrow_producer(mesh, batches):
    with mesh.endpoint(0) as ep:
        for i in range(batches):
            while not ep.try_send(1, encode_arrow(batch_of(100_000, seed=i))):
                ep.park(1.0)
        while not ep.recv():
            ep.park(1.0)


def _sum_keys(ep) -> tuple[int, int]:
    msgs = ep.recv()
    return sum(pc.sum(decode(m).column("k")).as_py() for _, m in msgs), len(msgs)


@pytest.mark.timeout(60)
def test_arrow_across_processes(procs):
    batches = 20
    with Mesh.create(2) as mesh:
        procs.start(_arrow_producer, mesh, batches)
        total, seen = 0, 0
        with mesh.endpoint(1) as ep:
            while seen < batches:
                keys, count = _sum_keys(ep)
                total, seen = total + keys, seen + count
                if seen < batches:
                    assert ep.park(10.0)
            ep.send(0, [b"done"])
        procs.results()
    assert total == sum(pc.sum(batch_of(100_000, seed=i).column("k")).as_py() for i in range(batches))
