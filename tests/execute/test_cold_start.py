"""What a freshly forked worker pays for once, before its first exchange is as fast as its
later ones: modules loaded on first use, rings made and faulted in, first calls into
pyarrow's kernels. Each test names one mechanism that moves such a cost out of the first
exchange, and checks it without timing anything."""
import subprocess
import sys

import pytest


def run_python(code: str) -> str:
    """The output of ``code`` run by a new interpreter (modules loaded there from scratch)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
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
