"""An exchange gathers the parts it splits off during one activation per worker (as timely's
exchange buffers per destination), so that each worker receives batches about as large as
those sent in, not a ``1/peers`` share of each; what arrives, and at which time, is what was
sent. Checked at 1, 2 and 3 workers against the rows sent (the ``run`` fixture)."""
from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

import sparktimely as st
from sparktimely.testing import consolidate

pytestmark = pytest.mark.timeout(120)

BATCH = 1000
WORDS = [f"w{i % 997}" for i in range(12 * BATCH)]


def _received(run, batches_of, route):
    """Each worker gives its share of WORDS as the batches ``batches_of(words)`` in one
    activation, into ``Exchange(route)`` (None: ``key="word"``); per worker: the sizes of
    the batches it received and the words, with the worker that received each."""
    def job(worker):
        share = -(-len(WORDS) // worker.peers)
        mine = batches_of(WORDS[worker.index * share:(worker.index + 1) * share])
        sizes: list[int] = []
        words: list = []

        def ctor(capability, info):
            def logic(input, output):
                for _, batch in input:
                    sizes.append(len(batch) if isinstance(batch, list) else batch.num_rows)
                    words.extend(batch if isinstance(batch, list)
                                 else batch.column("word").to_pylist())
            capability.drop()
            return logic

        def give(capability, info):
            def logic(output):
                for batch in mine:
                    output.give_at(capability, batch)
                capability.drop()
            return logic
        pact = st.Exchange(route) if route is not None else st.Exchange(key="word")
        worker.dataflow(lambda scope: st.source(scope, "Give", give).unary(
            pact, "Receive", ctor).probe())
        worker.run()
        return sizes, [(word, worker.index) for word in words]
    return run(job)


def _check(results, workers):
    received = [pair for _, pairs in results for pair in pairs]
    assert Counter(word for word, _ in received) == Counter(WORDS)      # every row, once
    assert len(dict(received)) == len(set(received))                    # a word on one worker
    for sizes, _ in results:
        # each sender's parts for this worker come as full batches and at most one short one
        assert sum(size < BATCH for size in sizes) <= workers, sizes


def test_arrow_parts_are_gathered_into_batches_as_large_as_those_sent(run):
    def arrow_batches(words):
        return pa.table({"word": words}).to_batches(max_chunksize=BATCH)
    _check(_received(run, arrow_batches, None), run.workers)


def test_record_parts_are_gathered_into_batches_as_large_as_those_sent(run):
    def record_batches(words):
        return [words[i:i + BATCH] for i in range(0, len(words), BATCH)]
    _check(_received(run, record_batches, st.stable_hash), run.workers)


def test_parts_gathered_in_one_activation_keep_their_times(run):
    """One activation sends at time 1, then 0, then 1 again: the parts of each time reach
    the workers at that time."""
    table = pa.table({"word": WORDS})
    thirds = [table.slice(i * 4 * BATCH, 4 * BATCH).to_batches(max_chunksize=BATCH)
              for i in range(3)]

    def job(worker):
        mine = thirds if worker.index == 0 else [[], [], []]   # one sender: times known

        def ctor(capability, info):
            later = capability.delayed(1)

            def logic(output):
                for cap, part in zip([later, capability, later], mine):
                    for batch in part:
                        output.give_at(cap, batch)
                capability.drop()
                later.drop()
            return logic
        captured = worker.dataflow(lambda scope: st.source(scope, "Times", ctor)
                                   .exchange(key="word").capture())
        worker.run()
        return captured.extract()
    by_time = {time: Counter(table.column("word").to_pylist())
               for time, table in consolidate(run(job))}
    middle = thirds[1]
    assert by_time == {
        0: Counter(word for batch in middle for word in batch.column("word").to_pylist()),
        1: Counter(word for part in (thirds[0], thirds[2]) for batch in part
                   for word in batch.column("word").to_pylist())}
