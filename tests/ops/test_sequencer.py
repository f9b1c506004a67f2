"""Sequencer: every worker sees every pushed element, all in one order."""
from __future__ import annotations

import pytest

import sparktimely as st

from ops_matrix import WORKERS


@pytest.mark.parametrize("workers", WORKERS)
def test_every_worker_sees_every_element_in_the_same_order(workers):
    def job(worker):
        sequencer = st.Sequencer(worker)
        seen = []
        for round in range(5):
            for i in range(worker.index + round):          # uneven contributions
                sequencer.push((worker.index, round, i))
            for _ in range(3):
                worker.step()
                seen.extend(sequencer)
        sequencer.close()
        worker.run()
        seen.extend(sequencer)
        return seen
    results = st.execute(job, workers=workers)
    expected = sorted((w, r, i) for w in range(workers) for r in range(5) for i in range(w + r))
    assert sorted(results[0]) == expected
    assert all(seen == results[0] for seen in results)     # one order everywhere
    for w in range(workers):                               # each worker's pushes keep their order
        mine = [x for x in results[0] if x[0] == w]
        assert mine == sorted(mine)


@pytest.mark.parametrize("workers", WORKERS)
def test_next_returns_none_until_an_element_is_ready(workers):
    def job(worker):
        sequencer = st.Sequencer(worker)
        assert sequencer.next() is None
        if worker.index == 0:
            sequencer.push("only")
        worker.step_while(lambda: not sequencer._ready)
        first = sequencer.next()
        sequencer.close()
        worker.run()
        return first, sequencer.next()
    assert st.execute(job, workers=workers) == [("only", None)] * workers


def test_push_after_close_is_an_error():
    def job(worker):
        sequencer = st.Sequencer(worker)
        sequencer.close()
        with pytest.raises(RuntimeError, match="closed Sequencer"):
            sequencer.push(1)
        return True
    assert st.execute_directly(job)
