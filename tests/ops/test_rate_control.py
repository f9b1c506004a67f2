"""Rate-controlled output: lazily given records wait in bounded queues, at 1-3 workers."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import sparktimely as st
from sparktimely.dataflow.ports import BATCH_SIZE, QUEUE_LIMIT

from ops_matrix import WORKERS, merged


def queue_watcher(stream, seen):
    """Passes batches on and records, per scheduling, how many batches were waiting."""
    def ctor(cap, info):
        cap.drop()

        def logic(input, output):
            seen.append(len(input.queue))
            for cap, batch in input:
                output.give_at(cap, batch)
        return logic
    return stream.unary(st.Pipeline, "Watch", ctor)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("workers", WORKERS)
def test_an_exploding_flat_map_keeps_downstream_queues_bounded(workers):
    per_record = 50 * BATCH_SIZE                        # each record makes 50 batches

    def job(worker):
        seen = []
        counts = worker.dataflow(lambda scope: queue_watcher(
            scope.to_stream(range(worker.index, 12, worker.peers))
            .flat_map(lambda x: (x for _ in range(per_record))), seen)
            .accumulate(0, lambda total, batch: total + sum(batch)).capture())
        worker.run()
        return max(seen), counts
    results = st.execute(job, workers=workers)
    assert all(peak <= QUEUE_LIMIT for peak, _ in results)
    assert sum(sum(c) for _, c in merged(c for _, c in results)) == sum(range(12)) * per_record


@pytest.mark.parametrize("workers", WORKERS)
def test_queue_limit_is_set_per_output(workers):
    def job(worker):
        seen = []

        def ctor(cap, info):
            def logic(output):
                output.queue_limit = 2
                output.session(cap).give_iterator_later(iter(range(20 * BATCH_SIZE)))
                cap.drop()
            return logic
        counts = worker.dataflow(lambda scope: queue_watcher(
            st.source(scope, "Many", ctor), seen).count().capture())
        worker.run()
        return max(seen), counts
    results = st.execute(job, workers=workers)
    assert all(peak <= 2 for peak, _ in results)
    assert merged(c for _, c in results) == [(0, [20 * BATCH_SIZE] * workers)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("limit", [0, -1, 2.5])
def test_a_queue_limit_that_can_never_have_room_is_named(workers, limit):
    """A limit below 1 never had room: the operator rescheduled itself forever, the stall
    detection never firing."""
    def job(worker):
        def ctor(cap, info):
            def logic(output):
                output.queue_limit = limit
                output.session(cap).give_iterator_later(iter(range(5)))
                cap.drop()
            return logic
        worker.dataflow(lambda scope: st.source(scope, "Lazy", ctor).probe())
        worker.run()
    with pytest.raises(st.WorkerError, match=re.escape(
            f"operator 'Lazy' (address (0, 0)) raised ValueError: output 0's queue_limit "
            f"must be a positive integer, got {limit!r}")):
        st.execute(job, workers=workers)


@pytest.mark.parametrize("value", ["0", "many"])
def test_a_queue_limit_variable_that_is_no_positive_integer_is_named(value):
    """SPARKTIMELY_QUEUE_LIMIT=0 hung every lazily given output; a word failed the import
    with int()'s words."""
    done = subprocess.run([sys.executable, "-c", "import sparktimely"], capture_output=True,
                          text=True, timeout=60,
                          env=dict(os.environ, SPARKTIMELY_QUEUE_LIMIT=value))
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"ValueError: $SPARKTIMELY_QUEUE_LIMIT must be a positive integer, got {value!r}")


def test_a_lazy_iterator_that_raises_names_the_operator():
    def explode(x):
        yield 1
        raise ValueError("bad record")
    with pytest.raises(st.OperatorError, match="'FlatMap'.*ValueError on the record 1: bad record"):
        st.example(lambda scope: scope.to_stream([1]).flat_map(explode).probe())


@pytest.mark.parametrize("workers", WORKERS)
def test_lazy_output_at_several_times_keeps_each_time_open(workers):
    """A held-back iterator keeps its time from completing: per-time counts are exact."""
    def job(worker):
        input = st.InputHandle()
        counts = worker.dataflow(lambda scope: scope.input_from(input)
                                 .flat_map(lambda n: iter(range(n))).count().capture())
        for time in range(4):
            input.send((time + 1) * 3 * BATCH_SIZE)
            input.advance_to(time + 1)
        input.close()
        worker.run()
        return counts
    got = merged(st.execute(job, workers=workers))
    assert got == [(t, [(t + 1) * 3 * BATCH_SIZE] * workers) for t in range(4)]
