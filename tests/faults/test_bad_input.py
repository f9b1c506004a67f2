"""Bad configuration is refused before anything starts, naming the problem and where it is
(including the -n/-p check); a route that gives no worker (or no partition) fails naming where
it routes, the record and the value it returned."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pytest
from ports import free_ports

import sparktimely as st
import sparktimely.windows as win
from sparktimely.testing import consolidate


def test_a_hostfile_naming_one_address_twice_is_refused_naming_both_lines(tmp_path, capsys):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two processes\nlocalhost:2101\n\nlocalhost:2101   # oops\n")
    started = time.monotonic()
    with pytest.raises(SystemExit, match="^2$"):
        st.execute_from_args(["-n", "2", "-p", "0", "-h", str(hostfile)], lambda worker: None)
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        f": error: argument -h/--hostfile: hostfile {hostfile} line 4: 'localhost:2101' is the "
        f"address of line 2 ('localhost:2101') again: every process needs an address of its own")
    with pytest.raises(ValueError, match="line 2: '127.0.0.1:7000' is the address of line 1"):
        st.execute(lambda worker: None, processes=2, process=1,
                   hostfile=["127.0.0.1:7000", "127.0.0.1:7000"])
    with pytest.raises(ValueError, match="line 2: 'localhost:7000' is the address of line 1 "
                                         r"\('127.0.0.1:7000'\)"):
        st.execute(lambda worker: None, processes=2, process=1,
                   hostfile=["127.0.0.1:7000", "localhost:7000"])
    assert time.monotonic() - started < 5       # before connecting: no connect timeout


def test_a_hostfile_that_is_not_text_is_refused_naming_the_file_and_line(tmp_path, capsys):
    hostfile = tmp_path / "hosts"
    hostfile.write_bytes(b"localhost:2101\n\xff\xfe\n")
    with pytest.raises(SystemExit, match="^2$"):
        st.execute_from_args(["-n", "2", "-p", "0", "-h", str(hostfile)], lambda worker: None)
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        f": error: argument -h/--hostfile: hostfile {hostfile} line 2: not UTF-8 text (byte "
        f"0xff); a hostfile lists host:port addresses, one per line")
    with pytest.raises(ValueError, match=f"hostfile {hostfile} line 2: not UTF-8 text"):
        st.execute(lambda worker: None, processes=2, process=1, hostfile=str(hostfile))


def test_several_processes_without_a_process_index_say_which_flag_is_missing(capsys):
    for argv, processes in ((["-n", "3", "-w", "2"], 3), (["--processes=2"], 2)):
        with pytest.raises(SystemExit, match="^2$"):
            st.execute_from_args(argv, lambda worker: None)
        assert capsys.readouterr().err.splitlines()[-1].endswith(
            f": error: -n/--processes {processes} needs -p/--process: this process's index, "
            f"0..{processes - 1}")


@pytest.mark.timeout(60)
def test_a_host_that_does_not_resolve_stops_every_process_at_once(tmp_path):
    """Each process of the job names the unknown host within seconds, the one that would
    listen there and the one that would connect to it alike (not after the 60 s timeout)."""
    port, other = free_ports(2)
    hosts = [f"no-such-host.invalid:{port}", f"127.0.0.1:{other}"]
    script = ("import sys, sparktimely as st\n"
              f"st.execute(lambda worker: None, processes=2, process=int(sys.argv[1]), "
              f"hostfile={hosts!r})\n")
    started = time.monotonic()
    runs = [subprocess.Popen([sys.executable, "-c", script, str(process)], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=dict(os.environ, SPARKTIMELY_CONNECT_TIMEOUT="60"))
            for process in (0, 1)]
    try:
        errors = [run.communicate(timeout=30)[1] for run in runs]
    finally:
        for run in runs:
            run.kill()
    assert time.monotonic() - started < 15
    for run, error in zip(runs, errors):
        assert run.returncode == 1
        assert error.splitlines()[-1].startswith(
            f"ConnectionError: the hostfile address of process 0, no-such-host.invalid:{port}, "
            f"names a host that does not resolve ("), error


# -- routes ------------------------------------------------------------------------------------
# A route runs per record where records move between workers; with one worker nothing moves,
# but the first record of each batch is still routed. At any number of workers a route that
# returns anything but an int fails naming the exchange (its operator and its pact), the
# record and what the route returned.

def routed(run, build):
    """Runs the dataflow ``build(scope)`` (returning a stream) on ``run``'s workers: the
    records every worker captured, consolidated, or the WorkerError's message."""
    def job(worker):
        captured = worker.dataflow(lambda scope: build(scope).capture())
        worker.run()
        return captured.extract()
    try:
        return consolidate(run(job))
    except st.WorkerError as error:
        return str(error)


def assert_route_error(message: str, operator: str, pact: str, record, returned) -> None:
    assert f"the exchange into {operator} (address (0, " in message, message
    assert f"by {pact} cannot route the record {record!r}: its route returned {returned!r} " \
           f"(a {type(returned).__name__}); a route must return an int (the record goes to " \
           f"worker route(record) % peers), e.g. st.stable_hash(key)" in message, message


def identity(x):
    return x


def never_int(x):
    return f"key-{x}"


@pytest.mark.parametrize("records", [["b", "a"], [2.5, 0.5], [None]], ids=["str", "float", "None"])
def test_an_exchange_route_returning_no_int_names_the_exchange_record_and_value(run, records):
    result = routed(run, lambda scope: scope.to_stream(records).exchange(identity))
    assert_route_error(result, "operator 'Exchange'", "Exchange(route=identity)",
                       records[0], records[0])


def test_a_route_returning_no_int_is_told_without_the_arithmetic_that_failed_on_it(run):
    """The error is the exchange's: the worker's traceback shows no internal ``value %
    peers`` failing on the string as its cause."""
    def job(worker):
        worker.dataflow(lambda scope: scope.to_stream(["b"]).exchange(identity).probe())
        worker.run()
    with pytest.raises(st.WorkerError, match="cannot route the record 'b'") as raised:
        run(job)
    assert "not all arguments converted" not in raised.value.traceback


class NotARoute(ValueError):
    """An error of the user's own, a ValueError subclass: its type and message told as raised,
    with the exchange and the record."""


def refusing(record):
    raise NotARoute(f"no route for {record!r}")


def test_a_route_raising_its_own_error_class_is_told_as_raised(run):
    def job(worker):
        worker.dataflow(lambda scope: scope.to_stream(["b"]).exchange(refusing).probe())
        worker.run()
    with pytest.raises(st.WorkerError) as raised:
        run(job)
    assert "its route raised NotARoute on the record 'b': no route for 'b'" in \
        raised.value.message, raised.value.message


def test_numpy_integers_route_as_ints(run):
    """Each record lands on worker ``route(x) % peers`` whatever integer type the route
    returns."""
    kinds = [np.int64, np.uint8, np.int32, np.uint64, np.bool_, bool, int]

    def build(scope):
        records = scope.to_stream(list(range(len(kinds))) * 3 if scope.index == 0 else [])
        return records.exchange(lambda i: kinds[i](i + 1)).map(lambda i: (i, scope.index))
    expected = sorted((i, int(kind(i + 1)) % run.workers) for i, kind in enumerate(kinds)
                      for _ in range(3))
    assert routed(run, build) == [(0, expected)]


def forward(cap, info):
    cap.drop()
    return lambda input, output: [output.give_at(c, b) for c, b in input]


def forward_both(cap, info):
    cap.drop()
    return lambda input1, input2, output: [output.give_at(c, b) for i in (input1, input2)
                                           for c, b in i]


@pytest.mark.parametrize("make, operator", [
    (lambda s: s.unary(st.Exchange(never_int), "Route", forward), "operator 'Route'"),
    (lambda s: s.scope.to_stream([]).binary(s, st.Pipeline, st.Exchange(never_int), "Two",
                                            forward_both), "input 1 of operator 'Two'"),
    (lambda s: s.sink(st.Exchange(never_int), "Drop", lambda input: list(input)) or s,
     "operator 'Drop'"),
], ids=["unary", "binary", "sink"])
def test_pacts_whose_route_returns_no_int_name_their_operator(run, make, operator):
    result = routed(run, lambda scope: make(scope.to_stream([7, 8])))
    assert_route_error(result, operator, "Exchange(route=never_int)", 7, "key-7")


@pytest.mark.parametrize("make, operator", [
    (lambda s: s.aggregate(lambda k, v, agg: (agg or 0) + v, lambda k, agg: (k, agg),
                           identity), "Aggregate"),
    (lambda s: s.state_machine(lambda k, v, total: (False, [(k, (total or 0) + v)],
                                                    (total or 0) + v), identity),
     "StateMachine"),
], ids=["aggregate", "state_machine"])
def test_keyed_operators_whose_route_returns_no_int_name_the_record_and_value(run, make,
                                                                               operator):
    result = routed(run, lambda scope: make(scope.to_stream([("a", 1), ("b", 2)])))
    assert_route_error(result, f"operator {operator!r}", "Exchange(route=identity(key))",
                       ("a", 1), "a")


def third(record):
    return record[2]


@pytest.mark.parametrize("operator, build", [
    ("'Exchange'", lambda stream: stream.exchange(third)),
    ("'Aggregate'", lambda stream: stream.aggregate(lambda k, v, agg: v, lambda k, agg: agg,
                                                    third)),
    ("'StateMachine'", lambda stream: stream.state_machine(lambda k, v, s: (False, [v]),
                                                           third)),
    ("'Window'", lambda stream: stream.window(win.Tumbling(5), time_of=lambda r: 1, key=third,
                                             aggregate=win.count()).results),
], ids=["exchange", "aggregate", "state_machine", "window"])
def test_a_key_function_raising_names_the_exchange_the_function_and_the_record(run, operator,
                                                                               build):
    """A route or key raising an IndexError was told as the failure of the operator feeding
    the exchange (a ToStream), in its own words only: no exchange, function or record; then
    with them, but still as the ToStream's failure."""
    result = routed(run, lambda scope: build(scope.to_stream([("k", 1)])))
    function = "third" if operator in ("'Exchange'", "'Window'") else "third(key)"
    if operator == "'Window'":
        function = "stable_hash(third(record))"
    assert f"failed: OperatorError: the exchange into operator {operator} (address (0, 1)) by " \
           f"Exchange(route={function}): its route raised IndexError on the record ('k', 1): " \
           f"{'string' if function == 'third(key)' else 'tuple'} index out of range" \
           in result, result


@pytest.mark.parametrize("route, returned", [
    (lambda x: (x % 3, x), "(2, 5)"),                   # part out of range
    (lambda x: ("odd", x), "('odd', 5)"),               # part not an int
    (lambda x: (1.0, x), "(1.0, 5)"),
    (lambda x: x, "5"),                                 # not a pair
], ids=["range", "str", "float", "not-a-pair"])
def test_a_partition_route_returning_no_part_names_the_record_and_value(run, route, returned):
    result = routed(run, lambda scope: scope.concatenate(
        scope.to_stream([5] if scope.index == run.workers - 1 else []).partition(2, route)))
    assert f"worker {run.workers - 1} failed: OperatorError: operator 'Partition' (address " \
           f"(0, 1)) raised ValueError: partition route returned {returned} for the record 5: " \
           f"it must return (part, record) with part an int in 0..1" in result, result


def test_an_arrow_exchange_by_a_missing_column_names_the_exchange_and_the_column(run):
    table = pa.table({"word": ["a", "b"], "n": [1, 2]})
    result = routed(run, lambda scope: scope.to_stream(table).exchange(key="wrod"))
    assert "failed: OperatorError: the exchange into operator 'Exchange' (address (0, 1)) by " \
           "Exchange(key='wrod') raised KeyError: key column 'wrod' is not in the batch's " \
           "schema (columns word, n)" in result, result


def test_an_arrow_exchange_route_returning_no_integers_names_the_exchange(run):
    table = pa.table({"x": [1.5, 2.5]})
    result = routed(run, lambda scope: scope.to_stream(table).exchange(
        lambda batch: batch.column("x").to_numpy()))
    if run.workers == 1:                        # an Arrow route runs only where rows move
        assert result[0][1].equals(table)
    else:
        line = test_an_arrow_exchange_route_returning_no_integers_names_the_exchange \
            .__code__.co_firstlineno + 3                    # a lambda named where it is
        assert f"by Exchange(route=<lambda> at test_bad_input.py:{line}) raised ValueError: an " \
               f"Exchange route for Arrow batches must return one integer per row (2), got float64 of " \
               f"shape (2,)" in result, result


@pytest.mark.parametrize("records, told", [
    ([("k", 1, "extra")], "the record ('k', 1, 'extra') is not a (key, val) pair"),
    ([1], "the record 1 is not a (key, val) pair"),
], ids=["triple", "int"])
@pytest.mark.parametrize("operator", ["Aggregate", "StateMachine"])
def test_keyed_operators_name_a_record_that_is_no_pair(run, operator, records, told):
    """Was 'too many values to unpack (expected 2)', or the route's 'int' object is not
    subscriptable, naming neither the record nor what was expected."""
    def build(scope):
        stream = scope.to_stream(records)
        if operator == "Aggregate":
            return stream.aggregate(lambda key, val, agg: val, lambda key, agg: agg).probe()
        return stream.state_machine(lambda key, val, state: (False, [val])).probe()

    def job(worker):
        worker.dataflow(build)
        worker.run()
    with pytest.raises(st.WorkerError) as caught:
        run(job)
    assert f"TypeError: {operator}: {told}" in caught.value.message


@pytest.mark.parametrize("operator", ["Aggregate", "StateMachine"])
def test_keyed_operators_name_a_key_that_cannot_be_hashed(run, operator):
    """Was Python's "unhashable type: 'list'", naming neither the key nor the record (a
    route that takes any key lets it reach the operator's dict)."""
    def build(scope):
        stream = scope.to_stream([(("ok",), 1), (["k"], 2)])
        if operator == "Aggregate":
            return stream.aggregate(lambda key, val, agg: val, lambda key, agg: agg,
                                    route=lambda key: 0).probe()
        return stream.state_machine(lambda key, val, state: (False, [val]),
                                    route=lambda key: 0).probe()

    def job(worker):
        worker.dataflow(build)
        worker.run()
    with pytest.raises(st.WorkerError) as caught:
        run(job)
    assert (f"TypeError: {operator}: the key ['k'] of the record (['k'], 2) is a list, which "
            f"cannot be hashed; a key must be hashable (e.g. a tuple, not a list)"
            ) in caught.value.message


def test_a_job_that_is_no_function_is_refused_before_any_worker_starts():
    """Workers started, then each failed with "'NoneType' object is not callable"."""
    with pytest.raises(TypeError, match=r"^execute: the job must be a function of the worker, "
                                        r"got None \(NoneType\)$"):
        st.execute(None, workers=2)           # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^execute_directly: the job must be a function of "
                                        r"the worker, got 5 \(int\)$"):
        st.execute_directly(5)                # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^worker.dataflow: expected a function, got 5 \(int\)$"):
        st.execute_directly(lambda worker: worker.dataflow(5))   # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^example: expected a function of the scope that "
                                        r"builds the dataflow, got 5 \(int\)$"):
        st.example(5)                         # type: ignore[arg-type]


def test_a_checkpoint_dir_that_is_no_location_is_named_before_any_worker_starts(tmp_path):
    """Was "expected str, bytes or os.PathLike object, not int" from the storage layer."""
    ran = tmp_path / "ran"
    with pytest.raises(TypeError, match=r"^checkpoint_dir: expected a directory \(a path, a URI"):
        st.execute(lambda worker: ran.touch(), workers=2, checkpoint_dir=123)
    assert not ran.exists()


def test_an_empty_checkpoint_dir_or_sink_path_is_refused_before_any_worker_starts(tmp_path,
                                                                                 monkeypatch):
    """Was taken as the current directory: a run from another directory's place wrote its
    lock and checkpoints there, and the next run from it resumed them (dropping its input)."""
    monkeypatch.chdir(tmp_path)
    ran = tmp_path / "ran"
    empty = r"the path is empty \(give '\.' for the current directory\)$"
    with pytest.raises(ValueError, match=r"^checkpoint_dir: " + empty):
        st.execute(lambda worker: ran.touch(), workers=2, checkpoint_dir="")
    with pytest.raises(ValueError, match=r"^DirectorySink: " + empty):
        st.io.DirectorySink("")
    assert os.listdir(tmp_path) == []


def test_to_stream_of_what_is_no_collection_names_itself(run):
    """Was a bare "'int' object is not iterable" from deep inside the source."""
    def job(worker):
        worker.dataflow(lambda scope: scope.to_stream(5).probe())
    with pytest.raises(st.WorkerError, match=r"TypeError: to_stream: items must be an "
                                             r"iterable of records .*, got int 5"):
        run(job)
