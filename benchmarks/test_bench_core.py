"""pytest-benchmark versions of the core figures: ``pytest benchmarks/test_bench_core.py``.

Each reports its own timing; the comparison rows (Pipe round trip, list comprehension) are
benchmarked beside them so the ratio comes from the same run.
"""
from benchmarks.bench_core import pipe_echo

import sparktimely as st


def test_empty_round_one_worker(benchmark):
    worker = st.Worker()
    input = st.InputHandle()
    probe = worker.dataflow(lambda scope: scope.input_from(input).map(lambda x: x).probe())
    round = [0]

    def one_round():
        round[0] += 1
        input.advance_to(round[0])
        while probe.less_than(round[0]):
            worker.step()
    benchmark(one_round)


def test_pipe_round_trip(benchmark):
    with pipe_echo() as here:
        benchmark(lambda: (here.send(1), here.recv()))


def test_map_10k_batch(benchmark):
    worker = st.Worker()
    input = st.InputHandle()
    probe = worker.dataflow(lambda scope: scope.input_from(input).map(lambda x: x + 1).probe())
    data = list(range(10_000))
    round = [0]

    def one_batch():
        round[0] += 1
        input.send_batch(data)
        input.advance_to(round[0])
        while probe.less_than(round[0]):
            worker.step()
    benchmark(one_batch)


def test_list_comprehension_10k(benchmark):
    data = list(range(10_000))
    f = lambda x: x + 1  # noqa: E731
    benchmark(lambda: [f(x) for x in data])
