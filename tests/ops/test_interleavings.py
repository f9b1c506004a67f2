"""The new operators under many interleavings of 1-3 workers (``execute_in_process`` with
seeds): the Sequencer's common order, replay at another worker count, rate-controlled output."""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest

import sparktimely as st
from sparktimely.dataflow.ports import BATCH_SIZE
from sparktimely.testing import consolidate, execute_in_process

from ops_matrix import WORKERS

SEEDS = range(8)


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("seed", SEEDS)
def test_sequencer_order_is_common_in_every_interleaving(workers, seed):
    def job(worker):
        sequencer = st.Sequencer(worker)
        seen = []
        for round in range(4):
            for i in range(worker.index + round):
                sequencer.push((worker.index, round, i))
            worker.step()
            seen.extend(sequencer)
        sequencer.close()
        worker.run()
        return seen + list(sequencer)
    results = execute_in_process(job, workers, seed=seed)
    assert all(seen == results[0] for seen in results)
    assert sorted(results[0]) == sorted((w, r, i) for w in range(workers) for r in range(4)
                                        for i in range(w + r))


@pytest.mark.parametrize("capture_workers, replay_workers", [(1, 3), (3, 2), (2, 2)])
@pytest.mark.parametrize("seed", SEEDS)
def test_replay_in_every_interleaving(capture_workers, replay_workers, seed):
    directory = tempfile.mkdtemp()
    try:
        paths = [os.path.join(directory, f"log-{i}") for i in range(capture_workers)]

        def capture(worker):
            handle = st.InputHandle()
            worker.dataflow(lambda scope: scope.input_from(handle).delay(lambda x, t: t + x % 3)
                            .capture_into(st.EventWriter(paths[worker.index])))
            for time in range(4):
                handle.send_batch(list(range(worker.index, 20, worker.peers)))
                handle.advance_to(time + 1)
            handle.close()

        def replay(worker):
            mine = [st.EventReader(p) for i, p in enumerate(paths)
                    if i % worker.peers == worker.index]
            counts = worker.dataflow(lambda scope: st.replay_into(mine, scope).count().capture())
            worker.run()
            return counts.extract()
        execute_in_process(capture, capture_workers, seed=seed)
        got = {t: sum(c) for t, c in consolidate(execute_in_process(replay, replay_workers,
                                                                    seed=seed))}
        expected: dict = {}
        for time in range(4):
            for x in range(20):
                expected[time + x % 3] = expected.get(time + x % 3, 0) + 1
        assert got == expected
    finally:
        shutil.rmtree(directory)


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("seed", SEEDS)
def test_rate_controlled_flat_map_in_every_interleaving(workers, seed):
    def job(worker):
        input = st.InputHandle()
        counts = worker.dataflow(lambda scope: scope.input_from(input).flat_map(
            lambda n: range(n)).exchange(lambda x: x).count().capture())
        for time in range(3):
            input.send(5 * BATCH_SIZE + time)
            input.advance_to(time + 1)
        input.close()
        worker.run()
        return counts.extract()
    got = {t: sum(c) for t, c in consolidate(execute_in_process(job, workers, seed=seed))}
    assert got == {t: workers * (5 * BATCH_SIZE + t) for t in range(3)}
