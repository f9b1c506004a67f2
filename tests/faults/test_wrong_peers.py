"""Whatever listens at a hostfile address, a job that cannot meet its
peers there fails within 5 s with an error naming the address and what it received; frame
lengths are bounded."""
from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
import time

import pytest
from ports import free_ports

import sparktimely as st
from sparktimely.comm.net import FRAME, PROTOCOL_VERSION, _Handshake, listen
from sparktimely.comm.rendezvous import process_token

pytestmark = pytest.mark.timeout(60)


class Service:
    """A TCP service on a free loopback port that answers every connection with ``answer``
    (bytes, or a function of the connection) and then keeps it open."""

    def __init__(self, answer) -> None:
        self.listener = listen("127.0.0.1")
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.answer = answer
        self.connections: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(sock)
            try:
                if callable(self.answer):
                    self.answer(sock)
                elif self.answer:
                    sock.sendall(self.answer)
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()
        for sock in self.connections:
            sock.close()


def run_process(process: int, hostfile: list[str]) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises(ConnectionError) as caught:
        st.execute(lambda worker: None, workers=2, processes=len(hostfile), process=process,
                   hostfile=hostfile)
    return caught.value, time.monotonic() - started


def against(answer) -> tuple[BaseException, float, str]:
    """Process 1 of a job whose process 0 address is held by a service answering ``answer``
    (bytes, or a function of the connection and the job's hostfile): process 1's error, how
    long it took, and the service's address."""
    hostfile = [None, f"127.0.0.1:{free_ports(1)[0]}"]
    service = Service(answer if not callable(answer) else lambda sock: answer(sock, hostfile))
    hostfile[0] = service.address
    try:
        error, elapsed = run_process(1, hostfile)
    finally:
        service.close()
    return error, elapsed, service.address


@pytest.mark.parametrize("process", [0, 1])
def test_a_service_with_a_banner_is_named_with_what_it_sent(process):
    service = Service(b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n")
    hostfile = [f"127.0.0.1:{port}" for port in free_ports(2)]
    hostfile[1 - process] = service.address             # where the other process should be
    try:
        error, elapsed = run_process(process, hostfile)
    finally:
        service.close()
    assert str(error) == (f"process {process} could not connect to process {1 - process} at "
                          f"{service.address}: it is not a sparktimely process: it sent "
                          f"b'SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu'")
    assert elapsed < 5


@pytest.mark.parametrize("answer, sent", [
    (b"220 mail.example.com ESMTP\r\n", "b'220 mail.example.com ESMTP\\r\\n'"),  # then waits
    (b"\xff" * 4096, "b'\\xff\\xff\\xff"),   # once read as a frame length: a MemoryError
])
def test_bytes_that_cannot_begin_a_handshake_are_named_at_once(answer, sent):
    error, elapsed, address = against(answer)
    assert str(error).startswith(f"process 1 could not connect to process 0 at {address}: it "
                                 f"is not a sparktimely process: it sent {sent}")
    assert elapsed < 5


def test_a_silent_service_is_named_within_five_seconds():
    error, elapsed, address = against(b"")
    assert str(error) == (f"process 1 could not connect to process 0 at {address}: it "
                          f"accepted the connection but sent no sparktimely handshake within "
                          f"3 s: is another service listening there?")
    assert elapsed < 5


def greeting(hostfile: list[str], version: int = PROTOCOL_VERSION, index: int = 0):
    token = process_token(hostfile)
    return _Handshake.FORMAT.pack(_Handshake.MAGIC, version, _Handshake.GREETING, token, index, 0)


def test_a_peer_of_another_job_is_refused():
    error, elapsed, address = against(greeting(["127.0.0.1:1", "127.0.0.1:2"]))  # other hosts
    assert str(error) == (f"process 1 could not connect to process 0 at {address}: "
                          f"it belongs to another sparktimely job (another hostfile or plan, "
                          f"another -n, or another program): were the processes given "
                          f"different -n or started from different files, or do two jobs use "
                          f"the same addresses?")
    assert elapsed < 5


def test_a_peer_of_another_version_is_refused():
    error, elapsed, address = against(
        lambda sock, hostfile: sock.sendall(greeting(hostfile, version=1)))
    assert str(error) == (f"process 1 could not connect to process 0 at {address}: it speaks "
                          f"sparktimely protocol version 1 and this process version "
                          f"{PROTOCOL_VERSION}: run one sparktimely version everywhere")
    assert elapsed < 5


def test_an_oversized_control_frame_is_refused_not_allocated():
    """A peer that passes the handshake and then sends a frame claiming 2**60 bytes."""
    def impostor(sock, hostfile):
        sock.sendall(greeting(hostfile))
        sock.recv(_Handshake.FORMAT.size)              # its hello
        sock.sendall(_Handshake.FORMAT.pack(_Handshake.MAGIC, PROTOCOL_VERSION,
                                            _Handshake.WELCOME, process_token(hostfile),
                                            0, 1))
        sock.sendall(FRAME.pack(2, 0, 1, 1 << 60))
    error, elapsed, address = against(impostor)
    assert str(error).startswith(f"lost process 0 at {address} (workers 0..1), noticed by process "
                                 f"1 during start-up: unexpected frame on a control connection: "
                                 f"channel 2, {1 << 60} bytes")
    assert elapsed < 5


def reset(sock: socket.socket) -> None:
    """Close ``sock`` as a process that dies does when its peer has sent to it: a reset."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@pytest.mark.parametrize("welcomed", [False, True])
def test_a_peer_that_dies_in_the_handshake_is_named(welcomed):
    """Process 0 goes away (its connection reset) before or just after it welcomes process
    1: process 1 names it, its address and when, not a bare ConnectionResetError."""
    def dying(sock, hostfile):
        sock.sendall(greeting(hostfile))
        sock.recv(_Handshake.FORMAT.size)              # its hello
        if welcomed:
            sock.sendall(_Handshake.FORMAT.pack(_Handshake.MAGIC, PROTOCOL_VERSION,
                                                _Handshake.WELCOME, process_token(hostfile),
                                                0, 1))
        reset(sock)
    for _ in range(3):                                 # the reset races process 1's hello
        error, elapsed, address = against(dying)
        assert type(error) is ConnectionError
        assert str(error) == (
            f"lost process 0 at {address} (workers 0..1), noticed by process 1 during "
            f"start-up: Connection reset by peer" if welcomed else
            f"process 1 could not connect to process 0 at {address}: the connection failed "
            f"during the handshake: Connection reset by peer")
        assert elapsed < 5


CHECKPOINTED_OR_NOT = """
import sys, sparktimely as st
process, workers, every = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[4])
directory, hostfile = sys.argv[3], sys.argv[5:]
def job(worker):
    worker.dataflow(lambda scope: scope.to_stream(range(10)).exchange(lambda x: x).probe(),
                    name="numbers")
try:
    st.execute(job, workers=workers, processes=2, process=process, hostfile=hostfile,
               checkpoint_dir=directory or None, checkpoint_every=every)
except ConnectionError as error:
    print(error)
"""


def run_both(workers: int, directories: list[str], every: list[int]) -> list[tuple[str, str]]:
    """Standard output and error of the two processes of a job of ``workers`` each, given
    ``directories[p]`` (or none) and ``every[p]`` for checkpoints."""
    hostfile = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = [subprocess.Popen([sys.executable, "-c", CHECKPOINTED_OR_NOT, str(p),
                                   str(workers), directories[p], str(every[p]), *hostfile],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for p in range(2)]
    try:
        return [process.communicate(timeout=20) for process in processes]
    finally:
        for process in processes:
            process.kill()
            process.wait()


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("checkpointed", [0, 1])
def test_processes_of_which_one_checkpoints_are_refused_not_left_waiting(tmp_path, workers,
                                                                         checkpointed):
    """A checkpoint directory given to one process of a hostfile job only: its workers waited
    for the others' word on the checkpoint to resume, the others for its workers' progress
    (forever, with a source), or the job failed naming a dataflow 'numbers checkpoints' the
    program never built. Both processes now fail at start-up, naming which one checkpoints."""
    directories = ["", ""]
    directories[checkpointed] = str(tmp_path / "ck")
    for p, (out, err) in enumerate(run_both(workers, directories, [1, 1])):
        other = 1 - p
        says = (f"process {other} runs with a checkpoint directory but process {p} runs "
                f"without" if other == checkpointed else
                f"process {other} runs without a checkpoint directory but process {p} runs "
                f"with one")
        assert out == (f"{says}: every process must be given the same checkpoint_dir "
                       f"(--checkpoint-dir), or none\n"), out + err


@pytest.mark.parametrize("workers", [1, 2])
def test_processes_that_checkpoint_at_different_paces_are_refused(tmp_path, workers):
    """Worker 0 asks for the checkpoints at its process's ``checkpoint_every``, every worker
    lets its operators through at its own: given 3 and 2, the job stood still 10 s at the
    first checkpoint, warned that an operator held an early epoch open, and checkpointed no
    more. Both processes now fail at start-up, naming both paces."""
    directory = str(tmp_path / "ck")
    outputs = run_both(workers, [directory, directory], [3, 2])
    for p, (out, err) in enumerate(outputs):
        other = 1 - p
        assert out == (f"process {other} checkpoints every {3 - other} epochs but process {p} "
                       f"every {3 - p}: every process must be given the same checkpoint_every "
                       f"(--checkpoint-every)\n"), out + err
