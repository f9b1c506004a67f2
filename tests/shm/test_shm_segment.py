"""Segments: create/attach by name, cleanup sweeps, deferred unmap, /dev/shm fallback."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time

import pytest

from sparktimely.shm import Mesh, Segment, job_prefix, sweep, sweep_stale
from sparktimely.shm import _segment


def test_create_attach_unlink():
    name = job_prefix() + "-seg"
    with Segment.create(name, 1000) as seg:
        assert seg.path == os.path.join("/dev/shm", name) and seg.size == 4096
        seg.buf[:5] = b"hello"
        with Segment.attach(name) as other:
            assert bytes(other.buf[:5]) == b"hello"
            assert other.address != seg.address
        assert os.path.exists(seg.path)
    assert not os.path.exists(seg.path)


def test_close_is_deferred_while_pinned():
    with Segment.create(job_prefix() + "-pin", 4096) as seg:
        view = seg.buf[:8]  # a caller's slice must not make close() raise
        seg.pin()
        seg.close()
        assert seg.closed and seg._mm is not None
        seg.unpin()
        assert seg._mm is None
        del view


def test_sweep_removes_job_segments_only():
    prefix, other = job_prefix(), job_prefix()
    segs = [Segment.create(f"{prefix}-a", 10), Segment.create(f"{prefix}-b", 10),
            Segment.create(f"{other}-a", 10)]
    for s in segs:
        s.close()
    assert sweep(prefix) == 2
    assert os.path.exists(segs[2].path)
    assert sweep(other) == 1
    with pytest.raises(ValueError):
        sweep("sparktimely-")


def test_sweep_stale_removes_segments_of_dead_creators(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(30)
    ns = _segment._pid_namespace()
    names = {"dead": f"sparktimely-{dead.pid}-{ns:x}-0badcafe-ctl",
             "alive": f"sparktimely-{os.getpid()}-{ns:x}-0badcafe-ctl",
             "other namespace": f"sparktimely-{dead.pid}-{ns + 1:x}-0badcafe-ctl"}
    for name in names.values():
        Segment.create(name, 10, str(tmp_path)).close()
    assert sweep_stale(str(tmp_path)) >= 1
    assert sorted(os.listdir(tmp_path)) == sorted([names["alive"], names["other namespace"]])
    for name in os.listdir(tmp_path):
        os.unlink(tmp_path / name)


def test_sweep_stale_sees_through_a_reused_pid(tmp_path):
    """A live process holding the pid in a segment's name, but started after the segment was
    made, is not its creator: the segment is stale."""
    ns = _segment._pid_namespace()
    mine = f"sparktimely-{os.getpid()}-{ns:x}-0badcafe-ctl"
    Segment.create(mine, 10, str(tmp_path)).close()
    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        reused = f"sparktimely-{later.pid}-{ns:x}-0badcafe-ctl"
        Segment.create(reused, 10, str(tmp_path)).close()
        assert sweep_stale(str(tmp_path)) == 0          # made after its creator started
        an_hour_ago = time.time() - 3600
        os.utime(tmp_path / reused, (an_hour_ago, an_hour_ago))
        assert sweep_stale(str(tmp_path)) == 1
        assert os.listdir(tmp_path) == [mine]           # its creator (this process) lives
    finally:
        later.kill()
        later.wait()
        os.unlink(tmp_path / mine)


def test_killed_creator_is_swept_by_the_next_job():
    code = ("import os; from sparktimely.shm import Mesh; m = Mesh.create(2); print(m.name, flush=True); "
            "os.kill(os.getpid(), 9)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    name = out.stdout.strip()
    assert name.startswith("sparktimely-"), out.stderr
    with Mesh.create(1):  # sweeps on start (a concurrent job may have swept already)
        assert not any(n.startswith(name) for n in os.listdir("/dev/shm"))


def test_creator_unlinks_at_exit():
    code = "from sparktimely.shm import Mesh; print(Mesh.create(2).name)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    name = out.stdout.strip()
    assert name.startswith("sparktimely-"), out.stderr
    assert not any(n.startswith(name) for n in os.listdir("/dev/shm"))


def test_env_dir_forces_file_backed_segments(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKTIMELY_SHM_DIR", str(tmp_path))
    with Mesh.create(2, ring_bytes=1 << 16) as mesh:
        assert len(os.listdir(tmp_path)) == 1        # the control segment; rings come later
        with mesh.endpoint(0) as a, mesh.endpoint(1) as b:
            a.send(1, [b"x" * 100_000])  # larger than the ring: rolls, also inside tmp_path
            [(src, msg)] = b.recv()
            assert src == 0 and bytes(msg) == b"x" * 100_000
            assert {name.rsplit("-", 3)[-3:] == ["r0", "1", "g1"] for name in os.listdir(tmp_path)
                    } == {False, True}            # the control segment and the rolled ring
            del msg
    assert os.listdir(tmp_path) == []


def test_small_dev_shm_falls_back_with_one_log_line(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(_segment, "_free_bytes", lambda path: 1 << 20)
    monkeypatch.setattr(_segment, "_warned", False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    caplog.set_level(logging.WARNING, logger="sparktimely.shm")
    with Mesh.create(2) as mesh:
        where = tmp_path / "sparktimely-shm"
        assert len(os.listdir(where)) == 1
        with mesh.endpoint(0) as a, mesh.endpoint(1) as b:
            a.send(1, [b"ping"])
            assert b.recv() == [(0, b"ping")]
            assert len(os.listdir(where)) == 2     # the ring 0 -> 1, made by the first send
    assert os.listdir(where) == []
    lines = [r for r in caplog.records if r.name == "sparktimely.shm"]
    assert len(lines) == 1 and "/dev/shm has 1.0 MiB free" in lines[0].getMessage()
