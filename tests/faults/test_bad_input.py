"""Bad configuration is refused before anything starts, naming the problem and where it is
(faults issue, item 3; the -n/-p check of issue 13)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from ports import free_ports

import sparktimely as st


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
    assert time.monotonic() - started < 1


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
