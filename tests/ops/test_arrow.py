"""Columnar (Arrow) streams: operators, key partitioning, schema checks, and batches moving
between worker processes through shared memory.

Dataflow tests run at 1, 2 and 3 in-process workers (the ``run`` fixture, tests/conftest.py;
Arrow batches are serialised between them as between processes) and compare the merged
result with pyarrow, numpy or plain Python. The tests of shared memory and of hashing across
processes start real worker processes."""
import collections
import copyreg
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sparktimely as st
from sparktimely.ops import arrow as arrow_ops
from sparktimely.dataflow.containers import partition_batch
from sparktimely import hashing
from sparktimely.hashing import hash_array, hash_rows
from sparktimely.testing import consolidate
from matrix_helpers import example

WORDS = pa.array([f"w{i}" for i in range(10_007)])


def word_table(n: int, seed: int = 0) -> pa.Table:
    picks = np.random.default_rng(seed).integers(0, len(WORDS), n)
    return pa.table({"word": WORDS.take(picks)})


def rows(table: pa.Table) -> list:
    """The rows of a table as sorted tuples (None sorts first)."""
    return sorted(zip(*table.to_pydict().values()), key=lambda r: [(v is not None, v) for v in r])


def captured_on(worker, build) -> list:
    """Build a dataflow whose ``build(scope)`` returns a Capture, run it, extract it."""
    captured = worker.dataflow(build)
    worker.run()
    return captured.extract()


def gathered(results: list) -> pa.Table:
    """The union of what each worker captured, at any time."""
    return pa.concat_tables([table for captured in results for _, table in captured])


def my_slice(worker, table: pa.Table) -> pa.Table:
    """This worker's share of ``table``: one of ``peers`` consecutive slices."""
    step = -(-table.num_rows // worker.peers)
    return table.slice(worker.index * step, step)


# -- wordcount --------------------------------------------------------------------------------

@pytest.mark.parametrize("combine", [True, False])
def test_wordcount_counts_each_word_on_one_worker(run, combine):
    table = word_table(60_000)

    def job(worker):
        mine = my_slice(worker, table).to_batches(max_chunksize=8192)
        return captured_on(worker, lambda s: s.to_stream(mine).aggregate_batches(
            ["word"], {"n": ("count", None)}, combine=combine).capture())
    results = run(job)
    per_worker = [set(t.column("word").to_pylist()) for captured in results for _, t in captured]
    assert len(per_worker) == run.workers                    # one batch per worker at time 0
    assert sum(map(len, per_worker)) == len(set().union(*per_worker))   # each word on one
    assert min(map(len, per_worker)) > 0.9 * len(WORDS) / run.workers   # keys spread out
    counts = gathered(results)
    assert dict(zip(*counts.to_pydict().values())) == collections.Counter(
        table.column("word").to_pylist())


# -- aggregation ------------------------------------------------------------------------------

SALES = pa.table({
    "shop": ["a", "b", "a", None, "b", "a", None, "c"],
    "day": pa.array([1, 1, 2, 2, 1, 1, 2, 3], pa.int32()),
    "units": [3, None, 5, 1, 2, 7, 4, None],
    "price": [1.5, 2.0, None, 4.0, 8.0, 0.5, 2.5, None],
})
AGGS = {"n": ("count", None), "units_n": ("count", "units"), "units": ("sum", "units"),
        "low": ("min", "price"), "high": ("max", "price"), "avg": ("mean", "units")}


def expected_aggregates(table: pa.Table, keys: list) -> pa.Table:
    out = table.group_by(keys).aggregate(
        [([], "count_all"), ("units", "count"), ("units", "sum"), ("price", "min"),
         ("price", "max"), ("units", "mean")])
    return out.select(keys + [c for c in out.column_names if c not in keys]).rename_columns(
        keys + list(AGGS))


@pytest.mark.parametrize("combine", [True, False])
@pytest.mark.parametrize("keys", [["shop"], ["shop", "day"]])
def test_aggregate_matches_pyarrow_group_by(run, combine, keys):
    # Null keys and keys of several columns, from batches spread over the workers.
    batches = SALES.to_batches(max_chunksize=3)

    def build(scope):
        mine = batches[scope.index::scope.peers] or SALES.slice(0, 0)
        return scope.to_stream(mine).aggregate_batches(keys, AGGS, combine=combine).capture()
    ((time, table),) = consolidate([c.extract() for c in example(run, build)])
    assert time == 0
    assert table.column_names == keys + list(AGGS)
    assert rows(table) == rows(expected_aggregates(SALES, keys))


def test_aggregate_one_batch_per_completed_time_and_compaction(run, monkeypatch):
    monkeypatch.setattr(arrow_ops, "_COMPACT_EVERY", 4)     # fold partials every 4 batches

    def job(worker):
        input = st.InputHandle()
        seen = []
        captured = worker.dataflow(lambda s: s.input_from(input).aggregate_batches(
            "k", {"total": ("sum", "v"), "avg": ("mean", "v"), "n": ("count", None)})
            .inspect_batch(lambda t, b: seen.append(t)).capture())
        for time in range(3):
            for i in range(30):
                input.send_batch(pa.record_batch({"k": [i % 5, 7], "v": [i, time]}))
                worker.step()                          # one partial per batch reaches the end
            input.advance_to(time + 1)
        input.close()
        worker.run()
        return seen, captured.extract()
    results = run(job)
    owners = hash_array(pa.array([0, 1, 2, 3, 4, 7])) % run.workers
    for index, (seen, _) in enumerate(results):
        assert seen == ([0, 1, 2] if index in owners else [])
    w = run.workers
    for time, table in consolidate([extract for _, extract in results]):
        assert table.to_pydict() == {
            "k": [0, 1, 2, 3, 4, 7],
            "total": [w * sum(range(k, 30, 5)) for k in range(5)] + [w * 30 * time],
            "avg": [np.mean(range(k, 30, 5)) for k in range(5)] + [time],
            "n": [w * 6] * 5 + [w * 30]}


@pytest.mark.parametrize("aggs, message", [
    ({"m": ("median", "units")}, "unknown function 'median'"),
    ({"m": ("sum", None)}, "needs a column"),
    ({"shop": ("count", None)}, "not a key"),
])
def test_aggregate_rejects_bad_specs(run, aggs, message):
    with pytest.raises(st.WorkerError, match=f"ValueError: .*{re.escape(message)}"):
        example(run, lambda s: s.to_stream(SALES).aggregate_batches("shop", aggs).probe())


# -- join -------------------------------------------------------------------------------------

LEFT = pa.table({"id": [1, 2, 3, 4, 2, None], "name": ["ann", "bob", "cy", "di", "bo", "x"]})
RIGHT = pa.table({"owner": [1, 1, 3, 2, 9, None],
                  "name": ["cat", "dog", "eel", "fox", "gnu", "y"]})
JOINED = [(1, "ann", "cat"), (1, "ann", "dog"), (2, "bo", "fox"), (2, "bob", "fox"),
          (3, "cy", "eel")]


def test_join(run):
    # Both sides come from to_stream, so every worker has a copy of each: each match
    # appears workers * workers times.
    captured = example(run, lambda s: s.to_stream(LEFT).join_batches(
        s.to_stream(RIGHT), "id", right_on="owner").capture())
    ((_, table),) = consolidate([c.extract() for c in captured])
    assert table.column_names == ["id", "name", "name_right"]
    assert rows(table) == sorted(JOINED * run.workers ** 2)


def test_join_per_time(run):
    def job(worker):
        people, pets = st.InputHandle(), st.InputHandle()
        captured = worker.dataflow(lambda s: s.input_from(people).join_batches(
            s.input_from(pets), ["id"], right_on=["owner"], suffixes=("_person", "_pet"))
            .capture())
        if worker.index == 0:
            people.send_batch(LEFT)
            people.advance_to(1)
            people.send_batch(LEFT)                        # joins only with time-1 pets
        if worker.index == worker.peers - 1:
            pets.send_batch(RIGHT)
            pets.advance_to(1)
            pets.send_batch(RIGHT.slice(0, 1))
        people.close()
        pets.close()
        worker.run()
        return captured.extract()
    joined = consolidate(run(job))
    assert [(time, table.column_names) for time, table in joined] == [
        (t, ["id", "name_person", "name_pet"]) for t in (0, 1)]
    assert [(time, rows(table)) for time, table in joined] == [
        (0, JOINED), (1, [(1, "ann", "cat")])]


# -- empty batches and schemas ----------------------------------------------------------------

def test_empty_batches_are_never_sent(run):
    empty = pa.record_batch({"x": pa.array([], pa.int64())})

    def job(worker):
        input = st.InputHandle()
        seen = []
        counts = worker.dataflow(lambda s: s.input_from(input)
                                 .concat(s.to_stream(pa.Table.from_batches([empty])))
                                 .inspect_batch(lambda t, b: seen.append(b.num_rows))
                                 .filter_batches(lambda b: pc.greater(b.column("x"), 10))
                                 .inspect_batch(lambda t, b: seen.append(-b.num_rows))
                                 .aggregate_batches("x", {"n": ("count", None)}).capture())
        input.send_batch(empty)
        input.send_batch(pa.record_batch({"x": [1, 2]}))
        input.close()
        worker.run()
        return seen, counts.extract()
    assert run(job) == [([2], [])] * run.workers


def test_partition_of_an_empty_batch_is_empty_parts():
    empty = pa.record_batch({"x": pa.array([], pa.int64())})
    assert [p.num_rows for p in partition_batch(empty, "x", None, 3)] == [0, 0, 0]


def test_input_handle_rejects_a_different_schema(run):
    def job(worker):
        input = st.InputHandle()
        worker.dataflow(lambda s: s.input_from(input).probe())
        input.send_batch(pa.record_batch({"word": ["a"], "n": [1]}))
        input.send_batch(pa.table({"word": ["b"], "n": [2]}))            # same schema: fine
        try:
            input.send_batch(pa.record_batch({"word": ["c"], "n": [1.5]}))
        finally:
            input.close()
    with pytest.raises(st.WorkerError, match=re.escape(
            "ValueError: InputHandle.send_batch: the batch's schema (word: string, n: double) "
            "differs from the stream's schema (word: string, n: int64)")):
        run(job)


def test_to_stream_rejects_mixed_schemas(run):
    with pytest.raises(st.WorkerError, match=r"ValueError: to_stream: the batch's schema "
                                             r"\(x: string\) differs from the stream's schema "
                                             r"\(x: int64\)"):
        example(run, lambda s: s.to_stream([pa.record_batch({"x": [1]}),
                                            pa.record_batch({"x": ["1"]})]))


def test_map_batches_checks_its_outputs(run):
    batches = [pa.record_batch({"x": [1, 2]}), pa.record_batch({"x": [3]})]

    def grow(batch):
        return batch if batch.num_rows == 2 else batch.append_column("y", pa.array([0]))
    with pytest.raises(st.WorkerError, match=r"OperatorError: .*map_batches output: the "
                                             r"batch's schema \(x: int64, y: int64\) differs "
                                             r"from the stream's schema \(x: int64\)"):
        example(run, lambda s: s.to_stream(batches).map_batches(grow).probe())
    with pytest.raises(st.WorkerError, match="must return a pyarrow.RecordBatch, not Table"):
        example(run, lambda s: s.to_stream(batches)
                .map_batches(lambda b: pa.Table.from_batches([b])).probe())
    with pytest.raises(st.WorkerError, match=r"needs a stream of pyarrow.RecordBatch.*to_arrow"):
        example(run, lambda s: s.to_stream([1, 2]).map_batches(lambda b: b).probe())


def test_capture_sorts_rows_and_keeps_times_apart(run):
    def job(worker):
        input = st.InputHandle()
        captured = worker.dataflow(lambda s: s.input_from(input).capture())
        input.send_batch(pa.record_batch({"k": [2, 1], "v": ["b", "a"]}))
        input.advance_to(3)
        input.send_batch(pa.record_batch({"k": [1, 1], "v": ["z", "y"]}))
        input.close()
        worker.run()
        return [(t, table.to_pydict()) for t, table in captured.extract()]
    assert run(job) == [[(0, {"k": [1, 2], "v": ["a", "b"]}),
                         (3, {"k": [1, 1], "v": ["y", "z"]})]] * run.workers


# -- partitioning -----------------------------------------------------------------------------

def test_hash_values_are_fixed():
    """Pinned values: routing must not change across processes, hosts or releases."""
    assert [hex(int(h)) for h in hash_array(
        pa.array(["hello", "", None, "a string longer than twelve bytes"]))] == [
        "0x5895634cc2de5ab5", "0xd5f0b44b4bd9de4b", "0x6e756c6c6e756c6c", "0xef024e9afe88c95a"]
    assert [hex(int(h)) for h in hash_array(pa.array([0, 42, -1]))] == [
        "0xe220a8397b1dcdaf", "0xbdd732262feb6e95", "0xe4d971771b652c20"]
    assert hex(int(hash_rows(pa.record_batch({"a": [1], "b": ["x"]}), ["a", "b"])[0])) == \
        "0xb1ef9042b6659bbd"


def test_equal_keys_hash_equally_across_encodings():
    values = ["x", None, "yy", "", "x", "long string " * 20, "twelve bytes", "thirteen byte",
              "sixteen bytes...", "seventeen bytes..", "ünïcödé ünïcödé", "x"]
    expected = hash_array(pa.array(values))
    for array in [pa.array(values, pa.large_string()), pa.array(values, pa.string_view()),
                  pa.array([v and v.encode() for v in values], pa.binary()),
                  pa.array(values).dictionary_encode(),
                  pa.chunked_array([values[:2], values[2:]])]:
        assert hash_array(array).tolist() == expected.tolist()
    ints = [3, None, -7, 2**40]
    for kind in [pa.int64(), pa.int32(), pa.int16(), pa.int8()]:
        fits = [v if v is None or abs(v) < 2 ** (kind.bit_width - 1) else 0 for v in ints]
        assert hash_array(pa.array(fits, kind)).tolist() == hash_array(pa.array(fits)).tolist()
    assert hash_array(pa.array([-0.0, 1.0]))[0] == hash_array(pa.array([0.0]))[0]
    sliced = pa.array(["a", "b", "c", None]).slice(1, 3)
    assert hash_array(sliced).tolist() == hash_array(pa.array(["b", "c", None])).tolist()
    by_one = [int(hash_array(pa.array([v]))[0]) for v in values]     # each at a buffer's end
    assert by_one == expected.tolist()


def test_short_columns_hash_as_long_ones():
    """Columns of at most ``_SMALL`` values are mixed with Python integers, longer ones with
    numpy: every value hashes the same either way."""
    rng = np.random.default_rng(7)
    ints = rng.integers(-2**63, 2**63 - 1, 64, dtype=np.int64).tolist() + [0, -1, 2**63 - 1]
    words = ["", "a", "twelve bytes", "thirteen byte", "long string " * 5, "ünïcödé"] * 6
    floats = rng.normal(size=40).tolist() + [0.0, -0.0]
    for values in (ints, words, floats):
        whole = hash_array(pa.array(values)).tolist()
        assert len(values) > hashing._SMALL
        for length in range(1, hashing._SMALL + 1):
            for start in (0, len(values) - length):
                part = values[start:start + length]
                assert hash_array(pa.array(part)).tolist() == whole[start:start + length]
    pairs = pa.record_batch({"i": ints[:len(words)], "w": words})
    assert hash_rows(pairs.slice(0, 3), ["i", "w"]).tolist() == \
        hash_rows(pairs, ["i", "w"]).tolist()[:3]


@pytest.mark.parametrize("distinct", [7, 50_000])
@pytest.mark.parametrize("length", [5, 12, 13, 20, 41])
def test_string_hashes_depend_on_every_byte_and_only_on_the_value(distinct, length):
    """Values longer than 12 bytes are hashed from their further bytes too, also when many
    rows repeat (then through a dictionary): the result is the same either way."""
    keys = [f"{i % distinct:0{length}d}"[-length:] for i in range(50_000)]
    hashes = hash_array(pa.array(keys)).tolist()
    alone = {k: int(hash_array(pa.array([k]))[0]) for k in set(keys)}
    assert hashes == [alone[k] for k in keys]
    for views in (pa.string_view(), pa.binary_view()):   # (pyarrow has no take for views)
        assert hash_array(pa.array(keys).cast(views)).tolist() == hashes
    assert len(set(alone.values())) == len(alone)               # no collisions among these
    last_byte = [k[:-1] + ("x" if k[-1] != "x" else "y") for k in keys[:100]]
    assert not set(hash_array(pa.array(last_byte)).tolist()) & set(hashes[:100])
    with pytest.raises(TypeError, match="cannot hash a key column of type list<item: int64>"):
        hash_array(pa.array([[1]]))


@pytest.mark.parametrize("key", ["s", "i", "small", ["s", "i"], ["i", "f", "d"]])
@pytest.mark.parametrize("peers", [2, 3, 300])
def test_partition_keeps_every_row_and_sends_equal_keys_together(key, peers):
    n = 20_000
    rng = np.random.default_rng(1)
    ints = rng.integers(-50, 50, n)
    batch = pa.record_batch({
        "s": pa.array([f"key-{v}" if v % 7 else None for v in ints]),
        "i": pa.array(ints),
        "small": pa.array(ints, pa.int8()),
        "f": pa.array(ints / 4),
        "d": pa.array(ints.astype("datetime64[D]")),
        "row": pa.array(np.arange(n)),
    })
    parts = partition_batch(batch, key, None, peers)
    assert len(parts) == peers
    assert sorted(np.concatenate([p.column("row").to_numpy() for p in parts])) == list(range(n))
    keys = [key] if isinstance(key, str) else key
    home = {}
    for worker, part in enumerate(parts):
        for row in zip(*[part.column(k).to_pylist() for k in keys]):
            assert home.setdefault(row, worker) == worker
    # a batch holding one key goes whole, without a copy
    one = batch.filter(pc.equal(batch.column("i"), 7))
    assert [p is one for p in partition_batch(one, key, None, peers)].count(True) == 1


def test_partition_with_a_vectorised_route_and_for_lists():
    batch = pa.record_batch({"k": [5, -1, 3, 7]})
    parts = partition_batch(batch, None, lambda b: b.column("k"), 3)
    assert [p.column("k").to_pylist() for p in parts] == [[3], [7], [5, -1]]   # as Python's %
    with pytest.raises(ValueError, match="one integer per row"):
        partition_batch(batch, None, lambda b: 1, 3)
    with pytest.raises(TypeError, match="use Exchange\\(route\\)"):
        partition_batch([1, 2], "k", None, 2)
    with pytest.raises(KeyError, match="key column 'nope' is not in the batch's schema"):
        partition_batch(batch, "nope", None, 2)


@pytest.mark.parametrize("key", ["s", "i"])
def test_exchange_splits_view_layout_columns_and_keeps_their_types(run, key):
    """Arrow has no take for string_view/binary_view (what Polars and DuckDB hand out):
    split at 2+ workers, the rows must all arrive, each key on one worker, the types kept."""
    n = 200
    batch = pa.record_batch({
        "s": pa.array([f"key-{i % 17}" if i % 5 else None for i in range(n)], pa.string_view()),
        "b": pa.array([bytes([i % 256]) * (i % 20) for i in range(n)], pa.binary_view()),
        "i": pa.array(range(n)),
    })

    def job(worker):
        out = captured_on(worker, lambda s: s.to_stream(batch if worker.index == 0 else [])
                          .exchange(key=key).capture())
        tables = [table for _, table in out]
        return [(table.schema, table.to_pylist()) for table in tables]
    parts = run(job)
    received = [row for part in parts for _, rows_ in part for row in rows_]
    assert sorted(received, key=lambda r: r["i"]) == batch.to_pylist()
    assert {schema for part in parts for schema, _ in part} == {batch.schema}
    homes = {}
    for worker, part in enumerate(parts):
        for _, rows_ in part:
            for row in rows_:
                assert homes.setdefault(row[key], worker) == worker
    for peers in (2, 9):                    # a take per worker, and the sort beyond eight
        pieces = partition_batch(batch, key, None, peers)
        assert [p.schema for p in pieces] == [batch.schema] * peers
        assert sorted(r["i"] for p in pieces for r in p.to_pylist()) == list(range(n))


@pytest.mark.timeout(60)
def test_exchange_by_key_and_hashes_agree_across_processes():
    batch = pa.record_batch({"s": [f"k{i}" for i in range(1000)], "i": list(range(1000))})

    def job(worker):
        seen = []
        worker.dataflow(lambda s: s.to_stream(batch).exchange(key=["s", "i"])
                        .inspect_batch(lambda t, b: seen.append(b)).probe())
        worker.run()
        received = pa.Table.from_batches(seen)
        return (hash_rows(batch, ["s", "i"]).tolist(), received.column("i").to_pylist(),
                (hash_rows(received, ["s", "i"]) % 2 == worker.index).all())
    (h0, got0, home0), (h1, got1, home1) = st.execute(job, workers=2)
    assert h0 == h1 == hash_rows(batch, ["s", "i"]).tolist()
    assert home0 and home1
    assert sorted(got0 + got1) == sorted(2 * list(range(1000)))


def test_exchange_pact_in_a_custom_operator(run):
    def job(worker):
        def ctor(cap, info):
            cap.drop()

            def logic(input, output):
                for cap, batch in input:
                    output.give_at(cap, batch.append_column(
                        "at", pa.array([worker.index] * batch.num_rows)))
            return logic
        table = pa.table({"k": list(range(100))})
        return captured_on(worker, lambda s: s.to_stream(table).unary(
            st.Exchange(key="k"), "Tag", ctor).capture())
    tagged = gathered(run(job))
    assert sorted(tagged.column("k").to_pylist()) == sorted(run.workers * list(range(100)))
    homes = set(zip(tagged.column("k").to_pylist(), tagged.column("at").to_pylist()))
    keys = pa.array(list(range(100)))
    assert homes == set(zip(range(100), (hash_array(keys) % run.workers).tolist()))


# -- large batches, zero copy -----------------------------------------------------------------

@pytest.mark.timeout(60)
def test_hundreds_of_megabytes_through_the_rings():
    rows_per_batch, batches = 1 << 20, 12           # 16 MiB batches, 192 MiB per worker

    def job(worker):
        totals = [0, 0, 0]

        def look(time, batch):
            keys = batch.column("k")
            totals[0] += batch.num_rows
            totals[1] += int(pc.sum(batch.column("v")).as_py())
            totals[2] += int(np.count_nonzero(hash_array(keys) % 2 != worker.index))

        def build(scope):
            def ctor(cap, info):
                def logic(output):
                    for b in range(batches):
                        start = (worker.index * batches + b) * rows_per_batch
                        keys = np.arange(start, start + rows_per_batch)
                        output.give_at(cap, pa.record_batch({"k": keys, "v": keys * 3}))
                    cap.drop()
                return logic
            big = st.source(scope, "Big", ctor)
            whole = pa.record_batch({"k": np.full(5 << 20, worker.index + 7),  # 80 MiB > ring
                                     "v": np.ones(5 << 20, np.int64)})
            big.concat(scope.to_stream(whole)).exchange(key="k").inspect_batch(look).probe()
        worker.dataflow(build)
        worker.run()
        return totals
    results = st.execute(job, workers=2)
    n = 2 * batches * rows_per_batch
    assert sum(r[0] for r in results) == n + 2 * (5 << 20)
    assert sum(r[1] for r in results) == 3 * n * (n - 1) // 2 + 2 * (5 << 20)
    assert [r[2] for r in results] == [0, 0]


def _refuse_to_pickle(batch):
    raise AssertionError("a RecordBatch was pickled")


def _shared_memory_mappings() -> list:
    spans = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and "sparktimely" in fields[5]:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                spans.append((start, end))
    return spans


@pytest.mark.timeout(60)
def test_batches_from_another_worker_are_read_in_place():
    sent = pa.record_batch({"x": np.arange(1 << 18), "s": [f"v{i}" for i in range(1 << 18)]})

    def job(worker):
        found = []

        def look(time, batch):
            spans = _shared_memory_mappings()
            buffers = [buf for column in batch.columns for buf in column.buffers() if buf]
            found.append(all(any(a <= buf.address < b for a, b in spans) for buf in buffers))
        mine = [sent] if worker.index == 0 else []
        copyreg.dispatch_table[pa.RecordBatch] = _refuse_to_pickle
        worker.dataflow(lambda s: s.to_stream(mine).exchange(lambda b: np.ones(b.num_rows, int))
                        .inspect_batch(look).probe())
        worker.run()
        return found
    assert st.execute(job, workers=2) == [[], [True]]


# -- conversions ------------------------------------------------------------------------------

def test_to_arrow_and_back(run):
    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    records = [(f"k{i % 3}", i) for i in range(10)]

    def build(scope):
        objects = scope.to_stream(records)
        sizes = []
        from_tuples = objects.to_arrow(schema, batch_size=4) \
            .inspect_batch(lambda t, b: sizes.append(b.num_rows))
        from_dicts = objects.map(lambda r: {"v": r[1], "k": r[0]}).to_arrow(schema)
        scalars = objects.map(lambda r: r[1]).to_arrow([("v", pa.int64())])
        return (sizes, from_tuples.from_arrow(tuples=True).capture(),
                from_dicts.from_arrow().capture(), scalars.capture())
    for sizes, tuples, dicts, scalars in example(run, build):
        assert sizes == [4, 4, 2]
        assert tuples.extract() == [(0, sorted(records))]
        assert sorted(dicts.extract()[0][1], key=lambda d: d["v"]) == [
            {"k": k, "v": v} for k, v in records]
        assert scalars.extract()[0][1].column("v").to_pylist() == list(range(10))
    with pytest.raises(st.WorkerError, match="need a one-field schema"):
        example(run, lambda s: s.to_stream([1]).to_arrow(schema).probe())
    with pytest.raises(st.WorkerError, match="to_arrow needs a stream of Python records"):
        example(run, lambda s: s.to_stream(pa.table({"v": [1]})).to_arrow(schema).probe())


def test_batches_of_rows_without_columns_keep_their_rows(run):
    """A batch of 10 rows and no columns crossed workers whole, then capture() made tables of
    0 rows (concat_tables, a sort over no columns) and from_arrow() no records (zip of none)."""
    batch = pa.record_batch({"a": list(range(10))}).select([])

    def build(scope):
        spread = scope.to_stream([batch]).exchange(lambda b: np.arange(b.num_rows))
        return spread.capture(), spread.from_arrow().capture(), \
            spread.from_arrow(tuples=True).capture()
    results = example(run, build)
    assert sum(t.num_rows for tables, _, _ in results for _, t in tables.extract()) == \
        10 * run.workers
    for kind, at in (({}, 1), ((), 2)):
        records = [r for captured in results for _, rs in captured[at].extract() for r in rs]
        assert records == [kind] * 10 * run.workers


def test_batches_of_rows_without_columns_keep_their_rows_while_held(run):
    """delay_batch copies a batch it holds off the shared-memory ring at several workers: a
    copy of a batch of no columns was a batch of 0 rows, which was never sent."""
    batch = pa.record_batch({"a": list(range(10))}).select([])
    results = example(run, lambda s: s.to_stream([batch]).delay_batch(lambda t: t + 1).capture())
    assert [(t, table.num_rows) for captured in results for t, table in captured.extract()] \
        == [(1, 10)] * run.workers


def test_object_and_arrow_streams_mix(run):
    text = ["the quick brown fox", "jumps over the lazy dog", "the end"]

    def job(worker):
        return captured_on(worker, lambda s: s.to_stream(text[worker.index::worker.peers])
                           .flat_map(str.split).map(lambda w: {"word": w})
                           .to_arrow([("word", pa.string())])
                           .aggregate_batches("word", {"n": ("count", None)})
                           .from_arrow(tuples=True).capture())
    counts = consolidate(run(job))
    assert counts == [(0, sorted(collections.Counter(" ".join(text).split()).items()))]


def test_an_exchange_by_key_of_python_records_is_named_not_the_operator_feeding_it(run):
    """The error was told as the failure of ToStream, the operator feeding the exchange."""
    with pytest.raises((st.WorkerError, st.OperatorError),
                       match=r"the exchange into operator 'Exchange' \(address \(0, 1\)\) by "
                             r"Exchange\(key='k'\) raised TypeError: Exchange\(key=\.\.\.\) "
                             r"partitions Arrow batches; this stream carries Python objects"):
        example(run, lambda s: s.to_stream([{"k": 1}]).exchange(key="k").probe())


@pytest.mark.parametrize("operator", ["map", "filter", "flat_map", "inspect"])
def test_record_operators_refuse_arrow_batches_naming_the_batch_operators(run, operator):
    table = pa.table({"x": [1, 2]})
    with pytest.raises((st.WorkerError, st.OperatorError),
                       match=r"takes Python records, but this stream carries RecordBatches: "
                             r"use map_batches"):
        example(run, lambda s: getattr(s.to_stream(table), operator)(lambda r: r).probe())


@pytest.mark.parametrize("operator, make", [
    ("Branch", lambda s: s.branch(lambda t, r: True)[0]),
    ("Partition", lambda s: s.partition(2, lambda r: (0, r))[0]),
    ("OkErr", lambda s: s.ok_err(lambda r: st.Ok(r))[0]),
    ("Delay", lambda s: s.delay(lambda r, t: t)),
    ("Reclock", lambda s: s.reclock(s)),
    ("Aggregate", lambda s: s.aggregate(lambda k, v, a: v, lambda k, a: a)),
    ("StateMachine", lambda s: s.state_machine(lambda k, v, a: (a, [v]))),
])
def test_more_record_operators_refuse_arrow_batches_instead_of_taking_their_columns(
        run, operator, make):
    # Iterating a RecordBatch gives its columns: these used to treat each column as a
    # record (or unpack two columns as a key and a value).
    table = pa.table({"k": ["a", "b"], "v": [1, 2]})
    with pytest.raises((st.WorkerError, st.OperatorError),
                       match=rf"{operator} takes Python records, but this stream carries "
                             r"RecordBatches: use map_batches"):
        example(run, lambda s: make(s.to_stream(table)).probe())


@pytest.mark.parametrize("operator", ["aggregate", "aggregate without combining", "join"])
def test_dictionary_encoded_keys_group_and_join_by_value_whatever_the_batches(run, operator):
    # Each worker's batch (and each of its two batches) has a dictionary of its own: pyarrow
    # refuses to group or join such chunks together unless they are unified.
    def batches(worker):
        keys = [["a", "b"], ["b", "c"], ["c", "a"]][worker.index % 3]
        return [pa.record_batch({"k": pa.array(keys[i:i + 1]).dictionary_encode(),
                                 "v": pa.array([i + 1])}) for i in range(2)]

    def job(worker):
        def build(scope):
            rows = scope.to_stream(batches(worker))
            if operator == "join":
                out = rows.join_batches(rows.map_batches(
                    lambda b: b.rename_columns(["k", "u"])), "k")
            else:
                out = rows.aggregate_batches("k", {"t": ("sum", "v")},
                                             combine=operator == "aggregate")
            return out.capture()
        return [(time, [(str(r["k"]),) + tuple(v for c, v in r.items() if c != "k")
                        for r in table.to_pylist()]) for time, table in captured_on(worker, build)]
    rows = [(k, v) for w in range(run.workers)
            for k, v in zip([["a", "b"], ["b", "c"], ["c", "a"]][w % 3], (1, 2))]
    if operator == "join":
        expected = sorted((k, v, u) for k, v in rows for k2, u in rows if k == k2)
    else:
        totals = collections.Counter()
        for k, v in rows:
            totals[k] += v
        expected = sorted(totals.items())
    assert consolidate(run(job)) == [(0, expected)]


@pytest.mark.parametrize("combine", [True, False])
def test_aggregate_batches_takes_key_columns_named_like_its_partials(run, combine):
    def job(worker):
        table = pa.table({"_0": ["a", "b", "a"], "_1": [1, 2, 3]})
        return captured_on(worker, lambda s: s.to_stream(table).aggregate_batches(
            ["_0"], {"n": ("count", None), "t": ("sum", "_1")}, combine=combine)
            .from_arrow(tuples=True).capture())
    assert consolidate(run(job)) == [(0, [("a", 2 * run.workers, 4 * run.workers),
                                          ("b", run.workers, 2 * run.workers)])]


@pytest.mark.parametrize("records, schema, problem", [
    ([("a", 1, 99)], [("k", "string"), ("x", "int64")],
     "ValueError: to_arrow: the record ('a', 1, 99) has 3 fields, the schema 2 (k, x)"),
    ([("a", 1), {"k": "c", "x": 2}], [("k", "string"), ("x", "int64")],
     "TypeError: to_arrow: the records of one batch are dicts (by field name) or tuples (by "
     "position), not a mix of dict, tuple"),
    ([("a", 1), ("b", "x")], [("k", "string"), ("x", "int64")],       # (Arrow's words)
     "TypeError: to_arrow: field 'x' of the record ('b', 'x') is 'x', which type int64 cannot "
     "hold"),
    ([{"k": "a", "x": [1]}], [("k", "string"), ("x", "int64")],
     "TypeError: to_arrow: field 'x' of the record {'k': 'a', 'x': [1]} is [1], which type "
     "int64 cannot hold"),
    ([1, "x"], [("v", "int64")],                                      # plain values
     "TypeError: to_arrow: field 'v' of the record 'x' is 'x', which type int64 cannot hold"),
    ([1, 2 ** 70], [("v", "int64")],
     f"TypeError: to_arrow: field 'v' of the record {2 ** 70} is {2 ** 70}, which type int64 "
     f"cannot hold"),
])
def test_to_arrow_refuses_records_it_would_have_misread(run, records, schema, problem):
    # A longer tuple lost its extra fields; a dict after tuples was read by position over
    # its keys (its values lost), silently.
    with pytest.raises(st.WorkerError) as caught:
        example(run, lambda s: s.to_stream(records).to_arrow(schema).probe())
    assert problem in str(caught.value)


@pytest.mark.parametrize("key, aggs, problem", [
    ("zz", {"n": ("count", None)}, "key column 'zz' is not in the batch (columns k, v)"),
    ("k", {"t": ("sum", "zz")}, "aggregate 't' reads column 'zz', which is not in the batch "
                                "(columns k, v)"),
])
@pytest.mark.parametrize("combine", [True, False])
def test_aggregate_batches_names_a_column_the_batches_lack(run, key, aggs, problem, combine):
    """Arrow's words named neither the operator nor the column's role: "No match for
    FieldRef.Name(zz) in k: string". (Uncombined, rows meet the key's exchange first, which
    names the key as an exchange does.)"""
    table = pa.table({"k": ["a", "b"], "v": [1, 2]})
    with pytest.raises(st.WorkerError) as caught:
        example(run, lambda s: s.to_stream(table).aggregate_batches(key, aggs, combine=combine)
                .probe())
    if not combine and key == "zz":
        problem = ("Exchange(key=['zz']) raised KeyError: key column 'zz' is not in the batch's "
                   "schema (columns k, v)")
    assert problem in str(caught.value)


def test_filter_batches_keeps_view_columns_in_their_layout(run):
    """Arrow has no filter for string_view: it failed in Arrow's words."""
    table = pa.table({"k": pa.array(["a", "bb", "ccc"], pa.string_view()), "n": [1, 2, 3]})

    def job(worker):
        return captured_on(worker, lambda s: s.to_stream(table).filter_batches(
            lambda batch: pc.greater(batch.column("n"), 1)).capture())
    batches = [batch for time, batch in consolidate(run(job))]
    assert all(batch.schema == table.schema for batch in batches)
    assert sorted(sum((batch.column("k").to_pylist() for batch in batches), [])) == \
        sorted(["bb", "ccc"] * run.workers)


def test_to_arrow_of_a_one_field_list_schema_takes_lists_as_values(run):
    def job(worker):
        return captured_on(worker, lambda s: s.to_stream([[1, 2], [3]])
                           .to_arrow([("xs", pa.list_(pa.int64()))])
                           .from_arrow(tuples=True).capture())
    assert consolidate(run(job)) == [(0, sorted([([1, 2],), ([3],)] * run.workers))]


@pytest.mark.parametrize("size", [0, -1, 2.5])
def test_to_arrow_refuses_a_batch_size_that_is_not_a_positive_int_when_built(size):
    with pytest.raises(ValueError, match=f"to_arrow: batch_size must be a positive int, not "
                                         f"{size}"):
        st.example(lambda s: s.to_stream([1]).to_arrow([("x", "int64")], batch_size=size))


def test_capture_sorts_rows_with_a_dictionary_encoded_column_by_its_values(run):
    # The rows came back in arrival order (so an extract depended on the batching and the
    # worker count) when a column was dictionary-encoded.
    def job(worker):
        words = pa.array(["z", "b", "y", "a"][worker.index % 2::2]).dictionary_encode()
        batch = pa.record_batch({"w": words, "n": pa.array([worker.index] * len(words))})
        return captured_on(worker, lambda s: s.to_stream([batch]).exchange(key="w").capture())
    tables = [table for part in run(job) for _, table in part]
    for table in tables:
        assert table.column("w").to_pylist() == sorted(table.column("w").to_pylist())
    assert sorted(w for table in tables for w in table.column("w").to_pylist()) == sorted(
        ["z", "y"] * ((run.workers + 1) // 2) + ["b", "a"] * (run.workers // 2))


def aggregated_rows(run, table: pa.Table, keys: list, aggs: dict, combine: bool) -> list:
    """``aggregate_batches`` of ``table``'s rows, shared among the workers: every worker's
    output rows as dicts, sorted by their repr."""
    def job(worker):
        mine = table.take(pa.array(range(worker.index, table.num_rows, worker.peers),
                                   pa.int64()))
        return captured_on(worker, lambda s: s.to_stream(mine).aggregate_batches(
            keys, aggs, combine=combine).capture())
    return sorted((row for part in run(job) for _, batch in part
                   for row in batch.to_pylist()), key=repr)


@pytest.mark.parametrize("combine", [True, False])
def test_minus_zero_and_zero_keys_aggregate_as_one_key(run, combine):
    """Python: -0.0 == 0.0; both hash alike, so they reach one worker, where Arrow's grouping
    kept them apart."""
    table = pa.table({"k": [0.0, -0.0, 0.0], "v": [1, 2, 3]})
    assert aggregated_rows(run, table, ["k"], {"n": ("count", None), "s": ("sum", "v")},
                           combine) == [{"k": 0.0, "n": 3, "s": 6}]


@pytest.mark.parametrize("combine", [True, False])
def test_a_mean_of_large_integers_is_their_mean(run, combine):
    """Epoch nanoseconds: the combining mean's int64 partial sum failed its cast to float
    beyond 2**53 (and wrapped beyond int64); it is summed as floats."""
    values = [1_700_000_000_000_000_000, 1_700_000_000_000_000_002, 2 ** 62, 2 ** 62]
    table = pa.table({"k": [1, 1, 2, 2], "v": values})
    assert aggregated_rows(run, table, ["k"], {"m": ("mean", "v")}, combine) == [
        {"k": 1, "m": 1.700000000000000001e18}, {"k": 2, "m": float(2 ** 62)}]


@pytest.mark.parametrize("combine", [True, False])
def test_dictionary_keys_with_a_full_index_type_or_null_values_group_by_value(run, combine):
    """int8 indices addressing 128 values, with a null row (hashing filled the null with
    index 128, beyond int8); a dictionary holding a null (Arrow unifies none such, and
    grouped its null apart from a null row)."""
    full = pa.DictionaryArray.from_arrays(pa.array([0, 127, None], pa.int8()),
                                          pa.array([f"v{i}" for i in range(128)]))
    with_null = pa.DictionaryArray.from_arrays(pa.array([0, 1, None], pa.int8()),
                                               pa.array(["a", None]))
    for keys, expected in ((full, [{"k": None, "n": 1}, {"k": "v0", "n": 1},
                                   {"k": "v127", "n": 1}]),
                           (with_null, [{"k": "a", "n": 1}, {"k": None, "n": 2}])):
        table = pa.Table.from_batches([pa.record_batch({"k": keys})] * 2)
        doubled = [dict(row, n=2 * row["n"]) for row in expected]
        assert sorted(aggregated_rows(run, table, ["k"], {"n": ("count", None)}, combine),
                      key=repr) == sorted(doubled, key=repr)


@pytest.mark.parametrize("combine", [True, False])
def test_min_and_max_of_a_dictionary_encoded_column_are_of_its_values(run, combine):
    """Arrow's hash_min_max has no kernel for dictionaries: it failed at every worker count.
    Batches with different dictionaries, and a null, against Python's min and max."""
    batches = [pa.record_batch({"k": [1, 1, 2], "v": pa.array(["x", "a", None]).dictionary_encode()}),
               pa.record_batch({"k": [2, 1, 3], "v": pa.array(["m", "b", "q"]).dictionary_encode()})]
    table = pa.Table.from_batches(batches)
    values: dict = collections.defaultdict(list)
    for row in table.to_pylist():
        if row["v"] is not None:
            values[row["k"]].append(row["v"])
    expected = [{"k": k, "lo": min(vs), "hi": max(vs)} for k, vs in sorted(values.items())]
    assert aggregated_rows(run, table, ["k"], {"lo": ("min", "v"), "hi": ("max", "v")},
                           combine) == expected


@pytest.mark.parametrize("combine", [True, False])
@pytest.mark.parametrize("function", ["sum", "mean"])
def test_a_sum_of_a_column_holding_no_numbers_names_the_aggregate(run, combine, function):
    """It failed in Arrow's words ("Function 'hash_sum' has no kernel ...")."""
    table = pa.table({"k": [1, 2], "v": ["x", "y"]})
    with pytest.raises(st.WorkerError, match=re.escape(
            f"TypeError: aggregate_batches: aggregate 'n': {function} of column 'v' of type "
            f"string: it holds no numbers")):
        aggregated_rows(run, table, ["k"], {"n": (function, "v")}, combine)


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("keys", [["k"], ["k", "x"]])
@pytest.mark.timeout(60)
def test_aggregate_batches_of_a_dictionary_key_with_nulls_in_later_batches(workers, keys):
    """The partials of two schedulings met with a null key: group_by leaves any index under
    a null and unify_dictionaries read it, so the worker died of a segmentation fault."""
    dictionary = pa.dictionary(pa.int32(), pa.string())
    sent = [(["x", "y"], [1, 2]), (["z", None, "x"], [3, 4, 1]), ([None, "w"], [4, 5])]

    def job(worker):
        handle = st.InputHandle()
        captured, probe = worker.dataflow(lambda scope: (lambda out: (out.capture(), out.probe()))(
            scope.input_from(handle).aggregate_batches(keys, {"n": ("count", None)})))
        for k, x in sent:                       # each in a scheduling of its own
            handle.send_batch(pa.record_batch({"k": pa.array(k, dictionary), "x": x}))
            worker.step()
        handle.close()
        worker.step_while(lambda: not probe.done())
        return [row for _, table in captured.extract() for row in table.to_pylist()]
    rows = [row for part in st.execute(job, workers=workers) for row in part]
    counted = collections.Counter()
    for row in rows:
        counted[tuple(row[key] for key in keys)] += row["n"]
    expected = collections.Counter(tuple(dict(k=k, x=x)[key] for key in keys)
                                   for ks, xs in sent for k, x in zip(ks, xs))
    assert counted == collections.Counter({key: n * workers for key, n in expected.items()})
    assert len(rows) == len(expected)           # one row per key
