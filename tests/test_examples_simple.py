"""timely's "simple", "hello" and "loopdemo" examples at 1, 2 and 3 workers, and what ``st.example`` and ``st.execute_directly`` (one worker by definition)
return."""

import sparktimely as st
from examples import loopdemo, simple
from matrix_helpers import collatz_steps, per_worker


def test_simple_to_stream_with_inspect(run):
    # timely: (0..10).to_stream(scope).inspect(|x| println!("seen: {:?}", x));
    # to_stream produces the items on every worker.
    seen = per_worker(run.workers)
    run(lambda worker: worker.dataflow(
        lambda scope: scope.to_stream(range(10)).inspect(seen[scope.index].append)))
    assert seen == [list(range(10))] * run.workers


def test_simple_rounds_with_inspect_and_probe(run):
    # timely's hello: send `round` at each round, advance, step while the probe lags; the
    # exchange sends round r to worker r % peers.
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
    for index, (seen, per_round) in enumerate(run(job)):
        mine = [(r, r) for r in range(10) if r % run.workers == index]
        assert seen == mine
        for round in range(10):
            # everything up to this round, perhaps already some of later rounds
            assert [(t, x) for t, x in per_round[round] if t <= round] == \
                [(t, x) for t, x in mine if t <= round]


def test_simple_example_program_sees_each_round_at_its_time_on_every_worker(run):
    assert run(simple.simple) == [[(r, r) for r in range(10)]] * run.workers


def test_loopdemo_example_program_leaves_the_loop_in_step_order(run):
    seeds = [6, 27, 97, 871]
    got = sorted(pair for part in run(lambda w: loopdemo.collatz_job(w, seeds)) for pair in part)
    # the later a seed reaches 1, the later it leaves the loop, one time per step
    assert [seed for _, seed in got] == sorted(seeds, key=collatz_steps)
    assert [time for time, _ in got] == sorted(map(collatz_steps, seeds))


def test_loopdemo_example_program_reports_step_counts_wherever_a_seed_ends(run):
    seeds = [1, 6, 27, 97, 871]
    parts = run(lambda w: loopdemo.collatz_job(w, seeds))
    assert sorted(pair for part in parts for pair in part) == \
        sorted((collatz_steps(s), s) for s in seeds)
    if run.workers > 1:                     # exchanged by value: not all end on worker 0
        assert any(parts[1:]), parts


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
