"""Values at the edges, at 1, 2 and 3 workers against plain-Python oracles: a reduce whose
values Python cannot compare (None beside ints), Arrow aggregations over null values after
retractions, and an Arrow join whose column names clash twice."""
from __future__ import annotations

import datetime as dt
from collections import Counter

import pyarrow as pa
import pytest

import sparktimely as st
import sparktimely.differential as dd

pytestmark = pytest.mark.timeout(120)

NAN = float("nan")


def accumulated(results: list) -> Counter:
    """The updates captured on every worker, summed (zero sums dropped)."""
    total: Counter = Counter()
    for updates in results:
        for data, _, diff in updates:
            total[data] += diff
    return Counter({data: n for data, n in total.items() if n})


def reduce_input(run, order: list, render=lambda val: val, spread_in_time: bool = False
                 ) -> Counter:
    """The accumulated output of a reduce that gives the values of key "k" as its ``input``
    lists them (each ``render``ed), the values of ``order`` given one per worker in turn, at
    times 0, 1, ... (``spread_in_time``) or all at time 0."""
    def values(key, input, output):
        output.append((tuple(render(val) for val, _ in input), 1))

    def job(worker):
        session = dd.InputSession()
        out = worker.dataflow(lambda scope: session.to_collection(scope).reduce(values)
                              .inner.capture())
        for i, val in enumerate(order):
            if i % worker.peers == worker.index:
                session.update_at(("k", val), i if spread_in_time else 0, 1)
        session.close()
        worker.run()
        return [update for _, updates in out.extract() for update in updates]
    return accumulated(run(job))


@pytest.mark.parametrize("order", [[None, 5, 2], [5, 2, None]], ids=["none-first", "none-last"])
def test_reduce_sees_values_python_cannot_compare_in_one_order_whatever_came_first(run, order):
    """Python cannot sort ``None`` beside ints; ``input`` puts ``None`` first, then the
    numbers, on every worker, whichever arrived first."""
    assert reduce_input(run, order, spread_in_time=True) == Counter({("k", (None, 2, 5)): 1})


@pytest.mark.parametrize("order", [[3.0, NAN, 1.0, 2.0], [NAN, 2.0, 3.0, 1.0]],
                         ids=["nan-second", "nan-first"])
def test_reduce_sees_float_values_sorted_with_a_nan_last_whatever_came_first(run, order):
    """A NaN is neither below nor above a number, so Python's sort left it and the numbers
    around it as they arrived (``(3.0, nan, 1.0, 2.0)`` at 1 worker, ``(nan, 1.0, 2.0,
    3.0)`` or ``(1.0, 2.0, 3.0, nan)`` at 2): ``input`` puts the numbers in order, then
    the NaN, on every worker."""
    assert reduce_input(run, order, render=str) == Counter({("k", ("1.0", "2.0", "3.0",
                                                                     "nan")): 1})


def test_capture_sorts_records_python_cannot_compare_in_one_order(run):
    def job(worker):
        records = [3, None, (1, None), 1, (1, 2)][worker.index::worker.peers]
        return worker.dataflow(lambda scope: scope.to_stream(records)
                               .exchange(lambda x: 0).capture())
    captures = run(job)
    assert captures[0].extract() == [(0, [None, 1, 3, (1, None), (1, 2)])]


def test_capture_sorts_floats_with_a_nan_last(run):
    """Python's sort left a NaN and the numbers around it as they arrived."""
    def job(worker):
        records = [3.0, NAN, 1.0, 2.0][worker.index::worker.peers]
        return worker.dataflow(lambda scope: scope.to_stream(records)
                               .exchange(lambda x: 0).capture())
    assert str(run(job)[0].extract()) == "[(0, [1.0, 2.0, 3.0, nan])]"


AGGS = {"total": ("sum", "v"), "values": ("count", "v"), "rows": ("count", None),
        "lo": ("min", "v")}


def aggregates_oracle(rows: Counter) -> list[dict]:
    """``AGGS`` per key from the accumulated ``{(k, v): count}``, as SQL: sums and counts
    of the non-null values, None where there are none."""
    out = []
    for k in sorted({k for k, _ in rows}):
        present = {v: n for (key, v), n in rows.items() if key == k and n > 0}
        values = {v: n for v, n in present.items() if v is not None}
        if present:
            out.append({"k": k, "total": sum(v * n for v, n in values.items()) if values else None,
                        "values": sum(values.values()), "rows": sum(present.values()),
                        "lo": min(values) if values else None})
    return out


def test_arrow_sums_and_counts_skip_nulls_however_the_key_got_to_them(run):
    """At time 1 keys 1 and 2 both hold one null value: key 1 by retracting its 5."""
    batches = [[(1, None, 1), (1, 5, 1), (3, 4, 2)], [(1, 5, -1), (2, None, 1), (3, None, 1)]]

    def job(worker):
        session = dd.InputSession()
        out = worker.dataflow(lambda scope: session.to_collection(scope)
                              .reduce(key="k", aggs=AGGS).inner.capture())
        for time, rows in enumerate(batches):
            session.advance_to(time)
            if worker.index == time % worker.peers:
                session.update_batch(pa.record_batch({
                    "k": pa.array([k for k, _, _ in rows], pa.int64()),
                    "v": pa.array([v for _, v, _ in rows], pa.int64()),
                    "diff": pa.array([d for _, _, d in rows], pa.int64())}))
        session.close()
        worker.run()
        return [(time, row) for time, table in out.extract() for row in table.to_pylist()]
    results = [pair for worker in run(job) for pair in worker]
    inputs: Counter = Counter()
    for time, rows in enumerate(batches):
        for k, v, d in rows:
            inputs[(k, v)] += d
        got: Counter = Counter()
        for at, row in results:
            if at <= time:
                got[tuple(sorted((n, v) for n, v in row.items() if n != "diff"))] += row["diff"]
        assert sorted((dict(r) for r, n in got.items() if n for _ in range(n)),
                      key=lambda r: r["k"]) == aggregates_oracle(inputs), time


def test_an_arrow_join_names_a_column_that_clashes_twice_uniquely(run):
    def job(worker):
        left, right = dd.InputSession(), dd.InputSession()
        out = worker.dataflow(lambda scope: left.to_collection(scope)
                              .join(right.to_collection(scope), on="k").inner.capture())
        if worker.index == worker.peers - 1:
            left.update_batch(pa.table({"k": [1, 2], "v": [1, 2], "v_right": [9, 8],
                                        "diff": [1, 1]}))
            right.update_batch(pa.table({"k": [1, 1], "v": [5, 6], "diff": [1, 2]}))
        left.close(), right.close()
        worker.run()
        return [table for _, table in out.extract()]
    tables = [table for worker in run(job) for table in worker]
    assert {tuple(table.column_names) for table in tables} == {
        ("k", "v", "v_right", "v_right_right", "diff")}
    rows = sorted(tuple(row.values()) for table in tables for row in table.to_pylist())
    assert rows == [(1, 1, 9, 5, 1), (1, 1, 9, 6, 2)]


@pytest.mark.parametrize("on, columns", [
    ("k", ("k", "v", "k2", "k2_right", "w", "diff")),
    (["k2", "k"], ("k2", "k", "v", "w", "diff"))])
def test_an_arrow_join_puts_the_key_columns_first_in_the_order_of_on(run, on, columns):
    """Whatever the left schema's order, the key columns come first (as ``on`` lists them),
    then the left side's other columns, the right side's, and ``diff``; a semijoin keeps its
    input's columns as they are."""
    keys = [on] if isinstance(on, str) else on

    def job(worker):
        left, right = dd.InputSession(), dd.InputSession()
        out = worker.dataflow(lambda scope: [
            joined.inner.capture() for joined in (
                left.to_collection(scope).join(right.to_collection(scope), on=on),
                left.to_collection(scope).semijoin(right.to_collection(scope).map_batches(
                    lambda b: b.select(keys + ["diff"])), on=on))])
        if worker.index == worker.peers - 1:
            left.update_batch(pa.table({"v": [1, 2], "k": [1, 2], "k2": [3, 4], "diff": [1, 1]}))
            right.update_batch(pa.table({"k2": [3, 3], "k": [1, 1], "w": [5, 6],
                                         "diff": [1, 2]}))
        left.close(), right.close()
        worker.run()
        return [[table for _, table in c.extract()] for c in out]
    results = run(job)
    joined = [t for worker in results for t in worker[0]]
    semijoined = [t for worker in results for t in worker[1]]
    assert {tuple(t.column_names) for t in joined} == {columns}
    assert sorted((r["v"], r["w"], r["diff"]) for t in joined for r in t.to_pylist()) == [
        (1, 5, 1), (1, 6, 2)]
    assert {tuple(t.column_names) for t in semijoined} == {("v", "k", "k2", "diff")}
    assert sorted((r["v"], r["diff"]) for t in semijoined for r in t.to_pylist()) == [(1, 3)]


EPOCH = dt.datetime(1970, 1, 1)
KEY_PAIRS = [
    # (left values and type, right values and type): joined where Python says equal
    (([dt.datetime(2020, 1, 1, 0, 0, 1), dt.datetime(2020, 1, 1, 0, 0, 2)], pa.timestamp("ms")),
     ([dt.datetime(2020, 1, 1, 0, 0, 1), dt.datetime(2020, 1, 1, 0, 0, 3)], pa.timestamp("us"))),
    (([dt.date(2020, 1, 1), dt.date(2021, 5, 6)], pa.date32()),
     ([dt.date(2020, 1, 1), dt.date(2021, 5, 7)], pa.date64())),
    (([dt.timedelta(seconds=3), dt.timedelta(milliseconds=5)], pa.duration("s")),
     ([dt.timedelta(seconds=3), dt.timedelta(milliseconds=4)], pa.duration("ms"))),
    (([EPOCH + dt.timedelta(microseconds=5), EPOCH], pa.timestamp("us")), ([5, 0], pa.int64())),
    (([dt.datetime(2020, 1, 1)], pa.timestamp("s")), ([dt.date(2020, 1, 1)], pa.date32())),
    (([2 ** 63, 2 ** 64 - 1, 7], pa.uint64()), ([-2 ** 63, -1, 7], pa.int64())),
    ((["a", "b"], pa.string()), ([b"a", b"c"], pa.binary())),
    (([True, False], pa.bool_()), ([1, 2], pa.int64())),
    (([1.0, 2.5], pa.float64()), ([1, 2], pa.int32())),
    (([2.0 ** 63, -2.0 ** 63, 2.0 ** 64], pa.float64()), ([2 ** 63, 2 ** 64 - 1], pa.uint64())),
    (([-2.0 ** 63, 2.0 ** 62], pa.float64()), ([-2 ** 63, 2 ** 62], pa.int64())),
]


@pytest.mark.parametrize("left, right", KEY_PAIRS, ids=lambda side: str(side[1]))
def test_arrow_keys_of_two_types_join_where_python_says_their_values_are_equal(run, left, right):
    """Key values compare as in Python, whatever the columns' types: one instant, date or
    duration in two units is one key; a timestamp never equals an int, nor a datetime a
    date, nor a string bytes; a uint64 beyond int64's range equals no int64 (it failed the
    job), 1 equals True and 1.0."""
    def job(worker):
        a, b = dd.InputSession(), dd.InputSession()
        out = worker.dataflow(lambda scope: a.to_collection(scope).join(
            b.to_collection(scope), on="k").inner.capture())
        for session, (values, kind), tag in ((a, left, "l"), (b, right, "r")):
            mine = [i for i in range(len(values)) if i % worker.peers == worker.index]
            session.update_batch(pa.table({
                "k": pa.array([values[i] for i in mine], kind),
                tag: pa.array(mine, pa.int64()), "diff": pa.array([1] * len(mine), pa.int64())}))
        a.close(), b.close()
        worker.run()
        return [((r["l"], r["r"]), t, r["diff"]) for t, table in out.extract()
                for r in table.to_pylist()]
    expected = Counter({(i, j): 1 for i, x in enumerate(left[0]) for j, y in enumerate(right[0])
                        if x == y})
    assert accumulated(run(job)) == expected


def rounds_of(run, build, rounds: list) -> Counter:
    """The output of ``build(collection)`` over an Arrow input fed ``rounds`` (a list of
    tables per round, round r at time r, each table's rows shared among the workers),
    accumulated over every worker and time."""
    def job(worker):
        session = dd.InputSession()
        out = worker.dataflow(lambda scope: build(session.to_collection(scope)).inner.capture())
        for time, tables in enumerate(rounds):
            session.advance_to(time)
            for table in tables:
                mine = list(range(worker.index, table.num_rows, worker.peers))
                session.update_batch(table.take(pa.array(mine, pa.int64())))
        session.close()
        worker.run()
        return [(tuple(row.values())[:-1], t, row["diff"]) for t, table in out.extract()
                for row in table.to_pylist()]
    return accumulated(run(job))


def rows(columns: dict, diffs: list | None = None) -> pa.Table:
    size = len(next(iter(columns.values())))
    return pa.table({**columns, "diff": pa.array(diffs or [1] * size, pa.int64())})


def test_a_dictionary_that_repeats_a_value_groups_its_rows_as_one_value(run):
    """Arrow allows a dictionary to hold a value twice: rows of that value, through either
    entry, are one key (at 1 worker they were two: grouping went by the entry)."""
    twice = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2], pa.int32()), ["a", "a", "b"])
    table = rows({"k": twice})
    assert rounds_of(run, lambda c: c.distinct(), [[table]]) == Counter({("a",): 1, ("b",): 1})
    assert rounds_of(run, lambda c: c.consolidate(), [[table]]) == Counter({("a",): 2, ("b",): 1})
    assert rounds_of(run, lambda c: c.reduce(key="k", aggs={"n": ("count", None)}),
                     [[table]]) == Counter({("a", 2): 1, ("b", 1): 1})


def test_a_float_sum_adds_the_values_present_not_every_update(run):
    """``1e20 + 1.0``, then ``1e20`` retracted: the collection holds 1.0, and so does its
    sum (adding the updates one by one gave 0.0)."""
    sums = rounds_of(run, lambda c: c.reduce(key="k", aggs={"s": ("sum", "v")}), [
        [rows({"k": [1, 1], "v": [1e20, 1.0]})], [rows({"k": [1], "v": [1e20]}, [-1])]])
    assert sums == Counter({(1, 1.0): 1})


def test_min_and_max_take_minus_zero_and_zero_as_one_value(run):
    """``-0.0`` in, ``0.0`` out (Python: equal, so they cancel): the minimum is 5.0."""
    extremes = rounds_of(run, lambda c: c.reduce(key="k", aggs={"lo": ("min", "v"),
                                                                "hi": ("max", "v")}),
                         [[rows({"k": [1, 1], "v": [5.0, -0.0]})],
                          [rows({"k": [1], "v": [0.0]}, [-1])]])
    assert extremes == Counter({(1, 5.0, 5.0): 1})


def test_a_count_of_values_takes_minus_zero_and_zero_as_one_value(run):
    """``-0.0`` in twice, ``0.0`` out once: the key holds one value, once (by a string key,
    whose rows Arrow groups, its rows were counted twice, the ``-0.0`` apart from the
    retracted ``0.0``)."""
    counts = rounds_of(run, lambda c: c.reduce(key="k", aggs={"rows": ("count", None),
                                                              "values": ("count", "v")}),
                       [[rows({"k": ["a", "a"], "v": [-0.0, -0.0]})],
                        [rows({"k": ["a"], "v": [0.0]}, [-1])]])
    assert counts == Counter({("a", 1, 1): 1})


@pytest.mark.parametrize("values, total", [
    ([2 ** 62, 2 ** 62 - 1], 2 ** 63 - 1), ([2 ** 62, 2 ** 62, -1], 2 ** 63 - 1),
    ([-2 ** 63, 5, -5], -2 ** 63), ([1_700_000_000_123_456_789, 1, 3, 5, 7, 9,
                                     -1_700_000_000_123_456_789], 25)],
    ids=["largest", "a value times its count beyond", "smallest", "beyond floats"])
def test_an_integer_sum_at_int64s_limits_is_exact(run, values, total):
    """A sum within int64's range is that sum, however near its limits or however large its
    values: it was an OverflowError (its check added the values as floats, or multiplied a
    value by its count alone) or Arrow's 'Integer value ... not in range' (a value beyond
    2**53 has no float)."""
    sums = rounds_of(run, lambda c: c.reduce(key="k", aggs={"s": ("sum", "v")}),
                     [[rows({"k": [1] * len(values), "v": pa.array(values, pa.int64())})]])
    assert sums == Counter({(1, total): 1})


def test_min_and_max_of_a_duration_column_are_durations(run):
    """Python compares timedeltas; Arrow has no min/max of durations ('Function
    hash_min_max has no kernel matching input types (duration[s], ...)')."""
    seconds = [dt.timedelta(seconds=s) for s in (5, -3, 7)]
    extremes = rounds_of(run, lambda c: c.reduce(key="k", aggs={"lo": ("min", "v"),
                                                                "hi": ("max", "v")}),
                         [[rows({"k": [1, 1, 1, 2], "v": pa.array(seconds + [None],
                                                                   pa.duration("s"))})],
                          [rows({"k": [1], "v": pa.array(seconds[2:], pa.duration("s"))},
                                [-1])]])
    assert extremes == Counter({(1, seconds[1], seconds[0]): 1, (2, None, None): 1})


@pytest.mark.parametrize("values, kind", [([2 ** 62, 2 ** 62], pa.int64()),
                                          ([2 ** 63 - 1, 5], pa.int64()),
                                          ([2 ** 63], pa.uint64())],
                         ids=["int64", "int64 beyond floats", "uint64"])
def test_an_integer_sum_beyond_int64_is_an_overflow_error_naming_it(run, values, kind):
    """Python's ints do not wrap: a sum beyond int64's range fails naming the sum and its
    column (int64 wrapped to a negative sum; a uint64 value, or an int64 one beyond 2**53,
    failed with Arrow's words)."""
    with pytest.raises(st.WorkerError, match="OverflowError: reduce: the sum 's' of column "
                                             "'v' is beyond int64's range"):
        rounds_of(run, lambda c: c.reduce(key="k", aggs={"s": ("sum", "v")}),
                  [[rows({"k": [1] * len(values), "v": pa.array(values, kind)})]])


@pytest.mark.parametrize("aggs, told", [
    ({"t": ("sum", "s")},
     "TypeError: reduce: aggregate 't': sum of column 's' of type string: it holds no numbers"),
    ({"t": ("max", "zz")}, "KeyError: \"reduce: aggregate 't' reads column 'zz', which is not "
                           "in the batch (columns k, s)\"")], ids=["sum", "missing"])
def test_an_aggregation_of_a_column_it_cannot_read_is_named(run, aggs, told):
    """Were Arrow's words ('Function 'multiply' has no kernel matching input types (string,
    int64)', 'Field "zz" does not exist in schema'), naming neither reduce nor the sum."""
    with pytest.raises(st.WorkerError) as raised:
        rounds_of(run, lambda c: c.reduce(key="k", aggs=aggs),
                  [[rows({"k": [1, 2], "s": ["a", "b"]})]])
    assert told in str(raised.value)


def test_a_half_float_key_is_refused_naming_the_column(run):
    import numpy as np
    table = rows({"k": pa.array(np.array([1.5, 2.0], np.float16))})
    with pytest.raises(st.WorkerError, match="key column 'k': cannot key on a float16 column"):
        rounds_of(run, lambda c: c.count(key="k"), [[table]])
