"""Files in and out: :class:`FileSource` reads Parquet, CSV, JSON lines or text files as a
resumable, partitioned source; :class:`DirectorySink` writes one Parquet or JSON-lines file
per worker and epoch (Parquet: one per schema), visible only once its epoch is complete (and,
with checkpoints, committed), by an atomic rename.

Both work on any pyarrow filesystem: a local path, a URI (``s3://bucket/dir``,
``hdfs://host/dir``) or a ``(pyarrow.fs.FileSystem, path)`` pair.

>>> import os, tempfile, sparktimely as st
>>> folder = tempfile.mkdtemp()
>>> with open(os.path.join(folder, "words.txt"), "w") as f:
...     _ = f.write("a b\\nb c\\n")
>>> def build(scope):
...     lines = scope.input_from_source(FileSource(folder, format="text", batch_rows=1), "lines")
...     lines.flat_map(str.split).map(lambda w: {"word": w}).output_to(
...         DirectorySink(os.path.join(folder, "out"), format="jsonl"), "out")
>>> st.example(build)
>>> sorted(os.listdir(os.path.join(folder, "out")))
['part-0000000000-0.jsonl', 'part-0000000001-0.jsonl']
>>> open(os.path.join(folder, "out", "part-0000000001-0.jsonl")).read()
'{"word": "b"}\\n{"word": "c"}\\n'
"""
from __future__ import annotations

import base64
import csv
import datetime
import decimal
import io
import itertools
import json
import math
import os
import posixpath
import re
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import describe, require_positive_int, short_repr
from ._staged import StagedEpochs, StagedFile, delete_staged
from ._storage import Location, Storage, check_location

__all__ = ["DirectorySink", "FileSource"]

_SOURCE_FORMATS = ("parquet", "csv", "jsonl", "text")
_SINK_FORMATS = {"parquet": ".parquet", "jsonl": ".jsonl"}
_CSV_ROW = re.compile(r"\bRow #(\d+)")     # pyarrow's row number (1: the header)


def _check_format(format: str, known: Sequence[str], what: str) -> None:
    if format not in known:
        raise ValueError(f"{what}: unknown format {format!r} (known: {', '.join(known)})")


def _rechunk(batches: Iterator[pa.RecordBatch], rows: int, skip: int,
             fewer: Callable[[int], Exception] | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of ``batches`` after the first ``skip``, in batches of exactly ``rows`` rows
    (the last may be shorter), so that batch boundaries depend on row numbers only;
    ``fewer(rows found)`` is raised if ``batches`` hold fewer than ``skip`` rows."""
    pending: list[pa.RecordBatch] = []
    have, rows_skipped = 0, skip
    for batch in batches:
        if skip:
            if skip >= batch.num_rows:
                skip -= batch.num_rows
                continue
            batch, skip = batch.slice(skip), 0
        pending.append(batch)
        have += batch.num_rows
        while have >= rows:
            combined = pending[0] if len(pending) == 1 else pa.concat_batches(pending)
            yield combined.slice(0, rows)
            rest = combined.slice(rows)
            pending, have = ([rest] if rest.num_rows else []), rest.num_rows
    if have:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
    if skip and fewer is not None:
        raise fewer(rows_skipped - skip)


class _FilePart:
    """One file being read: its batches from a position on; the position is
    ``(batches read, byte offset, lines or rows read)`` (the offset for line formats, rows
    for Parquet and CSV; of CSV, the offset is the file's size when the read began if the
    file ended inside a row then, else 0), and the watermark reached when the source takes
    epochs from event times. Rows, not batches, say where a resumed read starts: a run with
    another ``batch_rows`` resumes at the same row (checkpoints written before rows were
    counted hold 0 there: they resume at ``batches read * batch_rows``, as they were
    written)."""

    def __init__(self, source: "FileSource", path: str, position: tuple | None) -> None:
        self.source = source
        self.path = path
        self.done, self.offset, self.lines = (position or (0, 0, 0))[:3]
        self.watermark = position[3] if position and len(position) > 3 else 0
        self._raw: list[bytes] = []         # the lines of the last batch of a line format
        rows = source.batch_rows
        if source.format in ("parquet", "csv") and not self.lines:
            self.lines = self.done * rows       # a position from before rows were counted
        fs, file_path = source._filesystem_for(path)
        try:
            self.file = fs.open_input_file(file_path)
        except OSError as error:        # missing, a directory, not permitted
            raise type(error)(f"FileSource: {path} cannot be opened: {error}") from error
        if source.format == "parquet":
            self.batches: Iterator[Any] = self._parquet(rows)
        elif source.format == "csv" and self.file.size() == 0:
            # no header, no rows: as an empty file of lines
            self.batches = _rechunk(iter(()), rows, self.lines, self._fewer_rows)
        elif source.format == "csv":
            try:
                if self.offset:
                    self._check_the_row_read_unended()
                size = self.file.size()
                # read as far as the file reached now, so that a last row without its line
                # end is the last row read: its end is kept in the position, as for lines
                self.offset = 0 if self.file.read_at(1, size - 1) in b"\r\n" else size
                reader = pacsv.open_csv(_Prefix(self.file, size))
            except (pa.ArrowException, UnicodeDecodeError, OSError) as error:
                raise self._unreadable(error) from error
            self.batches = _rechunk(iter(reader), rows, self.lines, self._fewer_rows)
        else:
            self.batches = self._lines(rows)

    def _unreadable(self, error: Exception) -> ValueError:
        """``error`` from reading this file, as an error naming the file."""
        hint = ""
        if self.source.format == "csv" and "conversion error" in str(error):
            hint = (" (a CSV column's type is inferred from the file's first block: values "
                    "of another type further on cannot be read; write such a column as "
                    "text from its start, or the file as Parquet)")
        line = self._csv_line(error) if isinstance(error, pa.ArrowInvalid) else \
            self._undecodable_line() if isinstance(error, UnicodeDecodeError) else None
        place = "" if line is None else f"; at line {line}"
        return ValueError(f"FileSource: {self.path} cannot be read as "
                          f"{self.source.format}: {type(error).__name__}: {error}{hint}{place}")

    def _undecodable_line(self) -> int | None:
        """The line of this text file, among those of the batch being read, that is not
        UTF-8 (1-based), or None."""
        if self.source.format != "text":
            return None
        for index, raw in enumerate(self._raw):
            try:
                raw.decode()
            except UnicodeDecodeError:
                return self.lines + 1 + index
        return None

    def _csv_line(self, error: Exception) -> int | None:
        """The line of this CSV file that pyarrow's ``error`` is about (1-based, the header
        line 1), or None. pyarrow numbers the row (``Row #N``, empty lines not counted) only
        when it reads on one thread, so the file is read that way again up to the error."""
        if self.source.format != "csv":
            return None
        row = _CSV_ROW.search(str(error))
        fs, file_path = self.source._filesystem_for(self.path)
        if row is None:
            try:
                with fs.open_input_file(file_path) as file:
                    for _ in pacsv.open_csv(file, read_options=pacsv.ReadOptions(
                            use_threads=False)):
                        pass
                return None
            except pa.ArrowInvalid as again:
                row = _CSV_ROW.search(str(again))
            except (pa.ArrowException, UnicodeDecodeError, OSError):
                return None
            if row is None:
                return None
        wanted, rows, end = int(row.group(1)), 0, 0
        with fs.open_input_file(file_path) as file:
            # csv's reader, not lines: a quoted value may hold line breaks
            text = io.TextIOWrapper(io.BufferedReader(file, 1 << 20), encoding="utf-8",
                                    errors="replace", newline="")
            reader = csv.reader(text)
            for record in reader:
                start, end = end + 1, reader.line_num
                if record:
                    rows += 1
                    if rows == wanted:
                        return start
        return None

    def _shorter_than_read(self, has: str, read: str) -> ValueError:
        return ValueError(f"FileSource: {self.path} has {has}, fewer than the {read} a "
                          f"checkpointed run read: a file being read may grow, not shrink "
                          f"or be replaced")

    def _fewer_rows(self, found: int) -> ValueError:
        return self._shorter_than_read(f"{found} rows", f"{self.lines}")

    def _parquet(self, rows: int) -> Iterator[pa.RecordBatch]:
        parquet = pq.ParquetFile(self.file)
        if parquet.metadata.num_rows < self.lines:
            raise self._fewer_rows(parquet.metadata.num_rows)
        skip, group = self.lines, 0
        while group < parquet.num_row_groups and skip >= parquet.metadata.row_group(group).num_rows:
            skip -= parquet.metadata.row_group(group).num_rows
            group += 1
        if group < parquet.num_row_groups:
            yield from _rechunk(parquet.iter_batches(batch_size=rows,
                                                     row_groups=range(group, parquet.num_row_groups)),
                                rows, skip)

    def _resume_at_a_line_start(self) -> bool:
        """Check where a resumed read of lines starts, and whether it can read on now: the
        file must still reach as far as the checkpointed run read, and if that run's last
        line had no line end (the file ended inside it then), the file may since have ended
        that line (a line end appended: reading goes on after it; only the ``\\r`` of a
        ``\\r\\n`` so far: nothing more is read yet) but not continued it, which would
        make the line read then only the start of a longer one."""
        size = self.file.size()
        if size < self.offset:
            raise self._shorter_than_read(f"{size} bytes", f"{self.offset}")
        self.file.seek(self.offset - 1)
        around = self.file.read(3)
        if around[:1] == b"\n" or len(around) == 1:
            return True
        if around[1:] == b"\r":
            return False
        for line_end in (b"\n", b"\r\n"):
            if around[1:].startswith(line_end):
                self.offset += len(line_end)
                return True
        raise self._continued("line")

    def _check_the_row_read_unended(self) -> None:
        """A resumed read of a CSV file that a checkpointed run read when it ended inside a
        row (at byte ``offset``): if that run read that row and the file has since continued
        it (no line end after it), the row read was only the start of a longer one."""
        after = self.file.read_at(1, self.offset)
        if after in b"\r\n" or self.lines < _csv_rows(_Prefix(self.file, self.offset)):
            return                  # ended (or nothing more), or not read then
        raise self._continued("row")

    def _continued(self, unit: str) -> ValueError:
        """The error for the last ``unit`` (line, or CSV row) that a checkpointed run read
        without its line end, and that the file has since continued."""
        return ValueError(f"FileSource: {self.path} {unit} {self.lines} had no line end when "
                          f"a checkpointed run read it as the file's last {unit}, and the file "
                          f"has since continued that {unit}; append whole {unit}s, each "
                          f"ending in a line end, to a file being read")

    def _lines(self, rows: int) -> Iterator[list]:
        if self.offset and not self._resume_at_a_line_start():
            return
        self.file.seek(self.offset)
        reader = io.BufferedReader(self.file, 1 << 20)
        text = self.source.format == "text"
        while raw := list(itertools.islice(reader, rows)):
            self._raw = raw            # next_batch moves the position past them once sent
            if text:
                yield [line.decode().rstrip("\r\n") for line in raw]
                continue
            try:
                records = [json.loads(line) for line in raw if line.strip()]
            except ValueError as error:
                number = self.lines + 1 + next(i for i, line in enumerate(raw)
                                               if line.strip() and not _parses(line))
                raise ValueError(f"FileSource: {self.path} line {number} is not JSON: "
                                 f"{error}") from None
            yield records

    def next_batch(self) -> tuple[int, Any]:
        try:
            batch = next(self.batches)
        except (pa.ArrowException, UnicodeDecodeError, OSError) as error:
            raise self._unreadable(error) from error
        epoch, latest = self.watermark, None
        if self.source.event_time is not None:     # checked before the position moves on
            latest = self._latest_event_time(batch)
        if isinstance(batch, pa.RecordBatch):          # Parquet, CSV: count rows
            self.lines += batch.num_rows
        else:                                          # lines: count lines and bytes
            self.lines += len(self._raw)
            self.offset += sum(map(len, self._raw))
        self.done += 1
        if self.source.event_time is None:
            return (self.done - 1) // self.source.batches_per_epoch, batch
        if latest is not None:
            self.watermark = max(self.watermark, latest - self.source.out_of_order)
        return epoch, batch

    def _latest_event_time(self, batch: Any) -> int | None:
        """The greatest event time in ``batch`` (None if it has none)."""
        column = self.source.event_time
        if isinstance(batch, pa.RecordBatch):
            if column not in batch.schema.names:
                raise ValueError(f"FileSource: {self.path} has no event time column "
                                 f"{column!r} (columns {', '.join(batch.schema.names)})")
            times = batch.column(column)
            if not pa.types.is_integer(times.type):
                raise TypeError(f"FileSource: {self.path}: event time column {column!r} is "
                                f"{times.type}, not an integer type")
            return pc.max(times).as_py()
        latest = None
        for index, record in enumerate(batch):
            value = record.get(column) if isinstance(record, dict) else None
            if value.__class__ is not int:
                line = self.lines + 1 + [i for i, raw in enumerate(self._raw)
                                         if raw.strip()][index]
                raise TypeError(f"FileSource: {self.path} line {line}: the event time "
                                f"{column!r} of {record!r} is {value!r}, not an int")
            if latest is None or value > latest:
                latest = value
        return latest

    def snapshot(self) -> tuple[int, ...]:
        if self.source.event_time is None:
            return self.done, self.offset, self.lines
        return self.done, self.offset, self.lines, self.watermark


class _Prefix(io.RawIOBase):
    """The first ``size`` bytes of a pyarrow file, as a Python file to read from its start."""

    def __init__(self, file: pa.NativeFile, size: int) -> None:
        super().__init__()
        self.file, self.position, self.size = file, 0, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.file.read_at(min(len(buffer), self.size - self.position), self.position)
        buffer[:len(data)] = data
        self.position += len(data)
        return len(data)


def _csv_rows(file: _Prefix) -> int:
    """The rows of a CSV file (its header not counted)."""
    return sum(batch.num_rows for batch in pacsv.open_csv(file))


def _parses(line: bytes) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


class FileSource:
    """A :class:`~sparktimely.ops.sources.Source` reading files: one partition per file
    (named by its path), read in order in batches of ``batch_rows`` rows (lines),
    ``batches_per_epoch`` batches per epoch: batch ``i`` of every file is at epoch
    ``i // batches_per_epoch``.

    ``paths`` is a file, a directory (its files whose names do not start with ``.`` or
    ``_``, listed each time the source is opened, so files added between runs are read by the
    next run) or a list of files. ``format``: ``"parquet"`` and ``"csv"`` give
    ``pyarrow.RecordBatch`` batches (pyarrow's readers), ``"jsonl"`` lists of the lines'
    JSON values, ``"text"`` lists of the lines (without line ends). Positions are row
    numbers (and byte offsets for line formats), so a resumed read continues with the same
    batches and epochs, and reads what was appended to a file since (a file that shrank is
    an error, and so is a last line (a CSV file's last row) read without its line end that
    was continued later: append whole lines).

    >>> import tempfile, pyarrow as pa, pyarrow.parquet as pq, sparktimely as st
    >>> path = tempfile.mkdtemp() + "/numbers.parquet"
    >>> pq.write_table(pa.table({"x": list(range(5))}), path)
    >>> source = FileSource([path], batch_rows=2)
    >>> captured = st.example(lambda scope: scope.input_from_source(source, "numbers").capture())
    >>> [(epoch, table.column("x").to_pylist()) for epoch, table in captured.extract()]
    [(0, [0, 1]), (1, [2, 3]), (2, [4])]

    With ``event_time="column"`` (an int column of Parquet or CSV rows, a key of JSON
    lines) epochs follow the data's event times instead, as a ``win.EventTimeInput`` does:
    each batch is at the file's watermark when it is read, ``max(earlier event times) -
    out_of_order`` (0 at first), so the frontier over all files is the global watermark of
    event-time windows. The watermark moves between batches (``batch_rows`` sets how
    often), and positions include it.

    >>> pq.write_table(pa.table({"ts": [100, 104, 101, 130, 90]}), path)
    >>> source = FileSource([path], batch_rows=2, event_time="ts", out_of_order=5)
    >>> captured = st.example(lambda scope: scope.input_from_source(source, "events").capture())
    >>> [(epoch, table.column("ts").to_pylist()) for epoch, table in captured.extract()]
    [(0, [100, 104]), (99, [101, 130]), (125, [90])]
    """

    def __init__(self, paths: Location | Sequence[Any], format: str = "parquet",
                 batch_rows: int = 65536, batches_per_epoch: int = 1, *,
                 event_time: str | None = None, out_of_order: int = 0) -> None:
        _check_format(format, _SOURCE_FORMATS, "FileSource")
        for name, value in (("batch_rows", batch_rows), ("batches_per_epoch", batches_per_epoch)):
            require_positive_int(value, f"FileSource: {name}")
        if not isinstance(out_of_order, int) or out_of_order < 0:
            raise ValueError(f"FileSource: out_of_order must be a non-negative integer, got "
                             f"{out_of_order!r}")
        if event_time is not None and (format == "text" or batches_per_epoch != 1):
            raise ValueError(f"FileSource: event_time={event_time!r} takes epochs from a "
                             f"column or key of the records, so it needs a format other than "
                             f"text and no batches_per_epoch")
        self.format = format
        self.batch_rows = batch_rows
        self.batches_per_epoch = batches_per_epoch
        self.event_time = event_time
        self.out_of_order = out_of_order
        self._filesystem: pafs.FileSystem | None = None
        if isinstance(paths, tuple) and len(paths) == 2 and isinstance(paths[0], pafs.FileSystem):
            self._filesystem, paths = paths
        self._paths: list[str] | str = (os.fspath(paths) if isinstance(paths, (str, os.PathLike))
                                        else [os.fspath(p) for p in paths])

    def _filesystem_for(self, path: str) -> tuple[pafs.FileSystem, str]:
        if self._filesystem is not None:
            return self._filesystem, path
        storage = Storage(path)
        return storage.fs, storage.root

    def partitions(self) -> list[str]:
        """The files to read (a directory is listed now), named as the checkpoints know
        them: a directory's files by their names in it, a single file by its name, the
        files of a list by their paths as given (normalized). So a resumed run may give the
        directory as another path (``./in``, absolute, moved) and find its positions.

        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> for name in ("b.txt", "a.txt", "_staged.txt"):
        ...     open(os.path.join(folder, name), "w").close()
        >>> FileSource(folder, format="text").partitions()
        ['a.txt', 'b.txt']
        >>> FileSource(["in/./a.txt", "b.txt"], format="text").partitions()
        ['in/a.txt', 'b.txt']
        >>> FileSource([os.path.join(folder, "a.txt"), os.path.join(folder, ".", "a.txt")],
        ...            format="text").partitions()        # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: FileSource: .../a.txt and .../a.txt are one file: its rows would be read twice
        """
        if isinstance(self._paths, list):
            self._check_distinct_files()
            return [posixpath.normpath(path) for path in self._paths]
        return [name for name, _ in self._files()]

    def _check_distinct_files(self) -> None:
        """Raise ValueError if two paths of the list are one local file (absolute and
        relative, through a symbolic link): each would be a partition of its own."""
        seen: dict[str, str] = {}
        for path in self._paths:
            fs, location = self._filesystem_for(path)
            if not isinstance(fs, pafs.LocalFileSystem):
                continue
            real = os.path.realpath(location)
            if real in seen:
                raise ValueError(f"FileSource: {seen[real]} and {path} are one file: its rows "
                                 f"would be read twice")
            seen[real] = path

    def _files(self) -> list[tuple[str, str]]:
        """``(partition name, path)`` of the file or the directory's visible files."""
        assert isinstance(self._paths, str)
        fs, path = self._filesystem_for(self._paths)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"FileSource: {self._paths} does not exist")
        if info.type != pafs.FileType.Directory:
            return [(posixpath.basename(self._paths.rstrip("/")), self._paths)]
        infos = fs.get_file_info(pafs.FileSelector(path))
        names = sorted(posixpath.basename(i.path) for i in infos if i.type == pafs.FileType.File)
        return [(name, posixpath.join(self._paths, name)) for name in names
                if not name.startswith((".", "_"))]

    def open(self, partition: str, resume_state: tuple | None) -> _FilePart:
        """Read file ``partition`` (a name :meth:`partitions` gave) from ``resume_state``
        (a position from ``snapshot()``).

        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> with open(os.path.join(folder, "a.txt"), "w") as f:
        ...     _ = f.write("x\\ny\\nz\\n")
        >>> source = FileSource(folder, format="text", batch_rows=2)
        >>> part = source.open("a.txt", None)
        >>> part.next_batch(), source.open("a.txt", part.snapshot()).next_batch()
        ((0, ['x', 'y']), (1, ['z']))
        """
        path = partition
        if isinstance(self._paths, str):
            fs, location = self._filesystem_for(self._paths)
            directory = fs.get_file_info(location).type == pafs.FileType.Directory
            path = posixpath.join(self._paths, partition) if directory else self._paths
        return _FilePart(self, path, resume_state)


_STAGED = re.compile(r"^_staged-part-(\d+)-(.+?)(?:-c\d{3,})?\.(parquet|jsonl)$")


def _record_batch(batch: Any, schema: pa.Schema | None = None) -> pa.RecordBatch:
    """A batch as a RecordBatch: dicts by key (every key of any of them, in the order first
    seen; a dict without one has null there), tuples as columns ``f0, f1, ...``, other
    values as one column ``value``. With ``schema``, of that schema: dicts by its names,
    tuples and other values by position, a RecordBatch's columns by name, cast to its types.

    >>> _record_batch([{"a": 1}, {"a": 2, "b": "x"}]).to_pylist()
    [{'a': 1, 'b': None}, {'a': 2, 'b': 'x'}]
    >>> _record_batch([{"a": None}], pa.schema({"a": pa.int64()})).schema.types
    [DataType(int64)]
    """
    if schema is not None:
        return _fitted(batch, schema)
    if isinstance(batch, pa.RecordBatch):
        return batch
    first = batch[0]
    if isinstance(first, dict):
        keys = dict.fromkeys(key for record in batch for key in record)
        if len(keys) == len(first):
            return pa.RecordBatch.from_pylist(batch)
        return pa.RecordBatch.from_pydict({key: [record.get(key) for record in batch]
                                           for key in keys})
    if isinstance(first, (tuple, list)):
        width = len(first)
        if any(len(record) != width for record in batch):
            bad = next(record for record in batch if len(record) != width)
            raise ValueError(f"records of {width} fields and of {len(bad)} ({bad!r}) in one "
                             f"batch cannot share Parquet columns")
        return pa.RecordBatch.from_arrays([pa.array(column) for column in zip(*batch)],
                                          names=[f"f{i}" for i in range(width)])
    return pa.RecordBatch.from_arrays([pa.array(batch)], names=["value"])


def _fitted(batch: Any, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` as a RecordBatch of ``schema`` (see :func:`_record_batch`); a ValueError
    names the columns a RecordBatch lacks, or the record that does not fit."""
    if isinstance(batch, pa.RecordBatch):
        missing = [name for name in schema.names if name not in batch.schema.names]
        if missing:
            raise ValueError(f"the batch has no column {', '.join(map(repr, missing))} of "
                             f"the sink's schema (its columns: {', '.join(batch.schema.names)})")
        return batch.select(schema.names).cast(schema)
    first = batch[0]
    if isinstance(first, dict):
        names = set(schema.names)
        for record in batch:
            if not names.issuperset(record):
                extra = ", ".join(repr(key) for key in record if key not in names)
                raise ValueError(f"the record {short_repr(record)} has keys the sink's schema "
                                 f"has no column for ({extra}): they would be lost")
        return pa.RecordBatch.from_pylist(batch, schema=schema)
    rows = batch if isinstance(first, (tuple, list)) else [(record,) for record in batch]
    for record in rows:
        if not isinstance(record, (tuple, list)) or len(record) != len(schema):
            raise ValueError(f"the record {short_repr(record)} does not have the "
                             f"{len(schema)} fields of the sink's schema "
                             f"({', '.join(schema.names)})")
    return pa.RecordBatch.from_arrays(
        [pa.array(column, field.type) for column, field in zip(zip(*rows), schema)],
        schema=schema)


def _json_line(record: Any) -> str:
    """``record`` as a line of strict JSON: a float NaN or infinity, which JSON has no number
    for, as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``, as Spark writes them;
    values JSON has no type for as Spark's JSON writer gives them (:func:`_json_value`).

    >>> _json_line({"x": [1.5, float("nan"), float("-inf")]})
    '{"x": [1.5, "NaN", "-Infinity"]}\\n'
    """
    try:
        return json.dumps(record, allow_nan=False, default=_json_value) + "\n"
    except ValueError as error:
        if not str(error).startswith("Out of range float values"):
            raise
        return json.dumps(_finite(record), allow_nan=False, default=_json_value) + "\n"


def _json_value(value: Any) -> Any:
    """A value JSON has no type for, as a string: dates, times and timestamps in ISO 8601,
    bytes in base64 (as Spark's JSON writer gives them), a Decimal as its exact digits; else
    the TypeError ``json.dumps`` raises, naming the type.

    >>> import datetime, decimal
    >>> _json_line([datetime.date(2026, 12, 7), b"\\x00\\xff", decimal.Decimal("1.10")])
    '["2026-12-07", "AP8=", "1.10"]\\n'
    """
    if isinstance(value, (datetime.date, datetime.time)):       # (datetime is a date)
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _finite(value: Any) -> Any:
    """``value`` with its non-finite floats (in lists, tuples and dicts) as Spark's strings."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {_finite(key): _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


class _SinkFile(StagedFile):
    """One of an epoch's Parquet or JSON-lines files while it is written. A Parquet file holds
    batches of one schema, their column types promoted as ``pyarrow.unify_schemas`` permits
    (None then int: int64; int then float: double); a batch that cannot share it goes to
    another file of the epoch."""

    def __init__(self, storage: Storage, name: str, format: str,
                 schema: pa.Schema | None = None) -> None:
        super().__init__(storage, name)
        self.format = format
        self.fixed = schema                         # the sink's own schema, if given
        self.schema: pa.Schema | None = schema      # of every batch so far (Parquet)
        self.writer: pq.ParquetWriter | None = None
        self.records: list[pa.RecordBatch] = []     # Python records' columns, until finish

    def write(self, batch: Any) -> bool:
        if self.format == "jsonl":
            rows = batch.to_pylist() if isinstance(batch, pa.RecordBatch) else batch
            self.stream.write("".join([_json_line(row) for row in rows]).encode())
            return True
        records = _record_batch(batch, self.fixed)
        schema = self._schema_with(records.schema)
        if schema is None:
            return False
        self.schema = schema
        if isinstance(batch, pa.RecordBatch) or self.fixed is not None:  # types fixed: now
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.stream, schema)
            self.writer.write_batch(records.cast(schema))
        else:       # the types of one batch's columns may not be the epoch's (None, then 1)
            self.records.append(records)
        return True

    def _schema_with(self, schema: pa.Schema) -> pa.Schema | None:
        """This file's schema once it holds batches of ``schema`` too, or None if they
        cannot share one: other columns, types that do not promote, or types that would
        change the types of batches already written."""
        if self.schema is None:
            return schema
        if schema.equals(self.schema):          # (most batches: no unification needed)
            return self.schema
        if schema.names != self.schema.names:
            return None
        try:
            merged = pa.unify_schemas([self.schema, schema], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return None
        if self.writer is None:
            return merged
        return self.schema if merged.types == self.schema.types else None

    def finish(self) -> None:
        if self.records:
            assert self.schema is not None
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.stream, self.schema)
            try:
                batches = [records.cast(self.schema) for records in self.records]
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
                raise ValueError(f"the records of {self.name} have columns whose values do "
                                 f"not fit the file's Parquet schema {self.schema}: "
                                 f"{error}") from None
            self.records = []
            for records in batches:
                self.writer.write_batch(records)
        if self.writer is not None:
            self.writer.close()


class _DirectoryPart(StagedEpochs):
    """One worker's part of a :class:`DirectorySink`."""

    def __init__(self, sink: "DirectorySink", partition: str, state: dict | None) -> None:
        self.format = sink.format
        self.schema = sink.schema
        storage = sink._storage()
        try:
            super().__init__(storage, partition, _SINK_FORMATS[sink.format], _STAGED, state)
        except OSError as error:                    # its path a file, or not permitted
            raise type(error)(f"DirectorySink {storage.where}, partition {partition!r}: "
                              f"opening its directory failed: {describe(error)}") from error

    def open_file(self, name: str) -> StagedFile:
        return _SinkFile(self.storage, name, self.format, self.schema)

    def write(self, epoch: int, batch: Any) -> None:
        where = f"DirectorySink {self.storage.where}, partition {self.partition!r}, epoch {epoch}"
        try:
            super().write(epoch, batch)
        except OSError as error:                    # a full disk, a directory gone read-only
            raise OSError(f"{where}: writing its file failed: {describe(error)}") from error
        except (TypeError, ValueError, pa.ArrowException) as error:
            raise type(error)(f"{where}: {error}") from error


class DirectorySink:
    """A :class:`~sparktimely.ops.sinks.Sink` writing, for each worker (partition) and
    epoch, one file named ``part-<epoch>-<partition>.parquet`` (or ``.jsonl``) directly in
    ``path`` (created when missing).

    A file is written under a staged name starting with ``_`` and renamed to its visible name
    once its epoch is complete on that worker and, with a checkpoint directory, once the
    checkpoint holding it is committed; readers never see a partial file, and a resumed run
    neither loses nor repeats an epoch. Parquet: a RecordBatch as it is, dicts by key, tuples
    and lists as columns ``f0, f1, ...``, anything else as a column ``value``; a file holds one
    schema, so batches of an epoch whose columns differ (other names, or types that do not
    promote to one as ``pyarrow.unify_schemas`` does) go to further files of the epoch,
    ``part-<epoch>-<partition>-c001.parquet`` and on, at any number of workers. JSON lines: one
    record per line (a dict as an object, a tuple or list as an array, a RecordBatch row as
    an object), in strict JSON: a float NaN or infinity is written as the string ``"NaN"``,
    ``"Infinity"`` or ``"-Infinity"``, as Spark's JSON writer does (Spark's reader reads them
    back as doubles where its schema says double); dates, times and timestamps as ISO 8601
    strings and bytes in base64, as Spark writes them, a Decimal as a string of its digits.

    ``schema`` (a ``pyarrow.Schema``, Parquet only): every file gets it, whatever its
    records: dicts by its names (a missing key is null), tuples and lists by position, other
    values as its one column, RecordBatches' columns by name, cast to its types. Without it
    each file's types come from its own records, so a column that is all None in one worker's
    epoch is of Arrow's null type in that file only, and a reader of the directory may find
    the files' types incompatible; with it, the same types at any number of workers, and an
    epoch's batches always share one file.

    A run that does not resume a checkpoint removes nothing in ``path``: it replaces the
    files of the epochs and partitions it writes, and the files of an earlier run that it
    does not write stay, read with its own by a reader of the directory (those of workers
    beyond this run's, of epochs past its last, an epoch's ``-c001`` files when its batches
    now fit one file). Give a run that starts over an empty directory.

    >>> import tempfile, pyarrow.parquet as pq, sparktimely as st
    >>> folder = tempfile.mkdtemp()
    >>> st.example(lambda scope: scope.to_stream([("a", 1), ("b", 2)])
    ...            .output_to(DirectorySink(folder), "pairs"))
    >>> pq.read_table(folder).to_pylist()
    [{'f0': 'a', 'f1': 1}, {'f0': 'b', 'f1': 2}]
    """

    def __init__(self, path: Location, format: str = "parquet",
                 schema: pa.Schema | None = None) -> None:
        _check_format(format, list(_SINK_FORMATS), "DirectorySink")
        check_location("DirectorySink", path)
        if schema is not None:
            if not isinstance(schema, pa.Schema):
                raise TypeError(f"DirectorySink: schema must be a pyarrow.Schema, not "
                                f"{type(schema).__name__}")
            if format != "parquet":
                raise ValueError(f"DirectorySink: schema= is for format='parquet' (JSON "
                                 f"lines hold each record as it is), not {format!r}")
            if not len(schema):
                raise ValueError("DirectorySink: schema has no field")
        self.path = path
        self.format = format
        self.schema = schema

    def _storage(self) -> Storage:
        return Storage(self.path)

    def open(self, partition: str, resume_state: dict | None) -> _DirectoryPart:
        """Partition ``partition``'s part, resumed from ``resume_state`` (its ``snapshot()``
        in the checkpoint resumed, or None); it discards what was staged and not kept.

        >>> import pathlib, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> part = DirectorySink(folder, format="jsonl").open("0", None)
        >>> part.write(0, ["a", "b"]); part.commit(0)
        >>> pathlib.Path(folder, "part-0000000000-0.jsonl").read_text()
        '"a"\\n"b"\\n'
        """
        return _DirectoryPart(self, partition, resume_state)

    def discard_staged(self, doomed: Callable[[str], bool]) -> None:
        """Delete what crashed runs staged for the partitions ``doomed`` names (a worker's
        call at its start, for partitions that crashed runs with more workers had and that
        no one opens again: see :class:`~sparktimely.ops.sinks.Sink`).

        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> sink = DirectorySink(folder, format="jsonl")
        >>> part = sink.open("3", None); part.write(0, ["a"])     # staged, never committed
        >>> _ = part.snapshot()
        >>> sink.discard_staged(lambda partition: partition == "3")
        >>> os.listdir(folder)
        []
        """
        delete_staged(self._storage(), _STAGED, lambda part, _: doomed(part))
