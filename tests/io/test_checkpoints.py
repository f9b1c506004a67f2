"""Epoch checkpoints at the dataflow level, with in-process workers (1, 2 and 3, seeded
interleavings): resume after a failure at any epoch, rescaling, keyed user state, refusals
that change nothing on disk, and sinks without checkpoints. Real processes killed with
SIGKILL are in test_kill_resume.py."""
from __future__ import annotations

import json
import os
import re
from collections import Counter

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import sparktimely as st
from sparktimely.io import enable_checkpoints
from sparktimely.testing import execute_in_process

from recovery_jobs import (FailOnce, checkpointed, epochs_of, running_counts, tree, visible,
                           wordcount, write_texts)

pytestmark = pytest.mark.timeout(120)

EPOCHS = 4          # 12 lines per file, 3 lines per batch


@pytest.fixture
def texts(tmp_path):
    folder = str(tmp_path / "texts")
    write_texts(folder)
    return folder


def records(directory: str) -> list[dict]:
    commits = os.path.join(directory, "wordcount", "commits")
    if not os.path.exists(commits):
        return []
    return [json.load(open(os.path.join(commits, name))) for name in sorted(os.listdir(commits))]


def cause(error: BaseException) -> BaseException:
    while error.__cause__ is not None:
        error = error.__cause__
    return error


def test_checkpointed_counts_equal_the_oracle_and_an_unchecked_run(run, texts, tmp_path):
    expected = running_counts(epochs_of(texts))
    run(checkpointed(lambda w: wordcount(w, texts, str(tmp_path / "out")), tmp_path / "ck"))
    assert visible(str(tmp_path / "out")) == expected
    run(lambda w: wordcount(w, texts, str(tmp_path / "plain")))
    assert visible(str(tmp_path / "plain")) == expected
    last = records(str(tmp_path / "ck"))[-1]
    assert (last["complete"], last["epoch"], last["workers"]) == (True, EPOCHS - 1, run.workers)
    assert [name for name, _ in last["components"]] == ["lines", "StateMachine#2", "counts"]
    assert not [n for n in os.listdir(tmp_path / "out") if n.startswith("_")]


def test_a_dataflow_dropped_once_it_has_finished_still_gets_its_last_checkpoint(
        run, texts, tmp_path):
    """The last checkpoint, which makes the last epochs' output visible, comes after the
    dataflow has finished: dropping it then (as a worker does itself once
    ``finished_kept`` more have finished) must not cancel it."""
    out = str(tmp_path / "out")

    def job(worker):
        index = worker.next_dataflow_index()
        wordcount(worker, texts, out)
        dataflow = worker.dataflows()[index]
        worker.step_while(lambda: dataflow.running)
        worker.drop_dataflow(index)
    run(checkpointed(job, tmp_path / "ck"))
    assert visible(out) == running_counts(epochs_of(texts))
    assert records(str(tmp_path / "ck"))[-1]["complete"]


@pytest.mark.parametrize("epoch", [0, 2, EPOCHS - 1], ids=["first", "middle", "last"])
def test_a_failure_at_any_epoch_and_a_rerun_give_the_undisturbed_output(run, texts, tmp_path,
                                                                        epoch):
    out, directory = str(tmp_path / "out"), tmp_path / "ck"
    expected = running_counts(epochs_of(texts))
    fail = FailOnce(str(tmp_path / "failed"), epoch, worker=1)
    job = checkpointed(lambda w: wordcount(w, texts, out, hook=fail), directory)
    with pytest.raises(st.WorkerError, match="failing on purpose"):
        run(job)
    partial = visible(out)        # committed epochs, not yet renamed on every worker maybe
    assert not Counter(partial) - Counter(expected)
    newest = max([r["epoch"] for r in records(str(directory))], default=-1)
    assert {e for e, _, _ in partial} <= set(range(newest + 1)) and newest < epoch
    run(job)
    assert visible(out) == expected


@pytest.mark.parametrize("before, after", [(2, 3), (3, 1), (1, 2)])
def test_a_rerun_at_another_worker_count_gives_the_same_output(texts, tmp_path, before, after):
    out, directory = str(tmp_path / "out"), tmp_path / "ck"
    fail = FailOnce(str(tmp_path / "failed"), 2, worker=before - 1)
    job = checkpointed(lambda w: wordcount(w, texts, out, hook=fail), directory)
    with pytest.raises(st.WorkerError):
        execute_in_process(job, before, seed=before)
    execute_in_process(job, after, seed=after)
    assert visible(out) == running_counts(epochs_of(texts))
    assert records(str(directory))[-1]["workers"] == after


def test_files_added_between_runs_are_read_after_the_resumed_epoch_with_the_state_kept(
        run, texts, tmp_path):
    out, directory = str(tmp_path / "out"), tmp_path / "ck"
    job = checkpointed(lambda w: wordcount(w, texts, out), directory)
    execute_in_process(job, 2, seed=3)
    first = running_counts(epochs_of(texts))
    totals = Counter(word for words in epochs_of(texts).values() for word in words)
    for folder in (str(tmp_path / "more"), texts):
        write_texts(folder, files=2, lines=7, salt=1)
    run(job)                                          # at 1, 2 or 3 workers
    later = running_counts(epochs_of(str(tmp_path / "more"), start=EPOCHS), totals)
    assert visible(out) == sorted(first + later)


def test_lines_appended_between_runs_are_read_and_a_continued_last_line_is_refused(
        run, texts, tmp_path):
    """Whole lines appended to the files read by a checkpointed run are read by the next
    one, at the epochs after each file's last; a last line read without its line end may be
    ended by what is appended, and continuing it instead stops the run, naming the file and
    the line, with nothing written twice or lost."""
    out, directory = str(tmp_path / "out"), tmp_path / "ck"
    job = checkpointed(lambda w: wordcount(w, texts, out), directory)
    names = sorted(os.listdir(texts))
    unended = os.path.join(texts, names[0])
    with open(unended, "a") as file:
        file.write("w1 w2")                          # its line 13: no line end yet
    first = epochs_of(texts)                         # line 13 at epoch 4 (12 // 3)
    run(job)
    assert visible(out) == running_counts(first)

    later: dict[int, list[str]] = {}
    for name in names:
        lines = [f"w{(len(name) + i) % 5} w{i}" for i in range(4)]
        with open(os.path.join(texts, name), "a") as file:
            file.write(("\n" if name == names[0] else "") + "\n".join(lines) + "\n")
        # batches go on from the file's last one; epochs from the resumed epoch, 5
        for i, line in enumerate(lines):
            batch = (5 if name == names[0] else 4) + i // 3
            later.setdefault(max(batch, 5), []).extend(line.split())
    totals = Counter(word for words in first.values() for word in words)
    run(job)
    expected = sorted(running_counts(first) + running_counts(later, Counter(totals)))
    assert visible(out) == expected

    with open(unended, "a") as file:
        file.write("w3")                             # unended again ...
    run(job)
    with open(unended, "a") as file:
        file.write(" w4\n")                          # ... and continued
    committed = records(str(directory))
    line = 12 + 1 + 4 + 1
    with pytest.raises(st.WorkerError, match=re.escape(
            f"{unended} line {line} had no line end when a checkpointed run read it")):
        run(job)
    assert records(str(directory)) == committed
    assert visible(out) == sorted(expected + running_counts({7: ["w3"]}, totals + Counter(
        word for words in later.values() for word in words)))


@pytest.mark.parametrize("spelling", ["dot", "absolute", "moved"])
def test_a_resume_finds_its_files_when_their_directory_is_given_another_way(
        run, texts, tmp_path, spelling, monkeypatch, caplog):
    """The first run read 'texts' (relative); the resume reads './texts', its absolute path,
    or the directory moved elsewhere. A file's partition was named by the directory's path
    as given: every file was read again from its start and counted twice, in silence."""
    import shutil
    out, directory = str(tmp_path / "out"), tmp_path / "ck"
    monkeypatch.chdir(tmp_path)
    fail = FailOnce(str(tmp_path / "failed"), 2)
    first = os.path.relpath(texts, tmp_path)
    with pytest.raises(st.WorkerError):
        run(checkpointed(lambda w: wordcount(w, first, out, hook=fail), directory))
    if spelling == "moved":
        again = shutil.move(texts, tmp_path / "elsewhere")
    else:
        again = "./" + first if spelling == "dot" else texts
    run(checkpointed(lambda w: wordcount(w, str(again), out, hook=fail), directory))
    assert visible(out) == running_counts(epochs_of(str(again)))
    assert "no longer lists" not in caplog.text


def test_a_resume_tells_once_of_partitions_the_source_no_longer_lists(run, texts, tmp_path,
                                                                       caplog):
    out, directory = str(tmp_path / "out"), tmp_path / "ck"
    fail = FailOnce(str(tmp_path / "failed"), 2)
    job = checkpointed(lambda w: wordcount(w, texts, out, hook=fail), directory)
    with pytest.raises(st.WorkerError):
        run(job)
    gone = sorted(os.listdir(texts))[0]
    os.remove(os.path.join(texts, gone))
    run(job)
    told = re.findall(r"source 'lines', worker \d+: the checkpoint this run resumed from holds "
                      r"the positions of partition\(s\) (.*), which the source no longer "
                      r"lists; a partition listed under another name is read again from its "
                      r"start", caplog.text)
    assert told == [repr(gone)]                         # by the worker that read it


class Spans:
    """A source of ``(key, start, end, name)`` records, partition by partition and epoch by
    epoch: each present from ``start`` to ``end``, often beyond the epoch that sends it."""

    EPOCHS = 8

    @staticmethod
    def records(partition: str) -> list[tuple[int, list]]:
        import random
        rng = random.Random(partition)
        return [(epoch, [(rng.randrange(2), start, start + rng.randrange(1, 6),
                          f"{partition}-{epoch}-{i}")
                         for i in range(3) for start in [epoch + rng.randrange(0, 4)]])
                for epoch in range(Spans.EPOCHS)]

    def partitions(self) -> list[str]:
        return [f"p{i}" for i in range(5)]

    def open(self, partition, resume_state):
        records, position = self.records(partition), resume_state or 0

        class Part:
            def next_batch(self):
                nonlocal position
                if position == len(records):
                    raise StopIteration
                position += 1
                return records[position - 1]

            def snapshot(self):
                return position
        return Part()


@pytest.mark.parametrize("before, after", [(2, 4), (4, 2), (2, 3)])
def test_updates_active_between_holds_are_restored_once_at_another_worker_count(
        tmp_path, before, after):
    """active_between holds updates wherever they arrived (a Pipeline operator): a resume at
    a worker count sharing a factor with the old one read only some old workers' files, so
    held insertions and retractions were lost (2 -> 4, 4 -> 2; 2 -> 3 read them all)."""
    import sparktimely.differential as dd
    from sparktimely.io import DirectorySink
    out, directory = str(tmp_path / "out"), tmp_path / "ck"
    fail = FailOnce(str(tmp_path / "failed"), 4, worker=None)

    def job(worker):
        def build(scope):
            spans = dd.from_stream(scope.input_from_source(Spans(), "spans"))
            counts = spans.active_between(lambda r: r[1], lambda r: r[2]) \
                .map(lambda r: r[0]).count()
            counts.inner.inspect_batch(lambda time, batch: fail(worker, time)).output_to(
                DirectorySink(out, format="jsonl"), "counts")
        worker.dataflow(build, name="active")
    with pytest.raises(st.WorkerError, match="failing on purpose"):
        execute_in_process(checkpointed(job, directory), before, seed=before)
    execute_in_process(checkpointed(job, directory), after, seed=after)
    got: Counter = Counter()
    for name in os.listdir(out):
        if not name.startswith(("_", ".")):
            for line in open(os.path.join(out, name)):
                (key, n), time, diff = json.loads(line)
                got[((key, n), time)] += diff
    sent = [(record, epoch) for p in Spans().partitions() for epoch, batch in Spans.records(p)
            for record in batch]
    expected: Counter = Counter()
    previous: Counter = Counter()
    for time in range(max(r[2] for r, _ in sent) + 1):      # counts, recomputed at each time
        now = Counter(r[0] for r, epoch in sent if max(r[1], epoch) <= time < r[2])
        for key in set(now) | set(previous):
            expected[((key, now[key]), time)] += 1 if now[key] else 0
            expected[((key, previous[key]), time)] -= 1 if previous[key] else 0
        previous = now
    assert +got == +expected and -got == -expected


@pytest.mark.parametrize("every", [2, 3])
def test_checkpoints_come_at_multiples_of_checkpoint_every_and_resume_from_there(
        run, texts, tmp_path, every, monkeypatch):
    monkeypatch.setattr(st.io.checkpoints, "KEEP", 100)       # keep every commit record
    run(checkpointed(lambda w: wordcount(w, texts, str(tmp_path / "all")), tmp_path / "all-ck",
                     every))
    made = [(r["epoch"], r["complete"]) for r in records(str(tmp_path / "all-ck"))]
    assert made == [(e, False) for e in range(0, EPOCHS - 1, every)] + [(EPOCHS - 1, True)]
    out, directory = str(tmp_path / "out"), tmp_path / "ck"
    fail = FailOnce(str(tmp_path / "failed"), EPOCHS - 1)
    job = checkpointed(lambda w: wordcount(w, texts, out, hook=fail), directory, every)
    with pytest.raises(st.WorkerError):
        run(job)
    run(job)
    assert visible(out) == running_counts(epochs_of(texts))


def test_user_operators_keep_keyed_state_as_a_dict_or_as_an_arrow_table(run, tmp_path):
    """Totals per key in one user operator (dict form) and a table of every record in
    another (Table form, counting a key's rows) survive a failure, each key's state on the
    worker that owns it."""
    fail = FailOnce(str(tmp_path / "failed"), 3, worker=2)
    data = [[(f"k{(i * 5 + e) % 7}", i * e + 1) for i in range(7)] for e in range(6)]

    class Rounds:
        def partitions(self):
            return ["rounds"]

        def open(self, partition, resume_state):
            return Part(resume_state or 0)

    class Part:
        def __init__(self, done):
            self.done = done

        def next_batch(self):
            if self.done == len(data):
                raise StopIteration
            self.done += 1
            return self.done - 1, data[self.done - 1]

        def snapshot(self):
            return self.done

    def totals_ctor(cap, info, scope):
        cap.drop()
        totals = {}
        scope.recoverable(info, lambda: totals, totals.update)

        def logic(input, output):
            for t, batch in input:
                for key, n in batch:
                    totals[key] = totals.get(key, 0) + n
                output.session(t).give_batch([["total", k, totals[k]] for k, _ in batch])
        return logic

    def table_ctor(cap, info, scope):
        cap.drop()
        table = [pa.table({"key": pa.array([], pa.string()), "route": pa.array([], pa.uint64())})]
        scope.recoverable(info, lambda: table[0], lambda t: table.__setitem__(0, t),
                          route="route")

        def logic(input, output):
            for t, batch in input:
                for key, _ in batch:
                    row = pa.table({"key": [key], "route": pa.array([st.stable_hash(key)],
                                                                    pa.uint64())})
                    table[0] = pa.concat_tables([table[0], row])
                    count = sum(k == key for k in table[0].column("key").to_pylist())
                    output.session(t).give(["count", key, count])
        return logic

    def job(worker):
        def build(scope):
            route = st.Exchange(lambda kv: st.stable_hash(kv[0]))
            pairs = scope.input_from_source(Rounds(), "rounds")
            totals = pairs.unary(route, "Totals", lambda c, i: totals_ctor(c, i, scope))
            counts = pairs.unary(route, "Counts", lambda c, i: table_ctor(c, i, scope))
            totals.concat(counts).inspect_batch(lambda t, b: fail(worker, t)).output_to(
                st.io.DirectorySink(str(tmp_path / "out"), format="jsonl"), "out")
        worker.dataflow(build, name="wordcount")
    with pytest.raises(st.WorkerError):
        run(checkpointed(job, tmp_path / "ck"))
    run(checkpointed(job, tmp_path / "ck"))
    expected, totals = [], Counter()
    for e, batch in enumerate(data):
        for key, n in batch:
            totals[key] += n
            expected += [(e, "total", key, totals[key]), (e, "count", key, e + 1)]
    assert _rows(str(tmp_path / "out")) == sorted(expected)


def _rows(out: str) -> list:
    rows = []
    for name in sorted(os.listdir(out)):
        if not name.startswith("_"):
            epoch = int(name.split("-")[1])
            rows += [(epoch, *json.loads(line)) for line in open(os.path.join(out, name))]
    return sorted(rows)


def test_another_program_is_refused_naming_what_differs_and_nothing_changes(run, texts,
                                                                           tmp_path):
    out, directory = str(tmp_path / "out"), tmp_path / "ck"
    fail = FailOnce(str(tmp_path / "failed"), 2)
    with pytest.raises(st.WorkerError):
        run(checkpointed(lambda w: wordcount(w, texts, out, hook=fail), directory))
    before = tree(str(tmp_path))

    def other_operators(worker):
        def build(scope):
            (scope.input_from_source(st.io.FileSource(texts, format="text"), "lines")
             .map(str.upper).output_to(st.io.DirectorySink(out), "counts"))
        worker.dataflow(build, name="wordcount")

    def other_name(worker):
        worker.dataflow(lambda scope: scope.to_stream([1]).probe(), name="other")
    for job, reason in [(other_operators, "its operator 1 is 'FlatMap', this program's is 'Map'"),
                        (other_name, "holds checkpoints of dataflow 'wordcount', not of this "
                                     "program's first dataflow 'other'")]:
        with pytest.raises(st.WorkerError) as failure:
            run(checkpointed(job, directory))
        assert isinstance(cause(failure.value), st.RecoveryError)
        assert reason in str(cause(failure.value))
        assert tree(str(tmp_path)) == before


def test_a_later_dataflow_renamed_is_refused_and_one_never_checkpointed_starts_afresh(
        run, texts, tmp_path):
    """A program's second dataflow renamed (or replaced) between runs is refused, naming
    both (it started afresh: its sink repeated every record it had made visible), and
    nothing changes; a second dataflow that never committed in the run that failed (it
    failed in its first epoch) starts afresh, and its output is the oracle's. (The first
    dataflow, complete, commits its rerun before the second is built.)"""
    directory = tmp_path / "ck"

    def program(second: str, hook=None):
        def job(worker):
            worker.dataflow(lambda scope: scope.to_stream([1]).probe(), name="first")
            worker.run()
            wordcount(worker, texts, str(tmp_path / second), hook=hook)
        return job

    def renamed(name):                      # the second dataflow under another name
        def job(worker):
            dataflow = worker.dataflow
            worker.dataflow = lambda build, name=None: dataflow(  # type: ignore[method-assign]
                build, name="renamed" if name == "wordcount" else name)
            try:
                program(name)(worker)
            finally:
                del worker.dataflow
        return job
    run(checkpointed(program("out"), directory))
    before = tree(str(tmp_path / "out")), tree(str(directory / "wordcount"))
    with pytest.raises(st.WorkerError) as failure:
        run(checkpointed(renamed("out"), directory))
    assert isinstance(cause(failure.value), st.RecoveryError)
    assert ("holds checkpoints of dataflow 'wordcount', the program's dataflow number 2, "
            "which is 'renamed' in this program") in str(cause(failure.value))
    assert (tree(str(tmp_path / "out")), tree(str(directory / "wordcount"))) == before
    assert not (directory / "renamed" / "commits").exists()

    fresh = tmp_path / "fresh"              # the second dataflow fails before any commit
    with pytest.raises(st.WorkerError):
        run(checkpointed(program("late", FailOnce(str(tmp_path / "failed"), 0)), fresh))
    run(checkpointed(program("late"), fresh))
    assert visible(str(tmp_path / "late")) == running_counts(epochs_of(texts))


@pytest.mark.parametrize("damage", ["garbage", "edited", "state file", "missing file",
                                    "unreadable file", "unreadable record", "newer format"])
def test_a_corrupted_checkpoint_is_refused_naming_the_file_and_nothing_changes(
        run, texts, tmp_path, damage):
    out, directory = str(tmp_path / "out"), tmp_path / "ck"
    fail = FailOnce(str(tmp_path / "failed"), 2)
    job = checkpointed(lambda w: wordcount(w, texts, out, hook=fail), directory)
    with pytest.raises(st.WorkerError):
        run(job)
    commits = directory / "wordcount" / "commits"
    newest = commits / sorted(os.listdir(commits))[-1]
    record = json.loads(newest.read_text())
    state = directory / "wordcount" / sorted(record["files"])[0]
    if damage == "garbage":
        newest.write_bytes(b"\x00not json")
        named = str(newest)
    elif damage == "edited":
        record["epoch"] += 1
        newest.write_text(json.dumps(record))
        named = str(newest)
    elif damage == "newer format":      # told as a version, not as corruption
        record["format"] = "sparktimely-checkpoint/2"
        newest.write_text(json.dumps(record))
        named = (f"{newest} is in the format sparktimely-checkpoint/2, which this sparktimely "
                 f"cannot read (it reads sparktimely-checkpoint/1)")
    elif damage == "state file":
        state.write_bytes(state.read_bytes()[:-1] + b"!")
        named = str(state)
    elif damage == "missing file":
        state.unlink()
        named = str(state)
    else:                               # a directory where a file is (cannot be read)
        unreadable = state if damage == "unreadable file" else newest
        unreadable.unlink()
        unreadable.mkdir()
        named = f"{unreadable} is a directory, not a file"
    before = tree(str(tmp_path))
    with pytest.raises(st.WorkerError) as failure:
        run(job)
    error = cause(failure.value)
    assert isinstance(error, st.RecoveryError) and named in str(error)
    assert tree(str(tmp_path)) == before


@pytest.mark.timeout(120)
def test_a_resume_refused_by_one_worker_tells_no_other_of_records_dropped(tmp_path):
    """Worker 1 reads its part of the checkpoint, worker 0 cannot: the run is refused, and
    worker 1 does not warn that its input's records of the resumed epochs are dropped (it
    did while it waited for the others' word: no resume happened, nothing was dropped)."""
    import logging

    def fold(key, value, total):
        total = (total or 0) + value
        return False, [(key, total)], total

    def job(worker):
        logging.getLogger("sparktimely").addHandler(
            logging.FileHandler(tmp_path / f"worker-{worker.index}.log"))
        worker.dataflow(lambda scope: scope.to_stream([("a", 1), ("b", 2)])
                        .state_machine(fold).probe(), name="totals")
    directory = tmp_path / "ck"
    st.execute(job, workers=2, checkpoint_dir=str(directory))
    commits = directory / "totals" / "commits"
    record = json.loads((commits / sorted(os.listdir(commits))[-1]).read_text())
    state = directory / "totals" / sorted(record["files"])[0]
    assert ".w00000." in state.name                     # worker 0's part
    state.unlink()
    state.mkdir()
    with pytest.raises(st.RecoveryError, match=re.escape(str(state))):
        st.execute(job, workers=2, checkpoint_dir=str(directory))
    assert "they are dropped" not in (tmp_path / "worker-1.log").read_text()
    st.execute(job, workers=2, checkpoint_dir=str(tmp_path / "other"))   # the handler works
    st.execute(job, workers=2, checkpoint_dir=str(tmp_path / "other"))
    assert "they are dropped" in (tmp_path / "worker-1.log").read_text()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_rerun_warns_naming_the_input_and_the_last_epoch_it_drops(tmp_path, workers):
    """A longer rerun sends its records again from epoch 0: the warning names the input by
    its handle's name (it said 'Input', the operator) and says up to which epoch what it
    sends is dropped (it told only the first dropped epoch, so records the rerun added at
    the last epoch the first run had sent at went without a word)."""
    import logging

    def fold(key, value, total):
        total = (total or 0) + value
        return False, [(key, total)], total

    def job(worker, epochs):
        logging.getLogger("sparktimely").addHandler(
            logging.FileHandler(tmp_path / f"worker-{worker.index}-{epochs}.log"))
        readings = st.InputHandle("readings")
        worker.dataflow(lambda scope: scope.input_from(readings).state_machine(fold).probe(),
                        name="totals")
        for epoch in range(epochs):
            readings.send(("k", 1))
            readings.advance_to(epoch + 1)
        readings.close()
        worker.run()
    directory = str(tmp_path / "ck")
    st.execute(lambda worker: job(worker, 3), workers=workers, checkpoint_dir=directory)
    st.execute(lambda worker: job(worker, 5), workers=workers, checkpoint_dir=directory)
    for index in range(workers):
        told = (tmp_path / f"worker-{index}-5.log").read_text()
        assert (f"dataflow 'totals', worker {index}: 'readings' sent records at epoch 0, which "
                f"the checkpoint this run resumed from (of epoch 2) already holds; they are "
                f"dropped, as is what it sends at any epoch up to 2, the last it had sent "
                f"records at") in told, told


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_state_machine_of_a_nan_key_resumes_as_one_key(tmp_path, workers):
    """A NaN key of the restored state (an object of its own, unpickled) and the NaN keys of
    the records after the resume were two keys: the rerun's totals started again from None."""
    def job(worker, epochs):
        readings = st.InputHandle("readings")
        totals = worker.dataflow(lambda scope: scope.input_from(readings).state_machine(
            lambda key, value, total: (False, [(repr(key), (total or 0) + value)],
                                       (total or 0) + value)).capture(), name="totals")
        for epoch in range(epochs):
            readings.send((float("nan"), 1))
            readings.send(((1, float("nan")), 10))
            readings.advance_to(epoch + 1)
        readings.close()
        worker.run()
        return totals.extract()
    directory = str(tmp_path / "ck")
    st.execute(lambda worker: job(worker, 2), workers=workers, checkpoint_dir=directory)
    resumed = st.execute(lambda worker: job(worker, 4), workers=workers,
                         checkpoint_dir=directory)
    found = sorted((time, record) for extract in resumed for time, records in extract
                   for record in records)
    assert found == sorted((epoch, (key, step * n)) for epoch in (2, 3)
                           for key, step in (("nan", 1), ("(1, nan)", 10))
                           for n in range(epoch * workers + 1, (epoch + 1) * workers + 1))


def totals_job(worker):
    """Running totals of three epochs of ("k", 1) per worker, in dataflow 'totals'."""
    def fold(key, value, total):
        total = (total or 0) + value
        return False, [(key, total)], total
    readings = st.InputHandle("readings")
    worker.dataflow(lambda scope: scope.input_from(readings).state_machine(fold).probe(),
                    name="totals")
    for epoch in range(3):
        readings.send(("k", 1))
        readings.advance_to(epoch + 1)
    readings.close()
    worker.run()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_checkpoint_that_cannot_be_written_names_dataflow_checkpoint_and_directory(
        tmp_path, monkeypatch, workers):
    """A full disk was told as pyarrow's "OSError: [Errno 28] Error writing bytes to file",
    naming no file, directory or dataflow."""
    from sparktimely.io._storage import Storage
    write = Storage.write

    def full(self, path, data):
        if "/checkpoints/" in path:
            raise OSError(28, "No space left on device")
        write(self, path, data)
    monkeypatch.setattr(Storage, "write", full)      # the forked workers' too
    directory = str(tmp_path / "ck")
    with pytest.raises(st.WorkerError) as failure:
        st.execute(totals_job, workers=workers, checkpoint_dir=directory)
    assert re.search(rf"OSError: dataflow 'totals', worker \d: writing checkpoint \d+ \(of "
                     rf"(epoch \d+|everything)\) into checkpoint directory {re.escape(directory)} "
                     rf"failed: OSError: \[Errno 28\] No space left on device",
                     failure.value.message), failure.value.message


@pytest.mark.timeout(120)
def test_a_checkpoint_directory_that_cannot_be_locked_is_told_as_unwritable(
        tmp_path, monkeypatch):
    """A read-only directory was told as one that "cannot be read to resume from"."""
    from sparktimely.io._storage import DirectoryLock

    def read_only(self):
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr(DirectoryLock, "acquire", read_only)
    directory = str(tmp_path / "ck")
    with pytest.raises(st.RecoveryError, match=rf"^checkpoint directory {re.escape(directory)} "
                       rf"cannot be written \(this run's lock file\): \[Errno 30\] Read-only "
                       rf"file system$"):
        st.execute(totals_job, workers=2, checkpoint_dir=directory)


def test_a_directory_in_use_by_another_run_is_refused(run, texts, tmp_path):
    from sparktimely.io._storage import DirectoryLock, Storage
    other = DirectoryLock(Storage(str(tmp_path / "ck")))
    assert other.acquire() is None                   # another run holds the directory
    try:
        with pytest.raises(st.WorkerError) as failure:
            run(checkpointed(lambda w: wordcount(w, texts, str(tmp_path / "out")),
                             tmp_path / "ck"))
        error = cause(failure.value)
        assert isinstance(error, st.RecoveryError) and "in use by another run" in str(error)
        assert sorted(os.listdir(tmp_path / "ck")) == ["_lock"]
        assert not os.path.exists(tmp_path / "out")
    finally:
        other.release()
    run(checkpointed(lambda w: wordcount(w, texts, str(tmp_path / "out")), tmp_path / "ck"))
    assert visible(str(tmp_path / "out")) == running_counts(epochs_of(texts))


def test_every_dataflow_needs_a_name(tmp_path):
    def job(worker):
        enable_checkpoints(worker, tmp_path)
        worker.dataflow(lambda scope: scope.to_stream([1]).probe())
    with pytest.raises(ValueError, match="every dataflow needs a name"):
        st.execute_directly(job)


def test_two_dataflows_of_one_name_are_refused(run, tmp_path):
    """Their checkpoints would share a folder: a rerun restored one from the other's."""
    def job(worker):
        for _ in range(2):
            worker.dataflow(lambda scope: scope.to_stream([1]).probe(), name="d")
    with pytest.raises(st.WorkerError, match=r"a dataflow named 'd' was built already; with a "
                                             r"checkpoint directory every dataflow needs a "
                                             r"name of its own"):
        run(checkpointed(job, tmp_path / "ck"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_an_input_handle_dropped_unclosed_ends_its_input_as_without_checkpoints(tmp_path,
                                                                                 workers):
    """Dropping the last reference to an input handle closes it (examples/distinct.py does
    so); the checkpoint machinery must not keep the handle alive (it hung the run)."""
    def job(worker):
        handle = st.InputHandle()
        seen: list[int] = []
        probe = worker.dataflow(lambda scope: scope.input_from(handle).exchange(lambda x: x)
                                .inspect(seen.append).probe(), name="dropped")
        handle.send_batch(range(10 * worker.index, 10 * worker.index + 5))
        handle.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        return sorted(seen)                          # the handle goes with this frame
    plain = st.execute(job, workers=workers)
    assert st.execute(job, workers=workers, checkpoint_dir=tmp_path / "ck") == plain
    assert sorted(x for part in plain for x in part) == \
        [10 * w + i for w in range(workers) for i in range(5)]


def test_without_checkpoints_each_epoch_is_written_once_even_when_rerun(run, texts, tmp_path):
    out = str(tmp_path / "out")
    expected = running_counts(epochs_of(texts))
    for _ in range(2):
        run(lambda w: wordcount(w, texts, out, format="parquet"))
        assert visible(out) == expected
        assert not [n for n in os.listdir(out) if n.startswith("_")]
        assert len(os.listdir(out)) <= EPOCHS * run.workers


def test_checkpoints_on_a_filesystem_without_local_files(run, texts, tmp_path):
    """A pyarrow filesystem other than the local one (here pyarrow's in-memory mock): state
    files and records go through pyarrow.fs, the lock is a lease."""
    filesystem = pafs._MockFileSystem()
    out = str(tmp_path / "out")
    fail = FailOnce(str(tmp_path / "failed"), 1)
    job = checkpointed(lambda w: wordcount(w, texts, out, hook=fail), (filesystem, "ck"))
    with pytest.raises(st.WorkerError):
        run(job)
    assert filesystem.get_file_info("ck/_lock").type == pafs.FileType.NotFound   # released
    run(job)
    assert visible(out) == running_counts(epochs_of(texts))
    listed = filesystem.get_file_info(pafs.FileSelector("ck/wordcount/commits"))
    assert len(listed) == 2


def test_a_dataflow_of_product_times_resumes_by_their_outer_epoch(run, tmp_path):
    """Root times ``Product(epoch, 0)``: sources send at ``Product(epoch, 0)``, a delay moves
    records to later inner times, and checkpoints and the sink go by the outer coordinate."""
    source = str(tmp_path / "texts")
    write_texts(source, files=2, lines=9)
    fail = FailOnce(str(tmp_path / "failed"), st.Product(1, 1), worker=1)
    out = str(tmp_path / "out")

    def job(worker):
        def build(scope):
            words = (scope.input_from_source(st.io.FileSource(source, format="text",
                                                              batch_rows=3), "lines")
                     .flat_map(lambda line: [(word, 1) for word in line.split()])
                     .delay(lambda x, t: st.Product(t.outer, 1)))
            counts = words.state_machine(lambda k, v, s: (False, [[k, (s or 0) + v]],
                                                          (s or 0) + v))
            counts.inspect_batch(lambda t, b: fail(worker, t)).output_to(
                st.io.DirectorySink(out, format="jsonl"), "counts")
        worker.dataflow(build, name="wordcount", timestamp=st.Product)
    with pytest.raises(st.WorkerError):
        run(checkpointed(job, tmp_path / "ck"))
    run(checkpointed(job, tmp_path / "ck"))
    assert visible(out) == running_counts(epochs_of(source))


def test_an_operator_holding_an_epoch_open_for_later_input_does_not_hang_the_run(
        run, texts, tmp_path, monkeypatch, caplog):
    """Downstream of the running counts, an operator keeps a capability at epoch 0 until its
    input is past epoch 1: epoch 0 cannot complete before the counts of epoch 2 pass, which the
    checkpoint at epoch 0 holds back. After STALL_SECONDS without progress everything is let
    through; the run completes with the same output and a last checkpoint."""
    monkeypatch.setattr(st.io.checkpoints, "STALL_SECONDS", 0.5)
    out = str(tmp_path / "out")

    def holding(cap, info):
        held = [cap]

        def logic(input, output):
            for t, batch in input:
                output.session(t).give_batch(batch)
            if held and not input.frontier.less_than(2):
                held.pop().drop()
        return logic

    def job(worker):
        def build(scope):
            counts = (scope.input_from_source(st.io.FileSource(texts, format="text",
                                                               batch_rows=3), "lines")
                      .flat_map(lambda line: [(word, 1) for word in line.split()])
                      .state_machine(lambda k, v, s: (False, [[k, (s or 0) + v]], (s or 0) + v)))
            counts.unary_frontier(st.Pipeline, "HoldsEpochZero", holding).output_to(
                st.io.DirectorySink(out, format="jsonl"), "counts")
        worker.dataflow(build, name="wordcount")
    with caplog.at_level("WARNING", logger="sparktimely"):
        run(checkpointed(job, tmp_path / "ck"))
    assert visible(out) == running_counts(epochs_of(texts))
    assert "HoldsEpochZero" in caplog.text and "no more checkpoints" in caplog.text
    assert records(str(tmp_path / "ck"))[-1]["complete"]


def test_the_sink_may_write_inside_the_checkpoint_directory(run, texts, tmp_path):
    directory = tmp_path / "ck"
    out = str(directory / "out")
    fail = FailOnce(str(tmp_path / "failed"), 1)
    job = checkpointed(lambda w: wordcount(w, texts, out, hook=fail), directory)
    with pytest.raises(st.WorkerError):
        run(job)
    run(job)
    assert visible(out) == running_counts(epochs_of(texts))


def test_a_state_that_cannot_be_checkpointed_is_named_with_its_operator_and_key(run, tmp_path):
    import threading

    def job(worker):
        def build(scope):
            pairs = scope.to_stream([(k, k) for k in range(4)] if scope.index == 0 else [])
            pairs.state_machine(lambda key, value, state: (
                False, [value], threading.Lock() if key == 3 else value)).probe()
        worker.dataflow(build, name="locks")
    with pytest.raises(st.WorkerError, match=r"OperatorError: dataflow 'locks': the checkpoint "
                                             r"of epoch \S+ of operator 'StateMachine#\d+' \(at "
                                             r"key 3\) raised TypeError: cannot pickle"):
        run(checkpointed(job, str(tmp_path / "ck")))


class FailingCommits:
    """A sink whose parts fail to commit epoch 1."""

    def partitions(self):
        return ["only"]

    def open(self, partition, resume_state):
        return self

    def write(self, epoch, batch):
        pass

    def snapshot(self):
        return None

    def commit(self, epoch):
        if epoch >= 1:
            raise OSError(f"disk full at epoch {epoch}")


def test_a_sink_failing_to_commit_is_named(run, tmp_path):
    def job(worker):
        def build(scope):
            handle, numbers = scope.new_input()
            numbers.output_to(FailingCommits(), "ledger")
            return handle
        handle = worker.dataflow(build, name="books")
        for epoch in range(3):
            handle.send(epoch)
            handle.advance_to(epoch + 1)
        handle.close()
    with pytest.raises(st.WorkerError, match=r"OperatorError: dataflow 'books': the commit of "
                                             r"epoch 1 of sink 'ledger' raised OSError: disk "
                                             r"full at epoch 1"):
        run(checkpointed(job, str(tmp_path / "ck")))
