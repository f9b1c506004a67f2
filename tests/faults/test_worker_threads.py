"""A non-daemon thread left running by user code in a worker does not
delay the end of the job; a warning names it."""
from __future__ import annotations

import threading
import time

import pytest

import sparktimely as st

pytestmark = pytest.mark.timeout(60)


def job_leaving_a_thread(worker):
    threading.Thread(target=time.sleep, args=(30,), name=f"forgotten-{worker.index}").start()
    captured = worker.dataflow(lambda scope: scope.to_stream(range(10))
                               .exchange(lambda x: x).count().capture())
    worker.run()
    return captured.extract()


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_forgotten_thread_is_named_and_does_not_hold_the_job(workers):
    started = time.monotonic()
    with pytest.warns(RuntimeWarning) as warned:
        results = st.execute(job_leaving_a_thread, workers=workers)
    elapsed = time.monotonic() - started
    assert sum(n for part in results for _, counts in part for n in counts) == 10 * workers
    messages = sorted(str(w.message) for w in warned if "non-daemon" in str(w.message))
    assert len(messages) == workers, [str(w.message) for w in warned]
    for index, message in enumerate(messages):
        assert message.startswith(f"worker {index} finished with non-daemon thread(s) still "
                                  f"running: <Thread(forgotten-{index}, started ")
    assert elapsed < 5, f"the job took {elapsed:.1f} s to end"
