"""Faults issue, item 2: whatever listens at a hostfile address, a job that cannot meet its
peers there fails within 5 s with an error naming the address and what it received; frame
lengths are bounded."""
from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

import sparktimely as st
from sparktimely.comm.net import FRAME, PROTOCOL_VERSION, _Handshake, job_token, listen

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


def free_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def run_process(process: int, hostfile: list[str]) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises(ConnectionError) as caught:
        st.execute(lambda worker: None, workers=2, processes=len(hostfile), process=process,
                   hostfile=hostfile)
    return caught.value, time.monotonic() - started


@pytest.mark.parametrize("process", [0, 1])
def test_a_service_with_a_banner_is_named_with_what_it_sent(process):
    service = Service(b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n")
    hostfile = [free_address(), free_address()]
    hostfile[1 - process] = service.address             # where the other process should be
    try:
        error, elapsed = run_process(process, hostfile)
    finally:
        service.close()
    assert str(error) == (f"process {process} could not connect to process {1 - process} at "
                          f"{service.address}: it is not a sparktimely process: it sent "
                          f"b'SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu'")
    assert elapsed < 5


def test_a_short_banner_is_named_at_once():
    service = Service(b"220 mail.example.com ESMTP\r\n")       # and then it waits
    try:
        error, elapsed = run_process(1, [service.address, free_address()])
    finally:
        service.close()
    assert str(error).endswith("it is not a sparktimely process: it sent "
                               "b'220 mail.example.com ESMTP\\r\\n'")
    assert elapsed < 1


def test_a_silent_service_is_named_within_five_seconds():
    service = Service(b"")
    try:
        error, elapsed = run_process(1, [service.address, free_address()])
    finally:
        service.close()
    assert str(error) == (f"process 1 could not connect to process 0 at {service.address}: it "
                          f"accepted the connection but sent no sparktimely handshake within "
                          f"3 s: is another service listening there?")
    assert elapsed < 5


def test_a_service_that_reads_a_frame_length_from_our_bytes_cannot_exhaust_memory():
    """What used to give a bare MemoryError: a peer whose bytes are read as a frame length."""
    service = Service(b"\xff" * 4096)
    try:
        error, elapsed = run_process(1, [service.address, free_address()])
    finally:
        service.close()
    assert "it is not a sparktimely process: it sent b'\\xff\\xff" in str(error)
    assert elapsed < 5


def greeting(hostfile: list[str], version: int = PROTOCOL_VERSION, index: int = 0):
    token = job_token("processes", hostfile)
    return _Handshake.FORMAT.pack(_Handshake.MAGIC, version, _Handshake.GREETING, token, index, 0)


def test_a_peer_of_another_job_is_refused():
    other_job = Service(greeting(["127.0.0.1:1", "127.0.0.1:2"]))   # its hostfile differs
    try:
        error, elapsed = run_process(1, [other_job.address, free_address()])
    finally:
        other_job.close()
    assert str(error) == (f"process 1 could not connect to process 0 at {other_job.address}: "
                          f"it belongs to another sparktimely job (another hostfile or plan): "
                          f"are two jobs using the same addresses?")
    assert elapsed < 5


def test_a_peer_of_another_version_is_refused():
    hostfile = [None, free_address()]
    old = Service(lambda sock: sock.sendall(greeting(hostfile, version=1)))
    hostfile[0] = old.address
    try:
        error, elapsed = run_process(1, hostfile)
    finally:
        old.close()
    assert str(error) == (f"process 1 could not connect to process 0 at {old.address}: it speaks "
                          f"sparktimely protocol version 1 and this process version "
                          f"{PROTOCOL_VERSION}: run one sparktimely version everywhere")
    assert elapsed < 5


def test_an_oversized_control_frame_is_refused_not_allocated():
    """A peer that passes the handshake and then sends a frame claiming 2**60 bytes."""
    hostfile = [None, free_address()]

    def impostor(sock):
        sock.sendall(greeting(hostfile))
        sock.recv(_Handshake.FORMAT.size)              # its hello
        sock.sendall(_Handshake.FORMAT.pack(_Handshake.MAGIC, PROTOCOL_VERSION,
                                            _Handshake.WELCOME, job_token("processes", hostfile),
                                            0, 1))
        sock.sendall(FRAME.pack(2, 0, 1, 1 << 60))
    peer = Service(impostor)
    hostfile[0] = peer.address
    try:
        error, elapsed = run_process(1, hostfile)
    finally:
        peer.close()
    assert str(error).startswith(f"lost connection to process 0 at {peer.address} during "
                                 f"start-up: unexpected frame on a control connection: channel "
                                 f"2, {1 << 60} bytes")
    assert elapsed < 5
