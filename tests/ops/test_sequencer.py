"""Sequencer: every worker sees every pushed element, all in one order."""
from __future__ import annotations

import threading

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


def test_push_after_close_is_an_error_naming_the_sequencer_and_worker():
    def job(worker):
        sequencer = st.Sequencer(worker, name="orders")
        sequencer.close()
        with pytest.raises(RuntimeError, match="^Sequencer 'orders' on worker 0 cannot take "
                                               "element 1: it was closed$"):
            sequencer.push(1)
        return True
    assert st.execute_directly(job)


@pytest.mark.parametrize("workers", WORKERS)
def test_an_unpicklable_element_is_refused_at_the_push_and_loses_nothing(workers):
    def job(worker):
        sequencer = st.Sequencer(worker, name="Plan")
        sequencer.push(("before", worker.index))
        refused = []
        for element in (lambda: 1, threading.Lock(), (i for i in range(3)),
                        ["x" * 200, lambda: 2]):            # a long one, its repr cut short
            with pytest.raises(TypeError) as error:
                sequencer.push(element)
            refused.append(str(error.value))
        assert sequencer._pushed == 1                      # refused elements are not counted
        for i in range(3):
            sequencer.push(("after", worker.index, i))
        sequencer.close()
        worker.run()
        return refused, list(sequencer)
    results = st.execute(job, workers=workers)
    for w, (refused, _) in enumerate(results):
        for message, why in zip(refused, ["Can't pickle local object", "cannot pickle "
                                          "'_thread.lock' object", "cannot pickle 'generator' "
                                          "object", "Can't pickle local object"]):
            assert message.startswith(f"Sequencer 'Plan' on worker {w} cannot take element ")
            assert f"it cannot be pickled ({why}" in message
            assert message.endswith("elements must be picklable because every worker gets "
                                    "each one")
        assert "<function " in refused[0] and "<lambda>" in refused[0]
        assert "x" * 200 not in refused[3] and "..." in refused[3]    # a long repr is cut
    sequences = [sequence for _, sequence in results]
    assert sorted(sequences[0]) == sorted([("before", w) for w in range(workers)]
                                          + [("after", w, i) for w in range(workers)
                                             for i in range(3)])
    assert all(sequence == sequences[0] for sequence in sequences)   # one order everywhere
    for w in range(workers):                                # each worker's pushes keep order
        mine = [x for x in sequences[0] if x[1] == w]
        assert mine == [("before", w)] + [("after", w, i) for i in range(3)]
