"""Arrow batches of different schemas from different workers entering
one exchange fail at the exchange, naming both schemas and both workers."""
from __future__ import annotations

import re
import time

import pyarrow as pa
import pytest

import sparktimely as st
import sparktimely.differential as dd

pytestmark = pytest.mark.timeout(60)


def job(worker):
    """Worker 1 (if any) makes ``n`` a string column; everyone else an int64 one."""
    n = pa.array([str(i) for i in range(8)]) if worker.index == 1 else pa.array(range(8))
    batch = pa.record_batch({"key": pa.array(range(8)), "n": n})
    captured = worker.dataflow(lambda scope: scope.to_stream([batch])
                               .exchange(key="key").capture())
    worker.run()
    return captured.extract()


@pytest.mark.parametrize("workers", [2, 3])
def test_a_schema_mismatch_is_named_at_the_exchange(workers):
    for _ in range(5):      # where it is noticed depends on timing: told the same each time
        started = time.monotonic()
        with pytest.raises(st.WorkerError) as caught:
            st.execute(job, workers=workers)
        assert time.monotonic() - started < 5
        message = str(caught.value)      # the exchange's error, not one of the operator (a
        assert re.match(                 # ToStream) that was running when the batch came
            r"worker \d failed: ExchangeSchemaError: an exchange into 'Exchange' \(dataflow "
            r"'dataflow-0'\) on worker \d got Arrow batches of two schemas: worker ",
            message), message
    assert "key: int64, n: int64" in message and "key: int64, n: string" in message
    assert "worker 1 sent key: int64, n: string" in message
    assert "every batch of one stream, from every worker, must have the same schema" in message


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("operator", ["exchange", "window"])
def test_a_concat_of_two_schemas_is_told_by_the_exchange_at_every_worker_count(workers,
                                                                              operator):
    """At one worker an exchange checked no schema: a concat of two Arrow streams of
    different schemas went through a plain exchange silently, and failed in a window with
    Arrow's raw ArrowInvalid; at two or three workers the exchange told it."""
    import sparktimely.windows as win
    tails = {"exchange": lambda stream: stream.exchange(key="x").probe(),
             "window": lambda stream: stream.window(
                 win.Tumbling(10), time_of="x", key="x",
                 aggregate={"n": ("count", None)}).results.probe()}

    def concat(worker):
        ints = pa.record_batch({"x": pa.array([1, 2])})
        floats = pa.record_batch({"x": pa.array([1.5])})
        worker.dataflow(lambda scope: tails[operator](
            scope.to_stream([ints]).concat(scope.to_stream([floats]))))
        worker.run()
    with pytest.raises(st.WorkerError) as caught:
        st.execute(concat, workers=workers)
    message = str(caught.value)
    name = "Exchange" if operator == "exchange" else "Window"
    assert re.match(rf"worker \d failed: ExchangeSchemaError: an exchange into '{name}' "
                    rf"\(dataflow 'dataflow-0'\) on worker \d got Arrow batches of two "
                    rf"schemas: worker \d sent ", message), message
    assert "x: int64" in message and "x: double" in message, message


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_one_worker_sending_two_schemas_into_an_arrangement_is_told_as_such(workers):
    """A concat of two Arrow collections of different schemas: the exchange before the
    arrangement tells it, showing the two schemas as the user made them (not the
    operators' hash column) and that one worker sent both."""
    def concat(worker):
        first, second = dd.InputSession(), dd.InputSession()
        worker.dataflow(lambda scope: dd.concatenate(
            scope, [first.to_collection(scope), second.to_collection(scope)])
            .arrange_by_key(key="k").count().inner.probe())
        if worker.index == 0:
            first.update_batch(pa.record_batch({"k": [1, 2], "v": [1, 2], "diff": [1, 1]}))
            second.update_batch(pa.record_batch({"k": ["x"], "w": [1.0], "diff": [1]}))
        first.close()
        second.close()
        worker.run()
    with pytest.raises(st.WorkerError) as caught:
        st.execute(concat, workers=workers)
    message = str(caught.value)
    ints, strings = "k: int64, v: int64, diff: int64", "k: string, w: double, diff: int64"
    assert ints in message and strings in message and "__hash" not in message, message
    assert f"worker 0 sent {ints}, then {strings}" in message, message


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_equal_schemas_pass_unchanged(workers):
    def same(worker):
        batch = pa.record_batch({"key": pa.array(range(8)), "n": pa.array(range(8))},
                                metadata={"owner": "user"})
        captured = worker.dataflow(lambda scope: scope.to_stream([batch])
                                   .exchange(key="key").capture())
        worker.run()
        return captured.extract()
    parts = st.execute(same, workers=workers)
    tables = [table for part in parts for _, table in part]
    assert sorted(sum((t.column("key").to_pylist() for t in tables), [])) == sorted(
        list(range(8)) * workers)
    assert all(t.schema.metadata == {b"owner": b"user"} for t in tables)   # ours removed


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("operator", ["count", "distinct", "consolidate"])
def test_whole_rows_in_another_column_order_are_told_wherever_they_go(workers, operator):
    # Worker 1 orders the same columns differently. Arranged by the whole row, its row and
    # the others' equal one could go to different workers (each hashed in its batch's
    # column order), never meet, and be counted apart, silently: each worker's exchange now
    # learns every sender's schema.
    import sparktimely.differential as dd

    def job(worker):
        rows = dd.InputSession()
        captured = worker.dataflow(lambda scope: getattr(rows.to_collection(scope), operator)()
                                   .inner.capture())
        columns = {"k": ["x"], "v": [1], "diff": [1]}
        if worker.index == 1:
            columns = {"v": [1], "k": ["x"], "diff": [1]}
        rows.update_batch(pa.record_batch(columns))
        rows.close()
        worker.run()
        return [row for _, table in captured.extract() for row in table.to_pylist()]
    if workers == 1:
        assert st.execute(job, workers=1) == [[{"k": "x", "v": 1, "count": 1, "diff": 1}]
                                              if operator == "count" else
                                              [{"k": "x", "v": 1, "diff": 1}]]
        return
    with pytest.raises(st.WorkerError) as caught:
        st.execute(job, workers=workers)
    message = str(caught.value)
    assert "ExchangeSchemaError" in message and "got Arrow batches of two schemas" in message
    assert "worker 1 sent v: int64, k: string" in message

