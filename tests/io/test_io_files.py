"""FileSource and DirectorySink on their own (positions, formats, staging and commits) and as
``input_from_source``/``output_to`` in dataflows at 1, 2 and 3 workers, against what pyarrow
and json read from the same files."""
from __future__ import annotations

import base64
import datetime
import decimal
import json
import os
import posixpath
import re

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import sparktimely as st
from sparktimely.io import DirectorySink, FileSource
from sparktimely.testing import consolidate

from recovery_jobs import checkpointed

pytestmark = pytest.mark.timeout(60)


def table(rows: int, offset: int = 0) -> pa.Table:
    return pa.table({"n": list(range(offset, offset + rows)),
                     "word": [f"w{i % 7}" for i in range(offset, offset + rows)]})


@pytest.fixture
def files(tmp_path):
    """The same 23 rows as Parquet (row groups of 7), CSV, JSON lines and text."""
    data = table(23)
    paths = {"parquet": str(tmp_path / "data.parquet"), "csv": str(tmp_path / "data.csv"),
             "jsonl": str(tmp_path / "data.jsonl"), "text": str(tmp_path / "data.txt")}
    pq.write_table(data, paths["parquet"], row_group_size=7)
    pacsv.write_csv(data, paths["csv"])
    with open(paths["jsonl"], "w") as out:
        out.writelines(json.dumps(row) + "\n" for row in data.to_pylist())
    with open(paths["text"], "w") as out:
        out.writelines(f"{row['n']} {row['word']}\n" for row in data.to_pylist())
    return paths


def rows_of(batch) -> list:
    if isinstance(batch, pa.RecordBatch):
        return [(row["n"], row["word"]) for row in batch.to_pylist()]
    if batch and isinstance(batch[0], dict):
        return [(row["n"], row["word"]) for row in batch]
    return [(int(line.split()[0]), line.split()[1]) for line in batch]


def read_all(part) -> list:
    batches = []
    while True:
        try:
            batches.append(part.next_batch())
        except StopIteration:
            return batches


@pytest.mark.parametrize("format", ["parquet", "csv", "jsonl", "text"])
def test_a_file_is_read_in_fixed_batches_and_resumes_from_any_position(files, format):
    source = FileSource([files[format]], format=format, batch_rows=5, batches_per_epoch=2)
    assert source.partitions() == [files[format]]
    part = source.open(files[format], None)
    positions, batches = [part.snapshot()], []
    while True:
        try:
            epoch, batch = part.next_batch()
        except StopIteration:
            break
        batches.append((epoch, rows_of(batch)))
        positions.append(part.snapshot())
    assert batches == [(i // 2, [(n, f"w{n % 7}") for n in range(5 * i, min(5 * i + 5, 23))])
                       for i in range(5)]
    for k, position in enumerate(positions):
        resumed = source.open(files[format], position)
        assert [(e, rows_of(b)) for e, b in read_all(resumed)] == batches[k:]


@pytest.mark.parametrize("format", ["parquet", "csv", "jsonl", "text"])
def test_a_position_resumes_at_its_row_whatever_batch_rows_the_resumed_run_reads_in(files,
                                                                                  format):
    """Parquet and CSV positions counted batches, and a resume skipped batches times the new
    batch_rows: a run resumed with batch_rows 5 after 2 batches of 3 lost 4 rows."""
    before = FileSource([files[format]], format=format, batch_rows=3)
    part = before.open(files[format], None)
    first = [rows_of(part.next_batch()[1]) for _ in range(2)]
    after = FileSource([files[format]], format=format, batch_rows=5)
    rest = [rows_of(batch) for _, batch in read_all(after.open(files[format], part.snapshot()))]
    assert [len(batch) for batch in rest] == [5, 5, 5, 2]
    assert sum(first + rest, []) == [(n, f"w{n % 7}") for n in range(23)]


@pytest.mark.parametrize("format", ["parquet", "csv"])
def test_a_position_written_before_rows_were_counted_resumes_at_its_batches(files, format):
    """(batches read, 0, 0): as such checkpoints were written, by the same batch_rows."""
    source = FileSource([files[format]], format=format, batch_rows=5)
    rest = [rows_of(batch) for _, batch in read_all(source.open(files[format], (2, 0, 0)))]
    assert sum(rest, []) == [(n, f"w{n % 7}") for n in range(10, 23)]


@pytest.mark.parametrize("format", ["parquet", "csv", "jsonl"])
def test_event_times_give_each_batch_the_watermark_before_it_and_positions_keep_it(files, format):
    """Column ``n`` (0, 1, ..., 22) as event times: each batch of 5 is at the greatest
    earlier event time minus 4 (0 at first); a resumed read continues with that watermark."""
    source = FileSource([files[format]], format=format, batch_rows=5, event_time="n",
                        out_of_order=4)
    part = source.open(files[format], None)
    positions, batches = [part.snapshot()], []
    while True:
        try:
            epoch, batch = part.next_batch()
        except StopIteration:
            break
        batches.append((epoch, rows_of(batch)))
        positions.append(part.snapshot())
    assert [epoch for epoch, _ in batches] == [0, 0, 5, 10, 15]
    assert [len(p) for p in positions] == [4] * 6 and positions[-1][3] == 22 - 4
    for k, position in enumerate(positions):
        resumed = source.open(files[format], position)
        assert [(e, rows_of(b)) for e, b in read_all(resumed)] == batches[k:]


def test_event_times_are_checked_and_named(files, tmp_path):
    with pytest.raises(ValueError, match="needs a format other than text and no batches_per"):
        FileSource([files["text"]], format="text", event_time="n")
    with pytest.raises(ValueError, match="needs a format other than text and no batches_per"):
        FileSource([files["csv"]], format="csv", batches_per_epoch=2, event_time="n")
    with pytest.raises(ValueError, match="out_of_order must be a non-negative integer, got -2"):
        FileSource([files["csv"]], format="csv", event_time="n", out_of_order=-2)
    part = FileSource([files["parquet"]], event_time="when").open(files["parquet"], None)
    with pytest.raises(ValueError, match="has no event time column 'when' \\(columns n, word"):
        part.next_batch()
    part = FileSource([files["parquet"]], event_time="word").open(files["parquet"], None)
    with pytest.raises(TypeError, match="event time column 'word' is string, not an integer"):
        part.next_batch()
    path = tmp_path / "times.jsonl"
    path.write_text('{"ts": 1}\n{"ts": "noon"}\n')
    part = FileSource([str(path)], format="jsonl", event_time="ts").open(str(path), None)
    with pytest.raises(TypeError, match="the event time 'ts' of {'ts': 'noon'} is 'noon', not"):
        part.next_batch()


def test_a_jsonl_record_with_a_bad_event_time_is_named_with_its_line_and_not_passed(tmp_path):
    """The error named the record but not its line, and the position had moved past the
    batch it was in, which was never sent."""
    path = tmp_path / "times.jsonl"
    path.write_text('{"ts": 1}\n\n{"ts": 2}\n\n{"ts": "noon"}\n{"ts": 3}\n')
    part = FileSource([str(path)], format="jsonl", batch_rows=3, event_time="ts").open(
        str(path), None)
    assert part.next_batch() == (0, [{"ts": 1}, {"ts": 2}])
    sent = part.snapshot()
    assert sent == (1, 21, 3, 2)
    with pytest.raises(TypeError, match=f"FileSource: {path} line 5: the event time 'ts' of "
                                        f"{{'ts': 'noon'}} is 'noon', not an int"):
        part.next_batch()
    assert part.snapshot() == sent


def test_a_jsonl_line_that_is_not_json_is_named_with_its_line_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n{"a": \n')
    part = FileSource([str(path)], format="jsonl", batch_rows=10).open(str(path), None)
    with pytest.raises(ValueError, match=f"{path} line 4 is not JSON"):
        part.next_batch()
    assert part.snapshot() == (0, 0, 0)         # nothing sent, nothing passed


def test_a_text_line_that_is_not_utf8_is_named_with_its_line_number(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"one\ntwo\nthree\nfour \xff\nfive\n")
    part = FileSource([str(path)], format="text", batch_rows=2).open(str(path), None)
    assert part.next_batch()[1] == ["one", "two"]
    with pytest.raises(ValueError, match=f"{path} cannot be read as text: UnicodeDecodeError: "
                                         f".* invalid start byte; at line 4$"):
        part.next_batch()
    assert part.snapshot() == (1, 8, 2)         # after the lines sent, not past the bad ones


@pytest.mark.parametrize("content, message", [
    (b"n,word\n\n" + b"1,a\n" * 400_000 + b"x,b\n" + b"2,c\n" * 10,
     "ArrowInvalid: In CSV column #0: CSV conversion error to int64: invalid value 'x' "
     "\\(a CSV column's type is inferred .* or the file as Parquet\\); at line 400003$"),
    (b"n,word\n1,a\n\n2,b,c\n3,d\n",
     "ArrowInvalid: CSV parse error: Expected 2 columns, got 3: 2,b,c; at line 4$"),
    (b"n,word\n" + b"1,a\n" * 300_000 + b"\r\n" + b"2,b\n" * 200_000 + b"3\n",
     "ArrowInvalid: CSV parse error: Expected 2 columns, got 1: 3; at line 500003$"),
    (b'a,b\n1,"x\ny"\n2,"p\nq\nr"\n3,4,5\n',       # a row of several lines counts them all
     "ArrowInvalid: CSV parse error: Expected 2 columns, got 3: 3,4,5; at line 7$")],
    ids=["conversion", "parse in the first block", "parse after an empty CRLF line",
         "parse after quoted line breaks"])
def test_a_csv_row_that_cannot_be_read_is_named_with_its_line_and_not_passed(tmp_path, content,
                                                                             message):
    """pyarrow's errors of a CSV row name no row when it reads on many threads: the file
    was named, not where in it to look. Lines count the header and empty lines (which
    pyarrow's rows skip); the position stays after the rows sent."""
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    source, part, sent = FileSource([str(path)], format="csv", batch_rows=100_000), None, 0
    with pytest.raises(ValueError, match=f"FileSource: {path} cannot be read as csv: "
                                         f"{message}"):
        part = source.open(str(path), None)     # reads the first block
        while True:
            sent += part.next_batch()[1].num_rows
    assert part is None or part.snapshot()[2] == sent


@pytest.mark.parametrize("format, content, message", [
    ("parquet", b"not parquet", "ArrowInvalid: Parquet magic bytes not found"),
    ("text", b"\xff\xfe", "UnicodeDecodeError: 'utf-8' codec can't decode"),
    ("csv", b"n,word\n" + b"1,a\n" * 400_000 + b"x,b\n",
     "ArrowInvalid: In CSV column #0: CSV conversion error to int64: invalid value 'x' "
     "\\(a CSV column's type is inferred")])
def test_a_file_that_cannot_be_read_is_named(tmp_path, format, content, message):
    path = tmp_path / f"bad.{format}"
    path.write_bytes(content)
    part = FileSource([str(path)], format=format, batch_rows=100_000).open(str(path), None)
    with pytest.raises(ValueError, match=f"FileSource: {path} cannot be read as {format}: "
                                         f"{message}"):
        while True:
            part.next_batch()


def test_a_parquet_file_damaged_inside_a_row_group_is_named(tmp_path):
    """pyarrow tells a page it cannot decode as an OSError, which was passed on without the
    file's name ("Couldn't deserialize thrift")."""
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"i": list(range(1000)), "s": ["x" * 30] * 1000}), path,
                   row_group_size=200, compression="snappy")
    at = pq.ParquetFile(path).metadata.row_group(1).column(1).data_page_offset
    data = bytearray(path.read_bytes())
    for k in range(at + 40, at + 200):
        data[k] ^= 0x5A
    path.write_bytes(bytes(data))
    part = FileSource([str(path)], batch_rows=100).open(str(path), None)
    with pytest.raises(ValueError, match=f"FileSource: {path} cannot be read as parquet: "
                                         f"OSError: "):
        while True:
            part.next_batch()


def test_an_empty_csv_file_has_no_rows(tmp_path):
    """A 0-byte CSV file (no header) reads as no batches, as empty files of the other
    formats do."""
    path = tmp_path / "empty.csv"
    path.write_bytes(b"")
    part = FileSource([str(path)], format="csv").open(str(path), None)
    with pytest.raises(StopIteration):
        part.next_batch()


@pytest.mark.parametrize("format", ["text", "jsonl"])
def test_a_resumed_read_of_lines_reads_what_was_appended_and_refuses_a_continued_line(
        tmp_path, format):
    """A last line read without its line end (the file ended inside it) may be ended later,
    not continued: a continuation read on its own would be a line the file never had."""
    path = str(tmp_path / f"lines.{format}")
    line = (lambda n: f"{n} w{n}") if format == "text" else (lambda n: json.dumps({"n": n, "word": f"w{n}"}))
    with open(path, "w") as out:
        out.write(f"{line(1)}\n{line(2)}")                # line 2 has no line end yet
    source = FileSource([path], format=format, batch_rows=5)
    part = source.open(path, None)
    first = read_all(part)
    position = part.snapshot()
    assert [(epoch, rows_of(batch)) for epoch, batch in first] == [(0, [(1, "w1"), (2, "w2")])]
    assert read_all(source.open(path, position)) == []       # nothing more: nothing read

    with open(path, "a") as out:
        out.write("\r\n" + line(3) + "\n")                  # ends line 2, then line 3
    part = source.open(path, position)
    rest = read_all(part)
    assert [(epoch, rows_of(batch)) for epoch, batch in rest] == [(1, [(3, "w3")])]
    assert read_all(source.open(path, part.snapshot())) == []

    with open(path, "a") as out:
        out.write(line(4))                                    # line 4 unended ...
    part = source.open(path, part.snapshot())
    assert len(read_all(part)) == 1
    with open(path, "a") as out:
        out.write("5 more\n")                                # ... and continued
    with pytest.raises(ValueError, match=re.escape(
            f"FileSource: {path} line 4 had no line end when a checkpointed run read it")):
        source.open(path, part.snapshot()).next_batch()

    with open(path, "w") as out:
        out.write(f"{line(1)}\n")                            # replaced by a shorter file
    with pytest.raises(ValueError, match=re.escape(
            f"FileSource: {path} has {len(line(1)) + 1} bytes, fewer than the "
            f"{position[1]} a checkpointed run read")):
        source.open(path, position).next_batch()


def test_a_resumed_csv_read_refuses_a_continued_last_row_it_had_read(tmp_path):
    """A CSV file's last row read without its line end and continued later was read as the
    row it was, and the rest of it lost: positions count rows, and the next run went on
    after the row."""
    path = str(tmp_path / "rows.csv")
    with open(path, "wb") as out:
        out.write(b"n,word\n1,w1\n2,w2")                     # row 2: no line end yet
    source = FileSource([path], format="csv", batch_rows=1)
    part = source.open(path, None)
    with open(path, "ab") as out:
        out.write(b"\r\n3,w3")           # written while it is read: read by the next run
    assert [rows_of(batch) for _, batch in read_all(part)] == [[(1, "w1")], [(2, "w2")]]
    part = source.open(path, part.snapshot())
    not_yet_read = part.snapshot()
    assert [rows_of(batch) for _, batch in read_all(part)] == [[(3, "w3")]]
    with open(path, "ab") as out:
        out.write(b"3\n4,w4\n")                              # row 3 continued: 3,w33
    with pytest.raises(ValueError, match=re.escape(
            f"FileSource: {path} row 3 had no line end when a checkpointed run read it as the "
            f"file's last row, and the file has since continued that row")):
        source.open(path, part.snapshot())
    assert [rows_of(batch) for _, batch in read_all(source.open(path, not_yet_read))] == \
        [[(3, "w33")], [(4, "w4")]]


def test_checkpointed_runs_read_growing_csv_files_row_by_row_at_any_worker_count(
        run, tmp_path):
    """Rows appended between checkpointed runs are read once each, a last row without its
    line end is ended by what is appended, and a continued one stops the run naming the
    file and the row, with what the runs wrote kept; as pyarrow reads the files whole."""
    folder, out = tmp_path / "in", str(tmp_path / "out")
    folder.mkdir()
    files = {"f0.csv": b"n,word\n0,a\n1,b", "f1.csv": b"n,word\n10,c\n",
             "f2.csv": b"n,word\n20,d\n21,e"}
    for name, text in files.items():
        (folder / name).write_bytes(text)

    def job(worker):
        worker.dataflow(lambda scope: scope.input_from_source(
            FileSource(str(folder), format="csv", batch_rows=1), "rows").output_to(
            DirectorySink(out), "out"), name="rows")

    def written() -> list:
        return sorted(row for name in os.listdir(out) if not name.startswith("_")
                      for row in rows_of(pq.read_table(os.path.join(out, name)).to_pylist()))

    def rows_in_the_files() -> list:
        return sorted(row for name in files
                      for row in rows_of(pacsv.read_csv(folder / name).to_pylist()))
    runs = checkpointed(job, tmp_path / "ck")
    run(runs)
    assert written() == rows_in_the_files()
    for name, more in {"f0.csv": b"\n2,x\n", "f1.csv": b"11,y\n"}.items():
        with open(folder / name, "ab") as file:
            file.write(more)
    run(runs)
    assert written() == rows_in_the_files()
    kept = written()
    with open(folder / "f2.csv", "ab") as file:
        file.write(b"z\n22,w\n")                      # continues row 2, 21,e
    with pytest.raises(st.WorkerError, match=re.escape(
            f"FileSource: {folder}/f2.csv row 2 had no line end when a checkpointed run read "
            f"it as the file's last row")):
        run(runs)
    assert written() == kept


def test_a_line_end_written_halfway_waits_for_its_second_byte(tmp_path):
    """A writer ending a line with \\r\\n may have written only the \\r when a run
    resumes: that was told as a continued line."""
    path = str(tmp_path / "lines.txt")
    with open(path, "w", newline="") as out:
        out.write("l1\r\nl2")
    source = FileSource([path], format="text", batch_rows=5)
    part = source.open(path, None)
    assert read_all(part) == [(0, ["l1", "l2"])]
    with open(path, "a", newline="") as out:
        out.write("\r")
    resumed = source.open(path, part.snapshot())
    assert read_all(resumed) == [] and resumed.snapshot() == part.snapshot()
    with open(path, "a", newline="") as out:
        out.write("\nl3\r\n")
    assert read_all(source.open(path, part.snapshot())) == [(1, ["l3"])]


@pytest.mark.parametrize("format", ["parquet", "csv"])
def test_a_file_with_fewer_rows_than_a_resumed_position_is_refused(tmp_path, format):
    """A CSV file was read as having nothing more (and rows written to it later were
    skipped as if read)."""
    path = str(tmp_path / f"rows.{format}")
    write = (lambda data: pq.write_table(data, path)) if format == "parquet" else \
        (lambda data: pacsv.write_csv(data, path))
    write(table(9))
    source = FileSource([path], format=format, batch_rows=4)
    part = source.open(path, None)
    read_all(part)
    write(table(12))                                             # grown: the rest is read
    assert [rows_of(b) for _, b in read_all(source.open(path, part.snapshot()))] == \
        [[(n, f"w{n % 7}") for n in range(9, 12)]]
    for rows in (5, 0):
        write(table(rows))
        with pytest.raises(ValueError, match=re.escape(
                f"FileSource: {path} has {rows} rows, fewer than the 9 a checkpointed run "
                f"read")):
            read_all(source.open(path, part.snapshot()))
    open(path, "w").close()                                      # no header either
    if format == "csv":
        with pytest.raises(ValueError, match=re.escape(f"{path} has 0 rows, fewer than")):
            read_all(source.open(path, part.snapshot()))


def test_one_file_given_under_two_paths_is_refused(tmp_path, monkeypatch):
    """An absolute and a relative path to one file, or a path through a symbolic link, were
    two partitions: the file's rows were read twice, without a word."""
    (tmp_path / "a.jsonl").write_text('{"x": 1}\n')
    (tmp_path / "b.jsonl").write_text('{"x": 2}\n')
    os.symlink(tmp_path / "a.jsonl", tmp_path / "link.jsonl")
    monkeypatch.chdir(tmp_path)
    absolute = str(tmp_path / "a.jsonl")
    for twin in ("a.jsonl", str(tmp_path / "link.jsonl")):
        with pytest.raises(ValueError, match=rf"FileSource: {re.escape(absolute)} and "
                                             rf"{re.escape(twin)} are one file"):
            FileSource([absolute, twin], format="jsonl").partitions()
    assert FileSource([absolute, "b.jsonl"], format="jsonl").partitions() == [absolute,
                                                                               "b.jsonl"]


def test_a_directory_lists_its_visible_files_in_order_each_time(tmp_path):
    for name in ("b.txt", "a.txt", "_hidden.txt", ".dot"):
        (tmp_path / name).write_text("x\n")
    source = FileSource(str(tmp_path), format="text")
    assert source.partitions() == ["a.txt", "b.txt"]      # named in the directory
    (tmp_path / "c.txt").write_text("y\n")
    assert source.partitions()[-1] == "c.txt"
    assert source.open("c.txt", None).next_batch() == (0, ["y"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        FileSource(str(tmp_path / "nowhere")).partitions()
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        FileSource(str(tmp_path), format="xml")


def test_files_are_read_once_each_at_their_epochs_at_any_worker_count(run, tmp_path):
    paths = []
    for f in range(5):
        paths.append(str(tmp_path / f"part{f}.parquet"))
        pq.write_table(table(9 + f, offset=100 * f), paths[-1], row_group_size=4)

    def job(worker):
        captured = worker.dataflow(lambda scope: scope.input_from_source(
            FileSource(tmp_path, batch_rows=3), "numbers").exchange(key="n").capture())
        worker.run()
        return captured.extract()
    got = consolidate(run(job))
    expected: dict = {}
    for f in range(5):
        for i, n in enumerate(range(100 * f, 100 * f + 9 + f)):
            expected.setdefault(i // 3, []).append(n)
    assert [(e, sorted(t.column("n").to_pylist())) for e, t in got] == \
        [(e, sorted(ns)) for e, ns in sorted(expected.items())]


def test_csv_files_of_several_read_blocks_read_as_pyarrow_reads_them_whole(run, tmp_path):
    """pyarrow reads a CSV file in blocks of 1 MiB: rows, and a quoted value whose line
    break is just before a block's end, that straddle a block boundary are read as one
    reading of the whole file reads them, each row once, at any worker count."""
    block = 1 << 20
    lines, size = ["n,word,score"], 0
    while size < 2 * block + 1000:                     # rows straddle two boundaries
        n = len(lines) - 1
        lines.append(f"{n},{'w' * (n * 7 % 61)},{n * 0.25}")
        size += len(lines[-1]) + 1
    (tmp_path / "big.csv").write_text("\n".join(lines) + "\n")
    head = "n,word,score\n" + "".join(f"{n},{'x' * 40},{n}.5\n" for n in range(18_000))
    broken = block - len(head) - 20                    # the quoted line break's offset
    quoted = f'18000,"{"q" * broken}\n{"z" * 100}, ""done""",1.0\n'
    (tmp_path / "quoted.csv").write_text(head + quoted + "18001,after,2.0\n")
    assert (head + quoted).index("\n", len(head)) < block < len(head + quoted)
    (tmp_path / "small.csv").write_text("n,word,score\n1,a,0.5\n")

    def job(worker):
        captured = worker.dataflow(lambda scope: scope.input_from_source(
            FileSource(tmp_path, format="csv", batch_rows=5000), "rows").capture())
        worker.run()
        return captured.extract()
    got = sorted((row["n"], row["word"], row["score"]) for part in run(job)
                 for _, rows in part for row in rows.to_pylist())
    expected = []
    for name in ("big.csv", "quoted.csv", "small.csv"):
        path = tmp_path / name
        whole = pacsv.read_csv(path, read_options=pacsv.ReadOptions(
            block_size=path.stat().st_size + 1), parse_options=pacsv.ParseOptions(
            newlines_in_values=True))
        expected += [(row["n"], row["word"], row["score"]) for row in whole.to_pylist()]
    assert len(expected) > 40_000
    assert got == sorted(expected)


class Scripted:
    """A source whose partitions return scripted answers (``None``: nothing yet)."""

    def __init__(self, script):
        self.script = script

    def partitions(self):
        return list(self.script)

    def open(self, partition, resume_state):
        return ScriptedPart(list(self.script[partition]))


class ScriptedPart:
    def __init__(self, answers):
        self.answers = answers

    def next_batch(self):
        if not self.answers:
            raise StopIteration
        return self.answers.pop(0)

    def snapshot(self):
        return len(self.answers)


def test_a_source_with_nothing_yet_is_asked_again_and_its_epochs_hold_the_frontier(run):
    script = {f"p{i}": [None, (0, [f"p{i}a"]), None, None, (2, [f"p{i}b"]), (2, [f"p{i}c"]),
                        (5, [f"p{i}d"])] for i in range(4)}

    def job(worker):
        captured = worker.dataflow(
            lambda scope: scope.input_from_source(Scripted(script), "scripted").capture())
        worker.run()
        return captured.extract()
    assert consolidate(run(job)) == [
        (0, sorted(f"p{i}a" for i in range(4))),
        (2, sorted(f"p{i}{x}" for i in range(4) for x in "bc")),
        (5, sorted(f"p{i}d" for i in range(4)))]


@pytest.mark.parametrize("answers, message", [
    ([(3, ["x"]), (1, ["y"])], "partition 'p': epoch 1 after epoch 3; epochs must not decrease"),
    ([("one", ["x"])], "epoch 'one' is not a non-negative int"),
    ([(0, "text")], "a batch must be a list or a pyarrow.RecordBatch, got str"),
    ([[1, 2, 3]], r"next_batch\(\) must return \(epoch, batch\)"),
])
def test_a_source_breaking_the_protocol_is_named(answers, message):
    with pytest.raises(st.OperatorError, match=f"source 'bad'.*{message}"):
        st.example(lambda scope: scope.input_from_source(Scripted({"p": answers}), "bad")
                   .probe())


def test_staged_files_become_visible_only_when_committed(tmp_path):
    sink = DirectorySink(str(tmp_path / "out"), format="jsonl")
    part = sink.open("3", None)
    part.write(1, [{"a": 1}, ("x", 2)])
    part.write(0, [[1, 2]])
    part.write(1, pa.RecordBatch.from_pylist([{"b": None}]))
    names = sorted(os.listdir(tmp_path / "out"))
    assert names == ["_staged-part-0000000000-3.jsonl", "_staged-part-0000000001-3.jsonl"]
    state = part.snapshot()
    assert state == {"staged": [(0, names[0]), (1, names[1])]}
    part.commit(0)
    assert sorted(os.listdir(tmp_path / "out")) == ["_staged-part-0000000001-3.jsonl",
                                                   "part-0000000000-3.jsonl"]
    # a resumed part keeps what its state lists, drops other staged files of its partition
    part.write(2, [{"c": 3}])
    part.snapshot()
    resumed = sink.open("3", state)
    assert "_staged-part-0000000002-3.jsonl" not in os.listdir(tmp_path / "out")
    resumed.commit(1)
    resumed.commit(1)                                   # idempotent
    assert sorted(os.listdir(tmp_path / "out")) == ["part-0000000000-3.jsonl",
                                                   "part-0000000001-3.jsonl"]
    lines = (tmp_path / "out" / "part-0000000001-3.jsonl").read_text().splitlines()
    assert lines == ['{"a": 1}', '["x", 2]', '{"b": null}']


def test_parquet_columns_from_dicts_tuples_values_and_record_batches(tmp_path):
    for records, columns in [([{"a": 1, "b": "x"}], {"a": [1], "b": ["x"]}),
                             ([(1, "x"), (2, "y")], {"f0": [1, 2], "f1": ["x", "y"]}),
                             ([3.5, 4.5], {"value": [3.5, 4.5]}),
                             (pa.RecordBatch.from_pylist([{"k": "z"}]), {"k": ["z"]})]:
        folder = tmp_path / str(len(os.listdir(tmp_path)))
        part = DirectorySink(str(folder)).open("0", None)
        part.write(7, records)
        part.commit(7)
        assert pq.read_table(folder / "part-0000000007-0.parquet").to_pydict() == columns
    part = DirectorySink(str(tmp_path / "mixed")).open("0", None)
    part.write(0, [(1, "x")])
    with pytest.raises(ValueError, match="partition '0', epoch 0: .*records of 2 fields and of 1"):
        part.write(0, [(1, "x"), (2,)])


@pytest.mark.parametrize("format", ["parquet", "jsonl"])
def test_a_sink_file_that_cannot_be_written_names_the_sink_partition_and_epoch(
        tmp_path, monkeypatch, format):
    """A full disk was told as pyarrow's OSError, naming only the operator."""
    from sparktimely.io import _storage

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(_storage.Storage, "open_output", full)
    part = DirectorySink(str(tmp_path), format=format).open("0", None)
    with pytest.raises(OSError, match=rf"^DirectorySink {re.escape(str(tmp_path))}, partition "
                                      rf"'0', epoch 4: writing its file failed: OSError: "
                                      rf"\[Errno 28\] No space left on device$"):
        part.write(4, ["a"])



def test_a_sink_path_that_is_a_file_names_the_sink(run, tmp_path):
    """A DirectorySink whose path is a file failed with pyarrow's "Cannot create directory
    ...: non-directory entry exists", naming neither the sink nor its partition."""
    path = tmp_path / "out"
    path.write_text("not a directory")

    def job(worker):
        worker.dataflow(lambda scope: scope.to_stream([1, 2, 3]).output_to(
            DirectorySink(str(path), format="jsonl"), "out"))
        worker.run()
    with pytest.raises(st.WorkerError, match=rf"FileExistsError: DirectorySink "
                                             rf"{re.escape(str(path))}, partition '\d+': "
                                             rf"opening its directory failed: "):
        run(job)
    assert path.read_text() == "not a directory"


def test_parquet_columns_take_the_types_of_every_batch_of_an_epoch(tmp_path):
    """Batches of Python records are cut by the runtime: a column None in one batch and
    ints (then floats) in the next is one column of the epoch's type; types that do not
    fit one column go to another file of the epoch."""
    part = DirectorySink(str(tmp_path / "ok")).open("0", None)
    for batch in ([{"v": None}] * 3, [{"v": 1}], [{"v": 2.5}]):
        part.write(0, batch)
    part.commit(0)
    table = pq.read_table(tmp_path / "ok" / "part-0000000000-0.parquet")
    assert table.schema.field("v").type == pa.float64()
    assert table.column("v").to_pylist() == [None, None, None, 1.0, 2.5]
    part = DirectorySink(str(tmp_path / "two")).open("0", None)
    for batch in ([{"v": 1}], [{"v": "a"}], [{"v": None}], [{"v": 2.5}]):
        part.write(0, batch)
    part.commit(0)
    assert {name: pq.read_table(tmp_path / "two" / name).to_pydict()
            for name in os.listdir(tmp_path / "two")} == {
        "part-0000000000-0.parquet": {"v": [1.0, None, 2.5]},
        "part-0000000000-0-c001.parquet": {"v": ["a"]}}


SCHEMA = pa.schema({"k": pa.string(), "v": pa.int64()})
KEYS = [f"k{i}" for i in range(12)]


@pytest.mark.parametrize("form", ["dicts", "tuples", "batches"])
def test_a_sink_schema_gives_every_file_its_types_at_any_worker_count(run, tmp_path, form):
    """Without a schema each worker's file took its types from its own records: a column
    all None in one worker's epoch was of Arrow's null type there and int64 elsewhere, and
    reading the directory failed ("Unsupported cast from int64 to null") at some worker
    counts only."""
    out = tmp_path / "out"
    rows = [(key, None if i % 3 else i) for i, key in enumerate(KEYS)]

    def job(worker):
        mine = [row for i, row in enumerate(rows) if i % worker.peers == worker.index]

        def build(scope):
            if form == "batches":          # int32 and an extra column: cast and dropped
                stream = scope.to_stream(pa.table({
                    "v": pa.array([v for _, v in mine], pa.int32()), "k": [k for k, _ in mine],
                    "extra": [1.5] * len(mine)})).exchange(key="k")
            else:
                records = mine if form == "tuples" else [{"v": v, "k": k} for k, v in mine]
                stream = scope.to_stream(records).exchange(
                    lambda r: st.stable_hash(r[0] if form == "tuples" else r["k"]))
            stream.output_to(DirectorySink(str(out), schema=SCHEMA), "out")
        worker.dataflow(build, name="sink")
        worker.run()
    run(job)
    for name in os.listdir(out):
        assert pq.read_schema(out / name).equals(SCHEMA), name
    read = pq.read_table(out).to_pylist()
    assert sorted((r["k"], r["v"]) for r in read) == sorted(rows)


def test_a_sink_schema_refuses_records_that_do_not_fit_it_naming_them(tmp_path):
    part = DirectorySink(str(tmp_path / "out"), schema=SCHEMA).open("0", None)
    with pytest.raises(ValueError, match=r"DirectorySink .*, partition '0', epoch 3: the record "
                                         r"\{'k': 'a', 'v': 1, 'w': 2\} has keys the sink's "
                                         r"schema has no column for \('w'\)"):
        part.write(3, [{"k": "a", "v": 1}, {"k": "a", "v": 1, "w": 2}])
    with pytest.raises(ValueError, match=r"the record \('a',\) does not have the 2 fields"):
        part.write(3, [("a", 1), ("a",)])
    with pytest.raises(ValueError, match=r"the batch has no column 'v' of the sink's schema"):
        part.write(3, pa.record_batch({"k": ["a"]}))
    with pytest.raises(pa.ArrowException, match=r"epoch 3: .*"):
        part.write(3, [{"k": "a", "v": "not a number"}])
    with pytest.raises(TypeError, match="schema must be a pyarrow.Schema, not dict"):
        DirectorySink(str(tmp_path), schema={"k": "string"})
    with pytest.raises(ValueError, match="schema= is for format='parquet'"):
        DirectorySink(str(tmp_path), format="jsonl", schema=SCHEMA)


def test_output_is_visible_per_epoch_once_complete_at_any_worker_count(run, tmp_path):
    out = str(tmp_path / "out")

    def job(worker):
        def build(scope):
            numbers = scope.to_stream(range(worker.index, 60, worker.peers))
            numbers.delay(lambda x, t: x // 20).map(lambda x: {"x": x}).output_to(
                DirectorySink(out), "numbers")
        worker.dataflow(build)
    run(job)
    got = {}
    for name in os.listdir(out):
        assert not name.startswith("_")
        epoch = int(name.split("-")[1])
        got.setdefault(epoch, []).extend(pq.read_table(os.path.join(out, name)).column("x")
                                         .to_pylist())
    assert {e: sorted(xs) for e, xs in got.items()} == {e: list(range(20 * e, 20 * e + 20))
                                                        for e in range(3)}


def strict_json(line: str):
    """``line`` parsed as strict JSON (json.loads takes NaN and Infinity; jq and Spark's
    writer do not write them)."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(line, parse_constant=refuse)


def test_jsonl_output_is_strict_json_with_non_finite_floats_as_spark_writes_them(run, tmp_path):
    """Python's json.dumps wrote bare NaN and Infinity, which strict readers refuse."""
    out = str(tmp_path / "out")
    special = [1.5, float("nan"), float("inf"), float("-inf")]

    def job(worker):
        def build(scope):
            mine = range(worker.index, 12, worker.peers)
            records = scope.to_stream([{"i": i, "x": special[i % 4], "xs": (i, special[i % 4])}
                                       for i in mine])
            records.output_to(DirectorySink(out, format="jsonl"), "records")
            records.map(lambda r: {"i": r["i"] + 100, "x": r["x"]}).to_arrow(
                pa.schema([("i", pa.int64()), ("x", pa.float64())])).output_to(
                DirectorySink(out + "-arrow", format="jsonl"), "batches")
        worker.dataflow(build)
    run(job)
    written = ["1.5", "NaN", "Infinity", "-Infinity"]
    got = sorted((strict_json(line) for folder in (out, out + "-arrow")
                  for name in os.listdir(folder)
                  for line in open(os.path.join(folder, name))), key=lambda r: r["i"])
    spelled = [1.5 if i % 4 == 0 else written[i % 4] for i in range(12)]
    assert got == [{"i": i, "x": spelled[i], "xs": [i, spelled[i]]} for i in range(12)] + \
        [{"i": i + 100, "x": spelled[i]} for i in range(12)]


def test_jsonl_output_writes_temporal_binary_and_decimal_values_as_spark_reads_them(
        run, tmp_path):
    """A Parquet source's timestamp, date or binary column written as JSON lines failed with
    "Object of type datetime is not JSON serializable"."""
    out = str(tmp_path / "out")
    utc = datetime.timezone.utc
    rows = pa.table({
        "i": pa.array(range(6), pa.int64()),
        "at": pa.array([datetime.datetime(2026, 12, 7, 13, i, tzinfo=utc) for i in range(6)],
                       pa.timestamp("ms", tz="UTC")),
        "day": pa.array([datetime.date(2026, 12, i + 1) for i in range(6)], pa.date32()),
        "raw": pa.array([bytes([i, 255]) for i in range(6)], pa.binary()),
        "price": pa.array([decimal.Decimal(f"{i}.10") for i in range(6)], pa.decimal128(5, 2))})

    def job(worker):
        share = -(-rows.num_rows // worker.peers)
        mine = rows.slice(worker.index * share, share)
        worker.dataflow(lambda scope: scope.to_stream(mine).exchange(key="i").output_to(
            DirectorySink(out, format="jsonl"), "rows"))
    run(job)
    got = sorted((strict_json(line) for name in os.listdir(out)
                  for line in open(os.path.join(out, name))), key=lambda r: r["i"])
    assert got == [{"i": i, "at": f"2026-12-07T13:{i:02d}:00+00:00",
                    "day": f"2026-12-{i + 1:02d}",
                    "raw": base64.b64encode(bytes([i, 255])).decode(),
                    "price": f"{i}.10"} for i in range(6)]


def test_parquet_batches_of_two_schemas_go_to_files_of_their_own_at_any_worker_count(
        run, tmp_path):
    """At 1 worker both schemas met in one file, an error; at 2 and 3 each worker's file held
    one and the run passed. Every file holds one schema; a batch of another goes to a file of
    its own (``-c001``), staged and committed with its epoch."""
    out = str(tmp_path / "out")
    numbers = pa.schema([("k", pa.int64())])
    words = pa.schema([("k", pa.string()), ("v", pa.float64())])

    def job(worker):
        def build(scope):
            first = worker.index == 0
            last = worker.index == worker.peers - 1
            ks = scope.to_stream([{"k": i} for i in range(6)] if first else [])
            kvs = scope.to_stream([{"k": f"w{i}", "v": i / 2} for i in range(4)] if last else [])
            mixed = ks.to_arrow(numbers).concat(kvs.to_arrow(words))
            later = scope.to_stream([("x", 1)] if first else []).delay(lambda r, t: 1)
            mixed.concat(later).output_to(DirectorySink(out), "mixed")
        worker.dataflow(build)
    run(job)
    names = os.listdir(out)
    assert not [name for name in names if name.startswith("_")]
    by_schema: dict = {}
    for name in names:
        got = pq.read_table(os.path.join(out, name))
        by_schema.setdefault((int(name.split("-")[1]), str(got.schema)), []).extend(
            got.to_pylist())
    assert {key: sorted(rows, key=str) for key, rows in by_schema.items()} == {
        (0, str(numbers)): [{"k": i} for i in range(6)],
        (0, str(words)): [{"k": f"w{i}", "v": i / 2} for i in range(4)],
        (1, str(pa.schema([("f0", pa.string()), ("f1", pa.int64())]))): [{"f0": "x", "f1": 1}]}
    if run.workers == 1:
        assert sorted(names) == ["part-0000000000-0-c001.parquet", "part-0000000000-0.parquet",
                                 "part-0000000001-0.parquet"]


def test_dicts_of_different_keys_in_one_batch_keep_every_key_at_any_worker_count(run, tmp_path):
    """A batch of dicts became the columns of its first dict: the keys only later dicts had
    were lost in silence. Every key of the batch is a column (in the order first seen); a
    dict without it has null there."""
    out = str(tmp_path / "out")
    records = [{"a": 1}, {"a": 2, "b": "x"}, {"c": 1.5, "a": 3}, {"b": "y"}]

    def job(worker):
        worker.dataflow(lambda scope: scope.to_stream(records if worker.index == 0 else [])
                        .output_to(DirectorySink(out), "sparse"))
    run(job)
    rows = [row for name in sorted(os.listdir(out))
            for row in pq.read_table(os.path.join(out, name)).to_pylist()]
    assert [{k: v for k, v in row.items() if v is not None} for row in rows] == records
    assert all(list(row) == ["a", "b", "c"] for row in rows)


def test_an_epochs_second_parquet_file_is_staged_committed_and_discarded_with_the_first(
        tmp_path):
    sink = DirectorySink(str(tmp_path))
    part = sink.open("1", None)
    part.write(0, [{"a": 1}])
    part.write(0, [{"b": "x"}])
    state = part.snapshot()
    assert state == {"staged": [(0, "_staged-part-0000000000-1-c001.parquet"),
                                (0, "_staged-part-0000000000-1.parquet")]}
    part.write(1, [{"a": 2}])
    part.write(1, [{"b": "y"}])
    part.snapshot()
    resumed = sink.open("1", state)           # epoch 1's files were not kept: deleted
    assert sorted(os.listdir(tmp_path)) == sorted(name for _, name in state["staged"])
    resumed.commit(0)
    assert sorted(os.listdir(tmp_path)) == ["part-0000000000-1-c001.parquet",
                                           "part-0000000000-1.parquet"]
    assert pq.read_table(tmp_path / "part-0000000000-1-c001.parquet").to_pylist() == \
        [{"b": "x"}]
    other = sink.open("1", None)
    other.write(2, [{"a": 3}])
    other.write(2, [{"b": "z"}])
    other.snapshot()
    sink.discard_staged(lambda partition: partition == "1")
    assert sorted(os.listdir(tmp_path)) == ["part-0000000000-1-c001.parquet",
                                           "part-0000000000-1.parquet"]


@pytest.mark.parametrize("name, error", [("missing.jsonl", FileNotFoundError), ("", OSError)])
def test_a_listed_file_that_cannot_be_opened_is_named(tmp_path, name, error):
    """A missing file (or a directory) in a list of paths was told as pyarrow's error
    ("Failed to open local file"), without naming the source."""
    path = str(tmp_path / name) if name else str(tmp_path)
    with pytest.raises(error, match=f"FileSource: {re.escape(path)} cannot be opened: "):
        FileSource([path], format="jsonl").open(posixpath.normpath(path), None)
