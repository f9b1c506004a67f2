"""The suite's leak check counts this run's segments only."""
from __future__ import annotations

import subprocess
import sys

import pytest
from segment_leaks import SegmentWatch

import sparktimely as st
from sparktimely.shm import Segment, job_prefix, run_prefix, segments


def test_the_run_tag_reaches_every_process_of_the_run():
    prefix = run_prefix()
    assert prefix.startswith("sparktimely-t") and job_prefix().startswith(prefix)
    assert all(p.startswith(prefix) for p in st.execute(lambda worker: job_prefix(), workers=2))
    child = subprocess.run([sys.executable, "-c", "from sparktimely.shm import job_prefix; "
                            "print(job_prefix())"], capture_output=True, text=True, timeout=60)
    assert child.stdout.startswith(prefix), child.stderr


def test_segments_of_other_programs_are_not_counted_as_leaks(monkeypatch):
    watch = SegmentWatch()
    monkeypatch.setenv("SPARKTIMELY_SHM_TAG", "otherrun")
    theirs = Segment.create(job_prefix() + "-ctl", 4096)           # another test run's
    monkeypatch.delenv("SPARKTIMELY_SHM_TAG")
    untagged = Segment.create(job_prefix() + "-ctl", 4096)         # a job outside any run
    monkeypatch.undo()
    ours = Segment.create(job_prefix() + "-ctl", 4096)
    try:
        assert watch.leftovers(grace=0) == [ours.path]
        assert {theirs.path, untagged.path} <= set(segments("sparktimely-"))
    finally:
        for segment in (theirs, untagged, ours):
            segment.unlink()
            segment.close()
    assert watch.leftovers(grace=0) == []


def test_a_bad_tag_is_named(monkeypatch):
    monkeypatch.setenv("SPARKTIMELY_SHM_TAG", "Bad Tag")
    with pytest.raises(ValueError, match="SPARKTIMELY_SHM_TAG='Bad Tag'"):
        job_prefix()
