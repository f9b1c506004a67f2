"""Random differential programs against a recomputation from scratch.

A test case is a mode and a seed. From them :func:`generate` draws a program: 2 to 6
operators of the mode's menu (:data:`RECORD_OPERATORS` for Python records,
:data:`ARROW_OPERATORS` for Arrow batches), applied one after another to input ``A``, some of
them reading input ``B`` too (a join, a shared arrangement, a trace of ``B`` arranged in a
first dataflow and imported into the program's). It also draws 3 to 6 rounds of updates of
``A`` and ``B``: inserts, retractions of what was inserted, retractions of what never was,
repeats, and few keys so that they collide. Records are ``(key, value)`` pairs of small ints;
Arrow rows have the int64 columns ``k``, ``v`` and ``diff``.

The program runs at 1, 2 and 3 workers (the ``run`` fixture: in-process workers in a seeded
interleaving; a few cases in worker processes too), each worker sending its share of every
round (Arrow rows in 1 to 3 batches). After each round the output accumulated so far
must equal :func:`expected`: the program applied, in plain Python on ``Counter`` multisets and
without sparktimely's code, to the inputs accumulated so far.

The Arrow modes differ in the number of updates a round has, so that batches fall on both
sides of the sizes where the Arrow operators change path (``SMALL_ROWS`` = 32 and ``TINY`` =
256 of arrow/batch.py, ``FEW_ROWS`` = 128 and ``SMALL_COUNT`` = 256 of arrow/reduce.py).

In every mode the cases of :data:`CASES` use every operator of the mode's menu
(``test_the_cases_use_every_operator`` keeps it so). To run more programs by hand,
``SPARKTIMELY_TEST_PROGRAMS=K`` adds K seeds drawn at random in every mode (the test ids show
them), and ``SPARKTIMELY_TEST_PROGRAM_SEED=N`` runs seed N alone in every mode.
"""
from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pytest

import sparktimely.differential as dd
from dd_harness import accumulate, accumulate_rounds, join_pairs, processes

Record = tuple[int, int]
Update = tuple[Record, int]

# -- the generator ----------------------------------------------------------------------------

RECORD_OPERATORS = (
    "map_shift", "map_swap", "filter", "flat_map", "negate", "concat", "consolidate", "join",
    "join_map", "semijoin", "antijoin", "reduce_min", "reduce_sum", "count", "count_keys",
    "distinct", "threshold", "shared_join_and_reduce", "iterate", "reachability",
    "imported_join", "imported_semijoin")
ARROW_OPERATORS = (
    "map_shift", "map_swap", "filter", "negate", "concat", "consolidate", "join", "semijoin",
    "antijoin", "count_keys", "count", "distinct", "reduce_sum", "reduce_min", "reduce_count",
    "shared_join_and_count", "imported_join", "iterate")
# Operators whose output can be larger than their input: the large modes take one at most.
MULTIPLYING = {"concat", "join", "shared_join_and_count", "imported_join"}


@dataclass(frozen=True)
class Mode:
    """How a mode draws its programs: the menu, the ranges of keys and values, the number of
    updates of each input per round, and whether a program may multiply rows more than once."""
    arrow: bool
    keys: int
    values: int
    updates_per_round: tuple[int, int]
    one_multiplying_operator: bool = False

    @property
    def menu(self) -> tuple[str, ...]:
        return ARROW_OPERATORS if self.arrow else RECORD_OPERATORS


MODES = {
    "records": Mode(arrow=False, keys=4, values=4, updates_per_round=(0, 7)),
    "arrow": Mode(arrow=True, keys=4, values=4, updates_per_round=(0, 7)),
    "arrow_mid": Mode(arrow=True, keys=30, values=5, updates_per_round=(20, 300)),
    "arrow_big": Mode(arrow=True, keys=200, values=6, updates_per_round=(500, 1200),
                      one_multiplying_operator=True),
}


@dataclass(frozen=True)
class Program:
    """A generated test case: ``operators`` applied in turn to input ``A``, and the updates
    ``rounds[input][round]`` of inputs ``"A"`` and ``"B"``."""
    mode: Mode
    operators: tuple[str, ...]
    rounds: dict[str, list[list[Update]]]
    batches_per_round: int

    @property
    def imports(self) -> bool:
        """Whether the program reads a trace of ``B`` from another dataflow."""
        return any(operator.startswith("imported_") for operator in self.operators)


def generate(seed: int, mode_name: str) -> Program:
    """The program and updates of ``seed`` in mode ``mode_name``."""
    rng = random.Random(f"{mode_name}:{seed}")
    mode = MODES[mode_name]
    operators: list[str] = []
    for _ in range(rng.randint(2, 6)):
        operator = rng.choice(mode.menu)
        if (mode.one_multiplying_operator and operator in MULTIPLYING
                and MULTIPLYING.intersection(operators)):
            operator = "distinct"
        operators.append(operator)
    round_count = rng.randint(3, 6)
    rounds: dict[str, list[list[Update]]] = {"A": [], "B": []}
    for per_round in rounds.values():
        history: list[Record] = []
        for _ in range(round_count):
            per_round.append(draw_updates(rng, mode, history))
    return Program(mode, tuple(operators), rounds, batches_per_round=rng.randint(1, 3))


def draw_updates(rng: random.Random, mode: Mode, history: list[Record]) -> list[Update]:
    """One round of updates of one input; ``history`` holds the records drawn before."""
    def any_record() -> Record:
        return rng.randrange(mode.keys), rng.randrange(mode.values)

    updates = []
    for _ in range(rng.randint(*mode.updates_per_round)):
        kind = rng.random()
        if kind < 0.25 and history:
            update = rng.choice(history), -1                     # retract an earlier record
        elif kind < 0.35:
            update = any_record(), -1                            # perhaps never inserted
        elif kind < 0.45 and history:
            update = rng.choice(history), rng.choice([1, 2])     # repeat an earlier record
        else:
            update = any_record(), rng.choice([1, 1, 1, 2, 3])
        history.append(update[0])
        updates.append(update)
    return updates


# -- record functions of the programs (used by the oracle and the Python-record path) ---------

def shift_key(record: Record) -> Record:
    key, value = record
    return (key + value) % 4, value


def swap(record: Record) -> Record:
    key, value = record
    return value % 3, key


def has_even_value(record: Record) -> bool:
    return record[1] % 2 == 0


def with_next_value(record: Record) -> list[Record]:
    key, value = record
    return [(key, value), (key, (value + 1) % 4)]


def joined_sum(joined: tuple[int, tuple[int, int]]) -> Record:
    key, (left, right) = joined
    return key, (left + right) % 5


def joined_product(key: int, left: int, right: int) -> Record:
    return key, left * right % 7


def incremented(record: Record) -> Record:
    key, value = record
    return key, min(value + 1, 4)


def thresholded(record: Record, count: int) -> int:
    return count % 3


# -- the oracle: the programs on {record: multiplicity} multisets ------------------------------

Multiset = Counter


def consolidated(c: Multiset) -> Multiset:
    return Counter({x: n for x, n in c.items() if n})


def mapped(c: Multiset, f: Callable[[Any], Any]) -> Multiset:
    out: Multiset = Counter()
    for x, n in c.items():
        out[f(x)] += n
    return consolidated(out)


def flat_mapped(c: Multiset, f: Callable[[Any], list]) -> Multiset:
    out: Multiset = Counter()
    for x, n in c.items():
        for y in f(x):
            out[y] += n
    return consolidated(out)


def added(a: Multiset, b: Multiset) -> Multiset:
    out = Counter(a)
    for x, n in b.items():
        out[x] += n
    return consolidated(out)


def negated(c: Multiset) -> Multiset:
    return Counter({x: -n for x, n in c.items()})


def joined(a: Multiset, b: Multiset) -> Multiset:
    """``(key, (value of a, value of b))`` for every pair of records with the same key."""
    return consolidated(Counter(join_pairs(a, b)))


def keys_of(c: Multiset) -> Multiset:
    return mapped(c, lambda record: record[0])


def semijoined(c: Multiset, keys: Multiset) -> Multiset:
    """The records of ``c`` whose key is in ``keys``, times the key's multiplicity."""
    return consolidated(Counter({(key, value): n * keys[key]
                                 for (key, value), n in c.items() if key in keys}))


def distinct(c: Multiset) -> Multiset:
    return Counter({x: 1 for x, n in c.items() if n > 0})


def counted(c: Multiset) -> Multiset:
    """``(record, multiplicity)`` once for every record present, even negatively."""
    return Counter({(x, n): 1 for x, n in c.items() if n})


def reduced(c: Multiset, aggregate: Callable[[list[tuple[int, int]]], int]) -> Multiset:
    """``(key, aggregate(values))`` of every key, over its ``(value, multiplicity)`` pairs
    of positive multiplicity."""
    groups: dict[int, list[tuple[int, int]]] = {}
    for (key, value), n in c.items():
        if n > 0:
            groups.setdefault(key, []).append((value, n))
    return Counter({(key, aggregate(values)): 1 for key, values in groups.items()})


ORACLE_ROUNDS = 10_000
"""How many rounds the oracle's fixed points may take: ``iterated`` climbs one step a round
from the least value to 4, and the values made by earlier steps reach below -100."""


def fixed_point(c: Multiset, step: Callable[[Multiset], Multiset]) -> Multiset:
    for _ in range(ORACLE_ROUNDS):
        following = step(c)
        if following == c:
            return c
        c = following
    raise AssertionError(f"the oracle found no fixed point in {ORACLE_ROUNDS} rounds")


def iterated(c: Multiset) -> Multiset:
    """The fixed point of ``x -> distinct(incremented(x) + c)``."""
    return fixed_point(c, lambda x: distinct(added(mapped(x, incremented), c)))


def reachable(c: Multiset, b: Multiset) -> Multiset:
    """``(root, node)`` for every ``(root, start)`` present in ``c`` and every node reachable
    from ``start`` over the edges ``(from, to)`` present in ``b``."""
    roots, edges = distinct(c), distinct(b)

    def step(x: Multiset) -> Multiset:
        onward = joined(mapped(x, lambda record: (record[1], record[0])), edges)
        return distinct(added(mapped(onward, lambda hop: hop[1]), roots))
    return fixed_point(roots, step)


def smallest(values: list[tuple[int, int]]) -> int:
    return min(value for value, _ in values)


def total(values: list[tuple[int, int]]) -> int:
    return sum(value * n for value, n in values)


def how_many(values: list[tuple[int, int]]) -> int:
    return sum(n for _, n in values)


ORACLE: dict[str, Callable[[Multiset, Multiset], Multiset]] = {
    "map_shift": lambda c, b: mapped(c, shift_key),
    "map_swap": lambda c, b: mapped(c, swap),
    "filter": lambda c, b: Counter({x: n for x, n in c.items() if has_even_value(x)}),
    "flat_map": lambda c, b: flat_mapped(c, with_next_value),
    "negate": lambda c, b: negated(c),
    "concat": lambda c, b: added(c, mapped(c, shift_key)),
    "consolidate": lambda c, b: consolidated(c),
    "join": lambda c, b: mapped(joined(c, b), joined_sum),
    "join_map": lambda c, b: mapped(joined(c, b), lambda j: joined_product(j[0], *j[1])),
    "semijoin": lambda c, b: semijoined(c, keys_of(b)),
    "antijoin": lambda c, b: added(c, negated(semijoined(c, distinct(keys_of(b))))),
    "reduce_min": lambda c, b: reduced(c, smallest),
    "reduce_sum": lambda c, b: reduced(c, total),
    "reduce_count": lambda c, b: reduced(c, how_many),
    "count": lambda c, b: mapped(counted(c), lambda record_count: (record_count[0][0],
                                                                   record_count[1])),
    "count_keys": lambda c, b: counted(keys_of(c)),
    "distinct": lambda c, b: distinct(c),
    "threshold": lambda c, b: consolidated(Counter({x: thresholded(x, n) for x, n in c.items()
                                                    if n})),
    "shared_join_and_reduce": lambda c, b: added(mapped(joined(c, b), joined_sum),
                                                 reduced(c, smallest)),
    "shared_join_and_count": lambda c, b: added(mapped(joined(c, b), joined_sum),
                                                counted(keys_of(c))),
    "iterate": lambda c, b: iterated(c),
    "reachability": reachable,
    "imported_join": lambda c, b: mapped(joined(c, b), joined_sum),
    "imported_semijoin": lambda c, b: semijoined(b, keys_of(c)),
}


def expected(program: Program, a: Multiset, b: Multiset) -> Multiset:
    """The output of ``program`` on inputs whose accumulated contents are ``a`` and ``b``."""
    c, b = consolidated(a), consolidated(b)
    for operator in program.operators:
        c = ORACLE[operator](c, b)
    return consolidated(c)


# -- the programs as dataflows: a builder per operator takes the collection so far, B, and
# a function giving the trace of B imported into the program's scope --------------------------

Imported = Callable[[], Any]
Builder = Callable[[dd.Collection, dd.Collection, Imported], dd.Collection]


# Python records


def reduce_to_min(key: int, values: list, output: list) -> None:
    output.append((values[0][0], 1))


def reduce_to_sum(key: int, values: list, output: list) -> None:
    output.append((sum(value * n for value, n in values), 1))


def iterate_records(c: dd.Collection) -> dd.Collection:
    return c.iterate(lambda x: x.map(incremented).concat(c.enter(x.scope)).distinct())


def reachability_of_records(c: dd.Collection, b: dd.Collection) -> dd.Collection:
    """Starts from the records present: from negative multiplicities, a loop through a cycle
    of edges could switch a record on and off for ever, and the iteration never end."""
    roots, edges = c.distinct(), b.distinct()
    return roots.iterate(lambda x: x.map(lambda record: (record[1], record[0]))
                         .join(edges.enter(x.scope)).map(lambda hop: hop[1])
                         .concat(roots.enter(x.scope)).distinct())


def shared_join_and_reduce(c: dd.Collection, b: dd.Collection) -> dd.Collection:
    arranged = c.arrange_by_key()
    return arranged.join(b.arrange_by_key()).map(joined_sum).concat(
        arranged.reduce(reduce_to_min))


RECORD_BUILDERS: dict[str, Builder] = {
    "map_shift": lambda c, b, imported: c.map(shift_key),
    "map_swap": lambda c, b, imported: c.map(swap),
    "filter": lambda c, b, imported: c.filter(has_even_value),
    "flat_map": lambda c, b, imported: c.flat_map(with_next_value),
    "negate": lambda c, b, imported: c.negate(),
    "concat": lambda c, b, imported: c.concat(c.map(shift_key)),
    "consolidate": lambda c, b, imported: c.consolidate(),
    "join": lambda c, b, imported: c.join(b).map(joined_sum),
    "join_map": lambda c, b, imported: c.join_map(b, joined_product),
    "semijoin": lambda c, b, imported: c.semijoin(b.map(lambda record: record[0])),
    "antijoin": lambda c, b, imported: c.antijoin(b.map(lambda record: record[0]).distinct()),
    "reduce_min": lambda c, b, imported: c.reduce(reduce_to_min),
    "reduce_sum": lambda c, b, imported: c.reduce(reduce_to_sum),
    "count": lambda c, b, imported: c.count().map(
        lambda record_count: (record_count[0][0], record_count[1])),
    "count_keys": lambda c, b, imported: c.map(lambda record: record[0]).count(),
    "distinct": lambda c, b, imported: c.distinct(),
    "threshold": lambda c, b, imported: c.threshold(thresholded),
    "shared_join_and_reduce": lambda c, b, imported: shared_join_and_reduce(c, b),
    "iterate": lambda c, b, imported: iterate_records(c),
    "reachability": lambda c, b, imported: reachability_of_records(c, b),
    "imported_join": lambda c, b, imported: c.arrange_by_key().join(imported()).map(joined_sum),
    "imported_semijoin": lambda c, b, imported: imported().semijoin(
        c.map(lambda record: record[0])),
}


# Arrow batches

def kv_batch(keys: Any, values: Any, diffs: Any) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(keys, pa.int64()), pa.array(values, pa.int64()),
                                       pa.array(diffs, pa.int64())], names=["k", "v", "diff"])


def column(batch: pa.RecordBatch, name: str) -> np.ndarray:
    return batch.column(name).to_numpy()


def shift_key_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    keys, values = column(batch, "k"), column(batch, "v")
    return kv_batch(np.mod(keys + values, 4), values, column(batch, "diff"))


def swap_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    return kv_batch(np.mod(column(batch, "v"), 3), column(batch, "k"), column(batch, "diff"))


def even_values(batch: pa.RecordBatch) -> pa.Array:
    return pa.array(np.mod(column(batch, "v"), 2) == 0)


def joined_sum_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    total = column(batch, "v") + column(batch, "v_right")
    return kv_batch(column(batch, "k"), np.mod(total, 5), column(batch, "diff"))


def keys_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([batch.column("k"), batch.column("diff")],
                                      names=["k", "diff"])


def count_as_value(batch: pa.RecordBatch) -> pa.RecordBatch:
    return kv_batch(column(batch, "k"), column(batch, "count"), column(batch, "diff"))


def incremented_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    return kv_batch(column(batch, "k"), np.minimum(column(batch, "v") + 1, 4),
                    column(batch, "diff"))


def iterate_batches(c: dd.Collection) -> dd.Collection:
    return c.iterate(lambda x: x.map_batches(incremented_batch).concat(c.enter(x.scope))
                     .distinct())


def shared_join_and_count(c: dd.Collection, b: dd.Collection) -> dd.Collection:
    arranged = c.arrange_by_key(key="k")
    return arranged.join(b.arrange_by_key(key="k")).map_batches(joined_sum_batch).concat(
        arranged.count().map_batches(count_as_value))


ARROW_BUILDERS: dict[str, Builder] = {
    "map_shift": lambda c, b, imported: c.map_batches(shift_key_batch),
    "map_swap": lambda c, b, imported: c.map_batches(swap_batch),
    "filter": lambda c, b, imported: c.filter_batches(even_values),
    "negate": lambda c, b, imported: c.negate(),
    "concat": lambda c, b, imported: c.concat(c.map_batches(shift_key_batch)),
    "consolidate": lambda c, b, imported: c.consolidate(),
    "join": lambda c, b, imported: c.join(b, on="k").map_batches(joined_sum_batch),
    "semijoin": lambda c, b, imported: c.semijoin(b.map_batches(keys_batch), on="k"),
    "antijoin": lambda c, b, imported: c.antijoin(b.map_batches(keys_batch).distinct(), on="k"),
    "count_keys": lambda c, b, imported: c.count(key="k").map_batches(count_as_value),
    "count": lambda c, b, imported: c.count().map_batches(count_as_value),
    "distinct": lambda c, b, imported: c.distinct(),
    "reduce_sum": lambda c, b, imported: c.reduce(key="k", aggs={"v": ("sum", "v")}),
    "reduce_min": lambda c, b, imported: c.reduce(key="k", aggs={"v": ("min", "v")}),
    "reduce_count": lambda c, b, imported: c.reduce(key="k", aggs={"v": ("count", None)}),
    "shared_join_and_count": lambda c, b, imported: shared_join_and_count(c, b),
    "imported_join": lambda c, b, imported: c.arrange_by_key(key="k").join(imported())
    .map_batches(joined_sum_batch),
    "iterate": lambda c, b, imported: iterate_batches(c),
}


# -- running a program -------------------------------------------------------------------------

def send(session: dd.InputSession, updates: list[Update], program: Program) -> None:
    """Send a worker's share of a round: one update at a time, or Arrow rows in
    ``program.batches_per_round`` batches."""
    if not program.mode.arrow:
        for record, diff in updates:
            session.update(record, diff)
        return
    parts = program.batches_per_round
    cuts = [len(updates) * i // parts for i in range(parts + 1)]
    for start, end in zip(cuts, cuts[1:]):
        if end > start:
            part = updates[start:end]
            session.update_batch(kv_batch([record[0] for record, _ in part],
                                          [record[1] for record, _ in part],
                                          [diff for _, diff in part]))


def output_updates(program: Program, time: int, batch: Any) -> list[tuple[Record, int, int]]:
    """A captured batch of the program's output as ``(record, time, diff)`` updates."""
    if not program.mode.arrow:
        return batch
    rows = batch.to_pydict()
    return [((k, v), time, diff) for k, v, diff in zip(rows["k"], rows["v"], rows["diff"])]


def run_program(program: Program, run: Callable) -> list[tuple[Record, int, int]]:
    """The output updates of ``program`` over all workers of ``run``."""
    arrange = ((lambda c: c.arrange_by_key(key="k")) if program.mode.arrow
               else (lambda c: c.arrange_by_key()))
    builders = ARROW_BUILDERS if program.mode.arrow else RECORD_BUILDERS
    round_count = len(program.rounds["A"])

    def job(worker):
        a, b, b_to_import = (dd.InputSession(name) for name in ("A", "B", "B to import"))
        sessions = [(a, "A"), (b, "B")]
        trace: Any = None
        if program.imports:
            sessions.append((b_to_import, "B"))
            trace = worker.dataflow(
                lambda scope: arrange(b_to_import.to_collection(scope)).trace)

        def build(scope):
            c, b_collection = a.to_collection(scope), b.to_collection(scope)
            for operator in program.operators:
                c = builders[operator](c, b_collection, lambda: trace.import_(scope))
            return c.inner.capture(), c.probe()
        captured, probe = worker.dataflow(build)
        for r in range(round_count):
            for session, name in sessions:
                updates = program.rounds[name][r]
                send(session, [u for i, u in enumerate(updates)
                               if i % worker.peers == worker.index], program)
                session.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(r + 1))
        for session in (a, b, b_to_import):
            session.close()
        if trace is not None:
            trace.close()
        worker.step_while(lambda: not probe.done())
        return [u for time, batch in captured.extract()
                for u in output_updates(program, time, batch)]
    return [u for part in run(job) for u in part]


def check_program(program: Program, run: Callable) -> None:
    """Assert that the output of ``program`` accumulated to each round is :func:`expected`."""
    output = run_program(program, run)
    round_count = len(program.rounds["A"])
    for r in range(round_count):
        a, b = (Counter(accumulate_rounds(program.rounds[name], r)) for name in "AB")
        want = expected(program, a, b)
        got = Counter(accumulate(output, r))
        if got != want:
            wrong = {x: (got[x], want[x]) for x in set(got) | set(want) if got[x] != want[x]}
            shown = dict(sorted(wrong.items(), key=str)[:8])
            workers = getattr(run, "workers", "?")
            pytest.fail(f"{program.operators} at {workers} worker(s), round {r}: "
                        f"{len(wrong)} records wrong, e.g. (got, expected) {shown}")
    assert all(time < round_count for _, time, _ in output), "an update after the last round"


# -- the tests ---------------------------------------------------------------------------------

# In every mode, seeds 0 to 39 use every operator of the mode's menu between them (0 to 24
# do already); the first few run in worker processes as well.
CASES = [(mode, seed) for mode in MODES for seed in range(40)]
PROCESS_CASES = [(mode, seed) for mode in MODES for seed in range(3)]


def cases_to_run() -> list[tuple[str, int]]:
    """:data:`CASES`, or seed ``SPARKTIMELY_TEST_PROGRAM_SEED`` alone in every mode, and
    ``SPARKTIMELY_TEST_PROGRAMS`` seeds drawn at random in every mode."""
    replay = os.environ.get("SPARKTIMELY_TEST_PROGRAM_SEED")
    if replay is not None:
        return [(mode, int(replay)) for mode in MODES]
    draw = random.SystemRandom()
    extra = [(mode, draw.randrange(10**6)) for _ in
             range(int(os.environ.get("SPARKTIMELY_TEST_PROGRAMS", "0"))) for mode in MODES]
    return CASES + extra


CASES_TO_RUN = cases_to_run()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode, seed", CASES_TO_RUN,
                         ids=[f"{mode}-{seed}" for mode, seed in CASES_TO_RUN])
def test_a_random_program_matches_its_recomputation(mode, seed, run):
    check_program(generate(seed, mode), run)


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode, seed", PROCESS_CASES,
                         ids=[f"{mode}-{seed}" for mode, seed in PROCESS_CASES])
def test_a_random_program_in_worker_processes(mode, seed, workers):
    """The same in worker processes (``st.execute``), where Arrow batches between workers
    pass through shared memory."""
    check_program(generate(seed, mode), processes(workers))


def test_the_cases_use_every_operator():
    """Every operator of a menu has an oracle and a builder, and the cases of every mode use
    every operator of its menu, so that a change to the generator cannot drop one unseen."""
    assert set(RECORD_OPERATORS) == set(RECORD_BUILDERS)
    assert set(ARROW_OPERATORS) == set(ARROW_BUILDERS)
    assert set(RECORD_OPERATORS) | set(ARROW_OPERATORS) == set(ORACLE)
    for mode_name, mode in MODES.items():
        used = {operator for case_mode, seed in CASES if case_mode == mode_name
                for operator in generate(seed, mode_name).operators}
        assert set(mode.menu) - used == set(), f"no {mode_name} case uses {set(mode.menu) - used}"
