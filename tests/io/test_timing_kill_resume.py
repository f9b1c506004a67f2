"""``delay``, ``delay_batch`` and ``reclock`` under epoch checkpoints, with real worker
processes: a worker SIGKILLed after checkpoints that hold records these operators keep for
later times, then a rerun (at the same or another worker count) that sends its input again
from the start; the visible output equals an oracle computed in plain Python, so nothing
held is lost or sent twice."""
from __future__ import annotations

import pytest

import sparktimely as st
from sparktimely.io import DirectorySink

from recovery_jobs import FailOnce, visible

EPOCHS = 10
TICKS = [3, 7, 9]                 # reclock's clock: odd epochs, so that with checkpoints
EVERY = {"delay": 1, "delay_batch": 1, "reclock": 2}   # at even ones every checkpoint holds some
KILL_AT = {"delay": 6, "delay_batch": 6, "reclock": 7}  # an output time on every worker


def records_of(epoch: int) -> list[int]:
    """The records sent at ``epoch`` (split among the workers, whatever their number)."""
    return [10 * epoch + i for i in range(6)]


def delay_of(x: int, time: int) -> int:
    """``delay``'s new time: one to three epochs later, every worker holding each offset."""
    return time + x % 10 % 3 + 1


def expected(kind: str) -> list[tuple[int, int]]:
    """The oracle: ``(time, record)`` of every record the operator sends."""
    sent = [(epoch, x) for epoch in range(EPOCHS) for x in records_of(epoch)]
    if kind == "delay":
        return sorted((delay_of(x, epoch), x) for epoch, x in sent)
    if kind == "delay_batch":
        return sorted((epoch + 2, x) for epoch, x in sent)
    return sorted((min(t for t in TICKS if t >= epoch), x) for epoch, x in sent
                  if epoch <= TICKS[-1])


def moved(worker: st.Worker, kind: str, out: str, hook: FailOnce | None = None) -> None:
    """The records of each epoch sent through the operator ``kind`` (each worker sends its
    share of them, from epoch 0, as a program started again does) into a DirectorySink;
    ``hook(worker, time)`` sees each batch the operator sends."""
    data = st.InputHandle()
    clock = st.InputHandle() if kind == "reclock" else None

    def build(scope):
        records = scope.input_from(data)
        if kind == "delay":
            later = records.delay(delay_of)
        elif kind == "delay_batch":
            later = records.delay_batch(lambda time: time + 2)
        else:
            later = records.reclock(scope.input_from(clock))
        later = later.inspect_batch(lambda time, batch: hook and hook(worker, time))
        later.map(lambda x: [x]).output_to(DirectorySink(out, format="jsonl"), "moved")
        return later.probe()
    probe = worker.dataflow(build, name=kind)
    for epoch in range(EPOCHS):
        for x in records_of(epoch)[worker.index::worker.peers]:
            data.send(x)
        data.advance_to(epoch + 1)
        if clock is not None:
            if epoch in TICKS:
                clock.send("tick")
            clock.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(data.time()))
    data.close()
    if clock is not None:
        clock.close()


KINDS = ["delay", "delay_batch", "reclock"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("kind", KINDS)
def test_without_checkpoints_the_output_is_the_oracle(tmp_path, kind, workers):
    out = str(tmp_path / "out")
    st.execute(lambda w: moved(w, kind, out), workers=workers)
    assert visible(out) == expected(kind)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers, rerun_workers", [(1, 1), (2, 2), (3, 3), (2, 3), (3, 2)])
@pytest.mark.parametrize("kind", KINDS)
def test_records_held_across_a_checkpoint_survive_a_kill_and_a_rerun(tmp_path, kind, workers,
                                                                      rerun_workers):
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")
    kill = FailOnce(str(tmp_path / "killed"), KILL_AT[kind], worker=workers - 1, kill=True)
    job = lambda w: moved(w, kind, out, kill)                           # noqa: E731
    with pytest.raises(st.WorkerError, match="SIGKILL"):
        st.execute(job, workers=workers, checkpoint_dir=directory,
                   checkpoint_every=EVERY[kind])
    assert st.io.committed_epochs(directory)[kind] is not None     # resumes mid-run
    st.execute(job, workers=rerun_workers, checkpoint_dir=directory,
               checkpoint_every=EVERY[kind])
    assert visible(out) == expected(kind)
    assert st.io.committed_epochs(directory)[kind] is None
