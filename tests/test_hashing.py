"""st.stable_hash: the same value hashes alike in every process (unlike salted ``hash``), and
on hosts without the xxhash package (the Python XXH3 gives xxhash's values)."""
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as strategies

import sparktimely as st
from sparktimely import _xxh3

VALUES = [0, 1, -1, 2 ** 63 - 1, -2 ** 63, 2 ** 100, -2 ** 100, True, False, 1.5, -0.0, 3.0,
          float("inf"), "", "word", "naïve ☃", b"", b"bytes", None, (), (1, "a"), ((1, 2), (3,)),
          st.Product(3, 4), st.Product(st.Product(1, 2), 5)]


LONG_VALUES = ["w" * 200, "λ" * 300, b"\x00" * 5000, tuple(range(50)), 2 ** 2000]


def hashes_in_fresh_interpreter(seed: str, without_xxhash: bool = False) -> list[int]:
    code = ("import sparktimely as st; from tests.test_hashing import VALUES, LONG_VALUES; "
            "print([st.stable_hash(v) for v in VALUES + LONG_VALUES])")
    if without_xxhash:                   # as on a host where `import xxhash` fails
        code = ("import sys; sys.modules['xxhash'] = None; " + code +
                "; import sparktimely.hashing as h; assert h.xxh3_64_intdigest.__module__ == "
                "'sparktimely._xxh3'")
    env = dict(os.environ, PYTHONHASHSEED=seed)
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True).stdout
    return eval(out)


@pytest.mark.timeout(60)
def test_same_hashes_in_interpreters_with_different_salts():
    here = [st.stable_hash(v) for v in VALUES + LONG_VALUES]
    assert hashes_in_fresh_interpreter("1") == here
    assert hashes_in_fresh_interpreter("2") == here
    assert all(0 <= h < 2 ** 64 for h in here)


def test_known_values_do_not_change_between_releases():
    # Routes and checkpoints depend on these: changing them moves keys between workers.
    assert st.stable_hash("word") == 0xc0a156d636da49df
    assert st.stable_hash(42) == 0x355079998ae7a34a
    assert st.stable_hash(("word", 42)) == 0x62de999cff98a2ff


def test_equal_values_hash_equal_and_distinct_values_differ():
    assert st.stable_hash(2) == st.stable_hash(2.0) == st.stable_hash(True + 1)
    assert st.stable_hash(0.0) == st.stable_hash(-0.0) == st.stable_hash(0)
    assert len({st.stable_hash(v) for v in ["a", b"a", ("a",), 1, (1,), None, ()]}) == 7
    assert st.stable_hash((1, 2)) != st.stable_hash((2, 1))
    assert st.stable_hash(st.Product(1, 2)) != st.stable_hash((1, 2))
    assert len({st.stable_hash(i) % 3 for i in range(30)}) == 3


def test_subclasses_hash_as_their_base():
    class Word(str):
        pass
    assert st.stable_hash(Word("x")) == st.stable_hash("x")


def test_unhashable_types_are_named():
    with pytest.raises(TypeError, match="cannot hash a dict"):
        st.stable_hash({"a": 1})
    with pytest.raises(TypeError, match="cannot hash a list"):
        st.stable_hash(("ok", [1]))


@pytest.mark.timeout(60)
def test_same_hashes_on_a_host_without_xxhash():
    assert hashes_in_fresh_interpreter("3", without_xxhash=True) == [
        st.stable_hash(v) for v in VALUES + LONG_VALUES]


# Lengths around every path of XXH3 (0, 1-3, 4-8, 9-16, 17-128, 129-240, longer: partial and
# whole 1 KiB blocks), seeds around the 32- and 64-bit edges.
LENGTHS = strategies.sampled_from([0, 1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 32, 33, 64, 65, 96, 97,
                                   127, 128, 129, 159, 160, 239, 240, 241, 255, 256, 1023, 1024,
                                   1025, 1088, 2048, 2049, 3333])
SEEDS = strategies.sampled_from([0, 1, 5, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 63 + 12345,
                                 2 ** 64 - 1]) | strategies.integers(0, 2 ** 64 - 1)


@settings(max_examples=300, deadline=None)
@given(length=LENGTHS | strategies.integers(0, 5000), seed=SEEDS, data=strategies.data())
def test_the_python_xxh3_gives_the_values_of_xxhash(length, seed, data):
    import xxhash                       # here, not above: the module is imported without it
    payload = data.draw(strategies.binary(min_size=length, max_size=length))
    assert _xxh3.xxh3_64_intdigest(payload, seed) == xxhash.xxh3_64_intdigest(payload, seed)
    assert _xxh3.xxh3_128_hexdigest(payload, seed) == xxhash.xxh3_128_hexdigest(payload, seed)


def test_the_python_xxh3_takes_buffers_and_large_inputs():
    import xxhash
    data = bytes(range(256)) * 4099                   # over a MiB: several block chunks
    assert _xxh3.xxh3_128_hexdigest(memoryview(data)) == xxhash.xxh3_128_hexdigest(data)
    import pyarrow as pa                              # checkpoints hash Arrow buffers
    assert _xxh3.xxh3_64_intdigest(pa.py_buffer(data), 7) == xxhash.xxh3_64_intdigest(data, 7)


def test_numpy_integers_hash_as_the_ints_they_equal():
    import numpy as np
    for value in (0, 7, -3, 2**63 - 1):
        assert {st.stable_hash(t(value)) for t in (np.int64, np.int32 if abs(value) < 2**31
                                                    else np.int64)} == {st.stable_hash(value)}
    assert st.stable_hash(np.uint64(2**64 - 1)) == st.stable_hash(2**64 - 1)
    assert st.stable_hash((np.int16(1), "a")) == st.stable_hash((1, "a"))


def test_numpy_bools_and_floats_hash_as_the_values_they_equal():
    """What iterating a bool or float32 array gives was refused ("cannot hash a bool")."""
    import numpy as np
    assert st.stable_hash(np.bool_(True)) == st.stable_hash(True) == st.stable_hash(1)
    assert st.stable_hash(np.bool_(False)) == st.stable_hash(0)
    for value in (0.5, -2.0, 1e30):
        assert st.stable_hash(np.float32(value)) == st.stable_hash(float(np.float32(value)))
    assert st.stable_hash(np.float16(3.0)) == st.stable_hash(3)


def nans() -> list[float]:
    """NaNs of both signs and another payload (``inf - inf`` is a negative one)."""
    import math
    import struct
    payload = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
    return [float("nan"), -float("nan"), math.inf - math.inf, payload]


def test_every_nan_hashes_as_one():
    """A NaN's sign and payload went into its hash: NaN keys, one key to ``==``-blind
    grouping (``one_nan``, Arrow's), were routed to different workers."""
    import numpy as np
    import pyarrow as pa
    from sparktimely.hashing import hash_array
    assert len({st.stable_hash(nan) for nan in nans() + [np.float32("nan")]}) == 1
    assert st.stable_hash((1, -float("nan"))) == st.stable_hash((1, float("nan")))
    assert len(set(hash_array(pa.array(nans())).tolist() +
                   hash_array(pa.array(nans(), pa.float32())).tolist())) == 1


def test_whole_floats_of_an_arrow_column_hash_as_the_ints_they_equal():
    """A float column's whole values are routed as the equal ints (a float key column meets
    an int one): the masks of which values are whole, huge or NaN were taken after ints'
    bits were written into the floats, which some ints' bits made NaN (every negative
    whole float, once NaNs were told apart) or a float above 2**63 (4.9e18 and others)."""
    import numpy as np
    import pyarrow as pa
    from sparktimely.hashing import hash_array
    ints = [0, 1, -1, -2, 7, -2 ** 53, 2 ** 53, 0x43E0000000000000, -0x43E0000000000000,
            0x7FF8000000000000, 0x7FF0000000000000, 0xFFF8000000000000 - 2 ** 64, -2 ** 63,
            2 ** 62 + 2 ** 61]
    floats = [float(i) for i in ints]
    assert [float(f) == i for f, i in zip(floats, ints)] == [True] * len(ints)
    assert (hash_array(pa.array(floats)) == hash_array(pa.array(ints))).tolist() == \
        [True] * len(ints)
    assert hash_array(pa.array([2.0 ** 63]))[0] == hash_array(pa.array([2 ** 63],
                                                                       pa.uint64()))[0]
    mixed = pa.array([-2.0, float("nan"), 0.5, -0.5, 4.0])
    assert hash_array(mixed)[1] == hash_array(pa.array([float("nan")]))[0]
    assert len(set(hash_array(mixed).tolist())) == 5
    assert hash_array(mixed)[0] == hash_array(pa.array([-2], pa.int64()))[0]
    assert hash_array(pa.array(np.array([-3.0, 3.0])))[0] != hash_array(pa.array([3]))[0]


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.timeout(60)
def test_nans_of_any_sign_are_one_key_of_aggregate_and_an_arrow_exchange(workers):
    """Grouped as one key at 1 worker, split between workers at 2 or 3."""
    import pyarrow as pa

    def job(worker):
        def build(scope):
            mine = nans() if worker.index == 0 else []
            python = scope.to_stream([(nan, 1) for nan in mine]).aggregate(
                lambda k, v, agg: (agg or 0) + v, lambda k, agg: agg)
            arrow = scope.to_stream([pa.record_batch({"k": pa.array(mine, pa.float64())})])
            return python.capture(), arrow.exchange(key="k").capture()
        python, arrow = worker.dataflow(build)
        worker.run()
        return ([n for _, ns in python.extract() for n in ns],
                sum(table.num_rows for _, table in arrow.extract()))
    placed = st.execute(job, workers=workers)
    assert sorted(n for python, _ in placed for n in python) == [len(nans())]
    assert sorted(rows for _, rows in placed if rows) == [len(nans())]


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.timeout(60)
def test_a_python_stream_routed_by_hash_rows_meets_an_arrow_streams_keys(workers):
    """The recipe docs/API.md gives for co-locating a Python stream with an Arrow stream
    keyed by a column."""
    import pyarrow as pa
    from sparktimely.hashing import hash_rows
    keys = [f"key{i}" for i in range(40)]

    def job(worker):
        def build(scope):
            mine = worker.index == 0
            python = scope.to_stream([(k, 1) for k in keys] if mine else [])
            arrow = scope.to_stream([pa.record_batch({"k": keys})] if mine else [])
            return (python.exchange(lambda r: int(hash_rows(pa.table({"k": [r[0]]}), "k")[0]))
                    .map(lambda r: r[0]).capture(), arrow.exchange(key="k").capture())
        python, arrow = worker.dataflow(build)
        worker.run()
        return (sorted(k for _, ks in python.extract() for k in ks),
                sorted(k for _, table in arrow.extract() for k in table.column("k").to_pylist()))
    placed = st.execute(job, workers=workers)
    assert all(python == arrow for python, arrow in placed)
    assert sorted(k for python, _ in placed for k in python) == sorted(keys)
