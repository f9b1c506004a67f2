"""A full shared-memory directory gives an error that names the directory, the size asked
for, the space left and how to point the engine elsewhere; and a job keeps within its bound on reserved shared memory (by default half of the
directory), so a small directory does not fail it.

The directory is a real 20 MiB tmpfs, mounted in a private mount namespace (``unshare``), so
the kernel itself answers ENOSPC."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

JOB = """
import sys, time, numpy as np, sparktimely as st
def job(worker):
    handle = st.InputHandle()
    probe = worker.dataflow(lambda scope: scope.input_from(handle).exchange(lambda x: 1).probe())
    if worker.index == 0:
        handle.send(np.zeros(int(sys.argv[1]), dtype=np.uint8))   # a ring must grow for it
    handle.close()
    worker.run()
started = time.monotonic()
try:
    st.execute(job, workers=int(sys.argv[2]))
    print("ok")
except Exception as error:
    print(f"{time.monotonic() - started:.2f}", type(error).__name__, error, sep="\\n")
"""


def run_in_tiny_tmpfs(tmp_path, *args: str, limit: str = "") -> list[str]:
    """Run JOB with SPARKTIMELY_SHM_DIR on a fresh 20 MiB tmpfs; returns its output lines
    and checks that the tmpfs is empty afterwards."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a private tmpfs")
    where = tmp_path / "shm"
    where.mkdir()
    script = tmp_path / "job.py"
    script.write_text(JOB)
    shell = (f"mount -t tmpfs -o size=20m tmpfs {where} || exit 77; "
             f"SPARKTIMELY_SHM_DIR={where} SPARKTIMELY_SHM_LIMIT={limit} "
             f"{sys.executable} {script} {' '.join(args)}; "
             f"echo left: $(ls {where} | wc -l)")
    flags = ["--mount"] if os.geteuid() == 0 else ["--user", "--map-root-user", "--mount"]
    done = subprocess.run(["unshare", *flags, "sh", "-c", shell], capture_output=True,
                          text=True, timeout=100, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    if done.returncode == 77 or "unshare failed" in done.stderr:
        pytest.skip(f"cannot mount a private tmpfs here: {done.stderr.strip()}")
    return done.stdout.splitlines()


def test_a_message_larger_than_the_bound_allows_travels_in_parts(tmp_path):
    """10 MB for another worker, 3 workers, a 20 MiB directory: the bound (10 MiB) keeps the
    rings small and the message crosses in parts; nothing fails, nothing is left."""
    assert run_in_tiny_tmpfs(tmp_path, str(10 << 20), "3") == ["ok", "left: 0"]


def test_running_out_of_room_inside_a_worker_fails_the_job_naming_it(tmp_path):
    """A bound above what the directory holds: the ring that grows for an 8 MiB message
    does not fit, and the error names the size, the directory and the remedies."""
    lines = run_in_tiny_tmpfs(tmp_path, str(8 << 20), "2", limit="1G")  # a ring of 16 MiB
    seconds, kind, message, left = lines
    assert kind == "WorkerError"
    # the ring's segment is made by whichever of its two ends first needs it, and worker 1's
    # own first ring (4 MiB) may find the room taken by the growing 16 MiB one first
    assert re.match(rf"worker ([01] failed: NoSpaceError: no room for a 16\.0|1 failed: "
                    rf"NoSpaceError: no room for a 4\.0) MiB shared-memory segment in "
                    rf"{re.escape(str(tmp_path / 'shm'))}", message), message
    assert "MiB free of 20.0 MiB): set SPARKTIMELY_SHM_DIR to a directory with more space" in message
    assert "SPARKTIMELY_SHM_LIMIT" in message
    assert left == "left: 0" and float(seconds) < 5
