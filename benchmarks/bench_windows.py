"""Event-time windows (``stream.window`` on Arrow batches) beside bytewax 0.21 and PySpark
Structured Streaming, and the ``active_between`` sliding count beside Pathway's ``windowby``.

    python -m benchmarks.bench_windows [--quick] [--no-spark] [--no-bytewax] [--no-pathway]

The stream (the same for every engine, made by :func:`events`): EVENTS events over KEYS int
keys, RATE events per millisecond of event time (10M events span 1,000 s), each with an int
value; one event in 100 carries an event time up to 5 s (DISORDER) behind its place. Every
engine's watermark is the greatest event time seen minus 5 s, so no event is late. ``--quick``
divides the sizes by 10.

- sparktimely: the stream split between the workers (event ``i`` to worker ``i % workers``,
  as partitions of a log), sent in batches of BATCH rows through an ``st.InputHandle``, each
  followed by ``advance_to(greatest event time so far - 5 s)`` and one ``worker.step()``, as
  a streaming input loop does (the tumbling count also with the whole input sent before the
  first step: a burst, which leaves the two workers less to overlap); ``window(kind,
  time_of="ts", key="key", aggregate={...})``; a probe on the results. Throughput: events
  over the seconds from the first batch sent until the probe is done (every window closed,
  every result out), the slowest worker. In each worker process one untimed warm-up run of a
  tenth of the stream comes first, then RUNS timed runs, each in a fresh dataflow; the table
  gives the best, the notes the range. The sum of the tumbling counts is checked to equal
  the number of events, and every run's number of result rows to agree across worker counts.
- bytewax 0.21 (one worker, ``run_main``): ``count_window``, ``max_window`` and
  ``fold_window`` (a sum, ``ordered=False``) with an ``EventClock`` (waiting 5 s; its
  ``now_getter`` fixed and ``to_system_utc`` returning None, so that the watermark follows the
  data as in the other engines, not the wall clock of a replay) and a Tumbling, Sliding or
  Session windower, over a ``TestingSource`` of ``(key, (datetime, value))`` items (batches of
  100,000, built before the clock starts). bytewax runs on the first BYTEWAX_EVENTS events
  only: its window operators cost it work per key at every activation, and at 100k keys it
  takes in about 10k events/s, so the whole stream would take it 15-40 minutes per figure;
  by 1M events every key is in every window, so the prefix runs at its steady rate.
- PySpark Structured Streaming (``local[2]``, ``spark.sql.shuffle.partitions=2``): the stream
  as Parquet files of FILE_ROWS rows (``ts`` a timestamp), read by ``readStream.parquet``
  with ``maxFilesPerTrigger`` making micro-batches of SPARK_TRIGGER_ROWS rows,
  ``withWatermark("ts", "5 seconds")``, ``groupBy(window(...), "key")`` with ``count()`` or
  ``max("value")``, append mode into the ``noop`` sink, ``Trigger.AvailableNow``, over the
  first SPARK_EVENTS events (4 micro-batches: steady state is reached by the second). Steady-state
  throughput: the input rows of every micro-batch but the first, over the sum of their
  ``triggerExecution`` durations (from ``query.recentProgress``): session start-up, query
  planning and the first micro-batch's code generation are left out.
- Result latency (sparktimely): a stream of LATENCY_EVENTS events per minute (keys drawn
  from LATENCY_KEYS or from KEYS), one batch per minute of event time, tumbling 1-minute
  counts. Before each window end every worker advances its input to the window's close time
  and steps until its probe has passed it (all data in and applied); then each advances to
  the next millisecond at a taken instant, and steps until its probe passes it (the
  window's results, computed and sent, have passed the probe). Latency: the last worker's
  probe passing minus the last worker's advance (one clock for all worker processes).
  Median and p99 over LATENCY_ROUNDS windows, after 3 warm-up windows.
- Spark's micro-batch trigger latency: the same windows through a file stream source with
  the default trigger and a ``foreachBatch`` sink: from a file of the next minute's events
  appearing in the watched folder (the data that moves Spark's watermark past the window's
  end) to the window's rows at the sink: the file's micro-batch, then the one that emits.
- A long sliding window (its own section): an hour sliding by the second (3,600 panes a
  window) over SENSORS sensors reading once a second, Python records and Arrow batches, beside
  a tumbling second over the same readings (both close one window per sensor a second) and
  bytewax's ``SlidingWindower`` (on the first BYTEWAX_SENSOR_SECONDS seconds).
- ``active_between`` sliding count: bench_differential's sliding section (the same
  function and data as there), run from here; Pathway 0.33 ``windowby`` is its peer.
- 2 workers / 1 worker: the best throughputs of each; and the same by CPU time (events per
  CPU second of the busiest worker process), which says what two cores of their own would
  give the workers on a machine whose cores are busy with other work.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.acero  # noqa: F401  (group_by's engine, loaded on first use: 20-50 ms)

import sparktimely as st
import sparktimely.windows as win

from ._util import Goal, Row, Section, run_script
from .bench_differential import latency, sliding_section

HERE = Path(__file__).resolve().parent
QUICK = 10                          # --quick divides the sizes by this
EVENTS, KEYS, RATE, DISORDER, OUT_OF_ORDER = 10_000_000, 100_000, 10, 5_000, 0.01
BATCH = 100_000                     # rows per input batch (sparktimely)
RUNS = 3                            # timed runs per worker count (after a warm-up run)
BYTEWAX_EVENTS = 1_000_000          # bytewax runs on this prefix of the stream
BYTEWAX_BATCH = 100_000
SPARK_EVENTS = 4_000_000            # Spark runs on this prefix: a warm-up and 3 micro-batches
FILE_ROWS, SPARK_TRIGGER_ROWS = 100_000, 1_000_000
MINUTE = 60_000
LATENCY_EVENTS, LATENCY_KEYS, LATENCY_ROUNDS, LATENCY_WARMUP = 1_000, 1_000, 50, 3
LARGE_WINDOW_ROUNDS = 20            # windows of the benchmark's own size: RATE * MINUTE events
SPARK_LATENCY_ROUNDS = 10
SENSORS, SENSOR_SECONDS, BYTEWAX_SENSOR_SECONDS = 10, 2_000, 120     # the long sliding window

# kind -> (window, Arrow aggregate, what bytewax and Spark compute)
WORKLOADS = {
    "tumbling": (win.Tumbling(MINUTE), {"n": ("count", None)}),
    "sliding": (win.Sliding(5 * MINUTE, MINUTE), {"high": ("max", "value")}),
    "session": (win.Session(30_000), {"total": ("sum", "value")}),
}
LABELS = {"tumbling": "tumbling 1-min count", "sliding": "sliding 5-min / 1-min max",
          "session": "session (gap 30 s) sum"}


def events(n: int, keys: int = KEYS, rate: int = RATE, start: int = 0,
           seed: int = 1) -> pa.Table:
    """The stream: ``key``, ``ts`` (ms), ``value`` (all int64); ``rate`` events per ms from
    ``start``, one in 100 up to DISORDER ms behind its place (never before ``start``).

    >>> events(5, keys=3, rate=2).column("ts").to_pylist()
    [0, 0, 1, 1, 2]
    """
    rng = np.random.default_rng(seed)
    ts = start + np.arange(n, dtype=np.int64) // rate
    behind = rng.random(n) < OUT_OF_ORDER
    ts[behind] -= rng.integers(1, DISORDER + 1, int(behind.sum()))
    return pa.table({"key": rng.integers(0, keys, n), "ts": np.maximum(ts, start),
                     "value": rng.integers(0, 1_000, n)})


def minute_events(minute: int, n: int, keys: int) -> pa.Table:
    """``n`` events of keys below ``keys`` with event times spread over minute ``minute``.

    >>> minute_events(2, 3, 10).column("ts").to_pylist()
    [137909, 144828, 168853]
    """
    rng = np.random.default_rng(minute)
    return pa.table({"key": rng.integers(0, keys, n),
                     "ts": np.sort(minute * MINUTE + rng.integers(0, MINUTE, n)),
                     "value": rng.integers(0, 1_000, n)})


def send(handle: st.InputHandle, batches: list, watermark: int,
         step: Callable[[], object] | None = None) -> int:
    """Each batch, then the input advanced to its watermark (the greatest event time so far
    minus DISORDER) and ``step()`` if given (a streaming input loop steps its worker after
    each batch); returns the watermark."""
    for batch in batches:
        handle.send_batch(batch)
        high = int(np.asarray(batch.column("ts")).max()) - DISORDER
        if high > watermark:
            watermark = high
            handle.advance_to(watermark)
        if step is not None:
            step()
    return watermark


# -- sparktimely ---------------------------------------------------------------------------------

def throughput(kind: str, n: int, workers: int, stepping: bool = True) -> dict:
    """Events per second of the window ``kind`` over ``n`` events on ``workers`` processes:
    each timed run's figure (the slowest worker), the same per CPU second of the busiest
    worker, and the result rows of the runs. ``stepping``: each worker steps after each
    input batch (a streaming input loop); otherwise it sends its whole input, then steps."""
    window, aggregate = WORKLOADS[kind]

    def one_run(worker, batches: list) -> tuple[float, float, int, int]:
        handle = st.InputHandle()
        rows, counted = [0], [0]

        def build(scope):
            results = scope.input_from(handle).window(window, time_of="ts", key="key",
                                                      aggregate=aggregate).results

            def tally(time, batch) -> None:
                rows[0] += batch.num_rows
                if "n" in batch.schema.names:
                    counted[0] += int(np.asarray(batch.column("n")).sum())
            results.inspect_batch(tally)
            return results.probe()
        probe = worker.dataflow(build)
        worker.step()
        started, cpu = time.perf_counter(), time.process_time()
        send(handle, batches, 0, worker.step if stepping else None)
        handle.close()
        worker.step_while(lambda: not probe.done())
        return (time.perf_counter() - started, time.process_time() - cpu, rows[0],
                counted[0])

    def job(worker):
        table = events(n)
        mine = table.filter(pa.array(np.arange(n) % worker.peers == worker.index))
        batches = mine.combine_chunks().to_batches(max_chunksize=BATCH)
        one_run(worker, batches[:max(1, len(batches) // 10)])          # warm-up, untimed
        return [one_run(worker, batches) for _ in range(RUNS)]
    parts = st.execute(job, workers=workers)
    rates, cpu_rates, rows = [], [], []
    for run in range(RUNS):
        rates.append(n / max(part[run][0] for part in parts))
        cpu_rates.append(n / max(part[run][1] for part in parts))
        rows.append(sum(part[run][2] for part in parts))
        counted = sum(part[run][3] for part in parts)
        if kind == "tumbling" and counted != n:
            raise AssertionError(f"tumbling count: the counts add up to {counted}, not {n}")
    if len(set(rows)) != 1:
        raise AssertionError(f"{kind}: runs gave different numbers of results: {rows}")
    return {"rates": rates, "cpu_rates": cpu_rates, "rows": rows[0]}


def result_latency(workers: int, keys: int, per_window: int, rounds: int) -> dict:
    """Median and p99 ms from the watermark passing a tumbling window's end (the last
    worker's advance) to the probe passing it on every worker."""
    def job(worker):
        handle = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(handle).window(
            win.Tumbling(MINUTE), time_of="ts", key="key",
            aggregate={"n": ("count", None)}).results.probe())
        marks = []
        for i in range(rounds + LATENCY_WARMUP):
            minute = minute_events(i, per_window, keys)
            mine = minute.filter(pa.array(np.arange(per_window) % worker.peers == worker.index))
            handle.send_batch(mine.combine_chunks().to_batches()[0])
            close = (i + 1) * MINUTE - 1
            handle.advance_to(close)
            worker.step_while(lambda: probe.less_than(close))
            advanced = time.perf_counter()
            handle.advance_to(close + 1)
            worker.step_while(lambda: probe.less_than(close + 1))
            marks.append((advanced, time.perf_counter()))
        handle.close()
        worker.step_while(lambda: not probe.done())
        return marks
    parts = st.execute(job, workers=workers)
    seconds = [max(part[i][1] for part in parts) - max(part[i][0] for part in parts)
               for i in range(LATENCY_WARMUP, rounds + LATENCY_WARMUP)]
    median, p99 = latency(seconds)
    return {"median": median, "p99": p99}


def sensor_readings(second: int, sensors: int = SENSORS) -> list:
    """One reading ``(sensor, event time in ms, value)`` per sensor at ``second``.

    >>> sensor_readings(2, sensors=2)
    [(0, 2000, 2.0), (1, 2000, 3.0)]
    """
    return [(k, second * 1000, float(second + k)) for k in range(sensors)]


def readings_window(kind: win.Sliding, arrow: bool, seconds: int = SENSOR_SECONDS) -> float:
    """Microseconds per reading of ``kind``'s means per sensor over SENSORS sensors reading
    once a second, one timely time (and one step until the probe passes it) per second, in
    one worker; the stream's end (the windows still open then) is not timed. Python records
    or Arrow batches (``arrow``)."""
    def job(worker):
        handle = st.InputHandle()

        def build(scope):
            stream = scope.input_from(handle)
            out = (stream.window(kind, time_of="ts", key="sensor",
                                 aggregate={"mean": ("mean", "value")}) if arrow else
                   stream.window(kind, time_of=lambda r: r[1], key=lambda r: r[0],
                                 aggregate=win.mean(lambda r: r[2])))
            return out.results.probe()
        probe = worker.dataflow(build)
        batches = [sensor_readings(second) for second in range(seconds)]
        if arrow:
            batches = [pa.RecordBatch.from_pylist(
                [{"sensor": k, "ts": ts, "value": v} for k, ts, v in batch]) for batch in batches]
        started = time.perf_counter()
        for second, batch in enumerate(batches):
            handle.send_batch(batch)
            handle.advance_to((second + 1) * 1000)
            worker.step_while(lambda: probe.less_than((second + 1) * 1000))
        elapsed = time.perf_counter() - started
        handle.close()
        return elapsed
    return st.execute_directly(job) / (seconds * SENSORS) * 1e6


def long_sliding_section(bytewax: bool) -> Section:
    """An hour sliding by the second against a tumbling second over the same readings (each
    closes one window per sensor a second), and bytewax's sliding windower."""
    hour, second = win.Sliding(3_600_000, 1_000), win.Tumbling(1_000)
    peer_rate = (peer(f"bytewax_sensors_peer({BYTEWAX_SENSOR_SECONDS})", "bench") if bytewax
                 else "not run (--no-bytewax)")
    bytewax_figure: float | str = (peer_rate if isinstance(peer_rate, str)
                                   else float(peer_rate["us"]))
    rows = []
    for arrow in (False, True):
        long = statistics.median(readings_window(hour, arrow) for _ in range(3))
        short = statistics.median(readings_window(second, arrow) for _ in range(3))
        peers = {} if arrow else {"bytewax 0.21": bytewax_figure}
        goals = [Goal("<=", 2, "tumbling 1 s")] + ([] if arrow else
                                                    [Goal("<=", 0.05, "bytewax 0.21")])
        rows.append(Row(f"sliding 1 h / 1 s mean, per reading, "
                        f"{'Arrow batches' if arrow else 'Python records'}",
                        f"{SENSORS} sensors x {SENSOR_SECONDS:,} s", "us", long, peers,
                        {"tumbling 1 s": short}, goals=goals))
    return Section("A long sliding window (an hour by the second: 3,600 panes a window)", rows,
                   notes=[
        f"{SENSORS} sensors reading once a second for {SENSOR_SECONDS:,} s of event time, "
        "one timely time a second (send, advance, step until the probe passes), 1 worker; "
        "the mean per sensor; the windows still open at the end are not timed; median of 3 "
        "runs. Both kinds close one window per sensor a second, so the ratio is what the "
        "window's 3,600 panes cost beyond a window of one",
        f"bytewax: fold_window with SlidingWindower(1 h, 1 s) over the first "
        f"{BYTEWAX_SENSOR_SECONDS} s of the same readings (each reading is in 3,600 windows "
        "there), one worker (run_main), microseconds per reading"], key="long_sliding").print()


# -- peers (each in a fresh interpreter: ``python -c``, through run_script) -----------------

def bytewax_peer(kind: str, n: int) -> None:
    """bytewax 0.21's window ``kind`` over the first ``n`` events; prints its JSON figures."""
    import operator
    from datetime import datetime, timedelta, timezone

    import bytewax.operators as op
    import bytewax.operators.windowing as bw
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSource, run_main
    table = events(n)
    stamps = table.column("ts").cast(pa.timestamp("ms", tz="UTC")).to_pylist()
    keys = [f"k{k}" for k in table.column("key").to_pylist()]
    items = list(zip(keys, zip(stamps, table.column("value").to_pylist())))
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    wait = timedelta(milliseconds=DISORDER)

    def clock(ts_getter):
        return bw.EventClock(ts_getter, wait_for_system_duration=wait,
                             now_getter=lambda: epoch, to_system_utc=lambda ts: None)
    flow = Dataflow("windows")
    stream = op.input("in", flow, TestingSource(items, batch_size=BYTEWAX_BATCH))
    if kind == "tumbling":
        out = bw.count_window("count", stream, clock(lambda item: item[1][0]),
                              bw.TumblingWindower(timedelta(minutes=1), epoch),
                              lambda item: item[0])
    elif kind == "sliding":
        out = bw.max_window("max", stream, clock(lambda v: v[0]),
                            bw.SlidingWindower(timedelta(minutes=5), timedelta(minutes=1),
                                               epoch), by=lambda v: v[1])
    else:
        out = bw.fold_window("sum", stream, clock(lambda v: v[0]),
                             bw.SessionWindower(timedelta(seconds=30)), lambda: 0,
                             lambda total, v: total + v[1], operator.add, ordered=False)
    tally = {"results": 0, "late": 0}

    def count(name: str):
        def add(step, item) -> None:
            tally[name] += 1
        return add
    op.inspect("results", out.down, count("results"))
    op.inspect("late", out.late, count("late"))
    started = time.perf_counter()
    run_main(flow)
    print(json.dumps({"rate": n / (time.perf_counter() - started), **tally}))


def bytewax_sensors_peer(seconds: int) -> None:
    """bytewax's mean per sensor over an hour sliding by the second, on the first ``seconds``
    of :func:`sensor_readings`; prints microseconds per reading (JSON)."""
    from datetime import datetime, timedelta, timezone

    import bytewax.operators as op
    import bytewax.operators.windowing as bw
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSource, run_main
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    items = [(str(k), (epoch + timedelta(milliseconds=ts), v))
             for second in range(seconds) for k, ts, v in sensor_readings(second)]
    clock: bw.EventClock = bw.EventClock(lambda v: v[0], wait_for_system_duration=timedelta(0),
                          now_getter=lambda: epoch, to_system_utc=lambda ts: None)
    flow = Dataflow("sensors")
    stream = op.input("in", flow, TestingSource(items, batch_size=SENSORS))
    out = bw.fold_window("mean", stream, clock,
                         bw.SlidingWindower(timedelta(hours=1), timedelta(seconds=1),
                                            epoch - timedelta(hours=1)),
                         lambda: (0.0, 0), lambda acc, v: (acc[0] + v[1], acc[1] + 1),
                         lambda a, b: (a[0] + b[0], a[1] + b[1]), ordered=False)
    op.inspect("results", out.down, lambda step, item: None)
    started = time.perf_counter()
    run_main(flow)
    print(json.dumps({"us": (time.perf_counter() - started) / len(items) * 1e6}))


def spark_session():
    from pyspark.sql import SparkSession
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "6g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_table(table: pa.Table) -> pa.Table:
    """The stream as Spark reads it: ``ts`` a timestamp (ms since 1970, UTC)."""
    return table.set_column(1, "ts", table.column("ts").cast(pa.timestamp("ms")))


def spark_peer(kind: str, n: int, trigger_rows: int) -> None:
    """PySpark Structured Streaming's windowed ``kind`` over ``n`` events from Parquet files,
    ``trigger_rows`` per micro-batch; prints its steady-state rate (JSON)."""
    with tempfile.TemporaryDirectory(prefix="windows-spark-") as folder:
        figures = _spark_throughput(kind, n, trigger_rows, folder)
    print(json.dumps(figures))


def _spark_throughput(kind: str, n: int, trigger_rows: int, folder: str) -> dict:
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F
    table = spark_table(events(n))
    os.makedirs(f"{folder}/in")
    for i, start in enumerate(range(0, n, FILE_ROWS)):
        pq.write_table(table.slice(start, FILE_ROWS), f"{folder}/in/part-{i:05d}.parquet")
    spark = spark_session()
    stream = (spark.readStream.schema("key LONG, ts TIMESTAMP, value LONG")
              .option("maxFilesPerTrigger", max(1, trigger_rows // FILE_ROWS))
              .parquet(f"{folder}/in").withWatermark("ts", f"{DISORDER // 1000} seconds"))
    if kind == "tumbling":
        query = stream.groupBy(F.window("ts", "1 minute"), "key").count()
    else:
        query = stream.groupBy(F.window("ts", "5 minutes", "1 minute"), "key").agg(
            F.max("value"))
    running = (query.writeStream.outputMode("append").format("noop")
               .trigger(availableNow=True).option("checkpointLocation", f"{folder}/checkpoint")
               .start())
    running.awaitTermination()
    batches = [p for p in running.recentProgress if p["numInputRows"]]
    steady = batches[1:]
    rows = sum(p["numInputRows"] for p in steady)
    seconds = sum(p["durationMs"]["triggerExecution"] for p in steady) / 1e3
    spark.stop()
    if sum(p["numInputRows"] for p in batches) != n:
        raise AssertionError("Spark read another number of rows than it was given")
    return {"rate": rows / seconds, "batches": len(batches)}


def spark_latency_peer(rounds: int) -> None:
    """Spark's trigger latency for tumbling 1-minute counts (see the module doc); prints
    its median and p99 ms (JSON)."""
    with tempfile.TemporaryDirectory(prefix="windows-spark-latency-") as folder:
        figures = _spark_latency(rounds, folder)
    print(json.dumps(figures))


def _spark_latency(rounds: int, folder: str) -> dict:
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F
    os.makedirs(f"{folder}/in")
    os.makedirs(f"{folder}/staging")
    spark = spark_session()
    seen: dict[int, float] = {}

    def sink(frame, batch_id) -> None:
        for row in frame.collect():
            start = int(row["window"]["start"].timestamp() * 1000)
            seen.setdefault(start, time.perf_counter())
    running = (spark.readStream.schema("key LONG, ts TIMESTAMP, value LONG")
               .parquet(f"{folder}/in").withWatermark("ts", f"{DISORDER // 1000} seconds")
               .groupBy(F.window("ts", "1 minute"), "key").count()
               .writeStream.outputMode("append").foreachBatch(sink)
               .option("checkpointLocation", f"{folder}/checkpoint").start())
    seconds = []
    for i in range(rounds + LATENCY_WARMUP + 1):
        staged = f"{folder}/staging/minute-{i:05d}.parquet"
        pq.write_table(spark_table(minute_events(i, LATENCY_EVENTS, LATENCY_KEYS)), staged)
        appeared = time.perf_counter()
        os.rename(staged, f"{folder}/in/minute-{i:05d}.parquet")
        if i:
            previous = (i - 1) * MINUTE
            deadline = appeared + 120
            while previous not in seen and time.perf_counter() < deadline:
                time.sleep(0.001)
            if previous not in seen:
                raise TimeoutError(f"Spark emitted no result for window {i - 1} in 120 s")
            if i > LATENCY_WARMUP:
                seconds.append(seen[previous] - appeared)
    running.stop()
    spark.stop()
    median, p99 = latency(seconds)
    return {"median": median, "p99": p99}


def peer(call: str, missing_extra: str) -> dict | str:
    """Run ``call`` (a peer function call, as text) in a fresh interpreter: its JSON, or why
    there is none."""
    result = run_script(f"import sys; sys.path.insert(0, {str(HERE.parent)!r})\n"
                        f"from benchmarks.bench_windows import *\n{call}", timeout=3600)
    if isinstance(result, str):
        if result.startswith("missing"):
            return result.replace("(pip install -e .[bench])",
                                  f"(pip install -e .[{missing_extra}])")
        return result
    if not isinstance(result, dict):
        raise TypeError(f"{call} printed {result!r}, not a JSON object")
    return result


# -- the section -------------------------------------------------------------------------------------

def main(quick: bool = False, spark: bool = True, bytewax: bool = True,
         pathway: bool = True) -> list[Section]:
    scale = QUICK if quick else 1
    n, bytewax_n = EVENTS // scale, BYTEWAX_EVENTS // scale
    rounds = LATENCY_ROUNDS // (2 if quick else 1)

    def value(result: dict | str, key: str) -> float | str:
        return result if isinstance(result, str) else float(result[key])
    ours = {(kind, workers): throughput(kind, n, workers) for kind in WORKLOADS
            for workers in (1, 2)}
    burst = {workers: throughput("tumbling", n, workers, stepping=False) for workers in (1, 2)}
    rows_of = {kind: ours[kind, 1]["rows"] for kind in WORKLOADS}
    for kind in WORKLOADS:
        if ours[kind, 2]["rows"] != rows_of[kind]:
            raise AssertionError(f"{kind}: {ours[kind, 2]['rows']} results at 2 workers, "
                                 f"{rows_of[kind]} at 1")
    best = {run: max(figures["rates"]) for run, figures in ours.items()}
    peers: dict[tuple[str, str], dict | str] = {}
    for kind in WORKLOADS:
        peers["bytewax", kind] = (peer(f"bytewax_peer({kind!r}, {bytewax_n})", "bench")
                                  if bytewax else "not run (--no-bytewax)")
        if kind != "session":
            peers["Spark", kind] = (peer(f"spark_peer({kind!r}, {SPARK_EVENTS // scale}, "
                                         f"{SPARK_TRIGGER_ROWS // scale})", "spark")
                                    if spark else "not run (--no-spark)")
    spark_latency = (peer(f"spark_latency_peer({SPARK_LATENCY_ROUNDS})", "spark") if spark
                     else "not run (--no-spark)")
    bytewax_name, spark_name = "bytewax 0.21", "Spark Structured Streaming"
    rows = []
    for kind in WORKLOADS:
        for workers in (1, 2):
            figures = {bytewax_name: value(peers["bytewax", kind], "rate")}
            goals = [Goal(">=", 50, bytewax_name)]
            if kind != "session":
                figures[spark_name] = value(peers["Spark", kind], "rate")
                goals.append(Goal(">=", 5, spark_name))
            rows.append(Row(f"{LABELS[kind]}, {workers} worker{'s' * (workers > 1)}",
                            f"{n:,} events, {KEYS:,} keys", "events/s", best[kind, workers],
                            figures, goals=goals if workers == 1 else []))
    for kind in WORKLOADS:
        rows.append(Row(f"2 workers / 1 worker, {LABELS[kind]}", f"{n:,} events", "x",
                        best[kind, 2] / best[kind, 1],
                        goals=[Goal(">=", 1.5)] if kind == "tumbling" else []))
    for kind in WORKLOADS:
        rows.append(Row(f"2 workers / 1 worker by CPU time, {LABELS[kind]}", f"{n:,} events",
                        "x", max(ours[kind, 2]["cpu_rates"]) / max(ours[kind, 1]["cpu_rates"])))
    burst_label = f"{LABELS['tumbling']}, whole input sent before stepping"
    for workers in (1, 2):
        rows.append(Row(f"{burst_label}, {workers} worker{'s' * (workers > 1)}",
                        f"{n:,} events, {KEYS:,} keys", "events/s", max(burst[workers]["rates"])))
    rows += [Row(f"2 workers / 1 worker, {burst_label}", f"{n:,} events", "x",
                 max(burst[2]["rates"]) / max(burst[1]["rates"])),
             Row(f"2 workers / 1 worker by CPU time, {burst_label}", f"{n:,} events", "x",
                 max(burst[2]["cpu_rates"]) / max(burst[1]["cpu_rates"]))]
    latency_sizes = [(LATENCY_KEYS, LATENCY_EVENTS, rounds),
                     (KEYS, RATE * MINUTE // scale, LARGE_WINDOW_ROUNDS // (2 if quick else 1))]
    for keys, per_window, count in latency_sizes:
        small = keys == LATENCY_KEYS
        for workers in (1, 2):
            found = result_latency(workers, keys, per_window, count)
            size = f"{per_window:,} events/window, {keys:,} keys"
            label = f"{workers} worker{'s' * (workers > 1)}"
            rows += [Row(f"result latency, median, {label}", size, "ms", found["median"],
                         {"Spark trigger": value(spark_latency, "median")} if small else {},
                         goals=[Goal("<=", 1.0)]),
                     Row(f"result latency, p99, {label}", size, "ms", found["p99"],
                         {"Spark trigger": value(spark_latency, "p99")} if small else {})]

    def spread(kind: str, workers: int) -> str:
        rates = ours[kind, workers]["rates"]
        return f"{min(rates) / 1e6:.2f}-{max(rates) / 1e6:.2f}"

    def bytewax_results(kind: str) -> str:
        found = peers["bytewax", kind]
        if isinstance(found, str):
            return f"{kind}: {found}"
        return f"{kind}: {found['results']:,} results, {found['late']} late"
    notes = [
        f"sparktimely: the best of {RUNS} timed runs after a warm-up run, in the same worker "
        "processes; the range over the runs (M events/s), 1 and 2 workers: " +
        "; ".join(f"{kind} {spread(kind, 1)} and {spread(kind, 2)}" for kind in WORKLOADS) +
        f"; result rows: " + ", ".join(f"{kind} {rows_of[kind]:,}" for kind in WORKLOADS) +
        " (the same at 1 and 2 workers; the tumbling counts add up to the events)",
        f"input: batches of {BATCH:,} rows per worker (event i at worker i % workers), each "
        f"followed by advance_to(greatest event time - {DISORDER // 1000} s) and a "
        "worker.step(), as a streaming input loop; 'whole input sent before stepping': the "
        f"same batches and advances, no step until all are sent; {RATE} events "
        f"per ms of event time, 1% of them up to {DISORDER // 1000} s out of order, int keys",
        f"bytewax: one worker (run_main), the first {bytewax_n:,} events of the same stream "
        "(see the module doc: its per-key work makes the whole stream take 15-40 minutes), "
        "str keys (bytewax keys are str), datetimes built before the timing; " +
        ", ".join(bytewax_results(kind) for kind in WORKLOADS),
        f"Spark: local[2], 2 shuffle partitions, the first {SPARK_EVENTS // scale:,} events "
        f"in Parquet files of {FILE_ROWS:,} rows, "
        f"micro-batches of {SPARK_TRIGGER_ROWS // scale:,} rows (maxFilesPerTrigger), noop "
        "sink, Trigger.AvailableNow; steady state = input rows / triggerExecution time of "
        "every micro-batch after the first (session start-up, planning and the first "
        "batch's code generation excluded); no session windows run on Spark here",
        f"result latency: {rounds} (small) and {latency_sizes[1][2]} (large) tumbling windows "
        f"after {LATENCY_WARMUP} warm-up ones, "
        "from the last worker's advance past the window's close time to the last worker's "
        "probe passing it (the window's results computed and sent); Spark trigger: "
        f"{SPARK_LATENCY_ROUNDS} windows of {LATENCY_EVENTS:,} events over "
        f"{LATENCY_KEYS:,} keys, from the file of the next minute's events appearing in the "
        "watched folder to the window's rows at a foreachBatch sink (default trigger)",
        "2 workers / 1 worker by CPU time: events per CPU second of the busiest worker "
        "process (time.process_time), 2 workers over 1: the speed-up if each worker had a "
        "core of its own, which a machine shared with other work does not give (see the load "
        "below); a figure under 2 is work the second worker adds (the exchange by key)",
        "active_between sliding count beside Pathway's windowby: the next section "
        "(bench_differential.sliding_section, run from here)",
        f"machine load (1-minute load average) at the end: {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores: figures are as noisy as the neighbours make them",
    ]
    section = Section("Event-time windows (Arrow) beside bytewax 0.21 and Spark Structured "
                      "Streaming", rows, notes, key="windows")
    return [section.print(), long_sliding_section(bytewax), sliding_section(quick, pathway)]


if __name__ == "__main__":
    main(quick="--quick" in sys.argv, spark="--no-spark" not in sys.argv,
         bytewax="--no-bytewax" not in sys.argv, pathway="--no-pathway" not in sys.argv)
