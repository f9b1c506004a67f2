"""``Exchange(route, combine=f)``: the sending worker's combiner, applied to each batch before
it is partitioned, only when there are other workers; and the arrangements that use it instead
of an operator of their own, so that a program is the same at any number of workers."""
from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

import sparktimely as st
import sparktimely.differential as dd

pytestmark = pytest.mark.timeout(120)


def _sum_by_key(batch: list) -> list:
    """A combiner of ``(key, count)`` records: one record per key of the batch."""
    totals: Counter = Counter()
    for key, count in batch:
        totals[key] += count
    return sorted(totals.items())


def _arrived_and_totals(run, combine):
    """Every worker sends ``(key, 1)`` for keys 0..9, five times each, in one batch; the
    receiving operator records how many records arrived and sums the counts per key."""
    def job(worker):
        arrived: list[int] = []
        totals: Counter = Counter()

        def ctor(capability, info):
            capability.drop()

            def logic(input, output):
                for cap, batch in input:
                    arrived.append(len(batch))
                    for key, count in batch:
                        totals[key] += count
            return logic
        pact = st.Exchange(lambda record: record[0], combine=combine)
        records = [(key, 1) for key in range(10) for _ in range(5)]
        worker.dataflow(lambda scope: scope.to_stream(records).unary(pact, "Sum", ctor))
        worker.run()
        return sum(arrived), dict(totals)
    return run(job)


def test_combine_runs_on_the_sender_before_the_records_cross(run):
    combined = _arrived_and_totals(run, _sum_by_key)
    plain = _arrived_and_totals(run, None)
    totals: Counter = Counter()
    for _, per_worker in combined:
        totals.update(per_worker)
    assert totals == {key: 5 * run.workers for key in range(10)}      # nothing lost
    assert [t for _, t in combined] == [t for _, t in plain]         # same keys, same workers
    arrived = sum(count for count, _ in combined)
    if run.workers == 1:            # alone: nothing crosses, nothing is combined
        assert arrived == 50
    else:                           # each sender's 50 records cross as its 10 sums
        assert arrived == 10 * run.workers
    assert sum(count for count, _ in plain) == 50 * run.workers


def test_an_arrangement_is_the_same_program_at_any_number_of_workers(run):
    """No operator exists only at several workers (the arrangement combines inside its
    exchange): a checkpoint written at one number of workers names the same operators as
    the program at another; the counts are those of a Counter."""
    words = ["a", "b", "a", "c", "a", "b"]

    def job(worker):
        session = dd.InputSession()
        counts = worker.dataflow(lambda scope: session.to_collection(scope)
                                 .count(key="word").inner.capture())
        mine = words[worker.index::worker.peers]
        session.update_batch(pa.record_batch({"word": mine, "diff": [1] * len(mine)}))
        session.close()
        worker.run()
        [dataflow] = worker.dataflows().values()
        return [op.name for op in dataflow.operators], counts.extract()
    results = run(job)
    names = {tuple(names) for names, _ in results}
    assert len(names) == 1 and not any("Combine" in name for name in next(iter(names)))
    counted: Counter = Counter()
    for _, captured in results:
        for _, table in captured:
            for row in table.to_pylist():
                counted[(row["word"], row["count"])] += row["diff"]
    assert +counted == {(word, n): 1 for word, n in Counter(words).items()}
