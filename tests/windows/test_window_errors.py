"""Bad window definitions and bad records are refused with an error naming the parameter,
the record, the column or the op."""
from __future__ import annotations

import pyarrow as pa
import pytest

import sparktimely as st
import sparktimely.windows as win

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("make, message", [
    (lambda: win.Tumbling(0), "Tumbling: size must be positive, got 0"),
    (lambda: win.Tumbling(-5), "Tumbling: size must be positive, got -5"),
    (lambda: win.Sliding(10, 0), "Sliding: slide must be positive, got 0"),
    (lambda: win.Sliding(0, 5), "Sliding: size must be positive, got 0"),
    (lambda: win.Sliding(10, 11), r"Sliding: slide must be at most size \(10\), got 11"),
    (lambda: win.Session(0), "Session: gap must be positive, got 0"),
], ids=["size-0", "size-negative", "slide-0", "sliding-size-0", "slide-over-size", "gap-0"])
def test_window_kinds_refuse_sizes_slides_and_gaps_out_of_range(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_window_kinds_refuse_non_int_parameters():
    with pytest.raises(TypeError, match="Tumbling: size must be an int, got 2.5"):
        win.Tumbling(2.5)
    with pytest.raises(TypeError, match="Sliding: offset must be an int, got '1'"):
        win.Sliding(4, 2, offset="1")


def failure(build) -> str:
    """The message of what running ``build`` raised, with the causes it wraps."""
    with pytest.raises(Exception) as caught:
        st.example(build)
    messages, error = [], caught.value
    while error is not None:
        messages.append(str(error))
        error = error.__cause__
    return " | ".join(messages)


def test_a_negative_lateness_is_refused():
    with pytest.raises(ValueError, match="lateness must be a non-negative int, got -1"):
        st.example(lambda scope: scope.to_stream([1]).window(
            win.Tumbling(5), time_of=lambda r: r, aggregate=win.count(), lateness=-1))


def test_a_non_int_event_time_names_the_record():
    message = failure(lambda scope: scope.to_stream([("a", 1), ("b", "noon")]).window(
        win.Tumbling(5), time_of=lambda r: r[1], aggregate=win.count()).results.capture())
    assert "time_of(('b', 'noon')) returned 'noon' (str), not an int event time" in message
    message = failure(lambda scope: scope.to_stream([("a", 1.0)]).window(
        win.Session(5), time_of=lambda r: r[1], aggregate=win.count()).results.capture())
    assert "time_of(('a', 1.0)) returned 1.0 (float)" in message


def second(record):
    return record[1]


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("kind", [win.Tumbling(5), win.Session(5)], ids=["panes", "sessions"])
def test_a_time_of_that_raises_is_named_with_the_record(kind, workers):
    """A time_of that raised was told in its own words only (IndexError: tuple index out of
    range), naming neither time_of nor the record."""
    def job(worker):
        worker.dataflow(lambda scope: scope.to_stream([(7,)] if worker.index == 0 else [])
                        .window(kind, time_of=second, aggregate=win.count()).results.probe())
    with pytest.raises(st.WorkerError) as caught:
        st.execute(job, workers=workers)
    assert "operator 'Window' (address (0, 1)) raised IndexError: window: time_of=second " \
           "raised on the record (7,): tuple index out of range" in str(caught.value)


def test_arrow_time_columns_must_be_integers_without_nulls():
    floats = pa.table({"ts": [1.5, 2.0], "v": [1, 2]})
    message = failure(lambda scope: scope.to_stream(floats).window(
        win.Tumbling(5), time_of="ts", aggregate={"n": ("count", None)}).results.capture())
    assert "time column 'ts' is double, not an integer type (first row: {'ts': 1.5, 'v': 1})" \
        in message
    nulls = pa.table({"ts": [1, None], "v": [1, 2]})
    message = failure(lambda scope: scope.to_stream(nulls).window(
        win.Session(5), time_of="ts", aggregate={"n": ("count", None)}).results.capture())
    assert "time column 'ts' is null in row {'ts': None, 'v': 2}" in message
    message = failure(lambda scope: scope.to_stream(nulls).window(
        win.Tumbling(5), time_of="when", aggregate={"n": ("count", None)}).results.capture())
    assert "time column 'when' is not in the batch (columns ts, v)" in message


@pytest.mark.parametrize("kind, at, lateness, column_type, limits", [
    (win.Tumbling(10), 2**63 - 15, 100, pa.int64(),
     "which holds them for event times from -9223372036854775688 to 9223372036854775687"),
    (win.Sliding(10, 5), 2**63 - 5, 0, pa.int64(), "to 9223372036854775792"),
    (win.Session(100), -2**63 + 50, 0, pa.int64(), "from -9223372036854775708 to"),
    (win.Tumbling(10), 2**63 + 5, 0, pa.uint64(), "to 9223372036854775787"),
    (win.Tumbling(10), 5, 2**63, pa.int64(), "which cannot hold them for any event time"),
], ids=["tumbling", "sliding", "session-low", "uint64", "lateness"])
def test_arrow_event_times_too_near_the_int64_limits_are_refused_naming_the_row(
        kind, at, lateness, column_type, limits):
    """Such a record was sent to ``late`` though its window was open (its bounds overflowed),
    or failed in numpy's words; Python records have no limit."""
    rows = pa.table({"ts": pa.array([at, 0], column_type), "k": ["b", "a"]})
    message = failure(lambda scope: scope.to_stream(rows).window(
        kind, time_of="ts", key="k", lateness=lateness,
        aggregate={"n": ("count", None)}).results.capture())
    assert (f"window: event time {at} in column 'ts' (row {{'ts': {at}, 'k': 'b'}}) is too "
            f"near the int64 limits for {kind!r} with lateness {lateness}: windows of Arrow "
            f"rows compute bounds and close times in int64, ") in message
    assert limits in message
    assert st.example(lambda scope: scope.to_stream(rows.slice(1)).window(
        win.Tumbling(10), time_of="ts", key="k",
        aggregate={"n": ("count", None)}).results.capture()).extract()[0][1].num_rows == 1


@pytest.mark.parametrize("aggregate, error, message", [
    ({"m": ("median", "v")}, ValueError, "aggregate 'm': unknown op 'median' \\(known: sum, "
                                         "count, min, max, mean\\)"),
    ({"s": ("sum", None)}, ValueError, "aggregate 's': 'sum' needs an input column"),
    ({"window_end": ("max", "v")}, ValueError, "aggregate 'window_end': the name of an output "
                                               "column is taken"),
    ({"s": "sum"}, TypeError, "aggregate 's' must be \\(op, in_column\\), got 'sum'"),
    ("count", TypeError, "aggregate must be a win.count\\(\\), win.sum\\(\\), ... or an "
                         "Arrow dict"),
])
def test_bad_arrow_aggregates_are_named(aggregate, error, message):
    table = pa.table({"ts": [1], "v": [1]})
    with pytest.raises(error, match=message):
        st.example(lambda scope: scope.to_stream(table).window(
            win.Tumbling(5), time_of="ts", aggregate=aggregate))


@pytest.mark.parametrize("key, message", [
    ("window_start", "key column 'window_start' has the name of a column of the results"),
    (["k", "k"], "key column 'k' is named twice"),
])
@pytest.mark.parametrize("kind", [win.Tumbling(5), win.Session(5)], ids=["panes", "sessions"])
def test_arrow_key_columns_named_twice_or_as_a_result_column_are_refused(kind, key, message):
    """A key named window_start gave results with two columns of that name; a key named
    twice failed in Arrow's group_by ("Multiple matches for FieldRef")."""
    table = pa.table({"k": ["a"], "window_start": ["b"], "ts": [1]})
    with pytest.raises(ValueError, match=message):
        st.example(lambda scope: scope.to_stream(table).window(
            kind, time_of="ts", key=key, aggregate={"n": ("count", None)}))


def test_mixing_python_and_arrow_forms_is_refused():
    with pytest.raises(TypeError, match="on Python records time_of and key are functions"):
        st.example(lambda scope: scope.to_stream([1]).window(
            win.Tumbling(5), time_of="ts", aggregate=win.count()))
    with pytest.raises(TypeError, match="with an Arrow aggregate dict, time_of names the time"):
        st.example(lambda scope: scope.to_stream([1]).window(
            win.Tumbling(5), time_of=lambda r: r, aggregate={"n": ("count", None)}))
    with pytest.raises(TypeError, match="kind must be win.Tumbling, win.Sliding or win.Session"):
        st.example(lambda scope: scope.to_stream([1]).window(
            5, time_of=lambda r: r, aggregate=win.count()))


@pytest.mark.parametrize("kind", [win.Tumbling(5), win.Session(5)], ids=["panes", "sessions"])
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_an_arrow_sum_of_a_column_without_numbers_names_it(kind, op):
    """It failed in Arrow's words ("Function 'hash_sum' has no kernel ...")."""
    message = failure(lambda scope: scope.to_stream(pa.table({"ts": [1], "v": ["x"]})).window(
        kind, time_of="ts", aggregate={"n": (op, "v")}).results.capture())
    assert f"window: aggregate 'n': {op} of column 'v' of type string: it holds no numbers" \
        in message


def test_a_lateness_that_is_no_int_is_a_type_error():
    with pytest.raises(TypeError, match="lateness must be a non-negative int, got 1.0"):
        st.example(lambda scope: scope.to_stream([1]).window(
            win.Tumbling(5), time_of=lambda r: r, aggregate=win.count(), lateness=1.0))


@pytest.mark.parametrize("kind", [win.Tumbling(5), win.Session(5)], ids=["panes", "sessions"])
def test_an_arrow_aggregate_of_a_missing_column_names_it(kind):
    message = failure(lambda scope: scope.to_stream(pa.table({"ts": [1], "v": [2]})).window(
        kind, time_of="ts", aggregate={"n": ("sum", "x")}).results.capture())
    assert "window: aggregate 'n' reads column 'x', which is not in the batch (columns ts, v)" in message


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("key", [None, lambda r: r["k"]], ids=["unkeyed", "keyed"])
def test_a_python_aggregation_on_arrow_batches_names_the_arrow_form(workers, key):
    """At 2 or more workers the batch meets the window's exchange first: it tells the same,
    naming the window it goes to (the error is raised where the batch is sent)."""
    def job(worker):
        worker.dataflow(lambda scope: scope.to_stream(pa.table({"ts": [1], "k": ["a"]})).window(
            win.Tumbling(5), time_of=lambda r: r["ts"], key=key, aggregate=win.count()
        ).results.probe())
        worker.run()
    with pytest.raises(st.WorkerError) as caught:
        st.execute(job, workers=workers)
    assert ("window: a Python aggregation (win.count(), win.sum(), ...) "
            "takes records, but this stream carries RecordBatches: aggregate Arrow batches "
            "with a dict") in str(caught.value), caught.value
    assert "operator 'Window' (address (0, 1))" in str(caught.value), caught.value


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("key", [None, "k"], ids=["unkeyed", "keyed"])
def test_an_arrow_aggregate_on_python_records_names_the_python_form(workers, key):
    """The records met the window's exchange, which told an AttributeError of its route
    (unkeyed) or an Exchange(key=...) the user never wrote (keyed); then its refusal, without
    naming the window (raised in the operator before it, or in an input handle's close)."""
    def job(worker):
        worker.dataflow(lambda scope: scope.to_stream([{"ts": 1, "k": "a"}]).window(
            win.Tumbling(5), time_of="ts", key=key, aggregate={"n": ("count", None)}
        ).results.probe())
        worker.run()
    with pytest.raises(st.WorkerError) as caught:
        st.execute(job, workers=workers)
    assert ("window: an Arrow aggregate dict {out: (function, column)} takes "
            "RecordBatches, but this stream carries Python records") in str(caught.value), \
        caught.value
    assert "into operator 'Window' (address (0, 1))" in str(caught.value), caught.value


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("aggregate", [win.sum, win.min, win.max, win.mean])
@pytest.mark.parametrize("first", [True, False], ids=["none-first", "none-last"])
def test_a_none_value_is_named_by_its_aggregation_in_any_order(workers, aggregate, first):
    """A None value was taken for "no record yet" when it came first (sum 3 of 3 and None)
    and failed inside + or < when it came later: the result hung on the records' order."""
    records = [(1, None), (2, 3)] if first else [(1, 3), (2, None)]
    name = aggregate().name

    def job(worker):
        worker.dataflow(lambda scope: scope.to_stream(records).window(
            win.Tumbling(10), time_of=lambda r: r[0], aggregate=aggregate(lambda r: r[1])
        ).results.probe())
        worker.run()
    with pytest.raises(st.WorkerError) as caught:
        st.execute(job, workers=workers)
    bad = records[0] if first else records[1]
    assert (f"TypeError: win.{name}: the value of record {bad!r} is None; {name} takes values"
            in str(caught.value)), caught.value


def test_windows_need_int_timely_times():
    def build(scope):
        def inner(loop):
            loop.to_stream([1]).window(win.Tumbling(5), time_of=lambda r: r,
                                       aggregate=win.count())
        scope.iterative(inner)
    with pytest.raises(TypeError, match="timely times must be ints"):
        st.example(build)
