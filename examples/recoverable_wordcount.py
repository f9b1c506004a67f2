"""Running word counts over a directory of text files, written as Parquet, that survive being
killed: rerun it with the same checkpoint directory and it continues after the last
checkpoint, with every count and every output file exactly once.

Each text file is a partition of a ``FileSource``; its lines ``[i * k, (i + 1) * k)`` are
epoch ``i`` (``k`` is ``--lines-per-epoch``). Words are split and counted per epoch as Arrow
columns (``aggregate_batches``); a running-totals operator keeps each worker's totals as an
Arrow table that epoch checkpoints hold (``scope.recoverable``) and sends, per epoch, the new
total of every word counted in it. A ``DirectorySink`` writes one Parquet file per worker and
epoch, ``part-<epoch>-<worker>.parquet`` with columns ``word`` and ``total``; a file appears
only once its epoch is checkpointed.

    python examples/recoverable_wordcount.py INPUT_DIR OUTPUT_DIR --checkpoint-dir CKPT -w2

Files added to INPUT_DIR later are read by the next run (after the epochs already done).
"""
from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import sparktimely as st
from sparktimely.hashing import hash_rows
from sparktimely.io import DirectorySink, FileSource
from sparktimely.execute import at_least

LINES_PER_EPOCH = 1000

_TOTALS = pa.schema([("word", pa.string()), ("total", pa.int64()), ("route", pa.uint64())])


def words_of(lines: list[str]) -> pa.RecordBatch:
    """The words of some lines, as a one-column batch (split by pyarrow, not per line).

    >>> words_of(["a  b", "", " c "]).column("word").to_pylist()
    ['a', 'b', 'c']
    """
    pieces = pc.utf8_split_whitespace(pa.array(lines, pa.string())).flatten()
    return pa.RecordBatch.from_arrays([pieces.filter(pc.not_equal(pieces, ""))], ["word"])


def add_counts(totals: pa.Table, counts: pa.Table) -> tuple[pa.Table, pa.RecordBatch]:
    """``totals`` (word, total, route) plus ``counts`` (word, n): the new totals, and the new
    total of each counted word.

    >>> totals = pa.table({"word": ["a"], "total": [2], "route": pa.array([0], pa.uint64())})
    >>> totals, changed = add_counts(totals, pa.table({"word": ["a", "b"], "n": [1, 5]}))
    >>> sorted(changed.to_pylist(), key=lambda row: row["word"])
    [{'word': 'a', 'total': 3}, {'word': 'b', 'total': 5}]
    """
    both = pa.concat_tables([totals.select(["word", "total"]),
                             counts.select(["word", "n"]).rename_columns(["word", "total"])])
    summed = both.group_by("word").aggregate([("total", "sum")])
    merged = pa.table({"word": summed.column("word"), "total": summed.column("total_sum")})
    merged = merged.append_column("route", pa.array(hash_rows(merged, "word"), pa.uint64()))
    changed = merged.join(counts.select(["word"]), "word", join_type="left semi").select(
        ["word", "total"])
    return merged, changed.combine_chunks().to_batches()[0] if changed.num_rows else \
        pa.RecordBatch.from_pylist([], pa.schema([("word", pa.string()), ("total", pa.int64())]))


def running_totals(counts: st.Stream) -> st.Stream:
    """Per epoch, the running total of each word counted in it (``counts``: batches of word
    and n, exchanged by word). The totals live in one Arrow table per worker, routed by the
    same hash of ``word`` as the exchange, so a resumed run at any worker count gets them
    back on the worker its words go to."""
    scope = counts.scope

    def ctor(capability: Any, info: Any) -> Any:
        capability.drop()
        totals = [_TOTALS.empty_table()]
        scope.recoverable(info, lambda: totals[0], lambda table: totals.__setitem__(0, table),
                          route="route")
        waiting: dict = {}

        def logic(input: Any, output: Any) -> None:
            for cap, batch in input:
                waiting.setdefault(cap.time, (cap.retain(), []))[1].append(batch)
            for time in sorted(t for t in waiting if not input.frontier.less_equal(t)):
                cap, batches = waiting.pop(time)
                totals[0], changed = add_counts(totals[0], pa.Table.from_batches(batches))
                output.give_at(cap, changed)
        return logic
    return counts.unary_frontier(st.Pipeline, "RunningTotals", ctor)


def wordcount(worker: st.Worker, input_dir: str, output_dir: str,
              lines_per_epoch: int = LINES_PER_EPOCH) -> None:
    """Build the running word count of the text files in ``input_dir`` into ``output_dir``."""
    def build(scope: st.Scope) -> None:
        lines = scope.input_from_source(
            FileSource(input_dir, format="text", batch_rows=lines_per_epoch), "lines")
        words = lines.unary(st.Pipeline, "Words", lambda cap, info: _words(cap))
        counts = words.aggregate_batches("word", {"n": ("count", None)})
        running_totals(counts).output_to(DirectorySink(output_dir), "totals")
    worker.dataflow(build, name="recoverable-wordcount")


def _words(capability: Any) -> Any:
    capability.drop()

    def logic(input: Any, output: Any) -> None:
        for cap, lines in input:
            output.give_at(cap, words_of(lines))
    return logic


def written(output_dir: str) -> dict[int, int]:
    """The files visible in ``output_dir``: epoch -> how many (one per worker that wrote).

    >>> import tempfile, pathlib
    >>> folder = tempfile.mkdtemp()
    >>> for name in ("part-0000000003-0.parquet", "part-0000000003-1.parquet", "_staged-x"):
    ...     _ = (pathlib.Path(folder) / name).write_text("")
    >>> written(folder)
    {3: 2}
    """
    epochs: dict[int, int] = {}
    names = os.listdir(output_dir) if os.path.isdir(output_dir) else []
    for name in names:
        parts = name.split("-")
        if name.startswith("part-") and len(parts) == 3 and parts[1].isdigit():
            epochs[int(parts[1])] = epochs.get(int(parts[1]), 0) + 1
    return epochs


def summary(options: Any, before: dict[int, int], after: dict[int, int]) -> str:
    """What a run did, for its user: what it read, which files it wrote where, for which
    epochs, and where its checkpoints are."""
    files = FileSource(options.input, format="text").partitions()
    new = {epoch: n - before.get(epoch, 0) for epoch, n in after.items()
           if n > before.get(epoch, 0)}
    lines = [f"recoverable_wordcount: {len(files)} text file(s) in {options.input}, "
             f"{options.lines_per_epoch} lines of each per epoch"]
    if before:
        lines.append(f"  {options.output} already held epochs {min(before)}..{max(before)}: "
                     f"this run went on after them")
    if new:
        lines.append(f"  wrote {sum(new.values())} file(s) to {options.output} for epochs "
                     f"{min(new)}..{max(new)}: part-<epoch>-<worker>.parquet, columns word "
                     f"and total (the running totals of the words counted in that epoch)")
    else:
        lines.append(f"  wrote nothing new to {options.output}: every epoch was done already")
    if options.checkpoint_dir is not None:
        lines.append(f"  checkpoints in {options.checkpoint_dir}: a rerun with the same "
                     f"--checkpoint-dir goes on after epoch {max(after, default=0)} "
                     f"(files added to {options.input} are read then)")
    else:
        lines.append("  no --checkpoint-dir: a rerun starts over")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = st.timely_parser(description=__doc__)
    parser.add_argument("input", metavar="INPUT_DIR", help="a directory of text files")
    parser.add_argument("output", metavar="OUTPUT_DIR",
                        help="where the Parquet files go (made when missing)")
    parser.add_argument("--lines-per-epoch", type=at_least(1), default=LINES_PER_EPOCH, metavar="N",
                        help=f"lines of each file per epoch (default {LINES_PER_EPOCH})")
    options = parser.parse_args(argv)
    if not os.path.isdir(options.input):
        parser.error(f"the input directory {options.input} does not exist"
                     if not os.path.exists(options.input) else
                     f"{options.input} is not a directory")
    if options.lines_per_epoch < 1:
        parser.error(f"--lines-per-epoch must be a positive integer, got "
                     f"{options.lines_per_epoch}")
    before = written(options.output)
    st.execute_from_args(options, lambda worker: wordcount(
        worker, options.input, options.output, options.lines_per_epoch))
    print(summary(options, before, written(options.output)))


if __name__ == "__main__":
    main()
