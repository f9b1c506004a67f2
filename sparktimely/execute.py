"""Running workers: ``example``, ``execute_directly``, ``execute`` and ``execute_from_args``;
and the entry point both ``execute`` and the Spark integration use once they know their peer
list: :func:`run_workers` (this process's workers, each in a forked process of its own) and
its in-process form :class:`WorkerSession`, with :class:`Seat` for a worker that must bind
its listener before anyone knows the plan.
"""
from __future__ import annotations

import argparse
import difflib
import ipaddress
import os
import re
import select
import socket
import sys
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, NoReturn, Sequence, TypeVar

from . import _supervisor, _warm
from .errors import WorkerError, require_function, require_positive_int
from .session import Seat, WorkerSession, check_stall_limit
from ._supervisor import signals
from .comm import WorkerAddress
from .comm.net import connect_timeout, seconds_problem
from .comm.rendezvous import ProcessCluster
from .worker import Worker
from .io.checkpoints import (RecoveryError, check_checkpoint_dir, check_checkpoint_every,
                             checkpointing, create_directory, reraise_recovery_error)
from .logging import observing
from .logging.files import directory_problem
from .shm import check_workers_per_host, job_prefix

if TYPE_CHECKING:
    from .io.checkpoints import Location
    from .ops.scope import Scope

R = TypeVar("R")


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
            require_positive_int(getattr(self, name), name)
        check_workers_per_host(self.workers)
        if isinstance(self.process, bool) or not isinstance(self.process, int) or \
                not 0 <= self.process < self.processes:
            count = ("there is 1 process" if self.processes == 1
                     else f"there are {self.processes} processes")
            raise ValueError(f"process index {self.process!r} is not in 0..{self.processes - 1} "
                             f"({count})")
        check_run_options(self.stall_limit, self.checkpoint_every, self.checkpoint_dir)
        if self.processes > 1 or self.workers > 1:
            connect_timeout()           # $SPARKTIMELY_CONNECT_TIMEOUT, told before any worker
        if self.hostfile is not None and len(self.hostfile) < self.processes:
            raise ValueError(_too_few(self.hostfile, self.processes))


def _too_few(hostfile: list[str], processes: int) -> str:
    """What is wrong with ``hostfile`` (of fewer addresses than ``processes``).

    >>> _too_few(_Addresses(["h:1"], "hosts.txt"), 3)
    'hostfile hosts.txt lists 1 address but 3 processes need one each (process 1 has none)'
    """
    path = getattr(hostfile, "path", None)
    origin = "the hostfile" if path is None else f"hostfile {path}"
    count = len(hostfile)
    return (f"{origin} lists {count} address{'es' if count != 1 else ''} but {processes} "
            f"process{'es need' if processes != 1 else ' needs'} one each (process {count} "
            f"has none)")


def check_run_options(stall_limit: float | None, checkpoint_every: int,
                      checkpoint_dir: Any = None) -> None:
    """Raise ValueError naming the option if ``stall_limit`` is not None or a positive
    number of seconds, or ``checkpoint_every`` not a positive integer (TypeError if
    ``checkpoint_dir`` is no directory's location): what ``execute`` and the Spark
    launchers check before any worker starts.

    >>> check_run_options(None, 0)
    Traceback (most recent call last):
    ValueError: checkpoint_every must be a positive integer, got 0
    """
    check_stall_limit(stall_limit)
    check_checkpoint_every(checkpoint_every)
    check_checkpoint_dir(checkpoint_dir)


class _Addresses(list):
    """A hostfile's addresses, knowing the file they were read from (None: given as a list)."""

    def __init__(self, addresses: list[str], path: str | None) -> None:
        super().__init__(addresses)
        self.path = path


_LOOPBACK = dict.fromkeys(["127.0.0.1", "::1", "ip6-localhost"], "localhost")
"""Names of this host's loopback address that are one address spelled otherwise."""


def parse_hostfile(hostfile: str | os.PathLike | Sequence[str]) -> list[str]:
    """The ``host:port`` entries of a hostfile (a path, or a list of strings).

    Blank lines and ``#`` comments are skipped; any other line that is not one ``host:port``
    with a port in 1..65535 raises ValueError naming the line, and so does an address that an
    earlier line already gave (two processes cannot listen on one address; ``0.0.0.0`` and
    ``[::]`` take their port on every address of the host). ``0.0.0.0`` and ``[::]`` serve
    only a hostfile of one host (a process elsewhere would connect to its own host): with a
    line that names another host they are a ValueError naming both lines.

    >>> parse_hostfile(["localhost:2101", "# spare", "10.0.0.2:2102"])
    ['localhost:2101', '10.0.0.2:2102']
    >>> parse_hostfile(["localhost:2101", "127.0.0.1:2101"])
    Traceback (most recent call last):
    ValueError: hostfile line 2: '127.0.0.1:2101' is the address of line 1 ('localhost:2101') again: every process needs an address of its own
    """
    path: str | None = None
    if isinstance(hostfile, (str, os.PathLike)):
        path = os.fspath(hostfile)
        try:
            with open(path, "rb") as file:
                data = file.read()
        except OSError as error:
            raise type(error)(error.errno, f"cannot read hostfile {path}: "
                                           f"{error.strerror or error}") from None
        origin = f"hostfile {path}"
        try:
            entries = data.decode().splitlines()
        except UnicodeDecodeError as error:
            number = data.count(b"\n", 0, error.start) + 1
            raise ValueError(f"{origin} line {number}: not UTF-8 text (byte "
                             f"{data[error.start]:#04x}); a hostfile lists host:port "
                             f"addresses, one per line") from None
    else:
        entries, origin = list(hostfile), "hostfile"
    addresses = []
    seen: dict[tuple[str, int], tuple[int, str]] = {}
    ports: dict[int, list[tuple[int, str, bool]]] = {}     # port -> (line, address, wildcard)
    lines: list[tuple[int, str, str, bool]] = []            # (line, address, host, wildcard)
    for number, line in enumerate(entries, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        if len(text.split()) > 1:
            parts = text.split()
            hint = (f"write host:port, e.g. {parts[0].rstrip(':')}:{parts[-1]}"
                    if len(parts) == 2 and parts[1].isdigit() else "one address per line")
            raise ValueError(f"{origin} line {number}: {line.strip()!r} is not host:port "
                             f"({hint})")
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{origin} line {number}: {line.strip()!r} is not host:port")
        problem = _host_problem(host)
        if problem:
            raise ValueError(f"{origin} line {number}: {line.strip()!r} is not host:port "
                             f"({problem})")
        key = (_LOOPBACK.get(host.strip("[]").lower(), host.strip("[]").lower()), int(port))
        if key in seen:
            first, earlier = seen[key]
            raise ValueError(f"{origin} line {number}: {text!r} is the address of line {first} "
                             f"({earlier!r}) again: every process needs an address of its own")
        wildcard = _is_wildcard(host)
        for first, earlier, either in ports.get(int(port), []):
            if wildcard or either:
                clash = (f"takes port {port} on every address of its host, line {first}'s "
                         f"({earlier!r}) too" if wildcard else
                         f"has port {port}, which line {first} ({earlier!r}) takes on every "
                         f"address of its host")
                raise ValueError(f"{origin} line {number}: {text!r} {clash}: every process "
                                 f"needs an address of its own")
        ports.setdefault(int(port), []).append((number, text, wildcard))
        seen[key] = (number, text)
        addresses.append(text)
        lines.append((number, text, host, wildcard))
    wildcards = [(number, text) for number, text, _, wildcard in lines if wildcard]
    if wildcards:
        elsewhere = next(((number, text) for number, text, host, wildcard in lines
                          if not wildcard and not _of_this_host(host.strip("[]"))), None)
        if elsewhere is not None:
            raise ValueError(f"{origin} line {wildcards[0][0]}: {wildcards[0][1]!r} is no "
                             f"address a process on another host can connect to, and line "
                             f"{elsewhere[0]} ({elsewhere[1]!r}) is on another host: write "
                             f"this host's name or address")
    return _Addresses(addresses, path)


def _of_this_host(host: str) -> bool:
    """Whether ``host`` names an address of this host (one a socket here can bind), or does
    not resolve (told where hosts are resolved); False for another host's.

    >>> _of_this_host("127.0.0.1"), _of_this_host("localhost"), _of_this_host("192.0.2.1")
    (True, True, False)
    """
    try:
        found = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return True
    for family, kind, _, _, address in found:
        with socket.socket(family, kind) as probe:
            try:
                probe.bind((address[0], 0))
            except OSError:
                continue
            return True
    return False


def _is_wildcard(host: str) -> bool:
    """Whether ``host`` is ``0.0.0.0`` or ``[::]``: every address of the host that binds it,
    and the very host that connects to it.

    >>> _is_wildcard("0.0.0.0"), _is_wildcard("[::]"), _is_wildcard("127.0.0.1")
    (True, True, False)
    """
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def _host_problem(host: str) -> str | None:
    """Why ``host`` (of a hostfile line) is no host name or address, or None.

    >>> _host_problem("[::1]"), _host_problem("10.0.0.2"), _host_problem("http://h")
    (None, None, 'no scheme: write host:port')
    >>> _host_problem("::1")
    'an IPv6 address goes in brackets, e.g. [::1]:2101'
    """
    if "://" in host:
        return "no scheme: write host:port"
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1].split("%")[0] if host.endswith("]") else "")
        except ValueError:
            return "the brackets must hold an IPv6 address, e.g. [::1]:2101"
        return None
    if ":" in host:
        return "an IPv6 address goes in brackets, e.g. [::1]:2101"
    if any(c in host for c in "/[]@"):
        return "a host is a name or an address"
    return None


_TIMELY = ("workers", "processes", "process", "hostfile", "stall_limit", "log_dir", "progress",
           "checkpoint_dir", "checkpoint_every")
"""The settings timely's flags set (their ``dest`` in a :func:`timely_parser`)."""


def timely_parser(prog: str | None = None, description: str | None = None, *,
                  checkpoints: bool = True, **kwargs: Any) -> SuggestingParser:
    """An ``argparse.ArgumentParser`` that knows timely's flags, for a program to add its own
    to: ``-w/--workers/--threads N``, ``-n/--processes N``, ``-p/--process I``,
    ``-h/--hostfile FILE`` (so ``--help`` alone asks for help), ``--stall-limit SECONDS``,
    ``--log-dir DIR``, ``--progress``, ``--checkpoint-dir DIR``, ``--checkpoint-every N``.
    Everything after the first ``--`` is not parsed: it is ``options.args``, which
    :func:`execute_from_args` hands to the workers as ``worker.args``. ``prog`` defaults to
    how the program was started (``python -m package.module`` for a module); other keywords
    go to ``ArgumentParser`` (abbreviated long flags are off unless ``allow_abbrev=True``, and
    ``description`` is shown as written, so a module's docstring serves). A program that
    cannot resume from a checkpoint (it computes one answer and checks it, say) passes
    ``checkpoints=False``: its ``--help`` leaves the checkpoint flags out, and given one it
    says that it runs without checkpoints.

    Parse with it as with any parser (``--help`` prints the flags and exits with status 0; a
    bad value, an unknown flag, or ``-n 2`` without ``-p`` prints ``prog: error: ...`` with
    the usage and exits with status 2), then hand the options to :func:`execute_from_args`:

    >>> import sparktimely as st
    >>> parser = st.timely_parser(prog="rounds", description="Count rounds.")
    >>> _ = parser.add_argument("--rounds", type=int, default=3)
    >>> options = parser.parse_args(["-w2", "--rounds", "5", "--", "--verbose"])
    >>> options.workers, options.rounds, options.args
    (2, 5, ['--verbose'])
    >>> st.execute_from_args(options, lambda worker: (worker.index, options.rounds, worker.args))
    [(0, 5, ['--verbose']), (1, 5, ['--verbose'])]
    """
    kwargs.setdefault("allow_abbrev", False)
    kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
    parser = _TimelyParser(prog=prog or _program(), description=description, add_help=False,
                           **kwargs)
    timely = parser.add_argument_group(
        "timely", "where the workers run (arguments after -- go to the program as worker.args)")
    timely.add_argument("-w", "--workers", "--threads", type=at_least(1), default=1,
                        metavar="N", help="worker processes in this process (default 1)")
    timely.add_argument("-n", "--processes", type=at_least(1), default=1, metavar="N",
                        help="processes in the job (default 1)")
    timely.add_argument("-p", "--process", type=_index, default=None, metavar="I",
                        help="this process's index, 0..N-1 (needed with -n N > 1)")
    timely.add_argument("-h", "--hostfile", type=_hostfile, default=None, metavar="FILE",
                        help="one host:port per process (default localhost:2101, 2102, ...)")
    timely.add_argument("--stall-limit", type=positive_seconds, default=None, metavar="SECONDS",
                        help="stop the job when a worker takes no step for this long")
    timely.add_argument("--log-dir", type=_log_directory, default=None, metavar="DIR",
                        help="each worker writes its log files there "
                             "(then: python -m sparktimely.profile DIR)")
    timely.add_argument("--progress", action="store_true",
                        help="show a live progress display on stderr")
    if checkpoints:
        timely.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                            help="checkpoint there, and resume from the last checkpoint")
        timely.add_argument("--checkpoint-every", type=at_least(1), default=None, metavar="N",
                            help="checkpoint every N epochs (default 1; with --checkpoint-dir)")
    else:
        for flag in ("--checkpoint-dir", "--checkpoint-every"):
            timely.add_argument(flag, action=_Refused, help=argparse.SUPPRESS)
        parser.set_defaults(checkpoint_dir=None, checkpoint_every=None)
    parser.add_argument("--help", action="help", help="show this help and exit")
    return parser


class _Refused(argparse.Action):
    """A timely flag the program does not take: given, it is a usage error saying so."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs="?", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        raise argparse.ArgumentError(self, "this program runs without checkpoints")


class SuggestingParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose error for an unrecognized flag that looks like one of its
    own mistyped (``--wrokers``, ``--work``, ``--log_dir``) suggests that flag, followed by
    ``where_arguments_go``.

    >>> parser = SuggestingParser(prog="job", exit_on_error=False)
    >>> _ = parser.add_argument("--workers")
    >>> parser.misspelt(["--wrokers", "3"])
    'unrecognized argument --wrokers: did you mean --workers?'
    """

    where_arguments_go = ""

    def meant(self, argument: str) -> str | None:
        """The flag of this parser that ``argument`` looks like a mistyping of, or None.

        >>> parser = SuggestingParser(prog="job")
        >>> _ = parser.add_argument("--workers")
        >>> parser.meant("--wrokers=3"), parser.meant("--work"), parser.meant("--input")
        ('--workers', '--workers', None)
        """
        name = argument.partition("=")[0]
        if not name.startswith("--") or len(name) < 4:
            return None
        flags = [flag for action in self._actions for flag in action.option_strings
                 if flag.startswith("--") and flag != "--help"]
        close = [flag for flag in flags if flag.startswith(name)] or \
            difflib.get_close_matches(name, flags, n=1, cutoff=0.85)
        return close[0] if close else None

    def left_for_program(self, unknown: Sequence[str]) -> str | None:
        """What to warn of when arguments the program gets (``unknown``: not timely's) hold
        one that looks like a timely flag mistyped, or None: the contract leaves every
        unrecognised argument to the program, and a program may have a ``--host`` of its
        own, but a ``--worker 4`` that runs one worker should not pass unseen."""
        for argument in unknown:
            meant = self.meant(argument)
            if meant is not None:
                return (f"{argument.partition('=')[0]} is not one of timely's flags (did you "
                        f"mean {meant}?): it is left for the program in worker.args")
        return None

    def misspelt(self, unknown: Sequence[str]) -> str | None:
        """The error for the first of ``unknown`` that looks like a flag of this parser
        mistyped, or None."""
        for argument in unknown:
            meant = self.meant(argument)
            if meant is not None:
                return (f"unrecognized argument {argument.partition('=')[0]}: did you mean "
                        f"{meant}?" + (f" ({self.where_arguments_go})"
                                       if self.where_arguments_go else ""))
        return None

    def error(self, message: str) -> NoReturn:
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            message = self.misspelt(message[len(prefix):].split()) or message
        super().error(message)


class _TimelyParser(SuggestingParser):
    """Leaves what follows the first ``--`` unparsed, in ``options.args``, and reports timely
    settings that do not fit together (``-n 2`` without ``-p``) as errors of the command line
    (as ValueError when made with ``exit_on_error=False``)."""

    where_arguments_go = ("arguments for the program go after --, or declare them on "
                          "sparktimely.timely_parser()")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        args = list(sys.argv[1:] if args is None else args)
        rest: list[str] = []
        if "--" in args:
            at = args.index("--")
            args, rest = args[:at], args[at + 1:]
        options, unknown = super().parse_known_args(args, namespace)
        options.args = rest
        try:
            options.checkpoint_every = checkpoint_every(options.checkpoint_every,
                                                        options.checkpoint_dir)
            options.process = _config(options, rest).process
        except ValueError as error:
            self.error(str(error))
        return options, unknown

    def error(self, message: str) -> NoReturn:
        if not self.exit_on_error:
            raise ValueError(message)
        super().error(message)


def _program() -> str:
    """How this program was started, for its usage line: ``python -m package.module`` when
    run with ``-m``, else the script's name."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        return f"python -m {spec.name.removesuffix('.__main__')}"
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` for a whole number no less than ``minimum``: for a program's own
    flags beside timely's, refused in the words timely's own flags use.

    >>> import sparktimely as st
    >>> parser = st.timely_parser(prog="bfs")
    >>> _ = parser.add_argument("--nodes", type=at_least(1), default=1000)
    >>> parser.parse_args(["--nodes", "5"]).nodes
    5
    >>> at_least(1)("0")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: expected a positive integer, got '0'
    >>> at_least(0)("-1")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: expected a non-negative integer, got '-1'
    """
    expected = {0: "a non-negative integer", 1: "a positive integer"}.get(
        minimum, f"an integer of at least {minimum}")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value
    return parse


def _index(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a process index (0, 1, ...), got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    """An argparse ``type`` for a time in seconds above 0 and at most a million
    (``--stall-limit``, ``--timeout``).

    >>> positive_seconds("0.5")
    0.5
    >>> positive_seconds("-1")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: expected a positive number of seconds, got '-1'
    """
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    problem = seconds_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"expected {problem}, got {text!r}")
    return value


def _log_dir_problem(path: str | os.PathLike) -> str | None:
    """Why logs cannot be written to ``path`` (None if they can), naming it."""
    problem = directory_problem(path)
    return None if problem is None else \
        f"cannot write logs to {os.fspath(path) or repr('')}: {problem}"


def _log_directory(path: str) -> str:
    """``--log-dir``: a usage error, before anything runs, if logs cannot be written there."""
    problem = _log_dir_problem(path)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return path


def _hostfile(path: str) -> list[str]:
    """The addresses of the hostfile at ``path``; a usage error names the file and what is
    wrong with it, a host that does not resolve included (before any process listens)."""
    try:
        addresses = parse_hostfile(path)
    except OSError as error:
        raise argparse.ArgumentTypeError(error.strerror or str(error)) from None
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    for address in addresses:
        host, _, port = address.rpartition(":")
        try:
            socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
        except socket.gaierror as error:
            raise argparse.ArgumentTypeError(
                f"hostfile {path}: {address!r} names a host that does not resolve "
                f"({error.strerror or error})") from None
    return addresses


def _config(options: argparse.Namespace, args: Sequence[str]) -> Config:
    """The :class:`Config` of parsed timely options; ValueError if they do not fit together."""
    values = {name: getattr(options, name) for name in _TIMELY}
    try:
        check_workers_per_host(values["workers"])
    except ValueError as error:
        raise ValueError(f"argument -w/--workers/--threads: {error}") from None
    if values["process"] is None:
        if values["processes"] > 1:
            raise ValueError(f"-n/--processes {values['processes']} needs -p/--process: this "
                             f"process's index, 0..{values['processes'] - 1}")
        values["process"] = 0
    if not 0 <= values["process"] < values["processes"]:
        raise ValueError(f"argument -p/--process: process index {values['process']} is not "
                         f"in 0..{values['processes'] - 1} (-n/--processes is "
                         f"{values['processes']})")
    hostfile = values["hostfile"]
    if hostfile is not None and len(hostfile) < values["processes"]:
        raise ValueError(f"argument -h/--hostfile: {_too_few(hostfile, values['processes'])}")
    return Config(**values, args=list(args))


def checkpoint_every(every: int | None, directory: str | None) -> int:
    """``--checkpoint-every``'s value (``every``, None when not given: 1); ValueError naming
    the flag when it is given without ``--checkpoint-dir`` (``directory``), where it would do
    nothing.

    >>> checkpoint_every(None, None), checkpoint_every(5, "ck")
    (1, 5)
    >>> checkpoint_every(5, None)
    Traceback (most recent call last):
    ValueError: argument --checkpoint-every: needs --checkpoint-dir DIR (without a checkpoint directory nothing is checkpointed)
    """
    if every is None:
        return 1
    if directory is None:
        raise ValueError("argument --checkpoint-every: needs --checkpoint-dir DIR (without a "
                         "checkpoint directory nothing is checkpointed)")
    return every


def config_from_args(argv: Sequence[str]) -> Config:
    """Read timely's flags (see :func:`timely_parser`) from ``argv``; other arguments are left
    in ``config.args``, and so is everything after a ``--``, as it is. Raises ValueError for a
    bad value or for settings that do not fit together (:func:`execute_from_args` reports
    them as ``prog: error: ...`` instead).

    >>> config_from_args(["-w", "2", "--input", "x.txt"])
    Config(workers=2, processes=1, process=0, hostfile=None, args=['--input', 'x.txt'])
    >>> config_from_args(["-w2", "--", "-w", "9"]).args
    ['-w', '9']
    >>> config = config_from_args(["--log-dir", "logs", "--progress", "-w2"])
    >>> config.log_dir, config.progress, config.workers
    ('logs', True, 2)
    >>> config_from_args(["--checkpoint-dir", "ckpt", "--checkpoint-every=10"]).checkpoint_every
    10
    >>> config_from_args(["-n", "2"])
    Traceback (most recent call last):
    ValueError: -n/--processes 2 needs -p/--process: this process's index, 0..1
    >>> config_from_args(["-w", "two"])
    Traceback (most recent call last):
    ValueError: argument -w/--workers/--threads: expected a positive integer, got 'two'
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     config_from_args(["--wrokers", "2"]).args
    ['--wrokers', '2']
    >>> print(caught[0].message)                          # doctest: +ELLIPSIS
    --wrokers is not one of timely's flags (did you mean --workers?): it is left for ...
    """
    parser = timely_parser(exit_on_error=False)
    try:
        options, unknown = parser.parse_known_args(argv)
    except argparse.ArgumentError as error:
        raise ValueError(str(error)) from None
    doubt = parser.left_for_program(unknown)
    if doubt is not None:
        warnings.warn(doubt, stacklevel=2)
    return _config(options, [*unknown, *options.args])


def execute(func: Callable[[Worker], R], *, workers: int = 1, processes: int = 1,
            process: int = 0, hostfile: str | os.PathLike | Sequence[str] | None = None,
            args: Sequence[str] = (), stall_limit: float | None = None,
            log_dir: str | os.PathLike | None = None, progress: bool = False,
            checkpoint_dir: Location | None = None, checkpoint_every: int = 1) -> list[R]:
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
    require_function("execute", func, "the job must be a function of the worker")
    config = Config(workers, processes, process,
                    None if hostfile is None else parse_hostfile(hostfile), list(args),
                    stall_limit=stall_limit,
                    log_dir=None if log_dir is None else os.fspath(log_dir), progress=progress,
                    checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every)
    return _run(func, config)


def execute_from_args(argv: Sequence[str] | argparse.Namespace,
                      func: Callable[[Worker], R]) -> list[R]:
    """:func:`execute` configured from a command line, as timely's ``execute_from_args``:
    ``argv`` is the arguments (``sys.argv[1:]``), or the options a :func:`timely_parser`
    parsed from them.

    Given the arguments, it reads timely's flags (``-w/--workers/--threads``,
    ``-n/--processes``, ``-p/--process``, ``-h/--hostfile``, ``--stall-limit SECONDS``,
    ``--log-dir DIR``, ``--progress``, ``--checkpoint-dir DIR``, ``--checkpoint-every N``) and
    leaves every other argument for the program, in order, in ``worker.args`` (and everything
    after a ``--``, untouched). ``--help`` prints timely's flags and exits with status 0; a
    bad value (``-w abc``) or settings that do not fit together (``-n 2`` without ``-p``)
    print ``prog: error: ...`` with the usage and exit with status 2, before any worker
    starts. An argument left for the program that looks like a mistyped timely flag
    (``--wrokers``) is told as ``prog: warning: ...`` (did you mean ``--workers``?).

    A program with flags of its own declares them on a :func:`timely_parser`, parses, and
    passes the options: then an unknown flag is an error too, ``--help`` lists the program's
    flags with timely's, and ``worker.args`` holds what followed ``--``.

    Run as a filter whose reader goes away (``prog | head``), a worker's print failing with
    ``BrokenPipeError`` ends the program quietly with status 1, as Unix tools do, rather than
    with a :class:`WorkerError`.

    >>> import sparktimely as st
    >>> st.execute_from_args(["-w", "2", "extra"], lambda worker: worker.args)
    [['extra'], ['extra']]
    """
    if isinstance(argv, (str, bytes)):
        raise TypeError(f"execute_from_args: argv is the list of arguments (sys.argv[1:]), "
                        f"not one string: {argv!r}")
    if isinstance(argv, argparse.Namespace):
        options, args = argv, getattr(argv, "args", None)
        if args is None or not all(hasattr(options, name) for name in _TIMELY):
            raise TypeError("execute_from_args: these options lack timely's settings "
                            "(workers, processes, ...): parse with sparktimely.timely_parser()")
    else:
        parser = timely_parser()
        options, unknown = parser.parse_known_args(argv)
        doubt = parser.left_for_program(unknown)
        if doubt is not None:
            print(f"{parser.prog}: warning: {doubt}", file=sys.stderr)
        args = [*unknown, *options.args]
    try:
        return _run(func, _config(options, args))
    except WorkerError as error:
        if _output_closed(error):
            _leave_quietly()
        _told_if_uncaught(error)
        raise
    except (RecoveryError, ConnectionError) as error:
        _told_if_uncaught(error)
        raise


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
    >>> run_workers(lambda worker: None, plan, {-1: None})
    Traceback (most recent call last):
    ValueError: run_workers: worker index -1 is not in 0..1 (the plan's workers)
    """
    require_function("run_workers", func)
    if not plan:
        raise ValueError("run_workers: the plan names no worker")
    if not listeners:
        raise ValueError("run_workers: listeners names none of this process's workers")
    for index in sorted(listeners, key=repr):
        if isinstance(index, bool) or not isinstance(index, int) or \
                not 0 <= index < len(plan):
            raise ValueError(f"run_workers: worker index {index!r} is not in "
                             f"0..{len(plan) - 1} (the plan's workers)")
    return _supervisor.run_workers(func, plan, listeners, args=args, timeout=timeout,
                                   stall_limit=stall_limit, peer_lost_grace=peer_lost_grace)


def _run(func: Callable[[Worker], Any], config: Config) -> list[Any]:
    if config.log_dir is not None and (problem := _log_dir_problem(config.log_dir)):
        raise ValueError(f"log_dir: {problem}")
    try:
        if config.checkpoint_dir is None:
            return _run_workers(func, config)
        create_directory(config.checkpoint_dir)
        with reraise_recovery_error():
            return _run_workers(checkpointing(func, config.checkpoint_dir,
                                              config.checkpoint_every), config)
    except (WorkerError, RecoveryError, ConnectionError, KeyboardInterrupt) as error:
        # Told from here: the frames of this process's supervision and rendezvous say
        # nothing the message does not (a worker's own traceback is the error's note).
        raise error.with_traceback(None)


def _output_closed(error: WorkerError) -> bool:
    """Whether ``error`` is a worker's write to standard output failing because whoever
    read it has gone (``prog | head``): the output is no one's any more, not a bug to tell."""
    if not re.match(r"(OperatorError: .* raised )?BrokenPipeError[: ]", error.message):
        return False
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # stdout replaced, or not a descriptor
        return False


def _told_if_uncaught(error: BaseException) -> None:
    """Mark ``error`` (a job's failure, raised by :func:`execute_from_args`) to be told, if
    the program does not catch it, as a command line tells an error: ``prog: message`` and
    its notes (a worker's own traceback), without the frames of the call that raised it."""
    error.told_by_sparktimely = True           # type: ignore[attr-defined]
    if getattr(sys.excepthook, "tells_sparktimely_errors", False):
        return
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, trace: Any) -> None:
        if getattr(value, "told_by_sparktimely", False):
            print("\n".join([f"{_program()}: {value}", *getattr(value, "__notes__", [])]),
                  file=sys.stderr)
        else:
            previous(kind, value, trace)
    hook.tells_sparktimely_errors = True       # type: ignore[attr-defined]
    sys.excepthook = hook


def _leave_quietly() -> NoReturn:
    """End the program as a Unix filter whose reader has gone: no traceback, status 1 (and
    nothing flushed at exit into the closed pipe, as Python's documentation recommends)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    raise SystemExit(1)


def _run_workers(func: Callable[[Worker], Any], config: Config) -> list[Any]:
    with observing(func, log_dir=config.log_dir, progress=config.progress) as func, \
            signals.around_run():
        if config.processes == 1:
            plan = [WorkerAddress("localhost", 0, "local", mesh=job_prefix())] * config.workers
            return _supervisor.run_workers(func, plan, dict.fromkeys(range(config.workers)),
                                           args=config.args, stall_limit=config.stall_limit)
        hostfile = config.hostfile or [f"localhost:{2101 + i}" for i in range(config.processes)]
        _warm.start()                           # while the other processes are found
        try:
            cluster = ProcessCluster.join(config.process, hostfile[:config.processes],
                                          config.workers, force_sockets=config.force_sockets,
                                          timeout=config.connect_timeout,
                                          checkpoints=None if config.checkpoint_dir is None
                                          else config.checkpoint_every)
        except BaseException:
            _warm.stop()        # the interpreter may exit next: not under a module's load
            raise
        try:
            return _supervisor.run_workers(func, cluster.plan, cluster.listeners,
                                           args=config.args, timeout=cluster.timeout,
                                           stall_limit=config.stall_limit, cluster=cluster)
        finally:
            with signals.held():
                cluster.close()


def execute_directly(func: Callable[[Worker], R]) -> R:
    """Runs ``func(worker)`` on one worker in this process, steps the worker until its
    dataflows complete, and returns ``func``'s result. It runs on the calling thread (as
    timely's ``execute_directly``): an error propagates as raised (the job's own exception,
    or ``st.OperatorError`` for an operator's logic), not wrapped in ``st.WorkerError``
    as :func:`execute` raises it.

    >>> import sparktimely as st
    >>> st.execute_directly(lambda worker: worker.peers)
    1
    """
    require_function("execute_directly", func, "the job must be a function of the worker")
    worker = Worker(0, 1)
    result = func(worker)
    worker.run()
    return result


def example(build: Callable[[Scope], R]) -> R:
    """Builds one dataflow with ``build(scope)`` on one worker, runs it to completion and
    returns what ``build`` returned. It runs on the calling thread, as
    :func:`execute_directly`: errors propagate as raised, not wrapped in ``st.WorkerError``.

    >>> import sparktimely as st
    >>> st.example(lambda scope: scope.to_stream([1, 2, 3]).map(str).capture()).extract()
    [(0, ['1', '2', '3'])]
    """
    require_function("example", build, "expected a function of the scope that builds the "
                                        "dataflow")
    return execute_directly(lambda worker: worker.dataflow(build))


__all__ = ["Config", "Seat", "WorkerAddress", "WorkerError", "WorkerSession", "at_least",
           "config_from_args", "example", "execute", "execute_directly", "execute_from_args",
           "parse_hostfile", "positive_seconds", "run_workers", "timely_parser"]
