"""Differential dataflow under epoch checkpoints, with in-process workers (1, 2 and 3, seeded
interleavings): arrangements, reduce's output traces and iterate's inner traces are
checkpointed and restored, so that a failure at any epoch and a rerun (at the same or another
worker count) give the undisturbed output, which equals the oracles' recomputation. Real
processes killed with SIGKILL are in test_dd_kill_resume.py; ``import_`` with checkpoints is
refused (not supported yet)."""
from __future__ import annotations

from collections import Counter

import pytest

import sparktimely as st
import sparktimely.differential as dd
from sparktimely.differential.trace.spine import MAX_TINY
from sparktimely.io import DirectorySink
from sparktimely.testing import execute_in_process

import dd_recovery_jobs as jobs
from recovery_jobs import FailOnce, checkpointed, lines_by_epoch, write_texts

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("kind", jobs.KINDS)
def test_checkpointed_differential_jobs_equal_their_oracles(run, tmp_path, kind):
    job = jobs.Job(kind, tmp_path)
    out = str(tmp_path / "out")
    run(checkpointed(lambda w: job.run(w, out), tmp_path / "ck"))
    jobs.agrees(jobs.updates(out), job.oracle())
    plain = str(tmp_path / "plain")
    run(lambda w: job.run(w, plain))
    assert jobs.consolidated(jobs.updates(plain)) == jobs.consolidated(jobs.updates(out))


@pytest.mark.parametrize("kind", jobs.KINDS)
@pytest.mark.parametrize("position", ["first", "middle", "last"])
def test_a_failure_at_an_epoch_and_a_rerun_give_the_undisturbed_output(run, tmp_path, kind,
                                                                       position):
    job = jobs.Job(kind, tmp_path)
    epoch = job.at(position)
    plain = str(tmp_path / "plain")
    run(lambda w: job.run(w, plain))
    out = str(tmp_path / "out")
    fail = FailOnce(str(tmp_path / "failed"), epoch, worker=None)
    failing = checkpointed(lambda w: job.run(w, out, fail), tmp_path / "ck")
    with pytest.raises(st.WorkerError, match="failing on purpose"):
        run(failing)
    run(failing)
    assert jobs.consolidated(jobs.updates(out)) == jobs.consolidated(jobs.updates(plain))
    jobs.agrees(jobs.updates(out), job.oracle())


@pytest.mark.parametrize("kind", jobs.KINDS)
@pytest.mark.parametrize("before, after", [(2, 3), (3, 1), (1, 2)])
def test_a_rerun_at_another_worker_count_gives_the_same_output(tmp_path, kind, before, after):
    job = jobs.Job(kind, tmp_path)
    plain = str(tmp_path / "plain")
    execute_in_process(lambda w: job.run(w, plain), after, seed=after)
    out = str(tmp_path / "out")
    fail = FailOnce(str(tmp_path / "failed"), job.at("middle"), worker=None)
    failing = checkpointed(lambda w: job.run(w, out, fail), tmp_path / "ck")
    with pytest.raises(st.WorkerError):
        execute_in_process(failing, before, seed=before)
    execute_in_process(failing, after, seed=after + 10)
    assert jobs.consolidated(jobs.updates(out)) == jobs.consolidated(jobs.updates(plain))
    jobs.agrees(jobs.updates(out), job.oracle())


def test_files_added_between_runs_continue_from_the_restored_arrangements(run, tmp_path):
    """A completed checkpointed word count, rerun after more files were added: the counts
    go on from the restored traces (the last checkpoint keeps them after completion)."""
    texts, out = str(tmp_path / "texts"), str(tmp_path / "out")
    write_texts(texts, files=2, lines=9)
    job = checkpointed(lambda w: jobs.wordcount(w, texts, out), tmp_path / "ck")
    execute_in_process(job, 2, seed=5)
    write_texts(texts, files=2, lines=7, salt=1)
    run(job)
    first = lines_by_epoch(texts)
    everything = Counter()
    for epoch in sorted(first):
        everything.update(w for line in first[epoch] for w in line.split())
    final = jobs.accumulated(jobs.updates(out))
    assert final[max(final)] == (
        Counter({("count", (w, n)): 1 for w, n in everything.items()}) +
        Counter({("twice", w): 1 for w, n in everything.items() if n >= 2}) +
        Counter({("distinct", w): 1 for w in everything}))


def test_import_into_a_dataflow_that_checkpoints_is_refused_naming_trace_and_dataflow(
        run, tmp_path):
    edges, queries, out = str(tmp_path / "edges"), str(tmp_path / "queries"), str(tmp_path / "out")
    jobs.write_edge_files(edges)
    jobs.write_query_files(queries)
    with pytest.raises(st.WorkerError, match="import_ of the trace of 'ArrangeByKey' into "
                                             "dataflow 'queries': import_ into a dataflow "
                                             "that checkpoints is not supported yet"):
        run(checkpointed(lambda w: jobs.shared_queries(w, edges, queries, out), tmp_path / "ck"))


def later_word_counts(texts: str, out: str, hook=None):
    """A job counting each word of ``texts`` three epochs after its line's: updates given
    ahead of their batch's time, which the count's arrangement holds back until their time
    completes (``hook(worker, time)`` sees each output time, as ``FailOnce`` wants)."""
    def later(capability, info):
        capability.drop()

        def logic(input, output):
            for cap, lines in input:
                output.give_at(cap, [(word, cap.time + 3, 1) for line in lines
                                     for word in line.split()])
        return logic

    def job(worker):
        def build(scope):
            lines = jobs.source(texts, "lines")(scope)
            counts = dd.as_collection(lines.unary(st.Pipeline, "Later", later)).count()
            counts = jobs._hooked(counts, worker, hook)
            counts.inner.output_to(DirectorySink(out, format="jsonl"), "updates")
        worker.dataflow(build, name="later")
    return job


@pytest.mark.parametrize("position", ["first", "middle"])
def test_updates_held_for_later_times_survive_a_failure_and_a_rerun(run, tmp_path, position):
    """A checkpoint keeps the updates an arrangement holds for later times (here each word
    counted three epochs after its line's): a failure after it and a rerun give the
    undisturbed output, which counts every word (before, the rerun lost them)."""
    texts = str(tmp_path / "texts")
    write_texts(texts)
    epochs = sorted(lines_by_epoch(texts))
    plain = str(tmp_path / "plain")
    run(later_word_counts(texts, plain))
    final = jobs.accumulated(jobs.updates(plain))
    everything = Counter(w for lines in lines_by_epoch(texts).values()
                         for line in lines for w in line.split())
    assert not final[2] and final[max(final)] == Counter(everything.items())
    out = str(tmp_path / "out")
    epoch = 3 + (epochs[0] if position == "first" else epochs[len(epochs) // 2])
    failing = checkpointed(later_word_counts(texts, out, FailOnce(str(tmp_path / "failed"),
                                                                  epoch, worker=None)),
                           tmp_path / "ck")
    with pytest.raises(st.WorkerError, match="failing on purpose"):
        run(failing)
    run(failing)
    assert jobs.consolidated(jobs.updates(out)) == jobs.consolidated(jobs.updates(plain))


@pytest.mark.parametrize("before, after", [(2, 3), (3, 1)])
def test_updates_held_for_later_times_move_with_their_keys_to_another_worker_count(
        tmp_path, before, after):
    texts = str(tmp_path / "texts")
    write_texts(texts)
    plain = str(tmp_path / "plain")
    execute_in_process(later_word_counts(texts, plain), after, seed=after)
    out = str(tmp_path / "out")
    fail = FailOnce(str(tmp_path / "failed"), 5, worker=None)
    with pytest.raises(st.WorkerError, match="failing on purpose"):
        execute_in_process(checkpointed(later_word_counts(texts, out, fail), tmp_path / "ck"),
                           before, seed=before)
    execute_in_process(checkpointed(later_word_counts(texts, out, fail), tmp_path / "ck"),
                       after, seed=after)
    assert jobs.consolidated(jobs.updates(out)) == jobs.consolidated(jobs.updates(plain))


def test_checkpoints_do_not_hold_a_trace_back_from_compacting(run, tmp_path):
    """A key inserted and removed at each of 40 epochs, checkpointed once every 100 epochs
    (so never before the end): the trace, compacted by its only reader to the epochs it
    has passed, holds a few updates after each epoch as without checkpoints, not one per
    epoch. (Not the very same counts: when an idle trace tidies its tail depends on how
    many rounds each epoch took, which the checkpoints' own rounds change.)"""
    def job(worker):
        session = dd.InputSession()
        trace = worker.dataflow(lambda scope: session.to_collection(scope).arrange_by_self()
                                .trace, name="compacting")
        sizes = []
        for epoch in range(40):
            session.advance_to(epoch)
            session.insert("k") if epoch % 2 == 0 else session.remove("k")
            session.flush()
            worker.step_while(lambda: trace.read_upper() and trace.read_upper()[0] < epoch)
            trace.set_logical_compaction(trace.read_upper())
            trace.set_physical_compaction(trace.read_upper())
            sizes.append(sum(len(batch) for batch in trace.batches()))
        session.close()
        return sizes
    for sizes_per_worker in run(job), run(checkpointed(job, tmp_path / "ck", every=100)):
        # the spine's tail of tiny batches, each merge of it leaving one update
        assert max(max(sizes) for sizes in sizes_per_worker) <= MAX_TINY


def session_counts(out: str, epochs: int):
    """Word counts of an ``InputSession`` that inserts each epoch's words at the epoch and a
    ``"tick"`` three epochs later (so a completed run's last checkpoint is three epochs
    past its inputs')."""
    def job(worker):
        session = dd.InputSession()

        def build(scope):
            counts = session.to_collection(scope).count()
            counts.inner.output_to(DirectorySink(out, format="jsonl"), "updates")
            return counts.inner.probe()
        probe = worker.dataflow(build, name="session counts")
        for epoch in range(epochs):
            for word in session_words(epoch)[worker.index::worker.peers]:
                session.insert(word)
            if worker.index == 0:
                session.update_at("tick", epoch + 3, 1)
            session.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(session.time()))
        session.close()
    return job


def session_words(epoch: int) -> list[str]:
    return [f"w{(epoch * 5 + i) % 7}" for i in range(4)]


def test_a_longer_rerun_of_a_completed_session_moves_its_updates_with_their_batch(
        run, tmp_path):
    """Epochs 6 and 7 of the longer reruns come after the inputs' last epoch (5) but not
    after the completed run's checkpoint (8): their batches, and the updates' own times,
    move to epoch 9; nothing is lost or counted twice."""
    out, directory = str(tmp_path / "out"), tmp_path / "ck"

    def expected(epochs: int) -> Counter:
        words = Counter(w for epoch in range(epochs) for w in session_words(epoch))
        return Counter({(word, n): 1 for word, n in (words + Counter(tick=epochs)).items()})
    run(checkpointed(session_counts(out, 6), directory))
    assert jobs.accumulated(jobs.updates(out))[8] == expected(6)
    for again in range(2):                 # the second changes nothing
        run(checkpointed(session_counts(out, 8), directory))
        final = jobs.accumulated(jobs.updates(out))
        assert max(final) == 10 and final[10] == expected(8), again
        assert final[8] == expected(6), again


JOINED_KEYS = 6


def joined_counts(out: str, epochs: int, fail_at: int | None = None):
    """Each key's count joined with its distinct values, from an ``InputSession``: epoch 0
    inserts every ``(key, val)`` pair, each later epoch one more of a pair already there, so
    the counts change every epoch and the distinct pairs never again. Worker 0 fails at
    epoch ``fail_at``, if given."""
    def job(worker):
        session = dd.InputSession()

        def build(scope):
            pairs = session.to_collection(scope)
            joined = pairs.map(lambda pair: pair[0]).count().join(pairs.distinct())
            joined.inner.output_to(DirectorySink(out, format="jsonl"), "updates")
            return joined.inner.probe()
        probe = worker.dataflow(build, name="joined counts")
        for epoch in range(epochs):
            if epoch == fail_at and worker.index == 0:
                raise RuntimeError(f"failing on purpose at epoch {epoch}")
            for pair in joined_pairs(epoch)[worker.index::worker.peers]:
                session.insert(pair)
            session.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(session.time()))
        session.close()
    return job


def joined_pairs(epoch: int) -> list[tuple[int, int]]:
    if epoch == 0:
        return [(key, val) for key in range(JOINED_KEYS) for val in range(3)]
    return [(key, epoch % 3) for key in range(JOINED_KEYS)]


def joined_counts_oracle(epochs: int) -> dict[int, Counter]:
    """Per epoch, the collection :func:`joined_counts` should hold (recomputed from scratch)."""
    pairs: Counter = Counter()
    result = {}
    for epoch in range(epochs):
        pairs.update(joined_pairs(epoch))
        counts = Counter(key for key, _ in pairs.elements())
        result[epoch] = Counter({(key, (counts[key], val)): 1 for key, val in pairs})
    return result


@pytest.mark.parametrize("before, after", [(1, 2), (1, 3), (2, 3), (3, 2)])
def test_a_join_reads_its_restored_side_however_long_that_side_stays_unchanged(
        tmp_path, before, after):
    """A rerun (at another worker count) joins the new counts with the distinct pairs the
    checkpoint restored, though the distinct side brings nothing new in the rerun's 20-odd
    epochs: its trace, left idle, compacts the restored batch anew (before, the join then
    lost it, and the output stopped changing about a dozen epochs after the resume)."""
    out, directory = str(tmp_path / "out"), tmp_path / "ck"
    with pytest.raises(st.WorkerError, match="failing on purpose"):
        execute_in_process(checkpointed(joined_counts(out, 24, fail_at=4), directory),
                           before, seed=before)
    execute_in_process(checkpointed(joined_counts(out, 24), directory), after, seed=after)
    jobs.agrees(jobs.updates(out), joined_counts_oracle(24))


def test_an_arrow_count_at_product_root_times_resumes_from_its_checkpoint(run, tmp_path):
    """Arrow arrangements in a dataflow of ``Product`` root times (stored as two int
    coordinates) are checkpointed and restored: a failure in the middle and a rerun give the
    undisturbed run's output, which adds up to the oracle's counts at every epoch."""
    csvs = str(tmp_path / "csvs")
    jobs.write_word_csvs(csvs)

    def job(out, hook=None):
        def run_job(worker):
            def build(scope):
                rows = dd.as_collection(jobs.source(csvs, "rows", "csv")(scope))
                counts = jobs._hooked(rows.count(key="word"), worker, hook)
                counts.inner.output_to(DirectorySink(out, format="parquet"), "counts")
            worker.dataflow(build, name="dd-arrow-wordcount", timestamp=st.Product)
        return run_job
    plain = str(tmp_path / "plain")
    run(job(plain))
    out = str(tmp_path / "out")
    failing = checkpointed(job(out, FailOnce(str(tmp_path / "failed"), st.Product(3, 0),
                                             worker=None)), tmp_path / "ck")
    with pytest.raises(st.WorkerError, match="failing on purpose"):
        run(failing)
    run(failing)
    assert jobs.consolidated(jobs.updates(out)) == jobs.consolidated(jobs.updates(plain))
    jobs.agrees(jobs.updates(out), jobs.arrow_wordcount_oracle(csvs))
