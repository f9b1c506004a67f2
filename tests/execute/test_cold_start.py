"""What a freshly forked worker pays for once, before its first exchange is as fast as its
later ones: modules loaded on first use, rings made at the first message to each peer, first
calls into pyarrow's kernels, collections that copy every page they walk. Each test names
one mechanism that moves such a cost out of the first exchange, and checks it without
timing anything (benchmarks/bench_coldstart.py times it)."""
import subprocess
import sys

import pytest

from sparktimely.comm import WorkerAddress
from sparktimely.comm.cluster import build_allocator
from sparktimely.shm import Mesh, segments


def run_python(code: str) -> str:
    """The output of ``code`` run by a new interpreter (modules loaded there from scratch)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.timeout(120)
def test_partitioning_arrow_batches_leaves_numpy_ma_unloaded():
    # pa.array(numpy array) imports numpy.ma (14 ms of a fresh worker's first exchange)
    out = run_python(
        "import sys, pyarrow as pa\n"
        "from sparktimely.dataflow.containers import partition_batch\n"
        "batch = pa.record_batch({'k': [f'w{i}' for i in range(100)], 'n': list(range(100))})\n"
        "parts = partition_batch(batch, 'k', None, 2) + partition_batch(batch, 'n', None, 12)\n"
        "assert sum(p.num_rows for p in parts) == 200\n"
        "print('numpy.ma' in sys.modules)")
    assert out == "False"


@pytest.mark.timeout(60)
def test_every_ring_of_a_worker_exists_before_its_first_message():
    plan = [WorkerAddress("localhost", 0, "here")] * 3
    with Mesh.create(3) as mesh:
        allocators = [build_allocator(i, plan, None, mesh) for i in range(3)]
        rings = sorted(path.rpartition("-r")[2] for path in segments(mesh.name + "-r"))
        assert rings == ["0-1-g0", "0-2-g0", "1-0-g0", "1-2-g0", "2-0-g0", "2-1-g0"]
        allocators[2].send(0, ("data", 1))                      # and they carry messages
        allocators[2].flush()
        assert allocators[0].receive() == [(2, ("data", 1))]
        for allocator in allocators:
            allocator.close()


@pytest.mark.timeout(120)
def test_modules_a_jobs_workers_loaded_are_loaded_before_the_next_jobs_workers_fork():
    out = run_python(
        "import sys, sparktimely as st\n"
        "def job(worker):\n"
        "    had = 'pyarrow.acero' in sys.modules\n"
        "    import pyarrow as pa\n"
        "    pa.table({'k': [1]}).group_by('k').aggregate([('k', 'count')])\n"
        "    return had\n"
        "first = st.execute(job, workers=2)\n"
        "between = 'pyarrow.acero' in sys.modules\n"
        "print(first, between, st.execute(job, workers=2))")
    # the first job's workers load it themselves; the program itself does not until the
    # next job's workers are about to be forked, and they have it from the start
    assert out == "[False, False] False [True, True]"


@pytest.mark.timeout(120)
def test_a_job_whose_workers_load_nothing_new_leaves_the_program_as_it_was():
    out = run_python(
        "import sys, sparktimely as st\n"
        "st.execute(lambda worker: worker.index, workers=2)\n"
        "before = set(sys.modules)\n"
        "for _ in range(2):\n"
        "    st.execute(lambda worker: worker.index, workers=2)\n"
        "import threading\n"
        "print(sorted(set(sys.modules) - before), threading.active_count())")
    assert out == "[] 1"


@pytest.mark.timeout(120)
def test_a_seat_warms_its_process_up_until_the_wait_is_over():
    out = run_python(
        "import sys, time, threading\n"
        "from sparktimely import _warm\n"
        "from sparktimely.execute import Seat\n"
        "assert 'pyarrow.acero' not in sys.modules\n"
        "seat = Seat('127.0.0.1')                 # the plan is still to come\n"
        "warming = [t.name for t in threading.enumerate() if t.name == 'sparktimely-warm-up']\n"
        "deadline = time.monotonic() + 30\n"
        "while 'pyarrow.acero' not in sys.modules and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "_warm.stop()                             # the plan is known\n"
        "seat.close()\n"
        "print(warming, 'numpy.ma' in sys.modules, 'pyarrow.acero' in sys.modules,\n"
        "      threading.active_count())")
    assert out == "['sparktimely-warm-up'] True True 1"


@pytest.mark.timeout(120)
def test_a_fork_during_the_warm_up_waits_for_its_step_and_ends_it():
    # a thread importing a module while the process forks would leave the child a module
    # lock no one releases: the fork waits for the step under way, and warming stops
    out = run_python(
        "import os, signal, threading\n"
        "from sparktimely import _warm\n"
        "_warm.start()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    signal.alarm(10)                     # rather than hang on a lock\n"
        "    import pyarrow.acero\n"
        "    os._exit(7)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print(os.waitstatus_to_exitcode(status), threading.active_count(), _warm._thread)")
    assert out == "7 1 None"


@pytest.mark.timeout(60)
def test_workers_never_collect_the_objects_their_process_had_before_the_fork():
    # a collection writes to each object it visits: in a forked worker, a copy of each page
    import gc
    import sparktimely as st
    before = gc.get_freeze_count()
    assert all(st.execute(lambda worker: gc.get_freeze_count() > before, workers=2))
    assert gc.get_freeze_count() == before                 # the process has them back


@pytest.mark.timeout(120)
def test_a_program_whose_workers_exchanged_arrow_rehearses_that_path_before_its_next_fork():
    out = run_python(
        "import pyarrow as pa, sparktimely as st\n"
        "from sparktimely import _warm\n"
        "def records(worker):\n"
        "    worker.dataflow(lambda s: s.to_stream(range(10)).exchange(lambda x: x).probe())\n"
        "def arrow(worker):\n"
        "    batch = pa.record_batch({'k': ['a', 'b', 'c'], 'n': [1, 2, 3]})\n"
        "    worker.dataflow(lambda s: s.to_stream([batch]).exchange(key='k').probe())\n"
        "seen = []\n"
        "for job in (records, records, arrow, records):\n"
        "    st.execute(job, workers=2)\n"
        "    seen.append(_warm._rehearsed)\n"
        "print(seen)")
    # exchanges of Python records teach nothing; after a job whose exchange sent Arrow
    # batches, the next job's fork is preceded by the rehearsal (and only then)
    assert out == "[False, False, False, True]"
