"""Bad configuration is refused before anything starts, naming the problem and where it is
(faults issue, item 3; the -n/-p check of issue 13)."""
from __future__ import annotations

import time

import pytest

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
