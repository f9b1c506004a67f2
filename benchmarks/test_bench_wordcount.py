"""pytest-benchmark versions of the wordcount figures: ``pytest benchmarks/test_bench_wordcount.py``.

The same 200k words (``w{i % 10007}``) counted by sparktimely's columnar ``aggregate_batches``
on one in-process worker and by ``collections.Counter``, benchmarked side by side.
"""
import collections

import pyarrow as pa

import sparktimely as st

from benchmarks.bench_arrow import WORD_BATCH, words_table

WORDS = 200_000


def test_arrow_wordcount_one_worker(benchmark):
    batches = words_table(WORDS).to_batches(max_chunksize=WORD_BATCH)
    worker = st.Worker()
    counted: list[pa.Array] = []

    def one_count():
        counted.clear()
        probe = worker.dataflow(lambda scope: scope.to_stream(batches)
                                .aggregate_batches("word", {"n": ("count", None)})
                                .inspect_batch(lambda t, b: counted.append(b.column("n")))
                                .probe())
        worker.step_while(lambda: not probe.done())
    benchmark(one_count)
    assert sum(sum(c.to_pylist()) for c in counted) == WORDS


def test_counter_wordcount(benchmark):
    words = words_table(WORDS).column("word").to_pylist()
    counts = benchmark(lambda: collections.Counter(words))
    assert sum(counts.values()) == WORDS
