"""The commit record of a checkpoint: what it holds, its bytes, and how a resume checks it.

A checkpoint exists from the instant its commit record, ``<dataflow>/commits/<sequence>.json``,
is in place (written atomically by worker 0). The record names the program it belongs to
(the dataflow, its place among the program's checkpointed dataflows, its operators and its
checkpointed components), the epoch it holds (every
root epoch up to it), the latest epoch each worker's inputs had sent records at (later than
that, a completed dataflow's epoch may come from another input or a ``delay``), whether the
dataflow had completed, the number of workers, and every state file with its size and XXH3-128 digest; the record
carries the digest of its own contents too. Its bytes have one canonical layout, so any
change to them shows.

>>> record = build("totals", 1, epoch=4, sent=[{0: 4}], complete=False, workers=1, every=2,
...                operators=["Input", "Sink"], components=[["counts", "sink"]],
...                files=[{"checkpoints/000000000001/counts.w00000.arrow":
...                        file_entry(b"state", worker=0, component="counts")}],
...                position=1)
>>> data = serialize(record)
>>> parse(data, "commits/" + name(1), 1)["epoch"], sequence_of(name(1))
(4, 1)
>>> try:
...     parse(data.replace(b'"epoch": 4', b'"epoch": 5'), "commits/x.json", 1)
... except RecordError as error:
...     print(str(error).split(": ")[1])
its contents do not match its XXH3-128 digest f76a0103772c1f0138aa9146f8f56b83
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterable, Sequence

from ..hashing import xxh3_128_hexdigest

FORMAT = "sparktimely-checkpoint/1"
_NAME = re.compile(r"^(\d{12})\.json$")


class RecordError(ValueError):
    """A commit record or a state file it names is unusable; the message says which and why."""


def digest(data: Any) -> str:
    """The XXH3-128 digest (hex) of ``data`` (bytes or a buffer): of state files and of
    records."""
    return xxh3_128_hexdigest(data)


def name(sequence: int) -> str:
    """The file name of commit record number ``sequence``."""
    return f"{sequence:012d}.json"


def sequence_of(file_name: str) -> int | None:
    """The number of the commit record named ``file_name`` (None: not a commit record)."""
    match = _NAME.match(file_name)
    return int(match.group(1)) if match else None


def file_entry(data: Any, worker: int, component: str) -> dict:
    """What a record says of a state file: its size and digest, who wrote it, for what."""
    return {"size": len(data), "worker": worker,
            "component": component, "xxh3_128": digest(data)}


def build(dataflow: str, sequence: int, epoch: int, sent: Sequence[dict[int, int]],
          complete: bool, workers: int, every: int, operators: list[str],
          components: list[list[str]], files: Iterable[dict], position: int) -> dict:
    """The commit record of checkpoint ``sequence`` of ``epoch`` (``complete``: the last, of
    a completed dataflow) whose inputs had sent records up to the epochs ``sent`` gives
    (per worker: input operator index -> epoch), naming the state files of every worker's
    report (``files``: each worker's ``{path: file_entry}``), with its digest; ``position``
    is the dataflow's place among the program's checkpointed dataflows (1: the first)."""
    record = {"format": FORMAT, "dataflow": dataflow, "position": position,
              "sequence": sequence, "epoch": epoch,
              "inputs_sent": [{str(input): had for input, had in mine.items()}
                              for mine in sent],
              "complete": complete, "workers": workers,
              "checkpoint_every": every,
              "operators": operators, "components": components,
              "files": {path: entry for written in files for path, entry in written.items()}}
    record["checksum"] = _record_digest(record)
    return record


def serialize(record: dict) -> bytes:
    """A commit record's bytes: one canonical layout."""
    return json.dumps(record, indent=1, sort_keys=True).encode()


def _record_digest(record: dict) -> str:
    return digest(json.dumps(record, sort_keys=True).encode())


def parse(data: bytes, path: str, sequence: int) -> dict:
    """The record in ``data`` read from ``path``, which must be commit record number
    ``sequence``, without its digest; raises :class:`RecordError` naming ``path`` if it is not
    such a record exactly as written."""
    try:
        record = json.loads(data)
    except ValueError as error:
        raise RecordError(f"commit record {path} is corrupt: it is not JSON ({error})")
    written_in = record.get("format") if isinstance(record, dict) else None
    if isinstance(written_in, str) and written_in.startswith(FORMAT.split("/")[0] + "/") \
            and written_in != FORMAT:
        raise RecordError(f"commit record {path} is in the format {written_in}, which this "
                          f"sparktimely cannot read (it reads {FORMAT}): resume with the "
                          f"version that wrote it, or start from no checkpoint")
    if written_in != FORMAT:
        raise RecordError(f"commit record {path} is corrupt: it is not a {FORMAT} record")
    if data != serialize(record):
        raise RecordError(f"commit record {path} is corrupt: its bytes are not those "
                          f"written (whitespace or layout changed)")
    checksum = record.pop("checksum", None)
    if checksum != _record_digest(record):
        raise RecordError(f"commit record {path} is corrupt: its contents do not match "
                          f"its XXH3-128 digest {checksum}")
    if record.get("sequence") != sequence:
        raise RecordError(f"commit record {path} is corrupt: it says it is number "
                          f"{record.get('sequence')}")
    return record


def inputs_sent(record: dict, worker: int, peers: int) -> tuple[dict[int, int], int]:
    """The latest epoch each input (by operator index) of worker ``worker`` of ``peers`` had
    sent records at when ``record``'s checkpoint was taken, and the epoch for an input not
    named. Run at another number of workers, a worker cannot tell which records its inputs
    send were sent before: each input takes the latest epoch any worker's sent at. (Records
    written before inputs were told apart have one epoch for all; before that was kept,
    the checkpoint's.)

    >>> record = {"epoch": 9, "workers": 2, "inputs_sent": [{"3": 7}, {"3": 2, "4": 5}]}
    >>> inputs_sent(record, 1, 2), inputs_sent(record, 0, 3)
    (({3: 2, 4: 5}, -1), ({3: 7, 4: 5}, -1))
    >>> inputs_sent({"epoch": 9, "workers": 2, "inputs_sent": 4}, 0, 2)
    ({}, 4)
    """
    sent = record.get("inputs_sent", record["epoch"])
    if isinstance(sent, int):
        return {}, sent
    if record["workers"] == peers:
        return {int(input): had for input, had in sent[worker].items()}, -1
    latest: dict[int, int] = {}
    for mine in sent:
        for input, had in mine.items():
            latest[int(input)] = max(had, latest.get(int(input), -1))
    return latest, -1


def check_program(record: dict, where: str, dataflow: str, operators: list[str],
                  components: list[list[str]]) -> None:
    """Raise :class:`RecordError` naming the first difference between the program ``record``
    belongs to and this one (``where`` names the checkpoint)."""
    if record["dataflow"] != dataflow:
        raise RecordError(f"{where} is of dataflow {record['dataflow']!r}")
    theirs = record["operators"]
    if theirs != operators:
        for i, (a, b) in enumerate(zip(theirs, operators)):
            if a != b:
                raise RecordError(f"{where} is of another program: its operator {i} is "
                                  f"{a!r}, this program's is {b!r}")
        raise RecordError(f"{where} is of another program: it has {len(theirs)} operators "
                          f"({', '.join(theirs)}), this program has {len(operators)} "
                          f"({', '.join(operators)})")
    if record["components"] != components:
        raise RecordError(f"{where} is of another program: its checkpointed parts are "
                          f"{record['components']}, this program's are {components}")


def files_by_component(record: dict) -> dict[str, dict[int, tuple[str, dict]]]:
    """The record's state files: per component, per worker that wrote it, ``(path, entry)``."""
    files: dict[str, dict[int, tuple[str, dict]]] = {}
    for path, entry in record["files"].items():
        files.setdefault(entry["component"], {})[entry["worker"]] = (path, entry)
    return files


def check_file(data: Any, entry: dict, path: str) -> None:
    """Raise :class:`RecordError` if ``data``, read from ``path``, is not the state file
    ``entry`` describes."""
    size, found = len(data), digest(data)
    if size != entry["size"] or found != entry["xxh3_128"]:
        raise RecordError(f"checkpoint file {path} (of {entry['component']!r}, worker "
                          f"{entry['worker']}) is corrupt: {size} bytes, XXH3-128 {found}; "
                          f"the commit record says {entry['size']} bytes, {entry['xxh3_128']}")
