"""Several OS processes running one job from a hostfile: on loopback (sharing memory, or with
sockets forced), across network namespaces, and when a process dies or cannot be reached."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import psutil
import pytest
from ports import free_ports
from segment_leaks import segments_of

import comm_jobs
import sparktimely as st
from sparktimely.execute import config_from_args
from sparktimely.shm import sweep_stale
from examples.bfs import random_graph, reference_bfs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = [pytest.param(False, id="shm"), pytest.param(True, id="sockets")]


class Job:
    """The processes of one run of ``comm_jobs.py JOB``, output in files."""

    def __init__(self, directory, job: str, processes: int, *, workers: int | list[int] = 2,
                 force_sockets: bool = False, hosts: list[str] | None = None,
                 prefix=lambda process: [], env: dict | None = None,
                 program=lambda process: comm_jobs.__file__) -> None:
        self.dir = directory / f"{job}-{uuid.uuid4().hex[:8]}"
        self.dir.mkdir()
        hosts = hosts or [f"127.0.0.1:{port}" for port in free_ports(processes)]
        self.hostfile = self.dir / "hosts"
        self.hostfile.write_text("".join(f"{host}\n" for host in hosts))
        env = dict(os.environ, PYTHONPATH=ROOT, SPARKTIMELY_FORCE_SOCKETS=str(int(force_sockets)),
                   **(env or {}))
        workers = workers if isinstance(workers, list) else [workers] * processes
        self.procs = []
        for process in range(processes):
            with open(self.dir / f"out{process}", "w") as out, \
                    open(self.dir / f"err{process}", "w") as err:
                self.procs.append(subprocess.Popen(
                    [*prefix(process), sys.executable, program(process), job,
                     "-w", str(workers[process]), "-n", str(processes), "-p", str(process),
                     "-h", str(self.hostfile)],
                    stdout=out, stderr=err, env=env, cwd=ROOT))

    def output(self, process: int, stream: str = "out") -> str:
        return (self.dir / f"{stream}{process}").read_text()

    def wait(self, timeout: float = 90) -> list[int]:
        deadline = time.monotonic() + timeout
        return [proc.wait(max(deadline - time.monotonic(), 0.1)) for proc in self.procs]

    def results(self, timeout: float = 90) -> list:
        codes = self.wait(timeout)
        for process, code in enumerate(codes):
            assert code == 0, self.output(process, "err")
        return [json.loads(self.output(p).splitlines()[-1]) for p in range(len(self.procs))]

    def leftovers(self) -> tuple[list, list]:
        """Processes still running this job (forked workers share its command line), and
        shared-memory segments created by its processes."""
        marker = str(self.hostfile)
        alive = [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]
        return alive, segments_of(proc.pid for proc in self.procs)

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def jobs(tmp_path):
    """Starts jobs; afterwards checks that nothing of them is left (processes, segments)."""
    started: list[Job] = []

    def start(*args, **kwargs) -> Job:
        started.append(Job(tmp_path, *args, **kwargs))
        return started[-1]
    yield start
    for job in started:
        job.kill()
    deadline = time.monotonic() + 5
    for job in started:
        while job.leftovers() != ([], []) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert job.leftovers() == ([], [])


def expected_exchange(peers: int) -> list[dict]:
    expected = []
    for worker in range(peers):
        records = []
        for t in range(comm_jobs.ROUNDS):
            mine = sorted(x + 1 for source in range(peers) for x in comm_jobs.round_records(source, t)
                          if comm_jobs.second_route(x + 1) % peers == worker)
            if mine:
                records.append([t, mine])
        rows = comm_jobs.ROWS
        arrow = [[t, rows * peers, sum(rows * (rows - 1) // 2 + rows * (source * rows + t)
                                       for source in range(peers))]
                 for t in range(comm_jobs.ROUNDS)]
        expected.append({"records": records, "arrow": arrow})
    return expected


@pytest.mark.timeout(120)
@pytest.mark.parametrize("processes", [2, 3])
@pytest.mark.parametrize("force_sockets", MODES)
def test_exchange_heavy_job_has_exact_results(jobs, processes, force_sockets):
    results = [worker for part in jobs("exchange", processes, force_sockets=force_sockets).results()
               for worker in part]
    assert {r.pop("allocator") for r in results} == \
        {"ClusterAllocator" if force_sockets else "ShmAllocator"}
    peers = 2 * processes
    assert [r.pop("remote") for r in results] == \
        [[p for p in range(peers) if p // 2 != w // 2] if force_sockets else []
         for w in range(peers)]                 # forced: each process is a host of its own
    assert results == expected_exchange(peers)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("force_sockets", MODES)
def test_a_hostfile_mixing_loopback_spellings_runs_as_one_host(jobs, force_sockets):
    """``[::1]``, ``127.0.0.1`` and ``0.0.0.0`` in one hostfile: three processes of one host
    (sharing memory unless sockets are forced), exact results."""
    ports = free_ports(3)
    hosts = [f"[::1]:{ports[0]}", f"127.0.0.1:{ports[1]}", f"0.0.0.0:{ports[2]}"]
    results = [worker for part in jobs("exchange", 3, force_sockets=force_sockets,
                                       hosts=hosts).results()
               for worker in part]
    assert {r.pop("allocator") for r in results} == \
        {"ClusterAllocator" if force_sockets else "ShmAllocator"}
    for result in results:
        del result["remote"]
    assert results == expected_exchange(6)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("processes, force_sockets", [(1, False), (2, False), (2, True)],
                         ids=["1-process", "2-shm", "2-sockets"])
def test_processes_holding_many_descriptors_run_as_others(jobs, processes, force_sockets):
    """Processes that hold 1,100 open descriptors (a program with many files or connections
    open), so that the sockets and pipes of the run get numbers past 1023, where
    select.select refuses them: the rendezvous, the links and the janitor still work."""
    results = [worker for part in jobs("exchange", processes, force_sockets=force_sockets,
                                       env={"COMM_JOBS_HOLD_FDS": "1100"}).results()
               for worker in part]
    for result in results:
        del result["allocator"], result["remote"]
    assert results == expected_exchange(2 * processes)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("processes", [2, 3])
@pytest.mark.parametrize("force_sockets", MODES)
def test_bfs_example_matches_reference(jobs, processes, force_sockets):
    parts = [dict(worker) for part in jobs("bfs", processes, force_sockets=force_sockets).results()
             for worker in part]
    assert len(parts) == 2 * processes
    merged = {}
    for part in parts:
        assert not merged.keys() & part.keys()
        merged.update(part)
    assert merged == reference_bfs(random_graph(2000, 6000, seed=5), 0)


def wait_ready(job: Job, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not all("ready" in job.output(p) for p in range(len(job.procs))):
        assert time.monotonic() < deadline, [job.output(p, "err") for p in range(len(job.procs))]
        assert all(proc.poll() is None for proc in job.procs), \
            [job.output(p, "err") for p in range(len(job.procs))]
        time.sleep(0.05)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("force_sockets", MODES)
def test_killed_process_stops_the_others_within_5_seconds(jobs, force_sockets):
    """Each survivor tells the loss once, in one line: the lost process, its address and
    workers, and the process that noticed (itself, or the other survivor that told it) --
    not as ``worker 2 failed``, which read as if a surviving worker had failed."""
    job = jobs("forever", 3, force_sockets=force_sockets)
    wait_ready(job)
    job.procs[1].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    address = job.hostfile.read_text().split()[1]
    for process in (0, 2):
        code = job.procs[process].wait(10)
        assert time.monotonic() - killed < 5
        assert code != 0
        error = job.output(process, "err")
        assert re.fullmatch(rf"comm_jobs\.py: lost process 1 at {re.escape(address)} "
                            rf"\(workers 2\.\.3\), noticed by process [02]: the process died "
                            rf"or the network dropped\n", error), error
    job.kill()
    sweep_stale()      # what the next job does: a SIGKILLed process cannot remove its own mesh


@pytest.mark.timeout(90)
def test_worker_failure_in_one_process_is_reported_by_all(jobs):
    job = jobs("fail", 2, force_sockets=True)
    assert job.wait(60) == [1, 1]
    for process in (0, 1):
        assert "worker 3 failed: ValueError: boom from worker 3" in job.output(process, "err")
    assert_reported_by_its_own_process(job, 1)


@pytest.mark.timeout(90)
def test_a_failure_is_told_by_every_process_however_late_its_own_supervisor_is(jobs, tmp_path):
    """Worker 0 fails while its process's supervisor is stopped (a loaded machine, at its
    worst): worker 0 and its peers keep their connections until that supervisor has told the
    other process, so that process tells the failure itself, not a lost connection."""
    trigger = tmp_path / "fail now"
    job = jobs("fail_when_told", 2, force_sockets=True, env={"COMM_JOBS_TRIGGER": str(trigger)})
    wait_ready(job)
    job.procs[0].send_signal(signal.SIGSTOP)
    try:
        trigger.touch()
        time.sleep(3)                  # three times what a lost peer waits for an account
        assert job.procs[1].poll() is None, job.output(1, "err")
    finally:
        job.procs[0].send_signal(signal.SIGCONT)
    assert job.wait(60) == [1, 1]
    for process in (0, 1):
        assert "worker 0 failed: ValueError: boom from worker 0" in job.output(process, "err")
    assert_reported_by_its_own_process(job, 0)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("force_sockets", MODES)
@pytest.mark.parametrize("attempt", range(4))
def test_an_operator_failure_is_told_as_its_own_process_saw_it(jobs, force_sockets, attempt):
    """Worker 3 (in process 1) fails mid-run: word reaches process 0's workers through the
    data connections, often first; process 0 then told it as its own, and process 1 as
    "reported by process 0" (in about half of the runs)."""
    job = jobs("fail_in_operator", 2, force_sockets=force_sockets)
    assert job.wait(60) == [1, 1]
    for process in (0, 1):
        assert "worker 3 failed: OperatorError: operator 'Map' (address (0, 1)) raised " \
               "ValueError on the record (0, 5): boom in worker 3" in job.output(process, "err")
    assert_reported_by_its_own_process(job, 1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("force_sockets", MODES)
def test_a_record_that_does_not_unpickle_is_named_by_the_worker_it_reached(jobs, force_sockets):
    """The receiving worker names the sender, the time and the operator, as a sender names
    a record that does not pickle (it told the error of the record's class alone)."""
    job = jobs("unrebuildable", 2, force_sockets=force_sockets)
    assert job.wait(60) == [1, 1]
    for process in (0, 1):
        assert "worker 3 failed: UnpicklingError: a batch from worker 0 at time 2, into " \
               "operator 'Exchange' (address (0, 1)) of dataflow 'records', cannot be " \
               "unpickled (RuntimeError: cannot rebuild 7); records that move between " \
               "workers must unpickle in every worker" in job.output(process, "err")
    assert_reported_by_its_own_process(job, 1)


def assert_reported_by_its_own_process(job, owner: int) -> None:
    """The failure is told bare by process ``owner``, and by the other as reported by it."""
    for process in (0, 1):
        told = job.output(process, "err")
        if process == owner:
            assert "reported by process" not in told, told
        else:
            assert f"(reported by process {owner} at 127.0.0.1:" in told, told


@pytest.mark.timeout(120)
@pytest.mark.parametrize("force_sockets", MODES)
def test_a_worker_that_never_builds_a_dataflow_stops_every_process_naming_it(jobs, force_sockets):
    """Worker 3 (of 4, in process 1) returns without building the dataflow the others build:
    every run, both processes fail within seconds naming it, whoever notices first. (A
    worker that notices keeps its connections until its supervisor has told the other
    process: dropped first, a remote worker would tell the lost connection instead.)"""
    for run in range(3):
        job = jobs("diverge", 2, force_sockets=force_sockets)
        started = time.monotonic()
        assert job.wait(60) == [1, 1]
        assert time.monotonic() - started < 10, f"run {run}: {time.monotonic() - started:.1f} s"
        for process in (0, 1):
            assert re.search(r"worker 3 never built dataflow 0 \('numbers'\)",
                             job.output(process, "err")), job.output(process, "err")


@pytest.mark.timeout(60)
def test_two_programs_started_on_one_hostfile_are_refused_not_run_as_one_job(jobs, tmp_path):
    """Process 1 runs a copy of the program with one line more: the processes' job token
    covers the program's file, so they do not meet (each ran its own dataflow with the
    other's records, and both exited 0)."""
    other = tmp_path / "other_program.py"
    other.write_text(open(comm_jobs.__file__).read() + "# another program\n")
    job = jobs("exchange", 2, program=lambda process: str(other) if process else comm_jobs.__file__,
               env={"SPARKTIMELY_CONNECT_TIMEOUT": "3"})
    assert job.wait(30) == [1, 1]
    told = job.output(0, "err") + job.output(1, "err")   # by the first to see the other's token
    assert "belongs to another sparktimely job (another hostfile or plan, another -n, or " \
           "another program)" in told, told


@pytest.mark.timeout(60)
def test_workers_that_name_a_dataflow_differently_stop_naming_both_names(jobs):
    """One program run twice on one hostfile with other arguments (here: the dataflow's
    name) meets as one job; the workers tell the dataflow's two names apart."""
    job = jobs("named", 2, prefix=lambda process: ["env", f"COMM_JOBS_NAME=sums-{process}"])
    assert job.wait(30) == [1, 1]
    for process in (0, 1):
        assert re.search(r"workers built dataflow 0 under different names: worker \d named it "
                         r"'sums-\d', worker \d 'sums-\d'", job.output(process, "err")), \
            job.output(process, "err")


@pytest.mark.timeout(60)
def test_a_hostfile_address_already_taken_asks_whether_another_process_runs_as_it():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConnectionError, match=rf"process 0 cannot listen on its hostfile "
                           rf"address 127.0.0.1:{port}: Address already in use \(is another "
                           rf"process of this job also running as -p 0, or another program "
                           rf"on that port\?\)"):
            st.execute(lambda worker: None, processes=2, process=0,
                       hostfile=[f"127.0.0.1:{port}", "127.0.0.1:1"])


@pytest.mark.timeout(60)
def test_processes_with_different_worker_counts_refuse_to_start(jobs):
    job = jobs("exchange", 2, workers=[2, 1])
    assert job.wait(30) == [1, 1]
    assert "process 1 runs 1 worker but process 0 runs 2" in job.output(0, "err")
    assert "process 0 runs 2 workers but process 1 runs 1" in job.output(1, "err")
    for process in (0, 1):          # told as a command line tells an error, once
        assert "Traceback" not in job.output(process, "err"), job.output(process, "err")


@pytest.mark.timeout(30)
def test_unreachable_process_is_named_after_the_timeout(monkeypatch):
    monkeypatch.setenv("SPARKTIMELY_CONNECT_TIMEOUT", "1")
    hosts = [f"127.0.0.1:{port}" for port in free_ports(2)]
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=f"could not reach process 0 at {hosts[0]} within 1 s"):
        st.execute(lambda worker: None, processes=2, process=1, hostfile=hosts)
    with pytest.raises(ConnectionError, match=rf"process 1 \({hosts[1]}\) did not connect"):
        st.execute(lambda worker: None, processes=2, process=0, hostfile=hosts)
    assert time.monotonic() - start < 10
    assert psutil.Process().children() == []


@pytest.mark.timeout(30)
def test_a_process_that_cannot_join_its_peers_stops_its_warm_up_before_it_raises(monkeypatch):
    """The warm-up thread may be loading a module when joining the peers fails; a program
    that exits on the error must not finalize the interpreter under it (a fatal error and
    SIGABRT instead of the error, told once): it is stopped before the error goes out."""
    from sparktimely import _warm
    started = threading.Event()

    def warming(steps):
        started.set()
        _warm._stopping.wait()
    monkeypatch.setattr(_warm, "_warm", warming)
    monkeypatch.setattr(_warm, "_rehearsed", False)
    monkeypatch.setenv("SPARKTIMELY_CONNECT_TIMEOUT", "1")
    hosts = [f"127.0.0.1:{port}" for port in free_ports(2)]
    with pytest.raises(ConnectionError, match="could not reach process 0"):
        st.execute(lambda worker: None, processes=2, process=1, hostfile=hosts)
    assert started.is_set()
    assert _warm._thread is None
    assert "sparktimely-warm-up" not in [thread.name for thread in threading.enumerate()]


@pytest.mark.timeout(30)
def test_configuration_errors_are_reported_before_anything_starts(tmp_path):
    port = free_ports(1)[0]
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"127.0.0.1:{port}\n127.0.0.1:{port + 1}\n")
    with pytest.raises(ValueError, match="-n/--processes 2 needs -p/--process"):
        config_from_args(["-n", "2", "-h", str(hostfile)])
    hostfile.write_text(f"127.0.0.1:{port}\n127.0.0.1\n")
    with pytest.raises(ValueError, match="line 2: '127.0.0.1' is not host:port"):
        config_from_args(["-n", "2", "-p", "0", "-h", str(hostfile)])
    hostfile.write_text(f"127.0.0.1:{port} 127.0.0.1:{port + 1}\n127.0.0.1:{port + 2}\n")
    with pytest.raises(ValueError, match=r"line 1: .* is not host:port \(one address per line"):
        config_from_args(["-n", "2", "-p", "0", "-h", str(hostfile)])
    hostfile.write_text(f"localhost {port}\n127.0.0.1:{port + 2}\n")     # a space for the colon
    with pytest.raises(ValueError, match=rf"line 1: 'localhost {port}' is not host:port "
                                         rf"\(write host:port, e.g. localhost:{port}\)"):
        config_from_args(["-n", "2", "-p", "0", "-h", str(hostfile)])
    for line, problem in [("http://localhost:2101", "no scheme: write host:port"),   # were told
                          ("localhost:2102:5", "an IPv6 address goes in brackets"),  # as hosts
                          ("[::1:2103", "the brackets must hold an IPv6 address")]:  # that do not
        hostfile.write_text(f"127.0.0.1:{port}\n{line}\n")                           # resolve
        with pytest.raises(ValueError, match=re.escape(f"line 2: {line!r} is not host:port "
                                                       f"({problem}")):
            config_from_args(["-n", "2", "-p", "0", "-h", str(hostfile)])
    for first, second, told in [                # one port of one host: was a refused peer
            ("localhost", "0.0.0.0", f"line 2: '0.0.0.0:{port}' takes port {port} on every "
                                     f"address of its host, line 1's ('localhost:{port}') too"),
            ("[::]", "127.0.0.1", f"line 2: '127.0.0.1:{port}' has port {port}, which line 1 "
                                  f"('[::]:{port}') takes on every address of its host")]:
        hostfile.write_text(f"{first}:{port}\n{second}:{port}\n")
        with pytest.raises(ValueError, match=re.escape(f"hostfile {hostfile} {told}: every "
                                                       f"process needs an address of its own")):
            config_from_args(["-n", "2", "-p", "0", "-h", str(hostfile)])
    with pytest.raises(ValueError, match="process 2 has none"):
        st.execute(lambda worker: None, processes=3, process=0,
                   hostfile=[f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"])
    for wildcard in ("0.0.0.0", "[::]"):        # with another host: was the connect timeout
        hostfile.write_text(f"{wildcard}:{port}\n# the other host\n192.0.2.1:{port + 1}\n")
        with pytest.raises(ValueError, match=re.escape(
                f"hostfile {hostfile} line 1: '{wildcard}:{port}' is no address a process on "
                f"another host can connect to, and line 3 ('192.0.2.1:{port + 1}') is on "
                f"another host: write this host's name or address")):
            config_from_args(["-n", "2", "-p", "0", "-h", str(hostfile)])
        with pytest.raises(ValueError, match=r"^hostfile line 2: .* line 1 \('192.0.2.1"):
            st.execute(lambda worker: None, processes=2, process=0,
                       hostfile=[f"192.0.2.1:{port + 1}", f"{wildcard}:{port}"])
    socket.create_server(("127.0.0.1", port)).close()      # nothing was left listening


@pytest.mark.timeout(30)
def test_more_workers_than_a_host_can_hold_rings_for_are_refused_at_once(tmp_path, monkeypatch):
    """-w 100000 (a typo) made a 38 GB control segment, warned that it fell back to a file on
    disk and went on; -w 100000000 failed inside os.posix_fallocate with a traceback. A
    host's workers need a ring each way between each pair: the count is refused before
    anything is made, naming the flag, what it needs and how many fit."""
    monkeypatch.setenv("SPARKTIMELY_SHM_DIR", str(tmp_path))     # its file system's size
    room = os.statvfs(tmp_path)
    capacity = room.f_blocks * room.f_frsize
    too_many = int((capacity / (64 << 10)) ** 0.5) + 2
    with pytest.raises(ValueError, match=rf"^argument -w/--workers/--threads: {too_many:,} "
                                         rf"workers on one host need at least .* GiB of shared "
                                         rf"memory for their rings .* more than {tmp_path} "
                                         rf"holds .*: at most [\d,]+ fit$"):
        config_from_args(["-w", str(too_many)])
    with pytest.raises(ValueError, match=rf"^{too_many:,} workers on one host need"):
        st.execute(lambda worker: None, workers=too_many)
    assert os.listdir(tmp_path) == [] and psutil.Process().children() == []
    script = tmp_path.parent / "job.py"
    script.write_text("import sys, sparktimely as st\n"
                      "st.execute_from_args(sys.argv[1:], lambda worker: None)\n")
    run = subprocess.run([sys.executable, str(script), "-w", "100000000"], capture_output=True,
                         text=True, timeout=20)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert run.stderr.splitlines()[-1].startswith(
        "job.py: error: argument -w/--workers/--threads: 100,000,000 workers on one host need")


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=20)


@pytest.fixture
def namespaces():
    """Two network namespaces joined by a veth pair: (name, interface) with 10.250.0.1 and
    10.250.0.2."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    tag = uuid.uuid4().hex[:6]
    spaces = [(f"st{tag}a", f"v{tag}a"), (f"st{tag}b", f"v{tag}b")]
    try:
        if _run("ip", "netns", "add", spaces[0][0]).returncode:
            pytest.skip("ip netns add is not permitted here")
        steps = [("ip", "netns", "add", spaces[1][0]),
                 ("ip", "link", "add", spaces[0][1], "type", "veth", "peer", "name", spaces[1][1])]
        for number, (ns, link) in enumerate(spaces, 1):
            steps += [("ip", "link", "set", link, "netns", ns),
                      ("ip", "-n", ns, "addr", "add", f"10.250.0.{number}/24", "dev", link),
                      ("ip", "-n", ns, "link", "set", link, "up"),
                      ("ip", "-n", ns, "link", "set", "lo", "up")]
        for step in steps:
            done = _run(*step)
            if done.returncode:
                pytest.skip(f"{' '.join(step)} failed: {done.stderr.strip()}")
        yield spaces
    finally:
        for ns, _ in spaces:
            _run("ip", "netns", "del", ns)


@pytest.mark.timeout(120)
def test_separate_network_namespaces_are_separate_hosts(jobs, namespaces):
    """Processes 0 and 1 share namespace A (and memory); process 2 is alone in B."""
    where = [0, 0, 1]
    job = jobs("exchange", 3, hosts=["10.250.0.1:2101", "10.250.0.1:2102", "10.250.0.2:2101"],
               prefix=lambda process: ["ip", "netns", "exec", namespaces[where[process]][0]])
    results = [worker for part in job.results() for worker in part]
    assert {r.pop("allocator") for r in results} == {"ClusterAllocator"}
    assert [r.pop("remote") for r in results] == [[4, 5]] * 4 + [[0, 1, 2, 3]] * 2
    assert results == expected_exchange(6)


PRIVATE_SHM = ("mount -t tmpfs -o size=64m tmpfs /dev/shm || exit 77; \"$@\"; code=$?; "
               "echo \"left in /dev/shm: $(ls /dev/shm | wc -l)\" >&2; exit $code")


@pytest.mark.timeout(120)
def test_two_hosts_of_their_own_network_ipc_and_dev_shm(jobs, namespaces):
    """As on two machines: each process in its own network and IPC namespaces with its own
    /dev/shm. Each process's two workers share memory (their own mesh), the two processes
    talk through sockets (so each worker has both, and parks on its doorbell with a watcher
    on its sockets), and the results are exact."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) for IPC and mount namespaces")

    def prefix(process):
        return ["ip", "netns", "exec", namespaces[process][0], "unshare", "--ipc", "--mount",
                "--propagation", "private", "sh", "-c", PRIVATE_SHM, "sh"]
    job = jobs("exchange", 2, hosts=["10.250.0.1:2101", "10.250.0.2:2101"], prefix=prefix)
    codes = job.wait(90)
    if 77 in codes:
        pytest.skip(f"cannot mount a private /dev/shm here: {job.output(0, 'err')}")
    results = [worker for part in job.results() for worker in part]
    assert {r.pop("allocator") for r in results} == {"ClusterAllocator"}
    assert [r.pop("remote") for r in results] == [[2, 3], [2, 3], [0, 1], [0, 1]]
    assert results == expected_exchange(4)
    for process in (0, 1):          # the segments were in the process's own /dev/shm: gone
        assert job.output(process, "err").splitlines()[-1] == "left in /dev/shm: 0"


@pytest.mark.timeout(90)
def test_a_dropped_network_link_stops_both_sides_within_5_seconds(jobs, namespaces):
    job = jobs("forever", 2, hosts=["10.250.0.1:2101", "10.250.0.2:2101"],
               prefix=lambda process: ["ip", "netns", "exec", namespaces[process][0]])
    wait_ready(job)
    ns, link = namespaces[1]
    assert _run("ip", "-n", ns, "link", "set", link, "down").returncode == 0
    dropped = time.monotonic()
    for process, other in ((0, 1), (1, 0)):
        assert job.procs[process].wait(10) != 0
        assert time.monotonic() - dropped < 5, time.monotonic() - dropped
        error = job.output(process, "err")
        assert f"lost process {other} at " in error, error
