"""Bad input gets an error naming the operator (or call) and the record, at any worker count;
what was accepted before is not lost."""
import pickle
import re

import pyarrow as pa
import pytest

import sparktimely as st
import sparktimely.differential as dd
from sparktimely import Product

WORKERS = pytest.mark.parametrize("workers", [1, 2, 3])


def run_stream(records, build, workers):
    """``build(collection)`` over ``as_collection`` of a stream of raw ``records``."""
    def job(worker):
        handle = st.InputHandle()
        probe = worker.dataflow(lambda scope: build(dd.as_collection(scope.input_from(handle))).probe())
        if worker.index == 0:
            handle.send_batch(list(records))
        handle.close()
        worker.step_while(lambda: not probe.done())
    st.execute(job, workers=workers)


@WORKERS
@pytest.mark.timeout(60)
def test_a_non_integer_diff_is_rejected_with_its_record(workers):
    with pytest.raises(st.WorkerError, match=r"ArrangeBySelf.*diff of update \('x', 0, 1\.5\) "
                                             r"is not an integer"):
        run_stream([("ok", 0, 1), ("x", 0, 1.5)], lambda c: c.distinct().inner, workers)


@WORKERS
@pytest.mark.timeout(60)
def test_explode_refuses_a_diff_that_is_not_an_integer_where_it_is_made(workers):
    for bad, kind in ((0.5, "float"), (None, "NoneType")):
        with pytest.raises(st.WorkerError, match=rf"'Explode'.* explode: f\('x'\) gave \('x', "
                                                 rf"{bad}\), whose diff is not an integer "
                                                 rf"\({kind}\)"):
            run_stream([("x", 0, 2)], lambda c: c.explode(lambda d: [(d, bad)]).inner, workers)


@WORKERS
@pytest.mark.timeout(60)
def test_non_pairs_into_arrange_by_key_are_rejected_with_their_record(workers):
    with pytest.raises(st.WorkerError, match=r"ArrangeByKey: the data 5 of update \(5, 0, 1\) "
                                             r"is not a \(key, val\) pair"):
        run_stream([((1, "a"), 0, 1), (5, 0, 1)], lambda c: c.arrange_by_key().stream, workers)


@WORKERS
@pytest.mark.timeout(60)
def test_a_string_is_not_a_pair(workers):
    with pytest.raises(st.WorkerError, match=r"the data 'ab' of update \('ab', 0, 1\) is not a "
                                             r"\(key, val\) pair"):
        run_stream([("ab", 0, 1)], lambda c: c.join(c).inner, workers)


@pytest.mark.timeout(60)
def test_an_update_before_its_batch_time_is_rejected(run):
    def job(worker):
        handle = st.InputHandle()
        probe = worker.dataflow(lambda scope: dd.as_collection(scope.input_from(handle))
                                .count().probe())
        handle.advance_to(5)
        handle.send_batch([("x", 5, 1), ("y", 3, 1)])
        handle.close()
        worker.step_while(lambda: not probe.done())
    with pytest.raises(st.WorkerError, match=r"Count: update \('y', 3, 1\) has time 3, "
                                             r"which is not at or after the time of the batch "
                                             r"carrying it \(5\): a time went back"):
        run(job)


@pytest.mark.parametrize("operator", ["distinct", "join"])
def test_an_arrow_batch_at_a_time_beyond_int64_is_named(run, operator):
    """Arrow batches keep their times in int64: one at ``2**63`` failed arranging with
    'Python int too large to convert to C long', naming neither the time nor int64."""
    def job(worker):
        session = dd.InputSession()
        worker.dataflow(lambda scope: getattr(session.to_collection(scope), operator)(
            *([session.to_collection(scope)] if operator == "join" else []),
            **({"on": "k"} if operator == "join" else {})))
        session.advance_to(2 ** 63)
        if worker.index == 0:
            session.update_batch(pa.table({"k": [1], "diff": [1]}))
        session.close()
        worker.run()
    with pytest.raises(st.WorkerError, match=r"'Arrange\w+' .*OverflowError: Arrow collections "
                                             r"keep their times in int64: the time "
                                             r"9223372036854775808 is beyond its range"):
        run(job)


@pytest.mark.parametrize("operator", ["join", "reduce", "semijoin"])
def test_a_value_that_cannot_be_hashed_is_named_with_its_update(run, operator):
    """A list as a value is not routed (the key is), so it met the arrangement's
    consolidation: 'unhashable type: list', naming neither the update nor the cure."""
    build = {"join": lambda c: c.join(c), "semijoin": lambda c: c.semijoin(c.map(lambda r: r[0])),
             "reduce": lambda c: c.reduce(lambda key, input, output: output.append((1, 1)))}

    def job(worker):
        session = dd.InputSession()
        worker.dataflow(lambda scope: build[operator](session.to_collection(scope)))
        if worker.index == 0:
            session.insert(("k", (1, 2)))
            session.insert(("k", [1, 2]))
        session.close()
        worker.run()
    with pytest.raises(st.WorkerError, match=re.escape(
            "ArrangeByKey: the data ('k', [1, 2]) of update (('k', [1, 2]), 0, 1) cannot be "
            "hashed (unhashable type: 'list'): arranged data must be hashable (a tuple, not a "
            "list)")):
        run(job)


@pytest.mark.parametrize("operator, name", [("count", "Count"), ("distinct", "ArrangeBySelf")])
def test_data_that_cannot_be_hashed_is_named_with_its_update_at_one_worker(operator, name):
    """With several workers the exchange names it (``stable_hash cannot hash a list``); with
    one, only the first record of a batch is routed."""
    def job(worker):
        session = dd.InputSession()
        worker.dataflow(lambda scope: getattr(session.to_collection(scope), operator)())
        session.insert(("a",))
        session.insert(["b"])
        session.close()
        worker.run()
    with pytest.raises(st.OperatorError, match=re.escape(
            f"{name}: the data ['b'] of update (['b'], 0, 1) cannot be hashed")):
        st.execute_directly(job)


def test_an_input_session_refuses_to_mix_updates_and_arrow_batches_losing_nothing(run):
    import pyarrow as pa
    batch = pa.table({"x": [1], "diff": [1]})

    def job(worker):
        python, arrow = dd.InputSession(), dd.InputSession()
        got = worker.dataflow(lambda scope: (python.to_collection(scope).inner.capture(),
                                             arrow.to_collection(scope).inner.capture()))
        python.insert("a")                          # buffered, not sent yet: still accepted
        arrow.update_batch(batch)
        errors = []
        for mix in (lambda: python.update_batch(batch), lambda: arrow.update("b", 1),
                    lambda: arrow.update_at("b", 3, 1), lambda: arrow.insert("b")):
            with pytest.raises(TypeError) as caught:
                mix()
            errors.append(str(caught.value))
        python.close()
        arrow.close()
        worker.run()
        return errors, got[0].extract(), [t.to_pydict() for _, t in got[1].extract()]
    results = run(job)
    for errors, _, tables in results:
        assert [e.split(":")[0] for e in errors] == [
            "InputSession.update_batch", "InputSession.update", "InputSession.update_at",
            "InputSession.insert"]
        assert "cannot send Arrow batches on an input that has sent records" in errors[0]
        assert "cannot send records on an input that has sent Arrow batches" in errors[1]
        assert tables == [{"x": [1], "diff": [1]}]
    assert [u for r in results for _, updates in r[1] for u in updates] == \
        [("a", 0, 1)] * run.workers


def test_a_named_session_names_itself_in_its_errors(run):
    """A program with several sessions is told which one was given a bad update."""
    def job(worker):
        edges = dd.InputSession("edges")
        worker.dataflow(lambda scope: edges.to_collection(scope).probe())
        edges.advance_to(2)
        errors = []
        for bad in (lambda: edges.advance_to(1), lambda: edges.update_at("d", 3, "1"),
                    lambda: edges.update_batch([("d", 1)])):
            try:
                bad()
            except (TypeError, ValueError) as error:
                errors.append(str(error).split(":")[0])
        edges.close()
        worker.run()
        return errors
    assert run(job) == [["edges.advance_to(1)", "edges.update_at", "edges.update_batch"]] \
        * run.workers


def test_input_session_rejects_bad_updates_and_keeps_the_good_ones(run):
    def job(worker):
        session = dd.InputSession()
        captured = worker.dataflow(lambda scope: session.to_collection(scope).consolidate()
                                   .inner.capture())
        session.insert("a")
        session.advance_to(2)
        errors = []
        for bad in (lambda: session.update_at("b", 1, 1), lambda: session.advance_to(1),
                    lambda: session.update("c", 0.5), lambda: session.update_at("d", 3, "1")):
            try:
                bad()
            except (TypeError, ValueError) as error:
                errors.append(f"{type(error).__name__}: {error}")
        session.insert("e")
        session.close()
        worker.run()
        return errors, captured.extract()
    results = run(job)
    for errors, _ in results:
        assert errors == [
            "ValueError: InputSession.update_at('b', 1, 1): the time is before the session's "
            "time 2 (times go forward only)",
            "ValueError: InputSession.advance_to(1): 1 is earlier than the session's time 2; "
            "a session advances only to times at or after it",
            "TypeError: InputSession.update: the diff of 'c' must be an integer, not 0.5",
            "TypeError: InputSession.update_at: the diff of 'd' must be an integer, not '1'",
        ]
    workers = run.workers                       # every worker's session inserted "a" and "e"
    assert sorted(u for _, captured in results for _, updates in captured for u in updates) \
        == [("a", 0, workers), ("e", 2, workers)]


def test_update_at_product_times_checks_the_partial_order():
    def job(worker):
        session = dd.InputSession()
        worker.dataflow(lambda scope: session.to_collection(scope).probe(), timestamp=Product)
        session.advance_to(Product(1, 1))
        with pytest.raises(ValueError, match=r"Product\(2, 0\).*before the session's time "
                                             r"Product\(1, 1\)"):
            session.update_at("x", Product(2, 0), 1)
        session.close()
    st.execute_directly(job)


def test_reduce_logic_must_append_pairs():
    def build(scope):
        return dd.from_stream(scope.to_stream([(1, 2)])).reduce(
            lambda key, vals, out: out.append(7)).probe()
    with pytest.raises(st.OperatorError, match=r"reduce: logic must append \(val, diff\) pairs "
                                               r"with an integer diff to output, got 7 for key 1"):
        st.example(build)


def test_reduce_output_vals_must_be_hashable():
    """Was "TypeError: unhashable type: 'list'", naming neither the key nor the output."""
    def build(scope):
        return dd.from_stream(scope.to_stream([(1, 2)])).reduce(
            lambda key, vals, out: out.append(([v for v, _ in vals], 1))).probe()
    with pytest.raises(st.OperatorError, match=r"reduce: logic appended \(\[2\], 1\) for key 1, "
                                               r"whose val cannot be hashed \(unhashable type: "
                                               r"'list'\): output vals are records of a "
                                               r"collection and must be hashable"):
        st.example(build)


def test_arrow_batches_need_key_columns():
    import pyarrow as pa

    def build(scope):
        rows = pa.table({"k": [1], "diff": [1]})
        return dd.as_collection(scope.to_stream(rows)).arrange_by_key().stream.probe()
    with pytest.raises(st.OperatorError, match=r"an Arrow collection is arranged by columns: "
                                               r"use arrange_by_key\(key='column'\)"):
        st.example(build)


@pytest.mark.parametrize("call", ["join", "semijoin", "antijoin"])
def test_a_join_of_arrow_collections_without_on_names_the_join_and_on(call):
    """Not the arrangement the join makes (the user called no arrange_by_key)."""
    import pyarrow as pa

    def build(scope):
        rows = dd.as_collection(scope.to_stream(pa.table({"k": [1], "v": [2], "diff": [1]})))
        return getattr(rows, call)(rows).inner.probe()
    with pytest.raises(st.OperatorError, match=re.escape(
            f"raised TypeError: {call}: Arrow collections are joined on key columns: give "
            f"on='column' (or a list of columns)")):
        st.example(build)


def test_a_join_of_an_arrow_and_a_python_collection_names_the_join():
    import pyarrow as pa

    def build(scope):
        rows = dd.as_collection(scope.to_stream(pa.table({"k": [1], "v": [2], "diff": [1]})))
        pairs = dd.from_stream(scope.to_stream([(1, "a")]))
        return rows.join(pairs, on="k").inner.probe()
    with pytest.raises(st.OperatorError, match=re.escape(
            "raised TypeError: join: on='k' names Arrow columns, but one of its collections "
            "carries Python updates (join Arrow collections with on=, Python ones without)")):
        st.example(build)


@pytest.mark.parametrize("reduce, clash", [
    (lambda c: c.count(), "'count' would repeat a key column"),
    (lambda c: c.reduce(key="k", aggs={"k": ("count", None)}), "'k' would repeat a key column"),
    (lambda c: c.reduce(key="k", aggs={"diff": ("sum", "count")}), "'diff' would repeat the diff"),
])
def test_arrow_aggregation_output_names_must_not_repeat_a_column(reduce, clash):
    """A count over every column of rows that have a ``count`` column (or an aggregation
    named like a key column, or ``diff``) is told by name, not left to a schema with one
    name twice."""
    import pyarrow as pa

    def build(scope):
        rows = pa.table({"k": [1, 1], "count": [5, 6], "diff": [1, 1]})
        return reduce(dd.as_collection(scope.to_stream(rows))).probe()
    with pytest.raises(st.OperatorError, match=clash):
        st.example(build)


@pytest.mark.parametrize("build, told", [
    (lambda c: c.join([1, 2]), "join: expected a differential Collection, got list"),
    (lambda c: c.join_map(c, 5), "join_map: expected a function, got 5"),
    (lambda c: c.concat(c.inner), "concat: expected a differential Collection, got "),
    (lambda c: c.iterate(5), "iterate: expected a function, got 5"),
    (lambda c: c.map("x"), "map: expected a function, got 'x'"),
    (lambda c: c.filter(None), "filter: expected a function, got None"),
])
def test_a_collection_method_given_the_wrong_argument_says_so_where_it_is_built(build, told):
    with pytest.raises(TypeError, match=re.escape(told)):
        st.execute_directly(lambda worker: worker.dataflow(
            lambda scope: build(dd.from_stream(scope.to_stream([(1, 2)])))))


@WORKERS
@pytest.mark.timeout(60)
def test_from_stream_of_batches_that_have_diffs_names_as_collection(workers):
    import pyarrow as pa
    batch = pa.record_batch({"k": ["a"], "diff": pa.array([1], pa.int64())})
    with pytest.raises(st.WorkerError, match=r"from_stream: the batch has a 'diff' column "
                                             r"already.*dd.as_collection"):
        st.execute(lambda worker: worker.dataflow(lambda scope: dd.from_stream(
            scope.to_stream([batch] if worker.index == 0 else [])).count(key="k").probe()),
            workers=workers)


def test_an_update_after_close_is_refused_not_lost():
    def job(worker):
        session = dd.InputSession()
        worker.dataflow(lambda scope: session.to_collection(scope).probe())
        session.close()
        refused = []
        for change in (lambda: session.insert("late"), lambda: session.update_at("x", 5, 1),
                       lambda: session.update("x", 2)):
            with pytest.raises(RuntimeError, match="the session is closed"):
                change()
            refused.append(True)
        return refused
    assert st.execute_directly(job) == [True] * 3


def test_numpy_integer_keys_count_with_the_ints_they_equal(run):
    import numpy as np

    def job(worker):
        session = dd.InputSession()
        captured = worker.dataflow(lambda scope: session.to_collection(scope).count()
                                   .inner.capture())
        if worker.index == worker.peers - 1:
            for key in (np.int64(1), 1, np.int32(2), 2.0, np.uint8(1)):
                session.insert(key)
        session.close()
        worker.run()
        return [update for _, batch in captured.extract() for update in batch]
    counts = sorted((int(k), n, t, d) for updates in run(job) for (k, n), t, d in updates)
    assert counts == [(1, 3, 0, 1), (2, 2, 0, 1)]


@WORKERS
@pytest.mark.timeout(60)
def test_a_key_stable_hash_cannot_hash_is_named_with_the_exchange_it_failed_in(workers):
    with pytest.raises(st.WorkerError, match=r"the exchange into operator 'Count'.*"
                                             r"its route raised TypeError on the record.*frozenset"):
        run_stream([((frozenset({1}), "a"), 0, 1)], lambda c: c.count().inner, workers)


@WORKERS
@pytest.mark.timeout(60)
def test_a_variable_never_set_is_named(workers):
    def build(scope):
        def loop(inner):
            reach = dd.Variable(inner)
            return reach.leave()
        return scope.iterative(loop).inner.probe()
    with pytest.raises(st.WorkerError, match=r"a dd.Variable was never defined: call "
                                             r"var.set\(collection\)"):
        st.execute(lambda worker: worker.dataflow(build), workers=workers)


@WORKERS
@pytest.mark.timeout(60)
@pytest.mark.parametrize("given, told", [
    ("outer", "ValueError: Variable.set: the collection is in scope 'dataflow-0', not in the "
              "variable's 'dataflow-0/iterative-1': enter it first (collection.enter(scope))"),
    (None, "TypeError: Variable.set: expected a differential Collection, got NoneType")])
def test_a_variable_set_to_what_it_cannot_be_names_set(workers, given, told):
    """Were 'connect_loop: the stream must be in the scope that created the loop' and
    AttributeError: 'NoneType' object has no attribute 'inner'."""
    def build(scope):
        outer = dd.from_stream(scope.to_stream([1]))

        def loop(inner):
            return dd.Variable(inner).set(outer if given else None).leave()
        return scope.iterative(loop).inner.probe()
    with pytest.raises(st.WorkerError, match=re.escape(told)):
        st.execute(lambda worker: worker.dataflow(build), workers=workers)


@pytest.mark.timeout(60)
def test_a_null_diff_or_a_time_of_another_type_is_refused_at_the_call_losing_nothing():
    import numpy as np
    import pyarrow as pa

    def job(worker):
        session = dd.InputSession()
        out = worker.dataflow(lambda scope: session.to_collection(scope).consolidate()
                              .inner.capture())
        session.update_batch(pa.table({"w": ["a"], "diff": [1]}))
        errors = []
        for call in (lambda: session.update_batch(pa.table({"w": ["b", "c"], "diff": [1, None]})),
                     lambda: session.advance_to(np.int64(3)),
                     lambda: session.update_at("x", 2.0, 1)):
            with pytest.raises((TypeError, ValueError)) as error:
                call()
            errors.append(str(error.value))
        session.close()
        worker.run()
        return errors, [table.to_pydict() for _, table in out.extract()]
    errors, tables = st.execute_directly(job)
    assert errors == [
        "InputSession.update_batch: the 'diff' column has 1 null (the first in row 1); "
        "every row needs its diff",
        "InputSession.advance_to: time np.int64(3) is not of this scope's type (like 0)",
        "InputSession.update_at: time 2.0 is not of this scope's type (like 0)"]
    assert tables == [{"w": ["a"], "diff": [1]}]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_batch_without_an_integer_diff_is_refused_after_good_ones_losing_nothing(workers):
    """The diff column is looked at once per schema: a schema seen before must not let a
    batch of another through, and a narrower integer diff is still widened."""
    def job(worker):
        session = dd.InputSession()
        out = worker.dataflow(lambda scope: session.to_collection(scope).consolidate()
                              .inner.capture())
        errors = []
        for batch in (pa.table({"w": ["a"], "diff": [1]}), pa.table({"w": ["b"]}),
                      pa.table({"w": ["c"], "diff": ["1"]}), pa.table({"w": ["a"], "diff": [1]}),
                      pa.table({"w": ["d"], "diff": [1.0]}),
                      pa.table({"w": ["e"], "diff": pa.array([2], pa.int8())}),
                      pa.table({"w": ["e"], "diff": pa.array([-1], pa.int8())})):
            try:
                session.update_batch(batch)
            except (TypeError, ValueError) as error:
                errors.append(f"{type(error).__name__}: {error}")
        session.close()
        worker.run()
        return errors, [row for _, table in out.extract() for row in table.to_pylist()]
    parts = st.execute(job, workers=workers)
    assert {tuple(errors) for errors, _ in parts} == {(
        "ValueError: InputSession.update_batch: the batch has no 'diff' column (columns: w)",
        "TypeError: InputSession.update_batch: the 'diff' column must be int64, not string",
        "TypeError: InputSession.update_batch: the 'diff' column must be int64, not double")}
    totals: dict = {}
    for _, rows in parts:
        for row in rows:
            totals[row["w"]] = totals.get(row["w"], 0) + row["diff"]
    assert totals == {"a": 2 * workers, "e": workers}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_batch_of_another_schema_is_refused_naming_update_batch_losing_nothing(workers):
    """The error named InputHandle.send_batch, which the user never called."""
    def job(worker):
        session = dd.InputSession()
        out = worker.dataflow(lambda scope: session.to_collection(scope).consolidate()
                              .inner.capture())
        session.update_batch(pa.table({"w": ["a"], "diff": [1]}))
        with pytest.raises(ValueError) as error:
            session.update_batch(pa.table({"w": [1], "diff": [1]}))
        session.update_batch(pa.table({"w": ["b"], "diff": pa.array([1], pa.int32())}))
        session.close()
        worker.run()
        return str(error.value), [row for _, table in out.extract() for row in table.to_pylist()]
    parts = st.execute(job, workers=workers)
    assert {error for error, _ in parts} == {
        "InputSession.update_batch: the batch's schema (w: int64, diff: int64) differs from "
        "the stream's schema (w: string, diff: int64)"}
    assert sorted((row["w"], row["diff"]) for _, rows in parts for row in rows) == [
        ("a", workers), ("b", workers)]


@pytest.mark.timeout(60)
def test_a_compaction_frontier_of_another_time_type_is_refused_naming_the_call():
    def job(worker):
        session = dd.InputSession()
        trace = worker.dataflow(lambda scope: session.to_collection(scope).arrange_by_self().trace)
        with pytest.raises(TypeError, match=re.escape(
                "set_logical_compaction: time None is not of this scope's type (like 0)")):
            trace.set_logical_compaction([None])
        with pytest.raises(TypeError, match=re.escape(
                "set_physical_compaction: time Product(1, 1) is not of this scope's type")):
            trace.set_physical_compaction([Product(1, 1)])
        for logical, physical, told in (([1.5], [], "time 1.5"), ([0], ["x"], "time 'x'")):
            with pytest.raises(TypeError, match=re.escape(          # (accepted unchecked)
                    f"set_compaction: {told} is not of this scope's type (like 0)")):
                trace.set_compaction(logical, physical)
        assert trace.get_logical_compaction() == [0]
        session.close()
        worker.run()
    st.execute_directly(job)


@pytest.mark.timeout(60)
def test_a_trace_handle_cannot_be_pickled_and_says_why():
    def job(worker):
        session = dd.InputSession()
        trace = worker.dataflow(lambda scope: session.to_collection(scope).arrange_by_self(
            name="Seen").trace)
        with pytest.raises(TypeError, match=re.escape(
                "a handle on the trace of 'Seen' cannot be pickled: the trace lives in this "
                "worker's memory")):
            pickle.dumps(trace)
        session.close()
        worker.run()
    st.execute_directly(job)


def test_a_session_advanced_to_a_product_before_it_is_connected_starts_there(run):
    """API.md: a session may be advanced before it is connected; with Product times the
    check against its unknown time (an int 0) failed with an AttributeError."""
    def job(worker):
        session = dd.InputSession()
        session.advance_to(Product(1, 0))
        out = worker.dataflow(lambda scope: session.to_collection(scope).inner.capture(),
                              timestamp=Product)
        session.insert(f"x{worker.index}")
        with pytest.raises(ValueError, match=r"advance_to\(Product\(0, 5\)\): Product\(0, 5\) is incomparable with the "
                                             r"session's time Product\(1, 0\)"):
            session.advance_to(Product(0, 5))
        with pytest.raises(TypeError):
            session.advance_to(3)                 # an int in a Product dataflow
        session.close()
        worker.run()
        return out.extract()
    parts = run(job)
    assert sorted(u for part in parts for _, updates in part for u in updates) == [
        (f"x{w}", Product(1, 0), 1) for w in range(run.workers)]


@pytest.mark.parametrize("call", ["insert", "remove", "update", "update_at", "update_batch"])
def test_updates_before_a_session_feeds_a_dataflow_are_named_at_the_call(call):
    """They reach no dataflow (timely's register flushes first): told at the call, naming
    the session and to_collection (the handle's words came from inside to_collection; an
    insert or remove was told as an update)."""
    import pyarrow as pa
    session = dd.InputSession()
    do = {"insert": lambda: session.insert("a"), "remove": lambda: session.remove("a"),
          "update": lambda: session.update("a", 2),
          "update_at": lambda: session.update_at("a", 3, 1),
          "update_batch": lambda: session.update_batch(pa.table({"a": [1], "diff": [1]}))}
    with pytest.raises(RuntimeError, match=rf"InputSession.{call}: the session feeds no dataflow "
                                           rf"yet: build one with session.to_collection\(scope\)"):
        do[call]()


def test_arranged_join_of_arrangements_by_other_key_columns_is_refused_where_built():
    """It gave no rows and no error."""
    import pyarrow as pa

    def build(scope):
        def arranged(key):
            batch = pa.record_batch({"k": [1], "w": [2], "diff": pa.array([1], pa.int64())})
            return dd.as_collection(scope.to_stream([batch])).arrange_by_key(key=key)
        arranged("k").join(arranged(["k", "w"]))
    with pytest.raises(ValueError, match=r"Arranged.join: the arrangements are keyed by "
                                         r"different columns \('k' and \['k', 'w'\]\)"):
        st.example(build)


@WORKERS
@pytest.mark.timeout(60)
@pytest.mark.parametrize("arrow_side", [0, 1])
def test_a_join_of_arrow_rows_with_python_updates_is_named_with_its_operator(workers, arrow_side):
    """A semijoin of an Arrow arrangement by Python keys failed with an AttributeError from
    inside the Arrow joiner."""
    import pyarrow as pa

    def job(worker):
        def build(scope):
            rows = pa.record_batch({"k": [1, 2], "v": [3, 4], "diff": pa.array([1, 1])})
            arrow = dd.as_collection(scope.to_stream([rows])).arrange_by_key("k")
            keys = dd.from_stream(scope.to_stream([1, 2])).arrange_by_self()
            pair = (arrow, keys) if arrow_side == 0 else (keys, arrow)
            return pair[0].semijoin(pair[1]).inner.probe()
        probe = worker.dataflow(build)
        worker.step_while(lambda: not probe.done())
    told = (r"input 1 holds Arrow rows and input 2 Python updates" if arrow_side == 0
            else r"input 1 holds Python updates and input 2 Arrow rows")
    with pytest.raises(st.WorkerError, match=rf"'Semijoin'.*Semijoin: {told}: both sides of a "
                                             rf"join hold one kind"):
        st.execute(job, workers=workers)


def test_as_collection_of_an_arrow_arrangement_refuses_a_function():
    """It was ignored: the rows came back as they were."""
    rows = pa.record_batch({"k": [1, 2], "v": [3, 4], "diff": pa.array([1, 1])})
    with pytest.raises(TypeError, match=re.escape(
            "as_collection: an Arrow arrangement (by 'k') gives its rows back as "
            "RecordBatches and takes no function; map the collection it returns (map_batches) "
            "instead")):
        st.example(lambda scope: dd.as_collection(scope.to_stream([rows])).arrange_by_key(
            key="k").as_collection(lambda k, v: 999))


@pytest.mark.timeout(60)
def test_entering_a_collection_instead_of_a_scope_names_enter_and_the_scope_to_use():
    """Inside iterate, ``edges.enter(inner)`` with ``inner`` the iterated collection was an
    AttributeError about 'parent', from inside sparktimely."""
    def build(scope):
        edges = dd.from_stream(scope.to_stream([(1, 2)]))
        return dd.from_stream(scope.to_stream([1])).iterate(
            lambda inner: edges.enter(inner).map(lambda e: e[1]).concat(inner).distinct())
    with pytest.raises(TypeError, match=re.escape(
            "Collection.enter: expected a scope nested directly in the collection's (inside "
            "iterate, the inner collection's is .scope), got Collection(scope='dataflow-0/"
            "iterative-1') (Variable)")):
        st.example(build)


@pytest.mark.timeout(60)
def test_an_import_into_an_iterative_scope_says_to_import_at_the_top_and_enter():
    """It was told as times of two types."""
    def job(worker):
        base = dd.InputSession()
        trace = worker.dataflow(lambda scope: base.to_collection(scope).arrange_by_key().trace,
                                name="base")
        with pytest.raises(ValueError, match=re.escape(
                "import_ of the trace of 'ArrangeByKey' into scope 'query/iterative-1': "
                "import_ needs a dataflow's top-level scope; import the trace there and "
                "bring it in with .enter(scope)")):
            worker.dataflow(lambda scope: scope.iterative(
                lambda inner: trace.import_(inner).as_collection().leave()), name="query")
        base.close()
    with pytest.raises(ValueError):              # the failed build fails the worker
        st.execute_directly(job)


def test_an_arrangement_entering_a_scope_of_product_rounds_says_to_enter_the_collection():
    """It failed in the join, comparing Product(0, 0) with 0."""
    def build(scope):
        edges = dd.from_stream(scope.to_stream([(0, 1)]))
        arranged = edges.arrange_by_key()

        def rounds(inner):
            return arranged.enter(inner).semijoin(edges.map(lambda e: e[0]).enter(inner)).leave()
        return scope.scoped("Rounds", Product, rounds)
    with pytest.raises(ValueError, match=re.escape(
            "Arranged.enter: scope 'dataflow-0/Rounds-1' counts its rounds in Product times; "
            "an arrangement enters only scopes of int rounds (scope.iterative, "
            "scope.scoped(name, int, ...)): enter the collection and arrange it inside")):
        st.example(build)


def test_arrow_collections_in_a_scope_of_product_rounds_are_refused_naming_the_times():
    """It failed in int(), given a Product."""
    def build(scope):
        session = dd.InputSession()
        rows = session.to_collection(scope)
        session.update_batch(pa.record_batch({"k": pa.array([1, 2], pa.int64()),
                                              "diff": pa.array([1, 1], pa.int64())}))
        session.close()
        return scope.scoped("Rounds", Product, lambda inner: rows.enter(inner).distinct().leave())
    with pytest.raises(st.OperatorError, match=re.escape(
            "operator 'ArrangeBySelf' (address (0, -1, 2)) raised TypeError: Arrow collections "
            "need int or Product-of-int times, not times like Product(0, Product(0, 0)) (a "
            "scope.scoped of other rounds)")):
        st.example(build)


@pytest.mark.parametrize("timestamp", [int, st.Product])
@pytest.mark.timeout(60)
def test_an_import_of_a_trace_arranged_in_a_loop_says_to_arrange_it_outside(timestamp):
    """Into a dataflow of Product times it was told as 'has times like Product(0, 0), the
    scope times like Product(0, 0)'."""
    def job(worker):
        base = dd.InputSession()

        def arrange(scope):
            return scope.iterative(lambda inner: base.to_collection(scope).enter(inner)
                                   .arrange_by_self().trace)
        trace = worker.dataflow(arrange, name="loop")
        with pytest.raises(TypeError, match=re.escape(
                "import_: the trace of 'ArrangeBySelf' was arranged inside a nested scope "
                "(times like Product(0, 0)); import_ takes the traces "
                "of a dataflow's top-level scope: leave() the collection and arrange it there")):
            worker.dataflow(lambda scope: trace.import_(scope), name="query",
                            timestamp=timestamp)
        base.close()
    with pytest.raises(TypeError):               # the failed build fails the worker
        st.execute_directly(job)


@pytest.mark.timeout(60)
def test_a_join_with_an_arrangement_of_another_dataflow_says_to_import_its_trace():
    """Seed 003 imports a trace into each query dataflow; an arrangement used there as
    it is was told only as one of two scopes. Within one dataflow, nested scopes enter."""
    def job(worker):
        base = dd.InputSession()
        built = {}

        def arrange(scope):
            built["knows"] = base.to_collection(scope).arrange_by_key()
        worker.dataflow(arrange, name="base")
        with pytest.raises(ValueError, match=re.escape(
                "Join: the arrangements belong to different scopes ('query', 'base'); an "
                "arrangement is shared with another dataflow through its trace: "
                "arranged.trace.import_(scope) in the dataflow that uses it")):
            worker.dataflow(lambda scope: dd.InputSession().to_collection(scope)
                            .arrange_by_key().join(built["knows"]), name="query")
        base.close()

    def nested(scope):
        outer = dd.InputSession().to_collection(scope).arrange_by_key()
        scope.iterative(lambda inner: dd.InputSession().to_collection(scope).enter(inner)
                        .arrange_by_key().join(outer))
    with pytest.raises(ValueError):              # the failed build fails the worker
        st.execute_directly(job)
    with pytest.raises(ValueError, match=re.escape(
            "Join: the arrangements belong to different scopes ('loop/iterative-1', 'loop'); "
            "bring the outer one in with .enter(scope)")):
        st.execute_directly(lambda worker: worker.dataflow(nested, name="loop"))


class Tick:
    """A time type with what timely needs (an order, a minimum), but no join or meet."""

    def __init__(self, value: int) -> None:
        self.value = value

    @classmethod
    def minimum(cls) -> "Tick":
        return cls(0)

    def less_equal(self, other: "Tick") -> bool:
        return self.value <= other.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tick) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


@WORKERS
@pytest.mark.timeout(60)
def test_a_collection_of_times_without_join_is_refused_where_it_is_made(workers):
    """It failed at the first update, in Python's words ('Tick' object has no attribute
    'join'), naming whichever operator met it first."""
    built = []

    def job(worker):
        def build(scope):
            collection = dd.InputSession().to_collection(scope)
            built.append(worker.index)
            return collection.count().probe()
        worker.dataflow(build, timestamp=Tick)
    with pytest.raises(st.WorkerError, match=r"differential collections need times with join "
                                             r"and meet .* time type Tick has no join or meet"):
        st.execute(job, workers=workers)
    assert built == []
