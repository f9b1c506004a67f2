"""Differential jobs with real worker processes (``st.execute``) and epoch checkpoints: the
worker that first outputs an update of the first, a middle or the last epoch at which the
output changes is SIGKILLed; a rerun with the same directory, at the same or another number
of workers, resumes from the restored arrangements and output traces. The visible updates of
both runs add up, at every epoch, to the collection an independent oracle recomputes from
scratch: nothing lost, nothing counted twice."""
from __future__ import annotations

import json
import os

import pytest

import sparktimely as st

import dd_recovery_jobs as jobs
from recovery_jobs import FailOnce

pytestmark = pytest.mark.timeout(120)


def kill_and_resume(tmp_path, kind: str, position: str, before: int, after: int,
                    every: int = 1) -> None:
    job = jobs.Job(kind, tmp_path)
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")
    marker = str(tmp_path / "killed")
    kill = FailOnce(marker, job.at(position), worker=None, kill=True)
    with pytest.raises(st.WorkerError, match="SIGKILL"):
        st.execute(lambda w: job.run(w, out, kill), workers=before, checkpoint_dir=directory,
                   checkpoint_every=every)
    assert os.path.exists(marker)
    st.execute(lambda w: job.run(w, out, kill), workers=after, checkpoint_dir=directory,
               checkpoint_every=every)
    jobs.agrees(jobs.updates(out), job.oracle())
    assert not [name for name in os.listdir(out) if name.startswith("_")]
    commits = os.path.join(directory, jobs.DATAFLOWS[kind], "commits")
    newest = json.load(open(os.path.join(commits, max(os.listdir(commits)))))
    assert newest["complete"] and newest["workers"] == after


@pytest.mark.parametrize("kind", ["wordcount", "join_count", "reachability"])
@pytest.mark.parametrize("position", ["first", "middle", "last"])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_worker_killed_at_an_epoch_then_a_rerun_adds_up_to_the_oracle(
        tmp_path, kind, position, workers):
    kill_and_resume(tmp_path, kind, position, workers, workers)


@pytest.mark.parametrize("kind", jobs.KINDS)
@pytest.mark.parametrize("before, after", [(2, 3), (3, 1)])
def test_a_rerun_at_another_worker_count_redistributes_the_traces(tmp_path, kind, before, after):
    kill_and_resume(tmp_path, kind, "middle", before, after)


@pytest.mark.parametrize("kind", jobs.KINDS)
@pytest.mark.parametrize("position", ["middle", "last"])
def test_checkpoints_every_third_epoch_resume_from_the_last_multiple(tmp_path, kind, position):
    kill_and_resume(tmp_path, kind, position, 2, 2, every=3)
