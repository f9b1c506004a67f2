"""Command lines as their users meet them, run as subprocesses from a folder that is not the
checkout: every example in the README's table runs with the command the README gives, and
follows argparse's conventions (``--help`` prints the usage and exits 0 without running
anything, an unknown flag or a bad value prints ``prog: error: ...`` with the usage and
exits 2, no traceback); ``st.execute_from_args`` does the same, and arguments after ``--``
reach the workers untouched."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap

import pytest
from doc_blocks import ROOT

EXAMPLES = ROOT / "examples"
TABLE_ROW = re.compile(r"^\| `(\w+\.py)( [^`]*)?` \|")


def readme_commands() -> dict[str, list[str]]:
    """The examples table of README.md: file name -> the arguments it gives."""
    rows = [TABLE_ROW.match(line) for line in (ROOT / "README.md").read_text().splitlines()]
    return {row[1]: shlex.split(row[2] or "") for row in rows if row}


COMMANDS = readme_commands()
EXPECTED = {                  # a line of each program's output when it ran as the README says
    "simple.py": "seen: 9 at time 9",
    "hello.py": "worker 1:\thello 9",
    "distinct.py": "worker 1:\tvalue 7",
    "wordcount.py": "round 4: end seen 1 time",
    "loopdemo.py": "97 reaches 1 after 118 steps",
    "bfs.py": "process 0: its workers reached 991 of 1000 nodes, as plain Python does; "
              "deepest level 6",
    "pagerank.py": "top ranks:",
    "dd_wordcount.py": "round 3: barks=1(-1) dog=2(+1) dog=3(-1) end=1(+1)",
    "dd_bfs.py": "round 4: 936 nodes reachable, 54 distance updates, same as BFS from scratch",
    "dd_queries.py": "1000 queries over 100,000 edges: median",
    "recoverable_wordcount.py": "recoverable_wordcount: 2 text file(s) in IN, 1000 lines of "
                                "each per epoch",
    "sensor_windows.py": "s0 mean  [00:00, 01:00): ",
    "fraud_sessions.py": "late transaction ",
}
BAD_VALUE = {"loopdemo.py": (["0"], "argument N: expected a positive integer, got '0'"),
             "demo.py": (["--workers", "abc"], "argument --workers: expected a positive integer, "
                                                "got 'abc'")}
TIMELY_BAD_VALUE = (["-w", "abc"], "argument -w/--workers/--threads: expected a positive "
                                   "integer, got 'abc'")


def start(argv: list[str], cwd, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *map(str, argv)], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=None if env is None else {**os.environ, **env})


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=100)
    return process.returncode, out, err


def test_the_readme_lists_every_example():
    programs = {path.name for path in EXAMPLES.glob("*.py")} - {"__init__.py", "demo.py"}
    assert set(COMMANDS) == programs == set(EXPECTED)


@pytest.mark.timeout(240)
def test_every_example_runs_from_any_folder_as_the_readme_says(tmp_path):
    texts = tmp_path / "IN"
    texts.mkdir()
    for name in ("a.txt", "b.txt"):
        (texts / name).write_text("the quick brown fox\njumps over the lazy dog\n" * 600)
    temporary = tmp_path / "TMP"                     # the programs' temporary files
    temporary.mkdir()
    pending = list(COMMANDS.items())
    while pending:
        batch, pending = pending[:2], pending[2:]
        runs = [(name, start([EXAMPLES / name, *args], tmp_path, {"TMPDIR": str(temporary)}))
                for name, args in batch]
        for name, process in runs:
            status, out, err = finish(process)
            assert status == 0, (name, err)
            assert any(line.startswith(EXPECTED[name]) for line in out.splitlines()), (name, out)
            assert "Traceback" not in err, (name, err)
    assert sorted(os.listdir(tmp_path)) == ["CK", "IN", "OUT", "TMP"]  # the wordcount's
    assert os.listdir(temporary) == []                 # nothing left behind


@pytest.mark.timeout(240)
def test_every_example_follows_argparses_conventions(tmp_path):
    cases = []
    for name, args in {**COMMANDS, "demo.py": []}.items():     # the demo starts Spark
        bad, error = BAD_VALUE.get(name, TIMELY_BAD_VALUE)
        cases += [(name, "help", ["--help"]), (name, "unknown", [*args, "--wrokers", "3"]),
                  (name, error, [*args, *bad])]
    pending = list(cases)
    while pending:
        batch, pending = pending[:4], pending[4:]
        runs = [(case, start([EXAMPLES / case[0], *case[2]], tmp_path)) for case in batch]
        for (name, kind, argv), process in runs:
            status, out, err = finish(process)
            what = (name, argv, out, err)
            assert "Traceback" not in err, what
            if kind == "help":                    # the usage, the program's flags, nothing run
                assert (status, err) == (0, ""), what
                assert out.startswith("usage: ") and "--help" in out, what
                assert EXPECTED.get(name, "demo: Spark ") not in out, what
                continue
            assert (status, out) == (2, ""), what
            lines = err.splitlines()
            assert lines[0].startswith("usage: "), what
            message = kind
            if kind == "unknown":                 # argparse's own parser suggests nothing
                plain = name == "demo.py"
                message = "unrecognized arguments: --wrokers 3" if plain else (
                    "unrecognized argument --wrokers: did you mean --workers? (arguments for "
                    "the program go after --, or declare them on sparktimely.timely_parser())")
            assert re.fullmatch(rf"\S+: error: {re.escape(message)}", lines[-1]), what
    assert os.listdir(tmp_path) == []                   # nothing ran, nothing was written


@pytest.mark.timeout(120)
def test_the_demo_names_a_spark_driver_that_does_not_start_and_exits_2(tmp_path):
    """A --master Spark cannot start with: one line of the demo's own after what the JVM
    printed, status 2, no Python traceback."""
    status, out, err = finish(start([EXAMPLES / "demo.py", "--master", "bogus://x"], tmp_path))
    assert status == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith(
        "demo: the Spark driver did not start (--master bogus://x): "), err


def test_the_examples_help_lists_their_own_flags_with_timelys(tmp_path):
    status, out, _ = finish(start([EXAMPLES / "bfs.py", "--help"], tmp_path))
    assert status == 0
    for flag in ("--nodes", "--edges", "-w N, --workers N, --threads N", "-h FILE, --hostfile"):
        assert flag in out, out
    assert out.startswith("usage: bfs.py ")
    assert "--checkpoint" not in out                  # it runs without checkpoints
    status, out, _ = finish(start([EXAMPLES / "wordcount.py", "--help"], tmp_path))
    assert status == 0 and "--checkpoint-dir DIR" in out and "--checkpoint-every N" in out


WITHOUT_CHECKPOINTS = {"bfs.py", "dd_bfs.py", "dd_queries.py", "loopdemo.py", "pagerank.py"}
"""Examples that compute one answer and check it: a run resumed from a completed checkpoint
would not compute it again, so they take no --checkpoint-dir."""
OWN_PARSERS = {"recoverable_wordcount.py"}
"""Examples that checkpoint by their own flags."""


@pytest.mark.timeout(240)
def test_every_example_runs_with_checkpoints_or_says_it_runs_without(tmp_path):
    """With --checkpoint-dir an example prints what it prints without; run again, it
    resumes from the completed checkpoint and says that it drops what that holds."""
    pending = [(name, args) for name, args in COMMANDS.items() if name not in OWN_PARSERS]
    while pending:
        batch, pending = pending[:2], pending[2:]
        for again in (False, True):
            runs = [(name, start([EXAMPLES / name, *args, "--checkpoint-dir",
                                  tmp_path / name], tmp_path)) for name, args in batch]
            for name, process in runs:
                status, out, err = finish(process)
                assert "Traceback" not in err, (name, err)
                if name in WITHOUT_CHECKPOINTS:
                    assert status == 2 and err.splitlines()[-1].endswith(
                        "error: argument --checkpoint-dir: this program runs without "
                        "checkpoints"), (name, err)
                elif not again:
                    assert status == 0, (name, err)
                    assert any(line.startswith(EXPECTED[name]) for line in out.splitlines()), \
                        (name, out)
                else:
                    assert status == 0 and "already holds; they are dropped" in err, (name, err)
    assert sorted(os.listdir(tmp_path)) == sorted(set(COMMANDS) - OWN_PARSERS -
                                                  WITHOUT_CHECKPOINTS)


PROGRAM = textwrap.dedent("""
    import sys
    import sparktimely as st

    def job(worker):
        return f"worker {worker.index} of {worker.peers}: {worker.args}"

    if sys.argv[1] == "declared":                # flags declared on st.timely_parser()
        parser = st.timely_parser(description="A job with a flag of its own.")
        parser.add_argument("--rounds", type=int, default=1)
        results = st.execute_from_args(parser.parse_args(sys.argv[2:]), job)
    else:                                          # execute_from_args reads the arguments
        results = st.execute_from_args(sys.argv[2:], job)
    for line in results:
        print(line)
""")


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)

    def run(*argv: str) -> tuple[int, str, str]:
        return finish(start([path, *argv], tmp_path))
    return run


@pytest.mark.parametrize("mode", ["declared", "undeclared"])
def test_arguments_after_a_double_dash_reach_the_workers_untouched(program, mode):
    status, out, err = program(mode, "-w2", "--", "--wrokers", "-w", "9", "--help")
    assert status == 0, err
    assert out.splitlines() == [f"worker {i} of 2: ['--wrokers', '-w', '9', '--help']"
                                for i in range(2)]


@pytest.mark.parametrize("mode", ["declared", "undeclared"])
def test_help_prints_the_usage_and_runs_nothing(program, mode):
    status, out, err = program(mode, "-w2", "--help")
    assert (status, err) == (0, ""), err
    assert out.startswith("usage: program.py [-w N] [-n N] [-p I] [-h FILE]")
    assert "worker 0" not in out
    assert ("--rounds" in out) == (mode == "declared")


@pytest.mark.parametrize("mode", ["declared", "undeclared"])
@pytest.mark.parametrize("argv, error", [
    (["-w", "abc"], "argument -w/--workers/--threads: expected a positive integer, got 'abc'"),
    (["--workers=0"], "argument -w/--workers/--threads: expected a positive integer, got '0'"),
    (["-n", "2"], "-n/--processes 2 needs -p/--process: this process's index, 0..1"),
    (["-h", "no-such-file"], "argument -h/--hostfile: cannot read hostfile no-such-file: "
                             "No such file or directory"),
    (["--log-dir"], "argument --log-dir: expected one argument"),
    (["--checkpoint-every", "3"], "argument --checkpoint-every: needs --checkpoint-dir DIR "
                                  "(without a checkpoint directory nothing is checkpointed)"),
])
def test_a_bad_value_is_one_line_of_error_after_the_usage(program, mode, argv, error):
    status, out, err = program(mode, *argv)
    assert (status, out) == (2, "")
    assert err.startswith("usage: program.py ") and "Traceback" not in err
    assert err.splitlines()[-1] == f"program.py: error: {error}"


def test_a_hostfile_host_that_does_not_resolve_is_a_usage_error_naming_the_file(program,
                                                                                tmp_path):
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text("127.0.0.1:4000\nno-such-host.invalid:4001\n")
    status, out, err = program("undeclared", "-n", "2", "-p", "0", "-h", str(hostfile))
    assert (status, out) == (2, "")
    assert "Traceback" not in err
    assert err.splitlines()[-1].startswith(
        f"program.py: error: argument -h/--hostfile: hostfile {hostfile}: "
        f"'no-such-host.invalid:4001' names a host that does not resolve (")


@pytest.mark.parametrize("flag, meant", [("--wrokers", "--workers"), ("--work", "--workers"),
                                         ("--log_dir", "--log-dir"),
                                         ("--checkpoint_every", "--checkpoint-every")])
def test_a_flag_like_a_mistyped_timely_one_is_left_for_the_program_with_a_warning(
        program, flag, meant):
    # The contract leaves every unrecognised argument to the program (which may have a
    # --host of its own); one that looks like a timely flag mistyped is told once.
    status, out, err = program("undeclared", "-w2", flag, "3")
    assert status == 0, err
    assert out.splitlines() == [f"worker {i} of 2: ['{flag}', '3']" for i in range(2)]
    assert err.splitlines() == [
        f"program.py: warning: {flag} is not one of timely's flags (did you mean {meant}?): "
        f"it is left for the program in worker.args"]


def test_a_mistyped_timely_flag_in_a_program_that_declares_its_flags_is_an_error(program):
    status, out, err = program("declared", "--wrokers", "3")
    assert (status, out) == (2, "")
    assert err.splitlines()[-1] == (
        "program.py: error: unrecognized argument --wrokers: did you mean --workers? "
        "(arguments for the program go after --, or declare them on "
        "sparktimely.timely_parser())")


def test_a_program_that_declares_its_flags_refuses_any_other(program):
    status, out, err = program("declared", "-w2", "--rounds", "2", "--input", "x.txt")
    assert (status, out) == (2, "")
    assert err.splitlines()[-1] == "program.py: error: unrecognized arguments: --input x.txt"


def test_a_program_that_declares_no_flags_gets_the_others_in_worker_args(program):
    status, out, err = program("undeclared", "-w2", "--input", "x.txt", "data", "-x")
    assert status == 0, err
    assert out.splitlines() == [f"worker {i} of 2: ['--input', 'x.txt', 'data', '-x']"
                                for i in range(2)]


@pytest.mark.timeout(60)
def test_recoverable_wordcount_says_what_it_did_and_a_missing_input_creates_nothing(tmp_path):
    script = EXAMPLES / "recoverable_wordcount.py"
    status, out, err = finish(start([script, "texts", "counts", "--checkpoint-dir", "ck"],
                                    tmp_path))
    assert (status, out) == (2, "")
    assert err.splitlines()[-1] == ("recoverable_wordcount.py: error: the input directory "
                                    "texts does not exist")
    assert os.listdir(tmp_path) == []
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("a b\n" * 25)
    argv = [script, "texts", "counts", "--checkpoint-dir", "ck", "--lines-per-epoch", "10",
            "-w2"]
    status, out, err = finish(start(argv, tmp_path))
    assert status == 0, err
    assert out.splitlines() == [
        "recoverable_wordcount: 1 text file(s) in texts, 10 lines of each per epoch",
        "  wrote 6 file(s) to counts for epochs 0..2: part-<epoch>-<worker>.parquet, columns "
        "word and total (the running totals of the words counted in that epoch)",
        "  checkpoints in ck: a rerun with the same --checkpoint-dir goes on after epoch 2 "
        "(files added to texts are read then)"]
    assert len(os.listdir(tmp_path / "counts")) == 6
    status, out, err = finish(start(argv, tmp_path))
    assert status == 0, err
    assert out.splitlines()[1:3] == [
        "  counts already held epochs 0..2: this run went on after them",
        "  wrote nothing new to counts: every epoch was done already"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("argv, error", [
    (["--help"], None),
    (["--only", "core,nope"], "argument --only: no section bench_nope (choose from "),
    (["--qiuck"], "unrecognized arguments: --qiuck")])
def test_the_benchmarks_command_checks_its_flags_before_running_anything(argv, error):
    """``python -m benchmarks`` (an 18-minute run that rewrites RESULTS.md) follows
    argparse's conventions too: ``--help`` and a bad flag or section name run nothing."""
    results = ROOT / "benchmarks" / "RESULTS.md"
    before = results.stat().st_mtime_ns
    status, out, err = finish(start(["-m", "benchmarks", *argv], ROOT))
    assert "Traceback" not in err and "===" not in out, (out, err)
    if error is None:
        assert status == 0 and out.startswith("usage: python -m benchmarks") and "--only" in out
    else:
        assert (status, out) == (2, "")
        assert err.splitlines()[-1].startswith(f"python -m benchmarks: error: {error}"), err
    assert results.stat().st_mtime_ns == before


def test_fraud_sessions_of_several_processes_needs_one_folder_they_all_read(tmp_path):
    """Each process wrote its own sample folder, and a file is read by the worker its path
    routes to: files went unread or were read twice, silently (498 sessions, then 362)."""
    (tmp_path / "hosts").write_text("127.0.0.1:1\n127.0.0.1:2\n")
    status, out, err = finish(start([EXAMPLES / "fraud_sessions.py", "-n", "2", "-p", "0",
                                     "-h", "hosts"], tmp_path))
    assert (status, out) == (2, "")
    assert err.splitlines()[-1] == (
        "fraud_sessions.py: error: argument --folder: a job of several processes (-n) reads "
        "its Parquet files from one folder every process can read: give --folder (or "
        "--checkpoint-dir, which holds a sample folder)")
    assert os.listdir(tmp_path) == ["hosts"]


@pytest.mark.timeout(200)
def test_fraud_sessions_of_two_processes_label_their_parts_which_add_up_to_the_whole(tmp_path):
    """Each process printed the part of the report its workers held, unlabelled (process 0
    with 0 transactions of a blocked card, process 1 with the alerts)."""
    from ports import free_ports
    (tmp_path / "hosts").write_text("".join(f"127.0.0.1:{port}\n" for port in free_ports(2)))
    status, whole, err = finish(start([EXAMPLES / "fraud_sessions.py", "--checkpoint-dir",
                                       "ck", "-w", "2"], tmp_path))    # writes a sample there
    assert status == 0, err
    processes = [start([EXAMPLES / "fraud_sessions.py", "--folder", "ck/_sample-transactions",
                        "-n", "2", "-p", str(p), "-h", "hosts"], tmp_path) for p in (0, 1)]
    parts = [finish(process) for process in processes]
    assert [status for status, _, _ in parts] == [0, 0], parts
    alerts = []
    for p, (_, out, _) in enumerate(parts):
        first, *lines = out.splitlines()
        assert first == (f"process {p} of 2: the part of the report its workers hold (every "
                         f"process prints its own)")
        alerts += [line for line in lines if line.startswith("ALERT")]
    assert sorted(alerts) == sorted(line for line in whole.splitlines()
                                    if line.startswith("ALERT")) != []


def test_dd_bfs_of_a_graph_without_edges_runs(tmp_path):
    """``--edges 0`` is accepted, and runs (its rounds sampled edges to remove from none)."""
    status, out, err = finish(start([EXAMPLES / "dd_bfs.py", "--nodes", "3", "--edges", "0"],
                                    tmp_path))
    assert status == 0, err
    assert out.splitlines()[-1] == ("round 4: 1 nodes reachable, 0 distance updates, same as "
                                    "BFS from scratch")


@pytest.mark.parametrize("argv", [["-w", "2"], ["-n", "2", "-p", "0", "-h", "hosts"]],
                         ids=["workers", "processes"])
@pytest.mark.parametrize("value, told", [
    ("abc", "a positive number of seconds, got 'abc'"),
    ("inf", "at most 1000000 seconds (11.6 days), got 'inf'")])       # (an OverflowError)
def test_a_bad_connect_timeout_in_the_environment_is_a_usage_error(tmp_path, argv, value,
                                                                    told):
    """Was a traceback from where the workers connect, status 1."""
    (tmp_path / "hosts").write_text("127.0.0.1:1\n127.0.0.1:2\n")
    status, out, err = finish(start([EXAMPLES / "hello.py", *argv], tmp_path,
                                    env={"SPARKTIMELY_CONNECT_TIMEOUT": value}))
    assert (status, out) == (2, "") and "Traceback" not in err, err
    assert err.splitlines()[-1] == f"hello.py: error: $SPARKTIMELY_CONNECT_TIMEOUT must be {told}"
