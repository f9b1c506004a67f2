"""Many workers on one host: real forked processes talking through shared memory."""
import os
import re
import signal
import time

import psutil
import pytest
from segment_leaks import segments_of

import sparktimely as st
from sparktimely.dataflow.subgraph import PROGRESS
from sparktimely.shm import sweep_stale
from sparktimely.testing import execute_in_process
from examples.bfs import bfs, random_graph, reference_bfs
from examples.distinct import distinct
from examples.hello import hello
from examples.wordcount import TEXT, wordcount

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def no_child_left_behind():
    """Every test here must leave no child process (tests/conftest.py checks segments)."""
    yield
    assert psutil.Process().children(recursive=True) == []


def test_results_in_index_order_with_global_indexes():
    assert st.execute(lambda w: (w.index, w.peers), workers=3) == [(0, 3), (1, 3), (2, 3)]


def test_closures_and_lambdas_capture_local_state():
    offset = 100
    assert st.execute(lambda w: w.index + offset, workers=2) == [100, 101]


def test_hello_two_workers_split_even_and_odd(capfd):
    assert st.execute(hello, workers=2) == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    lines = capfd.readouterr().out.splitlines()
    assert sorted(lines) == sorted([f"worker {x % 2}:\thello {x}" for x in range(10)])


def test_distinct_two_workers():
    assert st.execute_from_args(["-w2"], distinct) == [[0, 2, 4], [1, 3, 5, 7]]


def wordcount_totals(parts):
    return sorted(report for part in parts for report in part)


def test_wordcount_running_counts_same_for_1_2_3_workers():
    expected = []
    totals: dict = {}
    for round, line in enumerate(TEXT):
        changed = {}
        for word in line.split():
            totals[word] = changed[word] = totals.get(word, 0) + 1
        expected += [(round, word, count) for word, count in changed.items()]
    for workers in (1, 2, 3):
        assert wordcount_totals(st.execute(wordcount, workers=workers)) == sorted(expected)


def test_bfs_in_iterative_scope_matches_reference_on_1_2_3_workers():
    graph = random_graph(400, 1200, seed=3)
    expected = reference_bfs(graph, 0)
    for workers in (1, 2, 3):
        parts = st.execute(lambda w: bfs(w, graph), workers=workers)
        merged = {}
        for part in parts:
            assert not merged.keys() & part.keys()   # each node owned by one worker
            merged.update(part)
        assert merged == expected


def test_exchange_moves_every_record_to_its_owner():
    def job(worker):
        captured = worker.dataflow(lambda scope: scope.to_stream(range(1000))
                                   .exchange(lambda x: x).capture())
        worker.run()
        return captured.extract()
    parts = st.execute(job, workers=3)
    for index, part in enumerate(parts):
        assert part == [(0, sorted([x for x in range(1000) if x % 3 == index] * 3))]


def test_broadcast_sends_each_record_to_every_worker():
    def job(worker):
        captured = worker.dataflow(lambda scope: scope.to_stream([worker.index]).broadcast().capture())
        worker.run()
        return captured.extract()
    assert st.execute(job, workers=3) == [[(0, [0, 1, 2])]] * 3


def test_aggregate_and_count_across_workers():
    def job(worker):
        words = ["a", "b", "a", "c", "a"] if worker.index == 0 else ["b", "c"]
        result = worker.dataflow(lambda scope: scope.to_stream(words).map(lambda w: (w, 1))
                                 .aggregate(lambda k, v, agg: (agg or 0) + v,
                                            lambda k, agg: (k, agg), lambda k: ord(k))
                                 .capture())
        worker.run()
        return result.extract()
    parts = st.execute(job, workers=2)
    merged = sorted(x for part in parts for _, batch in part for x in batch)
    assert merged == [("a", 3), ("b", 2), ("c", 2)]


def test_probe_per_round_across_workers():
    def job(worker):
        input = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x).probe())
        frontiers = []
        for round in range(5):
            input.send(round)
            input.advance_to(round + 1)
            worker.step_while(lambda: probe.less_than(round + 1))
            frontiers.append(probe.frontier())
        input.close()
        worker.step_while(lambda: not probe.done())
        return frontiers, probe.done()
    for frontiers, done in st.execute(job, workers=2):
        assert frontiers == [[1], [2], [3], [4], [5]] and done


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_step_or_park_does_not_park_after_a_step_that_moved_the_probe(workers):
    """A step that shares this worker's own progress may move the probe the loop waits on:
    ``step_or_park`` must let the loop look before it waits (it used to park for the next
    message, a whole round late, and a lone worker with an activator never woke up)."""
    def job(worker):
        input = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x)
                                .probe())
        worker.sync_activator_for((0, 0))       # so that even a lone worker may park
        parked_behind = []
        park = worker._park
        worker._park = lambda timeout, *rest: (parked_behind.append(probe.less_than(round)),
                                               park(timeout, *rest))
        for round in range(1, 30):
            input.advance_to(round)
            while probe.less_than(round):
                worker.step_or_park(5.0)
        worker._park = park
        input.close()
        worker.step_while(lambda: not probe.done())
        return parked_behind, probe.frontier()
    for parked_behind, frontier in st.execute(job, workers=workers):
        assert frontier == [] and all(parked_behind), parked_behind


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.timeout(60)
def test_a_passed_deadline_parks_not_at_all_and_a_nan_timeout_is_refused(workers):
    """``step_or_park(deadline - time.monotonic())`` may be given a hair below zero (the
    benchmarks' paced loop was, and failed): a negative timeout is a deadline passed, no wait,
    as ``threading.Event.wait``. NaN and non-numbers are refused naming the method and the
    worker (NaN was a wait of no length, a string failed deep in the park)."""
    def job(worker):
        input = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(input).probe())
        deadline = time.monotonic() + 0.05
        while time.monotonic() < deadline:          # the paced loop, parking to a deadline
            worker.step_or_park(deadline - time.monotonic())
        passed = [worker.step_or_park(-1), worker.step_or_park(-1e-9)]
        asked = []
        worker.step_or_park_while(-0.5, lambda: len(asked) < 3 and not asked.append(1))
        errors = []
        for method, timeout in (("step_or_park", float("nan")),
                                ("step_or_park_while", float("nan")), ("step_or_park", "1")):
            try:
                if method == "step_or_park":
                    worker.step_or_park(timeout)
                else:
                    worker.step_or_park_while(timeout, lambda: False)
            except (ValueError, TypeError) as error:
                errors.append(str(error))
        input.close()
        worker.step_while(lambda: not probe.done())
        return passed, len(asked), errors
    for index, (passed, asked, errors) in enumerate(st.execute(job, workers=workers)):
        assert (passed, asked) == ([True, True], 3)   # running (the input is open), no wait
        assert errors == [
            f"worker {index}: step_or_park(nan): the timeout is not a number; give seconds (0 "
            f"or less: no wait) or None (wait until something arrives)",
            f"worker {index}: step_or_park_while(nan): the timeout is not a number; give "
            f"seconds (0 or less: no wait) or None (wait until something arrives)",
            f"worker {index}: step_or_park('1'): the timeout is seconds (a number) or None "
            f"(wait until something arrives)"]


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("one_core", [True, False])
def test_an_idle_step_yields_its_core_when_the_host_has_more_workers_than_cores(workers,
                                                                                one_core):
    """Worker 0 holds the round back for a while; the others step with nothing to do. On
    one core (the CPU affinity of the workers cut to one) those steps yield their time
    slice to a peer with work; with a core for every worker they never yield."""
    cores = len(os.sched_getaffinity(0))
    if not one_core and cores < workers:
        pytest.skip(f"{workers} workers need {workers} cores here, this machine has {cores}")

    def job(worker):
        yields = []
        os.sched_yield = lambda: yields.append(1)       # this worker process's own module
        input = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x)
                                .probe())
        if worker.index == 0:
            time.sleep(0.2)
        input.advance_to(1)
        while probe.less_than(1):
            worker.step()
        stepping = len(yields)          # not the yields of run()'s waits (a park spins)
        input.close()
        worker.run()
        return stepping, probe.done()
    allowed = os.sched_getaffinity(0)
    if one_core:
        os.sched_setaffinity(0, {min(allowed)})     # the workers inherit it
    try:
        results = st.execute(job, workers=workers)
    finally:
        os.sched_setaffinity(0, allowed)
    assert all(done for _, done in results)
    idle_yields = [n for n, _ in results[1:]]
    assert all(idle_yields) if one_core and workers > 1 else not any(idle_yields), results


def test_worker_exception_stops_everyone_with_traceback():
    def job(worker):
        if worker.index == 1:
            raise ValueError("boom on purpose")
        input = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x).probe())
        input.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))   # would wait for worker 1 forever
    start = time.monotonic()
    with pytest.raises(st.WorkerError) as failure:
        st.execute(job, workers=2)
    assert time.monotonic() - start < 5
    assert failure.value.index == 1
    assert "ValueError: boom on purpose" in str(failure.value)
    assert "raise ValueError" in failure.value.traceback


def test_operator_error_inside_worker_names_operator():
    def job(worker):
        worker.dataflow(lambda scope: scope.to_stream([1, 0]).map(lambda x: 1 // x).probe())
    with pytest.raises(st.WorkerError, match="Map.*ZeroDivisionError"):
        st.execute(job, workers=2)


def test_sigkilled_worker_stops_everyone():
    def job(worker):
        input = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x).probe())
        if worker.index == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        input.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
    start = time.monotonic()
    with pytest.raises(st.WorkerError, match="killed by signal SIGKILL") as failure:
        st.execute(job, workers=3)
    assert failure.value.index == 0
    assert time.monotonic() - start < 5


def test_different_dataflows_on_different_workers_fail_clearly():
    def job(worker):
        def build(scope):
            stream = scope.to_stream(range(10))
            if worker.index == 1:
                stream = stream.map(lambda x: x)
            return stream.exchange(lambda x: x).probe()
        worker.dataflow(build)
    with pytest.raises(st.WorkerError, match="built dataflow .* differently"):
        st.execute(job, workers=2)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_instances_of_a_class_made_in_a_function_come_back(workers):
    """pickle and dill by reference cannot name such a class: it comes back by value."""
    class Reading:
        def __init__(self, worker: int) -> None:
            self.worker = worker

    results = st.execute(lambda worker: Reading(worker.index), workers=workers)
    assert [(type(r).__name__, r.worker) for r in results] == \
        [("Reading", i) for i in range(workers)]


def test_unpicklable_result_is_reported():
    with pytest.raises(st.WorkerError, match="cannot be sent back"):
        st.execute(lambda worker: (x for x in "generators do not pickle"), workers=2)


@pytest.mark.parametrize("workers", [2, 3])
def test_unpicklable_record_names_the_problem(workers):
    """The error names the operator the batch was for and the first record that does not
    pickle (at one worker nothing is pickled: records stay in the process)."""
    import threading
    def job(worker):
        records = [1, threading.Lock(), 2]
        worker.dataflow(lambda scope: scope.to_stream(records).exchange(lambda x: 1).map(str)
                        .probe(), name="locks")
    with pytest.raises(st.WorkerError, match="cannot be pickled.*lock.*must be picklable") \
            as raised:
        st.execute(job, workers=workers)
    message = str(raised.value)
    assert "into operator 'Exchange' (address (0, 1)) of dataflow 'locks'," in message
    assert ": the record <unlocked _thread.lock object at 0x" in message


class Unrebuildable:
    """Pickles, but does not unpickle (as a class the receiving process cannot import)."""

    def __reduce__(self):
        return (_rebuild, ())


def _rebuild():
    raise RuntimeError("cannot rebuild")


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("in_process", [False, True], ids=["processes", "in-process"])
def test_a_record_that_does_not_unpickle_names_its_sender_time_and_operator(workers,
                                                                            in_process):
    """Was the record class's error alone, raised where the dataflow was built."""
    def job(worker):
        handle = st.InputHandle()
        worker.dataflow(lambda scope: scope.input_from(handle)
                        .exchange(lambda x: workers - 1).probe(), name="objects")
        handle.advance_to(3)
        if worker.index == 0:
            handle.send(Unrebuildable())
        handle.close()
    run = (lambda: execute_in_process(job, workers)) if in_process else \
        (lambda: st.execute(job, workers=workers))
    with pytest.raises(st.WorkerError) as raised:
        run()
    assert f"worker {workers - 1} failed: UnpicklingError: a batch from worker 0 at time 3, " \
           f"into operator 'Exchange' (address (0, 1)) of dataflow 'objects', cannot be " \
           f"unpickled (RuntimeError: cannot rebuild); records that move between workers " \
           f"must unpickle in every worker" in str(raised.value)


def usage_error(capsys, argv) -> str:
    """The ``prog: error: ...`` line ``execute_from_args(argv, ...)`` exits with (status 2)."""
    with pytest.raises(SystemExit, match="^2$"):
        st.execute_from_args(argv, lambda w: None)
    return capsys.readouterr().err.splitlines()[-1]


def test_execute_from_args_flags_and_errors(capsys):
    assert st.execute_from_args(["--workers", "2", "rest"], lambda w: (w.peers, w.args)) == \
        [(2, ["rest"]), (2, ["rest"])]
    assert usage_error(capsys, ["-w", "two"]).endswith(
        "error: argument -w/--workers/--threads: expected a positive integer, got 'two'")
    with pytest.raises(ValueError, match="workers must be a positive integer"):
        st.execute(lambda w: None, workers=0)
    with pytest.raises(ValueError, match="workers must be a positive integer, got True"):
        st.execute(lambda w: None, workers=True)        # a bool is not a count
    assert usage_error(capsys, ["-n", "2", "-p", "2"]).endswith(
        "error: argument -p/--process: process index 2 is not in 0..1 (-n/--processes is 2)")


def test_hostfile_errors_name_the_line(tmp_path, capsys):
    path = tmp_path / "hosts"
    path.write_text("localhost:2101\nnot-an-address\n")
    assert usage_error(capsys, ["-n", "2", "-p", "0", "-h", str(path)]).endswith(
        f"error: argument -h/--hostfile: hostfile {path} line 2: 'not-an-address' is not "
        f"host:port")
    with pytest.raises(ValueError, match=r"^the hostfile lists 1 address but 2 processes "
                                         r"need one each \(process 1 has none\)$"):
        st.execute(lambda w: None, processes=2, hostfile=["localhost:2101"])
    path.write_text("localhost:2101\n")                  # the flag was not named
    assert usage_error(capsys, ["-n", "3", "-p", "0", "-h", str(path)]).endswith(
        f"error: argument -h/--hostfile: hostfile {path} lists 1 address but 3 processes need "
        f"one each (process 1 has none)")


def test_progress_is_sent_only_when_it_can_move_a_frontier():
    """Fifty batches at one time cost a handful of progress messages, not fifty."""
    def job(worker):
        sent = []
        broadcast = worker.broadcast
        worker.broadcast = lambda message: (sent.append(message[0]), broadcast(message))
        input = st.InputHandle()
        captured = worker.dataflow(lambda scope: scope.input_from(input)
                                   .exchange(lambda x: x).count().capture())
        for _ in range(50):
            input.send_batch(range(100))
            worker.step()
        input.close()
        worker.run()
        return sent.count(PROGRESS), captured.extract()
    results = st.execute(job, workers=2)
    assert sorted(c for _, part in results for _, counts in part for c in counts) == [5000, 5000]
    assert all(messages < 10 for messages, _ in results), results


def test_examples_run_from_the_command_line_with_timely_flags():
    import subprocess
    import sys
    run = subprocess.run([sys.executable, "-m", "examples.hello", "-w2"], capture_output=True,
                         text=True, timeout=60, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert run.returncode == 0, run.stderr
    assert sorted(run.stdout.splitlines()) == sorted(f"worker {x % 2}:\thello {x}" for x in range(10))


def test_workers_die_with_a_killed_supervisor(tmp_path):
    """SIGKILL the process that called execute: its workers must not outlive it."""
    import subprocess
    import sys
    script = tmp_path / "job.py"
    script.write_text("import time, sparktimely as st\n"
                      "st.execute(lambda worker: time.sleep(60), workers=2)\n")
    supervisor = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 20
        while len(psutil.Process(supervisor.pid).children()) < 2:
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.05)
        workers = psutil.Process(supervisor.pid).children()
        supervisor.kill()
        supervisor.wait(5)
        gone, alive = psutil.wait_procs(workers, timeout=5)
        assert alive == []
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
        # its segments outlive it until the next job sweeps stale ones; do that now
        sweep_stale()
    assert segments_of([supervisor.pid]) == []


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_numpy_records_are_writable_wherever_they_were_sent_from(workers):
    """A map that changes a numpy array in place works the same at every worker count: an
    array that crossed to another worker through shared memory arrives writable (small
    arrays copied with the message, large ones read from the ring) and keeps its values
    after the ring's space is reused."""
    import numpy as np

    def job(worker):
        sizes = [3, 5_000, 400_000]                     # bytes: below and above the ring copy
        mine = [np.full(n, i, dtype=np.int64) for i, n in enumerate(sizes * 3)] \
            if worker.index == 0 else []
        kept: list = []

        def bump(array):
            array += 1
            return array
        worker.dataflow(lambda scope: scope.to_stream(mine).exchange(lambda a: int(a[0]))
                        .map(bump).inspect(kept.append).probe())
        worker.run()
        return sorted((int(a[0]), int(a.sum())) for a in kept)
    got = sorted(pair for part in st.execute(job, workers=workers) for pair in part)
    sizes = [3, 5_000, 400_000] * 3
    assert got == sorted((i + 1, (i + 1) * n) for i, n in enumerate(sizes))


def test_run_workers_refuses_what_names_no_worker_of_its_plan_before_starting_any():
    """A listener index outside the plan waited out the connect timeout (60 s) and blamed
    worker 0's shared memory; an empty plan or listeners was an IndexError; a function
    that is none failed inside the forked worker."""
    from sparktimely.comm import WorkerAddress
    from sparktimely.execute import run_workers
    from sparktimely.shm import job_prefix
    plan = [WorkerAddress("localhost", 0, "here", mesh=job_prefix())] * 2
    started = time.monotonic()
    for func, job_plan, listeners, error, told in [
            (len, plan, {-1: None, 0: None}, ValueError, "worker index -1 is not in 0..1"),
            (len, plan, {5: None}, ValueError, "worker index 5 is not in 0..1"),
            (len, plan, {}, ValueError, "listeners names none of this process's workers"),
            (len, [], {0: None}, ValueError, "the plan names no worker"),
            (42, plan, {0: None}, TypeError, "expected a function, got 42 (int)")]:
        with pytest.raises(error, match=re.escape(f"run_workers: {told}")):
            run_workers(func, job_plan, listeners, timeout=30)
    assert time.monotonic() - started < 5
    assert run_workers(lambda worker: worker.index, plan, {0: None, 1: None}) == [0, 1]
