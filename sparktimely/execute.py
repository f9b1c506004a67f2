"""Running workers: ``example``, ``execute_directly``, ``execute`` and ``execute_from_args``;
and the entry point both ``execute`` and the Spark integration use once they know their peer
list: :func:`run_workers` (this process's workers, each in a forked process of its own) and
its in-process form :class:`WorkerSession`, with :class:`Seat` for a worker that must bind
its listener before anyone knows the plan.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from . import _supervisor
from .errors import WorkerError
from .session import Seat, WorkerSession
from ._supervisor import signals
from .comm import WorkerAddress
from .comm.rendezvous import ProcessCluster
from .worker import Worker
from .io.checkpoints import checkpointing, reraise_recovery_error
from .logging import observing
from .shm import job_prefix


@dataclass
class Config:
    """How many workers run where: timely's ``-w``, ``-n``, ``-p`` and ``-h``.

    >>> Config(workers=2).workers
    2

    Without a hostfile, process ``i`` is at ``localhost:{2101 + i}`` (as in timely).
    ``force_sockets`` (default ``$SPARKTIMELY_FORCE_SOCKETS``) makes processes on one host talk
    through sockets instead of shared memory; ``connect_timeout`` (default
    ``$SPARKTIMELY_CONNECT_TIMEOUT`` or 60 s) bounds how long processes wait for each other;
    ``stall_limit`` (``--stall-limit SECONDS``) stops a job whose worker makes no progress
    for that long. ``log_dir`` (``--log-dir DIR``), ``progress`` (``--progress``),
    ``checkpoint_dir`` (``--checkpoint-dir DIR``) and ``checkpoint_every``
    (``--checkpoint-every N``) are :func:`execute`'s.
    """

    workers: int = 1
    processes: int = 1
    process: int = 0
    hostfile: list[str] | None = None
    args: list[str] = field(default_factory=list)
    force_sockets: bool | None = field(default=None, repr=False)
    connect_timeout: float | None = field(default=None, repr=False)
    stall_limit: float | None = field(default=None, repr=False)
    log_dir: str | None = field(default=None, repr=False)
    progress: bool = field(default=False, repr=False)
    checkpoint_dir: Any = field(default=None, repr=False)
    checkpoint_every: int = field(default=1, repr=False)

    def __post_init__(self) -> None:
        for name in ("workers", "processes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.process, int) or not 0 <= self.process < self.processes:
            raise ValueError(f"process index {self.process!r} is not in 0..{self.processes - 1} "
                             f"(there are {self.processes} processes)")
        if self.stall_limit is not None and not (isinstance(self.stall_limit, (int, float))
                                                 and self.stall_limit > 0):
            raise ValueError(f"stall_limit must be a positive number of seconds, got "
                             f"{self.stall_limit!r}")
        if not isinstance(self.checkpoint_every, int) or self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be a positive integer, got "
                             f"{self.checkpoint_every!r}")
        if self.hostfile is not None and len(self.hostfile) < self.processes:
            raise ValueError(f"the hostfile lists {len(self.hostfile)} address(es) but "
                             f"{self.processes} processes need one each "
                             f"(process {len(self.hostfile)} has none)")


def parse_hostfile(hostfile: str | os.PathLike | Sequence[str]) -> list[str]:
    """The ``host:port`` entries of a hostfile (a path, or a list of strings).

    Blank lines and ``#`` comments are skipped; any other line that is not ``host:port``
    with a port in 1..65535 raises ValueError naming the line, and so does an address that an
    earlier line already gave (two processes cannot listen on one address).

    >>> parse_hostfile(["localhost:2101", "# spare", "10.0.0.2:2102"])
    ['localhost:2101', '10.0.0.2:2102']
    >>> parse_hostfile(["localhost:2101", "LOCALHOST:2101"])
    Traceback (most recent call last):
    ValueError: hostfile line 2: 'LOCALHOST:2101' is the address of line 1 ('localhost:2101') again: every process needs an address of its own
    """
    if isinstance(hostfile, (str, os.PathLike)):
        with open(hostfile) as lines:
            entries, origin = lines.read().splitlines(), f"hostfile {os.fspath(hostfile)}"
    else:
        entries, origin = list(hostfile), "hostfile"
    addresses = []
    seen: dict[tuple[str, int], tuple[int, str]] = {}
    for number, line in enumerate(entries, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{origin} line {number}: {line.strip()!r} is not host:port")
        key = (host.strip("[]").lower(), int(port))
        if key in seen:
            first, earlier = seen[key]
            raise ValueError(f"{origin} line {number}: {text!r} is the address of line {first} "
                             f"({earlier!r}) again: every process needs an address of its own")
        seen[key] = (number, text)
        addresses.append(text)
    return addresses


_FLAGS = {"-w": "workers", "--workers": "workers", "--threads": "workers",
          "-n": "processes", "--processes": "processes",
          "-p": "process", "--process": "process",
          "-h": "hostfile", "--hostfile": "hostfile", "--stall-limit": "stall_limit",
          "--log-dir": "log_dir", "--checkpoint-dir": "checkpoint_dir",
          "--checkpoint-every": "checkpoint_every"}
_SWITCHES = {"--progress": "progress"}          # flags without a value


def config_from_args(argv: Sequence[str]) -> Config:
    """Read timely's flags from ``argv``; everything else is left in ``config.args``. A ``--``
    ends timely's flags: what follows goes to ``config.args`` as it is.

    >>> config_from_args(["-w", "2", "--input", "x.txt"])
    Config(workers=2, processes=1, process=0, hostfile=None, args=['--input', 'x.txt'])
    >>> config_from_args(["-w2", "--", "-w", "9"]).args
    ['-w', '9']
    >>> config_from_args(["-w3", "--processes=1"]).workers
    3
    >>> config = config_from_args(["--log-dir", "logs", "--progress", "-w2"])
    >>> config.log_dir, config.progress, config.workers
    ('logs', True, 2)
    >>> config_from_args(["--checkpoint-dir", "ckpt", "--checkpoint-every=10"]).checkpoint_every
    10
    >>> config_from_args(["-n", "2"])
    Traceback (most recent call last):
    ValueError: -n 2 needs -p/--process: this process's index, 0..1
    """
    values: dict[str, Any] = {}
    given: dict[str, str] = {}           # the spelling of each flag, for errors
    rest: list[str] = []
    argv = list(argv)
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest += argv[i + 1:]
            break
        if arg.startswith("--"):
            flag, eq, inline = arg.partition("=")
        elif len(arg) > 2 and arg[:2] in _FLAGS:            # -w2, like getopts
            flag, eq, inline = arg[:2], "=", arg[2:]
        else:
            flag, eq, inline = arg, "", ""
        if flag in _SWITCHES:
            if eq:
                raise ValueError(f"{flag} takes no value, got {arg!r}")
            values[_SWITCHES[flag]] = True
            i += 1
            continue
        name = _FLAGS.get(flag)
        if name is None:
            rest.append(arg)
            i += 1
            continue
        if eq:
            value = inline
        elif i + 1 < len(argv):
            value = argv[i + 1]
            i += 1
        else:
            raise ValueError(f"{flag} needs a value")
        i += 1
        given[name] = flag
        if name == "hostfile":
            values[name] = parse_hostfile(value)
        elif name in ("log_dir", "checkpoint_dir"):
            values[name] = value
        elif name == "stall_limit":
            try:
                values[name] = float(value)
            except ValueError:
                raise ValueError(f"{flag} needs a number of seconds, got {value!r}") from None
        else:
            try:
                values[name] = int(value)
            except ValueError:
                raise ValueError(f"{flag} needs an integer, got {value!r}") from None
    processes = values.get("processes", 1)
    if processes > 1 and "process" not in values:
        raise ValueError(f"{given['processes']} {processes} needs -p/--process: this "
                         f"process's index, 0..{processes - 1}")
    return Config(**values, args=rest)


def execute(func: Callable[[Worker], Any], *, workers: int = 1, processes: int = 1,
            process: int = 0, hostfile: str | os.PathLike | Sequence[str] | None = None,
            args: Sequence[str] = (), stall_limit: float | None = None,
            log_dir: str | os.PathLike | None = None, progress: bool = False,
            checkpoint_dir: Any = None, checkpoint_every: int = 1) -> list[Any]:
    """Run ``func(worker)`` on this process's ``workers`` worker processes.

    Worker ``local`` of process ``process`` has global index ``process * workers + local``.
    Each worker keeps stepping after ``func`` returns until its dataflows complete. Returns
    the results of this process's workers in index order; if any worker fails, every
    worker is stopped and :class:`WorkerError` is raised.

    With ``processes > 1``, run this once per process (each with its own ``process``): the
    processes meet at their ``hostfile`` addresses (see ``sparktimely.comm.rendezvous``);
    processes on one host share memory, others talk through sockets. A failure anywhere, or
    a process or connection lost, stops every process with a WorkerError naming the cause.

    ``stall_limit`` (seconds; off by default): a worker that takes no step for that long
    while not waiting for other workers (user code in an endless loop, or blocked on I/O)
    stops the job with a WorkerError naming the worker and where it is (its stack is the
    error's ``traceback``).

    ``log_dir`` (off by default): each worker writes its ``"timely"`` log to
    ``log_dir/worker-{index}.timely`` as it runs (see ``sparktimely.logging.log_to_directory``);
    ``python -m sparktimely.profile log_dir`` then makes an HTML profile of the run. Every
    process of a hostfile job writes its own workers' files (give them one directory, or
    gather the files into one). ``progress`` (off by default): this process shows a live
    display of its workers (probe frontiers, records/s, CPU and memory per worker) on
    stderr, redrawn in place on a terminal, else a plain line every 10 s and at the end.
    Both cost a little while on (``benchmarks/bench_logging.py``).

    ``checkpoint_dir`` (a path or a pyarrow filesystem URI; off by default): every worker
    checkpoints its dataflows there each time a root epoch that is a multiple of
    ``checkpoint_every`` is complete, and a later run resumes from the last checkpoint, at
    any number of workers (see :mod:`sparktimely.io`). If any worker finds the checkpoint
    unusable, :class:`sparktimely.RecoveryError` is raised (not a WorkerError).

    SIGINT, SIGTERM and SIGHUP during the run (from the main thread) stop every worker, tell
    the other processes and remove every segment first; then the handlers that were there
    before are restored and get the signal: SIGINT raises KeyboardInterrupt, a default
    SIGTERM ends the process.

    >>> import sparktimely as st
    >>> st.execute(lambda worker: (worker.index, worker.peers), workers=2)
    [(0, 2), (1, 2)]
    """
    config = Config(workers, processes, process,
                    None if hostfile is None else parse_hostfile(hostfile), list(args),
                    stall_limit=stall_limit,
                    log_dir=None if log_dir is None else os.fspath(log_dir), progress=progress,
                    checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every)
    return _run(func, config)


def execute_from_args(argv: Sequence[str], func: Callable[[Worker], Any]) -> list[Any]:
    """:func:`execute` configured from timely's command-line flags
    (``-w/--workers/--threads``, ``-n/--processes``, ``-p/--process``, ``-h/--hostfile``,
    and ``--stall-limit SECONDS``, ``--log-dir DIR``, ``--progress``, ``--checkpoint-dir
    DIR``, ``--checkpoint-every N``); other arguments are left for the program in
    ``worker.args``.

    >>> import sparktimely as st
    >>> st.execute_from_args(["-w", "2", "extra"], lambda worker: worker.args)
    [['extra'], ['extra']]
    """
    return _run(func, config_from_args(argv))


def run_workers(func: Callable[[Worker], Any], plan: Sequence[WorkerAddress],
                listeners: Mapping[int, socket.socket | None], *, args: Sequence[str] = (),
                timeout: float | None = None, stall_limit: float | None = None,
                peer_lost_grace: float = 0.0) -> list[Any]:
    """Run this process's workers of a job whose peer list is ``plan``: ``func(worker)`` on
    each worker index in ``listeners`` (mapped to its listening socket, e.g. a
    :class:`Seat`'s, or None when the worker has no peers on other hosts), each in a forked
    process, stepping on until its dataflows complete. Returns their results in index order;
    raises :class:`WorkerError` (the worker index and its traceback, or the signal that
    killed its process) if any fails.

    ``plan`` has one ``WorkerAddress`` per worker of the job (the contract is in
    ``sparktimely.comm.cluster``): where its listener is, its host ``group`` (workers with
    equal groups share memory) and its group's shared-memory name ``mesh``. The process
    holding a group's lowest index creates that memory; the others wait for it. ``execute``
    calls this after its hostfile rendezvous; a Spark barrier task after its ``allGather``.
    ``args``, ``timeout`` (for connecting), ``stall_limit`` are as for :class:`WorkerSession`,
    and so is ``peer_lost_grace`` (seconds a worker that lost a remote peer waits for that
    peer's own failure to be recorded, when something else reports it first, as Spark does).

    >>> plan = [WorkerAddress("localhost", 0, "here", mesh=job_prefix())] * 2
    >>> run_workers(lambda worker: worker.index * 10, plan, {0: None, 1: None})
    [0, 10]
    """
    return _supervisor.run_workers(func, plan, listeners, args=args, timeout=timeout,
                                   stall_limit=stall_limit, peer_lost_grace=peer_lost_grace)


def _run(func: Callable[[Worker], Any], config: Config) -> list[Any]:
    if config.checkpoint_dir is None:
        return _run_workers(func, config)
    with reraise_recovery_error():
        return _run_workers(checkpointing(func, config.checkpoint_dir, config.checkpoint_every),
                            config)


def _run_workers(func: Callable[[Worker], Any], config: Config) -> list[Any]:
    with observing(func, log_dir=config.log_dir, progress=config.progress) as func, \
            signals.around_run():
        if config.processes == 1:
            plan = [WorkerAddress("localhost", 0, "local", mesh=job_prefix())] * config.workers
            return _supervisor.run_workers(func, plan, dict.fromkeys(range(config.workers)),
                                           args=config.args, stall_limit=config.stall_limit)
        hostfile = config.hostfile or [f"localhost:{2101 + i}" for i in range(config.processes)]
        cluster = ProcessCluster.join(config.process, hostfile[:config.processes],
                                      config.workers, force_sockets=config.force_sockets,
                                      timeout=config.connect_timeout)
        try:
            return _supervisor.run_workers(func, cluster.plan, cluster.listeners,
                                           args=config.args, timeout=cluster.timeout,
                                           stall_limit=config.stall_limit, cluster=cluster)
        finally:
            with signals.held():
                cluster.close()


def execute_directly(func: Callable[[Worker], Any]) -> Any:
    """Runs ``func(worker)`` on one worker in this process, steps the worker until its
    dataflows complete, and returns ``func``'s result.

    >>> import sparktimely as st
    >>> st.execute_directly(lambda worker: worker.peers)
    1
    """
    worker = Worker(0, 1)
    result = func(worker)
    worker.run()
    return result


def example(build: Callable[[Any], Any]) -> Any:
    """Builds one dataflow with ``build(scope)`` on one worker, runs it to completion and
    returns what ``build`` returned.

    >>> import sparktimely as st
    >>> st.example(lambda scope: scope.to_stream([1, 2, 3]).map(str).capture()).extract()
    [(0, ['1', '2', '3'])]
    """
    return execute_directly(lambda worker: worker.dataflow(build))


__all__ = ["Config", "Seat", "WorkerAddress", "WorkerError", "WorkerSession",
           "config_from_args", "example", "execute", "execute_directly", "execute_from_args",
           "parse_hostfile", "run_workers"]
