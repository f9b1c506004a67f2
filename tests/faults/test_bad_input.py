"""Bad configuration is refused before anything starts, naming the problem and where it is
(faults issue, item 3; the -n/-p check of issue 13); a route that gives no worker fails naming
where it routes, the record and the value it returned."""
from __future__ import annotations

import time

import pytest

import sparktimely as st
from sparktimely.testing import consolidate


def test_a_hostfile_naming_one_address_twice_is_refused_naming_both_lines(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two processes\nlocalhost:2101\n\nlocalhost:2101   # oops\n")
    started = time.monotonic()
    with pytest.raises(ValueError) as caught:
        st.execute_from_args(["-n", "2", "-p", "0", "-h", str(hostfile)], lambda worker: None)
    assert str(caught.value) == (f"hostfile {hostfile} line 4: 'localhost:2101' is the address of "
                                 f"line 2 ('localhost:2101') again: every process needs an "
                                 f"address of its own")
    with pytest.raises(ValueError, match="line 2: '127.0.0.1:7000' is the address of line 1"):
        st.execute(lambda worker: None, processes=2, process=1,
                   hostfile=["127.0.0.1:7000", "127.0.0.1:7000"])
    assert time.monotonic() - started < 1


def test_several_processes_without_a_process_index_say_which_flag_is_missing():
    with pytest.raises(ValueError, match=r"^-n 3 needs -p/--process: this process's index, 0\.\.2$"):
        st.execute_from_args(["-n", "3", "-w", "2"], lambda worker: None)
    with pytest.raises(ValueError, match="--processes 2 needs -p/--process"):
        st.execute_from_args(["--processes=2"], lambda worker: None)


# -- routes ------------------------------------------------------------------------------------
# A route runs per record, and only where records move between workers: with one worker
# nothing is routed (records pass through unchanged); with several, a route that returns
# anything but an int fails naming the exchange (its operator and its pact), the record and
# what the route returned.

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
