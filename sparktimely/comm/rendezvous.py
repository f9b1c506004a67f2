"""How the processes of a multi-process job find each other (timely's ``-n``/``-p``/``-h``).

``ProcessCluster.join`` runs in each process's supervisor before it forks its workers:

1. Check that every host of the hostfile resolves (all processes report a mistyped name at
   once). Listen on this process's hostfile address, and bind one listener per local worker
   (any free port; each forked worker inherits its own).
2. Connect to the lower-indexed processes and accept the higher ones (``net.connect_peers``:
   retried until the timeout, errors name the unreachable ``host:port``).
3. Exchange a hello: worker count, how often the process checkpoints (if it does), host
   identity (``cluster.host_identity``), the worker listener ports and a proposed
   shared-memory name. Processes with the same identity form a
   group, whose shared memory takes the name its lowest process proposed (the supervisor of
   that process creates it, the others attach it: ``sparktimely._group``).
   ``force_sockets`` makes every process a group of its own.
4. The result is the plan (one ``WorkerAddress`` per global worker) every forked worker passes
   to ``cluster.build_allocator``.

The control connections stay open while the job runs; :meth:`ProcessCluster.check` turns what
arrives on them into errors: a process that reports a failure (``abort``) or whose connection
drops without ``done``. At the end every process says ``done`` and waits for the others'
(:meth:`ProcessCluster.finish`), so no process leaves while another may still fail.
"""
from __future__ import annotations

import errno
import hashlib
import socket
import sys
import time
from typing import Any, Sequence

from ..shm import job_prefix
from .cluster import WorkerAddress, host_identity, sockets_forced
from .net import (connect_peers, connect_timeout, job_token, listen, lost_peer, ready,
                  recv_notice, send_notice, split_address)


def program_digest() -> str:
    """A digest of the file this process's program was started from (its ``__main__``
    module's; empty for ``python -c`` or a notebook): two programs started on one hostfile
    do not meet as one job.

    >>> len(program_digest()) in (0, 32)
    True
    """
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path:
        return ""
    try:
        with open(path, "rb") as file:
            return hashlib.blake2b(file.read(), digest_size=16).hexdigest()
    except OSError:
        return ""


def process_token(hostfile: Sequence[str]) -> bytes:
    """The token of the job whose processes this ``hostfile`` lists, run by this program:
    a process of another job (another hostfile, another ``-n``, another program) is refused
    when it connects."""
    return job_token("processes", list(hostfile), program_digest())


class PeerFailed(RuntimeError):
    """Worker ``index`` failed, as process ``origin`` saw it: an error another process
    reported (``abort``), or a process whose connection dropped without ``done``. ``lost``:
    the failure is a lost worker or process (its message says who noticed)."""

    def __init__(self, index: int, message: str, traceback: str, origin: int,
                 lost: bool = False) -> None:
        super().__init__(message)
        self.index, self.message, self.traceback, self.origin = index, message, traceback, origin
        self.lost = lost


class ProcessCluster:
    """This process's place in a multi-process job: control connections, plan, and a
    listener for each of its workers (``listeners``, by global worker index)."""

    def __init__(self, process: int, hostfile: list[str], workers: int, timeout: float,
                 checkpoints: int | None = None) -> None:
        self.process = process
        self.hostfile = hostfile
        self.workers = workers
        self.checkpoints = checkpoints
        self.timeout = timeout
        self.plan: list[WorkerAddress] = []
        self.listeners: dict[int, socket.socket] = {}
        self.controls: dict[int, socket.socket] = {}
        self._open: dict[socket.socket, int] = {}

    @classmethod
    def join(cls, process: int, hostfile: Sequence[str], workers: int, *,
             force_sockets: bool | None = None, timeout: float | None = None,
             checkpoints: int | None = None) -> ProcessCluster:
        """Meet the other ``len(hostfile)`` processes (see the module docstring).

        ``force_sockets`` (default ``$SPARKTIMELY_FORCE_SOCKETS``) treats every process as a
        host of its own; ``timeout`` bounds each wait for the other processes, here and when
        the workers connect (default ``$SPARKTIMELY_CONNECT_TIMEOUT`` or 60 s);
        ``checkpoints``: the ``checkpoint_every`` of this process's checkpoints, None without
        (every process must give the same: worker 0 asks for the checkpoints at its pace,
        every worker waits for them at its own, and one that checkpoints waits for every
        other's word to resume).
        """
        self = cls(process, list(hostfile), workers, connect_timeout(timeout), checkpoints)
        try:
            self._meet(sockets_forced(force_sockets), self.timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _meet(self, force_sockets: bool, timeout: float) -> None:
        self._check_hosts()
        address = self.hostfile[self.process]
        host, port = split_address(address)
        try:
            listener = listen(host, port)
        except OSError as error:
            hint = (f" (is another process of this job also running as -p {self.process}, or "
                    f"another program on that port?)" if error.errno == errno.EADDRINUSE else "")
            raise ConnectionError(f"process {self.process} cannot listen on its hostfile "
                                  f"address {address}: {error.strerror or error}{hint}") from None
        with listener:
            bound = listener.getsockname()[0]
            first = self.process * self.workers
            self.listeners = {first + local: listen(bound, 0) for local in range(self.workers)}
            others = {q: a for q, a in enumerate(self.hostfile) if q != self.process}
            self.controls = connect_peers(self.process, others, listener, timeout,
                                          token=process_token(self.hostfile))
        self._open = {sock: q for q, sock in self.controls.items()}
        for sock in self.controls.values():      # unacknowledged notices time out too
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 3000)
        identity = host_identity()
        hello = {"workers": self.workers, "checkpoints": self.checkpoints,
                 "identity": identity, "mesh": job_prefix(),
                 "ports": [s.getsockname()[1] for s in self.listeners.values()]}
        for q, sock in self.controls.items():
            try:
                send_notice(sock, self.process, q, ("hello", hello))
            except OSError as error:     # it died since the meeting: name it, not the errno
                raise ConnectionError(self._lost(q, "during start-up",
                                                 error.strerror or str(error))) from None
        hellos: dict[int, dict[str, Any]] = {self.process: hello}
        deadline = time.monotonic() + timeout
        for q in sorted(self.controls):
            _, hello_q = self._expect(q, deadline)      # hellos come first
            if hello_q["workers"] != self.workers:
                theirs = hello_q["workers"]
                raise ConnectionError(f"process {q} runs {theirs} worker"
                                      f"{'s' if theirs != 1 else ''} but process "
                                      f"{self.process} runs {self.workers}: every process "
                                      f"must use the same -w")
            self._check_checkpoints(q, hello_q["checkpoints"])
            hellos[q] = hello_q
        groups = {q: f"process {q}" if force_sockets else h["identity"]
                  for q, h in hellos.items()}
        meshes = {q: hellos[min(p for p in hellos if groups[p] == groups[q])]["mesh"]
                  for q in hellos}
        self.plan = [WorkerAddress(split_address(self.hostfile[q])[0], hellos[q]["ports"][local],
                                   groups[q], f"process {q}", meshes[q])
                     for q in range(len(self.hostfile)) for local in range(self.workers)]

    def _check_checkpoints(self, q: int, every: int | None) -> None:
        """Process ``q``, whose hello says it checkpoints every ``every`` epochs (None: it
        does not), must checkpoint as this process does."""
        if every == self.checkpoints:
            return
        if every is not None and self.checkpoints is not None:
            raise ConnectionError(f"process {q} checkpoints every {every} epochs but process "
                                  f"{self.process} every {self.checkpoints}: every process "
                                  f"must be given the same checkpoint_every "
                                  f"(--checkpoint-every)")
        which = (f"process {q} runs with a checkpoint directory but process {self.process} "
                 f"runs without" if every is not None else
                 f"process {q} runs without a checkpoint directory but process "
                 f"{self.process} runs with one")
        raise ConnectionError(f"{which}: every process must be given the same checkpoint_dir "
                              f"(--checkpoint-dir), or none")

    def _check_hosts(self) -> None:
        """Every host the hostfile names must resolve. Every process checks every address
        before it listens, so a mistyped name stops them all at once, each naming it (rather
        than the one process that listens there at once and the others after the timeout)."""
        for q, address in enumerate(self.hostfile):
            host, port = split_address(address)
            try:
                socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except socket.gaierror as error:
                raise ConnectionError(f"the hostfile address of process {q}, {address}, names "
                                      f"a host that does not resolve ({error.strerror or error})"
                                      ) from None

    def _expect(self, q: int, deadline: float) -> tuple:
        sock = self.controls[q]
        sock.settimeout(max(deadline - time.monotonic(), 0.1))
        try:
            notice = recv_notice(sock)
        except socket.timeout:
            raise ConnectionError(f"process {q} at {self.hostfile[q]} did not answer during "
                                  f"start-up") from None
        except OSError as error:
            raise ConnectionError(self._lost(q, "during start-up", error.strerror or str(error))
                                  ) from None
        finally:
            sock.settimeout(None)
        if notice is None:
            raise ConnectionError(self._lost(q, "during start-up", "it closed the connection"))
        if notice[0] == "abort":
            raise PeerFailed(*notice[1:])
        return notice

    @property
    def watched(self) -> list[socket.socket]:
        """The control connections of processes that have not said ``done``."""
        return list(self._open)

    def check(self, sock: socket.socket) -> None:
        """Handle what arrived on a readable control connection: ``done`` stops watching it;
        an ``abort`` or a connection dropped without ``done`` raises PeerFailed."""
        q = self._open[sock]
        try:
            sock.settimeout(5.0)
            notice = recv_notice(sock)
        except OSError as error:
            notice, reason = None, error.strerror or str(error)
        else:
            reason = "the process died or the network dropped"
        if notice is None:
            raise PeerFailed(q * self.workers, self._lost(q, "", reason), "", self.process,
                             lost=True)
        if notice[0] == "abort":
            raise PeerFailed(*notice[1:])
        del self._open[sock]

    def _lost(self, q: int, when: str, reason: str) -> str:
        """Process ``q`` lost, as this process tells it (``when``: "during start-up", or
        nothing once the workers run)."""
        first, last = q * self.workers, (q + 1) * self.workers - 1
        workers = f"worker {first}" if first == last else f"workers {first}..{last}"
        noticed_by = f"process {self.process}" + (f" {when}" if when else "")
        return lost_peer(f"process {q} at {self.hostfile[q]} ({workers})", noticed_by, reason)

    def poll(self) -> None:
        """Handle control notices that have arrived, without waiting (raises PeerFailed)."""
        self.wait(0.0)

    def wait(self, timeout: float | None) -> None:
        """Handle control notices for up to ``timeout`` seconds (None: until every other process
        has said ``done``); those that have arrived are handled even when no time is left."""
        end = None if timeout is None else time.monotonic() + timeout
        while self._open:
            left = None if end is None else max(end - time.monotonic(), 0.0)
            for sock in ready(self.watched, timeout=left)[0]:
                self.check(sock)
            if left == 0.0:
                return

    def finish(self) -> None:
        """Tell every process this one is done, and wait until all of them are."""
        for q, sock in self.controls.items():
            try:
                send_notice(sock, self.process, q, ("done",))
            except OSError:
                pass                # a lost process: ``wait`` reports it
        self.wait(None)

    def owner(self, index: int) -> int:
        """The process that runs worker ``index``."""
        return index // self.workers

    def abort(self, index: int, message: str, traceback: str, origin: int | None = None,
              lost: bool = False) -> None:
        """Tell every process (best effort) that worker ``index`` failed, as seen by process
        ``origin`` (default: this one); ``lost``: as for :class:`PeerFailed`."""
        notice = ("abort", index, message, traceback,
                  self.process if origin is None else origin, lost)
        for q, sock in self.controls.items():
            try:
                sock.settimeout(1.0)
                send_notice(sock, self.process, q, notice)
            except OSError:
                pass

    def explain(self, failure: PeerFailed) -> str:
        """The failure's message, naming the process that saw it if that is not this one
        (and the message does not: a loss names who noticed it)."""
        if failure.origin == self.process or failure.lost:
            return failure.message
        return f"{failure.message} (reported by process {failure.origin} at " \
               f"{self.hostfile[failure.origin]})"

    def close(self) -> None:
        """Close every socket."""
        for sock in [*self.controls.values(), *self.listeners.values()]:
            sock.close()

    def sockets(self) -> list[socket.socket]:
        """The control connections (a forked worker must close them)."""
        return list(self.controls.values())
