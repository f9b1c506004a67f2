"""Recovery with real worker processes (``st.execute``): a worker SIGKILLed at the first,
a middle and the last epoch, while a checkpoint is written, and between a commit record and
the sinks' renames; the rerun's visible output equals an undisturbed run's exactly, also at
another worker count. Two runs of one directory at once: the second is refused."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest

import sparktimely as st
from sparktimely.io import DirectorySink

from recovery_jobs import (FailOnce, epochs_of, fold, running_counts, tree, visible,
                           wordcount, write_texts)

pytestmark = pytest.mark.timeout(120)

HERE = os.path.dirname(os.path.abspath(__file__))
LINES = 30                       # 10 epochs of 3 lines per file


@pytest.fixture
def texts(tmp_path):
    folder = str(tmp_path / "texts")
    write_texts(folder, files=4, lines=LINES)
    return folder


@pytest.fixture
def undisturbed(texts, tmp_path):
    out = str(tmp_path / "undisturbed")
    st.execute(lambda w: wordcount(w, texts, out), workers=2)
    expected = running_counts(epochs_of(texts))
    assert visible(out) == expected
    return expected


@pytest.mark.parametrize("epoch", [0, 4, 9], ids=["first", "middle", "last"])
@pytest.mark.parametrize("workers, rerun_workers", [(1, 1), (2, 2), (3, 3), (2, 3)])
def test_a_worker_killed_at_an_epoch_then_a_rerun_gives_the_undisturbed_output(
        texts, tmp_path, undisturbed, epoch, workers, rerun_workers):
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")
    kill = FailOnce(str(tmp_path / "killed"), epoch, worker=workers - 1, kill=True)
    job = lambda w: wordcount(w, texts, out, hook=kill)                   # noqa: E731
    with pytest.raises(st.WorkerError, match="SIGKILL"):
        st.execute(job, workers=workers, checkpoint_dir=directory)
    assert os.path.exists(tmp_path / "killed")
    st.execute(job, workers=rerun_workers, checkpoint_dir=directory)
    assert visible(out) == undisturbed
    assert not [name for name in os.listdir(out) if name.startswith("_")]


@pytest.mark.parametrize("workers, rerun_workers", [(3, 1), (3, 2)])
def test_a_crash_before_the_first_checkpoint_leaves_no_staged_files_after_a_smaller_rerun(
        texts, tmp_path, undisturbed, workers, rerun_workers):
    """Nothing was committed, so the rerun starts afresh with fewer workers: what the crashed
    run's extra workers staged is deleted, not left behind for no one to open."""
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")
    kill = FailOnce(str(tmp_path / "killed"), 2, worker=workers - 1, kill=True)
    job = lambda w: wordcount(w, texts, out, hook=kill)                   # noqa: E731
    with pytest.raises(st.WorkerError, match="SIGKILL"):
        st.execute(job, workers=workers, checkpoint_dir=directory, checkpoint_every=100)
    st.execute(job, workers=rerun_workers, checkpoint_dir=directory, checkpoint_every=100)
    assert visible(out) == undisturbed
    assert not [name for name in os.listdir(out) if name.startswith("_")]


@pytest.mark.parametrize("workers, rerun_workers", [(2, 1), (2, 3)])
def test_keyed_state_of_one_key_resumes_at_another_worker_count(tmp_path, workers,
                                                                rerun_workers):
    """One key: the checkpoint holds one worker's state and another's empty one (their
    tables differ in types); the rerun at another worker count reads both."""
    source, out, directory = tmp_path / "in.jsonl", str(tmp_path / "out"), str(tmp_path / "ck")
    source.write_text("".join(json.dumps(["a", 1]) + "\n" for _ in range(6)))
    fail = FailOnce(str(tmp_path / "failed"), 3, worker=None)

    def job(worker):
        def build(scope):
            (scope.input_from_source(st.io.FileSource(str(source), format="jsonl",
                                                      batch_rows=1), "rows")
             .map(tuple)
             .state_machine(lambda key, one, total: (False, [[key, (total or 0) + one]],
                                                     (total or 0) + one))
             .inspect_batch(lambda time, batch: fail(worker, time))
             .output_to(DirectorySink(out, format="jsonl"), "totals"))
        worker.dataflow(build, name="totals")
    with pytest.raises(st.WorkerError, match="failing on purpose"):
        st.execute(job, workers=workers, checkpoint_dir=directory)
    st.execute(job, workers=rerun_workers, checkpoint_dir=directory)
    assert visible(out) == [(epoch, "a", epoch + 1) for epoch in range(6)]


class KillingSink(DirectorySink):
    """A DirectorySink whose part ``partition`` kills its process once, in ``snapshot()`` (a
    checkpoint half written), in ``commit()`` (the record written, nothing renamed) or in
    ``write()``, at (the checkpoint of) ``epoch`` or later."""

    def __init__(self, path, marker, when, epoch, partition="0"):
        super().__init__(path, format="jsonl")
        self.marker, self.when, self.epoch, self.partition = marker, when, epoch, partition

    def open(self, partition, resume_state):
        part = super().open(partition, resume_state)
        sink = self
        if partition != self.partition:
            return part

        class Part(type(part)):
            def write(self, epoch, batch):
                sink.maybe_kill("write", epoch)
                super().write(epoch, batch)

            def snapshot(self):
                sink.maybe_kill("snapshot", max(self.writing, default=-1))
                return super().snapshot()

            def commit(self, epoch):
                sink.maybe_kill("commit", epoch)
                super().commit(epoch)
        part.__class__ = Part
        return part

    def maybe_kill(self, when, epoch):
        if when == self.when and epoch >= self.epoch and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), 9)


def counts_into(texts, sink):
    """A job: the running counts of the words in ``texts``, written to ``sink``."""
    def job(worker):
        def build(scope):
            (scope.input_from_source(st.io.FileSource(texts, format="text", batch_rows=3),
                                     "lines")
             .flat_map(lambda line: [(word, 1) for word in line.split()])
             .state_machine(lambda k, v, s: (False, [[k, (s or 0) + v]], (s or 0) + v))
             .output_to(sink, "counts"))
        worker.dataflow(build, name="wordcount")
    return job


@pytest.mark.parametrize("when", ["snapshot", "commit"])
@pytest.mark.parametrize("before, after", [(2, 2), (3, 2)])
def test_a_worker_killed_inside_a_checkpoint_then_a_rerun_gives_the_undisturbed_output(
        texts, tmp_path, undisturbed, when, before, after):
    """At 3 then 2 workers, worker 0 also finishes the commit of the third worker's staged
    files."""
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")
    job = counts_into(texts, KillingSink(out, str(tmp_path / "killed"), when, 5))
    with pytest.raises(st.WorkerError, match="SIGKILL"):
        st.execute(job, workers=before, checkpoint_dir=directory)
    staged = [name for name in os.listdir(out) if name.startswith("_staged")]
    assert staged                                  # written, never made visible
    st.execute(job, workers=after, checkpoint_dir=directory)
    assert visible(out) == undisturbed
    assert not [name for name in os.listdir(out) if name.startswith("_")]


def test_a_resumed_run_deletes_what_a_later_crash_with_more_workers_staged(
        texts, tmp_path, undisturbed):
    """A checkpoint at 2 workers; a run at 3 resumes it and crashes before its own first
    checkpoint; the rerun at 2 resumes the 2-worker checkpoint again, so no one opens the
    third worker's partition: its staged files are deleted, not left behind."""
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")
    second = KillingSink(out, str(tmp_path / "second"), "write", 4, partition="1")
    with pytest.raises(st.WorkerError, match="SIGKILL"):
        st.execute(counts_into(texts, second), workers=2, checkpoint_dir=directory)
    third = KillingSink(out, str(tmp_path / "third"), "write", 6, partition="2")
    with pytest.raises(st.WorkerError, match="SIGKILL"):
        st.execute(counts_into(texts, third), workers=3, checkpoint_dir=directory,
                   checkpoint_every=100)
    assert [name for name in os.listdir(out) if name.startswith("_") and "-2." in name]
    st.execute(counts_into(texts, DirectorySink(out, format="jsonl")), workers=2,
               checkpoint_dir=directory)
    assert visible(out) == undisturbed
    assert not [name for name in os.listdir(out) if name.startswith("_")]


def test_two_runs_of_one_directory_at_once_the_second_is_refused(texts, tmp_path, undisturbed):
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")
    first = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {HERE!r})
        import sparktimely as st
        from recovery_jobs import wordcount
        def slow(worker, epoch):
            time.sleep(0.3)
        st.execute(lambda worker: wordcount(worker, {texts!r}, {out!r}, hook=slow), workers=2,
                   checkpoint_dir={directory!r})
        """)])
    try:
        commits = os.path.join(directory, "wordcount", "commits")
        deadline = time.monotonic() + 60
        while not (os.path.isdir(commits) and os.listdir(commits)):
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        other = str(tmp_path / "other-out")
        with pytest.raises(st.RecoveryError, match="is in use by another run"):
            st.execute(lambda w: wordcount(w, texts, other), workers=2, checkpoint_dir=directory)
        assert not os.path.exists(other)
        assert first.wait(60) == 0
    finally:
        first.kill()
        first.wait()
    assert visible(out) == undisturbed
    st.execute(lambda w: wordcount(w, texts, out, hook=lambda w, e: None), workers=3,
               checkpoint_dir=directory)
    assert visible(out) == undisturbed             # a rerun after completion adds nothing


def test_a_worker_busy_longer_than_the_stall_limit_does_not_stop_checkpoints(
        texts, tmp_path, undisturbed, monkeypatch):
    """One operator call on worker 1 takes longer than STALL_SECONDS while nothing else
    moves: worker 1 is busy, not stalled, so checkpoints go on at every epoch."""
    monkeypatch.setattr(st.io.checkpoints, "STALL_SECONDS", 0.3)
    monkeypatch.setattr(st.io.checkpoints, "KEEP", 100)
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")

    def slow(worker, epoch):
        if worker.index == 1 and epoch == 5:
            time.sleep(2.5)
    st.execute(lambda w: wordcount(w, texts, out, hook=slow), workers=2,
               checkpoint_dir=directory)
    assert visible(out) == undisturbed
    commits = os.path.join(directory, "wordcount", "commits")
    epochs = [json.load(open(os.path.join(commits, name)))["epoch"]
              for name in sorted(os.listdir(commits))]
    assert epochs == list(range(LINES // 3))        # every epoch, the last one at completion


def test_execute_raises_recovery_error_itself_and_changes_nothing(texts, tmp_path):
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")
    kill = FailOnce(str(tmp_path / "killed"), 4, worker=1, kill=True)
    with pytest.raises(st.WorkerError):
        st.execute(lambda w: wordcount(w, texts, out, hook=kill), workers=2,
                   checkpoint_dir=directory)
    before = tree(str(tmp_path))

    def other(worker):
        worker.dataflow(lambda scope: scope.input_from_source(
            st.io.FileSource(texts, format="text"), "lines").output_to(DirectorySink(out), "x"),
            name="wordcount")
    with pytest.raises(st.RecoveryError, match="its operator 1 is 'FlatMap', this program's "
                                               "is 'x'"):
        st.execute(other, workers=3, checkpoint_dir=directory)
    commits = os.path.join(directory, "wordcount", "commits")
    newest = os.path.join(commits, max(n for n in os.listdir(commits) if n.endswith(".json")
                                       and n[0].isdigit()))
    with open(newest, "a") as record:
        record.write(" ")                                  # still JSON, no longer its digest
    before[os.path.relpath(newest, tmp_path)] += b" "
    with pytest.raises(st.RecoveryError, match=f"commit record {newest} is corrupt"):
        st.execute(lambda w: wordcount(w, texts, out, hook=kill), workers=2,
                   checkpoint_dir=directory)
    assert tree(str(tmp_path)) == before


def test_the_example_killed_from_outside_and_rerun_writes_every_total_once(tmp_path):
    """examples.recoverable_wordcount with --checkpoint-dir, SIGKILLed (the whole job) once
    its first checkpoint exists, rerun at another worker count: the Parquet files equal an
    undisturbed run's."""
    import pyarrow.parquet as pq
    texts = str(tmp_path / "texts")
    write_texts(texts, files=4, lines=3000, width=6)
    root = os.path.dirname(os.path.dirname(HERE))

    def run(out, *flags):
        return subprocess.Popen([sys.executable, "-m", "examples.recoverable_wordcount", texts,
                                 out, "--lines-per-epoch", "20", *flags], cwd=root)

    def totals(out):
        return sorted((name.split("-")[1], row["word"], row["total"])
                      for name in os.listdir(out) if not name.startswith("_")
                      for row in pq.read_table(os.path.join(out, name)).to_pylist())
    assert run(str(tmp_path / "plain"), "-w2").wait(60) == 0
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")
    first = run(out, "-w2", "--checkpoint-dir", directory)
    commits = os.path.join(directory, "recoverable-wordcount", "commits")
    deadline = time.monotonic() + 60
    while not (os.path.isdir(commits) and os.listdir(commits)) and time.monotonic() < deadline:
        time.sleep(0.01)
    first.kill()
    first.wait()
    assert run(out, "-w3", "--checkpoint-dir", directory).wait(60) == 0
    assert totals(out) == totals(str(tmp_path / "plain"))


def handle_counts(worker: st.Worker, out: str, epochs: int, hook: FailOnce | None = None,
                  delay: int = 0) -> None:
    """Running word counts of words a program sends itself through an InputHandle, the
    same words in every run, from epoch 0 (as a program started again does); with
    ``delay``, the words reach the counts that many epochs after they were sent."""
    input = st.InputHandle()

    def build(scope):
        counts = (scope.input_from(input)
                  .delay(lambda pair, time: time + delay)
                  .exchange(lambda pair: st.stable_hash(pair[0]))
                  .state_machine(fold)
                  .inspect_batch(lambda time, batch: hook and hook(worker, time)))
        counts.output_to(DirectorySink(out, format="jsonl"), "counts")
        return counts.probe()
    probe = worker.dataflow(build, name="handle counts")
    for epoch in range(epochs):
        for word in words_of(epoch)[worker.index::worker.peers]:
            input.send((word, 1))
        input.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(input.time()))
    input.close()


def words_of(epoch: int) -> list[str]:
    return [f"w{(epoch * 7 + i * 3) % 11}" for i in range(6)]


@pytest.mark.parametrize("workers, rerun_workers", [(1, 2), (2, 3), (3, 1)])
def test_a_rerun_that_sends_its_input_again_from_the_start_counts_it_once(
        tmp_path, workers, rerun_workers):
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")
    kill = FailOnce(str(tmp_path / "killed"), 6, worker=workers - 1, kill=True)
    with pytest.raises(st.WorkerError, match="SIGKILL"):
        st.execute(lambda w: handle_counts(w, out, 10, kill), workers=workers,
                   checkpoint_dir=directory)
    st.execute(lambda w: handle_counts(w, out, 10, kill), workers=rerun_workers,
               checkpoint_dir=directory)
    expected = running_counts({epoch: words_of(epoch) for epoch in range(10)})
    assert visible(out) == expected
    # A run of the completed program again changes nothing; later epochs add to the counts.
    st.execute(lambda w: handle_counts(w, out, 10), workers=workers, checkpoint_dir=directory)
    assert visible(out) == expected
    st.execute(lambda w: handle_counts(w, out, 12), workers=workers, checkpoint_dir=directory)
    assert visible(out) == running_counts({epoch: words_of(epoch) for epoch in range(12)})


@pytest.mark.parametrize("workers, rerun_workers", [(1, 1), (2, 3), (3, 2)])
def test_a_longer_rerun_of_a_completed_program_whose_output_ran_ahead_loses_nothing(
        tmp_path, workers, rerun_workers):
    """The completed dataflow's last checkpoint is of epoch 12 (the delay's output), its
    inputs had sent up to 9: a rerun's epochs 10 and 11 are sent at 13, not dropped."""
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")
    st.execute(lambda w: handle_counts(w, out, 10, delay=3), workers=workers,
               checkpoint_dir=directory)
    first = running_counts({epoch + 3: words_of(epoch) for epoch in range(10)})
    assert visible(out) == first
    for run in range(2):                # the second longer run changes nothing
        st.execute(lambda w: handle_counts(w, out, 12, delay=3), workers=rerun_workers,
                   checkpoint_dir=directory)
        later = running_counts({16: words_of(10) + words_of(11)},
                               Counter(w for epoch in range(10) for w in words_of(epoch)))
        assert visible(out) == sorted(first + later), run


def two_input_counts(worker: st.Worker, out: str, lagging_epochs: int) -> None:
    """Running word counts of two inputs on every worker: ``words_of`` each epoch of ten
    through one, and, through the other of the last worker only, the word ``b<epoch>`` for
    each of the first ``lagging_epochs``."""
    words, lagging = st.InputHandle(), st.InputHandle()

    def build(scope):
        counts = (scope.input_from(words).concat(scope.input_from(lagging))
                  .exchange(lambda pair: st.stable_hash(pair[0])).state_machine(fold))
        counts.output_to(DirectorySink(out, format="jsonl"), "counts")
        return counts.probe()
    probe = worker.dataflow(build, name="two inputs")
    for epoch in range(10):
        for word in words_of(epoch)[worker.index::worker.peers]:
            words.send((word, 1))
        if epoch < lagging_epochs and worker.index == worker.peers - 1:
            lagging.send((f"b{epoch}", 1))
        words.advance_to(epoch + 1)
        if epoch + 1 == lagging_epochs:
            lagging.close()                 # it ends here, the other goes on
        elif epoch < lagging_epochs:
            lagging.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(words.time()))
    words.close()


@pytest.mark.parametrize("workers, rerun_workers", [(1, 1), (2, 2), (3, 3), (2, 3)])
def test_a_longer_rerun_loses_nothing_of_an_input_that_had_sent_less_than_another(
        tmp_path, workers, rerun_workers):
    """The completed dataflow's last checkpoint is of epoch 9, the epoch one input reached;
    the other (of one worker) had sent up to epoch 5. A rerun that sends it on to epoch 9
    has its epochs 6 to 9 sent at 10, not dropped as if the checkpoint held them."""
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")
    by_epoch = {epoch: words_of(epoch) + [f"b{epoch}"] * (epoch < 6) for epoch in range(10)}
    st.execute(lambda w: two_input_counts(w, out, 6), workers=workers, checkpoint_dir=directory)
    assert visible(out) == running_counts(by_epoch)
    for run in range(2):                # the second longer run changes nothing
        st.execute(lambda w: two_input_counts(w, out, 10), workers=rerun_workers,
                   checkpoint_dir=directory)
        assert visible(out) == running_counts(
            {**by_epoch, 10: [f"b{epoch}" for epoch in range(6, 10)]}), run


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_rerun_of_a_completed_program_does_not_apply_its_to_stream_again(tmp_path, workers):
    def job(worker):
        pairs = [("a", 1), ("b", 2), ("a", 3)] if worker.index == 0 else []
        return worker.dataflow(lambda scope: scope.to_stream(pairs)
                               .exchange(lambda pair: st.stable_hash(pair[0]))
                               .state_machine(fold).capture(), name="totals")
    for run in range(2):
        captures = st.execute(job, workers=workers, checkpoint_dir=str(tmp_path / "ck"))
        records = sorted(tuple(r) for c in captures for _, batch in c.extract() for r in batch)
        assert records == ([("a", 1), ("a", 4), ("b", 2)] if run == 0 else []), run
