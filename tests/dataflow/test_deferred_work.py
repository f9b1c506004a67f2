"""Work a worker puts off until it has nothing else to do (``Worker.defer``): run once per
wait after ``idle_work_after`` seconds without work, in turns, never while the worker is
busy, in ``step_or_park``, ``step_while`` and ``run``."""
import gc
import time
import weakref

import pytest

import sparktimely as st


def counting_task(units: int, log: list, name: str):
    """A task with ``units`` units of work, logging ``name`` at each."""
    left = [units]

    def task() -> bool:
        log.append(name)
        left[0] -= 1
        return left[0] > 0
    return task


@pytest.mark.timeout(60)
def test_deferred_tasks_take_turns_once_per_wait_until_done():
    def job(worker):
        log: list = []
        worker.defer(counting_task(2, log, "a"))
        worker.defer(counting_task(3, log, "b"))
        deadline = time.monotonic() + 5
        while len(log) < 5 and time.monotonic() < deadline:
            worker.step_or_park(0.01)
        for _ in range(20):                        # nothing left: nothing more runs
            worker.step_or_park(0.001)
        return log
    assert st.execute_directly(job) == ["a", "b", "a", "b", "b"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_deferred_work_waits_while_the_worker_has_work_and_runs_once_it_is_idle(workers,
                                                                                 tmp_path):
    """While input arrives at every step, the worker is busy and the task waits; once
    nothing arrives for ``idle_work_after``, the next waits run it: in ``step_while``, and in
    ``run`` for the workers that wait there for worker 0, which closes its input only once
    each of them has run its task (a file says so)."""
    def job(worker):
        worker.idle_work_after = 1.0          # far more than any round takes, even on a busy host
        log: list = []
        input = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x)
                                .probe())
        worker.defer(counting_task(1, log, "merge"))
        for busy_round in range(1, 300):           # a new round at every step: never idle
            input.send(busy_round)
            input.advance_to(busy_round)
            worker.step_while(lambda: probe.less_than(busy_round))
        during = list(log)
        waited = time.monotonic()
        worker.step_while(lambda: not log and time.monotonic() - waited < 5)

        def in_run() -> bool:
            log.append("in run")
            (tmp_path / f"ran-{worker.index}").touch()
            return False
        if worker.index == 0:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and \
                    len(list(tmp_path.glob("ran-*"))) < worker.peers - 1:
                time.sleep(0.01)
        else:
            worker.defer(in_run)
        input.close()
        worker.run()
        return during, log
    for index, (during, log) in enumerate(st.execute(job, workers=workers)):
        assert during == [] and log == (["merge", "in run"] if index else ["merge"])


@pytest.mark.timeout(60)
def test_deferring_a_waiting_task_again_runs_it_once_per_wait():
    def job(worker):
        log: list = []
        task = counting_task(2, log, "t")
        worker.defer(task)
        worker.defer(task)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(log) < 2:
            worker.step_or_park(0.01)
        for _ in range(20):
            worker.step_or_park(0.001)
        return log
    assert st.execute_directly(job) == ["t", "t"]


class Trace:
    """Stands for a trace whose spine defers its merging: a bound method as the task."""

    def __init__(self, log: list) -> None:
        self.log = log

    def idle_work(self) -> bool:
        self.log.append("merge")
        return True                                 # always more: it would run forever


@pytest.mark.timeout(60)
def test_a_deferred_method_does_not_keep_its_object_alive():
    """A bound method is deferred by weak reference: deferring it twice is one task, and once
    its object is dropped (a dropped dataflow's trace) the worker neither keeps the object
    alive nor runs the task again."""
    def job(worker):
        log: list = []
        trace = Trace(log)
        worker.defer(trace.idle_work)
        worker.defer(counting_task(2, log, "other"))
        worker.defer(trace.idle_work)                    # the same task: a new bound method
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(log) < 5:
            worker.step_or_park(0.01)
        alive = weakref.ref(trace)
        del trace
        gc.collect()
        gone = alive() is None
        ran = list(log)
        for _ in range(20):
            worker.step_or_park(0.001)
        return gone, ran, len(log)
    gone, ran, after = st.execute_directly(job)
    assert gone and after == 5
    assert ran == ["merge", "other", "merge", "other", "merge"]
