"""Scaling out: more workers must never be slower. Every figure is a ratio between
two configurations measured side by side in one run, on this machine.

    python -m benchmarks.bench_scaling [--quick] [--runs 3] [--write]

(``--write`` puts the table into benchmarks/RESULTS.md and draws results-scaling.png.)

Rows (each the median over ``--runs`` runs; in every run the configurations of a row are
measured one after the other, so they share the machine's load):

- empty progress round: ``input.advance_to(r)`` then stepping until a probe behind one
  ``exchange`` passes ``r``, in timely's step loop (``while probe.less_than(r): worker.step()``)
  and in the park loop (``step_or_park(None)``); every worker in a forked process. 2 workers
  against 1, 4 (and 3) workers against 2, and 2 processes over loopback sockets (one worker
  each, ``SPARKTIMELY_FORCE_SOCKETS=1``) against 2 workers over shared memory. A round's figure
  is the slowest worker's median.
- natural keyed Arrow aggregation: ``to_stream(half).exchange(key="word").map_batches(group_by)``
  over 2M words (10,007 keys) in 65,536-row batches, each worker feeding half (1 worker: all),
  in M records/s; the same with ``exchange`` alone at 2 workers against the whole pipeline at
  1 worker; and ``aggregate_batches`` (the operator that combines before it exchanges).
- partitioning 1M string keys: hashing the key column and choosing each row's worker
  as the exchange does for 2 workers, and the whole ``partition_batch`` with its takes.
- /dev/shm taken: the peak bytes of a job's shared-memory segments (allocated blocks,
  sampled every 2 ms) while 8 and 2 workers run the natural aggregation.
"""
from __future__ import annotations

import mmap
import os
import secrets
import statistics
import sys
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc

import sparktimely as st
from sparktimely.testing import free_ports
from sparktimely.dataflow.containers import _route_hashes, partition_batch
from sparktimely.hashing import hash_rows
from sparktimely.shm import segments

from ._util import Goal, Row, Section
from .bench_arrow import KEYS, WORD_BATCH, timed, words_table
from .bench_core import pipe_round_trip
from .bench_sockets import _gather, _spawn, context

WORDS = 2_000_000
ROUNDS = {"step": 1500, "park": 1500}


# -- rounds ------------------------------------------------------------------------------------

def round_job(worker: st.Worker, loop: str, rounds: int) -> float:
    """The median microseconds of ``rounds`` empty rounds (after a tenth as warm-up)."""
    input = st.InputHandle()
    probe = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x).probe())
    warm = rounds // 10
    latencies = []
    for round in range(1, rounds + warm + 1):
        start = time.perf_counter()
        input.advance_to(round)
        if loop == "step":
            while probe.less_than(round):
                worker.step()
        else:
            while probe.less_than(round):
                worker.step_or_park(None)
        latencies.append(time.perf_counter() - start)
    input.close()
    worker.run()
    return statistics.median(latencies[warm:]) * 1e6


def round_shm(workers: int, loop: str, rounds: int) -> float:
    return max(st.execute(lambda w: round_job(w, loop, rounds), workers=workers))


def _socket_process(process: int, hosts: list[str], loop: str, rounds: int) -> float:
    os.environ["SPARKTIMELY_FORCE_SOCKETS"] = "1"
    return st.execute(lambda w: round_job(w, loop, rounds), processes=2, process=process,
                      hostfile=hosts)[0]


def round_sockets(loop: str, rounds: int) -> float:
    hosts = [f"127.0.0.1:{port}" for port in free_ports(2)]
    return max(_gather([_spawn(_socket_process, p, hosts, loop, rounds) for p in range(2)]))


def _answer_pings(words: memoryview, count: int) -> None:
    """The other side of :func:`bare_spin_round_trip`: spin until ping ``i`` arrives, answer it."""
    for i in range(1, count + 1):
        while words[0] != i:
            pass
        words[1] = i


def bare_spin_round_trip(count: int = 5000) -> float:
    """Median microseconds of a bare shared-memory spin ping-pong between two Python
    processes (one 8-byte word each way, both sides polling, no engine): the physical floor
    of one message each way between two workers' interpreters on this machine."""
    shared = mmap.mmap(-1, 16)                  # anonymous and shared: seen by the child
    words = memoryview(shared).cast("Q")
    child = context.Process(target=_answer_pings, args=(words, count))
    child.start()
    latencies = []
    try:
        for i in range(1, count + 1):
            start = time.perf_counter()
            words[0] = i
            while words[1] != i:
                pass
            latencies.append(time.perf_counter() - start)
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
        words.release()
        shared.close()
    return statistics.median(latencies[count // 10:]) * 1e6


# -- Arrow aggregation -------------------------------------------------------------------------

def group_count(batch: pa.RecordBatch) -> pa.RecordBatch:
    """What a user writes after a keyed exchange: count the rows of each word in the batch."""
    table = pa.Table.from_batches([batch]).group_by("word", use_threads=False).aggregate(
        [("word", "count")])
    return table.combine_chunks().to_batches()[0]


def aggregation(table: pa.Table, workers: int, variant: str, repeats: int = 3) -> float:
    """M records/s (slowest worker, median of ``repeats`` warm runs) of ``variant``:
    "natural" (exchange + map_batches(group_count)), "exchange" (exchange alone) or
    "operator" (aggregate_batches)."""
    share = -(-table.num_rows // workers)

    def job(worker):
        mine = table.slice(worker.index * share, share).to_batches(max_chunksize=WORD_BATCH)
        counted = []

        def build(scope):
            stream = scope.to_stream(mine)
            if variant == "natural":
                stream = stream.exchange(key="word").map_batches(group_count)
                stream = stream.inspect_batch(lambda t, b: counted.append(b.column(1)))
            elif variant == "operator":
                stream = stream.aggregate_batches("word", {"n": ("count", None)})
                stream = stream.inspect_batch(lambda t, b: counted.append(b.column(1)))
            else:
                stream = stream.exchange(key="word")
                stream = stream.inspect_batch(lambda t, b: counted.append(pa.array([b.num_rows])))
            return stream.probe()
        runs = [timed(worker, build) for _ in range(repeats + 1)]
        return runs[1:], sum(sum(c.to_numpy().tolist()) for c in counted)
    results = st.execute(job, workers=workers)
    assert sum(total for _, total in results) == (repeats + 1) * table.num_rows
    seconds = statistics.median(max(run) for run in zip(*(runs for runs, _ in results)))
    return table.num_rows / seconds / 1e6


def _group_alone(batches: list, start, repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` runs of ``group_count`` over ``batches``, each run
    begun together with the other processes (``start`` is a barrier), after a warm-up."""
    _ = [group_count(batch) for batch in batches]
    times = []
    for _ in range(repeats):
        start.wait()
        begun = time.perf_counter()
        for batch in batches:
            group_count(batch)
        times.append(time.perf_counter() - begun)
    return times


def grouping_limit(table: pa.Table, processes: int, repeats: int = 3) -> float:
    """M records/s of ``group_count`` alone (no engine, no exchange) over ``table`` split
    between ``processes`` forked processes running at once: what this machine gives for the
    grouping work itself at that many processes, under the load of the moment."""
    share = -(-table.num_rows // processes)
    start = context.Barrier(processes)
    spawned = [_spawn(_group_alone, table.slice(i * share, share).to_batches(
        max_chunksize=WORD_BATCH), start, repeats) for i in range(processes)]
    runs = [max(run) for run in zip(*_gather(spawned))]
    return table.num_rows / statistics.median(runs) / 1e6


# -- partitioning ------------------------------------------------------------------------------

def partitioning(n: int = 1_000_000, repeats: int = 9) -> tuple[float, float, float, float]:
    """Milliseconds (medians) to hash 1M string keys and pick each row's worker (2 workers),
    to partition the batch whole (hash, route, takes), the same in the pipeline's batches of
    ``WORD_BATCH`` rows, and for pyarrow's C++ ``dictionary_encode`` of the same keys (one
    hash-table pass: a yardstick of the machine's speed at the moment)."""
    table = words_table(n)
    batch = table.to_batches()[0]
    batches = table.to_batches(max_chunksize=WORD_BATCH)

    def median_ms(run) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3
    route = median_ms(lambda: _route_hashes(hash_rows(batch, "word"), 2))
    whole = median_ms(lambda: partition_batch(batch, "word", None, 2))
    batched = median_ms(lambda: [partition_batch(b, "word", None, 2) for b in batches])
    encode = median_ms(lambda: pc.dictionary_encode(batch.column("word")))
    return route, whole, batched, encode


# -- shared memory taken -----------------------------------------------------------------------

def shm_peak(table: pa.Table, workers: int) -> float:
    """Peak MiB of this job's segments (allocated blocks) while ``workers`` workers run the
    natural aggregation once."""
    tag = "bench" + secrets.token_hex(3)
    prefix = f"sparktimely-{tag}-"
    saved = os.environ.get("SPARKTIMELY_SHM_TAG")
    os.environ["SPARKTIMELY_SHM_TAG"] = tag
    peak, done = [0], threading.Event()

    def sample():
        while not done.is_set():
            total = 0
            for path in segments(prefix):
                try:
                    total += os.stat(path).st_blocks * 512
                except FileNotFoundError:
                    pass
            peak[0] = max(peak[0], total)
            done.wait(0.002)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        aggregation(table, workers, "natural", repeats=1)
    finally:
        done.set()
        sampler.join()
        if saved is None:
            del os.environ["SPARKTIMELY_SHM_TAG"]
        else:
            os.environ["SPARKTIMELY_SHM_TAG"] = saved
    return peak[0] / 2**20


# -- the table ---------------------------------------------------------------------------------

def main(quick: bool = False, runs: int = 3) -> list[Section]:
    runs = 1 if quick else runs
    scale = 0.2 if quick else 1.0
    rounds = {loop: max(100, int(n * scale)) for loop, n in ROUNDS.items()}
    load = [os.getloadavg()]
    figures: dict[str, list[float]] = {}

    def record(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)
        print(f"  {name}: {value:.3g}", flush=True)

    table = words_table(WORDS if not quick else WORDS // 4)
    for run in range(runs):
        print(f"run {run + 1} of {runs} (load average {os.getloadavg()[0]:.2f})", flush=True)
        for loop in ("step", "park"):
            # oversubscribed step loops are slow today: fewer rounds keep the run short
            for workers in (1, 2, 3, 4):
                n = rounds[loop] if workers <= 2 or loop == "park" else rounds[loop] // 5
                record(f"round {loop} {workers}w", round_shm(workers, loop, n))
            record(f"round {loop} sockets", round_sockets(loop, rounds[loop] // 3))
        for workers, variant in [(1, "natural"), (2, "natural"), (2, "exchange"),
                                 (1, "operator"), (2, "operator")]:
            record(f"{variant} {workers}w", aggregation(table, workers, variant))
        route, whole, batched, encode = partitioning()
        record("hash+route ms", route)
        record("partition ms", whole)
        record("partition batched ms", batched)
        record("dictionary_encode ms", encode)
        for processes in (1, 2):
            record(f"group alone {processes}p", grouping_limit(table, processes))
        record("pipe us", pipe_round_trip(2000))
        record("shm spin us", bare_spin_round_trip())
        for workers in (2, 8):
            record(f"shm {workers}w", shm_peak(table, workers))
        load.append(os.getloadavg())
    f = {name: statistics.median(values) for name, values in figures.items()}
    size = f"{table.num_rows / 1e6:g}M words, {KEYS:,} keys"
    rows = []
    pipe = {"Pipe round trip": f["pipe us"], "shm spin round trip": f["shm spin us"]}
    for loop in ("step", "park"):
        label = f"{loop} loop"
        rows += [
            Row(f"empty progress round, 2 workers ({label})", "1 exchange", "us",
                f[f"round {loop} 2w"], limits={"1 worker": f[f"round {loop} 1w"], **pipe},
                goals=[Goal("<=", 1.5, "1 worker")]),
            Row(f"empty progress round, 4 workers on 2 cores ({label})", "1 exchange", "us",
                f[f"round {loop} 4w"], limits={"2 workers": f[f"round {loop} 2w"]},
                goals=[Goal("<=", 3, "2 workers")]),
            Row(f"empty progress round, 3 workers on 2 cores ({label})", "1 exchange", "us",
                f[f"round {loop} 3w"], limits={"2 workers": f[f"round {loop} 2w"]}),
            Row(f"empty progress round, 2 processes over loopback sockets ({label})",
                "1 exchange", "us", f[f"round {loop} sockets"],
                limits={"2 workers": f[f"round {loop} 2w"]},
                goals=[Goal("<=", 2, "2 workers")]),
        ]
    alone = {"group_by alone, 1 process": f["group alone 1p"],
             "group_by alone, 2 processes": f["group alone 2p"]}
    group_ms = 1e3 / f["group alone 1p"]                 # group_by of 1M words, 1 process
    rows += [
        Row("natural keyed aggregation, exchange(key).map_batches(group_by), 1 worker", size,
            "M rec/s", f["natural 1w"], limits=alone),
        Row("natural keyed aggregation, exchange(key).map_batches(group_by), 2 workers", size,
            "M rec/s", f["natural 2w"], limits={"1 worker": f["natural 1w"], **alone},
            goals=[Goal(">=", 1.5, "1 worker")]),
        Row("same pipeline, exchange only, 2 workers", size, "M rec/s", f["exchange 2w"],
            limits={"1 worker": f["natural 1w"]}, goals=[Goal(">=", 1, "1 worker")]),
        Row("aggregate_batches (combines before the exchange), 2 workers", size, "M rec/s",
            f["operator 2w"], limits={"1 worker": f["operator 1w"], **alone}),
        Row("partitioning 1M string keys: hash + route (2 workers)", "1M keys", "ms",
            f["hash+route ms"], limits={"dictionary_encode": f["dictionary_encode ms"]},
            goals=[Goal("<=", 10)]),
        Row("partitioning 1M string keys: partition_batch (hash, route, take)", "1M keys", "ms",
            f["partition ms"], limits={"dictionary_encode": f["dictionary_encode ms"]}),
        Row(f"partitioning 1M string keys: partition_batch in {WORD_BATCH:,}-row batches "
            "(as in the pipeline)", "1M keys", "ms", f["partition batched ms"],
            limits={"group_by alone, 1 process": group_ms}),
        Row("/dev/shm taken, 8 workers (peak)", size, "MiB", f["shm 8w"],
            limits={"2 workers": f["shm 2w"]}, goals=[Goal("<=", 4, "2 workers")]),
    ]
    spread = {name: (min(v), max(v)) for name, v in figures.items()}
    ceiling = 2 * group_ms / (group_ms + f["partition batched ms"])
    why = [
        f"what stands in the way of 2 workers' empty rounds at 1.5x one worker's: not the "
        f"transport (a bare shared-memory ping-pong between two interpreters takes "
        f"{f['shm spin us']:.2g} us), but the engine's Python: in a round each of 2 workers "
        f"runs the progress tracker on two batches of changes (its own and its peer's) where "
        f"a lone worker runs it on one, and encodes, writes, reads and decodes a message "
        f"besides, each step about as long as a whole one-worker round "
        f"({f['round step 1w']:.3g} us); the round's critical path holds a step of each "
        f"worker. Both loops take {f['round step 2w']:.3g} and {f['round park 2w']:.3g} us.",
        f"more workers than cores: each extra worker adds its own steps to every round "
        f"(n - 1 progress messages to encode, read and apply), and a worker with nothing to do "
        f"yields its core, but the kernel hands it back at its own pace; the park loop sleeps "
        f"on the doorbell and pays a futex wake-up per message. Over sockets, a progress "
        f"message is written when it is broadcast, before the sender's pass and operators run "
        f"(as a ring write is), so a round adds a send and a read system call to the "
        f"shared-memory round; a worker waits by polling its sockets for 200 us before it "
        f"sleeps in the kernel (a Pipe round trip, both sides sleeping in the kernel, took "
        f"{f['pipe us']:.3g} us).",
        f"natural aggregation: each of 2 workers groups half the words but also hashes and "
        f"splits its half (partition_batch in the pipeline's batches: "
        f"{f['partition batched ms']:.3g} ms per 1M keys, against {group_ms:.3g} ms for "
        f"group_by of 1M words), then copies the other worker's part through the ring, so "
        f"even on two idle cores 2 workers can be at most {ceiling:.2f}x as fast as one "
        f"(2 x group / (group + partition)); the rest of the gap is waiting for each other's "
        f"parts and the other load on the machine (group_by alone in 2 processes reached "
        f"{f['group alone 2p'] / f['group alone 1p']:.2f}x of 1 process in this run).",
    ]
    return [Section("Scaling out: ratios between configurations of one run", rows, notes=[
        f"median of {runs} runs; in each run the configurations follow each other. Load average "
        f"(1 min) before and after each run: " + ", ".join(f"{l[0]:.2f}" for l in load) +
        f" on {os.cpu_count()} cores (other engineers' test suites share the machine).",
        f"rounds: {rounds['step']} per configuration (a tenth more as warm-up), a fifth of that "
        "for the oversubscribed step loops; the slowest worker's median round.",
        "limits: 'Pipe round trip' is a multiprocess.Pipe ping-pong between two processes "
        "(one message each way, no engine); 'shm spin round trip' is a bare shared-memory "
        "ping-pong between two Python processes polling one 8-byte word each (no engine: "
        "the floor of one message each way between two interpreters); 'group_by alone, N processes' is the same "
        "per-batch group_by over the words split between N forked processes running at once, "
        "no engine and no exchange (what the machine gives for the grouping itself); "
        "'dictionary_encode' is pyarrow's C++ hash-table pass over the same 1M keys.",
        "spread over the runs (min-max): " + "; ".join(
            f"{name} {lo:.3g}-{hi:.3g}" for name, (lo, hi) in spread.items()),
        *why,
    ], key="scaling").print()]


def write_results(section: Section) -> None:
    """Put ``section`` into benchmarks/RESULTS.md (replacing an earlier run of it) and draw
    benchmarks/results-scaling.png; ``python -m benchmarks`` rewrites both with every
    section."""
    from .__main__ import HERE, machine, plot
    results = HERE / "RESULTS.md"
    text = results.read_text()
    begin, end = "<!-- bench_scaling: begin -->", "<!-- bench_scaling: end -->"
    block = (f"{begin}\n<!-- python -m benchmarks.bench_scaling --write, measured "
             f"{time.strftime('%Y-%m-%d %H:%M %Z')} on {machine()}; a full run "
             f"(python -m benchmarks) regenerates this. -->\n![scaling: us per empty round](results-scaling.png)\n\n"
             f"{section.markdown()}{end}")
    if begin in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    results.write_text(text)
    plot({"scaling": section}, HERE / "results-scaling.png")


if __name__ == "__main__":
    args = sys.argv[1:]
    sections = main(quick="--quick" in args,
                    runs=int(args[args.index("--runs") + 1]) if "--runs" in args else 3)
    if "--write" in args:
        write_results(sections[0])
