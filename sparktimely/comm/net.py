"""TCP plumbing shared by the process rendezvous and the worker links.

- Addresses are ``host:port`` strings (IPv6 hosts in brackets), as in timely's hostfile.
- :func:`connect_peers` is timely's scheme: a participant connects to every peer with a lower
  index (retrying with backoff until a deadline, so peers may start in any order) and accepts
  every peer with a higher index on its own listener. Every connection opens with a
  handshake both ways (magic, protocol version, the job's token, indexes) before any frame:
  a service that is not a peer of this job, or a peer of another job or version, is named
  with what it sent; stray connections to a listener are ignored.
- A frame is a 24-byte header ``(channel, source, target, length)`` followed by ``length``
  bytes of body; :data:`MESSAGE` carries an encoded message tuple, :data:`GOODBYE` says the
  sender will send nothing more, :data:`CONTROL` is a supervisor's pickled notice. Lengths
  are bounded (:data:`MAX_FRAME`, :data:`MAX_NOTICE`).

Nothing here authenticates peers: bodies are unpickled, so run jobs on trusted networks.
"""
from __future__ import annotations

import errno
import hashlib
import math
import os
import pickle
import select
import socket
import struct
import time
from typing import Any, Mapping, Sequence

FRAME = struct.Struct("<IIIQ")
"""Frame header: channel, source index, target index, body length."""
MESSAGE, GOODBYE, CONTROL = 0, 1, 2
PROTOCOL_VERSION = 4
"""Version of the handshake, frames and control notices (3: an ``abort`` says whether it is
a loss; 4: the start-up hello says how often the process checkpoints); peers of another
version are refused."""
HANDSHAKE_TIMEOUT = 3.0
"""Seconds an accepted connection may take to show a sparktimely handshake."""
MAX_FRAME = 1 << 36
"""Largest frame body accepted from a peer (64 GiB): a longer length means a corrupt stream."""
MAX_NOTICE = 64 << 20
"""Largest control notice (a supervisor's message, with a traceback)."""
DEFAULT_TIMEOUT = 60.0
TIMEOUT_ENV = "SPARKTIMELY_CONNECT_TIMEOUT"


def lost_peer(peer: str, noticed_by: str, reason: str) -> str:
    """How a lost worker or process is told, wherever it is noticed: what was lost and where,
    who noticed, and how.

    >>> lost_peer("process 1 at 10.0.0.2:2101 (workers 2..3)", "process 0", "it died")
    'lost process 1 at 10.0.0.2:2101 (workers 2..3), noticed by process 0: it died'
    """
    return f"lost {peer}, noticed by {noticed_by}: {reason}"


class PeerLost(ConnectionError):
    """Worker ``index`` is lost: its connection dropped without a goodbye, or its shared
    memory went away. ``peer`` names it (and where it is), ``reason`` says how.

    >>> error = PeerLost(2, "worker 2 at 10.0.0.2:40000 (process 1)", "Connection reset by peer")
    >>> print(error)
    lost worker 2 at 10.0.0.2:40000 (process 1): Connection reset by peer
    >>> print(error.noticed_by("worker 0"))
    lost worker 2 at 10.0.0.2:40000 (process 1), noticed by worker 0: Connection reset by peer
    """

    def __init__(self, index: int, peer: str, reason: str) -> None:
        super().__init__(f"lost {peer}: {reason}")
        self.index, self.peer, self.reason = index, peer, reason

    def noticed_by(self, who: str) -> str:
        """The loss as :func:`lost_peer` tells it, noticed by ``who``."""
        return lost_peer(self.peer, who, self.reason)

    def __reduce__(self):
        return (PeerLost, (self.index, self.peer, self.reason))


_READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR | select.POLLNVAL
_WRITABLE = select.POLLOUT | select.POLLHUP | select.POLLERR | select.POLLNVAL


def ready(readers: Sequence[Any], writers: Sequence[Any] = (),
          timeout: float | None = None) -> tuple[list, list]:
    """The ``readers`` ready to read (or at their end) and the ``writers`` ready to write (or
    failed), within ``timeout`` seconds (None: until one is): ``select.select`` without its
    limit on descriptor numbers (1024, which a process holding many files or connections
    passes). Sockets or file descriptors, given back as given.

    >>> import socket
    >>> a, b = socket.socketpair()
    >>> ready([a], [b], 0) == ([], [b])
    True
    >>> _ = b.send(b"x")
    >>> ready([a], [], 1.0) == ([a], [])
    True
    """
    poller = select.poll()
    masks: dict[int, int] = {}
    for objects, mask in ((readers, select.POLLIN), (writers, select.POLLOUT)):
        for item in objects:
            fd = _descriptor(item)
            masks[fd] = masks.get(fd, 0) | mask
    for fd, mask in masks.items():
        poller.register(fd, mask)
    events = dict(poller.poll(None if timeout is None else math.ceil(max(timeout, 0) * 1e3)))
    return ([item for item in readers if events.get(_descriptor(item), 0) & _READABLE],
            [item for item in writers if events.get(_descriptor(item), 0) & _WRITABLE])


def _descriptor(item: Any) -> int:
    return item if isinstance(item, int) else item.fileno()


LONGEST_WAIT = 1e6
"""The longest wait in seconds an option may ask for (11.6 days): the system calls that wait
take milliseconds in a C int (24.8 days), and an infinite one would be a hang."""


def seconds_problem(value: object) -> str | None:
    """What a wait of ``value`` seconds must be instead, or None if it is a number above 0
    and at most :data:`LONGEST_WAIT`.

    >>> seconds_problem(0.5), seconds_problem(float("inf"))
    (None, 'at most 1000000 seconds (11.6 days)')
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return "a positive number of seconds"
    if not value <= LONGEST_WAIT:
        return f"at most {LONGEST_WAIT:.0f} seconds ({LONGEST_WAIT / 86400:.1f} days)"
    return None


def require_seconds(value: object, name: str, given: object = None) -> float:
    """``value`` as a float unless :func:`seconds_problem` finds one: then a ValueError
    naming ``name`` and what was ``given`` (default: ``value``).

    >>> require_seconds(float("inf"), "stall_limit")
    Traceback (most recent call last):
    ...
    ValueError: stall_limit must be at most 1000000 seconds (11.6 days), got inf
    """
    problem = seconds_problem(value)
    if problem is None and isinstance(value, (int, float)):
        return float(value)
    raise ValueError(f"{name} must be {problem}, got {value if given is None else given!r}")


def connect_timeout(timeout: float | None = None) -> float:
    """``timeout``, else ``$SPARKTIMELY_CONNECT_TIMEOUT``, else 60 seconds.

    >>> connect_timeout(2.5)
    2.5
    >>> connect_timeout(-5)
    Traceback (most recent call last):
    ValueError: timeout must be a positive number of seconds, got -5
    >>> os.environ[TIMEOUT_ENV] = "abc"
    >>> try:
    ...     connect_timeout()
    ... except ValueError as error:
    ...     print(error)
    $SPARKTIMELY_CONNECT_TIMEOUT must be a positive number of seconds, got 'abc'
    >>> del os.environ[TIMEOUT_ENV]
    """
    if timeout is not None:
        return require_seconds(timeout, "timeout")
    text = os.environ.get(TIMEOUT_ENV)
    if not text:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    return require_seconds(seconds, f"${TIMEOUT_ENV}", text)


def split_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of a ``host:port`` string.

    >>> split_address("node-1:2101"), split_address("[::1]:2102")
    (('node-1', 2101), ('::1', 2102))
    """
    host, _, port = address.rpartition(":")
    return host.removeprefix("[").removesuffix("]"), int(port)


def join_address(host: str, port: int) -> str:
    """The ``host:port`` string of ``host`` and ``port`` (the inverse of :func:`split_address`).

    >>> join_address("node-1", 2101), join_address("::1", 2102)
    ('node-1:2101', '[::1]:2102')
    """
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listen(host: str, port: int = 0, backlog: int = 128) -> socket.socket:
    """A listening TCP socket bound to ``host:port`` (port 0: any free port).

    >>> with listen("127.0.0.1") as sock:
    ...     sock.getsockname()[1] > 0
    True
    """
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


def job_token(*parts: Any) -> bytes:
    """A 16-byte token that every participant of one job derives from what they all know (the
    hostfile, the plan), so that a participant of another job is told apart.

    >>> job_token(["a:1", "b:2"]) == job_token(["a:1", "b:2"]) != job_token(["a:1", "b:3"])
    True
    """
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()


def connect_peers(index: int, addresses: Mapping[int, str], listener: socket.socket,
                  timeout: float, what: str = "process",
                  token: bytes = bytes(16)) -> dict[int, socket.socket]:
    """Connect to each peer in ``addresses`` (index -> ``host:port``) below ``index`` and accept
    each above it on ``listener``; returns the connected sockets by peer index.

    Connecting and accepting go on together, and every connection opens with a handshake
    both ways (magic, protocol version, the job's ``token``, indexes; see :class:`_Handshake`)
    before any frame. The addresses of the peers still to be accepted are checked too (a
    probe handshake), so a service other than a peer of this job at any address fails the
    job within ``HANDSHAKE_TIMEOUT`` seconds, with a ConnectionError naming the address and
    what was received. A peer that is not up yet is retried until ``timeout`` seconds, then
    named as unreachable. ``what`` names the participants in errors ("process", "worker").
    """
    return _Meeting(index, addresses, listener, timeout, what, token).run()


class _Handshake:
    """The first bytes on every connection, sent by both ends at once:
    ``(magic, protocol version, kind, job token, source index, target index)``.

    The connecting end sends ``HELLO`` (or ``PROBE``: only checking who listens there); the
    accepting end sends ``GREETING`` as soon as it accepts, then ``WELCOME`` or ``REFUSED``
    once it has read the connecting end's handshake.
    """

    FORMAT = struct.Struct("<8sHH16sII")
    MAGIC = b"sprktmly"
    HELLO, PROBE, GREETING, WELCOME, REFUSED = 1, 2, 3, 4, 5

    @classmethod
    def pack(cls, kind: int, token: bytes, source: int, target: int) -> bytes:
        return cls.FORMAT.pack(cls.MAGIC, PROTOCOL_VERSION, kind, token, source, target)


class _Party:
    """One connection being set up: its socket, what it is for, and the bytes read so far."""

    def __init__(self, sock: socket.socket, peer: int | None, address: str, deadline: float,
                 probe: bool = False) -> None:
        self.sock, self.peer, self.address, self.deadline = sock, peer, address, deadline
        self.probe = probe
        self.connecting = False
        self.received = b""
        self.greeted = False

    def read(self) -> bytes | None:
        """Bytes of the next handshake once complete, or the (shorter) bytes received before
        the other end closed or once they cannot be a handshake; None while incomplete."""
        try:
            data = self.sock.recv(_Handshake.FORMAT.size - len(self.received))
        except BlockingIOError:
            return None
        except OSError as error:
            raise ConnectionError(error.strerror or str(error)) from None
        if not data:
            done, self.received = self.received, b""
            return done
        self.received += data
        magic = _Handshake.MAGIC
        if (len(self.received) < _Handshake.FORMAT.size
                and self.received[:len(magic)] == magic[:len(self.received)]):
            return None                        # a handshake so far: wait for the rest
        done, self.received = self.received, b""
        return done


class _Meeting:
    """The state of :func:`connect_peers`: connections being made, accepted and checked."""

    def __init__(self, index: int, addresses: Mapping[int, str], listener: socket.socket,
                 timeout: float, what: str, token: bytes) -> None:
        self.index, self.addresses, self.listener = index, addresses, listener
        self.timeout, self.what, self.token = timeout, what, token
        self.deadline = time.monotonic() + timeout
        self.connected: dict[int, socket.socket] = {}
        self.outgoing = {p: 0.0 for p in addresses if p < index}      # peer -> next attempt
        self.probing = {p: 0.0 for p in addresses if p > index}       # not yet vouched for
        self.expected = {p for p in addresses if p > index}
        self.parties: dict[socket.socket, _Party] = {}
        self.pause: dict[int, float] = {}
        self.last_error: dict[int, str] = {}
        self.strays: list[str] = []          # what connected here that was not a peer
        self.talking: set[int] = set()       # connected peers that have sent past the meeting

    def run(self) -> dict[int, socket.socket]:
        self.listener.setblocking(False)
        try:
            while self.outgoing or self.expected:
                now = time.monotonic()
                if now >= self.deadline:
                    raise ConnectionError(self._timed_out())
                self._start_connections(now)
                self._expire(now)
                parties = list(self.parties.values())
                wake = min([self.deadline, *self.outgoing.values(), *self.probing.values(),
                            *(p.deadline for p in parties)])
                watched = {sock: peer for peer, sock in self.connected.items()
                           if peer not in self.talking}
                readable, writable = ready(
                    [self.listener, *(p.sock for p in parties if not p.connecting), *watched],
                    [p.sock for p in parties if p.connecting], max(wake - now, 0.0))
                for sock in writable:
                    self._connected(self.parties[sock])
                for sock in readable:
                    if sock is self.listener:
                        self._accept()
                    elif sock in self.parties:
                        self._receive(self.parties[sock])
                    elif sock in watched:
                        self._check_alive(watched[sock], sock)
        except BaseException:
            for sock in self.connected.values():
                sock.close()
            raise
        finally:
            for party in list(self.parties.values()):     # probes and strays still open
                self._drop(party)
            self.listener.setblocking(True)
        for sock in self.connected.values():
            sock.setblocking(True)
            sock.settimeout(None)
            tune(sock)
        return self.connected

    def _check_alive(self, peer: int, sock: socket.socket) -> None:
        """A connection made earlier in the meeting is readable: the peer closed it (it
        died, e.g. killed, while this process waits for others: fail now, naming it, rather
        than at the timeout naming a process that has not started), or it is through its
        meeting and has sent what comes next, which stays unread for the caller."""
        try:
            data = sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return
        except OSError as error:
            data, reason = b"", f" ({(error.strerror or str(error)).lower()})"
        else:
            reason = ""
        if data:
            self.talking.add(peer)
            return
        meanwhile = f"; meanwhile {'; '.join(self.strays[:5])}" if self.strays else ""
        raise ConnectionError(f"{self.what} {peer} at {self.addresses[peer]} closed its "
                              f"connection to {self.what} {self.index} during start-up{reason}, "
                              f"while {self._awaited()} had not connected yet{meanwhile}")

    def _awaited(self) -> str:
        """The peers this process still waits for, for an error message."""
        peers = sorted(set(self.outgoing) | self.expected)
        return ", ".join(f"{self.what} {p} ({self.addresses[p]})" for p in peers) or "nobody"

    # -- connecting to lower peers, probing higher ones --------------------------------------

    def _start_connections(self, now: float) -> None:
        for table, probe in ((self.outgoing, False), (self.probing, True)):
            for peer, when in list(table.items()):
                if when > now or any(p.peer == peer and p.probe == probe
                                     for p in self.parties.values()):
                    continue
                table[peer] = float("inf")             # until this attempt is decided
                host, port = split_address(self.addresses[peer])
                try:
                    family, kind, proto, _, sockaddr = socket.getaddrinfo(
                        host, port, type=socket.SOCK_STREAM)[0]
                except OSError as error:
                    self._retry(peer, probe, error.strerror or str(error))
                    continue
                sock = socket.socket(family, kind, proto)
                sock.setblocking(False)
                party = _Party(sock, peer, self.addresses[peer],
                               min(now + HANDSHAKE_TIMEOUT, self.deadline), probe)
                party.connecting = True
                self.parties[sock] = party
                code = sock.connect_ex(sockaddr)
                if code not in (0, errno.EINPROGRESS):
                    self._drop(party)
                    self._retry(peer, probe, os.strerror(code))

    def _connected(self, party: _Party) -> None:
        assert party.peer is not None                  # only connections we made connect
        party.connecting = False
        error = party.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error:
            self._drop(party)
            self._retry(party.peer, party.probe, os.strerror(error))
            return
        kind = _Handshake.PROBE if party.probe else _Handshake.HELLO
        try:
            party.sock.send(_Handshake.pack(kind, self.token, self.index, party.peer))
        except OSError as lost:              # it went away as it accepted
            raise self._failure(party, f"the connection failed during the handshake: "
                                       f"{lost.strerror or lost}") from None
        party.deadline = min(time.monotonic() + HANDSHAKE_TIMEOUT, self.deadline)

    def _retry(self, peer: int, probe: bool, reason: str) -> None:
        """Nobody listens at ``peer``'s address yet: try again a little later."""
        pause = min(2 * self.pause.get(peer, 0.005), 0.5)
        self.pause[peer] = pause
        self.last_error[peer] = reason
        (self.probing if probe else self.outgoing)[peer] = time.monotonic() + pause

    # -- accepting -------------------------------------------------------------------------

    def _accept(self) -> None:
        try:
            sock, remote = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        sock.setblocking(False)
        try:
            sock.send(_Handshake.pack(_Handshake.GREETING, self.token, self.index, 0))
        except OSError:
            sock.close()
            return
        address = join_address(*remote[:2])
        self.parties[sock] = _Party(sock, None, address,
                                    min(time.monotonic() + HANDSHAKE_TIMEOUT, self.deadline))

    # -- reading handshakes ----------------------------------------------------------------

    def _receive(self, party: _Party) -> None:
        try:
            data = party.read()
        except ConnectionError as error:
            if party.peer is not None:
                raise self._failure(party, f"the connection failed during the handshake: "
                                           f"{error}") from None
            self._drop(party)
            return
        if data is None:
            return
        if party.peer is None:
            self._hello(party, data)
        elif not party.greeted:
            self._greeting(party, data)
        else:
            self._verdict(party, data)

    def _greeting(self, party: _Party, data: bytes) -> None:
        """The accepting end introduced itself: is it the peer we meant to reach?"""
        source = self._check(party, data, _Handshake.GREETING)
        if source != party.peer:
            raise self._failure(party, f"it is {self.what} {source} of this job, not "
                                       f"{self.what} {party.peer}: was one index given to two "
                                       f"processes, or do the hostfiles differ?")
        if party.probe:                      # vouched for: it will connect to us itself
            self._drop(party)
            self.probing.pop(party.peer, None)
            return
        party.greeted = True
        party.deadline = min(time.monotonic() + HANDSHAKE_TIMEOUT, self.deadline)

    def _verdict(self, party: _Party, data: bytes) -> None:
        assert party.peer is not None
        self._check(party, data, _Handshake.WELCOME)
        del self.parties[party.sock]
        self.outgoing.pop(party.peer, None)
        self.connected[party.peer] = party.sock

    def _hello(self, party: _Party, data: bytes) -> None:
        """A connecting end introduced itself: welcome it if it is a peer we expect."""
        if len(data) < _Handshake.FORMAT.size or not data.startswith(_Handshake.MAGIC):
            self.strays.append(f"a connection from {party.address} sent {data!r}")
            self._drop(party)
            return
        magic, version, kind, token, source, target = _Handshake.FORMAT.unpack(data)
        problem = None
        if version != PROTOCOL_VERSION:
            problem = (f"a connection from {party.address} speaks sparktimely protocol "
                       f"version {version}")
        elif token != self.token:
            problem = (f"a connection from {party.address} ({self.what} {source}) belongs "
                       f"to another job (another hostfile or plan, another -n, or another "
                       f"program)")
        elif target != self.index:
            problem = (f"a connection from {party.address} wanted {self.what} {target}, not "
                       f"{self.what} {self.index}")
        elif kind == _Handshake.PROBE:
            self._drop(party)                  # it has seen our greeting: all it wanted
            return
        elif kind != _Handshake.HELLO or source not in self.expected:
            problem = (f"a connection from {party.address} claims to be {self.what} "
                       f"{source}, which {self.what} {self.index} does not expect"
                       + (" (it connected already)" if source in self.connected else ""))
        if problem is not None:
            self.strays.append(problem)
            try:
                party.sock.send(_Handshake.pack(_Handshake.REFUSED, self.token, self.index,
                                                source))
            except OSError:
                pass
            self._drop(party)
            return
        try:
            party.sock.send(_Handshake.pack(_Handshake.WELCOME, self.token, self.index, source))
        except OSError:
            self._drop(party)
            return
        del self.parties[party.sock]
        self.expected.discard(source)
        self.probing.pop(source, None)
        self.connected[source] = party.sock

    def _check(self, party: _Party, data: bytes, wanted: int) -> int:
        """Validate what the accepting end sent (returns its index); raise ConnectionError
        naming the problem."""
        if not data:
            raise self._failure(party, "it closed the connection without a sparktimely "
                                       "handshake: is another service listening there?")
        if len(data) < _Handshake.FORMAT.size or not data.startswith(_Handshake.MAGIC):
            raise self._failure(party, f"it is not a sparktimely process: it sent {data!r}")
        magic, version, kind, token, source, target = _Handshake.FORMAT.unpack(data)
        if version != PROTOCOL_VERSION:
            raise self._failure(party, f"it speaks sparktimely protocol version {version} and "
                                       f"this process version {PROTOCOL_VERSION}: run one "
                                       f"sparktimely version everywhere")
        if token != self.token:
            raise self._failure(party, "it belongs to another sparktimely job (another "
                                       "hostfile or plan, another -n, or another program): "
                                       "were the processes given different -n or started "
                                       "from different files, or do two jobs use the same "
                                       "addresses?")
        if kind == _Handshake.REFUSED:
            raise self._failure(party, f"it refused {self.what} {self.index}: it does not "
                                       f"expect it (was one index given to two processes?)")
        if kind != wanted:
            raise self._failure(party, f"it sent handshake kind {kind} where {wanted} was due")
        return source

    def _failure(self, party: _Party, problem: str) -> ConnectionError:
        who = f"{self.what} {party.peer}" if party.peer is not None else "a peer"
        return ConnectionError(f"{self.what} {self.index} could not connect to {who} at "
                               f"{party.address}: {problem}")

    def _expire(self, now: float) -> None:
        for party in list(self.parties.values()):
            if now < party.deadline:
                continue
            if party.peer is None:               # a silent stray: not our business
                self.strays.append(f"a connection from {party.address} sent no handshake")
                self._drop(party)
            elif party.connecting:
                self._drop(party)
                self._retry(party.peer, party.probe, "connecting timed out")
            else:
                raise self._failure(party, f"it accepted the connection but sent no "
                                           f"sparktimely handshake within "
                                           f"{HANDSHAKE_TIMEOUT:g} s: is another service "
                                           f"listening there?")

    def _drop(self, party: _Party) -> None:
        self.parties.pop(party.sock, None)
        party.sock.close()

    def _timed_out(self) -> str:
        problems = []
        for peer in sorted(self.outgoing):
            problems.append(f"could not reach {self.what} {peer} at {self.addresses[peer]} "
                            f"within {self.timeout:g} s: {self.last_error.get(peer, 'no answer')}")
        if self.expected:
            missing = ", ".join(f"{self.what} {p} ({self.addresses[p]})"
                                for p in sorted(self.expected))
            problems.append(f"{missing} did not connect to {self.what} {self.index} within "
                            f"{self.timeout:g} s")
        if self.strays:
            problems.append("meanwhile " + "; ".join(self.strays[:5]))
        return "; ".join(problems)


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
    if channel != CONTROL or length > MAX_NOTICE:
        raise ConnectionError(f"unexpected frame on a control connection: channel {channel}, "
                              f"{length} bytes (header {header!r})")
    body = recv_exact(sock, length) if length else b""
    if body is None:
        raise ConnectionError("the connection closed in the middle of a control frame")
    return pickle.loads(body)
