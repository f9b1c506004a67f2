"""Bad configuration is refused before anything starts, naming the problem and where it is
(including the -n/-p check)."""
from __future__ import annotations

import time

import pytest

import sparktimely as st


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
