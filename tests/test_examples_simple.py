"""timely's "simple" and "hello" examples, and what ``st.example`` returns."""
import sparktimely as st


def test_simple_to_stream_with_inspect():
    # timely: (0..10).to_stream(scope).inspect(|x| println!("seen: {:?}", x));
    seen = []
    st.example(lambda scope: scope.to_stream(range(10)).inspect(seen.append))
    assert seen == list(range(10))


def test_simple_rounds_with_inspect_and_probe():
    # timely's hello: send `round` at each round, advance, step while the probe lags.
    def job(worker):
        input = st.InputHandle()
        seen = []
        per_round = []
        probe = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x)
                                .inspect_time(lambda t, x: seen.append((t, x))).probe())
        for round in range(10):
            if worker.index == 0:
                input.send(round)
            input.advance_to(round + 1)
            while probe.less_than(input.time()):
                worker.step()
            per_round.append(list(seen))
        input.close()
        return seen, per_round
    seen, per_round = st.execute_directly(job)
    assert seen == [(r, r) for r in range(10)]
    for round in range(10):
        assert per_round[round] == [(r, r) for r in range(round + 1)]


def test_example_returns_build_value():
    assert st.example(lambda scope: 42) == 42
    marker = object()
    assert st.example(lambda scope: marker) is marker
    captured, probe = st.example(
        lambda scope: (lambda s: (s.capture(), s.probe()))(scope.to_stream(range(3))))
    assert captured.extract() == [(0, [0, 1, 2])]
    assert probe.done()


def test_example_build_called_once_with_a_scope():
    calls = []

    def build(scope):
        calls.append(scope)
        assert scope.index == 0 and scope.peers == 1
        return len(calls)
    assert st.example(build) == 1
    assert len(calls) == 1


def test_execute_directly_returns_value_and_runs_to_completion():
    def job(worker):
        assert (worker.index, worker.peers) == (0, 1)
        return worker.dataflow(lambda scope: scope.to_stream("abc").capture())
    assert st.execute_directly(job).extract() == [(0, ["a", "b", "c"])]
