"""Per-card spending sessions over card transactions, with an alert when a session's spend
passes a threshold.

Each Parquet file is one payment terminal's transactions (``id``, ``card``, ``ts`` in epoch
milliseconds, ``amount`` in cents) in the order the terminal sent them: event times mostly
rising, some a few seconds behind, a few half an hour behind. ``FileSource(event_time="ts",
out_of_order=10_000)`` reads each file as a partition and sends each batch at that file's
watermark (its greatest event time so far minus 10 s); the frontier over all files is the
global watermark.

Session windows per card (``win.Session``: transactions less than 5 minutes apart) sum
the spend on the Arrow batches (``group_by``, no Python per row). When the watermark passes
a session's end, its total comes out once; a session over ``THRESHOLD`` is an alert.
Transactions too late for any open session are reported instead of silently dropped.

Beside the windows, a differential join keeps "the last hour's transactions of blocked
cards" up to date: each transaction is present from its event time (or its arrival, if
later) until an hour after it (``active_between``, a temporal filter), and is joined with a
blocklist that changes during the run (cards blocked and unblocked at given times, an
``dd.InputSession``). Whenever the blocklist changes, the report lists the flagged
transactions of the hour before, as the join maintains them: no recount from scratch.

    python examples/fraud_sessions.py -w 2          (writes its data to a temporary directory)
    python examples/fraud_sessions.py --folder DIR -w 2   (reads the Parquet files in DIR)

Without ``--folder`` the sample data is written to a temporary directory removed at the end;
with ``--checkpoint-dir CK`` it is kept in ``CK/_sample-transactions`` instead, so that a
resumed run reads the same files. A job of several processes (``-n``) needs one folder they
all read: ``--folder`` or ``--checkpoint-dir``.
"""
from __future__ import annotations

import contextlib
import os
import random
import sys
import tempfile

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import sparktimely as st
import sparktimely.differential as dd
import sparktimely.windows as win
from sparktimely.io import FileSource

GAP = 5 * 60_000                  # a session ends after 5 minutes without a transaction
THRESHOLD = 150_000               # cents: an alert for a session spending more than 1500.00
CARDS = [f"card{i:03d}" for i in range(150)]
HOUR = 3_600_000
BLOCKLIST = [(20 * 60_000, "card050", 1), (35 * 60_000, "card000", 1),
             (50 * 60_000, "card100", 1), (62 * 60_000, "card050", -1),
             (75 * 60_000, "card007", 1)]
"""Changes of the blocklist: ``(time, card, +1 blocked / -1 unblocked)``."""


def write_transactions(folder: str, terminals: int = 3, rows: int = 240,
                       seed: int = 7) -> None:
    """One Parquet file per terminal. Transactions come every 0-40 s (event time) from a
    random card; one card per terminal has a burst of large ones; one transaction in 40
    arrives 30 minutes after its event time, others up to 8 s after."""
    os.makedirs(folder, exist_ok=True)
    rng = random.Random(seed)
    for terminal in range(terminals):
        ts, sent = 0, []
        burst = CARDS[terminal * 50]
        for i in range(rows):
            ts += rng.randrange(40_000)
            bursting = rows // 3 <= i < rows // 3 + 12
            card = burst if bursting else rng.choice(CARDS)
            amount = rng.randrange(20_000, 40_000) if bursting else rng.randrange(500, 9_000)
            delay = 30 * 60_000 if i % 40 == 39 else rng.randrange(8_000)
            sent.append((ts + delay, terminal * 10_000 + i, card, ts, amount))
        sent.sort()
        pq.write_table(pa.table({"id": [s[1] for s in sent], "card": [s[2] for s in sent],
                                 "ts": [s[3] for s in sent], "amount": [s[4] for s in sent]}),
                       os.path.join(folder, f"terminal-{terminal}.parquet"))


def fraud_sessions(worker: st.Worker, folder: str,
                   blocklist: list[tuple[int, str, int]] = BLOCKLIST) -> dict[str, list]:
    """This worker's reports for the files in ``folder``: ``sessions`` and
    ``alerts`` as ``(time, card, start, end, spent, transactions)``, ``late`` as
    ``(time, id)``, and ``flagged``, the changes of the last hour's transactions of blocked
    cards, as ``(time, card, id, amount, diff)`` (``blocklist`` as :data:`BLOCKLIST`)."""
    reports: dict[str, list] = {"sessions": [], "alerts": [], "late": [], "flagged": []}
    blocked = dd.InputSession()

    def rows(name: str, columns: list[str]):
        def keep(time, batch):
            reports[name] += [(time, *row) for row in zip(*(batch.column(c).to_pylist()
                                                           for c in columns))]
        return keep

    def build(scope):
        transactions = scope.input_from_source(
            FileSource(folder, batch_rows=20, event_time="ts", out_of_order=10_000),
            "transactions")
        sessions = transactions.window(win.Session(GAP), time_of="ts", key="card",
                                       aggregate={"spent": ("sum", "amount"),
                                                  "transactions": ("count", None)})
        summary = ["card", "window_start", "window_end", "spent", "transactions"]
        sessions.results.inspect_batch(rows("sessions", summary))
        (sessions.results.filter_batches(lambda b: pc.greater(b.column("spent"), THRESHOLD))
         .inspect_batch(rows("alerts", summary)))
        sessions.late.inspect_batch(rows("late", ["id"]))
        # The last hour's transactions: present from ``ts`` (or their arrival) to ts + 1 h.
        recent = dd.from_stream(transactions.map_batches(
            lambda b: b.append_column("until", pc.add(b.column("ts"), HOUR)))
        ).active_between("ts", "until")
        flagged = recent.join(blocked.to_collection(scope), on="card")
        flagged.inner.inspect_batch(rows("flagged", ["card", "id", "amount", "diff"]))
    worker.dataflow(build, name="fraud-sessions")
    if worker.index == 0:
        for time, card, diff in sorted(blocklist):
            blocked.advance_to(time)
            blocked.update_batch(pa.record_batch({"card": [card], "diff": [diff]}))
    blocked.close()
    worker.run()
    return reports


def clock(ms: int) -> str:
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}"


def flagged_at(flagged: list, time: int) -> dict[tuple[str, int], int]:
    """The flagged transactions ``(card, id) -> amount`` at ``time``: the changes up to it
    added up."""
    present: dict = {}
    for at, card, id, amount, diff in flagged:
        if at <= time:
            present[card, id, amount] = present.get((card, id, amount), 0) + diff
    return {(card, id): amount for (card, id, amount), n in present.items() if n}


def report(parts: list[dict[str, list]],
           blocklist: list[tuple[int, str, int]] = BLOCKLIST) -> list[str]:
    """The lines to print: alerts, then how many sessions, then the blocked cards'
    transactions of the last hour at each change of the blocklist, then the late
    transactions."""
    alerts, sessions, late, flagged = (sorted(r for part in parts for r in part[name])
                                       for name in ("alerts", "sessions", "late", "flagged"))
    lines = ([f"ALERT {card}: {spent / 100:.2f} in {n} transactions, {clock(start)} to "
              f"{clock(end - GAP)}" for _, card, start, end, spent, n in alerts] +
             [f"{len(sessions)} sessions, {len(alerts)} over {THRESHOLD / 100:.2f}"])
    for time, card, diff in sorted(blocklist):
        now = flagged_at(flagged, time)
        cards = sorted({c for c, _ in now})
        lines.append(f"{clock(time)} {'block' if diff > 0 else 'unblock'} {card}: "
                     f"{len(now)} transactions of blocked cards in the last hour, "
                     f"{sum(now.values()) / 100:.2f}" + (f" ({', '.join(cards)})" if cards else ""))
    return lines + [f"late transaction {id} (arrived at watermark {clock(time)})"
                    for time, id in late]


def main(argv: list[str]) -> list[str]:
    parser = st.timely_parser(description=__doc__)
    parser.add_argument("--folder", metavar="DIR", help="the Parquet files to read (default: "
                        "write sample transactions to a temporary folder)")
    options = parser.parse_args(argv)
    folder = options.folder
    with contextlib.ExitStack() as cleanup:
        if folder is None and options.checkpoint_dir is not None:
            folder = os.path.join(options.checkpoint_dir, "_sample-transactions")
            if not os.path.isdir(folder):
                write_transactions(folder)
        elif folder is None and options.processes > 1:
            # each process would write its own sample, and a file is read by the worker its
            # path routes to: files of one process's folder would be read by a worker of
            # the other, which has no such file, or by none
            parser.error("argument --folder: a job of several processes (-n) reads its "
                         "Parquet files from one folder every process can read: give "
                         "--folder (or --checkpoint-dir, which holds a sample folder)")
        elif folder is None:
            folder = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="transactions-"))
            write_transactions(folder)
        elif not os.path.isdir(folder):
            parser.error(f"argument --folder: {folder!r} is not a directory")
        parts = st.execute_from_args(options, lambda worker: fraud_sessions(worker, folder))
    if options.processes == 1:
        return report(parts)
    return [f"process {options.process} of {options.processes}: the part of the report its "
            f"workers hold (every process prints its own)", *report(parts)]


if __name__ == "__main__":
    print("\n".join(main(sys.argv[1:])))
