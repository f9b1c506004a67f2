"""TCP plumbing shared by the process rendezvous and the worker links.

- Addresses are ``host:port`` strings (IPv6 hosts in brackets), as in timely's hostfile.
- :func:`connect_peers` is timely's scheme: a participant connects to every peer with a lower
  index (retrying with backoff until a deadline, so peers may start in any order) and accepts
  every peer with a higher index on its own listener. A connection opens with a handshake
  (magic, source index, target index): stray connections are ignored, misrouted ones refused.
- A frame is a 24-byte header ``(channel, source, target, length)`` followed by ``length``
  bytes of body; :data:`MESSAGE` carries an encoded message tuple, :data:`GOODBYE` says the
  sender will send nothing more, :data:`CONTROL` is a supervisor's pickled notice.

Nothing here authenticates peers: bodies are unpickled, so run jobs on trusted networks.
"""
from __future__ import annotations

import os
import pickle
import socket
import struct
import time
from typing import Any, Mapping

FRAME = struct.Struct("<IIIQ")
"""Frame header: channel, source index, target index, body length."""
MESSAGE, GOODBYE, CONTROL = 0, 1, 2
_HANDSHAKE = struct.Struct("<QII")   # magic, source, target
_MAGIC = 0x5350544D_434F4E4E
DEFAULT_TIMEOUT = 60.0
TIMEOUT_ENV = "SPARKTIMELY_CONNECT_TIMEOUT"


class PeerLost(ConnectionError):
    """The connection to another worker or process dropped without a goodbye."""


def connect_timeout(timeout: float | None = None) -> float:
    """``timeout``, else ``$SPARKTIMELY_CONNECT_TIMEOUT``, else 60 seconds.

    >>> connect_timeout(2.5)
    2.5
    """
    if timeout is not None:
        return float(timeout)
    return float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT)


def split_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of a ``host:port`` string.

    >>> split_address("node-1:2101"), split_address("[::1]:2102")
    (('node-1', 2101), ('::1', 2102))
    """
    host, _, port = address.rpartition(":")
    return host.removeprefix("[").removesuffix("]"), int(port)


def listen(host: str, port: int = 0, backlog: int = 128) -> socket.socket:
    """A listening TCP socket bound to ``host:port`` (port 0: any free port)."""
    family, kind, proto, _, sockaddr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def tune(sock: socket.socket) -> None:
    """No Nagle delay, and keepalive probes that declare an idle connection dead about 3 s
    after its peer host stopped answering (a peer process that dies is seen at once: its
    kernel closes the connection)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", 1), ("TCP_KEEPINTVL", 1), ("TCP_KEEPCNT", 2)):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


def connect_peers(index: int, addresses: Mapping[int, str], listener: socket.socket,
                  timeout: float, what: str = "process") -> dict[int, socket.socket]:
    """Connect to each peer in ``addresses`` (index -> ``host:port``) below ``index`` and accept
    each above it on ``listener``; returns the connected sockets by peer index.

    Raises ConnectionError naming the unreachable peer and address when that is not done within
    ``timeout`` seconds. ``what`` names the participants in errors ("process", "worker").
    """
    deadline = time.monotonic() + timeout
    connected: dict[int, socket.socket] = {}
    try:
        for peer in sorted(p for p in addresses if p < index):
            sock = _connect(addresses[peer], deadline, f"{what} {peer}", timeout)
            connected[peer] = sock
            sock.sendall(_HANDSHAKE.pack(_MAGIC, index, peer))
        expected = {p for p in addresses if p > index}
        while expected:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = ", ".join(f"{what} {p} ({addresses[p]})" for p in sorted(expected))
                raise ConnectionError(f"{missing} did not connect to {what} {index} within "
                                      f"{timeout:g} s")
            listener.settimeout(left)
            try:
                sock, _ = listener.accept()
            except socket.timeout:
                continue
            sock.settimeout(max(deadline - time.monotonic(), 0.1))
            try:
                magic, source, target = _HANDSHAKE.unpack(recv_exact(sock, _HANDSHAKE.size))
            except (OSError, TypeError, struct.error):
                magic = None
            if magic != _MAGIC:                    # not one of ours: ignore it
                sock.close()
                continue
            if target != index or source not in expected:
                sock.close()
                raise ConnectionError(f"unexpected connection to {what} {index} claiming to be "
                                      f"{what} {source} for {what} {target}: are two jobs "
                                      f"using the same addresses?")
            expected.discard(source)
            connected[source] = sock
    except BaseException:
        for sock in connected.values():
            sock.close()
        raise
    for sock in connected.values():
        sock.settimeout(None)
        tune(sock)
    return connected


def _connect(address: str, deadline: float, who: str, timeout: float) -> socket.socket:
    host, port = split_address(address)
    pause = 0.01
    while True:
        try:
            return socket.create_connection(
                (host, port), timeout=max(min(deadline - time.monotonic(), 5.0), 0.1))
        except OSError as error:
            if time.monotonic() + pause > deadline:
                raise ConnectionError(f"could not reach {who} at {address} within {timeout:g} s: "
                                      f"{error.strerror or error}") from None
            time.sleep(pause)
            pause = min(2 * pause, 0.5)


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """Exactly ``n`` bytes, or None if the peer closed the connection before the first byte
    (an EOF in the middle raises ConnectionError)."""
    data = bytearray(n)
    view, got = memoryview(data), 0
    while got < n:
        count = sock.recv_into(view[got:])
        if count == 0:
            if got == 0:
                return None
            raise ConnectionError("connection closed in the middle of a frame")
        got += count
    return bytes(data)


def send_notice(sock: socket.socket, source: int, target: int, notice: Any) -> None:
    """Send a small pickled CONTROL frame."""
    body = pickle.dumps(notice)
    sock.sendall(FRAME.pack(CONTROL, source, target, len(body)) + body)


def recv_notice(sock: socket.socket) -> Any:
    """The next CONTROL frame's notice, or None when the peer closed the connection."""
    header = recv_exact(sock, FRAME.size)
    if header is None:
        return None
    channel, _, _, length = FRAME.unpack(header)
    body = recv_exact(sock, length) if length else b""
    if channel != CONTROL or body is None:
        raise ConnectionError(f"unexpected frame on a control connection (channel {channel})")
    return pickle.loads(body)
